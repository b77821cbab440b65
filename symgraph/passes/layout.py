"""Layout: a graph rewritten to hold its activations channels-last inside.

``to_channels_last(graph, shapes)`` returns a new graph computing the same
outputs from the same variables (data and weights keep MXNet's
channel-first layouts) in which every Convolution runs with the
channel-last ``layout`` (NWC, NHWC, NDHWC; its weight read as it is,
``weight_layout`` OIW/OIHW/OIDHW), and Pooling, BatchNorm (on the last
axis), Concat and elementwise ops (every input of the same rank,
broadcasting alike once permuted: an activation, a residual add, a bias
added by a broadcast op) follow where an input is already channels-last.
In a training graph each backward node follows its forward node, found by
the tensors it reads (never by its name). A ``transpose`` node is inserted
wherever a value changes layout -- into the first channels-last op, out of
it to a channel-first reader or a graph output -- at most one per value
and direction, so a value never
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

from ..graph import Entry, Graph, Node, unique_name
from ..ops import get_op
from ..ops.nn import CHANNELS_LAST, is_channels_last
from .infer import infer_shapes
from .recompute import recompute_of

RANKS = (3, 4, 5)  # 1-D, 2-D and 3-D windows


def _forward_perm(rank: int) -> tuple:
    """Channel-first -> channel-last: (0, 2, ..., rank - 1, 1)."""
    return (0, *range(2, rank), 1)


def _backward_perm(rank: int) -> tuple:
    """Channel-last -> channel-first: (0, rank - 1, 1, ..., rank - 2)."""
    return (0, rank - 1, *range(1, rank - 1))


LEAD = ("Convolution",)


def to_channels_last(graph: Graph, shapes: dict | None = None, inferred=None,
                     keep=(), lead=LEAD) -> Graph:
    """``graph`` with its activations channels-last between the ops that
    have a channel-last form (see the module docstring). ``shapes``: input
    shapes as ``infer_shapes`` takes them, or ``inferred``, an ``Inferred``
    of ``graph``: the rewrite needs each value's rank, and the shapes of an
    elementwise op's inputs. A training graph's backward nodes follow their
    forward nodes (``_forward_rule``). Nodes named in ``keep`` stay as they
    are (their outputs are fed by entry key). ``lead``: the ops that go
    channels-last whatever their input's layout (Pooling, BatchNorm and
    Concat may be added; by default they follow a convolution)."""
    inf = inferred if inferred is not None else infer_shapes(graph, shapes or {})
    transpose = get_op("transpose")
    names = {n.name for n in graph.nodes}
    keep = set(keep)
    last: dict[int, Entry] = {}   # entry id -> the value, channels-last
    decided: dict[int, tuple] = {}  # node id -> the rule it runs by
    forwards = _Forwards(graph)

    def fresh(base: str) -> str:
        return unique_name(base, names)

    def get_last(e: Entry, value: Entry, r: int) -> Entry:
        """``e`` channels-last: as a channels-last node wrote it, or
        transposed from ``value``, its channel-first form."""
        eid = graph.entry_id(e)
        if eid not in last:
            t = Node(transpose, fresh(f"{e.node.name}{_suffix(e.index)}_to_{_name(r)}"),
                     {"axes": _forward_perm(r)}, [value])
            last[eid] = Entry(t, 0)
        return last[eid]

    def relayout(node: Node, inputs: list):
        if node.op is None or node.name in keep:
            return None
        if node.op.forward is not None and node.op.backward_io is not None:
            rule = _forward_rule(graph, node, decided, forwards, inf, last, lead)
        else:
            rule = _rule(node, [inf.shapes[graph.entry_id(e)] for e in node.inputs],
                         [graph.entry_id(e) in last for e in node.inputs], lead)
        if rule is None:  # as it was, channel-first
            return None
        attrs, in_last, out_last, r = rule
        decided[graph.node_id(node)] = rule
        new = Node(node.op, node.name, {**node.attrs, **attrs},
                   [get_last(e, x, r) if k in in_last else x
                    for k, (e, x) in enumerate(zip(node.inputs, inputs))])
        base = graph.entry_id_of_node(node)
        outs = []
        for i in range(node.num_outputs):
            if i not in out_last:
                outs.append(Entry(new, i))
                continue
            last[base + i] = Entry(new, i)
            # its channel-first form, for channel-first readers and the
            # graph's outputs (left out of the graph where none reads it)
            t = Node(transpose, fresh(f"{node.name}{_suffix(i)}_to_nc"),
                     {"axes": _backward_perm(r)}, [Entry(new, i)])
            outs.append(Entry(t, 0))
        return outs
    return graph.rewrite(relayout)


def _suffix(index: int) -> str:
    return "" if index == 0 else f"_{index}"


def _forward_rule(graph: Graph, node: Node, decided: dict, forwards, inf, last: dict,
                  lead):
    """A backward node's rule: its forward node's (``_Forwards``). One
    that reads only gradients and whose forward node is not found (a head
    gradient's reader) follows its incoming gradient as its forward op
    would follow its input. None: channel-first."""
    cands = forwards.of(node)
    if cands:
        rules = [decided.get(graph.node_id(c)) for c in cands]
        # twins (the same op on the same tensors) were rewritten alike, or not at all
        if rules[0] is None or any(x != rules[0] for x in rules):
            return None
        return _backward_rule(node, rules[0])
    ograds, ins, outs, grads = node.op.backward_io(node.params)
    if ins or outs or len(ograds) != 1 or len(grads) != 1:
        return None
    e = node.inputs[0]
    rule = _rule(node, [inf.shapes[graph.entry_id(e)]], [graph.entry_id(e) in last], lead,
                 op=node.op.forward)
    return rule and (rule[0], {0}, {0}, rule[3])


class _Forwards:
    """The forward node whose backward a node is, found by what it reads
    (``backward_io``): a forward output read is the node's; forward inputs
    read are those of the reader of the forward op and attributes (the
    backward copies them); a backward that reads only gradients (an
    average pooling's, a scalar op's) reads the gradient of the forward
    node's output (``_by_gradient``). A recompute clone read stands for
    the node it repeats (``passes.recompute``)."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.memo: dict[int, list] = {}  # node id -> its forward nodes
        self.original = {n.name: n for n in graph.nodes if recompute_of(n) is None}

    def _entry(self, e: Entry) -> Entry:
        of = recompute_of(e.node)
        return e if of is None else Entry(self.original[of], e.index)

    def of(self, node: Node) -> list:
        """Several where twins (the same op, attributes and inputs) match;
        none where not found."""
        key = self.graph.node_id(node)
        if key in self.memo:  # a gradient's writer comes earlier: looked up once
            return self.memo[key]
        self.memo[key] = []
        ograds, ins, outs, _ = node.op.backward_io(node.params)
        read_ins = [self._entry(e) for e in node.inputs[len(ograds):len(ograds) + len(ins)]]
        read_outs = [self._entry(e) for e in node.inputs[len(ograds) + len(ins):]]
        fwd_op = node.op.forward
        if read_outs:
            f = read_outs[0].node
            cands = [f] if f.op is fwd_op and all(e == Entry(f, o)
                                                   for e, o in zip(read_outs, outs)) else []
        elif read_ins:
            want = _visible(node.attrs, "need")
            cands = [u for u in self.graph.users(read_ins[0]) if u.op is fwd_op and
                     all(i < len(u.inputs) and u.inputs[i] == e
                         for i, e in zip(ins, read_ins)) and _visible(u.attrs) == want]
        else:
            cands = self._by_gradient(node)
        self.memo[key] = cands
        return cands

    def _by_gradient(self, node: Node) -> list:
        """The forward node of a backward ``node`` that reads only the
        gradient of its output: the gradient's writer is the backward of
        that output's reader (its forward node's input), or an op shaped like
        the output (Flatten's gradient, ``reshape_like``), or a sum of such."""
        fwd_op, want = node.op.forward, node.op.backward_io(node.params)[0]
        e = node.inputs[0] if want else None
        while e is not None and e.node.op is not None and e.node.op.name == "ElementWiseSum":
            e = e.node.inputs[0]  # a gradient summed over readers: one of them
        if e is None or e.node.op is None:
            return []  # a head gradient: fed
        w = e.node
        if w.op.forward is not None and w.op.backward_io is not None:
            found = self.of(w)
            xs = [found[0].inputs[w.op.backward_io(w.params)[3][e.index]]] \
                if len(found) == 1 else []
        else:
            xs = [w.inputs[i] for i in w.op.shape_inputs(w.params)]
        xs = [self._entry(x) for x in xs]
        return [x.node for x in xs if x.node.op is fwd_op and x.index == want[0]][:1]


def _visible(attrs: dict, *drop) -> dict:
    return {k: v for k, v in attrs.items() if not k.startswith("__") and k not in drop}


def _name(rank: int) -> str:
    return CHANNELS_LAST[rank - 2].lower()


def _rule(node: Node, in_shapes: list, held_last: list, lead=LEAD, op=None):
    """How ``node`` runs channels-last, or None where it does not: (the
    attributes that change, the input indices read channels-last, the
    output indices written channels-last, the rank of those). ``op``: the
    op whose rule applies (default: the node's, if no backward op)."""
    p = node.params
    op = op or node.op
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
