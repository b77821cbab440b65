"""The ops of MXNet's ONNX exporter set (tests/test_mxnet_op_set.py) that
symgraph gained for it: broadcast_mod (ops/elementwise.py),
_random_uniform_like (ops/sampling.py), _contrib_div_sqrt_dim and the
interleaved self-attention products (ops/attention.py), slice_like,
_split_v2 and _contrib_arange_like (ops/slicing.py) and _contrib_box_decode
(ops/boxes.py), beyond the registry-driven checks of test_ops.py: the
forward in float64 against the NumPy references of op_reference_onnx.py on
MXNet's documented examples and edge cases, gradients against central
finite differences, what the backwards read, an attention block planned and
verified, and one clear error per bad input."""
import jax
import numpy as np
import pytest

import symgraph as sg
from symgraph.errors import OpError, ShapeError
from symgraph.graph import Entry, Graph
from symgraph.lower import lower
from symgraph.ops import get_op
from symgraph.passes.gradient import build_gradient
from symgraph.passes.infer import infer_shapes

from grad_check import assert_one_clear_error, finite_differences, lowered_outputs, node_over
from op_reference_onnx import REFERENCE_ONNX, mx_mod


def forward(opname, attrs, *xs):
    """(symgraph's outputs, NumPy's), each a list, for inputs ``xs``."""
    got, node = lowered_outputs(opname, attrs, *xs)
    want = REFERENCE_ONNX[get_op(opname).name](node.params, *xs)
    return got, list(want) if isinstance(want, tuple) else [want]


def gradients(opname, attrs, xs, heads, wrt):
    """symgraph's gradients of sum_k(out_k * heads[k]) with respect to the
    inputs whose indices are in ``wrt`` (float64)."""
    names = [f"x{i}" for i in range(len(xs))]
    g, _ = node_over(opname, attrs, names)
    gg = build_gradient(g, [names[i] for i in wrt])
    head_names = [e.node.output_names()[e.index] + "_head_grad" for e in g.outputs]
    used = {n.name for n in gg.variables}
    feeds = {**dict(zip(names, xs)), **{k: h for k, h in zip(head_names, heads) if k in used}}
    outs, _ = jax.jit(lower(gg, is_train=True))(feeds, jax.random.key(0))
    return [np.asarray(o) for o in outs[len(g.outputs):]]


def check_gradients(opname, attrs, xs, wrt, rtol=1e-7, atol=1e-9):
    """symgraph's gradients against central differences of the reference."""
    _, want = forward(opname, attrs, *xs)
    heads = [RNG.normal(size=w.shape) for w in want]
    got = gradients(opname, attrs, xs, heads, wrt)
    p = node_over(opname, attrs, [f"x{i}" for i in range(len(xs))])[1].params
    fd = finite_differences(lambda *v: REFERENCE_ONNX[get_op(opname).name](p, *v), xs,
                            heads, wrt)
    for k, (a, b) in enumerate(zip(got, fd)):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"input {wrt[k]}")


RNG = np.random.default_rng(0)


def rand(*shape):
    return RNG.normal(size=shape)


# --------------------------------------------------------------------------
# broadcast_mod
# --------------------------------------------------------------------------
def test_broadcast_mod_mxnet_doc_example():
    got, want = forward("broadcast_mod", {}, np.full((2, 3), 8.0), np.array([[2.0], [3.0]]))
    np.testing.assert_array_equal(got[0], [[0, 0, 0], [2, 2, 2]])
    np.testing.assert_array_equal(want[0], got[0])


def test_broadcast_mod_takes_the_divisors_sign_and_zero_for_zero():
    a = np.array([7.5, -7.5, 7.5, -7.5, 6.0, -6.0, 3.0, 0.0])
    b = np.array([2.0, 2.0, -2.0, -2.0, 3.0, -3.0, 0.0, -2.0])
    got, want = forward("broadcast_mod", {}, a, b)
    np.testing.assert_array_equal(got[0], [1.5, 0.5, -0.5, -1.5, 0, 0, 0, 0])
    np.testing.assert_array_equal(want[0], got[0])
    assert [mx_mod(x, y) for x, y in zip(a, b)] == list(np.mod(a, np.where(b == 0, 1, b))
                                                       * (b != 0))
    # integers: the same rule, the same dtype
    ai, bi = np.array([[7, -7], [5, 0]], np.int32), np.array([3, -3], np.int32)
    got, want = forward("broadcast_mod", {}, ai, bi)
    assert got[0].dtype == np.int32
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[0], [[1, -1], [2, 0]])


def _off_the_jumps(sa, b):
    """lhs of shape ``sa`` whose quotients by b stay 0.05 from an integer
    (mod jumps there, so central differences would straddle a jump)."""
    while True:
        a = RNG.uniform(-5, 5, size=sa)
        q = np.broadcast_arrays(a, b)[0] / np.broadcast_arrays(a, b)[1]
        if (np.abs(q - np.round(q)) >= 0.05).all():
            return a


@pytest.mark.parametrize("sa,sb", [((2, 3), (2, 3)), ((2, 3), (3,)), ((2, 1, 3), (1, 2, 1))])
def test_broadcast_mod_gradients_match_finite_differences(sa, sb):
    b = RNG.uniform(0.5, 2.0, size=sb) * RNG.choice([-1.0, 1.0], size=sb)
    check_gradients("broadcast_mod", {}, [_off_the_jumps(sa, b), b], [0, 1])


# --------------------------------------------------------------------------
# _random_uniform_like
# --------------------------------------------------------------------------
def test_random_uniform_like_draws_in_the_inputs_shape_and_dtype():
    x = np.zeros((200, 50), np.float32)
    g, _ = node_over("_random_uniform_like", {"low": -2, "high": 3}, ["x0"])
    f = jax.jit(lower(g))
    a, _ = f({"x0": x}, jax.random.key(3))
    b, _ = f({"x0": x + 5}, jax.random.key(3))  # the values of x are not read
    a, b = np.asarray(a[0]), np.asarray(b[0])
    assert a.shape == x.shape and a.dtype == np.float32
    np.testing.assert_array_equal(a, b)
    assert a.min() >= -2 and a.max() < 3
    assert abs(a.mean() - 0.5) < 0.05 and abs(a.var() - 25 / 12) < 0.1
    c, _ = f({"x0": x}, jax.random.key(4))
    assert not np.array_equal(a, np.asarray(c[0]))
    # float64 in, float64 out; the default range is [0, 1)
    g, _ = node_over("_random_uniform_like", {}, ["x0"])
    d, _ = jax.jit(lower(g))({"x0": np.zeros((3, 4))}, jax.random.key(0))
    d = np.asarray(d[0])
    assert d.dtype == np.float64 and d.min() >= 0 and d.max() < 1


def test_random_uniform_like_reads_its_input_for_the_shape_only():
    op = get_op("_random_uniform_like")
    assert op.shape_inputs(None) == [0]
    g, _ = node_over("_random_uniform_like", {}, ["x0"])
    gg = build_gradient(g, ["x0"])
    assert gg.outputs[1].node.op.name == "zeros_like"  # MXNet's zero gradient


# --------------------------------------------------------------------------
# _contrib_div_sqrt_dim and the interleaved self-attention products
# --------------------------------------------------------------------------
def test_div_sqrt_dim_divides_by_the_root_of_the_last_dimension():
    x = rand(2, 3, 16)
    got, want = forward("_contrib_div_sqrt_dim", {}, x)
    np.testing.assert_allclose(got[0], x / 4, rtol=1e-15)
    np.testing.assert_allclose(want[0], x / 4, rtol=1e-15)
    check_gradients("_contrib_div_sqrt_dim", {}, [rand(2, 5)], [0])
    # the gradient is the op itself on dy, reading nothing else
    g, _ = node_over("_contrib_div_sqrt_dim", {}, ["x0"])
    grad = build_gradient(g, ["x0"]).outputs[1].node
    assert grad.op.name == "_contrib_div_sqrt_dim"
    assert [e.node.name for e in grad.inputs] == ["op_output_head_grad"]


def _documented_qk(x, heads):
    """MXNet's 'equivalent code' of selfatt_qk, in NumPy."""
    length, batch, _ = x.shape
    tmp = x.reshape(length, batch, heads, 3, -1)
    q = tmp[:, :, :, 0, :].transpose(1, 2, 0, 3).reshape(batch * heads, length, -1)
    k = tmp[:, :, :, 1, :].transpose(1, 2, 0, 3).reshape(batch * heads, length, -1)
    return (q / np.sqrt(q.shape[-1])) @ k.transpose(0, 2, 1)


def _documented_valatt(x, att, heads):
    length, batch, _ = x.shape
    tmp = x.reshape(length, batch, heads, 3, -1)
    v = tmp[:, :, :, 2, :].transpose(1, 2, 0, 3).reshape(batch * heads, length, -1)
    out = (att @ v).reshape(batch, heads, length, -1)
    return out.transpose(2, 0, 1, 3).reshape(length, batch, -1)


@pytest.mark.parametrize("length,batch,heads,d", [(3, 2, 2, 2), (4, 1, 1, 3), (2, 3, 3, 1)])
def test_interleaved_products_match_mxnets_documented_composition(length, batch, heads, d):
    x = rand(length, batch, heads * 3 * d)
    got, want = forward("_contrib_interleaved_matmul_selfatt_qk", {"heads": heads}, x)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(got[0], _documented_qk(x, heads), rtol=1e-12, atol=1e-14)
    att = rand(batch * heads, length, length)
    got, want = forward("_contrib_interleaved_matmul_selfatt_valatt", {"heads": heads}, x, att)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(got[0], _documented_valatt(x, att, heads), rtol=1e-12,
                               atol=1e-14)


def test_interleaved_products_gradients_match_finite_differences():
    x = rand(3, 2, 12)
    check_gradients("_contrib_interleaved_matmul_selfatt_qk", {"heads": 2}, [x], [0])
    check_gradients("_contrib_interleaved_matmul_selfatt_valatt", {"heads": 2},
                    [x, rand(4, 3, 3)], [0, 1])


def test_interleaved_backwards_read_the_inputs():
    # MXNet's ElemwiseGradUseIn: both read dy and every forward input
    for opname, names in [("_contrib_interleaved_matmul_selfatt_qk", ["x0"]),
                          ("_contrib_interleaved_matmul_selfatt_valatt", ["x0", "x1"])]:
        g, _ = node_over(opname, {"heads": 1}, names)
        grad = build_gradient(g, names).outputs[1].node
        assert grad.op.name == "_backward_" + opname
        assert [e.node.name for e in grad.inputs] == ["op_output_head_grad"] + names


def test_an_attention_block_plans_verifies_and_trains():
    S = sg.sym
    data = S.Variable("data")                                   # (L, B, E)
    qkv = S.FullyConnected(data, num_hidden=3 * 2 * 4, flatten=False, name="qkv")
    score = S._contrib_interleaved_matmul_selfatt_qk(qkv, heads=2, name="qk")
    att = S.softmax(score, axis=-1, name="att")
    ctx = S._contrib_interleaved_matmul_selfatt_valatt(qkv, att, heads=2, name="valatt")
    out = S.LinearRegressionOutput(S._contrib_div_sqrt_dim(ctx, name="scale"), name="out")
    assert out.infer_shape(data=(5, 3, 6))[1] == [(5, 3, 8)]
    plan = sg.plan(out, {"data": (5, 3, 6)}, train=True, execute=True)
    assert plan.verified and plan.arena_checked
    names = {n.op.name for n in plan.graph.nodes if n.op is not None}
    assert {"_backward__contrib_interleaved_matmul_selfatt_qk",
            "_backward__contrib_interleaved_matmul_selfatt_valatt"} <= names


# --------------------------------------------------------------------------
# slice_like, _split_v2, _contrib_arange_like
# --------------------------------------------------------------------------
X34 = np.arange(1.0, 13.0).reshape(3, 4)


@pytest.mark.parametrize("attrs,want", [
    ({}, [[1, 2, 3], [5, 6, 7]]),
    ({"axes": (0, 1)}, [[1, 2, 3], [5, 6, 7]]),
    ({"axes": (0,)}, [[1, 2, 3, 4], [5, 6, 7, 8]]),
    ({"axes": (-1,)}, [[1, 2, 3], [5, 6, 7], [9, 10, 11]]),
    ({"axes": "(-1,)"}, [[1, 2, 3], [5, 6, 7], [9, 10, 11]]),
])
def test_slice_like_mxnet_doc_examples(attrs, want):
    got, ref = forward("slice_like", attrs, X34, np.zeros((2, 3)))
    np.testing.assert_array_equal(got[0], want)
    np.testing.assert_array_equal(ref[0], want)


def test_slice_like_ranks_may_differ_with_axes_and_like_keeps_its_dtype():
    x = rand(2, 3, 4, 5)
    got, want = forward("slice_like", {"axes": (0, 2)}, x, np.zeros((1, 2, 3), np.int32))
    assert got[0].shape == (1, 3, 3, 5) and got[0].dtype == np.float64
    np.testing.assert_array_equal(got[0], want[0])


def test_slice_like_gradient_and_what_it_reads():
    check_gradients("slice_like", {"axes": (1, -1)}, [rand(2, 3, 4), rand(2, 2, 3)], [0])
    g, _ = node_over("slice_like", {}, ["x0", "x1"])
    gg = build_gradient(g, ["x0", "x1"])
    grad = gg.outputs[1].node
    assert grad.op.name == "_backward_slice_like"
    assert [e.node.name for e in grad.inputs] == ["op_output_head_grad", "x0"]
    assert grad.op.shape_inputs(grad.params) == [1]  # x0's shape only
    assert gg.outputs[2].node.op.name == "zeros_like"  # shape_like: no gradient
    assert get_op("slice_like").shape_inputs(None) == [1]


X321 = np.arange(1.0, 7.0).reshape(3, 2, 1)


@pytest.mark.parametrize("attrs,want", [
    ({"indices": (), "sections": 2, "axis": 1}, [[[[1]], [[3]], [[5]]], [[[2]], [[4]], [[6]]]]),
    ({"indices": (), "sections": 3, "axis": 0}, [[[[1], [2]]], [[[3], [4]]], [[[5], [6]]]]),
    ({"indices": (0, 1), "axis": 0}, [[[[1], [2]]], [[[3], [4]], [[5], [6]]]]),
    ({"indices": (), "sections": 3, "axis": 0, "squeeze_axis": True},
     [[[1], [2]], [[3], [4]], [[5], [6]]]),
])
def test_split_v2_mxnet_doc_examples(attrs, want):
    got, ref = forward("_split_v2", attrs, X321)
    assert len(got) == len(want)
    for g, r, w in zip(got, ref, want):
        np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(r, w)


def test_split_v2_sections_split_unevenly_as_array_split():
    x = rand(2, 7)
    got, want = forward("_split_v2", {"indices": (), "sections": 3, "axis": -1}, x)
    assert [g.shape for g in got] == [(2, 3), (2, 2), (2, 2)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    got, want = forward("_split_v2", {"indices": (0, 2, 3), "axis": 1}, x)
    assert [g.shape for g in got] == [(2, 2), (2, 1), (2, 4)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("attrs,shape", [
    ({"indices": (0, 1, 3)}, (2, 5)),
    ({"indices": (), "sections": 2, "axis": 0}, (5, 2)),
    ({"indices": (0, 1), "axis": -1, "squeeze_axis": True}, (3, 2)),
])
def test_split_v2_gradients_match_finite_differences(attrs, shape):
    check_gradients("_split_v2", attrs, [rand(*shape)], [0])


def test_split_v2_unread_parts_give_zeros():
    x = rand(2, 5)
    g, node = node_over("_split_v2", {"indices": (0, 1, 3)}, ["x0"])
    g1 = Graph([Entry(node, 1)])  # only the middle part is used
    gg = build_gradient(g1, ["x0"])
    dy = rand(2, 2)
    outs, _ = lower(gg, is_train=True)({"x0": x, "op_output1_head_grad": dy})
    np.testing.assert_array_equal(np.asarray(outs[1]), np.c_[np.zeros((2, 1)), dy,
                                                           np.zeros((2, 2))])


@pytest.mark.parametrize("attrs,shape,want", [
    ({"start": 0}, (3, 4), np.arange(12.0).reshape(3, 4)),        # MXNet's doc example
    ({"start": 0, "axis": -1}, (3, 4), [0, 1, 2, 3]),              # ... with axis
    ({"start": 1, "step": 0.5, "repeat": 2}, (2, 3), [[1, 1, 1.5], [1.5, 2, 2]]),
    ({"step": -2, "axis": 0}, (3, 2), [0, -2, -4]),
])
def test_arange_like_mxnet_semantics(attrs, shape, want):
    got, ref = forward("_contrib_arange_like", attrs, rand(*shape))
    np.testing.assert_array_equal(got[0], want)
    np.testing.assert_array_equal(ref[0], want)


def test_arange_like_takes_the_inputs_dtype_and_no_gradient():
    got, want = forward("_contrib_arange_like", {"start": 1.7, "step": 1.5},
                        np.zeros((2, 2), np.int32))
    assert got[0].dtype == np.int32
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[0], [[1, 2], [3, 4]])  # start, step cast first
    g, _ = node_over("_contrib_arange_like", {}, ["x0"])
    gg = build_gradient(g, ["x0"])
    assert gg.outputs[1].node.op.name == "zeros_like"
    assert get_op("_contrib_arange_like").shape_inputs(None) == [0]


def test_shape_only_inputs_plan_and_verify():
    # slice_like's shape_like and arange_like's data are read for their
    # shapes only: the arena interpreter poisons them and the plan holds
    S = sg.sym
    a, b = S.Variable("a"), S.Variable("b")
    sl = S.slice_like(S.exp(a, name="e"), S.relu(b, name="rb"), axes=(1,), name="sl")
    parts = S._split_v2(sl, indices=(0, 1), axis=0, name="sp")
    mod = S.broadcast_mod(parts[1], S._contrib_arange_like(parts[0], start=2, name="r"),
                          name="m")
    out = S.LinearRegressionOutput(mod, name="o")
    plan = sg.plan(out, {"a": (3, 5), "b": (2, 4)}, train=True, wrt=["a"], execute=True)
    assert plan.verified and plan.arena_checked
    names = {n.op.name for n in plan.graph.nodes if n.op is not None}
    assert {"_backward_slice_like", "_backward_broadcast_mod", "Concat"} <= names


# --------------------------------------------------------------------------
# _contrib_box_decode
# --------------------------------------------------------------------------
def test_box_decode_by_hand():
    anchors = np.array([[[0.5, 0.5, 0.2, 0.4], [0.1, 0.2, 0.3, 0.6]]])  # centre form
    data = np.array([[[0.0, 0.0, 0.0, 0.0], [1.0, -0.5, np.log(2), 0.0]]])
    got, want = forward("_contrib_box_decode", {}, data, anchors)
    # offsets 0: the anchor itself as corners; x + 1 * w, y - 0.5 * h, w doubled
    np.testing.assert_allclose(got[0], [[[0.4, 0.3, 0.6, 0.7], [0.1, -0.4, 0.7, 0.2]]],
                               atol=1e-15)
    np.testing.assert_allclose(want[0], got[0], atol=1e-15)
    # corner anchors, stds and a clip
    corners = np.array([[[0.0, 0.0, 0.4, 0.2], [0.2, 0.2, 0.6, 1.0]]])
    attrs = {"format": "corner", "std0": 0.1, "std1": 0.1, "std2": 0.2, "std3": 0.2,
             "clip": 0.1}
    data = rand(3, 2, 4)
    got, want = forward("_contrib_box_decode", attrs, data, corners)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-13)
    big = np.array([[[0, 0, 5.0, 5.0], [0, 0, -5.0, 0.25]]])
    got, _ = forward("_contrib_box_decode", attrs, big, corners)
    w = np.exp(min(5 * 0.2, 0.1)) * 0.4  # the width offset clipped to 0.1
    np.testing.assert_allclose(got[0][0, 0, 2] - got[0][0, 0, 0], w, rtol=1e-13)
    np.testing.assert_allclose(got[0][0, 1, 2] - got[0][0, 1, 0], np.exp(-1.0) * 0.4,
                               rtol=1e-13)


def test_box_decode_anchors_of_higher_rank_and_no_gradient():
    data, anchors = rand(2, 3, 4), RNG.uniform(0.1, 1, size=(1, 1, 3, 4))
    got, want = forward("_contrib_box_decode", {}, data, anchors)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-13)
    got, want = forward("_contrib_box_decode", {}, data, anchors.reshape(1, 3, 4))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-13)
    g, _ = node_over("_contrib_box_decode", {}, ["x0", "x1"])
    gg = build_gradient(g, ["x0", "x1"])
    assert {e.node.op.name for e in gg.outputs[1:]} == {"zeros_like"}  # MXNet's zeros


# --------------------------------------------------------------------------
# one clear error per bad input
# --------------------------------------------------------------------------
@pytest.mark.parametrize("opname,attrs,shapes,err,words", [
    ("broadcast_mod", {}, [(2, 3), (3, 2)], ShapeError, ["could not be broadcast"]),
    ("_random_uniform_like", {"low": 2, "high": 1}, [(2, 3)], ShapeError,
     ["low=2.0", "less than high=1.0"]),
    ("_contrib_div_sqrt_dim", {"axis": 1}, [(2, 3)], OpError, ["unknown attribute 'axis'"]),
    ("_contrib_interleaved_matmul_selfatt_qk", {"heads": 5}, [(3, 2, 12)], ShapeError,
     ["multiple of 3 * heads = 15"]),
    ("_contrib_interleaved_matmul_selfatt_qk", {"heads": 2}, [(3, 12)], ShapeError,
     ["must be 3-D"]),
    ("_contrib_interleaved_matmul_selfatt_qk", {}, [(3, 2, 12)], OpError,
     ["missing required attribute 'heads'"]),
    ("_contrib_interleaved_matmul_selfatt_valatt", {"heads": 2}, [(3, 2, 12), (2, 3, 3)],
     ShapeError, ["attention (2, 3, 3) must be (4, 3, 3)"]),
    ("slice_like", {}, [(3, 4), (2, 5)], ShapeError, ["axis 1", "exceeds data"]),
    ("slice_like", {}, [(3, 4), (2,)], ShapeError, ["one rank", "give axes"]),
    ("slice_like", {"axes": (2,)}, [(3, 4, 5), (2, 3)], ShapeError,
     ["axis 2 is out of range for shape_like"]),
    ("_split_v2", {"indices": (1, 2)}, [(2, 5)], ShapeError, ["must start at 0"]),
    ("_split_v2", {"indices": (0, 3, 2)}, [(2, 5)], ShapeError, ["empty part"]),
    ("_split_v2", {"indices": (), "sections": 6}, [(2, 5)], ShapeError,
     ["sections=6", "empty part"]),
    ("_split_v2", {"indices": (0, 1), "squeeze_axis": True}, [(2, 5)], ShapeError,
     ["squeeze_axis=True", "size 1"]),
    ("_split_v2", {"sections": 2}, [(2, 4)], OpError, ["missing required attribute 'indices'"]),
    ("_split_v2", {"indices": (), "sections": -1}, [(2, 4)], OpError, ["sections"]),
    ("_split_v2", {"indices": (), "sections": "0x7fffffffffffffff"}, [(2, 4)], OpError,
     ["sections", "up to 65536"]),
    ("_split_v2", {"indices": ()}, [(2, 4)], ShapeError, ["indices", "or sections > 0"]),
    ("_split_v2", {"indices": (0, -1)}, [(2, 4)], ShapeError, ["must not be negative"]),
    ("_contrib_arange_like", {"axis": 2}, [(3, 4)], ShapeError, ["axis=2", "rank 2"]),
    ("_contrib_arange_like", {"repeat": 0}, [(3, 4)], ShapeError, ["repeat=0"]),
    ("_contrib_box_decode", {}, [(2, 3, 5), (1, 3, 4)], ShapeError, ["(batch, anchors, 4)"]),
    ("_contrib_box_decode", {}, [(2, 3, 4), (1, 2, 4)], ShapeError,
     ["one box for each of the 3 anchors"]),
    ("_contrib_box_decode", {"format": "xywh"}, [(2, 3, 4), (1, 3, 4)], OpError,
     ["corner, center"]),
])
def test_bad_input_raises_one_clear_error(opname, attrs, shapes, err, words):
    assert_one_clear_error(opname, attrs, shapes, err, words)


def test_random_uniform_like_refuses_an_integer_input():
    g, _ = node_over("_random_uniform_like", {}, ["x0"], name="bad_node")
    with pytest.raises(ShapeError, match="data is int32: _random_uniform_like draws"):
        infer_shapes(g, {"x0": (2, 3)}, dtypes={"x0": "int32"})
