"""GoogLeNet, Inception v1 (Szegedy et al., 2014), without the auxiliary heads.

Names follow MXNet's ``example/image-classification/symbols/googlenet.py``
(``conv_{name}``/``relu_{name}``, ``ch_concat_{name}_chconcat``, unnamed
pooling and ``fullyconnected0``). One deliberate difference: the four
stride-2 max-pooling layers round up (``pooling_convention='full'``, as the
paper's Caffe model does). With MXNet's default rounding the feature map is
6x6 before the final 7x7 average pool and MXNet's own file fails shape
inference at 224x224 ("kernel size (7) exceeds input (6 padded to 6)").

Parameter count (weights and biases), 1000 classes: 6,998,552.
"""
from __future__ import annotations

from .. import symbol as sym


def conv_factory(data, num_filter, kernel, stride=(1, 1), pad=(0, 0), name=None, suffix=""):
    """Convolution + ReLU named ``conv_{name}{suffix}`` / ``relu_{name}{suffix}``."""
    x = sym.Convolution(data=data, num_filter=num_filter, kernel=kernel, stride=stride, pad=pad,
                        name=f"conv_{name}{suffix}")
    return sym.Activation(data=x, act_type="relu", name=f"relu_{name}{suffix}")


def inception_factory(data, num_1x1, num_3x3red, num_3x3, num_d5x5red, num_d5x5, pool, proj,
                      name):
    """Four towers (1x1; 1x1->3x3; 1x1->5x5; pool->1x1) concatenated on channels."""
    c1x1 = conv_factory(data, num_1x1, (1, 1), name=f"{name}_1x1")
    c3x3r = conv_factory(data, num_3x3red, (1, 1), name=f"{name}_3x3", suffix="_reduce")
    c3x3 = conv_factory(c3x3r, num_3x3, (3, 3), pad=(1, 1), name=f"{name}_3x3")
    cd5x5r = conv_factory(data, num_d5x5red, (1, 1), name=f"{name}_5x5", suffix="_reduce")
    cd5x5 = conv_factory(cd5x5r, num_d5x5, (5, 5), pad=(2, 2), name=f"{name}_5x5")
    pooling = sym.Pooling(data=data, kernel=(3, 3), stride=(1, 1), pad=(1, 1), pool_type=pool,
                          name=f"{pool}_pool_{name}_pool")
    cproj = conv_factory(pooling, proj, (1, 1), name=f"{name}_proj")
    return sym.Concat(c1x1, c3x3, cd5x5, cproj, name=f"ch_concat_{name}_chconcat")


def _downsample(x):
    return sym.Pooling(data=x, kernel=(3, 3), stride=(2, 2), pool_type="max",
                       pooling_convention="full")


def get_symbol(num_classes: int = 1000, image_shape=(3, 224, 224)) -> sym.Symbol:
    """GoogLeNet ending in ``SoftmaxOutput`` named ``softmax``."""
    data = sym.Variable("data")
    x = conv_factory(data, 64, (7, 7), stride=(2, 2), pad=(3, 3), name="conv1")
    x = _downsample(x)
    x = conv_factory(x, 64, (1, 1), name="conv2")
    x = conv_factory(x, 192, (3, 3), pad=(1, 1), name="conv3")
    x = _downsample(x)
    x = inception_factory(x, 64, 96, 128, 16, 32, "max", 32, name="in3a")
    x = inception_factory(x, 128, 128, 192, 32, 96, "max", 64, name="in3b")
    x = _downsample(x)
    x = inception_factory(x, 192, 96, 208, 16, 48, "max", 64, name="in4a")
    x = inception_factory(x, 160, 112, 224, 24, 64, "max", 64, name="in4b")
    x = inception_factory(x, 128, 128, 256, 24, 64, "max", 64, name="in4c")
    x = inception_factory(x, 112, 144, 288, 32, 64, "max", 64, name="in4d")
    x = inception_factory(x, 256, 160, 320, 32, 128, "max", 128, name="in4e")
    x = _downsample(x)
    x = inception_factory(x, 256, 160, 320, 32, 128, "max", 128, name="in5a")
    x = inception_factory(x, 384, 192, 384, 48, 128, "max", 128, name="in5b")
    x = sym.Pooling(data=x, kernel=(7, 7), stride=(1, 1), pool_type="avg")
    x = sym.Flatten(data=x)
    x = sym.FullyConnected(data=x, num_hidden=num_classes)
    return sym.SoftmaxOutput(data=x, name="softmax")
