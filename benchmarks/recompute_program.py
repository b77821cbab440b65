#!/usr/bin/env python3
"""Does the program that runs keep the recompute? XLA's figures beside the plan.

    python benchmarks/recompute_program.py [--nets mlp16,resnet-small,resnet-cifar-20]
        [--budgets 0.75,0.5] [--rss] [--out benchmarks/results/recompute_program]

For each net and budget (the training total without recompute, less
a fraction of its internal bytes: 0.5 leaves the arena half its size) this plans with ``sg.plan(..., budget=)`` and compiles the
training step ``Module.fit`` runs for that plan (``xla.training_step``,
SGD with momentum, the measures the rule picks for a recompute program),
and records ``memory_analysis()``'s temp beside the plan's internal bytes,
for the ways a recomputed node's inputs can be tied to the backward
(``symgraph.lower.CLONE_TIE``): ``add`` (what runs), ``barrier``
(``jax.lax.optimization_barrier``), ``untied``; and the program without
recompute. ``--rss`` also runs the tied program and the program without
recompute once each in a fresh process and records how far the peak
resident set rose during the run (Linux, ``/proc/self/clear_refs``; as
benchmarks/xla_rss.py). Compiles only otherwise. Writes results.json and
results.md in ``--out``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MIB = 2 ** 20
TIES = ("add", "barrier", "untied")


def net_and_shapes(name: str):
    import symgraph as sg
    from symgraph.models.resnet import resnet
    S = sg.sym
    if name == "mlp16":  # 16 FullyConnected+relu layers of 1024, batch 512
        h = S.Variable("data")
        for i in range(16):
            h = S.Activation(S.FullyConnected(h, num_hidden=1024, name=f"fc{i}"),
                             act_type="relu", name=f"relu{i}")
        return S.LinearRegressionOutput(h, name="loss"), \
            {"data": (512, 1024), "loss_label": (512, 1024)}
    if name == "resnet-small":  # two stages of four basic units, CIFAR-sized
        return resnet((4, 4), (16, 16, 32), 10, (3, 32, 32), bottle_neck=False), \
            {"data": (32, 3, 32, 32), "softmax_label": (32,)}
    if name.startswith("resnet-") or name.startswith("vgg") or name.startswith("inception"):
        from symgraph.models import data_shapes, get_model  # a zoo net at batch 8
        return get_model(name), data_shapes(name, 8)
    raise SystemExit(f"recompute_program: unknown net {name!r}")


def plans(name: str, frac: float):
    import symgraph as sg
    net, shapes = net_and_shapes(name)
    plain = sg.plan(net, shapes, train=True)
    if frac >= 1.0:
        return plain, plain
    # the fraction is of the internal bytes: the rest of the total is fixed
    fixed = plain.total - plain.internal["arena"]
    return plain, sg.plan(net, shapes, train=True,
                          budget=fixed + int(frac * plain.internal["arena"]))


def temp(plan, tie: str, recompute=None) -> int:
    from symgraph import lower, xla
    before = lower.CLONE_TIE
    lower.CLONE_TIE = None if tie == "untied" else tie
    try:
        step = xla.training_step(plan, recompute=recompute)
        return xla.memory(step)["temp"], step.info["measures"]
    finally:
        lower.CLONE_TIE = before


def measure_figures(name: str, frac: float) -> dict:
    plain, p = plans(name, frac)
    row = {"net": name, "budget_fraction": frac, "budget": p.budget,
           "recomputed": len(p.recompute), "plan_internal": p.internal["arena"],
           "plan_internal_no_recompute": plain.internal["arena"], "total": p.total}
    row["xla_temp_no_recompute"], _ = temp(p, "add", recompute=[])
    for tie in TIES if p.recompute else ():
        row[f"xla_temp_{tie}"], row["measures"] = temp(p, tie)
    return row


def rss_here(name: str, frac: float, recompute: bool) -> dict:
    """One program run once in this process: the peak RSS rise
    (``xla_rss.run_once``)."""
    import xla_rss
    from symgraph import xla
    _, p = plans(name, frac)
    r = xla_rss.run_once(xla.training_step(p, recompute=None if recompute else []))
    return {"xla_temp": r["analysis"]["temp"], "rss_rise": r["rss_rise"]}


def rss(name: str, frac: float, recompute: bool) -> dict:
    """``rss_here`` in a fresh process, so no run sees another's pages."""
    code = ("import json, sys; sys.path.insert(0, %r); import recompute_program as r; "
            "print(json.dumps(r.rss_here(%r, %r, %r)))"
            % (os.path.dirname(os.path.abspath(__file__)), name, frac, recompute))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def markdown(rows: list, env: dict) -> str:
    out = [f"# The program that runs keeps the recompute ({env['date']})", "",
           f"{env['machine']}; jax {env['jax']}. MiB. *plan*: the budgeted plan's internal "
           "bytes (arena); *XLA temp*: memory_analysis() of the Module's training step for "
           "that plan, the recomputed nodes' inputs tied by *add* (what runs), *barrier* or "
           "*untied*; *no rc*: the step without recompute. *RSS rise*: peak resident set "
           "rise of one run in a fresh process (with --rss).", "",
           "| net | budget | recomputed | plan | plan no rc | XLA temp add | barrier | untied "
           "| XLA no rc | measures | RSS rise add | RSS rise no rc |",
           "|---|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|--:|"]

    def f(r, k):
        return f"{r[k] / MIB:,.1f}" if r.get(k) is not None else "-"
    for r in rows:
        out.append(f"| {r['net']} | {r['budget_fraction']:.2f} | {r['recomputed']} "
                   f"| {f(r, 'plan_internal')} | {f(r, 'plan_internal_no_recompute')} "
                   f"| {f(r, 'xla_temp_add')} | {f(r, 'xla_temp_barrier')} "
                   f"| {f(r, 'xla_temp_untied')} | {f(r, 'xla_temp_no_recompute')} "
                   f"| {'+'.join(r.get('measures') or []) or '-'} "
                   f"| {f(r, 'rss_rise')} | {f(r, 'rss_rise_no_recompute')} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nets", default="mlp16,resnet-small")
    ap.add_argument("--budgets", default="0.75,0.5")
    ap.add_argument("--rss", action="store_true")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "results", "recompute_program"))
    args = ap.parse_args(argv)
    import datetime
    import platform

    import jax

    from symgraph.memory.budget import BudgetError
    from symgraph.util import atomic_write_text
    rows = []
    for name in args.nets.split(","):
        for frac in (float(b) for b in args.budgets.split(",")):
            print(f"{name} at {frac}x ...", file=sys.stderr, flush=True)
            try:
                row = measure_figures(name, frac)
            except BudgetError as err:
                print(f"  {err}", file=sys.stderr)
                continue
            if args.rss and row["recomputed"]:
                row["rss_rise"] = rss(name, frac, True)["rss_rise"]
                row["rss_rise_no_recompute"] = rss(name, frac, False)["rss_rise"]
            rows.append(row)
    env = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": f"{platform.machine()}, {os.cpu_count()} cores", "jax": jax.__version__}
    os.makedirs(args.out, exist_ok=True)
    atomic_write_text(os.path.join(args.out, "results.json"),
                      json.dumps({"tool": "benchmarks/recompute_program.py", **env,
                                  "rows": rows}, indent=1))
    atomic_write_text(os.path.join(args.out, "results.md"), markdown(rows, env))
    print(markdown(rows, env))
    return 0


if __name__ == "__main__":
    sys.exit(main())
