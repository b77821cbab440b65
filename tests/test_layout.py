"""Layouts (issue 15, item 2): Convolution and Pooling take MXNet's
channel-last ``layout`` attribute, and passes/layout.py rewrites a graph to
run channels-last inside. Everything is checked in float64 against the
channel-first op or graph: the same values and the same gradients."""
from collections import Counter

import jax
import numpy as np
import pytest

import symgraph as sg
from symgraph.errors import OpError, ShapeError
from symgraph.graph import Entry, Graph, Node
from symgraph.lower import lower
from symgraph.ops import get_op
from symgraph.passes.gradient import build_gradient
from symgraph.passes.infer import infer_shapes
from symgraph.passes.layout import to_channels_last

LAST = {3: "NWC", 4: "NHWC", 5: "NDHWC"}


def _to_last(a):
    return np.moveaxis(a, 1, -1)


def _to_first(a):
    return np.moveaxis(a, -1, 1)


def _values(graph, shapes, seed=0):
    inf = infer_shapes(graph, shapes)
    rng = np.random.default_rng(seed)
    vals = {}
    for n in graph.variables:
        s = inf.shapes[graph.entry_id_of_node(n)]
        v = rng.normal(size=s)
        vals[n.name] = np.abs(v) + 0.5 if n.name.endswith(("_var", "_gamma")) else v
    return inf, vals


def _run_with_gradients(graph, feeds, heads, wrt):
    """Outputs and the gradients of ``wrt`` for head gradients ``heads``."""
    gg = build_gradient(graph, wrt)
    used = {n.name for n in gg.variables}
    head_names = [e.node.output_names()[e.index] + "_head_grad" for e in graph.outputs]
    feeds = {**feeds, **{k: h for k, h in zip(head_names, heads) if k in used}}
    outs, _ = jax.jit(lower(gg, True))(feeds, jax.random.key(0))
    n = len(graph.outputs)
    return [np.asarray(o) for o in outs[:n]], [np.asarray(o) for o in outs[n:]]


def _one_op(opname, attrs):
    op = get_op(opname)
    probe = Node(op, "op", attrs, [])
    names = op.arg_names(probe.params) + op.aux_names(probe.params)
    node = Node(op, "op", attrs, [Entry(Node(None, n)) for n in names])
    return Graph([Entry(node, 0)]), names


# --------------------------------------------------------------------------
# the layout attribute
# --------------------------------------------------------------------------
OP_CASES = [
    ("Convolution", {"kernel": (3, 2), "stride": (2, 1), "pad": (1, 1), "num_filter": 4},
     (2, 3, 7, 6)),
    ("Convolution", {"kernel": (3, 3), "num_group": 2, "num_filter": 4, "dilate": (2, 1),
                     "no_bias": True}, (1, 4, 7, 6)),
    ("Convolution", {"kernel": (3,), "stride": (2,), "pad": (1,), "num_filter": 3}, (2, 2, 9)),
    ("Convolution", {"kernel": (2, 2, 2), "pad": (1, 0, 1), "num_filter": 2},
     (1, 2, 3, 4, 3)),
    # depthwise (one filter per channel)
    ("Convolution", {"kernel": (3, 3), "num_group": 3, "num_filter": 3, "pad": (1, 1),
                     "stride": (2, 2)}, (2, 3, 5, 5)),
    ("Convolution", {"kernel": (3,), "num_group": 4, "num_filter": 4, "dilate": (2,)},
     (2, 4, 9)),
    ("Pooling", {"kernel": (3, 3), "stride": (2, 2), "pad": (1, 1)}, (2, 3, 7, 6)),
    ("Pooling", {"kernel": (3, 2), "stride": (2, 1), "pool_type": "avg",
                 "count_include_pad": False, "pooling_convention": "full"}, (2, 2, 6, 5)),
    ("Pooling", {"kernel": (3, 2), "pad": (1, 1), "pool_type": "avg"}, (1, 2, 4, 5)),
    ("Pooling", {"kernel": (2, 2), "stride": (2, 1), "pool_type": "sum"}, (1, 2, 5, 4)),
    ("Pooling", {"global_pool": True, "pool_type": "max"}, (2, 3, 3, 4)),
    ("Pooling", {"global_pool": True, "pool_type": "avg"}, (2, 3, 5)),
    ("Pooling", {"kernel": (3,), "stride": (2,)}, (2, 3, 8)),
    ("Pooling", {"kernel": (2, 2, 2), "stride": (1, 2, 2), "pool_type": "avg"},
     (1, 2, 3, 4, 4)),
]


@pytest.mark.parametrize("opname,attrs,shape", OP_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(OP_CASES)])
def test_channel_last_op_is_the_channel_first_op_transposed(opname, attrs, shape):
    first, names = _one_op(opname, attrs)
    last, _ = _one_op(opname, {**attrs, "layout": LAST[len(shape)]})
    inf, vals = _values(first, {"data": shape})
    # data, and a convolution's weight (O, I, *k) -> (O, *k, I), move their channels last
    last_vals = {k: _to_last(v) if v.ndim == len(shape) else v for k, v in vals.items()}
    inf_last = infer_shapes(last, {"data": _to_last(vals["data"]).shape})
    assert {n.name: inf_last.shapes[last.entry_id_of_node(n)] for n in last.variables} == \
        {k: v.shape for k, v in last_vals.items()}
    head = np.random.default_rng(1).normal(size=inf.shape(first.outputs[0]))
    wrt = names
    (y,), grads = _run_with_gradients(first, vals, [head], wrt)
    (y_last,), grads_last = _run_with_gradients(last, last_vals, [_to_last(head)], wrt)
    assert y_last.shape == inf_last.shape(last.outputs[0])
    np.testing.assert_allclose(_to_first(y_last), y, rtol=1e-12, atol=1e-12)
    for name, g, g_last in zip(wrt, grads, grads_last):
        want = _to_last(g) if g.ndim == len(shape) else g
        np.testing.assert_allclose(g_last, want, rtol=1e-10, atol=1e-12, err_msg=name)


def test_weight_layout_reads_the_weight_as_it_is():
    rng = np.random.default_rng(2)
    x, w, b = rng.normal(size=(2, 3, 7, 6)), rng.normal(size=(4, 3, 3, 2)), rng.normal(size=4)

    def conv(x, w, **attrs):
        return sg.nd.Convolution(sg.nd.array(x, dtype="float64"),
                                 sg.nd.array(w, dtype="float64"),
                                 sg.nd.array(b, dtype="float64"), kernel=(3, 2), num_filter=4,
                                 pad=(1, 0), **attrs).asnumpy()

    want = conv(x, w)
    np.testing.assert_allclose(_to_first(conv(_to_last(x), w, layout="NHWC",
                                              weight_layout="OIHW")), want, rtol=1e-12)
    np.testing.assert_allclose(conv(x, _to_last(w), weight_layout="OHWI"), want, rtol=1e-12)
    d = sg.sym.Variable("data")
    arg, _, _ = sg.sym.Convolution(d, kernel=(3, 2), num_filter=4, layout="NHWC",
                                   weight_layout="OIHW").infer_shape(data=(2, 7, 6, 3))
    assert arg[1] == (4, 3, 3, 2)
    with pytest.raises(ShapeError, match="weight_layout=OIHW does not fit a 1-D kernel"):
        sg.sym.Convolution(d, kernel=(3,), num_filter=2, weight_layout="OIHW").infer_shape(
            data=(1, 4, 3))


def test_layout_errors_name_the_fix():
    x = sg.sym.Variable("data")
    with pytest.raises(ShapeError, match="layout=NHWC does not fit a 1-D kernel"):
        sg.sym.Convolution(x, kernel=(3,), num_filter=2, layout="NHWC").infer_shape(
            data=(1, 4, 3))
    with pytest.raises(OpError, match="expected None, NCW, NCHW, NCDHW or NWC, NHWC, NDHWC"):
        sg.sym.Pooling(x, kernel=(2, 2), layout="CHWN")
    with pytest.raises(OpError, match=r"channel-first layouts\), got 'NHWC'"):
        sg.sym.Deconvolution(x, kernel=(2, 2), num_filter=2, layout="NHWC")
    # the channel-last data's channel count is its last axis
    arg, out, _ = sg.sym.Convolution(x, kernel=(3, 3), num_filter=5, layout="NHWC",
                                     name="c").infer_shape(data=(2, 8, 9, 3))
    assert arg == [(2, 8, 9, 3), (5, 3, 3, 3), (5,)] and out == [(2, 6, 7, 5)]


# --------------------------------------------------------------------------
# the pass
# --------------------------------------------------------------------------
def _net():
    data = sg.sym.Variable("data")
    c1 = sg.sym.Convolution(data, kernel=(3, 3), pad=(1, 1), num_filter=4, name="c1")
    b1 = sg.sym.BatchNorm(c1, fix_gamma=False, name="b1")
    r1 = sg.sym.Activation(b1, act_type="relu", name="r1")
    c2 = sg.sym.Convolution(r1, kernel=(1, 1), num_filter=4, no_bias=True, name="c2")
    add = sg.sym.elemwise_add(c2, r1, name="add")          # a residual add
    p1 = sg.sym.Pooling(add, kernel=(2, 2), stride=(2, 2), pool_type="max", name="p1")
    c3 = sg.sym.Convolution(p1, kernel=(3, 3), pad=(1, 1), num_filter=3, name="c3")
    cat = sg.sym.Concat(p1, c3, dim=1, name="cat")
    scale = sg.sym.Variable("scale", shape=(1, 7, 1, 1))
    bc = sg.sym.broadcast_mul(cat, scale, name="bc")       # a per-channel scale
    g = sg.sym.Pooling(bc, global_pool=True, pool_type="avg", kernel=(1, 1), name="gp")
    fc = sg.sym.FullyConnected(g, num_hidden=3, name="fc")
    return sg.sym.Group([sg.sym.LinearRegressionOutput(fc, name="out"), cat])


SHAPES = {"data": (2, 3, 6, 6)}


def test_rewrite_runs_channels_last_with_few_transposes():
    g = Graph(_net().outputs)
    before = [(n.name, dict(n.attrs)) for n in g.nodes]
    g2 = to_channels_last(g, SHAPES)
    assert [(n.name, dict(n.attrs)) for n in g.nodes] == before, "the input graph changed"
    node = {n.name: n for n in g2.nodes}
    assert all(node[c].params.layout == "NHWC" for c in ("c1", "c2", "c3", "p1"))
    assert node["gp"].params.layout == "NHWC"  # it follows the channels-last scale
    assert node["b1"].params.axis == 3 and node["cat"].params.dim == 3
    assert node["add"].inputs[1].node is node["r1"]  # r1 stays channels-last
    transposes = [n for n in g2.nodes if n.op is not None and n.op.name == "transpose"]
    # data in, the (1, 7, 1, 1) scale in (the broadcast follows, permuted
    # alike); out to the FullyConnected and to the concat output; the
    # weights are read as they are
    assert sorted(n.name for n in transposes) == ["cat_to_nc", "data_to_nhwc", "gp_to_nc",
                                                  "scale_to_nhwc"]
    assert all(node[c].params.weight_layout == "OIHW" for c in ("c1", "c2", "c3"))
    for t in transposes:  # no transpose reads another: the pairs cancelled
        assert t.inputs[0].node.op is None or t.inputs[0].node.op.name != "transpose"
    assert node["bc"].inputs[0].node is node["cat"]
    assert node["scale_to_nhwc"].params.axes == (0, 2, 3, 1)
    assert Counter(n.op.name for n in g2.nodes if n.op is not None) - \
        Counter(n.op.name for n in g.nodes if n.op is not None) == Counter(transpose=4)
    assert g2.list_arguments() == g.list_arguments()
    assert g2.list_auxiliary_states() == g.list_auxiliary_states()


def test_rewrite_keeps_outputs_and_gradients():
    g = Graph(_net().outputs)
    g2 = to_channels_last(g, SHAPES)
    inf, vals = _values(g, SHAPES, seed=3)
    rng = np.random.default_rng(4)
    heads = [rng.normal(size=inf.shape(e)) for e in g.outputs]
    wrt = [n for n in g.list_arguments() if n not in ("out_label",)]
    outs, grads = _run_with_gradients(g, vals, heads, wrt)
    outs2, grads2 = _run_with_gradients(g2, vals, heads, wrt)
    for a, b in zip(outs, outs2):
        np.testing.assert_allclose(b, a, rtol=1e-11, atol=1e-12)
    for name, a, b in zip(wrt, grads, grads2):
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-11, err_msg=name)
    # the aux updates (BatchNorm's moving stats) too
    _, aux = jax.jit(lower(g, True))(vals, jax.random.key(0))
    _, aux2 = jax.jit(lower(g2, True))(vals, jax.random.key(0))
    assert aux.keys() == aux2.keys()
    for k in aux:
        np.testing.assert_allclose(aux2[k], aux[k], rtol=1e-12, err_msg=k)


def test_planner_sees_the_transposes():
    g2 = to_channels_last(Graph(_net().outputs), SHAPES)
    plan = sg.plan(g2, SHAPES, train=True, execute=True)
    assert plan.verified and plan.arena_checked
    names = {n.name for n in plan.graph.nodes}
    assert {"data_to_nhwc", "cat_to_nc"} <= names
    # the transposes' gradients are planned too (their backward is a
    # transpose): the concat output's, the pooled value's and the scale's;
    # the data gets no gradient
    assert sorted(n.name for n in plan.graph.nodes if n.op is not None and
                  n.op.name == "transpose") == [
        "cat_to_nc", "cat_to_nc_backward", "data_to_nhwc", "gp_to_nc", "gp_to_nc_backward",
        "scale_to_nhwc", "scale_to_nhwc_backward"]


def test_plan_layout_nhwc_plans_the_rewritten_training_graph():
    """sg.plan(layout='NHWC') rewrites the training graph built from the
    net (each backward node beside its forward node) and plans it: the
    transposes are tensors of the plan, the arena run matches the plain
    lowering, and the gradients are those of the NCHW plan's graph."""
    net = _net()
    nchw = sg.plan(net, SHAPES, train=True)
    nhwc = sg.plan(net, SHAPES, train=True, layout="NHWC", execute=True)
    assert nhwc.verified and nhwc.arena_checked and nhwc.options["layout"] == "NHWC"
    ops = Counter(n.op.name for n in nhwc.graph.nodes if n.op is not None)
    assert ops["transpose"] >= 2 and "transpose" not in {
        n.op.name for n in nchw.graph.nodes if n.op is not None}
    # the same variables but the head gradient, named after the output's
    # node (now the transpose back to channel-first)
    heads = [[n.name for n in p.graph.variables if n.name.endswith("_head_grad")]
             for p in (nchw, nhwc)]
    assert heads == [["cat_output_head_grad"], ["cat_to_nc_output_head_grad"]]
    assert ({n.name for n in nhwc.graph.variables} - set(heads[1])
            == {n.name for n in nchw.graph.variables} - set(heads[0]))
    assert nhwc.buckets["gradients"] == nchw.buckets["gradients"]
    rng = np.random.default_rng(0)
    feeds = {n.name: rng.normal(size=nchw.inferred.shapes[nchw.graph.entry_id_of_node(n)])
             for n in nchw.graph.variables}  # float64 (conftest)
    feeds2 = {**feeds, heads[1][0]: feeds[heads[0][0]]}
    want = jax.jit(lower(nchw.graph, True))(feeds, jax.random.key(0))[0]
    got = jax.jit(lower(nhwc.graph, True))(feeds2, jax.random.key(0))[0]
    for a, b in zip(want, got):
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-12)
    assert sg.plan(net, SHAPES, layout="NCHW").internal == sg.plan(net, SHAPES).internal
    with pytest.raises(sg.errors.PlanError, match="layout='NWHC'; use one of"):
        sg.plan(net, SHAPES, layout="NWHC")


def test_training_graph_backward_follows_its_forward():
    g = Graph(_net().outputs)
    inf, vals = _values(g, SHAPES, seed=5)
    wrt = [n for n in g.list_arguments() if n not in ("out_label",)]
    gg = build_gradient(g, wrt)
    rng = np.random.default_rng(6)
    heads = {e.node.output_names()[e.index] + "_head_grad": rng.normal(size=inf.shape(e))
             for e in g.outputs}
    heads = {k: v for k, v in heads.items() if k in {n.name for n in gg.variables}}
    shapes = {**SHAPES, **{k: v.shape for k, v in heads.items()}}
    g2 = to_channels_last(gg, shapes)
    node = {n.name: n for n in g2.nodes}
    bwd = [n for n in g2.nodes if n.op is not None and n.op.forward is not None and
           n.op.forward.name in ("Convolution", "Pooling", "BatchNorm", "Concat")]
    assert len(bwd) == 7  # c1, c2, c3, b1, p1, cat and gp
    for n in bwd:  # every backward node runs in its forward node's layout
        fwd = node[n.name.replace("_backward", "")]
        assert n.params.get("layout") == fwd.params.get("layout"), n.name
        assert n.params.get("axis") == fwd.params.get("axis"), n.name
    # transposes: data and scale in, the pooled value and the concat out, as
    # in the forward graph; the concat output's head gradient and the
    # FullyConnected's data gradient in; the data's and the scale's
    # gradients out
    transposes = sorted(n.name for n in g2.nodes if n.op is not None and
                        n.op.name == "transpose")
    assert transposes == ["bc_backward_1_to_nc", "c1_backward_to_nc",
                          "cat_output_head_grad_to_nhwc", "cat_to_nc", "data_to_nhwc",
                          "fc_backward_to_nhwc", "gp_to_nc", "scale_to_nhwc"]
    feeds = {**vals, **heads}
    a, aux = jax.jit(lower(gg, True))(feeds, jax.random.key(0))
    b, aux2 = jax.jit(lower(g2, True))(feeds, jax.random.key(0))
    for name, x, y in zip(gg.list_outputs(), a, b):
        np.testing.assert_allclose(np.asarray(y), np.asarray(x), rtol=1e-10, atol=1e-11,
                                   err_msg=name)
    for k in aux:
        np.testing.assert_allclose(aux2[k], aux[k], rtol=1e-12, err_msg=k)
    # a fed node stays as it is: its value is given channel-first
    kept = to_channels_last(gg, shapes, keep={"c1"})
    assert {n.name: n for n in kept.nodes}["c1"].params.layout is None


def test_graph_already_channels_last_or_without_windows_is_kept():
    data = sg.sym.Variable("data")
    net = sg.sym.Convolution(data, kernel=(3, 3), num_filter=2, layout="NHWC", name="c")
    g = Graph(net.outputs)
    g2 = to_channels_last(g, {"data": (1, 5, 5, 3)})
    assert [n.name for n in g2.nodes] == [n.name for n in g.nodes]
    mlp = Graph(sg.sym.FullyConnected(data, num_hidden=3, name="fc").outputs)
    assert [n.name for n in to_channels_last(mlp, {"data": (2, 4)}).nodes] == \
        [n.name for n in mlp.nodes]
