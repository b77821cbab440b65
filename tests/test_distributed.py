"""Training in several processes: ``symgraph launch`` and kvstore
'dist_sync' on jax.distributed.

The multi-process runs are subprocesses under hard limits: the launcher's
own --timeout (it stops its processes with SIGKILL after SIGTERM, which
JAX catches) and subprocess.run's timeout around it, so a stuck rank
fails the test instead of hanging CI."""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

import symgraph as sg
from symgraph.parallel import distributed, launch
from symgraph.parallel.kvstore import KVStoreError
from symgraph.train import TrainError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "examples", "train_dist.py")
HARD_LIMIT_S = 120


def _env(devices=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SYMGRAPH_", "SLURM_"))}
    env["JAX_PLATFORMS"] = "cpu"
    env.pop("XLA_FLAGS", None)
    if devices:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    return env


def _symgraph(*args, timeout=HARD_LIMIT_S):
    return subprocess.run([sys.executable, "-m", "symgraph.cli", *args], capture_output=True,
                          text=True, env=_env(), timeout=timeout, cwd=ROOT)


def _params(path):
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


# -- the multi-process runs ----------------------------------------------------------------

def test_two_processes_equal_one_process_with_four_devices(tmp_path):
    """2 processes x 2 CPU devices, each feeding its part of every batch,
    end with the parameters of 1 process x 4 devices on the whole batches;
    every rank resumes from rank 0's checkpoint to the same values."""
    dist, one = tmp_path / "dist.npz", tmp_path / "one.npz"
    run = _symgraph("launch", "-n", "2", "--devices-per-process", "2", "--timeout", "100",
                    "--", sys.executable, SCRIPT, "--out", str(dist),
                    "--prefix", str(tmp_path / "ck" / "mlp"))
    assert run.returncode == 0, run.stderr[-3000:]
    for rank in (0, 1):
        assert f"[rank {rank}] rank {rank}/2: 2 device(s), resumed run differs by 0" \
            in run.stdout, run.stdout[-3000:]
        assert f"[rank {rank}] rank {rank}: kv push summed to 3" in run.stdout  # 1 + 2
    assert os.path.exists(tmp_path / "ck" / "mlp-0002.params")  # rank 0 wrote it
    ref = subprocess.run([sys.executable, SCRIPT, "--devices", "4", "--out", str(one),
                          "--prefix", str(tmp_path / "ref" / "mlp")],
                         capture_output=True, text=True, env=_env(4), timeout=HARD_LIMIT_S,
                         cwd=ROOT)
    assert ref.returncode == 0, ref.stderr[-3000:]
    # each rank scores its part: their mean is one process's score on the whole set
    ranks = [float(m) for m in re.findall(r"\[rank \d\] Epoch\[1\] Validation-accuracy="
                                          r"([\d.]+)", run.stderr)]
    whole = re.findall(r"Epoch\[1\] Validation-accuracy=([\d.]+)", ref.stderr)
    assert len(ranks) == 2 and len(whole) == 1, (run.stderr[-2000:], ref.stderr[-2000:])
    assert np.mean(ranks) == pytest.approx(float(whole[0]), abs=1e-6)
    a, b = _params(dist), _params(one)
    assert sorted(a) == sorted(b)
    names = [k for k in a if k.startswith("arg:fc")]
    assert names and "aux:bn1_moving_mean" in a
    # forward_backward + update moved the weights on from the fit's (and equal one process)
    assert not np.allclose(a["threecall:fc1_weight"], a["arg:fc1_weight"])
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-7, err_msg=k)
        # the resumed run: the same as the uninterrupted one
        if k.startswith("resumed:"):
            name = k.partition(":")[2]
            full = a.get(f"arg:{name}", a.get(f"aux:{name}"))
            np.testing.assert_allclose(a[k], full, rtol=1e-6, atol=1e-8, err_msg=k)


def test_a_failing_worker_ends_the_run(tmp_path):
    tic = time.monotonic()
    run = _symgraph("launch", "-n", "2", "--devices-per-process", "2", "--timeout", "50",
                    "--", sys.executable, SCRIPT, "--fail-rank", "1",
                    "--prefix", str(tmp_path / "mlp"))
    took = time.monotonic() - tic
    assert run.returncode == 1
    last = run.stderr.strip().splitlines()[-1]
    assert last == "symgraph: error: launch: rank 1 exited with code 1; stopped the other 1 " \
                   "process(es)", run.stderr[-2000:]
    assert "[rank 1] RuntimeError: rank 1 fails on purpose" in run.stderr
    assert took < 60


def test_a_killed_worker_ends_the_run(tmp_path):
    tic = time.monotonic()
    run = _symgraph("launch", "-n", "2", "--timeout", "50", "--", sys.executable, SCRIPT,
                    "--kill-rank", "1", "--prefix", str(tmp_path / "mlp"))
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1] == \
        "symgraph: error: launch: rank 1 was killed by SIGKILL; stopped the other 1 process(es)"
    assert time.monotonic() - tic < 60


def test_parts_with_different_batch_counts_fail_in_every_rank(tmp_path):
    """Parts giving different numbers of batches would leave a rank waiting
    in a collective: fit refuses them in every process, at the start."""
    run = _symgraph("launch", "-n", "2", "--timeout", "50", "--", sys.executable, SCRIPT,
                    "--uneven", "--prefix", str(tmp_path / "mlp"))
    assert run.returncode == 1
    assert "differ in batches per epoch (rank 0: 3, rank 1: 2)" in run.stderr, \
        run.stderr[-2000:]
    assert run.stderr.strip().splitlines()[-1].startswith("symgraph: error: launch: rank ")


def test_a_hanging_worker_ends_the_run(tmp_path):
    tic = time.monotonic()
    run = _symgraph("launch", "-n", "2", "--timeout", "15", "--", sys.executable, SCRIPT,
                    "--hang-rank", "0", "--prefix", str(tmp_path / "mlp"))
    took = time.monotonic() - tic
    assert run.returncode == 1
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("symgraph: error: launch: timed out after 15 s with rank(s) 0"), last
    assert "[rank 0] rank 0 hangs on purpose" in run.stdout
    assert took < 60


def test_launch_forwards_lines_by_rank_and_exit_codes():
    code = ("import os, sys; r = os.environ['SYMGRAPH_PROCESS_ID']; "
            "print('hello', r, os.environ['SYMGRAPH_NUM_PROCESSES'], "
            "os.environ['SYMGRAPH_COORDINATOR'].startswith('127.0.0.1:'), "
            "os.environ['XLA_FLAGS']); print('warn', r, file=sys.stderr)")
    ok = _symgraph("launch", "-n", "3", "--devices-per-process", "3", "--", sys.executable,
                   "-c", code, timeout=60)
    assert ok.returncode == 0, ok.stderr
    for r in ("0", "1", "2"):
        assert f"[rank {r}] hello {r} 3 True --xla_force_host_platform_device_count=3" \
            in ok.stdout.splitlines()
        assert f"[rank {r}] warn {r}" in ok.stderr.splitlines()
    # a rank's exit code is named; the others (asleep) are stopped
    failing = ("import os, sys, time; r = os.environ['SYMGRAPH_PROCESS_ID']; "
               "sys.exit(5) if r == '2' else time.sleep(100)")
    bad = _symgraph("launch", "-n", "3", "--", sys.executable, "-c", failing, timeout=60)
    assert bad.returncode == 1
    assert bad.stderr.strip().splitlines()[-1] == \
        "symgraph: error: launch: rank 2 exited with code 5; stopped the other 2 process(es)"


# -- bad input ---------------------------------------------------------------------------------

def _one_error_line(capsys, *args):
    """Bad input is refused before anything starts: run in this process."""
    from symgraph.cli import main
    assert main(list(args)) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("symgraph: error: launch: "), err
    return lines[0]


def test_launch_bad_input(capsys):
    def line(*args):
        return _one_error_line(capsys, "launch", *args)
    assert "-n must be at least 1, got 0" in line("-n", "0", "--", "true")
    assert "no command given" in line("-n", "2")
    assert "no command given" in line("-n", "2", "--")
    assert "--devices-per-process must be at least 1" in line(
        "-n", "2", "--devices-per-process", "0", "--", "true")
    assert "--timeout must be a positive" in line("-n", "2", "--timeout", "-1", "--", "true")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert f"--port {port} is in use" in line("-n", "2", "--port", str(port), "--", "true")
    assert "is not a TCP port" in line("-n", "2", "--port", "70000", "--", "true")
    assert "cannot start 'no-such-program-xyz'" in line("-n", "1", "--", "no-such-program-xyz")


# -- in this process: settings, the store's errors, parts of batches ----------------------------

def test_settings_from_the_environment_and_slurm():
    assert distributed.settings_from_env({}) is None
    env = {"SYMGRAPH_COORDINATOR": "127.0.0.1:1234", "SYMGRAPH_NUM_PROCESSES": "4",
           "SYMGRAPH_PROCESS_ID": "3"}
    assert distributed.settings_from_env(env) == {"coordinator": "127.0.0.1:1234",
                                                  "num_processes": 4, "process_id": 3}
    slurm = {"SLURM_PROCID": "1", "SLURM_NTASKS": "2",
             "SLURM_STEP_NODELIST": "gpu[07-09,12],cpu1"}
    assert distributed.settings_from_env(slurm) == {"coordinator": "gpu07:12321",
                                                    "num_processes": 2, "process_id": 1}
    assert distributed.settings_from_env({**slurm, "SLURM_NTASKS": "1"}) is None
    assert distributed.first_slurm_host("node1,node2") == "node1"
    with pytest.raises(distributed.DistributedError, match="SYMGRAPH_PROCESS_ID not set"):
        distributed.settings_from_env({k: v for k, v in env.items()
                                       if k != "SYMGRAPH_PROCESS_ID"})
    with pytest.raises(distributed.DistributedError, match=r"process id 4 is not in \[0, 4\)"):
        distributed.settings_from_env({**env, "SYMGRAPH_PROCESS_ID": "4"})
    with pytest.raises(distributed.DistributedError, match="not HOST:PORT"):
        distributed.settings_from_env({**env, "SYMGRAPH_COORDINATOR": "localhost"})
    with pytest.raises(distributed.DistributedError, match="not a list of device numbers"):
        distributed.settings_from_env({**env, "SYMGRAPH_LOCAL_DEVICE_IDS": "0;1"})
    with pytest.raises(distributed.DistributedError, match="not a whole number"):
        distributed.settings_from_env({**env, "SYMGRAPH_NUM_PROCESSES": "two"})


def test_launch_environment_replaces_the_device_count():
    env = launch.process_env({"XLA_FLAGS": "--xla_foo=1 --xla_force_host_platform_device_count=8",
                              "PATH": "/bin"}, rank=1, num=2, port=555, devices=3)
    assert env["XLA_FLAGS"] == "--xla_foo=1 --xla_force_host_platform_device_count=3"
    assert (env["SYMGRAPH_COORDINATOR"], env["SYMGRAPH_NUM_PROCESSES"],
            env["SYMGRAPH_PROCESS_ID"], env["SYMGRAPH_LOCAL_DEVICES"],
            env["SYMGRAPH_LOCAL_DEVICE_IDS"]) == ("127.0.0.1:555", "2", "1", "3", "3,4,5")
    assert distributed.settings_from_env(env)["local_device_ids"] == [3, 4, 5]


def test_kvstore_dist_types(monkeypatch):
    for name in ("dist_async", "dist_device_sync", "dist"):
        with pytest.raises(KVStoreError, match="across processes symgraph supports "
                                               "'dist_sync'"):
            sg.kv.create(name)
    for k in list(os.environ):
        if k.startswith(("SYMGRAPH_", "SLURM_")):
            monkeypatch.delenv(k)
    # no launcher: a clear error, not a hang waiting for a coordinator
    with pytest.raises(distributed.DistributedError, match="no other processes to join"):
        sg.kv.create("dist_sync")
    with pytest.raises(distributed.DistributedError, match="together"):
        sg.kv.create("dist_sync", coordinator="127.0.0.1:1")
    # JAX already runs in this test process: joining now is refused, clearly
    jax.devices()
    with pytest.raises(distributed.DistributedError, match="must start before JAX does"):
        sg.kv.create("dist_sync", coordinator=f"127.0.0.1:{launch.free_port()}",
                     num_processes=2, process_id=1)
    with pytest.raises(KVStoreError, match="takes no settings"):
        sg.kv.create("local", coordinator="127.0.0.1:1")
    assert not sg.kv.create("local").is_distributed


def test_dist_sync_with_group2ctxs_is_refused_across_processes(monkeypatch):
    """A placed net trains inside one process: with several processes,
    dist_sync would otherwise rebind it as plain data parallel and drop the
    placement without a word."""
    from symgraph.parallel import kvstore as kvs
    x = sg.sym.Variable("data")
    with sg.AttrScope(ctx_group="a"):
        h = sg.sym.FullyConnected(x, num_hidden=4, name="fc1")
    with sg.AttrScope(ctx_group="b"):
        h = sg.sym.FullyConnected(h, num_hidden=3, name="fc2")
    net = sg.sym.SoftmaxOutput(h, name="softmax")
    mod = sg.mod.Module(net, context=sg.cpu(0), group2ctxs={"a": sg.cpu(1), "b": sg.cpu(2)})
    mod.bind([sg.io.DataDesc("data", (4, 5))], [sg.io.DataDesc("softmax_label", (4,))])
    mod.init_params(sg.init.Xavier())

    class Dist(kvs.KVStore):  # a dist_sync store without the processes
        is_distributed = True
        type = "dist_sync"
    monkeypatch.setattr(kvs, "create", lambda kind: Dist("local"))
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    with pytest.raises(TrainError, match="kvstore='dist_sync' with group2ctxs is not supported"):
        mod.init_optimizer(kvstore="dist_sync")


@pytest.mark.parametrize("handle", ["pad", "discard", "roll_over"])
def test_ndarray_iter_parts_split_every_batch(handle):
    """The parts' batches, concatenated in order, are the batches of one
    iterator with num_parts times the batch size (shuffled, over epochs)."""
    X = np.arange(46, dtype=np.float32).reshape(23, 2)
    y = np.arange(23, dtype=np.float32)
    whole = sg.io.NDArrayIter(X, y, batch_size=6, shuffle=True, seed=3,
                              last_batch_handle=handle)
    parts = [sg.io.NDArrayIter(X, y, batch_size=2, shuffle=True, seed=3, part_index=i,
                               num_parts=3, last_batch_handle=handle) for i in range(3)]
    assert all(p.provide_data[0].shape == (2, 2) for p in parts)
    for _ in range(3):
        assert all(p.num_batches == whole.num_batches for p in parts)
        # each runs out by itself (a roll_over iterator carries its tail then)
        runs = [list(it) for it in [whole, *parts]]
        assert len({len(r) for r in runs}) == 1 and len(runs[0]) == whole.num_batches
        got = list(zip(*runs))
        for w, *ps in got:
            np.testing.assert_array_equal(np.concatenate([np.asarray(p.data[0]) for p in ps]),
                                          np.asarray(w.data[0]))
            np.testing.assert_array_equal(np.concatenate([np.asarray(p.label[0]) for p in ps]),
                                          np.asarray(w.label[0]))
            assert sum(p.pad for p in ps) == w.pad
            # padding sits at the end: only a part holding the batch's tail has any
            pads = [p.pad for p in ps]
            assert pads == sorted(pads)
        whole.reset()
        for p in parts:
            p.reset()


def test_ndarray_iter_part_arguments():
    X = np.zeros((8, 2), np.float32)
    with pytest.raises(TrainError, match=r"part_index 2 is not in \[0, num_parts=2\)"):
        sg.io.NDArrayIter(X, batch_size=2, part_index=2, num_parts=2)
    with pytest.raises(TrainError, match="needs seed="):
        sg.io.NDArrayIter(X, batch_size=2, shuffle=True, part_index=0, num_parts=2)


def test_bench_train_process_rows_arguments_and_table():
    from symgraph.bench import train
    assert train.parse_args([]).processes == 2
    assert train.parse_args(["--quick"]).processes == 0
    assert train.parse_args(["--quick", "--processes", "3"]).processes == 3
    with pytest.raises(sg.SymgraphError, match="--processes must be 0 or more"):
        train.parse_args(["--processes", "-1"])
    row = {"net": "vgg", "batch": 8, "processes": 2, "devices_per_process": 1,
           "samples_per_s": 53.2, "step_ms": 150.2, "one_process_samples_per_s": 129.0,
           "one_process_step_ms": 62.1, "ratio": 53.2 / 129.0, "max_rel_param_diff": 0.0}
    lines = train.process_markdown([row])
    assert "## Several processes" in lines
    assert "| vgg | 2 x 1 | 8 | 53 | 129 | 0.41 | 150.20 / 62.10 | 0.0e+00 |" in lines
    assert train.process_markdown([]) == []
