#!/usr/bin/env python3
"""Which measures a residual net trains with: XLA's memory-optimized
scheduler or the anchor, by depth.

    python benchmarks/residual_measures.py [--nets resnet-18,resnet-50,resnet-101,resnet-152]
        [--sets scheduler,anchor] [--batch 32] [--time-batch 8] [--rounds 3] [--steps 1]
        [--out benchmarks/results/residual_measures]

For each zoo net this compiles the training step ``Module.fit`` runs
(``xla.plan_step``: SGD with momentum 0.9, donated) once per measure set at
``--batch`` and records XLA's footprint (temp + argument + output - alias,
compile only) beside the rule's choice; then
it compiles the sets again at ``--time-batch`` and races them, in turn in
one process, best of ``--rounds`` (``symgraph.bench.recompute.race``).
``symgraph.measures``' rule (``DEEP_RESIDUAL_ADDS``) comes from these
figures. Writes results.json and results.md in ``--out``.
"""
from __future__ import annotations

import argparse
import gc
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MIB = 2 ** 20


def _sets(text: str) -> list:
    return [tuple(m for m in s.split("+") if m) for s in text.split(",")]


def memory_row(name: str, batch: int, sets: list) -> dict:
    from symgraph import measures, xla
    from symgraph.bench.recompute import _footprint
    from symgraph.graph import Graph
    from symgraph.memory import plan
    from symgraph.models import data_shapes, get_model
    p = plan(get_model(name), data_shapes(name, batch), train=True, name=name)
    fwd = Graph(p.graph.outputs[:p.num_forward_outputs])
    row = {"net": name, "batch": batch, "residual_adds": measures.shortcuts(fwd),
           "rule": list(measures.default_measures(fwd, True)),
           "footprint": {}}
    for ms in sets:
        print(f"  {name} batch {batch}: compiling {measures.label(ms)}", file=sys.stderr,
              flush=True)
        row["footprint"][measures.label(ms)] = _footprint(xla.plan_step(p, measures=ms))[
            "footprint"]
        gc.collect()
    return row


def time_row(name: str, batch: int, sets: list, rounds: int, steps: int) -> dict:
    import jax

    from symgraph import measures, xla
    from symgraph.bench.recompute import Runner, _feed_module, race
    from symgraph.memory import plan
    from symgraph.models import data_shapes, get_model
    p = plan(get_model(name), data_shapes(name, batch), train=True, name=name, verify=False)
    print(f"  {name} batch {batch}: timing", file=sys.stderr, flush=True)
    runners = [Runner(xla.plan_step(p, measures=ms), _feed_module) for ms in sets]
    secs = race(runners, rounds, steps)
    del runners
    jax.clear_caches()
    gc.collect()
    return {measures.label(ms): s for ms, s in zip(sets, secs)}


def markdown(res: dict) -> str:
    labels = res["sets"]
    out = [f"# Residual nets: the measures by depth ({res['date']})", "",
           f"{res['machine']}; jax {res['jax']}; `{res['command']}`. Footprint: XLA's "
           "temp + argument + output - alias of the training step `Module.fit` runs (SGD "
           f"with momentum 0.9, donated), compile only, batch {res['batch']}, MiB; "
           "*rule*: the set "
           "`measures.default_measures` picks. Step: seconds per step at batch "
           f"{res['time_batch']}, the sets raced in turn, best of {res['rounds']} rounds.", "",
           "| net | residual adds | rule | "
           + " | ".join(f"{s} footprint" for s in labels) + " | "
           + " | ".join(f"{s} step s" for s in labels) + " | step "
           + f"{labels[-1]} / {labels[0]} |",
           "|---|--:|---|" + "--:|" * (2 * len(labels) + 1)]
    for r in res["rows"]:
        t = r.get("step_s") or {}
        ratio = (f"{t[labels[-1]] / t[labels[0]]:.3f}" if t.get(labels[0]) and t.get(labels[-1])
                 else "-")
        out.append(f"| {r['net']} | {r['residual_adds']} | {'+'.join(r['rule']) or 'none'} "
                   "| "
                   + " | ".join(f"{r['footprint'][s] / MIB:,.0f}" for s in labels) + " | "
                   + " | ".join(f"{t[s]:.2f}" if s in t else "-" for s in labels)
                   + f" | {ratio} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nets", default="resnet-18,resnet-50,resnet-101,resnet-152")
    ap.add_argument("--sets", default="scheduler,anchor")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--time-batch", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--no-time", action="store_true")
    ap.add_argument("--out", default="residual_measures")
    args = ap.parse_args(argv)
    import datetime
    import platform

    import jax

    from symgraph.bench.common import write_results
    sets = _sets(args.sets)
    rows = []
    for name in args.nets.split(","):
        row = memory_row(name, args.batch, sets)
        if not args.no_time:
            row["step_s"] = time_row(name, args.time_batch, sets, args.rounds, args.steps)
        rows.append(row)
    from symgraph import measures
    res = {"tool": "benchmarks/residual_measures.py",
           "command": "python benchmarks/residual_measures.py " + " ".join(
               a for a in (argv if argv is not None else sys.argv[1:])),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": f"{platform.machine()}, {os.cpu_count()} cores", "jax": jax.__version__,
           "batch": args.batch, "time_batch": args.time_batch, "rounds": args.rounds,
           "sets": [measures.label(ms) for ms in sets], "rows": rows}
    write_results(args.out, res, markdown(res))
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
