"""VGG-11/13/16/19 (Simonyan and Zisserman, 2014), with or without BatchNorm.

Names follow MXNet's ``example/image-classification/symbols/vgg.py``:
``conv{stage}_{i}``, ``bn{stage}_{i}``, ``relu{stage}_{i}``, ``pool{stage}``,
then ``fc6``/``fc7``/``fc8`` with ``drop6``/``drop7``. BatchNorm keeps
MXNet's defaults (as that file does).

Published parameter counts (weights and biases; with BN also gamma and
beta, not the moving statistics), 1000 classes at 3x224x224:
VGG-11 132,863,336; VGG-13 133,047,848; VGG-16 138,357,544;
VGG-19 143,667,240; with BN 132,868,840 / 133,053,736 / 138,365,992 /
143,678,248.
"""
from __future__ import annotations

from .. import symbol as sym
from ..errors import SymgraphError

# depth -> (convolutions per stage, filters per stage)
VGG_SPEC = {
    11: ((1, 1, 2, 2, 2), (64, 128, 256, 512, 512)),
    13: ((2, 2, 2, 2, 2), (64, 128, 256, 512, 512)),
    16: ((2, 2, 3, 3, 3), (64, 128, 256, 512, 512)),
    19: ((2, 2, 4, 4, 4), (64, 128, 256, 512, 512)),
}


def get_feature(x: sym.Symbol, layers, filters, batch_norm: bool = False) -> sym.Symbol:
    """The convolutional part: 3x3 convolutions, 2x2 max pooling per stage."""
    for i, num in enumerate(layers):
        for j in range(num):
            x = sym.Convolution(data=x, kernel=(3, 3), pad=(1, 1), num_filter=filters[i],
                                name=f"conv{i + 1}_{j + 1}")
            if batch_norm:
                x = sym.BatchNorm(data=x, name=f"bn{i + 1}_{j + 1}")
            x = sym.Activation(data=x, act_type="relu", name=f"relu{i + 1}_{j + 1}")
        x = sym.Pooling(data=x, pool_type="max", kernel=(2, 2), stride=(2, 2),
                        name=f"pool{i + 1}")
    return x


def get_classifier(x: sym.Symbol, num_classes: int) -> sym.Symbol:
    """Two 4096-wide layers with dropout, then the class scores ``fc8``."""
    x = sym.Flatten(data=x, name="flatten")
    for k in (6, 7):
        x = sym.FullyConnected(data=x, num_hidden=4096, name=f"fc{k}")
        x = sym.Activation(data=x, act_type="relu", name=f"relu{k}")
        x = sym.Dropout(data=x, p=0.5, name=f"drop{k}")
    return sym.FullyConnected(data=x, num_hidden=num_classes, name="fc8")


def get_symbol(num_classes: int = 1000, num_layers: int = 16, batch_norm: bool = False,
               image_shape=(3, 224, 224)) -> sym.Symbol:
    """VGG-``num_layers`` ending in ``SoftmaxOutput`` named ``softmax``."""
    if num_layers not in VGG_SPEC:
        raise SymgraphError(f"VGG has no {num_layers}-layer variant; choose one of "
                            f"{', '.join(str(k) for k in VGG_SPEC)}")
    layers, filters = VGG_SPEC[num_layers]
    data = sym.Variable("data")
    x = get_classifier(get_feature(data, layers, filters, batch_norm), num_classes)
    return sym.SoftmaxOutput(data=x, name="softmax")
