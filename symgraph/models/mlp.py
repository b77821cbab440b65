"""A multilayer perceptron, MXNet's classic MNIST example (``fc1``-``fc3``).

128 and 64 hidden units with ReLU by default; the input is flattened, so any
image shape works. Parameters at 1x28x28 and 10 classes: 109,386.
"""
from __future__ import annotations

from .. import symbol as sym


def get_symbol(num_classes: int = 10, image_shape=(1, 28, 28),
               hidden=(128, 64)) -> sym.Symbol:
    """``Flatten`` then ``fc{i}``/``relu{i}`` per hidden layer, then the class
    scores and a ``SoftmaxOutput`` named ``softmax``."""
    x = sym.Flatten(data=sym.Variable("data"))
    for i, width in enumerate(hidden, start=1):
        x = sym.FullyConnected(data=x, num_hidden=int(width), name=f"fc{i}")
        x = sym.Activation(data=x, act_type="relu", name=f"relu{i}")
    x = sym.FullyConnected(data=x, num_hidden=num_classes, name=f"fc{len(hidden) + 1}")
    return sym.SoftmaxOutput(data=x, name="softmax")
