"""The largest batch that fits a memory budget, found without running the net.

    import symgraph as sg
    r = sg.max_batch(net, {'data': (1, 3, 224, 224)}, budget='16GiB', train=True)
    r.batch, r.total, r.recompute, r.xla

The shapes may give any batch: the batch is set on ``batch_axis`` of every
input whose shape is given (data and labels). The search plans the net at
growing batches (1, 2, 4, ... until the plan's total no longer fits, then
bisection between the last that fit and the first that did not): plans are
fast (ResNet-152 training about 0.1 s), compiling is not. XLA's figure of
the program a Module would run at a batch (compiled, not run:
``symgraph.xla.plan_step``; temp + argument + output - alias,
``xla.footprint``) then decides: from the plans' answer the batch is stepped
down while that figure exceeds the budget, and searched up while the next
batch's program fits (XLA recomputes cheap ops of its own accord, so its
program can hold less than the plan). The batch found is the largest whose
program fits: the next one's was compiled and does not; ``notes`` say
where the plans and the program disagreed.

With ``recompute`` the plans are budgeted plans (``sg.plan(..., budget=)``:
forward tensors dropped and recomputed in the backward to fit), so a batch
fits when some recompute plan fits. docs/memory.md ("The largest batch that
fits") has the details.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field

from ..errors import PlanError
from .budget import OPTIMIZER_STATES, BudgetError, optimizer_bytes, parse_budget

# the search stops here: a budget this batch fits says "anything you like"
DEFAULT_LIMIT = 1 << 20


@dataclass
class MaxBatch:
    """What ``max_batch`` found.

    ``batch``: the largest batch whose program fits by XLA's figure (with
    ``xla``; else the largest whose plan fits); ``total``: the plan's total bytes at that batch (arguments,
    gradients, aux, optimizer state, internal); ``recompute``: what that
    plan recomputes (dicts with name, bytes, flops; empty without
    recompute); ``xla``: XLA's footprint of the program at that batch
    (None when not compiled); ``plan_batch``: the batch the plans alone
    allowed; ``notes``: what the search had to do (XLA's figure above the
    budget, the limit reached)."""

    batch: int
    total: int
    recompute: list
    xla: int | None
    budget: int
    plan_batch: int
    train: bool
    plans: int = 0
    notes: list = field(default_factory=list)
    plan: object = field(default=None, repr=False, compare=False)
    target: dict | None = None

    def to_json(self) -> dict:
        """The ``symgraph max-batch --json`` dictionary."""
        return {"batch": int(self.batch), "total": int(self.total),
                "recompute": [dict(r) for r in self.recompute],
                "xla": None if self.xla is None else int(self.xla),
                "budget": int(self.budget), "plan_batch": int(self.plan_batch),
                "train": bool(self.train), "notes": list(self.notes),
                "target": self.target}


def _budget_error(message: str, budget: int, smallest: int | None) -> BudgetError:
    return BudgetError(message, budget=budget, smallest=smallest)


def _scale_shapes(shapes: dict, batch_axis: int) -> tuple:
    """(the batch the shapes give, a function batch -> shapes)."""
    from ..passes.infer import check_shapes
    # a None shape is unknown (as in sg.plan): inferred at every batch, not set
    shapes = {k: v for k, v in (check_shapes(shapes) or {}).items() if v is not None}
    if not shapes:
        raise PlanError("max_batch: give the input shapes, e.g. {'data': (1, 3, 224, 224)}")
    given = {}
    for name, s in shapes.items():
        if not -len(s) <= batch_axis < len(s):
            raise PlanError(f"max_batch: input {name!r} of shape {tuple(s)} has no batch axis "
                            f"{batch_axis}")
        given[name] = s[batch_axis]
    if len(set(given.values())) != 1:
        raise PlanError("max_batch: the inputs give different batches on axis "
                        f"{batch_axis}: " + ", ".join(f"{k}={v}" for k, v in given.items()))

    def at(batch: int) -> dict:
        out = {}
        for name, s in shapes.items():
            s = list(s)
            s[batch_axis] = batch
            out[name] = tuple(s)
        return out
    return next(iter(given.values())), at


def optimizer_state_bytes(plan, optimizer) -> int:
    """Bytes of the optimizer's state for a training plan's parameters
    (``budget.optimizer_bytes``: SGD 0, momentum 1x, Adam 2x the parameters)."""
    if optimizer is None or not plan.train:
        return 0
    return optimizer_bytes(plan.buckets["gradients"], optimizer)


def _optimizer(optimizer):
    """The ``Optimizer`` XLA's check compiles for a name the budget knows
    ('sgd', 'momentum' and 'nag' with momentum 0.9, 'adam', ...)."""
    from ..train import optimizer as opt_mod
    if optimizer is None:
        return None
    name = str(optimizer).lower()
    if name not in OPTIMIZER_STATES:
        raise PlanError(f"unknown optimizer {optimizer!r}; choose one of "
                        + ", ".join(OPTIMIZER_STATES))
    if name in ("momentum", "nesterov"):
        return opt_mod.create("sgd", momentum=0.9)
    if name == "nag":
        return opt_mod.create("nag", momentum=0.9)
    return opt_mod.create(name)


class _Planner:
    """The plan at a batch and whether it fits, remembered per batch."""

    def __init__(self, net, at, budget, train, optimizer, recompute, plan_kwargs):
        from .pipeline import as_graph
        self.graph = as_graph(net)
        self.at, self.budget, self.train = at, budget, train
        self.optimizer, self.recompute = optimizer, recompute
        self.kwargs = plan_kwargs
        self.seen = {}  # batch -> (fits, total or smallest, plan or None)
        self.count = 0

    def __call__(self, batch: int) -> tuple:
        if batch not in self.seen:
            self.count += 1
            self.seen[batch] = self._plan(batch)
        return self.seen[batch]

    def _plan(self, batch: int) -> tuple:
        from .pipeline import plan
        shapes = self.at(batch)
        if not self.train:  # no backward: nothing to recompute, the plan as it is
            p = plan(self.graph, shapes, train=False, **self.kwargs)
            return p.total <= self.budget, int(p.total), p
        try:
            p = plan(self.graph, shapes, train=True, budget=self.budget,
                     optimizer=self.optimizer,
                     recompute=None if self.recompute else "none", **self.kwargs)
        except BudgetError as err:
            if err.smallest is None:
                raise  # a malformed budget, not one too small
            return False, int(err.smallest), None
        return p.total <= self.budget, int(p.total), p


def plan_total(plan, optimizer=None) -> int:
    """``plan.total`` (arguments + gradients + aux + optimizer state +
    internal), with ``optimizer``'s state added where the plan was made
    without it: what a budget bounds."""
    extra = 0 if plan.buckets.get("optimizer") else optimizer_state_bytes(plan, optimizer)
    return int(plan.total) + extra


def max_batch(net, shapes: dict, budget=None, train: bool = True, optimizer=None,
              recompute: bool = True, xla: bool = True, batch_axis: int = 0,
              progress: bool = True, limit: int = DEFAULT_LIMIT, target=None,
              **plan_kwargs) -> MaxBatch:
    """The largest batch of ``net`` whose plan fits ``budget`` (bytes, or a
    string such as '16GiB'), found by planning, not running.

    shapes: the input shapes at any batch (set on ``batch_axis`` of every
        input given). train: plan training (forward, backward, gradients);
        optimizer: count its state too, by name ('sgd', 'momentum', 'nag',
        'adam', 'adamw', 'rmsprop'). recompute: let the planner recompute forward tensors
        in the backward to fit (budgeted plans); False plans as they are.
    xla: decide by compiling the program a Module would run (compile
        only): from the plans' answer, down while XLA's figure is above the
        budget, up while the next batch's program fits. progress: a tqdm bar
        on stderr while searching.
    limit: the largest batch tried. Other keywords go to ``sg.plan``.
    target: the device XLA's check compiles for (``symgraph.targets.get``:
        'cpu' by default, 'h100', 'a100', 'l4', a description file, 'gpu');
        for a GPU ``budget`` defaults to the device's pool less the
        convolution workspace allowance (``default_budget``).

    A budget that batch 1 does not fit raises a BudgetError (a PlanError)
    naming the smallest total reachable at batch 1 and the budget.
    """
    from .. import targets
    target = targets.get(target)
    if budget is None:
        budget = default_budget(target, net)
    budget = parse_budget(budget)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise PlanError(f"max_batch: limit must be a positive int, got {limit!r}")
    if isinstance(batch_axis, bool) or not isinstance(batch_axis, int):
        raise PlanError(f"max_batch: batch_axis must be an int axis, got {batch_axis!r}")
    _, at = _scale_shapes(shapes, batch_axis)
    if optimizer is not None and not isinstance(optimizer, str):
        raise PlanError(f"max_batch: give the optimizer by name ('sgd', 'momentum', 'adam', "
                        f"...), not {type(optimizer).__name__}")
    optimizer = None if optimizer is None else optimizer.lower()
    _optimizer(optimizer)  # an unknown name fails before any planning
    if optimizer is not None and not train:
        raise PlanError("max_batch: an optimizer needs train=True (inference keeps no "
                        "optimizer state)")
    run = _Planner(net, at, budget, train, optimizer, recompute, plan_kwargs)
    from tqdm import tqdm
    # disable=None: no bar where stderr is no terminal (a pipe, a test's capture)
    bar = tqdm(desc="max-batch", unit="plan", file=sys.stderr,
               disable=None if progress else True, leave=False)
    try:
        lo, hi = _search(run, limit, bar)
        if lo == 0:
            fits, smallest, _ = run(1)
            what = f"{smallest:,} bytes" if smallest else "more than the budget"
            raise _budget_error(f"max-batch: even batch 1 does not fit the budget of "
                                f"{budget:,} bytes: its smallest total is {what}",
                                budget, smallest)
        notes = []
        if hi is None:
            notes.append(f"the limit, batch {limit}, fits: the search stopped there")
        found = lo
        xla_bytes = None
        if xla:
            found, xla_bytes = _confirm(run, lo, budget, train, optimizer, bar, notes, target)
            if xla_bytes is not None:
                found, xla_bytes = _search_up(run, found, xla_bytes, budget, limit,
                                              optimizer, target, bar, notes)
    finally:
        bar.close()
    _, total, p = run(found)
    return MaxBatch(batch=found, total=int(total), recompute=list(getattr(p, "recompute", None)
                                                                  or []),
                    xla=xla_bytes, budget=budget, plan_batch=lo, train=train,
                    plans=run.count, notes=notes, plan=p, target=target.to_json())


def _search(run, limit: int, bar) -> tuple:
    """(largest batch that fits or 0, smallest that does not or None):
    doubling from 1, then bisection. The total grows with the batch."""
    def fits(b):
        ok = run(b)[0]
        bar.update(1)
        bar.set_postfix_str(f"batch {b} {'fits' if ok else 'does not fit'}")
        return ok
    if not fits(1):
        return 0, 1
    lo, hi = 1, None
    while hi is None:
        b = min(lo * 2, limit)
        if b == lo:
            return lo, None
        if fits(b):
            lo = b
        else:
            hi = b
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo, hi


def default_budget(target, net) -> int:
    """The budget a GPU target gives when none is named: the part of the
    device JAX's allocator takes (``Target.pool``), less the allowance for
    a convolution workspace a deviceless compile leaves out."""
    from ..xla import has_convolution
    from .pipeline import as_graph
    if target.pool is None:
        raise PlanError("max_batch: give a budget (the CPU target has no device memory to "
                        "default to)")
    return target.pool - (target.workspace if has_convolution(as_graph(net)) else 0)


def _search_up(run, batch: int, fp: int, budget: int, limit: int, optimizer, target, bar,
               notes) -> tuple:
    """(batch, footprint): from a batch whose program fits, the largest
    whose program fits by XLA's figure -- the plans may say less than the
    program holds. The footprint grows about linearly with the batch: the
    next guess is where the line through the last two figures meets the
    budget, then bisection between the last fit and the first miss."""
    first, lo, lo_fp, hi = batch, batch, fp, None
    cand = lo + 1
    while cand <= limit:
        f = _footprint_at(run, cand, optimizer, target, bar)
        if f > budget:
            hi = cand
            break
        slope = max(1, (f - lo_fp) // (cand - lo))
        lo, lo_fp = cand, f
        cand = min(limit, max(lo + 1, lo + (budget - f) // slope))
        if lo == limit:
            break
    while hi is not None and hi - lo > 1:
        mid = (lo + hi) // 2
        f = _footprint_at(run, mid, optimizer, target, bar)
        if f <= budget:
            lo, lo_fp = mid, f
        else:
            hi = mid
    if lo != first:
        notes.append(f"XLA's figure at batch {first} leaves room: searched up to batch {lo}, "
                     f"the largest whose program fits (batch {lo + 1}'s does not)")
    return lo, lo_fp


def _footprint_at(run, batch: int, optimizer, target, bar) -> int:
    """XLA's footprint of the program a Module runs at ``batch``: its
    budgeted plan's, or, where no plan fits the budget, the plan's without
    recompute."""
    bar.set_postfix_str(f"compiling batch {batch}")
    p = run(batch)[2]
    if p is None:
        from .pipeline import plan
        p = plan(run.graph, run.at(batch), train=run.train, **run.kwargs)
    m = xla_footprint(p, optimizer, target)
    bar.update(1)
    return m


def _confirm(run, batch: int, budget: int, train: bool, optimizer, bar, notes,
             target=None) -> tuple:
    """(batch, XLA's footprint there): the batch stepped down while the
    compiled program's footprint is above the budget."""
    first = batch
    while True:
        bar.set_postfix_str(f"compiling batch {batch}")
        m = xla_footprint(run(batch)[2], optimizer, target)
        bar.update(1)
        if m is None or m <= budget:
            if batch != first:
                notes.append(f"XLA's figure at batch {first} is above the budget: stepped "
                             f"down to batch {batch}")
            if m is None:
                notes.append("the backend gives no memory_analysis(): not confirmed")
            return batch, m
        if batch == 1:
            raise _budget_error(f"max-batch: the plan fits at batch 1 but XLA's program "
                                f"needs {m:,} bytes, above the budget of {budget:,} bytes",
                                budget, m)
        # the footprint is about linear in the batch: jump near the fit, at least one down
        batch = max(1, min(batch - 1, batch * budget // m))
        while batch > 1 and not run(batch)[0]:
            batch -= 1


def xla_footprint(plan, optimizer=None, target=None) -> int | None:
    """XLA's footprint (temp + argument + output - alias) of the program a
    Module runs for ``plan``, compiled, not run; None where the backend gives
    no figures. Training with no optimizer named compiles plain SGD (no
    state), as the plan counts none. ``target``: the device compiled for."""
    from .. import xla
    if plan.train:
        opt = _optimizer(optimizer) or _optimizer("sgd")
        step = xla.training_step(plan, optimizer=opt, target=target)
    else:
        step = xla.inference_step(plan, target=target)
    m = xla.memory(step)
    if m is None or m.get("temp") is None or m.get("argument") is None:
        return None
    return int(xla.footprint(m))
