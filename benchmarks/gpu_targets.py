#!/usr/bin/env python3
"""The Module's programs compiled for a GPU description on this CPU machine
(deviceless): XLA:GPU's temp beside the arena plan, training and inference.

    python benchmarks/gpu_targets.py [--target h100] [--nets vgg16,inception-bn,...]
                                     [--batch 64] [--dtypes float32,bfloat16]
                                     [--max-batch resnet-50] [--max-batch-targets h100,l4]
                                     [--max-batch-dtypes float32,bfloat16]
                                     [--max-batch-recompute no,yes] [--out DIR]

For each zoo net and compute dtype: the arena plan (``sg.plan(...,
compute_dtype=)``: in bfloat16 the net as a Module computing in bfloat16
runs it -- float32 parameters and data cast down inside, the casts planned,
activations in bfloat16) and XLA's temp of the training step
``Module.fit`` compiles (SGD with momentum 0.9, donated) and of the
inference program, both for ``--target`` with the measure rule of its
backend (``xla.plan_memory(plan, target=...)``). Compile only: nothing
runs, no GPU is needed (the ``gpu-plan`` extra). ``--max-batch`` nets get
``sg.max_batch(..., target=)`` answers for each target named in
``--max-batch-targets`` (default: h100 and l4), compute dtype in
``--max-batch-dtypes`` and with or without budgeted recompute
(``--max-batch-recompute``), with the budget defaulting to the device's
memory as JAX's allocator takes it, less the workspace allowance.

Writes results.json and results.md to ``--out`` (default
``bench-results/gpu_targets``; pass ``benchmarks/results/gpu_targets`` to
update the committed figures).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MIB = 2 ** 20


def row(name: str, batch: int, dtype: str, target: str) -> dict:
    from symgraph import xla
    from symgraph.memory import plan
    from symgraph.models import data_shapes, get_model
    net = get_model(name)
    shapes = data_shapes(name, batch)
    out = {"net": name, "batch": batch, "dtype": dtype, "target": target}
    for mode in ("train", "infer"):
        p = plan(net, shapes, train=mode == "train", name=name, compute_dtype=dtype)
        t0 = time.perf_counter()
        m = xla.plan_memory(p, target=target)
        out[mode] = {"arena": p.internal["arena"], "temp": m["temp"],
                     "ratio": m["temp"] / p.internal["arena"],
                     "footprint": xla.footprint(m), "measures": m["program"]["measures"],
                     "compile_s": time.perf_counter() - t0}
        print(f"{name} {dtype} {mode}: arena {p.internal['arena'] / MIB:,.0f} MiB, temp "
              f"{m['temp'] / MIB:,.0f} MiB ({out[mode]['ratio']:.2f}x)", flush=True)
    return out


def max_batch_row(name: str, target: str, recompute: bool, dtype: str = "float32") -> dict:
    import symgraph as sg
    from symgraph.models import data_shapes, get_model
    r = sg.max_batch(get_model(name), data_shapes(name, 1), train=True, optimizer="momentum",
                     target=target, recompute=recompute, progress=False, compute_dtype=dtype)
    print(f"max-batch {name} {dtype} on {target} (recompute {recompute}): {r.batch} (XLA "
          f"{r.xla / MIB:,.0f} MiB of {r.budget / MIB:,.0f})", flush=True)
    return {"net": name, **r.to_json(), "target": target, "with_recompute": recompute,
            "dtype": dtype}


def markdown(res: dict) -> str:
    lines = [f"# The Module's programs on a GPU target, compiled deviceless ({res['target']})",
             "", f"Command: `{res['command']}`", "",
             "| net | dtype | train arena MiB | train GPU temp MiB | train temp / arena | "
             "infer arena MiB | infer GPU temp MiB | infer temp / arena |",
             "|---|---|--:|--:|--:|--:|--:|--:|"]
    for r in res["rows"]:
        t, i = r["train"], r["infer"]
        lines.append(f"| {r['net']} | {r['dtype']} | {t['arena'] / MIB:,.0f} | "
                     f"{t['temp'] / MIB:,.0f} | {t['ratio']:.2f} | {i['arena'] / MIB:,.0f} | "
                     f"{i['temp'] / MIB:,.0f} | {i['ratio']:.2f} |")
    if res["max_batch"]:
        lines += ["", "Max batch of training (SGD momentum), the budget the "
                  "device's pool less the convolution workspace allowance; each answer's "
                  "program compiled deviceless for the target fits, the next batch's does "
                  "not (max_batch's search).", "",
                  "| net | dtype | target | recompute | max batch | XLA MiB | budget MiB |",
                  "|---|---|---|---|--:|--:|--:|"]
        for r in res["max_batch"]:
            lines.append(f"| {r['net']} | {r.get('dtype', 'float32')} | {r['target']} | "
                         f"{'budgeted' if r['with_recompute'] else 'none'} | {r['batch']} | "
                         f"{r['xla'] / MIB:,.0f} | {r['budget'] / MIB:,.0f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="h100")
    ap.add_argument("--nets", default="vgg16,inception-bn,googlenet,resnet-50,resnet-152")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--dtypes", default="float32")
    ap.add_argument("--max-batch", default="", metavar="NETS")
    ap.add_argument("--max-batch-targets", default="h100,l4")
    ap.add_argument("--max-batch-dtypes", default="float32")
    ap.add_argument("--max-batch-recompute", default="no,yes",
                    help="with and/or without budgeted recompute: no, yes or no,yes")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    from symgraph.bench.common import default_out, write_results
    out = args.out or default_out("gpu_targets")
    res = {"target": args.target, "batch": args.batch,
           "command": "python benchmarks/gpu_targets.py " + " ".join(argv or sys.argv[1:]),
           "rows": [], "max_batch": []}
    for name in filter(None, args.nets.split(",")):
        for dtype in args.dtypes.split(","):
            res["rows"].append(row(name, args.batch, dtype, args.target))
            write_results(out, res, markdown(res))  # kept as it goes: long runs
    for name in filter(None, args.max_batch.split(",")):
        for dtype in args.max_batch_dtypes.split(","):
            for t in args.max_batch_targets.split(","):
                for recompute in args.max_batch_recompute.split(","):
                    res["max_batch"].append(max_batch_row(name, t, recompute == "yes", dtype))
                write_results(out, res, markdown(res))
    write_results(out, res, markdown(res))
    print(f"wrote {out}/results.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
