#!/usr/bin/env python3
"""Training throughput: symgraph's compiled training step beside a plain-JAX
step written by hand for the same net, measured side by side in one run.

    symgraph bench train [--nets resnet,vgg] [--batch 32,64,128]
        [--devices 1,2,4,8] [--processes 2] [--stages 2] [--image 32] [--steps 3]
        [--rounds 5] [--out DIR] [--quick]
    python benchmarks/train_throughput.py [the same arguments]

Two small CIFAR-sized nets: a ResNet-style one (a BatchNorm stem and three
stages of one basic block each, widths 16/32/64, global average pooling)
and a VGG-style one (two 3x3 convolutions per stage at widths 32/64/128,
max pooling, a 256-wide hidden layer). For every net, batch size and
device count it times

- symgraph: ``Module.train_step`` -- one XLA program with the forward, the
  explicit backward graph, the gradient sum over devices and the SGD
  update, parameters donated;
- plain JAX: the same net written with ``jax.lax`` ops, ``jax.grad`` of the
  summed cross-entropy and the same SGD-with-momentum update in one
  ``jax.jit`` program, data parallel through ``jax.shard_map`` with a
  ``psum`` of the gradients (``check_vma=False``), parameters donated;

on the same fixed batch already on the devices (so the input pipeline is
not measured), ``steps`` steps per timing, ``rounds`` rounds alternating
the two (and which goes first), keeping each side's best round. Both start from the same weights;
the relative difference of their first updates (the norm of the
difference of the two parameter changes over the norm of plain JAX's,
all parameters together) is reported too, as a check that the two compute
the same thing. The ratio is
symgraph samples/s over plain-JAX samples/s (above 1: symgraph faster).

Several processes (``--processes N``, default 2, off with ``--quick``
unless given): for every net and batch, the same ``Module.train_step`` in
N processes of one CPU device each under ``symgraph launch``
(kvstore='dist_sync', each process feeding its part of the batch) beside
one process of N CPU devices, both started fresh in this run as
subprocesses with the same steps and rounds, twice each in alternating
order (once with ``--quick``), the best of each kept; the table gives both
samples/s, their ratio and the largest relative difference of the
parameters the two end with.

Model parallel (``--stages N``, default 2, off with ``--quick`` unless
given): for every net and batch, ``Module.train_step`` with the net split
into N layer-wise stages by ``symgraph plan --split N --layer-wise``
(memory/devices.py; the batch split is not benchmarked here) on
simulated CPU devices 1..N (``group2ctxs``) beside the same Module on one
device, in this process, alternating rounds; the table gives both
samples/s, their ratio, the largest relative difference of the parameters
the two end with, and the split's largest per-device peak against one
device.

On a CPU-only machine the devices are simulated CPU devices (8, asked for
with ``jax_num_cpu_devices`` before the JAX backend starts, unless XLA_FLAGS
already names a count); they share the machine's cores, so more devices do not mean more
throughput there. Results: results.json, results.md and throughput.png in
the output folder, each written atomically: ``--out``, or by default
``./bench-results/train`` (``./bench-results/train-quick`` with
``--quick``) under the current folder -- the committed results in
``benchmarks/results/train`` are replaced only when ``--out`` names them.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import symgraph as sg

from ..cli import UsageError
from ..util import atomic_open, atomic_write_text
from .common import BenchError, cpu_model, default_out, smoke_note
from .train_nets import CLASSES, LR, MOMENTUM, NETS, plain_step_fn

SIMULATED_DEVICES = 8  # CPU devices asked for, enough for the default grid
SMOKE_WHAT = "the samples/s and ratios (batch 8 of 8x8 images: per-step overhead)"

# --------------------------------------------------------------------------
# one measurement
# --------------------------------------------------------------------------
def _timed(fn, steps: int) -> float:
    t0 = time.perf_counter()
    out = None
    for _ in range(steps):
        out = fn()
    jax.block_until_ready(out)
    return time.perf_counter() - t0


def measure(net: str, batch: int, devices: list, image: int, steps: int, rounds: int,
            seed: int = 0) -> dict:
    build, forward = NETS[net]
    symbol = build()
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, 3, image, image)).astype(np.float32)
    y = rng.integers(0, CLASSES, batch).astype(np.float32)

    mod = sg.mod.Module(symbol, context=[sg.Context.of(d) for d in devices])
    mod.bind([("data", x.shape)], [("softmax_label", y.shape)])
    mod.init_params(sg.init.Xavier(magnitude=2.0), seed=seed)
    arg, aux = mod.get_params()
    init_p = {k: v.asnumpy() for k, v in arg.items()}
    init_aux = {k: v.asnumpy() for k, v in aux.items()}
    mod.init_optimizer(optimizer="sgd", optimizer_params={"learning_rate": LR,
                                                          "momentum": MOMENTUM})
    placed = mod.prepare_batch(sg.io.DataBatch([x], [y]))

    plain = plain_step_fn(forward, devices, batch)
    if len(devices) > 1:
        mesh = Mesh(np.array(devices), ("batch",))
        rep, split = NamedSharding(mesh, P()), NamedSharding(mesh, P("batch"))
    else:
        rep = split = jax.sharding.SingleDeviceSharding(devices[0])
    state = {"p": jax.device_put(init_p, rep),
             "m": jax.device_put({k: np.zeros_like(v) for k, v in init_p.items()}, rep),
             "a": jax.device_put(init_aux, rep)}
    px, py = jax.device_put(x, split), jax.device_put(y, split)

    def sym_step():
        mod.train_step(placed)
        return mod._outputs

    def plain_step():
        state["p"], state["m"], state["a"], probs = plain(state["p"], state["m"], state["a"],
                                                          px, py)
        return probs

    # first step: compile time, and the check that both compute the same
    t0 = time.perf_counter()
    jax.block_until_ready(sym_step())
    sym_compile = time.perf_counter() - t0
    t0 = time.perf_counter()
    jax.block_until_ready(plain_step())
    plain_compile = time.perf_counter() - t0
    got = {k: v.asnumpy() - init_p[k] for k, v in mod.get_params()[0].items()}
    want = {k: np.asarray(v) - init_p[k] for k, v in state["p"].items()}
    diff = float(np.sqrt(sum(np.sum(np.square(got[k] - want[k])) for k in want) /
                         sum(np.sum(np.square(want[k])) for k in want)))
    sym_step(), plain_step()  # warm
    best_sym = best_plain = float("inf")
    for i in range(rounds):  # alternating which side goes first
        for side in ((sym_step, plain_step) if i % 2 == 0 else (plain_step, sym_step)):
            t = _timed(side, steps)
            if side is sym_step:
                best_sym = min(best_sym, t)
            else:
                best_plain = min(best_plain, t)
    sym_sps, plain_sps = batch * steps / best_sym, batch * steps / best_plain
    return {"net": net, "batch": batch, "devices": len(devices),
            "platform": devices[0].platform, "image": image, "steps": steps,
            "rounds": rounds,
            "symgraph_samples_per_s": sym_sps, "plain_samples_per_s": plain_sps,
            "ratio": sym_sps / plain_sps,
            "symgraph_step_ms": 1e3 * best_sym / steps, "plain_step_ms": 1e3 * best_plain / steps,
            "symgraph_first_step_s": sym_compile, "plain_first_step_s": plain_compile,
            "rel_update_diff_after_step1": diff}


# --------------------------------------------------------------------------
# the run and its report
# --------------------------------------------------------------------------
def _ints(text: str) -> list[int]:
    try:
        vals = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas, got "
                                         f"{text!r}") from None
    if not vals or any(v <= 0 for v in vals):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return vals


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit 2 (via symgraph's CLI or __main__ below)
        raise UsageError(f"{self.prog}: {message}")


def parse_args(argv):
    p = _Parser(prog="symgraph bench train", description=__doc__.strip().split("\n\n")[0])
    p.add_argument("--nets", default="resnet,vgg", help="comma-separated: resnet, vgg")
    p.add_argument("--batch", type=_ints, help="global batch sizes (default 32,64,128)")
    p.add_argument("--devices", type=_ints, help="device counts (default 1,2,4,8)")
    p.add_argument("--image", type=int, help="image height and width (default 32)")
    p.add_argument("--steps", type=int, help="steps per timing (default 3)")
    p.add_argument("--rounds", type=int, help="timings per side, best kept (default 5)")
    p.add_argument("--out", help="results folder (default: ./bench-results/train, with "
                   "--quick ./bench-results/train-quick, under the current folder)")
    p.add_argument("--processes", type=int, default=None,
                   help="rows for N processes of one CPU device each beside one process "
                        "of N devices (default 2; 1 or 0: none; --quick: none)")
    p.add_argument("--stages", type=int, default=None,
                   help="rows for the net split into N model-parallel stages on N CPU devices "
                        "(group2ctxs) beside one device (default 2; 1 or 0: none; --quick: "
                        "none)")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--quick", action="store_true",
                   help="tiny defaults for a smoke test: batch 8, 8x8 images, 1 and 2 "
                        "devices, 2 steps, 1 round (explicit options still apply)")
    args = p.parse_args(argv)
    args.out = args.out or default_out("train", args.quick)
    args.nets = [n.strip() for n in args.nets.split(",") if n.strip()]
    bad = [n for n in args.nets if n not in NETS]
    if bad:
        p.error(f"unknown net(s) {bad}; choose from {sorted(NETS)}")
    defaults = dict(batch=[8], devices=[1, 2], image=8, steps=2, rounds=1) if args.quick else \
        dict(batch=[32, 64, 128], devices=[1, 2, 4, 8], image=32, steps=3, rounds=5)
    defaults["processes"] = 0 if args.quick else 2
    defaults["stages"] = 0 if args.quick else 2
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.processes < 0:
        p.error(f"--processes must be 0 or more, got {args.processes}")
    if args.stages < 0:
        p.error(f"--stages must be 0 or more, got {args.stages}")
    if min(args.image, args.steps, args.rounds) < 1:
        p.error("--image, --steps and --rounds must be positive")
    return args


def machine() -> dict:
    info = {"platform": platform.platform(), "python": platform.python_version(),
            "cpu_count": os.cpu_count(), "machine": platform.machine()}
    cpu = cpu_model()
    return {**info, "cpu": cpu} if cpu else info


def markdown(result: dict) -> str:
    lines = [f"# Training throughput ({result['date']})", "",
             f"{result['device_kind']}; {result['machine'].get('cpu', result['machine']['machine'])}"
             f", {result['machine']['cpu_count']} cores. jax {result['versions']['jax']}, "
             f"symgraph {result['versions']['symgraph']}. 1-minute load average "
             f"{result['load_average_1min']['start']} at the start, "
             f"{result['load_average_1min']['end']} at the end.", "",
             "samples/s of one training step (forward, backward, gradient sum over devices, "
             "SGD with momentum) on a fixed batch already on the devices; symgraph's "
             "`Module.train_step` beside a hand-written plain-JAX step of the same net, "
             "measured in the same run, best of "
             f"{result['config']['rounds']} rounds of {result['config']['steps']} steps. "
             "*ratio* = symgraph / plain JAX. *diff*: relative difference of the two sides' "
             "first updates, ||d_sg - d_plain|| / ||d_plain|| over all parameters (same "
             "starting weights).", ""]
    if result["config"].get("quick"):
        lines += [f"**{smoke_note(SMOKE_WHAT)}**", ""]
    if result.get("skipped"):
        lines += [f"Skipped: {result['skipped']}", ""]
    lines += ["| net | devices | batch | symgraph samples/s | plain JAX samples/s | ratio | "
              "symgraph ms/step | plain ms/step | first step s (sg / plain) | diff |",
              "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in result["rows"]:
        lines.append(f"| {r['net']} | {r['devices']} | {r['batch']} | "
                     f"{r['symgraph_samples_per_s']:,.0f} | {r['plain_samples_per_s']:,.0f} | "
                     f"{r['ratio']:.2f} | {r['symgraph_step_ms']:.2f} | {r['plain_step_ms']:.2f} | "
                     f"{r['symgraph_first_step_s']:.1f} / {r['plain_first_step_s']:.1f} | "
                     f"{r['rel_update_diff_after_step1']:.1e} |")
    ratios = [r["ratio"] for r in result["rows"]]
    if ratios:
        lines += ["", f"Geometric mean ratio: {float(np.exp(np.mean(np.log(ratios)))):.2f} "
                  f"(min {min(ratios):.2f}, max {max(ratios):.2f})."]
    lines += process_markdown(result.get("process_rows") or [])
    lines += stage_markdown(result.get("stage_rows") or [])
    return "\n".join(lines) + "\n"


def chart(result: dict, path: str) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    nets = sorted({r["net"] for r in result["rows"]})
    if not nets:  # no rows: no chart (subplots of zero columns is an error)
        return False
    fig, axes = plt.subplots(1, len(nets), figsize=(6 * len(nets), 4), squeeze=False)
    for ax, net in zip(axes[0], nets):
        rows = [r for r in result["rows"] if r["net"] == net]
        for dev in sorted({r["devices"] for r in rows}):
            sel = sorted((r for r in rows if r["devices"] == dev), key=lambda r: r["batch"])
            b = [r["batch"] for r in sel]
            line, = ax.plot(b, [r["symgraph_samples_per_s"] for r in sel], "o-",
                            label=f"symgraph, {dev} dev")
            ax.plot(b, [r["plain_samples_per_s"] for r in sel], "x--", color=line.get_color(),
                    label=f"plain JAX, {dev} dev")
        ax.set_title(f"{net}: training samples/s")
        ax.set_xlabel("global batch size")
        ax.set_ylabel("samples/s")
        ax.set_xscale("log", base=2)
        ax.legend(fontsize=7)
    if result["config"].get("quick"):
        fig.suptitle("SMOKE RUN (--quick): these figures mean nothing", color="red")
    fig.tight_layout()
    with atomic_open(path, "wb") as f:
        fig.savefig(f, format="png", dpi=110)
    plt.close(fig)
    return True


def _load() -> float | None:
    """The 1-minute load average: other work on the machine slows both sides
    (the ratio less, as they alternate), so the report records it."""
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def request_cpu_devices(n: int = SIMULATED_DEVICES) -> str | None:
    """Asks JAX for ``n`` simulated CPU devices. This works until the JAX
    backend starts (first device use), not merely until ``import jax`` --
    the ``symgraph`` CLI has imported JAX before it loads this script, so
    an XLA_FLAGS set here would come too late. A device count already in
    XLA_FLAGS or in the config is the user's and is kept. Returns a one-line
    note when the backend was already up (its devices are used as they are)."""
    if "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", "") or \
            jax.config.jax_num_cpu_devices != -1:
        return None
    try:
        jax.config.update("jax_num_cpu_devices", n)
    except RuntimeError:  # jax raises this once the backend is initialised
        return (f"note: JAX was already started, so {n} simulated CPU devices could not be "
                f"requested; using the {len(jax.devices())} device(s) it has")
    return None


# --------------------------------------------------------------------------
# several processes
# --------------------------------------------------------------------------
def worker(args) -> int:
    """One side of a process row (run as a subprocess, under ``symgraph
    launch`` for the multi-process side): times ``Module.train_step`` on
    this process's part of a fixed batch; rank 0 writes the JSON and the
    final parameters (``.npz`` beside it)."""
    from ..parallel import distributed
    # join the others before JAX starts
    kv = sg.kv.create("dist_sync") if distributed.settings_from_env() else None
    rank, procs = (kv.rank, kv.num_workers) if kv else (0, 1)
    net, batch = args.nets[0], args.batch[0]
    rng = np.random.default_rng(0)
    x = rng.normal(size=(batch, 3, args.image, args.image)).astype(np.float32)
    y = rng.integers(0, CLASSES, batch).astype(np.float32)
    part = slice(rank * batch // procs, (rank + 1) * batch // procs)
    devices = jax.local_devices()
    mod = sg.mod.Module(NETS[net][0](), context=[sg.Context.of(d) for d in devices])
    mod.bind([("data", x[part].shape)], [("softmax_label", y[part].shape)])
    mod.init_params(sg.init.Xavier(magnitude=2.0), seed=0)
    mod.init_optimizer(kvstore=kv or "local", optimizer="sgd",
                       optimizer_params={"learning_rate": LR, "momentum": MOMENTUM})
    placed = mod.prepare_batch(sg.io.DataBatch([x[part]], [y[part]]))

    def step():
        mod.train_step(placed)
        return mod._params

    t0 = time.perf_counter()
    jax.block_until_ready(step())
    first = time.perf_counter() - t0
    jax.block_until_ready(step())  # warm
    best = min(_timed(step, args.steps) for _ in range(args.rounds))
    arg, _ = mod.get_params()
    if rank == 0:
        with atomic_open(args.worker + ".npz", "wb") as f:
            np.savez(f, **{k: v.asnumpy() for k, v in arg.items()})
        atomic_write_text(args.worker, json.dumps({
            "processes": procs, "devices_per_process": len(devices),
            "samples_per_s": batch * args.steps / best, "step_ms": 1e3 * best / args.steps,
            "first_step_s": first}))
    return 0


def measure_processes(net: str, batch: int, processes: int, args, folder: str,
                      pairs: int = 2) -> dict:
    """N processes x 1 CPU device under ``symgraph launch`` beside 1
    process x N CPU devices: ``pairs`` fresh runs of each, alternating."""
    import subprocess
    common = ["-m", "symgraph.bench.train", "--nets", net, "--batch", str(batch),
              "--image", str(args.image), "--steps", str(args.steps),
              "--rounds", str(args.rounds)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYMGRAPH_")}
    env["JAX_PLATFORMS"] = "cpu"  # the rows are about simulated CPU devices
    one_out = os.path.join(folder, f"{net}-{batch}-one.json")
    many_out = os.path.join(folder, f"{net}-{batch}-many.json")
    one_env = dict(env, XLA_FLAGS=" ".join(
        [f for f in env.get("XLA_FLAGS", "").split()
         if "xla_force_host_platform_device_count" not in f] +
        [f"--xla_force_host_platform_device_count={processes}"]))
    runs = [("one", [sys.executable, *common, "--worker", one_out], one_env),
            ("many", [sys.executable, "-m", "symgraph.cli", "launch", "-n", str(processes),
                      "--devices-per-process", "1", "--timeout", "900", "--",
                      sys.executable, *common, "--worker", many_out], env)]
    best: dict = {}
    # fresh processes per side, alternating which goes first; each side's best kept
    for i in range(pairs):
        for side, cmd, run_env in (runs if i % 2 == 0 else runs[::-1]):
            done = subprocess.run(cmd, env=run_env, capture_output=True, text=True,
                                  timeout=1000)
            if done.returncode != 0:
                tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
                raise BenchError(f"bench train: the {processes}-process row of {net} batch "
                                 f"{batch} failed: {tail}")
            with open(one_out if side == "one" else many_out) as f:
                got = json.load(f)
            if side not in best or got["samples_per_s"] > best[side]["samples_per_s"]:
                best[side] = got
    one, many = best["one"], best["many"]
    with np.load(one_out + ".npz") as a, np.load(many_out + ".npz") as b:
        diff = max(float(np.max(np.abs(a[k] - b[k])) / (np.max(np.abs(a[k])) or 1.0))
                   for k in a.files)
    return {"net": net, "batch": batch, "processes": processes,
            "devices_per_process": many["devices_per_process"],
            "samples_per_s": many["samples_per_s"], "step_ms": many["step_ms"],
            "first_step_s": many["first_step_s"],
            "one_process_devices": one["devices_per_process"],
            "one_process_samples_per_s": one["samples_per_s"],
            "one_process_step_ms": one["step_ms"],
            "ratio": many["samples_per_s"] / one["samples_per_s"],
            "max_rel_param_diff": diff}


def measure_stages(net: str, batch: int, stages: int, image: int, steps: int, rounds: int,
                   seed: int = 0) -> dict:
    """``Module.train_step`` of ``net`` split into ``stages`` stages on CPU
    devices 1..stages beside one device, alternating rounds, best kept."""
    from ..memory.split import split as split_net
    build, _ = NETS[net]
    shape = (batch, 3, image, image)
    _, sp = split_net(build(), {"data": shape}, stages, batch_split=False)
    symbol = sg.sym.Symbol(sp.graph().outputs)  # with the proposed ctx_group attributes
    devs = jax.devices()
    g2c = {g: sg.Context.of(devs[i + 1]) for i, g in enumerate(sp.group2ctx)}
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape).astype(np.float32)
    y = rng.integers(0, CLASSES, batch).astype(np.float32)
    runs = {}
    for side, kw in (("one", {}), ("stages", {"group2ctxs": g2c})):
        mod = sg.mod.Module(symbol, context=sg.Context.of(devs[0]), **kw)
        mod.bind([("data", shape)], [("softmax_label", y.shape)])
        mod.init_params(sg.init.Xavier(magnitude=2.0), seed=seed)
        mod.init_optimizer(optimizer="sgd", optimizer_params={"learning_rate": LR,
                                                              "momentum": MOMENTUM})
        placed = mod.prepare_batch(sg.io.DataBatch([x], [y]))

        def step(mod=mod, placed=placed):
            mod.train_step(placed)
            return mod._outputs
        t0 = time.perf_counter()
        jax.block_until_ready(step())
        runs[side] = {"mod": mod, "step": step, "first": time.perf_counter() - t0,
                      "best": float("inf")}
    for i in range(rounds):  # alternating which side goes first
        for side in (("one", "stages") if i % 2 == 0 else ("stages", "one")):
            runs[side]["best"] = min(runs[side]["best"], _timed(runs[side]["step"], steps))
    a, b = (runs[s]["mod"].get_params()[0] for s in ("one", "stages"))
    diff = max(float(np.max(np.abs(a[k].asnumpy() - b[k].asnumpy())) /
                     (np.max(np.abs(a[k].asnumpy())) or 1.0)) for k in a)
    sps = {s: batch * steps / runs[s]["best"] for s in runs}
    return {"net": net, "batch": batch, "stages": stages,
            "group2ctx": {k: str(v) for k, v in g2c.items()}, "cut_after": sp.cut_after,
            "samples_per_s": sps["stages"], "one_device_samples_per_s": sps["one"],
            "ratio": sps["stages"] / sps["one"],
            "step_ms": 1e3 * runs["stages"]["best"] / steps,
            "one_device_step_ms": 1e3 * runs["one"]["best"] / steps,
            "first_step_s": runs["stages"]["first"], "max_rel_param_diff": diff,
            "peak_vs_one_device": sp.ratio}


def stage_markdown(rows: list) -> list[str]:
    if not rows:
        return []
    lines = ["", "## Model parallel", "",
             "`Module.train_step` of the net split into N stages by `symgraph plan --split N` "
             "(`group2ctxs`, one simulated CPU device per stage) beside the same Module on one "
             "device, in one process, alternating rounds. *ratio* = stages / one device; "
             "*param diff*: largest relative difference of the parameters the two end with; "
             "*peak*: the split's largest per-device plan total / the one-device plan's.", "",
             "| net | stages | batch | samples/s | one device samples/s | ratio | "
             "ms/step (stages / one) | param diff | peak |",
             "|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in rows:
        lines.append(f"| {r['net']} | {r['stages']} | {r['batch']} | "
                     f"{r['samples_per_s']:,.0f} | {r['one_device_samples_per_s']:,.0f} | "
                     f"{r['ratio']:.2f} | {r['step_ms']:.2f} / {r['one_device_step_ms']:.2f} | "
                     f"{r['max_rel_param_diff']:.1e} | {r['peak_vs_one_device']:.3f}x |")
    return lines


def process_markdown(rows: list) -> list[str]:
    if not rows:
        return []
    lines = ["", "## Several processes", "",
             "`Module.train_step` with kvstore='dist_sync' in N processes of one simulated "
             "CPU device each (`symgraph launch`), beside one process of N simulated CPU "
             "devices, both run fresh in this run on the same batch. *ratio* = N processes / "
             "one process; *param diff*: largest relative difference of the parameters "
             "the two end with (same start, same steps).", "",
             "| net | processes x devices | batch | samples/s | one process samples/s | "
             "ratio | ms/step (N / one) | param diff |",
             "|---|--:|--:|--:|--:|--:|--:|--:|"]
    for r in rows:
        lines.append(f"| {r['net']} | {r['processes']} x {r['devices_per_process']} | "
                     f"{r['batch']} | {r['samples_per_s']:,.0f} | "
                     f"{r['one_process_samples_per_s']:,.0f} | {r['ratio']:.2f} | "
                     f"{r['step_ms']:.2f} / {r['one_process_step_ms']:.2f} | "
                     f"{r['max_rel_param_diff']:.1e} |")
    return lines


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.worker:
        return worker(args)
    note = request_cpu_devices()
    if note:
        print(note, flush=True)
    load_at_start = _load()
    available = jax.devices()
    counts = [d for d in args.devices if d <= len(available)]
    skipped = [d for d in args.devices if d > len(available)]
    runnable = [(n, d, b) for n in args.nets for d in counts for b in args.batch if b % d == 0]
    if not runnable:  # nothing to measure: say why, and leave earlier results alone
        why = f"device counts {skipped} exceed the {len(available)} " \
              f"{available[0].platform} device(s) here" if skipped else \
              f"no batch size in {args.batch} splits evenly over {counts} device(s)"
        print(f"nothing to run: {why}", flush=True)
        return 0
    rows, process_rows = [], []
    if args.processes > 1:
        import tempfile
        with tempfile.TemporaryDirectory(prefix="bench-train-processes") as folder:
            for net in args.nets:
                for batch in args.batch:
                    if batch % args.processes:
                        continue
                    r = measure_processes(net, batch, args.processes, args, folder,
                                          pairs=1 if args.quick else 2)
                    process_rows.append(r)
                    print(f"{net:7s} {r['processes']} processes x 1 device batch={batch:4d}  "
                          f"{r['samples_per_s']:9.0f}/s  one process x {r['processes']} "
                          f"devices {r['one_process_samples_per_s']:9.0f}/s  ratio "
                          f"{r['ratio']:.2f}  param diff {r['max_rel_param_diff']:.1e}",
                          flush=True)
    stage_rows = []
    if args.stages > 1 and args.stages < len(available):
        for net in args.nets:
            for batch in args.batch:
                r = measure_stages(net, batch, args.stages, args.image, args.steps,
                                   args.rounds)
                stage_rows.append(r)
                print(f"{net:7s} {r['stages']} stages batch={batch:4d}  "
                      f"{r['samples_per_s']:9.0f}/s  one device "
                      f"{r['one_device_samples_per_s']:9.0f}/s  ratio {r['ratio']:.2f}  "
                      f"param diff {r['max_rel_param_diff']:.1e}  peak "
                      f"{r['peak_vs_one_device']:.3f}x", flush=True)
    if args.quick:
        print(smoke_note(SMOKE_WHAT), flush=True)
    for net, dev, batch in runnable:
        row = measure(net, batch, available[:dev], args.image, args.steps, args.rounds)
        rows.append(row)
        print(f"{net:7s} devices={dev} batch={batch:4d}  symgraph "
              f"{row['symgraph_samples_per_s']:9.0f}/s  plain "
              f"{row['plain_samples_per_s']:9.0f}/s  ratio {row['ratio']:.2f}  "
              f"diff {row['rel_update_diff_after_step1']:.1e}", flush=True)
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "device_kind": f"{len(available)} x {available[0].device_kind} "
                       f"({available[0].platform})",
        "machine": machine(),
        "load_average_1min": {"start": load_at_start, "end": _load()},
        "versions": {"symgraph": sg.__version__, "jax": jax.__version__,
                     "numpy": np.__version__},
        "config": {"nets": args.nets, "batch": args.batch, "devices": args.devices,
                   "image": args.image, "steps": args.steps, "rounds": args.rounds,
                   "quick": args.quick, "lr": LR, "momentum": MOMENTUM,
                   "stages": args.stages},
        "skipped": (f"device counts {skipped}: this machine has {len(available)} "
                    f"{available[0].platform} device(s)") if skipped else None,
        "rows": rows,
        "process_rows": process_rows,
        "stage_rows": stage_rows,
    }
    os.makedirs(args.out, exist_ok=True)
    atomic_write_text(os.path.join(args.out, "results.json"), json.dumps(result, indent=1))
    atomic_write_text(os.path.join(args.out, "results.md"), markdown(result))
    chart(result, os.path.join(args.out, "throughput.png"))
    print(f"wrote {os.path.join(args.out, 'results.md')}")
    return 0


if __name__ == "__main__":  # the workers of the process rows run as python -m
    sys.exit(main())
