"""Tests of the neural-network layers beyond the registry-driven ones in
test_ops.py: what each backward reads (the memory planner's view), MXNet
behaviours that random samples do not reach (first-max routing on ties,
BatchNorm's training statistics and moving averages, Dropout's
statistics), shape errors, and hypothesis properties of convolution and
pooling geometry."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import symgraph as sg
from symgraph.errors import OpError, ShapeError
from symgraph.graph import Entry, Graph, Node
from symgraph.lower import LowerCtx, lower
from symgraph.ops import get_op
from symgraph.passes.gradient import build_gradient
from symgraph.passes.infer import infer_shapes

from op_reference_nn import (batchnorm_train, embedding_weight_grad, max_pool_grad,
                             pool_output_size, pooling)


# --------------------------------------------------------------------------
# helpers: one op applied to variables named after its inputs
# --------------------------------------------------------------------------
def op_graph(opname, attrs, name="op"):
    op = get_op(opname)
    probe = Node(op, name, attrs, [])
    names = op.arg_names(probe.params) + op.aux_names(probe.params)
    variables = {n: Node(None, n) for n in names}
    node = Node(op, name, attrs, [Entry(v) for v in variables.values()])
    return Graph([Entry(node, i) for i in range(node.num_visible_outputs)]), node


def run(graph, feeds, is_train=False, key=0):
    return jax.jit(lower(graph, is_train))(feeds, jax.random.key(key))


def backward_node(gg, opname):
    (node,) = [n for n in gg.nodes if n.op is not None and n.op.name == opname]
    return node


def read_names(node):
    """What a backward node reads: variables by name, op outputs as name:index."""
    return [e.node.name if e.node.op is None else f"{e.node.name}:{e.index}"
            for e in node.inputs]


def jaxpr_text(graph, feeds, is_train=True):
    return str(jax.make_jaxpr(lower(graph, is_train))(feeds, jax.random.key(0)))


# --------------------------------------------------------------------------
# parameter shapes inferred from the data, through the Symbol API
# --------------------------------------------------------------------------
def test_symbol_infers_parameter_and_aux_shapes():
    data = sg.sym.Variable("data")
    net = sg.sym.Convolution(data=data, kernel=(3, 3), num_filter=8, num_group=2,
                             stride=(2, 2), pad=(1, 1), name="conv1")
    net = sg.sym.BatchNorm(data=net, name="bn1")
    net = sg.sym.LeakyReLU(data=net, act_type="prelu", name="act1")
    net = sg.sym.Deconvolution(data=net, kernel=(4, 4), stride=(2, 2), pad=(1, 1),
                               num_filter=6, name="up1")
    net = sg.sym.Pooling(data=net, kernel=(3, 3), stride=(2, 2), pooling_convention="full",
                         name="pool1")
    args, outs, aux = net.infer_shape(data=(2, 4, 9, 9))
    shapes = dict(zip(net.list_arguments(), args))
    assert shapes == {"data": (2, 4, 9, 9), "conv1_weight": (8, 2, 3, 3), "conv1_bias": (8,),
                      "bn1_gamma": (8,), "bn1_beta": (8,), "act1_gamma": (8,),
                      "up1_weight": (8, 6, 4, 4)}  # Deconvolution: no bias by default
    assert dict(zip(net.list_auxiliary_states(), aux)) == {
        "bn1_moving_mean": (8,), "bn1_moving_var": (8,)}
    # conv 9 -> 5, deconv 5 -> 10, full pooling ceil((10 - 3) / 2) + 1 = 5
    assert outs == [(2, 6, 5, 5)]


def test_embedding_infers_weight_and_dtype():
    net = sg.sym.Embedding(data=sg.sym.Variable("idx"), input_dim=10, output_dim=4,
                           dtype="float16", name="emb")
    args, outs, _ = net.infer_shape(idx=(3, 5))
    assert args == [(3, 5), (10, 4)] and outs == [(3, 5, 4)]
    arg_types, out_types, _ = net.infer_type(idx="float32")
    assert arg_types == [np.float32, np.float16] and out_types == [np.float16]


def test_batchnorm_output_mean_var_makes_three_outputs_visible():
    x = sg.sym.Variable("x")
    assert len(sg.sym.BatchNorm(x, name="bn").list_outputs()) == 1
    assert sg.sym.BatchNorm(x, output_mean_var=True, name="bn").list_outputs() == [
        "bn_output", "bn_mean", "bn_var"]


# --------------------------------------------------------------------------
# errors name the node, the op and what was expected
# --------------------------------------------------------------------------
@pytest.mark.parametrize("opname,attrs,shape,match", [
    ("Convolution", {"kernel": (5, 5), "num_filter": 2}, (1, 3, 4, 4),
     r"kernel \(5, 5\) \(dilated size 5\) is larger than the padded input \(4\)"),
    ("Convolution", {"kernel": (3, 3), "dilate": (2, 2), "num_filter": 2}, (1, 3, 4, 6),
     r"dilated size 5\) is larger than the padded input \(4\)"),
    ("Convolution", {"kernel": (3, 3), "num_filter": 4, "num_group": 2}, (1, 3, 5, 5),
     r"num_group=2 must divide both the input channels \(3\)"),
    ("Convolution", {"kernel": (3, 3), "num_filter": 3, "num_group": 2}, (1, 4, 5, 5),
     r"num_filter \(3\)"),
    ("Convolution", {"kernel": (3, 3), "num_filter": 2, "stride": (2,)}, (1, 3, 5, 5),
     r"stride=\(2,\) has 1 entries, but the kernel \(3, 3\) has 2"),
    ("Convolution", {"kernel": (3, 3), "num_filter": 2, "layout": "NCW"}, (1, 3, 5, 5),
     r"layout=NCW does not fit a 2-D kernel"),
    ("Convolution", {"kernel": (3, 3), "num_filter": 2}, (1, 3, 5),
     r"must be 4-D \(NCHW\)"),
    ("Deconvolution", {"kernel": (3, 3), "num_filter": 2, "stride": (2, 2),
                       "target_shape": (10, 10)}, (1, 3, 4, 4),
     r"target_shape=\(10, 10\) is larger than the largest output \(9, 9\)"),
    ("Deconvolution", {"kernel": (2, 2), "num_filter": 2, "pad": (2, 2)}, (1, 3, 2, 2),
     r"empty output"),
    ("Pooling", {"kernel": (4, 4)}, (1, 2, 3, 6),
     r"kernel \(4, 4\) is larger than the padded input \(3\) along spatial axis 0"),
    ("Pooling", {"pool_type": "avg"}, (1, 2, 3, 3), r"kernel is required"),
    ("LRN", {"nsize": 3}, (4, 5), r"LRN needs an input with channels and spatial axes"),
])
def test_shape_errors_name_node_and_expectation(opname, attrs, shape, match):
    g, node = op_graph(opname, attrs, name="layer7")
    with pytest.raises(ShapeError, match=match) as info:
        infer_shapes(g, {"data": shape})
    assert f"node 'layer7' ({opname})" in str(info.value)


@pytest.mark.parametrize("opname,attrs,match", [
    ("LRN", {"nsize": 4}, r"odd positive window size"),
    ("Dropout", {"p": 1.0}, r"probability in \[0, 1\)"),
    ("Pooling", {"kernel": (2, 2), "pool_type": "lp"}, r"expected one of max, avg, sum"),
    ("LeakyReLU", {"act_type": "rrelu"}, r"expected one of leaky, elu, prelu, selu, gelu"),
    # NHWC is a layout now (passes/layout.py); a made-up one is refused
    ("Convolution", {"kernel": (3, 3), "num_filter": 2, "layout": "NHCW"},
     r"layout='NHCW': expected None, NCW, NCHW, NCDHW or NWC, NHWC, NDHWC"),
])
def test_bad_attributes_raise_op_error(opname, attrs, match):
    with pytest.raises(OpError, match=match) as info:
        getattr(sg.sym, opname)(sg.sym.Variable("data"), name="layer3", **attrs)
    assert "layer3" in str(info.value)


def test_mxnet_kernel_hints_are_accepted():
    net = sg.sym.Convolution(sg.sym.Variable("data"), kernel=(1, 1), num_filter=2,
                             workspace="1024", cudnn_tune="off", cudnn_off="True", name="c")
    assert net.infer_shape(data=(1, 3, 2, 2))[1] == [(1, 2, 2, 2)]


# --------------------------------------------------------------------------
# Pooling: the max backward finds each window's first max in x, reads x, dy only
# --------------------------------------------------------------------------
MAX_POOLS = [{"kernel": (3, 3), "stride": (2, 2), "pad": (1, 1)},
             {"kernel": (2, 3), "stride": (1, 2), "pooling_convention": "full"},
             {"kernel": (3,), "stride": (2,)},
             {"global_pool": True}]


@pytest.mark.parametrize("attrs", MAX_POOLS)
def test_max_pool_backward_reads_input_and_ograd_only(attrs):
    # not the output: comparing a recomputed input with the saved max lost
    # windows' gradients inside one fused program (issue 11)
    g, node = op_graph("Pooling", attrs)
    gg = build_gradient(g, ["data"])
    bwd = backward_node(gg, "_backward_Pooling")
    assert read_names(bwd) == ["op_output_head_grad", "data"]
    shape = (1, 2, 7) if len(attrs.get("kernel", (0, 0))) == 1 else (1, 2, 6, 7)
    out_shape = infer_shapes(g, {"data": shape}).shape(g.outputs[0])
    text = jaxpr_text(gg, {"data": jnp.ones(shape), "op_output_head_grad": jnp.ones(out_shape)})
    # no index tensors and no scatter: the default JAX max-pool vjp would show
    # these; a global pool has one window, its argmax one index per (n, c)
    for prim in ("scatter", "select_and_scatter", "select_and_gather", "argmax"):
        if prim != "argmax" or not attrs.get("global_pool"):
            assert prim not in text


@pytest.mark.parametrize("attrs", MAX_POOLS)
def test_max_pool_ties_route_to_first_max_like_mxnet(attrs):
    rng = np.random.default_rng(3)
    shape = (2, 2, 7) if len(attrs.get("kernel", (0, 0))) == 1 else (2, 2, 6, 7)
    x = rng.integers(0, 3, size=shape).astype(np.float64)  # many ties
    g, node = op_graph("Pooling", attrs)
    gg = build_gradient(g, ["data"])
    y_shape = infer_shapes(g, {"data": shape}).shape(g.outputs[0])
    dy = rng.normal(size=y_shape)
    (y, dx), _ = run(gg, {"data": x, "op_output_head_grad": dy}, is_train=True)
    np.testing.assert_allclose(np.asarray(y), pooling(node.params, x))
    want = max_pool_grad(node.params, x, dy)
    np.testing.assert_allclose(np.asarray(dx), want, rtol=1e-12, atol=1e-12)
    # each window's gradient went to exactly one position
    np.testing.assert_allclose(np.asarray(dx).sum(), dy.sum())


@pytest.mark.parametrize("attrs,reads", [
    ({"kernel": (3, 3), "pad": (1, 1), "pool_type": "avg"}, ["op_output_head_grad"]),
    ({"kernel": (2, 2), "pool_type": "sum", "pooling_convention": "full"},
     ["op_output_head_grad"]),
    ({"kernel": (2, 2), "stride": (2, 2), "pool_type": "avg"}, ["op_output_head_grad", "data"]),
    ({"global_pool": True, "pool_type": "avg"}, ["op_output_head_grad", "data"]),
])
def test_avg_and_sum_pool_backward_reads_input_only_for_its_shape(attrs, reads):
    g, _ = op_graph("Pooling", attrs)
    gg = build_gradient(g, ["data"])
    assert read_names(backward_node(gg, "_backward_Pooling")) == reads
    data = (2, 3, 5, 6)
    out = infer_shapes(g, {"data": data}).shape(g.outputs[0])
    inf = infer_shapes(gg, {"data": data, "op_output_head_grad": out})
    assert inf.shape(gg.outputs[1]) == data


def test_avg_pool_count_include_pad():
    x = np.arange(16, dtype=np.float64).reshape(1, 1, 4, 4)
    attrs = {"kernel": (3, 3), "stride": (3, 3), "pad": (1, 1), "pool_type": "avg"}
    g, _ = op_graph("Pooling", attrs)
    (with_pad,), _ = run(g, {"data": x})
    g, _ = op_graph("Pooling", {**attrs, "count_include_pad": False})
    (without,), _ = run(g, {"data": x})
    # the top-left window covers x[0:2, 0:2] (sum 10) and 5 padding cells
    assert np.asarray(with_pad)[0, 0, 0, 0] == pytest.approx(10 / 9)
    assert np.asarray(without)[0, 0, 0, 0] == pytest.approx(10 / 4)


# --------------------------------------------------------------------------
# BatchNorm
# --------------------------------------------------------------------------
def _bn_feeds(shape, c, rng):
    return {"data": rng.normal(size=shape) * 2 + 1, "gamma": rng.uniform(0.5, 1.5, c),
            "beta": rng.normal(size=c), "moving_mean": rng.normal(size=c),
            "moving_var": rng.uniform(0.5, 2.0, c)}


@pytest.mark.parametrize("attrs", [{"fix_gamma": False, "output_mean_var": True},
                                   {"output_mean_var": True, "axis": -1, "momentum": 0.7}])
def test_batchnorm_training_uses_batch_stats_and_updates_moving_stats(attrs):
    rng = np.random.default_rng(0)
    g, node = op_graph("BatchNorm", attrs)
    shape = (5, 3, 2, 4)
    c = shape[node.params.axis]
    feeds = _bn_feeds(shape, c, rng)
    outs, aux = run(g, feeds, is_train=True)
    want = batchnorm_train(node.params, *[feeds[k] for k in
                                          ("data", "gamma", "beta", "moving_mean", "moving_var")])
    for got, w in zip(outs, want[:3]):  # output, batch mean, inverse std
        np.testing.assert_allclose(np.asarray(got), w, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.asarray(aux["moving_mean"]), want[3], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(aux["moving_var"]), want[4], rtol=1e-12)
    # inference leaves the moving stats alone
    _, aux = run(g, feeds, is_train=False)
    assert aux == {}


def test_batchnorm_use_global_stats_does_not_update_in_training():
    rng = np.random.default_rng(1)
    g, _ = op_graph("BatchNorm", {"use_global_stats": True})
    feeds = _bn_feeds((4, 3, 2), 3, rng)
    (y,), aux = run(g, feeds, is_train=True)
    (y_inf,), _ = run(g, feeds, is_train=False)
    assert aux == {}
    np.testing.assert_allclose(np.asarray(y), np.asarray(y_inf))


@pytest.mark.parametrize("fix_gamma", [True, False])
def test_batchnorm_backward_reads_data_gamma_and_saved_stats(fix_gamma):
    rng = np.random.default_rng(2)
    g, node = op_graph("BatchNorm", {"fix_gamma": fix_gamma})
    gg = build_gradient(g, ["data", "gamma", "beta"])
    bwd = backward_node(gg, "_backward_BatchNorm")
    # the saved mean and inverse std, not the normalised output
    assert read_names(bwd) == ["op_output_head_grad", "data", "gamma", "op:1", "op:2"]
    feeds = _bn_feeds((4, 3, 2), 3, rng)
    feeds["op_output_head_grad"] = rng.normal(size=(4, 3, 2))
    outs, _ = run(gg, feeds, is_train=True)
    dgamma = np.asarray(outs[2])
    if fix_gamma:
        assert np.all(dgamma == 0)
    else:
        x, dy = feeds["data"], feeds["op_output_head_grad"]
        xh = (x - x.mean((0, 2), keepdims=True)) / np.sqrt(x.var((0, 2), keepdims=True) + 1e-3)
        np.testing.assert_allclose(dgamma, (dy * xh).sum((0, 2)), rtol=1e-10)
    np.testing.assert_allclose(np.asarray(outs[3]), feeds["op_output_head_grad"].sum((0, 2)))


def test_batchnorm_moving_stats_update_through_the_executor():
    net = sg.sym.BatchNorm(sg.sym.Variable("data"), fix_gamma=False, momentum=0.5, name="bn")
    ex = net.simple_bind(data=(8, 2))
    x = np.random.default_rng(4).normal(size=(8, 2)) + 3
    ex.arg_dict["data"][:] = x
    ex.arg_dict["bn_gamma"][:] = np.ones(2)
    ex.aux_dict["bn_moving_var"][:] = np.ones(2)
    ex.forward(is_train=True)
    ex.backward(np.ones((8, 2)))
    np.testing.assert_allclose(ex.aux_dict["bn_moving_mean"].asnumpy(), 0.5 * x.mean(0),
                               rtol=1e-5)
    np.testing.assert_allclose(ex.aux_dict["bn_moving_var"].asnumpy(), 0.5 + 0.5 * x.var(0),
                               rtol=1e-5)
    # dy = 1 everywhere: the batch-stat gradient of x vanishes
    np.testing.assert_allclose(ex.grad_dict["data"].asnumpy(), 0, atol=1e-5)


# --------------------------------------------------------------------------
# Dropout
# --------------------------------------------------------------------------
@pytest.mark.parametrize("p", [0.3, 0.5])
def test_dropout_statistics_scaling_and_gradient(p):
    g, _ = op_graph("Dropout", {"p": p})
    gg = build_gradient(g, ["data"])
    assert read_names(backward_node(gg, "_backward_Dropout")) == ["op_output_head_grad", "op:1"]
    rng = np.random.default_rng(5)
    x = rng.uniform(0.5, 1.5, size=(200, 500))  # never 0, so y == 0 means dropped
    dy = rng.normal(size=x.shape)
    (y, dx), _ = run(gg, {"data": x, "op_output_head_grad": dy}, is_train=True, key=7)
    y, dx = np.asarray(y), np.asarray(dx)
    keep = y != 0
    # 100k Bernoulli draws: the standard error of the fraction is < 0.0016
    assert abs((1 - keep.mean()) - p) < 0.01
    np.testing.assert_allclose(y[keep], x[keep] / (1 - p), rtol=1e-12)
    np.testing.assert_allclose(dx, keep * dy / (1 - p), rtol=1e-12)
    # another key, another mask
    (y2, _), _ = run(gg, {"data": x, "op_output_head_grad": dy}, is_train=True, key=8)
    assert not np.array_equal(np.asarray(y2) != 0, keep)


def test_dropout_is_identity_outside_training_unless_mode_always():
    x = np.random.default_rng(6).uniform(0.5, 1.5, size=(50, 40))
    g, _ = op_graph("Dropout", {"p": 0.5})
    (y,), _ = run(g, {"data": x}, is_train=False)
    np.testing.assert_array_equal(np.asarray(y), x)
    g, _ = op_graph("Dropout", {"p": 0.5, "mode": "always"})
    (y,), _ = run(g, {"data": x}, is_train=False)
    assert 0.4 < (np.asarray(y) == 0).mean() < 0.6


def test_dropout_axes_share_one_mask_value():
    x = np.ones((6, 50, 4))
    g, _ = op_graph("Dropout", {"p": 0.5, "axes": (0, 2)})
    (y,), _ = run(g, {"data": x}, is_train=True)
    y = np.asarray(y)
    # the mask varies along axis 1 only
    assert np.all(y == y[:1, :, :1])
    assert 0 < (y[0, :, 0] == 0).sum() < 50


# --------------------------------------------------------------------------
# LRN, LeakyReLU, Embedding: what the backward reads
# --------------------------------------------------------------------------
def test_lrn_backward_reads_data_and_tmp_norm():
    g, _ = op_graph("LRN", {"nsize": 3})
    gg = build_gradient(g, ["data"])
    assert read_names(backward_node(gg, "_backward_LRN")) == ["op_output_head_grad", "data",
                                                              "op:1"]


@pytest.mark.parametrize("attrs,reads", [
    ({}, "op:0"), ({"act_type": "elu", "slope": 1.0}, "op:0"), ({"act_type": "selu"}, "op:0"),
    ({"slope": -0.2}, "data"), ({"act_type": "gelu"}, "data")])
def test_leaky_relu_backward_reads_output_where_it_can(attrs, reads):
    g, _ = op_graph("LeakyReLU", attrs)
    gg = build_gradient(g, ["data"])
    assert read_names(backward_node(gg, "_backward_LeakyReLU")) == ["op_output_head_grad",
                                                                    reads]


def test_prelu_gradient_of_gamma_only():
    rng = np.random.default_rng(8)
    g, _ = op_graph("LeakyReLU", {"act_type": "prelu"})
    gg = build_gradient(g, ["gamma"])
    bwd = backward_node(gg, "_backward_LeakyReLU")
    assert bwd.num_outputs == 1  # the data gradient is not computed
    x, gamma, dy = rng.normal(size=(3, 4, 5)), rng.uniform(size=4), rng.normal(size=(3, 4, 5))
    outs, _ = run(gg, {"data": x, "gamma": gamma, "op_output_head_grad": dy}, is_train=True)
    np.testing.assert_allclose(np.asarray(outs[1]), np.where(x > 0, 0, dy * x).sum((0, 2)))


def test_embedding_gradient_is_scatter_add_and_indices_get_none():
    rng = np.random.default_rng(9)
    attrs = {"input_dim": 5, "output_dim": 3}
    g, node = op_graph("Embedding", attrs)
    gg = build_gradient(g, ["data", "weight"])
    assert read_names(backward_node(gg, "_backward_Embedding")) == ["op_output_head_grad",
                                                                    "data"]
    idx = np.array([[0, 4, 4], [2, 0, 4]], dtype=np.float64)  # repeated rows add up
    w, dy = rng.normal(size=(5, 3)), rng.normal(size=(2, 3, 3))
    (y, dd, dw), _ = run(gg, {"data": idx, "weight": w, "op_output_head_grad": dy},
                         is_train=True)
    np.testing.assert_allclose(np.asarray(y), w[idx.astype(int)])
    np.testing.assert_allclose(np.asarray(dw), embedding_weight_grad(node.params, idx, dy))
    assert np.all(np.asarray(dd) == 0)


# --------------------------------------------------------------------------
# geometry properties (hypothesis): inferred shape == lowered shape == MXNet's formula
# --------------------------------------------------------------------------
def _lowered_shape(node, shapes, is_train=False):
    ctx = LowerCtx(is_train, jax.random.key(0), node.name)
    args = [jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes]
    out = jax.eval_shape(lambda *xs: node.op.lower(node.params, ctx, *xs), *args)
    return tuple((out[0] if isinstance(out, tuple) else out).shape)


@st.composite
def conv_case(draw):
    n = draw(st.integers(1, 2))
    k = tuple(draw(st.integers(1, 3)) for _ in range(n))
    s = tuple(draw(st.integers(1, 3)) for _ in range(n))
    pad = tuple(draw(st.integers(0, 2)) for _ in range(n))
    d = tuple(draw(st.integers(1, 2)) for _ in range(n))
    size = tuple(max(1, d[i] * (k[i] - 1) + 1 - 2 * pad[i]) + draw(st.integers(0, 4))
                 for i in range(n))
    groups = draw(st.sampled_from([1, 2]))
    return n, k, s, pad, d, size, groups


@settings(max_examples=25, deadline=None)
@given(conv_case(), st.booleans())
def test_convolution_and_deconvolution_geometry(case, no_bias):
    n, k, s, pad, d, size, groups = case
    attrs = {"kernel": k, "stride": s, "pad": pad, "dilate": d, "num_filter": 2 * groups,
             "num_group": groups, "no_bias": no_bias}
    data = (1, 2 * groups) + size
    g, node = op_graph("Convolution", attrs)
    inf = infer_shapes(g, {"data": data})
    out = inf.shape(g.outputs[0])
    want = tuple((size[i] + 2 * pad[i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(n))
    assert out == (1, 2 * groups) + want
    shapes = [inf.shape(e) for e in node.inputs]
    assert _lowered_shape(node, shapes) == out
    # deconvolution of the conv output, with adj < stride, maps back to a size
    # that the conv formula sends to the same output
    adj = tuple(min(a, st_ - 1) for a, st_ in zip(pad, s))
    g2, node2 = op_graph("Deconvolution", {**attrs, "adj": adj})
    expect = tuple((want[i] - 1) * s[i] - 2 * pad[i] + d[i] * (k[i] - 1) + 1 + adj[i]
                   for i in range(n))
    if min(expect) < 1:  # the padding crops everything away
        with pytest.raises(ShapeError, match="empty output"):
            infer_shapes(g2, {"data": out})
        return
    inf2 = infer_shapes(g2, {"data": out})
    back = inf2.shape(g2.outputs[0])
    assert back[2:] == expect
    assert _lowered_shape(node2, [inf2.shape(e) for e in node2.inputs]) == back


@st.composite
def pool_case(draw):
    n = draw(st.integers(1, 2))
    k = tuple(draw(st.integers(1, 3)) for _ in range(n))
    s = tuple(draw(st.integers(1, 3)) for _ in range(n))
    pad = tuple(draw(st.integers(0, k[i] - 1)) for i in range(n))
    size = tuple(max(1, k[i] - 2 * pad[i]) + draw(st.integers(0, 4)) for i in range(n))
    return n, k, s, pad, size


@settings(max_examples=25, deadline=None)
@given(pool_case(), st.sampled_from(["valid", "full"]), st.sampled_from(["max", "avg", "sum"]))
def test_pooling_geometry(case, convention, pool_type):
    n, k, s, pad, size = case
    attrs = {"kernel": k, "stride": s, "pad": pad, "pooling_convention": convention,
             "pool_type": pool_type}
    g, node = op_graph("Pooling", attrs)
    data = (1, 2) + size
    out = infer_shapes(g, {"data": data}).shape(g.outputs[0])
    want = []
    for i in range(n):
        span = size[i] + 2 * pad[i] - k[i]
        # MXNet: full = 1 + ceil(span / stride), valid = 1 + floor(span / stride)
        want.append(1 + (-(-span // s[i]) if convention == "full" else span // s[i]))
        assert want[-1] == pool_output_size(size[i], k[i], s[i], pad[i], convention)
    assert out == (1, 2) + tuple(want)
    assert _lowered_shape(node, [data]) == out
    # the backward's inferred input shape matches, whatever it reads
    gg = build_gradient(g, ["data"])
    inf = infer_shapes(gg, {"data": data, "op_output_head_grad": out})
    assert inf.shape(gg.outputs[1]) == data


@settings(max_examples=10, deadline=None)
@given(pool_case(), st.sampled_from(["valid", "full"]))
def test_max_pool_backward_matches_mxnet_first_max(case, convention):
    n, k, s, pad, size = case
    attrs = {"kernel": k, "stride": s, "pad": pad, "pooling_convention": convention}
    g, node = op_graph("Pooling", attrs)
    gg = build_gradient(g, ["data"])
    rng = np.random.default_rng(sum(size) + 7 * sum(k))
    x = rng.integers(0, 2, size=(1, 2) + size).astype(np.float64)
    out = infer_shapes(g, {"data": x.shape}).shape(g.outputs[0])
    dy = rng.normal(size=out)
    (_, dx), _ = run(gg, {"data": x, "op_output_head_grad": dy}, is_train=True)
    np.testing.assert_allclose(np.asarray(dx), max_pool_grad(node.params, x, dy), atol=1e-12)
