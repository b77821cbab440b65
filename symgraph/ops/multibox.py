"""MXNet 1.9.1's MultiBox ops (src/operator/contrib/
multibox_{prior,target,detection}.cc), as its CPU kernels compute them,
lowered to fixed-size XLA programs; box_nms, box_iou and the ROI ops are in
ops/detection.py.

``_contrib_MultiBoxPrior``
    Anchor boxes (1, H*W*(len(sizes) + len(ratios) - 1), 4) for data
    (batch, channels, H, W), corner encoded, per location first every size
    with the first ratio, then every further ratio with the first size.
``_contrib_MultiBoxTarget``
    Training targets from anchors (1, N, 4), labels (batch, L, >= 5: class,
    xmin, ymin, xmax, ymax; the first row whose class is -1 ends the list)
    and class predictions (batch, classes, N). Each ground truth first takes
    its best free anchor (the largest IoU over all free pairs, in order of
    anchor then label for ties, while one is above 1e-6); then, with
    ``overlap_threshold > 0``, every other anchor whose best IoU is above it
    is positive. With ``negative_mining_ratio > 0`` the
    ``int(positives * ratio)`` non-positive anchors whose best IoU is under
    ``negative_mining_thresh`` and whose background probability (softmax of
    cls_pred) is lowest are negatives (ties: lower anchor first), the rest
    ignored; else every non-positive anchor is negative. MXNet's CPU kernel
    reads ``minimum_negative_samples`` nowhere (only its GPU kernel does):
    accepted and unused here as there. Outputs: loc_target (batch, 4N),
    encoded by ``variances`` in float32 as MXNet; loc_mask (batch, 4N);
    cls_target (batch, N): class + 1, 0 for negatives, ``ignore_label``
    for the rest (and for every anchor of an image with no label). MXNet
    aborts when fewer anchors qualify as negatives than wanted; here all
    that qualify are taken.
``_contrib_MultiBoxDetection``
    (batch, N, 6) rows [class, score, xmin, ymin, xmax, ymax]: the anchors
    whose best foreground probability reaches ``threshold``, decoded, in
    anchor order; with ``0 < nms_threshold <= 1`` sorted by score
    (stable), cut to ``nms_topk`` (the rows past it keep their unsorted
    values with class -1, as MXNet leaves them) and suppressed greedily
    (IoU >= nms_threshold, same class unless ``force_suppress``): a
    suppressed row stays with class -1. Rows past the detections are all
    -1. ``background_id`` is read by no MXNet kernel: class 0 is the
    background.
Their outputs carry no gradient (MXNet writes zeros): their gradient rules
give none and their lowerings stop it.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..errors import ShapeError
from .registry import (Attr, OpDef, Sample, _literal, bool_attr, float_attr, int_attr, numel,
                       register)
from ..util import short_repr


# --------------------------------------------------------------------------
# attributes and helpers
# --------------------------------------------------------------------------
def _float_tuple(n=None, what=""):
    """A tuple of floats (``"(0.5, 0.25)"``, ``0.5``, ``[1, 2]``); ``n``:
    the length it must have."""
    def parse(v):
        v = _literal(v)
        if isinstance(v, (int, float, np.number)) and not isinstance(v, bool):
            v = (v,)
        if not isinstance(v, (tuple, list)) or not v or any(
                isinstance(x, bool) or not isinstance(x, (int, float, np.number)) for x in v):
            raise ValueError(f"expected a non-empty tuple of numbers such as (0.5, 0.25), "
                             f"got {short_repr(v)}")
        out = tuple(float(x) for x in v)
        if n is not None and len(out) != n:
            raise ValueError(f"expected {n} numbers{what}, got {len(out)}")
        return out
    parse.__name__ = "floats" if n is None else f"{n} floats"
    return parse


def steps_attr(v):
    s = _float_tuple(2, " (step_y, step_x)")(v)
    if s[0] * s[1] < 0:
        raise ValueError(f"steps {s}: give both steps, or neither (-1, -1), as MXNet")
    return s


def offsets_attr(v):
    o = _float_tuple(2, " (offset_y, offset_x)")(v)
    if not all(0.0 <= x <= 1.0 for x in o):
        raise ValueError(f"offsets {o} must lie in [0, 1]")
    return o


_VARIANCES = Attr(_float_tuple(4, " (x, y, w, h)"), (0.1, 0.1, 0.2, 0.2),
                  "the variances (x, y, width, height) of the box encoding")


def _f32(v, dtype):
    """A float attribute as MXNet holds it (float32), in ``dtype``."""
    return jnp.asarray(np.float32(v), dtype)


def _no_gradient(n):
    def rule(g, node, og):
        return [None] * n
    return rule


def _shape(s):
    return None if s is None else tuple(s)


# --------------------------------------------------------------------------
# MultiBoxPrior
# --------------------------------------------------------------------------
def _prior_anchors(p, height, width) -> np.ndarray:
    """(H*W*A, 4) float32 anchors, computed in float32 as MXNet's kernel."""
    f = np.float32
    step_y, step_x = (f(p.steps[0]), f(p.steps[1]))
    if p.steps[0] <= 0 or p.steps[1] <= 0:
        step_y, step_x = f(1) / f(height), f(1) / f(width)
    cy = (np.arange(height, dtype=f) + f(p.offsets[0])) * step_y        # (H,)
    cx = (np.arange(width, dtype=f) + f(p.offsets[1])) * step_x         # (W,)
    halves = []  # per anchor at a location: (half width, half height)
    first = np.sqrt(f(p.ratios[0]))
    shapes = [(f(s), first) for s in p.sizes] + [(f(p.sizes[0]), np.sqrt(f(r)))
                                                 for r in p.ratios[1:]]
    for size, ratio in shapes:
        w = size * f(height) / f(width) * ratio / f(2)
        h = size / ratio / f(2)
        halves.append((w, h))
    hw = np.array([w for w, _ in halves], f)                           # (A,)
    hh = np.array([h for _, h in halves], f)
    cy = cy[:, None, None]
    cx = cx[None, :, None]
    out = np.stack(np.broadcast_arrays(cx - hw, cy - hh, cx + hw, cy + hh), axis=-1)
    out = out.reshape(-1, 4)
    if p.clip:
        out = np.clip(out, f(0), f(1))
    return out


def _num_anchors(p):
    return len(p.sizes) + len(p.ratios) - 1


def _prior_infer(p, s):
    d = _shape(s[0])
    if d is None:
        return s, [None]
    if len(d) < 4 or d[2] < 1 or d[3] < 1:
        raise ShapeError(f"data {d} must be (batch, channels, height, width) with height "
                         f"and width of at least 1")
    return s, [(1, d[2] * d[3] * _num_anchors(p), 4)]


def _prior_lower(p, ctx, x):
    return jnp.asarray(_prior_anchors(p, x.shape[2], x.shape[3]))[None].astype(x.dtype)


register(OpDef(
    name="_contrib_MultiBoxPrior", aliases=("_npx_multibox_prior",),
    attrs={"sizes": Attr(_float_tuple(), (1.0,), "the anchor sizes (fractions of the "
                                                  "image)"),
           "ratios": Attr(_float_tuple(), (1.0,), "the aspect ratios (width / height)"),
           "clip": Attr(bool_attr, False, "clip the anchors to [0, 1]"),
           "steps": Attr(steps_attr, (-1.0, -1.0), "(step_y, step_x) between centres; "
                                                     "-1: 1 / height, 1 / width"),
           "offsets": Attr(offsets_attr, (0.5, 0.5), "(offset_y, offset_x) of the "
                                                       "centres within a step")},
    lower=_prior_lower, infer_shape=_prior_infer, category="opaque",
    flops=lambda p, ins, outs: 0, gradient=_no_gradient(1), shape_inputs=(0,),
    samples=[Sample({}, [(1, 2, 3, 4)]),
             Sample({"sizes": (0.5, 0.25), "ratios": (1, 2, 0.5), "clip": True},
                    [(2, 1, 4, 3)]),
             Sample({"sizes": "(0.3,)", "steps": "(0.2, 0.1)", "offsets": (0.25, 0.75)},
                    [(1, 1, 2, 2)])],
    doc="Anchor boxes (1, H*W*(len(sizes)+len(ratios)-1), 4) [xmin, ymin, xmax, ymax] "
        "for data (batch, channels, H, W), in MXNet's order: per location (rows, then "
        "columns) each size with the first ratio, then the first size with each further "
        "ratio. Reads the data's shape only; no gradient."))


# --------------------------------------------------------------------------
# MultiBoxTarget
# --------------------------------------------------------------------------
def _target_infer(p, s):
    a, lab, c = (_shape(x) for x in s)
    if a is not None and (len(a) != 3 or a[0] != 1 or a[1] < 1 or a[2] != 4):
        raise ShapeError(f"anchor {a} must be (1, num_anchors, 4): shared by the batch, "
                         f"[xmin, ymin, xmax, ymax]")
    if lab is not None and (len(lab) != 3 or lab[1] < 1 or lab[2] < 5):
        raise ShapeError(f"label {lab} must be (batch, num_labels, width >= 5): rows "
                         f"[class, xmin, ymin, xmax, ymax, ...]")
    if c is not None and (len(c) != 3 or c[1] < 1):
        raise ShapeError(f"cls_pred {c} must be (batch, num_classes >= 1, num_anchors)")
    if c is not None and a is not None and c[2] != a[1]:
        raise ShapeError(f"cls_pred {c} has {c[2]} anchors, anchor {a} has {a[1]}")
    if c is not None and lab is not None and c[0] != lab[0]:
        raise ShapeError(f"cls_pred {c} and label {lab} must have the same batch")
    if p.negative_mining_ratio > 0 and p.negative_mining_thresh <= 0:
        raise ShapeError(f"negative_mining_thresh={p.negative_mining_thresh} must be above 0 "
                         f"when mining negatives (negative_mining_ratio="
                         f"{p.negative_mining_ratio}), as MXNet")
    if a is None or lab is None:
        return s, [None, None, None]
    return s, [(lab[0], 4 * a[1]), (lab[0], 4 * a[1]), (lab[0], a[1])]


def _overlaps(anchors, boxes):
    """(N, L) IoU of corner boxes as MXNet's MultiBoxTarget: 0 where the
    union is 0."""
    al, at, ar, ab = (anchors[:, i, None] for i in range(4))
    gl, gt, gr, gb = (boxes[None, :, i] for i in range(4))
    zero = jnp.zeros((), anchors.dtype)
    inter = (jnp.maximum(zero, jnp.minimum(ar, gr) - jnp.maximum(al, gl))
             * jnp.maximum(zero, jnp.minimum(ab, gb) - jnp.maximum(at, gt)))
    union = (ar - al) * (ab - at) + (gr - gl) * (gb - gt) - inter
    return jnp.where(union == 0, zero, inter / jnp.where(union == 0, 1, union))


def _encode(anchors, boxes, var):
    """The loc targets of boxes against anchors, in float32 as MXNet."""
    a = anchors.astype(jnp.float32)
    g = boxes.astype(jnp.float32)
    aw, ah = a[:, 2] - a[:, 0], a[:, 3] - a[:, 1]
    ax, ay = (a[:, 0] + a[:, 2]) * 0.5, (a[:, 1] + a[:, 3]) * 0.5
    gw, gh = g[:, 2] - g[:, 0], g[:, 3] - g[:, 1]
    gx, gy = (g[:, 0] + g[:, 2]) * 0.5, (g[:, 1] + g[:, 3]) * 0.5
    v = [np.float32(x) for x in var]
    return jnp.stack([(gx - ax) / aw / v[0], (gy - ay) / ah / v[1],
                      jnp.log(gw / aw) / v[2], jnp.log(gh / ah) / v[3]], axis=-1)


def _target_one(p, anchors, label, cls_pred):
    """MultiBoxTarget for one image: anchors (N, 4), label (L, W),
    cls_pred (C, N) -> (loc_target (4N,), loc_mask (4N,), cls_target (N,))."""
    n, num_labels = anchors.shape[0], label.shape[0]
    dtype = anchors.dtype
    ends = label[:, 0] == -1
    num_valid = jnp.where(jnp.any(ends), jnp.argmax(ends), num_labels)
    valid_gt = jnp.arange(num_labels) < num_valid
    iou = _overlaps(anchors, label[:, 1:5]).astype(jnp.float32)   # MXNet compares floats
    neg_inf = jnp.float32(-jnp.inf)
    anchor_ids = jnp.arange(n, dtype=jnp.int32)
    label_ids = jnp.arange(num_labels, dtype=jnp.int32)

    # 1. every ground truth takes its best free anchor, best pairs first
    def bipartite(_, state):
        taken, gt_done, match, best_iou = state
        free = (~taken)[:, None] & (~gt_done)[None, :] & valid_gt[None, :]
        m = jnp.where(free, iou, neg_inf)
        k = jnp.argmax(m.reshape(-1)).astype(jnp.int32)  # the first largest: anchor, then label
        j, g = k // num_labels, k % num_labels
        top = m.reshape(-1)[k]
        ok = top > jnp.float32(1e-6)
        hit = ok & (anchor_ids == j)
        taken = taken | hit
        gt_done = gt_done | (ok & (label_ids == g))
        match = jnp.where(hit, g, match)
        best_iou = jnp.where(hit, top, best_iou)
        return taken, gt_done, match, best_iou

    state = (jnp.zeros(n, bool), jnp.zeros(num_labels, bool), jnp.full(n, -1, jnp.int32),
             jnp.full(n, -1.0, jnp.float32))
    positive, _, match, best_iou = lax.fori_loop(0, num_labels, bipartite, state)

    # each anchor's best label (the first largest IoU above -1), as MXNet scans
    m = jnp.where(valid_gt[None, :], iou, neg_inf)
    row_best = jnp.max(m, axis=1)
    row_arg = jnp.argmax(m, axis=1).astype(jnp.int32)
    has = row_best > -1

    # 2. anchors whose best IoU passes the threshold
    if p.overlap_threshold > 0:
        fill = ~positive & has
        match = jnp.where(fill, row_arg, match)
        best_iou = jnp.where(fill, row_best, best_iou)
        positive = positive | (fill & (row_best > jnp.float32(p.overlap_threshold)))

    # 3. negatives: all the others, or the hardest of them
    num_pos = jnp.sum(positive.astype(jnp.int32))
    if p.negative_mining_ratio > 0:
        num_neg = jnp.floor(num_pos.astype(jnp.float32)
                            * jnp.float32(p.negative_mining_ratio)).astype(jnp.int32)
        num_neg = jnp.minimum(num_neg, n - num_pos)
        mined_iou = jnp.where(best_iou < 0, jnp.where(has, row_best, -1.0), best_iou)
        cand = ~positive & (mined_iou < jnp.float32(p.negative_mining_thresh))
        c = cls_pred
        mx = jnp.max(c, axis=0)
        prob = jnp.exp(c[0] - mx) / jnp.sum(jnp.exp(c - mx[None, :]), axis=0)
        key = prob.astype(jnp.float32)   # MXNet sorts -prob descending, as float
        idx = jnp.arange(n, dtype=jnp.int32)
        _, _, order = lax.sort((~cand, key, idx), num_keys=2, is_stable=True)
        rank = jnp.zeros(n, jnp.int32).at[order].set(idx)
        negative = cand & (rank < num_neg)
    else:
        negative = ~positive
    negative = negative & (num_valid > 0)

    safe = jnp.maximum(match, 0)
    loc = _encode(anchors, label[safe, 1:5], p.variances).astype(dtype)
    loc = jnp.where(positive[:, None], loc, jnp.zeros((), dtype))
    mask = jnp.broadcast_to(positive[:, None], (n, 4)).astype(dtype)
    cls = jnp.where(positive, label[safe, 0] + 1,
                    jnp.where(negative, jnp.zeros((), dtype), _f32(p.ignore_label, dtype)))
    return loc.reshape(-1), mask.reshape(-1), cls.astype(dtype)


def _target_lower(p, ctx, anchor, label, cls_pred):
    anchor, label, cls_pred = (lax.stop_gradient(x) for x in (anchor, label, cls_pred))
    anchors = anchor.reshape(-1, 4)
    return jax.vmap(lambda lab, c: _target_one(p, anchors, lab, c))(label, cls_pred)


def _target_flops(p, ins, outs):
    a, lab, c = ins
    return 12 * a[1] * lab[1] * lab[0] + 4 * numel(c)


register(OpDef(
    name="_contrib_MultiBoxTarget", aliases=("_npx_multibox_target",),
    arguments=("anchor", "label", "cls_pred"),
    outputs=("loc_target", "loc_mask", "cls_target"),
    attrs={"overlap_threshold": Attr(float_attr, 0.5, "IoU above which an anchor is "
                                                      "positive"),
           "ignore_label": Attr(float_attr, -1.0, "cls_target of the anchors neither "
                                                  "positive nor negative"),
           "negative_mining_ratio": Attr(float_attr, -1.0, "negatives per positive; <= 0: "
                                                           "every non-positive anchor"),
           "negative_mining_thresh": Attr(float_attr, 0.5, "IoU under which an anchor may "
                                                           "be a mined negative"),
           "minimum_negative_samples": Attr(int_attr, 0, "read by MXNet's GPU kernel only; "
                                                         "unused, as on its CPU"),
           "variances": _VARIANCES},
    lower=_target_lower, infer_shape=_target_infer, category="opaque",
    flops=_target_flops, gradient=_no_gradient(3),
    samples=[Sample({}, [(1, 6, 4), (2, 3, 5), (2, 3, 6)], low=0.0, high=1.0),
             Sample({"negative_mining_ratio": 1.0, "negative_mining_thresh": 0.9,
                     "overlap_threshold": 0.1}, [(1, 8, 4), (2, 2, 6), (2, 4, 8)],
                    low=0.0, high=1.0)],
    doc="Training targets of SSD: (loc_target (batch, 4N), loc_mask (batch, 4N), "
        "cls_target (batch, N)) from anchor (1, N, 4), label (batch, L, >= 5; a row of "
        "class -1 ends the list) and cls_pred (batch, classes, N), matched and mined as "
        "MXNet's CPU kernel (see ops/multibox.py). No gradient."))


# --------------------------------------------------------------------------
# MultiBoxDetection
# --------------------------------------------------------------------------
def _detection_infer(p, s):
    c, loc, a = (_shape(x) for x in s)
    if c is not None and len(c) != 3:
        raise ShapeError(f"cls_prob {c} must be (batch, num_classes, num_anchors)")
    if loc is not None and len(loc) != 2:
        raise ShapeError(f"loc_pred {loc} must be (batch, num_anchors * 4)")
    if a is not None and (len(a) != 3 or a[0] < 1 or a[1] < 1 or a[2] != 4):
        raise ShapeError(f"anchor {a} must be (1, num_anchors, 4)")
    if c is not None and a is not None and c[2] != a[1]:
        raise ShapeError(f"cls_prob {c} has {c[2]} anchors, anchor {a} has {a[1]}")
    if c is not None and loc is not None and (loc[1] != 4 * c[2] or loc[0] != c[0]):
        raise ShapeError(f"loc_pred {loc} must be (batch, 4 * num_anchors) = "
                         f"({c[0]}, {4 * c[2]}) for cls_prob {c}")
    if c is None:
        return s, [None]
    return s, [(c[0], c[2], 6)]


def _decode(p, anchors, loc):
    dtype = anchors.dtype
    v = [_f32(x, dtype) for x in p.variances]
    al, at, ar, ab = (anchors[:, i] for i in range(4))
    aw, ah = ar - al, ab - at
    ax, ay = (al + ar) / 2, (at + ab) / 2
    ox = loc[:, 0] * v[0] * aw + ax
    oy = loc[:, 1] * v[1] * ah + ay
    ow = jnp.exp(loc[:, 2] * v[2]) * aw / 2
    oh = jnp.exp(loc[:, 3] * v[3]) * ah / 2
    out = jnp.stack([ox - ow, oy - oh, ox + ow, oy + oh], axis=-1)
    return jnp.clip(out, 0, 1) if p.clip else out


def _pair_iou(box, boxes):
    """IoU of one corner box with each of boxes, MultiBoxDetection's: 0
    where the union is not positive."""
    zero = jnp.zeros((), boxes.dtype)
    w = jnp.maximum(zero, jnp.minimum(box[2], boxes[:, 2]) - jnp.maximum(box[0], boxes[:, 0]))
    h = jnp.maximum(zero, jnp.minimum(box[3], boxes[:, 3]) - jnp.maximum(box[1], boxes[:, 1]))
    i = w * h
    u = (box[2] - box[0]) * (box[3] - box[1]) + (boxes[:, 2] - boxes[:, 0]) * (
        boxes[:, 3] - boxes[:, 1]) - i
    return jnp.where(u <= 0, zero, i / jnp.where(u <= 0, 1, u))


def _detection_one(p, prob, loc, anchors):
    """prob (C, N), loc (N, 4), anchors (N, 4) -> (N, 6)."""
    n, dtype = anchors.shape[0], anchors.dtype
    minus = jnp.asarray(-1, dtype)
    if prob.shape[0] > 1:
        fg = prob[1:]
        best = jnp.max(fg, axis=0)
        some = best > minus
        cls_id = jnp.where(some, jnp.argmax(fg, axis=0) + 1, 0)
        score = jnp.where(some, best, minus)
    else:
        cls_id, score = jnp.zeros(n, jnp.int32), jnp.full(n, minus)
    cls_id = jnp.where((cls_id > 0) & (score < _f32(p.threshold, dtype)), 0, cls_id)
    rows = jnp.concatenate([(cls_id - 1).astype(dtype)[:, None], score[:, None],
                            _decode(p, anchors, loc)], axis=1)
    # the detections first, in anchor order; -1 rows after
    valid = cls_id > 0
    idx = jnp.arange(n, dtype=jnp.int32)
    _, order = lax.sort((~valid, idx), num_keys=1, is_stable=True)
    count = jnp.sum(valid.astype(jnp.int32))
    live = idx < count
    packed = jnp.where(live[:, None], rows[order], minus)
    if not 0 < p.nms_threshold <= 1:
        return packed
    # sorted by score (stable), the first nkeep kept, suppressed greedily
    _, _, by_score = lax.sort((~live, -packed[:, 1], idx), num_keys=2, is_stable=True)
    nkeep = jnp.minimum(count, min(p.nms_topk, n)) if p.nms_topk > 0 else count
    kept = idx < nkeep
    out = jnp.where(kept[:, None], packed[by_score], packed)
    out = out.at[:, 0].set(jnp.where(live & ~kept, minus, out[:, 0]))
    boxes, cls = out[:, 2:], out[:, 0]
    thresh = _f32(p.nms_threshold, dtype)

    def suppress(i, alive):
        same = jnp.ones(n, bool) if p.force_suppress else cls == cls[i]
        hit = (alive[i] & (idx > i) & same & (_pair_iou(boxes[i], boxes) >= thresh))
        return alive & ~hit

    alive = lax.fori_loop(0, n, suppress, kept)
    return out.at[:, 0].set(jnp.where(kept & ~alive, minus, out[:, 0]))


def _detection_lower(p, ctx, cls_prob, loc_pred, anchor):
    cls_prob, loc_pred, anchor = (lax.stop_gradient(x) for x in (cls_prob, loc_pred, anchor))
    n = cls_prob.shape[2]
    anchors = anchor.reshape(-1, 4)[:n]
    loc = loc_pred.reshape(loc_pred.shape[0], n, 4)
    return jax.vmap(lambda c, lo: _detection_one(p, c, lo, anchors))(cls_prob, loc)


register(OpDef(
    name="_contrib_MultiBoxDetection", aliases=("_npx_multibox_detection",),
    arguments=("cls_prob", "loc_pred", "anchor"),
    attrs={"clip": Attr(bool_attr, True, "clip the boxes to [0, 1]"),
           "threshold": Attr(float_attr, 0.01, "the least score of a detection"),
           "background_id": Attr(int_attr, 0, "read by no MXNet kernel: class 0 is the "
                                              "background"),
           "nms_threshold": Attr(float_attr, 0.5, "IoU at or above which a lower score is "
                                                  "suppressed; outside (0, 1]: no NMS"),
           "force_suppress": Attr(bool_attr, False, "suppress across classes"),
           "variances": _VARIANCES,
           "nms_topk": Attr(int_attr, -1, "keep the k best before NMS; <= 0: all")},
    lower=_detection_lower, infer_shape=_detection_infer, category="opaque",
    flops=lambda p, ins, outs: numel(ins[0]) + 20 * numel(outs[0]) * max(1, outs[0][1]),
    gradient=_no_gradient(3),
    samples=[Sample({}, [(2, 3, 5), (2, 20), (1, 5, 4)], low=0.0, high=1.0),
             Sample({"force_suppress": True, "nms_topk": 3, "threshold": 0.3,
                     "clip": False}, [(2, 4, 6), (2, 24), (1, 6, 4)], low=0.0, high=1.0),
             Sample({"nms_threshold": 0.0}, [(1, 2, 4), (1, 16), (1, 4, 4)],
                    low=0.0, high=1.0)],
    doc="Detections (batch, N, 6) [class, score, xmin, ymin, xmax, ymax] from cls_prob "
        "(batch, classes, N), loc_pred (batch, 4N) and anchor (1, N, 4), decoded, "
        "thresholded, sorted and suppressed as MXNet's CPU kernel (see "
        "ops/multibox.py); -1 rows after the detections, suppressed ones keep their "
        "row with class -1. No gradient."))
