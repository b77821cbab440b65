#!/usr/bin/env python3
"""The memory a convolution's library takes beyond XLA's figure, beside the rule for it.

    python benchmarks/library_scratch.py
        [--cases c64-56-k3,c256-14-k3,c256-14-k1,c512-7-k3,c64-56-k3-s2,stem]
        [--batches 4,16] [--layouts nchw,nhwc] [--parts fwd,dgrad,wgrad,bwd]
        [--chains c256-14-k3x8,c64-56-k3x8] [--chain-batch 16] [--chain-repeats 3]
        [--chain-arenas default,1] [--out library_scratch]

On XLA:CPU every convolution runs in YNNPACK (an ``__ynn_fusion``), which
allocates outside XLA's buffer assignment: a packed copy of the kernel
operand and a padded copy of the input, per worker thread. For single
convolutions written in plain ``jax.lax`` (no symgraph code in the
programs) -- the forward, the input gradient and the weight gradient
(``jax.vjp``), NCHW/OIHW and NHWC/HWIO -- this measures in a fresh process
each, exactly as ``benchmarks/xla_rss.py``'s ``run_once`` does (the first
run's rise of the peak resident set, the arguments resident and collected
before it), how far the resident memory exceeds XLA's figure (temp +
argument + output - alias), beside the rule
(``symgraph.memory.predict.library_call_bytes``)

    forward, stride-1 input gradient:  S = W + T * Xpad + 0.5 MiB
    weight gradient:                   S = T * Xpad + G + 0.5 MiB
    strided input gradient (Eigen):    S = N * Ho * Wo * C * k * k + 6 MiB

W: the weight's bytes (the packed kernel); Xpad: the convolution's input
with its SAME padding (the input gradient convolves the output gradient,
padded by k - 1, to the input's channels); G: the output gradient's bytes;
T: the XLA thread pool's size when the convolution's output channels are
>= 128 and k > 1 (weight gradient: max(C, O) >= 128), else 1 -- measured
with a 2-thread pool only (every worker copies the input). A strided
input gradient runs in Eigen, not YNNPACK: its columns (the output
gradient times the weight, per output pixel, before they are summed into
the input) plus the code it pages in. ``bwd`` rows compute both gradients
in one program, as a trained net's backward does: a strided
convolution's Eigen input gradient runs beside YNNPACK's weight gradient
(the two S add up), a stride-1 one's after it (the larger S). Chain rows run N
identical convolutions (each its own weight, relu between) in one program,
``--chain-repeats`` fresh processes each, under glibc's default malloc
arenas and with ``MALLOC_ARENA_MAX=1``. The library frees its copies after
each call: with one arena the next call reuses them and the excess is the
maximum over the calls (one call's S), not the sum; with the default
arenas (one per thread that allocates) a call run on another thread
cannot reuse the pages a previous call freed in its own thread's arena,
so the excess varies from run to run between one call's S and about
three times it here (three threads' arenas) -- still not N times it.

Linux only (``/proc/self/clear_refs``). Writes results.json and results.md
in ``--out``.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MIB = 2 ** 20
HERE = os.path.dirname(os.path.abspath(__file__))
from symgraph.memory.predict import LIBRARY_BASE as BASE  # noqa: E402

# name -> input channels, height = width, output channels, kernel, stride
CASES = {
    "c64-56-k3": dict(c=64, h=56, o=64, k=3, stride=1),
    "c256-14-k3": dict(c=256, h=14, o=256, k=3, stride=1),
    "c256-14-k1": dict(c=256, h=14, o=256, k=1, stride=1),
    "c512-7-k3": dict(c=512, h=7, o=512, k=3, stride=1),
    "c64-56-k3-s2": dict(c=64, h=56, o=128, k=3, stride=2),
    "stem": dict(c=3, h=224, o=64, k=7, stride=2),  # ResNet's first convolution
}
PARTS = ("fwd", "dgrad", "wgrad", "bwd")


# --------------------------------------------------------------------------
# the programs (plain jax.lax)
# --------------------------------------------------------------------------
def _shapes(spec: dict) -> tuple:
    """(input, weight, output) shapes of ``spec``'s convolution."""
    n, c, h, o, k, s = (spec[x] for x in ("n", "c", "h", "o", "k", "stride"))
    ho = -(-h // s)
    if spec["layout"] == "nchw":
        return (n, c, h, h), (o, c, k, k), (n, o, ho, ho)
    return (n, h, h, c), (k, k, c, o), (n, ho, ho, o)


def _conv(x, w, layout: str, stride: int):
    from jax import lax
    dn = ("NCHW", "OIHW", "NCHW") if layout == "nchw" else ("NHWC", "HWIO", "NHWC")
    return lax.conv_general_dilated(x, w, (stride, stride), "SAME", dimension_numbers=dn)


def program(spec: dict):
    """(function, argument ShapeDtypeStructs) of ``spec``: a convolution's
    ``fwd``, ``dgrad`` or ``wgrad``, both gradients (``bwd``, as a
    trained net's backward computes them), or a ``chain`` of ``count``
    of them."""
    import jax
    import jax.numpy as jnp
    xs, ws, ys = _shapes(spec)
    lay, st = spec["layout"], spec["stride"]

    def sds(shape):
        return jax.ShapeDtypeStruct(shape, jnp.float32)
    part = spec["part"]
    if part == "chain":
        def chain(x, ws):
            for w in ws:
                x = jax.nn.relu(_conv(x, w, lay, 1))
            return x
        return chain, (sds(xs), tuple(sds(ws) for _ in range(spec["count"])))
    if part == "fwd":
        return (lambda x, w: _conv(x, w, lay, st)), (sds(xs), sds(ws))
    if part == "dgrad":
        def dgrad(x, w, g):  # x only for its shape: jit prunes it, as in a net's backward
            return jax.vjp(lambda x: _conv(x, w, lay, st), x)[1](g)[0]
        return dgrad, (sds(xs), sds(ws), sds(ys))
    if part == "wgrad":
        def wgrad(x, w, g):
            return jax.vjp(lambda w: _conv(x, w, lay, st), w)[1](g)[0]
        return wgrad, (sds(xs), sds(ws), sds(ys))
    if part == "bwd":
        def bwd(x, w, g):
            return jax.vjp(lambda x, w: _conv(x, w, lay, st), x, w)[1](g)
        return bwd, (sds(xs), sds(ws), sds(ys))
    raise ValueError(f"unknown part {part!r}")


# --------------------------------------------------------------------------
# the rule
# --------------------------------------------------------------------------
def rule(spec: dict, pool: int) -> int:
    """The library's bytes beyond XLA's figure for ``spec`` with a ``pool``
    of XLA threads (``symgraph.memory.predict.library_call_bytes``; a
    chain: one call's, the calls' maximum; both gradients: their sum where
    the input gradient runs in Eigen beside YNNPACK's weight gradient, a
    strided convolution, else the larger, as ``library_bytes`` says)."""
    from symgraph.memory.predict import library_call_bytes
    n, c, h, o, k, s = (spec[x] for x in ("n", "c", "h", "o", "k", "stride"))
    ho = -(-h // s)
    hp = max((ho - 1) * s + k, h)  # the input with its SAME padding

    def call(part):
        return library_call_bytes(part, n, c, o, (k, k), (hp, hp), (ho, ho), (s, s),
                                  threads=pool)
    part = spec["part"]
    if part == "bwd":
        return call("wgrad") + call("dgrad") if s > 1 else max(call("wgrad"), call("dgrad"))
    return call("fwd" if part == "chain" else part)


# --------------------------------------------------------------------------
# measuring
# --------------------------------------------------------------------------
def _xla_threads() -> int:
    """Threads of XLA's intra-op pool in this process (named ``*XLAEigen``)."""
    names = []
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            pass
    return sum("XLAEigen" in name for name in names)


def measure_here(spec: dict) -> dict:
    """``spec``'s program, in this process, through ``xla_rss.run_once``."""
    import jax

    import xla_rss
    from symgraph.xla import Step, footprint
    fn, structs = program(spec)
    # run_once fills every argument but the last (the random key of
    # symgraph's steps): the programs take one and ignore it (jit prunes it)
    step = Step(lambda *a: fn(*a[:-1]), structs + (jax.random.key(0),))
    r = xla_rss.run_once(step)
    a = r["analysis"]
    if a is None:
        raise RuntimeError("the backend gives no memory_analysis()")
    xla_fig = footprint(a)
    return {**spec, "analysis": a, "xla": xla_fig, "arguments": a["argument"],
            "rss_rise": r["rss_rise"], "excess": a["argument"] + r["rss_rise"] - xla_fig,
            "run_seconds": r["run_seconds"], "xla_threads": _xla_threads()}


def measure(spec: dict) -> dict:
    """``measure_here`` in a fresh process, so no run sees another's pages;
    with ``MALLOC_ARENA_MAX`` set to ``spec['arenas']`` unless that is
    'default'."""
    code = ("import json, sys; sys.path.insert(0, %r); import library_scratch; "
            "print(json.dumps(library_scratch.measure_here(%r)))" % (HERE, spec))
    env = dict(os.environ)
    if spec.get("arenas", "default") != "default":
        env["MALLOC_ARENA_MAX"] = spec["arenas"]
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if p.returncode:
        raise RuntimeError(f"{spec}: the measuring process failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------
def _mib(v) -> str:
    return "-" if v is None else f"{v / MIB:,.1f}"


def _err(r) -> str:
    return f"{(r['rule'] - r['excess']) / MIB:+.1f}"


def markdown(res: dict) -> str:
    rows = [r for r in res["rows"] if r["part"] != "chain"]
    chains = [r for r in res["rows"] if r["part"] == "chain"]
    out = [f"# The library's memory beyond XLA's figure: single convolutions ({res['date']})",
           "", f"{res['machine']}; jax {res['jax']}; XLA thread pool {res['pool']} threads "
           f"(os.cpu_count() {res['cpu_count']}, affinity {res['affinity']}); "
           f"`{res['command']}`; {res['wall_seconds']:.0f} s.", "",
           "MiB. Plain `jax.lax` programs, float32, SAME padding, each compiled and run once "
           "in a fresh process (`xla_rss.run_once`). *XLA*: temp + argument + output - alias; "
           "*arguments*: XLA's argument bytes (jit prunes the input of an input gradient); "
           "*RSS rise*: the peak resident set's rise during the run; *excess*: arguments + "
           "RSS rise - XLA; *rule*: S = W + T*Xpad (forward, stride-1 input gradient) or "
           "T*Xpad + G (weight gradient), + 0.5 MiB, T = the pool's threads when the output "
           "channels are >= 128 and k > 1 (weight gradient: max(C, O) >= 128), else 1; "
           "strided input gradient (Eigen): N*Ho*Wo*C*k*k + 6 MiB; both gradients (bwd): "
           "their sum where the stride is above 1, else the larger "
           "(`symgraph.memory.predict.library_call_bytes`); *error*: rule - excess.", "",
           "| case | C | HxW | O | k | stride | layout | batch | part | XLA | arguments "
           "| RSS rise | excess | rule | error |",
           "|---|--:|--:|--:|--:|--:|---|--:|---|--:|--:|--:|--:|--:|--:|"]
    for r in rows:
        out.append(f"| {r['case']} | {r['c']} | {r['h']}x{r['h']} | {r['o']} | {r['k']} "
                   f"| {r['stride']} | {r['layout']} | {r['n']} | {r['part']} "
                   f"| {_mib(r['xla'])} | {_mib(r['arguments'])} | {_mib(r['rss_rise'])} "
                   f"| {_mib(r['excess'])} | {_mib(r['rule'])} | {_err(r)} |")
    out += ["", f"Max |error|: {res['max_abs_error'] / MIB:.1f} MiB over "
            f"{res['ruled_rows']} convolutions the rule covers"
            + (f" (mean error {res['mean_error'] / MIB:+.2f} MiB)." if res["ruled_rows"] else ".")]
    if chains:
        out += ["", "## Chains: N identical convolutions in one program", "",
                "Each its own weight, relu between, stride 1; "
                f"{res['chain_repeats']} fresh processes each. *arenas*: glibc's malloc "
                "arenas (`MALLOC_ARENA_MAX`; default: one per thread that allocates); "
                "*excess*: each run's; *S*: one call's (the rule's maximum over the "
                "calls); *sum*: N calls' S (what the excess would be if every call kept "
                "its copies).", "",
                "| case | layout | batch | N | arenas | XLA | excess (runs) | max / S | S "
                "| sum |", "|---|---|--:|--:|---|--:|---|--:|--:|--:|"]
        for r in chains:
            runs = " / ".join(_mib(e) for e in r["excess_runs"])
            out.append(f"| {r['case']} | {r['layout']} | {r['n']} | {r['count']} "
                       f"| {r['arenas']} | {_mib(r['xla'])} | {runs} "
                       f"| {r['excess'] / r['rule']:.2f} | {_mib(r['rule'])} "
                       f"| {_mib(r['sum'])} |")
        for arenas in dict.fromkeys(r["arenas"] for r in chains):
            some = [r for r in chains if r["arenas"] == arenas]
            worst = max(some, key=lambda r: r["excess"] / r["rule"])
            out += ["", f"Arenas {arenas}: the largest chain excess is "
                    f"{worst['excess'] / worst['rule']:.2f} x one call's S ({worst['case']} "
                    f"{worst['layout']} x{worst['count']}); the sum would be "
                    f"{worst['count']} x."]
    return "\n".join(out) + "\n"


def _chain(text: str) -> tuple:
    name, _, count = text.rpartition("x")
    if name not in CASES or not count.isdigit():
        raise ValueError(f"--chains: CASExCOUNT with a case of {sorted(CASES)}, not {text!r}")
    return name, int(count)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=",".join(CASES),
                    help=f"comma-separated, of {', '.join(CASES)}")
    ap.add_argument("--batches", default="4,16")
    ap.add_argument("--layouts", default="nchw,nhwc")
    ap.add_argument("--parts", default=",".join(PARTS))
    ap.add_argument("--chains", default="c256-14-k3x8,c64-56-k3x8",
                    help="comma-separated CASExCOUNT (stride 1, C = O), both --layouts; "
                    "'' for none")
    ap.add_argument("--chain-batch", type=int, default=16)
    ap.add_argument("--chain-repeats", type=int, default=3,
                    help="fresh processes per chain (its excess varies from run to run)")
    ap.add_argument("--chain-arenas", default="default,1",
                    help="comma-separated MALLOC_ARENA_MAX values for the chains, 'default' "
                    "for glibc's own")
    ap.add_argument("--out", default="library_scratch")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = ap.parse_args(argv)
    if not os.path.exists("/proc/self/clear_refs"):
        print("library_scratch: needs Linux's /proc/self/clear_refs", file=sys.stderr)
        return 2
    cases, layouts, parts = (x.split(",") for x in (args.cases, args.layouts, args.parts))
    batches = [int(b) for b in args.batches.split(",")]
    for bad, known, what in ((cases, CASES, "--cases"), (layouts, ("nchw", "nhwc"), "--layouts"),
                             (parts, PARTS, "--parts")):
        if not set(bad) <= set(known):
            ap.error(f"{what}: of {', '.join(known)}, not {sorted(set(bad) - set(known))}")
    try:
        chains = [_chain(c) for c in args.chains.split(",") if c]
    except ValueError as e:
        ap.error(str(e))
    for name, _ in chains:
        if CASES[name]["stride"] != 1 or CASES[name]["c"] != CASES[name]["o"]:
            ap.error(f"--chains: {name} is not a stride-1 convolution with C = O")
    import datetime
    import platform

    import jax

    from symgraph.bench.common import write_results
    specs = [{"case": name, **CASES[name], "n": n, "layout": lay, "part": part}
             for name in cases for n in batches for lay in layouts for part in parts]
    specs += [{"case": name, **CASES[name], "n": args.chain_batch, "layout": lay,
               "part": "chain", "count": count, "arenas": arenas}
              for name, count in chains for lay in layouts
              for arenas in args.chain_arenas.split(",")]
    start = time.perf_counter()
    rows = []
    for i, spec in enumerate(specs):
        if spec["part"] == "chain":  # the excess varies from run to run: several runs
            runs = [measure(spec) for _ in range(args.chain_repeats)]
            r = max(runs, key=lambda x: x["excess"])
            r["excess_runs"] = [x["excess"] for x in runs]
        else:
            r = measure(spec)
        r["pool"] = r["xla_threads"] or len(os.sched_getaffinity(0))
        r["rule"] = rule(spec, r["pool"])
        if spec["part"] == "chain":
            r["sum"] = spec["count"] * (r["rule"] - BASE) + BASE
        rows.append(r)
        print(f"[{i + 1}/{len(specs)}] {spec['case']} {spec['layout']} batch {spec['n']} "
              f"{spec['part']}{' x%d' % spec['count'] if 'count' in spec else ''}"
              f"{' arenas ' + spec['arenas'] if 'arenas' in spec else ''}: excess "
              + " ".join(_mib(e) for e in r.get("excess_runs", [r["excess"]]))
              + f" MiB, rule {_mib(r['rule'])}", file=sys.stderr, flush=True)
    wall = time.perf_counter() - start
    errors = [r["rule"] - r["excess"] for r in rows
              if r["part"] != "chain"]
    pools = sorted({r["xla_threads"] for r in rows})
    res = {"tool": "benchmarks/library_scratch.py",
           "command": shlex.join(["python", "benchmarks/library_scratch.py", *argv]),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": f"{platform.machine()}, {os.cpu_count()} cores", "jax": jax.__version__,
           "cpu_count": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)),
           "pool": pools[0] if len(pools) == 1 else pools,
           "xla_flags": os.environ.get("XLA_FLAGS", ""),
           "malloc_arena_max": os.environ.get("MALLOC_ARENA_MAX", ""), "wall_seconds": wall,
           "chain_repeats": args.chain_repeats, "ruled_rows": len(errors),
           "max_abs_error": max(map(abs, errors)) if errors else 0,
           "mean_error": sum(errors) / len(errors) if errors else 0, "rows": rows}
    write_results(args.out, res, markdown(res))
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
