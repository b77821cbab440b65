"""The output and loss ops of MXNet 1.9.1 (symgraph/ops/losses.py and
SoftmaxOutput's gradient in symgraph/ops/loss.py) beyond the registry-driven
checks of test_ops.py: forward and gradients in float64 against the NumPy
references of tests/op_reference_loss.py (written from MXNet's kernels),
SoftmaxOutput's gradient for every normalization with and without
use_ignore, multi_output or not, CTC against a brute-force sum over
alignments and finite differences, what each backward reads, a net trained
through MakeLoss(smooth_l1(...)) with sg.mod.Module, an MXNet symbol-JSON
using several of them, and one clear error per bad input."""
import itertools

import jax
import numpy as np
import pytest

import symgraph as sg
from symgraph.errors import OpError, ShapeError, SymgraphError
from symgraph.graph import Entry, Graph, Node
from symgraph.lower import lower
from symgraph.ops import get_op
from symgraph.passes.gradient import build_gradient
from symgraph.passes.infer import infer_shapes

from grad_check import finite_differences, op_graph
from op_reference_loss import (GRAD_REFERENCE_LOSS, LOSS_GRAD_LOSS, REFERENCE_LOSS,
                               ctc_brute_force, ctc_cost_and_grad, softmax_output_grad)

S = sg.sym
KEY = jax.random.key(0)


def _params(opname, attrs):
    return Node(get_op(opname), "op", attrs, []).params


def forward(opname, attrs, *xs):
    """The op's visible outputs, lowered and jitted, inference mode."""
    g, node, names = op_graph(opname, attrs)
    outs, _ = jax.jit(lower(g, is_train=False))(dict(zip(names, xs)), KEY)
    return [np.asarray(o) for o in outs]


def gradients(opname, attrs, *xs, wrt=("data",), heads=()):
    """(visible outputs, gradients of ``wrt``) of the explicit backward graph
    in training mode; ``heads``: the head gradients of non-loss outputs."""
    g, node, names = op_graph(opname, attrs)
    gg = build_gradient(g, list(wrt))
    feeds = dict(zip(names, xs))
    for e, h in zip(g.outputs, heads):
        feeds[e.node.output_names()[e.index] + "_head_grad"] = h
    used = {n.name for n in gg.variables}
    outs, _ = jax.jit(lower(gg, is_train=True))({k: v for k, v in feeds.items() if k in used},
                                                KEY)
    outs = [np.asarray(o) for o in outs]
    return outs[:len(g.outputs)], outs[len(g.outputs):]


def _labels(rng, shape, k, ignore=None, frac=0.3):
    lab = rng.integers(0, k, size=shape).astype(np.float64)
    if ignore is not None:
        lab[rng.random(shape) < frac] = ignore
    return lab


# --------------------------------------------------------------------------
# SoftmaxOutput: the gradient of MXNet 1.9.1's kernel, every normalization
# --------------------------------------------------------------------------
SO_CASES = {
    # (data, label): classes on axis 1 at each position
    True: [((2, 4, 6), (2, 6)), ((2, 4, 3, 5), (2, 3, 5)), ((3, 5), (3,))],
    # (data, label): one softmax over all non-batch elements; >2-D data reads
    # the first n labels of the flattened label
    False: [((6, 5), (6,)), ((2, 3, 4), (2, 3))],
}


@pytest.mark.parametrize("multi_output", [False, True], ids=["single", "multi"])
@pytest.mark.parametrize("normalization", ["null", "batch", "valid"])
@pytest.mark.parametrize("use_ignore", [False, True], ids=["all", "ignore"])
def test_softmax_output_gradient_matches_mxnet_kernel(multi_output, normalization, use_ignore):
    rng = np.random.default_rng(hash((multi_output, normalization, use_ignore)) % 2**32)
    for dshape, lshape in SO_CASES[multi_output]:
        k = dshape[1] if multi_output else int(np.prod(dshape[1:]))
        x = rng.normal(size=dshape) * 2
        label = _labels(rng, lshape, min(k, 4), ignore=1)  # class 1 is also ignore_label
        for grad_scale in (1.0, 0.7):
            attrs = dict(multi_output=multi_output, normalization=normalization,
                         use_ignore=use_ignore, ignore_label=1, grad_scale=grad_scale)
            (y,), (dx,) = gradients("SoftmaxOutput", attrs, x, label)
            want = softmax_output_grad(_params("SoftmaxOutput", attrs), y, x, label)
            np.testing.assert_allclose(dx, want, rtol=1e-12, atol=1e-14,
                                       err_msg=f"{dshape} {attrs}")


@pytest.mark.parametrize("dshape,positions", [((2, 4, 6), 6), ((2, 4, 3, 5), 15)])
def test_softmax_output_multi_output_divides_by_positions_unless_valid(dshape, positions):
    # the figures: symgraph's gradient was `positions` times MXNet's
    # with 'null' and 'batch'; MXNet: grad_scale / (valid ? 1 : P) / count
    rng = np.random.default_rng(3)
    n, k = dshape[:2]
    x = rng.normal(size=dshape)
    label = _labels(rng, (n,) + dshape[2:], k)
    label.reshape(-1)[:3] = 2  # three labels equal ignore_label=2
    y = np.exp(x) / np.exp(x).sum(axis=1, keepdims=True)
    onehot = np.moveaxis(np.eye(k)[label.astype(int)], -1, 1)
    plain = y - onehot
    valid = (label != 2).sum()
    for norm, want in [("null", plain / positions), ("batch", plain / positions / n),
                       ("valid", plain / valid)]:
        attrs = dict(multi_output=True, normalization=norm, ignore_label=2, grad_scale=3.0)
        (_,), (dx,) = gradients("SoftmaxOutput", attrs, x, label)
        np.testing.assert_allclose(dx, 3.0 * want, rtol=1e-12, atol=1e-14, err_msg=norm)
    # use_ignore zeroes the ignored positions; 'valid' counts them out with
    # or without it
    attrs = dict(multi_output=True, normalization="valid", ignore_label=2, use_ignore=True)
    (_,), (dx,) = gradients("SoftmaxOutput", attrs, x, label)
    keep = np.expand_dims(label != 2, 1)
    np.testing.assert_allclose(dx, plain * keep / valid, rtol=1e-12, atol=1e-14)


def test_softmax_output_single_output_normalizations_unchanged():
    # without multi_output symgraph already matched MXNet: the proof stays
    rng = np.random.default_rng(4)
    x, label = rng.normal(size=(5, 3)), np.array([0, 1, 2, 1, 1], np.float64)
    y = np.exp(x) / np.exp(x).sum(axis=1, keepdims=True)
    plain = y - np.eye(3)[label.astype(int)]
    for norm, use_ignore, want in [
            ("null", False, plain), ("batch", False, plain / 5),
            ("valid", False, plain / 2),  # 'valid' counts labels != 1 even without use_ignore
            ("valid", True, plain * (label != 1)[:, None] / 2),
            ("batch", True, plain * (label != 1)[:, None] / 5)]:
        attrs = dict(normalization=norm, use_ignore=use_ignore, ignore_label=1)
        (_,), (dx,) = gradients("SoftmaxOutput", attrs, x, label)
        np.testing.assert_allclose(dx, want, rtol=1e-12, atol=1e-14, err_msg=str(attrs))


def test_softmax_output_multi_output_label_layouts_and_smoothing():
    # MXNet takes (n, d2, d3), (n, d2*d3) and (n, 1, d2, d3) labels alike;
    # its multi_output kernel applies no label smoothing
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2, 3, 2, 4))
    label = _labels(rng, (2, 2, 4), 3)
    attrs = dict(multi_output=True, normalization="batch")
    (_,), (want,) = gradients("SoftmaxOutput", attrs, x, label)
    for lab in (label.reshape(2, 8), label.reshape(2, 1, 2, 4)):
        (_,), (dx,) = gradients("SoftmaxOutput", attrs, x, lab)
        np.testing.assert_array_equal(dx, want)
    (_,), (dx,) = gradients("SoftmaxOutput", {**attrs, "smooth_alpha": 0.3}, x, label)
    np.testing.assert_array_equal(dx, want)
    # without multi_output smoothing applies (SmoothSoftmaxGrad)
    x2, lab2 = rng.normal(size=(4, 5)), _labels(rng, (4,), 5)
    attrs2 = dict(smooth_alpha=0.3)
    (y2,), (dx2,) = gradients("SoftmaxOutput", attrs2, x2, lab2)
    np.testing.assert_allclose(dx2, softmax_output_grad(_params("SoftmaxOutput", attrs2), y2,
                                                        x2, lab2), rtol=1e-12)
    assert not np.allclose(dx2, y2 - np.eye(5)[lab2.astype(int)])


@pytest.mark.parametrize("multi_output", [False, True])
@pytest.mark.parametrize("normalization", ["null", "batch", "valid"])
def test_softmax_output_probability_labels_are_never_normalized(multi_output, normalization):
    # label of the data's shape: (out - label) * grad_scale (MXNet's first branch)
    rng = np.random.default_rng(6)
    x = rng.normal(size=(3, 4, 2))
    axis = 1 if multi_output else -1
    label = rng.random(size=x.shape)
    label /= label.sum(axis=axis, keepdims=True)
    attrs = dict(multi_output=multi_output, normalization=normalization, grad_scale=0.5,
                 use_ignore=True, ignore_label=0)
    (y,), (dx,) = gradients("SoftmaxOutput", attrs, x, label)
    np.testing.assert_allclose(dx, (y - label) * 0.5, rtol=1e-12, atol=1e-14)


# --------------------------------------------------------------------------
# the loss heads: forward and the gradient MXNet's kernels write
# --------------------------------------------------------------------------
LOSS_CASES = [
    ("MakeLoss", {}, [(3, 4)]),
    ("MakeLoss", {"normalization": "batch", "grad_scale": 2.0}, [(2, 3, 4)]),
    ("MakeLoss", {"normalization": "batch"}, [(6,)]),  # a vector: one row, divide by 1
    ("MakeLoss", {"normalization": "valid", "valid_thresh": 0.25}, [(4, 5)]),
    ("MakeLoss", {"normalization": "valid", "valid_thresh": 5.0}, [(4, 5)]),  # none: 1
    ("make_loss", {}, [(2, 5)]),
    ("LogisticRegressionOutput", {}, [(4, 3), (4, 3)]),
    ("LogisticRegressionOutput", {"grad_scale": 3.0}, [(5, 1), (5,)]),
    ("LogisticRegressionOutput", {}, [(2, 3, 2), (2, 6)]),
    ("MAERegressionOutput", {}, [(4, 3), (4, 3)]),
    ("MAERegressionOutput", {"grad_scale": 0.5}, [(6, 1), (6,)]),
    ("SVMOutput", {}, [(5, 4), (5,)]),
    ("SVMOutput", {"use_linear": True, "margin": 0.4, "regularization_coefficient": 2.0},
     [(5, 4), (5,)]),
    ("SVMOutput", {"margin": 0.2, "regularization_coefficient": 0.5}, [(2, 3, 4), (2, 3)]),
]


def _loss_inputs(opname, shapes, rng):
    xs = [rng.normal(size=shapes[0])]
    if opname == "SVMOutput":
        xs.append(_labels(rng, shapes[1], shapes[0][-1]))
    elif opname == "LogisticRegressionOutput":
        xs.append(rng.random(size=shapes[1]))
    elif len(shapes) > 1:
        xs.append(rng.normal(size=shapes[1]))
    return xs


@pytest.mark.parametrize("opname,attrs,shapes", LOSS_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(LOSS_CASES)])
def test_loss_heads_forward_and_gradient_match_mxnet(opname, attrs, shapes):
    rng = np.random.default_rng(7)
    xs = _loss_inputs(opname, shapes, rng)
    p = _params(opname, attrs)
    (y,) = forward(opname, attrs, *xs)
    np.testing.assert_allclose(y, REFERENCE_LOSS[opname](p, *xs), rtol=1e-13, atol=1e-15)
    (y2,), (dx,) = gradients(opname, attrs, *xs)
    np.testing.assert_array_equal(y2, y)
    assert dx.shape == xs[0].shape and dx.dtype == np.float64
    np.testing.assert_allclose(dx, LOSS_GRAD_LOSS[opname](p, y, *xs), rtol=1e-13, atol=1e-15)


def test_loss_head_values_from_mxnet_formulas():
    # MakeLoss: batch divides by the rows of the 2-D view, valid by the count
    x = np.array([[0.5, -1.0, 2.0], [0.0, 3.0, -2.0]])
    for attrs, want in [({}, 1.0), ({"normalization": "batch"}, 0.5),
                        ({"normalization": "valid"}, 1 / 3),
                        ({"normalization": "valid", "valid_thresh": 1.0}, 0.5)]:
        (_,), (dx,) = gradients("MakeLoss", attrs, x)
        np.testing.assert_allclose(dx, np.full(x.shape, want), rtol=1e-15)
    # MAE: -1 where output == label (minus_sign: a - b > 0 ? 1 : -1); / 3 outputs
    (_,), (dx,) = gradients("MAERegressionOutput", {}, x, np.array([[0.5, 0, 0], [1, 3, 0]]))
    np.testing.assert_allclose(dx, np.array([[-1, -1, 1], [-1, -1, -1]]) / 3, rtol=1e-15)
    # L2-SVM, margin 1: the label's class 2 (-2(1 - 2) * -1 ... = 0: beyond the margin)
    out = np.array([[0.5, -1.5, 2.0]])
    (_,), (dx,) = gradients("SVMOutput", {}, out, np.array([2.0]))
    np.testing.assert_allclose(dx, [[2 * (1 + 0.5), 0.0, 0.0]])
    (_,), (dx,) = gradients("SVMOutput", {"use_linear": True}, out, np.array([0.0]))
    np.testing.assert_allclose(dx, [[-1.0, 0.0, 1.0]])


def test_loss_heads_take_no_head_gradient():
    # a loss head's output read further on: what would flow back into it is
    # dropped, as MXNet's loss kernels never read out_grad -- the gradient
    # graph does not even read the other output's head gradient
    rng = np.random.default_rng(8)
    x = rng.normal(size=(4, 3))
    for opname, label in [("MakeLoss", None), ("LogisticRegressionOutput", rng.random((4, 3))),
                          ("SVMOutput", _labels(rng, (4,), 3))]:
        kw = {} if label is None else {"label": S.Variable("label")}
        head = getattr(S, opname)(S.Variable("data"), name="head", **kw)
        feeds = {"data": x} if label is None else {"data": x, "label": label}
        grads = []
        for net in (head, S.Group([head, S.exp(head * 3.0, name="more")])):
            g = net.graph()
            gg = build_gradient(g, ["data"])
            assert not [n for n in gg.variables if n.name.endswith("_head_grad")]
            outs, _ = lower(gg, True)(feeds)
            grads.append(np.asarray(outs[-1]))
        np.testing.assert_array_equal(grads[0], grads[1])


# --------------------------------------------------------------------------
# SoftmaxActivation and smooth_l1: forward, gradient, finite differences
# --------------------------------------------------------------------------
DIFF_CASES = [
    ("SoftmaxActivation", {}, (3, 5)),
    ("SoftmaxActivation", {}, (2, 3, 4)),  # instance: the last axis
    ("SoftmaxActivation", {"mode": "channel"}, (2, 3, 4)),
    ("SoftmaxActivation", {"mode": "channel"}, (2, 4, 2, 3)),
    ("smooth_l1", {}, (3, 4)),
    ("smooth_l1", {"scalar": 2.0}, (2, 3, 4)),
    ("smooth_l1", {"scalar": 0.5}, (7,)),
]


@pytest.mark.parametrize("opname,attrs,shape", DIFF_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(DIFF_CASES)])
def test_differentiable_ops_match_numpy_and_finite_differences(opname, attrs, shape):
    rng = np.random.default_rng(9)
    x = rng.normal(size=shape) * (3 if opname == "smooth_l1" else 1)
    head = rng.normal(size=shape)
    p = _params(opname, attrs)
    (y,) = forward(opname, attrs, x)
    np.testing.assert_allclose(y, REFERENCE_LOSS[opname](p, x), rtol=1e-13, atol=1e-15)
    (_,), (dx,) = gradients(opname, attrs, x, heads=[head])
    np.testing.assert_allclose(dx, GRAD_REFERENCE_LOSS[opname](p, [x], [head])[0],
                               rtol=1e-12, atol=1e-14)
    num = finite_differences(lambda v: REFERENCE_LOSS[opname](p, v), [x], head)[0]
    np.testing.assert_allclose(dx, num, rtol=1e-6, atol=1e-8)


def test_smooth_l1_mxnet_doc_example_and_its_kinks():
    # MXNet's docstring: smooth_l1([1, 2, 3, 4]) = [0.5, 1.5, 2.5, 3.5]
    x = np.array([1.0, 2.0, 3.0, 4.0])
    np.testing.assert_allclose(forward("smooth_l1", {}, x)[0], [0.5, 1.5, 2.5, 3.5])
    np.testing.assert_allclose(forward("smooth_l1", {"scalar": 1}, x)[0], [0.5, 1.5, 2.5, 3.5])
    # sigma = 2: quadratic inside |x| < 1/4, continuous at the kink, slope +-1 outside
    x = np.array([-1.0, -0.25, -0.1, 0.0, 0.1, 0.25, 1.0])
    (y,) = forward("smooth_l1", {"scalar": 2.0}, x)
    np.testing.assert_allclose(y, [0.875, 0.125, 0.02, 0.0, 0.02, 0.125, 0.875])
    (_,), (dx,) = gradients("smooth_l1", {"scalar": 2.0}, x, heads=[np.ones(7)])
    np.testing.assert_allclose(dx, [-1, -1, -0.4, 0, 0.4, 1, 1])


def test_softmax_activation_mxnet_doc_example():
    x = np.array([[3., 0.5, -0.5, 2., 7.], [2., -.4, 7., 3., 0.2]])
    want = [[1.78322066e-02, 1.46375655e-03, 5.38485940e-04, 6.56010211e-03, 9.73605454e-01],
            [6.56221947e-03, 5.95310994e-04, 9.73919690e-01, 1.78379621e-02, 1.08472735e-03]]
    np.testing.assert_allclose(forward("SoftmaxActivation", {}, x)[0], want, rtol=1e-6)
    # channel: axis 1 at every position
    z = np.random.default_rng(10).normal(size=(2, 3, 4))
    (y,) = forward("SoftmaxActivation", {"mode": "channel"}, z)
    np.testing.assert_allclose(y.sum(axis=1), 1.0, rtol=1e-14)


# --------------------------------------------------------------------------
# CTCLoss
# --------------------------------------------------------------------------
def _ctc(attrs, x, label, *lengths, head=None):
    """(costs, d sum(head * costs) / d x) through the backward graph."""
    head = np.ones(x.shape[1]) if head is None else head
    outs, (dx,) = gradients("CTCLoss", attrs, x, label, *lengths, heads=[head])
    return outs[0], dx


@pytest.mark.parametrize("blank_label", ["first", "last"])
def test_ctc_matches_brute_force_over_all_alignments(blank_label):
    # T = 4 frames, C = 3 classes: 81 paths per sample, summed one by one
    rng = np.random.default_rng(11)
    x = rng.normal(size=(4, 5, 3)) * 1.5
    if blank_label == "first":  # classes 1, 2; padding 0
        label, labs, blank = np.array([[1, 2, 0], [1, 1, 0], [2, 0, 0], [0, 0, 0],
                                       [1, 2, 1]], np.float64), \
            [[1, 2], [1, 1], [2], [], [1, 2, 1]], 0
    else:  # classes 0, 1; padding -1
        label, labs, blank = np.array([[0, 1, -1], [1, 1, -1], [0, -1, -1], [-1, -1, -1],
                                       [0, 0, 1]], np.float64), \
            [[0, 1], [1, 1], [0], [], [0, 0, 1]], 2
    attrs = {"blank_label": blank_label}
    costs, _ = _ctc(attrs, x, label)
    want = [ctc_brute_force(x[:, b], labs[b], blank) for b in range(5)]
    # [0, 0, 1] / [1, 2, 1] need 3 or 4 frames: both fit in 4
    np.testing.assert_allclose(costs, want, rtol=1e-12)
    np.testing.assert_allclose(costs, ctc_cost_and_grad(_params("CTCLoss", attrs), x,
                                                        label)[0], rtol=1e-12)


CTC_GRAD_CASES = [
    ({}, (6, 3, 5), (3, 3), None),
    ({"blank_label": "last"}, (5, 2, 4), (2, 4), None),
    ({"use_data_lengths": True}, (7, 3, 4), (3, 2), "data"),
    ({"use_label_lengths": True, "blank_label": "last"}, (6, 2, 4), (2, 3), "label"),
    ({"use_data_lengths": True, "use_label_lengths": True}, (6, 3, 5), (3, 3), "both"),
]


def _ctc_case(attrs, dshape, lshape, lengths, rng):
    t, n, c = dshape
    x = rng.normal(size=dshape)
    first = attrs.get("blank_label", "first") == "first"
    label = rng.integers(1, c, size=lshape) if first else rng.integers(0, c - 1, size=lshape)
    label = label.astype(np.float64)
    extra = []
    if lengths in ("data", "both"):
        extra.append(np.array([t, t - 2, 3][:n], np.float64))
    if lengths in ("label", "both"):
        extra.append(np.array([lshape[1], 1, 0][:n], np.float64))
    elif first:
        label[0, -1] = 0  # padding: the first sample has one label fewer
    return x, label, extra


@pytest.mark.parametrize("attrs,dshape,lshape,lengths", CTC_GRAD_CASES,
                         ids=[f"ctc-{i}" for i in range(len(CTC_GRAD_CASES))])
def test_ctc_cost_and_gradient_match_numpy_and_finite_differences(attrs, dshape, lshape,
                                                                   lengths):
    rng = np.random.default_rng(12)
    x, label, extra = _ctc_case(attrs, dshape, lshape, lengths, rng)
    head = rng.normal(size=dshape[1])
    costs, dx = _ctc(attrs, x, label, *extra, head=head)
    p = _params("CTCLoss", attrs)
    want_costs, want_grad = ctc_cost_and_grad(p, x, label, *extra)
    np.testing.assert_allclose(costs, want_costs, rtol=1e-12)
    assert np.all(want_costs > 0)
    np.testing.assert_allclose(dx, head[None, :, None] * want_grad, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(
        GRAD_REFERENCE_LOSS["CTCLoss"](p, [x, label, *extra], [head])[0], dx,
        rtol=1e-10, atol=1e-12)
    num = finite_differences(lambda v: ctc_cost_and_grad(p, v, label, *extra)[0], [x], head)[0]
    np.testing.assert_allclose(dx, num, rtol=1e-6, atol=1e-8)
    if lengths in ("data", "both"):  # frames past a sample's length: gradient 0
        for b, frames in enumerate(extra[0].astype(int)):
            assert np.all(dx[frames:, b] == 0)


def test_ctc_lengths_equal_truncation_and_padding_conventions():
    rng = np.random.default_rng(13)
    x = rng.normal(size=(6, 2, 4))
    label = np.array([[1, 2, 2], [3, 1, 0]], np.float64)
    full, _ = _ctc({}, x, label)
    # data_lengths: sample 1 on its first 4 frames is the cost of those frames alone
    cut, _ = _ctc({"use_data_lengths": True}, x, label, np.array([6.0, 4.0]))
    alone, _ = _ctc({}, x[:4, 1:], label[1:])
    np.testing.assert_allclose(cut[0], full[0], rtol=1e-14)
    np.testing.assert_allclose(cut[1], alone[0], rtol=1e-13)
    # label_lengths override the padding: [3, 1] read as given, 0 not a stop
    ll, _ = _ctc({"use_label_lengths": True}, x, label, np.array([3.0, 2.0]))
    np.testing.assert_allclose(ll, full, rtol=1e-13)
    # MXNet's docstring: 'ba', 'cbb', 'abac' with the blank first (0 pads) or
    # last (-1 pads) are the same losses for the same activations
    x3 = rng.normal(size=(8, 3, 4))
    first = np.array([[2, 1, 0, 0], [3, 2, 2, 0], [1, 2, 1, 3]], np.float64)
    last = np.array([[1, 0, -1, -1], [2, 1, 1, -1], [0, 1, 0, 2]], np.float64)
    x_last = np.concatenate([x3[..., 1:], x3[..., :1]], axis=-1)  # blank channel moved last
    a, ga = _ctc({}, x3, first)
    b, gb = _ctc({"blank_label": "last"}, x_last, last)
    np.testing.assert_allclose(a, b, rtol=1e-13)
    np.testing.assert_allclose(np.concatenate([ga[..., 1:], ga[..., :1]], axis=-1), gb,
                               rtol=1e-11, atol=1e-13)


def test_ctc_impossible_labels():
    rng = np.random.default_rng(14)
    x = rng.normal(size=(3, 3, 4))
    # 'aa' needs 3 frames (a blank between), 'aab' 4 > 3: warp-ctc's cost 0,
    # gradient 0; a blank (0) among the labels: no alignment, -log 0 = inf
    label = np.array([[1, 1, 0], [1, 1, 2], [1, 0, 2]], np.float64)
    costs, dx = _ctc({"use_label_lengths": True}, x, label, np.array([2.0, 3.0, 3.0]))
    assert np.isfinite(costs[0]) and costs[0] > 0
    assert costs[1] == 0 and np.all(dx[:, 1] == 0)
    assert costs[2] == np.inf and np.all(dx[:, 2] == 0)
    want = ctc_cost_and_grad(_params("CTCLoss", {"use_label_lengths": True}), x, label,
                             np.array([2.0, 3.0, 3.0]))[0]
    np.testing.assert_array_equal(costs[1:], want[1:])
    np.testing.assert_allclose(costs[0], want[0], rtol=1e-13)
    # no frames: an empty labelling costs 0, a non-empty one is impossible: 0
    costs, dx = _ctc({"use_data_lengths": True}, x, np.array([[0, 0], [1, 0], [2, 3]],
                                                              np.float64)[:, :2],
                     np.array([0.0, 0.0, 3.0]))
    assert costs[0] == 0 and costs[1] == 0 and np.all(dx[:, :2] == 0)


def test_ctc_runs_in_float32_and_scans_the_frames():
    rng = np.random.default_rng(15)
    x = rng.normal(size=(20, 4, 6)).astype(np.float32)
    label = rng.integers(1, 6, size=(4, 5)).astype(np.float32)
    (y,) = forward("CTCLoss", {}, x, label)
    assert y.dtype == np.float32
    want = ctc_cost_and_grad(_params("CTCLoss", {}), x.astype(np.float64),
                             label.astype(np.float64))[0]
    np.testing.assert_allclose(y, want, rtol=2e-5)
    # the forward is one lax.scan over the frames, not 19 unrolled steps
    p = _params("CTCLoss", {})
    jaxpr = jax.make_jaxpr(lambda v: get_op("CTCLoss").lower(
        p, sg.lower.LowerCtx(True), v, label))(x)
    assert "scan" in str(jaxpr)


def test_ctc_aliases_and_hidden_gradient_output():
    for name in ("ctc_loss", "_contrib_CTCLoss", "_contrib_ctc_loss"):
        assert get_op(name) is get_op("CTCLoss")
    net = S.CTCLoss(S.Variable("data"), S.Variable("label"), name="ctc")
    assert net.list_outputs() == ["ctc_output0"]
    args, outs, _ = net.infer_shape(data=(7, 3, 5), label=(3, 4))
    assert outs == [(3,)] and args == [(7, 3, 5), (3, 4)]
    net = S.ctc_loss(S.Variable("data"), S.Variable("label"), use_data_lengths=True,
                     use_label_lengths=True, name="ctc")
    assert net.list_arguments() == ["data", "label", "ctc_data_lengths", "ctc_label_lengths"]
    args, _, _ = net.infer_shape(data=(7, 3, 5), label=(3, 4))
    assert args[2:] == [(3,), (3,)]


# --------------------------------------------------------------------------
# what each backward reads (the facts the memory planner sees)
# --------------------------------------------------------------------------
def _reads(opname, attrs):
    g, node, names = op_graph(opname, attrs)
    gg = build_gradient(g, ["data"])
    bwd = next(n for n in gg.nodes if n.op is not None and n.op.name == f"_backward_{opname}")
    got = [e.node.name if e.node.op is None else f"{e.node.name}:{e.index}" for e in bwd.inputs]
    return got, list(bwd.op.shape_inputs(bwd.params)), \
        [tuple(x) for x in bwd.op.inplace(bwd.params)]


@pytest.mark.parametrize("opname,attrs,reads,shape_only,inplace", [
    # MakeLoss: the data for its shape only, unless 'valid' counts it
    ("MakeLoss", {}, ["data"], [0], []),
    ("MakeLoss", {"normalization": "batch"}, ["data"], [0], []),
    ("MakeLoss", {"normalization": "valid"}, ["data"], [], []),
    ("make_loss", {}, ["data"], [0], []),
    # the label and the output; the gradient may overwrite the output
    ("LogisticRegressionOutput", {}, ["label", "op:0"], [], [(1, 0)]),
    ("MAERegressionOutput", {}, ["label", "op:0"], [], [(1, 0)]),
    ("SVMOutput", {}, ["label", "op:0"], [], [(1, 0)]),
    ("SoftmaxOutput", {"multi_output": True}, ["label", "op:0"], [], [(1, 0)]),
    # the head gradient and the output, not the input
    ("SoftmaxActivation", {}, ["op_output_head_grad", "op:0"], [], [(0, 0)]),
    ("smooth_l1", {}, ["op_output_head_grad", "data"], [], [(0, 0)]),
    # the head gradient (batch,) and the hidden gradient of the forward
    ("CTCLoss", {}, ["op_output0_head_grad", "op:1"], [], []),
])
def test_backward_reads(opname, attrs, reads, shape_only, inplace):
    assert _reads(opname, attrs) == (reads, shape_only, inplace)


def test_forward_memory_facts():
    for name in ("MakeLoss", "make_loss", "LogisticRegressionOutput", "MAERegressionOutput",
                 "SVMOutput", "SoftmaxActivation", "smooth_l1"):
        assert get_op(name).inplace(_params(name, {})) == [(0, 0)], name
    assert get_op("CTCLoss").inplace(_params("CTCLoss", {})) == []
    for name in ("MakeLoss", "make_loss", "LogisticRegressionOutput", "MAERegressionOutput",
                 "SVMOutput"):
        assert get_op(name).is_loss
    assert not get_op("CTCLoss").is_loss and not get_op("smooth_l1").is_loss
    assert get_op("CTCLoss").output_names(_params("CTCLoss", {})) == ["output0", "output1"]
    assert get_op("CTCLoss").num_visible_outputs(_params("CTCLoss", {})) == 1


# --------------------------------------------------------------------------
# a net trained through MakeLoss(smooth_l1(...)) with sg.mod.Module
# --------------------------------------------------------------------------
def test_make_loss_of_smooth_l1_trains_with_module():
    rng = np.random.default_rng(16)
    x = rng.normal(size=(32, 5))
    y = x @ rng.normal(size=(5, 2)) + 0.05 * rng.normal(size=(32, 2))
    fc = S.FullyConnected(S.Variable("data"), num_hidden=2, name="fc")
    net = S.MakeLoss(S.smooth_l1(fc - S.Variable("label"), scalar=1.0, name="sl1"),
                     normalization="batch", name="loss")
    mod = sg.mod.Module(net, data_names=("data",), label_names=("label",))
    it = sg.io.NDArrayIter(x, y, batch_size=32, label_name="label")
    mod.bind(it.provide_data, it.provide_label)
    mod.init_params(sg.init.Xavier(), seed=0)
    # the gradient is divided by 32 twice: MakeLoss's 'batch' (the rows) and
    # the Module's rescale_grad = 1/batch, as in MXNet
    mod.init_optimizer(optimizer="sgd", optimizer_params={"learning_rate": 20.0})
    batch = next(it)
    losses = []
    for _ in range(12):
        mod.forward(batch, is_train=True)
        losses.append(float(mod.get_outputs()[0].asnumpy().sum()))
        mod.backward()
        mod.update()
    assert all(b < a for a, b in zip(losses, losses[1:])), losses
    assert losses[-1] < 0.2 * losses[0], losses


# --------------------------------------------------------------------------
# an MXNet symbol-JSON using several of them
# --------------------------------------------------------------------------
MXNET_JSON = """{
  "nodes": [
    {"op": "null", "name": "data", "inputs": []},
    {"op": "null", "name": "reg_label", "inputs": []},
    {"op": "LogisticRegressionOutput", "name": "logit", "attrs": {"grad_scale": "2.0"},
     "inputs": [[0, 0, 0], [1, 0, 0]]},
    {"op": "smooth_l1", "name": "sl1", "attrs": {"scalar": "2.0"}, "inputs": [[0, 0, 0]]},
    {"op": "MakeLoss", "name": "ml", "attrs": {"normalization": "batch",
     "grad_scale": "0.5"}, "inputs": [[3, 0, 0]]},
    {"op": "null", "name": "feat", "inputs": []},
    {"op": "SoftmaxActivation", "name": "sa", "attrs": {"mode": "channel"},
     "inputs": [[5, 0, 0]]},
    {"op": "null", "name": "svm_label", "inputs": []},
    {"op": "SVMOutput", "name": "svm", "attrs": {"margin": "0.5", "use_linear": "True",
     "regularization_coefficient": "1.0"}, "inputs": [[6, 0, 0], [7, 0, 0]]},
    {"op": "null", "name": "acts", "inputs": []},
    {"op": "null", "name": "ctc_label", "inputs": []},
    {"op": "_contrib_CTCLoss", "name": "ctc", "attrs": {"blank_label": "first"},
     "inputs": [[9, 0, 0], [10, 0, 0]]},
    {"op": "MakeLoss", "name": "ctc_loss", "inputs": [[11, 0, 0]]},
    {"op": "MAERegressionOutput", "name": "mae", "inputs": [[0, 0, 0], [1, 0, 0]]}
  ],
  "arg_nodes": [0, 1, 5, 7, 9, 10],
  "node_row_ptr": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15],
  "heads": [[2, 0, 0], [4, 0, 0], [8, 0, 0], [12, 0, 0], [13, 0, 0]],
  "attrs": {"mxnet_version": ["int", 10901]}
}"""

JSON_SHAPES = {"data": (4, 3), "feat": (2, 3, 4), "acts": (6, 2, 5), "ctc_label": (2, 3)}


def test_mxnet_json_loads_infers_runs_and_differentiates():
    net = sg.sym.load_json(MXNET_JSON)
    args, outs, aux = net.infer_shape(**JSON_SHAPES)
    shapes = dict(zip(net.list_arguments(), args))
    assert shapes["reg_label"] == (4, 3) and shapes["svm_label"] == (2, 3)
    assert outs == [(4, 3), (4, 3), (2, 3, 4), (2,), (4, 3)] and aux == []
    again = sg.sym.load_json(net.tojson())
    assert again.tojson() == net.tojson()
    rng = np.random.default_rng(17)
    feeds = {"data": rng.normal(size=(4, 3)), "reg_label": rng.random(size=(4, 3)),
             "feat": rng.normal(size=(2, 3, 4)), "svm_label": _labels(rng, (2, 3), 4),
             "acts": rng.normal(size=(6, 2, 5)),
             "ctc_label": np.array([[1, 4, 4], [2, 3, 0]], np.float64)}
    g = again.graph()
    nodes = {n.name: n for n in g.nodes}

    def r(name, *xs):
        return REFERENCE_LOSS[nodes[name].op.name](nodes[name].params, *xs)
    got, _ = lower(g, is_train=False)(feeds)
    sa = r("sa", feeds["feat"])
    want = [r("logit", feeds["data"], feeds["reg_label"]), r("ml", r("sl1", feeds["data"])),
            r("svm", sa, feeds["svm_label"]),
            r("ctc_loss", r("ctc", feeds["acts"], feeds["ctc_label"])),
            r("mae", feeds["data"], feeds["reg_label"])]
    for o, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(o), w, rtol=1e-12, atol=1e-14)
    # the gradients: every head is a loss, no head gradient is fed
    gg = build_gradient(g, ["data", "feat", "acts"])
    assert not [n for n in gg.variables if n.name.endswith("_head_grad")]
    outs, _ = jax.jit(lower(gg, is_train=True))(feeds, KEY)
    d_data, d_feat, d_acts = (np.asarray(o) for o in outs[5:])
    x = feeds["data"]
    logit = want[0]
    p = {n: nodes[n].params for n in nodes}
    want_data = (LOSS_GRAD_LOSS["LogisticRegressionOutput"](p["logit"], logit, x,
                                                           feeds["reg_label"])
                 + GRAD_REFERENCE_LOSS["smooth_l1"](p["sl1"], [x], [np.full(x.shape,
                                                                            0.5 / 4)])[0]
                 + LOSS_GRAD_LOSS["MAERegressionOutput"](p["mae"], x, x, feeds["reg_label"]))
    np.testing.assert_allclose(d_data, want_data, rtol=1e-12, atol=1e-14)
    svm_grad = LOSS_GRAD_LOSS["SVMOutput"](p["svm"], sa, sa, feeds["svm_label"])
    np.testing.assert_allclose(d_feat, GRAD_REFERENCE_LOSS["SoftmaxActivation"](
        p["sa"], [feeds["feat"]], [svm_grad])[0], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(d_acts, ctc_cost_and_grad(p["ctc"], feeds["acts"],
                                                         feeds["ctc_label"])[1],
                               rtol=1e-10, atol=1e-12)


def test_mxnet_json_trains_in_a_verified_plan():
    net = sg.sym.load_json(MXNET_JSON)
    plan = sg.plan(net, {**JSON_SHAPES, "reg_label": (4, 3), "svm_label": (2, 3)},
                   train=True, wrt=["data", "feat", "acts"], execute=True)
    assert plan.verified and plan.arena_checked
    names = {n.op.name for n in plan.graph.nodes if n.op is not None}
    assert {"_backward_CTCLoss", "_backward_SVMOutput", "_backward_SoftmaxActivation",
            "_backward_smooth_l1", "_backward_MakeLoss", "_backward_MAERegressionOutput",
            "_backward_LogisticRegressionOutput"} <= names


# --------------------------------------------------------------------------
# bad input: one clear error each
# --------------------------------------------------------------------------
BAD = [
    ("MakeLoss", {"normalization": "mean"}, {"data": (2, 3)}, OpError,
     ["normalization", "null, batch, valid"]),
    ("MakeLoss", {"norm": "batch"}, {"data": (2, 3)}, OpError, ["'norm'", "normalization"]),
    ("LogisticRegressionOutput", {}, {"data": (4, 3), "label": (3, 4)}, ShapeError,
     ["label shape (3, 4)", "first axis (4)"]),
    ("MAERegressionOutput", {}, {"data": (4, 3), "label": (4, 2)}, ShapeError,
     ["label shape (4, 2)", "size (12)"]),
    ("MAERegressionOutput", {"grad_scale": "x"}, {"data": (4, 3)}, OpError,
     ["grad_scale", "number"]),
    ("SVMOutput", {}, {"data": (4,)}, ShapeError, ["SVMOutput", "rank >= 2"]),
    ("SVMOutput", {}, {"data": (4, 3), "label": (4, 3)}, ShapeError,
     ["label shape (4, 3)", "expected (4,)"]),
    ("SoftmaxActivation", {"mode": "channel"}, {"data": (2, 3)}, ShapeError,
     ["mode=channel", "rank >= 3"]),
    ("SoftmaxActivation", {"mode": "pixel"}, {"data": (2, 3)}, OpError,
     ["mode", "instance, channel"]),
    ("smooth_l1", {"scalar": "big"}, {"data": (2, 3)}, OpError, ["scalar", "number"]),
    ("CTCLoss", {}, {"data": (5, 2), "label": (2, 3)}, ShapeError, ["CTCLoss", "rank 3"]),
    ("CTCLoss", {}, {"data": (5, 2, 4), "label": (2,)}, ShapeError, ["label of rank 2"]),
    ("CTCLoss", {}, {"data": (5, 2, 4), "label": (3, 2)}, ShapeError,
     ["batch of data (5, 2, 4)", "label (3, 2)"]),
    ("CTCLoss", {}, {"data": (2, 2, 4), "label": (2, 3)}, ShapeError,
     ["label length 3", "sequence length 2"]),
    ("CTCLoss", {"use_data_lengths": True},
     {"data": (5, 2, 4), "label": (2, 3), "data_lengths": (3,)}, ShapeError,
     ["data_lengths", "batch size (2)"]),
    ("CTCLoss", {"use_label_lengths": True},
     {"data": (5, 2, 4), "label": (2, 3), "label_lengths": (2, 1)}, ShapeError,
     ["label_lengths", "vector"]),
    ("CTCLoss", {"blank_label": "middle"}, {"data": (5, 2, 4)}, OpError,
     ["blank_label", "first, last"]),
    ("SoftmaxOutput", {"multi_output": True}, {"data": (2, 4, 6), "label": (2, 5)},
     ShapeError, ["label shape (2, 5)", "expected (2, 6)"]),
]


@pytest.mark.parametrize("opname,attrs,shapes,err,words", BAD,
                         ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_bad_input_gives_one_clear_error(opname, attrs, shapes, err, words):
    with pytest.raises(err) as info:
        op = get_op(opname)
        probe = Node(op, "bad", attrs, [])
        names = op.arg_names(probe.params)
        node = Node(op, "bad", attrs, [Entry(Node(None, n)) for n in names])
        infer_shapes(Graph([Entry(node, 0)]), shapes)
    msg = str(info.value)
    assert isinstance(info.value, SymgraphError) and "\n" not in msg
    assert "'bad'" in msg and f"({opname})" in msg, msg
    for w in words:
        assert w in msg, msg


def test_every_new_op_is_registered_with_samples():
    names = ["MakeLoss", "make_loss", "LogisticRegressionOutput", "MAERegressionOutput",
             "SVMOutput", "SoftmaxActivation", "smooth_l1", "CTCLoss", "ctc_loss",
             "_contrib_CTCLoss"]
    for n in names:
        op = get_op(n)
        assert op.samples and n in REFERENCE_LOSS, n
    assert set(itertools.chain(LOSS_GRAD_LOSS)) >= {
        "MakeLoss", "make_loss", "LogisticRegressionOutput", "MAERegressionOutput",
        "SVMOutput", "SoftmaxOutput"}
