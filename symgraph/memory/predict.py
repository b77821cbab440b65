"""A footprint you can predict: the bytes the program that runs will need,
from the plan alone (nothing compiled).

    from symgraph.memory.predict import predict
    pr = predict(plan)               # plan: sg.plan(net, shapes, train=...)
    pr.total, pr.parts

XLA's figure for a program is temp + argument + output - alias
(``symgraph.xla.footprint``). The rule (docs/memory.md, "A footprint you
can predict", has the measurements behind it):

- *argument, output - alias* are known exactly: the arguments bucket
  (data, labels, parameters), aux states, the optimizer's state (SGD with
  momentum 0.9 unless another is named: the step ``xla.training_step``
  compiles), and the forward outputs (not donated, so not aliased).
- *temp* is the plan of the same graph as XLA sees it, with two changes:
  1. in training XLA fuses cheap forward ops (activations, elementwise
     ops, BatchNorm's normalisation) into their consumers and recomputes
     them in the backward from the tensor they read, instead of keeping
     their outputs: the prediction plans the graph with those ops
     recomputed (``passes.recompute.rewrite``);
  2. in training the fused step holds each parameter gradient in temp
     from the backward node that makes it until the update at the end:
     the prediction plans the gradients as internal tensors, where the
     plan keeps them in their own bucket;
  3. in training, the backward of a stride-1 max pooling holds one padded
     partial gradient per window offset while it runs (``_workspace``);
  4. in inference, a cheap group read only by one elementwise or injective
     group (or, with channels-last activations, a pooling) is fused into
     it and never stored (``_xla_fusion``).

A plan that recomputes may run as the staged step (a program per segment,
train/staged.py), whose figure is a walk over the programs
(``predict_staged``): what the caller holds between programs is exact
from the cut, and each program adds its outputs and its own working set.
``predict_program`` -- what ``Plan.predicted`` reports -- takes the
smaller of the two for such a plan, as a Module under a budget does.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .liveness import entry_nbytes

# what XLA recomputes in the backward rather than keeping (training)
CHEAP_FAMILIES = ("activation", "elementwise")
CHEAP_OPS = ("BatchNorm",)


@dataclass
class Prediction:
    """``total``: predicted bytes of the program (XLA's temp + argument +
    output - alias); ``parts``: arguments, aux, optimizer, outputs, temp;
    ``recomputed``: the forward nodes the rule takes XLA to recompute."""

    total: int
    parts: dict
    recomputed: list = field(default_factory=list)
    program: str = "fused"

    def to_json(self) -> dict:
        return {"total": int(self.total), "parts": {k: int(v) for k, v in self.parts.items()},
                "program": self.program}


def cheap(node) -> bool:
    """Whether XLA recomputes this forward op in the backward (see the rule)."""
    op = node.op
    return op is not None and not op.is_loss and (op.family in CHEAP_FAMILIES
                                                   or op.name in CHEAP_OPS)


def _optimizer_state(plan, optimizer) -> int:
    from .budget import optimizer_bytes
    if not plan.train:
        return 0
    return optimizer_bytes(plan.buckets["gradients"], "momentum" if optimizer is None
                           else optimizer)


def _forward_outputs(plan) -> int:
    g, inf = plan.graph, plan.inferred
    return sum(entry_nbytes(inf, g.entry_id(e)) for e in g.outputs[:plan.num_forward_outputs])


def _measures(plan) -> tuple:
    """The memory measures the Module's program gets for this plan (the rule)."""
    from .. import measures as measures_mod
    from ..graph import Graph
    g = Graph(plan.graph.outputs[:plan.num_forward_outputs])
    return tuple(measures_mod.default_measures(g, plan.train))


def _light(node, pooling: bool) -> bool:
    """An elementwise or injective op, or (``pooling``) a pooling: XLA
    fuses elementwise work on its input into its loop."""
    return node.op is not None and (node.op.category in ("elementwise", "injective")
                                    or (pooling and node.op.name == "Pooling"))


def _xla_fusion(plan):
    """The plan's fusion with each cheap group (BatchNorm, activations,
    elementwise ops) read only by one group of elementwise or injective ops
    or a pooling (a ReLU, a Concat, a max-pool) merged into that group: in inference XLA computes
    such a group inside its consumer's loop and never stores its output,
    where the plan's fusion keeps a heavy op (BatchNorm) in a group of its
    own."""
    from ..passes.fuse import Fusion
    g, fusion = plan.graph, plan.fusion
    # measured: with channels-last activations XLA fuses BatchNorm and ReLU
    # into the max-pool's window loop; in NCHW it stores their output
    pooling = "channels_last" in _measures(plan)
    nid = {id(n): i for i, n in enumerate(g.nodes)}
    readers = {}
    for i, n in enumerate(g.nodes):
        for e in n.inputs:
            readers.setdefault((id(e.node), e.index), set()).add(fusion.root[i])
    outs = {(id(e.node), e.index) for e in g.outputs}
    root = list(fusion.root)
    groups = {grp[-1]: list(grp) for grp in fusion.groups}
    for i, n in enumerate(g.nodes):  # topological: a merged group may merge on
        if n.op is None or fusion.root[i] != i:
            continue
        merged = list(groups.get(i, [i]))
        if not all(_light(g.nodes[m], pooling) for m in merged):
            continue
        for e in n.inputs if len(merged) == 1 else \
                [e for m in merged for e in g.nodes[m].inputs]:
            p = nid[id(e.node)]
            if e.node.op is None or root[p] != p or p in merged:
                continue
            members = groups.get(p, [p])
            if ((id(e.node), e.index) in outs or readers.get((id(e.node), e.index)) != {i}
                    or not all(cheap(g.nodes[m]) for m in members)):
                continue
            groups.pop(p, None)
            merged += members
        merged = sorted(set(merged))
        for m in merged:
            root[m] = i
        if len(merged) > 1:
            groups[i] = merged
    return Fusion(g, tuple(root), tuple(tuple(v) for v in groups.values()))


def _arena(g, inf, fusion, schedule, external) -> int:
    """The arena plan's bytes for a graph under a given fusion."""
    from ..passes.schedule import schedule as schedule_pass
    from . import arena as arena_mod
    from . import planner
    from .liveness import analyze
    steps = schedule_pass(g, fusion, schedule, nbytes=lambda eid: entry_nbytes(inf, eid))
    live = analyze(g, inf, fusion, steps, external)
    lb, _, _ = planner.lower_bound(live)
    both = planner.pool_plan(live, "both", inplace=True, match_range=16, parallel_safe=True)
    return arena_mod.arena_plan(live, lb, fallback=both).total


def _workspace(plan) -> list:
    """Bytes XLA holds inside each step of the plan beyond its tensors
    (``_node_workspace`` of the step's nodes)."""
    g, inf = plan.graph, plan.inferred
    return [sum(_node_workspace(g.nodes[nid], inf) for nid in step) for step in plan.steps]


def _node_workspace(n, inf) -> int:
    """Bytes XLA holds while ``n`` runs beyond its inputs and outputs: the
    backward of a stride-1 max pooling (the 3x3 pools of Inception blocks)
    materialises one padded partial gradient per window offset
    (``ops/nn.py``'s phase sum, which XLA fuses into one loop for strided
    pools but not for these; measured: GoogLeNet's in4e pool, nine of
    [8, 16, 16, 528])."""
    import math

    from ..ops.nn import _pool_geometry
    if (n.op is None or n.op.name != "_backward_Pooling"
            or n.params.pool_type != "max" or n.params.global_pool):
        return 0
    x = max((inf.shape(e) for e in n.inputs), key=math.prod)  # the pooled input
    kernel, stride, pad, _, extra = _pool_geometry(n.params, x)
    if any(v != 1 for v in stride):
        return 0
    padded = math.prod(x[:2]) * math.prod(a + 2 * q + e for a, q, e in zip(x[2:], pad, extra))
    return math.prod(kernel) * padded * _itemsize(inf.dtype(n.inputs[0]))


def _itemsize(dtype) -> int:
    import numpy as np
    return np.dtype(dtype).itemsize


def predicted_temp(plan) -> tuple:
    """(bytes, recomputed node names): XLA's temp as the rule predicts it."""
    from ..passes.infer import infer_shapes
    from ..passes.recompute import forward_nodes, rewrite
    g, inf = plan.graph, plan.inferred
    schedule = plan.options.get("schedule", "dfs")
    if not plan.train:
        if not plan.options.get("fuse", True):
            return plan.internal["arena"], []
        return _arena(g, inf, _xla_fusion(plan), schedule, ()), []
    names = [n.name for n in forward_nodes(g, plan.num_forward_outputs) if cheap(n)]
    g2 = rewrite(g, plan.num_forward_outputs, names)
    shapes = {n.name: inf.shapes[g.entry_id_of_node(n)] for n in g.variables}
    dtypes = {n.name: inf.dtypes[g.entry_id_of_node(n)] for n in g.variables}
    inf2 = infer_shapes(g2, shapes, dtypes)
    grads = [g2.entry_id(e) for e in g2.outputs[plan.num_forward_outputs:]]
    # XLA's memory-optimized scheduler runs each parameter's update as soon
    # as its gradient is made (one gradient alive at a time); XLA's default
    # scheduler updates at the end, every gradient alive until then
    early = "scheduler" in _measures(plan)
    p2 = plan.replan(g2, inf2, train=True, num_forward_outputs=plan.num_forward_outputs,
                     external=grads if early else (), fuse=plan.options.get("fuse", True),
                     schedule=schedule, verify=False, name=plan.net)
    temp = max([p2.internal["arena"]] + [live + ws for live, ws in
                                         zip(p2.profile, _workspace(p2)) if ws])
    if early:
        temp += max((entry_nbytes(inf2, e) for e in grads), default=0)
    return temp, names


def predict(plan, optimizer=None) -> Prediction:
    """The predicted footprint of the program a Module runs for ``plan``'s
    net (training: the fit step with ``optimizer``, default SGD with
    momentum 0.9; inference: predict's program)."""
    temp, names = predicted_temp(plan)
    outputs = _forward_outputs(plan)
    parts = {"arguments": plan.buckets["arguments"], "aux": plan.buckets["aux"],
             "optimizer": _optimizer_state(plan, optimizer), "outputs": outputs,
             # the forward outputs are planned tensors: counted once, as outputs
             "temp": max(0, temp - outputs)}
    return Prediction(total=int(sum(parts.values())), parts=parts, recomputed=names)


def predict_program(plan, optimizer=None) -> Prediction:
    """The prediction for the program a Module runs for ``plan``: ``predict``
    (the fused step, inference); for a plan that recomputes, as a Module
    under its budget picks (``train.staged.SmallerStep``), the smaller of
    that and ``predict_staged``."""
    fused = predict(plan, optimizer)
    if not plan.train or not getattr(plan, "recompute", None):
        return fused
    staged = predict_staged(plan, optimizer)
    return staged if staged.total < fused.total else fused


def predict_staged(plan, optimizer=None, segments=None) -> Prediction:
    """The predicted footprint of the staged step (``xla.training_step(plan,
    segments=...)``, train/staged.py; True or None: the default count) for
    a training plan: the resident arguments, aux and optimizer state plus
    the largest of ``staged_programs``' rows."""
    if not plan.train:
        from ..errors import PlanError
        raise PlanError("predict_staged needs a training plan (plan(..., train=True))")
    peak = max(r["held"] + r["output"] - r["alias"] + r["temp"]
               for r in staged_programs(plan, segments))
    outputs = _forward_outputs(plan)
    parts = {"arguments": plan.buckets["arguments"], "aux": plan.buckets["aux"],
             "optimizer": _optimizer_state(plan, optimizer), "outputs": outputs,
             "temp": max(0, peak - outputs)}
    return Prediction(total=int(sum(parts.values())), parts=parts, program="staged")


def staged_programs(plan, segments=None) -> list:
    """Per program of the staged step, as ``SequenceMemory.programs`` has
    them: ``held``, the entries earlier programs handed on that this or a
    later one reads, and the forward outputs and gradients made so far (the
    cut makes these exact); ``output``, what it hands on and outputs;
    ``alias``, the part of that written into handed-on entries it reads
    last (donated to it; ``_aliased``); ``temp``, its working set
    (``_working_set``). The update, last, holds every gradient."""
    from ..graph import Entry, Graph, entry_key
    from ..passes.gradient import HEAD_GRAD_SUFFIX, TrainingSplit, default_wrt
    from ..passes.infer import infer_shapes
    from ..passes.stages import cut, last_reads
    g, inf = plan.graph, plan.inferred
    # the split the Module's programs make (xla.training_step's): the plan's
    # forward graph, its parameters, its recompute set
    fwd = Graph(g.outputs[:plan.num_forward_outputs])
    wrt = [n for n in default_wrt(fwd) if not n.endswith(HEAD_GRAD_SUFFIX)]
    split = TrainingSplit(fwd, wrt, [r["name"] if isinstance(r, dict) else r
                                     for r in getattr(plan, "recompute", None) or ()])
    shapes = {n.name: inf.shapes[g.entry_id_of_node(n)] for n in g.variables}
    dtypes = {n.name: inf.dtypes[g.entry_id_of_node(n)] for n in g.variables}
    full = split.full
    stages = cut(split, {n.name: shapes[n.name] for n in fwd.variables if n.name not in wrt},
                 None if segments is True else segments)
    names = {n.name for n in full.variables}
    finf = infer_shapes(full, {k: v for k, v in shapes.items() if k in names}, dtypes,
                        partial=True)

    def size(e):
        return entry_nbytes(finf, full.entry_id(e))
    entries = {entry_key(Entry(n, i)): Entry(n, i) for n in full.nodes if n.op is not None
               for i in range(n.num_outputs)}
    # the plan's fused chains: XLA computes them in one loop, storing the end
    fused = {g.nodes[m].name for grp in plan.fusion.groups for m in grp[:-1]}
    last = last_reads(stages)
    handed: dict = {}  # entry key -> bytes, while a later program reads it
    made = 0           # forward outputs and gradients so far
    rows = []
    for i, st in enumerate(stages):
        made_here = [full.outputs[j] for j in st.outputs] + [entries[k] for k in st.returns]
        outs = sum(size(full.outputs[j]) for j in st.outputs)
        rows.append({"program": f"stage {st.index}", "held": sum(handed.values()) + made,
                     "output": sum(size(e) for e in made_here),
                     "alias": _aliased(made_here, [entries[k] for k in st.reads
                                                   if last.get(k) == i], finf, full),
                     "temp": _working_set(st, size, fused,
                                          lambda n: _node_workspace(n, finf))})
        for k in st.returns:
            handed[k] = size(entries[k])
        for k in [k for k in handed if last.get(k, -1) <= i]:
            del handed[k]
        made += outs
    rows.append({"program": "update", "held": made, "output": 0, "alias": 0, "temp": 0})
    return rows


def _aliased(made: list, dying: list, inf, graph) -> int:
    """Bytes of the entries ``made`` that XLA can write into the donated
    ``dying`` ones: one each, of the same shape and dtype (a gradient into
    the saved tensor of its shape)."""
    free: dict = {}
    for e in dying:
        eid = graph.entry_id(e)
        free.setdefault((inf.shapes[eid], inf.dtypes[eid]), []).append(e)
    total = 0
    for e in made:
        eid = graph.entry_id(e)
        if free.get((inf.shapes[eid], inf.dtypes[eid])):
            free[(inf.shapes[eid], inf.dtypes[eid])].pop()
            total += entry_nbytes(inf, eid)
    return total


def _working_set(stage, size, fused=frozenset(), workspace=lambda n: 0) -> int:
    """The most bytes a stage's program holds at once in tensors it makes
    and reads itself (not handed on, not outputs): each from its node to
    its last reader in the stage, in the stage's topological order; the
    outputs of nodes named in ``fused`` (inside a fused chain) are never
    stored; ``workspace(node)``: what XLA holds while the node runs."""
    from ..graph import Entry
    own = {id(n): i for i, n in enumerate(stage.nodes)}
    keep = {(id(e.node), e.index) for e in stage.graph.outputs}
    last: dict = {}
    for i, n in enumerate(stage.nodes):
        for e in n.inputs:
            if id(e.node) in own:
                last[(id(e.node), e.index)] = i
    ends: dict = {}
    live = peak = 0
    for i, n in enumerate(stage.nodes):
        for j in range(n.num_outputs):
            k = (id(n), j)
            if k in keep or n.name in fused:
                continue
            b = size(Entry(n, j))
            live += b
            end = last.get(k, i)
            ends[end] = ends.get(end, 0) + b
        peak = max(peak, live + workspace(n))
        live -= ends.pop(i, 0)
    return peak
