"""The schedule: the execution order a memory plan is made for.

``schedule(graph, fusion)`` returns the steps, in order; a step is the node
ids of one fused group (members in topological order) or a single op node.
Variables are not steps. The planner's liveness, every strategy and the
lower bound are for this order, so it is a separate, swappable, pure
function (``plan(..., schedule='dfs' | 'memory' | a callable)``).

- ``dfs``: the graph's own order -- MXNet's DFS post-order from the outputs,
  inputs before users in input order -- with each fused group at its root's
  place. Deterministic.
- ``memory``: a memory-aware list schedule. Among the steps that are
  ready, it runs first the one that allocates the fewest bytes net of the
  bytes it frees (outputs minus inputs it is the last reader of), ties
  broken by the DFS position; so frees move forward and allocations back.
  A heap with lazy updates keeps it O(n log n).
"""
from __future__ import annotations

import heapq
from typing import Callable

from ..errors import PlanError
from ..graph import Graph
from .fuse import Fusion, no_fusion


def schedule(graph: Graph, fusion: Fusion | None = None, order: str | Callable = "dfs",
             nbytes=None) -> tuple:
    """Steps in execution order: tuples of node ids (see the module docstring).

    ``nbytes(entry_id) -> int`` is needed by the ``memory`` order only.
    """
    fusion = fusion or no_fusion(graph)
    if callable(order):
        return tuple(tuple(s) for s in order(graph, fusion))
    if order == "dfs":
        return dfs_schedule(graph, fusion)
    if order == "memory":
        if nbytes is None:
            raise PlanError("the memory-aware schedule needs tensor sizes (nbytes)")
        return memory_schedule(graph, fusion, nbytes)
    raise PlanError(f"unknown schedule {order!r}; use 'dfs', 'memory' or a function "
                    f"(graph, fusion) -> steps")


def dfs_schedule(graph: Graph, fusion: Fusion) -> tuple:
    """The graph's topological order with fused groups at their roots."""
    steps = []
    root = fusion.root
    for nid, node in enumerate(graph.nodes):
        if node.op is None or root[nid] != nid:
            continue
        steps.append(fusion.members(nid))
    return tuple(steps)


def memory_schedule(graph: Graph, fusion: Fusion, nbytes) -> tuple:
    """A list schedule that prefers ready steps which free memory.

    Priority of a ready step: (bytes it allocates - bytes whose last reader
    it is, position in the DFS order). Ties and everything else keep the
    DFS order, so on a chain this is the DFS order.
    """
    base = dfs_schedule(graph, fusion)
    nsteps = len(base)
    g = graph
    step_of = {}
    for s, members in enumerate(base):
        for nid in members:
            step_of[nid] = s
    # external input entries and output entries of each step
    ins: list[list[int]] = [[] for _ in range(nsteps)]
    outs: list[list[int]] = [[] for _ in range(nsteps)]
    inner = fusion.internal_entries()
    for s, members in enumerate(base):
        seen = set()
        for nid in members:
            for e in g.nodes[nid].inputs:
                eid = g.entry_id(e)
                if eid not in inner and eid not in seen:
                    seen.add(eid)
                    ins[s].append(eid)
            for k in range(g.nodes[nid].num_outputs):
                eid = g.row_ptr[nid] + k
                if eid not in inner:
                    outs[s].append(eid)
    producer = {}
    for s in range(nsteps):
        for eid in outs[s]:
            producer[eid] = s
    readers_left: dict[int, int] = {}
    succ: list[list[int]] = [[] for _ in range(nsteps)]
    indeg = [0] * nsteps
    for s in range(nsteps):
        preds = set()
        for eid in ins[s]:
            readers_left[eid] = readers_left.get(eid, 0) + 1
            p = producer.get(eid)
            if p is not None:
                preds.add(p)
        for p in preds:
            succ[p].append(s)
        indeg[s] = len(preds)
    pinned = {g.entry_id(e) for e in g.outputs}
    readers: dict[int, list[int]] = {}
    for s in range(nsteps):
        for eid in ins[s]:
            readers.setdefault(eid, []).append(s)
    done = [False] * nsteps
    is_ready = [False] * nsteps

    def priority(s):
        alloc = sum(nbytes(e) for e in outs[s])
        free = sum(nbytes(e) for e in ins[s]
                   if e in producer and e not in pinned and readers_left[e] == 1)
        return alloc - free

    current = [0] * nsteps
    ready = []
    for s in range(nsteps):
        if indeg[s] == 0:
            is_ready[s] = True
            current[s] = priority(s)
            ready.append((current[s], s))
    heapq.heapify(ready)
    order = []
    while ready:
        pr, s = heapq.heappop(ready)
        if done[s] or pr != current[s]:
            continue  # a stale heap item: the step ran, or its priority changed
        done[s] = True
        order.append(base[s])
        for eid in ins[s]:
            readers_left[eid] -= 1
            if readers_left[eid] == 1 and eid in producer and eid not in pinned:
                # the one reader left will free eid: its priority improves
                for t in readers[eid]:
                    if not done[t] and t != s:
                        if is_ready[t]:
                            current[t] = priority(t)
                            heapq.heappush(ready, (current[t], t))
                        break
        for t in succ[s]:
            indeg[t] -= 1
            if indeg[t] == 0:
                is_ready[t] = True
                current[t] = priority(t)
                heapq.heappush(ready, (current[t], t))
    if len(order) != nsteps:
        raise PlanError("the memory schedule could not order every step (a cycle?)")
    return tuple(order)
