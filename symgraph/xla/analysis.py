"""XLA's memory analysis of a step: ``memory`` (``memory_analysis()`` as a
dict), ``footprint``, ``plan_memory`` (the figures of the program a Module
runs for a plan) and ``best_step`` (the measure set whose program holds
the least temp).
"""
from __future__ import annotations

import dataclasses

from .. import targets
from ..ops.conv import CONVOLUTIONS
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
    """Compiles (a ``Step``, for its target, or a ``jax.stages.Lowered``)
    and returns ``analysis_dict``."""
    return analysis_dict(compile_step(step_or_lowered, compiler_options))


def compile_step(x, compiler_options: dict | None = None):
    """A ``Step`` compiled for its target (checked: a program compiled for
    another platform is refused), or a ``jax.stages.Lowered`` compiled."""
    if isinstance(x, Step):
        return targets.get(x.target).compile(x, {**x.compiler_options,
                                                 **(compiler_options or {})})
    return x.compile(dict(compiler_options or {}) or None)


def plan_memory(plan, measures="auto", target=None, compute_dtype=None) -> dict | None:
    """XLA's ``memory_analysis()`` of the program a Module runs for the
    plan's net (``plan_step``: training, the step ``fit`` runs on one
    device, SGD with momentum; inference, the program ``predict`` runs):
    temp, argument, output and alias bytes, and ``program`` (what was
    compiled: devices, optimizer, measures); None when the backend gives
    nothing (temp, argument and output all 0 or unknown), a field it does
    not know is None. ``measures``: 'auto' (the rule a Module uses),
    'none', or names. ``target``: the device it is compiled for
    (``symgraph.targets.get``; ``program['target']`` names it).
    ``compute_dtype``: the Module's; default the plan's.
    ``dataclasses.replace(plan, xla=plan_memory(plan))`` is the plan with the
    figures in its report
    and JSON."""
    step = plan_step(plan, measures, target, compute_dtype)
    m = memory(step)
    if m is None or not any(m[k] for k in ("temp", "argument", "output")):
        return None
    out = {**{k: m[k] for k in ("temp", "argument", "output", "alias")},
           "program": step.info}
    return with_fit(out, step.target, plan.graph)


def with_fit(figures: dict, target, graph) -> dict:
    """``figures`` (a ``memory`` dict) with ``fit`` added where ``target``
    has a known memory (``fit_on``) -- the program being ``graph``'s."""
    fit = fit_on(targets.get(target), footprint(figures), has_convolution(graph))
    if fit is not None:
        figures["fit"] = fit
    return figures


def has_convolution(graph) -> bool:
    """Whether a graph runs a convolution (a cuDNN call with a workspace on a GPU)."""
    return any(n.op is not None and n.op.name in CONVOLUTIONS
               for n in graph.nodes)


def fit_on(target, footprint_bytes: int, convolutions: bool) -> dict | None:
    """Whether a program of ``footprint_bytes`` fits one device of
    ``target``: ``{"fits", "need", "pool", "spare"}`` where ``need`` is the
    footprint plus the workspace allowance (a net with convolutions compiled
    deviceless: ``Target.workspace``) and ``pool`` what JAX's allocator may
    take of the device (``Target.pool``); None for a target with no known
    memory (the CPU)."""
    pool = target.pool
    if pool is None:
        return None
    allowance = target.workspace if convolutions else 0
    need = int(footprint_bytes) + allowance
    return {"fits": need <= pool, "footprint": int(footprint_bytes), "allowance": allowance,
            "need": need, "pool": pool, "spare": pool - need}


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


def fit_budget(net, shapes: dict, budget, target=None, optimizer=None, recompute="auto",
               compute_dtype=None, allow_over_budget=False,
               opt_in="allow_over_budget=True", **plan_kwargs):
    """``(plan, figures, fits)``: the training plan whose *program*, compiled
    for ``target``, fits ``budget`` -- what a Module under
    ``memory_budget=budget`` runs (``memory.budget.fit_program``: the plan
    to the budget, the step without recompute where it holds less, then
    plans again to the excess XLA's figure shows). ``figures`` are
    ``plan_memory``'s for the plan chosen. Where no program compiled holds
    the budget, BudgetError naming the smallest and how to allow it
    (``opt_in``), unless ``allow_over_budget``: then the smallest is
    returned, ``fits`` False. ``compute_dtype``: the Module's; the plans
    are made in it."""
    from ..memory.budget import first_plan, fit_program, over_budget, parse_budget
    from ..memory.pipeline import plan
    t = targets.get(target)
    budget = parse_budget(budget)
    keep = recompute not in (None, "auto") and not isinstance(recompute, str)
    figures = {}

    def plan_for(b):
        if b is None:
            return plan(net, shapes, train=True, optimizer=optimizer,
                        compute_dtype=compute_dtype, **plan_kwargs)
        return plan(net, shapes, train=True, budget=b, optimizer=optimizer,
                    recompute=recompute, compute_dtype=compute_dtype, **plan_kwargs)

    def footprint_of(p):
        figures[id(p)] = plan_memory(p, target=t)
        return footprint(figures[id(p)])

    first = first_plan(budget, plan_for, keep_recompute=keep)
    fit = fit_program(first, budget, plan_for, footprint_of, keep_recompute=keep)
    if not fit.fits and not allow_over_budget:
        raise over_budget(fit, budget, opt_in)
    return fit.plan, figures[id(fit.plan)], fit.fits


def plan_on(net, shapes: dict | None = None, train: bool = False, *, target=None,
            compute_dtype: str | None = None, **plan_kwargs):
    """``sg.plan``: ``memory.plan(net, shapes, train, **plan_kwargs)`` and,
    with ``target``, XLA's figures for the program a Module runs for the net
    compiled for that device (``symgraph.targets.get``: 'cpu', 'gpu',
    'h100', 'a100', 'a100-40gb', 'l4' or a GpuTargetConfig file, compiled
    deviceless) in ``plan.xla``: the report and JSON name the target and
    say whether the program fits the device. ``compute_dtype``: the
    Module's (float32, bfloat16, float16): the net is planned, and its
    program compiled, as a Module computing in it runs it (``memory.plan``).
    Without a target nothing is compiled."""
    from ..memory.pipeline import plan
    if target is not None:  # an unknown name or a bad description fails before planning
        target = targets.get(target)
    p = plan(net, shapes, train, compute_dtype=compute_dtype, **plan_kwargs)
    if target is not None:
        p = dataclasses.replace(p, xla=plan_memory(p, target=target))
    return p
