"""AlexNet (Krizhevsky, Sutskever and Hinton, 2012), single tower.

The layer structure and the node names follow MXNet's
``example/image-classification/symbols/alexnet.py``: no convolution groups
(one GPU tower), LRN after the first two pooling layers, and automatic node
names (``convolution0``, ``fullyconnected2`` ...), so the parameters are
named as in MXNet's own checkpoints.

Parameter count (weights and biases): 50,844,008 at 3x224x224 (the last
pooling layer gives 5x5), 62,378,344 at 3x227x227 (6x6, the figure usually
published for the single-tower AlexNet).
"""
from __future__ import annotations

from .. import symbol as sym


def get_symbol(num_classes: int = 1000, image_shape=(3, 224, 224)) -> sym.Symbol:
    """AlexNet ending in ``SoftmaxOutput`` named ``softmax``."""
    data = sym.Variable("data")
    # stage 1
    x = sym.Convolution(data=data, kernel=(11, 11), stride=(4, 4), num_filter=96)
    x = sym.Activation(data=x, act_type="relu")
    x = sym.Pooling(data=x, pool_type="max", kernel=(3, 3), stride=(2, 2))
    x = sym.LRN(data=x, alpha=0.0001, beta=0.75, knorm=1, nsize=5)
    # stage 2
    x = sym.Convolution(data=x, kernel=(5, 5), pad=(2, 2), num_filter=256)
    x = sym.Activation(data=x, act_type="relu")
    x = sym.Pooling(data=x, pool_type="max", kernel=(3, 3), stride=(2, 2))
    x = sym.LRN(data=x, alpha=0.0001, beta=0.75, knorm=1, nsize=5)
    # stage 3
    for filters in (384, 384, 256):
        x = sym.Convolution(data=x, kernel=(3, 3), pad=(1, 1), num_filter=filters)
        x = sym.Activation(data=x, act_type="relu")
    x = sym.Pooling(data=x, pool_type="max", kernel=(3, 3), stride=(2, 2))
    # classifier
    x = sym.Flatten(data=x)
    for _ in range(2):
        x = sym.FullyConnected(data=x, num_hidden=4096)
        x = sym.Activation(data=x, act_type="relu")
        x = sym.Dropout(data=x, p=0.5)
    x = sym.FullyConnected(data=x, num_hidden=num_classes)
    return sym.SoftmaxOutput(data=x, name="softmax")
