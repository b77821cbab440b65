"""The math, comparison, indexing, ordering, sequence and random ops
(symgraph/ops/mathops.py, indexing.py, ordering.py, sequence.py,
sampling.py, and softmax/log_softmax's use_length and dtype in reduce.py)
beyond the registry-driven checks of test_ops.py: the forward in float64
against the NumPy references of op_reference_math.py and MXNet 1.9.1's
documented examples on the edge cases (halves in round and rint, ties,
out-of-range and float indices, lengths of 0 and past the end, integer and
bool inputs), gradients against central finite differences, what each
backward reads, an MXNet-JSON net using many of them, the random ops'
shapes, dtypes and moments, and one clear error per bad input."""
import json

import jax
import numpy as np
import pytest

import symgraph as sg
from symgraph.errors import OpError, ShapeError
from symgraph.lower import lower
from symgraph.ops import get_op
from symgraph.passes.gradient import build_gradient
from symgraph.passes.infer import infer_shapes

from grad_check import assert_one_clear_error, finite_differences, lowered_outputs, node_over
from op_reference import REFERENCE
from op_reference_math import c_round, masked_softmax, mxnet_rint

RNG = np.random.default_rng(0)


def rand(*shape, low=-1.0, high=1.0):
    return RNG.uniform(low, high, size=shape)


def run(opname, attrs, *xs, key=None, is_train=False):
    """symgraph's visible outputs for inputs ``xs`` (their own dtypes), with
    the inferred shapes and dtypes checked against the lowered ones."""
    got, node = lowered_outputs(opname, attrs, *xs, is_train=is_train, key=key)
    return got, node.params


def forward(opname, attrs, *xs):
    """(symgraph's first output, the reference's first output)."""
    got, p = run(opname, attrs, *xs)
    want = REFERENCE[get_op(opname).name](p, *xs)
    return got[0], want[0] if isinstance(want, tuple) else want


def gradients(opname, attrs, xs, heads, wrt):
    """symgraph's gradients of sum(op(xs)_k * heads[k]) w.r.t. xs[i], i in wrt."""
    names = [f"x{i}" for i in range(len(xs))]
    g, _ = node_over(opname, attrs, names)
    gg = build_gradient(g, [names[i] for i in wrt])
    heads = heads if isinstance(heads, list) else [heads]
    feeds = dict(zip(names, xs))
    for e, h in zip(g.outputs, heads):
        feeds[e.node.output_names()[e.index] + "_head_grad"] = h
    used = {n.name for n in gg.variables}
    outs, _ = jax.jit(lower(gg, is_train=True))({k: v for k, v in feeds.items() if k in used})
    return [np.asarray(o) for o in outs[len(g.outputs):]]


def params(opname, attrs, n_inputs):
    return node_over(opname, attrs, [f"x{i}" for i in range(n_inputs)])[1].params


# --------------------------------------------------------------------------
# rounding, sign, logic: MXNet's exact rules
# --------------------------------------------------------------------------
HALVES = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -2.1, -1.9, 1.9, 2.1, 0.0,
                   0.49999999999999994, -3.0])


def test_rounding_rules_are_mxnets():
    # MXNet's documented examples
    doc = np.array([-1.5, 1.5, -1.9, 1.9, 2.1])
    np.testing.assert_array_equal(forward("round", {}, doc)[0], [-2, 2, -2, 2, 2])
    np.testing.assert_array_equal(forward("rint", {}, doc)[0], [-2, 1, -2, 2, 2])
    doc = np.array([-2.1, -1.9, 1.5, 1.9, 2.1])
    np.testing.assert_array_equal(forward("ceil", {}, doc)[0], [-2, -1, 2, 2, 3])
    np.testing.assert_array_equal(forward("floor", {}, doc)[0], [-3, -2, 1, 1, 2])
    np.testing.assert_array_equal(forward("trunc", {}, doc)[0], [-2, -1, 1, 1, 2])
    # every half: round away from zero, rint toward -inf (not NumPy's to-even)
    got, want = forward("round", {}, HALVES)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got[:6], [-3, -2, -1, 1, 2, 3])
    assert got[11] == 0  # C's round, not floor(x + 0.5) (which gives 1)
    got, want = forward("rint", {}, HALVES)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got[:6], [-3, -2, -1, 0, 1, 2])
    assert [c_round(v) for v in (2.5, -2.5)] == [3, -3] and mxnet_rint(0.5) == 0
    for opname, fn in (("floor", np.floor), ("ceil", np.ceil), ("trunc", np.trunc)):
        got, want = forward(opname, {}, HALVES)
        np.testing.assert_array_equal(got, fn(HALVES))
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("opname", ["floor", "ceil", "round", "rint", "trunc", "sign",
                                    "logical_not", "sin", "reciprocal"])
def test_integer_inputs_keep_their_dtype(opname):
    x = np.array([[-3, 0, 2], [5, -1, 1]], dtype=np.int32)
    got, want = forward(opname, {}, x)
    assert got.dtype == np.int32 and want.dtype == np.int32
    if opname != "reciprocal":  # 1 / 0 in int32: undefined in C
        np.testing.assert_array_equal(got, want)


def test_sign_and_logical_not():
    x = np.array([-2.0, -0.0, 0.0, 3.0, -1e-300])
    np.testing.assert_array_equal(forward("sign", {}, x)[0], [-1, 0, 0, 1, -1])
    got, want = forward("logical_not", {}, np.array([-2.0, 0.0, 1.0, -0.0]))
    np.testing.assert_array_equal(got, [0, 1, 0, 1])  # MXNet's example, and -0 is 0
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("opname,low,high", [
    ("reciprocal", 0.1, 3.0), ("rsqrt", 0.1, 3.0), ("erf", -4.0, 4.0), ("sin", -7.0, 7.0),
    ("cos", -7.0, 7.0), ("tan", -1.4, 1.4), ("arcsin", -1.0, 1.0), ("arccos", -1.0, 1.0),
    ("arctan", -9.0, 9.0), ("sinh", -5.0, 5.0), ("cosh", -5.0, 5.0), ("log2", 1e-3, 9.0),
    ("log10", 1e-3, 9.0), ("log1p", -0.99, 9.0), ("expm1", -5.0, 5.0),
    ("softsign", -9.0, 9.0), ("hard_sigmoid", -4.0, 4.0)])
def test_unary_math_matches_reference_in_float64(opname, low, high):
    x = np.concatenate([rand(40, low=low, high=high), [low, high]])
    got, want = forward(opname, {}, x)
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-15)


def test_unary_math_edges():
    assert forward("erf", {}, np.array([0.0, -1.0, 10.0]))[0] == pytest.approx(
        [0, -0.8427007929497149, 1])  # MXNet's example
    assert np.isnan(forward("arcsin", {}, np.array([1.5]))[0]).all()
    assert forward("log1p", {}, np.array([1e-17]))[0][0] == 1e-17  # accurate, not log(1+x)
    assert forward("expm1", {}, np.array([1e-17]))[0][0] == 1e-17
    np.testing.assert_array_equal(forward("reciprocal", {}, np.array([-2.0, 0.0]))[0],
                                  [-0.5, np.inf])
    # hard_sigmoid: clipped at 0 and 1 exactly; alpha, beta float32 as MXNet's real_t
    x = np.array([-2.5, -3.0, 0.0, 2.5, 3.0])
    got, want = forward("hard_sigmoid", {}, x)
    np.testing.assert_array_equal(got, want)
    assert got[1] == 0 and got[4] == 1 and got[2] == 0.5
    got, want = forward("hard_sigmoid", {"alpha": "0.1", "beta": 0.3}, x)
    np.testing.assert_allclose(got, np.clip(np.float32(0.1) * x + np.float32(0.3), 0, 1),
                               rtol=1e-15)


# --------------------------------------------------------------------------
# comparisons and logic
# --------------------------------------------------------------------------
@pytest.mark.parametrize("name,np_fn", [
    ("equal", np.equal), ("not_equal", np.not_equal), ("greater", np.greater),
    ("greater_equal", np.greater_equal), ("lesser", np.less),
    ("lesser_equal", np.less_equal)])
def test_comparisons(name, np_fn):
    x = np.array([[-1.0, 0.5, 2.0], [0.5, 3.0, -0.0]])
    got, want = forward(f"_{name}_scalar", {"scalar": 0.5}, x)
    np.testing.assert_array_equal(got, np_fn(x, 0.5).astype(np.float64))
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.float64
    y = np.array([[0.5], [3.0]])
    got, want = forward(f"broadcast_{name}", {}, x, y)
    np.testing.assert_array_equal(got, np_fn(x, y).astype(np.float64))
    np.testing.assert_array_equal(got, want)
    # the equal-shape form (and its MXNet alias)
    z = np.array([[0.5, 0.5, 2.0], [-1.0, 3.0, 0.0]])
    for opname in (f"_{name}", "_" + "_".join(w.capitalize() for w in name.split("_"))):
        got, want = forward(opname, {}, x, z)
        np.testing.assert_array_equal(got, np_fn(x, z).astype(np.float64))
        np.testing.assert_array_equal(got, want)
    # MXNet's documented example
    ones, col = np.ones((2, 3)), np.array([[0.0], [1.0]])
    got, _ = forward(f"broadcast_{name}", {}, ones, col)
    np.testing.assert_array_equal(got, np_fn(ones, col).astype(np.float64))


def test_scalar_comparison_types_as_mxnet():
    ints = np.array([0, 1, 2, 3], dtype=np.int32)
    # an integer scalar (is_int, the default): int32 out, the scalar truncated
    got, want = forward("_greater_scalar", {"scalar": 1.7}, ints)
    assert got.dtype == np.int32 and want.dtype == np.int32
    np.testing.assert_array_equal(got, [0, 0, 1, 1])  # 1.7 read as DType(1.7) = 1
    np.testing.assert_array_equal(got, want)
    # a float scalar: float64 out, compared as floats
    got, want = forward("_greater_scalar", {"scalar": 1.7, "is_int": False}, ints)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, [0, 0, 1, 1])
    got, want = forward("_equal_scalar", {"scalar": "1.5", "is_int": "False"}, ints)
    np.testing.assert_array_equal(got, [0, 0, 0, 0])
    np.testing.assert_array_equal(got, want)
    # bool input: int64 (is_int) or float64
    b = np.array([True, False, True])
    got, want = forward("_equal_scalar", {"scalar": 1}, b)
    assert got.dtype == np.int64 and want.dtype == np.int64
    np.testing.assert_array_equal(got, [1, 0, 1])
    assert forward("_lesser_scalar", {"scalar": 0.5, "is_int": False}, b)[0].dtype == \
        np.float64
    # the MXNet aliases
    np.testing.assert_array_equal(forward("_LesserEqualScalar", {"scalar": 2}, ints)[0],
                                  [1, 1, 1, 0])


def test_logic_is_on_nonzero():
    x = np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    y = np.array([[1.0], [0.0]])
    # MXNet's documented examples
    for name, want in (("logical_and", [[1, 1, 0], [0, 0, 0]]),
                       ("logical_or", [[1, 1, 1], [1, 1, 0]]),
                       ("logical_xor", [[0, 0, 1], [1, 1, 0]])):
        got, ref = forward(f"broadcast_{name}", {}, x, y)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, ref)
        got, ref = forward(f"_{name}", {}, x, np.broadcast_to(y, x.shape).copy())
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, ref)
    # any nonzero is true, negative included; int inputs stay int
    a, b = np.array([-2, 0, 3], np.int32), np.array([5, 5, 0], np.int32)
    got, _ = forward("broadcast_logical_and", {}, a, b)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, [1, 0, 0])


# --------------------------------------------------------------------------
# one_hot, pick, gather_nd
# --------------------------------------------------------------------------
def test_one_hot():
    got, want = forward("one_hot", {"depth": 3}, np.array([1.0, 0.0, 2.0, 0.0]))
    np.testing.assert_array_equal(got, [[0, 1, 0], [1, 0, 0], [0, 0, 1], [1, 0, 0]])
    assert got.dtype == np.float32 and want.dtype == np.float32
    # outside [0, depth): all off; floats truncate toward zero (-0.7 -> 0)
    idx = np.array([[-1.0, 3.0], [-0.7, 2.9]])
    got, want = forward("one_hot", {"depth": 3, "on_value": 5, "off_value": -1,
                                    "dtype": "float64"}, idx)
    np.testing.assert_array_equal(got, [[[-1, -1, -1], [-1, -1, -1]],
                                        [[5, -1, -1], [-1, -1, 5]]])
    np.testing.assert_array_equal(got, want)
    # huge indices are outside too (no overflow into range)
    got, want = forward("one_hot", {"depth": 3}, np.array([1e10, -4e9, 2.0]))
    np.testing.assert_array_equal(got, [[0, 0, 0], [0, 0, 0], [0, 0, 1]])
    np.testing.assert_array_equal(got, want)
    # integer indices and an integer dtype: on_value truncated as a C cast
    got, want = forward("one_hot", {"depth": 2, "on_value": 2.7, "dtype": "int32"},
                        np.array([1, 0], np.int64))
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, [[0, 2], [2, 0]])
    np.testing.assert_array_equal(got, want)


def test_pick_mxnet_examples_and_modes():
    x = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    np.testing.assert_array_equal(forward("pick", {"axis": 0}, x, np.array([0.0, 1.0]))[0],
                                  [1, 4])
    np.testing.assert_array_equal(forward("pick", {"axis": 1}, x,
                                          np.array([0.0, 1.0, 0.0]))[0], [1, 4, 5])
    got, want = forward("pick", {"axis": 1, "mode": "wrap"}, x, np.array([2.0, -1.0, -2.0]))
    np.testing.assert_array_equal(got, [1, 4, 5])
    np.testing.assert_array_equal(got, want)
    got, want = forward("pick", {"axis": 1, "keepdims": True}, x,
                        np.array([[1.0], [0.0], [2.0]]))
    np.testing.assert_array_equal(got, [[2], [3], [6]])  # 2 clipped to 1
    np.testing.assert_array_equal(got, want)
    # clip: negative to 0, too large to the end; floats truncate; int indices
    idx = np.array([-5, 7, 1], np.int32)
    got, want = forward("pick", {"axis": -1}, x, idx)
    np.testing.assert_array_equal(got, [1, 4, 6])
    np.testing.assert_array_equal(got, want)
    got, want = forward("pick", {"axis": 1}, x, np.array([1e10, -1e10, 1.5]))
    np.testing.assert_array_equal(got, [2, 3, 6])
    np.testing.assert_array_equal(got, want)
    # a 3-D input, the picked axis in the middle, index with or without it
    d = rand(2, 4, 3)
    i = np.array([[3.0, 0.0, 1.0], [2.0, 2.0, 0.0]])
    got, want = forward("pick", {"axis": 1}, d, i)
    np.testing.assert_array_equal(got, want)
    assert got.shape == (2, 3) and got[1, 0] == d[1, 2, 0]
    got2, _ = forward("pick", {"axis": 1, "keepdims": "True"}, d, i[:, None, :])
    np.testing.assert_array_equal(got2[:, 0], got)


def test_gather_nd_mxnet_examples_and_negative_indices():
    data = np.array([[0.0, 1.0], [2.0, 3.0]])
    got, want = forward("gather_nd", {}, data, np.array([[1, 1, 0], [0, 1, 0]]))
    np.testing.assert_array_equal(got, [2, 3, 0])
    np.testing.assert_array_equal(got, want)
    data = np.arange(1.0, 9.0).reshape(2, 2, 2)
    got, want = forward("gather_nd", {}, data, np.array([[0.0, 1.0], [1.0, 0.0]]))
    np.testing.assert_array_equal(got, [[3, 4], [5, 6]])
    np.testing.assert_array_equal(got, want)
    # negative indices count from the end; floats as MXNet's int(i + size) % size
    data = rand(4, 3)
    idx = np.array([[-1.0, -4.0, 2.0, -0.5], [0.0, -1.0, -3.0, 1.0]])
    got, want = forward("gather_nd", {}, data, idx)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got[:3], [data[3, 0], data[0, 2], data[2, 0]])
    assert got[3] == data[3, 1]  # int(-0.5 + 4) = 3
    assert forward("gather_nd", {}, data, np.array([[2], [1]]))[0].shape == (1,)


# --------------------------------------------------------------------------
# argmax/argmin, topk, sort, argsort, norm
# --------------------------------------------------------------------------
def test_argmax_argmin():
    x = np.array([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
    np.testing.assert_array_equal(forward("argmax", {"axis": 0}, x)[0], [1, 1, 1])
    np.testing.assert_array_equal(forward("argmax", {"axis": 1}, x)[0], [2, 2])
    got = forward("argmax", {"axis": 1, "keepdims": True}, x)[0]
    np.testing.assert_array_equal(got, [[2], [2]])
    np.testing.assert_array_equal(forward("argmin", {"axis": 0}, x)[0], [0, 0, 0])
    # ties: the first occurrence; float output in the input's dtype
    t = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, -1.0]], np.float32)
    got, want = forward("argmax", {"axis": -1}, t)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, [1, 0])
    np.testing.assert_array_equal(got, want)
    # no axis: over the flattened input, shape (1,) (all ones with keepdims)
    got, want = forward("argmin", {}, t)
    np.testing.assert_array_equal(got, [5])
    np.testing.assert_array_equal(got, want)
    assert forward("argmax", {"keepdims": True}, t)[0].shape == (1, 1)
    assert forward("argmax", {"axis": 0, "keepdims": True}, np.array([1.0, 5.0]))[0] == [1]


X_DOC = np.array([[0.3, 0.2, 0.4], [0.1, 0.3, 0.2]])


def test_topk_mxnet_examples():
    got, p = run("topk", {}, X_DOC)
    np.testing.assert_array_equal(got[0], [[2], [1]])
    assert got[0].dtype == np.float32  # indices in dtype, float32 by default
    got, _ = run("topk", {"ret_typ": "value", "k": 2}, X_DOC)
    np.testing.assert_array_equal(got[0], [[0.4, 0.3], [0.3, 0.2]])
    got, _ = run("topk", {"ret_typ": "value", "k": 2, "is_ascend": 1}, X_DOC)
    np.testing.assert_array_equal(got[0], [[0.2, 0.3], [0.1, 0.2]])
    got, _ = run("topk", {"axis": 0, "ret_typ": "value", "k": 2}, X_DOC)
    np.testing.assert_array_equal(got[0], [[0.3, 0.3, 0.4], [0.1, 0.2, 0.2]])
    got, p = run("topk", {"ret_typ": "both", "k": 2}, X_DOC)
    np.testing.assert_array_equal(got[0], [[0.4, 0.3], [0.3, 0.2]])
    np.testing.assert_array_equal(got[1], [[2, 0], [1, 2]])
    want = REFERENCE["topk"](p, X_DOC)
    np.testing.assert_array_equal(got[1], want[1])
    got, _ = run("topk", {"ret_typ": "mask", "k": 2}, X_DOC)
    np.testing.assert_array_equal(got[0], [[1, 0, 1], [0, 1, 1]])
    assert got[0].dtype == np.float64


@pytest.mark.parametrize("attrs", [
    {"k": 3, "ret_typ": "both"}, {"k": 2, "ret_typ": "both", "is_ascend": True},
    {"k": 0, "ret_typ": "indices", "axis": 0}, {"k": 4, "ret_typ": "both", "axis": None},
    {"k": 2, "ret_typ": "mask", "axis": None}, {"k": -1, "ret_typ": "value", "axis": 1},
    {"k": 2, "ret_typ": "indices", "dtype": "int64", "axis": 1}])
def test_topk_with_ties_against_reference(attrs):
    x = np.array([[[3.0, 1.0, 3.0, 2.0], [0.0, 0.0, 5.0, 0.0]],
                  [[1.0, 1.0, 1.0, 1.0], [-2.0, 7.0, 7.0, -2.0]]])
    got, p = run("topk", attrs, x)
    want = REFERENCE["topk"](p, x)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_sort_and_argsort_mxnet_examples():
    x = np.array([[1.0, 4.0], [3.0, 1.0]])
    np.testing.assert_array_equal(forward("sort", {}, x)[0], [[1, 4], [1, 3]])
    np.testing.assert_array_equal(forward("sort", {"axis": None}, x)[0], [1, 1, 3, 4])
    np.testing.assert_array_equal(forward("sort", {"axis": 0}, x)[0], [[1, 1], [3, 4]])
    np.testing.assert_array_equal(forward("sort", {"is_ascend": 0}, x)[0], [[4, 1], [3, 1]])
    np.testing.assert_array_equal(forward("argsort", {}, X_DOC)[0], [[1, 0, 2], [0, 2, 1]])
    np.testing.assert_array_equal(forward("argsort", {"axis": 0}, X_DOC)[0],
                                  [[1, 0, 1], [0, 1, 0]])
    got, want = forward("argsort", {"axis": None}, X_DOC)
    np.testing.assert_array_equal(got, [3, 1, 5, 0, 4, 2])
    np.testing.assert_array_equal(got, want)
    # ties: lower index first, ascending and descending
    t = np.array([2.0, 1.0, 2.0, 1.0])
    np.testing.assert_array_equal(forward("argsort", {}, t)[0], [1, 3, 0, 2])
    got, want = forward("argsort", {"is_ascend": False, "dtype": "int32"}, t)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, [0, 2, 1, 3])
    np.testing.assert_array_equal(got, want)


def test_norm():
    x = np.array([[[1.0, 2.0], [3.0, 4.0]], [[2.0, 2.0], [5.0, 6.0]]])
    # MXNet's documented examples
    np.testing.assert_allclose(forward("norm", {}, x)[0], [np.sqrt(99)], rtol=1e-15)
    np.testing.assert_allclose(forward("norm", {"axis": 1}, x)[0],
                               [[3.1622777, 4.472136], [5.3851647, 6.3245554]], rtol=1e-7)
    np.testing.assert_array_equal(forward("norm", {"ord": 1, "axis": 1}, x)[0],
                                  [[4, 6], [7, 8]])
    for attrs in ({"axis": (0, 2), "keepdims": True}, {"ord": 1, "axis": "(-1,)"},
                  {"axis": (), "keepdims": True}, {"ord": "1", "out_dtype": "float32"}):
        got, want = forward("norm", attrs, x)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-14)


# --------------------------------------------------------------------------
# softmax / log_softmax with use_length, dtype
# --------------------------------------------------------------------------
@pytest.mark.parametrize("opname", ["softmax", "log_softmax"])
@pytest.mark.parametrize("attrs,shape", [
    ({"use_length": True}, (3, 4)),
    ({"use_length": True, "axis": 0, "temperature": 2.0}, (4, 3)),
    ({"use_length": True, "axis": 1}, (2, 5, 3)),
    ({"use_length": True}, (5,))])
def test_softmax_with_length(opname, attrs, shape):
    x = rand(*shape) * 3
    k = attrs.get("axis", -1) % len(shape)
    lshape = tuple(d for i, d in enumerate(shape) if i != k) or (1,)
    n = shape[k]
    length = RNG.integers(0, n + 1, size=lshape).astype(np.float64)
    length.flat[0], length.flat[-1] = 0, n  # an empty row and a full one
    got, want = forward(opname, attrs, x, length)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)
    rows = length.reshape(tuple(d for i, d in enumerate(shape) if i != k))
    valid = np.moveaxis(np.arange(n) < np.expand_dims(rows, -1).astype(int), -1, k)
    assert np.all(got[~valid] == 0)  # MXNet writes 0 past each length
    if opname == "softmax":
        np.testing.assert_allclose(got.sum(axis=k), np.minimum(rows, 1), rtol=1e-13)
    # integer lengths, as Gluon feeds them
    got2, _ = forward(opname, attrs, x, length.astype(np.int32))
    np.testing.assert_array_equal(got2, got)


def test_softmax_dtype_and_length_reference():
    x = rand(2, 3).astype(np.float32)
    got, want = forward("softmax", {"dtype": "float64"}, x)
    assert got.dtype == np.float64 and want.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-14)
    # the reference's masked kernel, by hand
    p = {"axis": -1}
    out = masked_softmax(p, np.array([[1.0, 2.0, 3.0]]), np.array([2.0]))
    e = np.exp([1.0, 2.0])
    np.testing.assert_allclose(out, [[e[0] / e.sum(), e[1] / e.sum(), 0]], rtol=1e-15)


# --------------------------------------------------------------------------
# SequenceMask, SequenceLast, SequenceReverse: MXNet's examples, clamping
# --------------------------------------------------------------------------
SEQ = np.arange(1.0, 19.0).reshape(3, 2, 3)  # (time, batch, feature), MXNet's x


def test_sequence_mask_mxnet_examples():
    np.testing.assert_array_equal(forward("SequenceMask", {}, SEQ)[0], SEQ)
    got, _ = forward("SequenceMask", {"use_sequence_length": True}, SEQ, np.array([1.0, 1.0]))
    np.testing.assert_array_equal(got[0], SEQ[0])
    np.testing.assert_array_equal(got[1:], 0)
    got, want = forward("SequenceMask", {"use_sequence_length": True, "value": 1}, SEQ,
                        np.array([2.0, 3.0]))
    np.testing.assert_array_equal(got[:2], SEQ[:2])
    np.testing.assert_array_equal(got[2], [[1, 1, 1], [16, 17, 18]])
    np.testing.assert_array_equal(got, want)
    got, _ = forward("SequenceMask", {"use_sequence_length": True}, SEQ, np.array([1e10, -3.0]))
    np.testing.assert_array_equal(got[:, 0], SEQ[:, 0])
    np.testing.assert_array_equal(got[:, 1], 0)
    # axis=1 (batch, time), integer lengths, lengths out of range clamped
    x = rand(3, 4, 2)
    got, want = forward("SequenceMask", {"use_sequence_length": True, "axis": 1,
                                         "value": -7.5}, x, np.array([0, 9, 2], np.int32))
    np.testing.assert_array_equal(got, want)
    assert np.all(got[0] == -7.5) and np.all(got[1] == x[1])
    np.testing.assert_array_equal(got[2, :2], x[2, :2])


def test_sequence_last_and_reverse_mxnet_examples():
    x = np.arange(1.0, 28.0).reshape(3, 3, 3)
    np.testing.assert_array_equal(forward("SequenceLast", {}, x)[0], x[2])
    got, want = forward("SequenceLast", {"use_sequence_length": True}, x,
                        np.array([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(got, [[1, 2, 3], [13, 14, 15], [25, 26, 27]])
    np.testing.assert_array_equal(got, want)
    # axis=1: (batch, time, ...)
    b = rand(2, 4, 3)
    got, want = forward("SequenceLast", {"use_sequence_length": True, "axis": 1}, b,
                        np.array([4, 1], np.int64))
    np.testing.assert_array_equal(got, np.stack([b[0, 3], b[1, 0]]))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(forward("SequenceReverse", {}, SEQ)[0], SEQ[::-1])
    got, _ = forward("SequenceReverse", {"use_sequence_length": True}, SEQ,
                     np.array([2.0, 2.0]))
    np.testing.assert_array_equal(got, SEQ[[1, 0, 2]])
    got, want = forward("SequenceReverse", {"use_sequence_length": True}, SEQ,
                        np.array([2.0, 3.0]))
    np.testing.assert_array_equal(got[:, 0], SEQ[[1, 0, 2], 0])
    np.testing.assert_array_equal(got[:, 1], SEQ[[2, 1, 0], 1])
    np.testing.assert_array_equal(got, want)
    # a length of 0 leaves the sequence as it is; one past the end is clamped
    got, want = forward("SequenceReverse", {"use_sequence_length": True}, SEQ,
                        np.array([0, 7], np.int32))
    np.testing.assert_array_equal(got[:, 0], SEQ[:, 0])
    np.testing.assert_array_equal(got[:, 1], SEQ[::-1, 1])
    np.testing.assert_array_equal(got, want)


# --------------------------------------------------------------------------
# gradients against finite differences (float64)
# --------------------------------------------------------------------------
GRAD_CASES = [
    ("reciprocal", {}, [(2, 3)], 0.5, 2.0),
    ("rsqrt", {}, [(2, 3)], 0.5, 2.0),
    ("erf", {}, [(2, 3)], -2.0, 2.0),
    ("tan", {}, [(2, 3)], -1.2, 1.2),
    ("arcsin", {}, [(2, 3)], -0.9, 0.9),
    ("arccos", {}, [(2, 3)], -0.9, 0.9),
    ("arctan", {}, [(2, 3)], -3.0, 3.0),
    ("log2", {}, [(2, 3)], 0.5, 3.0),
    ("log10", {}, [(2, 3)], 0.5, 3.0),
    ("log1p", {}, [(2, 3)], -0.5, 3.0),
    ("expm1", {}, [(2, 3)], -2.0, 2.0),
    ("softsign", {}, [(2, 3)], -3.0, 3.0),
    ("hard_sigmoid", {"alpha": 0.3, "beta": 0.4}, [(3, 4)], -4.0, 4.0),
    ("norm", {}, [(2, 3)], -1.0, 1.0),
    ("norm", {"ord": 1, "axis": (0, 2), "keepdims": True}, [(2, 3, 2)], 0.2, 1.0),
    ("norm", {"axis": -1}, [(2, 3)], -1.0, 1.0),
    ("topk", {"k": 2, "ret_typ": "value"}, [(3, 4)], -1.0, 1.0),
    ("topk", {"k": 3, "ret_typ": "both", "axis": 0, "is_ascend": True}, [(4, 2)], -1.0, 1.0),
    ("topk", {"k": 3, "ret_typ": "value", "axis": None}, [(2, 3)], -1.0, 1.0),
    ("sort", {"axis": 0, "is_ascend": False}, [(3, 2)], -1.0, 1.0),
    ("sort", {"axis": None}, [(2, 3)], -1.0, 1.0),
    ("softmax", {"temperature": 2.0, "axis": 0}, [(3, 2)], -1.0, 1.0),
    ("softmax", {"dtype": "float64"}, [(2, 3)], -1.0, 1.0),
    ("SequenceLast", {"axis": 1}, [(3, 2, 2)], -1.0, 1.0),
    ("SequenceReverse", {}, [(3, 2)], -1.0, 1.0),
]


@pytest.mark.parametrize("opname,attrs,shapes,low,high", GRAD_CASES)
def test_gradients_match_finite_differences(opname, attrs, shapes, low, high):
    rng = np.random.default_rng(3)
    xs = [rng.uniform(low, high, s) for s in shapes]
    p = params(opname, attrs, len(xs))
    ref = REFERENCE[get_op(opname).name]
    out = ref(p, *xs)
    out = out if isinstance(out, tuple) else (out,)
    heads = [rng.normal(size=np.shape(o)) for o in out]
    if len(out) == 2:  # topk 'both': the indices output takes no gradient
        heads[1] = np.zeros(np.shape(out[1]), np.float32)
    wrt = list(range(len(xs)))
    got = gradients(opname, attrs, xs, heads, wrt)
    want = finite_differences(lambda *v: ref(p, *v), xs, heads, wrt)
    for i, g, w in zip(wrt, got, want):
        assert g.shape == xs[i].shape and g.dtype == xs[i].dtype
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-8, err_msg=f"input {i}")


@pytest.mark.parametrize("opname,attrs,shapes,bound", [
    ("pick", {"axis": 1}, [(3, 4), (3,)], 6),
    ("pick", {"axis": 0, "mode": "wrap", "keepdims": True}, [(3, 2), (1, 2)], 7),
    ("gather_nd", {}, [(3, 4), (2, 5)], 3),
    ("SequenceMask", {"use_sequence_length": True}, [(4, 3, 2), (3,)], 6),
    ("SequenceMask", {"use_sequence_length": True, "axis": 1}, [(3, 4), (3,)], 6),
    ("SequenceLast", {"use_sequence_length": True}, [(4, 3, 2), (3,)], 5),
    ("SequenceLast", {"use_sequence_length": True, "axis": 1}, [(3, 4), (3,)], 5),
    ("SequenceReverse", {"use_sequence_length": True}, [(4, 3, 2), (3,)], 6),
    ("softmax", {"use_length": True, "temperature": 0.5}, [(3, 4), (3,)], 5),
    ("softmax", {"use_length": True, "axis": 1}, [(2, 4, 3), (2, 3)], 5),
    ("log_softmax", {"use_length": True}, [(3, 4), (3,)], 5),
    ("log_softmax", {"use_length": True, "axis": 0, "temperature": 3.0}, [(4, 3), (3,)], 5),
])
def test_gradients_with_integer_inputs(opname, attrs, shapes, bound):
    """The data gets the finite-difference gradient; the indices or lengths
    (integers in floats, some out of range) get zeros."""
    rng = np.random.default_rng(5)
    xs = [rng.uniform(-1, 1, shapes[0])] + [
        rng.integers(-1, bound, s).astype(np.float64) for s in shapes[1:]]
    if opname.startswith("Sequence") or "length" in str(attrs):
        xs[1] = np.clip(xs[1], 0, None)
    p = params(opname, attrs, len(xs))
    ref = REFERENCE[get_op(opname).name]
    head = rng.normal(size=np.shape(ref(p, *xs)))
    dx, di = gradients(opname, attrs, xs, head, [0, 1])
    want = finite_differences(lambda v: ref(p, v, xs[1]), [xs[0]], head, [0])[0]
    np.testing.assert_allclose(dx, want, rtol=1e-6, atol=1e-8)
    np.testing.assert_array_equal(di, 0)


@pytest.mark.parametrize("opname,attrs,n_in", [
    ("floor", {}, 1), ("round", {}, 1), ("rint", {}, 1), ("sign", {}, 1),
    ("logical_not", {}, 1), ("_greater_scalar", {"scalar": 0}, 1), ("_Logical_Or", {}, 2),
    ("broadcast_lesser_equal", {}, 2), ("broadcast_logical_xor", {}, 2),
    ("argmax", {"axis": 1}, 1), ("argsort", {}, 1), ("topk", {"k": 2}, 1),
    ("topk", {"k": 2, "ret_typ": "mask"}, 1), ("one_hot", {"depth": 3}, 1)])
def test_zero_gradients_as_mxnet(opname, attrs, n_in):
    xs = [rand(2, 3) for _ in range(n_in)]
    p = params(opname, attrs, n_in)
    head = rand(*np.shape(REFERENCE[get_op(opname).name](p, *xs)))
    g, _ = node_over(opname, attrs, [f"x{i}" for i in range(n_in)])
    gg = build_gradient(g, [f"x{i}" for i in range(n_in)])
    assert {n.op.name for n in gg.nodes if n.op is not None} == {get_op(opname).name,
                                                                  "zeros_like"}
    for dx in gradients(opname, attrs, xs, head, list(range(n_in))):
        np.testing.assert_array_equal(dx, 0)


def test_multinomial_log_prob_gradient():
    """MXNet's REINFORCE rule: d data[c] += d prob / data[c] at each draw c."""
    data = np.array([[0.1, 0.2, 0.3, 0.4], [0.5, 0.25, 0.125, 0.125]])
    attrs = {"shape": (5,), "get_prob": True}
    (draws, logp), _ = run("_sample_multinomial", attrs, data, key=jax.random.key(3))
    dprob = rand(2, 5)
    g, _ = node_over("_sample_multinomial", attrs, ["x0"])
    gg = build_gradient(g, ["x0"])
    feeds = {"x0": data, "op_prob_head_grad": dprob}
    outs, _ = jax.jit(lower(gg, is_train=True))(feeds, jax.random.key(3))
    np.testing.assert_array_equal(np.asarray(outs[0]), draws)  # the same draws
    want = np.zeros_like(data)
    for i in range(2):
        for j in range(5):
            want[i, draws[i, j]] += dprob[i, j] / data[i, draws[i, j]]
    np.testing.assert_allclose(np.asarray(outs[2]), want, rtol=1e-14)
    np.testing.assert_allclose(logp, np.log(np.take_along_axis(data, draws, 1)), rtol=1e-15)


# --------------------------------------------------------------------------
# what each backward reads (the memory planner sees exactly this)
# --------------------------------------------------------------------------
@pytest.mark.parametrize("opname,attrs,names,bwd,reads,shape_only", [
    ("sin", {}, ["x0"], "_backward_sin", ["op_output_head_grad", "x0"], []),
    ("tan", {}, ["x0"], "_backward_tan", ["op_output_head_grad", "op"], []),
    ("hard_sigmoid", {}, ["x0"], "_backward_hard_sigmoid", ["op_output_head_grad", "x0"],
     []),
    ("norm", {"ord": 1}, ["x0"], "_backward_norm", ["op_output_head_grad", "x0", "op"], []),
    ("pick", {}, ["x0", "x1"], "_backward_pick", ["op_output_head_grad", "x0", "x1"],
     ["x0"]),
    ("gather_nd", {}, ["x0", "x1"], "_backward_gather_nd",
     ["op_output_head_grad", "x0", "x1"], ["x0"]),
    # topk 'value' and sort read their hidden indices output and x's shape
    ("topk", {"ret_typ": "value"}, ["x0"], "_backward_topk",
     ["op_output_head_grad", "x0", "op"], ["x0"]),
    ("sort", {}, ["x0"], "_backward_sort", ["op_output_head_grad", "x0", "op"], ["x0"]),
    ("SequenceMask", {"use_sequence_length": True}, ["x0", "x1"], "_backward_SequenceMask",
     ["op_output_head_grad", "x1"], []),
    ("SequenceReverse", {}, ["x0"], "_backward_SequenceReverse", ["op_output_head_grad"],
     []),
    ("SequenceLast", {"use_sequence_length": True}, ["x0", "x1"], "_backward_SequenceLast",
     ["op_output_head_grad", "x0", "x1"], ["x0"]),
    ("softmax", {"use_length": True}, ["x0", "x1"], "_backward_softmax",
     ["op_output_head_grad", "x1", "op"], []),
    ("log_softmax", {"dtype": "float64"}, ["x0"], "_backward_log_softmax",
     ["op_output_head_grad", "x0", "op"], ["x0"]),
])
def test_backward_reads(opname, attrs, names, bwd, reads, shape_only):
    g, node = node_over(opname, attrs, names)
    gg = build_gradient(g, ["x0"])
    grad = gg.outputs[len(g.outputs)].node
    assert grad.op.name == bwd
    assert [e.node.name for e in grad.inputs] == reads
    shape_reads = {grad.inputs[i].node.name for i in grad.op.shape_inputs(grad.params)}
    assert shape_reads == set(shape_only)


def test_topk_and_sort_backward_run_without_the_data_values():
    # the planner may overwrite x (only its shape is read): the arena
    # interpreter poisons shape-only inputs and checks every value
    x = sg.sym.Variable("x")
    h = sg.sym.exp(x)
    v = sg.sym.broadcast_add(sg.sym.topk(h, k=2, ret_typ="value", axis=0),
                             sg.sym.sum(sg.sym.sort(h), axis=0, keepdims=True))
    net = sg.sym.LinearRegressionOutput(v, name="o")
    plan = sg.plan(net, {"x": (4, 3)}, train=True, wrt=["x"], execute=True)
    assert plan.verified and plan.arena_checked


# --------------------------------------------------------------------------
# an MXNet-JSON net (as MXNet 1.9.1's symbol API writes it) using many of them
# --------------------------------------------------------------------------
def _node(op, name, inputs, **attrs):
    n = {"op": op, "name": name, "inputs": [[i, 0, 0] for i in inputs]}
    if attrs:
        n["attrs"] = {k: str(v) for k, v in attrs.items()}
    return n


NODES = [
    _node("null", "data", []),                                                     # 0
    _node("null", "seq_len", []),                                                  # 1
    _node("null", "valid", []),                                                    # 2
    _node("SequenceMask", "mask0", [0, 1], use_sequence_length="True", value="-1"),  # 3
    _node("sin", "sin0", [3]),                                                     # 4
    _node("_greater_scalar", "gt0", [3], scalar="0.25"),                           # 5
    _node("elemwise_mul", "mul0", [4, 5]),                                         # 6
    _node("SequenceLast", "last0", [6, 1], use_sequence_length="True"),            # 7
    _node("softmax", "sm0", [7, 2], use_length="True", temperature="2"),           # 8
    _node("norm", "norm0", [8], ord="2", axis="(1,)", keepdims="True"),            # 9
    _node("broadcast_div", "div0", [8, 9]),                                        # 10
    _node("topk", "topk0", [10], k="2", ret_typ="value", axis="-1"),               # 11
    _node("argmax", "amax0", [10], axis="1"),                                      # 12
    _node("one_hot", "oh0", [12], depth="4"),                                      # 13
    _node("pick", "pick0", [10, 12], axis="1"),                                    # 14
    _node("expm1", "em0", [14]),                                                   # 15
    _node("floor", "fl0", [0]),                                                    # 16
]
MXNET_JSON = {"nodes": NODES, "arg_nodes": [0, 1, 2],
              "node_row_ptr": list(range(len(NODES) + 1)),
              "heads": [[11, 0, 0], [13, 0, 0], [15, 0, 0], [16, 0, 0]],
              "attrs": {"mxnet_version": ["int", 10901]}}
SHAPES = {"data": (5, 3, 4), "seq_len": (3,), "valid": (3,)}


def _numpy_net(data, seq_len, valid):
    R = REFERENCE
    m = R["SequenceMask"]({"use_sequence_length": True, "value": -1.0}, data, seq_len)
    h = np.sin(m) * (m > 0.25)
    last = R["SequenceLast"]({"use_sequence_length": True}, h, seq_len)
    s = masked_softmax({"temperature": 2.0}, last, valid)
    u = s / np.sqrt((s ** 2).sum(axis=1, keepdims=True))
    top = -np.sort(-u, axis=-1)[:, :2]
    am = np.argmax(u, axis=1)
    return top, np.eye(4)[am], np.expm1(u[np.arange(len(am)), am]), np.floor(data)


def test_mxnet_json_net_loads_infers_runs_and_trains():
    net = sg.sym.load_json(json.dumps(MXNET_JSON))
    assert net.list_arguments() == ["data", "seq_len", "valid"]
    args, outs, _ = net.infer_shape(data=(5, 3, 4))
    assert args == [(5, 3, 4), (3,), (3,)]
    assert outs == [(3, 2), (3, 4), (3,), (5, 3, 4)]
    again = sg.sym.load_json(net.tojson())
    assert again.tojson() == net.tojson()
    rng = np.random.default_rng(11)
    feeds = {"data": rng.normal(size=(5, 3, 4)), "seq_len": np.array([2.0, 5.0, 3.0]),
             "valid": np.array([2.0, 4.0, 3.0])}
    got, _ = lower(again.graph())(feeds)
    want = _numpy_net(feeds["data"], feeds["seq_len"], feeds["valid"])
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-12, atol=1e-14)
    # the gradient of the differentiable head with respect to data
    ex = net[0].simple_bind(sg.cpu(), type_dict={k: "float64" for k in SHAPES}, **SHAPES)
    for k, v in feeds.items():
        ex.arg_dict[k][:] = v
    ex.forward(is_train=True)
    head = rng.normal(size=(3, 2))
    ex.backward([sg.nd.array(head, dtype="float64")])
    fd = finite_differences(lambda d: _numpy_net(d, feeds["seq_len"], feeds["valid"])[0],
                            [feeds["data"]], head, [0])[0]
    np.testing.assert_allclose(ex.grad_dict["data"].asnumpy(), fd, rtol=1e-6, atol=1e-8)
    # the plan, every tensor at its planned offset, reproduces the lowering
    plan = sg.plan(net[0], SHAPES, train=True, wrt=["data"], execute=True)
    assert plan.verified and plan.arena_checked


# --------------------------------------------------------------------------
# random ops: shapes, dtypes, moments, keys
# --------------------------------------------------------------------------
def _draw(opname, attrs, *xs, key=7, name="op"):
    names = [f"x{i}" for i in range(len(xs))]
    g, _ = node_over(opname, attrs, names, name=name)
    inf = infer_shapes(g, {n: x.shape for n, x in zip(names, xs)},
                       dtypes={n: x.dtype.name for n, x in zip(names, xs)})
    outs, _ = jax.jit(lower(g))(dict(zip(names, xs)), jax.random.key(key))
    for e, o in zip(g.outputs, outs):
        assert o.shape == inf.shape(e) and o.dtype == np.dtype(inf.dtype(e))
    return [np.asarray(o) for o in outs]


def test_random_uniform_and_normal_moments():
    (u,) = _draw("_random_uniform", {"low": -2, "high": 3, "shape": (200, 100)})
    assert u.dtype == np.float32 and u.shape == (200, 100)
    assert u.min() >= -2 and u.max() < 3
    assert abs(u.mean() - 0.5) < 0.05 and abs(u.var() - 25 / 12) < 0.06
    (n,) = _draw("_random_normal", {"loc": 1.5, "scale": 0.5, "shape": "(100, 200)",
                                    "dtype": "float64"})
    assert n.dtype == np.float64
    assert abs(n.mean() - 1.5) < 0.02 and abs(n.std() - 0.5) < 0.01
    (h,) = _draw("normal", {"shape": (4,), "dtype": "float16"})
    assert h.dtype == np.float16
    # dtype None is float32, as MXNet's default
    assert _draw("uniform", {"shape": (2,), "dtype": "None"})[0].dtype == np.float32


def test_random_draws_follow_the_key_and_the_node():
    a = _draw("_random_normal", {"shape": (3, 4)}, key=1)[0]
    b = _draw("_random_normal", {"shape": (3, 4)}, key=1)[0]
    c = _draw("_random_normal", {"shape": (3, 4)}, key=2)[0]
    d = _draw("_random_normal", {"shape": (3, 4)}, key=1, name="other")[0]
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c) and not np.array_equal(a, d)
    # in inference too (MXNet samples whatever the mode), and eagerly
    x = sg.nd._random_uniform(shape=(2, 5), low=1, high=2)
    assert x.shape == (2, 5) and np.all((x.asnumpy() >= 1) & (x.asnumpy() < 2))


def test_sample_multinomial_frequencies_and_shapes():
    probs = np.array([[0.0, 0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1, 0.0]])
    (draws,) = _draw("_sample_multinomial", {"shape": (4000,)}, probs)
    assert draws.dtype == np.int32 and draws.shape == (2, 4000)
    for row, p in zip(draws, probs):
        freq = np.bincount(row, minlength=5) / row.size
        np.testing.assert_allclose(freq, p, atol=0.03)
        assert np.all(freq[p == 0] == 0)  # a class of probability 0 is never drawn
    # a 1-D distribution; MXNet's shapes: (1,) for one draw, else shape
    one = np.array([0.25, 0.75], np.float32)
    assert _draw("_sample_multinomial", {}, one)[0].shape == (1,)
    out, logp = _draw("sample_multinomial", {"shape": (2, 3), "get_prob": True,
                                             "dtype": "float32"}, one)
    assert out.shape == (2, 3) and out.dtype == np.float32 and logp.dtype == np.float32
    np.testing.assert_allclose(logp, np.log(one[out.astype(int)]), rtol=1e-6)


# --------------------------------------------------------------------------
# bad input: one clear error each
# --------------------------------------------------------------------------
@pytest.mark.parametrize("opname,attrs,shapes,err,words", [
    ("broadcast_greater", {}, [(2, 3), (4, 3)], ShapeError, ["could not be broadcast"]),
    ("_equal_scalar", {"scalar": "x"}, [(2,)], OpError, ["scalar"]),
    ("_greater", {}, [(2, 3), (2, 1)], ShapeError, ["same shape"]),
    ("hard_sigmoid", {"alpha": "fast"}, [(2,)], OpError, ["alpha"]),
    ("one_hot", {}, [(3,)], OpError, ["depth"]),
    ("one_hot", {"depth": 0}, [(3,)], OpError, ["depth=0", "positive"]),
    ("one_hot", {"depth": 3, "dtype": "complex64"}, [(3,)], OpError, ["dtype"]),
    ("pick", {"axis": 2}, [(2, 3), (2,)], ShapeError, ["axis=2", "rank 2"]),
    ("pick", {"axis": "None"}, [(2, 3), (2,)], ShapeError, ["axis=None", "give an axis"]),
    ("pick", {"axis": 1}, [(2, 3), (3,)], ShapeError, ["index (3,)", "(2,)"]),
    ("pick", {"mode": "raise"}, [(2, 3), (2,)], OpError, ["clip, wrap"]),
    ("gather_nd", {}, [(2, 3), (2,)], ShapeError, ["at least 2 dimensions"]),
    ("gather_nd", {}, [(2, 3), (3, 4)], ShapeError, ["address 3 axes", "rank 2"]),
    ("argmax", {"axis": 3}, [(2, 3)], ShapeError, ["axis=3"]),
    ("argmin", {"axis": "1.5"}, [(2, 3)], OpError, ["axis"]),
    ("topk", {"k": 4}, [(2, 3)], ShapeError, ["k=4", "3 elements"]),
    ("topk", {"axis": -3}, [(2, 3)], ShapeError, ["axis=-3"]),
    ("topk", {"ret_typ": "values"}, [(2, 3)], OpError, ["value, indices, mask, both"]),
    ("topk", {"dtype": "bool"}, [(2, 3)], OpError, ["dtype"]),
    ("sort", {"axis": 2}, [(2, 3)], ShapeError, ["axis=2"]),
    ("argsort", {"is_ascend": "maybe"}, [(2, 3)], OpError, ["is_ascend"]),
    ("norm", {"ord": 3}, [(2, 3)], OpError, ["ord=3", "1 and 2"]),
    ("norm", {"axis": (0, 0)}, [(2, 3)], ShapeError, ["twice"]),
    ("norm", {"axis": 2}, [(2, 3)], ShapeError, ["axis 2", "rank 2"]),
    ("softmax", {"use_length": True}, [(2, 3), (3,)], ShapeError, ["length (3,)", "(2,)"]),
    ("log_softmax", {"axis": 2}, [(2, 3)], ShapeError, ["axis=2"]),
    ("softmax", {"dtype": "int32"}, [(2, 3)], OpError, ["dtype"]),
    ("SequenceMask", {"axis": 2}, [(2, 3, 4)], ShapeError, ["axis=2", "0 or 1"]),
    ("SequenceMask", {}, [(4,)], ShapeError, ["rank 2"]),
    ("SequenceMask", {"use_sequence_length": True}, [(4, 3), (4,)], ShapeError,
     ["sequence_length (4,)", "(3,)"]),
    ("SequenceLast", {"axis": -1}, [(2, 3)], ShapeError, ["axis=-1"]),
    ("SequenceReverse", {"axis": 1}, [(2, 3)], ShapeError, ["axis=1", "must be 0"]),
    ("_random_uniform", {"shape": (2,), "low": 1, "high": 1}, [], ShapeError,
     ["low=1.0", "less than high"]),
    ("_random_normal", {"shape": (2,), "scale": -1}, [], ShapeError, ["scale=-1.0"]),
    ("_random_normal", {}, [], ShapeError, ["shape=()"]),
    ("_random_uniform", {"shape": (2,), "dtype": "int32"}, [], OpError, ["dtype"]),
    ("_sample_multinomial", {"dtype": "int64"}, [(3,)], OpError, ["dtype"]),
])
def test_bad_input_raises_one_clear_error(opname, attrs, shapes, err, words):
    assert_one_clear_error(opname, attrs, shapes, err, words)
