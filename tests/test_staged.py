"""The staged training step (passes/stages.py, train/staged.py): a step as
one program per segment of the forward and of the backward, then the
update.

The cut is checked on its own (random nets, random recompute sets, any
segment count: run stage after stage, each op node is evaluated exactly
once and the outputs and gradients are those of the whole graph, float64),
then the step: it equals the fused step in float64 (Dropout and BatchNorm
included, recomputing or not, on one and on two devices, with a dynamic
loss scale), and XLA's figures of the whole sequence follow the plan.
"""
import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import symgraph as sg
from symgraph import xla
from symgraph.bench.randnet import random_net
from symgraph.errors import PlanError
from symgraph.graph import Graph, entry_key
from symgraph.lower import JaxInterpreter
from symgraph.models.resnet import resnet
from symgraph.parallel.data_parallel import DeviceSet
from symgraph.passes.gradient import TrainingSplit
from symgraph.passes.recompute import forward_nodes
from symgraph.passes.stages import segment_of, stage_graphs, stage_of
from symgraph.train import optimizer as opt_mod
from symgraph.train.step import TrainPrograms

from test_recompute_program import CONV_RECOMPUTE, CONV_SHAPES, assert_trees_close, \
    conv_net, sig, values

S = sg.sym
PROPS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def feeds_of(full: Graph, shapes: dict, heads) -> dict:
    from symgraph.passes.infer import infer_shapes
    g = Graph(full.outputs)
    known = dict(shapes)
    fwd = infer_shapes(Graph(full.outputs[:len(full.outputs)]), known, partial=True)
    for name, i in heads:
        known[name] = fwd.shape(full.outputs[i])
    inf = infer_shapes(g, known)
    rng = np.random.default_rng(0)
    return {n.name: rng.uniform(-1, 1, size=inf.shapes[g.entry_id_of_node(n)])
            for n in g.variables}


class Counting(JaxInterpreter):
    """Counts the op nodes it evaluates, by name."""

    def __init__(self, graph, counts):
        super().__init__(graph, True, jax.random.key(0))
        self.counts = counts

    def eval_node(self, node, inputs):
        self.counts[node.name] = self.counts.get(node.name, 0) + 1
        return super().eval_node(node, inputs)


def run_staged(split, stages, feeds):
    """Runs the stages one after another as the staged step does (only
    variables and earlier stages' returned entries fed); the full graph's
    outputs and the evaluation count of every node."""
    held, outs, counts = {}, {}, {}
    for st in stages:
        assert set(st.reads) <= set(held), "a stage reads what no earlier stage returned"
        vals = Counting(st.graph, counts).run({**feeds, **{k: held[k] for k in st.reads}})
        held.update(zip(st.returns, vals[:len(st.returns)]))
        outs.update(zip(st.outputs, vals[len(st.returns):]))
    full = split.full
    return [np.asarray(outs[i]) if i in outs else feeds[full.outputs[i].node.name]
            for i in range(len(full.outputs))], counts


@PROPS
@given(rnd=st.randoms(use_true_random=False), n=st.integers(1, 20), frac=st.floats(0, 1),
       k=st.integers(1, 8))
def test_stages_compute_every_node_once_and_the_whole_graph(rnd, n, frac, k):
    net, shapes = random_net(rnd, n, loss=rnd.random() < 0.5, dropout=False)
    g = net.graph()
    wrt = [a for a in g.list_arguments() if a not in shapes]
    assume(wrt)  # a net without parameters has no training step
    fwd = forward_nodes(TrainingSplit(g, wrt).full, len(g.outputs))
    names = [x.name for x in fwd if rnd.random() < frac]
    split = TrainingSplit(g, wrt, names)
    stages = stage_graphs(split, lambda node: rnd.randint(0, 100), k)
    feeds = feeds_of(split.full, shapes, [(v, i) for v, i in split.heads])
    staged, counts = run_staged(split, stages, feeds)
    whole = Counting(split.full, {}).run(feeds)
    for a, b in zip(staged, whole):
        np.testing.assert_allclose(a, np.asarray(b), rtol=1e-12, atol=1e-12)
    ops = [x.name for x in split.full.nodes if x.op is not None]
    assert counts == {name: 1 for name in ops}
    # stages run in order: a node never in a stage before one of its inputs'
    stage, _ = stage_of(split, lambda node: 1, k)
    for node in split.full.nodes:
        for e in node.inputs:
            if e.node.op is not None:
                assert stage[split.full.node_id(node)] >= stage[split.full.node_id(e.node)]


def test_the_backward_of_a_segment_runs_after_later_segments_backward():
    """A chain in three segments: six stages, the backward of the last
    segment first; the forward stages hand on only what later stages read."""
    h = S.Variable("data")
    for i in range(6):
        h = S.FullyConnected(h, num_hidden=4, name=f"fc{i}")
        h = S.Activation(h, act_type="tanh", name=f"t{i}")
    net = S.LinearRegressionOutput(h, name="loss")
    g = net.graph()
    wrt = [a for a in g.list_arguments() if a not in ("data", "loss_label")]
    split = TrainingSplit(g, wrt)
    stage, n = stage_of(split, lambda node: 1, 3)
    assert n == 6
    by = {x.name: stage[i] for i, x in enumerate(split.full.nodes) if x.op is not None}
    assert by["fc0"] == 0 and by["t5"] == 2
    assert split.origin and all(by[b] == 5 - by[f] for b, f in split.origin.items()
                                if b in by and f in by and by[f] < 2)
    stages = stage_graphs(split, lambda node: 1, 3)
    assert [s.index for s in stages] == list(range(6))
    # the weight gradients come out of the stage of their segment's backward
    fc0_grad = 1 + wrt.index("fc0_weight")
    assert fc0_grad in stages[-1].outputs


def test_segment_count_is_checked():
    with pytest.raises(PlanError, match="k=0"):
        segment_of([], lambda n: 1, 0)


# -- the step ------------------------------------------------------------------
def programs(net, recompute=(), devices=None, **kw):
    g = net.graph()
    args = g.list_arguments()
    labels = [a for a in args if a.endswith("label")]
    params = [a for a in args if a not in ["data"] + labels]
    return TrainPrograms(net, ["data"], labels, params, [], g.list_auxiliary_states(),
                         DeviceSet(devices), recompute=recompute, **kw)


def one_step(progs, net, shapes, staged, segments=None, key=3):
    params, aux, batch = values(net, shapes)
    opt = opt_mod.create("sgd", learning_rate=0.1, momentum=0.9,
                         rescale_grad=1.0 / shapes["data"][0])
    states = {k: tuple(opt.create_state(k, v)) for k, v in params.items()}
    if progs.dynamic is not None:
        states["__loss_scale__"] = progs.dynamic.initial_state()
    s = sig(batch)
    prog = progs.staged(s, opt, segments) if staged else progs.fused(s, opt)
    out = prog(params, states, aux, {}, batch, np.float64(0.1), np.float64(1),
               jax.random.key(key))
    return jax.tree.map(np.asarray, out)


@pytest.mark.parametrize("segments", [1, 2, 3, None])
@pytest.mark.parametrize("recompute", [(), tuple(CONV_RECOMPUTE)])
def test_staged_step_equals_the_fused_step(segments, recompute):
    """Parameters, optimizer state, BatchNorm's moving statistics and the
    outputs after one step, in float64; Dropout draws the same mask in the
    stage that recomputes it."""
    net = conv_net()
    fused = one_step(programs(net), net, CONV_SHAPES, staged=False)
    staged = one_step(programs(net, recompute), net, CONV_SHAPES, staged=True,
                      segments=segments)
    assert_trees_close(staged, fused)
    params0, aux0, _ = values(net, CONV_SHAPES)
    assert np.abs(staged[0]["c1_weight"] - params0["c1_weight"]).max() > 1e-3


def test_staged_step_with_a_dynamic_loss_scale_equals_the_fused_step():
    net = conv_net()
    fused = one_step(programs(net, loss_scale="dynamic"), net, CONV_SHAPES, staged=False)
    staged = one_step(programs(net, CONV_RECOMPUTE, loss_scale="dynamic"), net, CONV_SHAPES,
                      staged=True, segments=2)
    assert_trees_close(staged, fused)


def test_staged_step_on_two_devices_equals_the_fused_step():
    net = conv_net()
    shapes = {"data": (8, 2, 6, 6), "softmax_label": (8,)}
    devs = [sg.cpu(0), sg.cpu(1)]
    fused = one_step(programs(net, devices=devs), net, shapes, staged=False)
    staged = one_step(programs(net, CONV_RECOMPUTE, devices=devs), net, shapes, staged=True,
                      segments=2)
    assert_trees_close(staged, fused)


def test_module_under_a_budget_runs_the_smaller_of_the_two_steps():
    """A Module under a budget compiles the fused and the staged step and
    runs the one XLA says holds less; ``compiled_memory`` is that one's."""
    net = conv_net()
    shapes = {"data": (8, 2, 6, 6), "softmax_label": (8,)}
    budget = int(0.85 * sg.plan(net, shapes, train=True, optimizer="momentum",
                                dtypes={"data": "float64", "softmax_label": "float64"}).total)
    mod = sg.mod.Module(net, memory_budget=budget)
    mod.bind([sg.io.DataDesc("data", shapes["data"], "float64")],
             [sg.io.DataDesc("softmax_label", (8,), "float64")])
    mod.init_params(sg.init.Xavier(), seed=0)
    mod.init_optimizer(optimizer="sgd", optimizer_params={"momentum": 0.9})
    assert mod.budget_plan.recompute
    m = mod.compiled_memory()
    assert m["program"]["recompute"] == len(mod.budget_plan.recompute)
    smaller = next(v for k, v in mod._programs._cache.items() if k[0] == "smaller")
    (name, _, sizes), = smaller._chosen.values()
    assert sizes[name] == min(sizes.values()) == xla.footprint(m)


def test_a_module_under_a_budget_runs_without_recompute_where_that_program_fits():
    """XLA's step without recompute holds far less than its plan on a
    residual net (it recomputes cheap ops itself): where it fits the budget
    the Module runs it, although the plan alone would have to recompute,
    with or without an algorithm named; asked for nodes, it recomputes
    them."""
    net = resnet((3, 3), (16, 16, 32), 10, (3, 32, 32), bottle_neck=False)
    shapes = {"data": (16, 3, 32, 32), "softmax_label": (16,)}
    plain = sg.plan(net, shapes, train=True, optimizer="momentum")
    budget = int(0.7 * plain.total)
    assert sg.plan(net, shapes, train=True, optimizer="momentum", budget=budget).recompute

    def module(**kw):
        mod = sg.mod.Module(net, memory_budget=budget, **kw)
        mod.bind([sg.io.DataDesc("data", shapes["data"])],
                 [sg.io.DataDesc("softmax_label", shapes["softmax_label"])])
        mod.init_params(sg.init.Xavier(), seed=0)
        mod.init_optimizer(optimizer="sgd", optimizer_params={"momentum": 0.9})
        return mod
    mod = module()
    assert mod.budget_plan.recompute == [] and mod.program_info()["recompute"] == 0
    assert xla.footprint(mod.compiled_memory()) <= budget < plain.total
    assert module(recompute="solver").budget_plan.recompute == []
    names = [r["name"] for r in sg.plan(net, shapes, train=True, optimizer="momentum",
                                        budget=budget).recompute]
    assert [r["name"] for r in module(recompute=names).budget_plan.recompute] == names


# -- XLA's figures of the sequence ---------------------------------------------------
def test_the_staged_sequence_figures_add_up():
    """The sequence's figures: the step's arguments and donated bytes are
    the fused step's; its temp is at least the largest program's temp plus
    what is handed on to it."""
    net = resnet((3, 3), (16, 16, 32), 10, (3, 32, 32), bottle_neck=False)
    shapes = {"data": (16, 3, 32, 32), "softmax_label": (16,)}
    p = sg.plan(net, shapes, train=True, recompute="sqrt")
    step = xla.training_step(p, segments=True)
    ma = step.lower().compile().memory_analysis()
    fused = xla.memory(xla.training_step(p, segments=None))
    # the same arrays; XLA counts the scalars and the random key its own way
    assert abs(ma.argument_size_in_bytes - fused["argument"]) <= 16
    assert ma.alias_size_in_bytes == fused["alias"]
    assert len(ma.programs) > 3
    assert ma.temp_size_in_bytes >= max(r["temp"] + r["held"] for r in ma.programs)


def test_the_budgeted_program_holds_what_the_budgeted_plan_says():
    """A ResNet-like net at half its bytes: the program a budgeted Module
    runs (the smaller of the fused and the staged step) holds XLA temp
    within 1.1x the budgeted plan's internal bytes, below the program
    without recompute."""
    net = resnet((3, 3), (16, 16, 32), 10, (3, 32, 32), bottle_neck=False)
    shapes = {"data": (16, 3, 32, 32), "softmax_label": (16,)}
    plain = sg.plan(net, shapes, train=True)
    p = sg.plan(net, shapes, train=True, budget=int(0.5 * plain.total))
    m = xla.memory(xla.training_step(p))
    without = xla.memory(xla.training_step(p, recompute=[]))
    print(f"plan {p.internal['arena']:,}; temp {m['temp']:,}, without {without['temp']:,}")
    assert m["temp"] <= 1.1 * p.internal["arena"]
    assert m["temp"] < without["temp"]
