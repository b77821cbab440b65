"""XLA's memory analysis of a step: ``memory`` (``memory_analysis()`` as a
dict), ``footprint``, ``plan_memory`` (the figures of the program a Module
runs for a plan) and ``best_step`` (the measure set whose program holds
the least temp).
"""
from __future__ import annotations

from .steps import Step, XlaError, plan_step


# --------------------------------------------------------------------------
# figures
# --------------------------------------------------------------------------
def analysis_dict(compiled) -> dict | None:
    """``memory_analysis()`` as a dict (bytes; None where the backend says
    nothing)."""
    ma = compiled.memory_analysis()
    if ma is None:
        return None
    out = {}
    for k in ("temp", "argument", "output", "alias", "generated_code"):
        v = getattr(ma, f"{k}_size_in_bytes", None)
        out[k] = int(v) if v is not None and v >= 0 else None
    return out


def footprint(m: dict) -> int:
    """Bytes the step needs on the device: arguments + outputs not aliased
    to a donated argument + temp."""
    return m["argument"] + m["output"] - (m["alias"] or 0) + m["temp"]


def memory(step_or_lowered, compiler_options: dict | None = None) -> dict | None:
    """Compiles (a ``Step`` or a ``jax.stages.Lowered``) and returns
    ``analysis_dict``."""
    lowered, opts = _lowered(step_or_lowered, compiler_options)
    return analysis_dict(lowered.compile(opts or None))


def _lowered(x, compiler_options):
    if isinstance(x, Step):
        return x.lower(), {**x.compiler_options, **(compiler_options or {})}
    return x, dict(compiler_options or {})


def plan_memory(plan, measures="auto") -> dict | None:
    """XLA's ``memory_analysis()`` of the program a Module runs for the
    plan's net (``plan_step``: training, the step ``fit`` runs on one
    device, SGD with momentum; inference, the program ``predict`` runs):
    temp, argument, output and alias bytes, and ``program`` (what was
    compiled: devices, optimizer, measures); None when the backend gives
    nothing (temp, argument and output all 0 or unknown), a field it does
    not know is None. ``measures``: 'auto' (the rule a Module uses),
    'none', or names. ``plan.xla = plan_memory(plan)`` puts the figures in
    the plan's report and JSON."""
    step = plan_step(plan, measures)
    m = memory(step)
    if m is None or not any(m[k] for k in ("temp", "argument", "output")):
        return None
    return {**{k: m[k] for k in ("temp", "argument", "output", "alias")},
            "program": step.info}


def best_step(make, candidates) -> tuple:
    """``(measures, Step, memory dict, {measures: temp})``: the candidate
    measure set whose compiled program has the least temp (the first of
    equals), and every candidate's temp; ``make(measures) -> Step``."""
    best, temps = None, {}
    for ms in candidates:
        step = make(tuple(ms))
        m = memory(step)
        if m is None or m["temp"] is None:
            raise XlaError("the backend gives no memory_analysis(): nothing to choose by")
        temps[tuple(ms)] = m["temp"]
        if best is None or m["temp"] < best[2]["temp"]:
            best = (tuple(ms), step, m)
    if best is None:
        raise XlaError("best_step: no candidates")
    return best + (temps,)
