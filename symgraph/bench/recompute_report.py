"""The output of ``symgraph bench recompute`` (``bench/recompute.py``):
``results.md`` and ``frontier.png`` from the result dictionary alone, so
either can be rebuilt from a saved ``results.json``."""
from __future__ import annotations

import json
import os

from .common import smoke_note

MIB = 2 ** 20
SMOKE_WHAT = "a small CIFAR net's figures at batch 4 (where nothing needs recomputing)"


def _mib(b):
    return "-" if b is None else f"{b / MIB:,.0f}"


def _ratio(x):
    return "-" if x is None else f"{x:.2f}x"


def _vs_budget(p) -> str:
    """XLA's footprint against the budget: ``under`` or ``+x% over``."""
    f = p.get("xla_footprint")
    if f is None:
        return "-"
    return "under" if f <= p["budget"] else f"+{(f / p['budget'] - 1) * 100:.1f}% over"


def _monotone(row) -> str:
    """Whether XLA's footprint never rises as the budget falls, per algorithm."""
    out = []
    for alg in dict.fromkeys(p["algorithm"] for p in row["points"]):
        figs = [p["xla_footprint"] for p in sorted(row["points"], key=lambda p: -p["fraction"])
                if p["algorithm"] == alg and p["fits"] and p.get("xla_footprint") is not None]
        rises = [(a, b) for a, b in zip(figs, figs[1:]) if b > a]
        out.append(f"{alg}: " + ("never rises" if not rises else
                                 f"rises {len(rises)} time(s), by up to "
                                 f"{_mib(max(b - a for a, b in rises))} MiB"))
    return "XLA footprint as the budget falls: " + "; ".join(out) + "."


def _monotone_remat(row) -> str:
    """Whether XLA's own remat's footprint never rises as the budget falls."""
    figs = [r["footprint"] for r in sorted(row["xla_remat"], key=lambda r: -r["fraction"])]
    rises = [(a, b) for a, b in zip(figs, figs[1:]) if b > a]
    held = sum(r["holds"] for r in row["xla_remat"])
    most = max((b - a for a, b in rises), default=0)
    return (f"XLA's own remat holds {held} of {len(row['xla_remat'])} budgets; its footprint "
            + ("never rises" if not rises else f"rises {len(rises)} time(s), by up to "
               + (f"{_mib(most)} MiB" if most >= MIB else f"{most:,} bytes"))
            + " as the budget falls.")


def _how_text(p) -> str:
    """The point's path to its program, with the algorithm's own plan's
    program where that one was compiled and is not the one that runs."""
    how = p.get("how")
    if how is None:  # runs before the Module's choice was modelled
        return "the algorithm's plan"
    first = p["first"]
    if first["xla_footprint"] is not None and first["xla_footprint"] != p["xla_footprint"]:
        how += (f" (the algorithm's plan: {first['recomputed']} recomputed, "
                f"{_mib(first['xla_footprint'])} MiB)")
    return how


def _rest_text(res: dict) -> str:
    if all(row.get("optimizer") for row in res["rows"]):
        return "arguments, gradients, aux and the momentum state of the step's SGD"
    # runs before the optimizer was counted
    return ("arguments, gradients, aux; not the momentum state of the step's SGD, which "
            "the footprint includes, so 'vs budget' is stricter by the parameters' bytes")


def _pct(x):
    """A share as a percentage; under 0.1%, to three places (XLA's own
    remat adds a few elementwise ops)."""
    if x is None:
        return "-"
    return f"{x * 100:.3f}%" if 0 < abs(x) < 0.001 else f"{x * 100:.1f}%"


def _gpu(res: dict) -> bool:
    return (res.get("target") or {}).get("backend") == "gpu"


def _target_lines(res: dict) -> list:
    """Which device the figures are for, and why nothing was timed."""
    t = res.get("target")
    if not t or t["backend"] == "cpu":
        return []
    from ..targets import describe
    out = [f"Target: {describe(t)}. Every figure is XLA's memory_analysis() of a program "
           "compiled for that GPU on this machine, nothing run"
           + (" (deviceless)." if t["deviceless"] else ".")]
    if res.get("time_note"):
        out[0] += f" Step time: {res['time_note']}."
    if res.get("compute_dtype", "float32") != "float32":
        out[0] += (f" Compute dtype {res['compute_dtype']}: the Module's mixed precision "
                   "(float32 weights and momentum, the step computed in "
                   f"{res['compute_dtype']}), budgets from the plan a Module makes (float32 "
                   "weights and data cast down inside, the casts planned, activations and "
                   f"aux states in {res['compute_dtype']}); the hand-written net wholly in "
                   f"{res['compute_dtype']}.")
    return [out[0], ""]


def _xla_remat_lines(row) -> list:
    """XLA:GPU's own rematerialization at each budget."""
    lines = ["XLA:GPU's own rematerialization at the same limit: the step without recompute "
             "compiled with `xla_gpu_memory_limit_slop_factor` S, the largest whose limit "
             "(device memory x 0.8 - parameters and outputs) x S/100 is at most the budget "
             "(xla.gpu_remat; XLA logs that limit plus the outputs' bytes where it cannot "
             "reach it); extra FLOPs: the instructions XLA recomputed (`.remat` clones "
             "in the optimized HLO) over the program without them, counted from the HLO "
             "text.", "",
             "| fraction | budget MiB | S | XLA limit MiB | XLA footprint MiB | vs budget "
             "| XLA said | recomputed instructions | extra FLOPs |",
             "|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    for r in row["xla_remat"]:
        c = r["cant_reduce"]
        said = "-" if not c else (
            f"can't reduce below {_mib(c['limit'])} (limit + outputs"
            + ("" if c.get("limit_matches", True) else "; NOT the limit computed")
            + f"), only to {_mib(c['reached'])} from {_mib(c['from'])}")
        lines.append(f"| {r['fraction']:.2f} | {_mib(r['budget'])} | {r['slop_factor']} | "
                     f"{_mib(r['limit'])} | {_mib(r['footprint'])} | "
                     f"{_vs_budget({'budget': r['budget'], 'xla_footprint': r['footprint']})} "
                     f"| {said} | {r['remat_instructions'] or 0} | "
                     f"{_pct(r['extra_flops_share'])} |")
    return lines


def _summary_lines(row) -> list:
    """Per fraction: each algorithm's program, XLA's own remat, and which
    jax.checkpoint policies hold the budget."""
    algs = list(dict.fromkeys(p["algorithm"] for p in row["points"]))
    head = ["fraction", "budget MiB", *[f"symgraph {a}" for a in algs]]
    if row.get("xla_remat"):
        head.append("XLA remat")
    if row["checkpoint"]:
        head.append("jax.checkpoint under the budget")
    lines = ["Per budget, footprint MiB (vs budget; extra FLOPs: symgraph's plan / "
             "XLA's HLO count):", "", "| " + " | ".join(head) + " |",
             "|" + "---:|" * 2 + "---|" * (len(head) - 2)]
    for f in dict.fromkeys(p["fraction"] for p in row["points"]):
        pts = {p["algorithm"]: p for p in row["points"] if p["fraction"] == f}
        budget = next(iter(pts.values()))["budget"]
        cells = [f"{f:.2f}", _mib(budget)]
        for a in algs:
            p = pts.get(a)
            if p is None or not p["fits"]:
                cells.append("no plan fits" if p else "-")
                continue
            cells.append(f"{_mib(p['xla_footprint'])} ({_vs_budget(p)}; "
                         f"{_pct(p['extra_flops_share'])})")
        for r in row.get("xla_remat") or []:
            if r["fraction"] == f:
                vs = _vs_budget({"budget": r["budget"], "xla_footprint": r["footprint"]})
                cells.append(f"{_mib(r['footprint'])} ({vs}; {_pct(r['extra_flops_share'])})")
        if row["checkpoint"]:
            ok = [c["policy"] for c in row["checkpoint"]
                  if c["xla_footprint"] is not None and c["xla_footprint"] <= budget]
            cells.append(", ".join(ok) or "no policy")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def markdown(res: dict) -> str:
    gpu = _gpu(res)
    lines = ["# Recompute to a memory budget", "",
             f"`symgraph bench recompute {res['argv']}` on {res['machine']}, {res['date']}, "
             f"jax {res['jax']}.", "",
             *([f"**{smoke_note(SMOKE_WHAT)}**", ""] if res.get("quick") else []),
             *_target_lines(res),
             "Budget = rest + fraction x I0 (I0: the no-recompute plan's internal bytes; "
             f"rest: {_rest_text(res)}). Footprint: XLA's memory_analysis() of the "
             "program `Module.fit` runs with the plan's recompute set (temp + argument + "
             "output - alias), compiled at the batch shown; program: the fused step (one XLA "
             "program) or the staged one (a program per segment), whichever holds less, as a "
             "budgeted Module picks. How: the program a Module(memory_budget=, recompute=ALG) "
             "runs (memory.budget.fit_program): the algorithm's plan; the step without "
             "recompute where its program fits the budget; or a plan made again to the excess "
             "where XLA holds more than the budget. Step: time per step against the "
             "step without recompute, raced in turn with it in the same run, best of the "
             "rounds.", ""]
    for row in res["rows"]:
        nr = row["no_recompute"]
        lines += [f"## {row['net']}, batch {row['batch']}", "",
                  f"No recompute: plan total {_mib(nr['plan_total'])} MiB (internal "
                  f"{_mib(row['internal0'])}), XLA footprint {_mib(nr['xla_footprint'])} MiB "
                  f"(temp {_mib(nr['xla_temp'])}).", "",
                  "| algorithm | fraction | budget MiB | plan total MiB | XLA footprint MiB "
                  "| vs budget | XLA temp MiB | program | recomputed | extra FLOPs "
                  + ("| extra FLOPs (HLO) " if gpu else "") + "| step | how |",
                  "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|"
                  + ("---:|" if gpu else "") + "---:|---|"]
        for p in row["points"]:
            if not p["fits"]:
                lines.append(f"| {p['algorithm']} | {p['fraction']:.2f} | {_mib(p['budget'])} "
                             f"| does not fit (smallest {_mib(p['smallest'])}) "
                             "| | | | | | | | |" + (" |" if gpu else ""))
                continue
            lines.append(f"| {p['algorithm']} | {p['fraction']:.2f} | {_mib(p['budget'])} | "
                         f"{_mib(p['plan_total'])} | {_mib(p['xla_footprint'])} | "
                         f"{_vs_budget(p)} | "
                         f"{_mib(p['xla_temp'])} | {p.get('program', 'fused')} | "
                         f"{p['recomputed']} | "
                         f"{p['extra_flops_share'] * 100:.1f}% | "
                         + (f"{_pct(p.get('hlo_extra_flops_share'))} | " if gpu else "")
                         + f"{_ratio(p['step_ratio'])} "
                         f"| {_how_text(p)} |")
        lines += ["", _monotone(row)]
        if row.get("xla_remat"):
            lines += ["", *_xla_remat_lines(row), "", _monotone_remat(row)]
        if row["checkpoint"]:
            lines += ["", "Hand-written plain-JAX net, jax.checkpoint per block"
                      + (" (extra FLOPs: the program's HLO count over the net without "
                         "checkpoint's)" if gpu else "") + ":", "",
                      "| policy | XLA footprint MiB | XLA temp MiB | "
                      + ("extra FLOPs (HLO) | " if gpu else "")
                      + "step vs plain JAX | step vs symgraph |",
                      "|---|---:|---:|" + ("---:|" if gpu else "") + "---:|---:|"]
            for c in row["checkpoint"]:
                lines.append(f"| {c['policy']} | {_mib(c['xla_footprint'])} | "
                             f"{_mib(c['xla_temp'])} | "
                             + (f"{_pct(c.get('hlo_extra_flops_share'))} | " if gpu else "")
                             + f"{_ratio(c['step_ratio_to_plain_jax'])} "
                             f"| {_ratio(c['step_ratio_to_symgraph'])} |")
        if gpu:
            lines += ["", *_summary_lines(row)]
        if row.get("mxnet"):
            m = row["mxnet"]
            lines += ["", f"MXNet 1.9.1 (its own planner, storage for operator outputs): "
                      f"{m['both_mib']} MiB without mirror, {m['mirror_mib']} MiB with "
                      f"MXNET_BACKWARD_DO_MIRROR=1."]
        lines.append("")
    return "\n".join(lines)


def chart(res: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..util import atomic_open
    rows = res["rows"]
    fig, axes = plt.subplots(1, len(rows), figsize=(5 * len(rows), 4), squeeze=False)
    if _gpu(res):  # nothing ran: memory against extra FLOPs
        for ax, row in zip(axes[0], rows):
            _flops_axes(ax, row, res)
        _smoke_title(fig, res)
        with atomic_open(path, "wb") as f:
            fig.savefig(f, format="png", dpi=100)
        plt.close(fig)
        return
    for ax, row in zip(axes[0], rows):
        base = row["no_recompute"]["xla_footprint"] or 1
        for alg in sorted({p["algorithm"] for p in row["points"]}):
            pts = [(p["xla_footprint"] / base, p["step_ratio"]) for p in row["points"]
                   if p["algorithm"] == alg and p["fits"] and p.get("step_ratio")
                   and p["xla_footprint"]]
            if pts:
                ax.plot(*zip(*sorted(pts)), "o-", label=f"symgraph {alg}")
        for c in row["checkpoint"]:
            if c["xla_footprint"] and c["step_ratio_to_symgraph"]:
                ax.plot([c["xla_footprint"] / base], [c["step_ratio_to_symgraph"]], "s",
                        label=f"jax {c['policy']}")
        if not any(p["fits"] and p["recomputed"] for p in row["points"]):
            ax.text(0.5, 0.25, "nothing recomputed at these budgets:\nevery point is the "
                    "step without recompute", transform=ax.transAxes, ha="center",
                    va="center", fontsize=8, color="#b71c1c")
        ax.set_title(f"{row['net']} batch {row['batch']}")
        ax.set_xlabel("XLA footprint / no recompute")
        ax.set_ylabel("step time / no recompute")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # a quick run may time nothing
            ax.legend(fontsize=7)
    _smoke_title(fig, res)
    with atomic_open(path, "wb") as f:
        fig.savefig(f, format="png", dpi=100)
    plt.close(fig)


def _smoke_title(fig, res: dict) -> None:
    """A quick run's chart says so above its panels; then the layout."""
    if not res.get("quick"):
        fig.tight_layout()
        return
    import textwrap
    fig.suptitle(textwrap.fill(smoke_note(SMOKE_WHAT), 60), color="#b71c1c", fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.82))


def _flops_axes(ax, row, res) -> None:
    """One net's frontier on a GPU target: XLA's footprint (MiB) against
    the extra FLOPs (the HLO count where there is one, else the plan's),
    for each algorithm's points, XLA's own remat and the jax.checkpoint
    policies, with the budgets as dotted lines."""
    def share(p):
        h = p.get("hlo_extra_flops_share")
        return 100 * (h if h is not None else p["extra_flops_share"])
    for alg in sorted({p["algorithm"] for p in row["points"]}):
        pts = sorted({(share(p), p["xla_footprint"] / MIB) for p in row["points"]
                      if p["algorithm"] == alg and p["fits"] and p.get("xla_footprint")})
        if pts:
            ax.plot(*zip(*pts), "o-", label=f"symgraph {alg}")
    rem = sorted({(100 * (r["extra_flops_share"] or 0), r["footprint"] / MIB)
                  for r in row.get("xla_remat") or []})
    if rem:
        ax.plot(*zip(*rem), "x--", label="XLA:GPU remat")
    for c in row["checkpoint"]:
        if c["xla_footprint"] and c.get("hlo_extra_flops_share") is not None:
            ax.plot([100 * c["hlo_extra_flops_share"]], [c["xla_footprint"] / MIB], "s",
                    label=f"jax {c['policy']}")
    for b in sorted({p["budget"] for p in row["points"]}):
        ax.axhline(b / MIB, color="grey", lw=0.6, ls=":")
    t = res.get("target") or {}
    ax.set_title(f"{row['net']} batch {row['batch']} {row.get('compute_dtype', '')}\n"
                 f"{t.get('device', '')}, deviceless" if t.get("deviceless") else
                 f"{row['net']} batch {row['batch']}", fontsize=9)
    ax.set_xlabel("extra FLOPs, % of the step")
    ax.set_ylabel("XLA footprint, MiB (dotted: budgets)")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def write(res: dict, out: str) -> None:
    """results.json, results.md and frontier.png under ``out``, atomically."""
    from ..util import atomic_write_text
    atomic_write_text(os.path.join(out, "results.json"),
                      json.dumps(res, indent=1, default=str) + "\n")
    atomic_write_text(os.path.join(out, "results.md"), markdown(res))
    chart(res, os.path.join(out, "frontier.png"))
