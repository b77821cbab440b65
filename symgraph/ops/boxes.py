"""Bounding-box coding as MXNet 1.9.1's ``_contrib_box_decode``
(src/operator/contrib/bounding_box-inl.h, ``box_decode``), which GluonCV's
detection exports (SSD, YOLO, Faster R-CNN) hold.

``data`` (B, N, 4) holds predicted offsets (dx, dy, dw, dh) per anchor;
``anchors`` (1, N, 4) (any shape of rank >= 3 ending in 4 with N * 4
elements, read as (1, N, 4)) holds the anchors as corners (xmin, ymin,
xmax, ymax, ``format='corner'``) or centres (x, y, width, height,
``format='center'``, the default). With the anchor's centre (ax, ay) and
size (aw, ah)::

    ox = dx * std0 * aw + ax          oy = dy * std1 * ah + ay
    ow = exp(min(dw * std2, clip)) * aw / 2    (min only when clip > 0)
    oh = exp(min(dh * std3, clip)) * ah / 2
    out = (ox - ow, oy - oh, ox + ow, oy + oh)   (corners)

MXNet gives both inputs a zero gradient (``MakeZeroGradNodes``); so does
symgraph (none flows).
"""
from __future__ import annotations

import jax.numpy as jnp

from ..errors import ShapeError
from .registry import Attr, OpDef, Sample, choice_attr, float_attr, numel, register


def _box_decode_shape(p, s):
    data, anchors = s
    if data is not None:
        data = tuple(data)
        if len(data) != 3 or data[2] != 4:
            raise ShapeError(f"data {data} must be (batch, anchors, 4): the predicted "
                             f"offsets of each anchor")
    if anchors is not None:
        anchors = tuple(anchors)
        if len(anchors) < 3 or anchors[-1] != 4:
            raise ShapeError(f"anchors {anchors} must be (1, anchors, 4) (rank >= 3, last "
                             f"dimension 4)")
        if data is not None and numel(anchors) != data[1] * 4:
            raise ShapeError(f"anchors {anchors} must hold one box for each of the "
                             f"{data[1]} anchors of data {data}: (1, {data[1]}, 4)")
    if data is None:
        return s, [None]
    return s, [data]


def _box_decode(p, x, anchors):
    a = anchors.reshape(1, x.shape[1], 4)
    ax, ay, aw, ah = a[..., 0], a[..., 1], a[..., 2], a[..., 3]
    if p.format == "corner":  # (xmin, ymin, xmax, ymax) -> centre and size
        aw, ah = aw - ax, ah - ay
        ax, ay = ax + aw * 0.5, ay + ah * 0.5
    dt = x.dtype
    std = [jnp.asarray(v, dt) for v in (p.std0, p.std1, p.std2, p.std3)]
    ox = x[..., 0] * std[0] * aw + ax
    oy = x[..., 1] * std[1] * ah + ay
    dw, dh = x[..., 2] * std[2], x[..., 3] * std[3]
    if p.clip > 0:
        clip = jnp.asarray(p.clip, dt)
        dw, dh = jnp.minimum(dw, clip), jnp.minimum(dh, clip)
    ow, oh = jnp.exp(dw) * aw * 0.5, jnp.exp(dh) * ah * 0.5
    return jnp.stack([ox - ow, oy - oh, ox + ow, oy + oh], axis=-1).astype(dt)


def _std(k):
    return Attr(float_attr, 1.0, f"the scale of the {k} encoded value (multiplied in)")


register(OpDef(
    name="_contrib_box_decode", arguments=("data", "anchors"),
    attrs={"std0": _std("1st"), "std1": _std("2nd"), "std2": _std("3rd"),
           "std3": _std("4th"),
           "clip": Attr(float_attr, -1.0, "if > 0, the width and height offsets are clipped "
                                          "to it before the exp"),
           "format": Attr(choice_attr("corner", "center"), "center",
                          "the anchors' encoding: corner (xmin, ymin, xmax, ymax) or center "
                          "(x, y, width, height)")},
    lower=lambda p, ctx, x, anchors: _box_decode(p, x, anchors),
    infer_shape=_box_decode_shape, category="opaque", family="other",
    per_sample=True,  # anchors are shared by every sample
    flops=lambda p, ins, outs: 4 * numel(outs[0]),
    gradient=lambda g, node, og: [None, None],
    samples=[Sample({}, [(2, 3, 4), (1, 3, 4)], grad=False),
             Sample({"format": "corner", "std0": 0.1, "std1": 0.1, "std2": 0.2,
                     "std3": 0.2}, [(1, 5, 4), (1, 5, 4)], grad=False),
             Sample({"clip": 0.5, "format": "center"}, [(3, 2, 4), (1, 1, 2, 4)],
                    high=2.0, grad=False)],
    doc="Decodes predicted offsets data (B, N, 4) against anchors (1, N, 4), given as "
        "corners or centres (format), into corner boxes (xmin, ymin, xmax, ymax): centre "
        "offsets scaled by std0/std1 and the anchor's size, width and height by "
        "exp(std2/std3 * offset), clipped first when clip > 0. Zero gradient, as MXNet."))
