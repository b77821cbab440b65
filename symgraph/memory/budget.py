"""Memory budgets: which forward tensors to recompute so a training plan fits.

    p = sg.plan(net, {'data': (32, 3, 224, 224)}, train=True, budget='6GiB',
                optimizer='momentum')
    p.total <= p.budget          # arguments + gradients + aux + optimizer + internal
    p.recompute                  # [{"name", "op", "bytes", "flops"}, ...]

The budget bounds the total the device holds. The planner drops forward
tensors after the forward and computes them again in the backward
(``passes.recompute.rewrite``), choosing the set with the least extra
FLOPs whose *real* plan (the same fuse, schedule, liveness and strategy as
every plan, not an estimate) fits.

Three algorithms (``ALGORITHMS``) propose recompute sets:

- ``mirror``: MXNet's ``MXNET_BACKWARD_DO_MIRROR``: recompute the cheap ops
  (activations, normalization, pooling, elementwise and shape ops), never
  an op that draws random numbers (Dropout). A node's
  ``__force_mirroring__`` attribute wins: 'True' recomputes it, 'False'
  keeps it. Nodes carrying ``__mirror_stage__`` (set by MXNet's memonger,
  ``sym._set_attr(mirror_stage='True')``) are stage boundaries: as
  memonger's ``make_mirror_plan``, everything is recomputed but the
  boundaries where the bytes gathered since the last kept boundary pass a
  threshold; each threshold on a fixed grid is one candidate.
- ``sqrt``: Chen et al. 2016: ~sqrt(n) checkpoints (n recomputable nodes)
  at articulation points of the forward graph (cut vertices: every path
  from the inputs to the loss passes through them), evenly spaced by bytes;
  everything between them is recomputed. With a budget, also the paper's
  greedy variant (a checkpoint where the bytes since the last one pass a
  threshold) at thresholds from 2 to 1/8 times the bytes over
  sqrt(articulation points).
- ``solver``: a frontier over the segments between articulation points:
  per segment keep everything, recompute its cheap ops, or recompute all
  but the checkpoint closing it, taken in order of extra FLOPs per byte
  saved (the convex hull of a multiple-choice knapsack), refined halfway
  between neighbours; then fewer checkpoints (``drop_order``: the cheapest
  per byte, no two neighbours; every 3rd kept); plus every mirror and sqrt
  set.

Every candidate is planned for real and the candidates form a Pareto
frontier (extra FLOPs ascending, internal bytes strictly descending); a
budget takes the cheapest point that fits. A smaller budget therefore never
gets a larger total: the frontier does not depend on the budget. Frontiers
are cached per (graph, shapes, strategy, options). The facts about the
graph the sets are made of, each algorithm's sets and the judge
(``Problem``) are ``recompute_problem``'s; the frontier, the choice and
the fit of the program XLA compiles are here.

ResNet-152 training (batch 32, 224x224) plans under any budget with the
solver in 3.3-3.4 s of CPU on the project's 2-core machine (24 real plans
for the frontier; best wall 3.9-4.8 s at a load of 5; docs/memory.md,
"Budgets and recompute").
"""
from __future__ import annotations

import math
import numbers
import re
from collections import OrderedDict
from dataclasses import dataclass

from ..errors import PlanError
from ..graph import Graph
from ..passes.infer import Inferred
from ..util import short_repr
from .recompute_problem import (ALGORITHMS, FORCE_ATTR, MIRROR_FAMILIES, STAGE_ATTR, Point,
                                Problem, graph_flops, internal_bytes, memonger_keep,
                                node_flops, recompute_rows, rewritten_inferred)


class BudgetError(PlanError):
    """A budget that is malformed (``smallest`` None) or that no plan fits
    (``smallest``: the smallest total reachable, bytes). ``budget``: the
    budget in bytes (None when it could not be read)."""

    def __init__(self, message: str, budget: int | None = None, smallest: int | None = None):
        super().__init__(message)
        self.budget = budget
        self.smallest = smallest


# -- parsing --------------------------------------------------------------------
UNITS = {"": 1, "b": 1, "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12,
         "kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30, "tib": 2 ** 40}
_BUDGET = re.compile(r"^\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*([A-Za-z]*)\s*$")
# the largest budget read: what an int64 holds (8 EiB), more than any device;
# a budget past it would overflow the int64s it meets downstream
MAX_BUDGET = 2 ** 63 - 1
FORMS = "bytes (123) or a number with a unit: 512MiB, 1.5 GiB, 6GB (= 6e9 bytes), KiB..TiB"


def parse_budget(value) -> int:
    """Bytes from an int, or text such as ``6GiB``, ``512MiB``, ``1.5 GiB``,
    ``6GB`` (6e9) or ``123``; BudgetError for anything else, zero, negative,
    not finite or above ``MAX_BUDGET``."""
    def bad(why=""):
        return BudgetError(f"budget {short_repr(value, 60)}{why}: give {FORMS}")
    if isinstance(value, bool):
        raise bad()
    if isinstance(value, str):
        m = _BUDGET.match(value)
        if m is None:
            raise bad()
        unit = UNITS.get(m.group(2).lower())
        if unit is None:
            raise bad(f" has an unknown unit {short_repr(m.group(2), 20)}")
        number = float(m.group(1))
    elif isinstance(value, numbers.Integral):  # exact: no float rounds it
        if not 1 <= int(value) <= MAX_BUDGET:
            raise bad(" is not a positive number of bytes" if value < 1
                      else f" is above {MAX_BUDGET:,} bytes")
        return int(value)
    else:
        try:
            if not isinstance(value, numbers.Real):
                raise bad()
            number, unit = float(value), 1
        except OverflowError:
            raise bad(f" is above {MAX_BUDGET:,} bytes") from None
        except (TypeError, ValueError):
            raise bad() from None
    total = number * unit  # inf where a finite number times its unit overflows a float
    if not math.isfinite(number) or total < 1:
        raise bad(" is not a finite, positive number of bytes")
    if total > MAX_BUDGET:
        raise bad(f" is above {MAX_BUDGET:,} bytes")
    return int(total)


# -- optimizer state --------------------------------------------------------------
# copies of the parameters an optimizer keeps (symgraph/train/optimizer.py):
# SGD without momentum none, momentum/NAG the momentum, Adam/AdamW two
# moments, RMSProp the mean square (centered RMSProp keeps three)
OPTIMIZER_STATES = {"sgd": 0, "momentum": 1, "nag": 1, "nesterov": 1, "adam": 2, "adamw": 2,
                    "rmsprop": 1}


def optimizer_bytes(param_bytes: int, optimizer) -> int:
    """Bytes of optimizer state for parameters of ``param_bytes`` bytes:
    None or 'sgd' 0, 'momentum'/'nag' 1x, 'adam'/'adamw' 2x, 'rmsprop' 1x."""
    if optimizer is None:
        return 0
    k = OPTIMIZER_STATES.get(str(optimizer).lower()) if isinstance(optimizer, str) else None
    if k is None:
        raise PlanError(f"unknown optimizer {optimizer!r} for the state bytes; known: "
                        f"{', '.join(OPTIMIZER_STATES)}")
    return k * int(param_bytes)


# -- the frontier -----------------------------------------------------------------------
def _spread(items: list, k: int) -> list:
    """About k items evenly spread over the list, the first and last kept."""
    if len(items) <= k:
        return list(items)
    idx = sorted({round(j * (len(items) - 1) / (k - 1)) for j in range(k)})
    return [items[i] for i in idx]


LADDER_POINTS = 8


def _spread_ladder(problem: Problem, ladder: list, k: int) -> list:
    """About k prefixes of the ladder (its last included), evenly spaced
    in the mean of the fractions of bytes dropped and FLOPs added: the
    cheap moves drop many bytes for few FLOPs, the others the reverse."""
    if not ladder:
        return []
    tb = sum(problem.bytes[x] for x in ladder[-1]) or 1
    tf = sum(problem.flops[x] for x in ladder[-1]) or 1
    pos = [(sum(problem.bytes[x] for x in names) / tb
            + sum(problem.flops[x] for x in names) / tf) / 2 for names in ladder]
    picked = []
    for j in range(1, k + 1):
        i = min(range(len(pos)), key=lambda i: abs(pos[i] - j / k))
        if i not in picked:
            picked.append(i)
    return sorted(picked)


# prefixes of Problem.drop_order() tried, as fractions of it
DROP_POINTS = (0.5, 2 / 3, 5 / 6, 1.0)

LADDER_LABEL = "solver segments"
REFINE_POINTS = 3


def _refine(problem: Problem, front: list) -> list:
    """Up to ``REFINE_POINTS`` more ladder prefixes, halfway between two
    neighbours on the frontier, the largest gap (extra FLOPs times bytes)
    first; the frontier of all of them. It depends on
    the graph alone, never on a budget, so monotonicity holds."""
    ladder = problem.ladder()

    def index(p):
        if p.names == ():
            return -1
        if p.source.startswith(LADDER_LABEL):
            return int(p.source.rsplit(" ", 1)[1].split("/")[0]) - 1
        return None

    tried = set()
    tf = max(front[-1].extra_flops, 1)
    tm = max(front[0].internal, 1)
    for _ in range(REFINE_POINTS):
        gaps = []
        for a, b in zip(front, front[1:]):
            ia, ib = index(a), index(b)
            if ia is not None and ib is not None and ib - ia > 1:
                mid = (ia + ib) // 2
                if mid not in tried:
                    # the area between the two points: what a budget between
                    # them may pay beyond the best set on the ladder
                    area = (b.extra_flops - a.extra_flops) / tf * (a.internal - b.internal) / tm
                    gaps.append((area, mid))
        if not gaps:
            break
        _, mid = max(gaps)
        tried.add(mid)
        p = problem.exact(problem.evaluate(ladder[mid], f"{LADDER_LABEL} {mid + 1}/{len(ladder)}"))
        front = pareto(front + [p])
    return front


def candidate_sets(problem: Problem, algorithm: str, budgeted: bool) -> list:
    """(label, names) the algorithm proposes; without a budget only the
    algorithm's own choice (solver: its whole frontier, the least-memory
    point is taken)."""
    sets = [("none", [])]
    if algorithm == "mirror":
        sets += problem.mirror_sets()
    elif algorithm == "sqrt":
        sets += _sqrt_sets(problem, budgeted)
    elif algorithm == "solver":
        ladder = problem.ladder()
        for i in _spread_ladder(problem, ladder, LADDER_POINTS):
            sets.append((f"{LADDER_LABEL} {i + 1}/{len(ladder)}", ladder[i]))
        # fewer checkpoints than articulation points: the ladder's end with
        # every m-th articulation point kept (m = 2, 3; the outputs that
        # end a segment are then computed again too, e.g. the convolution
        # before a ResNet unit's add), then Chen's sets; with mirror's, the
        # solver's frontier is at or below the other two algorithms' at
        # every budget
        arts = [problem.fwd[i].name for i in problem.articulation]
        end = ladder[-1] if ladder else []
        drops = problem.drop_order()
        for j in range(len(DROP_POINTS)):
            k = round(len(drops) * DROP_POINTS[j])
            if k and (j == 0 or k != round(len(drops) * DROP_POINTS[j - 1])):
                sets.append((f"solver drop {k}/{len(drops)}", end + drops[:k]))
        if len(arts) >= 6:
            sets.append(("solver merge 3", end + [a for i, a in enumerate(arts) if i % 3]))
        sets += _sqrt_sets(problem, True)
        sets += problem.mirror_sets()
        if len(problem.articulation) < 2:
            # no chain to checkpoint along: everything recomputed is the
            # other end (with a chain, Chen's sets take less memory)
            sets.append(("all", [n.name for n in problem.candidates]))
    else:
        raise PlanError(f"unknown recompute algorithm {algorithm!r}; choose one of "
                        f"{', '.join(ALGORITHMS)}")
    return sets


GREEDY_FACTORS = (0.5, 1, 2, 4, 8)


def _sqrt_sets(problem: Problem, budgeted: bool) -> list:
    """Chen's sqrt(n) set; with a budget also the greedy variant at
    thresholds around the recomputable bytes over sqrt(articulation
    points), Chen's choice, from twice that to an eighth of it."""
    k = problem.sqrt_k()
    sets = [(f"sqrt k={k}", problem.checkpoint_set(problem.even_checkpoints(k)))]
    if budgeted:
        total = sum(problem.bytes[n.name] for n in problem.candidates) or 1
        base = max(1.0, math.sqrt(len(problem.articulation)))
        for f in GREEDY_FACTORS:
            t = total / (base * f)
            sets.append((f"sqrt greedy 1/{base * f:.1f}",
                         problem.checkpoint_set(problem.greedy_checkpoints(t))))
    return sets


def pareto(points) -> list:
    """Extra FLOPs ascending, internal strictly descending."""
    out = []
    for p in sorted(points, key=lambda p: (p.extra_flops, p.internal, len(p.names))):
        if not out or p.internal < out[-1].internal:
            out.append(p)
    return out


_FRONTIERS: OrderedDict = OrderedDict()
CACHE_SIZE = 16


def frontier(problem: Problem, algorithm: str, budgeted: bool = True) -> list:
    """The Pareto frontier of the algorithm's candidate sets, each planned
    for real; cached per (graph, shapes, algorithm, options)."""
    key = (graph_key(problem.full, problem.inf, problem.n_fwd), algorithm, budgeted,
           tuple(sorted((k, str(v)) for k, v in problem.opts.items())))
    hit = _FRONTIERS.get(key)
    if hit is not None:
        _FRONTIERS.move_to_end(key)
        return hit
    pts = [problem.evaluate(names, label)
           for label, names in candidate_sets(problem, algorithm, budgeted)]
    # the frontier of the arena's own figures, then of the exact ones (a
    # point whose 'both' fallback would have put it on the frontier is lost,
    # never a wrong figure kept)
    front = pareto(problem.exact(p) for p in pareto(pts))
    if algorithm == "solver":
        front = _refine(problem, front)
    _FRONTIERS[key] = front
    while len(_FRONTIERS) > CACHE_SIZE:
        _FRONTIERS.popitem(last=False)
    return front


def graph_key(g: Graph, inf: Inferred, n_fwd: int) -> tuple:
    """A structural key: the same nodes, attributes, wiring and shapes."""
    ids = {id(n): i for i, n in enumerate(g.nodes)}
    nodes = tuple((n.name, n.op.name if n.op is not None else None,
                   tuple(sorted(n.attrs.items())),
                   tuple((ids[id(e.node)], e.index) for e in n.inputs)) for n in g.nodes)
    return (nodes, tuple((ids[id(e.node)], e.index) for e in g.outputs), inf.shapes,
            inf.dtypes, n_fwd)


def choose(problem: Problem, algorithm: str, budget: int | None, fixed: int) -> Point:
    """The point of the algorithm's frontier to plan: with a budget the
    cheapest whose ``fixed + internal`` fits (BudgetError naming the
    smallest reachable otherwise); without one the algorithm's own choice
    (mirror, sqrt: their set; solver: the least memory)."""
    if budget is None:
        if algorithm == "solver":
            return frontier(problem, algorithm, budgeted=False)[-1]
        # the algorithm's own set as it is, even where it saves nothing
        # (mirror on an MLP: a ReLU's input is kept for its clone instead)
        own = [problem.exact(problem.evaluate(names, label))
               for label, names in candidate_sets(problem, algorithm, False)[1:]]
        return min(own, key=lambda p: (p.internal, p.extra_flops))
    # the frontier starts with no recompute (0 extra FLOPs): where that fits
    # it is the answer, without planning the other candidates
    none = problem.exact(problem.evaluate((), "none"))
    if fixed + none.internal <= budget:
        return none
    front = frontier(problem, algorithm, budgeted=True)
    for p in front:
        if fixed + p.internal <= budget:
            return p
    smallest = fixed + front[-1].internal
    raise BudgetError(f"budget {fmt_bytes(budget)} is below the smallest total reachable, "
                      f"{fmt_bytes(smallest)} (recompute {algorithm}: "
                      f"{len(front[-1].names)} tensors recomputed)",
                      budget=budget, smallest=smallest)


def fmt_bytes(b: int) -> str:
    return f"{b / 2 ** 20:,.1f} MiB ({b:,} bytes)"


# -- the program that runs ---------------------------------------------------------
# how many times the plan is made again when the program XLA compiled for it
# holds more than the budget (fit_program)
PROGRAM_FIT_ROUNDS = 2
@dataclass(frozen=True)
class ProgramFit:
    """``fit_program``'s answer: the plan to run, XLA's footprint of its
    program (bytes), whether that is within the budget, and every plan
    compiled on the way as ``(plan, footprint)`` in order."""
    plan: object
    footprint: int
    fits: bool
    tried: tuple


def first_plan(budget: int, plan_for, *, keep_recompute=False):
    """The plan ``fit_program`` starts from: ``plan_for(budget)`` (see
    there). Where no plan fits the budget, the plan without recompute --
    XLA recomputes cheap ops of its own accord, so its program can hold
    less than the smallest plan (``fit_program`` decides by XLA's figure)
    -- unless ``keep_recompute`` or the budget is below what every program
    holds (``held_by_every_program``): then the BudgetError is raised."""
    try:
        return plan_for(budget)
    except BudgetError as err:
        if err.smallest is None or keep_recompute:
            raise
        plain = plan_for(None)
        if budget < held_by_every_program(plain):
            raise
        return plain


def held_by_every_program(plan) -> int:
    """Bytes every program of ``plan``'s step holds as its arguments: the
    inputs, parameters, aux states and optimizer state. A budget below it
    is refused without compiling."""
    return sum(plan.buckets.get(k, 0) for k in ("arguments", "aux", "optimizer"))


def fit_program(first, budget: int, plan_for, footprint_of, *, keep_recompute=False,
                rounds: int = PROGRAM_FIT_ROUNDS) -> ProgramFit:
    """The plan whose *program* fits ``budget``, not only whose plan does.

    ``first``: the plan to ``budget``; ``plan_for(b)``: a plan to budget
    ``b`` (BudgetError where none fits), ``plan_for(None)`` the plan with
    nothing recomputed; ``footprint_of(plan)``: XLA's footprint of the
    program that runs that plan (it compiles).

    1. Where ``first`` recomputes (and ``keep_recompute`` is false): XLA
       recomputes cheap ops of its own accord, so the program without
       recompute can hold less than its plan and less than a mildly
       budgeted one (ResNet-50, batch 32: 1,487 MiB against a plan of
       2,659; at 0.75 of the internal bytes the recomputing step held
       1,818). So it is compiled first, and taken if XLA's figure says
       it fits: nothing recomputed.
    2. Otherwise, while the program holds more than the budget (layout
       copies, XLA's own order), plan again to the plan's total less the
       excess -- or, where no plan gets that low, take the smallest plan
       (its program may hold less than it) -- at most ``rounds`` times.

    Where no program fits, the smallest compiled is the answer
    (``fits`` False; ``over_budget`` is the error callers raise then)."""
    tried = []

    def measure(p):
        held = footprint_of(p)
        tried.append((p, held))
        return held

    if first.recompute and not keep_recompute:
        plain = plan_for(None)
        held = measure(plain)
        if held <= budget:
            return ProgramFit(plain, held, True, tuple(tried))
    p = first
    for round_ in range(rounds + 1):
        held = measure(p)
        if held <= budget:
            return ProgramFit(p, held, True, tuple(tried))
        target = p.total - (held - budget)  # XLA holds the plan and some more
        if round_ == rounds or target <= 0:
            break
        try:
            p = plan_for(target)
        except BudgetError as err:
            # no plan gets there; the smallest may still, where XLA holds
            # less than its plan (it recomputes cheap ops itself)
            if err.smallest is None or err.smallest >= p.total:
                break
            p = plan_for(err.smallest)
    best, held = min(tried, key=lambda t: t[1])  # over: the smallest program compiled
    return ProgramFit(best, held, False, tuple(tried))


def over_budget(fit: ProgramFit, budget: int, opt_in: str) -> BudgetError:
    """The error for a fit no program of which holds ``budget``: it names
    the smallest footprint XLA compiled and how to run it anyway
    (``opt_in``: the flag that allows it)."""
    return BudgetError(f"budget {fmt_bytes(budget)}: no program holds it; the smallest XLA "
                       f"compiled needs {fmt_bytes(fit.footprint)} "
                       f"({len(fit.plan.recompute)} tensors recomputed); give a larger "
                       f"budget, or {opt_in} to run it over the budget",
                       budget=budget, smallest=fit.footprint)


__all__ = ["ALGORITHMS", "BudgetError", "FORCE_ATTR", "MAX_BUDGET", "MIRROR_FAMILIES",
           "OPTIMIZER_STATES", "PROGRAM_FIT_ROUNDS", "Point", "Problem", "ProgramFit",
           "STAGE_ATTR", "candidate_sets", "choose", "first_plan", "fit_program", "fmt_bytes",
           "frontier", "graph_flops", "graph_key", "held_by_every_program", "internal_bytes",
           "memonger_keep", "node_flops", "optimizer_bytes", "over_budget", "pareto",
           "parse_budget", "recompute_rows", "rewritten_inferred"]
