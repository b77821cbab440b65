"""``plan()``: the whole pipeline from a network to a verified ``Plan``.

    gradient (training) -> prune -> infer -> fuse -> schedule -> liveness
        -> naive, inplace, coshare, both, lower bound, arena -> verify

Every stage is a pure function; ``Plan`` keeps each one's result (the
graph, the shapes, the fusion groups, the steps, the liveness and every
strategy's assignment) so a report, a picture or a test can look at any of
them.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from ..errors import PlanError
from ..graph import Graph
from ..passes.fuse import Fusion, fuse as fuse_pass, no_fusion
from ..passes.gradient import build_gradient_with_heads, default_wrt
from ..passes.infer import Inferred, check_shapes, infer_shapes
from ..passes.prune import prune
from ..passes.recompute import RECOMPUTE_ATTR, is_recompute
from ..passes.schedule import schedule as schedule_pass
from ..util import short_repr
from . import arena as arena_mod
from . import planner
from .liveness import Liveness, analyze, entry_nbytes
from .planner import PLACED, STRATEGIES, Assignment
from .plan_options import DEFAULT_MATCH_RANGE, PlanOptions
from .verify import StaticCheck, check_arena


def as_graph(net) -> Graph:
    """A Graph from a Symbol or a Graph."""
    if isinstance(net, Graph):
        return net
    outputs = getattr(net, "outputs", None)
    if outputs is None:
        raise PlanError(f"plan takes a Symbol or a Graph, got {type(net).__name__}")
    return Graph(outputs)


@dataclass(eq=False)
class Plan:
    """A verified memory plan and everything it was made from.

    ``internal[name]`` gives the bytes of the ``internal`` bucket under each
    strategy (``naive``, ``inplace``, ``coshare``, ``both``, ``arena``,
    ``lower_bound``); ``buckets`` the other buckets (``arguments``,
    ``gradients``, ``aux``). ``assignments[name]`` says where each tensor
    lives. ``strategy`` is the one this plan is for (``storage()``,
    ``offsets()`` and pictures use it by default).
    """

    net: str
    graph: Graph
    inferred: Inferred
    train: bool
    shapes: dict
    strategy: str
    fusion: Fusion
    steps: tuple
    live: Liveness
    assignments: dict
    lower_bound: int
    peak_step: int | None
    profile: list
    buckets: dict
    num_forward_outputs: int
    options: dict = field(default_factory=dict)
    xla: dict | None = None
    verified: bool = False
    arena_checked: list = field(default_factory=list)
    timings: dict = field(default_factory=dict)
    # plan(group2ctx=...): the plan per device (memory/devices.py's Devices)
    devices: object = None
    # a budgeted or recompute plan (memory/budget.py): the budget in bytes,
    # the recomputed forward nodes ({"name", "op", "bytes", "flops"}), the
    # FLOPs they add, the FLOPs of the plain training step, the algorithm
    budget: int | None = None
    recompute: list = field(default_factory=list)
    extra_flops: int = 0
    flops_of: tuple | None = field(default=None, repr=False)  # (graph, inferred) of the step
    algorithm: str | None = None

    # -- figures ---------------------------------------------------------------
    @property
    def internal(self) -> dict:
        d = {k: self.assignments[k].total for k in PLACED}
        d["lower_bound"] = self.lower_bound
        return {k: d[k] for k in STRATEGIES}

    @property
    def step_flops(self) -> int:
        """FLOPs of the step without recompute (the training step; the
        forward in inference), counted on first use: as long as planning."""
        cached = self.__dict__.get("_step_flops")
        if cached is None:
            from .budget import graph_flops
            g, inf = self.flops_of or (self.graph, self.inferred)
            cached = self.__dict__["_step_flops"] = graph_flops(g, inf)
        return cached

    @property
    def total(self) -> int:
        """What the device holds: arguments + gradients + aux + optimizer
        state + the internal bytes of the plan's strategy."""
        return sum(self.buckets.values()) + self.internal[self.strategy]

    def replan(self, graph: Graph, inferred: Inferred, **kw) -> "Plan":
        """``plan_graph`` of another graph (a placed, rewritten or fused form
        of this plan's): how memory.devices plans without
        importing this module back."""
        return plan_graph(graph, inferred, **kw)

    @property
    def fused_groups(self) -> list:
        """Node ids of each fused group (members in order, root last)."""
        return [list(g) for g in self.fusion.groups]

    def assignment(self, strategy: str | None = None) -> Assignment:
        strategy = strategy or self.strategy
        if strategy == "lower_bound":
            raise PlanError("lower_bound is a bound, not a plan: it places no tensor; "
                            f"choose one of {', '.join(PLACED)}")
        try:
            return self.assignments[strategy]
        except KeyError:
            raise PlanError(f"unknown strategy {strategy!r}; choose one of "
                            f"{', '.join(STRATEGIES)}") from None

    def storage(self, strategy: str | None = None) -> dict:
        """entry id -> storage slot, for every planned tensor."""
        a = self.assignment(strategy)
        return {eid: a.slot[t] for t, eid in enumerate(self.live.entry)}

    def slot_bytes(self, strategy: str | None = None) -> dict:
        """storage slot -> bytes."""
        return dict(enumerate(self.assignment(strategy).slot_size))

    def offsets(self, strategy: str | None = None) -> dict:
        """entry id -> byte offset in the strategy's address space."""
        a = self.assignment(strategy)
        return {eid: a.offset[t] for t, eid in enumerate(self.live.entry)}

    def footprint(self, strategy: str | None = None) -> list:
        """Bytes in use at each step under a strategy (``lower_bound``: the
        live bytes less the inplace savings, the profile the bound is the
        maximum of)."""
        if (strategy or self.strategy) == "lower_bound":
            return list(self.profile)
        return planner.footprint(self.live, self.assignment(strategy))

    def peak_tensors(self) -> list:
        """(name, shape, dtype, bytes) of the tensors live at the peak step of
        the lower bound, largest first."""
        if self.peak_step is None:
            return []
        live = self.live
        rows = []
        for t in live.live_at(self.peak_step):
            eid = live.entry[t]
            rows.append((live.tensor_name(t), self.inferred.shapes[eid],
                         self.inferred.dtypes[eid], live.nbytes[t]))
        rows.sort(key=lambda r: (-r[3], r[0]))
        return rows

    # -- checks ------------------------------------------------------------------
    def check_arena(self, strategy: str | None = None, feeds=None, key=None):
        """Runs the arena interpreter for a strategy against the plain
        lowering (two random input seeds, or ``feeds``); PlanError if any
        output differs, else an ``arena.ArenaCheck`` saying what was run
        and compared (its repr is that sentence)."""
        name = strategy or self.strategy
        a = self.assignment(name)
        t = time.perf_counter()
        seeds = (0, 1)
        check_arena(self.live, a.offset, a.total, self.train, feeds=feeds, key=key, name=name,
                    seeds=seeds)
        if name not in self.arena_checked:
            self.arena_checked.append(name)
        return arena_mod.ArenaCheck(name, self.train, self.live.num_steps,
                                    self.live.num_tensors, a.total,
                                    self.live.graph.list_outputs(),
                                    None if feeds is not None else seeds,
                                    time.perf_counter() - t)

    # -- output --------------------------------------------------------------------
    def report(self) -> str:
        """The human-readable report (buckets, strategies, the peak)."""
        from .report import report_text
        return report_text(self)

    def to_json(self) -> dict:
        """The ``symgraph plan --json`` dictionary."""
        from .report import report_json
        return report_json(self)

    def __repr__(self) -> str:
        mib = self.internal[self.strategy] / 2 ** 20
        return (f"<Plan {self.net} {'train' if self.train else 'infer'}: {self.strategy} "
                f"{mib:.1f} MiB internal, lower bound {self.lower_bound / 2 ** 20:.1f} MiB>")


def _var_bytes(graph: Graph, inf: Inferred, nodes) -> int:
    return sum(entry_nbytes(inf, graph.entry_id_of_node(n)) for n in nodes)


def build_graph(net, shapes: dict, train: bool, dtypes=None, outputs=None, wrt=None,
                data_names=None, label_names=None, origin: dict | None = None):
    """(planned graph, inferred shapes, number of forward outputs, gradient
    entry ids): the forward graph pruned to ``outputs``, with the parameter
    gradients appended when training (``origin``, if given, gets backward
    node -> forward node from the gradient pass)."""
    g = as_graph(net)
    if outputs is not None:
        g = prune(g, outputs)
    shapes = dict(shapes or {})
    n_fwd = len(g.outputs)
    if not train:
        return g, infer_shapes(g, shapes, dtypes), n_fwd, []
    if wrt is None:
        wrt = default_wrt(g, data_names, label_names)
    if not wrt:
        raise PlanError("training plan: the network has no parameters to take gradients "
                        "of (every argument is data or a label)")
    full, heads = build_gradient_with_heads(g, wrt, origin)
    gg = prune(full)
    known = dict(shapes)
    types = dict(dtypes or {})
    live = {n.name for n in gg.variables}
    heads = [(name, i) for name, i in heads if name in live]
    if heads:
        # head gradients have the shapes and dtypes of the outputs they belong to
        fwd_inf = infer_shapes(g, shapes, dtypes)
        for name, i in heads:
            known[name] = fwd_inf.shape(g.outputs[i])
            types.setdefault(name, fwd_inf.dtype(g.outputs[i]))
    inf = infer_shapes(gg, known, types or None)
    grads = [gg.entry_id(e) for e in gg.outputs[n_fwd:]]
    return gg, inf, n_fwd, grads


def plan(net, shapes: dict | None = None, train: bool = False, strategy: str = "arena",
         dtypes: dict | None = None, *, outputs=None, wrt=None, data_names=None,
         label_names=None, fuse: bool = True, schedule="dfs",
         match_range: int = DEFAULT_MATCH_RANGE, parallel_safe: bool = True,
         verify: bool = True, execute: bool = False,
         name: str | None = None, group2ctx=None, budget=None, optimizer=None,
         recompute=None, mirror: bool = False, layout: str | None = None,
         compute_dtype: str | None = None) -> Plan:
    """Plans the memory of ``net`` (a Symbol or Graph) for input ``shapes``.

    train: plan the training graph (forward + the gradients of ``wrt``,
        default every argument except ``data_names`` (default 'data') and
        ``label_names`` (default: names ending in 'label')).
    strategy: the plan wanted (all are computed for the report): naive,
        inplace, coshare, both or arena.
    outputs: plan only for these outputs (indices, names, internal outputs
        such as 'relu1_output'); the rest is pruned.
    fuse: fuse elementwise chains (tensors inside a group need no storage).
    schedule: 'dfs' (the graph's order, as MXNet), 'memory' (memory-aware)
        or a function ``(graph, fusion) -> steps``.
    match_range: co-share's size match range (MXNet's NNVM_EXEC_MATCH_RANGE).
    parallel_safe: keep ops that could run in parallel from sharing storage
        (inplace, coshare, both).
    verify: run the static overlap check on every strategy (on by default;
        a plan is only reported verified). execute: also run the arena
        interpreter for every strategy (needs real arrays: small shapes).
    XLA's figures for the program a Module runs for the net are
    ``symgraph.xla.plan_memory(plan)`` (memory never imports xla);
    ``sg.plan(..., target=)`` is this plan with them (``xla.plan_on``).
    group2ctx: ctx_group name -> device (``sg.cpu(1)`` or 'cpu:1'): also plan
        each device's part (``Plan.devices``, memory/devices.py); the
        devices need not exist on this machine.
    budget: bytes, or text such as '6GiB', '512MiB', '6GB' (6e9): the plan
        drops forward tensors and recomputes them in the backward so that
        ``plan.total`` (arguments + gradients + aux + optimizer + internal)
        fits, with the least extra FLOPs on the algorithm's frontier
        (``memory/budget.py``); BudgetError (naming the smallest total
        reachable) when nothing fits. Training only.
    optimizer: None/'sgd', 'momentum', 'nag', 'adam', 'adamw', 'rmsprop':
        its state (``buckets['optimizer']``) counts in the total.
    recompute: None or 'auto' (the solver when a budget is given, else no
        recompute), 'none', 'mirror', 'sqrt', 'solver', or a list of forward
        node names; ``mirror=True`` is ``recompute='mirror'``. Without a
        budget the algorithm's own set is planned (solver: least memory).
    layout: None or 'NCHW' (the net as it is), or 'NHWC': plan the graph
        ``passes.layout.to_channels_last`` makes -- activations
        channels-last between the convolutions, the transposes XLA runs
        for the ``channels_last`` memory measure planned as tensors.
    compute_dtype: None (the net's dtypes), or 'bfloat16', 'float16', ...:
        plan the net as a Module with that ``compute_dtype`` runs it -- its
        float inputs (parameters, data; not labels) kept in their dtypes
        and cast down inside (``passes.cast``): the casts' outputs are
        planned tensors, the activations and aux states in
        ``compute_dtype``, the gradients in the parameters' dtype.
    """
    _check_arguments(outputs, dtypes)
    options = PlanOptions.of(train, strategy, outputs=outputs, wrt=wrt,
                             data_names=data_names, label_names=label_names, fuse=fuse,
                             schedule=schedule, match_range=match_range,
                             parallel_safe=parallel_safe, verify=verify, execute=execute,
                             name=name, group2ctx=group2ctx, budget=budget,
                             optimizer=optimizer, recompute=recompute, mirror=mirror,
                             layout=layout, compute_dtype=compute_dtype)
    return plan_with_options(net, shapes, options, dtypes)


def _check_arguments(outputs, dtypes) -> None:
    """PlanError for ``outputs`` or ``dtypes`` of the wrong kind, before any
    work: one name as ``outputs`` would be read letter by letter, and a
    dtype no array has would fail deep in inference."""
    if outputs is not None and not isinstance(outputs, (list, tuple)):
        raise PlanError(f"outputs must be a list of output indices or names (such as "
                        f"['fc1_output']), got {type(outputs).__name__} {short_repr(outputs)}")
    if dtypes is None:
        return
    if not isinstance(dtypes, dict):
        raise PlanError(f"dtypes must be a dict of input name -> dtype (such as "
                        f"{{'data': 'float16'}}), got {type(dtypes).__name__} "
                        f"{short_repr(dtypes)}")
    from ..dtypes import to_dtype
    for name, v in dtypes.items():
        if v is None:
            continue  # unknown, as a None shape
        try:
            dt = to_dtype(v, error=PlanError)
        except PlanError as err:
            raise PlanError(f"dtypes[{short_repr(name)}]: {err}") from None
        # numbers and bool, and ml_dtypes' (bfloat16, float8): what arrays hold
        if dt.kind not in "biufc" and not dt.type.__module__.startswith("ml_dtypes"):
            raise PlanError(f"dtypes[{short_repr(name)}]: {dt.name} is no array dtype; use "
                            f"e.g. float32, float16, int32")


def plan_with_options(net, shapes: dict | None, options: PlanOptions,
                      dtypes: dict | None = None) -> Plan:
    """``plan()`` with its options as one value (``PlanOptions.of``)."""
    from . import budget as budget_mod
    shapes = check_shapes(shapes)  # checked once, here: the report shows them
    t0 = time.perf_counter()
    origin: dict = {}  # backward node -> forward node: where group2ctx places it
    outputs, given = options.outputs, shapes
    if options.compute_dtype is not None:
        net, given, dtypes = in_compute_dtype(net, shapes, dtypes, outputs,
                                              options.compute_dtype, options.label_names)
        outputs = None
    if options.layout == "NHWC":
        net, outputs = channels_last(net, given, dtypes, outputs), None
    g, inf, n_fwd, grads = build_graph(net, given, options.train, dtypes, outputs,
                                       options.wrt, options.data_names, options.label_names,
                                       origin)
    timings = {"graph": time.perf_counter() - t0}
    opt_bytes = budget_mod.optimizer_bytes(sum(entry_nbytes(inf, e) for e in grads),
                                           options.optimizer)
    if options.recomputes:
        stages, rows, extra = _recompute_stages(g, inf, n_fwd, grads, opt_bytes,
                                                options)
    else:
        stages = _stages(g, inf, num_forward_outputs=n_fwd, external=grads,
                         **options.stage_options)
        rows, extra = [], 0
    stage_options, buckets, stage_timings = (stages.pop("options"), stages.pop("buckets"),
                                             stages.pop("timings"))
    result = Plan(net=options.name or _net_name(g), train=options.train,
                  shapes=dict(shapes or {}),
                  **stages, options={**stage_options, "layout": options.layout,
                                     "compute_dtype": options.compute_dtype},
                  buckets={**buckets, "optimizer": opt_bytes}, budget=options.budget,
                  recompute=rows, extra_flops=extra, flops_of=(g, inf),
                  algorithm=options.plan_algorithm,
                  timings={**timings, **stage_timings, "total": time.perf_counter() - t0})
    if options.group2ctx is not None:
        from .devices import plan_devices
        result = replace(result, devices=plan_devices(result, options.group2ctx, origin,
                                                       verify=options.verify,
                                                       execute=options.execute))
    if options.execute:
        for s in PLACED:
            result.check_arena(s)
    return result


def _recompute_stages(g: Graph, inf: Inferred, n_fwd: int, grads: list, opt_bytes: int,
                      opts: PlanOptions) -> tuple:
    """(``_stages`` of the graph that recomputes, the recompute rows, the
    FLOPs they add) for a budget or recompute set; BudgetError where the
    total is over the budget."""
    from . import budget as budget_mod
    strategy = opts.strategy
    problem = budget_mod.Problem(g, inf, n_fwd, strategy=strategy, fuse=opts.fuse,
                                 schedule=opts.schedule, match_range=opts.match_range,
                                 parallel_safe=opts.parallel_safe)
    fixed = (_var_bytes(g, inf, g.arguments) + sum(entry_nbytes(inf, e) for e in grads)
             + _var_bytes(g, inf, g.aux_states) + opt_bytes)
    point = None
    if opts.explicit is not None:
        names = list(opts.explicit)
    elif opts.algorithm is not None:
        point = budget_mod.choose(problem, opts.algorithm, opts.budget, fixed)
        names = point.names
    else:
        names = ()  # recompute='none' under a budget
    r, rinf = problem.rewritten(names)
    stages = _stages(r, rinf, num_forward_outputs=n_fwd,
                     external=[r.entry_id(e) for e in r.outputs[n_fwd:]], **opts.stage_options)
    internal = stages["assignments"][strategy].total
    if point is not None and internal != point.internal:
        raise PlanError(f"planner bug: the frontier's {strategy} figure "
                        f"{point.internal} is not the plan's {internal}")
    cloned = {n.attrs[RECOMPUTE_ATTR] for n in r.nodes if is_recompute(n)}
    kept = [n.name for n in problem.fwd if n.name in cloned]
    total = fixed + internal
    if opts.budget is not None and total > opts.budget:
        how = "with the recompute set given" if opts.explicit is not None else \
            "without recompute"
        raise budget_mod.BudgetError(
            f"budget {budget_mod.fmt_bytes(opts.budget)} is below the total "
            f"{how}, {budget_mod.fmt_bytes(total)}", budget=opts.budget, smallest=total)
    return stages, budget_mod.recompute_rows(problem, kept), sum(problem.flops[x] for x in kept)



def channels_last(net, shapes: dict, dtypes=None, outputs=None) -> Graph:
    """The forward graph of ``net`` (pruned to ``outputs``) rewritten
    channels-last (``passes.layout``): same variables, same outputs, the
    transposes explicit; the gradient pass then adds their gradients
    (transposes too)."""
    from ..passes.layout import to_channels_last
    g = as_graph(net)
    if outputs is not None:
        g = prune(g, outputs)
    return to_channels_last(g, inferred=infer_shapes(g, dict(shapes or {}), dtypes))


def in_compute_dtype(net, shapes: dict, dtypes=None, outputs=None, compute_dtype="bfloat16",
                     label_names=None) -> tuple:
    """(the forward graph of ``net``, pruned to ``outputs``, reading its float
    inputs but the labels through casts to ``compute_dtype`` -- as a Module
    computing in it runs --, the shapes and dtypes its inference needs:
    every variable's, the shapes as given)."""
    from ..passes.cast import compute_in, variable_types
    from ..passes.gradient import is_label
    g = as_graph(net)
    if outputs is not None:
        g = prune(g, outputs)
    inf = infer_shapes(g, dict(shapes or {}), dtypes)
    labels = [n for n in g.list_arguments() if is_label(n, label_names)]
    known, dtypes = variable_types(g, inf, compute_dtype)
    return compute_in(g, compute_dtype, inf, labels), {**known, **(shapes or {})}, dtypes


def _net_name(g: Graph) -> str:
    return g.outputs[0].node.name


def plan_graph(g: Graph, inf: Inferred, *, train: bool, strategy: str = "arena",
               num_forward_outputs: int | None = None, external=(), fuse: bool = True,
               schedule="dfs", match_range: int = DEFAULT_MATCH_RANGE,
               parallel_safe: bool = True, verify: bool = True, name: str = "net",
               shapes: dict | None = None) -> Plan:
    """The planning stages proper, for a graph whose shapes are inferred:
    fuse, schedule, liveness, every strategy, verification."""
    return Plan(net=name, train=train, shapes=dict(shapes or {}),
                **_stages(g, inf, num_forward_outputs=num_forward_outputs, external=external,
                          strategy=strategy, fuse=fuse, schedule=schedule,
                          match_range=match_range, parallel_safe=parallel_safe,
                          verify=verify))


def _stages(g: Graph, inf: Inferred, *, num_forward_outputs: int | None, external,
            strategy: str, fuse: bool, schedule, match_range: int, parallel_safe: bool,
            verify: bool) -> dict:
    """``Plan``'s fields from the planning stages (all but ``net``,
    ``train``, ``shapes`` and what ``plan()`` adds)."""
    timings = {}
    t = time.perf_counter()
    fusion = fuse_pass(g) if fuse else no_fusion(g)
    timings["fuse"] = (t2 := time.perf_counter()) - t
    steps = schedule_pass(g, fusion, schedule, nbytes=lambda eid: entry_nbytes(inf, eid))
    timings["schedule"] = (t3 := time.perf_counter()) - t2
    live = analyze(g, inf, fusion, steps, external)
    timings["liveness"] = (t4 := time.perf_counter()) - t3
    a = planner.pool_plans(live, match_range, parallel_safe)
    lb, peak, profile = planner.lower_bound(live)
    a["arena"] = arena_mod.arena_plan(live, lb, fallback=a["both"])
    timings["strategies"] = (t5 := time.perf_counter()) - t4
    if verify:
        StaticCheck(live).check_assignments(a)
        _check_order(a, lb)
    timings["verify"] = time.perf_counter() - t5
    var_bytes = {
        "arguments": _var_bytes(g, inf, g.arguments),
        "gradients": sum(entry_nbytes(inf, eid) for eid in external),
        "aux": _var_bytes(g, inf, g.aux_states),
        "optimizer": 0,  # plan() counts it when an optimizer is named
    }
    n_fwd = len(g.outputs) if num_forward_outputs is None else num_forward_outputs
    return dict(graph=g, inferred=inf, strategy=strategy, fusion=fusion, steps=steps,
                live=live, assignments=a, lower_bound=lb, peak_step=peak, profile=profile,
                buckets=var_bytes, num_forward_outputs=n_fwd,
                options={"fuse": fuse, "schedule": schedule if isinstance(schedule, str)
                         else getattr(schedule, "__name__", "custom"),
                         "match_range": match_range, "parallel_safe": parallel_safe},
                verified=verify, timings=timings)


def _check_order(a: dict, lb: int) -> None:
    """The orderings every plan must satisfy; a failure is a planner bug."""
    naive = a["naive"].total
    checks = [("lower_bound", lb, "arena", a["arena"].total),
              ("arena", a["arena"].total, "both", a["both"].total),
              ("both", a["both"].total, "naive", naive),
              ("inplace", a["inplace"].total, "naive", naive),
              ("coshare", a["coshare"].total, "naive", naive)]
    for n1, v1, n2, v2 in checks:
        if v1 > v2:
            raise PlanError(f"planner bug: {n1} ({v1} bytes) above {n2} ({v2} bytes)")
