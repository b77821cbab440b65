"""ResNet, v1 (He et al., 2015) and v2 "pre-activation" (He et al., 2016).

Names follow MXNet's ``example/image-classification/symbols/resnet.py``
(v2, MXNet's default ResNet) and ``resnet-v1.py``: ``stage{i}_unit{j}_conv1``,
``..._bn1``, ``..._relu1``, ``..._sc`` (v2: the projection convolution;
v1: ``..._conv1sc`` and its BatchNorm ``..._sc``), ``conv0``/``bn0``/
``relu0``, ``bn_data`` (v2), ``bn1``/``relu1`` (v2), ``pool1``, ``fc1``.

Depths: 18, 34 (basic blocks), 50, 101, 152, 200, 269 (bottlenecks) on
ImageNet-sized images; on images of height 32 or less the CIFAR layout
(three stages, 3x3 stem): any depth with (depth - 2) % 6 == 0 (basic blocks,
below 164) or (depth - 2) % 9 == 0 (bottlenecks, 164 and up). ``resnet()``
builds any other stage configuration.

Parameter counts (convolution weights, BN gamma and beta, the classifier;
not the moving statistics), 1000 classes at 224x224, v1: ResNet-18
11,689,512; 34 21,797,672; 50 25,557,032; 101 44,549,160; 152 60,192,808 --
the published counts; CIFAR ResNet-20 v1 272,474 (the paper's 269,722
plus 2,752 for its two projection shortcuts). v2 differs in BatchNorm
placement (one BN before each unit instead of after each convolution, a
final BN, ``bn_data``) and, as MXNet's ``resnet.py`` does, projects the
shortcut of every stage's first unit, so MXNet's checkpoints load: stage 1
of the basic-block nets gets a 1x1 convolution (ResNet-18/34 v2: +4,096
parameters; CIFAR: +256) where v1, like the papers, keeps the identity.
"""
from __future__ import annotations

from .. import symbol as sym
from ..errors import SymgraphError

BN_MOM = 0.9
EPS = 2e-5

IMAGENET_UNITS = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3), 50: (3, 4, 6, 3), 101: (3, 4, 23, 3),
                  152: (3, 8, 36, 3), 200: (3, 24, 36, 3), 269: (3, 30, 48, 8)}


def _bn(data, name, fix_gamma=False):
    return sym.BatchNorm(data=data, fix_gamma=fix_gamma, eps=EPS, momentum=BN_MOM, name=name)


def _conv(data, num_filter, kernel, stride, pad, name):
    return sym.Convolution(data=data, num_filter=int(num_filter), kernel=kernel, stride=stride,
                           pad=pad, no_bias=True, name=name)


def _relu(data, name):
    return sym.Activation(data=data, act_type="relu", name=name)


def residual_unit_v2(data, num_filter, stride, dim_match, name, bottle_neck=True):
    """Pre-activation unit: BN-ReLU-conv twice (or three times with a
    bottleneck); the projection shortcut reads the first activation."""
    bn1 = _bn(data, f"{name}_bn1")
    act1 = _relu(bn1, f"{name}_relu1")
    if bottle_neck:
        x = _conv(act1, num_filter * 0.25, (1, 1), (1, 1), (0, 0), f"{name}_conv1")
        x = _relu(_bn(x, f"{name}_bn2"), f"{name}_relu2")
        x = _conv(x, num_filter * 0.25, (3, 3), stride, (1, 1), f"{name}_conv2")
        x = _relu(_bn(x, f"{name}_bn3"), f"{name}_relu3")
        x = _conv(x, num_filter, (1, 1), (1, 1), (0, 0), f"{name}_conv3")
    else:
        x = _conv(act1, num_filter, (3, 3), stride, (1, 1), f"{name}_conv1")
        x = _relu(_bn(x, f"{name}_bn2"), f"{name}_relu2")
        x = _conv(x, num_filter, (3, 3), (1, 1), (1, 1), f"{name}_conv2")
    shortcut = data if dim_match else _conv(act1, num_filter, (1, 1), stride, (0, 0),
                                            f"{name}_sc")
    return x + shortcut


def residual_unit_v1(data, num_filter, stride, dim_match, name, bottle_neck=True):
    """Original unit: conv-BN(-ReLU) per layer, the sum then ReLU. As MXNet's
    resnet-v1.py, a bottleneck strides in its first 1x1 convolution."""
    if bottle_neck:
        x = _conv(data, num_filter * 0.25, (1, 1), stride, (0, 0), f"{name}_conv1")
        x = _relu(_bn(x, f"{name}_bn1"), f"{name}_relu1")
        x = _conv(x, num_filter * 0.25, (3, 3), (1, 1), (1, 1), f"{name}_conv2")
        x = _relu(_bn(x, f"{name}_bn2"), f"{name}_relu2")
        x = _conv(x, num_filter, (1, 1), (1, 1), (0, 0), f"{name}_conv3")
        x = _bn(x, f"{name}_bn3")
    else:
        x = _conv(data, num_filter, (3, 3), stride, (1, 1), f"{name}_conv1")
        x = _relu(_bn(x, f"{name}_bn1"), f"{name}_relu1")
        x = _conv(x, num_filter, (3, 3), (1, 1), (1, 1), f"{name}_conv2")
        x = _bn(x, f"{name}_bn2")
    if dim_match:
        shortcut = data
    else:
        sc = _conv(data, num_filter, (1, 1), stride, (0, 0), f"{name}_conv1sc")
        shortcut = _bn(sc, f"{name}_sc")
    return _relu(x + shortcut, f"{name}_relu3")


def resnet(units, filter_list, num_classes: int, image_shape, bottle_neck: bool = True,
           version: int = 2) -> sym.Symbol:
    """A ResNet with ``len(units)`` stages of ``units[i]`` residual units;
    ``filter_list`` holds the stem width, then each stage's output width."""
    if version not in (1, 2):
        raise SymgraphError(f"ResNet version must be 1 or 2, got {version}")
    if len(filter_list) != len(units) + 1:
        raise SymgraphError(f"ResNet: {len(units)} stages need {len(units) + 1} filter sizes "
                            f"(stem + one per stage), got {len(filter_list)}")
    unit = residual_unit_v2 if version == 2 else residual_unit_v1
    height = int(image_shape[1])
    data = sym.identity(data=sym.Variable("data"), name="id")
    if version == 2:
        data = _bn(data, "bn_data", fix_gamma=True)
    if height <= 32:  # CIFAR-sized: a 3x3 stem, no pooling
        body = _conv(data, filter_list[0], (3, 3), (1, 1), (1, 1), "conv0")
        if version == 1:
            body = _bn(body, "bn0")
    else:
        body = _conv(data, filter_list[0], (7, 7), (2, 2), (3, 3), "conv0")
        body = _relu(_bn(body, "bn0"), "relu0")
        body = sym.Pooling(data=body, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="max")
    channels = filter_list[0]
    for i, n in enumerate(units):
        stride = (1, 1) if i == 0 else (2, 2)
        # v1: identity shortcut where the shapes allow, as in the papers;
        # v2: a projection in every first unit, as MXNet's resnet.py
        same = version == 1 and stride == (1, 1) and channels == filter_list[i + 1]
        body = unit(body, filter_list[i + 1], stride, same, f"stage{i + 1}_unit1", bottle_neck)
        channels = filter_list[i + 1]
        for j in range(n - 1):
            body = unit(body, filter_list[i + 1], (1, 1), True, f"stage{i + 1}_unit{j + 2}",
                        bottle_neck)
    if version == 2:
        body = _relu(_bn(body, "bn1"), "relu1")
    # global pooling: the kernel is ignored, but MXNet's files give one
    pool = sym.Pooling(data=body, global_pool=True, kernel=(7, 7), pool_type="avg", name="pool1")
    fc = sym.FullyConnected(data=sym.Flatten(data=pool), num_hidden=num_classes, name="fc1")
    return sym.SoftmaxOutput(data=fc, name="softmax")


def stage_config(num_layers: int, image_shape) -> tuple:
    """(units, filter_list, bottle_neck) of a ResNet of ``num_layers`` layers."""
    if int(image_shape[1]) <= 32:
        if (num_layers - 2) % 9 == 0 and num_layers >= 164:
            return ((num_layers - 2) // 9,) * 3, (16, 64, 128, 256), True
        if (num_layers - 2) % 6 == 0 and num_layers < 164:
            return ((num_layers - 2) // 6,) * 3, (16, 16, 32, 64), False
        raise SymgraphError(f"no CIFAR ResNet has {num_layers} layers: use 6n+2 below 164 "
                            f"(20, 32, 44, 56, 110) or 9n+2 from 164 (164, 1001)")
    if num_layers not in IMAGENET_UNITS:
        raise SymgraphError(f"no ImageNet ResNet has {num_layers} layers: choose one of "
                            f"{', '.join(str(k) for k in IMAGENET_UNITS)}, or call "
                            f"symgraph.models.resnet.resnet() with your own stages")
    bottle_neck = num_layers >= 50
    filters = (64, 256, 512, 1024, 2048) if bottle_neck else (64, 64, 128, 256, 512)
    return IMAGENET_UNITS[num_layers], filters, bottle_neck


def get_symbol(num_classes: int = 1000, num_layers: int = 50, image_shape=(3, 224, 224),
               version: int = 2) -> sym.Symbol:
    """ResNet-``num_layers`` (v1 or v2) ending in ``SoftmaxOutput`` named ``softmax``."""
    units, filters, bottle_neck = stage_config(num_layers, image_shape)
    return resnet(units, filters, num_classes, image_shape, bottle_neck, version)
