"""Batch split: the first ops of a net run as slices of the batch.

``split_batch(graph, prefix, shares, batch_inputs)`` rewrites a forward
graph so that its first ``prefix`` op nodes (topological order) run once
per slice of the batch -- Krizhevsky's "one weird trick": data parallel
where the activations are large, layer-wise model parallel where the
weights are. Each input that carries the batch (``batch_inputs``: the data)
is sliced along axis 0 (``slice_axis``; the shares may differ, e.g. 26 and
38 of 64), each slice runs its own copy of the prefix ops, every copy
reading the SAME weight variables (the gradient pass sums a variable's
gradients over its readers, so the weight gradient is the whole batch's),
and each prefix output that a later op reads is joined again with a
``Concat`` on axis 0, samples in their original order. The rest of the
graph is unchanged. A copy of a node keeps its attributes; slice ``d``'s
copy of node ``x`` is named ``x`` for ``d = 0`` and ``x_part<d>`` after.
The shares are fixed in the graph (``slice_axis`` begin and end); the last
slice runs to the end of the batch, so at another batch every sample is
still computed (the last device takes what the others leave) and a batch
that leaves it nothing is refused by shape inference.

It is exact only where every split op treats samples apart: the op fact
``OpDef.per_sample`` (Convolution, Pooling, Activation, elementwise,
FullyConnected, Flatten ...; not BatchNorm in training, not Dropout, whose
mask is drawn for the whole batch, not a loss). ``batch_prefix`` gives the
longest prefix of a graph the pass may take; ``split_batch`` refuses any
other. Ops of the prefix that read no batch input (arithmetic on weights
alone) run once and are shared. Placing slice ``d`` on device ``d``
(``__ctx_group__``) is the caller's choice (``memory/split.py``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ..errors import GraphError
from ..graph import Entry, Graph, Node, unique_name
from ..ops.registry import get_op
from .infer import infer_shapes


@dataclass(eq=False)
class BatchSplit:
    """The rewritten ``graph``; ``part[name]``: the slice of the batch a
    node works on (the slicing nodes and the prefix ops' copies);
    ``slices``, ``concats``: the names of the slicing and joining nodes;
    ``shared``: prefix ops that read no batch, run once."""

    graph: Graph
    shares: list
    part: dict = field(default_factory=dict)
    slices: list = field(default_factory=list)
    concats: list = field(default_factory=list)
    shared: list = field(default_factory=list)


def _refusal(n: Node) -> str | None:
    """Why op node ``n``, which reads the batch, cannot run on slices of
    it, or None when it can."""
    if not n.op.per_sample(n.params):
        return f"{n.op.name} does not treat samples apart (OpDef.per_sample)"
    if n.op.needs_rng:
        return "it draws random numbers keyed by its node's name (a copy would draw others)"
    if n.op.aux_names(n.params):
        return "it has auxiliary states"
    return None


def batch_prefix(graph: Graph, batch_inputs: Sequence[str], shapes: dict | None = None
                 ) -> tuple[int, str]:
    """(k, why): the first k op nodes of ``graph`` may run on slices of the
    batch -- every one that reads the batch is per-sample, none is an
    output of the graph; ``why`` says what stops it at op k. With the
    input ``shapes``, also every batch tensor keeps the batch on axis 0 and
    an op's batch inputs share one rank (broadcasting aligns dimensions
    from the right: a batch of lower rank would meet another axis)."""
    names = set(batch_inputs)
    batch = {graph.entry_id_of_node(n) for n in graph.variables if n.name in names}
    outputs = {graph.node_id(e.node) for e in graph.outputs}
    inf = size = None
    if shapes is not None:
        args = set(graph.list_arguments())
        inf = infer_shapes(graph, {a: s for a, s in shapes.items() if a in args})
        sizes = {tuple(shapes[a])[:1] for a in names if a in shapes}
        size = sizes.pop() if len(sizes) == 1 else None
    k = 0
    for n in graph.nodes:
        if n.op is None:
            continue
        if graph.node_id(n) in outputs:
            return k, f"'{n.name}' is an output of the graph"
        if any(graph.entry_id(e) in batch for e in n.inputs):
            why = _refusal(n)
            if why is None and inf is not None:
                ranks = {len(inf.shape(e)) for e in n.inputs if graph.entry_id(e) in batch}
                outs = [inf.shape(Entry(n, i)) for i in range(n.num_outputs)]
                if len(ranks) > 1:
                    why = "its batch inputs differ in rank"
                elif size is None or any(tuple(s)[:1] != size for s in outs):
                    why = "its output does not keep the batch on axis 0"
            if why is not None:
                return k, f"'{n.name}': {why}"
            base = graph.entry_id_of_node(n)
            batch.update(range(base, base + n.num_outputs))
        k += 1
    return k, "the end of the graph"


def split_batch(graph: Graph, prefix: int, shares: Sequence[int],
                batch_inputs: Sequence[str], shapes: dict | None = None) -> BatchSplit:
    """``graph`` with its first ``prefix`` op nodes run on len(shares)
    slices of the batch, slice d holding ``shares[d]`` samples (in order);
    GraphError if the prefix is longer than ``batch_prefix`` allows (given
    the input ``shapes``, if any) or a share is below 1."""
    shares = [int(s) for s in shares]
    if len(shares) < 1 or min(shares) < 1:
        raise GraphError(f"batch split: every slice needs a sample, got shares {shares}")
    allowed, why = batch_prefix(graph, batch_inputs, shapes)
    if prefix > allowed:
        raise GraphError(f"batch split: cannot split the batch over the first {prefix} ops: "
                         f"the batch may be split over {allowed} at most ({why})")
    names = {n.name for n in graph.nodes}
    batch_vars = {graph.node_id(n) for n in graph.variables if n.name in set(batch_inputs)}
    ops = [n for n in graph.nodes if n.op is not None]
    in_prefix = {graph.node_id(n) for n in ops[:prefix]}
    out = BatchSplit(graph, shares)
    if prefix == 0 or not batch_vars:
        return out
    bounds = [0]
    for s in shares:
        bounds.append(bounds[-1] + s)
    # entry id -> [its value on slice d], for the entries that carry the batch
    sliced: dict[int, list] = {}

    def slices_of(e: Entry) -> list | None:
        eid = graph.entry_id(e)
        if eid not in sliced and graph.node_id(e.node) in batch_vars:
            parts = []
            for i in range(len(shares)):
                name = unique_name(f"{e.node.name}_slice{i}", names)
                # the last slice runs to the end: at a larger batch the net still
                # computes every sample (the last device takes the rest)
                end = bounds[i + 1] if i + 1 < len(shares) else None
                node = Node(get_op("slice_axis"), name,
                            {"axis": 0, "begin": bounds[i], "end": end}, [e])
                out.part[name] = i
                out.slices.append(name)
                parts.append(Entry(node, 0))
            sliced[eid] = parts
        return sliced.get(eid)

    def split(n: Node, inputs: list):
        if graph.node_id(n) not in in_prefix:
            return None  # a later reader of a prefix output reads its Concat
        parts = [slices_of(e) for e in n.inputs]
        if all(p is None for p in parts):
            out.shared.append(n.name)
            return None
        copies = []
        for d in range(len(shares)):
            name = n.name if d == 0 else unique_name(f"{n.name}_part{d}", names)
            copies.append(Node(n.op, name, n.attrs, [x if p is None else p[d]
                                                     for x, p in zip(inputs, parts)]))
            out.part[name] = d
        joined = []
        for i in range(n.num_outputs):
            sliced[graph.entry_id(Entry(n, i))] = [Entry(c, i) for c in copies]
            # the whole value, samples in order; left out of the graph where
            # nothing after the prefix reads it
            name = unique_name(f"{n.name}{f'_output{i}' if i else ''}_concat", names)
            joined.append(Entry(Node(get_op("Concat"), name,
                                     {"num_args": len(shares), "dim": 0},
                                     [Entry(c, i) for c in copies]), 0))
            out.concats.append(name)
        return joined

    out.graph = graph.rewrite(split)
    kept = {n.name for n in out.graph.nodes}
    out.concats = [c for c in out.concats if c in kept]
    return out


__all__ = ["BatchSplit", "batch_prefix", "split_batch"]
