"""``PlanOptions``: what ``sg.plan()`` is asked for, as one checked value.

``plan()`` keeps its keyword arguments (``sg.plan(net, shapes, train=True,
budget='6GiB')``) and builds a ``PlanOptions`` from them first, so a bad
option fails before any planning and the pipeline reads one value.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import PlanError
from ..passes.cast import COMPUTE_DTYPES
from .planner import PLACED

DEFAULT_MATCH_RANGE = 16
LAYOUTS = (None, "NCHW", "NHWC")


@dataclass(frozen=True)
class PlanOptions:
    """What ``plan()`` is asked for, checked once: ``PlanOptions.of`` takes
    plan()'s keyword arguments (see plan() for each). The graph planned
    (``train``, ``outputs``, ``wrt``, ``data_names``, ``label_names``,
    ``layout``), how (``strategy``, ``fuse``, ``schedule``, ``match_range``,
    ``parallel_safe``, ``verify``, ``execute``), what is recomputed
    (``budget`` in bytes, ``optimizer``, the recompute ``algorithm`` or the
    ``explicit`` forward node names), ``name``, ``group2ctx`` and the
    ``compute_dtype`` (None: the net's own dtypes)."""

    train: bool = False
    strategy: str = "arena"
    outputs: object = None
    wrt: object = None
    data_names: object = None
    label_names: object = None
    layout: str = "NCHW"
    fuse: bool = True
    schedule: object = "dfs"
    match_range: int = DEFAULT_MATCH_RANGE
    parallel_safe: bool = True
    verify: bool = True
    execute: bool = False
    name: str | None = None
    group2ctx: object = None
    budget: int | None = None
    optimizer: str | None = None
    algorithm: str | None = None
    explicit: tuple | None = None
    compute_dtype: str | None = None

    @classmethod
    def of(cls, train: bool = False, strategy: str = "arena", *, outputs=None, wrt=None,
           data_names=None, label_names=None, fuse: bool = True, schedule="dfs",
           match_range: int = DEFAULT_MATCH_RANGE, parallel_safe: bool = True,
           verify: bool = True, execute: bool = False, name: str | None = None,
           group2ctx=None, budget=None, optimizer=None, recompute=None,
           mirror: bool = False, layout: str | None = None,
           compute_dtype: str | None = None) -> "PlanOptions":
        """The options from plan()'s keyword arguments; PlanError (BudgetError
        for a malformed budget) for one plan() does not take."""
        if layout not in LAYOUTS:
            raise PlanError(f"layout={layout!r}; use one of {', '.join(map(str, LAYOUTS))}")
        if strategy not in PLACED:
            if strategy == "lower_bound":
                raise PlanError("lower_bound is a bound, not a plan; choose one of "
                                + ", ".join(PLACED))
            raise PlanError(f"unknown strategy {strategy!r}; choose one of "
                            f"{', '.join(PLACED)}")
        if compute_dtype is not None and compute_dtype not in COMPUTE_DTYPES:
            raise PlanError(f"compute_dtype={compute_dtype!r}; use one of "
                            f"{', '.join(COMPUTE_DTYPES)}")
        from .budget import parse_budget
        algorithm, explicit = _recompute_choice(recompute, mirror, budget)
        budget_bytes = None if budget is None else parse_budget(budget)
        if not train and (budget is not None or algorithm is not None or explicit is not None
                          or optimizer is not None):
            what = ("a budget" if budget is not None else
                    "optimizer state" if optimizer is not None else "recompute")
            raise PlanError(f"{what} needs a training plan (train=True): an inference plan "
                            f"has no backward to recompute in")
        return cls(train=train, strategy=strategy, outputs=outputs, wrt=wrt,
                   data_names=data_names, label_names=label_names, layout=layout or "NCHW",
                   fuse=fuse, schedule=schedule, match_range=match_range,
                   parallel_safe=parallel_safe, verify=verify, execute=execute, name=name,
                   group2ctx=group2ctx, budget=budget_bytes, optimizer=optimizer,
                   algorithm=algorithm,
                   explicit=None if explicit is None else tuple(explicit),
                   # as the Module: float32 and float64 cast nothing
                   compute_dtype=None if compute_dtype in ("float32", "float64")
                   else compute_dtype)

    @property
    def recomputes(self) -> bool:
        """Whether the plan goes through the recompute problem (a budget or
        a recompute set/algorithm), even if it recomputes nothing."""
        return self.budget is not None or self.algorithm is not None or \
            self.explicit is not None

    @property
    def plan_algorithm(self) -> str | None:
        """``Plan.algorithm``: 'explicit' for named nodes, 'none' for a
        budget without recompute, else the algorithm (None: no recompute)."""
        if self.explicit is not None:
            return "explicit"
        if self.algorithm is None and self.budget is not None:
            return "none"
        return self.algorithm

    @property
    def stage_options(self) -> dict:
        """The keyword arguments of the planning stages (``plan_graph``)."""
        return dict(strategy=self.strategy, fuse=self.fuse, schedule=self.schedule,
                    match_range=self.match_range, parallel_safe=self.parallel_safe,
                    verify=self.verify)


def _recompute_choice(recompute, mirror: bool, budget):
    """(algorithm or None, explicit node names or None) from plan()'s
    ``recompute`` and ``mirror``."""
    from .budget import ALGORITHMS
    if mirror:
        if recompute not in (None, "auto", "mirror"):
            raise PlanError(f"mirror=True is recompute='mirror'; it cannot go with "
                            f"recompute={recompute!r}")
        return "mirror", None
    if recompute is None or recompute == "auto":
        return ("solver" if budget is not None else None), None
    if recompute == "none":
        return None, None
    if isinstance(recompute, str):
        if recompute in ALGORITHMS:
            return recompute, None
        raise PlanError(f"recompute={recompute!r}: choose auto, none, "
                        f"{', '.join(ALGORITHMS)} or a list of forward node names")
    if isinstance(recompute, (list, tuple, set, frozenset)) and all(
            isinstance(x, str) for x in recompute):
        return None, list(recompute)
    raise PlanError(f"recompute={recompute!r}: choose auto, none, {', '.join(ALGORITHMS)} "
                    f"or a list of forward node names")
