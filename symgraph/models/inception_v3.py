"""Inception-v3 (Szegedy et al., 2015) at 3x299x299, without the auxiliary head.

Names follow MXNet's ``example/image-classification/symbols/inception-v3.py``
(``{name}_conv2d``, ``{name}_batchnorm``, ``{name}_relu``, blocks ``mixed``
to ``mixed_10``, ``global_pool``, ``flatten``, ``fc1``). Convolutions have
no bias; BatchNorm fixes gamma at 1 (``fix_gamma=True``), as in that file.

Parameter count, 1000 classes (convolution weights, BN gamma and beta, the
classifier; not the moving statistics): 23,834,568, the published count of
Inception-v3 without its auxiliary classifier.
"""
from __future__ import annotations

from .. import symbol as sym


def conv(data, num_filter, kernel=(1, 1), stride=(1, 1), pad=(0, 0), name=None, suffix=""):
    """Convolution (no bias) + BatchNorm + ReLU named ``{name}{suffix}_conv2d`` etc."""
    x = sym.Convolution(data=data, num_filter=num_filter, kernel=kernel, stride=stride, pad=pad,
                        no_bias=True, name=f"{name}{suffix}_conv2d")
    x = sym.BatchNorm(data=x, fix_gamma=True, name=f"{name}{suffix}_batchnorm")
    return sym.Activation(data=x, act_type="relu", name=f"{name}{suffix}_relu")


def _pool(data, pool, name, stride=(1, 1), pad=(1, 1)):
    return sym.Pooling(data=data, kernel=(3, 3), stride=stride, pad=pad, pool_type=pool,
                       name=f"{pool}_pool_{name}_pool")


def inception_7a(data, num_1x1, num_3x3_red, num_3x3_1, num_3x3_2, num_5x5_red, num_5x5,
                 pool, proj, name):
    """35x35 block: 1x1; 1x1->5x5; 1x1->3x3->3x3; pool->1x1."""
    t1 = conv(data, num_1x1, name=f"{name}_conv")
    t5 = conv(data, num_5x5_red, name=f"{name}_tower", suffix="_conv")
    t5 = conv(t5, num_5x5, (5, 5), pad=(2, 2), name=f"{name}_tower", suffix="_conv_1")
    t3 = conv(data, num_3x3_red, name=f"{name}_tower_1", suffix="_conv")
    t3 = conv(t3, num_3x3_1, (3, 3), pad=(1, 1), name=f"{name}_tower_1", suffix="_conv_1")
    t3 = conv(t3, num_3x3_2, (3, 3), pad=(1, 1), name=f"{name}_tower_1", suffix="_conv_2")
    proj_ = conv(_pool(data, pool, name), proj, name=f"{name}_tower_2", suffix="_conv")
    return sym.Concat(t1, t5, t3, proj_, name=f"ch_concat_{name}_chconcat")


def inception_7b(data, num_3x3, num_d3x3_red, num_d3x3_1, num_d3x3_2, pool, name):
    """First grid reduction, 35 -> 17."""
    t3 = conv(data, num_3x3, (3, 3), stride=(2, 2), name=f"{name}_conv")
    td = conv(data, num_d3x3_red, name=f"{name}_tower", suffix="_conv")
    td = conv(td, num_d3x3_1, (3, 3), pad=(1, 1), name=f"{name}_tower", suffix="_conv_1")
    td = conv(td, num_d3x3_2, (3, 3), stride=(2, 2), name=f"{name}_tower", suffix="_conv_2")
    p = sym.Pooling(data=data, kernel=(3, 3), stride=(2, 2), pad=(0, 0), pool_type="max",
                    name=f"max_pool_{name}_pool")
    return sym.Concat(t3, td, p, name=f"ch_concat_{name}_chconcat")


def inception_7c(data, num_1x1, num_d7_red, num_d7_1, num_d7_2, num_q7_red, num_q7_1, num_q7_2,
                 num_q7_3, num_q7_4, pool, proj, name):
    """17x17 block with factorised 1x7 / 7x1 convolutions."""
    t1 = conv(data, num_1x1, name=f"{name}_conv")
    d7 = conv(data, num_d7_red, name=f"{name}_tower", suffix="_conv")
    d7 = conv(d7, num_d7_1, (1, 7), pad=(0, 3), name=f"{name}_tower", suffix="_conv_1")
    d7 = conv(d7, num_d7_2, (7, 1), pad=(3, 0), name=f"{name}_tower", suffix="_conv_2")
    q7 = conv(data, num_q7_red, name=f"{name}_tower_1", suffix="_conv")
    q7 = conv(q7, num_q7_1, (7, 1), pad=(3, 0), name=f"{name}_tower_1", suffix="_conv_1")
    q7 = conv(q7, num_q7_2, (1, 7), pad=(0, 3), name=f"{name}_tower_1", suffix="_conv_2")
    q7 = conv(q7, num_q7_3, (7, 1), pad=(3, 0), name=f"{name}_tower_1", suffix="_conv_3")
    q7 = conv(q7, num_q7_4, (1, 7), pad=(0, 3), name=f"{name}_tower_1", suffix="_conv_4")
    proj_ = conv(_pool(data, pool, name), proj, name=f"{name}_tower_2", suffix="_conv")
    return sym.Concat(t1, d7, q7, proj_, name=f"ch_concat_{name}_chconcat")


def inception_7d(data, num_3x3_red, num_3x3, num_d7_3x3_red, num_d7_1, num_d7_2, num_d7_3x3,
                 pool, name):
    """Second grid reduction, 17 -> 8."""
    t3 = conv(data, num_3x3_red, name=f"{name}_tower", suffix="_conv")
    t3 = conv(t3, num_3x3, (3, 3), stride=(2, 2), name=f"{name}_tower", suffix="_conv_1")
    d7 = conv(data, num_d7_3x3_red, name=f"{name}_tower_1", suffix="_conv")
    d7 = conv(d7, num_d7_1, (1, 7), pad=(0, 3), name=f"{name}_tower_1", suffix="_conv_1")
    d7 = conv(d7, num_d7_2, (7, 1), pad=(3, 0), name=f"{name}_tower_1", suffix="_conv_2")
    d7 = conv(d7, num_d7_3x3, (3, 3), stride=(2, 2), name=f"{name}_tower_1", suffix="_conv_3")
    p = sym.Pooling(data=data, kernel=(3, 3), stride=(2, 2), pool_type=pool,
                    name=f"{pool}_pool_{name}_pool")
    return sym.Concat(t3, d7, p, name=f"ch_concat_{name}_chconcat")


def inception_7e(data, num_1x1, num_d3_red, num_d3_1, num_d3_2, num_3x3_d3_red, num_3x3,
                 num_3x3_d3_1, num_3x3_d3_2, pool, proj, name):
    """8x8 block with split 1x3 / 3x1 branches."""
    t1 = conv(data, num_1x1, name=f"{name}_conv")
    d3 = conv(data, num_d3_red, name=f"{name}_tower", suffix="_conv")
    d3a = conv(d3, num_d3_1, (1, 3), pad=(0, 1), name=f"{name}_tower", suffix="_mixed_conv")
    d3b = conv(d3, num_d3_2, (3, 1), pad=(1, 0), name=f"{name}_tower", suffix="_mixed_conv_1")
    t3 = conv(data, num_3x3_d3_red, name=f"{name}_tower_1", suffix="_conv")
    t3 = conv(t3, num_3x3, (3, 3), pad=(1, 1), name=f"{name}_tower_1", suffix="_conv_1")
    t3a = conv(t3, num_3x3_d3_1, (1, 3), pad=(0, 1), name=f"{name}_tower_1",
               suffix="_mixed_conv")
    t3b = conv(t3, num_3x3_d3_2, (3, 1), pad=(1, 0), name=f"{name}_tower_1",
               suffix="_mixed_conv_1")
    proj_ = conv(_pool(data, pool, name), proj, name=f"{name}_tower_2", suffix="_conv")
    return sym.Concat(t1, d3a, d3b, t3a, t3b, proj_, name=f"ch_concat_{name}_chconcat")


def get_symbol(num_classes: int = 1000, image_shape=(3, 299, 299)) -> sym.Symbol:
    """Inception-v3 ending in ``SoftmaxOutput`` named ``softmax``."""
    data = sym.identity(data=sym.Variable("data"), name="id")
    # stem
    x = conv(data, 32, (3, 3), stride=(2, 2), name="conv")
    x = conv(x, 32, (3, 3), name="conv_1")
    x = conv(x, 64, (3, 3), pad=(1, 1), name="conv_2")
    x = sym.Pooling(data=x, kernel=(3, 3), stride=(2, 2), pool_type="max", name="pool")
    x = conv(x, 80, (1, 1), name="conv_3")
    x = conv(x, 192, (3, 3), name="conv_4")
    x = sym.Pooling(data=x, kernel=(3, 3), stride=(2, 2), pool_type="max", name="pool1")
    # 35x35
    x = inception_7a(x, 64, 64, 96, 96, 48, 64, "avg", 32, "mixed")
    x = inception_7a(x, 64, 64, 96, 96, 48, 64, "avg", 64, "mixed_1")
    x = inception_7a(x, 64, 64, 96, 96, 48, 64, "avg", 64, "mixed_2")
    x = inception_7b(x, 384, 64, 96, 96, "max", "mixed_3")
    # 17x17
    x = inception_7c(x, 192, 128, 128, 192, 128, 128, 128, 128, 192, "avg", 192, "mixed_4")
    x = inception_7c(x, 192, 160, 160, 192, 160, 160, 160, 160, 192, "avg", 192, "mixed_5")
    x = inception_7c(x, 192, 160, 160, 192, 160, 160, 160, 160, 192, "avg", 192, "mixed_6")
    x = inception_7c(x, 192, 192, 192, 192, 192, 192, 192, 192, 192, "avg", 192, "mixed_7")
    x = inception_7d(x, 192, 320, 192, 192, 192, 192, "max", "mixed_8")
    # 8x8
    x = inception_7e(x, 320, 384, 384, 384, 448, 384, 384, 384, "avg", 192, "mixed_9")
    x = inception_7e(x, 320, 384, 384, 384, 448, 384, 384, 384, "max", 192, "mixed_10")
    x = sym.Pooling(data=x, kernel=(8, 8), stride=(1, 1), pool_type="avg", name="global_pool")
    x = sym.Flatten(data=x, name="flatten")
    x = sym.FullyConnected(data=x, num_hidden=num_classes, name="fc1")
    return sym.SoftmaxOutput(data=x, name="softmax")
