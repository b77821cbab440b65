#!/usr/bin/env python3
"""SSD-300 beside MXNet 1.9.1: planned memory and CPU training speed of one symbol file.

MXNet is never a dependency of symgraph: run this script with MXNet's own
interpreter, made outside the repository, and name an interpreter that has
symgraph with ``--python``:

    python -m venv MXVENV && MXVENV/bin/pip install mxnet==1.9.1 numpy==1.23.5
    MXVENV/bin/python benchmarks/mxnet_ssd300.py --python python3 \\
        [--plan-batch 32] [--batch 4] [--steps 3] [--rounds 2]
        [--out benchmarks/results/mxnet_ssd300]

The net is the file ``symgraph zoo ssd-300-vgg16 -o ssd300.json`` writes
(the training symbol, 20 classes), labels (batch, 50, 5).

Memory (``--plan-batch``, training): symgraph's arena and lower bound and
XLA's temp bytes of the step ``Module.fit`` compiles on this machine's CPU,
all from ``symgraph plan FILE --shape ... --train --json``; MXNet's
``Total N MB allocated`` for a ``simple_bind`` of the same file asking for
the parameter gradients only (``benchmarks/mxnet_memory.py``'s
``planned_mib``), under its default settings and the others that script
names. Both figures leave out arguments and their gradients.

Speed (``--batch``): a training step (forward, backward, SGD with momentum
0.9) on one fixed random batch, in fresh processes, alternating
MXNet / symgraph / symgraph / MXNet per pair of ``--rounds``; each process
runs one warm-up step, then ``--steps`` timed steps (each waited for); the
best step of each framework is kept. MXNet: ``Module.forward_backward`` +
``update`` (``MXNET_SUBGRAPH_BACKEND=NONE`` unless ``--mxnet-fuse``);
symgraph: ``Module.train_step``. Results: results.json and results.md in
``--out``.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

from mxnet_detection import write_atomic  # this folder: the script's sys.path[0]

# before mxnet is imported: MXNet's planner figure without conv+ReLU fusion,
# as benchmarks/mxnet_memory.py reads it
os.environ["MXNET_SUBGRAPH_BACKEND"] = "NONE"

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join("benchmarks", "results", "mxnet_ssd300")
NET = "ssd-300-vgg16"
OBJECTS = 50
MIB = 2 ** 20


def _batch_arrays(batch: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1, (batch, 3, 300, 300)).astype(np.float32)
    lab = -np.ones((batch, OBJECTS, 5), np.float32)
    for i in range(batch):
        n = 1 + i % 4
        xy = rng.uniform(0, 0.6, (n, 2))
        lab[i, :n, 0] = rng.integers(0, 20, n)
        lab[i, :n, 1:3] = xy
        lab[i, :n, 3:5] = xy + rng.uniform(0.1, 0.4, (n, 2))
    return x, lab


def _step_times(step, sync, steps: int) -> list:
    step()
    sync()  # warm-up: compile (symgraph) and first allocation (MXNet)
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t)
    return times


def worker_mxnet(path: str, batch: int, steps: int) -> dict:
    import mxnet as mx
    x, lab = _batch_arrays(batch)
    mod = mx.mod.Module(mx.sym.load(path), data_names=["data"], label_names=["label"],
                        context=mx.cpu())
    mod.bind([("data", x.shape)], [("label", lab.shape)])
    mod.init_params(mx.init.Xavier(magnitude=2.0))
    mod.init_optimizer(optimizer="sgd", optimizer_params={"learning_rate": 1e-3,
                                                          "momentum": 0.9})
    data = mx.io.DataBatch([mx.nd.array(x)], [mx.nd.array(lab)])

    def step():
        mod.forward_backward(data)
        mod.update()

    return {"times": _step_times(step, mx.nd.waitall, steps)}


def worker_symgraph(path: str, batch: int, steps: int) -> dict:
    import jax
    import symgraph as sg
    x, lab = _batch_arrays(batch)
    mod = sg.mod.Module(sg.sym.load(path), data_names=["data"], label_names=["label"],
                        context=sg.cpu())
    mod.bind([("data", x.shape)], [("label", lab.shape)])
    mod.init_params(sg.init.Xavier(magnitude=2.0))
    mod.init_optimizer(optimizer="sgd", optimizer_params={"learning_rate": 1e-3,
                                                          "momentum": 0.9})
    data = mod.prepare_batch(sg.io.DataBatch([x], [lab]))
    t = time.perf_counter()
    # as symgraph/bench/train.py waits: the new parameters and the outputs
    times = _step_times(lambda: mod.train_step(data),
                        lambda: jax.block_until_ready((mod._params, mod._outputs)), steps)
    return {"times": times, "first_step_s": time.perf_counter() - t - sum(times)}


def _run_worker(args, side: str, path: str) -> dict:
    env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS="cpu")
    if side == "mxnet":
        exe = sys.executable
        if args.mxnet_fuse:
            env.pop("MXNET_SUBGRAPH_BACKEND", None)
    else:
        exe = args.python
        env.pop("MXNET_SUBGRAPH_BACKEND", None)
    res = subprocess.run([exe, os.path.abspath(__file__), "--worker", side, "--file", path,
                          "--batch", str(args.batch), "--steps", str(args.steps)],
                         check=True, env=env, capture_output=True, text=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def memory(args, path: str) -> dict:
    b = args.plan_batch
    shapes = {"data": (b, 3, 300, 300), "label": (b, OBJECTS, 5)}
    env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS="cpu")
    env.pop("MXNET_SUBGRAPH_BACKEND", None)
    cmd = [args.python, "-m", "symgraph.cli", "plan", path, "--train", "--json"]
    for k, v in shapes.items():
        cmd += ["--shape", f"{k}={','.join(map(str, v))}"]
    plan = json.loads(subprocess.run(cmd, check=True, env=env, cwd=REPO, capture_output=True,
                                     text=True).stdout)
    internal = plan["bytes"]["internal"]
    out = {"batch": b, "label_shape": list(shapes["label"]),
           "symgraph_mib": {k: internal[k] / MIB for k in internal},
           "xla_temp_mib": plan["xla"]["temp"] / MIB,
           "xla_measures": plan["xla"]["program"]["measures"]}
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import mxnet as mx
    import mxnet_memory
    net = mx.sym.load(path)
    out["mxnet_mib"] = {s: mxnet_memory.planned_mib(mx, net, shapes, True, s)
                        for s in ("both", "exact", "inplace", "mirror")}
    out["arena_over_mxnet"] = out["symgraph_mib"]["arena"] / out["mxnet_mib"]["both"]
    return out


def speed(args, path: str) -> dict:
    runs = []
    for r in range(args.rounds):
        for side in (("mxnet", "symgraph") if r % 2 == 0 else ("symgraph", "mxnet")):
            res = _run_worker(args, side, path)
            res["side"] = side
            print(f"{side}: step seconds {[round(t, 2) for t in res['times']]}", flush=True)
            runs.append(res)
    best = {s: min(min(r["times"]) for r in runs if r["side"] == s)
            for s in ("mxnet", "symgraph")}
    ips = {s: args.batch / t for s, t in best.items()}
    return {"batch": args.batch, "steps": args.steps, "rounds": args.rounds, "runs": runs,
            "best_step_s": best, "images_per_s": ips,
            "ratio": ips["symgraph"] / ips["mxnet"]}


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def _round(v):
    return None if v is None else round(v, 1)


def markdown(res: dict) -> str:
    m, s = res["memory"], res["speed"]
    lines = ["# SSD-300 (VGG16) beside MXNet 1.9.1: memory and CPU speed", "",
             f"{res['when']}, {res['machine']}; command: `{res['command']}`. The file: "
             f"`symgraph zoo {NET}` (training symbol, 20 classes).", "",
             f"## Planned memory, training, batch {m['batch']}, 3x300x300, label "
             f"{'x'.join(map(str, m['label_shape']))}", "",
             "Internal memory only (arguments and their gradients left out on both sides). "
             "MiB.", "",
             "| figure | MiB | / MXNet default |", "|---|---|---|"]
    base = m["mxnet_mib"]["both"]
    rows = [("symgraph arena", m["symgraph_mib"]["arena"]),
            ("symgraph lower bound", m["symgraph_mib"]["lower_bound"]),
            ("symgraph, MXNet's strategy (inplace + co-share)", m["symgraph_mib"]["both"]),
            (f"XLA temp, CPU (measures {'+'.join(m['xla_measures']) or 'none'})",
             m["xla_temp_mib"]),
            ("MXNet 1.9.1 default (inplace + co-share)", base),
            ("MXNet 1.9.1 NNVM_EXEC_MATCH_RANGE=1", m["mxnet_mib"]["exact"]),
            ("MXNet 1.9.1 no co-share", m["mxnet_mib"]["inplace"]),
            ("MXNet 1.9.1 MXNET_BACKWARD_DO_MIRROR=1", m["mxnet_mib"]["mirror"])]
    lines += [f"| {k} | {v:.0f} | {v / base:.3f} |" for k, v in rows]
    lines += ["", f"## Training speed, CPU, batch {s['batch']}", "",
              f"Best of {s['rounds']} fresh processes per framework x {s['steps']} timed "
              f"steps (after one warm-up step), alternating. MXNet with oneDNN: "
              f"{res.get('mxnet_onednn')}. Load average at the start: "
              f"{_round(res['load_before'])}, at the end: {_round(res['load_after'])}.", "",
              "| framework | best step (s) | images/s |", "|---|---|---|",
              f"| MXNet 1.9.1 | {s['best_step_s']['mxnet']:.2f} | "
              f"{s['images_per_s']['mxnet']:.3f} |",
              f"| symgraph | {s['best_step_s']['symgraph']:.2f} | "
              f"{s['images_per_s']['symgraph']:.3f} |",
              "", f"symgraph / MXNet: {s['ratio']:.2f}x."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=None, help="an interpreter with symgraph")
    ap.add_argument("--plan-batch", type=int, default=32)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--mxnet-fuse", action="store_true",
                    help="let MXNet's oneDNN subgraph backend fuse conv+ReLU")
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--worker", choices=["mxnet", "symgraph"], help=argparse.SUPPRESS)
    ap.add_argument("--file", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        fn = worker_mxnet if args.worker == "mxnet" else worker_symgraph
        print(json.dumps(fn(args.file, args.batch, args.steps)))
        return 0
    if not args.python:
        ap.error("--python: an interpreter that has symgraph is needed")
    import mxnet as mx
    res = {"when": _dt.date.today().isoformat(),
           "machine": f"{platform.machine()}, {os.cpu_count()} cores, mxnet {mx.__version__}",
           "command": "MXVENV/bin/python benchmarks/mxnet_ssd300.py --python python3"
                      + "".join(f" --{k.replace('_', '-')} {getattr(args, k)}"
                                for k, d in (("plan_batch", 32), ("batch", 4), ("steps", 3),
                                             ("rounds", 2)) if getattr(args, k) != d)
                      + (" --mxnet-fuse" if args.mxnet_fuse else ""),
           "mxnet_onednn": mx.runtime.Features().is_enabled("MKLDNN"),
           "load_before": _load()}
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "ssd300.json")
        env = dict(os.environ, PYTHONPATH=REPO)
        subprocess.run([args.python, "-m", "symgraph.cli", "zoo", NET, "-o", path], check=True,
                       env=env, cwd=REPO)
        res["memory"] = memory(args, path)
        print(json.dumps(res["memory"]), flush=True)
        res["speed"] = speed(args, path)
    res["load_after"] = _load()
    os.makedirs(args.out, exist_ok=True)
    write_atomic(os.path.join(args.out, "results.json"), json.dumps(res, indent=1) + "\n")
    text = markdown(res)
    write_atomic(os.path.join(args.out, "results.md"), text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
