"""NumPy references of the detection ops (symgraph/ops/multibox.py, symgraph/ops/detection.py),
written as plain loops from the semantics of MXNet 1.9.1's CPU kernels
(src/operator/contrib/multibox_{prior,target,detection}.cc,
bounding_box-inl.h), one box and one anchor at a time, so that a
vectorised lowering cannot agree with itself.

REFERENCE_DETECTION[name](p, *inputs) -> output or tuple of visible outputs.
nms_record(p, data) gives box_nms's hidden output (the input row of each
output row) for the gradient tests.
"""
import math

import numpy as np

from op_reference_tensor import registrar

REFERENCE_DETECTION = {}
ref = registrar(REFERENCE_DETECTION)
F32 = np.float32


def _get(p, name, default):
    return p[name] if name in p else default


# --------------------------------------------------------------------------
# MultiBoxPrior: one location, one anchor at a time, in float32
# --------------------------------------------------------------------------
@ref("_contrib_MultiBoxPrior", "_npx_multibox_prior")
def multibox_prior(p, data):
    height, width = data.shape[2], data.shape[3]
    sizes = [F32(s) for s in _get(p, "sizes", (1.0,))]
    ratios = [F32(r) for r in _get(p, "ratios", (1.0,))]
    steps = _get(p, "steps", (-1.0, -1.0))
    offsets = [F32(o) for o in _get(p, "offsets", (0.5, 0.5))]
    step_y, step_x = F32(steps[0]), F32(steps[1])
    if steps[0] <= 0 or steps[1] <= 0:
        step_y, step_x = F32(1) / F32(height), F32(1) / F32(width)
    rows = []
    for r in range(height):
        cy = (F32(r) + offsets[0]) * step_y
        for c in range(width):
            cx = (F32(c) + offsets[1]) * step_x
            pairs = [(s, np.sqrt(ratios[0])) for s in sizes]
            pairs += [(sizes[0], np.sqrt(q)) for q in ratios[1:]]
            for size, ratio in pairs:
                w = size * F32(height) / F32(width) * ratio / F32(2)
                h = size / ratio / F32(2)
                rows.append([cx - w, cy - h, cx + w, cy + h])
    out = np.array(rows, dtype=F32)
    if _get(p, "clip", False):
        out = np.minimum(np.maximum(out, F32(0)), F32(1))
    return out[None].astype(data.dtype)


# --------------------------------------------------------------------------
# MultiBoxTarget
# --------------------------------------------------------------------------
def _target_iou(a, g):
    """IoU of anchor a and label box g as MultiBoxTarget's overlaps: 0 for a
    union of 0."""
    inter = (max(0.0, min(a[2], g[2]) - max(a[0], g[0]))
             * max(0.0, min(a[3], g[3]) - max(a[1], g[1])))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (g[2] - g[0]) * (g[3] - g[1]) - inter
    return 0.0 if union == 0 else inter / union


def _loc_target(a, g, var):
    """The box regression target of label box g against anchor a (float32)."""
    a = [F32(x) for x in a]
    g = [F32(x) for x in g]
    v = [F32(x) for x in var]
    aw, ah = a[2] - a[0], a[3] - a[1]
    ax, ay = (a[0] + a[2]) * F32(0.5), (a[1] + a[3]) * F32(0.5)
    gw, gh = g[2] - g[0], g[3] - g[1]
    gx, gy = (g[0] + g[2]) * F32(0.5), (g[1] + g[3]) * F32(0.5)
    with np.errstate(all="ignore"):
        return [(gx - ax) / aw / v[0], (gy - ay) / ah / v[1],
                np.log(gw / aw) / v[2], np.log(gh / ah) / v[3]]


@ref("_contrib_MultiBoxTarget", "_npx_multibox_target")
def multibox_target(p, anchor, label, cls_pred):
    thr = F32(_get(p, "overlap_threshold", 0.5))
    ignore = _get(p, "ignore_label", -1.0)
    ratio = _get(p, "negative_mining_ratio", -1.0)
    mine_thr = F32(_get(p, "negative_mining_thresh", 0.5))
    var = _get(p, "variances", (0.1, 0.1, 0.2, 0.2))
    anchors = anchor.reshape(-1, 4)
    num_anchors = anchors.shape[0]
    batch, num_labels = label.shape[0], label.shape[1]
    loc = np.zeros((batch, num_anchors * 4), label.dtype)
    mask = np.zeros((batch, num_anchors * 4), label.dtype)
    cls = np.full((batch, num_anchors), ignore, label.dtype)
    for b in range(batch):
        lab = label[b]
        num_valid = 0
        for i in range(num_labels):
            if lab[i, 0] == -1:
                break  # the first -1 row ends the list
            num_valid += 1
        if num_valid == 0:
            continue
        iou = [[F32(_target_iou(anchors[j], lab[k, 1:5])) for k in range(num_valid)]
               for j in range(num_anchors)]
        gt_done = [False] * num_valid
        flag = [-1] * num_anchors           # -1 ignore, 0 negative, 1 positive
        match = [(-1.0, -1)] * num_anchors  # (IoU, label)
        num_pos = 0
        # every label takes its best free anchor, the best pair first
        while not all(gt_done):
            best_j, best_k, best = -1, -1, F32(1e-6)
            for j in range(num_anchors):
                if flag[j] == 1:
                    continue
                for k in range(num_valid):
                    if not gt_done[k] and iou[j][k] > best:
                        best_j, best_k, best = j, k, iou[j][k]
            if best_j == -1:
                break
            match[best_j] = (best, best_k)
            num_pos += 1
            gt_done[best_k] = True
            flag[best_j] = 1

        def best_label(j):
            k_best, top = -1, -1.0
            for k in range(num_valid):
                if iou[j][k] > top:
                    k_best, top = k, iou[j][k]
            return k_best, top

        if thr > 0:
            for j in range(num_anchors):
                if flag[j] == 1:
                    continue
                k, top = best_label(j)
                if k != -1:
                    match[j] = (top, k)
                    if top > thr:
                        num_pos += 1
                        gt_done[k] = True
                        flag[j] = 1
        if ratio > 0:
            num_neg = int(F32(num_pos) * F32(ratio))
            num_neg = min(num_neg, num_anchors - num_pos)
            if num_neg > 0:
                hard = []
                for j in range(num_anchors):
                    if flag[j] == 1:
                        continue
                    if match[j][0] < 0:
                        k, top = best_label(j)
                        if k != -1:
                            match[j] = (top, k)
                    if match[j][0] < mine_thr and flag[j] == -1:
                        col = cls_pred[b, :, j]
                        top = col[0]
                        for v in col[1:]:
                            if v > top:
                                top = v
                        total = 0.0
                        for v in col:
                            total += math.exp(v - top)
                        prob = math.exp(col[0] - top) / total
                        hard.append((F32(-prob), j))
                # stable: the largest -prob first, ties in anchor order
                hard.sort(key=lambda e: -e[0])
                for _, j in hard[:num_neg]:
                    flag[j] = 0
        else:
            flag = [1 if f == 1 else 0 for f in flag]
        for j in range(num_anchors):
            if flag[j] == 1:
                k = match[j][1]
                cls[b, j] = lab[k, 0] + 1
                mask[b, 4 * j:4 * j + 4] = 1
                loc[b, 4 * j:4 * j + 4] = _loc_target(anchors[j], lab[k, 1:5], var)
            elif flag[j] == 0:
                cls[b, j] = 0
    return loc, mask, cls


# --------------------------------------------------------------------------
# MultiBoxDetection
# --------------------------------------------------------------------------
def _det_iou(a, b):
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    i = w * h
    u = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - i
    return 0.0 if u <= 0 else i / u


@ref("_contrib_MultiBoxDetection", "_npx_multibox_detection")
def multibox_detection(p, cls_prob, loc_pred, anchor):
    clip = _get(p, "clip", True)
    dt = cls_prob.dtype.type
    threshold = dt(F32(_get(p, "threshold", 0.01)))
    nms_thr = _get(p, "nms_threshold", 0.5)
    force = _get(p, "force_suppress", False)
    v = [dt(F32(x)) for x in _get(p, "variances", (0.1, 0.1, 0.2, 0.2))]
    topk = _get(p, "nms_topk", -1)
    batch, num_classes, n = cls_prob.shape
    anchors = anchor.reshape(-1, 4)
    out = np.full((batch, n, 6), -1.0, cls_prob.dtype)
    for b in range(batch):
        rows = []
        for i in range(n):
            score, cid = -1.0, 0
            for j in range(1, num_classes):
                if cls_prob[b, j, i] > score:
                    score, cid = cls_prob[b, j, i], j
            if cid > 0 and score < threshold:
                cid = 0
            al, at, ar, ab = anchors[i]
            aw, ah = ar - al, ab - at
            ax, ay = (al + ar) / 2, (at + ab) / 2
            px, py, pw, ph = loc_pred[b, 4 * i:4 * i + 4]
            ox, oy = px * v[0] * aw + ax, py * v[1] * ah + ay
            ow, oh = np.exp(pw * v[2]) * aw / 2, np.exp(ph * v[3]) * ah / 2
            box = [ox - ow, oy - oh, ox + ow, oy + oh]
            if clip:
                box = [max(0.0, min(1.0, x)) for x in box]
            rows.append([cid - 1, score] + box)
        valid = [r for r in rows if r[0] >= 0]
        for k, r in enumerate(valid):
            out[b, k] = r
        if not valid or nms_thr <= 0 or nms_thr > 1:
            continue
        order = sorted(range(len(valid)), key=lambda k: -valid[k][1])  # stable
        nkeep = len(valid)
        if 0 < topk < nkeep:
            nkeep = topk
            for k in range(nkeep, len(valid)):
                out[b, k, 0] = -1
        for k in range(nkeep):
            out[b, k] = valid[order[k]]
        for i in range(nkeep):
            if out[b, i, 0] < 0:
                continue
            for j in range(i + 1, nkeep):
                if out[b, j, 0] < 0:
                    continue
                if force or out[b, i, 0] == out[b, j, 0]:
                    if _det_iou(out[b, i, 2:], out[b, j, 2:]) >= nms_thr:
                        out[b, j, 0] = -1
    return out


# --------------------------------------------------------------------------
# box_nms and box_iou
# --------------------------------------------------------------------------
def _intersect(a1, a2, b1, b2, center):
    if center:
        al, ar, bl, br = a1 - a2 / 2, a1 + a2 / 2, b1 - b2 / 2, b1 + b2 / 2
    else:
        al, ar, bl, br = a1, a2, b1, b2
    w = min(ar, br) - max(al, bl)
    return w if w > 0 else 0.0


def _area(box, center):
    w, h = (box[2], box[3]) if center else (box[2] - box[0], box[3] - box[1])
    return 0.0 if w < 0 or h < 0 else w * h


def _overlap(a, b, center):
    return (_intersect(a[0], a[2], b[0], b[2], center)
            * _intersect(a[1], a[3], b[1], b[3], center))


def nms_record(p, data):
    """box_nms's hidden output: (..., N, 1), each output row's flattened
    input row, -1 for none."""
    return _box_nms(p, data)[1]


def _box_nms(p, data):
    thr = F32(_get(p, "overlap_thresh", 0.5))
    dt = data.dtype.type
    valid_thr = dt(F32(_get(p, "valid_thresh", 0.0)))
    topk = _get(p, "topk", -1)
    cs = _get(p, "coord_start", 2)
    si = _get(p, "score_index", 1)
    ii = _get(p, "id_index", -1)
    bg = _get(p, "background_id", -1)
    force = _get(p, "force_suppress", False)
    fin = _get(p, "in_format", "corner")
    fout = _get(p, "out_format", "corner")
    shape = data.shape
    n, width = shape[-2], shape[-1]
    flat = data.reshape(-1, width)
    batch = flat.shape[0] // n
    k = n if topk < 0 else min(n, topk)
    if k < 1:
        return data.copy(), np.arange(batch * n, dtype=data.dtype).reshape(shape[:-1] + (1,))
    out = np.full_like(flat, -1.0)
    rec = np.full(batch * n, -1.0, data.dtype)
    center = fin == "center"
    for b in range(batch):
        cand = []
        for i in range(n):
            row = flat[b * n + i]
            if row[si] > valid_thr and (ii < 0 or row[ii] != bg):
                cand.append(b * n + i)
        cand.sort(key=lambda r: -flat[r, si])  # stable: ties keep input order
        cand = cand[:k]
        alive = [True] * len(cand)
        for r in range(len(cand)):
            if not alive[r]:
                continue
            a = flat[cand[r], cs:cs + 4]
            for q in range(r + 1, len(cand)):
                if not alive[q]:
                    continue
                if not force and ii >= 0 and int(flat[cand[r], ii]) != int(flat[cand[q], ii]):
                    continue
                bx = flat[cand[q], cs:cs + 4]
                inter = _overlap(a, bx, center)
                with np.errstate(all="ignore"):
                    iou = dt(inter) / dt(_area(a, center) + _area(bx, center) - inter)
                if iou > thr:
                    alive[q] = False
        count = 0
        for r, src in enumerate(cand):
            if alive[r]:
                out[b * n + count] = flat[src]
                rec[b * n + count] = src
                count += 1
    if fin != fout:
        for row in out:
            x = row[cs:cs + 4].copy()
            if x[0] < 0:
                continue  # MXNet leaves a box starting below 0 as it is
            if fout == "center":
                row[cs:cs + 4] = [(x[0] + x[2]) / 2, (x[1] + x[3]) / 2, x[2] - x[0],
                                  x[3] - x[1]]
            else:
                row[cs:cs + 4] = [x[0] - x[2] / 2, x[1] - x[3] / 2, x[0] + x[2] / 2,
                                  x[1] + x[3] / 2]
    return out.reshape(shape), rec.reshape(shape[:-1] + (1,))


@ref("_contrib_box_nms", "box_nms", "_contrib_box_non_maximum_suppression", "_npx_box_nms")
def box_nms(p, data):
    return _box_nms(p, data)[0]


def box_nms_grad(p, data, dy):
    """MXNet's _backward_contrib_box_nms: each output row's gradient copied
    to the input row it came from."""
    rec = nms_record(p, data).reshape(-1)
    w = data.shape[-1]
    dx = np.zeros((rec.size, w), dy.dtype)
    g = dy.reshape(-1, w)
    for i, r in enumerate(rec):
        if r >= 0:
            dx[int(r)] = g[i]
    return dx.reshape(data.shape)


@ref("_contrib_box_iou", "box_iou", "_npx_box_iou")
def box_iou(p, lhs, rhs):
    center = _get(p, "format", "corner") == "center"
    a = lhs.reshape(-1, 4)
    b = rhs.reshape(-1, 4)
    out = np.zeros((a.shape[0], b.shape[0]), lhs.dtype)
    for i in range(a.shape[0]):
        for j in range(b.shape[0]):
            inter = _overlap(a[i], b[j], center)
            if inter > 0:
                out[i, j] = inter / (_area(a[i], center) + _area(b[j], center) - inter)
    return out.reshape(lhs.shape[:-1] + rhs.shape[:-1])


# --------------------------------------------------------------------------
# ROIPooling
# --------------------------------------------------------------------------
def _round_half_away(v):
    return math.floor(v + 0.5) if v >= 0 else -math.floor(-v + 0.5)


def roi_pooling_full(p, data, rois):
    """(output, maxidx): each bin's maximum and the flat index of its first
    maximum in data (-1 for none), bin by bin as MXNet's CPU kernel."""
    batch, channels, height, width = data.shape
    ph_n, pw_n = p["pooled_size"]
    dt = data.dtype.type
    scale = dt(F32(p["spatial_scale"]))
    lowest = dt(-np.finfo(np.float32).max)
    out = np.full((rois.shape[0], channels, ph_n, pw_n), lowest, data.dtype)
    idx = np.full(out.shape, -1, np.int64)
    for n, roi in enumerate(rois):
        x1, y1, x2, y2 = (_round_half_away(roi[k] * scale) for k in range(1, 5))
        b = int(roi[0])
        bad = b < 0 or b >= batch
        roi_h, roi_w = max(y2 - y1 + 1, 1), max(x2 - x1 + 1, 1)
        bin_h, bin_w = dt(roi_h) / dt(ph_n), dt(roi_w) / dt(pw_n)
        for c in range(channels):
            for ph in range(ph_n):
                for pw in range(pw_n):
                    hs = min(max(int(math.floor(dt(ph) * bin_h)) + y1, 0), height)
                    he = min(max(int(math.ceil(dt(ph + 1) * bin_h)) + y1, 0), height)
                    ws = min(max(int(math.floor(dt(pw) * bin_w)) + x1, 0), width)
                    we = min(max(int(math.ceil(dt(pw + 1) * bin_w)) + x1, 0), width)
                    if he <= hs or we <= ws or bad:
                        out[n, c, ph, pw] = 0
                        continue
                    for h in range(hs, he):
                        for w in range(ws, we):
                            if data[b, c, h, w] > out[n, c, ph, pw]:
                                out[n, c, ph, pw] = data[b, c, h, w]
                                idx[n, c, ph, pw] = ((b * channels + c) * height + h) * width + w
    return out, idx


@ref("ROIPooling")
def roi_pooling(p, data, rois):
    return roi_pooling_full(p, data, rois)[0]


def roi_pooling_grad(p, data, rois, dy):
    """MXNet's backward: each bin's gradient added at its first maximum."""
    _, idx = roi_pooling_full(p, data, rois)
    dx = np.zeros(data.size, dy.dtype)
    for i, g in zip(idx.reshape(-1), dy.reshape(-1)):
        if i >= 0:
            dx[i] += g
    return dx.reshape(data.shape)


# --------------------------------------------------------------------------
# ROIAlign
# --------------------------------------------------------------------------
def _bilinear(plane, y, x):
    """MXNet's ROIAlign sample of plane (H, W) at (y, x): 0 off the map."""
    height, width = plane.shape
    if y < -1.0 or y > height or x < -1.0 or x > width:
        return 0.0
    y, x = max(y, 0.0), max(x, 0.0)
    y_low, x_low = int(y), int(x)
    if y_low >= height - 1:
        y_high = y_low = height - 1
        y = float(y_low)
    else:
        y_high = y_low + 1
    if x_low >= width - 1:
        x_high = x_low = width - 1
        x = float(x_low)
    else:
        x_high = x_low + 1
    ly, lx = y - y_low, x - x_low
    hy, hx = 1.0 - ly, 1.0 - lx
    return (hy * hx * plane[y_low, x_low] + hy * lx * plane[y_low, x_high]
            + ly * hx * plane[y_high, x_low] + ly * lx * plane[y_high, x_high])


@ref("_contrib_ROIAlign", "_npx_roi_align")
def roi_align(p, data, rois):
    batch, channels, height, width = data.shape
    ph_n, pw_n = p["pooled_size"]
    ratio = _get(p, "sample_ratio", -1)
    sensitive = _get(p, "position_sensitive", False)
    aligned = _get(p, "aligned", False)
    scale = float(F32(p["spatial_scale"]))
    out_c = channels // (ph_n * pw_n) if sensitive else channels
    out = np.zeros((rois.shape[0], out_c, ph_n, pw_n), data.dtype)
    for n, roi in enumerate(rois):
        b = int(roi[0])
        if b < 0 or b >= batch:
            continue  # MXNet leaves this roi's output unwritten (or reads past the batch)
        off = 0.5 if aligned else 0.0
        x1, y1, x2, y2 = (roi[k] * scale - off for k in range(1, 5))
        rw, rh = x2 - x1, y2 - y1
        if not aligned:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bin_h, bin_w = rh / ph_n, rw / pw_n
        gh = ratio if ratio > 0 else int(math.ceil(rh / ph_n))
        gw = ratio if ratio > 0 else int(math.ceil(rw / pw_n))
        if gh <= 0 or gw <= 0:
            continue  # MXNet aborts on such a roi (aligned only)
        for c in range(out_c):
            for ph in range(ph_n):
                for pw in range(pw_n):
                    src = (c * ph_n + ph) * pw_n + pw if sensitive else c
                    total = 0.0
                    for iy in range(gh):
                        y = y1 + ph * bin_h + (iy + 0.5) * bin_h / gh
                        for ix in range(gw):
                            x = x1 + pw * bin_w + (ix + 0.5) * bin_w / gw
                            total += _bilinear(data[b, src], y, x)
                    out[n, c, ph, pw] = total / (gh * gw)
    return out
