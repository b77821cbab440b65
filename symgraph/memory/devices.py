"""A memory plan per device, and a proposed split of a net over N devices.

``plan_devices(plan, group2ctx, origin)`` places the planned graph
(``passes/place.py``: each ctx_group on its device, backward nodes with
their forward nodes, a ``_CrossDeviceCopy`` on every edge between devices),
plans the placed graph as one schedule -- the order one step runs in --
then keeps, for each device, only the tensors that live there and runs
every strategy, the lower bound and the static check on that part alone.
A copy is counted on both sides: the tensor it reads stays alive on the
sending device until the copy step, its output is a new tensor on the
receiving device. Arguments and aux states count where their variable is
placed, gradients where the node writing them runs.

``propose_split(net, shapes, n)`` cuts the forward ops' topological order
into n contiguous stages and moves each cut (bisection) until the largest
per-device total (arguments + gradients + aux + internal) is as small as
it gets, as Mariana splits a CNN inside a worker group.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..context import Context
from ..errors import PlanError
from ..graph import Graph
from ..passes.infer import infer_shapes
from ..passes.place import COPY_OP, GROUP_KEY, contiguous_groups, place, with_groups
from . import arena as arena_mod
from . import planner
from .liveness import NOSTORE, Liveness, entry_nbytes
from .planner import PLACED, STRATEGIES
from .verify import StaticCheck


@dataclass(eq=False)
class DevicePlan:
    """The plan of one device: ``buckets`` (arguments, gradients, aux),
    ``internal`` bytes under every strategy, ``copies`` (bytes and count
    received and sent), the restricted ``live`` and its ``assignments``."""

    device: str
    groups: list
    num_ops: int
    buckets: dict
    internal: dict
    copies: dict
    live: Liveness
    assignments: dict
    strategy: str
    verified: bool = False
    arena_checked: list = field(default_factory=list)

    def check_arena(self, strategy: str | None = None, train: bool = True) -> None:
        """Runs the arena interpreter with this device's tensors at their
        planned offsets in one buffer (the other devices' values held
        apart) against the plain lowering; PlanError if anything differs."""
        from .verify import check_arena
        name = strategy or self.strategy
        a = self.assignments[name]
        check_arena(self.live, a.offset, a.total, train, name=f"{self.device} {name}")
        if name not in self.arena_checked:
            self.arena_checked.append(name)

    @property
    def total(self) -> int:
        """Bytes this device holds at its peak under the plan's strategy."""
        return sum(self.buckets.values()) + self.internal[self.strategy]

    def to_json(self) -> dict:
        if not self.verified:
            raise ValueError("an unverified plan is never reported")
        return {"device": self.device, "groups": list(self.groups),
                "ops": self.num_ops,
                "bytes": {**{k: int(v) for k, v in self.buckets.items()},
                          "internal": {k: int(v) for k, v in self.internal.items()}},
                "copies": {k: int(v) for k, v in self.copies.items()},
                "total": int(self.total), "verified": True}


def restrict(live: Liveness, keep) -> Liveness:
    """``live`` with only the tensors in ``keep`` (tensor ids); the steps
    stay (time is the whole schedule's), the other tensors vanish."""
    keep = sorted(set(keep))
    new = {t: i for i, t in enumerate(keep)}
    kind = list(live.kind)
    tensor_of = [-1] * len(live.tensor_of)
    for eid, t in enumerate(live.tensor_of):
        if t >= 0:
            if t in new:
                tensor_of[eid] = new[t]
            else:
                kind[eid] = NOSTORE

    def per_tensor(xs):
        return [xs[t] for t in keep]

    def per_step(lists):
        return [[new[t] for t in ts if t in new] for ts in lists]
    pairs = [tuple((new[x], new[o]) for x, o in ps if x in new and o in new) for ps in live.pairs]
    return Liveness(live.graph, live.inferred, live.fusion, live.steps, kind, tensor_of,
                    per_tensor(live.entry), per_tensor(live.nbytes), per_tensor(live.first),
                    per_tensor(live.last), per_tensor(live.readers), per_tensor(live.pinned),
                    per_step(live.step_in), per_step(live.step_out), per_step(live.dies),
                    pairs, live.anc_base, live.anc_bits, live.in_eids, live.reach,
                    per_tensor(live.until))


def strategies(live: Liveness, match_range: int, parallel_safe: bool, verify: bool) -> tuple:
    """(assignment per strategy, lower bound) for one liveness, as
    ``pipeline.plan_graph`` computes them (through ``Plan.replan``); every plan statically checked."""
    a = planner.pool_plans(live, match_range, parallel_safe)
    lb = planner.lower_bound(live)[0]
    a["arena"] = arena_mod.arena_plan(live, lb, fallback=a["both"])
    if verify:
        StaticCheck(live).check_assignments(a)
    return a, lb


def default_device(group2ctx: dict):
    """Where nodes no group places run: device 0 of the first group's kind."""
    first = next(iter(group2ctx.values()), None)
    return Context(first.device_type, 0) if isinstance(first, Context) else "default"


@dataclass(eq=False)
class Devices:
    """The placed plan: ``placement`` (the graph with its copies),
    ``whole`` (the placed graph planned as one, its schedule the devices
    share) and one ``DevicePlan`` per device that runs anything."""

    placement: object
    whole: object
    plans: list = field(default_factory=list)

    @property
    def peak(self) -> int:
        return max(d.total for d in self.plans)

    def to_json(self) -> list:
        return [d.to_json() for d in self.plans]

    def text(self, strategy: str, one_device: int | None = None) -> str:
        """The per-device table of a report (MiB); ``one_device``: the
        unsplit plan's total, for the ratio column."""
        mib = 2 ** 20
        head = (f"  {'device':<10}{'groups':<18}{'ops':>5}{'arguments':>11}{'gradients':>11}"
                f"{'aux':>8}{'internal':>11}{'copies in/out':>16}{'total':>11}")
        lines = [f"per device (MiB; internal: {strategy}; copies counted on both sides)",
                 head + ("  vs one device" if one_device else "")]
        for d in self.plans:
            b = d.buckets
            row = (f"  {d.device:<10}{','.join(d.groups)[:17]:<18}{d.num_ops:>5}"
                   f"{b['arguments'] / mib:>11,.1f}{b['gradients'] / mib:>11,.1f}"
                   f"{b['aux'] / mib:>8,.1f}{d.internal[strategy] / mib:>11,.1f}"
                   f"{d.copies['in_bytes'] / mib:>8,.1f}/{d.copies['out_bytes'] / mib:<7,.1f}"
                   f"{d.total / mib:>11,.1f}")
            if one_device:
                row += f"  {d.total / one_device:>12.3f}x"
            lines.append(row)
        ran = all(d.arena_checked for d in self.plans)
        lines.append(f"  every device's plan verified (static check"
                     f"{'; arena interpreter' if ran else ''}, {len(self.plans)} devices)")
        return "\n".join(lines)


def plan_devices(plan, group2ctx: dict, origin: dict, default=None, verify: bool = True,
                 execute: bool = False) -> Devices:
    """Per-device plans of a ``Plan`` (``origin``: backward node -> forward
    node, from the gradient pass) placed by ``group2ctx``; ``execute``: also
    run the arena interpreter for every device and strategy (small shapes)."""
    from ..parallel.placement import resolve_group2ctx
    g = plan.graph
    group2ctx = resolve_group2ctx(g, group2ctx, check_devices=False)
    default = default_device(group2ctx) if default is None else default
    pl = place(g, group2ctx, default, origin)
    pg = pl.graph
    inf = plan.inferred
    var_shapes, var_types = {}, {}
    for n in g.variables:
        eid = g.entry_id_of_node(n)
        var_shapes[n.name], var_types[n.name] = inf.shapes[eid], inf.dtypes[eid]
    pinf = infer_shapes(pg, var_shapes, var_types)
    n_fwd = plan.num_forward_outputs
    grads = [pg.entry_id(e) for e in pg.outputs[n_fwd:]] if plan.train else []
    opts = plan.options
    whole = plan.replan(pg, pinf, train=plan.train, strategy=plan.strategy,
                        num_forward_outputs=n_fwd, external=grads, fuse=opts["fuse"],
                        schedule=opts["schedule"], match_range=opts["match_range"],
                        parallel_safe=opts["parallel_safe"], verify=verify,
                        name=plan.net, shapes=plan.shapes)
    live = whole.live
    dev_of_node = [pl.device[n.name] for n in pg.nodes]
    for grp in whole.fusion.groups:  # copies are opaque: a fused group never crosses
        if len({dev_of_node[m] for m in grp}) > 1:
            raise PlanError(f"placement bug: fused group of '{pg.nodes[grp[-1]].name}' "
                            f"spans devices")
    rp = pg.row_ptr
    node_of_entry = [0] * pg.num_entries
    for nid in range(len(pg.nodes)):
        for k in range(rp[nid], rp[nid + 1]):
            node_of_entry[k] = nid
    tensor_dev = [dev_of_node[node_of_entry[eid]] for eid in live.entry]
    n_dev = len(pl.devices)
    buckets = [{"arguments": 0, "gradients": 0, "aux": 0} for _ in range(n_dev)]
    for n in pg.arguments:
        buckets[pl.device[n.name]]["arguments"] += entry_nbytes(pinf, pg.entry_id_of_node(n))
    for n in pg.aux_states:
        buckets[pl.device[n.name]]["aux"] += entry_nbytes(pinf, pg.entry_id_of_node(n))
    for eid in grads:
        buckets[dev_of_node[node_of_entry[eid]]]["gradients"] += entry_nbytes(pinf, eid)
    opt = plan.buckets.get("optimizer")
    if opt is not None:  # optimizer state sits beside each gradient: split as they are
        total_grads = sum(b["gradients"] for b in buckets) or 1
        for b in buckets:
            b["optimizer"] = opt * b["gradients"] // total_grads
        buckets[max(range(n_dev), key=lambda d: buckets[d]["gradients"])]["optimizer"] += \
            opt - sum(b["optimizer"] for b in buckets)
    copies = [{"in_bytes": 0, "in_count": 0, "out_bytes": 0, "out_count": 0}
              for _ in range(n_dev)]
    for n in pg.nodes:
        if n.op is None or n.op.name != COPY_OP:
            continue
        nb = entry_nbytes(pinf, pg.entry_id(n.inputs[0]))
        c_in, c_out = copies[pl.device[n.name]], copies[pl.device[n.inputs[0].node.name]]
        c_in["in_bytes"] += nb
        c_in["in_count"] += 1
        c_out["out_bytes"] += nb
        c_out["out_count"] += 1
    groups: list = [[] for _ in range(n_dev)]
    for grp_name, ctx in group2ctx.items():
        groups[pl.devices.index(ctx)].append(grp_name)
    ops = [0] * n_dev
    for n in pg.nodes:
        if n.op is not None:
            ops[pl.device[n.name]] += 1
    out = Devices(pl, whole)
    for d in range(n_dev):
        if not ops[d] and not any(buckets[d].values()):
            continue  # the default device when every node has a group
        sub = restrict(live, [t for t, td in enumerate(tensor_dev) if td == d])
        a, lb = strategies(sub, opts["match_range"], opts["parallel_safe"], verify)
        internal = {k: a[k].total for k in PLACED}
        internal["lower_bound"] = lb
        out.plans.append(DevicePlan(str(pl.devices[d]), groups[d], ops[d], buckets[d],
                                    {k: internal[k] for k in STRATEGIES}, copies[d], sub, a,
                                    plan.strategy, verified=verify))
        if execute:
            for s in PLACED:
                out.plans[-1].check_arena(s, plan.train)
    return out


def _grouped_graph(g: Graph, fwd: Graph, cuts, names) -> Graph:
    """The training graph ``g`` with the forward graph ``fwd``'s nodes in
    the contiguous stages ``cuts``; every other group attribute removed."""
    grp = contiguous_groups(fwd, cuts, names)
    return with_groups(g, {n.name: grp.get(n.name) for n in g.nodes})


@dataclass(eq=False)
class Split:
    """A proposed split: ``cuts`` (op indices in the forward order),
    ``groups`` (node name -> stage name), ``group2ctx``, the per-device
    plans, and ``one_device`` (the total of the unsplit plan)."""

    cuts: list
    groups: dict
    group2ctx: dict
    devices: Devices
    one_device: int
    evaluations: int
    forward: Graph | None = None
    # a batch split (memory/split.py): {"ops": k, "first", "last": op names,
    # "shares": samples per device, "batch"}; ``forward`` is then the
    # rewritten graph and ``cut_names`` name the cuts of the rest
    batch: dict | None = None
    cut_names: list | None = None

    def graph(self) -> Graph:
        """The forward net with the proposed ``__ctx_group__`` attributes (a
        Graph: memory sits below the Symbol API, ``Symbol(g.outputs)`` wraps it)."""
        return forward_groups_graph(self.forward, self.groups)

    @property
    def cut_after(self) -> list:
        """The last forward op of each stage but the last."""
        if self.cut_names is not None:
            return list(self.cut_names)
        ops = [n.name for n in self.forward.nodes if n.op is not None]
        return [ops[c - 1] for c in self.cuts]

    def group2ctx_text(self) -> str:
        return ",".join(f"{k}={v.device_type}:{v.device_id}" for k, v in self.group2ctx.items())

    @property
    def ratio(self) -> float:
        return self.devices.peak / self.one_device

    def to_json(self) -> dict:
        return {"devices": len(self.devices.plans), "cuts": list(self.cuts),
                "cut_after": self.cut_after,
                "group2ctx": {k: str(v) for k, v in self.group2ctx.items()},
                "one_device": int(self.one_device), "peak": int(self.devices.peak),
                "ratio": round(self.ratio, 4), "evaluations": self.evaluations,
                "batch_split": self.batch}


def propose_split(plan, forward: Graph, n: int, origin: dict, device_type: str = "cpu"
                  ) -> Split:
    """The split of ``plan``'s net (``forward``: its forward graph) over
    ``n`` devices with the smallest largest per-device total this search
    finds: cuts start at equal op counts, then each cut in turn is bisected
    between its neighbours until the two stages it separates are balanced
    (three rounds, or until nothing moves)."""
    if not isinstance(n, int) or n < 1:
        raise PlanError(f"--split takes a number of devices >= 1, got {n!r}")
    ops = sum(1 for x in forward.nodes if x.op is not None)
    if n > ops:
        raise PlanError(f"cannot split {ops} ops over {n} devices")
    names = [f"stage{i + 1}" for i in range(n)]
    g2c = {name: Context(device_type, i) for i, name in enumerate(names)}
    one = sum(plan.buckets.values()) + plan.internal[plan.strategy]
    cache: dict = {}

    def evaluate(cuts):
        key = tuple(cuts)
        if key not in cache:
            g = _grouped_graph(plan.graph, forward, cuts, names)
            sub = _replace_graph(plan, g)
            devs = plan_devices(sub, g2c, origin, verify=False)
            totals = {d.device: d.total for d in devs.plans}
            cache[key] = ([totals.get(str(g2c[nm]), 0) for nm in names], devs)
        return cache[key][0]

    cuts = [round(ops * (i + 1) / n) for i in range(n - 1)]
    for _ in range(3):
        before = list(cuts)
        for i in range(n - 1):
            lo = cuts[i - 1] + 1 if i else 1
            hi = cuts[i + 1] - 1 if i + 1 < n - 1 else ops - 1
            # smallest cut where stage i holds at least stage i+1 (its total grows with c)
            a, b = lo, hi
            while a < b:
                c = (a + b) // 2
                t = evaluate(cuts[:i] + [c] + cuts[i + 1:])
                if t[i] >= t[i + 1]:
                    b = c
                else:
                    a = c + 1
            cands = [c for c in (a - 1, a) if lo <= c <= hi]
            cuts[i] = min(cands, key=lambda c: (max(evaluate(cuts[:i] + [c] + cuts[i + 1:])),
                                                c))
        if cuts == before:
            break
    g = _grouped_graph(plan.graph, forward, cuts, names)
    devs = plan_devices(_replace_graph(plan, g), g2c, origin, verify=True)
    groups = contiguous_groups(forward, cuts, names)
    return Split(list(cuts), groups, g2c, devs, one, len(cache), forward)


def _replace_graph(plan, graph: Graph):
    """``plan`` seen with ``graph`` (same nodes, other attributes): what
    ``plan_devices`` reads (the graph, shapes, outputs, options)."""
    from dataclasses import replace
    return replace(plan, graph=graph)


def forward_groups_graph(forward: Graph, groups: dict) -> Graph:
    """The forward graph with the proposed ``__ctx_group__`` attributes
    (and no other group): what ``symgraph plan --split N -o`` writes."""
    return with_groups(forward, {n.name: groups.get(n.name) for n in forward.nodes})


__all__ = ["DevicePlan", "Devices", "GROUP_KEY", "Split", "forward_groups_graph",
           "plan_devices", "propose_split", "restrict", "strategies"]
