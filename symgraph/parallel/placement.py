"""Model parallel: a placed graph run as one XLA program per device segment.

``passes/place.py`` decides where each node runs and inserts the
``_CrossDeviceCopy`` nodes; this module runs the result. JAX compiles one
program for one set of devices, and a jitted function whose arguments sit
on different devices is refused, so the placed graph is cut into
*segments*: maximal runs of nodes (in the graph's topological order) on one
device. Each segment is lowered and jitted like any graph (the memory
measures included) and runs where its inputs are; each copy node is a
``jax.device_put`` between segments. Every node lowers exactly as on one
device (random keys are derived from node names), so outputs, gradients
and aux states equal a one-device run.

``resolve_group2ctx`` checks a user's ``group2ctx``; ``placed_programs``
gives the Executor its programs.
"""
from __future__ import annotations

import jax
import numpy as np

from .. import measures as measures_mod
from ..context import Context
from ..errors import ContextError
from ..graph import Entry, Graph, entry_key
from ..passes.gradient import TrainingSplit
from ..passes.place import COPY_OP, GROUP_KEY, PlacementError, Placement, check_group2ctx, place


def parse_context(value) -> Context:
    """A Context from a Context, ``'cpu:1'``, ``'cpu(1)'`` or ``'gpu1'``."""
    if isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]  # MXNet's group2ctxs may give a list of one device per group
    if isinstance(value, Context):
        return value
    if isinstance(value, str):
        s = value.strip().lower().replace("(", ":").rstrip(")")
        kind, _, num = s.partition(":")
        if not num:
            kind, num = kind.rstrip("0123456789"), kind[len(kind.rstrip("0123456789")):]
        if kind in ("cpu", "gpu") and num.isascii() and num.isdigit():  # not '²
            return Context(kind, int(num))
    raise PlacementError(f"{value!r} is not a device; use sg.cpu(i), sg.gpu(i) or 'cpu:i'")


def parse_group2ctx_arg(text: str) -> dict:
    """``'stage1=cpu:1,stage2=cpu:2'`` (the CLI's --group2ctx) as a dict."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, dev = part.partition("=")
        if not sep or not name.strip():
            raise PlacementError(f"--group2ctx: {part!r} is not GROUP=DEVICE "
                                 f"(e.g. stage1=cpu:1,stage2=cpu:2)")
        if name.strip() in out:
            raise PlacementError(f"--group2ctx: group {name.strip()!r} is given twice")
        out[name.strip()] = parse_context(dev)
    if not out:
        raise PlacementError("--group2ctx is empty; give GROUP=DEVICE pairs")
    return out


def resolve_group2ctx(graph: Graph, group2ctx: dict, check_devices: bool = True) -> dict:
    """group -> Context, checked against the graph's ctx_group attributes
    (PlacementError) and, with ``check_devices``, against this machine's
    devices (ContextError naming the device)."""
    if not isinstance(group2ctx, dict):
        raise PlacementError(f"group2ctx must be a dict of group name -> device, "
                             f"got {type(group2ctx).__name__}")
    out = {str(k): parse_context(v) for k, v in group2ctx.items()}
    check_group2ctx(graph, out)
    if check_devices:
        for g, ctx in out.items():
            try:
                ctx.jax_device
            except ContextError as err:
                raise ContextError(f"group2ctx['{g}']: {err}") from None
    return out


class Replicas:
    """Worker groups: R placed replicas of one net, data parallel across
    them. ``meshes[d]``: a one-axis mesh (``BATCH_AXIS``) of the R devices
    that play device d of the placement; ``batch`` names the batch inputs
    (split along axis 0 over the replicas), ``stacked`` the other fed
    variables given per replica (a leading axis of R, as every value a
    segment passes on is); other variables are replicated."""

    def __init__(self, meshes: list, batch, stacked=(), microbatches: int = 1):
        self.meshes = list(meshes)
        # per replica, the batch is run as this many microbatches (GPipe)
        self.microbatches = microbatches
        self.batch = set(batch)
        self.stacked = set(stacked)

    def kind(self, name: str, is_variable: bool) -> str:
        if not is_variable or name in self.stacked:
            return "stack"
        return "batch" if name in self.batch else "rep"

    def sharding(self, d: int, kind: str):
        from jax.sharding import NamedSharding, PartitionSpec as P
        from .data_parallel import BATCH_AXIS
        return NamedSharding(self.meshes[d], P() if kind == "rep" else P(BATCH_AXIS))


def _replicated_segment(fn, mesh, ins: list, kinds: dict, n_out: int, microbatches: int):
    """``fn`` (a lowered segment) run on every replica by ``shard_map``:
    stacked inputs lose their replica axis, outputs gain one, aux updates
    are averaged over the replicas (as data parallel averages them) and
    each replica's random key folds in the index of its slice of the batch
    (replica r's microbatch m is slice r * microbatches + m, the device
    index data parallel over that many devices would fold in)."""
    from jax.sharding import PartitionSpec as P
    from .data_parallel import BATCH_AXIS

    def local(sub, key, m):
        feeds = {k: v[0] if kinds[k] == "stack" else v for k, v in sub.items()}
        if key is not None:
            key = jax.random.fold_in(key, jax.lax.axis_index(BATCH_AXIS) * microbatches + m)
        outs, upd = fn(feeds, key)
        return [o[None] for o in outs], jax.lax.pmean(upd, BATCH_AXIS)
    in_specs = ({k: P() if kinds[k] == "rep" else P(BATCH_AXIS) for k in ins}, P(), P())
    return jax.shard_map(local, mesh=mesh, in_specs=in_specs,
                         out_specs=([P(BATCH_AXIS)] * n_out, P()), check_vma=False)


class StagedProgram:
    """``f(feeds, key) -> (outputs, aux_updates)`` as ``lower.lower``'s
    function, for ``outputs`` of a placed graph given the feeds named in
    ``fed`` (variable names and entry keys): one jitted program per device
    segment, copies as device transfers. With ``replicas`` (worker groups)
    each segment runs on the mesh of its device's replicas and every value
    it passes on, outputs included, has a leading replica axis."""

    def __init__(self, placement: Placement, outputs: list, fed, is_train: bool, measures,
                 replicas: Replicas | None = None):
        g = placement.graph
        self.placement = placement
        self.outputs = list(outputs)
        self.replicas = replicas
        self.jax_devices = None if replicas else [d.jax_device for d in placement.devices]
        fed = set(fed)
        needed = self._needed(g, self.outputs, fed)
        # steps: ("seg", device index, [nodes]) or ("copy", node)
        steps: list = []
        for nid in sorted(needed):
            n = g.nodes[nid]
            if n.op is None:
                continue
            d = placement.device[n.name]
            if n.op.name == COPY_OP:
                steps.append(("copy", d, [n]))
            elif steps and steps[-1][0] == "seg" and steps[-1][1] == d:
                steps[-1][2].append(n)
            else:
                steps.append(("seg", d, [n]))
        later_reads: set = {entry_key(e) if e.node.op is not None else e.node.name
                            for e in self.outputs}
        self.steps = []
        # walk backwards: a segment returns what later steps or the outputs read
        for kind, d, nodes in reversed(steps):
            mine = {id(n) for n in nodes}
            ins, outs = [], []
            for n in nodes:
                for e in n.inputs:
                    if id(e.node) not in mine:
                        k = e.node.name if e.node.op is None else entry_key(e)
                        if k not in ins:
                            ins.append(k)
                for i in range(n.num_outputs):
                    k = entry_key(Entry(n, i))
                    if k in later_reads:
                        outs.append((k, Entry(n, i)))
            later_reads |= set(ins)
            if kind == "copy":
                self.steps.append((kind, d, ins[0], outs[0][0] if outs else None))
                continue
            sub = Graph([e for _, e in outs])
            self.steps.append((kind, d, ins, ([k for k, _ in outs], sub)))
        self.steps.reverse()
        # what each value is across replicas: a segment's outputs are stacked,
        # a copy's output is what its input is
        variables = {n.name for n in g.variables}
        self.kinds = {k: (replicas.kind(k, True) if replicas else "one") for k in variables}
        made_by = {entry_key(Entry(n, i)): n for n in g.nodes if n.op is not None
                   for i in range(n.num_outputs)}
        for i, (kind, d, ins, rest) in enumerate(self.steps):
            if kind == "copy":
                if rest is not None:
                    self.kinds[rest] = self.kinds.get(ins, "stack")
                continue
            for k in ins:  # fed entries (saved tensors)
                if k not in self.kinds:
                    self.kinds[k] = self._fed_kind(made_by.get(k))
            keys, sub = rest
            self.kinds.update((k, "stack") for k in keys)
            fn = measures_mod.lower_measured(sub, is_train, measures)
            if replicas:
                fn = _replicated_segment(fn, replicas.meshes[d], ins, self.kinds, len(keys),
                                         replicas.microbatches)
            self.steps[i] = (kind, d, ins, (keys, measures_mod.jit(fn, measures)))
        self.num_programs = sum(1 for s in self.steps if s[0] == "seg")

    def _fed_kind(self, node) -> str:
        """What a fed entry (made by ``node``) is across replicas: a copy of
        a variable (a weight read on another device, saved by the forward
        for the backward) is what the variable is; anything else a segment
        made, so stacked."""
        while node is not None and node.op is not None and node.op.name == COPY_OP:
            node = node.inputs[0].node
        if node is not None and node.op is None:
            return self.kinds.get(node.name, "stack")
        return "stack"

    @staticmethod
    def _needed(g: Graph, outputs: list, fed: set) -> set:
        """Node ids the outputs need, stopping at fed entries."""
        needed, stack = set(), list(outputs)
        while stack:
            e = stack.pop()
            k = e.node.name if e.node.op is None else entry_key(e)
            nid = g.node_id(e.node)
            if k in fed or nid in needed:
                continue
            needed.add(nid)
            stack.extend(e.node.inputs)
        return needed

    def _target(self, d: int, key: str):
        if self.replicas is None:
            return self.jax_devices[d]
        return self.replicas.sharding(d, self.kinds.get(key, "stack"))

    def __call__(self, feeds: dict, key=None, microbatch: int = 0):
        if self.replicas is not None:
            return self._call_replicated(feeds, key, microbatch)
        env = dict(feeds)
        aux: dict = {}
        for kind, d, ins, rest in self.steps:
            dev = self.jax_devices[d]
            if kind == "copy":
                if rest is not None:
                    env[rest] = jax.device_put(env[ins], dev)
                continue
            keys, fn = rest
            # device_put is free for an array already there (arguments, copies)
            sub = {k: jax.device_put(env[k], dev) for k in ins}
            k = None if key is None else jax.device_put(key, dev)
            outs, upd = fn(sub, k)
            # an output computed from no argument (zeros_like: jit drops the unused
            # input) would land on the default device
            env.update((name, jax.device_put(o, dev)) for name, o in zip(keys, outs))
            aux.update(upd)
        return [env[entry_key(e) if e.node.op is not None else e.node.name]
                for e in self.outputs], aux

    def _call_replicated(self, feeds: dict, key=None, microbatch: int = 0):
        env = dict(feeds)
        aux: dict = {}
        for kind, d, ins, rest in self.steps:
            if kind == "copy":
                if rest is not None:
                    env[rest] = jax.device_put(env[ins], self._target(d, rest))
                continue
            keys, fn = rest
            sub = {k: jax.device_put(env[k], self._target(d, k)) for k in ins}
            k = None if key is None else jax.device_put(key, self.replicas.sharding(d, "rep"))
            outs, upd = fn(sub, k, np.int32(microbatch))
            env.update(zip(keys, outs))
            aux.update(upd)
        return [env[entry_key(e) if e.node.op is not None else e.node.name]
                for e in self.outputs], aux


def placed_split(split: TrainingSplit, group2ctx: dict, default) -> tuple:
    """(placement of ``split.full``, saved): ``saved`` maps the entry key of
    each forward tensor of the placed graph that a backward node reads to
    its entry (as ``TrainingSplit.saved``, copies included)."""
    pl = place(split.full, group2ctx, default, split.origin)
    g = pl.graph
    fwd_ids = {id(n) for n in Graph(g.outputs[:split.num_outputs]).nodes}
    saved: dict = {}
    for n in g.nodes:
        if id(n) in fwd_ids or n.op is None:
            continue
        for e in n.inputs:
            if id(e.node) in fwd_ids and e.node.op is not None:
                saved.setdefault(entry_key(e), e)
    return pl, saved


def placed_programs(graph: Graph, kind: str, wrt: list, group2ctx: dict, default: Context,
                    measures) -> tuple:
    """The Executor's programs for ``kind`` ('infer' or 'train') placed by
    ``group2ctx``: (program, placement) for inference and training without
    gradients, else (forward, backward, saved keys, heads, placement) as the
    one-device path's ``TrainingSplit`` gives them."""
    train = kind != "infer"
    if not train or not wrt:
        pl = place(graph, group2ctx, default)
        feeds = {n.name for n in pl.graph.variables}
        return (StagedProgram(pl, pl.graph.outputs, feeds, train, measures), pl)
    split = TrainingSplit(graph, wrt)
    pl, saved = placed_split(split, group2ctx, default)
    g, n_out = pl.graph, split.num_outputs
    variables = {n.name for n in g.variables}
    fwd = StagedProgram(pl, list(g.outputs[:n_out]) + list(saved.values()), variables,
                        True, measures)
    bwd = StagedProgram(pl, g.outputs[n_out:], variables | set(saved), True, measures)
    return fwd, bwd, list(saved), split.heads, pl


def variable_devices(graph: Graph, wrt: list, group2ctx: dict, default: Context) -> dict:
    """variable name -> Context where a placed Executor keeps its array
    (the placement of the training graph when there are gradients)."""
    if wrt:
        split = TrainingSplit(graph, wrt)
        pl = place(split.full, group2ctx, default, split.origin)
    else:
        pl = place(graph, group2ctx, default)
    return {n.name: pl.device_of(n) for n in pl.graph.variables}


__all__ = ["GROUP_KEY", "StagedProgram", "parse_context", "parse_group2ctx_arg",
           "placed_programs", "placed_split", "resolve_group2ctx", "variable_devices"]
