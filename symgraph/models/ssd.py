"""SSD (single-shot multibox detector) nets, as MXNet's ``example/ssd``.

    net = sg.models.get_model('ssd-300-vgg16')                   # training symbol
    net = sg.models.get_model('ssd-300-vgg16', mode='deploy')    # detections
    net = sg.models.get_model('ssd-512-vgg16', num_classes=80)
    net = sg.models.get_model('ssd-96-resnet18', num_classes=3, width=0.25)  # small

``ssd-96-resnet18`` is not MXNet's: SSD-300's anchors on ResNet-18 v2 for
small images, which examples/train_ssd.py trains from scratch (the
BatchNorm of its base helps there: a width-1/8 VGG16-reduced SSD at 96x96
stayed at chance in its one run, SGD at lr 0.02).

Three parts, named as MXNet's files name them so that checkpoints match:

* a base net: VGG16-reduced (``vgg16_reduced``: pool5 3x3 stride 1, fc6 an
  atrous 3x3 convolution dilated 6, fc7 a 1x1 convolution, both 1024 wide)
  or ResNet-50 v2 (``resnet50``, the zoo's ``resnet-50`` body);
* feature layers: some of the base net's outputs, then extra 1x1/3x3
  convolution pairs (``multi_feat_K_conv_1x1`` / ``_conv_3x3``), each
  feature map optionally L2-normalised per position and multiplied by a
  learned per-channel scale (``relu4_3_scale``, initialised to 20);
* per feature map a 3x3 convolution predicting box offsets
  (``*_loc_pred_conv``), one predicting class scores (``*_cls_pred_conv``)
  and ``MultiBoxPrior`` anchors, each flattened channels-last and
  concatenated over the maps.

The training symbol (``mode='train'``, the default) reads ``data`` and
``label`` (batch, objects, 5: class, xmin, ymin, xmax, ymax in [0, 1]; a
row of class -1 pads) and outputs, as MXNet's ``get_symbol_train``:
``cls_prob`` (SoftmaxOutput over MultiBoxTarget's class targets),
``loc_loss`` (MakeLoss of smooth_l1 of the masked offset error), the class
targets and the detections (both MakeLoss with grad_scale 0, so no
gradient flows from them). The deploy symbol (``mode='deploy'``) ends in
``MultiBoxDetection`` (batch, anchors, 6: class, score, box).

``num_classes`` excludes the background (20 for VOC). Options:
``mode``, ``nms_thresh`` (0.5), ``force_suppress`` (False), ``nms_topk``
(400) as MXNet's, and ``width`` (1.0), a factor on every channel count
(base and extra layers) for small test nets; 1.0 is MXNet's net.
MultiBoxPrior's steps are MXNet's fixed ones at the nominal input size
(300 or 512) and derived from the feature map size at any other size, as
MXNet's ``symbol_factory`` does.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from .. import symbol as sym
from ..errors import SymgraphError
from . import resnet as _resnet

_R3 = (1.0, 2.0, 0.5)
_R5 = (1.0, 2.0, 0.5, 3.0, 1.0 / 3)
_VARIANCES = (0.1, 0.1, 0.2, 0.2)


@dataclass(frozen=True)
class SSDConfig:
    """Where features are taken and what anchors each feature map gets.

    ``from_layers``: a base-net node name, or '' for an extra conv pair on
    the previous map; ``num_filters`` the extra pair's width (or the taken
    layer's channels where it is normalised, -1 otherwise); ``strides`` and
    ``pads`` of the extra 3x3 convolutions; ``sizes`` and ``ratios`` of
    MultiBoxPrior per map; ``normalizations`` the initial L2 scale (-1:
    none); ``steps`` in pixels at ``nominal`` input size (empty: derived).
    """

    base: str
    nominal: int
    from_layers: tuple
    num_filters: tuple
    strides: tuple
    pads: tuple
    sizes: tuple
    ratios: tuple
    normalizations: tuple
    steps: tuple = ()
    min_filter: int = 128


_SIZES_6 = ((.1, .141), (.2, .272), (.37, .447), (.54, .619), (.71, .79), (.88, .961))
_RATIOS_6 = (_R3, _R5, _R5, _R5, _R3, _R3)

CONFIGS = {
    "ssd-300-vgg16": SSDConfig(
        "vgg16_reduced", 300, ("relu4_3", "relu7", "", "", "", ""),
        (512, -1, 512, 256, 256, 256), (-1, -1, 2, 2, 1, 1), (-1, -1, 1, 1, 0, 0),
        _SIZES_6, _RATIOS_6, (20, -1, -1, -1, -1, -1), (8, 16, 32, 64, 100, 300)),
    "ssd-512-vgg16": SSDConfig(
        "vgg16_reduced", 512, ("relu4_3", "relu7", "", "", "", "", ""),
        (512, -1, 512, 256, 256, 256, 256), (-1, -1, 2, 2, 2, 2, 1),
        (-1, -1, 1, 1, 1, 1, 1),
        ((.07, .1025), (.15, .2121), (.3, .3674), (.45, .5196), (.6, .6708),
         (.75, .8216), (.9, .9721)),
        (_R3, _R5, _R5, _R5, _R5, _R3, _R3), (20, -1, -1, -1, -1, -1, -1),
        (8, 16, 32, 64, 128, 256, 512)),
    # MXNet's resnet50 config: the last units of stages 3 and 4 (the
    # residual sums MXNet names _plus12 and _plus15), no normalisation,
    # steps derived from the map sizes
    "ssd-300-resnet50": SSDConfig(
        "resnet50", 300, ("_plus12", "_plus15", "", "", "", ""),
        (-1, -1, 512, 256, 256, 128), (-1, -1, 2, 2, 2, 2), (-1, -1, 1, 1, 1, 1),
        _SIZES_6, _RATIOS_6, (-1,) * 6),
    # not MXNet's: a small SSD that trains from scratch (BatchNorm in the base)
    # on small images such as the synthetic set's 96x96: SSD-300's six anchor
    # sizes and ratios on ResNet-18 v2's last sums of stages 1 to 4 and two
    # extras; maps 24, 12, 6, 3, 2, 1 at 96, as dense for these sizes as
    # SSD-300's (fewer maps left most objects without an anchor of IoU 0.5)
    "ssd-96-resnet18": SSDConfig(
        "resnet18", 96, ("_plus1", "_plus3", "_plus5", "_plus7", "", ""),
        (-1, -1, -1, -1, 256, 256), (-1, -1, -1, -1, 2, 2), (-1, -1, -1, -1, 1, 1),
        _SIZES_6, _RATIOS_6, (-1,) * 6),
}


MXNET_NETS = ("ssd-300-vgg16", "ssd-512-vgg16", "ssd-300-resnet50")


def num_anchors_per_position(sizes, ratios) -> int:
    """MultiBoxPrior's anchors per feature-map position: sizes + ratios - 1."""
    return len(sizes) + len(ratios) - 1


def _scaled(n: int, width: float) -> int:
    return max(1, int(round(n * width)))


def _conv_relu(data, num_filter, name, relu_name, kernel=(3, 3), pad=(1, 1), **kw):
    conv = sym.Convolution(data=data, kernel=kernel, pad=pad, num_filter=num_filter,
                           name=name, **kw)
    return sym.Activation(data=conv, act_type="relu", name=relu_name)


def vgg16_reduced(width: float = 1.0) -> dict:
    """VGG16-reduced's feature outputs by name (relu4_3, relu7)."""
    x = sym.Variable("data")
    out = {}
    blocks = ((1, 2, 64), (2, 2, 128), (3, 3, 256), (4, 3, 512), (5, 3, 512))
    for stage, convs, filters in blocks:
        for k in range(1, convs + 1):
            x = _conv_relu(x, _scaled(filters, width), f"conv{stage}_{k}", f"relu{stage}_{k}")
        out[f"relu{stage}_{convs}"] = x
        if stage < 5:
            extra = {"pooling_convention": "full"} if stage == 3 else {}
            x = sym.Pooling(data=x, pool_type="max", kernel=(2, 2), stride=(2, 2),
                            name=f"pool{stage}", **extra)
    x = sym.Pooling(data=x, pool_type="max", kernel=(3, 3), stride=(1, 1), pad=(1, 1),
                    name="pool5")
    x = _conv_relu(x, _scaled(1024, width), "fc6", "relu6", pad=(6, 6), dilate=(6, 6))
    out["relu7"] = _conv_relu(x, _scaled(1024, width), "fc7", "relu7", kernel=(1, 1),
                              pad=(0, 0))
    return out


def resnet_sums(depth: int, width: float = 1.0) -> dict:
    """ResNet-``depth`` v2's residual sums by MXNet's names (_plus0 ...).

    Built as the zoo's resnet-``depth`` at 224 (MXNet's SSD passes
    3,224,224 for the structure); the unused classifier head is left out
    of the SSD graph because nothing reads it."""
    units, filters, bottle = _resnet.stage_config(depth, (3, 224, 224))
    filters = [_scaled(f, width) for f in filters]
    body = _resnet.resnet(units, filters, 1000, (3, 224, 224), bottle, 2)
    internals = body.get_internals()
    names = internals.list_outputs()
    # the residual sums, in build order: one per unit
    sums = [n for n in names if n.startswith("elemwise_add") and n.endswith("_output")]
    if len(sums) != sum(units):
        raise SymgraphError(f"SSD resnet{depth}: expected {sum(units)} residual sums, "
                            f"found {len(sums)}")
    # MXNet names the k-th sum _plus{k}: its SSD heads are named after it
    return {f"_plus{k}": internals[n] for k, n in enumerate(sums)}


def resnet50(width: float = 1.0) -> dict:
    """ResNet-50 v2's residual sums (_plus0 ... _plus15), MXNet's SSD base."""
    return resnet_sums(50, width)


def resnet18(width: float = 1.0) -> dict:
    """ResNet-18 v2's residual sums (_plus0 ... _plus7)."""
    return resnet_sums(18, width)


_BASES = {"vgg16_reduced": vgg16_reduced, "resnet50": resnet50, "resnet18": resnet18}


def feature_layers(cfg: SSDConfig, width: float = 1.0) -> list:
    """``[(name, symbol)]``: the feature maps SSD predicts from, base-net
    outputs then extras, with the names MXNet's heads are named after."""
    base = _BASES[cfg.base](width)
    layers = []
    for k, (src, nf, s, p) in enumerate(zip(cfg.from_layers, cfg.num_filters, cfg.strides,
                                            cfg.pads)):
        if src:
            layers.append((src, base[src]))
            continue
        prev = layers[-1][1]
        num_1x1 = _scaled(max(cfg.min_filter, nf // 2), width)
        name = f"multi_feat_{k}_conv"
        x = _conv_relu(prev, num_1x1, f"{name}_1x1_conv", f"{name}_1x1_relu", kernel=(1, 1),
                       pad=(0, 0))
        x = _conv_relu(x, _scaled(nf, width), f"{name}_3x3_conv", f"{name}_3x3_relu",
                       kernel=(3, 3), pad=(p, p), stride=(s, s))
        layers.append((f"{name}_3x3_relu", x))
    return layers


def _constant(value) -> str:
    """A variable's ``__init__`` hint: MXNet's ``mx.init.Constant(value).dumps()``."""
    return json.dumps(["constant", {"value": value}])


def _tuple_text(values) -> str:
    return "(" + ",".join(str(v) for v in values) + ")"


def multibox_heads(layers, cfg: SSDConfig, num_classes: int, steps, width: float = 1.0):
    """(loc_preds (N, 4A), cls_preds (N, classes + 1, A), anchors (1, A, 4))."""
    classes = num_classes + 1  # class 0 is the background
    locs, clss, anchors = [], [], []
    for k, (src, layer) in enumerate(layers):
        if cfg.normalizations[k] > 0:
            layer = sym.L2Normalization(data=layer, mode="channel", name=f"{src}_norm")
            channels = _scaled(cfg.num_filters[k], width)
            scale = sym.Variable(f"{src}_scale", shape=(1, channels, 1, 1),
                                 init=_constant(cfg.normalizations[k]),
                                 wd_mult=0.1)
            layer = sym.broadcast_mul(lhs=scale, rhs=layer)
        per_pos = num_anchors_per_position(cfg.sizes[k], cfg.ratios[k])
        for kind, depth, out in (("loc", 4, locs), ("cls", classes, clss)):
            bias = sym.Variable(f"{src}_{kind}_pred_conv_bias",
                                init=_constant(0.0), lr_mult=2.0)
            pred = sym.Convolution(data=layer, bias=bias, kernel=(3, 3), stride=(1, 1),
                                   pad=(1, 1), num_filter=per_pos * depth,
                                   name=f"{src}_{kind}_pred_conv")
            pred = sym.transpose(pred, axes=(0, 2, 3, 1))
            out.append(sym.Flatten(data=pred))
        step = (steps[k], steps[k]) if steps else (-1.0, -1.0)
        prior = sym._contrib_MultiBoxPrior(layer, sizes=_tuple_text(cfg.sizes[k]),
                                           ratios=_tuple_text(cfg.ratios[k]), clip=False,
                                           steps=_tuple_text(step), name=f"{src}_anchors")
        anchors.append(sym.Flatten(data=prior))
    loc_preds = sym.Concat(*locs, num_args=len(locs), dim=1, name="multibox_loc_pred")
    cls_preds = sym.Concat(*clss, num_args=len(clss), dim=1)
    cls_preds = sym.Reshape(data=cls_preds, shape=(0, -1, classes))
    cls_preds = sym.transpose(cls_preds, axes=(0, 2, 1), name="multibox_cls_pred")
    anchor_boxes = sym.Concat(*anchors, num_args=len(anchors), dim=1)
    anchor_boxes = sym.Reshape(data=anchor_boxes, shape=(0, -1, 4), name="multibox_anchors")
    return loc_preds, cls_preds, anchor_boxes


def get_symbol(name: str, num_classes: int = 20, image_shape=None, mode: str = "train",
               nms_thresh: float = 0.5, force_suppress: bool = False, nms_topk: int = 400,
               width: float = 1.0) -> sym.Symbol:
    """The SSD ``name`` (a key of CONFIGS) as a training or deploy symbol."""
    cfg = CONFIGS[name]
    if mode not in ("train", "deploy"):
        raise SymgraphError(f"SSD mode must be 'train' or 'deploy', got {mode!r}")
    if not width > 0:
        raise SymgraphError(f"SSD width must be positive, got {width!r}")
    height = cfg.nominal if image_shape is None else int(image_shape[1])
    steps = [s / cfg.nominal for s in cfg.steps] if cfg.steps and height == cfg.nominal \
        else []
    layers = feature_layers(cfg, width)
    loc_preds, cls_preds, anchors = multibox_heads(layers, cfg, num_classes, steps, width)
    det_args = dict(nms_threshold=nms_thresh, force_suppress=force_suppress,
                    variances=_VARIANCES, nms_topk=nms_topk)
    if mode == "deploy":
        cls_prob = sym.softmax(data=cls_preds, axis=1, name="cls_prob")
        return sym._contrib_MultiBoxDetection(cls_prob, loc_preds, anchors, name="detection",
                                              **det_args)
    label = sym.Variable("label")
    target = sym._contrib_MultiBoxTarget(
        anchors, label, cls_preds, overlap_threshold=0.5, ignore_label=-1,
        negative_mining_ratio=3, minimum_negative_samples=0, negative_mining_thresh=0.5,
        variances=_VARIANCES, name="multibox_target")
    loc_target, loc_mask, cls_target = target[0], target[1], target[2]
    cls_prob = sym.SoftmaxOutput(data=cls_preds, label=cls_target, ignore_label=-1,
                                 use_ignore=True, grad_scale=1.0, multi_output=True,
                                 normalization="valid", name="cls_prob")
    loc_loss_ = sym.smooth_l1(data=loc_mask * (loc_preds - loc_target), scalar=1.0,
                              name="loc_loss_")
    loc_loss = sym.MakeLoss(loc_loss_, grad_scale=1.0, normalization="valid",
                            name="loc_loss")
    cls_label = sym.MakeLoss(data=cls_target, grad_scale=0, name="cls_label")
    det = sym._contrib_MultiBoxDetection(cls_prob, loc_preds, anchors, name="detection",
                                         **det_args)
    det = sym.MakeLoss(data=det, grad_scale=0, name="det_out")
    return sym.Group([cls_prob, loc_loss, cls_label, det])
