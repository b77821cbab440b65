"""Memory-planning strategies over a ``Liveness``.

Design note (in the manner of NNVM's PlanMemory):

Stages. ``liveness.analyze`` (what is planned, first and last step of each
tensor, the inplace candidates) -> a strategy here or in ``arena.py``
(storage slots or byte offsets per tensor) -> ``verify.check_placement``
(no two tensors live at the same step overlap, except a declared inplace
pair) -> the ``Plan`` attaches the results to the graph as side tables.
Nodes are never touched.

Never planned: variables (inputs, parameters, aux states, head gradients),
parameter gradients (written into the user's gradient buffers), tensors
inside fused groups. Graph outputs are planned but pinned (live to the end).

Strategies (each a pure function of the liveness):

- ``naive``: one slot per tensor.
- ``inplace``: an output takes the slot of an input that dies at its op
  when the op declares the pair (``OpDef.inplace``), the input is read once
  there and by no other op that could still run, and the sizes match; no
  other reuse (MXNet with ``NNVM_EXEC_MATCH_RANGE=0``).
- ``coshare``: MXNet's free pool (``allocator.BlockPool``): a slot freed by
  a dead tensor serves a later request within the match range and grows to
  the larger size. Restricted so that ops that could run in parallel never
  share: the slot of a dead tensor serves a request at step s only when
  every step that read the tensor is an ancestor of s (s depends on it),
  and an input is overwritten in place only when its other readers are
  ancestors too (``Liveness.all_readers_before``). So every reuse follows a
  data dependence and the plan stays valid for any parallel execution of
  the graph. A freed slot is dropped from the pool after the last step that
  could take it (``Liveness.reusable_until``), which keeps the scans short
  without changing any choice. (MXNet colours nodes along the longest
  paths for the same purpose; with its default ``NNVM_EXEC_NUM_TEMP=1``
  every node gets one colour, i.e. no restriction. ``parallel_safe=False``
  gives that behaviour here.)
- ``both``: inplace, then co-share, in one pass per step as MXNet does --
  MXNet's default.
- ``arena`` (``arena.py``): byte offsets in one buffer.
- ``lower_bound``: the largest sum of bytes live at one step, less what
  inplace pairs at that step can save at most. Every verified plan for
  this schedule needs at least that much.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from .allocator import BlockPool
from .liveness import Liveness

STRATEGIES = ("naive", "inplace", "coshare", "both", "arena", "lower_bound")
PLACED = ("naive", "inplace", "coshare", "both", "arena")


@dataclass(eq=False)
class Assignment:
    """Where a strategy puts every tensor.

    ``offset[t]``: byte offset in the strategy's address space (slots laid
    side by side for slot strategies; the arena itself for ``arena``).
    ``total``: bytes the strategy needs. ``slot[t]`` / ``slot_size``: the
    storage slot of each tensor (for ``arena``, its inplace-merged buffer).
    ``inplace``: the (input, output) tensor pairs where the output took the
    input's storage.
    """

    name: str
    offset: list
    total: int
    slot: list
    slot_size: list
    inplace: list = field(default_factory=list)
    note: str = ""


def slot_offsets(slot: list, slot_size: list) -> list:
    """Offsets of tensors when the slots are laid side by side."""
    base, run = [0] * len(slot_size), 0
    for i, sz in enumerate(slot_size):
        base[i] = run
        run += sz
    return [base[k] for k in slot]


def naive(live: Liveness) -> Assignment:
    """Every tensor its own storage."""
    t = live.num_tensors
    slot = list(range(t))
    sizes = list(live.nbytes)
    return Assignment("naive", slot_offsets(slot, sizes), sum(sizes), slot, sizes)


def pool_plan(live: Liveness, name: str, *, inplace: bool, match_range: int,
              parallel_safe: bool = True) -> Assignment:
    """MXNet's AllocMemory: per step, inplace pairs first, then requests from
    the pool for the other outputs, then the step's dead tensors go back."""
    pool = BlockPool(match_range)
    ntensors = live.num_tensors
    slot = [-1] * ntensors
    taken = [False] * ntensors
    taken_pairs = []
    nbytes = live.nbytes
    pairs, step_out, dies = live.pairs, live.step_out, live.dies
    request, release = pool.request, pool.release
    before, until = live.all_readers_before, live.reusable_until
    for s in range(live.num_steps):
        if inplace and pairs[s]:
            for x, o in pairs[s]:
                if slot[o] >= 0 or taken[x]:
                    continue
                if parallel_safe and not before(x, s, skip_self=True):
                    continue  # another reader of x could still be running
                slot[o] = slot[x]
                taken[x] = True
                taken_pairs.append((x, o))
        usable = (lambda t, s=s: before(t, s)) if parallel_safe else None
        for o in step_out[s]:
            if slot[o] < 0:
                slot[o] = request(nbytes[o], usable, s)
        for t in dies[s]:
            if not taken[t]:
                # past reusable_until(t) no step may take t's slot: the pool drops it
                release(slot[t], t, until(t) if parallel_safe else None)
    sizes = pool.sizes
    return Assignment(name, slot_offsets(slot, sizes), sum(sizes), slot, list(sizes),
                      taken_pairs)


def pool_plans(live: Liveness, match_range: int, parallel_safe: bool) -> dict:
    """MXNet's plans of one liveness: ``naive`` and the storage pool with
    inplace, co-share or both (the arena is packed from these,
    ``arena.arena_plan``)."""
    return {
        "naive": naive(live),
        "inplace": pool_plan(live, "inplace", inplace=True, match_range=0,
                             parallel_safe=parallel_safe),
        "coshare": pool_plan(live, "coshare", inplace=False, match_range=match_range,
                             parallel_safe=parallel_safe),
        "both": pool_plan(live, "both", inplace=True, match_range=match_range,
                          parallel_safe=parallel_safe),
    }


def inplace_saving(pairs, nbytes) -> int:
    """The most bytes inplace pairs at one step can save: a maximum-weight
    matching (each input and output in at most one pair). Outputs are taken
    heaviest first with augmenting paths, which is exact for weights on one
    side of a bipartite graph (a transversal matroid)."""
    if len(pairs) == 1:
        return nbytes[pairs[0][1]]
    xs = {x for x, _ in pairs}
    os_ = {o for _, o in pairs}
    if len(xs) == len(os_) == len(pairs):
        return sum(nbytes[o] for o in os_)
    adj: dict = {}
    for x, o in pairs:
        adj.setdefault(o, []).append(x)
    match: dict = {}

    def augment(o, seen):
        for x in adj[o]:
            if x in seen:
                continue
            seen.add(x)
            if x not in match or augment(match[x], seen):
                match[x] = o
                return True
        return False

    total = 0
    for o in sorted(adj, key=lambda o: -nbytes[o]):
        if augment(o, set()):
            total += nbytes[o]
    return total


def lower_bound(live: Liveness) -> tuple:
    """(bytes, peak step, per-step profile): max over steps of the live bytes
    less the inplace saving possible at that step."""
    prof = live.live_bytes()
    pairs, nbytes = live.pairs, live.nbytes
    for s in range(live.num_steps):
        if pairs[s]:
            prof[s] -= inplace_saving(pairs[s], nbytes)
    if not prof:
        return 0, None, prof
    peak = max(range(len(prof)), key=prof.__getitem__)
    return prof[peak], peak, prof


def footprint(live: Liveness, a: Assignment) -> list:
    """Bytes of memory in use at each step under ``a``: for slot strategies
    the slots already touched (they are allocated up front, as MXNet does),
    for the arena the highest live byte."""
    n = live.num_steps
    out = [0] * n
    if a.name == "arena":
        # the highest end among live tensors: a sweep with a lazy max-heap
        heap = []
        starts = [[] for _ in range(n)]
        for t in range(live.num_tensors):
            starts[live.first[t]].append(t)
        for s in range(n):
            for t in starts[s]:
                heapq.heappush(heap, (-(a.offset[t] + live.nbytes[t]), live.last[t]))
            while heap and heap[0][1] < s:
                heapq.heappop(heap)
            out[s] = -heap[0][0] if heap else 0
        return out
    seen = set()
    run = 0
    for s in range(n):
        for t in live.step_out[s]:
            k = a.slot[t]
            if k not in seen:
                seen.add(k)
                run += a.slot_size[k]
        out[s] = run
    return out
