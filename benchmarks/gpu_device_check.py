#!/usr/bin/env python3
"""On a real GPU: deviceless figures against the device's own, and speed
beside hand-written plain JAX. One script, meant to run once in the few
minutes a GPU is lent (the device tool), its output committed under
benchmarks/results/gpu_device/.

    python benchmarks/gpu_device_check.py [--description h100] [--out DIR] [--quick]

1. Memory: for each program (the Module's fit step, SGD with momentum, and
   the inference program) of the nets in ``NETS``, XLA's figures compiled
   on the device (autotuned: cuDNN workspaces included) beside the same
   program compiled deviceless for ``--description`` (no autotuning), and
   the device's ``peak_bytes_in_use`` over 3 runs of the step beside the
   footprint (temp + argument + output - alias).
2. Speed: ResNet-50 at batch 128 in bfloat16 and VGG-16 at batch 64 in
   float32, symgraph's fit step against the hand-written ``jax.lax`` NHWC
   step (``symgraph.bench.handwritten``): images/s (median of timed rounds,
   interleaved) and MFU (symgraph's FLOP count of the step over the
   device's dense peak, ``symgraph.bench.common.PEAK_FLOPS``).

``--quick`` uses small nets and batches (a smoke run; on a machine without a
GPU it runs on the CPU). Writes results.json and
results.md to ``--out`` (default bench-results/gpu_device).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MIB = 2 ** 20
# (zoo net, batch, compute dtype)
NETS = [("resnet-50", 64, "float32"), ("vgg16", 64, "float32"), ("resnet-50", 128, "bfloat16"),
        ("inception-bn", 64, "float32"), ("googlenet", 64, "float32")]
QUICK_NETS = [("resnet-cifar-20", 32, "float32"), ("mlp", 256, "float32")]
SPEED = [("resnet-50", 128, "bfloat16"), ("vgg16", 64, "float32")]
# dense tensor-core peak FLOP/s by device kind (NVIDIA's datasheets, SXM parts)
HANDWRITTEN = {"resnet-50": "resnet-50", "vgg16": "vgg16"}


def concrete(tree, seed=0):
    """Arrays for ShapeDtypeStructs: small normal floats, zero integers, a key."""
    import jax
    import jax.numpy as jnp
    leaves, treedef = jax.tree.flatten(tree)
    keys = jax.random.split(jax.random.key(seed), max(1, len(leaves)))
    out = []
    for k, s in zip(keys, leaves):
        if jax.dtypes.issubdtype(s.dtype, jax.dtypes.prng_key):
            out.append(jax.random.key(seed))
        elif jnp.issubdtype(s.dtype, jnp.floating):
            out.append(0.01 * jax.random.normal(k, s.shape, s.dtype))
        else:
            out.append(jnp.zeros(s.shape, s.dtype))
    return jax.tree.unflatten(treedef, out)


def memory_rows(nets, description):
    import jax
    from symgraph import xla
    from symgraph.memory import plan
    from symgraph.models import data_shapes, get_model
    rows = []
    for name, batch, dtype in nets:
        net = get_model(name)
        for train in (True, False):
            p = plan(net, data_shapes(name, batch), train=train, compute_dtype=dtype, name=name)
            r = {"net": name, "batch": batch, "dtype": dtype, "train": train,
                 "arena": p.internal["arena"]}
            try:
                r["deviceless"] = xla.plan_memory(p, target=description)
            except Exception as err:  # recorded, not fatal: the device figures still count
                r["deviceless_error"] = f"{type(err).__name__}: {err}"
            step = xla.plan_step(p, target="gpu" if jax.default_backend() == "gpu" else "cpu")
            compiled = xla.compile_step(step)
            r["device"] = xla.analysis_dict(compiled)
            r["footprint"] = xla.footprint(r["device"])
            dev = jax.devices()[0]
            before = (dev.memory_stats() or {}).get("peak_bytes_in_use")
            args = concrete(step.args)
            for _ in range(3):
                args = _rerun(compiled, args, train)
            jax.block_until_ready(args)
            stats = dev.memory_stats() or {}
            r["peak_bytes_in_use"] = stats.get("peak_bytes_in_use")
            r["peak_before"] = before
            rows.append(r)
            print(_memory_line(r), flush=True)
    return rows


def _rerun(compiled, args, train):
    """One run; a training step's donated parameters, state and aux come back."""
    out = compiled(*args)
    if not train:
        return args
    params, states, aux = out[0], out[1], out[2]
    return (params, states, aux) + tuple(args[3:])


def _memory_line(r):
    d = r.get("deviceless") or {}
    dl = f"deviceless temp {d['temp'] / MIB:,.0f}" if d else "deviceless -"
    peak = r["peak_bytes_in_use"]
    return (f"{r['net']} b{r['batch']} {r['dtype']} {'train' if r['train'] else 'infer'}: "
            f"arena {r['arena'] / MIB:,.0f} MiB, device temp {r['device']['temp'] / MIB:,.0f}, "
            f"{dl}, footprint {r['footprint'] / MIB:,.0f}, peak in use "
            f"{'-' if peak is None else format(peak / MIB, ',.0f')}")


def speed_rows(nets, rounds=5, steps=10):
    import jax
    from symgraph import xla
    from symgraph.bench import handwritten as hw
    from symgraph.bench.common import peak_flops
    from symgraph.memory import plan
    from symgraph.models import data_shapes, get_model
    rows = []
    kind = jax.devices()[0].device_kind
    for name, batch, dtype in nets:
        p = plan(get_model(name), data_shapes(name, batch), train=True,
                 dtypes=None if dtype == "float32" else {"data": dtype}, name=name)
        ours = xla.training_step(p, target="gpu" if jax.default_backend() == "gpu" else "cpu",
                                 compute_dtype=dtype)
        ours_c = xla.compile_step(ours)
        hand = hw.step(HANDWRITTEN.get(name, name), batch, layout="NHWC", dtype=dtype) \
            if name in HANDWRITTEN else None
        hand_c = None if hand is None else hand.jit().lower(*hand.args).compile()
        progs = {"symgraph": (ours_c, concrete(ours.args), 3)}
        if hand_c is not None:
            progs["plain-jax-nhwc"] = (hand_c, concrete(hand.args), 2)
        times = {k: [] for k in progs}
        for _ in range(rounds):  # interleaved: the two share the machine's state
            for k, (c, a, keep) in progs.items():
                t0 = time.perf_counter()
                for _ in range(steps):
                    out = c(*a)
                    a = tuple(out[:keep]) + tuple(a[keep:]) if k == "symgraph" else \
                        (out[1], out[2], out[3]) + tuple(a[3:])
                jax.block_until_ready(out)
                times[k].append((time.perf_counter() - t0) / steps)
                progs[k] = (c, a, keep)
        r = {"net": name, "batch": batch, "dtype": dtype, "device": kind,
             "step_flops": int(p.step_flops or 0)}
        peak = peak_flops(kind, dtype)
        for k, ts in times.items():
            s = statistics.median(ts)
            r[k] = {"step_s": s, "images_per_s": batch / s,
                    "mfu": None if not peak or not r["step_flops"] else r["step_flops"] / s / peak}
        if "plain-jax-nhwc" in r:
            r["speed_ratio"] = r["symgraph"]["images_per_s"] / r["plain-jax-nhwc"]["images_per_s"]
        rows.append(r)
        print(r, flush=True)
    return rows


def markdown(res):
    lines = [f"# Deviceless figures against a real GPU ({res['device']})", "",
             f"Command: `{res['command']}`", "",
             "| net | batch | dtype | mode | arena MiB | device temp MiB | deviceless temp MiB | "
             "deviceless / device | footprint MiB | peak in use MiB | peak / footprint |",
             "|---|--:|---|---|--:|--:|--:|--:|--:|--:|--:|"]
    for r in res["memory"]:
        d = (r.get("deviceless") or {}).get("temp")
        dev = r["device"]["temp"]
        peak = r["peak_bytes_in_use"]
        lines.append(
            f"| {r['net']} | {r['batch']} | {r['dtype']} | {'train' if r['train'] else 'infer'} "
            f"| {r['arena'] / MIB:,.0f} | {dev / MIB:,.0f} | "
            f"{'-' if d is None else format(d / MIB, ',.0f')} | "
            f"{'-' if d is None or not dev else format(d / dev, '.3f')} | "
            f"{r['footprint'] / MIB:,.0f} | "
            f"{'-' if peak is None else format(peak / MIB, ',.0f')} | "
            f"{'-' if peak is None else format(peak / r['footprint'], '.3f')} |")
    lines += ["", "| net | batch | dtype | symgraph img/s | plain JAX NHWC img/s | ratio | "
              "symgraph MFU |", "|---|--:|---|--:|--:|--:|--:|"]
    for r in res["speed"]:
        h = r.get("plain-jax-nhwc", {})
        mfu = r["symgraph"]["mfu"]
        lines.append(f"| {r['net']} | {r['batch']} | {r['dtype']} | "
                     f"{r['symgraph']['images_per_s']:,.0f} | "
                     f"{h.get('images_per_s', 0):,.0f} | {r.get('speed_ratio', 0):.3f} | "
                     f"{'-' if mfu is None else format(mfu, '.1%')} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--description", default="h100",
                    help="the GPU description the deviceless figures are compiled for")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import jax
    from symgraph.bench.common import default_out, write_results
    out = args.out or default_out("gpu_device", args.quick)
    res = {"device": jax.devices()[0].device_kind, "backend": jax.default_backend(),
           "command": "python benchmarks/gpu_device_check.py " + " ".join(argv or sys.argv[1:])}
    res["memory"] = memory_rows(QUICK_NETS if args.quick else NETS, args.description)
    write_results(out, {**res, "speed": []}, markdown({**res, "speed": []}))
    res["speed"] = speed_rows([("resnet-cifar-20", 32, "float32")] if args.quick else SPEED,
                              rounds=2 if args.quick else 5, steps=2 if args.quick else 10)
    write_results(out, res, markdown(res))
    print(f"wrote {out}/results.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
