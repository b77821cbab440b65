"""Placement: which device runs each node, and explicit copies between them.

``place(graph, group2ctx, default)`` follows nnvm's PlaceDevice as MXNet
1.x runs it (graph_executor's AssignContext):

1. a node whose ``__ctx_group__`` is a key of ``group2ctx`` runs there
   (``sg.AttrScope(ctx_group=...)`` sets it; variables made in the scope,
   parameters included, carry it too);
2. forward, in topological order: a node without a group takes the device
   of its first input that has one; a gradient node takes the device of
   the forward node whose gradient rule made it (``origin``, from the
   gradient pass), so the backward of a stage runs where its forward ran;
3. backward, in reverse order: an input still without a device (a
   variable such as ``data`` outside every scope) takes its consumer's;
4. whatever is left runs on ``default``.

Then every edge whose two ends are on different devices gets a
``_CrossDeviceCopy`` node (one per tensor and destination, shared by the
readers there), placed on the destination. A copy already in the graph (the
gradient of a copy) is placed with its consumer. The result is a new graph
and a side table; the input graph is not changed (passes are pure).

``with_groups(graph, groups)`` writes ``__ctx_group__`` attributes (the
proposal of ``symgraph plan --split``); ``contiguous_groups`` cuts a
graph's topological order into stages.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..errors import ContextError
from ..graph import Entry, Graph, Node, unique_name
from ..ops.registry import get_op

GROUP_KEY = "__ctx_group__"
COPY_OP = "_CrossDeviceCopy"


class PlacementError(ContextError):
    """A group2ctx that does not fit the graph (an unknown or unmapped group)."""


@dataclass(eq=False)
class Placement:
    """A placed graph: ``graph`` holds the copy nodes; ``device[name]`` is
    the index in ``devices`` of the device each node (variables included)
    runs on; ``copies`` names the inserted copy nodes."""

    graph: Graph
    devices: list
    device: dict
    copies: list

    def device_of(self, node: Node):
        return self.devices[self.device[node.name]]

    def nodes_on(self, index: int) -> list:
        return [n for n in self.graph.nodes if self.device[n.name] == index]


def groups(graph: Graph) -> list:
    """The ctx_group names the graph's nodes carry, in order of appearance."""
    seen = {}
    for n in graph.nodes:
        g = n.attrs.get(GROUP_KEY)
        if g is not None:
            seen.setdefault(g, None)
    return list(seen)


def check_group2ctx(graph: Graph, group2ctx: dict) -> None:
    """PlacementError naming the first key of ``group2ctx`` that no node
    carries, or the first group of the graph that it does not map."""
    have = groups(graph)
    unknown = [k for k in group2ctx if k not in have]
    if unknown:
        raise PlacementError(
            f"group2ctx names group '{unknown[0]}', which no node of the network has "
            f"(its ctx_group attributes: {', '.join(have) or 'none'})")
    unmapped = [k for k in have if k not in group2ctx]
    if unmapped:
        node = next(n.name for n in graph.nodes if n.attrs.get(GROUP_KEY) == unmapped[0])
        raise PlacementError(
            f"node '{node}' has ctx_group '{unmapped[0]}', which group2ctx does not map "
            f"(it maps {', '.join(group2ctx)})")


def place(graph: Graph, group2ctx: dict, default, origin: dict | None = None) -> Placement:
    """The placed graph for ``group2ctx`` (group name -> device, any
    hashable device label) with ``default`` for nodes no rule places.
    ``origin``: gradient node name -> forward node name (TrainingSplit's)."""
    group2ctx = dict(group2ctx or {})
    origin = origin or {}
    if group2ctx:
        check_group2ctx(graph, group2ctx)
    devices = [default]
    for d in group2ctx.values():
        if d not in devices:
            devices.append(d)
    index = {d: i for i, d in enumerate(devices)}
    nodes = graph.nodes
    by_name = {n.name: n for n in nodes}
    dev: dict[str, int] = {}
    for n in nodes:
        grp = n.attrs.get(GROUP_KEY)
        if grp is not None and group2ctx:
            dev[n.name] = index[group2ctx[grp]]

    def is_copy(n):
        return n.op is not None and n.op.name == COPY_OP
    # forward nodes: the first placed input's device
    for n in nodes:
        if n.name in dev or n.op is None or n.name in origin or is_copy(n):
            continue
        for e in n.inputs:
            d = dev.get(e.node.name)
            if d is not None:
                dev[n.name] = d
                break
    # variables read by forward nodes: their (last) forward reader's device
    _from_consumers([n for n in nodes if n.name not in origin], dev)
    # gradient nodes: their forward node's device
    grads = [n for n in nodes if n.name in origin and not is_copy(n)]
    for n in grads:
        d = dev.get(origin[n.name])
        if n.name not in dev and d is not None:
            dev[n.name] = d
    _from_consumers(nodes, dev)
    # a gradient of a variable placed only now (a parameter's gradient sum)
    for n in grads:
        if n.name not in dev:
            d = dev.get(origin[n.name])
            if d is None:
                d = next((dev[e.node.name] for e in n.inputs if e.node.name in dev), None)
            if d is not None:
                dev[n.name] = d
    _from_consumers(nodes, dev)
    for n in nodes:
        dev.setdefault(n.name, 0)
    return _insert_copies(graph, devices, dev, by_name)


def _from_consumers(nodes, dev: dict) -> None:
    """Inputs without a device take their (last) consumer's."""
    for n in reversed(nodes):
        d = dev.get(n.name)
        if d is None:
            continue
        for e in n.inputs:
            if e.node.name not in dev:
                dev[e.node.name] = d


def _insert_copies(graph: Graph, devices: list, dev: dict, by_name: dict) -> Placement:
    copy_op = get_op(COPY_OP)
    taken = set(by_name)
    copies: dict[tuple, Entry] = {}  # (entry id, device) -> the copy there
    copy_names: list[str] = []
    out_dev = dict(dev)

    def copy_of(e: Entry, value: Entry, d: int) -> Entry:
        key = (graph.entry_id(e), d)
        if key not in copies:
            base = f"{e.node.name}{'_' + str(e.index) if e.index else ''}_copy_to_dev{d}"
            name = unique_name(base, taken)
            out_dev[name] = d
            copy_names.append(name)
            copies[key] = Entry(Node(copy_op, name, {}, [value]), 0)
        return copies[key]

    def cross(n: Node, inputs: list):
        # a copy already in the graph (the gradient of a copy) stays with its reader
        if n.op is None or n.op.name == COPY_OP:
            return None
        d = dev[n.name]
        if all(dev[e.node.name] == d for e in n.inputs):
            return None
        return n.with_inputs([x if dev[e.node.name] == d else copy_of(e, x, d)
                              for e, x in zip(n.inputs, inputs)])
    return Placement(graph.rewrite(cross), devices, out_dev, copy_names)


def with_groups(graph: Graph, group_of: dict) -> Graph:
    """A copy of ``graph`` whose nodes named in ``group_of`` carry
    ``__ctx_group__ = group_of[name]`` (None removes it); other nodes keep
    their attributes. Nodes are rebuilt where an attribute or an input
    changed."""
    def regroup(n: Node, inputs: list):
        if n.name not in group_of:
            return None
        attrs = dict(n.attrs)
        grp = group_of[n.name]
        if grp is None:
            attrs.pop(GROUP_KEY, None)
        else:
            attrs[GROUP_KEY] = str(grp)
        return None if attrs == n.attrs else Node(n.op, n.name, attrs, inputs)
    return graph.rewrite(regroup)


def contiguous_groups(graph: Graph, cuts: Sequence[int], names: Sequence[str] | None = None
                      ) -> dict:
    """node name -> group for stages cut from the op nodes' topological
    order: op node k (counting op nodes only) is in stage i when
    ``cuts[i-1] <= k < cuts[i]``. Each variable joins the stage of its
    first reader (data and parameters live with the layer that reads them
    first). ``names`` default to stage1, stage2, ..."""
    ops = [n for n in graph.nodes if n.op is not None]
    bounds = [0, *cuts, len(ops)]
    if any(a > b for a, b in zip(bounds, bounds[1:])):
        raise PlacementError(f"cut points {list(cuts)} are not ascending within 0..{len(ops)}")
    names = list(names) if names is not None else \
        [f"stage{i + 1}" for i in range(len(bounds) - 1)]
    out = {}
    for i in range(len(bounds) - 1):
        for n in ops[bounds[i]:bounds[i + 1]]:
            out[n.name] = names[i]
    for n in ops:
        for e in n.inputs:
            if e.node.op is None and e.node.name not in out:
                out[e.node.name] = out[n.name]
    return out
