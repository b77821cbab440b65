#!/usr/bin/env python3
"""The keep_shared memory measure on a GPU description, compiled deviceless,
and on the CPU: XLA's temp without and with it, beside the arena plan.

    python benchmarks/gpu_keep_shared.py [--target h100] [--zoo NETS] [--zoo-batch 64]
                                         [--zoo-train NETS] [--heldout NETS]
                                         [--heldout-batch 32] [--cpu NETS]
                                         [--speed NETS] [--out FILE]

For each net and part (inference, training): the measure set the rule of
the target's backend picks without ``keep_shared`` ("before") and with it
added ("after"), XLA's temp of the program a Module runs
(``xla.plan_step``), and the set the rule picks ("rule"). Inference is
also compiled with XLA:GPU's split-K gemms off
(``xla_gpu_experimental_force_split_k=1``): a deviceless compile gets no
autotuning, and a Triton gemm's default configuration splits K into
partial sums the plan does not have, so those columns show what the
measure leaves; and with the measure's variant that also keeps the shared
outputs of injective ops (``WITH_INJECTIVE``). Zoo nets (``--zoo``, inference; ``--zoo-train``,
training) and held-out nets (``--heldout``, both parts) are reported
apart: the rule may be fitted on the zoo, it is judged on the held-out
nets. ``--cpu`` nets (zoo or held-out, inference, ``--heldout-batch``)
are compiled for the CPU, where the measure keeps values as a
conditional's branch and only those a convolution and an elementwise op
read (``lower.KEEP_SHARED_TIES``). Compile only: nothing runs, no GPU is
needed -- but for ``--speed`` nets (default resnet-v1-50 and resnext, the
CPU rule's post-activation nets): their CPU inference programs at
``--heldout-batch`` without and with the measure, run in turn (best of 5
rounds of 3 steps), the time ratio the branch's copies cost.

Writes a markdown table to ``--out`` (default
``bench-results/gpu_keep_shared.md``; pass
``benchmarks/results/gpu_targets/keep_shared.md`` to update the committed
figures).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # deviceless: no GPU is used
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MIB = 2 ** 20
ZOO = "vgg16,inception-bn,googlenet,resnet-50,resnet-152,inception-v3"
ZOO_TRAIN = "resnet-50,inception-bn"
CPU = "resnet-50,resnet-v1-50,resnext,vit"
SPEED = "resnet-v1-50,resnext"
NO_SPLIT_K = {"xla_gpu_experimental_force_split_k": 1}
# the variant that also keeps shared outputs of injective ops (Concat, transpose)
WITH_INJECTIVE = ("elementwise", "injective")


def _temp(plan, measures, target, options=None, categories=None) -> int:
    from symgraph import lower, xla
    kept = lower.KEEP_SHARED_CATEGORIES
    if categories:  # a variant of the measure: read when the step is traced
        lower.KEEP_SHARED_CATEGORIES = categories
    try:
        step = xla.plan_step(plan, measures=measures or "none", target=target)
        return xla.memory(step, options)["temp"]
    finally:
        lower.KEEP_SHARED_CATEGORIES = kept


def row(name: str, batch: int, train: bool, target: str, kind: str) -> dict:
    import symgraph as sg
    from symgraph import measures as M
    from symgraph import targets
    from symgraph.models import data_shapes, get_model
    from symgraph.models import heldout as ho
    net, shapes = (ho.get(name, batch) if name in ho.NAMES else
                   (get_model(name), data_shapes(name, batch)))
    p = sg.plan(net, shapes, train=train)
    backend = targets.get(target).backend
    rule = M.resolve(None, net.graph(), train, backend=backend)
    before = tuple(m for m in rule if m != "keep_shared")
    after = before + ("keep_shared",)
    t0 = time.perf_counter()
    r = {"net": name, "set": kind, "target": target, "batch": batch,
         "part": "train" if train else "infer", "arena": p.internal["arena"],
         "rule": list(rule), "before_measures": list(before),
         "before": _temp(p, before, target), "after": _temp(p, after, target)}
    if not train and backend != "cpu":
        r["before_no_split_k"] = _temp(p, before, target, NO_SPLIT_K)
        r["after_no_split_k"] = _temp(p, after, target, NO_SPLIT_K)
        r["after_injective"] = _temp(p, after, target, categories=WITH_INJECTIVE)
    r["compile_s"] = time.perf_counter() - t0
    print(f"{r['set']} {name} b{batch} {r['part']}: arena {r['arena'] / MIB:,.1f} MiB, temp "
          f"{r['before'] / MIB:,.1f} -> {r['after'] / MIB:,.1f} MiB", flush=True)
    return r


def speed_row(name: str, batch: int) -> dict:
    """CPU inference seconds per step without and with keep_shared."""
    import symgraph as sg
    from symgraph import xla
    import jax
    from symgraph.bench.recompute import _concrete
    from symgraph.models import data_shapes, get_model
    from symgraph.models import heldout as ho
    net, shapes = (ho.get(name, batch) if name in ho.NAMES else
                   (get_model(name), data_shapes(name, batch)))
    p = sg.plan(net, shapes)
    rule = tuple(xla.inference_step(p, target="cpu").info["measures"])
    before = tuple(m for m in rule if m != "keep_shared")
    runs = []
    for ms in (before, before + ("keep_shared",)):
        step = xla.inference_step(p, measures=ms or "none", target="cpu")
        fn, args = step.jit(), _concrete(step.args)
        jax.block_until_ready(fn(*args))  # compiled
        runs.append((fn, args))
    best = [float("inf")] * 2
    for _ in range(5):  # in turn, so the machine's drift hits both alike
        for i, (fn, args) in enumerate(runs):
            t = time.perf_counter()
            for _ in range(3):
                out = fn(*args)
            jax.block_until_ready(out)
            best[i] = min(best[i], (time.perf_counter() - t) / 3)
    t_before, t_after = best
    r = {"net": name, "set": "speed", "batch": batch, "rule": list(rule),
         "before_s": t_before, "after_s": t_after}
    print(f"speed {name} b{batch}: {t_before * 1e3:,.1f} -> {t_after * 1e3:,.1f} ms "
          f"({t_after / t_before:.3f}x)", flush=True)
    return r


def _mib(b) -> str:
    return f"{b / MIB:,.1f}"


def markdown(res: dict) -> str:
    lines = [f"# keep_shared: XLA's temp without and with it ({res['target']}, "
             f"deviceless, and the CPU)", "", f"Command: `{res['command']}`", "",
             "Before: the rule's measure set without keep_shared; after: with it. "
             "Ratios are temp / arena plan. No split-K: the same programs compiled with "
             "`xla_gpu_experimental_force_split_k=1` (inference only). +injective: the "
             "measure also on injective ops' outputs (Concat, transpose; inference only).", ""]
    for kind, title in (("heldout", "Held-out nets"), ("zoo", "Zoo nets"),
                        ("cpu", "On the CPU (kept as a conditional's branch, values a convolution "
                                "and an elementwise op read)")):
        rows = [r for r in res["rows"] if r["set"] == kind]
        if not rows:
            continue
        lines += [f"## {title}", "",
                  "| net | batch | part | before set | rule | arena MiB | before MiB | "
                  "after MiB | before / arena | after / arena | no split-K before MiB | "
                  "no split-K after MiB | +injective after MiB |",
                  "|---|--:|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
        for r in rows:
            a = r["arena"]
            ns = ([_mib(r[k]) for k in ("before_no_split_k", "after_no_split_k",
                                          "after_injective")]
                  if "before_no_split_k" in r else ["", "", ""])
            lines.append(f"| {r['net']} | {r['batch']} | {r['part']} | "
                         f"{'+'.join(r['before_measures']) or 'none'} | "
                         f"{'+'.join(r['rule']) or 'none'} | {_mib(a)} | "
                         f"{_mib(r['before'])} | {_mib(r['after'])} | "
                         f"{r['before'] / a:.2f} | {r['after'] / a:.2f} | {' | '.join(ns)} |")
        lines.append("")
    speed = [r for r in res["rows"] if r["set"] == "speed"]
    if speed:
        lines += ["## CPU inference time (the branch's copies)", "",
                  "Seconds per step, best of 5 rounds of 3 steps run in turn, this machine.", "",
                  "| net | batch | rule | without ms | with ms | with / without |",
                  "|---|--:|---|--:|--:|--:|"]
        for r in speed:
            lines.append(f"| {r['net']} | {r['batch']} | {'+'.join(r['rule'])} | "
                         f"{r['before_s'] * 1e3:,.1f} | {r['after_s'] * 1e3:,.1f} | "
                         f"{r['after_s'] / r['before_s']:.3f} |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="h100")
    ap.add_argument("--zoo", default=ZOO)
    ap.add_argument("--zoo-batch", type=int, default=64)
    ap.add_argument("--zoo-train", default=ZOO_TRAIN)
    ap.add_argument("--heldout", default=None, help="default: every held-out net")
    ap.add_argument("--heldout-batch", type=int, default=32)
    ap.add_argument("--cpu", default=CPU)
    ap.add_argument("--speed", default=SPEED)
    ap.add_argument("--out", default=os.path.join("bench-results", "gpu_keep_shared.md"))
    args = ap.parse_args(argv)
    from symgraph.models import heldout as ho
    from symgraph.util import atomic_write_text
    heldout = ho.NAMES if args.heldout is None else list(filter(None, args.heldout.split(",")))
    res = {"target": args.target, "rows": [],
           "command": "python benchmarks/gpu_keep_shared.py " + " ".join(
               sys.argv[1:] if argv is None else argv)}
    t = args.target
    jobs = [(n, args.heldout_batch, tr, t, "heldout") for n in heldout for tr in (False, True)]
    jobs += [(n, args.zoo_batch, False, t, "zoo") for n in filter(None, args.zoo.split(","))]
    jobs += [(n, args.zoo_batch, True, t, "zoo") for n in filter(None, args.zoo_train.split(","))]
    jobs += [(n, args.heldout_batch, False, "cpu", "cpu")
             for n in filter(None, args.cpu.split(","))]
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    for name, batch, train, target, kind in jobs:
        res["rows"].append(row(name, batch, train, target, kind))
        atomic_write_text(args.out, markdown(res))  # kept as it goes: long runs
    for name in filter(None, args.speed.split(",")):
        res["rows"].append(speed_row(name, args.heldout_batch))
        atomic_write_text(args.out, markdown(res))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
