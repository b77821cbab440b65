"""The passes before planning: prune, fuse, schedule."""
import random

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import symgraph as sg
from symgraph.errors import GraphError, PlanError
from symgraph.graph import Graph
from symgraph.lower import lower
from symgraph.bench.randnet import chain_net, random_net
from symgraph.memory.verify import random_feeds
from symgraph.passes.fuse import FUSABLE, fuse, no_fusion
from symgraph.passes.gradient import build_gradient
from symgraph.passes.prune import prune
from symgraph.passes.schedule import dfs_schedule, memory_schedule, schedule

PROPS = settings(max_examples=30, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow])


def _feeds(graph, shapes, seed=0):
    rng = np.random.default_rng(seed)
    from symgraph.passes.infer import infer_shapes
    inf = infer_shapes(graph, shapes)
    return {n.name: rng.uniform(-1, 1, inf.shapes[graph.entry_id_of_node(n)]).astype(np.float32)
            for n in graph.variables}


def _run(graph, feeds):
    return [np.asarray(v) for v in lower(graph, False)(feeds, None)[0]]


# -- prune ---------------------------------------------------------------------
@PROPS
@given(rnd=st.randoms(use_true_random=False), n=st.integers(2, 30), data=st.data())
def test_prune_keeps_requested_outputs_bit_for_bit(rnd, n, data):
    net, shapes = random_net(rnd, n, extra_outputs=0.3)
    g = Graph(net.outputs)
    internals = [nm for nm in net.get_internals().list_outputs() if "_output" in nm]
    want = data.draw(st.lists(st.sampled_from(internals), min_size=1, max_size=3, unique=True))
    pg = prune(g, want)
    assert pg.list_outputs() == want
    # the reference: the whole graph, with the wanted entries as extra outputs
    full = Graph([prune(g, [nm]).outputs[0] for nm in want] + list(g.outputs))
    feeds = _feeds(full, shapes)
    ref = _run(full, feeds)[:len(want)]
    got = _run(pg, {k: v for k, v in feeds.items() if k in pg.list_arguments()})
    for a, b in zip(got, ref):
        np.testing.assert_array_equal(a, b)
    # nothing is kept that the outputs do not need
    assert len(pg.nodes) <= len(full.nodes)
    needed = {id(nd) for nd in Graph(pg.outputs).nodes}
    assert all(id(nd) in needed for nd in pg.nodes)


def test_prune_to_an_internal_output_drops_later_layers():
    net = sg.models.get_model("mlp")
    g = Graph(net.outputs)
    pg = prune(g, ["relu1_output"])
    names = {nd.name for nd in pg.nodes}
    assert {"fc1", "relu1"} <= names
    assert not names & {"fc2", "relu2", "fc3", "softmax"}
    assert "fc2_weight" not in pg.list_arguments()
    # and so does a plan of it
    p = sg.plan(net, {"data": (4, 784)}, outputs=["relu1_output"])
    assert {nd.name for nd in p.graph.nodes if nd.op is not None} == {"flatten0", "fc1", "relu1"}
    full = sg.plan(net, {"data": (4, 784)})
    assert p.internal["naive"] < full.internal["naive"]


def test_prune_inference_drops_the_backward_graph():
    net = sg.models.get_model("mlp")
    g = Graph(net.outputs)
    gg = build_gradient(g, ["fc1_weight", "fc2_weight"])
    fwd = prune(gg, range(len(g.outputs)))
    assert not any(nd.op is not None and nd.op.name.startswith("_backward_")
                   for nd in fwd.nodes)
    assert len(fwd.nodes) == len(g.nodes)


def test_data_gradient_is_never_built():
    d = sg.sym.Variable("data")
    c = sg.sym.Convolution(d, kernel=(3, 3), num_filter=4, name="conv1")
    r = sg.sym.Activation(c, act_type="relu", name="relu1")
    f = sg.sym.FullyConnected(r, num_hidden=3, name="fc")
    net = sg.sym.SoftmaxOutput(f, name="softmax")
    p = sg.plan(net, {"data": (2, 1, 6, 6)}, train=True)
    names = [nm for nd in p.graph.nodes for nm in nd.output_names()]
    assert "conv1_backward_grad_weight" in names
    assert "conv1_backward_grad_data" not in names
    # gradients nobody asked for are not built either
    p2 = sg.plan(net, {"data": (2, 1, 6, 6)}, train=True, wrt=["fc_weight"])
    ops = {nd.name for nd in p2.graph.nodes if nd.op is not None}
    assert "conv1_backward" not in ops and "relu1_backward" not in ops
    assert p2.buckets["gradients"] < p.buckets["gradients"]


def test_prune_bad_request():
    g = Graph(sg.models.get_model("mlp").outputs)
    with pytest.raises(GraphError, match="no output named 'nope'"):
        prune(g, ["nope"])
    with pytest.raises(GraphError, match="out of range"):
        prune(g, [5])
    with pytest.raises(GraphError, match="no output requested"):
        prune(g, [])


# -- fuse ----------------------------------------------------------------------
def _check_groups(g, fusion):
    nodes = g.nodes
    readers = [set() for _ in nodes]
    nid_of = {id(nd): i for i, nd in enumerate(nodes)}
    for i, nd in enumerate(nodes):
        for e in nd.inputs:
            readers[nid_of[id(e.node)]].add(i)
    outs = {nid_of[id(e.node)] for e in g.outputs}
    for grp in fusion.groups:
        root = grp[-1]
        members = set(grp)
        assert list(grp) == sorted(grp)
        assert all(fusion.root[m] == root for m in grp)
        opaque = [m for m in grp if nodes[m].op.category not in FUSABLE]
        assert len(opaque) <= 1  # one heavy op per kernel
        for m in grp[:-1]:
            # inner members: one output, read only inside the group, no graph output
            assert nodes[m].num_outputs == 1 and m not in outs
            assert readers[m] <= members
            assert not nodes[m].op.is_loss
        assert nodes[root].op.category in FUSABLE


@PROPS
@given(rnd=st.randoms(use_true_random=False), n=st.integers(1, 30), train=st.booleans())
def test_fusion_groups_are_well_formed_and_keep_results(rnd, n, train):
    net, shapes = random_net(rnd, n)
    g = Graph(net.outputs)
    wrt = [a for a in g.list_arguments()]
    plan_kw = dict(train=True, wrt=wrt) if train else {}
    p = sg.plan(net, shapes, **plan_kw)
    _check_groups(p.graph, p.fusion)
    # tensors inside a group have no storage
    inner = p.fusion.internal_entries()
    assert not inner & set(p.live.entry)
    # the fused plan, run op by op in its arena, gives the unfused lowering's outputs
    from symgraph.memory.verify import ArenaInterpreter
    a = p.assignment("arena")
    feeds = random_feeds(p.live, seed=1)
    key = jax.random.key(0)  # Dropout draws the same mask in both runs
    got = ArenaInterpreter(p.live, a.offset, a.total, train, key).run(feeds)
    unfused = sg.plan(net, shapes, fuse=False, **plan_kw)
    ref, _ = lower(unfused.graph, train)(feeds, key)
    for x, y in zip(got, ref):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-6)
    assert p.internal["naive"] <= unfused.internal["naive"]


def test_conv_bias_relu_fuse_into_one_step():
    d = sg.sym.Variable("data")
    c = sg.sym.FullyConnected(d, num_hidden=4, name="fc")
    a = sg.sym.Activation(c, act_type="relu", name="relu")
    s = sg.sym.sum(a, axis=1, name="red")
    g = Graph(s.outputs)
    f = fuse(g)
    names = [[g.nodes[m].name for m in grp] for grp in f.groups]
    assert names == [["fc", "relu"]]  # the reduction stays out
    assert no_fusion(g).groups == ()
    p = sg.plan(s, {"data": (2, 3)})
    assert [p.live.tensor_name(t) for t in range(p.live.num_tensors)] == \
        ["relu_output", "red_output"]


# -- schedule ------------------------------------------------------------------
def _is_topological(g, steps):
    seen = set()
    nid_of = {id(nd): i for i, nd in enumerate(g.nodes)}
    for members in steps:
        group = set(members)
        for m in members:
            for e in g.nodes[m].inputs:
                p = nid_of[id(e.node)]
                if g.nodes[p].op is not None and p not in group:
                    assert p in seen
        seen |= group
    return sorted(seen) == [i for i, nd in enumerate(g.nodes) if nd.op is not None]


@PROPS
@given(rnd=st.randoms(use_true_random=False), n=st.integers(1, 40))
def test_schedules_are_topological_and_deterministic(rnd, n):
    net, shapes = random_net(rnd, n)
    g = Graph(net.outputs)
    f = fuse(g)
    nb = {}
    from symgraph.memory.liveness import entry_nbytes
    from symgraph.passes.infer import infer_shapes
    inf = infer_shapes(g, shapes)

    def nbytes(eid):
        return nb.setdefault(eid, entry_nbytes(inf, eid))
    dfs = dfs_schedule(g, f)
    mem = memory_schedule(g, f, nbytes)
    assert _is_topological(g, dfs) and _is_topological(g, mem)
    assert sorted(dfs) == sorted(mem)
    assert memory_schedule(g, f, nbytes) == mem
    assert schedule(g, f, "dfs") == dfs


def test_memory_schedule_on_a_chain_is_the_dfs_order():
    net, shapes = chain_net(30)
    p1 = sg.plan(net, shapes, schedule="dfs")
    p2 = sg.plan(net, shapes, schedule="memory")
    assert p1.steps == p2.steps


def test_memory_schedule_runs_the_freeing_branch_first():
    # outputs (big, shrunk): DFS makes the big output first and keeps it while
    # the other branch runs; the memory order runs the branch that frees first
    d = sg.sym.Variable("data")
    big = sg.sym.FullyConnected(d, num_hidden=256, name="big")
    h = sg.sym.FullyConnected(d, num_hidden=64, name="h")
    shrunk = sg.sym.sum(h, axis=1, name="shrink")
    net = sg.sym.Group([big, shrunk])
    shapes = {"data": (8, 4)}
    dfs = sg.plan(net, shapes, schedule="dfs", fuse=False)
    mem = sg.plan(net, shapes, schedule="memory", fuse=False)
    assert [dfs.live.step_name(s) for s in range(3)] == ["big", "h", "shrink"]
    assert [mem.live.step_name(s) for s in range(3)] == ["h", "shrink", "big"]
    assert dfs.lower_bound == 4 * (8 * 256 + 8 * 64 + 8)
    assert mem.lower_bound == 4 * (8 * 256 + 8) < dfs.lower_bound


def test_custom_and_bad_schedules():
    net, shapes = random_net(random.Random(2), 15)
    p = sg.plan(net, shapes, schedule=lambda g, f: dfs_schedule(g, f))
    assert p.options["schedule"] == "<lambda>"
    with pytest.raises(PlanError, match="unknown schedule"):
        sg.plan(net, shapes, schedule="bfs")
    with pytest.raises(PlanError, match="schedule"):
        sg.plan(net, shapes, schedule=lambda g, f: list(reversed(dfs_schedule(g, f))))
