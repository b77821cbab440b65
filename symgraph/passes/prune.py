"""The prune pass: keep only what the requested outputs need.

``prune(graph, outputs)`` returns a new graph whose outputs are the
requested ones (graph outputs by index or name, or any internal output such
as ``'fc1_output'``, the names ``get_internals()`` lists) and whose nodes are
exactly those the outputs depend on. So

- inference on a training graph drops the whole backward part
  (``prune(grad_graph, range(num_forward_outputs))``);
- asking for an internal output (feature extraction) drops the layers after
  it;
- a gradient nobody reads is not computed: a ``_backward_<op>`` node whose
  ``need`` mask asks for an argument gradient that no node reads and that
  is no graph output is rebuilt with that bit cleared (e.g. the data
  gradient of the first layer when only parameter gradients are kept).

The pass is pure: nodes that do not change are shared with the input graph
(nodes are immutable), the others are rebuilt, and the input graph is left
as it was.
"""
from __future__ import annotations

from typing import Iterable

from ..errors import GraphError
from ..graph import Entry, Graph, Node


def _lookup(graph: Graph, key) -> Entry:
    if isinstance(key, Entry):
        try:
            graph.node_id(key.node)
        except KeyError:
            raise GraphError(f"prune: {key!r} is not an entry of this graph") from None
        if not 0 <= key.index < key.node.num_outputs:
            raise GraphError(f"prune: node '{key.node.name}' has no output {key.index}")
        return key
    if isinstance(key, bool) or not isinstance(key, (int, str)):
        raise GraphError(f"prune: an output is an index, a name or an Entry, got {key!r}")
    if isinstance(key, int):
        n = len(graph.outputs)
        if not -n <= key < n:
            raise GraphError(f"prune: output {key} out of range (the graph has {n} outputs)")
        return graph.outputs[key]
    names = graph.list_outputs()
    if key in names:
        return graph.outputs[names.index(key)]
    # internal outputs, named as get_internals() names them
    for node in graph.nodes:
        for i, nm in enumerate(node.output_names()[:node.num_visible_outputs]):
            if nm == key:
                return Entry(node, i)
    hits = [n for n in graph.nodes if n.name == key and n.num_visible_outputs == 1]
    if hits:
        return Entry(hits[0], 0)
    raise GraphError(f"prune: no output named '{key}'; graph outputs are "
                     f"{', '.join(names)} (internal outputs are named like "
                     f"'<node>_output')")


def _need_mask(node: Node) -> list[int] | None:
    """The ``need`` mask of a ``_backward_<op>`` node (one bit per forward
    argument, outputs are the set bits in order), or None for other nodes."""
    op = node.op
    if op is None or not op.name.startswith("_backward_") or "need" not in op.attrs:
        return None
    mask = list(node.params.need) if node.params.need else [1] * node.num_outputs
    if sum(1 for m in mask if m) != node.num_outputs:
        return None  # not register_backward's convention; leave it alone
    return mask


def prune(graph: Graph, outputs: Iterable | None = None) -> Graph:
    """The part of ``graph`` that ``outputs`` need (all outputs when None).

    ``outputs``: graph-output indices, output names (also internal ones such
    as ``'relu1_output'``) or Entries of the graph, in the order wanted.
    """
    outs = list(graph.outputs) if outputs is None else [_lookup(graph, k) for k in outputs]
    if not outs:
        raise GraphError("prune: no output requested")
    g = graph if outputs is None else graph.rewrite(outputs=outs)
    return _narrow_backward(g)


def _narrow_backward(g: Graph) -> Graph:
    """Clears the ``need`` bits of gradients that nothing reads."""
    returned = {g.entry_id(e) for e in g.outputs}

    def narrow(node: Node, inputs: list):
        mask = _need_mask(node)
        if mask is None:
            return None
        used = [bool(g.users(Entry(node, k))) or g.entry_id(Entry(node, k)) in returned
                for k in range(node.num_outputs)]
        if all(used):
            return None
        bits = [i for i, m in enumerate(mask) if m]
        new_mask = [0] * len(mask)
        for k, i in enumerate(bits):
            new_mask[i] = int(used[k])
        new = Node(node.op, node.name, {**node.attrs, "need": tuple(new_mask)}, inputs)
        kept = iter(range(new.num_outputs))
        return [Entry(new, next(kept)) if u else None for u in used]
    return g.rewrite(narrow)
