"""Shape ops, broadcasting, reductions and softmax beyond the registry-driven
checks of test_ops.py: property tests (hypothesis) of Reshape's codes,
broadcasting and reduction shapes against hand-written NumPy oracles, what
each backward node reads, multi-output gradients, dtypes, and bad input."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from symgraph.errors import OpError, ShapeError, SymgraphError
from symgraph.graph import Entry, Graph, Node
from symgraph.lower import lower
from symgraph.ops import get_op
from symgraph.ops.registry import Params
from symgraph.passes.gradient import build_gradient
from symgraph.passes.infer import infer_shapes

from op_reference_tensor import REFERENCE_TENSOR, mx_reshape_shape, unbroadcast

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def op_graph(opname, attrs, n_inputs, name="op"):
    """One op applied to variables x0, x1, ...; all its visible outputs."""
    xs = [Node(None, f"x{i}") for i in range(n_inputs)]
    node = Node(get_op(opname), name, attrs, [Entry(x) for x in xs])
    return Graph([Entry(node, i) for i in range(node.num_visible_outputs)]), node


def out_shapes(g, **shapes):
    inf = infer_shapes(g, shapes)
    return [inf.shape(e) for e in g.outputs]


def run(g, feeds, train=False):
    outs, _ = lower(g, is_train=train)(feeds)
    return [np.asarray(o) for o in outs]


def grads(g, feeds, heads):
    """(forward outputs, gradients of every x_i) with the given head gradients."""
    wrt = sorted(n.name for n in g.arguments)
    gg = build_gradient(g, wrt)
    outs = run(gg, {**feeds, **heads}, train=True)
    n = len(g.outputs)
    return outs[:n], dict(zip(wrt, outs[n:]))


# --------------------------------------------------------------------------
# Reshape codes
# --------------------------------------------------------------------------
@st.composite
def valid_reshape(draw):
    """A shape and a code pattern built to be valid, with the shape it means."""
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)))
    reverse = draw(st.booleans())
    dims = list(shape[::-1] if reverse else shape)
    codes, out, i, inferred = [], [], 0, False
    while i < len(dims):
        kinds = ["keep", "literal", "rest"] + (["merge"] if i + 1 < len(dims) else []) \
            + ([] if inferred else ["infer"]) + ([] if reverse else ["split"])
        kind, d = draw(st.sampled_from(kinds)), dims[i]
        if kind == "keep":
            codes, out, i = codes + [0], out + [d], i + 1
        elif kind == "literal":
            codes, out, i = codes + [d], out + [d], i + 1
        elif kind == "infer":
            codes, out, i, inferred = codes + [-1], out + [d], i + 1, True
        elif kind == "merge":
            codes, out, i = codes + [-3], out + [d * dims[i + 1]], i + 2
        elif kind == "split":
            a = draw(st.sampled_from([f for f in range(1, d + 1) if d % f == 0]))
            form = draw(st.sampled_from([(a, d // a), (a, -1), (-1, d // a)]))
            codes, out, i = codes + [-4, *form], out + [a, d // a], i + 1
        else:
            codes, out, i = codes + [-2], out + dims[i:], len(dims)
    if draw(st.booleans()):
        codes.append(-2)  # copies nothing: every dim is used
    if reverse:
        codes.reverse()
        out.reverse()
    return shape, tuple(codes), reverse, tuple(out)


@SETTINGS
@given(valid_reshape())
def test_reshape_valid_codes_match_mxnet_rules(case):
    shape, codes, reverse, want = case
    assert mx_reshape_shape(codes, shape, reverse) == want  # the oracle agrees by construction
    g, _ = op_graph("Reshape", {"shape": codes, "reverse": reverse}, 1)
    assert out_shapes(g, x0=shape) == [want]
    x = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
    head = np.arange(int(np.prod(want)), dtype=np.float64).reshape(want) * -1.0
    outs, gr = grads(g, {"x0": x}, {"op_output_head_grad": head})
    np.testing.assert_array_equal(outs[0], x.reshape(want))
    np.testing.assert_array_equal(gr["x0"], head.reshape(shape))  # dx = reshape(dy, x.shape)


@SETTINGS
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple),
       codes=st.lists(st.integers(-4, 4), min_size=1, max_size=5).map(tuple),
       reverse=st.booleans())
def test_reshape_random_codes_agree_with_reference(shape, codes, reverse):
    try:
        want = mx_reshape_shape(codes, shape, reverse)
    except ValueError:
        want = None
    if want is None:
        with pytest.raises((ShapeError, OpError)):
            g, _ = op_graph("Reshape", {"shape": codes, "reverse": reverse}, 1)
            out_shapes(g, x0=shape)
    else:
        g, _ = op_graph("Reshape", {"shape": codes, "reverse": reverse}, 1)
        assert out_shapes(g, x0=shape) == [want]


@pytest.mark.parametrize("codes,reverse,shape,want", [
    ((0, -1), False, (2, 3, 4), (2, 12)),
    ((-1, 0), True, (2, 3, 4), (6, 4)),         # matched from the right: 0 copies the 4
    ((-2, -1), False, (2, 3), (2, 3, 1)),       # -1 after -2 infers a trailing 1
    ((-3, -2), False, (2, 3, 4), (6, 4)),
    ((-4, -1, 2, -2), False, (6, 5), (3, 2, 5)),
    ((-4, 1, 2, -1), False, (2, 3), (1, 2, 3)),  # -1 after -4: its output position
    ((2, -2, 1), False, (2, 3), (2, 3, 1)),
])
def test_reshape_examples(codes, reverse, shape, want):
    g, _ = op_graph("Reshape", {"shape": codes, "reverse": reverse}, 1)
    assert out_shapes(g, x0=shape) == [want]


def test_reshape_accepts_mxnet_strings_and_legacy_attributes():
    g, _ = op_graph("Reshape", {"shape": "(0, -1)", "reverse": "False"}, 1)
    assert out_shapes(g, x0=(2, 3, 4)) == [(2, 12)]
    g, _ = op_graph("Reshape", {"target_shape": "(0, 0)", "keep_highest": "True"}, 1)
    assert out_shapes(g, x0=(5, 3, 4)) == [(5, 12)]
    g, _ = op_graph("reshape", {"target_shape": "(4, 0)"}, 1)
    assert out_shapes(g, x0=(2, 3, 4)) == [(4, 6)]


# --------------------------------------------------------------------------
# broadcasting
# --------------------------------------------------------------------------
@st.composite
def compatible_shapes(draw):
    full = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))

    def derive():
        drop = draw(st.integers(0, len(full) - 1))  # fewer leading dims
        return tuple(1 if draw(st.booleans()) else d for d in full[drop:])
    return derive(), derive()


_BCAST_GRAD = {  # (da, db) before summing down to the input shapes
    "broadcast_add": lambda dy, a, b: (dy, dy),
    "broadcast_sub": lambda dy, a, b: (dy, -dy),
    "broadcast_mul": lambda dy, a, b: (dy * b, dy * a),
    "broadcast_div": lambda dy, a, b: (dy / b, -dy * a / b ** 2),
    "broadcast_maximum": lambda dy, a, b: (dy * (a >= b), dy * (a < b)),
    "broadcast_minimum": lambda dy, a, b: (dy * (a <= b), dy * (a > b)),
    "broadcast_power": lambda dy, a, b: (dy * b * a ** (b - 1), dy * a ** b * np.log(a)),
}


@SETTINGS
@given(shapes=compatible_shapes(), opname=st.sampled_from(sorted(_BCAST_GRAD)),
       seed=st.integers(0, 2 ** 16))
def test_broadcast_shape_forward_and_gradients(shapes, opname, seed):
    sa, sb = shapes
    g, node = op_graph(opname, {}, 2)
    want = np.broadcast_shapes(sa, sb)
    assert out_shapes(g, x0=sa, x1=sb) == [want]
    rng = np.random.default_rng(seed)
    # small integers (as floats): positive for div/power, and ties, where
    # maximum/minimum send the gradient to lhs only, as MXNet does
    a, b = rng.integers(1, 4, sa).astype(float), rng.integers(1, 4, sb).astype(float)
    dy = rng.normal(size=want)
    outs, gr = grads(g, {"x0": a, "x1": b}, {"op_output_head_grad": dy})
    np.testing.assert_allclose(outs[0], REFERENCE_TENSOR[opname](node.params, a, b), rtol=1e-12)
    da, db = _BCAST_GRAD[opname](dy, np.broadcast_to(a, want), np.broadcast_to(b, want))
    assert gr["x0"].shape == sa and gr["x1"].shape == sb
    np.testing.assert_allclose(gr["x0"], unbroadcast(da, sa), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gr["x1"], unbroadcast(db, sb), rtol=1e-10, atol=1e-12)


@SETTINGS
@given(full=st.lists(st.integers(2, 4), min_size=1, max_size=3), data=st.data())
def test_broadcast_incompatible_shapes_raise_naming_both(full, data):
    k = data.draw(st.integers(0, len(full) - 1))
    sa = tuple(full)
    sb = list(full)
    sb[k] = data.draw(st.integers(2, 5).filter(lambda d: d != full[k]))
    sb = tuple(sb[data.draw(st.integers(0, k)):])  # rhs may have fewer dims
    g, _ = op_graph(data.draw(st.sampled_from(sorted(_BCAST_GRAD))), {}, 2, name="badd")
    with pytest.raises(ShapeError) as err:
        out_shapes(g, x0=sa, x1=sb)
    msg = str(err.value)
    assert str(sa) in msg and str(sb) in msg and "'badd'" in msg


def test_broadcast_add_gradient_reads_no_values_of_the_other_input():
    # d(lhs) is dy summed down to lhs's shape: it reads lhs's shape, never rhs
    g, node = op_graph("broadcast_add", {}, 2)
    gg = build_gradient(g, ["x0"])
    grad_node = gg.outputs[1].node
    assert grad_node.op.name == "_sum_to_like"
    assert [e.node.name for e in grad_node.inputs] == ["op_output_head_grad", "x0"]


# --------------------------------------------------------------------------
# reductions
# --------------------------------------------------------------------------
@SETTINGS
@given(shape=st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple), data=st.data())
def test_reduction_shapes_and_gradients(shape, data):
    nd = len(shape)
    axis = data.draw(st.one_of(st.none(), st.lists(st.integers(-nd, nd - 1), min_size=1,
                                                   max_size=nd, unique_by=lambda a: a % nd)
                               .map(tuple)))
    attrs = {"axis": axis, "keepdims": data.draw(st.booleans()),
             "exclude": data.draw(st.booleans())}
    opname = data.draw(st.sampled_from(["sum", "mean", "max", "min"]))
    g, node = op_graph(opname, attrs, 1)
    x = np.random.default_rng(len(shape)).normal(size=shape)
    want = REFERENCE_TENSOR[opname](node.params, x)
    assert out_shapes(g, x0=shape) == [want.shape]
    dy = np.arange(1.0, want.size + 1).reshape(want.shape)
    outs, gr = grads(g, {"x0": x}, {"op_output_head_grad": dy})
    np.testing.assert_allclose(outs[0], want, rtol=1e-12)
    # the reduced axes, kept as size 1, broadcast the head gradient back
    keep = REFERENCE_TENSOR[opname](Params({**node.params, "keepdims": True}), x)
    dy_keep = dy.reshape(keep.shape)
    if opname == "sum":
        expect = np.broadcast_to(dy_keep, shape)
    elif opname == "mean":
        expect = np.broadcast_to(dy_keep, shape) * keep.size / x.size
    else:
        expect = np.where(x == keep, dy_keep, 0.0)
    np.testing.assert_allclose(gr["x0"], expect, rtol=1e-12)


def test_max_gradient_goes_to_every_tied_maximum_as_in_mxnet():
    g, _ = op_graph("max", {"axis": 1}, 1)
    x = np.array([[1.0, 3.0, 3.0], [2.0, 0.0, -1.0]])
    _, gr = grads(g, {"x0": x}, {"op_output_head_grad": np.array([5.0, 7.0])})
    np.testing.assert_array_equal(gr["x0"], [[0, 5, 5], [7, 0, 0]])


def test_full_reduction_has_shape_one_as_in_mxnet():
    for attrs in ({}, {"axis": (0, 1)}, {"axis": "()"}, {"axis": "None", "exclude": "True"}):
        g, _ = op_graph("sum", attrs, 1)
        assert out_shapes(g, x0=(2, 3)) == [(1,)]
    g, _ = op_graph("sum_axis", {"axis": "1", "keepdims": "True"}, 1)
    assert out_shapes(g, x0=(2, 3)) == [(2, 1)]


# --------------------------------------------------------------------------
# what the backward nodes read
# --------------------------------------------------------------------------
@pytest.mark.parametrize("opname", ["softmax", "log_softmax"])
def test_softmax_backward_reads_only_its_output(opname):
    g, node = op_graph(opname, {"axis": 0, "temperature": 2.0}, 1)
    gg = build_gradient(g, ["x0"])
    bwd = gg.outputs[1].node
    assert bwd.op.name == f"_backward_{opname}"
    head = next(n for n in gg.variables if n.name == "op_output_head_grad")
    assert set(bwd.inputs) == {Entry(node, 0), Entry(head, 0)}  # not the input x0


@pytest.mark.parametrize("opname,attrs,shape", [
    ("expand_dims", {"axis": -1}, (2, 3)),
    ("transpose", {"axes": (1, 0, 2)}, (2, 3, 4)),
])
def test_backward_reads_only_the_head_gradient(opname, attrs, shape):
    g, _ = op_graph(opname, attrs, 1)
    gg = build_gradient(g, ["x0"])
    bwd = gg.outputs[1].node
    assert [e.node.name for e in bwd.inputs] == ["op_output_head_grad"]


# --------------------------------------------------------------------------
# SliceChannel: outputs that get no gradient
# --------------------------------------------------------------------------
@pytest.mark.parametrize("squeeze", [False, True])
def test_slice_channel_gradient_with_unused_outputs(squeeze):
    xs = Node(None, "x")
    split = Node(get_op("split"), "sp",
                 {"num_outputs": 3, "axis": 1, "squeeze_axis": squeeze}, [Entry(xs)])
    g = Graph([Entry(split, 1)])  # outputs 0 and 2 reach nothing
    part = (2, 4) if squeeze else (2, 1, 4)
    assert out_shapes(g, x=(2, 3, 4)) == [part]
    x = np.random.default_rng(0).normal(size=(2, 3, 4))
    dy = np.random.default_rng(1).normal(size=part)
    outs, gr = grads(g, {"x": x}, {"sp_output1_head_grad": dy})
    np.testing.assert_array_equal(outs[0], x[:, 1] if squeeze else x[:, 1:2])
    want = np.zeros_like(x)
    want[:, 1:2] = dy.reshape(2, 1, 4)
    np.testing.assert_array_equal(gr["x"], want)


# --------------------------------------------------------------------------
# Cast: dtypes forward and backward
# --------------------------------------------------------------------------
def test_cast_types_and_gradient_dtype():
    g, node = op_graph("cast", {"dtype": "float32"}, 1)
    inf = infer_shapes(g, {"x0": (2, 3)}, dtypes={"x0": "float64"})
    assert inf.dtype(g.outputs[0]) == "float32"
    gg = build_gradient(g, ["x0"])
    inf = infer_shapes(gg, {"x0": (2, 3), "op_output_head_grad": (2, 3)},
                       dtypes={"x0": "float64", "op_output_head_grad": "float32"})
    assert inf.dtype(gg.outputs[1]) == "float64"
    x = np.linspace(-1, 1, 6).reshape(2, 3)
    dy = np.linspace(2, 3, 6, dtype=np.float32).reshape(2, 3)
    outs = run(gg, {"x0": x, "op_output_head_grad": dy}, train=True)
    assert outs[0].dtype == np.float32 and outs[1].dtype == np.float64
    np.testing.assert_allclose(outs[1], dy.astype(np.float64))


# --------------------------------------------------------------------------
# MXNet names
# --------------------------------------------------------------------------
@pytest.mark.parametrize("alias,name", [
    ("broadcast_plus", "broadcast_add"), ("broadcast_minus", "broadcast_sub"),
    ("concat", "Concat"), ("flatten", "Flatten"), ("reshape", "Reshape"),
    ("split", "SliceChannel"), ("cast", "Cast"), ("sum_axis", "sum"),
    ("max_axis", "max"), ("min_axis", "min")])
def test_aliases(alias, name):
    assert get_op(alias) is get_op(name)


def test_symbol_api_names_and_defaults():
    import symgraph as sg
    a, b = sg.sym.Variable("a"), sg.sym.Variable("b")
    c = sg.sym.Concat(a, b, name="cat")  # num_args from the inputs, dim=1
    assert c.list_arguments() == ["a", "b"]
    _, outs, _ = c.infer_shape(a=(2, 3), b=(2, 5))
    assert outs == [(2, 8)]
    parts = sg.sym.SliceChannel(a, num_outputs=2, name="sl")
    assert parts.list_outputs() == ["sl_output0", "sl_output1"]
    _, outs, _ = parts.infer_shape(a=(2, 4))
    assert outs == [(2, 2), (2, 2)]


# --------------------------------------------------------------------------
# bad input: one clear error naming the node and op
# --------------------------------------------------------------------------
@pytest.mark.parametrize("opname,attrs,shapes,err,words", [
    ("Reshape", {"shape": (-1, -1)}, [(2, 3)], OpError, ["-1", "at most one"]),
    ("Reshape", {"shape": (-5,)}, [(2, 3)], OpError, ["-5"]),
    ("Reshape", {"shape": (-4, -1, -1)}, [(6,)], OpError, ["both"]),
    ("Reshape", {"shape": (4, 2)}, [(2, 3)], ShapeError, ["(2, 3)", "(4, 2)"]),
    ("Reshape", {"shape": (-4, 2, 2)}, [(6,)], ShapeError, ["6", "2 x 2"]),
    ("Reshape", {"shape": (0, 0, 0)}, [(2, 3)], ShapeError, ["code 0"]),
    ("Reshape", {"shape": (-4, 2, -1), "reverse": True}, [(6,)], ShapeError, ["reverse"]),
    ("Reshape", {}, [(2, 3)], ShapeError, ["shape"]),
    ("Concat", {"num_args": 2}, [(2, 3), (4, 3)], ShapeError, ["(2, 3)", "(4, 3)", "dim=1"]),
    ("Concat", {"num_args": 2, "dim": 2}, [(2, 3), (2, 3)], ShapeError, ["dim=2"]),
    ("SliceChannel", {"num_outputs": 3}, [(2, 4)], ShapeError, ["num_outputs=3"]),
    ("SliceChannel", {"num_outputs": 0}, [(2, 4)], OpError, ["positive"]),
    ("Concat", {"num_args": 0}, [], OpError, ["positive"]),
    ("SliceChannel", {"num_outputs": 2, "squeeze_axis": True}, [(2, 4)], ShapeError,
     ["squeeze_axis"]),
    ("slice_axis", {"axis": 0, "begin": 1, "end": 5}, [(3, 2)], ShapeError, ["[1, 5)"]),
    ("slice_axis", {"axis": 0, "begin": 2, "end": 1}, [(3, 2)], ShapeError, ["empty"]),
    ("slice_axis", {"axis": 0, "begin": 0}, [(3, 2)], OpError, ["end"]),
    ("transpose", {"axes": (0, 0)}, [(2, 3)], ShapeError, ["permutation"]),
    ("transpose", {"axes": (1, 0)}, [(2, 3, 4)], ShapeError, ["rank 3"]),
    ("expand_dims", {"axis": 3}, [(2, 3)], ShapeError, ["axis=3"]),
    ("sum", {"axis": (0, -2)}, [(2, 3)], ShapeError, ["twice"]),
    ("max", {"axis": 2}, [(2, 3)], ShapeError, ["axis 2"]),
    ("softmax", {"axis": 2}, [(2, 3)], ShapeError, ["axis=2"]),
    ("Cast", {"dtype": "complex64"}, [(2, 3)], OpError, ["dtype"]),
    ("Flatten", {"shape": (1,)}, [(2, 3)], OpError, ["unknown attribute"]),
])
def test_bad_input_raises_one_clear_error(opname, attrs, shapes, err, words):
    with pytest.raises(err) as info:
        g, _ = op_graph(opname, attrs, len(shapes), name="bad_node")
        out_shapes(g, **{f"x{i}": s for i, s in enumerate(shapes)})
    msg = str(info.value)
    assert "'bad_node'" in msg and get_op(opname).name in msg, msg
    for w in words:
        assert w in msg, msg
    assert isinstance(info.value, SymgraphError)
