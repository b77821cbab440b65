"""dot and batch_dot (MXNet 1.9.1) beyond the registry-driven checks of
test_ops.py: the forward of every transpose combination against NumPy
written from the math in float64, the gradients against NumPy formulas and
central finite differences, shape inference and its one-line errors, what
the backward node reads and computes, MXNet JSON, and an attention-like
net (softmax(q k^T) v) that infers, plans, runs and trains."""
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

from grad_check import finite_differences, symgraph_gradients
from op_reference_tensor import REFERENCE_TENSOR

TRANSPOSES = [(False, False), (True, False), (False, True), (True, True)]
T_IDS = ["NN", "TN", "NT", "TT"]


def _op(x, t):
    """x with its last two axes swapped when t."""
    return np.swapaxes(x, -1, -2) if t else x


def _shapes(ta, tb, m, k, n, batch=()):
    """lhs, rhs shapes whose op(lhs) is (..., m, k) and op(rhs) (..., k, n)."""
    return batch + ((k, m) if ta else (m, k)), batch + ((n, k) if tb else (k, n))


def _attrs(ta, tb):
    return {"transpose_a": ta, "transpose_b": tb}


def op_graph(opname, attrs, name="op"):
    lhs, rhs = Node(None, "lhs"), Node(None, "rhs")
    node = Node(get_op(opname), name, attrs, [Entry(lhs), Entry(rhs)])
    return Graph([Entry(node, 0)]), node


def out_shape(opname, attrs, lhs, rhs, name="op"):
    g, _ = op_graph(opname, attrs, name)
    return infer_shapes(g, {"lhs": lhs, "rhs": rhs}).shape(g.outputs[0])


# --------------------------------------------------------------------------
# forward against NumPy (float64)
# --------------------------------------------------------------------------
@pytest.mark.parametrize("ta,tb", TRANSPOSES, ids=T_IDS)
def test_dot_forward_2d_matches_numpy(ta, tb):
    rng = np.random.default_rng(0)
    sa, sb = _shapes(ta, tb, 3, 4, 5)
    a, b = rng.normal(size=sa), rng.normal(size=sb)
    want = np.einsum("mk,kn->mn", _op(a, ta), _op(b, tb))
    got = sg.nd.dot(sg.nd.array(a, dtype="float64"), sg.nd.array(b, dtype="float64"),
                    **_attrs(ta, tb)).asnumpy()
    assert got.shape == (3, 5) and got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(got, np.matmul(_op(a, ta), _op(b, tb)), rtol=1e-12)
    assert out_shape("dot", _attrs(ta, tb), sa, sb) == (3, 5)


@pytest.mark.parametrize("ta,tb", TRANSPOSES, ids=T_IDS)
def test_batch_dot_forward_matches_numpy(ta, tb):
    rng = np.random.default_rng(1)
    sa, sb = _shapes(ta, tb, 3, 4, 5, batch=(2,))
    a, b = rng.normal(size=sa), rng.normal(size=sb)
    # out[i] = op(a[i]) @ op(b[i]), batch by batch
    want = np.stack([_op(a[i], ta) @ _op(b[i], tb) for i in range(2)])
    np.testing.assert_allclose(np.einsum("bmk,bkn->bmn", _op(a, ta), _op(b, tb)), want,
                               rtol=1e-12)
    got = sg.nd.batch_dot(sg.nd.array(a, dtype="float64"), sg.nd.array(b, dtype="float64"),
                          **_attrs(ta, tb)).asnumpy()
    assert got.shape == (2, 3, 5)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert out_shape("batch_dot", _attrs(ta, tb), sa, sb) == (2, 3, 5)


@pytest.mark.parametrize("attrs,sa,sb,want", [
    ({}, (4,), (4,), (1,)),                        # vector . vector is (1,) in MXNet
    ({}, (4,), (4, 5), (5,)),                      # row vector times matrix
    ({"transpose_a": True}, (4,), (4, 5), (5,)),   # transposing a vector changes nothing
    ({}, (3, 4), (4,), (3,)),                      # matrix times column vector
    ({"transpose_b": True}, (3, 4), (4,), (3,)),
    ({}, (2, 3, 4), (4, 5), (2, 3, 5)),            # N-D: last axis of lhs, first of rhs
    ({"transpose_a": True}, (4, 2, 3), (4, 5), (2, 3, 5)),
    ({"transpose_b": True}, (2, 4), (5, 3, 4), (2, 5, 3)),
])
def test_dot_vectors_and_higher_ranks_as_mxnet(attrs, sa, sb, want):
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=sa), rng.normal(size=sb)
    assert out_shape("dot", attrs, sa, sb) == want
    got = sg.nd.dot(sg.nd.array(a, dtype="float64"), sg.nd.array(b, dtype="float64"),
                    **attrs).asnumpy()
    assert got.shape == want
    # MXNet's rule: lhs as the matrix (prod(shape[:-1]), shape[-1]) -- or
    # (shape[0], prod(rest)) transposed -- times rhs likewise
    am = a.reshape(a.shape[0], -1).T if attrs.get("transpose_a") else a.reshape(-1, a.shape[-1])
    bm = b.reshape(-1, b.shape[-1]).T if attrs.get("transpose_b") else b.reshape(b.shape[0], -1)
    np.testing.assert_allclose(got.reshape(-1), (am @ bm).reshape(-1), rtol=1e-12)
    np.testing.assert_allclose(got, REFERENCE_TENSOR["dot"](attrs, a, b), rtol=1e-12)


def test_batch_dot_with_several_batch_dimensions():
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(2, 3, 4, 5)), rng.normal(size=(2, 3, 6, 5))
    got = sg.nd.batch_dot(sg.nd.array(a, dtype="float64"), sg.nd.array(b, dtype="float64"),
                          transpose_b=True).asnumpy()
    np.testing.assert_allclose(got, np.einsum("ijmk,ijnk->ijmn", a, b), rtol=1e-12)


def test_symbol_and_ndarray_functions_and_float32():
    a, b = sg.sym.Variable("a"), sg.sym.Variable("b")
    c = sg.sym.batch_dot(a, b, transpose_b=True, name="bd")
    assert c.list_arguments() == ["a", "b"] and c.list_outputs() == ["bd_output"]
    _, outs, _ = c.infer_shape(a=(2, 3, 4), b=(2, 5, 4))
    assert outs == [(2, 3, 5)]
    d = sg.sym.dot(a, b, name="d")
    _, outs, _ = d.infer_shape(a=(3, 4), b=(4, 6))
    assert outs == [(3, 6)]
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = sg.nd.dot(sg.nd.array(x), sg.nd.array(x), transpose_b=True)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.asnumpy(), x @ x.T, rtol=1e-6)


# --------------------------------------------------------------------------
# gradients (float64): NumPy formulas and finite differences
# --------------------------------------------------------------------------
def _numpy_grads(ta, tb, a, b, dc):
    """(da, db) of c = op(a) op(b): d op(a) = dc op(b)^T, d op(b) = op(a)^T dc,
    transposed back where the input was."""
    dopa = np.matmul(dc, np.swapaxes(_op(b, tb), -1, -2))
    dopb = np.matmul(np.swapaxes(_op(a, ta), -1, -2), dc)
    return _op(dopa, ta), _op(dopb, tb)


@pytest.mark.parametrize("opname", ["dot", "batch_dot"])
@pytest.mark.parametrize("ta,tb", TRANSPOSES, ids=T_IDS)
def test_gradients_match_numpy_andfinite_differences(opname, ta, tb):
    batch = (2,) if opname == "batch_dot" else ()
    sa, sb = _shapes(ta, tb, 3, 4, 2, batch)
    attrs = _attrs(ta, tb)
    p, (a, b), (head,), (da, db) = symgraph_gradients(opname, attrs, {"lhs": sa, "rhs": sb},
                                                      seed=7)
    assert da.shape == sa and db.shape == sb
    want_a, want_b = _numpy_grads(ta, tb, a, b, head)
    np.testing.assert_allclose(da, want_a, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(db, want_b, rtol=1e-12, atol=1e-13)

    def f(x, y):
        return REFERENCE_TENSOR[opname](attrs, x, y)
    num_a, num_b = finite_differences(f, [a, b], head)
    np.testing.assert_allclose(da, num_a, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(db, num_b, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("attrs,sa,sb", [
    ({}, (4,), (4,)), ({}, (4,), (4, 3)), ({"transpose_b": True}, (3, 4), (4,)),
    ({"transpose_a": True}, (4, 2, 3), (4, 2)), ({"transpose_b": True}, (2, 4), (3, 2, 4)),
])
def test_dot_gradients_of_vectors_and_higher_ranks(attrs, sa, sb):
    p, (a, b), (head,), (da, db) = symgraph_gradients("dot", attrs, {"lhs": sa, "rhs": sb},
                                                      seed=3)
    assert da.shape == sa and db.shape == sb
    num_a, num_b = finite_differences(lambda x, y: REFERENCE_TENSOR["dot"](attrs, x, y),
                                       [a, b], head)
    np.testing.assert_allclose(da, num_a, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(db, num_b, rtol=1e-7, atol=1e-9)
    if len(sa) == len(sb) == 1:  # MXNet: da = dc * b, db = dc * a
        np.testing.assert_allclose(da, head[0] * b, rtol=1e-12)
        np.testing.assert_allclose(db, head[0] * a, rtol=1e-12)


@pytest.mark.parametrize("opname", ["dot", "batch_dot"])
def test_backward_node_reads_both_inputs_and_computes_only_what_is_asked(opname):
    g, node = op_graph(opname, {"transpose_b": True})
    gg = build_gradient(g, ["lhs"])
    bwd = gg.outputs[1].node
    assert bwd.op.name == f"_backward_{opname}" and bwd.op.family == "matmul"
    assert [e.node.name for e in bwd.inputs] == ["op_output_head_grad", "lhs", "rhs"]
    assert bwd.params.need == (1, 0) and bwd.num_outputs == 1  # no rhs gradient computed
    sa, sb = ((2, 3, 4), (2, 5, 4)) if opname == "batch_dot" else ((3, 4), (5, 4))
    rng = np.random.default_rng(4)
    a, b = rng.normal(size=sa), rng.normal(size=sb)
    dc = rng.normal(size=sa[:-1] + sb[-2:-1])
    outs, _ = lower(gg, is_train=True)({"lhs": a, "rhs": b, "op_output_head_grad": dc})
    np.testing.assert_allclose(np.asarray(outs[1]), _numpy_grads(False, True, a, b, dc)[0],
                               rtol=1e-12)


def test_flops():
    dot, bdot = get_op("dot"), get_op("batch_dot")

    def params(op, **attrs):
        return Node(op, "x", attrs, []).params
    # 2 m n k: a multiply and an add per term
    assert dot.flops(params(dot), [(3, 4), (4, 5)], [(3, 5)]) == 2 * 3 * 5 * 4
    assert dot.flops(params(dot, transpose_a=True), [(4, 3), (4, 5)], [(3, 5)]) == 120
    assert dot.flops(params(dot), [(4,), (4,)], [(1,)]) == 8
    assert bdot.flops(params(bdot, transpose_b=True), [(2, 3, 4), (2, 5, 4)],
                      [(2, 3, 5)]) == 2 * 2 * 3 * 5 * 4
    back = get_op("_backward_batch_dot")
    ins = [(2, 3, 5), (2, 3, 4), (2, 4, 5)]
    assert back.flops(params(back), ins, ins[1:]) == 2 * 240
    assert back.flops(params(back, need=(0, 1)), ins, ins[2:]) == 240


# --------------------------------------------------------------------------
# shape inference: partial, and one clear error
# --------------------------------------------------------------------------
def test_partial_inference_waits_for_both_inputs():
    a, b = sg.sym.Variable("a"), sg.sym.Variable("b")
    for net in (sg.sym.dot(a, b), sg.sym.batch_dot(a, b)):
        args, outs, _ = net.infer_shape_partial(a=(2, 3, 4))
        assert args == [(2, 3, 4), ()] and outs == [()]  # MXNet's () for unknown
        with pytest.warns(UserWarning, match="cannot infer the shape of b"):
            assert net.infer_shape(a=(2, 3, 4)) == (None, None, None)


@pytest.mark.parametrize("opname,attrs,shapes,words", [
    ("dot", {}, [(3, 4), (5, 6)], ["(3, 4)", "(5, 6)", "4", "5", "last axis of lhs"]),
    ("dot", {"transpose_a": True}, [(3, 4), (4, 6)], ["(3, 4)", "(4, 6)", "transpose_a=True",
                                                      "first axis of lhs"]),
    ("dot", {"transpose_b": True}, [(3, 4), (4, 6)], ["(4, 6)", "last axis of rhs"]),
    ("dot", {}, [(3,), (4,)], ["(3,)", "(4,)", "length"]),
    ("dot", {"transpose_a": True}, [(3,), (3,)], ["transpose", "vectors"]),
    ("dot", {}, [(), (3,)], ["rank >= 1"]),
    ("batch_dot", {}, [(2, 3, 4), (3, 4, 5)], ["(2, 3, 4)", "(3, 4, 5)", "batch dimensions"]),
    ("batch_dot", {}, [(2, 3, 4), (2, 5, 6)], ["(2, 3, 4)", "(2, 5, 6)", "inner dimension 4",
                                               "5"]),
    ("batch_dot", {"transpose_a": True, "transpose_b": True}, [(2, 3, 4), (2, 5, 4)],
     ["transpose_a=True", "transpose_b=True", "inner dimension 3"]),
    ("batch_dot", {}, [(3, 4), (4, 5)], ["rank >= 3", "(3, 4)"]),
    ("batch_dot", {}, [(2, 3, 4), (2, 2, 4, 5)], ["one rank", "(2, 2, 4, 5)"]),
])
def test_bad_shapes_raise_one_clear_error(opname, attrs, shapes, words):
    with pytest.raises(ShapeError) as info:
        out_shape(opname, attrs, *shapes, name="bad_node")
    msg = str(info.value)
    assert "\n" not in msg
    assert "'bad_node'" in msg and f"({opname})" in msg, msg
    for w in words:
        assert w in msg, msg
    # the same through the Symbol API and eagerly
    a, b = sg.sym.Variable("a"), sg.sym.Variable("b")
    with pytest.raises(ShapeError):
        getattr(sg.sym, opname)(a, b, **attrs).infer_shape(a=shapes[0], b=shapes[1])
    if all(shapes):
        with pytest.raises(ShapeError):
            getattr(sg.nd, opname)(sg.nd.zeros(shapes[0]), sg.nd.zeros(shapes[1]), **attrs)


@pytest.mark.parametrize("attrs,err,words", [
    ({"transpose_a": "maybe"}, OpError, ["transpose_a", "True or False"]),
    ({"forward_stype": "csr"}, OpError, ["forward_stype", "dense"]),
    ({"transpose": True}, OpError, ["unknown attribute", "transpose_a"]),
])
def test_bad_attributes(attrs, err, words):
    a, b = sg.sym.Variable("a"), sg.sym.Variable("b")
    with pytest.raises(err) as info:
        sg.sym.batch_dot(a, b, name="bd", **attrs)
    msg = str(info.value)
    assert "'bd'" in msg and isinstance(info.value, SymgraphError)
    for w in words:
        assert w in msg, msg


# --------------------------------------------------------------------------
# MXNet JSON
# --------------------------------------------------------------------------
MXNET_JSON = """{
  "nodes": [
    {"op": "null", "name": "q", "inputs": []},
    {"op": "null", "name": "k", "inputs": []},
    {"op": "batch_dot", "name": "scores", "attrs": {"transpose_b": "True"},
     "inputs": [[0, 0, 0], [1, 0, 0]]},
    {"op": "null", "name": "w", "inputs": []},
    {"op": "dot", "name": "proj", "attrs": {"transpose_a": "False", "transpose_b": "1",
     "forward_stype": "default"}, "inputs": [[2, 0, 0], [3, 0, 0]]}
  ],
  "arg_nodes": [0, 1, 3],
  "node_row_ptr": [0, 1, 2, 3, 4, 5],
  "heads": [[4, 0, 0]],
  "attrs": {"mxnet_version": ["int", 10901]}
}"""


def test_mxnet_json_loads_and_round_trips():
    net = sg.sym.load_json(MXNET_JSON)
    _, outs, _ = net.infer_shape(q=(2, 3, 4), k=(2, 5, 4), w=(6, 5))
    assert outs == [(2, 3, 6)]  # (2, 3, 5) . (6, 5)^T
    again = sg.sym.load_json(net.tojson())
    assert again.tojson() == net.tojson()
    nodes = {n.name: n for n in again.graph().nodes}
    assert nodes["scores"].params.transpose_b and not nodes["scores"].params.transpose_a
    assert nodes["proj"].params.transpose_b and nodes["proj"].params.forward_stype == "default"
    rng = np.random.default_rng(5)
    q, k, w = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 5, 4)), rng.normal(size=(6, 5))
    outs, _ = lower(again.graph(), is_train=False)({"q": q, "k": k, "w": w})
    np.testing.assert_allclose(np.asarray(outs[0]),
                               np.einsum("bmk,bnk->bmn", q, k) @ w.T, rtol=1e-12)


# --------------------------------------------------------------------------
# an attention-like net: softmax(q k^T) v
# --------------------------------------------------------------------------
def _attention():
    q, k, v = (sg.sym.Variable(n) for n in ("q", "k", "v"))
    scores = sg.sym.batch_dot(q, k, transpose_b=True, name="scores")
    weights = sg.sym.softmax(scores, axis=-1, name="weights")
    return sg.sym.batch_dot(weights, v, name="context")


SHAPES = {"q": (2, 3, 4), "k": (2, 5, 4), "v": (2, 5, 6)}


def _numpy_attention(q, k, v, dout):
    s = np.einsum("bmd,bnd->bmn", q, k)
    a = np.exp(s - s.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    out = np.einsum("bmn,bne->bme", a, v)
    dv = np.einsum("bmn,bme->bne", a, dout)
    da = np.einsum("bme,bne->bmn", dout, v)
    ds = a * (da - np.sum(da * a, -1, keepdims=True))
    dq = np.einsum("bmn,bnd->bmd", ds, k)
    dk = np.einsum("bmn,bmd->bnd", ds, q)
    return out, {"q": dq, "k": dk, "v": dv}


def test_attention_builds_infers_and_plans():
    net = _attention()
    assert net.list_arguments() == ["q", "k", "v"]
    args, outs, aux = net.infer_shape(**SHAPES)
    assert args == list(SHAPES.values()) and outs == [(2, 3, 6)] and aux == []
    for train in (False, True):
        plan = sg.plan(net, SHAPES, train=train, wrt=["q", "k", "v"] if train else None,
                       execute=True)
        assert plan.verified and plan.arena_checked
        names = {n.op.name for n in plan.graph.nodes if n.op is not None}
        assert "batch_dot" in names
        if train:
            assert "_backward_batch_dot" in names


def test_attention_runs_forward_and_backward():
    net = _attention()
    ex = net.simple_bind(sg.cpu(), type_dict={n: "float64" for n in SHAPES}, **SHAPES)
    rng = np.random.default_rng(6)
    vals = {n: rng.normal(size=s) for n, s in SHAPES.items()}
    for n, x in vals.items():
        ex.arg_dict[n][:] = x
    outs = ex.forward(is_train=True)
    dout = rng.normal(size=(2, 3, 6))
    want, grads = _numpy_attention(vals["q"], vals["k"], vals["v"], dout)
    np.testing.assert_allclose(outs[0].asnumpy(), want, rtol=1e-12)
    ex.backward([sg.nd.array(dout, dtype="float64")])
    for n in SHAPES:
        np.testing.assert_allclose(ex.grad_dict[n].asnumpy(), grads[n], rtol=1e-10,
                                   atol=1e-12, err_msg=n)


def test_attention_gradient_program_is_jit_compatible():
    # the whole training graph lowers to one XLA program
    g = _attention().graph()
    gg = build_gradient(g, ["q", "k", "v"])
    rng = np.random.default_rng(8)
    feeds = {n: rng.normal(size=s) for n, s in SHAPES.items()}
    feeds["context_output_head_grad"] = rng.normal(size=(2, 3, 6))
    outs, _ = jax.jit(lower(gg, is_train=True))(feeds, jax.random.key(0))
    want, grads = _numpy_attention(feeds["q"], feeds["k"], feeds["v"],
                                   feeds["context_output_head_grad"])
    np.testing.assert_allclose(np.asarray(outs[0]), want, rtol=1e-12)
    for n, o in zip(["q", "k", "v"], outs[1:]):
        np.testing.assert_allclose(np.asarray(o), grads[n], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_linalg_gemm2_against_numpy_andfinite_differences(ta, tb):
    """alpha * op(A) @ op(B) over the last two axes, 2-D and batched, in
    float64; its gradients (alpha times batch_dot's) against central
    differences."""
    rng = np.random.default_rng(7)
    for lead in ((), (2,)):
        a = rng.normal(size=lead + ((4, 3) if ta else (3, 4)))
        b = rng.normal(size=lead + ((5, 4) if tb else (4, 5)))
        attrs = {"transpose_a": ta, "transpose_b": tb, "alpha": -1.5}
        want = -1.5 * np.einsum("...mk,...kn->...mn", np.swapaxes(a, -1, -2) if ta else a,
                                np.swapaxes(b, -1, -2) if tb else b)
        x, y = sg.sym.Variable("A"), sg.sym.Variable("B")
        net = sg.sym._linalg_gemm2(x, y, **attrs)
        ex = net.simple_bind(sg.cpu(), A=a.shape, B=b.shape, type_dict={"A": "float64",
                                                                        "B": "float64"})
        ex.arg_dict["A"][:] = a
        ex.arg_dict["B"][:] = b
        np.testing.assert_allclose(ex.forward(is_train=True)[0].asnumpy(), want, rtol=1e-12)
        head = rng.normal(size=want.shape)
        ex.backward(sg.nd.array(head, dtype="float64"))

        def f(a_, b_):
            return -1.5 * np.einsum("...mk,...kn->...mn", np.swapaxes(a_, -1, -2) if ta else a_,
                                    np.swapaxes(b_, -1, -2) if tb else b_)
        da, db = finite_differences(f, [a, b], head)
        np.testing.assert_allclose(ex.grad_dict["A"].asnumpy(), da, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(ex.grad_dict["B"].asnumpy(), db, rtol=1e-6, atol=1e-8)


def test_linalg_gemm2_errors():
    x, y = sg.sym.Variable("A"), sg.sym.Variable("B")
    with pytest.raises(sg.SymgraphError, match="only axis=-2"):
        sg.sym._linalg_gemm2(x, y, axis=-3)
    with pytest.raises(sg.SymgraphError, match="_linalg_gemm2 shape error"):
        sg.sym._linalg_gemm2(x, y).infer_shape(A=(3, 4), B=(5, 6))
    with pytest.raises(sg.SymgraphError, match="rank >= 2"):
        sg.sym._linalg_gemm2(x, y).infer_shape(A=(3,), B=(3,))
