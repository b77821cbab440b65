"""ResNet-9 of the DAWNBench CIFAR-10 recipe (David Page, "How to train
your ResNet", 2018): the net that trains CIFAR-10 to 94% in a few minutes.

    net = sg.models.get_model('resnet9-dawn')                   # 10 classes, 3x32x32
    net = sg.models.get_model('resnet9-dawn', smooth_alpha=0.0)  # no label smoothing

Layers (every convolution 3x3, stride 1, pad 1, no bias, followed by
BatchNorm with a learned gamma and a ReLU):

- ``prep``: convolution to 64 channels;
- ``layer1``: convolution to 128, max-pool 2x2, then a residual block
  (``layer1_res1``, ``layer1_res2``: two convolutions of 128) added to
  its input;
- ``layer2``: convolution to 256, max-pool 2x2;
- ``layer3``: convolution to 512, max-pool 2x2, residual block of 512;
- ``pool``: global max-pooling (4x4 at 32x32), ``flatten``;
- ``fc``: FullyConnected to the classes without bias, multiplied by
  0.125 (``fc_scale``, the recipe's output scale);
- ``softmax``: SoftmaxOutput with ``smooth_alpha`` label smoothing (0.2
  by default, the recipe's).

BatchNorm uses eps 1e-5 and momentum 0.9 (PyTorch's 0.1 in MXNet's
convention). Parameters at 10 classes: 6,573,120 (convolutions 6,563,520,
BatchNorm gamma and beta 4,480, the classifier 5,120); node and parameter
names: ``prep_conv_weight``, ``layer1_res2_bn_gamma``, ``fc_weight``, ...
"""
from __future__ import annotations

from .. import symbol as sym

BN_MOM = 0.9
EPS = 1e-5
WIDTHS = (64, 128, 256, 512)
OUTPUT_SCALE = 0.125


def conv_bn(data, num_filter: int, name: str):
    """3x3 convolution (no bias), BatchNorm (learned gamma), ReLU:
    ``{name}_conv``, ``{name}_bn``, ``{name}_relu``."""
    x = sym.Convolution(data=data, num_filter=int(num_filter), kernel=(3, 3), stride=(1, 1),
                        pad=(1, 1), no_bias=True, name=f"{name}_conv")
    x = sym.BatchNorm(data=x, fix_gamma=False, eps=EPS, momentum=BN_MOM, name=f"{name}_bn")
    return sym.Activation(data=x, act_type="relu", name=f"{name}_relu")


def _pool(data, name):
    return sym.Pooling(data=data, kernel=(2, 2), stride=(2, 2), pool_type="max",
                       name=f"{name}_pool")


def layer(data, num_filter: int, name: str, residual: bool):
    """conv-BN-ReLU, max-pool 2, and with ``residual`` two conv-BN-ReLU of
    the same width whose output is added to the pooled value."""
    x = _pool(conv_bn(data, num_filter, name), name)
    if residual:
        r = conv_bn(x, num_filter, f"{name}_res1")
        r = conv_bn(r, num_filter, f"{name}_res2")
        x = sym.elemwise_add(x, r, name=f"{name}_add")
    return x


def get_symbol(num_classes: int = 10, image_shape=(3, 32, 32), smooth_alpha: float = 0.2,
               widths=WIDTHS) -> sym.Symbol:
    """ResNet-9 ending in ``SoftmaxOutput`` named ``softmax`` (see the module
    docstring); ``widths``: prep, layer1, layer2, layer3 channels. Any image
    side divisible by 8 works (three 2x2 poolings, then a global one)."""
    w = tuple(int(v) for v in widths)
    x = conv_bn(sym.Variable("data"), w[0], "prep")
    x = layer(x, w[1], "layer1", residual=True)
    x = layer(x, w[2], "layer2", residual=False)
    x = layer(x, w[3], "layer3", residual=True)
    # global pooling: the kernel is ignored, given as MXNet's files do
    x = sym.Pooling(data=x, global_pool=True, kernel=(4, 4), pool_type="max", name="pool")
    x = sym.Flatten(data=x, name="flatten")
    x = sym.FullyConnected(data=x, num_hidden=int(num_classes), no_bias=True, name="fc")
    x = sym._mul_scalar(x, scalar=OUTPUT_SCALE, name="fc_scale")
    return sym.SoftmaxOutput(data=x, smooth_alpha=float(smooth_alpha), name="softmax")
