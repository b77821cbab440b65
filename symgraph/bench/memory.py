"""Memory benchmark: symgraph's plans for the zoo nets beside XLA's and MXNet's figures.

For each net, batch size and mode (training: forward plus the parameter
gradients; inference: forward only) it plans the graph with
``symgraph.memory.plan`` and records

- the buckets (``arguments``, ``gradients``, ``aux``) and the ``internal``
  bucket under every strategy (naive, inplace, coshare, both, arena,
  lower_bound), the savings relative to naive, and that every plan verified;
- the planning time (all passes, all strategies, the static check);
- XLA's ``memory_analysis()`` of the lowered program for the same graph
  (temp, argument, output, alias bytes) and its compile time;
- at the ``--compare-at`` batch sizes (default 64), side by side: XLA's
  temp for symgraph's lowered step (training: forward, explicit backward
  and SGD; ``symgraph.xla``) under the memory measure set that gives the
  least temp (``xla.TRAIN_CANDIDATES`` / ``INFER_CANDIDATES``), and for a
  plain-JAX step of the same net (``jax.value_and_grad`` + SGD), with and
  without XLA's memory-optimized scheduler;
- MXNet 1.9.1's figure for the same net, read from the ``mxnet.json`` that
  ``benchmarks/mxnet_memory.py`` wrote (run in MXNet's own environment).

It writes ``results.json``, ``results.md`` and PNG charts to the output
folder: ``--out``, or by default ``./bench-results/memory``
(``./bench-results/memory-quick`` with ``--quick``) under the current
folder, so neither a smoke test nor a partial run replaces the committed
full run in ``benchmarks/results/memory`` (made with ``--out
benchmarks/results/memory``). ``--quick`` plans two small nets (an MLP and
a CIFAR ResNet-20) at batch 4, training and inference, with XLA's figure of
the program ``fit``/``predict`` runs, but compiles no side-by-side steps
(``--compare-at 4`` adds them): a smoke test (about 20 s on 2 cores)
whose figures mean nothing at that size, which its output, table and
charts say.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import time

from ..util import atomic_write_text
from .common import BenchError

DEFAULT_NETS = ("alexnet", "vgg16", "googlenet", "inception-bn", "inception-v3", "resnet-50",
                "resnet-152")
DEFAULT_BATCHES = (32, 64, 128)
DEFAULT_COMPARE_AT = (64,)
QUICK_NETS = ("mlp", "resnet-cifar-20")
QUICK_BATCHES = (4,)
MODES = ("train", "infer")
MIB = 2 ** 20


# --------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------
def add_arguments(parser) -> None:
    parser.add_argument("--nets", help="comma-separated zoo names (default: "
                        + ",".join(DEFAULT_NETS) + ")")
    parser.add_argument("--batch", help="comma-separated batch sizes (default: 32,64,128)")
    parser.add_argument("--modes", default="train,infer",
                        help="train, infer or both (default: %(default)s)")
    parser.add_argument("--out", help="results folder (default: ./bench-results/memory, with "
                        "--quick ./bench-results/memory-quick, under the current folder; the "
                        "committed results only when --out names them)")
    parser.add_argument("--mxnet", metavar="MXNET.json",
                        help="MXNet's figures from benchmarks/mxnet_memory.py (default: "
                             "mxnet.json in the results folder, if there)")
    parser.add_argument("--schedule", default="dfs", choices=("dfs", "memory"),
                        help="the schedule plans are made for (default: %(default)s, "
                             "MXNet's order); the other one's arena and bound are "
                             "recorded too")
    parser.add_argument("--no-xla", action="store_true",
                        help="skip compiling the lowered programs (XLA's figures)")
    parser.add_argument("--compare-at", metavar="BATCHES",
                        help="batch sizes at which symgraph's lowered step (best memory "
                             "measures) and a plain-JAX step are compiled side by side "
                             "(default: 64; with --quick none; 'none' for no comparison)")
    parser.add_argument("--no-charts", action="store_true", help="skip the PNG charts")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke test whose figures mean nothing: mlp and "
                             "resnet-cifar-20 at batch 4, no side-by-side steps unless "
                             "--compare-at names a batch")


def _names(text, default, what):
    if not text:
        return list(default)
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise BenchError(f"--{what}: empty list")
    return items


def _compare_at(text, default) -> tuple:
    if text is None:
        return tuple(default)
    if text.strip() == "none":
        return ()
    try:
        out = tuple(int(b) for b in _names(text, (), "compare-at"))
    except ValueError:
        raise BenchError(f"--compare-at: expected batch sizes such as 64 or 'none', got "
                         f"{text!r}") from None
    if any(b < 1 for b in out):
        raise BenchError("--compare-at: batch sizes must be positive")
    return out


def run(args) -> int:
    from ..models import model_info
    nets = _names(args.nets, QUICK_NETS if args.quick else DEFAULT_NETS, "nets")
    for n in nets:
        model_info(n)  # an unknown name fails before any work
    try:
        batches = [int(b) for b in _names(args.batch, QUICK_BATCHES if args.quick
                                          else DEFAULT_BATCHES, "batch")]
    except ValueError:
        raise BenchError(f"--batch: expected integers such as 32,64,128, got "
                         f"{args.batch!r}") from None
    if any(b < 1 for b in batches):
        raise BenchError("--batch: batch sizes must be positive")
    # comparing compiles steps: nothing to compare without XLA
    # a quick run compiles one program per row, not every candidate measure
    # set and two plain-JAX steps (those took 45 of its 57 s)
    compare_at = () if args.no_xla else _compare_at(
        args.compare_at, () if args.quick else DEFAULT_COMPARE_AT)
    modes = _names(args.modes, MODES, "modes")
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise BenchError(f"--modes: unknown mode {bad[0]!r}; use train, infer or both")
    from .common import default_out
    out = args.out or default_out("memory", args.quick)
    mxnet_path = args.mxnet or os.path.join(out, "mxnet.json")
    mxnet = load_mxnet(mxnet_path, required=bool(args.mxnet))
    result = run_memory(nets, batches, modes, xla=not args.no_xla, mxnet=mxnet,
                        schedule=args.schedule, progress=not args.no_progress,
                        quick=args.quick, compare_at=compare_at)
    files = write_results(result, out, charts=not args.no_charts)
    if compare_at:
        from .report import steps_table
        print(steps_table(result))
    if args.quick:
        from .common import smoke_note
        from .report import SMOKE_WHAT
        print(smoke_note(SMOKE_WHAT))
    print(f"wrote {', '.join(files)} to {out}")
    return 0


def main(argv=None) -> int:
    """``benchmarks/memory.py``: the same as ``symgraph bench memory``."""
    import sys

    from ..cli import main as cli_main
    return cli_main(["bench", "memory", *(sys.argv[1:] if argv is None else argv)])


# --------------------------------------------------------------------------
# MXNet's figures
# --------------------------------------------------------------------------
def load_mxnet(path: str, required: bool = False) -> dict | None:
    """The results of benchmarks/mxnet_memory.py; None if absent and not required."""
    if not os.path.exists(path):
        if required:
            raise BenchError(f"--mxnet: no file {path}")
        return None
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        rows = {(r["net"], int(r["batch"]), r["mode"]): r for r in doc["rows"]}
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise BenchError(f"{path}: not a results file of benchmarks/mxnet_memory.py "
                         f"({type(err).__name__}: {err})") from None
    return {"doc": doc, "rows": rows}


def _mxnet_row(mxnet, net, batch, mode):
    if mxnet is None:
        return None
    r = mxnet["rows"].get((net, batch, mode))
    if r is None:
        return None
    return {k: v for k, v in r.items() if k not in ("net", "batch", "mode")}


# --------------------------------------------------------------------------
# measuring
# --------------------------------------------------------------------------
def compare_steps(p, net, shapes) -> dict:
    """XLA's figures for symgraph's lowered step of plan ``p`` under the
    measure set with the least temp, beside a plain-JAX step of ``net``
    (with and without XLA's memory-optimized scheduler): compiles only."""
    from .. import xla
    if p.train:
        cands = xla.TRAIN_CANDIDATES
        make = (lambda ms: xla.training_step(p, measures=ms))
    else:
        cands = xla.INFER_CANDIDATES
        make = (lambda ms: xla.inference_step(p, measures=ms))
    t0 = time.perf_counter()
    best, _, m, temps = xla.best_step(make, cands)
    plain = {label: xla.memory(xla.plain_jax_step(net, shapes, train=p.train, measures=ms))
             for label, ms in (("none", ()), ("scheduler", ("scheduler",)))}
    arena = p.internal["arena"]
    return {"symgraph": {"measures": list(best), **m},
            "symgraph_temps": {xla.measures_label(ms): t for ms, t in temps.items()},
            "plain_jax": plain,
            "best_over_arena": m["temp"] / arena if arena else None,
            "best_over_plain_jax": m["temp"] / plain["none"]["temp"],
            "seconds": time.perf_counter() - t0}


def measure(name: str, batch: int, mode: str, xla: bool = True, mxnet=None,
            schedule: str = "dfs", compare: bool = False) -> dict:
    """One row of the benchmark: the plan of zoo net ``name`` at ``batch``."""
    from ..memory import STRATEGIES, plan
    from ..xla import plan_memory
    from ..models import count_parameters, data_shapes, get_model, model_info
    info = model_info(name)
    net = get_model(name)
    shapes = data_shapes(name, batch)
    train = mode == "train"
    t0 = time.perf_counter()
    p = plan(net, shapes, train=train, schedule=schedule, name=name)
    plan_s = time.perf_counter() - t0
    doc = p.to_json()  # refuses an unverified plan
    internal = doc["bytes"]["internal"]
    naive = internal["naive"]
    row = {"net": name, "batch": batch, "mode": mode,
           "image_shape": list(info.image_shape),
           "parameters": count_parameters(net, info.image_shape),
           "bytes": doc["bytes"], "verified": doc["verified"],
           "savings": {s: (1 - internal[s] / naive) if naive else 0.0
                       for s in STRATEGIES if s != "naive"},
           "arena_over_lower_bound": (internal["arena"] / internal["lower_bound"]
                                      if internal["lower_bound"] else None),
           "plan_seconds": plan_s, "plan_timings": dict(p.timings),
           "schedule": schedule, "ops": sum(1 for n in p.graph.nodes if n.op is not None),
           "peak_tensors": [{"name": t[0], "shape": list(t[1]), "bytes": t[3]}
                            for t in p.peak_tensors()[:5]]}
    other = "memory" if schedule == "dfs" else "dfs"
    q = plan(net, shapes, train=train, schedule=other, name=name)
    row["other_schedule"] = {"schedule": other, "arena": q.internal["arena"],
                             "lower_bound": q.internal["lower_bound"]}
    row["xla"], row["xla_compile_seconds"] = None, None
    if xla:
        t0 = time.perf_counter()
        row["xla"] = plan_memory(p)  # the program Module.fit (or predict) runs
        row["xla_compile_seconds"] = time.perf_counter() - t0
    row["xla_temp_over_arena"] = (row["xla"]["temp"] / internal["arena"]
                                  if row["xla"] and row["xla"]["temp"] is not None
                                  and internal["arena"] else None)
    row["steps"] = compare_steps(p, net, shapes) if compare else None
    row["mxnet_mib"] = _mxnet_row(mxnet, name, batch, mode)
    both = (row["mxnet_mib"] or {}).get("both")
    row["arena_over_mxnet"] = internal["arena"] / (both * MIB) if both else None
    return row


def environment() -> dict:
    """Machine, versions and date of a run."""
    import jax
    import jaxlib
    import numpy

    from .. import __version__
    from .common import cpu_model
    cpu = cpu_model()
    mem = None
    try:
        with open("/proc/meminfo") as f:
            kb = next(int(ln.split()[1]) for ln in f if ln.startswith("MemTotal:"))
            mem = round(kb / 2 ** 20, 1)
    except (OSError, StopIteration):
        pass
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "machine": platform.machine(),
                    "cpu": cpu, "cpu_count": os.cpu_count(), "memory_gib": mem,
                    "jax_backend": jax.default_backend(),
                    "jax_devices": [str(d) for d in jax.devices()][:4]},
        "versions": {"symgraph": __version__, "jax": jax.__version__,
                     "jaxlib": jaxlib.__version__, "numpy": numpy.__version__,
                     "python": platform.python_version()},
    }


def run_memory(nets, batches, modes=MODES, *, xla: bool = True, mxnet=None,
               schedule: str = "dfs", progress: bool = True, quick: bool = False,
               compare_at=()) -> dict:
    """Measures every (net, batch, mode); returns the results dictionary."""
    from tqdm import tqdm
    jobs = [(n, b, m) for n in nets for b in batches for m in modes]
    rows = []
    bar = tqdm(jobs, desc="memory", unit="plan", disable=not progress, leave=False)
    for name, batch, mode in bar:
        bar.set_postfix_str(f"{name} batch {batch} {mode}")
        rows.append(measure(name, batch, mode, xla=xla, mxnet=mxnet, schedule=schedule,
                            compare=batch in compare_at))
    bar.close()
    result = {"tool": "symgraph bench memory", **environment(),
              "config": {"nets": list(nets), "batches": list(batches), "modes": list(modes),
                         "xla": xla, "compare_at": list(compare_at),
                         "schedule": schedule, "quick": quick,
                         "dtype": "float32"},
              "units": "bytes (MXNet's figures: MiB as MXNet prints them)",
              "mxnet": None, "rows": rows}
    if mxnet is not None:
        doc = mxnet["doc"]
        result["mxnet"] = {"version": doc.get("machine", {}).get("mxnet"),
                           "date": doc.get("date"), "machine": doc.get("machine"),
                           "settings": doc.get("settings"), "facts": doc.get("facts"),
                           "json_check": {n: v.get("shapes", {}).get("agree")
                                          for n, v in doc.get("nets", {}).items()}}
    return result


def write_results(result: dict, out: str, charts: bool = True) -> list:
    """results.json, results.md and (unless ``charts`` is False) PNGs in ``out``."""
    from . import report
    os.makedirs(out, exist_ok=True)
    atomic_write_text(os.path.join(out, "results.json"), json.dumps(result, indent=1) + "\n")
    report.write_markdown(result, os.path.join(out, "results.md"))
    files = ["results.json", "results.md"]
    if charts:
        files += report.charts(result, out)
    return files
