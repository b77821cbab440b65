#!/usr/bin/env python3
"""Depthwise convolutions on the CPU: per-channel taps against the grouped
convolution, in the Module's programs of a held-out MobileNet.

    python benchmarks/depthwise.py [--net mobilenet-v1] [--batch 32] [--rounds 3]
                                   [--out benchmarks/results/depthwise]

XLA:CPU runs a grouped convolution with one group per channel densely
over a masked weight; symgraph lowers a depthwise Convolution on the CPU
as a sum of per-channel taps (``ops/conv.py``, ``_depthwise_taps``; the
backward stays the grouped convolution's). For the net's inference program
and training step (``xla.plan_step``: SGD with momentum) this compiles
both lowerings, records XLA's temp and footprint, and races the programs
in turn in one process, best of ``--rounds`` (``bench.recompute.race``).
Writes results.json and results.md to ``--out``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MIB = 2 ** 20


def _wait(args, out):
    """An inference step's feed: the same arguments, once its outputs are done
    (nothing is donated, so the race would not wait for them)."""
    import jax
    jax.block_until_ready(out)
    return args


def programs(name: str, batch: int, train: bool, taps: bool):
    import symgraph as sg
    from symgraph import xla
    from symgraph.models import heldout
    from symgraph.ops import conv
    net, shapes = heldout.get(name, batch)
    depthwise = conv._depthwise
    if not taps:  # the grouped convolution, as on other backends
        conv._depthwise = lambda p, x: False
    try:
        step = xla.plan_step(sg.plan(net, shapes, train=train))
        m = xla.memory(step)
        from symgraph.bench.recompute import Runner, _feed_module
        runner = Runner(step, _feed_module if train else _wait)
    finally:
        conv._depthwise = depthwise
    return m, runner


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--net", default="mobilenet-v1")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="bench-results/depthwise")
    args = ap.parse_args(argv)
    import jax

    from symgraph import xla
    from symgraph.bench.recompute import race
    rows = []
    for train in (False, True):
        figs, runners = {}, []
        for taps in (True, False):
            m, r = programs(args.net, args.batch, train, taps)
            figs[taps] = m
            runners.append(r)
        best = race(runners, args.rounds, 1)
        for taps, dt in zip((True, False), best):
            rows.append({"program": "train" if train else "infer",
                         "lowering": "taps" if taps else "grouped",
                         "temp": figs[taps]["temp"], "footprint": xla.footprint(figs[taps]),
                         "step_s": dt})
            print(json.dumps(rows[-1]), flush=True)
    env = {"command": "python benchmarks/depthwise.py " + " ".join(argv or sys.argv[1:]),
           "date": time.strftime("%Y-%m-%d"), "jax": jax.__version__,
           "machine": f"{platform.machine()}, {os.cpu_count()} cores"}
    md = [f"# Depthwise convolutions on the CPU ({env['date']})", "",
          f"`{env['command']}`; {env['machine']}; jax {env['jax']}. {args.net} "
          f"(symgraph/models/heldout.py) at batch {args.batch}; MiB; seconds per step, best "
          f"of {args.rounds}, the two lowerings raced in turn.", "",
          "| program | lowering | XLA temp | footprint | step s | vs grouped |",
          "|---|---|--:|--:|--:|--:|"]
    for r in rows:
        other = next(x for x in rows if x["program"] == r["program"] and x is not r)
        md.append(f"| {r['program']} | {r['lowering']} | {r['temp'] / MIB:,.1f} "
                  f"| {r['footprint'] / MIB:,.1f} | {r['step_s']:.3f} "
                  f"| {(other['step_s'] / r['step_s'] if r['lowering'] == 'taps' else 1):.2f}x |")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"env": env, "rows": rows}, f, indent=1)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
