"""The model zoo: classic image-classification nets as symbols.

    import symgraph as sg
    net = sg.models.get_model('vgg16')                 # SoftmaxOutput 'softmax'
    net = sg.models.get_model('resnet-cifar-56')       # 10 classes, 3x32x32
    sg.models.list_models()                            # the registered names
    sg.models.count_parameters(net, (3, 224, 224))     # 138,357,544

Layer structure and node names follow MXNet's
``example/image-classification/symbols`` files, so parameter names match
MXNet checkpoints and a zoo net written as JSON loads in MXNet unchanged.
Every classifier reads ``data`` (N, C, H, W) and ``softmax_label`` (N,);
the SSD detectors read ``data`` and ``label`` (N, objects, 5 or 6).

Parameter counts use the usual convention: every learnable argument
(weights, biases, BatchNorm gamma and beta -- also where ``fix_gamma``
holds gamma at 1), not the BatchNorm moving statistics (aux states).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from ..errors import SymgraphError
from ..ops.registry import numel
from ..symbol import NameManager, Symbol
from . import (alexnet, convnet, googlenet, inception_bn, inception_v3, mlp, resnet, resnet9,
               ssd, vgg)


class ModelError(SymgraphError):
    """An unknown model name or an impossible configuration."""


@dataclass(frozen=True)
class ModelInfo:
    """A zoo entry: how to build it and what it expects by default."""

    name: str
    build: Callable  # build(num_classes, image_shape) -> Symbol
    image_shape: tuple
    num_classes: int
    doc: str
    detector: bool = False  # reads ``label`` (N, objects, 5|6), not ``softmax_label``


_IMAGENET = (3, 224, 224)
_REGISTRY: dict[str, ModelInfo] = {}


def _add(name, build, doc, image_shape=_IMAGENET, num_classes=1000, detector=False):
    _REGISTRY[name] = ModelInfo(name, build, tuple(image_shape), num_classes, doc, detector)


_add("alexnet", lambda c, s: alexnet.get_symbol(c, s), "AlexNet, single tower with LRN")
for _d in sorted(vgg.VGG_SPEC):
    _add(f"vgg{_d}", lambda c, s, d=_d: vgg.get_symbol(c, d, False, s), f"VGG-{_d}")
    _add(f"vgg{_d}-bn", lambda c, s, d=_d: vgg.get_symbol(c, d, True, s),
         f"VGG-{_d} with BatchNorm")
_add("googlenet", lambda c, s: googlenet.get_symbol(c, s), "GoogLeNet (Inception v1)")
_add("inception-bn", lambda c, s: inception_bn.get_symbol(c, s),
     "Inception-BN (BN-Inception), MXNet's ImageNet example net")
_add("inception-v3", lambda c, s: inception_v3.get_symbol(c, s), "Inception-v3",
     image_shape=(3, 299, 299))
for _d in sorted(resnet.IMAGENET_UNITS):
    _add(f"resnet-{_d}", lambda c, s, d=_d: resnet.get_symbol(c, d, s, 2),
         f"ResNet-{_d} v2 (pre-activation), MXNet's default ResNet")
    _add(f"resnet-v1-{_d}", lambda c, s, d=_d: resnet.get_symbol(c, d, s, 1),
         f"ResNet-{_d} v1 (original)")
for _d in (20, 56, 110, 164):
    _add(f"resnet-cifar-{_d}", lambda c, s, d=_d: resnet.get_symbol(c, d, s, 2),
         f"ResNet-{_d} v2 for CIFAR-sized images", image_shape=(3, 32, 32), num_classes=10)
_add("mlp", lambda c, s: mlp.get_symbol(c, s), "MLP 128-64, MNIST-sized",
     image_shape=(1, 28, 28), num_classes=10)
_add("convnet", lambda c, s: convnet.get_symbol(c, s),
     "two conv/BN/ReLU/pool stages and a classifier (docs/cli.md's pictures)",
     image_shape=(3, 32, 32), num_classes=10)
_add("resnet9-dawn", lambda c, s, **kw: resnet9.get_symbol(c, s, **kw),
     "ResNet-9 of the DAWNBench CIFAR-10 recipe (option: smooth_alpha=0.2)",
     image_shape=(3, 32, 32), num_classes=10)
for _n, _cfg in ssd.CONFIGS.items():
    _origin = "MXNet's example/ssd" if _n in ssd.MXNET_NETS else "a small SSD, not MXNet's"
    _add(_n, lambda c, s, n=_n, **kw: ssd.get_symbol(n, c, s, **kw),
         f"SSD-{_cfg.nominal} detector, {_cfg.base} base ({_origin}): reads data and "
         f"label (options: mode='train'|'deploy', width, nms_thresh, nms_topk, force_suppress)",
         image_shape=(3, _cfg.nominal, _cfg.nominal), num_classes=20, detector=True)

# any depth: resnet-N, resnet-v1-N, resnet-cifar-N, resnet-v1-cifar-N
_RESNET_NAME = re.compile(r"^resnet-(v1-)?(cifar-)?(\d+)$")


def list_models() -> list[str]:
    """The registered model names (ResNets of other depths are built on demand)."""
    return list(_REGISTRY)


def model_info(name: str) -> ModelInfo:
    """The zoo entry called ``name``; ModelError (with the nearest names) if none."""
    info = _REGISTRY.get(name)
    if info is not None:
        return info
    m = _RESNET_NAME.match(name)
    if m:
        version = 1 if m.group(1) else 2
        depth = int(m.group(3))
        if m.group(2):
            return ModelInfo(name, lambda c, s: resnet.get_symbol(c, depth, s, version),
                             (3, 32, 32), 10, f"ResNet-{depth} v{version} for CIFAR")
        return ModelInfo(name, lambda c, s: resnet.get_symbol(c, depth, s, version),
                         _IMAGENET, 1000, f"ResNet-{depth} v{version}")
    import difflib
    near = difflib.get_close_matches(name, list(_REGISTRY), n=3, cutoff=0.4)
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    raise ModelError(f"unknown model '{name}'{hint} (`symgraph zoo` lists the names)")


def get_model(name: str, num_classes: int | None = None, image_shape=None,
              **options) -> Symbol:
    """The network ``name`` as a Symbol ending in ``SoftmaxOutput`` ('softmax').

    ``num_classes`` and ``image_shape`` (C, H, W) default to the model's own
    (1000 classes at 3x224x224 for the ImageNet nets). ``image_shape``
    changes the structure where MXNet's files do (CIFAR-style ResNet at a
    height of 32 or less, the small Inception-BN at 28 or less).
    ``options`` go to a builder that takes them (``resnet9-dawn``:
    ``smooth_alpha``; the SSD detectors, which read ``data`` and ``label``
    and end in MXNet's training group or, with ``mode='deploy'``, in
    MultiBoxDetection: see ``models/ssd.py``); a model without options
    refuses any.
    """
    info = model_info(name)
    classes = info.num_classes if num_classes is None else int(num_classes)
    if classes < 1:
        raise ModelError(f"model '{name}': num_classes must be positive, got {classes}")
    shape = info.image_shape if image_shape is None else parse_image_shape(image_shape)
    # a fresh name manager: automatic names (convolution0 ...) start from 0,
    # as they do when MXNet's example script builds the net
    if options:
        import inspect
        params = inspect.signature(info.build).parameters
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            raise ModelError(f"model '{name}' takes no options, got "
                             f"{', '.join(sorted(options))}")
    with NameManager():
        try:
            return info.build(classes, shape, **options)
        except TypeError as err:
            if not options:
                raise
            raise ModelError(f"model '{name}': bad option(s) {', '.join(sorted(options))}: "
                             f"{err}") from None


def parse_image_shape(value) -> tuple:
    """``'3,224,224'``, ``'3x224x224'`` or ``(3, 224, 224)`` -> ``(3, 224, 224)``."""
    from ..util import parse_dims
    bad, hint = f"bad image shape {value!r}: ", "expected C,H,W such as 3,224,224"
    if isinstance(value, str):
        try:
            shape = parse_dims(value)  # names an empty or non-numeric dimension
        except ValueError as err:
            raise ModelError(f"{bad}{err}; {hint}") from None
    else:
        try:
            shape = tuple(int(v) for v in value)
        except (TypeError, ValueError):
            raise ModelError(bad + hint) from None
    if len(shape) != 3 or any(v <= 0 for v in shape):
        raise ModelError(bad + hint)
    return shape


def data_shapes(name: str, batch_size: int, image_shape=None, mode: str = "train",
                max_objects: int = 16, object_width: int = 5) -> dict:
    """Input shapes for ``infer_shape``/``plan``: ``data`` and the label a
    training net reads, ``softmax_label`` (N,) for a classifier, ``label``
    (N, ``max_objects``, ``object_width``) for an SSD; ``mode='deploy'``
    gives ``data`` alone."""
    info = model_info(name)
    shape = info.image_shape if image_shape is None else parse_image_shape(image_shape)
    if mode not in ("train", "deploy"):
        raise ModelError(f"data_shapes: mode must be 'train' or 'deploy', got {mode!r}")
    batch = int(batch_size)
    out = {"data": (batch, *shape)}
    if mode == "deploy":
        return out
    if not info.detector:
        out["softmax_label"] = (batch,)
        return out
    if int(max_objects) < 1 or int(object_width) < 5:
        raise ModelError(f"data_shapes: need max_objects >= 1 and object_width >= 5 (cls, "
                         f"xmin, ymin, xmax, ymax, ...), got {max_objects}, {object_width}")
    out["label"] = (batch, int(max_objects), int(object_width))
    return out


def is_input(name: str) -> bool:
    """Whether an argument is fed data (``data``, ``*_label``), not a parameter."""
    return name == "data" or name.endswith("_label")


def parameter_shapes(net: Symbol, image_shape, batch_size: int = 1) -> dict:
    """``{name: shape}`` of every learnable argument, in argument order."""
    shapes = {"data": (batch_size, *parse_image_shape(image_shape))}
    arg_shapes, _, _ = net._infer_shape_or_raise(**shapes)  # names what is missing
    return {n: tuple(s) for n, s in zip(net.list_arguments(), arg_shapes) if not is_input(n)}


def count_parameters(net: Symbol, image_shape) -> int:
    """Number of learnable parameters (see the module docstring's convention)."""
    return sum(numel(s) for s in parameter_shapes(net, image_shape).values())


__all__ = ["ModelError", "ModelInfo", "list_models", "model_info", "get_model",
           "parse_image_shape", "data_shapes", "is_input", "parameter_shapes",
           "count_parameters"]
