"""sg.max_batch / `symgraph max-batch` (the largest batch that fits a budget)."""
import json
import os

import pytest

import symgraph as sg
from symgraph import xla
from symgraph.cli import main
from symgraph.memory.budget import BudgetError
from symgraph.memory.maxbatch import MaxBatch, max_batch, plan_total

MIB = 2 ** 20


def conv_net():
    """A small conv net with BatchNorm, max pooling and a Concat."""
    data = sg.sym.Variable("data")
    x = sg.sym.Convolution(data, kernel=(3, 3), pad=(1, 1), num_filter=8, name="c1")
    x = sg.sym.BatchNorm(x, name="bn1")
    x = sg.sym.Activation(x, act_type="relu", name="r1")
    x = sg.sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max", name="p1")
    a = sg.sym.Convolution(x, kernel=(1, 1), num_filter=8, name="ca")
    a = sg.sym.Activation(sg.sym.BatchNorm(a, name="bna"), act_type="relu", name="ra")
    b = sg.sym.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=8, name="cb")
    b = sg.sym.Activation(sg.sym.BatchNorm(b, name="bnb"), act_type="relu", name="rb")
    x = sg.sym.Concat(a, b, dim=1, name="cat")
    x = sg.sym.FullyConnected(sg.sym.Flatten(x), num_hidden=10, name="fc")
    return sg.sym.SoftmaxOutput(x, name="softmax")


SHAPE = {"data": (1, 3, 16, 16)}


def total_at(net, batch, train=True, optimizer=None):
    """The total of the plan without recompute at a batch."""
    shapes = {"data": (batch, 3, 16, 16)}
    return plan_total(sg.plan(net, shapes, train=train), optimizer)


def fits(net, batch, budget, optimizer=None):
    """Whether a budgeted training plan (recompute allowed) fits at a batch."""
    try:
        p = sg.plan(net, {"data": (batch, 3, 16, 16)}, train=True, budget=budget,
                    optimizer=optimizer)
    except BudgetError:
        return False
    return p.total <= budget


@pytest.mark.parametrize("train", [True, False])
def test_without_recompute_the_found_batch_fits_and_the_next_does_not(train):
    net = conv_net()
    budget = total_at(net, 37, train)  # batch 37 fits exactly: the answer is 37
    r = max_batch(net, SHAPE, budget, train=train, recompute=False, xla=False,
                  progress=False)
    assert isinstance(r, MaxBatch) and r.batch == 37 and r.xla is None and not r.recompute
    assert r.total == total_at(net, 37, train) <= budget
    assert total_at(net, 38, train) > budget
    r = max_batch(net, SHAPE, budget - 1, train=train, recompute=False, xla=False,
                  progress=False)
    assert r.batch == 36 and total_at(net, 36, train) <= budget - 1


def test_with_recompute_the_found_batch_fits_and_the_next_does_not():
    net = conv_net()
    budget = total_at(net, 37)
    r = max_batch(net, SHAPE, budget, xla=False, progress=False)
    n = max_batch(net, SHAPE, budget, recompute=False, xla=False, progress=False)
    assert r.batch >= n.batch == 37
    assert fits(net, r.batch, budget) and not fits(net, r.batch + 1, budget)
    assert r.total <= budget
    if r.batch > 37:  # more than the plan without recompute: something recomputed
        assert r.recompute and all({"name", "bytes", "flops"} <= set(x) for x in r.recompute)


def test_any_given_batch_and_the_optimizer_state():
    net = conv_net()
    budget = 24 * MIB
    a = max_batch(net, {"data": (5, 3, 16, 16)}, budget, xla=False, progress=False)
    b = max_batch(net, SHAPE, budget, xla=False, progress=False)
    assert a.batch == b.batch
    # momentum keeps one more copy of the parameters, Adam two: never a larger batch
    m = max_batch(net, SHAPE, budget, optimizer="momentum", recompute=False, xla=False,
                  progress=False)
    adam = max_batch(net, SHAPE, budget, optimizer="adam", recompute=False, xla=False,
                     progress=False)
    plain = max_batch(net, SHAPE, budget, recompute=False, xla=False, progress=False)
    assert adam.batch <= m.batch <= plain.batch
    assert total_at(net, m.batch, optimizer="momentum") <= budget
    assert total_at(net, m.batch + 1, optimizer="momentum") > budget
    p = sg.plan(net, SHAPE, train=True)
    assert plan_total(p, "adam") - plan_total(p) == 2 * p.buckets["gradients"]


def _sgd_footprint(net, batch):
    """XLA's figure of the SGD training step at ``batch``, compiled here
    (not through max_batch's helpers)."""
    p = sg.plan(net, {"data": (batch, 3, 16, 16)}, train=True)
    return xla.footprint(xla.memory(xla.training_step(p, optimizer=sg.optimizer.create("sgd"))))


def test_xla_decides_down_or_up():
    net = conv_net()
    budget = total_at(net, 24)
    r = max_batch(net, SHAPE, budget, recompute=False, progress=False)
    assert r.plan_batch == 24 and r.xla is not None and r.xla <= budget
    assert r.xla == _sgd_footprint(net, r.batch) <= budget < _sgd_footprint(net, r.batch + 1)
    if r.batch < 24:
        assert any("stepped down" in n for n in r.notes)
    elif r.batch > 24:
        assert any("searched up" in n for n in r.notes)


def test_the_largest_batch_whose_program_fits_and_a_module_runs_it():
    """A residual net whose program holds less than its plan (XLA
    recomputes cheap ops of its own accord): the plans stop at batch 16,
    the program fits further; the answer is the largest batch whose program
    fits (the next one's, compiled here, does not), and a Module under the
    same budget binds and compiles that batch without refusing it."""
    from symgraph.models.resnet import resnet
    net = resnet((2, 2), (8, 8, 16), 10, (3, 16, 16), bottle_neck=False)
    budget = total_at(net, 16)
    r = max_batch(net, SHAPE, budget, recompute=False, progress=False)
    assert r.plan_batch == 16 < r.batch
    assert r.xla == _sgd_footprint(net, r.batch) <= budget < _sgd_footprint(net, r.batch + 1)
    assert any("searched up" in n for n in r.notes)
    mod = sg.mod.Module(net, memory_budget=budget)
    mod.bind([sg.io.DataDesc("data", (r.batch, 3, 16, 16))],
             [sg.io.DataDesc("softmax_label", (r.batch,))])
    mod.init_params(sg.init.Xavier())
    mod.init_optimizer(optimizer="sgd")
    assert xla.footprint(mod.compiled_memory()) <= budget


def test_batch_1_not_fitting_names_the_smallest_total():
    with pytest.raises(sg.PlanError, match="even batch 1 does not fit.*smallest total"):
        max_batch(conv_net(), SHAPE, 1000, xla=False, progress=False)


@pytest.fixture(scope="module")
def net_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("maxbatch") / "conv.json"
    path.write_text(conv_net().tojson())
    return str(path)


def run(capsys, *argv):
    code = main(["max-batch", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_json_keys(capsys, net_file):
    code, out, err = run(capsys, net_file, "--shape", "data=1,3,16,16", "--train",
                         "--budget", "24MiB", "--no-xla", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert set(doc) == {"batch", "total", "recompute", "xla", "budget", "plan_batch", "train",
                        "notes", "target"}
    assert doc["target"]["name"] == "cpu"
    assert doc["budget"] == 24 * MIB and doc["xla"] is None and doc["train"] is True
    assert doc["total"] <= doc["budget"] and isinstance(doc["recompute"], list)
    assert doc["batch"] == max_batch(conv_net(), SHAPE, 24 * MIB, xla=False,
                                     progress=False).batch


def test_cli_text(capsys, net_file):
    code, out, _ = run(capsys, net_file, "--shape", "data=1,3,16,16", "--budget", "4MiB")
    assert code == 0 and out.startswith("max batch: ") and "XLA's figure at batch" in out


@pytest.mark.parametrize("argv, message", [
    (["--budget", "1000"], "even batch 1 does not fit the budget of 1,000 bytes"),
    (["--budget", "6 apples"], "give bytes"),
    (["--budget", "-1"], "give bytes"),
    (["--budget", "abc"], "give bytes"),
    (["--budget", "0"], "give bytes"),
])
def test_cli_errors_exit_2_with_one_line(capsys, net_file, argv, message):
    code, out, err = run(capsys, net_file, "--shape", "data=1,3,16,16", "--train",
                         "--no-xla", *argv)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and message in err, err


def test_cli_needs_shape_and_budget(capsys, net_file):
    code, _, err = run(capsys, net_file, "--budget", "1GiB")
    assert code == 2 and "--shape is required" in err and len(err.splitlines()) == 1
    code, _, err = run(capsys, net_file, "--shape", "data=1,3,16,16")
    assert code == 2 and "--budget" in err and len(err.splitlines()) == 1


def test_residual_inference_runs_one_convolution_per_library_call():
    """A residual net's inference program asks YNNPACK for one convolution
    per call (the ``single_op`` measure, in the rule): left to itself
    YNNPACK runs resnet-cifar-20's last stage as one call holding all the
    stage's weight copies at once, holding more than with the measure."""
    net = sg.models.get_model("resnet-cifar-20", image_shape=(3, 32, 32))
    p = sg.plan(net, {"data": (8, 3, 32, 32)}, train=False)
    step = xla.plan_step(p)
    assert "single_op" in step.info["measures"]
    fig = xla.footprint(xla.memory(step))
    chained = xla.footprint(xla.memory(xla.plan_step(p, measures=("scheduler",))))
    assert fig < 0.95 * chained, (fig, chained)


def test_xla_above_the_budget_steps_the_batch_down(monkeypatch):
    """XLA's figure stood in by a function of the batch (no compile): the
    batch steps down until the figure fits, and the notes say so."""
    from symgraph.memory import maxbatch
    net = conv_net()
    budget = total_at(net, 40)
    seen = []

    def figure(plan, optimizer=None, target=None):
        b = plan.shapes["data"][0]
        seen.append(b)
        return budget + (b - 30) * 1000  # above the budget above batch 30
    monkeypatch.setattr(maxbatch, "xla_footprint", figure)
    r = max_batch(net, SHAPE, budget, recompute=False, progress=False)
    assert r.plan_batch == 40 and r.batch == 30 and r.xla == budget
    # down to 30, then one up: batch 31's program does not fit
    assert seen[0] == 40 and seen[-2:] == [30, 31] and len(seen) <= 12
    assert any("stepped down to batch 30" in n for n in r.notes)
    # batch 1 fits the plans but not XLA's figure: a BudgetError naming it
    monkeypatch.setattr(maxbatch, "xla_footprint", lambda p, o=None, t=None: budget + 1)
    with pytest.raises(BudgetError, match="XLA's program needs"):
        max_batch(net, SHAPE, budget, recompute=False, progress=False)


@pytest.mark.parametrize("axis", ["0", 0.0, True, None])
def test_a_batch_axis_that_is_not_an_int_is_one_line(axis):
    with pytest.raises(sg.PlanError, match="batch_axis must be an int axis"):
        max_batch(conv_net(), SHAPE, 10 ** 9, xla=False, progress=False, batch_axis=axis)


def test_the_limit_stops_the_search():
    r = max_batch(conv_net(), SHAPE, 10 ** 12, recompute=False, xla=False, progress=False,
                  limit=16)
    assert r.batch == 16 and any("limit" in n for n in r.notes)


def test_plan_report_prints_the_programs_footprint(capsys, tmp_path):
    """The report's footprint line is XLA's figure of the program a Module
    runs (compiled here independently); --no-xla says nothing was compiled."""
    path = tmp_path / "mlp.json"
    path.write_text(sg.models.get_model("mlp").tojson())
    assert main(["plan", str(path), "--shape", "data=8,1,28,28", "--train"]) == 0
    out = capsys.readouterr().out
    p = sg.plan(sg.models.get_model("mlp"), {"data": (8, 1, 28, 28)}, train=True)
    fig = xla.footprint(xla.memory(xla.plan_step(p)))
    line = [x for x in out.splitlines() if "footprint of the program" in x]
    assert len(line) == 1 and f"{fig / 2 ** 20:,.1f} MiB" in line[0]
    assert main(["plan", str(path), "--shape", "data=8,1,28,28", "--no-xla"]) == 0
    out = capsys.readouterr().out
    assert "footprint of the program" not in out and "xla: not computed" in out
