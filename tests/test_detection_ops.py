"""The detection ops (symgraph/ops/multibox.py, symgraph/ops/detection.py): MultiBoxPrior,
MultiBoxTarget, MultiBoxDetection, box_nms and box_iou, lowered to JAX,
against the loop-by-loop NumPy references of op_reference_detection.py
(written from MXNet 1.9.1's CPU kernels) on random boxes with ties, -1
padded labels, boxes outside the image and images holding different
numbers of objects: exact for classes, masks and records, 1e-5 for
coordinates. Also MXNet's documented examples, hand-worked matches, the
gradients (none, or box_nms's copy back), and one clear error per bad
input."""
import jax
import numpy as np
import pytest

from symgraph.errors import ShapeError, SymgraphError
from symgraph.lower import lower
from symgraph.ops import get_op
from symgraph.passes.gradient import build_gradient
from symgraph.passes.infer import infer_shapes

from grad_check import assert_one_clear_error, lowered_outputs, node_over
from op_reference_detection import (REFERENCE_DETECTION, box_nms_grad, nms_record,
                                    roi_pooling_full, roi_pooling_grad)


def run(opname, attrs, *xs, hidden=False):
    """symgraph's outputs (all of them with ``hidden``) for inputs xs, the
    inferred shapes and dtypes checked against the lowered ones."""
    got, node = lowered_outputs(opname, attrs, *xs, hidden=hidden)
    return got, node.params


def head_name(g, k=0):
    e = g.outputs[k]
    return e.node.output_names()[e.index] + "_head_grad"


def check(opname, attrs, *xs, exact=(), atol=1e-5):
    """Compare every visible output with the reference: outputs in ``exact``
    bit for bit, the others to atol (relative 1e-5)."""
    got, p = run(opname, attrs, *xs)
    want = REFERENCE_DETECTION[opname](p, *xs)
    want = want if isinstance(want, tuple) else (want,)
    for k, (o, w) in enumerate(zip(got, want)):
        if k in exact:
            np.testing.assert_array_equal(o, w, err_msg=f"output {k}")
        else:
            np.testing.assert_allclose(o, w, rtol=1e-5, atol=atol, err_msg=f"output {k}")
    return got


def corner_boxes(rng, n, low=-0.3, high=1.3, min_size=0.05):
    """n well-formed corner boxes, some reaching outside [0, 1]."""
    x0 = rng.uniform(low, high - min_size, n)
    y0 = rng.uniform(low, high - min_size, n)
    w = rng.uniform(min_size, 0.6, n)
    h = rng.uniform(min_size, 0.6, n)
    return np.stack([x0, y0, x0 + w, y0 + h], axis=1)


# --------------------------------------------------------------------------
# MultiBoxPrior
# --------------------------------------------------------------------------
def test_prior_order_and_values_by_hand():
    # 2 x 2 feature map, sizes (0.5, 0.25), ratios (1, 4): per location the
    # two sizes at ratio 1, then size 0.5 at ratio 4 (width x2, height /2)
    (out,), _ = run("_contrib_MultiBoxPrior", {"sizes": (0.5, 0.25), "ratios": (1, 4)},
                    np.zeros((1, 3, 2, 2)))
    assert out.shape == (1, 12, 4)
    np.testing.assert_allclose(out[0, :3], [[0.0, 0.0, 0.5, 0.5],
                                            [0.125, 0.125, 0.375, 0.375],
                                            [-0.25, 0.125, 0.75, 0.375]], atol=1e-7)
    # the next location is the same row, next column (x moves first)
    np.testing.assert_allclose(out[0, 3], [0.5, 0.0, 1.0, 0.5], atol=1e-7)
    np.testing.assert_allclose(out[0, 6], [0.0, 0.5, 0.5, 1.0], atol=1e-7)


@pytest.mark.parametrize("attrs,shape", [
    ({"sizes": (0.7, 0.3, 0.1), "ratios": (1, 2, 0.5, 3), "clip": True}, (1, 2, 3, 5)),
    ({"sizes": "(0.2,0.4)", "ratios": "(0.5,)", "steps": "(0.25, 0.125)",
      "offsets": "(0, 1)"}, (2, 1, 4, 3)),
    ({"sizes": (1.5,), "clip": False}, (1, 1, 3, 2)),
])
def test_prior_matches_reference(attrs, shape):
    for dtype in ("float32", "float64"):
        check("_contrib_MultiBoxPrior", attrs, np.zeros(shape, dtype), atol=1e-7)


# --------------------------------------------------------------------------
# MultiBoxTarget
# --------------------------------------------------------------------------
def make_labels(rng, counts, width=5, rows=4, classes=3, ties=True):
    """labels (batch, rows, width): counts[b] objects then -1 rows."""
    lab = np.full((len(counts), rows, width), -1.0)
    for b, c in enumerate(counts):
        boxes = corner_boxes(rng, c, low=-0.1, high=1.1, min_size=0.1)
        if ties and c >= 2:
            boxes[1] = boxes[0]  # two objects on the same box
        lab[b, :c, 0] = rng.integers(0, classes, c)
        lab[b, :c, 1:5] = boxes
        lab[b, :c, 5:] = rng.uniform(size=(c, width - 5))
    return lab


def make_anchors(rng, n, ties=True):
    a = corner_boxes(rng, n)
    if ties:
        a[3] = a[1]    # identical anchors: equal overlaps everywhere
        a[n - 1] = a[0]
    return a[None]


TARGET_ATTRS = [
    ({}, 5),
    ({"overlap_threshold": 0.2}, 6),
    ({"negative_mining_ratio": 3.0, "negative_mining_thresh": 0.5}, 5),
    ({"negative_mining_ratio": 1.5, "negative_mining_thresh": 0.3, "overlap_threshold": 0.1,
      "ignore_label": -2, "variances": (0.2, 0.1, 0.3, 0.4)}, 6),
    ({"overlap_threshold": -1, "negative_mining_ratio": 2.0,
      "negative_mining_thresh": 0.9}, 5),
    ({"negative_mining_ratio": 100.0, "negative_mining_thresh": 1.0}, 5),
]


@pytest.mark.parametrize("attrs,width", TARGET_ATTRS)
def test_target_matches_reference(attrs, width):
    # images with 3, 0, 1 and 4 objects (the last one's list fills every row)
    rng = np.random.default_rng(len(str(attrs)))
    n, classes, counts = 24, 4, (3, 0, 1, 4)
    anchor = make_anchors(rng, n)
    label = make_labels(rng, counts, width=width, rows=4, classes=classes - 1)
    cls_pred = rng.normal(size=(len(counts), classes, n))
    cls_pred[:, :, 5] = cls_pred[:, :, 6]  # equal background probabilities
    loc, mask, cls = check("_contrib_MultiBoxTarget", attrs, anchor, label, cls_pred,
                           exact=(1, 2))
    # the image without objects: nothing positive, nothing negative
    ignore = float(attrs.get("ignore_label", -1))
    assert np.all(cls[1] == ignore) and not mask[1].any() and not loc[1].any()
    # the others: every object got an anchor
    for b, c in enumerate(counts):
        assert np.sum(mask[b]) >= 4 * min(c, 1)


def test_target_float32_matches_reference():
    rng = np.random.default_rng(5)
    anchor = make_anchors(rng, 16).astype(np.float32)
    label = make_labels(rng, (2, 3)).astype(np.float32)
    cls_pred = rng.normal(size=(2, 3, 16)).astype(np.float32)
    check("_contrib_MultiBoxTarget", {"negative_mining_ratio": 2.0}, anchor, label,
          cls_pred, exact=(1, 2))


def test_target_by_hand():
    # anchors: A0 = the object, A1 overlaps it by 1/3 (IoU 0.5 ... no: see below),
    # A2 far away
    anchor = np.array([[[0.0, 0.0, 0.5, 0.5], [0.25, 0.0, 0.75, 0.5],
                        [0.6, 0.6, 1.0, 1.0]]])
    label = np.array([[[2, 0.0, 0.0, 0.5, 0.5], [-1, -1, -1, -1, -1]]])
    cls_pred = np.zeros((1, 3, 3))
    # IoU(A1, object) = 0.125 / 0.375 = 1/3: positive at threshold 0.3, not at 0.5
    (loc, mask, cls), _ = run("_contrib_MultiBoxTarget", {}, anchor, label, cls_pred)
    np.testing.assert_array_equal(cls, [[3, 0, 0]])
    np.testing.assert_array_equal(mask, [[1, 1, 1, 1] + [0] * 8])
    np.testing.assert_allclose(loc, np.zeros((1, 12)), atol=1e-7)
    (loc, mask, cls), _ = run("_contrib_MultiBoxTarget", {"overlap_threshold": 0.3},
                              anchor, label, cls_pred)
    np.testing.assert_array_equal(cls, [[3, 3, 0]])
    # A1: centre x 0.5 vs 0.25, width 0.5: (0.25 - 0.5) / 0.5 / 0.1 = -5
    np.testing.assert_allclose(loc[0, 4:8], [-5.0, 0, 0, 0], atol=1e-5)
    # hard negatives: one positive, ratio 1 -> one negative, the one with the
    # lowest background probability
    cls_pred[0, :, 1] = [0.0, 3.0, 0.0]
    cls_pred[0, :, 2] = [0.0, 1.0, 0.0]
    (_, _, cls), _ = run("_contrib_MultiBoxTarget", {"negative_mining_ratio": 1.0},
                         anchor, label, cls_pred)
    np.testing.assert_array_equal(cls, [[3, 0, -1]])


def test_target_rows_after_the_first_minus_one_are_ignored():
    rng = np.random.default_rng(2)
    anchor = make_anchors(rng, 12, ties=False)
    label = make_labels(rng, (3,), rows=4)
    label[0, 1] = -1                     # ends the list: rows 2 (an object) is ignored
    only_first = label.copy()
    only_first[0, 2] = -1
    cls_pred = rng.normal(size=(1, 3, 12))
    got = check("_contrib_MultiBoxTarget", {}, anchor, label, cls_pred, exact=(1, 2))
    want, _ = run("_contrib_MultiBoxTarget", {}, anchor, only_first, cls_pred)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


# --------------------------------------------------------------------------
# MultiBoxDetection
# --------------------------------------------------------------------------
def detection_inputs(rng, batch, classes, n, ties=True):
    logits = rng.normal(size=(batch, classes, n))
    prob = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    prob = np.round(prob, 2)  # many equal scores
    if ties:
        prob[:, 1, 0] = prob[:, 2, 0]  # two classes tie on one anchor
    loc = rng.normal(scale=0.5, size=(batch, n * 4))
    anchor = make_anchors(rng, n, ties=ties)
    return prob, loc, anchor


DETECTION_ATTRS = [
    {},
    {"force_suppress": True},
    {"nms_topk": 5, "threshold": 0.2},
    {"nms_topk": 3, "force_suppress": True, "clip": False, "nms_threshold": 0.3},
    {"nms_threshold": 0.0},
    {"threshold": 0.6, "nms_threshold": 1.0, "variances": (0.2, 0.2, 0.1, 0.1)},
    {"threshold": 2.0},
]


@pytest.mark.parametrize("attrs", DETECTION_ATTRS)
def test_detection_matches_reference(attrs):
    rng = np.random.default_rng(len(str(attrs)) + 7)
    prob, loc, anchor = detection_inputs(rng, 3, 4, 20)
    (out,), p = run("_contrib_MultiBoxDetection", attrs, prob, loc, anchor)
    ref = REFERENCE_DETECTION["_contrib_MultiBoxDetection"](p, prob, loc, anchor)
    np.testing.assert_array_equal(out[..., :2], ref[..., :2])  # classes, scores exactly
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_detection_layout_by_hand():
    # 3 anchors, 2 classes (background + one): anchor 1 below threshold;
    # anchors 0 and 2 overlap heavily, 2 scores higher and suppresses 0
    prob = np.array([[[0.2, 0.995, 0.1], [0.8, 0.005, 0.9]]])
    anchor = np.array([[[0.1, 0.1, 0.5, 0.5], [0.6, 0.6, 0.9, 0.9],
                        [0.12, 0.1, 0.5, 0.5]]])
    loc = np.zeros((1, 12))
    (out,), _ = run("_contrib_MultiBoxDetection", {}, prob, loc, anchor)
    np.testing.assert_allclose(out[0], [[0, 0.9, 0.12, 0.1, 0.5, 0.5],
                                        [-1, 0.8, 0.1, 0.1, 0.5, 0.5],
                                        [-1, -1, -1, -1, -1, -1]], atol=1e-7)
    (out,), _ = run("_contrib_MultiBoxDetection", {"nms_threshold": 0}, prob, loc, anchor)
    np.testing.assert_allclose(out[0], [[0, 0.8, 0.1, 0.1, 0.5, 0.5],
                                        [0, 0.9, 0.12, 0.1, 0.5, 0.5],
                                        [-1, -1, -1, -1, -1, -1]], atol=1e-7)


def test_detection_float32():
    rng = np.random.default_rng(3)
    prob, loc, anchor = detection_inputs(rng, 2, 3, 12)
    check("_contrib_MultiBoxDetection", {"force_suppress": True},
          *(x.astype(np.float32) for x in (prob, loc, anchor)))


# --------------------------------------------------------------------------
# box_nms, box_iou
# --------------------------------------------------------------------------
def nms_data(rng, shape, ids=3, ties=True):
    """rows [id, score, xmin, ymin, xmax, ymax, extra]."""
    n = shape[-2]
    rows = np.zeros(shape)
    flat = rows.reshape(-1, n, shape[-1])
    for b in range(flat.shape[0]):
        flat[b, :, 0] = rng.integers(-1, ids, n)
        flat[b, :, 1] = np.round(rng.uniform(size=n), 1)  # equal scores
        boxes = corner_boxes(rng, n, low=-0.2, high=1.0, min_size=0.1)
        if ties:
            boxes[1] = boxes[0]
        flat[b, :, 2:6] = boxes
        flat[b, :, 6:] = rng.uniform(size=(n, shape[-1] - 6))
    return rows


NMS_ATTRS = [
    {},
    {"overlap_thresh": 0.3, "id_index": 0},
    {"overlap_thresh": 0.3, "id_index": 0, "force_suppress": True, "topk": 4},
    {"overlap_thresh": 0.1, "id_index": 0, "background_id": 0, "valid_thresh": 0.35},
    {"out_format": "center", "overlap_thresh": 0.2},
    {"in_format": "center", "out_format": "corner", "overlap_thresh": 0.05},
    {"in_format": "center", "out_format": "center", "id_index": 0},
    {"coord_start": 3, "score_index": 0, "id_index": 2, "topk": 2, "valid_thresh": 0.5},
    {"valid_thresh": 2.0},
    {"topk": 0},
]


@pytest.mark.parametrize("attrs", NMS_ATTRS)
def test_box_nms_matches_reference(attrs):
    rng = np.random.default_rng(len(str(attrs)))
    shape = [(3, 6, 7), (2, 2, 5, 7), (8, 7)][len(str(attrs)) % 3]
    data = nms_data(rng, shape)
    if len(shape) == 3:
        data[1, :, 1] = 0  # an image with nothing valid
    (out, rec), p = run("_contrib_box_nms", attrs, data, hidden=True)
    np.testing.assert_allclose(out, REFERENCE_DETECTION["_contrib_box_nms"](p, data),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(rec, nms_record(p, data))


def test_box_nms_documented_example():
    # MXNet 1.9.1's docstring example: box_nms(x, overlap_thresh=0.1,
    # coord_start=2, score_index=1, id_index=0, force_suppress=True, in_format='corner',
    # out_typ='corner')
    x = np.array([[0, 0.5, 0.1, 0.1, 0.2, 0.2], [1, 0.4, 0.1, 0.1, 0.2, 0.2],
                  [0, 0.3, 0.1, 0.1, 0.14, 0.14], [2, 0.6, 0.5, 0.5, 0.7, 0.8]])
    (out,), _ = run("box_nms", {"overlap_thresh": 0.1, "coord_start": 2, "score_index": 1,
                                "id_index": 0, "force_suppress": True}, x)
    np.testing.assert_allclose(out, [[2, 0.6, 0.5, 0.5, 0.7, 0.8],
                                     [0, 0.5, 0.1, 0.1, 0.2, 0.2],
                                     [-1, -1, -1, -1, -1, -1], [-1, -1, -1, -1, -1, -1]])
    heads = np.array([[0.1] * 6, [0.2] * 6, [0.3] * 6, [0.4] * 6])
    g, _ = node_over("box_nms", {"overlap_thresh": 0.1, "coord_start": 2, "score_index": 1,
                                "id_index": 0, "force_suppress": True}, ["x"])
    gg = build_gradient(g, ["x"])
    outs, _ = jax.jit(lower(gg, is_train=True))({"x": x, head_name(g): heads}, None)
    # the documented in_grad: each input row gets its output row's gradient
    np.testing.assert_allclose(np.asarray(outs[1]), [[0.2] * 6, [0] * 6, [0] * 6, [0.1] * 6])


@pytest.mark.parametrize("attrs", [NMS_ATTRS[2], NMS_ATTRS[5]])
def test_box_nms_gradient_copies_rows_back(attrs):
    rng = np.random.default_rng(11)
    data = nms_data(rng, (2, 6, 7))
    heads = rng.normal(size=data.shape)
    g, node = node_over("_contrib_box_nms", attrs, ["x"])
    gg = build_gradient(g, ["x"])
    outs, _ = jax.jit(lower(gg, is_train=True))({"x": data, head_name(g): heads}, None)
    np.testing.assert_array_equal(np.asarray(outs[1]), box_nms_grad(node.params, data, heads))


@pytest.mark.parametrize("fmt", ["corner", "center"])
def test_box_iou_matches_reference(fmt):
    rng = np.random.default_rng(4)
    lhs = corner_boxes(rng, 6).reshape(2, 3, 4)
    rhs = corner_boxes(rng, 5)
    rhs[0] = lhs[0, 0]            # the same box: IoU 1
    rhs[1] = [0.2, 0.2, 0.1, 0.4]  # a box of negative width (corner): area 0
    check("_contrib_box_iou", {"format": fmt}, lhs, rhs, atol=1e-12)
    (out,), _ = run("box_iou", {"format": fmt}, lhs, rhs)
    if fmt == "corner":
        assert out[0, 0, 0] == pytest.approx(1.0)


def test_box_iou_documented_example():
    x = np.array([[0.5, 0.5, 1.0, 1.0], [0.0, 0.0, 0.5, 0.5]])
    y = np.array([[0.25, 0.25, 0.75, 0.75]])
    (out,), _ = run("box_iou", {"format": "corner"}, x, y)
    np.testing.assert_allclose(out, [[1 / 7], [1 / 7]])


# --------------------------------------------------------------------------
# gradients: none but box_nms's
# --------------------------------------------------------------------------
@pytest.mark.parametrize("opname,attrs,shapes", [
    ("_contrib_MultiBoxPrior", {}, [(1, 1, 2, 2)]),
    ("_contrib_MultiBoxTarget", {"negative_mining_ratio": 1.0},
     [(1, 6, 4), (2, 2, 5), (2, 3, 6)]),
    ("_contrib_MultiBoxDetection", {}, [(2, 3, 5), (2, 20), (1, 5, 4)]),
    ("_contrib_box_iou", {}, [(3, 4), (2, 4)]),
])
def test_no_gradient(opname, attrs, shapes):
    rng = np.random.default_rng(0)
    xs = [rng.uniform(0, 1, s) for s in shapes]
    names = [f"x{i}" for i in range(len(xs))]
    g, node = node_over(opname, attrs, names)
    gg = build_gradient(g, names)
    assert not any(n.op is not None and n.op.name.startswith("_backward") for n in gg.nodes)
    feeds = dict(zip(names, xs))
    for e in g.outputs:
        name = e.node.output_names()[e.index] + "_head_grad"
        feeds[name] = np.ones(infer_shapes(g, {n: x.shape for n, x in zip(names, xs)})
                              .shape(e))
    used = {n.name for n in gg.variables}
    outs, _ = jax.jit(lower(gg, is_train=True))({k: v for k, v in feeds.items()
                                                 if k in used}, None)
    for o, x in zip(outs[len(g.outputs):], xs):
        assert not np.asarray(o).any() and np.asarray(o).shape == x.shape
    # and the lowering itself stops it (what jax.vjp of the op sees)
    op = get_op(opname)

    def total(*a):
        outs = op.lower(node.params, None, *a)
        outs = outs if isinstance(outs, tuple) else (outs,)
        return sum(o.sum() for o in outs)

    for gr in jax.jit(jax.grad(total, argnums=tuple(range(len(xs)))))(*xs):
        assert not np.asarray(gr).any()


# --------------------------------------------------------------------------
# bad input: one clear ShapeError
# --------------------------------------------------------------------------
@pytest.mark.parametrize("opname,attrs,shapes,words", [
    ("_contrib_MultiBoxTarget", {}, [(1, 6, 4), (2, 3, 4), (2, 3, 6)],
     ["label (2, 3, 4)", "width >= 5"]),
    ("_contrib_MultiBoxTarget", {}, [(1, 6, 3), (2, 3, 5), (2, 3, 6)],
     ["anchor (1, 6, 3)", "(1, num_anchors, 4)"]),
    ("_contrib_MultiBoxTarget", {}, [(2, 6, 4), (2, 3, 5), (2, 3, 6)],
     ["anchor (2, 6, 4)"]),
    ("_contrib_MultiBoxTarget", {}, [(1, 6, 4), (2, 3, 5), (2, 3, 5)],
     ["cls_pred (2, 3, 5)", "6"]),
    ("_contrib_MultiBoxDetection", {}, [(2, 3, 5), (2, 16), (1, 5, 4)],
     ["loc_pred (2, 16)", "(2, 20)"]),
    ("_contrib_MultiBoxDetection", {}, [(2, 3, 5), (2, 20), (1, 5, 2)],
     ["anchor (1, 5, 2)"]),
    ("_contrib_MultiBoxPrior", {}, [(2, 3)], ["data (2, 3)", "height"]),
    ("_contrib_box_nms", {"id_index": 0}, [(4, 5)], ["at least 6"]),
    ("_contrib_box_nms", {"score_index": 2}, [(4, 6)], ["score_index=2"]),
    ("_contrib_box_iou", {}, [(3, 4), (2, 3)], ["rhs (2, 3)", "(..., 4)"]),
])
def test_bad_input_raises_one_clear_error(opname, attrs, shapes, words):
    assert_one_clear_error(opname, attrs, shapes, ShapeError, words)


@pytest.mark.parametrize("attrs", [{"steps": (0.1, -1)}, {"offsets": (0.5, 1.5)},
                                   {"sizes": "()"}, {"steps": (0.1,)}])
def test_prior_bad_attributes(attrs):
    with pytest.raises(SymgraphError) as info:
        node_over("_contrib_MultiBoxPrior", attrs, ["x"], name="bad_node")
    assert "'bad_node'" in str(info.value)


# --------------------------------------------------------------------------
# ROIPooling
# --------------------------------------------------------------------------
def roi_inputs(rng, batch=2, channels=2, height=6, width=7, n=6):
    data = np.round(rng.normal(size=(batch, channels, height, width)), 1)  # ties
    data[0, 0, :2, :2] = 5.0                   # a tied maximum
    rois = np.zeros((n, 5))
    rois[:, 0] = rng.integers(0, batch, n)
    rois[:, 1:3] = rng.uniform(-3, 2 * width, (n, 2))
    rois[:, 3:5] = rois[:, 1:3] + rng.uniform(-2, 2 * width, (n, 2))
    rois[0] = [0, 0, 0, 3, 3]                   # covers the tie
    rois[1, 0] = batch                         # a batch index outside the batch
    rois[2, 1:] = [1.0, 2.5, 3.5, 0.5]          # halves round away from zero; x2 < x1
    return data, rois


@pytest.mark.parametrize("attrs", [{"pooled_size": (2, 2), "spatial_scale": 0.5},
                                   {"pooled_size": (3, 4), "spatial_scale": 1.0},
                                   {"pooled_size": (1, 1), "spatial_scale": 0.25}])
def test_roi_pooling_matches_reference(attrs):
    rng = np.random.default_rng(len(str(attrs)))
    data, rois = roi_inputs(rng)
    (out, idx), p = run("ROIPooling", attrs, data, rois, hidden=True)
    np.testing.assert_array_equal(out, REFERENCE_DETECTION["ROIPooling"](p, data, rois))
    np.testing.assert_array_equal(idx, roi_pooling_full(p, data, rois)[1])
    assert np.all(out[1] == 0)  # the bad batch index
    heads = rng.normal(size=out.shape)
    g, node = node_over("ROIPooling", attrs, ["x", "r"])
    gg = build_gradient(g, ["x"])
    outs, _ = jax.jit(lower(gg, is_train=True))({"x": data, "r": rois, head_name(g): heads},
                                                None)
    np.testing.assert_allclose(np.asarray(outs[1]), roi_pooling_grad(p, data, rois, heads),
                               rtol=1e-12, atol=1e-12)


def test_roi_pooling_documented_example():
    # MXNet 1.9.1's docstring example
    x = np.arange(48.0).reshape(1, 1, 8, 6)
    rois = np.array([[0, 0, 0, 4, 4]])
    for scale, want in ((1.0, [[14, 16], [26, 28]]), (0.7, [[7, 9], [19, 21]])):
        (out,), _ = run("ROIPooling", {"pooled_size": (2, 2), "spatial_scale": scale}, x, rois)
        np.testing.assert_array_equal(out, [[want]])


@pytest.mark.parametrize("shapes,words", [
    ([(2, 3, 6, 5), (4, 4)], ["rois (4, 4)", "(num_rois, 5)"]),
    ([(2, 3, 6), (4, 5)], ["data (2, 3, 6)"]),
])
def test_roi_pooling_bad_input(shapes, words):
    with pytest.raises(ShapeError) as info:
        g, _ = node_over("ROIPooling", {"pooled_size": (2, 2), "spatial_scale": 1.0},
                        ["x", "r"], name="bad_node")
        infer_shapes(g, dict(zip(["x", "r"], shapes)))
    for w in words + ["'bad_node'"]:
        assert w in str(info.value)


# --------------------------------------------------------------------------
# ROIAlign
# --------------------------------------------------------------------------
@pytest.mark.parametrize("attrs", [
    {"pooled_size": (2, 2), "spatial_scale": 0.5},
    {"pooled_size": (3, 2), "spatial_scale": 1.0, "sample_ratio": 2},
    {"pooled_size": (2, 3), "spatial_scale": 0.25, "aligned": True},
    {"pooled_size": (2, 2), "spatial_scale": 1.0, "position_sensitive": True,
     "sample_ratio": 1},
])
def test_roi_align_matches_reference(attrs):
    rng = np.random.default_rng(len(str(attrs)))
    channels = 8 if attrs.get("position_sensitive") else 2
    data, rois = roi_inputs(rng, channels=channels)
    rois[3] = [1, -40, -30, 90, 80]   # far larger than the map: many samples off it
    rois[4, 0] = -1                   # a negative batch index
    check("_contrib_ROIAlign", attrs, data, rois, atol=1e-10)
    # the gradient: the transpose of the sampling (finite differences of a linear map)
    ph, pw = attrs["pooled_size"]
    out_c = channels // (ph * pw) if attrs.get("position_sensitive") else channels
    heads = rng.normal(size=(rois.shape[0], out_c, ph, pw))
    g, node = node_over("_contrib_ROIAlign", attrs, ["x", "r"])
    gg = build_gradient(g, ["x", "r"])
    outs, _ = jax.jit(lower(gg, is_train=True))({"x": data, "r": rois, head_name(g): heads},
                                                None)
    ref = REFERENCE_DETECTION["_contrib_ROIAlign"]
    dx = np.asarray(outs[1])
    assert not np.asarray(outs[2]).any()  # no gradient to the rois
    for _ in range(3):
        probe = rng.normal(size=data.shape)
        want = np.sum(ref(node.params, probe, rois) * heads)
        np.testing.assert_allclose(np.sum(dx * probe), want, rtol=1e-9)


@pytest.mark.parametrize("opname,module", [
    ("_contrib_MultiBoxPrior", "multibox"), ("_contrib_MultiBoxTarget", "multibox"),
    ("_contrib_MultiBoxDetection", "multibox"), ("_contrib_box_nms", "detection"),
    ("_contrib_box_iou", "detection"), ("ROIPooling", "detection"),
    ("_contrib_ROIAlign", "detection"), ("_contrib_box_decode", "boxes")])
def test_each_op_is_defined_in_one_module(opname, module):
    # the MultiBox ops live in ops/multibox.py, the box and ROI ops in
    # ops/detection.py and ops/boxes.py; an alias finds the same definition
    op = get_op(opname)
    assert op.lower.__module__ == f"symgraph.ops.{module}"
    for alias in op.aliases:
        assert get_op(alias) is op
