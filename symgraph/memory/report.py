"""What a plan says: ``Plan.report()`` (text) and ``Plan.to_json()``.

The JSON form is exactly::

    {"net": str, "train": bool, "shapes": {name: [dims]},
     "bytes": {"arguments": int, "gradients": int, "aux": int,
               "internal": {"naive": int, "inplace": int, "coshare": int,
                            "both": int, "arena": int, "lower_bound": int}},
     "xla": {"temp": int, "argument": int, "output": int, "alias": int,
             "program": {"program": str, "devices": int, "backend": str,
                         "optimizer": str (training), "measures": [names]}} or null,
     "verified": true}

``shapes`` are the input shapes the plan was made for (as given), ``xla``
the ``memory_analysis()`` of the program a Module runs for the net (null
when not computed): in training the step ``Module.fit`` compiles on one
device (``program`` says which optimizer and memory measures), in
inference the program ``predict`` runs.
"""
from __future__ import annotations

from .planner import STRATEGIES

MIB = 2 ** 20
PEAK_ROWS = 12


def report_json(plan) -> dict:
    """The ``symgraph plan --json`` dictionary of a plan."""
    if not plan.verified:
        raise ValueError("an unverified plan is never reported")
    return {
        "net": str(plan.net),
        "train": bool(plan.train),
        "shapes": {k: [int(d) for d in v] for k, v in plan.shapes.items()},
        "bytes": {
            "arguments": int(plan.buckets["arguments"]),
            "gradients": int(plan.buckets["gradients"]),
            "aux": int(plan.buckets["aux"]),
            "internal": {k: int(v) for k, v in plan.internal.items()},
        },
        "xla": None if plan.xla is None else dict(plan.xla),
        "verified": True,
    }


def _mib(b) -> str:
    return "-" if b is None else f"{b / MIB:,.1f}"


def _row(name, b, extra="") -> str:
    return f"  {name:<22}{b:>18,}  {_mib(b):>12}{extra}"


def report_text(plan) -> str:
    """A table of the buckets and the strategies (bytes and MiB, savings
    relative to naive), the peak step and the tensors live there."""
    g, live = plan.graph, plan.live
    mode = "training" if plan.train else "inference"
    shapes = " ".join(f"{k}={','.join(str(d) for d in v)}" for k, v in plan.shapes.items())
    n_ops = sum(1 for n in g.nodes if n.op is not None)
    fused = plan.fusion
    lines = [f"memory plan: {plan.net} ({mode}){'  ' + shapes if shapes else ''}",
             f"  {n_ops} ops, {fused.num_fused_nodes} fused into {len(fused.groups)} groups; "
             f"{live.num_steps} steps (schedule {plan.options.get('schedule', 'dfs')}); "
             f"{live.num_tensors} planned tensors", ""]
    internal = plan.internal
    lines.append(f"  {'bucket':<22}{'bytes':>18}  {'MiB':>12}")
    for k in ("arguments", "gradients", "aux"):
        lines.append(_row(k, plan.buckets[k]))
    lines.append(_row(f"internal ({plan.strategy})", internal[plan.strategy]))
    total = sum(plan.buckets.values()) + internal[plan.strategy]
    lines.append(_row("total", total))
    lines.append("")
    naive = internal["naive"] or 1
    lines.append(f"  {'internal by strategy':<22}{'bytes':>18}  {'MiB':>12}  {'vs naive':>9}")
    for k in STRATEGIES:
        mark = " *" if k == plan.strategy else ""
        ratio = internal[k] / naive
        saved = f"  {ratio:>8.3f}x" + (f"  saves {1 - ratio:.1%}" if k != "naive" else "")
        lines.append(_row(k + mark, internal[k], saved))
    lb = plan.lower_bound
    a = plan.assignment("arena")
    if lb:
        lines.append(f"  arena / lower bound: {a.total / lb:.4f}  ({a.note})")
    lines.append("")
    if plan.peak_step is not None:
        s = plan.peak_step
        lines.append(f"peak (lower bound) at step {s + 1}/{live.num_steps} "
                     f"'{live.step_name(s)}': {_mib(plan.profile[s])} MiB after inplace "
                     f"({_mib(live.live_bytes()[s])} MiB live)")
        rows = plan.peak_tensors()
        lines.append(f"  {'tensor live there':<40}{'shape':>22} {'dtype':>9} {'MiB':>12}")
        for nm, shape, dt, b in rows[:PEAK_ROWS]:
            shp = "(" + ",".join(str(d) for d in shape) + ")"
            lines.append(f"  {nm[:40]:<40}{shp:>22} {dt:>9} {_mib(b):>12}")
        if len(rows) > PEAK_ROWS:
            rest = sum(r[3] for r in rows[PEAK_ROWS:])
            lines.append(f"  ... {len(rows) - PEAK_ROWS} more tensors, {_mib(rest)} MiB")
        lines.append("")
    checked = ", ".join(plan.arena_checked) if plan.arena_checked else "not run"
    lines.append(f"verified: no two live tensors overlap under any strategy (static check); "
                 f"arena interpreter: {checked}")
    if plan.xla is None:
        lines.append("xla: not computed")
    else:
        x = plan.xla
        prog = x["program"]
        ratio = (f" (temp {x['temp'] / plan.internal['arena']:.2f}x the arena)"
                 if x["temp"] and plan.internal["arena"] else "")
        what = ", ".join([prog["program"], f"{prog['devices']} device ({prog['backend']})"] +
                         ([prog["optimizer"]] if prog.get("optimizer") else []) +
                         ["measures " + ("+".join(prog["measures"]) or "none")])
        lines.append(f"xla memory_analysis of {what}:")
        lines.append("  " + ", ".join(f"{k} {_mib(x[k])} MiB"
                                      for k in ("temp", "argument", "output", "alias")) + ratio)
    return "\n".join(lines)
