"""What a plan says: ``Plan.report()`` (text) and ``Plan.to_json()``.

The JSON form is exactly::

    {"net": str or null, "train": bool, "shapes": {name: [dims] or null},
     "bytes": {"arguments": int, "gradients": int, "aux": int, "optimizer": int,
               "internal": {"naive": int, "inplace": int, "coshare": int,
                            "both": int, "arena": int, "lower_bound": int}},
     "total": int, "budget": int or null,
     "recompute": [{"name": str, "op": str, "bytes": int, "flops": int}],
     "extra_flops": int, "step_flops": int, "algorithm": str or null,
     "xla": {"temp": int, "argument": int, "output": int, "alias": int,
             "program": {"program": str, "devices": int, "backend": str,
                         "target": {"name": str, "backend": str, "device": str,
                                    "deviceless": bool, "memory": int or null,
                                    "pool": int or null, "workspace_allowance": int},
                         "optimizer": str (training), "measures": [names],
                         "recompute": int (forward tensors the program recomputes),
                         "segments": null (one fused program), a count, true
                                     (staged, the default count) or "auto"
                                     (whichever holds less, where it recomputes),
                         "compute_dtype": str},
             "fit": {"fits": bool, "footprint": int, "allowance": int, "need": int,
                     "pool": int, "spare": int} (a target with known memory),
             "budget_holds": bool (plan --budget),
             "planned_to": int (plan --budget, where the plan was made again
                                to less than the budget)} or null,
     "verified": true}

``total`` is arguments + gradients + aux + optimizer (the state of the
optimizer named, 0 without one) + the internal bytes of the reported
strategy; ``budget`` the budget asked (bytes), ``recompute`` the forward
nodes dropped after the forward and computed again in the backward
(``bytes``: the node's output bytes; ``flops``: one run of it),
``extra_flops`` their sum, ``step_flops`` the FLOPs of the training step
without recompute (of the graph planned, in inference), ``algorithm`` the
one that chose them (mirror, sqrt, solver, explicit, none; null without a
budget or recompute).

A plan made with ``group2ctx`` also has ``"devices"``: one object per
device that runs anything, ``{"device": "cpu(1)", "groups": [str], "ops":
int, "bytes": {the layout above}, "copies": {"in_bytes", "in_count",
"out_bytes", "out_count"}, "total": int, "verified": true}``
(memory/devices.py).

``net`` is the name the plan was given (``symgraph plan`` gives the file's
stem, ``sg.plan(..., name=)`` what it is told; null when none was: the
graph's output node is no name for a net). A plan of the net
rewritten channels-last (``layout='NHWC'``, ``--layout NHWC``) also has
``"layout": "NHWC"``; a plan in a compute dtype (``compute_dtype=``,
``--compute-dtype``: float inputs cast down inside, as a Module computing
in it runs) has ``"compute_dtype": "bfloat16"`` (or float16).
``shapes`` are the input shapes the plan was made for (as given; null for
one given as unknown), ``xla``
the ``memory_analysis()`` of the program a Module runs for the net (null
when not computed): in training the step ``Module.fit`` compiles on one
device (``program`` says which optimizer and memory measures), in
inference the program ``predict`` runs, compiled for ``program.target``
(symgraph/targets: the CPU, the GPU present, or a GPU description compiled
deviceless). ``fit`` says whether that footprint, plus the allowance for a
convolution workspace a deviceless compile leaves out, fits the part of the
device JAX's allocator takes (``pool``).
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
        "net": net_name(plan),
        "train": bool(plan.train),
        "shapes": {k: None if v is None else [int(d) for d in v]
                   for k, v in plan.shapes.items()},
        "bytes": {
            "arguments": int(plan.buckets["arguments"]),
            "gradients": int(plan.buckets["gradients"]),
            "aux": int(plan.buckets["aux"]),
            "optimizer": int(plan.buckets.get("optimizer", 0)),
            "internal": {k: int(v) for k, v in plan.internal.items()},
        },
        "total": int(plan.total),
        "budget": None if plan.budget is None else int(plan.budget),
        "recompute": [dict(r) for r in plan.recompute],
        "extra_flops": int(plan.extra_flops),
        "step_flops": int(plan.step_flops or 0),
        "algorithm": plan.algorithm,
        "xla": None if plan.xla is None else dict(plan.xla),
        "verified": True,
        **({} if plan.devices is None else {"devices": plan.devices.to_json()}),
        **({} if layout(plan) == "NCHW" else {"layout": layout(plan)}),
        **({} if compute_dtype(plan) is None else {"compute_dtype": compute_dtype(plan)}),
    }


def net_name(plan) -> str | None:
    """The plan's name, or None where it is only the output node's name
    (``sg.plan`` without ``name=`` falls back to it: 'softmax' names no net)."""
    name = plan.net
    if not name:
        return None
    outputs = getattr(plan.graph, "outputs", None) or []
    if outputs and name == outputs[0].node.name:
        return None
    return str(name)


def layout(plan) -> str:
    """The layout the net was planned in: NCHW as given, or NHWC (channels-last)."""
    return (plan.options or {}).get("layout") or "NCHW"


def compute_dtype(plan) -> str | None:
    """The compute dtype the net was planned in (its float inputs cast down
    inside), or None: the net's own dtypes."""
    return (plan.options or {}).get("compute_dtype")


def _share(part: int, whole: int) -> str:
    """``part`` as a percentage of ``whole``, never rounded up to 100.0% (or
    down to it) when the two differ."""
    pct = 100 * part / whole
    text = f"{pct:.1f}%"
    if part != whole and text == "100.0%":
        text = f"{pct:.3f}%"
    return text


def _fit_line(fit: dict, t: dict) -> str:
    allowance = (f" + {_mib(fit['allowance'])} MiB allowance for a convolution workspace"
                 if fit["allowance"] else "")
    pool = (f"the {_mib(fit['pool'])} MiB JAX's allocator takes of the "
            f"{t['memory'] / 2 ** 30:.1f} GiB")
    if fit["fits"]:
        return (f"fits on one {t['device']}: footprint {_mib(fit['footprint'])} MiB"
                f"{allowance} within {pool}, {_mib(fit['spare'])} MiB to spare")
    return (f"does not fit on one {t['device']}: footprint {_mib(fit['footprint'])} MiB"
            f"{allowance} is {_mib(-fit['spare'])} MiB over {pool}")


def _mib(b) -> str:
    return "-" if b is None else f"{b / MIB:,.1f}"


def _row(name, b, extra="") -> str:
    return f"  {name:<22}{b:>18,}  {_mib(b):>12}{extra}"


def report_text(plan) -> str:
    """A table of the buckets and the strategies (bytes and MiB, savings
    relative to naive), the peak step and the tensors live there."""
    g, live = plan.graph, plan.live
    mode = "training" if plan.train else "inference"
    shapes = " ".join(f"{k}=" + ("?" if v is None else ",".join(str(d) for d in v))
                      for k, v in plan.shapes.items())
    n_ops = sum(1 for n in g.nodes if n.op is not None)
    fused = plan.fusion
    name = net_name(plan)
    how = [mode] + (["layout NHWC: channels-last between the convolutions"]
                    if layout(plan) == "NHWC" else []) + \
        ([f"computing in {compute_dtype(plan)}: the float inputs cast down inside"]
         if compute_dtype(plan) else [])
    what = f" ({', '.join(how)})"
    lines = [f"memory plan{': ' + name if name else ''}{what}"
             f"{'  ' + shapes if shapes else ''}",
             f"  {n_ops} ops, {fused.num_fused_nodes} fused into {len(fused.groups)} groups; "
             f"{live.num_steps} steps (schedule {plan.options.get('schedule', 'dfs')}); "
             f"{live.num_tensors} planned tensors", ""]
    internal = plan.internal
    lines.append(f"  {'bucket':<22}{'bytes':>18}  {'MiB':>12}")
    for k in ("arguments", "gradients", "aux"):
        lines.append(_row(k, plan.buckets[k]))
    if plan.buckets.get("optimizer"):
        lines.append(_row("optimizer", plan.buckets["optimizer"]))
    lines.append(_row(f"internal ({plan.strategy})", internal[plan.strategy]))
    lines.append(_row("total", plan.total))
    if plan.budget is not None:
        lines.append(_row("budget", plan.budget,
                          f"  the plan's total is {_share(plan.total, plan.budget)} of it"))
        if plan.xla and plan.xla.get("planned_to") is not None:
            lines.append(f"  (planned again to {_mib(plan.xla['planned_to'])} MiB: XLA's program "
                         f"of the plan to the budget held more than the budget)")
    if plan.algorithm is not None:
        step = plan.step_flops or 0
        share = f" ({plan.extra_flops / step:.1%} of the step's {step:,})" if step else ""
        dropped = sum(r["bytes"] for r in plan.recompute)
        lines.append(f"  recompute ({plan.algorithm}): {len(plan.recompute)} forward tensors, "
                     f"{_mib(dropped)} MiB of forward outputs computed again in the backward; "
                     f"extra FLOPs {plan.extra_flops:,}{share}")
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
    if plan.devices is not None:
        lines.append(plan.devices.text(plan.strategy, sum(plan.buckets.values())
                                      + internal[plan.strategy]))
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
        lines.append("xla: not computed (the figures above are the plan's; the program's "
                     "footprint is XLA's, from a compile)")
    else:
        x = plan.xla
        prog = x["program"]
        arena = plan.internal["arena"]
        ratio = f" (temp {x['temp'] / arena:.2f}x the arena" if x["temp"] and arena else ""
        planned_in = compute_dtype(plan) or "float32"
        runs_in = prog.get("compute_dtype") or "float32"
        if ratio and runs_in != planned_in:  # a plan of another program than the one compiled
            ratio += f"; the arena is of the net in {planned_in}, the program computes in " \
                     f"{runs_in}"
        ratio += ")" if ratio else ""
        what = ", ".join([prog["program"], f"{prog['devices']} device ({prog['backend']})"] +
                         ([prog["optimizer"]] if prog.get("optimizer") else []) +
                         ["measures " + ("+".join(prog["measures"]) or "none")])
        lines.append(f"xla memory_analysis of {what}:")
        if prog.get("target"):
            from ..targets import describe
            lines.append(f"  target: {describe(prog['target'])}")
        lines.append("  " + ", ".join(f"{k} {_mib(x[k])} MiB"
                                      for k in ("temp", "argument", "output", "alias")) + ratio)
        held = x["argument"] + x["output"] - (x["alias"] or 0) + x["temp"]
        lines.append(f"  footprint of the program (temp + argument + output - alias): "
                     f"{_mib(held)} MiB")
        if x.get("fit"):
            lines.append(_fit_line(x["fit"], prog["target"]))
        if "budget_holds" in x and plan.budget is not None:
            lines.append(f"budget {_mib(plan.budget)} MiB: XLA's program holds {_mib(held)} MiB, "
                         + ("within it" if x["budget_holds"] else
                            "over it: no program compiled held the budget (the smallest "
                            "is shown, --allow-over-budget)"))
    return "\n".join(lines)
