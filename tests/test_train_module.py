"""The Module: its compiled step against plain JAX, data parallel against
one device, mixed precision, checkpoints (crash safety and exact resume),
the KVStore, and the errors users see."""
import logging
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import symgraph as sg
from symgraph import params
from symgraph.errors import BindError, SymgraphError
from symgraph.parallel import kvstore as kvs
from symgraph.train import TrainError
from helpers import train_mean_loss

S = sg.sym
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def mlp(normalization="null", dropout=False):
    x = S.FullyConnected(S.Variable("data"), num_hidden=8, name="fc1")
    x = S.Activation(x, act_type="relu", name="relu1")
    if dropout:
        x = S.Dropout(x, p=0.3, name="drop")
    x = S.FullyConnected(x, num_hidden=5, name="fc2")
    return S.SoftmaxOutput(x, name="softmax", normalization=normalization)


def cnn(bn=False):
    x = S.Convolution(S.Variable("data"), kernel=(3, 3), pad=(1, 1), num_filter=4, name="c1")
    if bn:
        x = S.BatchNorm(x, name="bn1")
    x = S.Activation(x, act_type="relu", name="r1")
    x = S.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max", name="p1")
    x = S.FullyConnected(S.Flatten(x, name="flat"), num_hidden=5, name="fc")
    return S.SoftmaxOutput(x, name="softmax")


def batches(shape, n_batches=3, batch=16, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return [sg.io.DataBatch([rng.normal(size=(batch,) + shape).astype(dtype)],
                            [rng.integers(0, 5, batch).astype(dtype)])
            for _ in range(n_batches)]


def make_module(net, shape, devices=1, batch=16, optimizer="sgd", opt_params=None,
                dtype="float64", seed=0, **kw):
    mod = sg.mod.Module(net, context=[sg.cpu(i) for i in range(devices)], **kw)
    mod.bind([sg.io.DataDesc("data", (batch,) + shape, dtype)],
             [sg.io.DataDesc("softmax_label", (batch,), dtype)])
    mod.init_params(sg.init.Xavier(), seed=seed)
    mod.init_optimizer(optimizer=optimizer,
                       optimizer_params=opt_params or {"learning_rate": 0.1, "momentum": 0.9})
    return mod


def params_of(mod):
    arg, aux = mod.get_params()
    return {k: v.asnumpy() for k, v in {**arg, **aux}.items()}


def assert_params_close(a, b, rtol=1e-10, atol=1e-12):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=rtol, atol=atol, err_msg=k)


# --------------------------------------------------------------------------
# the compiled step against plain JAX
# --------------------------------------------------------------------------
def test_backward_graph_gradients_equal_jax_grad():
    mod = make_module(mlp(), (6,))
    p = params_of(mod)
    b = batches((6,), 1)[0]
    mod.forward(b, is_train=True)
    mod.backward()
    grads = {k: v.asnumpy() for k, v in mod.get_grads().items()}

    def loss(p):  # SoftmaxOutput's gradient is that of the summed cross-entropy
        h = jax.nn.relu(b.data[0] @ p["fc1_weight"].T + p["fc1_bias"])
        z = h @ p["fc2_weight"].T + p["fc2_bias"]
        return -jnp.sum(jax.nn.log_softmax(z)[jnp.arange(16), b.label[0].astype(int)])

    want = jax.grad(loss)({k: jnp.asarray(v) for k, v in p.items()})
    for k in want:
        np.testing.assert_allclose(grads[k], want[k], rtol=1e-10, atol=1e-12)
    # ... and the optimizer step that follows is MXNet's SGD with rescale 1/16
    mod.update()
    for k in want:
        np.testing.assert_allclose(params_of(mod)[k], p[k] - 0.1 * np.asarray(want[k]) / 16,
                                   rtol=1e-10, atol=1e-12)


def test_one_program_step_equals_forward_backward_update():
    """fit's fused program and the three-call API compute the same thing,
    including the random dropout mask (keyed by the update count)."""
    data = batches((6,), 3)
    a = make_module(mlp(dropout=True), (6,))
    b = make_module(mlp(dropout=True), (6,))
    assert_params_close(params_of(a), params_of(b), rtol=0, atol=0)
    for batch in data:
        a.train_step(batch)
        b.forward(batch, is_train=True)
        b.backward()
        b.update()
        np.testing.assert_allclose(a.get_outputs()[0].asnumpy(), b.get_outputs()[0].asnumpy(),
                                   rtol=1e-12)
    assert_params_close(params_of(a), params_of(b))
    assert a.optimizer.num_update == b.optimizer.num_update == 3


def test_the_step_donates_parameters_and_optimizer_state():
    mod = make_module(mlp(), (6,), dtype="float32")
    mem = mod.compiled_memory()
    param_bytes = sum(v.nbytes for v in params_of(mod).values())
    assert mem["alias"] >= 2 * param_bytes  # weights and momentum updated in place
    old = mod._params["fc1_weight"]
    mod.train_step(batches((6,), 1, dtype=np.float32)[0])
    assert old.is_deleted()


# --------------------------------------------------------------------------
# data parallel: n devices equal one device on the same global batch
# --------------------------------------------------------------------------
NETS = {"mlp": (mlp, (6,)), "mlp-batch-norm": (lambda: mlp("batch"), (6,)),
        "cnn": (cnn, (1, 6, 6))}


@pytest.mark.parametrize("devices", [2, 4, 8])
@pytest.mark.parametrize("net", sorted(NETS))
def test_data_parallel_equals_single_device(net, devices):
    build, shape = NETS[net]
    data = batches(shape, 3)
    one = make_module(build(), shape, devices=1)
    many = make_module(build(), shape, devices=devices)
    for batch in data:
        one.train_step(batch)
        many.train_step(batch)
    assert_params_close(params_of(one), params_of(many), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(many.get_outputs()[0].asnumpy(), one.get_outputs()[0].asnumpy(),
                               rtol=1e-9)


@pytest.mark.parametrize("flags", ["--xla_backend_optimization_level=2",
                                   "--xla_force_host_platform_device_count=3"])
def test_conftest_keeps_other_xla_flags_and_a_given_device_count(flags):
    # the 8 devices these tests use must not depend on XLA_FLAGS being unset
    code = "import os, conftest, jax; print(os.environ['XLA_FLAGS'], len(jax.devices()))"
    env = {**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", code], cwd=os.path.join(ROOT, "tests"),
                         env=env, capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == flags  # kept, first
    want = 3 if "device_count" in flags else 8
    assert out[-1] == str(want) and " ".join(out[:-1]).count("device_count") == 1


def test_data_parallel_float32_tolerance_and_split_api():
    data = batches((1, 6, 6), 3, dtype=np.float32)
    one = make_module(cnn(), (1, 6, 6), devices=1, dtype="float32")
    many = make_module(cnn(), (1, 6, 6), devices=8, dtype="float32")
    for batch in data:
        one.train_step(batch)
        many.forward(batch, is_train=True)
        many.backward()
        many.update()
    assert_params_close(params_of(one), params_of(many), rtol=1e-5, atol=1e-6)


def test_scalar_loss_output_is_averaged_over_devices():
    """A net whose output is a mean loss (no loss head) trains the same on
    one device and on four."""
    mods = [train_mean_loss([sg.cpu(i) for i in range(n)]) for n in (1, 4)]
    assert_params_close(params_of(mods[0]), params_of(mods[1]))
    assert mods[1].get_outputs()[0].shape == (1,)  # a mean: no batch axis


def test_batchnorm_moving_stats_update_and_average_over_devices():
    shape = (1, 6, 6)
    b = batches(shape, 1)[0]
    one = make_module(cnn(bn=True), shape, devices=1)
    many = make_module(cnn(bn=True), shape, devices=4)
    before = params_of(one)["bn1_moving_mean"]
    one.train_step(b)
    many.train_step(b)
    after1, after4 = params_of(one), params_of(many)
    assert not np.allclose(after1["bn1_moving_mean"], before)
    # equal shards: the mean over devices of batch means is the global mean
    np.testing.assert_allclose(after4["bn1_moving_mean"], after1["bn1_moving_mean"], rtol=1e-10)
    # the variance is per device (no synchronized BN), so it differs
    assert not np.allclose(after4["bn1_moving_var"], after1["bn1_moving_var"])


@pytest.mark.parametrize("devices", [2, 4, 8])
def test_batchnorm_over_devices_equals_per_shard_statistics(devices):
    """BatchNorm, as in MXNet, normalizes each device's slice with that
    slice's own statistics. So n devices equal a hand-written reference on
    one device: each shard's forward and backward separately (from the same
    parameters), the gradients summed, SGD with rescale 1/global batch, the
    moving statistics averaged over the shards; several steps."""
    shape, batch = (1, 6, 6), 16
    many = make_module(cnn(bn=True), shape, devices=devices,
                       opt_params={"learning_rate": 0.1, "rescale_grad": 1 / batch})
    arg, aux = (({k: v.asnumpy() for k, v in d.items()}) for d in many.get_params())
    one = sg.mod.Module(cnn(bn=True))
    local = batch // devices
    one.bind([sg.io.DataDesc("data", (local,) + shape, "float64")],
             [sg.io.DataDesc("softmax_label", (local,), "float64")])
    for step in batches(shape, 3, batch=batch, seed=4):
        many.train_step(step)
        grads, auxes = [], []
        for i in range(devices):
            cut = slice(i * local, (i + 1) * local)
            one.set_params(arg, aux)
            one.forward(sg.io.DataBatch([step.data[0][cut]], [step.label[0][cut]]),
                        is_train=True)
            one.backward()
            grads.append({k: v.asnumpy() for k, v in one.get_grads().items()})
            auxes.append({k: v.asnumpy() for k, v in one.get_params()[1].items()})
        arg = {k: v - 0.1 * sum(g[k] for g in grads) / batch for k, v in arg.items()}
        aux = {k: np.mean([a[k] for a in auxes], axis=0) for k in aux}
    assert_params_close({**arg, **aux}, params_of(many), rtol=1e-9, atol=1e-12)
    # ... which is not what one device does on the whole batch
    whole = make_module(cnn(bn=True), shape, devices=1,
                        opt_params={"learning_rate": 0.1, "rescale_grad": 1 / batch})
    for step in batches(shape, 3, batch=batch, seed=4):
        whole.train_step(step)
    assert not np.allclose(params_of(whole)["c1_weight"], arg["c1_weight"], rtol=1e-6)


def test_fit_runs_one_compiled_program_per_step():
    """fit on four devices compiles exactly one program -- forward, backward,
    the gradient all-reduce and the update -- and runs it for every batch;
    its parameters and optimizer state are donated (aliased) buffers."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 6)).astype(np.float32)
    y = rng.integers(0, 5, 32).astype(np.float32)
    mod = sg.mod.Module(mlp(), context=[sg.cpu(i) for i in range(4)])
    mod.fit(sg.io.NDArrayIter(x, y, batch_size=8), num_epoch=2, kvstore="device",
            optimizer_params={"learning_rate": 0.1, "momentum": 0.9})
    assert mod.optimizer.num_update == 8
    kinds = sorted(k[0] for k in mod._programs._cache if k[0] in
                   ("fused", "fwd", "bwd", "update", "infer"))
    assert kinds == ["fused"]
    (prog,) = [v for k, v in mod._programs._cache.items() if k[0] == "fused"]
    assert prog._cache_size() == 1  # compiled once, run 8 times
    shapes = {d.name: jax.ShapeDtypeStruct(d.shape, d.dtype,
                                           sharding=mod._devices.batch_sharded())
              for d in mod.data_shapes + mod.label_shapes}
    hlo = prog.lower(mod._params, mod._opt_states, mod._aux, mod._fixed, shapes,
                     np.float32(0.1), np.float32(1), mod._key).compile().as_text()
    assert "all-reduce" in hlo and "input_output_alias" in hlo
    param_bytes = sum(v.nbytes for v in params_of(mod).values())
    assert mod.compiled_memory()["alias"] >= 2 * param_bytes  # weights + momentum


# --------------------------------------------------------------------------
# mixed precision
# --------------------------------------------------------------------------
def _grads(mod, batch):
    mod.forward(batch, is_train=True)
    mod.backward()
    return {k: v.asnumpy() for k, v in mod.get_grads().items()}


@pytest.mark.parametrize("dtype,loss_scale", [("bfloat16", 1.0), ("float16", 256.0)])
def test_low_precision_compute_keeps_float32_master_weights(dtype, loss_scale):
    shape = (1, 6, 6)
    b = batches(shape, 1, dtype=np.float32)[0]
    ref = make_module(cnn(), shape, dtype="float32")
    low = make_module(cnn(), shape, dtype="float32", compute_dtype=dtype,
                      loss_scale=loss_scale)
    g32, glow = _grads(ref, b), _grads(low, b)
    for k in g32:
        assert glow[k].dtype == np.float32
        err = np.linalg.norm(glow[k] - g32[k]) / np.linalg.norm(g32[k])
        assert err < 0.05, (k, err)
    low.update()
    low.train_step(b)
    assert all(v.dtype == np.float32 for v in params_of(low).values())
    assert low.get_outputs()[0].asnumpy().dtype == np.float32


def test_loss_scale_divides_back_exactly():
    b = batches((6,), 1)[0]
    g1 = _grads(make_module(mlp(), (6,)), b)
    g2 = _grads(make_module(mlp(), (6,), loss_scale=1024.0), b)
    assert_params_close(g1, g2, rtol=1e-12)


# --------------------------------------------------------------------------
# checkpoints
# --------------------------------------------------------------------------
def test_checkpoint_round_trip_in_mxnet_format(tmp_path):
    mod = make_module(cnn(bn=True), (1, 6, 6), dtype="float32")
    mod.train_step(batches((1, 6, 6), 1, dtype=np.float32)[0])
    prefix = str(tmp_path / "net")
    mod.save_checkpoint(prefix, 3)
    assert sorted(os.listdir(tmp_path)) == ["net-0003.params", "net-symbol.json"]
    raw = open(prefix + "-0003.params", "rb").read()
    assert raw[:8] == (0x112).to_bytes(8, "little")  # MXNet's NDArray-list magic
    assert (0xF993FAC9).to_bytes(4, "little") in raw
    assert b"arg:c1_weight" in raw and b"aux:bn1_moving_var" in raw
    net, arg, aux = sg.mod.load_checkpoint(prefix, 3)
    assert net.tojson() == mod.symbol.tojson()
    saved = params_of(mod)
    for k, v in {**arg, **aux}.items():
        np.testing.assert_array_equal(v.asnumpy(), saved[k])
    assert set(arg) | set(aux) == set(saved)


def test_params_reader_accepts_mxnet_v1_and_legacy_layouts(tmp_path):
    """Arrays laid out as older MXNet versions wrote them (hand-built here
    from the format's description)."""
    import struct
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([1.5, -2.0], dtype=np.float64)
    body = struct.pack("<QQQ", 0x112, 0, 2)
    body += struct.pack("<II", 0xF993FAC8, 2) + struct.pack("<2q", 2, 3)   # v1: int64 dims
    body += struct.pack("<iii", 1, 0, 0) + a.tobytes()
    body += struct.pack("<I", 1) + struct.pack("<I", 2)                     # legacy: uint32
    body += struct.pack("<iii", 1, 0, 1) + b.tobytes()
    body += struct.pack("<Q", 2)
    for name in (b"arg:a", b"aux:b"):
        body += struct.pack("<Q", len(name)) + name
    path = tmp_path / "old.params"
    path.write_bytes(body)
    got = params.load_params_file(path)
    np.testing.assert_array_equal(got["arg:a"], a)
    np.testing.assert_array_equal(got["aux:b"], b)
    path.write_bytes(body[:40])
    with pytest.raises(sg.SerializationError, match="ends early"):
        params.load_params_file(path)


def test_failure_while_writing_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    mod = make_module(mlp(), (6,), dtype="float32")
    prefix = str(tmp_path / "m")
    mod.save_checkpoint(prefix, 1)
    before = open(prefix + "-0001.params", "rb").read()
    mod.train_step(batches((6,), 1, dtype=np.float32)[0])
    real, calls = params._write_array, []

    def failing(f, arr):
        calls.append(1)
        if len(calls) == 3:
            raise OSError("disk full")
        real(f, arr)

    monkeypatch.setattr(params, "_write_array", failing)
    with pytest.raises(OSError, match="disk full"):
        mod.save_checkpoint(prefix, 1)
    assert open(prefix + "-0001.params", "rb").read() == before
    assert sorted(os.listdir(tmp_path)) == ["m-0001.params", "m-symbol.json"]  # no temp left
    sg.mod.load_checkpoint(prefix, 1)


KILL_SCRIPT = """
import os, signal, sys
sys.path.insert(0, {root!r})
import numpy as np
from symgraph import params as ckpt
real = ckpt._write_array
count = [0]
def dying(f, arr):
    count[0] += 1
    if count[0] == 2:
        f.write(arr.tobytes()[: arr.nbytes // 2])
        f.flush()
        os.kill(os.getpid(), signal.SIGKILL)   # killed halfway through the file
    real(f, arr)
ckpt._write_array = dying
ckpt.save_params_file({path!r}, {{"arg:a": np.zeros((64, 64), np.float32),
                                 "arg:b": np.zeros((64, 64), np.float32)}})
"""


def test_process_killed_while_writing_leaves_the_old_file_loadable(tmp_path):
    path = str(tmp_path / "x-0001.params")
    params.save_params_file(path, {"arg:a": np.ones((64, 64), np.float32)})
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", KILL_SCRIPT.format(root=ROOT, path=path)],
                          env=env, timeout=120)
    assert proc.returncode == -9
    got = params.load_params_file(path)
    assert list(got) == ["arg:a"] and (got["arg:a"] == 1).all()
    leftovers = [f for f in os.listdir(tmp_path) if f != "x-0001.params"]
    assert leftovers and all(f.startswith(".x-0001.params.") for f in leftovers)


@pytest.mark.parametrize("devices", [1, 4])
def test_resume_from_checkpoint_equals_uninterrupted_training(tmp_path, devices):
    """2 epochs, checkpoint (with optimizer state), a new Module resumes at
    begin_epoch=2: after 4 epochs the parameters equal a 4-epoch run, bit
    for bit (dropout, momentum, weight decay and an lr schedule included)."""
    ctx = [sg.cpu(i) for i in range(devices)]
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 6)).astype(np.float32)
    y = rng.integers(0, 5, 40).astype(np.float32)

    def it():
        return sg.io.NDArrayIter(x, y, batch_size=8, shuffle=True, seed=5)

    opt = dict(optimizer="sgd", optimizer_params={
        "learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3,
        "lr_scheduler": sg.lr_scheduler.FactorScheduler(step=7, factor=0.7)})
    full = sg.mod.Module(mlp(dropout=True), context=ctx)
    full.fit(it(), num_epoch=4, initializer=sg.init.Xavier(), seed=1, **opt)

    prefix = str(tmp_path / "run")
    first = sg.mod.Module(mlp(dropout=True), context=ctx)
    first.fit(it(), num_epoch=2, initializer=sg.init.Xavier(), seed=1,
              epoch_end_callback=sg.callback.module_checkpoint(first, prefix,
                                                               save_optimizer_states=True),
              **dict(opt, optimizer_params=dict(
                  opt["optimizer_params"],
                  lr_scheduler=sg.lr_scheduler.FactorScheduler(step=7, factor=0.7))))
    assert os.path.exists(prefix + "-0002.states")
    resumed = sg.mod.Module.load(prefix, 2, load_optimizer_states=True, context=ctx)
    resumed.fit(it(), begin_epoch=2, num_epoch=4, **dict(opt, optimizer_params=dict(
        opt["optimizer_params"],
        lr_scheduler=sg.lr_scheduler.FactorScheduler(step=7, factor=0.7))))
    assert resumed.optimizer.num_update == full.optimizer.num_update == 20
    assert_params_close(params_of(full), params_of(resumed), rtol=0, atol=0)


# --------------------------------------------------------------------------
# score / predict / errors
# --------------------------------------------------------------------------
def test_predict_and_score_leave_out_padding_and_any_batch_size_splits():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(21, 6)).astype(np.float32)
    y = rng.integers(0, 5, 21).astype(np.float32)
    mod = sg.mod.Module(mlp(), context=[sg.cpu(0), sg.cpu(1), sg.cpu(2), sg.cpu(3)])
    mod.bind([("data", (8, 6))], [("softmax_label", (8,))])
    mod.init_params(sg.init.Xavier(), seed=0)
    it = sg.io.NDArrayIter(x, y, batch_size=10)  # 10 does not split over 4: padded inside
    pred = mod.predict(it).asnumpy()
    assert pred.shape == (21, 5)
    p = {k: v for k, v in params_of(mod).items()}
    h = np.maximum(x @ p["fc1_weight"].T + p["fc1_bias"], 0)
    z = h @ p["fc2_weight"].T + p["fc2_bias"]
    want = np.exp(z - z.max(1, keepdims=True))
    want /= want.sum(1, keepdims=True)
    np.testing.assert_allclose(pred, want, rtol=1e-4, atol=1e-6)
    (_, acc), = mod.score(it, "acc")
    assert acc == pytest.approx(np.mean(want.argmax(1) == y))


def test_clear_errors():
    with pytest.raises(BindError, match="data name"):
        sg.mod.Module(mlp(), data_names=["image"])
    with pytest.raises(BindError, match="multiple of 4"):
        make_module(mlp(), (6,), devices=4, batch=10)
    mod = sg.mod.Module(mlp())
    with pytest.raises(TrainError, match="bind"):
        mod.forward(batches((6,), 1)[0])
    with pytest.raises(TrainError, match="num_epoch"):
        mod.fit(sg.io.NDArrayIter(np.zeros((4, 6)), np.zeros(4), batch_size=2))
    # dist_sync outside a launcher: no processes to join (a clear error, not a hang)
    from symgraph.parallel.distributed import DistributedError
    with pytest.raises(DistributedError, match="no other processes to join"):
        mod.fit(sg.io.NDArrayIter(np.zeros((4, 6)), np.zeros(4), batch_size=2),
                kvstore="dist_sync", num_epoch=1)
    mod = make_module(mlp(), (6,))
    with pytest.raises(TrainError, match="label 'softmax_label'"):
        mod.train_step(sg.io.DataBatch([np.zeros((16, 6))], None))
    with pytest.raises(TrainError, match="backward"):
        mod.update()
    with pytest.raises(sg.ContextError, match="twice"):
        sg.mod.Module(mlp(), context=[sg.cpu(0), sg.cpu(0)])
    assert issubclass(TrainError, SymgraphError)


def test_fit_logs_and_callbacks(caplog, tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 6)).astype(np.float32)
    y = rng.integers(0, 5, 32).astype(np.float32)
    seen = []
    mod = sg.mod.Module(mlp(), context=[sg.cpu(0), sg.cpu(1)])
    with caplog.at_level(logging.INFO):
        mod.fit(sg.io.NDArrayIter(x, y, batch_size=8), eval_data=sg.io.NDArrayIter(x, y, 8),
                num_epoch=2, eval_metric=["acc", "ce"],
                batch_end_callback=[sg.callback.Speedometer(8, frequent=2),
                                    lambda p: seen.append((p.epoch, p.nbatch))],
                epoch_end_callback=sg.callback.do_checkpoint(str(tmp_path / "cb")))
    assert seen == [(e, b) for e in range(2) for b in range(4)]
    text = caplog.text
    assert "Epoch[1] Train-accuracy=" in text and "Epoch[1] Validation-cross-entropy=" in text
    assert "samples/sec" in text
    assert sorted(os.listdir(tmp_path)) == ["cb-0001.params", "cb-0002.params",
                                            "cb-symbol.json"]


# --------------------------------------------------------------------------
# KVStore
# --------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["local", "device"])
def test_kvstore_push_sums_values_across_devices_and_pull_copies(kind):
    kv = sg.kv.create(kind)
    assert kv.type == kind and kv.num_workers == 1 and kv.rank == 0
    devs = jax.devices()[:4]
    kv.init("w", sg.nd.array(np.zeros((2, 3))))
    vals = [sg.nd.NDArray(jax.device_put(jnp.full((2, 3), float(i + 1), jnp.float32), d))
            for i, d in enumerate(devs)]
    kv.push("w", vals)
    outs = [sg.nd.NDArray(jax.device_put(jnp.zeros((2, 3), jnp.float32), d)) for d in devs]
    kv.pull("w", out=outs)
    for o, d in zip(outs, devs):
        np.testing.assert_array_equal(o.asnumpy(), 10.0)
        assert o.data.devices() == {d}
    kv.init([3, 4], [sg.nd.array(np.ones(2)), sg.nd.array(np.ones(2))])
    a, b = sg.nd.array(np.full(2, 2.0)), sg.nd.array(np.full(2, 5.0))
    kv.pushpull([3, 4], [a, b])
    np.testing.assert_array_equal(a.asnumpy(), 2.0)
    np.testing.assert_array_equal(b.asnumpy(), 5.0)


@pytest.mark.parametrize("kind", ["local", "device"])
def test_kvstore_with_optimizer_updates_stored_weights(kind):
    """push sums one gradient per device, then MXNet's SGD with momentum
    updates the stored weight (update on kvstore), step after step."""
    kv = sg.kv.create(kind)
    kv.set_optimizer(sg.optimizer.SGD(learning_rate=0.5, momentum=0.9))
    kv.init("fc_weight", sg.nd.array(np.ones((2, 2))))
    devs = jax.devices()[:2]
    w, mom = np.ones((2, 2)), np.zeros((2, 2))
    for step in range(3):
        grads = [np.full((2, 2), 0.5 + step), np.full((2, 2), 1.5 - step)]
        kv.push("fc_weight", [sg.nd.NDArray(jax.device_put(jnp.asarray(g, jnp.float32), d))
                              for g, d in zip(grads, devs)])
        mom = 0.9 * mom - 0.5 * sum(grads)
        w = w + mom
    out = sg.nd.NDArray(jax.device_put(jnp.zeros((2, 2), jnp.float32), devs[1]))
    kv.pull("fc_weight", out=out)
    np.testing.assert_allclose(out.asnumpy(), w, rtol=1e-6)
    assert out.data.devices() == {devs[1]}


def test_kvstore_errors():
    kv = sg.kv.create()
    with pytest.raises(kvs.KVStoreError, match="not been initialized"):
        kv.pull("nope", out=sg.nd.array(np.zeros(2)))
    kv.init("a", sg.nd.array(np.zeros(2)))
    with pytest.raises(kvs.KVStoreError, match="already initialized"):
        kv.init("a", sg.nd.array(np.zeros(2)))
    with pytest.raises(kvs.KVStoreError, match="shape"):
        kv.push("a", sg.nd.array(np.zeros(3)))
    for name in ("dist_async", "dist_device_sync"):  # dist_sync: tests/test_distributed.py
        with pytest.raises(kvs.KVStoreError, match="supports 'dist_sync'"):
            sg.kv.create(name)
    with pytest.raises(kvs.KVStoreError, match="unknown kvstore type"):
        sg.kv.create("shared")


def test_fit_with_device_kvstore_on_two_devices():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 6)).astype(np.float32)
    y = rng.integers(0, 5, 16).astype(np.float32)
    results = []
    for kv, ctx in ((None, [sg.cpu(0)]), ("device", [sg.cpu(0), sg.cpu(1)]),
                    (sg.kv.create("local"), [sg.cpu(2), sg.cpu(3)])):
        mod = sg.mod.Module(mlp(), context=ctx)
        mod.fit(sg.io.NDArrayIter(x, y, batch_size=8), num_epoch=2, kvstore=kv,
                initializer=sg.init.Xavier(), seed=0, optimizer_params={"learning_rate": 0.1})
        results.append(params_of(mod))
    assert_params_close(results[0], results[1], rtol=1e-5, atol=1e-6)
    assert_params_close(results[0], results[2], rtol=1e-5, atol=1e-6)


def test_fit_combines_gradients_with_the_kvstores_reducer():
    calls = []

    class Recording(kvs.KVStore):
        def step_reducer(self, devices):
            def reduce(grads):
                calls.append(sorted(grads))
                return devices.sum_over_devices(grads)
            return reduce

    rng = np.random.default_rng(0)
    mod = sg.mod.Module(mlp(), context=[sg.cpu(0), sg.cpu(1)])
    mod.fit(sg.io.NDArrayIter(rng.normal(size=(8, 6)), rng.integers(0, 5, 8), batch_size=8),
            num_epoch=1, kvstore=Recording("device"))
    assert calls == [["fc1_bias", "fc1_weight", "fc2_bias", "fc2_weight"]]  # traced once
    assert mod._kvstore.optimizer is mod.optimizer


def test_plan_memory_plans_what_one_device_runs():
    mod = sg.mod.Module(mlp(), context=[sg.cpu(0), sg.cpu(1)])
    mod.bind([("data", (16, 6))], [("softmax_label", (16,))])
    report = mod.plan_memory().report()
    assert "(training)" in report and "data=8,6" in report


def test_lifecycle_is_one_stage_and_calls_out_of_order_say_what_comes_first(tmp_path):
    """bind -> init_params -> init_optimizer as one ``Stage``; MXNet's flags
    read from it; each call made too early names the call it needs."""
    from symgraph.train.module_state import Stage
    data, label = [("data", (16, 6))], [("softmax_label", (16,))]
    batch = batches((6,), 1, dtype=np.float32)[0]
    mod = sg.mod.Module(mlp())
    assert mod.stage is Stage.NEW
    assert (mod.binded, mod.params_initialized, mod.optimizer_initialized) == (False,) * 3
    for call, match in [(mod.init_params, r"init_params: call bind\(\) first"),
                        (lambda: mod.forward(batch), r"forward: call bind\(\) first"),
                        (lambda: mod.save_checkpoint(str(tmp_path / "x"), 1),
                         "save_checkpoint: no parameters yet")]:
        with pytest.raises(TrainError, match=match):
            call()
    mod.bind(data, label)
    assert mod.stage is Stage.BOUND and mod.binded and not mod.params_initialized
    with pytest.raises(TrainError, match=r"init_optimizer: call init_params\(\) first"):
        mod.init_optimizer()
    mod.init_params(sg.init.Xavier(), seed=0)
    assert mod.stage is Stage.READY and mod.params_initialized
    for call, match in [(lambda: mod.train_step(batch), r"train_step\(\) needs init_optimizer"),
                        (mod.compiled_memory, r"compiled_memory: call init_optimizer\(\)"),
                        (lambda: mod.save_optimizer_states(str(tmp_path / "s")),
                         r"save_optimizer_states: call init_optimizer\(\) first")]:
        with pytest.raises(TrainError, match=match):
            call()
    mod.init_optimizer(optimizer_params={"learning_rate": 0.1})
    assert mod.stage is Stage.TRAINING and mod.optimizer_initialized
    mod.train_step(batch)
    before = params_of(mod)
    # a rebind that trains other parameters drops the optimizer, keeps the values
    mod.bind(data, label, force_rebind=True, grad_req={"fc1_weight": "null"})
    assert mod.stage is Stage.READY and not mod.optimizer_initialized
    assert_params_close(params_of(mod), before, rtol=0, atol=0)
    with pytest.raises(AttributeError):
        mod.binded = False  # the flags are read from the stage, never set
    # parameters set before bind wait for it
    waiting = sg.mod.Module(mlp())
    waiting.set_params(*mod.get_params())
    assert waiting.stage is Stage.PARAMS_WAITING
    assert waiting.params_initialized and not waiting.binded
    waiting.bind(data, label)
    assert waiting.stage is Stage.READY
    assert_params_close(params_of(waiting), before, rtol=0, atol=0)
