"""The program that runs keeps the recompute (issue 12, items 3 and 4).

A recompute plan (``passes.recompute``) is lowered into the training
programs: the fused step and the split forward/backward read the clones,
the split forward saves only the checkpoints. Here: results equal the
program without recompute in float64 (outputs, gradients, updates, aux
states; Dropout's mask and BatchNorm's moving statistics included), XLA's
temp of the budgeted program follows the budgeted plan and stays below the
program without recompute (it would not if XLA merged or hoisted the
clones), and Module/bind take ``memory_budget``.
"""
import jax
import numpy as np
import pytest

import symgraph as sg
from symgraph import lower as lower_mod
from symgraph import xla
from symgraph.memory import budget as BUDGET
from symgraph.memory.budget import BudgetError
from symgraph.models.resnet import resnet
from symgraph.parallel.data_parallel import DeviceSet
from symgraph.passes.gradient import TrainingSplit
from symgraph.passes.recompute import forward_nodes, is_recompute
from symgraph.train import optimizer as opt_mod
from symgraph.train.step import TrainPrograms

S = sg.sym


def conv_net():
    """Conv, BatchNorm, relu, Dropout, pooling: every kind of node a clone
    must repeat exactly (random numbers, aux states)."""
    x = S.Convolution(S.Variable("data"), kernel=(3, 3), pad=(1, 1), num_filter=4, name="c1")
    x = S.BatchNorm(x, fix_gamma=False, name="bn1")
    x = S.Activation(x, act_type="relu", name="r1")
    x = S.Dropout(x, p=0.5, name="drop")
    x = S.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=4, name="c2")
    x = S.BatchNorm(x, fix_gamma=False, name="bn2")
    x = S.Activation(x, act_type="tanh", name="r2")
    x = S.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool")
    x = S.FullyConnected(S.Flatten(x), num_hidden=3, name="fc")
    return S.SoftmaxOutput(x, name="softmax")


CONV_SHAPES = {"data": (4, 2, 6, 6), "softmax_label": (4,)}
CONV_RECOMPUTE = ["bn1", "r1", "drop", "c2", "bn2", "r2"]


def programs(net, shapes, recompute=(), measures="auto"):
    g = net.graph()
    args = g.list_arguments()
    data = ["data"]
    labels = [a for a in args if a.endswith("label")]
    params = [a for a in args if a not in data + labels]
    return TrainPrograms(net, data, labels, params, [], g.list_auxiliary_states(),
                         DeviceSet(None), memory_measures=measures, recompute=recompute)


def values(net, shapes, seed=0):
    """float64 parameters, aux states and a batch."""
    arg, _, aux = net.infer_shape(**shapes)
    rng = np.random.default_rng(seed)
    names = net.list_arguments()
    params = {n: rng.normal(scale=0.5, size=s) for n, s in zip(names, arg)
              if n not in shapes}
    auxv = {n: (rng.uniform(0.5, 1.5, size=s) if "var" in n else rng.normal(size=s))
            for n, s in zip(net.list_auxiliary_states(), aux)}
    batch = {"data": rng.normal(size=shapes["data"])}
    for n in shapes:
        if n.endswith("label"):
            batch[n] = rng.integers(0, 3, size=shapes[n]).astype(np.float64)
    return params, auxv, batch


def sig(batch):
    return tuple((k, tuple(v.shape), str(v.dtype)) for k, v in batch.items())


def fused_step(net, shapes, recompute):
    progs = programs(net, shapes, recompute)
    params, aux, batch = values(net, shapes)
    opt = opt_mod.create("sgd", learning_rate=0.1, momentum=0.9, rescale_grad=0.25)
    states = {k: tuple(opt.create_state(k, v)) for k, v in params.items()}
    prog = progs.fused(sig(batch), opt)
    out = prog(params, states, aux, {}, batch, np.float64(0.1), np.float64(1),
               jax.random.key(3))
    return jax.tree.map(np.asarray, out)


def assert_trees_close(a, b, rtol=1e-10, atol=1e-12):
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    assert ta == tb
    for x, y in zip(la, lb):
        np.testing.assert_allclose(x, y, rtol=rtol, atol=atol)


# -- the lowering of clones ---------------------------------------------------------
def test_fused_step_with_recompute_equals_the_step_without():
    """Parameters, optimizer state, aux states (BatchNorm's moving
    statistics updated once, from the forward) and outputs; the Dropout
    clone draws the forward's mask (a different mask changes the
    gradients of c1 and bn1)."""
    net = conv_net()
    plain = fused_step(net, CONV_SHAPES, ())
    rec = fused_step(net, CONV_SHAPES, CONV_RECOMPUTE)
    assert_trees_close(plain, rec)
    params0, aux0, _ = values(net, CONV_SHAPES)
    # the step really moved the weights and the moving statistics
    assert np.abs(rec[0]["c1_weight"] - params0["c1_weight"]).max() > 1e-3
    assert np.abs(rec[2]["bn1_moving_mean"] - aux0["bn1_moving_mean"]).max() > 1e-3


def test_a_clone_draws_the_random_key_of_its_original():
    """The Dropout clone's key is derived from 'drop' (the forward's), never
    from its own name: otherwise it would drop other units."""
    net = conv_net()
    split = TrainingSplit(net.graph(), ["c1_weight"], ["drop"])
    clone = next(n for n in split.full.nodes if is_recompute(n))
    ctx_name = {}
    orig = lower_mod.LowerCtx.__init__

    def spy(self, is_train, key=None, node_name="", *args, **kwargs):
        ctx_name.setdefault(node_name, 0)
        ctx_name[node_name] += 1
        orig(self, is_train, key, node_name, *args, **kwargs)
    lower_mod.LowerCtx.__init__ = spy
    try:
        fused_step(net, CONV_SHAPES, ["drop"])
    finally:
        lower_mod.LowerCtx.__init__ = orig
    # per trace of the step (tracing may happen more than once): the
    # forward's Dropout and its clone, both keyed by 'drop'
    assert clone.name not in ctx_name and ctx_name["drop"] == 2 * ctx_name["c1"]


def test_split_forward_saves_only_the_checkpoints():
    net = conv_net()
    g = net.graph()
    wrt = [a for a in g.list_arguments() if a not in CONV_SHAPES]
    plain = TrainingSplit(g, wrt)
    rec = TrainingSplit(g, wrt, CONV_RECOMPUTE)
    saved = {e.node.name for _, e in rec.saved}
    assert saved.isdisjoint(CONV_RECOMPUTE)
    assert {"bn1", "r1", "c2", "r2"} <= {e.node.name for _, e in plain.saved}
    assert "c1" in saved  # the checkpoint the recomputed run starts from
    clones = [n.name for n in rec.backward.nodes if is_recompute(n)]
    assert sorted(clones) == sorted(f"{n}_recompute" for n in CONV_RECOMPUTE)
    assert rec.origin["drop_recompute"] == "drop"


def test_split_programs_with_recompute_equal_the_fused_step_without():
    """forward_train -> backward -> update under recompute against the
    fused step without it."""
    net = conv_net()
    params, aux, batch = values(net, CONV_SHAPES)
    progs = programs(net, CONV_SHAPES, CONV_RECOMPUTE)
    wrt = list(params)
    s = sig(batch)
    t, key = np.float64(1), jax.random.key(3)
    outs, saved, new_aux = progs.forward_train(s, wrt)(params, aux, {}, batch, t, key)
    assert len(saved) == len(TrainingSplit(net.graph(), wrt, CONV_RECOMPUTE).saved)
    pgrads, _ = progs.backward(s, wrt)(params, aux, {}, batch, saved, [], t, key, None)
    opt = opt_mod.create("sgd", learning_rate=0.1, momentum=0.9, rescale_grad=0.25)
    states = {k: tuple(opt.create_state(k, v)) for k, v in params.items()}
    new_p, new_s = progs.update(opt)(params, pgrads, states, np.float64(0.1), t)
    ref = fused_step(net, CONV_SHAPES, ())
    assert_trees_close((new_p, new_s, new_aux, outs), jax.tree.map(np.asarray, ref))


# -- Module and bind under a budget -----------------------------------------------------
FIT_SHAPES = {"data": (8, 2, 6, 6), "softmax_label": (8,)}
F64 = {"data": "float64", "softmax_label": "float64"}


def fit(net, **kw):
    """Two epochs of Module.fit in float64 (Dropout included); the module."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(32,) + FIT_SHAPES["data"][1:])
    y = rng.integers(0, 3, size=32).astype(np.float64)
    it = sg.io.NDArrayIter(x, y, batch_size=8, dtype=None)
    mod = sg.mod.Module(net, **kw)
    mod.bind(it.provide_data, it.provide_label)
    mod.init_params(sg.init.Xavier(magnitude=2.0), seed=0)
    mod.fit(it, num_epoch=2, optimizer="sgd", eval_metric="acc",
            optimizer_params={"learning_rate": 0.1, "momentum": 0.9})
    return mod


def no_recompute_total(net, optimizer="momentum"):
    return sg.plan(net, FIT_SHAPES, train=True, dtypes=F64, optimizer=optimizer).total


def test_module_fit_under_a_budget_equals_the_unbudgeted_fit():
    net = conv_net()
    budget = int(0.85 * no_recompute_total(net))
    plain = fit(net)
    mod = fit(net, memory_budget=budget)
    p = mod.budget_plan
    assert p is not None and p.recompute and p.total <= budget
    # the optimizer's state is counted (SGD with momentum: one copy)
    assert p.buckets["optimizer"] == p.buckets["gradients"] > 0
    assert mod.program_info()["recompute"] == len(p.recompute)
    assert plain.budget_plan is None and plain.program_info()["recompute"] == 0
    for a, b in zip(plain.get_params(), mod.get_params()):
        assert a.keys() == b.keys()
        for k in a:
            np.testing.assert_allclose(b[k].asnumpy(), a[k].asnumpy(), rtol=1e-10, atol=1e-12)


def test_module_takes_a_budget_as_text_and_recompute_by_name():
    net = conv_net()
    descs = ([sg.io.DataDesc("data", FIT_SHAPES["data"], "float64")],
             [sg.io.DataDesc("softmax_label", (8,), "float64")])
    mod = sg.mod.Module(net, memory_budget="1GiB")
    mod.bind(*descs)
    # a budget that fits without recompute recomputes nothing
    assert mod.budget_plan.budget == 2 ** 30 and mod.budget_plan.recompute == []
    mod = sg.mod.Module(net, recompute="mirror")
    mod.bind(*descs)
    names = [r["name"] for r in mod.budget_plan.recompute]
    assert "r1" in names and "c1" not in names  # mirror: cheap ops only
    assert mod._programs.recompute == tuple(names)
    mod = sg.mod.Module(net, recompute=["r1", "c2"])
    mod.bind(*descs)
    assert [r["name"] for r in mod.budget_plan.recompute] == ["r1", "c2"]


def _holding_more(extra: int, calls: list):
    """``Module.compiled_memory`` as if XLA's step held the plan's total and
    ``extra`` bytes more (nothing compiled)."""
    def compiled_memory(self):
        calls.append(self.budget_plan.total)
        return {"temp": extra, "argument": self.budget_plan.total, "output": 0, "alias": 0}
    return compiled_memory


def test_a_module_plans_again_when_its_compiled_step_holds_more_than_the_budget(
        monkeypatch, caplog):
    """The budget bounds the program that runs: where XLA's step holds more
    than the budget, init_optimizer plans again to the plan's total less the
    excess; where no plan gets there it raises, naming the smallest program,
    unless allow_over_budget (then it warns)."""
    net = conv_net()
    descs = ([sg.io.DataDesc("data", FIT_SHAPES["data"], "float64")],
             [sg.io.DataDesc("softmax_label", (8,), "float64")])
    budget = no_recompute_total(net)  # the plan fits without recompute
    calls: list = []
    monkeypatch.setattr(sg.mod.Module, "compiled_memory",
                        _holding_more(int(0.1 * budget), calls))
    mod = sg.mod.Module(net, memory_budget=budget)
    mod.bind(*descs)
    mod.init_params(sg.init.Xavier(), seed=0)
    assert mod.budget_plan.recompute == []
    with caplog.at_level("WARNING"):
        mod.init_optimizer(optimizer="sgd", optimizer_params={"momentum": 0.9})
    p = mod.budget_plan
    assert calls == [budget, p.total]
    assert p.recompute and p.total + int(0.1 * budget) <= budget
    assert mod._programs.recompute == tuple(r["name"] for r in p.recompute)
    assert "memory_budget" not in caplog.text

    monkeypatch.setattr(sg.mod.Module, "compiled_memory", _holding_more(budget, calls))
    for allow in (False, True):
        calls.clear()
        mod = sg.mod.Module(net, memory_budget=budget, allow_over_budget=allow)
        mod.bind(*descs)
        mod.init_params(sg.init.Xavier(), seed=0)
        if not allow:
            with pytest.raises(BudgetError, match="no program holds it") as info:
                mod.init_optimizer(optimizer="sgd", optimizer_params={"momentum": 0.9})
            assert info.value.smallest == 2 * budget and "\n" not in str(info.value)
        else:
            with caplog.at_level("WARNING"):
                mod.init_optimizer(optimizer="sgd", optimizer_params={"momentum": 0.9})
            assert "the smallest step XLA compiled holds" in caplog.text
        assert len(calls) == 1  # the excess is more than any plan can give up


@pytest.mark.parametrize("budget", ["6 apples", "-1", "abc", 0])
def test_module_refuses_a_malformed_budget_at_once(budget):
    with pytest.raises(BudgetError, match="budget") as info:
        sg.mod.Module(conv_net(), memory_budget=budget)
    assert "\n" not in str(info.value)


def test_a_budget_nothing_fits_is_one_line_at_bind_and_init_optimizer():
    net = conv_net()
    descs = ([sg.io.DataDesc("data", FIT_SHAPES["data"], "float64")],
             [sg.io.DataDesc("softmax_label", (8,), "float64")])
    mod = sg.mod.Module(net, memory_budget=1000)
    with pytest.raises(BudgetError, match="smallest total reachable") as info:
        mod.bind(*descs)
    assert "\n" not in str(info.value) and info.value.budget == 1000
    # fits without optimizer state, not with Adam's two moments
    fixed = no_recompute_total(net, None)
    smallest = sg.plan(net, FIT_SHAPES, train=True, dtypes=F64, optimizer="adam",
                       recompute="solver").total
    budget = smallest - 1
    assert no_recompute_total(net, "sgd") > budget or fixed > budget
    mod = sg.mod.Module(net, memory_budget=budget)
    mod.bind(*descs)
    mod.init_params(sg.init.Xavier())
    # no plan fits: the program without recompute is compiled, and holds more
    with pytest.raises(BudgetError, match="no program holds it") as info:
        mod.init_optimizer(optimizer="adam")
    assert "\n" not in str(info.value) and info.value.smallest > budget


def test_a_budget_no_plan_fits_runs_the_step_without_recompute_where_its_program_fits(
        monkeypatch, caplog):
    """XLA recomputes cheap ops of its own accord, so the step without
    recompute can hold less than the smallest plan: where its program fits
    the budget by XLA's figure (a stand-in here, nothing compiled), a
    Module runs it (nothing recomputed) and does not refuse the budget;
    where it does not, BudgetError names that footprint and the budget,
    unless ``allow_over_budget``: then it runs with a warning."""
    net = conv_net()
    descs = ([sg.io.DataDesc("data", FIT_SHAPES["data"], "float64")],
             [sg.io.DataDesc("softmax_label", (8,), "float64")])
    plain = sg.plan(net, FIT_SHAPES, train=True, dtypes=F64, optimizer="momentum")
    with pytest.raises(BudgetError) as info:
        sg.plan(net, FIT_SHAPES, train=True, dtypes=F64, optimizer="momentum",
                recompute="mirror", budget=1000)
    smallest = info.value.smallest
    held = int(0.8 * smallest)  # the program without recompute: below every plan
    calls: list = []

    def compiled_memory(self):  # XLA's figure, stood in
        calls.append(self.budget_plan.total)
        return {"temp": 0, "argument": held, "output": 0, "alias": 0}

    def module(budget, **kw):
        mod = sg.mod.Module(net, memory_budget=budget, recompute="mirror", **kw)
        mod.bind(*descs)
        mod.init_params(sg.init.Xavier(), seed=0)
        mod.init_optimizer(optimizer="sgd", optimizer_params={"momentum": 0.9})
        return mod

    monkeypatch.setattr(sg.mod.Module, "compiled_memory", compiled_memory)
    with caplog.at_level("WARNING"):
        mod = module((held + smallest) // 2)
    assert mod.budget_plan.recompute == [] and mod._programs.recompute == ()
    assert mod.budget_plan.total == plain.total and calls == [plain.total]
    assert "memory_budget" not in caplog.text

    # below the program's footprint: refused, naming it and the budget
    with pytest.raises(BudgetError, match="no program holds it") as info:
        module(held - 1)
    assert info.value.smallest == held and info.value.budget == held - 1
    assert "allow_over_budget=True" in str(info.value)
    with caplog.at_level("WARNING"):
        mod = module(held - 1, allow_over_budget=True)
    assert mod.budget_plan.recompute == [] and "memory_budget" in caplog.text


def test_simple_bind_under_a_budget_gives_the_gradients_of_the_plain_executor():
    net = conv_net()
    shapes = FIT_SHAPES
    budget = int(0.85 * no_recompute_total(net, None))
    ex0 = net.simple_bind(sg.cpu(), type_dict=F64, **shapes)
    ex1 = net.simple_bind(sg.cpu(), type_dict=F64, memory_budget=budget, **shapes)
    assert ex1.budget_plan.recompute and ex1.budget_plan.total <= budget
    rng = np.random.default_rng(2)
    for name, arr in ex0.arg_dict.items():
        v = rng.integers(0, 3, size=arr.shape).astype(np.float64) if name.endswith("label") \
            else rng.normal(size=arr.shape)
        arr[:] = v
        ex1.arg_dict[name][:] = v
    for ex in (ex0, ex1):
        ex.forward(is_train=True)
        ex.backward()
    for a, b in zip(ex0.outputs, ex1.outputs):
        np.testing.assert_allclose(b.asnumpy(), a.asnumpy(), rtol=1e-10)
    for k, g in ex0.grad_dict.items():
        np.testing.assert_allclose(ex1.grad_dict[k].asnumpy(), g.asnumpy(), rtol=1e-10,
                                   atol=1e-12)
    assert np.abs(ex0.grad_dict["c1_weight"].asnumpy()).max() > 0


# -- XLA keeps it: the compiled program's temp follows the budgeted plan ---------------
def mlp(layers=12, hidden=256):
    h = S.Variable("data")
    for i in range(layers):
        h = S.FullyConnected(h, num_hidden=hidden, name=f"fc{i}")
        h = S.Activation(h, act_type="relu", name=f"relu{i}")
    return S.LinearRegressionOutput(h, name="loss")


# (net, shapes, budget as a fraction of the total without recompute); the
# activations dominate the weights, whose copies XLA makes for the donated
# update with or without recompute
XLA_CASES = {
    "mlp": (lambda: mlp(), {"data": (1024, 256), "loss_label": (1024, 256)}, 0.8),
    "resnet": (lambda: resnet((3, 3), (16, 16, 32), 10, (3, 32, 32), bottle_neck=False),
               {"data": (16, 3, 32, 32), "softmax_label": (16,)}, 0.5),
}


def temp(plan, **kw):
    return xla.memory(xla.training_step(plan, **kw))["temp"]


@pytest.mark.parametrize("case", sorted(XLA_CASES))
def test_the_budgeted_program_holds_what_the_budgeted_plan_says(case, monkeypatch):
    make, shapes, frac = XLA_CASES[case]
    net = make()
    plain = sg.plan(net, shapes, train=True)
    p = sg.plan(net, shapes, train=True, budget=int(frac * plain.total))
    assert p.recompute and p.internal["arena"] < plain.internal["arena"]
    kept = temp(p, segments=None)  # the one fused program
    without = temp(p, recompute=[])
    print(f"{case}: plan {p.internal['arena']:,} (no recompute {plain.internal['arena']:,}); "
          f"XLA temp {kept:,}, without recompute {without:,}")
    assert kept <= 1.1 * p.internal["arena"]
    assert kept < without
    # what the tie is for: untied, XLA merges clones with their originals
    # (CSE) or computes them early, and holds more
    monkeypatch.setattr(lower_mod, "CLONE_TIE", None)
    untied = temp(p, segments=None)
    print(f"  untied {untied:,}")
    assert untied > 1.1 * kept


def test_data_parallel_module_under_a_budget_equals_the_plain_one():
    """Two devices: the budget is planned at the per-device batch and the
    recomputing step, summed over the devices, is the plain one."""
    net = conv_net()
    per_device = {"data": (4,) + FIT_SHAPES["data"][1:], "softmax_label": (4,)}
    budget = int(0.85 * sg.plan(net, per_device, train=True, dtypes=F64,
                                optimizer="momentum").total)
    rng = np.random.default_rng(3)
    batch = sg.io.DataBatch([rng.normal(size=FIT_SHAPES["data"])],
                            [rng.integers(0, 3, size=8).astype(np.float64)])
    mods = []
    for kw in ({}, {"memory_budget": budget}):
        mod = sg.mod.Module(net, context=[sg.cpu(0), sg.cpu(1)], **kw)
        mod.bind([sg.io.DataDesc("data", FIT_SHAPES["data"], "float64")],
                 [sg.io.DataDesc("softmax_label", (8,), "float64")])
        mod.init_params(sg.init.Xavier(magnitude=2.0), seed=0)
        mod.init_optimizer(optimizer="sgd",
                           optimizer_params={"learning_rate": 0.1, "momentum": 0.9})
        mod.train_step(batch)
        mods.append(mod)
    assert mods[1].budget_plan.recompute and mods[1].budget_plan.total <= budget
    assert mods[1].budget_plan.shapes["data"][0] == 4
    for a, b in zip(mods[0].get_params(), mods[1].get_params()):
        for k in a:
            np.testing.assert_allclose(b[k].asnumpy(), a[k].asnumpy(), rtol=1e-10, atol=1e-12)
