"""A small conv net: two conv/BatchNorm/ReLU/max-pool stages and a
classifier. Big enough to show op families, fused chains and storage reuse
in a picture, small enough to read (the pictures of docs/cli.md are of it:
``symgraph zoo convnet -o convnet.json``). Parameters at 3x32x32 and 10
classes: 25,674.
"""
from __future__ import annotations

from .. import symbol as sym


def get_symbol(num_classes: int = 10, image_shape=(3, 32, 32),
               filters=(16, 32)) -> sym.Symbol:
    """``conv{i}``/``bn{i}``/``relu{i}``/``pool{i}`` per stage (3x3 convolutions,
    2x2 max pooling), ``flatten``, ``fc`` and a ``SoftmaxOutput`` named
    ``softmax``; any image shape whose sides survive the poolings works."""
    x = sym.Variable("data")
    for i, width in enumerate(filters, start=1):
        x = sym.Convolution(data=x, kernel=(3, 3), pad=(1, 1), num_filter=int(width),
                            name=f"conv{i}")
        x = sym.BatchNorm(data=x, name=f"bn{i}")
        x = sym.Activation(data=x, act_type="relu", name=f"relu{i}")
        x = sym.Pooling(data=x, kernel=(2, 2), stride=(2, 2), pool_type="max", name=f"pool{i}")
    x = sym.Flatten(data=x, name="flatten")
    x = sym.FullyConnected(data=x, num_hidden=num_classes, name="fc")
    return sym.SoftmaxOutput(data=x, name="softmax")
