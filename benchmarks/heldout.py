#!/usr/bin/env python3
"""symgraph's promises on the held-out nets (``symgraph.models.heldout``):
families no XLA-side rule was fitted on, reported apart from the zoo.

    python benchmarks/heldout.py [--nets mixer,vit,...] [--batches 8,32]
                                 [--parts train,infer,budget,maxbatch]
                                 [--target cpu] [--out DIR]

For each net and batch, compile only (nothing runs):

- *train* / *infer*: the arena plan (``sg.plan``) beside XLA's figures of
  the program a Module runs for it (``xla.plan_memory``: the training step
  ``fit`` compiles, SGD with momentum; ``predict``'s program), with the
  measure set the rule picks; temp / arena and XLA's footprint.
- *budget*: budgets of the training total less 0.25, 0.5 and 0.65 of the
  internal bytes (0.75/0.5/0.35 of the arena left): the program a Module
  under ``memory_budget`` runs (``xla.fit_budget``), its footprint against
  the budget, or the refusal (BudgetError: no plan or no program holds it)
  with the smallest total or footprint found.
- *maxbatch*: ``sg.max_batch`` under the budget of the training step's
  footprint at the batch (the largest batch whose program fits should be
  about it), checked by compiling the program at the answer + 1.

Writes results.json and results.md to ``--out`` (default
``bench-results/heldout``; ``benchmarks/results/heldout`` holds the
committed figures). Rows are written as they come, so a long run that is
stopped keeps what it measured.
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
BUDGET_FRACTIONS = (0.75, 0.5, 0.35)


def program_row(name: str, batch: int, train: bool, target: str) -> dict:
    import symgraph as sg
    from symgraph import xla
    from symgraph.models import heldout
    net, shapes = heldout.get(name, batch)
    p = sg.plan(net, shapes, train=train)
    t0 = time.perf_counter()
    m = xla.plan_memory(p, target=target)
    fp = xla.footprint(m)
    row = {"net": name, "batch": batch, "part": "train" if train else "infer",
           "arena": p.internal["arena"], "temp": m["temp"],
           "ratio": m["temp"] / p.internal["arena"], "footprint": fp,
           "measures": m["program"]["measures"], "compile_s": time.perf_counter() - t0}
    return row


def budget_rows(name: str, batch: int, target: str) -> list:
    import symgraph as sg
    from symgraph import xla
    from symgraph.memory.budget import BudgetError
    from symgraph.models import heldout
    net, shapes = heldout.get(name, batch)
    plain = sg.plan(net, shapes, train=True)
    fixed = plain.total - plain.internal["arena"]
    rows = []
    for frac in BUDGET_FRACTIONS:
        budget = fixed + int(frac * plain.internal["arena"])
        row = {"net": name, "batch": batch, "part": "budget", "fraction": frac,
               "budget": budget}
        t0 = time.perf_counter()
        try:
            p, m, fits = xla.fit_budget(net, shapes, budget, target=target)
        except BudgetError as err:  # refused: no plan, or no program, holds it
            row.update(error=str(err).splitlines()[0], smallest=err.smallest, holds=False)
        else:
            fp = xla.footprint(m)
            row.update(footprint=fp, over=fp / budget, holds=bool(fp <= budget),
                       recomputed=len(p.recompute), measures=m["program"]["measures"])
        row["compile_s"] = time.perf_counter() - t0
        rows.append(row)
    return rows


def maxbatch_row(name: str, batch: int, target: str) -> dict:
    import symgraph as sg
    from symgraph import xla
    from symgraph.memory.maxbatch import xla_footprint
    from symgraph.models import heldout
    net, shapes = heldout.get(name, batch)
    budget = xla.footprint(xla.plan_memory(sg.plan(net, shapes, train=True), target=target))
    t0 = time.perf_counter()
    r = sg.max_batch(net, shapes, budget=budget, train=True, target=target, progress=False)
    _, above = heldout.get(name, r.batch + 1)
    nxt = sg.plan(net, above, train=True)
    try:
        nxt = sg.plan(net, above, train=True, budget=budget)
    except sg.memory.budget.BudgetError:
        pass
    fp_next = xla_footprint(nxt, target=target)
    return {"net": name, "batch": batch, "part": "maxbatch", "budget": budget,
            "answer": r.batch, "plan_batch": r.plan_batch, "xla": r.xla,
            "next_footprint": fp_next, "largest": bool(fp_next > budget),
            "notes": r.notes, "compile_s": time.perf_counter() - t0}


def markdown(rows: list, env: dict) -> str:
    def mib(x):
        return "-" if x is None else f"{x / MIB:,.1f}"

    out = [f"# Held-out nets ({env['target']}, {env['date']})", "",
           f"Command: `{env['command']}`; {env['machine']}; jax {env['jax']}. MiB. "
           "Held-out: no rule of symgraph is fitted on these nets "
           "(`symgraph/models/heldout.py`).", "",
           "## The program a Module runs beside its plan", "",
           "| net | batch | part | arena | XLA temp | temp / arena | footprint | measures |",
           "|---|--:|---|--:|--:|--:|--:|---|"]
    for r in rows:
        if r["part"] in ("train", "infer"):
            out.append(f"| {r['net']} | {r['batch']} | {r['part']} | {mib(r['arena'])} "
                       f"| {mib(r['temp'])} | {r['ratio']:.2f} | {mib(r['footprint'])} "
                       f"| {'+'.join(r['measures']) or 'none'} |")
    budgets = [r for r in rows if r["part"] == "budget"]
    if budgets:
        out += ["", "## Budgets (the program a Module under `memory_budget` runs)", "",
                "| net | batch | arena left | budget | footprint | footprint / budget | holds "
                "| recomputed |", "|---|--:|--:|--:|--:|--:|---|--:|"]
        for r in budgets:
            out.append(f"| {r['net']} | {r['batch']} | {r['fraction']} | {mib(r['budget'])} "
                       f"| {mib(r.get('footprint'))} "
                       f"| {r['over']:.3f} | {'yes' if r['holds'] else 'NO'} "
                       f"| {r.get('recomputed', '-')} |"
                       if "footprint" in r else
                       f"| {r['net']} | {r['batch']} | {r['fraction']} | {mib(r['budget'])} "
                       f"| - | - | refused (smallest {mib(r['smallest'])}) | - |")
    mbs = [r for r in rows if r["part"] == "maxbatch"]
    if mbs:
        out += ["", "## max-batch (budget: the training step's footprint at the batch)", "",
                "| net | batch | budget | answer | plans' answer | XLA at answer "
                "| XLA at answer + 1 | largest |", "|---|--:|--:|--:|--:|--:|--:|---|"]
        for r in mbs:
            out.append(f"| {r['net']} | {r['batch']} | {mib(r['budget'])} | {r['answer']} "
                       f"| {r['plan_batch']} | {mib(r['xla'])} | {mib(r['next_footprint'])} "
                       f"| {'yes' if r['largest'] else 'NO'} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    from symgraph.models import heldout
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nets", default=",".join(heldout.NAMES))
    ap.add_argument("--batches", default="8,32")
    ap.add_argument("--parts", default="train,infer,budget,maxbatch")
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--out", default="bench-results/heldout")
    args = ap.parse_args(argv)
    import jax
    env = {"command": "python benchmarks/heldout.py " + " ".join(argv or sys.argv[1:]),
           "date": time.strftime("%Y-%m-%d"), "jax": jax.__version__,
           "machine": f"{platform.machine()}, {os.cpu_count()} cores", "target": args.target}
    os.makedirs(args.out, exist_ok=True)
    parts = args.parts.split(",")
    rows = []

    def save():
        for fname, text in (("results.json", json.dumps({"env": env, "rows": rows}, indent=1)),
                            ("results.md", markdown(rows, env))):
            tmp = os.path.join(args.out, fname + ".tmp")
            with open(tmp, "w") as f:
                f.write(text)
            os.replace(tmp, os.path.join(args.out, fname))

    for name in args.nets.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            for part in parts:
                print(f"{name} batch {batch} {part} ...", file=sys.stderr, flush=True)
                if part in ("train", "infer"):
                    new = [program_row(name, batch, part == "train", args.target)]
                elif part == "budget":
                    new = budget_rows(name, batch, args.target)
                elif part == "maxbatch":
                    new = [maxbatch_row(name, batch, args.target)]
                else:
                    raise SystemExit(f"heldout: unknown part {part!r}")
                rows.extend(new)
                for r in new:
                    print(json.dumps({k: v for k, v in r.items() if k != "notes"}), flush=True)
                save()
    print(markdown(rows, env))
    return 0


if __name__ == "__main__":
    sys.exit(main())
