"""Layout: a graph rewritten to hold its activations channels-last inside.

``to_channels_last(graph, shapes)`` returns a new graph computing the same
outputs from the same variables (data and weights keep MXNet's
channel-first layouts) in which every Convolution runs with the
channel-last ``layout`` (NWC, NHWC, NDHWC; its weight read as it is,
``weight_layout`` OIW/OIHW/OIDHW), and Pooling, BatchNorm (on the last
axis), Concat and elementwise ops (every input of the same rank,
broadcasting alike once permuted: an activation, a residual add, a bias
added by a broadcast op) follow where an input is already channels-last. In a training graph each backward node follows its forward
node. A ``transpose`` node is inserted wherever a value changes layout --
into the first channels-last op, out of it to a channel-first reader or a
graph output -- at most one per value and direction, so a value never
goes out and back in (the pairs cancel by construction). The planner then
plans the transposes that XLA runs.

XLA's CPU convolutions work channels-last: lowered channel-first, it keeps a
transposed copy of each activation they read or write. Results are the same
up to float rounding (a convolution may sum in another order).

Rewritten nodes keep their names (the same op in another layout); the
transposes are named ``<value's node>_to_nhwc`` (``_to_nwc``,
``_to_ndhwc``) and ``<value's node>_to_nc``. Pure: the input graph is not
changed.
"""
from __future__ import annotations

import re

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


LEAD = ("Convolution",)


def to_channels_last(graph: Graph, shapes: dict | None = None, inferred=None,
                     origin: dict | None = None, keep=(), lead=LEAD) -> Graph:
    """``graph`` with its activations channels-last between the ops that
    have a channel-last form (see the module docstring). ``shapes``: input
    shapes as ``infer_shapes`` takes them, or ``inferred``, an ``Inferred``
    of ``graph``: the rewrite needs each value's rank, and the shapes of an
    elementwise op's inputs. A training graph's backward nodes follow their
    forward nodes: ``origin`` maps a backward node's name to its forward
    node's (``build_gradient_with_heads`` fills one); by default a node
    ``<f>_backward`` (or ``<f>_backward2`` ...) of ``f``'s backward op
    belongs to ``f``. Nodes named in ``keep`` stay as they are (their
    outputs are fed by entry key). ``lead``: the ops that go channels-last
    whatever their input's layout (Pooling, BatchNorm and Concat may be
    added; by default they follow a convolution)."""
    inf = inferred if inferred is not None else infer_shapes(graph, shapes or {})
    transpose = get_op("transpose")
    by_name = {n.name: n for n in graph.nodes}
    names = set(by_name)
    keep = set(keep)
    first: dict[int, Entry] = {}  # entry id -> the value, channel-first (as in graph)
    last: dict[int, Entry] = {}   # entry id -> the value, channels-last
    rank: dict[int, int] = {}     # entry id -> its rank, where held channels-last
    decided: dict[str, tuple] = {}  # forward node name -> its rule

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
            t = Node(transpose, fresh(f"{e.node.name}{suffix(e)}_to_nc"),
                     {"axes": _backward_perm(rank[eid])}, [last[eid]])
            first[eid] = Entry(t, 0)
        return first[eid]

    def get_last(e: Entry, r: int) -> Entry:
        eid = graph.entry_id(e)
        if eid not in last:
            t = Node(transpose, fresh(f"{e.node.name}{suffix(e)}_to_{_name(r)}"),
                     {"axes": _forward_perm(r)}, [get_first(e)])
            last[eid], rank[eid] = Entry(t, 0), r
        return last[eid]

    def forward_of(node: Node):
        name = (origin or {}).get(node.name)
        if name is None:
            m = re.fullmatch(r"(.+)_backward\d*", node.name)
            name = m and m.group(1)
        fwd = by_name.get(name)
        return fwd if fwd is not None and fwd.op is node.op.forward else None

    for node in graph.nodes:
        base = graph.row_ptr[graph.node_id(node)]
        if node.op is None:
            first[base] = Entry(node, 0)
            continue
        ins = node.inputs
        rule = None
        if node.name not in keep:
            if node.op.forward is not None and node.op.backward_io is not None:
                fwd = forward_of(node)
                rule = fwd is not None and decided.get(fwd.name)
                rule = _backward_rule(node, rule) if rule else None
            if rule is None:
                rule = _rule(node, [shape(e) for e in ins],
                             [graph.entry_id(e) in last for e in ins], lead)
        if rule is None:  # as it was, channel-first
            new = node.with_inputs([get_first(e) for e in ins])
            for i in range(node.num_outputs):
                first[base + i] = Entry(new, i)
            continue
        attrs, in_last, out_last, r = rule
        decided[node.name] = rule
        new = Node(node.op, node.name, {**node.attrs, **attrs},
                   [get_last(e, r) if k in in_last else get_first(e) for k, e in enumerate(ins)])
        for i in range(node.num_outputs):
            if i in out_last:
                last[base + i], rank[base + i] = Entry(new, i), r
            else:
                first[base + i] = Entry(new, i)
    return Graph([get_first(e) for e in graph.outputs])


def _name(rank: int) -> str:
    return CHANNELS_LAST[rank - 2].lower()


def _rule(node: Node, in_shapes: list, held_last: list, lead=LEAD):
    """How ``node`` runs channels-last, or None where it does not: (the
    attributes that change, the input indices read channels-last, the
    output indices written channels-last, the rank of those)."""
    op, p = node.op, node.params
    data = in_shapes[0] if in_shapes else None
    r = len(data) if data is not None else 0
    if r not in RANKS or op.forward is not None:
        return None
    if op.name == "Convolution":
        if is_channels_last(p) or p.weight_layout:
            return None  # already chosen by the graph's author
        # the weight keeps MXNet's channel-first layout: XLA reads it in
        # place, where a transpose node would be a copy the plan counts
        return ({"layout": CHANNELS_LAST[r - 2], "weight_layout": "OI" + "DHW"[3 - (r - 2):]},
                {0}, {0}, r)
    # the other ops follow a channels-last input (pooling or normalising a
    # channel-first value needs no copy of it), unless they lead
    follows = op.name in lead or held_last[0]
    if op.name == "Pooling":
        return ({"layout": CHANNELS_LAST[r - 2]}, {0}, {0}, r) \
            if follows and not is_channels_last(p) else None
    if op.name == "BatchNorm":
        # mean and inverse std (outputs 1, 2) are per channel: no layout
        return ({"axis": r - 1}, {0}, {0}, r) if follows and p.axis % r == 1 else None
    if op.name == "Concat":
        if not follows or any(s is None or len(s) != r for s in in_shapes):
            return None
        return ({"dim": _forward_perm(r).index(p.dim % r)}, set(range(len(in_shapes))),
                set(range(node.num_outputs)), r)
    if (op.category == "elementwise" and not op.needs_rng and any(held_last) and
            _broadcasts_within(in_shapes, r)):
        return {}, set(range(len(in_shapes))), set(range(node.num_outputs)), r
    return None


def _broadcasts_within(in_shapes: list, r: int) -> bool:
    """Whether the inputs have rank ``r`` and each axis of each is 1 or the
    size all others agree on: permuted alike, they broadcast alike (a
    residual add, or a bias of shape (1, C, 1, 1) added by a broadcast op)."""
    if any(s is None or len(s) != r for s in in_shapes):
        return False
    for dims in zip(*in_shapes):
        if len({d for d in dims if d != 1}) > 1:
            return False
    return True


def _backward_rule(node: Node, fwd_rule: tuple):
    """A backward node's rule from its forward node's: the same attribute
    changes; the gradients of channels-last outputs, and the forward values
    it reads, in the layout the forward node had them; the gradients of
    channels-last inputs written channels-last."""
    attrs, in_last, out_last, r = fwd_rule
    ograds, ins, outs, grads = node.op.backward_io(node.params)
    read = ([o in out_last for o in ograds] + [i in in_last for i in ins] +
            [o in out_last for o in outs])
    return (attrs, {k for k, x in enumerate(read) if x},
            {k for k, i in enumerate(grads) if i in in_last}, r)
