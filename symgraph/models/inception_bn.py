"""Inception-BN, BN-Inception (Ioffe and Szegedy, 2015): the net of MXNet's
ImageNet examples.

Names follow MXNet's ``example/image-classification/symbols/inception-bn.py``
(``conv_{name}``, ``bn_{name}``, ``relu_{name}``,
``ch_concat_{name}_chconcat``, ``global_pool``, ``fullyconnected0``).
Images of height 28 or less get that file's small variant (SimpleFactory and
DownsampleFactory blocks, for CIFAR/MNIST-sized inputs).

Parameter count at 3x224x224, 1000 classes (convolution weights and biases,
BN gamma and beta, not the moving statistics): 11,295,240.
"""
from __future__ import annotations

from .. import symbol as sym

EPS = 1e-10 + 1e-5
BN_MOM = 0.9


def conv_factory(data, num_filter, kernel, stride=(1, 1), pad=(0, 0), name=None, suffix=""):
    """Convolution + BatchNorm + ReLU named ``conv_``/``bn_``/``relu_{name}{suffix}``."""
    x = sym.Convolution(data=data, num_filter=num_filter, kernel=kernel, stride=stride, pad=pad,
                        name=f"conv_{name}{suffix}")
    x = sym.BatchNorm(data=x, fix_gamma=False, eps=EPS, momentum=BN_MOM,
                      name=f"bn_{name}{suffix}")
    return sym.Activation(data=x, act_type="relu", name=f"relu_{name}{suffix}")


def inception_a(data, num_1x1, num_3x3red, num_3x3, num_d3x3red, num_d3x3, pool, proj, name):
    """1x1; 1x1->3x3; 1x1->3x3->3x3; pool->1x1; concatenated."""
    c1x1 = conv_factory(data, num_1x1, (1, 1), name=f"{name}_1x1")
    c3x3r = conv_factory(data, num_3x3red, (1, 1), name=f"{name}_3x3", suffix="_reduce")
    c3x3 = conv_factory(c3x3r, num_3x3, (3, 3), pad=(1, 1), name=f"{name}_3x3")
    cd3x3r = conv_factory(data, num_d3x3red, (1, 1), name=f"{name}_double_3x3",
                          suffix="_reduce")
    cd3x3 = conv_factory(cd3x3r, num_d3x3, (3, 3), pad=(1, 1), name=f"{name}_double_3x3_0")
    cd3x3 = conv_factory(cd3x3, num_d3x3, (3, 3), pad=(1, 1), name=f"{name}_double_3x3_1")
    pooling = sym.Pooling(data=data, kernel=(3, 3), stride=(1, 1), pad=(1, 1), pool_type=pool,
                          name=f"{pool}_pool_{name}_pool")
    cproj = conv_factory(pooling, proj, (1, 1), name=f"{name}_proj")
    return sym.Concat(c1x1, c3x3, cd3x3, cproj, name=f"ch_concat_{name}_chconcat")


def inception_b(data, num_3x3red, num_3x3, num_d3x3red, num_d3x3, name):
    """The stride-2 block: 1x1->3x3/2; 1x1->3x3->3x3/2; max pool/2; concatenated."""
    c3x3r = conv_factory(data, num_3x3red, (1, 1), name=f"{name}_3x3", suffix="_reduce")
    c3x3 = conv_factory(c3x3r, num_3x3, (3, 3), pad=(1, 1), stride=(2, 2), name=f"{name}_3x3")
    cd3x3r = conv_factory(data, num_d3x3red, (1, 1), name=f"{name}_double_3x3",
                          suffix="_reduce")
    cd3x3 = conv_factory(cd3x3r, num_d3x3, (3, 3), pad=(1, 1), name=f"{name}_double_3x3_0")
    cd3x3 = conv_factory(cd3x3, num_d3x3, (3, 3), pad=(1, 1), stride=(2, 2),
                         name=f"{name}_double_3x3_1")
    pooling = sym.Pooling(data=data, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="max",
                          name=f"max_pool_{name}_pool")
    return sym.Concat(c3x3, cd3x3, pooling, name=f"ch_concat_{name}_chconcat")


def downsample_factory(data, ch_3x3, name):
    """Small variant: 3x3/2 convolution beside a 3x3/2 max pool."""
    conv = conv_factory(data, ch_3x3, (3, 3), stride=(2, 2), pad=(1, 1), name=f"{name}_conv")
    pool = sym.Pooling(data=data, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="max",
                       name=f"{name}_pool")
    return sym.Concat(conv, pool, name=f"{name}_ch_concat")


def simple_factory(data, ch_1x1, ch_3x3, name):
    """Small variant: 1x1 beside 3x3."""
    c1 = conv_factory(data, ch_1x1, (1, 1), name=f"{name}_1x1")
    c3 = conv_factory(data, ch_3x3, (3, 3), pad=(1, 1), name=f"{name}_3x3")
    return sym.Concat(c1, c3, name=f"{name}_ch_concat")


def get_symbol(num_classes: int = 1000, image_shape=(3, 224, 224)) -> sym.Symbol:
    """Inception-BN ending in ``SoftmaxOutput`` named ``softmax``."""
    height = int(image_shape[1])
    data = sym.Variable("data")
    if height <= 28:
        x = conv_factory(data, 96, (3, 3), pad=(1, 1), name="1")
        x = simple_factory(x, 32, 32, "in3a")
        x = simple_factory(x, 32, 48, "in3b")
        x = downsample_factory(x, 80, "in3c")
        x = simple_factory(x, 112, 48, "in4a")
        x = simple_factory(x, 96, 64, "in4b")
        x = simple_factory(x, 80, 80, "in4c")
        x = simple_factory(x, 48, 96, "in4d")
        x = downsample_factory(x, 96, "in4e")
        x = simple_factory(x, 176, 160, "in5a")
        x = simple_factory(x, 176, 160, "in5b")
        x = sym.Pooling(data=x, pool_type="avg", kernel=(7, 7), name="global_pool")
    else:
        x = conv_factory(data, 64, (7, 7), stride=(2, 2), pad=(3, 3), name="1")
        x = sym.Pooling(data=x, kernel=(3, 3), stride=(2, 2), name="pool_1", pool_type="max")
        x = conv_factory(x, 64, (1, 1), name="2_red")
        x = conv_factory(x, 192, (3, 3), pad=(1, 1), name="2")
        x = sym.Pooling(data=x, kernel=(3, 3), stride=(2, 2), name="pool_2", pool_type="max")
        x = inception_a(x, 64, 64, 64, 64, 96, "avg", 32, "3a")
        x = inception_a(x, 64, 64, 96, 64, 96, "avg", 64, "3b")
        x = inception_b(x, 128, 160, 64, 96, "3c")
        x = inception_a(x, 224, 64, 96, 96, 128, "avg", 128, "4a")
        x = inception_a(x, 192, 96, 128, 96, 128, "avg", 128, "4b")
        x = inception_a(x, 160, 128, 160, 128, 160, "avg", 128, "4c")
        x = inception_a(x, 96, 128, 192, 160, 192, "avg", 128, "4d")
        x = inception_b(x, 128, 192, 192, 256, "4e")
        x = inception_a(x, 352, 192, 320, 160, 224, "avg", 128, "5a")
        x = inception_a(x, 352, 192, 320, 192, 224, "max", 128, "5b")
        x = sym.Pooling(data=x, kernel=(7, 7), stride=(1, 1), name="global_pool", pool_type="avg")
    x = sym.Flatten(data=x)
    x = sym.FullyConnected(data=x, num_hidden=num_classes)
    return sym.SoftmaxOutput(data=x, name="softmax")
