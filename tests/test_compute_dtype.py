"""Plans in a compute dtype: the net as a Module with ``compute_dtype``
runs it -- float inputs kept, cast down inside, the casts planned."""
import numpy as np
import pytest

import symgraph as sg
from symgraph import xla
from symgraph.errors import PlanError
from symgraph.memory.report import report_text
from symgraph.passes.cast import CAST_ATTR

B, IN, H, OUT = 32, 64, 128, 10


def mlp():
    x = sg.sym.Variable("data")
    x = sg.sym.Activation(sg.sym.FullyConnected(x, num_hidden=H, name="fc1"), act_type="relu",
                          name="relu1")
    return sg.sym.SoftmaxOutput(sg.sym.FullyConnected(x, num_hidden=OUT, name="fc2"),
                                name="softmax")


WEIGHTS = IN * H + H + H * OUT + OUT  # elements, counted by hand


def _casts(p):
    g, inf = p.graph, p.inferred
    return {n.inputs[0].node.name: (tuple(inf.shapes[g.entry_id_of_node(n)]),
                                    str(inf.dtypes[g.entry_id_of_node(n)]))
            for n in g.nodes if n.op is not None and CAST_ATTR in n.attrs}


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_every_float_input_but_the_label_is_read_through_one_cast(dtype):
    p = sg.plan(mlp(), {"data": (B, IN)}, train=True, compute_dtype=dtype)
    casts = _casts(p)
    assert casts == {"data": ((B, IN), dtype), "fc1_weight": ((H, IN), dtype),
                     "fc1_bias": ((H,), dtype), "fc2_weight": ((OUT, H), dtype),
                     "fc2_bias": ((OUT,), dtype)}
    g, inf = p.graph, p.inferred
    fc1 = next(n for n in g.nodes if n.name == "fc1")
    assert np.dtype(inf.dtypes[g.entry_id_of_node(fc1)]).itemsize == 2
    # the Module keeps float32 weights and returns float32 gradients
    assert p.buckets["arguments"] == 4 * (WEIGHTS + B * IN) + 4 * B
    assert p.buckets["gradients"] == 4 * WEIGHTS
    assert p.options["compute_dtype"] == dtype and p.to_json()["compute_dtype"] == dtype


def test_the_weight_copies_live_from_the_forward_to_the_backward():
    """A weight much larger than every activation: its bfloat16 copy is
    read by fc1's forward and again by the backward that computes the
    data's gradient through it, so the arena holds it beside what the net
    planned wholly in bfloat16 (weights as arguments) holds."""
    big_in, hidden = 4096, 4096
    x = sg.sym.FullyConnected(sg.sym.Variable("data"), num_hidden=hidden, name="fc1",
                              no_bias=True)
    net = sg.sym.LinearRegressionOutput(sg.sym.FullyConnected(x, num_hidden=1, name="fc2",
                                                              no_bias=True), name="out")
    shapes = {"data": (2, big_in)}
    cast = sg.plan(net, shapes, train=True, compute_dtype="bfloat16", wrt=["fc1_weight",
                                                                          "fc2_weight"])
    low = sg.plan(net, shapes, train=True, wrt=["fc1_weight", "fc2_weight"],
                  dtypes={"data": "bfloat16", "fc1_weight": "bfloat16",
                          "fc2_weight": "bfloat16", "out_label": "bfloat16"})
    copy = 2 * big_in * hidden
    assert cast.internal["arena"] >= low.internal["arena"] + copy
    assert cast.internal["arena"] < low.internal["arena"] + 3 * copy


def test_the_program_is_the_modules_and_the_report_says_what_was_planned():
    p = sg.plan(mlp(), {"data": (B, IN)}, train=True, compute_dtype="bfloat16")
    step = xla.plan_step(p, target="cpu")
    assert step.info["compute_dtype"] == "bfloat16"
    # the Module casts in its feeds: the program's graph has no cast nodes
    hlo = step.lower().as_text()
    assert "fc1_weight_bfloat16" not in hlo
    text = report_text(p)
    assert "computing in bfloat16: the float inputs cast down inside" in text.splitlines()[0]
    # figures of a program in another dtype than the plan say so
    f32 = sg.plan(mlp(), {"data": (B, IN)}, train=True)
    other = sg.xla.plan_on(mlp(), {"data": (B, IN)}, train=True)
    assert "compute_dtype" not in f32.to_json() and other.xla is None
    from dataclasses import replace
    mixed = replace(f32, xla=xla.plan_memory(f32, target="cpu", compute_dtype="bfloat16"))
    assert "the arena is of the net in float32, the program computes in bfloat16" in \
        report_text(mixed)


def test_module_plans_in_its_compute_dtype():
    mod = sg.mod.Module(mlp(), compute_dtype="bfloat16")
    mod.bind([sg.io.DataDesc("data", (B, IN))], [sg.io.DataDesc("softmax_label", (B,))])
    p = mod.plan_memory()
    assert set(_casts(p)) == {"data", "fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias"}
    assert p.buckets["gradients"] == 4 * WEIGHTS


def test_a_bad_compute_dtype_is_one_clear_error():
    with pytest.raises(PlanError, match="compute_dtype='int8'"):
        sg.plan(mlp(), {"data": (B, IN)}, compute_dtype="int8")
    p = sg.plan(mlp(), {"data": (B, IN)}, train=True)
    with pytest.raises(xla.XlaError, match="compute_dtype='int8'"):
        xla.plan_memory(p, target="cpu", compute_dtype="int8")


def test_aux_states_are_planned_in_the_compute_dtype_and_the_step_compiles():
    """BatchNorm reads its statistics in the dtype of its data: they stay
    aux states (not read through a cast, which would make them arguments)
    in the compute dtype, and the step a Module runs compiles from the plan."""
    x = sg.sym.Convolution(sg.sym.Variable("data"), kernel=(3, 3), num_filter=8, name="c")
    net = sg.sym.SoftmaxOutput(sg.sym.FullyConnected(
        sg.sym.BatchNorm(x, name="bn"), num_hidden=4, name="fc"), name="softmax")
    p = sg.plan(net, {"data": (2, 3, 6, 6)}, train=True, compute_dtype="bfloat16")
    assert p.graph.list_auxiliary_states() == ["bn_moving_mean", "bn_moving_var"]
    assert "bn_moving_mean" not in _casts(p)
    assert p.buckets["aux"] == 2 * 2 * 8
    assert xla.plan_memory(p, target="cpu")["program"]["compute_dtype"] == "bfloat16"


def test_a_plan_in_a_compute_dtype_recomputes_no_cast_and_its_step_compiles():
    """The casts are the Module's feeds, not nodes of its program: a plan
    in bfloat16 that recomputes never recomputes one, and the step the
    Module runs for it compiles."""
    x = sg.sym.Variable("data")
    for i in range(4):
        x = sg.sym.Activation(sg.sym.FullyConnected(x, num_hidden=H, name=f"fc{i}"),
                              act_type="relu", name=f"r{i}")
    net = sg.sym.SoftmaxOutput(sg.sym.FullyConnected(x, num_hidden=OUT, name="out"),
                               name="softmax")
    shapes = {"data": (4096, IN)}
    # the solver's least-memory set: it would take the casts, cheapest of all
    p = sg.plan(net, shapes, train=True, compute_dtype="bfloat16", recompute="solver")
    names = xla.plan_recompute(p)
    assert names and not set(names) & {n.name for n in p.graph.nodes if CAST_ATTR in n.attrs}
    assert xla.plan_memory(p, target="cpu")["program"]["recompute"] == len(names)


def test_float32_casts_nothing_as_in_the_module():
    """A Module with compute_dtype float32 (or float64) casts nothing: the
    plan is the net's own, and says nothing of a compute dtype."""
    p = sg.plan(mlp(), {"data": (B, IN)}, train=True, compute_dtype="float32")
    assert not _casts(p) and p.options["compute_dtype"] is None
    assert "computing in" not in report_text(p) and "compute_dtype" not in p.to_json()


def test_max_batch_in_a_compute_dtype_on_the_h100(tmp_path, capsys):
    """max-batch --compute-dtype bfloat16 plans and compiles each batch as
    a bfloat16 Module runs it: on the H100 description (deviceless) the
    2-byte activations fit more of a batch than float32 does."""
    from symgraph.cli import main
    from symgraph.serialize import save
    path = str(tmp_path / "mlp.json")
    save(mlp().graph(), path)
    batches = {}
    for dtype in ("float32", "bfloat16"):
        assert main(["max-batch", path, "--shape", "data=1,64", "--train", "--budget", "8MiB",
                     "--target", "h100", "--compute-dtype", dtype]) == 0
        out = capsys.readouterr().out
        batches[dtype] = int(out.split()[2])
        assert ("computing in bfloat16" in out) == (dtype == "bfloat16")
    assert batches["bfloat16"] > batches["float32"], batches
