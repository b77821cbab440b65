"""The glue ops of Gluon exports (symgraph/ops/glue.py, and _maximum,
_minimum, _power, _rpower_scalar in ops/elementwise.py) beyond the
registry-driven checks of test_ops.py: the forward in float64 against the
NumPy references of op_reference_glue.py on MXNet's edge cases (negative
axes, None in slice, 0 in broadcast_to's shape, clip/wrap take with float
indices), gradients against central finite differences and NumPy formulas,
what each backward node reads, ops without inputs through every stage,
an MXNet-JSON net that uses many of them, and one clear error per bad input."""
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
from op_reference_glue import REFERENCE_GLUE, take_indices


def forward(opname, attrs, *xs, dtypes=None):
    """(symgraph's output, NumPy's) for inputs ``xs`` (float64 unless given)."""
    got, node = lowered_outputs(opname, attrs, *xs)
    return got[0], REFERENCE_GLUE[get_op(opname).name](node.params, *xs)


def gradients(opname, attrs, xs, head, wrt):
    """symgraph's gradients of sum(op(xs) * head) with respect to the inputs
    whose indices are in ``wrt`` (float64)."""
    names = [f"x{i}" for i in range(len(xs))]
    g, _ = node_over(opname, attrs, names)
    gg = build_gradient(g, [names[i] for i in wrt])
    feeds = {**dict(zip(names, xs)), "op_output_head_grad": head}
    outs, _ = jax.jit(lower(gg, is_train=True))(feeds)
    return [np.asarray(o) for o in outs[1:]]


RNG = np.random.default_rng(0)


def rand(*shape):
    return RNG.normal(size=shape)


# --------------------------------------------------------------------------
# forward against NumPy (float64), MXNet's edge cases
# --------------------------------------------------------------------------
SLICES = [
    ({"begin": (0, 1), "end": (2, 4)}, (3, 4)),                       # MXNet's doc example
    ({"begin": (None, 0), "end": (None, 3), "step": (-1, 2)}, (3, 4)),  # ... with a step
    ({"begin": "(None,)", "end": "(None,)", "step": "(-2,)"}, (5, 2)),  # JSON strings
    ({"begin": (-3, None), "end": (-1, None)}, (4, 3)),                 # negative begin/end
    ({"begin": (-100,), "end": (100,)}, (4, 3)),                        # clamped to the ends
    ({"begin": (10,), "end": (-100,), "step": (-3,)}, (7, 2)),          # clamped backwards
    ({"begin": (2,), "end": (None,), "step": (-1,)}, (4, 2)),           # through index 0
    ({"begin": (1, None, -1), "end": (None, None, 0), "step": (None, None, -1)}, (2, 3, 4)),
    ({"begin": (), "end": ()}, (2, 3)),                                 # slices nothing
]


@pytest.mark.parametrize("attrs,shape", SLICES)
def test_slice_matches_python_slicing(attrs, shape):
    x = rand(*shape)
    got, want = forward("slice", attrs, x)
    np.testing.assert_array_equal(got, want)
    # the same through the alias, eagerly
    np.testing.assert_array_equal(sg.nd.crop(sg.nd.array(x, dtype="float64"), **attrs)
                                  .asnumpy(), want)


def test_slice_reference_is_python_slicing():
    x = np.arange(12.0).reshape(3, 4)
    p = {"begin": (None, 0), "end": (None, 3), "step": (-1, 2)}
    np.testing.assert_array_equal(REFERENCE_GLUE["slice"](p, x), [[8, 10], [4, 6], [0, 2]])


@pytest.mark.parametrize("opname,attrs,shapes", [
    ("squeeze", {}, [(1, 3, 1, 2)]),
    ("squeeze", {"axis": -2}, [(3, 1, 2)]),
    ("squeeze", {"axis": (0, -1)}, [(1, 3, 1)]),
    ("squeeze", {}, [(1, 1, 1)]),            # keeps one dimension: (1,)
    ("squeeze", {"axis": "()"}, [(1, 2)]),   # an empty tuple squeezes nothing
    ("broadcast_to", {"shape": (2, 0, 4)}, [(1, 3, 1)]),  # 0 keeps the dim
    ("broadcast_to", {"shape": "(0, 0)"}, [(2, 3)]),
    ("broadcast_axis", {"axis": (-1, 0), "size": (4, 2)}, [(1, 3, 1)]),
    ("broadcast_axes", {"axis": 1, "size": 3}, [(2, 1)]),
    ("broadcast_like", {}, [(2, 1, 1), (2, 3, 4)]),
    ("broadcast_like", {"lhs_axes": (0,), "rhs_axes": (-1,)}, [(1,), (2, 5)]),
    ("broadcast_like", {"lhs_axes": "(0, 2)", "rhs_axes": "(1, 0)"}, [(1, 3, 1), (4, 2)]),
    ("stack", {"num_args": 3}, [(2, 3)] * 3),
    ("stack", {"num_args": 2, "axis": -1}, [(2, 3), (2, 3)]),
    ("stack", {"num_args": 2, "axis": 2}, [(2, 3), (2, 3)]),
    ("tile", {"reps": (2, 3)}, [(2, 2)]),
    ("tile", {"reps": (3,)}, [(2, 2)]),         # reps promoted with leading 1s
    ("tile", {"reps": (2, 1, 2)}, [(2, 3)]),    # input promoted with a leading axis
    ("repeat", {"repeats": 2}, [(2, 3)]),       # flattened: 1-D output
    ("repeat", {"repeats": 3, "axis": -1}, [(2, 3)]),
    ("repeat", {"repeats": 2, "axis": 0}, [(2, 3)]),
    ("reverse", {"axis": (0, 2)}, [(2, 3, 4)]),
    ("flip", {"axis": -1}, [(2, 3)]),
    ("SwapAxis", {"dim1": 0, "dim2": -1}, [(2, 3, 4)]),
    ("swapaxes", {"dim1": 1, "dim2": 1}, [(2, 3)]),
    ("SwapAxis", {}, [(2, 3)]),                 # both default to 0: a copy
    ("ones_like", {}, [(2, 3)]),
    ("_maximum", {}, [(3, 4), (3, 4)]),
    ("_Minimum", {}, [(3, 4), (3, 4)]),
])
def test_forward_matches_reference(opname, attrs, shapes):
    got, want = forward(opname, attrs, *[rand(*s) for s in shapes])
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_power_and_rpower_scalar():
    a, b = RNG.uniform(0.5, 2, (3, 4)), RNG.uniform(-2, 2, (3, 4))
    got, want = forward("_power", {}, a, b)
    np.testing.assert_allclose(got, want, rtol=1e-14)
    got, want = forward("_RPowerScalar", {"scalar": "3.0"}, b)
    np.testing.assert_allclose(got, 3.0 ** b, rtol=1e-14)
    np.testing.assert_allclose(want, 3.0 ** b, rtol=1e-14)


@pytest.mark.parametrize("cond_dtype", ["float64", "int32", "bool"])
def test_where_same_shape_and_rows(cond_dtype):
    x, y = rand(3, 4), rand(3, 4)
    c = np.array([[0, 1, -1, 0], [2, 0, 0, 1], [0, 0, 0, 0]]).astype(cond_dtype)
    got, want = forward("where", {}, c, x, y)
    np.testing.assert_array_equal(got, np.where(c != 0, x, y))
    np.testing.assert_array_equal(got, want)
    rows = np.array([1, 0, 3]).astype(cond_dtype)   # 1-D: picks rows of x or y
    got, want = forward("where", {}, rows, x, y)
    np.testing.assert_array_equal(got, np.stack([x[0], y[1], x[2]]))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mode", ["clip", "wrap"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_take_clip_and_wrap_with_float_indices(mode, axis):
    a = rand(4, 5, 3)
    idx = np.array([[-7.0, -1.5, -0.5], [0.9, 2.0, 4.99], [5.0, 13.7, 3.0]])
    got, want = forward("take", {"axis": axis, "mode": mode}, a, idx)
    n = a.shape[axis]
    # MXNet: truncate toward zero, then clip or wrap (C's % made non-negative)
    j = np.array([int(v) for v in idx.ravel()]).reshape(idx.shape)
    j = np.clip(j, 0, n - 1) if mode == "clip" else np.array(
        [[(v % n + n) % n for v in row] for row in j])
    np.testing.assert_array_equal(j, take_indices(mode, idx, n))
    np.testing.assert_array_equal(got, np.take(a, j, axis=axis))
    np.testing.assert_array_equal(got, want)
    assert got.shape == a.shape[:axis % 3] + idx.shape + a.shape[axis % 3 + 1:]


def test_take_integer_indices_and_default_mode_is_clip():
    a = rand(3, 2)
    idx = np.array([2, 7, -4], dtype=np.int32)
    got = sg.nd.take(sg.nd.array(a, dtype="float64"), sg.nd.array(idx, dtype="int32"))
    np.testing.assert_array_equal(got.asnumpy(), a[[2, 2, 0]])
    assert got.dtype == np.float64  # the data's dtype, not the indices'


def test_condition_and_indices_keep_their_own_dtype():
    # MXNet's WhereOpType / TakeOpType: x, y (a) give the output's dtype;
    # the condition (indices) may have any dtype and lend it to nothing
    c, x, y = (sg.sym.Variable(n) for n in "cxy")
    args, outs, _ = sg.sym.where(c, x, y).infer_type(c="int32", x="float16")
    assert args == [np.int32, np.float16, np.float16] and outs == [np.float16]
    _, outs, _ = sg.sym.take(x, c).infer_type(c="int64")
    assert outs == [np.float32]  # unknown, then the default: not the indices' int64
    _, outs, _ = sg.sym.take(x, c).infer_type(x="float16", c="int32")
    assert outs == [np.float16]
    with pytest.raises(ShapeError, match="inputs must have one dtype, got float64, float32"):
        sg.sym.where(c, x, y, name="w").infer_type(x="float64", y="float32")


def test_shape_and_size_arrays_are_int64():
    x = rand(2, 3, 4)
    for opname, want in (("shape_array", [2, 3, 4]), ("size_array", [24])):
        got, ref = forward(opname, {}, x)
        assert got.dtype == np.int64 and ref.dtype == np.int64
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(ref, want)
    _, outs, _ = sg.sym.shape_array(sg.sym.Variable("x")).infer_type(x="float16")
    assert outs == [np.int64]


@pytest.mark.parametrize("opname,attrs,want", [
    ("_zeros", {"shape": (2, 3)}, np.zeros((2, 3), np.float32)),
    ("_ones", {"shape": "(4,)", "dtype": "int32"}, np.ones(4, np.int32)),
    ("_full", {"shape": (2, 2), "value": "2.5", "dtype": "float64"}, np.full((2, 2), 2.5)),
    ("_full", {"shape": (3,), "value": -1.7, "dtype": "int32"},
     np.array([-1, -1, -1], np.int32)),  # truncated toward zero, as MXNet's cast
    ("_arange", {"start": 5}, np.arange(5, dtype=np.float32)),  # stop None: [0, start)
    ("_arange", {"start": 1, "stop": 2.1, "step": 0.5}, np.array([1, 1.5, 2], np.float32)),
    ("_arange", {"start": 4, "stop": -2, "step": -1.5, "dtype": "float64"},
     np.array([4, 2.5, 1, -0.5])),
    ("_arange", {"start": 0, "stop": 3, "repeat": 2, "dtype": "int64"},
     np.array([0, 0, 1, 1, 2, 2])),
    ("_arange", {"start": 0.5, "stop": 4, "step": 1.5, "dtype": "int32"},
     np.array([0, 1, 2], np.int32)),  # start and step cast first: 0 + k * 1
])
def test_constants(opname, attrs, want):
    g, node = node_over(opname, attrs, [])
    inf = infer_shapes(g, {})
    outs, _ = jax.jit(lower(g))({})
    got = np.asarray(outs[0])
    assert got.dtype == want.dtype and inf.dtype(g.outputs[0]) == want.dtype.name
    assert inf.shape(g.outputs[0]) == want.shape
    np.testing.assert_array_equal(got, want)
    ref = REFERENCE_GLUE[opname](node.params)
    assert ref.dtype == want.dtype
    np.testing.assert_array_equal(ref, want)


# --------------------------------------------------------------------------
# gradients (float64): finite differences and NumPy formulas
# --------------------------------------------------------------------------
GRAD_CASES = [
    ("slice", {"begin": (None, 0), "end": (None, 3), "step": (-1, 2)}, [(3, 4)], [0]),
    ("slice", {"begin": (1, -1), "end": (None, 0), "step": (None, -2)}, [(3, 5)], [0]),
    ("squeeze", {"axis": (0, -1)}, [(1, 3, 1)], [0]),
    ("squeeze", {}, [(1, 1)], [0]),
    ("broadcast_to", {"shape": (2, 0, 3)}, [(1, 4, 1)], [0]),
    ("broadcast_axis", {"axis": (0, 2), "size": (3, 2)}, [(1, 2, 1)], [0]),
    ("broadcast_like", {}, [(1, 3), (2, 3)], [0]),
    ("broadcast_like", {"lhs_axes": (1,), "rhs_axes": (0,)}, [(2, 1), (3, 5)], [0]),
    ("stack", {"num_args": 3, "axis": -2}, [(2, 3)] * 3, [0, 1, 2]),
    ("tile", {"reps": (2, 1, 3)}, [(2, 2)], [0]),
    ("tile", {"reps": (2,)}, [(2, 3)], [0]),
    ("repeat", {"repeats": 3}, [(2, 2)], [0]),
    ("repeat", {"repeats": 2, "axis": -2}, [(2, 3, 2)], [0]),
    ("reverse", {"axis": (0, -1)}, [(2, 3, 2)], [0]),
    ("SwapAxis", {"dim1": 2, "dim2": 0}, [(2, 3, 4)], [0]),
    ("_power", {}, [(3, 2), (3, 2)], [0, 1]),
]


@pytest.mark.parametrize("opname,attrs,shapes,wrt", GRAD_CASES)
def test_gradients_match_finite_differences(opname, attrs, shapes, wrt):
    rng = np.random.default_rng(3)
    xs = [rng.uniform(0.5, 2.0, s) for s in shapes]
    ref = REFERENCE_GLUE[get_op(opname).name]
    p = node_over(opname, attrs, [f"x{i}" for i in range(len(xs))])[1].params
    head = rng.normal(size=np.shape(ref(p, *xs)))
    got = gradients(opname, attrs, xs, head, wrt)
    want = finite_differences(lambda *v: ref(p, *v), xs, head, wrt)
    for i, g, w in zip(wrt, got, want):
        assert g.shape == xs[i].shape
        np.testing.assert_allclose(g, w, rtol=1e-7, atol=1e-8, err_msg=f"input {i}")


def test_maximum_minimum_gradients_at_ties_as_mxnet():
    a = np.array([[1.0, 2.0, 3.0]])
    b = np.array([[1.0, 5.0, 0.0]])
    dy = np.array([[10.0, 20.0, 30.0]])
    # max: da = dy [a >= b], db = dy [a < b] -- a tie goes to lhs
    da, db = gradients("_maximum", {}, [a, b], dy, [0, 1])
    np.testing.assert_array_equal(da, [[10, 0, 30]])
    np.testing.assert_array_equal(db, [[0, 20, 0]])
    # min: da = dy [a <= b], db = dy [a > b]
    da, db = gradients("_minimum", {}, [a, b], dy, [0, 1])
    np.testing.assert_array_equal(da, [[10, 20, 0]])
    np.testing.assert_array_equal(db, [[0, 0, 30]])


def test_maximum_minimum_scalar_gradients_at_ties_as_mxnet():
    """MXNet's _maximum_scalar / _minimum_scalar backward: dy where x >= s
    (x <= s): a tie's gradient goes to x."""
    x = np.array([[0.5, 1.0, 2.0]])
    dy = np.array([[10.0, 20.0, 30.0]])
    (dx,) = gradients("_maximum_scalar", {"scalar": 1.0}, [x], dy, [0])
    np.testing.assert_array_equal(dx, [[0, 20, 30]])
    (dx,) = gradients("_minimum_scalar", {"scalar": 1.0}, [x], dy, [0])
    np.testing.assert_array_equal(dx, [[10, 20, 0]])


def test_rpower_scalar_gradient():
    x = np.array([[-1.0, 0.0, 0.5, 2.0]])
    dy = np.array([[1.0, 2.0, 3.0, 4.0]])
    (dx,) = gradients("_rpower_scalar", {"scalar": 3.0}, [x], dy, [0])
    np.testing.assert_allclose(dx, dy * 3.0 ** x * np.log(3.0), rtol=1e-14)


def test_where_gradient_goes_to_x_and_y_only():
    c = np.array([[1.0, 0.0], [0.0, -2.0]])
    x, y, dy = rand(2, 2), rand(2, 2), rand(2, 2)
    dx, dyy = gradients("where", {}, [c, x, y], dy, [1, 2])
    np.testing.assert_array_equal(dx, np.where(c != 0, dy, 0))
    np.testing.assert_array_equal(dyy, np.where(c != 0, 0, dy))
    # a 1-D condition chooses rows
    dx, dyy = gradients("where", {}, [np.array([0.0, 3.0]), x, y], dy, [1, 2])
    np.testing.assert_array_equal(dx, [[0, 0], dy[1]])
    np.testing.assert_array_equal(dyy, [dy[0], [0, 0]])
    # the condition gets no gradient (zeros, as MXNet's zeros_like)
    (dc,) = gradients("where", {}, [c, x, y], dy, [0])
    np.testing.assert_array_equal(dc, 0)


@pytest.mark.parametrize("mode,axis", [("clip", 0), ("wrap", 1), ("clip", -1)])
def test_take_gradient_sums_repeated_indices(mode, axis):
    a = rand(3, 4)
    idx = np.array([[5.5, -1.2], [1.0, 1.9], [-6.0, 2.0]])  # repeats after clip/wrap
    k = axis % a.ndim
    dy = rand(*(a.shape[:k] + idx.shape + a.shape[k + 1:]))
    (da,) = gradients("take", {"mode": mode, "axis": axis}, [a, idx], dy, [0])
    # dy scatter-added at the indices MXNet reads
    j = take_indices(mode, idx, a.shape[k])
    want = np.zeros_like(np.moveaxis(a, k, 0))
    np.add.at(want, j, np.moveaxis(dy, list(range(k, k + idx.ndim)), list(range(idx.ndim))))
    np.testing.assert_allclose(da, np.moveaxis(want, 0, k), rtol=1e-14)
    fd = finite_differences(lambda v: REFERENCE_GLUE["take"]({"mode": mode, "axis": axis}, v,
                                                             idx), [a], dy, [0])[0]
    np.testing.assert_allclose(da, fd, rtol=1e-7, atol=1e-8)
    # the indices get no gradient
    (di,) = gradients("take", {"mode": mode, "axis": axis}, [a, idx], dy, [1])
    np.testing.assert_array_equal(di, 0)


@pytest.mark.parametrize("opname", ["shape_array", "size_array", "ones_like"])
def test_no_gradient_through_shapes_and_ones_like(opname):
    g, _ = node_over(opname, {}, ["x0"])
    gg = build_gradient(g, ["x0"])
    assert gg.outputs[1].node.op.name == "zeros_like"  # the rule stops the gradient
    outs, _ = lower(gg, is_train=True)({"x0": rand(2, 3)})
    np.testing.assert_array_equal(np.asarray(outs[1]), np.zeros((2, 3)))


# --------------------------------------------------------------------------
# what each backward reads (the memory planner sees exactly this)
# --------------------------------------------------------------------------
@pytest.mark.parametrize("opname,attrs,names,wrt,bwd,reads,shape_only", [
    # data movements read dy and at most the input's shape
    ("slice", {"begin": (1,), "end": (None,)}, ["x0"], ["x0"], "_backward_slice",
     ["op_output_head_grad", "x0"], ["x0"]),
    ("tile", {"reps": (2,)}, ["x0"], ["x0"], "_backward_tile",
     ["op_output_head_grad", "x0"], ["x0"]),
    ("repeat", {"repeats": 2}, ["x0"], ["x0"], "_backward_repeat",
     ["op_output_head_grad", "x0"], ["x0"]),
    ("squeeze", {}, ["x0"], ["x0"], "reshape_like", ["op_output_head_grad", "x0"], ["x0"]),
    ("broadcast_to", {"shape": (2, 3)}, ["x0"], ["x0"], "_sum_to_like",
     ["op_output_head_grad", "x0"], ["x0"]),
    ("broadcast_like", {}, ["x0", "x1"], ["x0"], "_sum_to_like",
     ["op_output_head_grad", "x0"], ["x0"]),
    ("reverse", {"axis": 0}, ["x0"], ["x0"], "reverse", ["op_output_head_grad"], []),
    ("SwapAxis", {"dim2": 1}, ["x0"], ["x0"], "SwapAxis", ["op_output_head_grad"], []),
    # take: the indices' values and the data's shape; where: the condition
    ("take", {}, ["x0", "x1"], ["x0"], "_backward_take",
     ["op_output_head_grad", "x0", "x1"], ["x0"]),
    ("where", {}, ["x0", "x1", "x2"], ["x1", "x2"], "_backward_where",
     ["op_output_head_grad", "x0"], []),
    # max/min/power read both inputs (MXNet's ElemwiseGradUseIn)
    ("_maximum", {}, ["x0", "x1"], ["x0"], "_backward__maximum",
     ["op_output_head_grad", "x0", "x1"], []),
    # s^x reads its output (ElemwiseGradUseOut), not x
    ("_rpower_scalar", {"scalar": 2}, ["x0"], ["x0"], "_backward__rpower_scalar",
     ["op_output_head_grad", "op"], []),
])
def test_backward_reads(opname, attrs, names, wrt, bwd, reads, shape_only):
    g, node = node_over(opname, attrs, names)
    gg = build_gradient(g, wrt)
    grad = gg.outputs[1].node
    assert grad.op.name == bwd
    assert [e.node.name for e in grad.inputs] == reads
    shape_reads = {grad.inputs[i].node.name for i in grad.op.shape_inputs(grad.params)}
    assert shape_reads == set(shape_only)


def test_stack_gradient_is_a_split_and_takes_unused_slices():
    a, b = sg.sym.Variable("a"), sg.sym.Variable("b")
    s = sg.sym.stack(a, b, axis=1, name="st")
    gg = build_gradient(s.graph(), ["a", "b"])
    assert {n.op.name for n in gg.nodes if n.op is not None} == {"stack", "SliceChannel"}
    x, y, dy = rand(2, 3), rand(2, 3), rand(2, 2, 3)
    outs, _ = lower(gg, is_train=True)({"a": x, "b": y, "st_output_head_grad": dy})
    np.testing.assert_array_equal(outs[0], np.stack([x, y], 1))
    np.testing.assert_array_equal(outs[1], dy[:, 0])
    np.testing.assert_array_equal(outs[2], dy[:, 1])


def test_take_backward_runs_without_the_data_values():
    # the planner may overwrite a (its values are never read by the
    # backward): the arena interpreter poisons shape-only inputs
    a, i = sg.sym.Variable("a"), sg.sym.Variable("i")
    net = sg.sym.LinearRegressionOutput(sg.sym.take(sg.sym.exp(a), i, mode="wrap"), name="o")
    plan = sg.plan(net, {"a": (5, 3), "i": (4,)}, train=True, wrt=["a"], execute=True)
    assert plan.verified and plan.arena_checked
    assert "_backward_take" in {n.op.name for n in plan.graph.nodes if n.op is not None}


# --------------------------------------------------------------------------
# ops without inputs: symbols, JSON, eager calls, plans, gradients
# --------------------------------------------------------------------------
def test_a_zero_dimension_is_given_by_the_consumer():
    """A hybridized Gluon RNN exports its zero begin state as
    ``_zeros(shape=(layers, 0, hidden))``: the batch comes from the op
    that reads it, in inference and in the lowering."""
    S = sg.sym
    x = S.Variable("data")
    y = x * 2 + S._zeros(shape=(0, 3), name="z") + S._ones(shape=(4, 0), name="o")
    assert y.infer_shape(data=(4, 3))[1] == [(4, 3)]
    ex = y.simple_bind(sg.cpu(), grad_req="null", data=(4, 3))
    got = ex.forward(data=sg.nd.array(np.arange(12).reshape(4, 3)))[0].asnumpy()
    np.testing.assert_array_equal(got, np.arange(12).reshape(4, 3) * 2 + 1)
    # the arena interpreter runs it from the plan's shapes
    plan = sg.plan(S.MakeLoss(y), {"data": (4, 3)}, train=True, wrt=["data"], execute=True)
    assert plan.verified and plan.arena_checked
    # what no consumer gives stays unknown: one clear error
    lonely = S.Group([x * 2, S._zeros(shape=(0, 3), name="lonely")])
    with pytest.warns(UserWarning, match="cannot infer the output shape of node 'lonely'"):
        assert lonely.infer_shape(data=(4, 3)) == (None, None, None)


def test_ops_without_inputs_everywhere():
    S = sg.sym
    z = S._zeros(shape=(2, 3), name="z")
    assert z.list_arguments() == [] and z.list_outputs() == ["z_output"]
    assert z.infer_shape() == ([], [(2, 3)], [])
    assert S._full(shape=(2,), value=1, dtype="int32").infer_type()[1] == [np.int32]
    assert S._arange(start=3, dtype="float64").infer_type()[1] == [np.float64]
    # eager, with no array argument
    np.testing.assert_array_equal(sg.nd._ones(shape=(2, 2)).asnumpy(), np.ones((2, 2)))
    np.testing.assert_array_equal(sg.nd._arange(start=2, stop=8, step=2).asnumpy(), [2, 4, 6])
    # in a net: constants feed other ops, the gradient flows past them
    x = S.Variable("data")
    y = S.broadcast_add(x * S._full(shape=(2, 3), value=2.0, dtype="float64"),
                        S._arange(start=3, dtype="float64"), name="y")
    net = S.LinearRegressionOutput(y, name="out")
    again = S.load_json(net.tojson())
    assert again.tojson() == net.tojson()
    assert again.list_arguments() == ["data", "out_label"]
    plan = sg.plan(net, {"data": (2, 3)}, train=True, wrt=["data"], execute=True)
    assert plan.verified and plan.arena_checked
    ex = net.simple_bind(sg.cpu(), type_dict={"data": "float64", "out_label": "float64"},
                         data=(2, 3))
    d = rand(2, 3)
    ex.arg_dict["data"][:] = d
    out = ex.forward(is_train=True)[0].asnumpy()
    np.testing.assert_allclose(out, d * 2 + np.arange(3), rtol=1e-14)
    ex.backward()
    # LinearRegressionOutput: d out = (out - label) / 3 (per-sample size), times 2
    np.testing.assert_allclose(ex.grad_dict["data"].asnumpy(), out / 3 * 2, rtol=1e-12)


# --------------------------------------------------------------------------
# an MXNet-JSON net (as a hybridized Gluon block exports) using many of them
# --------------------------------------------------------------------------
def _node(op, name, inputs, **attrs):
    n = {"op": op, "name": name, "inputs": [[i, 0, 0] for i in inputs]}
    if attrs:
        n["attrs"] = {k: str(v) for k, v in attrs.items()}
    return n


NODES = [
    _node("null", "data", []),                                                        # 0
    _node("null", "pos_weight", []),                                                  # 1
    _node("_arange", "pos", [], start="0", stop="4", dtype="float32"),                # 2
    _node("take", "pos_embed", [1, 2], axis="0", mode="clip"),                        # 3
    _node("expand_dims", "pe1", [3], axis="0"),                                       # 4
    _node("broadcast_like", "pe2", [4, 0]),                                           # 5
    _node("elemwise_add", "plus0", [0, 5]),                                           # 6
    _node("SwapAxis", "swap0", [6], dim1="1", dim2="2"),                              # 7
    _node("slice", "slice0", [7], begin="(None, None, 1)", end="(None, None, None)",
          step="(None, None, 2)"),                                                    # 8
    # float64 as the data this test checks in (MXNet refuses float64 with float32 too)
    _node("_zeros", "zeros0", [], shape="(2, 3, 2)", dtype="float64"),                # 9
    _node("_maximum", "relu0", [8, 9]),                                               # 10
    _node("reverse", "flip0", [10], axis="(2,)"),                                     # 11
    _node("tile", "tile0", [11], reps="(1, 1, 2)"),                                   # 12
    _node("_power_scalar", "sq0", [7], scalar="2.0"),                                 # 13
    _node("stack", "stack0", [12, 13], axis="1", num_args="2"),                       # 14
    _node("slice", "slice1", [14], begin="(None, 0)", end="(None, 1)"),               # 15
    _node("squeeze", "squeeze0", [15], axis="1"),                                     # 16
    _node("shape_array", "shape0", [16]),                                             # 17
    _node("_ones", "ones0", [], shape="(2,)", dtype="float32"),                       # 18
    _node("where", "where0", [18, 16, 13]),                                           # 19
    _node("sum", "sum0", [19], axis="(1,)", keepdims="True"),                         # 20
    _node("broadcast_to", "bto0", [20], shape="(0, 3, 0)"),                           # 21
    _node("repeat", "rep0", [21], repeats="2", axis="-1"),                            # 22
    _node("_rpower_scalar", "rpow0", [22], scalar="0.5"),                             # 23
]
MXNET_JSON = {"nodes": NODES, "arg_nodes": [0, 1],
              "node_row_ptr": list(range(len(NODES) + 1)),
              "heads": [[23, 0, 0], [17, 0, 0]], "attrs": {"mxnet_version": ["int", 10901]}}


def _numpy_net(data, w):
    R = REFERENCE_GLUE
    pe = R["take"]({"axis": 0, "mode": "clip"}, w, np.arange(4.0))[None]
    h = data + np.broadcast_to(pe, data.shape)
    sw = np.swapaxes(h, 1, 2)                          # (2, 3, 4)
    r = np.maximum(sw[:, :, 1::2], 0)[:, :, ::-1]      # (2, 3, 2)
    t = np.tile(r, (1, 1, 2))                          # (2, 3, 4)
    st = np.stack([t, sw ** 2], axis=1)                # (2, 2, 3, 4)
    q = st[:, 0]                                       # (2, 3, 4)
    s = q.sum(axis=1, keepdims=True)                   # (2, 1, 4)
    return 0.5 ** np.repeat(np.broadcast_to(s, (2, 3, 4)), 2, axis=-1), q.shape


def test_mxnet_json_net_loads_infers_runs_and_trains():
    import json
    net = sg.sym.load_json(json.dumps(MXNET_JSON))
    assert net.list_arguments() == ["data", "pos_weight"]
    args, outs, _ = net.infer_shape(data=(2, 4, 3), pos_weight=(6, 3))
    assert outs == [(2, 3, 8), (3,)]
    again = sg.sym.load_json(net.tojson())
    assert again.tojson() == net.tojson()
    rng = np.random.default_rng(9)
    data, w = rng.normal(size=(2, 4, 3)) * 0.3, rng.normal(size=(6, 3)) * 0.3
    outs, _ = lower(again.graph())({"data": data, "pos_weight": w})
    want, qshape = _numpy_net(data, w)
    np.testing.assert_allclose(np.asarray(outs[0]), want, rtol=1e-12)
    assert np.asarray(outs[1]).dtype == np.int64
    np.testing.assert_array_equal(np.asarray(outs[1]), qshape)
    # gradients of both arguments against finite differences of the NumPy net
    ex = net[0].simple_bind(sg.cpu(), type_dict={"data": "float64", "pos_weight": "float64"},
                            data=(2, 4, 3), pos_weight=(6, 3))
    ex.arg_dict["data"][:] = data
    ex.arg_dict["pos_weight"][:] = w
    ex.forward(is_train=True)
    head = rng.normal(size=(2, 3, 8))
    ex.backward([sg.nd.array(head, dtype="float64")])
    fd = finite_differences(lambda d, v: _numpy_net(d, v)[0], [data, w], head, [0, 1])
    np.testing.assert_allclose(ex.grad_dict["data"].asnumpy(), fd[0], rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(ex.grad_dict["pos_weight"].asnumpy(), fd[1], rtol=1e-6,
                               atol=1e-8)
    assert not np.any(fd[1][4:])  # rows no position reads
    # the plan, with every tensor at its planned offset, reproduces the lowering
    plan = sg.plan(net[0], {"data": (2, 4, 3), "pos_weight": (6, 3)}, train=True,
                   wrt=["data", "pos_weight"], execute=True)
    assert plan.verified and plan.arena_checked


# --------------------------------------------------------------------------
# bad input: one clear error each
# --------------------------------------------------------------------------
@pytest.mark.parametrize("opname,attrs,shapes,err,words", [
    ("slice", {"begin": (2,), "end": (1,)}, [(3, 2)], ShapeError, ["empty", "axis 0"]),
    ("slice", {"begin": (0, 1), "end": (2,)}, [(3, 2)], ShapeError, ["same length"]),
    ("slice", {"begin": (0, 0, 0), "end": (1, 1, 1)}, [(3, 2)], ShapeError, ["rank 2"]),
    ("slice", {"begin": (0,), "end": (2,), "step": (0,)}, [(3, 2)], ShapeError,
     ["cannot be 0"]),
    ("slice", {"begin": "(0, x)", "end": (2,)}, [(3, 2)], OpError, ["begin", "None"]),
    ("squeeze", {"axis": 1}, [(1, 3)], ShapeError, ["axis 1", "size is 3"]),
    ("squeeze", {"axis": 2}, [(1, 3)], ShapeError, ["axis=2", "rank 2"]),
    ("squeeze", {"axis": (0, -2)}, [(1, 3)], ShapeError, ["twice"]),
    ("broadcast_to", {"shape": (2, 4)}, [(2, 3)], ShapeError, ["(2, 3)", "(2, 4)", "neither"]),
    ("broadcast_to", {"shape": (3,)}, [(2, 3)], ShapeError, ["ranks differ"]),
    ("broadcast_axis", {"axis": 0, "size": 4}, [(2, 3)], ShapeError, ["size 1"]),
    ("broadcast_axis", {"axis": (0, 1), "size": 4}, [(1, 1)], ShapeError, ["same length"]),
    ("broadcast_axis", {"axis": 5, "size": 4}, [(1, 1)], ShapeError, ["axis=5"]),
    ("broadcast_like", {}, [(2, 3), (3, 3)], ShapeError, ["neither 1 nor 3"]),
    ("broadcast_like", {"lhs_axes": (0,), "rhs_axes": (0, 1)}, [(1, 3), (3, 3)], ShapeError,
     ["same length"]),
    ("broadcast_like", {"lhs_axes": (1,), "rhs_axes": (0,)}, [(1, 3), (3, 3)], ShapeError,
     ["size 1"]),
    ("where", {}, [(2, 3), (2, 3), (3, 2)], ShapeError, ["x and y", "same shape"]),
    ("where", {}, [(3,), (2, 3), (2, 3)], ShapeError, ["1-D condition", "first dimension"]),
    ("where", {}, [(2, 2), (2, 3), (2, 3)], ShapeError, ["condition (2, 2)"]),
    ("take", {"axis": 2}, [(2, 3), (4,)], ShapeError, ["axis=2", "rank 2"]),
    ("take", {"mode": "raise"}, [(2, 3), (4,)], OpError, ["raise", "clip or wrap"]),
    ("take", {"mode": "nearest"}, [(2, 3), (4,)], OpError, ["clip, wrap"]),
    ("stack", {"num_args": 2}, [(2, 3), (3, 2)], ShapeError, ["stack", "same shape"]),
    ("stack", {"num_args": 2, "axis": 3}, [(2, 3), (2, 3)], ShapeError, ["axis=3"]),
    ("tile", {"reps": (2, 0)}, [(2, 3)], ShapeError, ["positive"]),
    ("tile", {}, [(2, 3)], OpError, ["reps"]),
    ("repeat", {"repeats": 0}, [(2, 3)], OpError, ["repeats", "positive"]),
    ("repeat", {"repeats": 2, "axis": -3}, [(2, 3)], ShapeError, ["axis=-3"]),
    ("reverse", {"axis": (1, -1)}, [(2, 3)], ShapeError, ["twice"]),
    ("reverse", {"axis": 2}, [(2, 3)], ShapeError, ["axis=2"]),
    ("SwapAxis", {"dim1": 0, "dim2": 2}, [(2, 3)], ShapeError, ["dim2=2"]),
    ("_maximum", {}, [(2, 3), (3, 2)], ShapeError, ["same shape"]),
    ("_power", {}, [(2, 3), (2, 3, 1)], ShapeError, ["same shape"]),
    ("_zeros", {}, [], ShapeError, ["shape=()"]),
    # MXNet's 0 is a dimension a consumer gives: alone, none does
    ("_ones", {"shape": (0, 3)}, [], ShapeError, ["cannot infer the output shape"]),
    ("_full", {"shape": (2,)}, [], OpError, ["value"]),
    ("_zeros", {"shape": (2,), "dtype": "complex64"}, [], OpError, ["dtype"]),
    ("_arange", {"start": 0, "stop": 3, "infer_range": True}, [], OpError,
     ["infer_range", "give stop"]),
    ("_arange", {"start": 3, "stop": 1}, [], ShapeError, ["empty"]),
    ("_arange", {"start": 3, "step": 0}, [], ShapeError, ["step=0"]),
    ("_arange", {"start": 3, "repeat": 0}, [], ShapeError, ["repeat=0"]),
    ("_arange", {"start": 3, "dtype": "bool"}, [], OpError, ["dtype"]),
])
def test_bad_input_raises_one_clear_error(opname, attrs, shapes, err, words):
    assert_one_clear_error(opname, attrs, shapes, err, words)
