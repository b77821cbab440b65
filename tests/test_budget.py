"""Memory budgets (symgraph/memory/budget.py): parsing, optimizer state, the
recompute algorithms, the budgeted plan and its guarantees (fits, verified,
arena run matches, monotone in the budget, same outputs and gradients), the
CLI's errors, and MXNet's mirror attributes from a symbol file."""
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import symgraph as sg
from symgraph.cli import main
from symgraph.errors import PlanError
from symgraph.lower import lower
from symgraph.memory import budget as B
from symgraph.bench.randnet import random_net
from symgraph.memory.verify import random_feeds
from symgraph.passes.recompute import is_recompute

S = sg.sym
PROPS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MIB = 2 ** 20


# -- parse_budget ------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("6GiB", 6 * 2 ** 30), ("512MiB", 512 * MIB), ("6GB", 6 * 10 ** 9), ("1.5 GiB", 3 * 2 ** 29),
    ("123", 123), (" 2 kib ", 2048), ("1e3", 1000), ("7B", 7), (4096, 4096), (2.0, 2),
    (np.int64(10), 10)])
def test_parse_budget(text, expected):
    assert B.parse_budget(text) == expected


@pytest.mark.parametrize("bad", ["6 apples", "-1", "abc", "0", "", "1.5.2GiB", "0.1", True,
                                 False, float("nan"), float("inf"), -5, 0, None, [1], "6 GiB!",
                                 "1e300TiB", "1e308GiB", 1e308 * 10])
def test_parse_budget_refuses(bad):
    with pytest.raises(B.BudgetError) as info:
        B.parse_budget(bad)
    msg = str(info.value)
    assert "\n" not in msg and repr(bad) in msg and "MiB" in msg
    assert info.value.smallest is None


def test_parse_budget_bounds_and_brief_messages():
    # ints are read exactly, up to what an int64 holds
    assert B.parse_budget(B.MAX_BUDGET) == B.MAX_BUDGET == 2 ** 63 - 1
    assert B.parse_budget(np.int64(2 ** 62 + 1)) == 2 ** 62 + 1
    for big in (B.MAX_BUDGET + 1, "1e19", 10 ** 400, float(2 ** 64)):
        with pytest.raises(B.BudgetError, match="is above 9,223,372,036,854,775,807 bytes"):
            B.parse_budget(big)
    # an int past the 4,300 digits Python will print, a text of 5,000: named, cut short
    for bad, shown in ((10 ** 5000, "<a int>"), (-10 ** 5000, "<a int>"),
                       ("9" * 5000 + "GiB", "'" + "9" * 56 + "..."),
                       ("6" + "x" * 5000, "'6xxx")):
        with pytest.raises(B.BudgetError) as info:
            B.parse_budget(bad)
        msg = str(info.value)
        assert msg.startswith(f"budget {shown}") and len(msg) < 300, msg


def test_optimizer_bytes():
    assert B.optimizer_bytes(1000, None) == B.optimizer_bytes(1000, "sgd") == 0
    assert B.optimizer_bytes(1000, "momentum") == B.optimizer_bytes(1000, "NAG") == 1000
    assert B.optimizer_bytes(1000, "adam") == B.optimizer_bytes(1000, "adamw") == 2000
    with pytest.raises(PlanError, match="known: sgd, momentum, nag") as info:
        B.optimizer_bytes(1000, "adagrad")
    assert "\n" not in str(info.value)
    # the names are those of symgraph's optimizers
    from symgraph.train.optimizer import Optimizer
    assert {"sgd", "nag", "adam", "adamw", "rmsprop"} <= set(Optimizer.opt_registry)


# -- nets -----------------------------------------------------------------------------
def chain(depth=6, width=16, batch=8):
    """An MLP chain with a softmax head: every node an articulation point."""
    h = S.Variable("data")
    for i in range(depth):
        h = S.FullyConnected(h, num_hidden=width, name=f"fc{i}")
        h = S.Activation(h, act_type="tanh" if i % 2 else "relu", name=f"act{i}")
    net = S.SoftmaxOutput(S.FullyConnected(h, num_hidden=4, name="out"), name="sm")
    return net, {"data": (batch, width)}


def convnet(units=3, ch=4, batch=2, size=8):
    """Residual units of conv, relu, pooling-free adds (plain nodes only)."""
    x = S.Variable("data")
    h = S.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=ch, name="stem")
    h = S.Activation(h, act_type="relu", name="stem_relu")
    for u in range(units):
        c1 = S.Convolution(h, kernel=(3, 3), pad=(1, 1), num_filter=ch, name=f"u{u}_c1")
        a1 = S.Activation(c1, act_type="relu", name=f"u{u}_r1")
        c2 = S.Convolution(a1, kernel=(3, 3), pad=(1, 1), num_filter=ch, name=f"u{u}_c2")
        h = S.Activation(c2 + h, act_type="relu", name=f"u{u}_out")
    h = S.Pooling(h, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool")
    net = S.SoftmaxOutput(S.FullyConnected(S.Flatten(h), num_hidden=3, name="fc"), name="sm")
    return net, {"data": (batch, 3, size, size)}


def smallest_total(net, shapes, algorithm="solver", **kw):
    with pytest.raises(B.BudgetError) as info:
        sg.plan(net, shapes, train=True, budget=1, recompute=algorithm, **kw)
    assert info.value.budget == 1 and info.value.smallest > 1
    return info.value.smallest


# -- the plan's figures ---------------------------------------------------------------
def test_total_and_optimizer_bucket():
    net, shapes = chain()
    p = sg.plan(net, shapes, train=True)
    assert p.buckets["optimizer"] == 0 and p.budget is None and p.recompute == []
    assert p.total == (p.buckets["arguments"] + p.buckets["gradients"] + p.buckets["aux"]
                       + p.internal["arena"])
    q = sg.plan(net, shapes, train=True, optimizer="adam")
    assert q.buckets["optimizer"] == 2 * q.buckets["gradients"] > 0
    assert q.total == p.total + q.buckets["optimizer"]
    # the step's FLOPs: the forward layers counted by hand are part of it
    fwd = sum(2 * 8 * 16 * 16 for _ in range(6)) + 2 * 8 * 16 * 4
    assert p.step_flops > 2 * fwd
    j = q.to_json()
    assert j["total"] == q.total and j["bytes"]["optimizer"] == q.buckets["optimizer"]
    assert j["budget"] is None and j["algorithm"] is None and j["recompute"] == []


def test_budget_recompute_and_optimizer_need_training():
    net, shapes = chain()
    for kw in ({"budget": "1GiB"}, {"recompute": "mirror"}, {"mirror": True},
               {"optimizer": "adam"}, {"recompute": ["fc1"]}):
        with pytest.raises(PlanError, match="needs a training plan") as info:
            sg.plan(net, shapes, **kw)
        assert "\n" not in str(info.value)
    with pytest.raises(PlanError, match="recompute='magic'"):
        sg.plan(net, shapes, train=True, recompute="magic")
    with pytest.raises(PlanError, match="mirror=True"):
        sg.plan(net, shapes, train=True, recompute="sqrt", mirror=True)


def test_budget_fits_and_boundaries():
    net, shapes = convnet()
    full = sg.plan(net, shapes, train=True)
    low = smallest_total(net, shapes)
    assert low < full.total
    # exactly the no-recompute total: nothing recomputed
    p = sg.plan(net, shapes, train=True, budget=full.total)
    assert p.recompute == [] and p.extra_flops == 0 and p.total == full.total
    assert p.algorithm == "solver" and p.budget == full.total
    # exactly the smallest reachable: fits; one byte less does not
    q = sg.plan(net, shapes, train=True, budget=low)
    assert q.total == low and q.recompute and q.extra_flops > 0
    with pytest.raises(B.BudgetError, match="below the smallest total reachable") as info:
        sg.plan(net, shapes, train=True, budget=low - 1)
    assert info.value.smallest == low and info.value.budget == low - 1
    assert f"{low:,}" in str(info.value) and f"{low - 1:,}" in str(info.value)
    # recompute rows: original forward op nodes, their output bytes and FLOPs
    ops = {n.name: n for n in full.graph.nodes if n.op is not None}
    for r in q.recompute:
        assert set(r) == {"name", "op", "bytes", "flops"}
        assert ops[r["name"]].op.name == r["op"] and r["bytes"] > 0
    assert q.extra_flops == sum(r["flops"] for r in q.recompute)
    clones = {n.name for n in q.graph.nodes if is_recompute(n)}
    assert clones == {r["name"] + "_recompute" for r in q.recompute}


def test_recompute_none_under_a_budget_and_explicit_sets():
    net, shapes = convnet()
    full = sg.plan(net, shapes, train=True)
    p = sg.plan(net, shapes, train=True, budget=full.total, recompute="none")
    assert p.recompute == [] and p.algorithm == "none"
    with pytest.raises(B.BudgetError, match="without recompute") as info:
        sg.plan(net, shapes, train=True, budget=full.total - 1, recompute="none")
    assert info.value.smallest == full.total
    q = sg.plan(net, shapes, train=True, recompute=["u0_r1", "u0_out", "u0_c2", "u1_r1"])
    # no backward node reads u0_c2's output (the add's backward reads no
    # input): its clone is pruned, nothing recomputes it
    assert [r["name"] for r in q.recompute] == ["u0_r1", "u0_out", "u1_r1"]
    assert q.algorithm == "explicit"
    q.check_arena()
    with pytest.raises(PlanError, match="not an op node of the forward"):
        sg.plan(net, shapes, train=True, recompute=["nope"])


def test_each_algorithm_without_a_budget():
    net, shapes = convnet(units=4)
    full = sg.plan(net, shapes, train=True)
    m = sg.plan(net, shapes, train=True, recompute="mirror")
    assert m == m and m.algorithm == "mirror"
    cheap = {r["op"] for r in m.recompute}
    assert cheap and cheap <= {"Activation", "elemwise_add", "Pooling", "Flatten"}
    assert sg.plan(net, shapes, train=True, mirror=True).recompute == m.recompute
    s = sg.plan(net, shapes, train=True, recompute="sqrt")
    assert any(r["op"] == "Convolution" for r in s.recompute)
    v = sg.plan(net, shapes, train=True, recompute="solver")
    assert v.total == smallest_total(net, shapes)  # the least memory on its frontier
    assert v.total < full.total
    for p in (m, s, v):
        p.check_arena()


# -- the guarantees on random nets -------------------------------------------------------
def _reference(graph, n_fwd, feeds):
    import jax
    outs, _ = lower(graph, True)(feeds, jax.random.key(0))
    return [np.asarray(o) for o in outs]


@PROPS
@given(rnd=st.randoms(use_true_random=False), n=st.integers(2, 16), u=st.floats(0, 1),
       v=st.floats(0, 1))
def test_any_budget_between_the_extremes_fits_and_is_monotone(rnd, n, u, v):
    net, shapes = random_net(rnd, n, loss=rnd.random() < 0.5, dropout=False)
    try:
        full = sg.plan(net, shapes, train=True)
    except PlanError:
        return  # no parameters: nothing to train
    low = smallest_total(net, shapes)
    assert low <= full.total
    b1 = low + int(u * (full.total - low))
    b2 = low + int(v * (b1 - low))  # b2 <= b1
    p1 = sg.plan(net, shapes, train=True, budget=b1)
    p2 = sg.plan(net, shapes, train=True, budget=b2)
    assert p1.verified and p1.total <= b1 and p2.total <= b2
    assert p2.total <= p1.total  # a smaller budget never gives a larger total
    assert p2.extra_flops >= p1.extra_flops
    p2.check_arena()
    # recompute keeps outputs and gradients: the rewritten graph against the
    # graph planned without recompute, float64 inputs
    feeds = {k: x.astype(np.float64) if np.issubdtype(x.dtype, np.floating) else x
             for k, x in random_feeds(full.live).items()}
    for a, b in zip(_reference(full.graph, full.num_forward_outputs, feeds),
                    _reference(p2.graph, p2.num_forward_outputs, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("algorithm", ["solver", "mirror", "sqrt"])
def test_totals_never_rise_as_the_budget_falls(algorithm):
    net, shapes = convnet(units=4)
    full = sg.plan(net, shapes, train=True)
    low = smallest_total(net, shapes, algorithm)
    totals, flops = [], []
    for k in range(12):
        b = full.total - (full.total - low) * k // 11
        p = sg.plan(net, shapes, train=True, budget=b, recompute=algorithm)
        assert p.total <= b and p.algorithm == algorithm
        totals.append(p.total)
        flops.append(p.extra_flops)
    assert totals == sorted(totals, reverse=True) and flops == sorted(flops)
    assert totals[-1] == low
    if algorithm != "mirror":  # mirror's cheap ops save nothing on this net
        assert len(set(totals)) > 2


def test_frontier_is_pareto_and_solver_covers_mirror_and_sqrt():
    net, shapes = convnet(units=4)
    g, inf, n_fwd, _ = sg.memory.build_graph(net, shapes, True)
    problem = B.Problem(g, inf, n_fwd)
    front = B.frontier(problem, "solver")
    assert front[0].names == () and front[0].extra_flops == 0
    for a, b in zip(front, front[1:]):
        assert a.extra_flops <= b.extra_flops and a.internal > b.internal
    # each point's figure is the real plan's
    for pt in front:
        r, rinf = problem.rewritten(pt.names)
        plan = sg.memory.plan_graph(r, rinf, train=True, num_forward_outputs=n_fwd,
                                    external=[r.entry_id(e) for e in r.outputs[n_fwd:]])
        assert plan.internal["arena"] == pt.internal
    # the solver's frontier is at or below the mirror point and the sqrt point
    for alg in ("mirror", "sqrt"):
        own = B.choose(problem, alg, None, 0)
        best = min((p.internal for p in front if p.extra_flops <= own.extra_flops))
        assert best <= own.internal


def test_articulation_points_of_a_residual_net():
    net, shapes = convnet(units=2)
    g, inf, n_fwd, _ = sg.memory.build_graph(net, shapes, True)
    problem = B.Problem(g, inf, n_fwd)
    arts = [problem.fwd[i].name for i in problem.articulation]
    # unit outputs and the stem are cut vertices; nodes inside a unit are not
    # (the shortcut passes them by)
    assert {"stem", "stem_relu", "u0_out", "u1_out", "pool"} <= set(arts)
    assert not {"u0_c1", "u0_r1", "u0_c2", "u1_c1"} & set(arts)
    segs = problem.segments()
    inner = [[n.name for n in s[0]] for s in segs]
    assert ["u0_c1", "u0_r1", "u0_c2", "_plus0"] in inner or any(
        {"u0_c1", "u0_r1", "u0_c2"} <= set(x) for x in inner)
    # Chen's evenly spaced checkpoints are articulation points
    assert problem.even_checkpoints(2) <= set(arts)
    assert problem.greedy_checkpoints(0) == {n for n in arts if n in problem.cand_names}


# -- MXNet's mirror attributes ---------------------------------------------------------
def _mx_node(op, name, inputs, attrs=None):
    d = {"op": op, "name": name, "inputs": [[i, 0, 0] for i in inputs]}
    if attrs:
        d["attrs"] = attrs
    return d


def mxnet_json(legacy=False):
    """A residual net as MXNet 1.x writes it (memonger's mirror_stage on the
    unit ends, force_mirroring on two nodes); ``legacy``: MXNet 0.8's
    ``attr`` dicts with the keys unhidden."""
    nodes = []

    def add(op, name, inputs, attrs=None, hint=None):
        a = dict(attrs or {})
        if hint:
            if legacy:
                nodes.append(_mx_node(op, name, inputs))
                nodes[-1]["attr"] = {**a, **{k.strip("_"): v for k, v in hint.items()}}
                return len(nodes) - 1
            a.update(hint)
        nodes.append(_mx_node(op, name, inputs, a or None))
        if legacy and a:
            nodes[-1]["attr"] = nodes[-1].pop("attrs")
        return len(nodes) - 1

    conv = {"kernel": "(3, 3)", "pad": "(1, 1)", "num_filter": "4", "no_bias": "True"}
    x = add("null", "data", [])
    w = add("null", "stem_weight", [])
    h = add("Convolution", "stem", [x, w], conv)
    h = add("Activation", "stem_relu", [h], {"act_type": "relu"},
            {"__mirror_stage__": "True"})
    for u in range(3):
        w1 = add("null", f"u{u}_c1_weight", [])
        c1 = add("Convolution", f"u{u}_c1", [h, w1], conv,
                 {"__force_mirroring__": "True"} if u == 1 else None)
        r1 = add("Activation", f"u{u}_r1", [c1], {"act_type": "relu"},
                 {"__force_mirroring__": "False"} if u == 0 else None)
        w2 = add("null", f"u{u}_c2_weight", [])
        c2 = add("Convolution", f"u{u}_c2", [r1, w2], conv)
        s = add("elemwise_add", f"u{u}_add", [c2, h])
        h = add("Activation", f"u{u}_out", [s], {"act_type": "relu"},
                {"__mirror_stage__": "True"})
    f = add("Flatten", "flat", [h])
    fw = add("null", "fc_weight", [])
    fb = add("null", "fc_bias", [])
    f = add("FullyConnected", "fc", [f, fw, fb], {"num_hidden": "3"})
    lab = add("null", "sm_label", [])
    add("SoftmaxOutput", "sm", [f, lab])
    doc = {"nodes": nodes, "arg_nodes": [i for i, n in enumerate(nodes) if n["op"] == "null"],
           "node_row_ptr": list(range(len(nodes) + 1)), "heads": [[len(nodes) - 1, 0, 0]],
           "attrs": {"mxnet_version": ["int", 800 if legacy else 10901]}}
    return json.dumps(doc)


@pytest.mark.parametrize("legacy", [False, True])
def test_mxnet_mirror_attributes_load_and_are_honoured(tmp_path, legacy):
    path = tmp_path / "net.json"
    path.write_text(mxnet_json(legacy))
    net = sg.sym.load(str(path))
    g = sg.memory.as_graph(net)
    attrs = {n.name: n.attrs for n in g.nodes}
    assert attrs["u0_out"]["__mirror_stage__"] == "True"
    assert attrs["u1_c1"]["__force_mirroring__"] == "True"
    assert attrs["u0_r1"]["__force_mirroring__"] == "False"
    # the attributes survive a save and a load again
    again = sg.sym.load_json(net.tojson())
    assert {n.name: n.attrs for n in sg.memory.as_graph(again).nodes} == attrs
    shapes = {"data": (2, 3, 6, 6)}
    p = sg.plan(net, shapes, train=True, recompute="mirror")
    names = {r["name"] for r in p.recompute}
    assert "u1_c1" in names            # forced
    assert "u0_r1" not in names        # forbidden
    p.check_arena()
    # memonger's stages: at threshold 0 every stage boundary is kept and
    # everything else recomputed (forced attributes still win)
    gg, inf, n_fwd, _ = sg.memory.build_graph(net, shapes, True)
    problem = B.Problem(gg, inf, n_fwd)
    keep = B.memonger_keep(problem.candidates, problem.bytes, 0)
    assert keep == {"stem_relu", "u0_out", "u1_out", "u2_out"}
    # a huge threshold keeps none
    assert B.memonger_keep(problem.candidates, problem.bytes, 1e18) == set()
    labels = [label for label, _ in problem.mirror_sets()]
    assert all(label.startswith("mirror stages") for label in labels)
    sets = dict(problem.mirror_sets())
    first = sets["mirror stages 0/16"]
    assert "u0_c2" in first and "u0_out" not in first and "u0_r1" not in first


def test_memonger_same_stage_value_groups_nodes():
    class N:
        def __init__(self, name, stage=None):
            self.name, self.attrs = name, ({} if stage is None else {B.STAGE_ATTR: stage})
    nodes = [N("a"), N("b", "s1"), N("c", "s1"), N("d"), N("e", "s2"), N("f", "s2")]
    size = {n.name: 10 for n in nodes}
    # b starts stage s1 with 20 bytes gathered (a, b): kept, c (same stage)
    # with it; e starts s2 with 30 gathered since b (c, d, e): kept, f too
    assert B.memonger_keep(nodes, size, 15) == {"b", "c", "e", "f"}
    # b's 20 do not pass 25: s1 is recomputed; e's 50 do
    assert B.memonger_keep(nodes, size, 25) == {"e", "f"}
    assert B.memonger_keep(nodes, size, 100) == set()
    size = {"a": 20, "b": 10, "c": 1, "d": 1, "e": 1, "f": 1}
    assert B.memonger_keep(nodes, size, 15) == {"b", "c"}


# -- the CLI ---------------------------------------------------------------------------------
@pytest.fixture()
def chain_file(tmp_path):
    net, _ = chain()
    path = tmp_path / "chain.json"
    net.save(str(path))
    return str(path)


def _run(capsys, *argv):
    code = main(["plan", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("args, words", [
    (["--train", "--budget", "6 apples"], ["'6 apples'", "unknown unit"]),
    (["--train", "--budget", "-1"], ["'-1'", "positive"]),
    (["--train", "--budget", "abc"], ["'abc'", "MiB"]),
    (["--train", "--budget", "0"], ["'0'", "positive"]),
    (["--budget", "1GiB"], ["--budget needs --train"]),
    (["--optimizer", "adam"], ["--optimizer needs --train"]),
    (["--recompute", "sqrt"], ["--recompute needs --train"]),
    (["--train", "--budget", "1KiB"], ["below the smallest total reachable", "1,024"]),
])
def test_cli_errors_are_one_line(capsys, chain_file, args, words):
    code, out, err = _run(capsys, chain_file, "--shape", "data=8,16", "--no-xla", *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1, err
    for w in words:
        assert w in err


def test_cli_budget_report_and_json(capsys, chain_file):
    net, shapes = chain()
    low = smallest_total(net, shapes, optimizer="momentum")
    code, out, err = _run(capsys, chain_file, "--shape", "data=8,16", "--no-xla", "--train",
                          "--budget", str(low), "--optimizer", "momentum", "--json")
    assert code == 0 and err == ""
    j = json.loads(out)
    p = sg.plan(net, shapes, train=True, budget=low, optimizer="momentum")
    assert j["budget"] == low and j["total"] == p.total <= low
    assert j["bytes"]["optimizer"] == p.buckets["gradients"]
    assert j["recompute"] == p.recompute and j["algorithm"] == "solver"
    assert j["extra_flops"] == p.extra_flops > 0 and j["step_flops"] == p.step_flops
    code, out, err = _run(capsys, chain_file, "--shape", "data=8,16", "--no-xla", "--train",
                          "--budget", str(low), "--optimizer", "momentum",
                          "--recompute", "solver")
    assert code == 0
    for w in ("optimizer", "budget", "total is", "recompute (solver):",
              f"{len(p.recompute)} forward tensors", "of the step's"):
        assert w in out


def test_solver_is_never_costlier_than_mirror_or_sqrt():
    net, shapes = convnet(units=4)
    full = sg.plan(net, shapes, train=True)
    low = smallest_total(net, shapes)
    for k in range(8):
        b = full.total - (full.total - low) * k // 7
        solver = sg.plan(net, shapes, train=True, budget=b)
        for alg in ("mirror", "sqrt"):
            try:
                other = sg.plan(net, shapes, train=True, budget=b, recompute=alg)
            except B.BudgetError as err:
                assert err.smallest > b and err.smallest >= low
                continue
            assert solver.extra_flops <= other.extra_flops


def test_public_names():
    from symgraph.memory import recompute_problem
    assert sg.BudgetError is B.BudgetError and issubclass(sg.BudgetError, sg.PlanError)
    # the recompute sets live in recompute_problem; budget's names stay
    assert B.Problem is recompute_problem.Problem and B.ALGORITHMS == ("mirror", "sqrt", "solver")
    assert "activation" in B.MIRROR_FAMILIES and not hasattr(B, "CHEAP_FAMILIES")
    assert sg.memory.parse_budget is B.parse_budget and sg.memory.ALGORITHMS == B.ALGORITHMS
    with pytest.raises(sg.BudgetError):
        sg.plan(sg.models.get_model("mlp"), {"data": (8, 784)}, train=True, budget=10)


def test_a_symbol_file_mxnet_wrote_with_memonger_hints():
    """tests/data/memonger-symbol.json: residual units saved by MXNet 1.9.1
    with _set_attr(mirror_stage='True') on the stage ends (the adds) and
    force_mirroring on two nodes (tests/data/make_mxnet_files.py)."""
    import os
    from helpers import ROOT
    net = sg.sym.load(os.path.join(ROOT, "tests", "data", "memonger-symbol.json"))
    nodes = {n.name: n for n in sg.memory.as_graph(net).nodes}
    stages = {k for k, n in nodes.items() if n.attrs.get(B.STAGE_ATTR) == "True"}
    assert stages == {"relu0", "_plus0", "_plus1", "_plus2"}
    assert nodes["unit2_conv1"].attrs[B.FORCE_ATTR] == "True"
    assert nodes["unit1_relu2"].attrs[B.FORCE_ATTR] == "False"
    shapes = {"data": (2, 3, 8, 8)}
    p = sg.plan(net, shapes, train=True, recompute="mirror")
    names = {r["name"] for r in p.recompute}
    assert "unit2_conv1" in names and "unit1_relu2" not in names
    # memonger's plan: everything but some stage ends recomputed, convolutions too
    assert {"unit1_conv1", "unit3_conv1"} <= names
    g, inf, n_fwd, _ = sg.memory.build_graph(net, shapes, True)
    problem = B.Problem(g, inf, n_fwd)
    # the plan is memonger's plan at the threshold giving the least memory
    # (clones no backward node reads pruned)
    pts = [problem.exact(problem.evaluate(s, label)) for label, s in problem.mirror_sets()]
    best = min(pts, key=lambda q: (q.internal, q.extra_flops))
    assert set(best.names) == names and p.internal["arena"] == best.internal
    # some stage end is kept (a checkpoint), and at threshold 0 all are
    assert stages - names
    assert B.memonger_keep(problem.candidates, problem.bytes, 0) == stages
    full = sg.plan(net, shapes, train=True)
    assert p.total < full.total
    p.check_arena()


def test_mirror_never_recomputes_random_ops_and_honours_force_false():
    x = S.Variable("data")
    h = S.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=4, name="c1")
    h = S.BatchNorm(h, name="bn", attr={"force_mirroring": "False"})
    h = S.Activation(h, act_type="relu", name="r1")
    h = S.Dropout(h, p=0.5, name="drop", attr={"force_mirroring": "True"})
    h = S.Convolution(h, kernel=(3, 3), pad=(1, 1), num_filter=4, name="c2",
                      attr={"force_mirroring": "True"})
    h = S.Activation(h, act_type="tanh", name="r2")
    net = S.SoftmaxOutput(S.FullyConnected(S.Flatten(h), num_hidden=3, name="fc"), name="sm")
    g = sg.memory.as_graph(net)
    assert {n.name: n.attrs.get(B.FORCE_ATTR) for n in g.nodes if n.op is not None}["bn"] \
        == "False"
    p = sg.plan(net, {"data": (2, 3, 6, 6)}, train=True, mirror=True)
    names = [r["name"] for r in p.recompute]
    # Dropout would draw other units; the forced BatchNorm stays; the forced
    # convolution is recomputed, the cheap ReLU/tanh by default
    assert "drop" not in names and "bn" not in names
    assert "c2" in names and "r2" in names
    p.check_arena()


@pytest.mark.parametrize("kw", [{"strategy": "both"}, {"strategy": "coshare"},
                                {"schedule": "memory"}, {"fuse": False},
                                {"outputs": ["sm"]}])
def test_budget_under_other_strategies_schedules_and_options(kw):
    net, shapes = convnet(units=3)
    full = sg.plan(net, shapes, train=True, **kw)
    low = smallest_total(net, shapes, **kw)
    assert low <= full.total
    b = (low + full.total) // 2
    p = sg.plan(net, shapes, train=True, budget=b, **kw)
    # the frontier was planned with the same options as the plan (plan()
    # checks the figures agree): the total counts the plan's strategy
    assert p.total <= b and p.total == sum(p.buckets.values()) + p.internal[p.strategy]
    p.check_arena()


# -- fit_program: the budget bounds the program, not only the plan ------------------
class _Plan:
    """A plan as fit_program reads it: its total and recompute."""

    def __init__(self, total, recompute=()):
        self.total, self.recompute = total, list(recompute)
        self.buckets = {"arguments": total // 2}


def _planner(plain, smallest=0):
    """plan_for: a plan whose total is the budget asked (recomputing one
    node per 100 bytes given up), BudgetError below ``smallest``."""
    asked = []

    def plan_for(budget):
        asked.append(budget)
        if budget is None:
            return plain
        if budget < smallest:
            raise B.BudgetError("too small", budget=budget, smallest=smallest)
        return _Plan(budget, ["n"] * max(1, (plain.total - budget) // 100))
    return plan_for, asked


def _xla(extra):
    """footprint_of: XLA's program holds its plan's total and ``extra(plan)``."""
    seen = []

    def footprint_of(p):
        seen.append(p)
        return p.total + extra(p)
    return footprint_of, seen


def test_fit_program_runs_the_step_without_recompute_where_its_program_fits():
    plain = _Plan(1000)
    first = _Plan(800, ["a"])
    plan_for, asked = _planner(plain)
    footprint_of, seen = _xla(lambda p: -300 if p is plain else 0)  # XLA recomputes itself
    fit = B.fit_program(first, 800, plan_for, footprint_of)
    assert (fit.plan, fit.footprint, fit.fits) == (plain, 700, True)
    assert asked == [None] and seen == [plain]


@pytest.mark.parametrize("keep", [False, True])
def test_fit_program_keeps_the_recompute_where_the_plain_step_does_not_fit_or_nodes_are_named(
        keep):
    plain = _Plan(1000)
    first = _Plan(800, ["a"])
    plan_for, asked = _planner(plain)
    footprint_of, seen = _xla(lambda p: -100 if p is plain else 0)  # 900: over
    fit = B.fit_program(first, 800, plan_for, footprint_of, keep_recompute=keep)
    assert (fit.plan, fit.footprint, fit.fits) == (first, 800, True)
    assert seen == ([first] if keep else [plain, first])  # named nodes: plain never compiled
    assert asked == ([] if keep else [None])


def test_fit_program_plans_again_to_the_excess_and_checks_the_new_program():
    plain = _Plan(1000)
    first = _Plan(800, ["a"])
    plan_for, asked = _planner(plain)
    footprint_of, seen = _xla(lambda p: 50)
    fit = B.fit_program(first, 800, plan_for, footprint_of)
    assert fit.fits and fit.footprint == 800 and fit.plan.total == 750
    assert asked == [None, 750] and [p.total for p in seen] == [1000, 800, 750]
    assert [h for _, h in fit.tried] == [1050, 850, 800]


def test_fit_program_gives_the_smallest_program_where_none_fits():
    plain = _Plan(1000)
    first = _Plan(800, ["a"])
    footprint_of, seen = _xla(lambda p: 400 - p.total // 4)  # shrinks less than the plan
    fit = B.fit_program(first, 800, _planner(plain)[0], footprint_of)
    assert not fit.fits and len(seen) == B.PROGRAM_FIT_ROUNDS + 2  # the plain step too
    assert fit.footprint == min(h for _, h in fit.tried) > 800
    assert fit.plan is min(fit.tried, key=lambda t: t[1])[0]
    err = B.over_budget(fit, 800, "the flag")
    assert err.smallest == fit.footprint and err.budget == 800 and "the flag" in str(err)

    # no plan gets to the excess: the smallest plan is compiled once, then
    # the search ends (nothing smaller exists)
    footprint_of, seen = _xla(lambda p: 100)
    fit = B.fit_program(first, 800, _planner(plain, smallest=750)[0], footprint_of)
    assert not fit.fits and [p.total for p in seen] == [1000, 800, 750]
    assert fit.plan.total == 750 and fit.footprint == 850


def test_fit_program_tries_the_smallest_plan_where_none_gets_to_the_excess():
    """XLA may hold less than a plan: where no plan reaches the plan's total
    less the excess, the smallest plan's program is compiled, and taken
    where it fits."""
    plain = _Plan(1000)
    first = _Plan(800, ["a"])
    plan_for, asked = _planner(plain, smallest=750)
    footprint_of, seen = _xla(lambda p: -100 if p.total == 750 else 100)
    fit = B.fit_program(first, 800, plan_for, footprint_of)
    assert fit.fits and fit.plan.total == 750 and fit.footprint == 650
    assert asked == [None, 700, 750]


@pytest.mark.parametrize("keep", [False, True])
def test_first_plan_falls_back_to_the_step_without_recompute_unless_nodes_are_named(keep):
    """No plan fits 700 (the smallest reachable is 720): the plan without
    recompute is the start (its program may hold less: fit_program
    compiles it), unless nodes are named; then the planner's error stands."""
    plain = _Plan(1000)
    plan_for, asked = _planner(plain, smallest=720)
    if keep:
        with pytest.raises(B.BudgetError) as info:
            B.first_plan(700, plan_for, keep_recompute=keep)
        assert info.value.smallest == 720
    else:
        assert B.first_plan(700, plan_for, keep_recompute=keep) is plain
    assert asked == ([700] if keep else [700, None])
    # a budget some plan fits is the planner's, the plain step not asked for
    plan_for, asked = _planner(plain, smallest=720)
    assert B.first_plan(800, plan_for).total == 800 and asked == [800]
    # below the arguments every program holds (500): refused, nothing to compile
    with pytest.raises(B.BudgetError) as info:
        B.first_plan(499, _planner(plain, smallest=720)[0])
    assert info.value.smallest == 720
