"""Markdown tables and PNG charts of a memory-benchmark result.

Reads only the result dictionary that ``symgraph.bench.memory.run_memory``
returns (and writes as results.json), so the report can be rebuilt from a
saved file.
"""
from __future__ import annotations

import os

from ..util import atomic_open, atomic_write_text
from ..xla import measures_label
from .common import smoke_note

SMOKE_WHAT = "the plans of two small nets at batch 4 and their ratios to XLA's figures"
# a bar this many times the tallest naive bar is cut at the top and labelled with
# its value, so one outlier (XLA's temp of a tiny net) does not flatten the rest
CLIP = 1.5

MIB = 2 ** 20
STRATEGIES = ("naive", "inplace", "coshare", "both", "arena", "lower_bound")
# colours: one per strategy, then XLA and MXNet
_COLOURS = {"naive": "#9e9e9e", "inplace": "#90caf9", "coshare": "#64b5f6", "both": "#1e88e5",
            "arena": "#2e7d32", "xla_temp": "#ef6c00", "mxnet_both": "#8e24aa"}


def _mib(nbytes) -> str:
    if nbytes is None:
        return "–"
    m = nbytes / MIB
    # small nets keep their digits; big ones read as whole MiB
    return f"{m:,.0f}" if m >= 100 else f"{m:.1f}" if m >= 10 else f"{m:.2f}"


def _ratio(x) -> str:
    return "–" if x is None else f"{x:.2f}"


HEADLINE_NETS = ("vgg16", "inception-bn")
HEADLINE_BATCHES = (64, 128)
DOC_BEGIN = "<!-- headline table: generated from results.json by symgraph.bench.report -->"
DOC_END = "<!-- end of headline table -->"


def headline(result: dict, nets=HEADLINE_NETS, batches=HEADLINE_BATCHES) -> str:
    """The headline table: naive, both, arena, lower bound, XLA temp and
    MXNet's plan for the headline nets and batches (rows that exist)."""
    lines = ["| net | batch | mode | naive | both | arena | lower bound | XLA temp | MXNet | "
             "arena/MXNet |", "|---|--:|---|--:|--:|--:|--:|--:|--:|--:|"]
    index = {(r["net"], r["batch"], r["mode"]): r for r in result["rows"]}
    for net in nets:
        for batch in batches:
            for mode in ("train", "infer"):
                r = index.get((net, batch, mode))
                if r is None:
                    continue
                b = r["bytes"]["internal"]
                xla = r["xla"]["temp"] if r.get("xla") else None
                mx = (r.get("mxnet_mib") or {}).get("both", "–")
                lines.append(f"| {net} | {batch} | {mode} | " +
                             " | ".join(_mib(b[k]) for k in ("naive", "both", "arena",
                                                            "lower_bound")) +
                             f" | {_mib(xla)} | {mx} | {_ratio(r.get('arena_over_mxnet'))} |")
    return "\n".join(lines)


def steps_table(result: dict) -> str:
    """The side-by-side rows (``--compare-at``): the plan, XLA's temp for
    symgraph's lowered step under its best measures, and for plain JAX."""
    lines = ["| net | batch | mode | arena | symgraph step | measures | plain JAX "
             "| plain JAX sched | step/arena | step/plain |",
             "|---|--:|---|--:|--:|---|--:|--:|--:|--:|"]
    for r in result["rows"]:
        st = r.get("steps")
        if not st:
            continue
        plain = st["plain_jax"]
        lines.append(f"| {r['net']} | {r['batch']} | {r['mode']} | "
                     f"{_mib(r['bytes']['internal']['arena'])} | "
                     f"{_mib(st['symgraph']['temp'])} | "
                     f"{measures_label(st['symgraph']['measures'])} | "
                     f"{_mib(plain['none']['temp'])} | {_mib(plain['scheduler']['temp'])} | "
                     f"{_ratio(st['best_over_arena'])} | {_ratio(st['best_over_plain_jax'])} |")
    return "\n".join(lines)


def doc_block(result: dict) -> str:
    """The headline table between the markers docs/benchmarks.md carries."""
    return f"{DOC_BEGIN}\n{headline(result)}\n{DOC_END}"


def markdown(result: dict) -> str:
    """The result as markdown: one table per mode, then the conventions."""
    rows = result["rows"]
    lines = [f"# Memory benchmark ({result['date']})", ""]
    if result.get("config", {}).get("quick"):
        lines += [f"**{smoke_note(SMOKE_WHAT)}**", ""]
    m = result["machine"]
    v = result["versions"]
    lines.append(f"Machine: {m.get('cpu') or m.get('machine')}, {m['cpu_count']} cores, "
                 f"{m.get('memory_gib')} GiB; {m['platform']}. "
                 f"symgraph {v['symgraph']}, jax {v['jax']}, jaxlib {v['jaxlib']}, "
                 f"numpy {v['numpy']}, Python {v['python']}.")
    if result.get("mxnet"):
        mx = result["mxnet"]
        lines.append(f"MXNet figures: MXNet {mx['version']}, measured {mx['date']} by "
                     f"benchmarks/mxnet_memory.py (MXNET_SUBGRAPH_BACKEND=NONE).")
    lines += ["", "All figures in MiB (2^20 bytes) of the `internal` bucket (activations and "
              "backward intermediates; not inputs, parameters, parameter gradients or aux "
              "states), float32. *arena/LB*: the arena over the lower bound of the same "
              "schedule. *XLA temp*: `memory_analysis().temp_size_in_bytes` of the lowered "
              "program. *MXNet*: MXNet's own plan (`Total N MB allocated`, default settings). "
              "*saved*: 1 - arena/naive.", ""]
    head = headline(result)
    if head.count("\n") > 1:
        lines += ["## Headline", "", head, ""]
    for mode, title in (("train", "Training (forward + backward)"), ("infer", "Inference")):
        sel = [r for r in rows if r["mode"] == mode]
        if not sel:
            continue
        lines += [f"## {title}", "",
                  "| net | batch | naive | inplace | coshare | both | arena | lower bound | "
                  "arena/LB | saved | XLA temp | MXNet | arena/MXNet | plan s |",
                  "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
        for r in sel:
            b = r["bytes"]["internal"]
            xla = r["xla"]["temp"] if r.get("xla") else None
            mx = r.get("mxnet_mib") or {}
            lines.append(
                f"| {r['net']} | {r['batch']} | " +
                " | ".join(_mib(b[s]) for s in STRATEGIES) +
                f" | {_ratio(r['arena_over_lower_bound'])} | {r['savings']['arena']:.0%} | "
                f"{_mib(xla)} | {mx.get('both', '–')} | {_ratio(r.get('arena_over_mxnet'))} | "
                f"{r['plan_seconds']:.2f} |")
        lines.append("")
    steps = steps_table(result)
    if steps.count("\n") > 1:
        lines += ["## Lowered step vs plain JAX", "",
                  "XLA's temp (compile only, `memory_analysis()`) for symgraph's lowered "
                  "step -- training: forward, explicit backward and an SGD update -- under "
                  "the memory measure set that gives the least temp (*measures*; "
                  "docs/memory.md, \"Plan vs XLA\"), beside a plain-JAX step of the same "
                  "net (`jax.value_and_grad` + SGD; *sched*: with XLA's memory-optimized "
                  "scheduler). *arena*: the plan of the `internal` bucket.", "", steps, ""]
    lines += ["## Other buckets", "",
              "| net | batch | parameters | arguments | gradients | aux | XLA argument | "
              "XLA output |", "|---|--:|--:|--:|--:|--:|--:|--:|"]
    for r in rows:
        if r["mode"] != "train":
            continue
        b, x = r["bytes"], r.get("xla") or {}
        lines.append(f"| {r['net']} | {r['batch']} | {r['parameters']:,} | "
                     f"{_mib(b['arguments'])} | {_mib(b['gradients'])} | {_mib(b['aux'])} | "
                     f"{_mib(x.get('argument'))} | {_mib(x.get('output'))} |")
    lines.append("")
    return "\n".join(lines)


def charts(result: dict, folder: str) -> list[str]:
    """One PNG per net (training and inference side by side, a group of bars
    per batch size, the lower bound marked) and an overview at one batch.
    Returns the file names written."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    written = []
    nets = list(dict.fromkeys(r["net"] for r in rows))
    smoke = smoke_note(SMOKE_WHAT) if result.get("config", {}).get("quick") else None
    bars = ["naive", "inplace", "coshare", "both", "arena", "xla_temp", "mxnet_both"]
    labels = {"xla_temp": "XLA temp", "mxnet_both": "MXNet"}

    def values(r):
        b = r["bytes"]["internal"]
        out = {s: b[s] / MIB for s in STRATEGIES}
        out["xla_temp"] = r["xla"]["temp"] / MIB if r.get("xla") else None
        mx = r.get("mxnet_mib") or {}
        out["mxnet_both"] = mx.get("both")
        return out

    def grouped(ax, groups, title):
        # groups: [(label, values)]; bars side by side, lower bound as a line;
        # a series with no value anywhere (no MXNet file, --no-xla) gets no slot
        shown = [k for k in bars if any(v.get(k) is not None for _, v in groups)]
        if not shown:  # a mode not measured (--modes train): say so, draw nothing
            ax.set_title(f"{title}: not measured")
            ax.axis("off")
            return
        width = 0.8 / len(shown)
        for gi, (_, vals) in enumerate(groups):
            for bi, key in enumerate(shown):
                v = vals.get(key)
                if v is None:
                    continue
                ax.bar(gi + (bi - len(shown) / 2 + 0.5) * width, v, width,
                       color=_COLOURS[key], label=labels.get(key, key) if gi == 0 else None)
            lb = vals["lower_bound"]
            ax.hlines(lb, gi - 0.42, gi + 0.42, colors="black", linestyles="--",
                      label="lower bound" if gi == 0 else None)
        naive = max((v["naive"] for _, v in groups if v.get("naive")), default=None)
        top = max((v.get(k) or 0 for _, v in groups for k in shown), default=0)
        if naive and top > CLIP * naive:
            limit = CLIP * naive
            ax.set_ylim(0, limit)
            for gi, (_, vals) in enumerate(groups):
                for bi, key in enumerate(shown):
                    v = vals.get(key)
                    if v is not None and v > limit:
                        ax.text(gi + (bi - len(shown) / 2 + 0.5) * width, limit * 0.97,
                                f"{v:.3g}\n(cut)", ha="center", va="top", fontsize=7,
                                color="white", fontweight="bold")
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels([g[0] for g in groups], rotation=30 if len(groups) > 4 else 0,
                           ha="right" if len(groups) > 4 else "center")
        ax.set_ylabel("MiB")
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)

    for net in nets:
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
        for ax, mode in zip(axes, ("train", "infer")):
            sel = [r for r in rows if r["net"] == net and r["mode"] == mode]
            grouped(ax, [(f"batch {r['batch']}", values(r)) for r in sel],
                    f"{net}, {'training' if mode == 'train' else 'inference'}")
        _legend(fig, axes[0], smoke)
        name = f"{_safe(net)}.png"
        _save(fig, os.path.join(folder, name))
        plt.close(fig)
        written.append(name)

    batches = sorted({r["batch"] for r in rows})
    ref = 64 if 64 in batches else batches[len(batches) // 2]
    fig, axes = plt.subplots(2, 1, figsize=(max(8, 1.6 * len(nets)), 8))
    for ax, mode in zip(axes, ("train", "infer")):
        sel = [r for r in rows if r["batch"] == ref and r["mode"] == mode]
        # relative to naive, so nets of any size share one linear axis
        groups = []
        for r in sel:
            vals = values(r)
            naive = vals["naive"] or 1.0
            groups.append((r["net"], {k: (None if v is None else v / naive)
                                      for k, v in vals.items()}))
        grouped(ax, groups, f"{'Training' if mode == 'train' else 'Inference'}, batch {ref}: "
                            f"memory relative to naive")
        ax.set_ylabel("fraction of naive")
    _legend(fig, axes[0], smoke)
    name = f"overview_batch{ref}.png"
    _save(fig, os.path.join(folder, name))
    plt.close(fig)
    written.append(name)
    return written


def _legend(fig, ax, smoke: str | None = None) -> None:
    # one legend below the panels, where it hides no bar; a quick run's note above them
    handles, labels = ax.get_legend_handles_labels()
    for other in fig.axes:  # the first panel may be a mode not measured
        if handles:
            break
        handles, labels = other.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8,
               frameon=False)
    if smoke:
        import textwrap
        fig.suptitle(textwrap.fill(smoke, 95), color="#b71c1c", fontsize=9)
    fig.tight_layout(rect=(0, 0.07, 1, 0.93 if smoke else 1))


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def _save(fig, path: str) -> None:
    with atomic_open(path, "wb") as f:
        fig.savefig(f, format="png", dpi=110)


def write_markdown(result: dict, path: str) -> None:
    atomic_write_text(path, markdown(result))
