"""Layout: a graph rewritten to hold its activations channels-last inside.

``to_channels_last(graph, shapes)`` returns a new graph computing the same
outputs from the same variables (weights and data keep MXNet's
channel-first layouts) in which every Convolution runs with the
channel-last ``layout`` (NWC, NHWC, NDHWC), and Pooling, BatchNorm (on the
last axis), Concat and layout-free elementwise ops (every input the same
shape: an activation, a residual add) follow where their first input is
already channels-last. A ``transpose`` node is inserted wherever a
value changes layout -- into the first channels-last op, out of it to a
channel-first reader or a graph output, and each convolution weight to
MXNet's channel-last (O, *kernel, I) -- and at most one per value and
direction, so a value never goes out and back in (the pairs cancel by
construction). The planner then plans the transposes that XLA runs.

XLA's CPU convolutions work channels-last: lowered channel-first, it keeps a
transposed copy of each activation they read or write. Results are the same
up to float rounding (a convolution may sum in another order).

Rewritten nodes keep their names (the same op in another layout); the
weights that are transposed get a ``__shape__`` hint (shape inference
cannot infer a weight through a transpose); the transposes are named ``<value's node>_to_<layout>``. Run it on a forward
graph: the gradient pass then builds the backward of the rewritten graph
(the transposes' gradients are transposes). Pure: the input graph is not
changed.
"""
from __future__ import annotations

from ..graph import Entry, Graph, Node
from ..ops import get_op
from ..ops.nn import CHANNELS_LAST, is_channels_last
from .infer import infer_shapes

RANKS = (3, 4, 5)  # 1-D, 2-D and 3-D windows


def _forward_perm(rank: int) -> tuple:
    """Channel-first -> channel-last: (0, 2, ..., rank - 1, 1)."""
    return (0, *range(2, rank), 1)


def _backward_perm(rank: int) -> tuple:
    """Channel-last -> channel-first: (0, rank - 1, 1, ..., rank - 2)."""
    return (0, rank - 1, *range(1, rank - 1))


def to_channels_last(graph: Graph, shapes: dict | None = None, inferred=None) -> Graph:
    """``graph`` with its activations channels-last between the ops that
    have a channel-last form (see the module docstring). ``shapes``: input
    shapes as ``infer_shapes`` takes them, or ``inferred``, an ``Inferred``
    of ``graph``: the rewrite needs each value's rank, and the shapes of an
    elementwise op's inputs."""
    inf = inferred if inferred is not None else infer_shapes(graph, shapes or {})
    transpose = get_op("transpose")
    names = {n.name for n in graph.nodes}
    first: dict[int, Entry] = {}  # entry id -> the value, channel-first (as in graph)
    last: dict[int, Entry] = {}   # entry id -> the value, channels-last
    rank: dict[int, int] = {}     # entry id -> its rank, where held channels-last

    def fresh(base: str) -> str:
        name, k = base, 1
        while name in names:
            k += 1
            name = f"{base}{k}"
        names.add(name)
        return name

    def shape(e: Entry):
        return inf.shapes[graph.entry_id(e)]

    def suffix(e: Entry) -> str:
        return "" if e.index == 0 else f"_{e.index}"

    def get_first(e: Entry) -> Entry:
        eid = graph.entry_id(e)
        if eid not in first:
            r = rank[eid]
            t = Node(transpose, fresh(f"{e.node.name}{suffix(e)}_to_nc"),
                     {"axes": _backward_perm(r)}, [last[eid]])
            first[eid] = Entry(t, 0)
        return first[eid]

    def get_last(e: Entry) -> Entry:
        eid = graph.entry_id(e)
        if eid not in last:
            r = len(shape(e))
            t = Node(transpose, fresh(f"{e.node.name}{suffix(e)}_to_{_name(r)}"),
                     {"axes": _forward_perm(r)}, [get_first(e)])
            last[eid], rank[eid] = Entry(t, 0), r
        return last[eid]

    # the weights a convolution will read through a transpose: shape
    # inference cannot see through one backwards, so they get a shape hint
    turned = {id(n.inputs[1].node) for n in graph.nodes
              if n.op is not None and n.op.name == "Convolution" and
              n.inputs[1].node.op is None and _rule(n, [shape(n.inputs[0])], [False])}
    for node in graph.nodes:
        base = graph.row_ptr[graph.node_id(node)]
        if node.op is None:
            if id(node) in turned and "__shape__" not in node.attrs:
                node = Node(None, node.name, {**node.attrs, "__shape__": str(shape(Entry(node)))})
            first[base] = Entry(node, 0)
            continue
        ins = node.inputs
        rule = _rule(node, [shape(e) for e in ins],
                     [graph.entry_id(e) in last for e in ins])
        if rule is None:  # as it was, channel-first
            new = Node(node.op, node.name, node.attrs, [get_first(e) for e in ins])
            for i in range(node.num_outputs):
                first[base + i] = Entry(new, i)
            continue
        attrs, in_last, out_last = rule
        r = len(shape(ins[0]))
        new = Node(node.op, node.name, {**node.attrs, **attrs},
                   [get_last(e) if k in in_last else get_first(e) for k, e in enumerate(ins)])
        for i in range(node.num_outputs):
            if i in out_last:
                last[base + i], rank[base + i] = Entry(new, i), r
            else:
                first[base + i] = Entry(new, i)
    return Graph([get_first(e) for e in graph.outputs])


def _name(rank: int) -> str:
    return CHANNELS_LAST[rank - 2].lower()


def _rule(node: Node, in_shapes: list, held_last: list):
    """How ``node`` runs channels-last, or None where it does not: (the
    attributes that change, the input indices read channels-last, the
    output indices written channels-last)."""
    op, p = node.op, node.params
    data = in_shapes[0] if in_shapes else None
    r = len(data) if data is not None else 0
    if r not in RANKS:
        return None
    if op.name == "Convolution":
        if is_channels_last(p):
            return None  # already is; its input is the graph's own
        # the weight turns with the data: (O, I, *k) -> (O, *k, I)
        return {"layout": CHANNELS_LAST[r - 2]}, {0, 1}, {0}
    if not held_last[0]:
        # the other ops follow their inputs and never lead: pooling or
        # normalising a channel-first value needs no copy of it
        return None
    if op.name == "Pooling":
        return None if is_channels_last(p) else ({"layout": CHANNELS_LAST[r - 2]}, {0}, {0})
    if op.name == "BatchNorm":
        if p.axis % r != 1:
            return None
        # mean and inverse std (outputs 1, 2) are per channel: no layout
        return {"axis": r - 1}, {0}, {0}
    if op.name == "Concat":  # (held_last[0]: the first input leads)
        if any(s is None or len(s) != r for s in in_shapes):
            return None
        return ({"dim": _forward_perm(r).index(p.dim % r)}, set(range(len(in_shapes))),
                set(range(node.num_outputs)))
    if (op.category == "elementwise" and not op.needs_rng and
            all(s is not None and tuple(s) == tuple(data) for s in in_shapes)):
        return {}, set(range(len(in_shapes))), set(range(node.num_outputs))
    return None
