"""MXNet 1.9.1's box ops and ROI pooling (src/operator/contrib/
bounding_box-inl.h, roi_align.cc, src/operator/roi_pooling.cc), as its CPU
kernels compute them, lowered to fixed-size XLA programs (the MultiBox ops
are in ops/multibox.py):

``_contrib_box_nms``
    Per batch (all leading axes), the boxes whose score is above
    ``valid_thresh`` (and, with ``id_index``, whose class is not
    ``background_id``) sorted by score (stable), the first ``topk``
    suppressed greedily (IoU > overlap_thresh), the survivors packed to the
    front and -1 rows after; a hidden output holds each output row's
    (flattened) input row, -1 for none. Its gradient copies each output
    row's gradient back to that input row (coordinates as given, whatever
    the formats), as MXNet.
``_contrib_box_iou``
    IoU of every lhs box with every rhs box: shape lhs[:-1] + rhs[:-1].

``ROIPooling`` (src/operator/roi_pooling.cc)
    Max pooling of each roi [batch_index, x1, y1, x2, y2] (scaled by
    ``spatial_scale``, rounded half away from zero) into ``pooled_size``
    bins; an empty bin or a batch index outside the batch gives 0. A hidden
    output holds each bin's first maximum (flat index into data, -1 for
    none); the gradient adds dy there, as MXNet.
``_contrib_ROIAlign`` (src/operator/contrib/roi_align.cc)
    The average of bilinear samples per bin (``sample_ratio`` per axis, or
    ceil(roi size / pooled size) per roi: a window of 2 * size + 6 samples
    placed where the map is holds every sample that lands on it, so the
    program has a fixed size), ``position_sensitive`` and ``aligned`` as
    MXNet. A batch index outside the batch gives 0 (MXNet leaves the roi
    unwritten or reads past the batch); an aligned roi of no positive size
    gives 0 (MXNet aborts). The gradient is the transpose of the sampling.

The output of box_iou carries no gradient (MXNet writes zeros): its
gradient rule gives none and its lowering stops it; neither do the rois of
ROIPooling and ROIAlign.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..errors import ShapeError
from .backward import register_backward
from .indexing import _vjp_into
# importing multibox also registers the MultiBox ops
from .multibox import _f32, _no_gradient, _shape
from .registry import (Attr, OpDef, Sample, bool_attr, choice_attr, float_attr, int_attr,
                       numel, register, shape_attr)
from ..util import short_repr


# --------------------------------------------------------------------------
# box_nms
# --------------------------------------------------------------------------
_FORMATS = ("corner", "center")


def _nms_infer(p, s):
    d = _shape(s[0])
    if d is None:
        return s, [None, None]
    if len(d) < 2:
        raise ShapeError(f"data {d} must be (..., num_boxes, width): rank 2 or more")
    width = d[-1]
    need = 6 if p.id_index >= 0 else 5
    if width < need:
        raise ShapeError(f"data {d}: rows of {width} elements, need at least {need} "
                         f"(score, 4 coordinates{', class' if p.id_index >= 0 else ''})")
    cs, ce = p.coord_start, p.coord_start + 3
    if not (0 <= cs and ce < width):
        raise ShapeError(f"coord_start={cs}: coordinates {cs}..{ce} outside rows of {width}")
    if not 0 <= p.score_index < width or cs <= p.score_index <= ce:
        raise ShapeError(f"score_index={p.score_index} must lie in [0, {width}) outside "
                         f"the coordinates {cs}..{ce}")
    if p.id_index >= 0 and (p.id_index >= width or cs <= p.id_index <= ce
                            or p.id_index == p.score_index):
        raise ShapeError(f"id_index={p.id_index} must lie in [0, {width}) apart from the "
                         f"coordinates {cs}..{ce} and score_index={p.score_index}")
    return s, [d, d[:-1] + (1,)]


def _extent(a, b, center):
    """MXNet's Intersect along one axis; a, b: (start, end) or (centre, size)."""
    if center:
        al, ar = a[0] - a[1] / 2, a[0] + a[1] / 2
        bl, br = b[0] - b[1] / 2, b[0] + b[1] / 2
    else:
        al, ar, bl, br = a[0], a[1], b[0], b[1]
    w = jnp.minimum(ar, br) - jnp.maximum(al, bl)
    return jnp.where(w > 0, w, jnp.zeros((), w.dtype))


def _area(box, center):
    w, h = (box[..., 2], box[..., 3]) if center else (box[..., 2] - box[..., 0],
                                                       box[..., 3] - box[..., 1])
    return jnp.where((w < 0) | (h < 0), jnp.zeros((), w.dtype), w * h)


def _intersection(a, b, center):
    return (_extent((a[..., 0], a[..., 2]), (b[..., 0], b[..., 2]), center)
            * _extent((a[..., 1], a[..., 3]), (b[..., 1], b[..., 3]), center))


def _convert(box, to_center):
    """corner <-> center, leaving a box whose first coordinate is negative."""
    x0, x1, x2, x3 = (box[:, i] for i in range(4))
    if to_center:
        new = jnp.stack([(x0 + x2) / 2, (x1 + x3) / 2, x2 - x0, x3 - x1], axis=1)
    else:
        new = jnp.stack([x0 - x2 / 2, x1 - x3 / 2, x0 + x2 / 2, x1 + x3 / 2], axis=1)
    return jnp.where((x0 < 0)[:, None], box, new)


@jax.custom_vjp
def _copy_gradient(x, y):
    """y, with the gradient of x: MXNet's box_nms backward copies each
    output row's gradient whatever the format conversion made of it."""
    return y


_copy_gradient.defvjp(lambda x, y: (y, None), lambda _, g: (g, jnp.zeros_like(g)))


def _nms_records(p, data):
    """(B, N) int32: each output row's flattened input row, -1 for none."""
    b, n, _ = data.shape
    dtype = data.dtype
    center = p.in_format == "center"
    topk = n if p.topk < 0 else min(n, p.topk)
    idx = jnp.arange(n, dtype=jnp.int32)
    score = data[..., p.score_index]
    valid = score > _f32(p.valid_thresh, dtype)
    if p.id_index >= 0:
        valid = valid & (data[..., p.id_index] != jnp.asarray(p.background_id, dtype))

    def one(rows, ok):
        count = jnp.sum(ok.astype(jnp.int32))
        _, _, order = lax.sort((~ok, -rows[:, p.score_index], idx), num_keys=2,
                               is_stable=True)
        s = rows[order]
        boxes = s[:, p.coord_start:p.coord_start + 4]
        areas = _area(boxes, center)
        cls = s[:, p.id_index].astype(jnp.int32) if p.id_index >= 0 else None
        thresh = _f32(p.overlap_thresh, dtype)
        inside = (idx < count) & (idx < topk)

        def suppress(i, alive):
            inter = _intersection(boxes[i], boxes, center)
            iou = inter / (areas[i] + areas - inter)
            hit = alive[i] & (idx > i) & (iou > thresh)
            if p.id_index >= 0 and not p.force_suppress:
                hit = hit & (cls == cls[i])
            return alive & ~hit

        alive = lax.fori_loop(0, topk, suppress, inside)
        # the survivors packed to the front, in score order
        _, pos = lax.sort((~alive, idx), num_keys=1, is_stable=True)
        kept = idx < jnp.sum(alive.astype(jnp.int32))
        return jnp.where(kept, order[pos], -1)

    rec = jax.vmap(one)(data, valid)
    base = (jnp.arange(b, dtype=jnp.int32) * n)[:, None]
    return jnp.where(rec >= 0, rec + base, -1)


def _nms_lower(p, ctx, x):
    shape = x.shape
    n, w = shape[-2], shape[-1]
    b = int(np.prod(shape[:-2], dtype=np.int64))
    data = x.reshape(b, n, w)
    if p.topk == 0:
        rec = jnp.arange(b * n, dtype=jnp.int32).reshape(b, n)
    else:
        rec = _nms_records(p, lax.stop_gradient(data))
    flat = x.reshape(-1, w)
    safe = jnp.maximum(rec.reshape(-1), 0)
    got = rec.reshape(-1)[:, None] >= 0
    out = jnp.where(got, flat[safe], jnp.asarray(-1, x.dtype))
    if p.topk != 0 and p.in_format != p.out_format:
        cs = p.coord_start
        conv = _convert(lax.stop_gradient(out[:, cs:cs + 4]), p.out_format == "center")
        new = lax.stop_gradient(out.at[:, cs:cs + 4].set(conv))
        out = _copy_gradient(out, new)
    return out.reshape(shape), rec.astype(x.dtype).reshape(shape[:-1] + (1,))


_nms = register(OpDef(
    name="_contrib_box_nms",
    aliases=("box_nms", "_contrib_box_non_maximum_suppression", "_npx_box_nms"),
    outputs=("output", "record"), visible_outputs=1,
    attrs={"overlap_thresh": Attr(float_attr, 0.5, "IoU above which a lower score is "
                                                   "suppressed"),
           "valid_thresh": Attr(float_attr, 0.0, "keep only boxes scoring above it"),
           "topk": Attr(int_attr, -1, "suppress among the k best per batch; < 0: all; 0: "
                                      "the input unchanged"),
           "coord_start": Attr(int_attr, 2, "where the 4 coordinates start in a row"),
           "score_index": Attr(int_attr, 1, "where the score is in a row"),
           "id_index": Attr(int_attr, -1, "where the class is in a row; -1: none"),
           "background_id": Attr(int_attr, -1, "the class ignored (with id_index)"),
           "force_suppress": Attr(bool_attr, False, "suppress across classes"),
           "in_format": Attr(choice_attr(*_FORMATS), "corner", "corner [xmin, ymin, xmax, "
                                                              "ymax] or center [x, y, w, h]"),
           "out_format": Attr(choice_attr(*_FORMATS), "corner", "the output's encoding")},
    lower=_nms_lower, infer_shape=_nms_infer, infer_type=lambda p, t, n: (t, [t[0]] * 2),
    category="opaque", flops=lambda p, ins, outs: 20 * numel(ins[0]) * max(1, ins[0][-2]),
    samples=[Sample({}, [(6, 6)], low=0.0, high=1.0),
             Sample({"overlap_thresh": 0.2, "id_index": 0, "topk": 4, "valid_thresh": 0.3},
                    [(2, 5, 6)], low=0.0, high=1.0),
             Sample({"in_format": "center", "out_format": "corner", "coord_start": 1,
                     "score_index": 0, "overlap_thresh": 0.1}, [(2, 2, 4, 5)],
                    low=0.0, high=1.0),
             Sample({"topk": 0}, [(3, 6)])],
    doc="Non-maximum suppression per batch (all axes before the last two): boxes "
        "scoring above valid_thresh (and, with id_index, not of background_id) sorted "
        "by score, the first topk suppressed greedily at IoU > overlap_thresh (per class "
        "unless force_suppress), the survivors packed first and -1 rows after; boxes "
        "converted from in_format to out_format. The gradient copies each output row's "
        "gradient back to its input row (MXNet's, from the hidden record output)."))


def _nms_backward(p, ctx, og, ins, outs):
    dy, x, rec = og[0], ins[0], outs[0]
    w = x.shape[-1]
    r = rec.reshape(-1).astype(jnp.int32)
    rows = jnp.where(r >= 0, r, x.size // w)        # -1 rows go past the end: dropped
    dx = jnp.zeros((x.size // w, w), dy.dtype).at[rows].set(dy.reshape(-1, w), mode="drop")
    return [dx.reshape(x.shape)]


# dx[record[i]] = dy[i] (rows without a record get 0); reads the data's shape only
register_backward(_nms, reads_ograds=(0,), reads_inputs=(0,), reads_outputs=(1,),
                  inputs_for_shape_only=True, lower=_nms_backward,
                  infer_shape=lambda p, s: (s, [s[1]]), infer_type=lambda p, t, n: (t, [t[0]]),
                  flops=lambda p, ins, outs: 0)


# --------------------------------------------------------------------------
# box_iou
# --------------------------------------------------------------------------
def _iou_infer(p, s):
    lhs, rhs = (_shape(x) for x in s)
    for name, d in (("lhs", lhs), ("rhs", rhs)):
        if d is not None and (len(d) < 2 or d[-1] != 4):
            raise ShapeError(f"{name} {d} must be (..., 4) of rank 2 or more: one box per "
                             f"row")
    if lhs is None or rhs is None:
        return s, [None]
    return s, [lhs[:-1] + rhs[:-1]]


def _iou_lower(p, ctx, lhs, rhs):
    center = p.format == "center"
    a = lax.stop_gradient(lhs).reshape(-1, 1, 4)
    b = lax.stop_gradient(rhs).reshape(1, -1, 4)
    inter = _intersection(a, b, center)
    zero = jnp.zeros((), inter.dtype)
    union = _area(a, center) + _area(b, center) - inter
    iou = jnp.where(inter <= 0, zero, inter / jnp.where(inter <= 0, 1, union))
    return iou.reshape(lhs.shape[:-1] + rhs.shape[:-1])


register(OpDef(
    name="_contrib_box_iou", aliases=("box_iou", "_npx_box_iou"),
    arguments=("lhs", "rhs"),
    attrs={"format": Attr(choice_attr(*_FORMATS), "corner", "corner [xmin, ymin, xmax, "
                                                            "ymax] or center [x, y, w, h]")},
    lower=_iou_lower, infer_shape=_iou_infer, category="opaque",
    flops=lambda p, ins, outs: 12 * numel(outs[0]), gradient=_no_gradient(2),
    samples=[Sample({}, [(3, 4), (2, 4)], low=0.0, high=1.0),
             Sample({"format": "center"}, [(2, 2, 4), (3, 4)], low=0.0, high=1.0),
             Sample({}, [(2, 4), (1, 2, 4)])],
    doc="IoU of every lhs box with every rhs box (corner or center encoded): shape "
        "lhs[:-1] + rhs[:-1]; 0 where they do not intersect. No gradient."))


# --------------------------------------------------------------------------
# ROIPooling
# --------------------------------------------------------------------------
def pooled_size_attr(v):
    s = shape_attr(v)
    if len(s) != 2 or min(s) < 1:
        raise ValueError(f"expected (height, width) of two positive ints, got {short_repr(v)}")
    return s


def scale_attr(v):
    f = float_attr(v)
    if not 0.0 <= f <= 1.0:
        raise ValueError(f"spatial_scale={f} must lie in [0, 1], as MXNet")
    return f


def _roi_pool_infer(p, s):
    d, r = _shape(s[0]), _shape(s[1])
    if d is not None and len(d) != 4:
        raise ShapeError(f"data {d} must be (batch, channels, height, width)")
    if r is not None and (len(r) != 2 or r[1] != 5):
        raise ShapeError(f"rois {r} must be (num_rois, 5): [batch_index, x1, y1, x2, y2]")
    if d is None or r is None:
        return s, [None, None]
    out = (r[0], d[1]) + tuple(p.pooled_size)
    return s, [out, out]


def _round_half_away(v):
    t = jnp.trunc(v)
    return t + jnp.where(jnp.abs(v - t) >= 0.5, jnp.sign(v), 0)


def _roi_pool_index(p, data, rois):
    """(R, C, PH, PW) int32: the flat index into data of each bin's first
    maximum, -1 for an empty bin or a bad batch index; and whether the bin
    found a value above -FLT_MAX."""
    b, c, h, w = data.shape
    ph, pw = p.pooled_size
    dtype = data.dtype
    scale = _f32(p.spatial_scale, dtype)
    batch = rois[:, 0].astype(jnp.int32)
    bad = (batch < 0) | (batch >= b)
    x1, y1, x2, y2 = (_round_half_away(rois[:, k] * scale).astype(jnp.int32)
                      for k in range(1, 5))
    roi_h = jnp.maximum(y2 - y1 + 1, 1)
    roi_w = jnp.maximum(x2 - x1 + 1, 1)
    bin_h = roi_h.astype(dtype) / jnp.asarray(ph, dtype)
    bin_w = roi_w.astype(dtype) / jnp.asarray(pw, dtype)

    def edges(n_bins, size, start, length):
        i = jnp.arange(n_bins, dtype=dtype)
        lo = jnp.floor(i[None, :] * length[:, None]).astype(jnp.int32) + start[:, None]
        hi = jnp.ceil((i[None, :] + 1) * length[:, None]).astype(jnp.int32) + start[:, None]
        return jnp.clip(lo, 0, size), jnp.clip(hi, 0, size)

    hs, he = edges(ph, h, y1, bin_h)     # (R, PH)
    ws, we = edges(pw, w, x1, bin_w)     # (R, PW)
    floor_val = jnp.asarray(-np.finfo(np.float32).max, dtype)
    hh = jnp.arange(h, dtype=jnp.int32)
    ww = jnp.arange(w, dtype=jnp.int32)

    def one(args):
        k, hs_r, he_r, ws_r, we_r = args
        x = data[k]                                                  # (C, H, W)
        in_w = (ww[None, :] >= ws_r[:, None]) & (ww[None, :] < we_r[:, None])   # (PW, W)
        in_h = (hh[None, :] >= hs_r[:, None]) & (hh[None, :] < he_r[:, None])   # (PH, H)
        xw = jnp.where(in_w[None, :, None, :], x[:, None, :, :], floor_val)  # (C, PW, H, W)
        row_max = jnp.max(xw, axis=-1)                               # (C, PW, H)
        row_arg = jnp.argmax(xw, axis=-1).astype(jnp.int32)
        xh = jnp.where(in_h[None, :, None, :], row_max[:, None, :, :], floor_val)  # (C,PH,PW,H)
        best = jnp.max(xh, axis=-1)
        at_h = jnp.argmax(xh, axis=-1).astype(jnp.int32)              # (C, PH, PW)
        at_w = jnp.take_along_axis(jnp.broadcast_to(row_arg[:, None], xh.shape),
                                   at_h[..., None], axis=-1)[..., 0]
        found = best > floor_val
        return at_h * w + at_w, found

    safe = jnp.clip(batch, 0, b - 1)
    pos, found = lax.map(one, (safe, hs, he, ws, we))
    empty = (he <= hs)[:, :, None] | (we <= ws)[:, None, :]          # (R, PH, PW)
    skip = empty[:, None] | bad[:, None, None, None]
    base = (safe * c)[:, None, None, None] + jnp.arange(c, dtype=jnp.int32)[None, :, None, None]
    index = jnp.where(skip | ~found, -1, base * (h * w) + pos)
    return index, skip


def _roi_pool_lower(p, ctx, data, rois):
    index, skip = _roi_pool_index(p, lax.stop_gradient(data), lax.stop_gradient(rois))
    flat = data.reshape(-1)
    got = jnp.where(index >= 0, flat[jnp.maximum(index, 0)],
                    jnp.asarray(-np.finfo(np.float32).max, data.dtype))
    out = jnp.where(skip, jnp.zeros((), data.dtype), got)
    return out, index


_roi_pool = register(OpDef(
    name="ROIPooling", arguments=("data", "rois"), outputs=("output", "maxidx"),
    visible_outputs=1,
    attrs={"pooled_size": Attr(pooled_size_attr, doc="(height, width) of the output"),
           "spatial_scale": Attr(scale_attr, doc="the feature map's size over the image's "
                                                 "(the rois are in image coordinates)")},
    lower=_roi_pool_lower, infer_shape=_roi_pool_infer,
    infer_type=lambda p, t, n: (t, [t[0], "int32"]), category="opaque", family="pooling",
    flops=lambda p, ins, outs: numel(outs[0]) * max(1, ins[0][2] * ins[0][3]),
    samples=[Sample({"pooled_size": (2, 2), "spatial_scale": 1.0}, [(2, 3, 6, 5), (4, 5)],
                    low=0.0, high=4.0),
             Sample({"pooled_size": "(3, 2)", "spatial_scale": 0.5}, [(1, 2, 5, 7), (3, 5)],
                    low=0.0, high=9.0)],
    doc="Max pooling of each region of interest (rois (R, 5): [batch_index, x1, y1, x2, "
        "y2] in image coordinates, scaled by spatial_scale and rounded) into pooled_size "
        "bins: (R, channels, PH, PW); an empty bin or a batch index outside the batch "
        "gives 0. The gradient goes to each bin's first maximum (the hidden maxidx "
        "output); none to the rois."))


def _roi_pool_backward(p, ctx, og, ins, outs):
    dy, x, index = og[0], ins[0], outs[0]
    idx = index.reshape(-1).astype(jnp.int32)
    where = jnp.where(idx >= 0, idx, x.size)     # no maximum: dropped
    dx = jnp.zeros(x.size, dy.dtype).at[where].add(dy.reshape(-1), mode="drop")
    return [dx.reshape(x.shape), None]


# dx[maxidx] += dy; reads the data's shape only, the rois not at all
register_backward(_roi_pool, reads_ograds=(0,), reads_inputs=(0,), reads_outputs=(1,),
                  inputs_for_shape_only=True, no_grad=(1,), lower=_roi_pool_backward,
                  infer_shape=lambda p, s: (s, [s[1]]), infer_type=lambda p, t, n: (t, [t[0]]),
                  flops=lambda p, ins, outs: numel(ins[0]))


# --------------------------------------------------------------------------
# ROIAlign
# --------------------------------------------------------------------------
def _roi_align_infer(p, s):
    d, r = _shape(s[0]), _shape(s[1])
    ph, pw = p.pooled_size
    if d is not None and len(d) != 4:
        raise ShapeError(f"data {d} must be (batch, channels, height, width)")
    if d is not None and p.position_sensitive and d[1] % (ph * pw):
        raise ShapeError(f"data {d}: with position_sensitive the {d[1]} channels must be a "
                         f"multiple of pooled height x width = {ph * pw}")
    if r is not None and (len(r) != 2 or r[1] != 5):
        raise ShapeError(f"rois {r} must be (num_rois, 5): [batch_index, x1, y1, x2, y2]")
    if d is None or r is None:
        return s, [None]
    c = d[1] // (ph * pw) if p.position_sensitive else d[1]
    return s, [(r[0], c, ph, pw)]


def _align_weights(start, bin_size, grid, n_bins, size, window, dynamic):
    """(n_bins, size): the summed bilinear weights of each bin's samples
    along one axis (MXNet's sample positions, clamping and out-of-map rule);
    sampling is separable, so the 2-D weights are the outer product."""
    dtype = start.dtype
    base = start + jnp.arange(n_bins, dtype=dtype) * bin_size          # (n_bins,)
    k = jnp.arange(window, dtype=jnp.int32)
    if dynamic:  # only the samples near the map count: start the window there
        step = bin_size / grid.astype(dtype)
        first = jnp.floor((-1 - base) / step - 0.5).astype(jnp.int32) - 1
        iy = jnp.maximum(first, 0)[:, None] + k[None, :]
    else:
        iy = jnp.broadcast_to(k[None, :], (n_bins, window))
    y = base[:, None] + (iy.astype(jnp.float32) + np.float32(0.5)).astype(dtype) \
        * bin_size / grid.astype(dtype)
    valid = (iy < grid) & ~((y < -1) | (y > size))
    y = jnp.where(y <= 0, jnp.zeros((), dtype), y)
    low = y.astype(jnp.int32)
    top = low >= size - 1
    low = jnp.where(top, size - 1, low)
    high = jnp.where(top, size - 1, low + 1)
    y = jnp.where(top, low.astype(dtype), y)
    ly = y - low.astype(dtype)
    hy = 1 - ly
    cells = jnp.arange(size, dtype=jnp.int32)
    w = (hy[..., None] * (low[..., None] == cells) + ly[..., None] * (high[..., None] == cells))
    return jnp.sum(jnp.where(valid[..., None], w, jnp.zeros((), dtype)), axis=1)


def _roi_align_lower(p, ctx, data, rois):
    rois = lax.stop_gradient(rois)
    b, c_in, h, w = data.shape
    ph, pw = p.pooled_size
    dtype = data.dtype
    scale = _f32(p.spatial_scale, dtype)
    offset = jnp.asarray(0.5 if p.aligned else 0.0, dtype)
    dynamic = p.sample_ratio <= 0

    def one(roi):
        batch = roi[0].astype(jnp.int32)
        x1, y1, x2, y2 = (roi[k] * scale - offset for k in range(1, 5))
        rw, rh = x2 - x1, y2 - y1
        if not p.aligned:
            rw, rh = jnp.maximum(rw, 1), jnp.maximum(rh, 1)
        bin_h = rh / jnp.asarray(ph, dtype)
        bin_w = rw / jnp.asarray(pw, dtype)
        if dynamic:
            gh = jnp.ceil(rh / jnp.asarray(ph, dtype)).astype(jnp.int32)
            gw = jnp.ceil(rw / jnp.asarray(pw, dtype)).astype(jnp.int32)
        else:
            gh = gw = jnp.asarray(p.sample_ratio, jnp.int32)
        wy = _align_weights(y1, bin_h, gh, ph, h, 2 * h + 6 if dynamic else p.sample_ratio,
                            dynamic)
        wx = _align_weights(x1, bin_w, gw, pw, w, 2 * w + 6 if dynamic else p.sample_ratio,
                            dynamic)
        x = data[jnp.clip(batch, 0, b - 1)]
        if p.position_sensitive:
            x = x.reshape(c_in // (ph * pw), ph, pw, h, w)
            out = jnp.einsum("ph,cpqhw,qw->cpq", wy, x, wx)
        else:
            out = jnp.einsum("ph,chw,qw->cpq", wy, x, wx)
        count = (gh * gw).astype(dtype)
        ok = (batch >= 0) & (batch < b) & (gh > 0) & (gw > 0)
        return jnp.where(ok, out / jnp.where(ok, count, 1), jnp.zeros((), dtype))

    return lax.map(one, rois)


_roi_align = register(OpDef(
    name="_contrib_ROIAlign", aliases=("_npx_roi_align",), arguments=("data", "rois"),
    attrs={"pooled_size": Attr(pooled_size_attr, doc="(height, width) of the output"),
           "spatial_scale": Attr(scale_attr, doc="the feature map's size over the image's "
                                                 "(the rois are in image coordinates)"),
           "sample_ratio": Attr(int_attr, -1, "samples per bin along each axis; <= 0: "
                                              "ceil(roi size / pooled size) per roi"),
           "position_sensitive": Attr(bool_attr, False, "channel c of bin (i, j) reads "
                                                        "input channel (c * PH + i) * PW + j"),
           "aligned": Attr(bool_attr, False, "shift the rois by half a pixel (Detectron2)")},
    lower=_roi_align_lower, infer_shape=_roi_align_infer, category="opaque",
    family="pooling",
    flops=lambda p, ins, outs: numel(outs[0]) * 4 * max(1, ins[0][2] + ins[0][3]),
    samples=[Sample({"pooled_size": (2, 2), "spatial_scale": 1.0}, [(2, 3, 6, 5), (4, 5)],
                    low=0.0, high=4.0),
             Sample({"pooled_size": (2, 3), "spatial_scale": 0.5, "sample_ratio": 2,
                     "aligned": True}, [(1, 2, 5, 7), (3, 5)], low=0.0, high=9.0),
             Sample({"pooled_size": (2, 2), "spatial_scale": 1.0, "position_sensitive": True},
                    [(2, 8, 4, 4), (3, 5)], low=0.0, high=1.5)],
    doc="Average of bilinear samples per bin of each region of interest (rois (R, 5): "
        "[batch_index, x1, y1, x2, y2], scaled by spatial_scale, not rounded): (R, "
        "channels, PH, PW) (channels / (PH * PW) with position_sensitive). A roi whose "
        "batch index is outside the batch gives 0 (MXNet leaves it unwritten); with "
        "aligned, a roi of no positive size gives 0 (MXNet aborts). The gradient is the "
        "transpose of the sampling (none to the rois)."))


# linear in the data: dx = the transpose of the sampling applied to dy
register_backward(
    _roi_align, reads_inputs=(0, 1), inputs_for_shape_only=(0,), no_grad=(1,),
    lower=lambda p, ctx, og, ins, outs: [
        _vjp_into(lambda v: _roi_align_lower(p, ctx, v, ins[1]), ins[0].shape, og[0]), None],
    infer_shape=lambda p, s: (s, [s[1]]), infer_type=lambda p, t, n: (t, [t[0]]),
    flops=lambda p, ins, outs: 2 * numel(ins[0]) + numel(outs[0]))
