#!/usr/bin/env python3
"""A footprint you can predict: the plan's predicted total beside XLA's figure.

    python benchmarks/predict.py [--nets resnet-50,vgg16] [--batch 8] [--modes train,infer]
                                 [--reuse] [--rss NET:MODE[:BATCH],...] [--rss-batch 4]
                                 [--rss-arenas default,1]
                                 [--out benchmarks/results/predict]

For each zoo net and mode this plans the net (``sg.plan``), predicts the
footprint of the program a Module runs for it
(``symgraph.memory.predict.predict``: the plan plus what XLA adds beyond
it, without compiling anything), then compiles that program (compile only,
one CPU device, the default memory measures) and compares the prediction
with XLA's figure, temp + argument + output - alias (``xla.footprint``).
``--reuse`` takes XLA's figures from an earlier results.json in ``--out``
where the net, mode, batch and the rule's measures match (the rule can then be re-evaluated
without compiling again). ``--rss`` also runs those programs once, each in
a fresh process (``benchmarks/xla_rss.py``'s measurement; ``--rss-arenas``:
under glibc's default malloc arenas and/or with ``MALLOC_ARENA_MAX``), and
compares the predicted resident memory (the prediction plus the
convolution library's largest call, ``predict.library_bytes``) with the
resident memory the run touches (arguments already resident plus the rise
of the peak).

Writes results.json and results.md to ``--out`` (default: a new folder
``predict`` under the current directory; pass
``benchmarks/results/predict`` to update the committed figures).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MIB = 2 ** 20
DEFAULT_NETS = ("mlp,resnet-cifar-20,alexnet,vgg11,vgg16,vgg16-bn,googlenet,inception-bn,"
                "inception-v3,resnet-18,resnet-v1-18,resnet-50,resnet-v1-50,resnet-101,"
                "resnet-152")


def xla_figures(name: str, batch: int, train: bool) -> dict:
    """XLA's memory_analysis() of the program a Module runs (compile only)."""
    import jax

    from symgraph import xla
    from symgraph.memory import plan
    from symgraph.models import data_shapes, get_model
    p = plan(get_model(name), data_shapes(name, batch), train=train, name=name)
    t = time.perf_counter()
    step = xla.plan_step(p)
    m = xla.memory(step)
    out = {**{k: m[k] for k in ("temp", "argument", "output", "alias")},
           "measures": list(step.info["measures"]), "compile_s": time.perf_counter() - t}
    del step
    jax.clear_caches()
    gc.collect()
    return out


def rule_measures(name: str, train: bool) -> list:
    """The measures the rule gives the net's program now (a figure reused
    from an earlier run must have been compiled with them)."""
    from symgraph.graph import Graph
    from symgraph.measures import default_measures
    from symgraph.models import get_model
    return list(default_measures(Graph(get_model(name).outputs), train))


def predicted(name: str, batch: int, train: bool) -> dict:
    from symgraph.memory import plan
    from symgraph.memory.predict import predict
    from symgraph.models import data_shapes, get_model
    p = plan(get_model(name), data_shapes(name, batch), train=train, name=name)
    pr = predict(p)
    return {"arena": p.internal["arena"], "lower_bound": p.lower_bound,
            "buckets": dict(p.buckets), "predicted": pr.total, "parts": pr.parts,
            "library": pr.library, "predicted_resident": pr.resident}


def rss_here(name: str, batch: int, mode: str) -> dict:
    """In this process: the program's arguments (resident before the run)
    plus how far the peak resident set rose during its first run
    (``benchmarks/xla_rss.py``'s measurement, the default measures)."""
    import xla_rss
    from symgraph import xla
    from symgraph.memory import plan
    from symgraph.models import data_shapes, get_model
    p = plan(get_model(name), data_shapes(name, batch), train=mode == "train", name=name)
    r = xla_rss.run_once(xla.plan_step(p))
    m = r["analysis"]
    return {"xla_footprint": xla.footprint(m), "rss_rise": r["rss_rise"],
            "resident": m["argument"] + r["rss_rise"]}


def rss_figure(name: str, batch: int, mode: str, arenas: str = "default") -> dict:
    """``rss_here`` in a fresh process, so no run sees another's pages;
    ``arenas``: glibc's malloc arenas there (``MALLOC_ARENA_MAX``; default:
    one per thread that allocates)."""
    import subprocess
    here = os.path.dirname(os.path.abspath(__file__))
    code = ("import json, sys; sys.path.insert(0, %r); sys.path.insert(0, %r); "
            "import predict; print(json.dumps(predict.rss_here(%r, %d, %r)))"
            % (here, os.path.dirname(here), name, batch, mode))
    env = dict(os.environ)
    env.pop("MALLOC_ARENA_MAX", None)
    if arenas != "default":
        env["MALLOC_ARENA_MAX"] = arenas
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def markdown(rows: list, rss: list, env: dict, command: str) -> str:
    out = [f"# Predicted footprint vs XLA's figure ({env['date']})", "",
           f"{env['machine']}; jax {env['jax']}; `{command}`. Compile only, one CPU device, "
           "float32, the default memory measures. MiB. *XLA*: temp + argument + output - "
           "alias of the program a Module runs (training: the fit step, SGD with momentum "
           "0.9, donated). *predicted*: `symgraph.memory.predict` from the plan alone. "
           "*plan total*: arguments + gradients + aux + internal (arena).", "",
           "| net | mode | batch | measures | plan total | predicted | XLA | XLA temp "
           "| error |",
           "|---|---|--:|---|--:|--:|--:|--:|--:|"]
    for r in rows:
        b = r["buckets"]
        total = b["arguments"] + b["gradients"] + b["aux"] + r["arena"]
        out.append(f"| {r['net']} | {r['mode']} | {r['batch']} | {'+'.join(r['xla']['measures']) or 'none'} "
                   f"| {total / MIB:,.0f} | {r['predicted'] / MIB:,.0f} "
                   f"| {r['xla_footprint'] / MIB:,.0f} | {r['xla']['temp'] / MIB:,.0f} "
                   f"| {100 * r['error']:+.1f}% |")
    errs = [abs(r["error"]) for r in rows]
    if errs:
        out += ["", f"Largest error {100 * max(errs):.1f}% over {len(rows)} programs; "
                f"{sum(e <= 0.05 for e in errs)} of {len(rows)} within 5%."]
    if rss:
        out += ["", "## Against the resident memory of a fresh run", "",
                "*resident*: the program's arguments (resident before the run) plus how far "
                "the peak resident set rose during its first run, in a fresh process "
                "(`benchmarks/xla_rss.py`'s measurement); *arenas*: glibc's malloc arenas "
                "in that process (`MALLOC_ARENA_MAX`; default: one per thread that "
                "allocates). *library*: the convolution library's largest call "
                "(`predict.library_bytes`); *predicted resident*: predicted + library; "
                "*error*: predicted resident against resident.",
                "", "| net | mode | batch | arenas | predicted | library | predicted resident "
                "| XLA | resident | resident - XLA | error |",
                "|---|---|--:|---|--:|--:|--:|--:|--:|--:|--:|"]
        for r in rss:
            out.append(f"| {r['net']} | {r['mode']} | {r['batch']} | {r['arenas']} "
                       f"| {r['predicted'] / MIB:,.0f} | {r['library'] / MIB:,.0f} "
                       f"| {r['predicted_resident'] / MIB:,.0f} "
                       f"| {r['xla_footprint'] / MIB:,.0f} "
                       f"| {r['resident'] / MIB:,.0f} "
                       f"| {(r['resident'] - r['xla_footprint']) / MIB:+,.0f} "
                       f"| {100 * r['error']:+.1f}% |")
        within = sum(abs(r["error"]) <= 0.10 for r in rss)
        out += ["", f"{within} of {len(rss)} runs within 10% of the predicted resident memory."]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nets", default=DEFAULT_NETS)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--modes", default="train,infer")
    ap.add_argument("--reuse", action="store_true",
                    help="take XLA's figures from --out's results.json where they match")
    ap.add_argument("--rss", default="",
                    help="NET:MODE[:BATCH],... also run in a fresh process (BATCH: --rss-batch)")
    ap.add_argument("--rss-batch", type=int, default=4)
    ap.add_argument("--rss-arenas", default="default",
                    help="glibc malloc arenas of the --rss runs, each run once per entry: "
                         "'default' or a MALLOC_ARENA_MAX value (e.g. default,1)")
    ap.add_argument("--out", default="predict")
    args = ap.parse_args(argv)
    import datetime
    import platform

    import jax
    from tqdm import tqdm

    from symgraph.util import atomic_open
    path = os.path.join(args.out, "results.json")
    old = {}
    if args.reuse and os.path.exists(path):
        with open(path) as f:
            for r in json.load(f)["rows"]:
                old[(r["net"], r["mode"], r["batch"])] = r["xla"]
    jobs = [(n, m) for n in args.nets.split(",") for m in args.modes.split(",")]
    rows = []
    from symgraph import xla
    for name, mode in tqdm(jobs, desc="predict", unit="program", file=sys.stderr):
        train = mode == "train"
        fig = old.get((name, mode, args.batch))
        if fig is None or fig["measures"] != rule_measures(name, train):
            fig = xla_figures(name, args.batch, train)
        r = {"net": name, "mode": mode, "batch": args.batch, "xla": fig,
             **predicted(name, args.batch, train)}
        r["xla_footprint"] = xla.footprint(fig)
        r["error"] = r["predicted"] / r["xla_footprint"] - 1
        rows.append(r)
        # written as it goes: a long run cut short keeps what it measured
        os.makedirs(args.out, exist_ok=True)
        with atomic_open(path, "w") as f:
            json.dump({"rows": rows, "rss": []}, f, indent=1)
    rss = []
    for item in filter(None, args.rss.split(",")):
        name, mode, *b = item.split(":")
        batch = int(b[0]) if b else args.rss_batch
        pr = predicted(name, batch, mode == "train")
        for arenas in args.rss_arenas.split(","):
            m = rss_figure(name, batch, mode, arenas)
            rss.append({"net": name, "mode": mode, "batch": batch, "arenas": arenas, **m,
                        "predicted": pr["predicted"], "library": pr["library"],
                        "predicted_resident": pr["predicted_resident"],
                        "error": pr["predicted_resident"] / m["resident"] - 1})
    env = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": f"{platform.machine()}, {os.cpu_count()} cores", "jax": jax.__version__}
    command = "python benchmarks/predict.py " + " ".join(argv if argv is not None
                                                         else sys.argv[1:])
    os.makedirs(args.out, exist_ok=True)
    with atomic_open(path, "w") as f:
        json.dump({"tool": "benchmarks/predict.py", "command": command, **env, "rows": rows,
                   "rss": rss}, f, indent=1)
    with atomic_open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(markdown(rows, rss, env, command))
    print(markdown(rows, rss, env, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
