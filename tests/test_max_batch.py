"""sg.max_batch / `symgraph max-batch` (the largest batch that fits a budget)
and memory.predict (the footprint of the program that runs, from the plan)."""
import json
import os

import pytest

import symgraph as sg
from symgraph import xla
from symgraph.cli import main
from symgraph.memory.budget import BudgetError
from symgraph.memory.maxbatch import MaxBatch, max_batch, plan_total
from symgraph.memory.predict import predict

MIB = 2 ** 20


def conv_net():
    """A small conv net with BatchNorm, max pooling and a Concat: every
    group the prediction's rule treats differently from the plan."""
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


def test_xla_confirms_or_steps_down():
    net = conv_net()
    budget = total_at(net, 24)
    r = max_batch(net, SHAPE, budget, recompute=False, progress=False)
    assert r.plan_batch == 24 and r.xla is not None and r.xla <= budget
    p = sg.plan(net, {"data": (24, 3, 16, 16)}, train=True)
    fig = xla.footprint(xla.memory(xla.training_step(
        p, optimizer=sg.optimizer.create("sgd"))))
    if fig > budget:  # XLA's program at the plan's batch is above: stepped down, said so
        assert r.batch < 24 and any("stepped down" in n for n in r.notes)
    else:
        assert r.batch == 24 and r.xla == fig and not r.notes


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


# the rule's tolerances, as docs/memory.md states them: 5% at the zoo's
# moderate shapes (the VGG-11 below), 20% for tiny nets where a few small
# buffers XLA adds or drops are a large share
ZOO_TOLERANCE = 0.05
SMALL_TOLERANCE = 0.20


def check_prediction(net, shapes, train, tolerance):
    p = sg.plan(net, shapes, train=train)
    pr = predict(p)
    m = xla.memory(xla.plan_step(p))
    fig = xla.footprint(m)
    assert abs(pr.total / fig - 1) <= tolerance, (pr.parts, m)
    # the known parts are exact: arguments, aux and optimizer state are XLA's
    # arguments, but for scalars and the random key (training) or the labels
    # an inference program does not read
    known = pr.parts["arguments"] + pr.parts["aux"] + pr.parts["optimizer"]
    assert abs(m["argument"] - known) <= 256 + 8 * shapes["data"][0]
    if train:
        assert pr.parts["optimizer"] == p.buckets["gradients"]  # momentum: one copy


@pytest.mark.parametrize("train", [True, False])
def test_predicted_footprint_is_near_xlas(train):
    """Compile only: the prediction from the plan within the stated
    tolerance of XLA's temp + argument + output - alias."""
    net = sg.models.get_model("vgg11", image_shape=(3, 64, 64), num_classes=10)
    check_prediction(net, {"data": (4, 3, 64, 64)}, train, ZOO_TOLERANCE)


@pytest.mark.parametrize("train", [True, False])
def test_predicted_footprint_of_a_tiny_net(train):
    check_prediction(conv_net(), {"data": (8, 3, 32, 32)}, train, SMALL_TOLERANCE)


def test_training_prediction_of_a_small_resnet():
    """ResNet-v2 training at batch 8 within 5% of XLA's figure: the data's
    ``identity`` holds no buffer (``without_copies``), each unit's sum is
    kept rather than its two addends (it has two readers), and the
    convolution backwards hold their flipped weights (the old rule was
    +6.3% here)."""
    from symgraph.memory import predict as predict_mod
    net = sg.models.get_model("resnet-cifar-20", image_shape=(3, 32, 32))
    p = sg.plan(net, {"data": (8, 3, 32, 32)}, train=True)
    g = predict_mod.without_copies(p.graph)
    assert [n.name for n in p.graph.nodes if n.op is not None and n.op.name == "identity"]
    assert not [n for n in g.nodes if n.op is not None and n.op.name == "identity"]
    assert len(g.nodes) == len(p.graph.nodes) - 1
    check_prediction(net, {"data": (8, 3, 32, 32)}, True, ZOO_TOLERANCE)


def test_residual_inference_runs_one_convolution_per_library_call():
    """A residual net's inference program asks YNNPACK for one convolution
    per call (the ``single_op`` measure, in the rule): left to itself
    YNNPACK runs resnet-cifar-20's last stage as one call holding all the
    stage's weight copies at once, and XLA's figure is more than 10% over
    the prediction; with the measure it is within 5%."""
    net = sg.models.get_model("resnet-cifar-20", image_shape=(3, 32, 32))
    p = sg.plan(net, {"data": (8, 3, 32, 32)}, train=False)
    step = xla.plan_step(p)
    assert "single_op" in step.info["measures"]
    fig = xla.footprint(xla.memory(step))
    assert abs(predict(p).total / fig - 1) <= ZOO_TOLERANCE
    chained = xla.footprint(xla.memory(xla.plan_step(p, measures=("scheduler",))))
    assert predict(p).total < 0.9 * chained


def test_inference_prediction_follows_xlas_duplicated_unit_outputs(monkeypatch):
    """A ResNet-v1 unit's output (the ReLU of the shortcut sum) is stored for
    the next unit's convolution and computed again inside the next sum's
    loop, back to the stage's first unit: the convolution outputs behind it
    live to the stage's end. The rule spells that out (``duplicated``) and
    is within 5% of XLA's figure, where without it the prediction is far
    under; a v2 net, whose unit output is the sum itself, has nothing
    duplicated."""
    from symgraph.memory import predict as predict_mod
    shapes = {"data": (8, 3, 32, 32)}
    v1 = sg.plan(sg.models.get_model("resnet-v1-cifar-20", image_shape=(3, 32, 32)),
                 shapes, train=False)
    dup = predict_mod.duplicated(v1.graph, v1.inferred, False)
    assert len(dup.nodes) > len(v1.graph.nodes)
    assert "stage1_unit1_relu3_dup" in {n.name for n in dup.nodes}
    fig = xla.footprint(xla.memory(xla.plan_step(v1)))
    assert abs(predict(v1).total / fig - 1) <= ZOO_TOLERANCE
    monkeypatch.setattr(predict_mod, "duplicated", lambda g, inf, pooling: g)
    assert predict(v1).total < 0.8 * fig
    monkeypatch.undo()
    v2 = sg.plan(sg.models.get_model("resnet-cifar-20", image_shape=(3, 32, 32)), shapes,
                 train=False)
    assert predict_mod.duplicated(v2.graph, v2.inferred, False) is v2.graph


def test_inference_prediction_follows_xlas_batchnorm_loops(monkeypatch):
    """XLA writes a BatchNorm loop's output over its dying input (but not
    where the loop ends in an NCHW program's pooling) and holds each
    convolution's HWIO weight copy: with that the prediction of ResNet-18
    inference at 64x64 is within 5% of XLA's figure, without it 10% under."""
    from symgraph.memory import predict as predict_mod
    net = sg.models.get_model("resnet-18", image_shape=(3, 64, 64), num_classes=10)
    p = sg.plan(net, {"data": (8, 3, 64, 64)}, train=False)
    fig = xla.footprint(xla.memory(xla.plan_step(p)))
    assert abs(predict(p).total / fig - 1) <= ZOO_TOLERANCE
    monkeypatch.setattr(predict_mod, "_inference_as_xla_runs", lambda g, nchw: g)
    assert predict(p).total < (1 - ZOO_TOLERANCE) * fig


@pytest.mark.parametrize("train", [True, False])
def test_prediction_leaves_the_plans_graph_as_it_was(train):
    """The prediction rewrites copies of the graph (no identity, duplicated
    loops, an inplace BatchNorm): the plan's own nodes keep their ops and
    inputs, also for a BatchNorm no rewrite reaches (on the data)."""
    from symgraph.ops.registry import get_op
    x = sg.sym.BatchNorm(sg.sym.Variable("data"), name="bn0")
    x = sg.sym.Convolution(sg.sym.identity(x, name="id"), kernel=(3, 3), num_filter=4,
                           name="c")
    x = sg.sym.FullyConnected(sg.sym.Flatten(x), num_hidden=4, name="fc")
    net = sg.sym.SoftmaxOutput(x, name="softmax")
    p = sg.plan(net, {"data": (4, 3, 8, 8)}, train=train)
    before = [(n, n.op, n.inputs) for n in p.graph.nodes]
    predict(p)
    assert [(n, n.op, n.inputs) for n in p.graph.nodes] == before
    assert all(n.op is get_op(n.op.name) for n in p.graph.nodes
               if n.op is not None and not n.op.name.startswith("_backward"))


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
    assert seen[0] == 40 and seen[-1] == 30 and len(seen) <= 11
    assert any("stepped down to batch 30" in n for n in r.notes)
    # batch 1 fits the plans but not XLA's figure: a BudgetError naming it
    monkeypatch.setattr(maxbatch, "xla_footprint", lambda p, o=None, t=None: budget + 1)
    with pytest.raises(BudgetError, match="XLA's program needs"):
        max_batch(net, SHAPE, budget, recompute=False, progress=False)


def test_the_limit_stops_the_search():
    r = max_batch(conv_net(), SHAPE, 10 ** 12, recompute=False, xla=False, progress=False,
                  limit=16)
    assert r.batch == 16 and any("limit" in n for n in r.notes)


def test_prediction_on_random_nets_is_defined_and_covers_the_known_parts():
    """Every plan's report carries a prediction: on random DAGs (multi-output
    nodes, several heads, no loss) and under the planner's options it is
    made without error and is at least what the program holds for certain."""
    import random

    from symgraph.bench.randnet import random_net
    rnd = random.Random(12)
    for i in range(12):
        net, shapes = random_net(rnd, rnd.randrange(4, 30), loss=i % 2 == 0)
        for kw in ({}, {"fuse": False}, {"schedule": "memory"}):
            for train in (True, False):
                try:
                    p = sg.plan(net, shapes, train=train, **kw)
                except sg.PlanError:
                    continue  # a net with no parameters has no training plan
                pr = predict(p)
                assert pr.total == p.to_json()["predicted"] == p.predicted
                known = pr.parts["arguments"] + pr.parts["aux"] + pr.parts["optimizer"]
                assert pr.total >= known + pr.parts["outputs"] > 0
                if train:
                    # momentum state and every gradient (at least the largest)
                    assert pr.parts["optimizer"] == p.buckets["gradients"]


def test_plan_report_prints_the_prediction_beside_xlas_figure(capsys, tmp_path):
    path = tmp_path / "mlp.json"
    path.write_text(sg.models.get_model("mlp").tojson())
    assert main(["plan", str(path), "--shape", "data=8,1,28,28", "--train"]) == 0
    out = capsys.readouterr().out
    p = sg.plan(sg.models.get_model("mlp"), {"data": (8, 1, 28, 28)}, train=True)
    fig = xla.footprint(xla.memory(xla.plan_step(p)))
    line = [x for x in out.splitlines() if x.startswith("predicted footprint")]
    assert len(line) == 1 and f"{p.predicted / fig:.3f}x XLA's" in line[0]
    assert main(["plan", str(path), "--shape", "data=8,1,28,28", "--no-xla"]) == 0
    out = capsys.readouterr().out
    assert "predicted footprint" in out and "x XLA's" not in out


LIBRARY_RUN = """
import json, sys
sys.path.insert(0, sys.argv[1])
import jax
import symgraph as sg
from symgraph import xla
from symgraph.memory.predict import predict
import xla_rss
x = sg.sym.Variable("data")
y = sg.sym.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=64, name="conv")
p = sg.plan(y, {"data": (16, 64, 56, 56)}, train=False)
step = xla.plan_step(p)
r = xla_rss.run_once(step)
args = sum(a.size * a.dtype.itemsize for a in jax.tree_util.tree_leaves(step.args[:-1]))
print(json.dumps({"resident": args + r["rss_rise"], "xla": xla.footprint(r["analysis"]),
                  "library": predict(p).library}))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="Linux /proc only")
def test_predicted_resident_memory_of_a_convolution():
    """A fresh process runs one convolution (64 channels in and out, so one
    library thread whatever the machine): the resident memory it touches
    is within 10% of XLA's figure plus the library's padded input copy
    (``library_bytes``), and more than 10% over XLA's figure alone."""
    import json
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", LIBRARY_RUN, os.path.join(root, "benchmarks")],
                         check=True, capture_output=True, text=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["library"] > 0
    assert abs((r["xla"] + r["library"]) / r["resident"] - 1) <= 0.10, r
    assert r["xla"] < 0.9 * r["resident"], r


@pytest.mark.parametrize("stride", [1, 2])
def test_library_bytes_of_a_convolution_backward(stride):
    """In training the library term counts a convolution's backward: its
    weight gradient, and its input gradient where a node reads it (behind
    a BatchNorm on the data, not on the data itself, whose gradient the
    step drops); a strided one's input gradient runs in Eigen beside the
    weight gradient, so the two add up, a stride-1 one's after it. The
    FullyConnected's weight gradient runs in Eigen: its code counts once."""
    from symgraph.memory.predict import EIGEN_BASE, library_bytes, library_call_bytes
    x = sg.sym.Variable("data")
    behind_bn = sg.sym.BatchNorm(x, name="bn")
    shapes = {"data": (4, 3, 32, 32), "softmax_label": (4,)}
    args = (4, 3, 8, (3, 3), (34, 34), (32 // stride,) * 2, (stride,) * 2)

    def net(x):
        y = sg.sym.Convolution(x, kernel=(3, 3), pad=(1, 1), stride=(stride, stride),
                               num_filter=8, name="conv")
        return sg.sym.SoftmaxOutput(sg.sym.FullyConnected(y, num_hidden=2, name="fc"),
                                    name="softmax")

    def call(part):
        return library_call_bytes(part, *args, threads=2)
    on_data = sg.plan(net(x), shapes, train=True)
    assert library_bytes(on_data, threads=2, backend="cpu") == \
        max(call("fwd"), call("wgrad")) + EIGEN_BASE
    read = sg.plan(net(behind_bn), shapes, train=True)
    both = call("wgrad") + call("dgrad") - EIGEN_BASE if stride > 1 else \
        max(call("wgrad"), call("dgrad"))
    assert library_bytes(read, threads=2, backend="cpu") == max(call("fwd"), both) + EIGEN_BASE
    assert library_bytes(sg.plan(net(x), shapes, train=False), threads=2, backend="cpu") == \
        call("fwd")
    assert library_bytes(read, backend="gpu") == 0
