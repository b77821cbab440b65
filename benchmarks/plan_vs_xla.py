#!/usr/bin/env python3
"""Plan vs XLA: symgraph's arena plan beside the temp bytes XLA really uses.

    python benchmarks/plan_vs_xla.py [--nets vgg16,inception-bn,resnet-50,googlenet]
                                     [--batch 64] [--modes train,infer]
                                     [--out benchmarks/results/plan_vs_xla] [--no-breakdown]

For each zoo net and mode it plans the graph (``arena``, ``lower_bound``),
then compiles -- compiles only, nothing runs -- symgraph's lowered step
(training: forward + explicit backward + SGD; ``symgraph.xla``) with no
memory measure and with each measure, and a plain-JAX step of the same net
(``jax.value_and_grad`` of the forward + SGD) with and without XLA's
memory-optimized scheduler, and reads ``memory_analysis()``. "best" is the
measure set with the least temp (``xla.best_step``'s choice). For the best
training program it also records ``xla.memory_breakdown``: what XLA's temp
holds at its busiest step. Then it times training steps of a small net (resnet-cifar-20,
batch 32) under each measure set and the plain-JAX step side by side.
Writes results.json and results.md in ``--out``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from symgraph.xla import INFER_CANDIDATES, TRAIN_CANDIDATES  # noqa: E402
from symgraph.xla import measures_label as _label  # noqa: E402

NETS = ("vgg16", "inception-bn", "resnet-50", "googlenet")
# best_step's candidates, and donate and split_wgrad alone to show what each
# does by itself (anchor+scheduler was tried too and never won)
TRAIN_MEASURES = ((), ("scheduler",), ("split_wgrad",)) + tuple(
    ms for ms in TRAIN_CANDIDATES if ms not in ((), ("scheduler",)))
INFER_MEASURES = INFER_CANDIDATES
PLAIN_MEASURES = ((), ("scheduler",))
MIB = 2 ** 20


def measure(name: str, batch: int, mode: str, breakdown: bool = True, bar=None) -> dict:
    """One row: the plan and XLA's figures for zoo net ``name``."""
    from symgraph import xla
    from symgraph.memory import plan
    from symgraph.models import data_shapes, get_model
    net = get_model(name)
    shapes = data_shapes(name, batch)
    train = mode == "train"
    p = plan(net, shapes, train=train, name=name)
    row = {"net": name, "batch": batch, "mode": mode,
           "arena": p.internal["arena"], "lower_bound": p.internal["lower_bound"],
           "symgraph": {}, "plain_jax": {}, "compile_seconds": {}}
    candidates = TRAIN_MEASURES if train else INFER_MEASURES
    make = (lambda ms: xla.training_step(p, measures=ms)) if train else \
        (lambda ms: xla.inference_step(p, measures=ms))
    for ms in candidates:
        if bar is not None:
            bar.set_postfix_str(f"{name} {mode} symgraph {_label(ms)}")
        t = time.perf_counter()
        row["symgraph"][_label(ms)] = xla.memory(make(ms))
        row["compile_seconds"][f"symgraph {_label(ms)}"] = time.perf_counter() - t
    for ms in PLAIN_MEASURES:
        if bar is not None:
            bar.set_postfix_str(f"{name} {mode} plain JAX {_label(ms)}")
        t = time.perf_counter()
        row["plain_jax"][_label(ms)] = xla.memory(
            xla.plain_jax_step(net, shapes, train=train, measures=ms))
        row["compile_seconds"][f"plain {_label(ms)}"] = time.perf_counter() - t
    temps = {k: v["temp"] for k, v in row["symgraph"].items()}
    best = min(temps, key=lambda k: (temps[k], k != "none"))
    base, plain = temps["none"], row["plain_jax"]["none"]["temp"]
    plain_best = min(v["temp"] for v in row["plain_jax"].values())
    row["best"] = best
    row["ratios"] = {
        "before_over_arena": base / row["arena"],
        "best_over_arena": temps[best] / row["arena"],
        "before_over_plain": base / plain,
        "best_over_plain": temps[best] / plain,
        "best_over_plain_best": temps[best] / plain_best,
        "plain_over_arena": plain / row["arena"],
    }
    if breakdown and train:
        if bar is not None:
            bar.set_postfix_str(f"{name} {mode} breakdown")
        ms = () if best == "none" else tuple(best.split("+"))
        b = xla.memory_breakdown(make(ms), graph=p)
        row["breakdown"] = b.to_json(top=10)
    return row


SPEED_NET, SPEED_BATCH = "resnet-cifar-20", 32


def _real(step, classes: int, seed: int = 0):
    """Random arrays for a step's ShapeDtypeStruct arguments."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    rng = np.random.default_rng(seed)

    def fill(name, s):
        if name.endswith("label"):
            return jnp.asarray(rng.integers(0, classes, s.shape), s.dtype)
        if name.endswith("moving_var"):
            return jnp.ones(s.shape, s.dtype)
        return jnp.asarray(rng.standard_normal(s.shape) * 0.05, s.dtype)
    return tuple(jax.tree_util.tree_map_with_path(
        lambda path, s: fill(str(getattr(path[0], "key", "")) if path else "", s), a) for a in step.args[:-1]) + \
        (jax.random.key(seed),)


def speed(name: str = SPEED_NET, batch: int = SPEED_BATCH, rounds: int = 5,
          steps: int = 5) -> dict:
    """Training steps per second of symgraph's step under each measure set and
    of the plain-JAX step, timed side by side (interleaved rounds, median)."""
    import statistics

    import jax

    from symgraph import xla
    from symgraph.memory import plan
    from symgraph.models import data_shapes, get_model, model_info
    net = get_model(name)
    shapes = data_shapes(name, batch)
    p = plan(net, shapes, train=True, name=name)
    progs = {f"symgraph {_label(ms)}": xla.training_step(p, measures=ms)
             for ms in TRAIN_MEASURES}
    progs["plain JAX"] = xla.plain_jax_step(net, shapes)
    classes = model_info(name).num_classes
    runs = {}
    for k, st in progs.items():
        f = st.jit()
        args = _real(st, classes)
        jax.block_until_ready(f(*args))  # compile and warm up
        runs[k] = (f, args)
    times = {k: [] for k in runs}
    for _ in range(rounds):
        for k, (f, args) in runs.items():
            t = time.perf_counter()
            for _ in range(steps):
                out = f(*args)
            jax.block_until_ready(out)
            times[k].append((time.perf_counter() - t) / steps)
    per_s = {k: 1 / statistics.median(v) for k, v in times.items()}
    return {"net": name, "batch": batch, "rounds": rounds, "steps": steps,
            "steps_per_second": per_s,
            "over_plain": {k: v / per_s["plain JAX"] for k, v in per_s.items()}}


def run(nets, batch: int, modes, breakdown: bool = True, progress: bool = True,
        with_speed: bool = True) -> dict:
    from tqdm import tqdm

    from symgraph.bench.memory import environment
    jobs = [(n, m) for n in nets for m in modes]
    rows = []
    t0 = time.perf_counter()
    bar = tqdm(jobs, desc="plan vs XLA", unit="net", disable=not progress, leave=False)
    for name, mode in bar:
        rows.append(measure(name, batch, mode, breakdown, bar))
    bar.close()
    speed_row = speed() if with_speed else None
    return {"tool": "benchmarks/plan_vs_xla.py", **environment(), "speed": speed_row,
            "config": {"nets": list(nets), "batch": batch, "modes": list(modes),
                       "train_measures": [_label(m) for m in TRAIN_MEASURES],
                       "infer_measures": [_label(m) for m in INFER_MEASURES],
                       "plain_measures": [_label(m) for m in PLAIN_MEASURES],
                       "dtype": "float32", "compile_only": True},
            "units": "bytes", "seconds": time.perf_counter() - t0, "rows": rows}


def _m(x) -> str:
    return "-" if x is None else f"{x / MIB:,.0f}"


def markdown(result: dict) -> str:
    from symgraph import xla
    rows = result["rows"]
    env = result["machine"]
    out = [f"# Plan vs XLA ({result['date']})", "",
           f"Machine: {env['cpu']}, {env['cpu_count']} cores, {env['memory_gib']} GiB; "
           f"jax {result['versions']['jax']}, backend {env['jax_backend']}. Compile only "
           f"(`memory_analysis()`), float32, batch {result['config']['batch']}. MiB.", "",
           "*arena*: symgraph's plan of the `internal` bucket. *before*: XLA temp of "
           "symgraph's lowered step with no measure; *best*: with the measure set "
           "that gave the least temp (named in *measures*). *plain*: XLA temp of a "
           "plain-JAX `value_and_grad` step of the same net (*plain sched*: with "
           "XLA's memory-optimized CPU scheduler).", "",
           "| net | mode | arena | before | best | measures | plain | plain sched "
           "| before/arena | best/arena | best/plain |",
           "|---|---|--:|--:|--:|---|--:|--:|--:|--:|--:|"]
    for r in rows:
        s, q = r["symgraph"], r["plain_jax"]
        out.append(f"| {r['net']} | {r['mode']} | {_m(r['arena'])} | {_m(s['none']['temp'])} "
                   f"| {_m(s[r['best']]['temp'])} | {r['best']} | {_m(q['none']['temp'])} "
                   f"| {_m(q['scheduler']['temp'])} "
                   f"| {r['ratios']['before_over_arena']:.2f} "
                   f"| {r['ratios']['best_over_arena']:.2f} "
                   f"| {r['ratios']['best_over_plain']:.2f} |")
    out += ["", "## Each measure alone (XLA temp, MiB)", ""]
    labels = list(dict.fromkeys(result["config"]["train_measures"] +
                                result["config"]["infer_measures"]))
    out += ["| net | mode | " + " | ".join(labels) + " |",
            "|---|---|" + "--:|" * len(labels)]
    for r in rows:
        out.append(f"| {r['net']} | {r['mode']} | " + " | ".join(
            _m(r["symgraph"][k]["temp"]) if k in r["symgraph"] else "" for k in labels) + " |")
    out += ["", "`donate` moves bytes between XLA's output and temp figures (the "
            "outputs alias the donated parameters, so XLA can no longer use the "
            "output buffers as scratch); footprint = arguments + outputs - aliased + "
            "temp:", "", "| net | footprint none | footprint donate |", "|---|--:|--:|"]
    for r in rows:
        if "donate" in r["symgraph"]:
            f = {k: r["symgraph"][k] for k in ("none", "donate")}
            out.append(f"| {r['net']} | " + " | ".join(
                _m(xla.footprint(v)) for v in f.values()) + " |")
    out += ["", "## What XLA's temp holds at its busiest step (best program)", ""]
    for r in rows:
        b = r.get("breakdown")
        if not b:
            continue
        out.append(f"**{r['net']} {r['mode']}** ({r['best']}): temp {_m(b['temp'])}, "
                   f"live at the busiest step {_m(b['peak_live'])}; "
                   + ", ".join(f"{x['kind']} / {x['role']} {_m(x['bytes'])}"
                               for x in b["by_kind_role"] if x["bytes"] >= MIB))
        out.append("")
    sp = result.get("speed")
    if sp:
        out += [f"## Speed ({sp['net']}, batch {sp['batch']}, training steps per second, "
                f"median of {sp['rounds']} interleaved rounds of {sp['steps']} steps)", "",
                "| program | steps/s | over plain JAX |", "|---|--:|--:|"]
        for k, v in sp["steps_per_second"].items():
            out.append(f"| {k} | {v:.2f} | {sp['over_plain'][k]:.2f} |")
        out.append("")
    out.append(f"Run time {result['seconds']:.0f} s.")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nets", default=",".join(NETS))
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--modes", default="train,infer")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "results", "plan_vs_xla"))
    ap.add_argument("--no-breakdown", action="store_true")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--no-speed", action="store_true",
                    help=f"skip the side-by-side step timing of {SPEED_NET}")
    args = ap.parse_args(argv)
    from symgraph.models import list_models
    nets = [n for n in args.nets.split(",") if n]
    bad = [n for n in nets if n not in list_models()]
    modes = [m for m in args.modes.split(",") if m]
    if bad or not nets or any(m not in ("train", "infer") for m in modes) or args.batch < 1:
        print(f"plan_vs_xla: bad --nets/--modes/--batch (unknown nets: {bad})", file=sys.stderr)
        return 2
    result = run(nets, args.batch, modes, not args.no_breakdown, not args.no_progress,
                 not args.no_speed)
    from symgraph.util import atomic_write_text
    os.makedirs(args.out, exist_ok=True)
    atomic_write_text(os.path.join(args.out, "results.json"),
                      json.dumps(result, indent=1, sort_keys=False) + "\n")
    md = markdown(result)
    atomic_write_text(os.path.join(args.out, "results.md"), md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
