"""Recompute: forward tensors dropped after the forward and computed again
for the backward, as a graph rewrite the planner sees.

``rewrite(full, num_forward_outputs, names)`` takes a training graph (the
forward outputs, then the gradients, as ``build_gradient_with_heads`` or
``TrainingSplit.full`` build it) and the names of forward op nodes to
recompute. Each gets a clone -- same op, same attributes plus
``RECOMPUTE_ATTR`` naming the original, name ``<orig>_recompute`` -- and
every backward node reads the clone's outputs instead of the original's. A
clone reads the clones of its inputs where those are recomputed too, the
original entries otherwise (the checkpoints), so a run of recomputed nodes
is computed again from the nearest kept tensors, when the backward first
needs it. The forward outputs still read the originals, so the originals
die after their last forward reader.

A clone of an op with aux states (BatchNorm) reads the same aux variables;
the lowering (``lower.py``) draws a clone's random key from the original's
name and does not apply its aux updates, so the recomputed values are the
forward's. Pure: the input graph is not changed.
"""
from __future__ import annotations

from typing import Iterable

from ..errors import PlanError
from ..graph import Entry, Graph, Node, topo_order, unique_name

RECOMPUTE_ATTR = "__recompute_of__"
RECOMPUTE_SUFFIX = "_recompute"


def is_recompute(node: Node) -> bool:
    """Whether ``node`` is a clone made by ``rewrite``."""
    return node.op is not None and RECOMPUTE_ATTR in node.attrs


def recompute_of(node: Node) -> str | None:
    """The name of the node a clone recomputes (None for other nodes)."""
    return node.attrs.get(RECOMPUTE_ATTR) if node.op is not None else None


def forward_nodes(full: Graph, num_forward_outputs: int) -> list:
    """The forward op nodes of a training graph: those the forward outputs
    depend on (topological order)."""
    _check_split(full, num_forward_outputs)
    return [n for n in topo_order(full.outputs[:num_forward_outputs]) if n.op is not None]


def _check_split(full: Graph, num_forward_outputs: int) -> None:
    if (not isinstance(num_forward_outputs, int) or isinstance(num_forward_outputs, bool)
            or not 0 < num_forward_outputs <= len(full.outputs)):
        raise PlanError(f"recompute: num_forward_outputs={num_forward_outputs!r}; the graph "
                        f"has {len(full.outputs)} outputs")


def rewrite(full: Graph, num_forward_outputs: int, names: Iterable[str]) -> Graph:
    """``full`` with the forward nodes named in ``names`` recomputed for the
    backward (see the module docstring); same outputs, same order."""
    if isinstance(names, str):
        names = [names]
    names = list(names)
    fwd = forward_nodes(full, num_forward_outputs)
    by_name = {n.name: n for n in fwd}
    wanted = []
    for name in names:
        node = by_name.get(name)
        if node is None:
            raise PlanError(f"recompute: '{name}' is not an op node of the forward pass "
                            f"({_what(full, name)})")
        wanted.append(node)
    if not wanted:
        return full
    fwd_ids = {full.node_id(n) for n in fwd}
    chosen = {full.node_id(n) for n in wanted}
    taken = {n.name for n in full.nodes}
    clone: dict[int, Entry] = {}  # entry id -> the clone's output

    def recomputed(n: Node, inputs: list):
        nid = full.node_id(n)
        if nid in fwd_ids:
            # forward nodes stay; a chosen one gets a clone, reading the
            # clones of its recomputed inputs (cloned first: inputs come first)
            if nid in chosen:
                c = _like(n, unique_name(n.name + RECOMPUTE_SUFFIX, taken),
                          {**n.attrs, RECOMPUTE_ATTR: n.name},
                          [clone.get(full.entry_id(e), e) for e in n.inputs])
                base = full.entry_id_of_node(n)
                clone.update((base + i, Entry(c, i)) for i in range(n.num_outputs))
            return None
        # backward nodes read the clones; a gradient output that is a forward
        # entry stays the original: the forward computes it anyway
        ins = [clone.get(full.entry_id(e), x) for e, x in zip(n.inputs, inputs)]
        return None if ins == list(n.inputs) else n.with_inputs(ins)
    return full.rewrite(recomputed)


def _like(n: Node, name: str, attrs: dict, inputs: list) -> Node:
    """A node of ``n``'s op and parsed attributes (already checked: parsing
    them again costs a third of a large rewrite) under another name, with
    other inputs; ``attrs`` adds only hidden ``__key__`` hints."""
    c = Node.__new__(Node)
    c.op, c.name, c.attrs, c.params, c.inputs = n.op, name, attrs, n.params, tuple(inputs)
    return c


def _what(full: Graph, name: str) -> str:
    for n in full.nodes:
        if n.name == name:
            return "a variable" if n.op is None else f"a backward {n.op.name} node"
    return "no node of the graph has that name"
