"""Recompute to a memory budget: the graph rewrite, budgets, the algorithms.

The rewrite is checked by lowering: the rewritten training graph gives the
same outputs and gradients as the original (float64), and the backward no
longer reads the recomputed forward tensors.
"""
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import symgraph as sg
from symgraph.errors import PlanError
from symgraph.graph import Graph
from symgraph.lower import lower
from symgraph.bench.randnet import random_net
from symgraph.passes.gradient import build_gradient_with_heads
from symgraph.passes.infer import infer_shapes
from symgraph.passes.recompute import RECOMPUTE_ATTR, forward_nodes, is_recompute, rewrite

S = sg.sym
PROPS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def training_graph(net, shapes):
    """(full training graph, number of forward outputs, feeds in float64)."""
    g = Graph(net.outputs)
    wrt = [a for a in g.list_arguments() if not a.endswith("label")]
    full, heads = build_gradient_with_heads(g, wrt)
    fwd = infer_shapes(g, shapes)
    known = dict(shapes)
    for name, i in heads:
        known[name] = fwd.shape(g.outputs[i])
    inf = infer_shapes(full, known)
    rng = np.random.default_rng(0)
    feeds = {}
    for n in full.variables:
        shape = inf.shapes[full.entry_id_of_node(n)]
        feeds[n.name] = rng.uniform(-1, 1, size=shape).astype(np.float64)
    return full, len(g.outputs), feeds


def run(graph, feeds):
    import jax
    outs, _ = lower(graph, True)(feeds, jax.random.key(0))
    return [np.asarray(o) for o in outs]


def backward_reads(graph, n_fwd):
    """Names of the forward nodes whose outputs backward nodes read."""
    fwd = {id(n) for n in forward_nodes(graph, n_fwd)}
    return {e.node.name for n in graph.nodes
            if n.op is not None and id(n) not in fwd and not is_recompute(n)
            for e in n.inputs if id(e.node) in fwd}


def mlp():
    x = S.Variable("data")
    h = S.FullyConnected(x, num_hidden=6, name="fc1")
    h = S.Activation(h, act_type="relu", name="r1")
    h = S.FullyConnected(h, num_hidden=6, name="fc2")
    h = S.Activation(h, act_type="tanh", name="r2")
    return S.LinearRegressionOutput(h, name="loss"), {"data": (3, 5), "loss_label": (3, 6)}


# -- the rewrite ------------------------------------------------------------------
def test_rewrite_clones_and_keeps_results():
    net, shapes = mlp()
    full, n_fwd, feeds = training_graph(net, shapes)
    r = rewrite(full, n_fwd, ["r1", "fc2", "r2"])
    assert r.list_outputs() == full.list_outputs()
    clones = {n.name: n for n in r.nodes if is_recompute(n)}
    assert set(clones) == {"r1_recompute", "fc2_recompute", "r2_recompute"}
    assert clones["fc2_recompute"].attrs[RECOMPUTE_ATTR] == "fc2"
    # a clone reads the clone of a recomputed input, the original otherwise
    assert clones["fc2_recompute"].inputs[0].node is clones["r1_recompute"]
    assert clones["r1_recompute"].inputs[0].node.name == "fc1"
    # the backward reads none of the recomputed tensors; it still reads fc1's
    # input data (not recomputed) and the loss output
    assert backward_reads(r, n_fwd).isdisjoint({"r1", "fc2", "r2"})
    assert "r1" in backward_reads(full, n_fwd)
    for a, b in zip(run(full, feeds), run(r, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    # the input graph is unchanged (the pass is pure)
    assert not any(is_recompute(n) for n in full.nodes)


def test_rewrite_refuses_names_that_are_no_forward_op():
    net, shapes = mlp()
    full, n_fwd, _ = training_graph(net, shapes)
    for name, what in [("nope", "no node"), ("data", "a variable"),
                       ("r1_backward", "backward")]:
        with pytest.raises(PlanError, match=what) as info:
            rewrite(full, n_fwd, [name])
        assert "\n" not in str(info.value)
    assert rewrite(full, n_fwd, []) is full


def test_rewrite_batchnorm_reads_the_same_aux_states():
    x = S.Variable("data")
    h = S.Convolution(x, kernel=(3, 3), num_filter=4, pad=(1, 1), name="conv")
    h = S.BatchNorm(h, name="bn")
    h = S.Activation(h, act_type="relu", name="relu")
    net = S.LinearRegressionOutput(S.Flatten(h), name="loss")
    shapes = {"data": (2, 3, 5, 5), "loss_label": (2, 100)}
    full, n_fwd, feeds = training_graph(net, shapes)
    r = rewrite(full, n_fwd, ["bn", "relu"])
    bn, clone = [n for n in r.nodes if n.name in ("bn", "bn_recompute")]
    assert [e.node for e in clone.inputs[1:]] == [e.node for e in bn.inputs[1:]]
    assert backward_reads(r, n_fwd).isdisjoint({"bn", "relu"})
    for a, b in zip(run(full, feeds), run(r, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@PROPS
@given(rnd=st.randoms(use_true_random=False), n=st.integers(1, 25), frac=st.floats(0, 1))
def test_rewrite_keeps_outputs_and_gradients_on_random_nets(rnd, n, frac):
    net, shapes = random_net(rnd, n, loss=rnd.random() < 0.5, dropout=False)
    full, n_fwd, feeds = training_graph(net, shapes)
    fwd = forward_nodes(full, n_fwd)
    names = [x.name for x in fwd if rnd.random() < frac]
    r = rewrite(full, n_fwd, names)
    assert r.list_outputs() == full.list_outputs()
    assert backward_reads(r, n_fwd).isdisjoint(names)
    for a, b in zip(run(full, feeds), run(r, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
