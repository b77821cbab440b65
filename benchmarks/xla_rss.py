#!/usr/bin/env python3
"""XLA's temp figure beside the memory a run really touches.

    python benchmarks/xla_rss.py [--nets vgg16,googlenet] [--batch 8] [--mode infer]
                                 [--measures none,scheduler,channels_last+scheduler]
                                 [--out benchmarks/results/xla_rss]

``memory_analysis()`` counts the buffers XLA assigns; work XLA hands to a
library (YNNPACK on the CPU) may allocate more of its own. For each net and
measure set this compiles symgraph's lowered program in a fresh process,
resets the process's peak resident set (``/proc/self/clear_refs``, Linux),
runs the program once and records how far the peak rose above the resident
set before the run, beside XLA's temp and symgraph's arena plan. The first
run is measured: later runs reuse pages the allocator kept, which hides
what a run needs. Linux only; small batches (each program really runs).
Writes results.json and results.md in ``--out``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MIB = 2 ** 20


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {key} in /proc/self/status")


def measure_here(name: str, batch: int, mode: str, measures, fraction=None,
                 program="fused") -> dict:
    """One program, in this process: XLA's figures and the run's peak RSS rise.
    ``fraction`` (training): plan under a budget of the other buckets plus
    that fraction of the internal bytes without recompute, recomputing what
    the solver picks; ``program``: 'fused' (one XLA program) or 'staged'
    (a program per segment, ``xla.training_step(segments=True)``)."""
    from symgraph import xla
    from symgraph.memory import plan
    from symgraph.models import data_shapes, get_model
    net, shapes, train = get_model(name), data_shapes(name, batch), mode == "train"
    p = plan(net, shapes, train=train, name=name)
    if fraction is not None:
        rest = p.total - p.internal["arena"]
        p = plan(net, shapes, train=True, name=name,
                 budget=int(rest + fraction * p.internal["arena"]))
    if train:
        step = xla.training_step(p, measures=measures,
                                 segments=True if program == "staged" else None)
    else:
        step = xla.inference_step(p, measures=measures)
    r = run_once(step)
    args = sum(a.size * a.dtype.itemsize for a in jax_leaves(step.args[:-1]))
    a = r["analysis"]
    return {"net": name, "batch": batch, "mode": mode,
            "measures": xla.measures_label(step.info["measures"]), "fraction": fraction, "program": program, "plan_total": p.total,
            "arena": p.internal["arena"], "xla_temp": a["temp"],
            "xla_footprint": xla.footprint(a), "arguments": args,
            "rss_rise": r["rss_rise"], "run_seconds": r["run_seconds"]}


def jax_leaves(tree) -> list:
    import jax
    return jax.tree_util.tree_leaves(tree)


def run_once(step) -> dict:
    """Compiles ``step`` (a ``symgraph.xla.Step``) and runs it once on
    arguments filled with uniform values, in this process: XLA's
    ``analysis`` (``xla.analysis_dict``), how far the peak resident set
    rose during the run (``rss_rise``) and its ``run_seconds``."""
    import gc
    import time

    import jax
    import jax.numpy as jnp
    import numpy as np

    from symgraph import xla
    rng = np.random.default_rng(0)
    args = jax.tree_util.tree_map(
        lambda s: jnp.asarray(rng.uniform(0.1, 1.0, s.shape).astype(s.dtype))
        if jnp.issubdtype(s.dtype, jnp.floating) else jnp.zeros(s.shape, s.dtype),
        step.args[:-1]) + (step.args[-1],)  # the last argument is the random key
    compiled = step.lower().compile(step.compiler_options or None)
    analysis = xla.analysis_dict(compiled)
    # the host copies jnp.asarray leaves are freed at the next collection:
    # collected during the run, their pages would be reused by it and the
    # peak would not rise (VGG-11 inference at batch 4 read -61 MiB against
    # XLA's figure, +59 with this)
    jax.block_until_ready(args)
    gc.collect()
    before = _status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak (VmHWM) starts again from the current resident set
    t = time.perf_counter()
    jax.block_until_ready(compiled(*args))
    seconds = time.perf_counter() - t
    return {"analysis": analysis, "rss_rise": _status("VmHWM") - before,
            "run_seconds": seconds}


def measure(name: str, batch: int, mode: str, measures, fraction=None,
            program="fused") -> dict:
    """``measure_here`` in a fresh process, so no run sees another's pages."""
    code = ("import json, sys; sys.path.insert(0, %r); import xla_rss; "
            "print(json.dumps(xla_rss.measure_here(%r, %d, %r, %r, %r, %r)))"
            % (os.path.dirname(os.path.abspath(__file__)), name, batch, mode, measures,
               fraction, program))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def markdown(rows: list, env: dict) -> str:
    out = [f"# XLA temp vs the memory a run touches ({env['date']})", "",
           f"{env['machine']}; jax {env['jax']}. MiB. *RSS rise*: how far the process's "
           "peak resident set rose above its resident set during the first run of the "
           "compiled program (inputs and parameters already resident).", "",
           "*budget*: the fraction of the internal bytes without recompute the plan was "
           "held to; *program*: one fused XLA program or a program per segment (staged); "
           "*XLA*: temp + argument + output - alias; *resident*: the arguments plus the "
           "RSS rise.", "",
           "| net | batch | mode | measures | budget | program | plan total | arena "
           "| XLA temp | XLA | RSS rise | resident | run s |",
           "|---|--:|---|---|--:|---|--:|--:|--:|--:|--:|--:|--:|"]

    def mib(v):
        return "-" if v is None else f"{v / MIB:,.0f}"
    for r in rows:
        args = r.get("arguments")
        out.append(f"| {r['net']} | {r['batch']} | {r['mode']} | {r['measures']} "
                   f"| {r.get('fraction') or '-'} | {r.get('program', 'fused')} "
                   f"| {mib(r.get('plan_total'))} | {mib(r['arena'])} | {mib(r['xla_temp'])} "
                   f"| {mib(r.get('xla_footprint'))} | {mib(r['rss_rise'])} "
                   f"| {mib(None if args is None else args + r['rss_rise'])} "
                   f"| {r['run_seconds']:.2f} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nets", default="vgg16,googlenet")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--mode", choices=("infer", "train"), default="infer")
    ap.add_argument("--measures", default="none,scheduler,channels_last+scheduler",
                    help="comma-separated measure sets ('+' joins measures), 'none', or "
                    "'auto' (what a Module picks)")
    ap.add_argument("--fraction", type=float,
                    help="training under a budget: the other buckets plus this fraction of "
                    "the internal bytes without recompute (the solver picks what to recompute)")
    ap.add_argument("--programs", default="fused",
                    help="training: comma-separated fused (one XLA program) and/or staged "
                    "(a program per segment)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "results", "xla_rss"))
    args = ap.parse_args(argv)
    if not os.path.exists("/proc/self/clear_refs"):
        print("xla_rss: needs Linux's /proc/self/clear_refs", file=sys.stderr)
        return 2
    import datetime
    import platform

    import jax
    from tqdm import tqdm

    from symgraph.util import atomic_open
    sets = ["auto" if m == "auto" else tuple(m.split("+")) if m != "none" else ()
            for m in args.measures.split(",")]
    programs = args.programs.split(",") if args.mode == "train" else ["fused"]
    if not set(programs) <= {"fused", "staged"}:
        ap.error(f"--programs: fused and/or staged, not {args.programs!r}")
    if args.fraction is not None and (args.mode != "train" or not 0 < args.fraction <= 1):
        ap.error("--fraction: a number in (0, 1], with --mode train")
    jobs = [(n, s, prog) for n in args.nets.split(",") for s in sets for prog in programs]
    rows = []
    for name, ms, prog in tqdm(jobs, desc="xla rss", unit="program"):
        rows.append(measure(name, args.batch, args.mode, ms, args.fraction, prog))
    env = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": f"{platform.machine()}, {os.cpu_count()} cores", "jax": jax.__version__}
    os.makedirs(args.out, exist_ok=True)
    with atomic_open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"tool": "benchmarks/xla_rss.py", **env, "rows": rows}, f, indent=1)
    with atomic_open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(markdown(rows, env))
    print(markdown(rows, env))
    return 0


if __name__ == "__main__":
    sys.exit(main())
