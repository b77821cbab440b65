#!/usr/bin/env python3
"""The program Module.fit runs: XLA's temp beside the plan and beside a
hand-written plain-JAX step, and its speed with and without the measures.

    python benchmarks/module_step.py [--nets vgg16,inception-bn,resnet-50,googlenet]
                                     [--batch 64] [--speed-nets resnet-50,vgg16]
                                     [--speed-batch 4] [--out DIR]

Memory (compile only, one CPU device, float32): for each zoo net, the arena
plan (``sg.plan``, training and inference), XLA's temp of the training step
``Module.fit`` compiles (SGD with momentum 0.9, donated; ``xla.training_step``
is that program) under the default measures (``symgraph.measures``' rule)
and with none, and of the inference program; next to it a hand-written
``jax.lax`` step of the same net (``symgraph.bench.handwritten``: NCHW and
NHWC, SGD with momentum, donated) compiled with the same compiler options.

Speed: training steps per second of the default program, the plain
lowering (``memory_measures='none'``) and the hand-written steps, timed
side by side in one run (interleaved rounds, median).

Writes results.json and results.md to ``--out`` (default: a new folder
``module_step`` under the current directory; pass
``benchmarks/results/module_step`` to update the committed figures).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MIB = 2 ** 20


def memory_row(name: str, batch: int) -> dict:
    from symgraph import measures, xla
    from symgraph.bench import handwritten as hw
    from symgraph.memory import plan
    from symgraph.models import data_shapes, get_model
    net = get_model(name)
    shapes = data_shapes(name, batch)
    row = {"net": name, "batch": batch}
    for mode in ("train", "infer"):
        p = plan(net, shapes, train=mode == "train", name=name)
        make = xla.training_step if p.train else xla.inference_step
        r = {"arena": p.internal["arena"], "gradients": p.buckets["gradients"]}
        for label in ("auto", "none"):
            st = make(p, measures=label)
            r[label] = {"temp": xla.memory(st)["temp"], "program": st.info}
        opts = measures.compiler_options(r["auto"]["program"]["measures"])
        size = shapes["data"][-1]
        for layout in ("NCHW", "NHWC"):
            r[f"handwritten_{layout}"] = xla.memory(hw.step(
                name, batch, size, layout, train=p.train, compiler_options=opts))["temp"]
        r["auto_over_arena"] = r["auto"]["temp"] / r["arena"]
        r["none_over_arena"] = r["none"]["temp"] / r["arena"]
        r["auto_over_handwritten"] = r["auto"]["temp"] / min(r["handwritten_NCHW"],
                                                             r["handwritten_NHWC"])
        row[mode] = r
    return row


def _module_step(name, batch, measures):
    """A bound Module's compiled training step and a batch for it."""
    import numpy as np

    import symgraph as sg
    from symgraph.models import data_shapes, get_model, model_info
    shape = data_shapes(name, batch)["data"]
    mod = sg.mod.Module(get_model(name), memory_measures=measures)
    mod.bind([("data", shape)], [("softmax_label", (batch,))])
    mod.init_params(sg.init.Xavier())
    mod.init_optimizer(optimizer_params={"learning_rate": 0.01, "momentum": 0.9})
    rng = np.random.default_rng(0)
    b = sg.io.DataBatch(data=[rng.standard_normal(shape).astype(np.float32)],
                        label=[rng.integers(0, model_info(name).num_classes, batch)
                               .astype(np.float32)])
    b = mod.prepare_batch(b)

    def run():
        mod.train_step(b)
        return mod._params
    return run


def speed_row(name: str, batch: int, rounds: int, steps: int) -> dict:
    import jax

    from symgraph.bench import handwritten as hw
    runs = {"symgraph default": _module_step(name, batch, "auto"),
            "symgraph none": _module_step(name, batch, "none")}
    for layout in ("NCHW", "NHWC"):
        st = hw.step(name, batch, 224, layout)
        f, args = st.jit(), hw.real_args(name, batch, 224, layout)
        state = {"args": args}

        def run(f=f, state=state):
            p, m, s, x, y, k = state["args"]
            out = f(p, m, s, x, y, k)
            state["args"] = (out[1], out[2], out[3], x, y, k)  # (loss, params, mom, state)
            return out
        runs[f"hand-written {layout}"] = run
    for r in runs.values():
        jax.block_until_ready(r())  # compile and warm up
    times = {k: [] for k in runs}
    for _ in range(rounds):
        for k, r in runs.items():
            t = time.perf_counter()
            for _ in range(steps):
                out = r()
            jax.block_until_ready(out)
            times[k].append((time.perf_counter() - t) / steps)
    per_s = {k: 1 / statistics.median(v) for k, v in times.items()}
    return {"net": name, "batch": batch, "rounds": rounds, "steps": steps,
            "steps_per_second": per_s,
            "default_over_none": per_s["symgraph default"] / per_s["symgraph none"],
            "default_over_best_handwritten": per_s["symgraph default"] / max(
                per_s["hand-written NCHW"], per_s["hand-written NHWC"])}


def markdown(res: dict) -> str:
    m = lambda b: f"{b / MIB:,.0f}"  # noqa: E731
    out = [f"# The program Module.fit runs ({res['date']})", "",
           f"{res['machine']}; jax {res['jax']}. Compile only, float32, batch "
           f"{res['batch']}, one CPU device, MiB. *default*: XLA temp of the training step "
           "`Module.fit` compiles (SGD momentum 0.9, donated) -- or of `predict`'s program -- "
           "under the default memory measures (named); *none*: the same program lowered "
           "plainly. *hand-written*: a `jax.lax` step of the same net, same compiler "
           "options.", "",
           "| net | mode | arena | none | default | measures | hand NCHW | hand NHWC "
           "| none/arena | default/arena | default/hand |",
           "|---|---|--:|--:|--:|---|--:|--:|--:|--:|--:|"]
    for row in res["rows"]:
        for mode in ("train", "infer"):
            r = row[mode]
            out.append(f"| {row['net']} | {mode} | {m(r['arena'])} | {m(r['none']['temp'])} "
                       f"| {m(r['auto']['temp'])} | "
                       f"{'+'.join(r['auto']['program']['measures']) or 'none'} "
                       f"| {m(r['handwritten_NCHW'])} | {m(r['handwritten_NHWC'])} "
                       f"| {r['none_over_arena']:.2f} | {r['auto_over_arena']:.2f} "
                       f"| {r['auto_over_handwritten']:.2f} |")
    if res["speed"]:
        out += ["", "## Speed (training steps per second, 224x224, median of interleaved "
                "rounds)", "", "| net | batch | program | steps/s |", "|---|--:|---|--:|"]
        for s in res["speed"]:
            for k, v in s["steps_per_second"].items():
                out.append(f"| {s['net']} | {s['batch']} | {k} | {v:.3f} |")
        out += ["", "| net | default / none | default / faster hand-written |",
                "|---|--:|--:|"]
        for s in res["speed"]:
            out.append(f"| {s['net']} | {s['default_over_none']:.3f} "
                       f"| {s['default_over_best_handwritten']:.3f} |")
    out.append("")
    out.append(f"Run time {res['seconds']:.0f} s.")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    ap.add_argument("--nets", default="vgg16,inception-bn,resnet-50,googlenet")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--speed-nets", default="resnet-50,vgg16",
                    help="nets timed at 224x224 ('' for none)")
    ap.add_argument("--speed-batch", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--out", default="module_step")
    args = ap.parse_args(argv)
    import datetime
    import platform

    import jax
    from tqdm import tqdm
    t0 = time.perf_counter()
    nets = [n for n in args.nets.split(",") if n]
    rows = [memory_row(n, args.batch) for n in tqdm(nets, desc="memory", unit="net")]
    speed = [speed_row(n, args.speed_batch, args.rounds, args.steps)
             for n in tqdm([n for n in args.speed_nets.split(",") if n], desc="speed",
                           unit="net")]
    res = {"tool": "benchmarks/module_step.py",
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
           "jax": jax.__version__, "backend": jax.default_backend(), "batch": args.batch,
           "rows": rows, "speed": speed, "seconds": time.perf_counter() - t0}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(markdown(res))
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
