"""The fuse pass: chains of elementwise ops become one kernel.

``fuse(graph)`` returns a ``Fusion``: a side table over the graph that
groups nodes run as one fused kernel. The graph itself is not rewritten --
the lowering still evaluates every node with its own op, which is why
fusion never changes results -- but the planner treats a group as one step
whose inner tensors live in registers and need no storage.

Why a side table rather than a ``_fused`` op holding a subgraph: the
passes stay pure and composable (the graph, its entry ids and every other
side table are unchanged), the text form, JSON and the viz pictures still
show the real ops, and a group is just a list of node ids that the planner,
the arena interpreter and the pictures read.

The rule (one pass in topological order, linear):

- a node of category ``elementwise`` or ``injective`` absorbs the producer
  of one of its inputs when that producer has exactly one output, that
  output is read by this node only (possibly in several slots) and is no
  graph output, and the producer is itself elementwise/injective -- or is
  an ``opaque`` op (Convolution, FullyConnected, BatchNorm ...) followed by
  an elementwise consumer: the "epilogue" (bias, activation) runs in the
  heavy op's kernel;
- a group holds at most one opaque op; reductions and loss ops never fuse.

Each group is a tree whose root (the last node) is the only member read
from outside, so a group is convex: no path leaves it and comes back, and
it can run as one step at its root's place in any topological order.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..graph import Graph

FUSABLE = ("elementwise", "injective")


@dataclass(frozen=True)
class Fusion:
    """Groups of ``graph``'s nodes that run as one kernel.

    ``root[nid]`` is the node id of the last node of nid's group (nid itself
    for a node that is not fused; variables included). ``groups`` lists the
    groups of two or more nodes, members in topological order, root last.
    """

    graph: Graph
    root: tuple
    groups: tuple

    def members(self, nid: int) -> tuple:
        """Node ids of the group whose root is ``nid`` (``(nid,)`` if alone)."""
        return self._by_root.get(nid, (nid,))

    @property
    def _by_root(self) -> dict:
        d = self.__dict__.get("_cache")
        if d is None:
            d = {grp[-1]: grp for grp in self.groups}
            object.__setattr__(self, "_cache", d)
        return d

    def internal_entries(self) -> set:
        """Entry ids computed inside a group and read only there: no storage."""
        g = self.graph
        out = set()
        for grp in self.groups:
            for nid in grp[:-1]:
                out.add(g.row_ptr[nid])  # fused non-root members have one output
        return out

    @property
    def num_fused_nodes(self) -> int:
        return sum(len(grp) for grp in self.groups)


def no_fusion(graph: Graph) -> Fusion:
    """The trivial fusion: every node its own step (``fuse=False``)."""
    return Fusion(graph, tuple(range(len(graph.nodes))), ())


def fuse(graph: Graph) -> Fusion:
    """Groups chains of elementwise/injective ops, and opaque ops with their
    elementwise epilogues, into fused kernels (see the module docstring)."""
    nodes = graph.nodes
    n = len(nodes)
    nid_of = {id(nd): i for i, nd in enumerate(nodes)}
    # readers of each single-output node's output: -1 none yet, -2 several
    reader = [-1] * n
    for i, nd in enumerate(nodes):
        for e in nd.inputs:
            p = nid_of[id(e.node)]
            r = reader[p]
            if r == -1:
                reader[p] = i
            elif r != i:
                reader[p] = -2
    for e in graph.outputs:
        reader[nid_of[id(e.node)]] = -2

    parent = list(range(n))   # union-find towards the group's root
    master = [False] * n      # the group (at its root) holds an opaque op

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i, nd in enumerate(nodes):
        op = nd.op
        if op is None:
            continue
        if op.category == "opaque" and not op.is_loss:
            master[i] = True
        if op.category not in FUSABLE or op.is_loss:
            continue
        for e in nd.inputs:
            p = nid_of[id(e.node)]
            pn = e.node
            if pn.op is None or reader[p] != i or pn.num_outputs != 1 or find(p) == i:
                continue
            pop = pn.op
            if pop.is_loss:
                continue
            if pop.category in FUSABLE:
                pass
            elif pop.category == "opaque" and op.category == "elementwise":
                pass
            else:
                continue
            if master[p] and master[i]:
                continue  # one heavy op per kernel
            parent[p] = i
            master[i] = master[i] or master[p]

    root = tuple(find(i) for i in range(n))
    by_root: dict[int, list] = {}
    for i in range(n):
        r = root[i]
        if r != i:
            by_root.setdefault(r, []).append(i)
    groups = tuple(tuple(sorted(ms) + [r]) for r, ms in sorted(by_root.items()))
    return Fusion(graph, root, groups)
