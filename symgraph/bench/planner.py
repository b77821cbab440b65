"""Planner speed: time per node of the whole planning pipeline.

    symgraph bench planner [--sizes 1000,10000,100000] [--repeat 3] [--out DIR]
                           [--no-resnet] [--quick]

Plans random DAGs (``symgraph.bench.randnet.random_net``: branches, joins,
multi-output nodes) and deep chains (``chain_net``) of each size, for
inference, and the ResNet-152 training graph at batch 64. A timing covers
everything ``sg.plan`` does from the Symbol -- gradient (ResNet), prune,
shape inference, fuse, schedule, liveness, every strategy, the arena and the
static verification -- but not building the Symbol. Each figure is the best
of ``--repeat`` runs in this process, after one untimed plan of a small
net (the first plan of a process pays for imports and caches, which no
case should); "per node" divides by the op nodes of the planned graph. Writes ``results.json`` and ``results.md`` under
``--out``, atomically; by default ``./bench-results/planner`` under the
current folder (``benchmarks/results/planner``, the committed run, only
when ``--out`` names it).

    python benchmarks/planner_speed.py [the same arguments]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time

from .common import default_out


def _parse_sizes(text: str) -> list:
    try:
        sizes = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        sizes = []
    if not sizes or any(v < 1 for v in sizes):
        raise argparse.ArgumentTypeError(f"expected sizes like 1000,10000, got {text!r}")
    return sizes


def parse_args(argv):
    from ..cli import _Parser
    p = _Parser(prog="symgraph bench planner", description=__doc__.strip().split("\n\n")[0])
    p.add_argument("--sizes", type=_parse_sizes,
                   help="node counts of the random DAGs and chains (default 1000,10000,100000)")
    p.add_argument("--repeat", type=int, help="runs per case, best kept (default 3)")
    p.add_argument("--out", help="results folder (default: ./bench-results/planner, with "
                   "--quick ./bench-results/planner-quick, under the current folder)")
    p.add_argument("--no-resnet", action="store_true", help="skip the ResNet-152 case")
    p.add_argument("--quick", action="store_true",
                   help="a short run in seconds: sizes 100,1000, best of 3, no ResNet-152 "
                        "(explicit options still apply); per-node times at these sizes, not "
                        "at 100,000")
    args = p.parse_args(argv)
    if args.sizes is None:
        args.sizes = [100, 1000] if args.quick else [1000, 10000, 100000]
    if args.repeat is None:
        args.repeat = 3
    args.no_resnet = args.no_resnet or args.quick
    args.out = args.out or default_out("planner", args.quick)
    if args.repeat < 1:
        p.error(f"--repeat must be >= 1, got {args.repeat}")
    return args


def time_plan(net, shapes, repeat: int, **kw) -> dict:
    """Best-of-``repeat`` wall time of ``sg.plan`` and its stage timings."""
    from ..memory import plan as sg_plan
    best, plan = None, None
    for _ in range(repeat):
        t = time.perf_counter()
        p = sg_plan(net, shapes, **kw)
        dt = time.perf_counter() - t
        if best is None or dt < best:
            best, plan = dt, p
    nodes = sum(1 for n in plan.graph.nodes if n.op is not None)
    return {"nodes": nodes, "steps": plan.live.num_steps, "tensors": plan.live.num_tensors,
            "seconds": best, "us_per_node": best / nodes * 1e6,
            "stages": {k: round(v, 6) for k, v in plan.timings.items()},
            "arena_over_bound": plan.internal["arena"] / max(plan.lower_bound, 1)}


def cases(args):
    """(name, kind, size, builder) for every case, in order."""
    from .randnet import chain_net, random_net
    out = []
    for n in args.sizes:
        out.append((f"random-{n}", "random DAG, inference", n,
                    lambda n=n: (random_net(random.Random(0), n), {})))
        out.append((f"chain-{n}", "deep chain, inference", n,
                    lambda n=n: (chain_net(n), {})))
    if not args.no_resnet:
        def resnet():
            from ..models import get_model
            return (get_model("resnet-152"), {"data": (64, 3, 224, 224)}), \
                {"train": True}
        out.append(("resnet-152-train", "ResNet-152 training, batch 64", None, resnet))
    return out


def warm_up() -> float:
    """One untimed plan of a small random DAG: the first ``sg.plan`` of a
    process imports the passes and fills caches. Returns its seconds."""
    from ..memory import plan as sg_plan
    from .randnet import random_net
    t = time.perf_counter()
    sg_plan(*random_net(random.Random(1), 60))
    return time.perf_counter() - t


def markdown(rows, meta) -> str:
    lines = ["# Planner speed", "",
             f"`symgraph bench planner {meta['argv']}` on {meta['machine']}, "
             f"Python {meta['python']}, {meta['date']}.", "",
             *(["Quick run: small sizes only; per-node times here are not those of a "
                "100,000-node graph (run without --quick)."] if meta.get("quick") else []),
             *([""] if meta.get("quick") else []),
             "Time of `sg.plan` from the Symbol: gradient (training), prune, shape "
             "inference, fuse, schedule, liveness, all strategies, arena, static "
             "verification. Best of "
             f"{meta['repeat']} runs, after an untimed warm-up plan "
             f"({meta.get('warm_up_s', 0):.2f} s); per node = over the op nodes of the "
             "planned graph.", "",
             "| case | what | op nodes | steps | seconds | us / node | arena / bound |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['what']} | {r['nodes']:,} | {r['steps']:,} | "
                     f"{r['seconds']:.3f} | {r['us_per_node']:.1f} | "
                     f"{r['arena_over_bound']:.4f} |")
    lines += ["", "Stage seconds (best run):", "",
              "| case | " + " | ".join(STAGES) + " |",
              "|---|" + "---:|" * len(STAGES)]
    for r in rows:
        lines.append(f"| {r['case']} | " + " | ".join(
            f"{r['stages'].get(s, 0):.3f}" for s in STAGES) + " |")
    return "\n".join(lines) + "\n"


STAGES = ("graph", "fuse", "schedule", "liveness", "strategies", "verify")


def main(argv=None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    from tqdm import tqdm

    from ..util import atomic_write_text
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    rows = []
    warm = warm_up()
    todo = cases(args)
    for name, what, _size, build in tqdm(todo, desc="planner speed", unit="case",
                                         file=sys.stderr):
        (net, shapes), kw = build()
        r = time_plan(net, shapes, args.repeat, **kw)
        rows.append({"case": name, "what": what, **r})
        del net
    meta = {"argv": " ".join(argv or []), "machine": f"{platform.machine()}, "
            f"{os.cpu_count()} cores", "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d", time.gmtime()), "repeat": args.repeat,
            "quick": args.quick, "warm_up_s": round(warm, 3)}
    print(f"{'case':<20}{'op nodes':>10}{'seconds':>10}{'us/node':>10}")
    for r in rows:
        print(f"{r['case']:<20}{r['nodes']:>10,}{r['seconds']:>10.3f}{r['us_per_node']:>10.1f}")
    atomic_write_text(os.path.join(args.out, "results.json"),
                      json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    atomic_write_text(os.path.join(args.out, "results.md"), markdown(rows, meta))
    print(f"wrote {os.path.join(args.out, 'results.json')} and results.md")
    return 0

