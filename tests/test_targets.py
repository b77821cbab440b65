"""Targets: memory figures for a GPU compiled deviceless on this CPU machine.

The CUDA plugin (the ``gpu-plan`` extra, installed by .ci/run) compiles a
program for a GPU description without a GPU; these tests check the figures
against counts made by hand and a hand-written plain-JAX program, that the
target is named everywhere a figure is shown, and that bad targets get one
clear line.
"""
import json

import jax
import jax.numpy as jnp
import pytest

import symgraph as sg
from symgraph import targets, xla
from symgraph.cli import main

MIB = 2 ** 20
B, IN, H, OUT = 256, 784, 1024, 10


def mlp():
    x = sg.sym.Variable("data")
    x = sg.sym.Activation(sg.sym.FullyConnected(x, num_hidden=H, name="fc1"), act_type="relu",
                          name="relu1")
    x = sg.sym.Activation(sg.sym.FullyConnected(x, num_hidden=H, name="fc2"), act_type="relu",
                          name="relu2")
    return sg.sym.SoftmaxOutput(sg.sym.FullyConnected(x, num_hidden=OUT, name="fc3"),
                                name="softmax")


def small_convnet():
    x = sg.sym.Variable("data")
    x = sg.sym.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=16, name="conv1")
    x = sg.sym.Activation(x, act_type="relu", name="relu1")
    x = sg.sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool1")
    x = sg.sym.FullyConnected(x, num_hidden=10, name="fc")
    return sg.sym.SoftmaxOutput(x, name="softmax")


@pytest.fixture(scope="module")
def mlp_plan():
    return sg.plan(mlp(), {"data": (B, IN)}, train=True)


# --------------------------------------------------------------------------
# naming a target
# --------------------------------------------------------------------------
def test_shipped_descriptions_name_their_device_and_memory():
    h100 = targets.get("h100")
    assert h100.backend == "gpu" and h100.deviceless
    assert h100.device == "NVIDIA H100 80GB HBM3" and h100.memory == 84942979072
    assert targets.get("h100-sxm-80gb").config == h100.config
    assert targets.get("a100-40gb").memory < targets.get("a100").memory
    l4 = targets.get("l4")
    assert l4.memory == 24152899584 and l4.pool == int(l4.memory * 0.75)
    assert targets.get(None) == targets.get("cpu") and not targets.get("cpu").deviceless
    assert targets.get(h100) is h100


def test_pool_follows_jax_preallocation_fraction(monkeypatch):
    monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.5")
    t = targets.get("a100")
    assert t.pool == t.memory // 2


def test_unknown_target_suggests_a_name():
    with pytest.raises(targets.TargetError, match="did you mean 'h100'"):
        targets.get("h10")


def test_a_user_description_file(tmp_path):
    text = targets.get("l4").config.replace('"NVIDIA L4"', '"My card"').replace(
        "device_memory_size: 24152899584", "device_memory_size: 12000000000")
    f = tmp_path / "mine.txtpb"
    f.write_text(text)
    t = targets.get(str(f))
    assert t.device == "My card" and t.memory == 12000000000 and t.deviceless


def test_a_description_that_does_not_parse_names_the_field(tmp_path):
    f = tmp_path / "bad.txtpb"
    f.write_text("gpu_device_info { core_count: 3 no_such_field: 1 }\n")
    with pytest.raises(targets.TargetError, match="does not parse.*no_such_field"):
        targets.get(str(f))
    with pytest.raises(targets.TargetError, match="no such description file"):
        targets.get(str(tmp_path / "missing.txtpb"))


def test_missing_plugin_names_the_extra(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "jax_plugins.xla_cuda12", None)  # import fails
    targets._mesh.cache_clear()
    try:
        with pytest.raises(targets.TargetError, match=r"pip install 'symgraph\[gpu-plan\]'"):
            targets.get("a100-40gb")
    finally:
        targets._mesh.cache_clear()


def test_a_program_compiled_for_the_cpu_is_refused():
    """The trap: lowering for 'cuda' without the topology's shardings
    compiles for the CPU without a word."""
    def f(w, x):
        return jnp.tanh(x @ w)
    args = (jax.ShapeDtypeStruct((64, 32), jnp.float32),
            jax.ShapeDtypeStruct((8, 64), jnp.float32))
    compiled = jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",)).compile()
    assert targets.compiled_platform(compiled) == "cpu"
    with pytest.raises(targets.TargetError, match="compiled for the CPU, not the GPU"):
        targets.get("h100").check(compiled)
    with targets.get("h100").scope():
        on_gpu = jax.jit(f).lower(*args).compile()
    assert targets.compiled_platform(on_gpu) == "gpu"


# --------------------------------------------------------------------------
# figures
# --------------------------------------------------------------------------
def test_mlp_gpu_temp_against_a_count_by_hand(mlp_plan):
    """fit step of 784-1024-1024-10 at batch 256 on the H100: at its busiest
    step the backward holds relu1's output (kept for fc2's weight gradient),
    the gradient reaching fc2 and the one leaving it, [256, 1024] float32
    each; a gemm without autotuning may split its reduction into up to 4
    partial [256, 1024] outputs. Nothing else of size is alive: the momentum
    update is fused into the gradient gemms' consumers."""
    m = xla.plan_memory(mlp_plan, target="h100")
    act = B * H * 4
    assert 3 * act <= m["temp"] <= 3 * act + 4 * act + 64 * 1024
    assert m["program"]["backend"] == "gpu" and m["program"]["target"]["name"] == "h100"
    assert m["program"]["measures"] == []
    cpu = xla.plan_memory(mlp_plan, target="cpu")
    assert cpu["program"]["target"]["backend"] == "cpu" and "fit" not in cpu


def test_mlp_gpu_temp_beside_plain_jax(mlp_plan):
    """symgraph's step against the same MLP written with jax.numpy and
    jax.grad, both compiled deviceless for the H100 (SGD with momentum,
    parameters and state donated)."""
    def step(params, moms, x, y):
        def loss(p):
            h = jax.nn.relu(x @ p["w1"].T + p["b1"])
            h = jax.nn.relu(h @ p["w2"].T + p["b2"])
            logp = jax.nn.log_softmax(h @ p["w3"].T + p["b3"])
            return -jnp.sum(jax.nn.one_hot(y, OUT) * logp) / B
        g = jax.grad(loss)(params)
        moms = jax.tree.map(lambda m, g: 0.9 * m - 0.01 * g, moms, g)
        return jax.tree.map(jnp.add, params, moms), moms

    sds = jax.ShapeDtypeStruct
    params = {"w1": sds((H, IN), jnp.float32), "b1": sds((H,), jnp.float32),
              "w2": sds((H, H), jnp.float32), "b2": sds((H,), jnp.float32),
              "w3": sds((OUT, H), jnp.float32), "b3": sds((OUT,), jnp.float32)}
    lowered = jax.jit(step, donate_argnums=(0, 1))
    with targets.get("h100").scope():
        plain = lowered.lower(params, params, sds((B, IN), jnp.float32),
                              sds((B,), jnp.int32)).compile()
    targets.get("h100").check(plain)
    ours = xla.plan_memory(mlp_plan, target="h100")["temp"]
    assert ours <= 1.05 * plain.memory_analysis().temp_size_in_bytes + 64 * 1024


def test_gpu_target_gets_no_cpu_measures():
    """The CPU rule gives a conv net channels_last and XLA:CPU options; a
    GPU compile gets neither: the anchor alone, tied by a barrier."""
    p = sg.plan(small_convnet(), {"data": (8, 3, 16, 16)}, train=True)
    cpu = xla.training_step(p, target="cpu")
    gpu = xla.training_step(p, target="h100")
    assert "channels_last" in cpu.info["measures"] and cpu.compiler_options
    assert gpu.info["measures"] == ["anchor"] and gpu.compiler_options == {}
    m = xla.memory(gpu)
    assert m["temp"] > 0
    assert sg.measures.lower_options(("anchor",), "gpu")["anchor_tie"] == "barrier"
    assert sg.measures.lower_options(("anchor",), "cpu")["anchor_tie"] == "add"
    pi = sg.plan(small_convnet(), {"data": (8, 3, 16, 16)})
    # inference: its FullyConnected's gemm unsplit, a GPU compiler option
    infer = xla.inference_step(pi, target="h100")
    assert infer.info["measures"] == ["no_split_k"]
    assert infer.compiler_options == sg.measures.NO_SPLIT_K_OPTIONS


def test_barrier_tie_keeps_values_and_leaves_variables():
    """The GPU anchor's tie passes every value through unchanged (NaN in
    the gradient included, which ``x + g[0]*0`` would spread) and does not
    touch variables."""
    from symgraph.lower import barrier_to_first
    g = jnp.array([[jnp.nan, 1.0]])
    x = jnp.arange(6.0).reshape(2, 3)
    w = jnp.ones((3, 3))
    out = jax.jit(lambda g, x, w: barrier_to_first([g, x, w], [False, False, True]))(g, x, w)
    assert jnp.array_equal(out[1], x) and jnp.array_equal(out[2], w)
    text = jax.jit(lambda g, x, w: barrier_to_first([g, x, w], [False, False, True])).lower(
        g, x, w).as_text()
    assert "optimization_barrier" in text


def test_sg_plan_with_a_target_reports_it():
    p = sg.plan(small_convnet(), {"data": (8, 3, 16, 16)}, train=True, target="l4")
    prog = p.xla["program"]
    assert prog["target"]["device"] == "NVIDIA L4" and prog["target"]["deviceless"]
    fit = p.xla["fit"]
    # a convolution: the workspace allowance a deviceless figure leaves out
    assert fit["allowance"] == targets.WORKSPACE_LIMIT and fit["fits"]
    assert fit["need"] == fit["footprint"] + fit["allowance"]
    text = p.report()
    assert "NVIDIA L4 (l4" in text and "compiled deviceless" in text
    assert "fits on one NVIDIA L4" in text


def test_does_not_fit_says_by_how_much(tmp_path):
    text = targets.get("l4").config.replace("device_memory_size: 24152899584",
                                            "device_memory_size: 1000000")
    f = tmp_path / "tiny.txtpb"
    f.write_text(text)
    p = sg.plan(mlp(), {"data": (B, IN)}, train=True, target=str(f))
    assert not p.xla["fit"]["fits"] and p.xla["fit"]["allowance"] == 0  # no convolution
    assert "does not fit on one NVIDIA L4" in p.report()


def test_module_compiled_memory_for_a_target():
    mod = sg.Module(mlp(), context=sg.cpu())
    mod.bind(data_shapes=[("data", (B, IN))], label_shapes=[("softmax_label", (B,))])
    mod.init_params()
    mod.init_optimizer(optimizer="sgd", optimizer_params={"momentum": 0.9})
    here = mod.compiled_memory()
    gpu = mod.compiled_memory(target="h100")
    assert gpu["program"]["target"]["name"] == "h100" and gpu["program"]["backend"] == "gpu"
    assert gpu["argument"] == here["argument"]  # the same arrays, another device
    assert gpu["temp"] != here["temp"]
    assert gpu["fit"]["fits"]


def test_budgeted_small_resnet_holds_on_the_gpu():
    """A budget at half the internal bytes: the program a Module runs under
    it (``fit_budget``: the plan, then planned again to XLA's excess),
    compiled for the H100, stays at or under the budget. The plan's own
    program does not (XLA:GPU holds a few percent more than the plan): the
    feedback is what holds it."""
    net = sg.models.get_model("resnet-cifar-20")
    shapes = {"data": (32, 3, 32, 32)}
    full = sg.plan(net, shapes, train=True, optimizer="momentum")
    budget = full.total - full.internal["arena"] // 2
    p, m, fits = xla.fit_budget(net, shapes, budget, target="h100", optimizer="momentum")
    assert fits and p.recompute
    assert m["program"]["backend"] == "gpu"
    assert xla.footprint(m) <= budget


# --------------------------------------------------------------------------
# the command line
# --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def conv_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("targets") / "conv.json"
    path.write_text(small_convnet().tojson())
    return str(path)


def test_plan_target_json(capsys, conv_file):
    code = main(["plan", conv_file, "--shape", "data=8,3,16,16", "--train", "--target",
                 "h100", "--json"])
    out, err = capsys.readouterr()
    assert code == 0
    doc = json.loads(out)
    t = doc["xla"]["program"]["target"]
    assert t["name"] == "h100" and t["deviceless"] and t["backend"] == "gpu"
    assert doc["xla"]["fit"]["fits"] and "predicted" not in doc


@pytest.mark.parametrize("argv, message", [
    (["--target", "h10"], "did you mean 'h100'"),
    (["--target", "nothing.txtpb"], "no such description file"),
    (["--target", "h100", "--no-xla"], "drop --no-xla"),
])
def test_plan_bad_target_one_line_exit_2(capsys, conv_file, argv, message):
    code = main(["plan", conv_file, "--shape", "data=8,3,16,16", "--train", *argv])
    out, err = capsys.readouterr()
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_max_batch_on_a_gpu_is_the_largest_whose_program_fits(capsys, conv_file):
    budget = 24 * MIB
    code = main(["max-batch", conv_file, "--shape", "data=1,3,16,16", "--train",
                 "--target", "h100", "--budget", str(budget), "--json"])
    out, err = capsys.readouterr()
    assert code == 0
    r = json.loads(out)
    assert r["target"]["name"] == "h100" and r["xla"] <= budget
    # the next batch up, by the same compile, does not fit
    p = sg.plan(sg.sym.load_json(open(conv_file).read()),
                {"data": (r["batch"] + 1, 3, 16, 16)}, train=True)
    from symgraph.memory.maxbatch import xla_footprint
    assert xla_footprint(p, target="h100") > budget


def test_max_batch_needs_a_budget_on_the_cpu(capsys, conv_file):
    code = main(["max-batch", conv_file, "--shape", "data=1,3,16,16", "--train"])
    out, err = capsys.readouterr()
    assert code == 2 and "--budget is required" in err
