"""The arena: every tensor a byte offset in one buffer.

Steps:

1. Inplace chains. Walking the schedule, an output takes over the buffer
   of an input under the same conditions as the ``inplace`` strategy (the
   arena is a plan for the sequential schedule, so only the sequential
   conditions apply). A chain of tensors passing one buffer along becomes
   one *buffer* whose lifetime is the union of theirs.
2. Offsets for the buffers, from the candidates below; the smallest wins:
   - ``online``: the schedule replayed with a best-fit heap
     (``allocator.OffsetHeap``), O(n * holes);
   - ``greedy-by-size``: buffers largest first, each at the best-fitting gap
     among the buffers already placed that overlap it in time (as
     TFLite's arena planner does); quadratic in the worst case, so it runs
     only when the online result is above the lower bound and there are at
     most ``greedy_limit`` buffers;
   - the ``both`` plan's slots laid side by side, so the arena is never
     worse than ``both``.
   A candidate that reaches the lower bound ends the search.
"""
from __future__ import annotations

import numpy as np

from .allocator import OffsetHeap
from .liveness import Liveness
from .planner import Assignment

GREEDY_LIMIT = 6000
# greedy-by-size runs only when the online placement is this far above the bound
GREEDY_SLACK = 1e-3


def inplace_buffers(live: Liveness):
    """(buffer of each tensor, buffer first step, last step, size, pairs)."""
    ntensors = live.num_tensors
    buf = [-1] * ntensors
    taken = [False] * ntensors
    bfirst, blast, bsize, pairs = [], [], [], []
    nbytes, last = live.nbytes, live.last
    for s in range(live.num_steps):
        if live.pairs[s]:
            for x, o in live.pairs[s]:
                if buf[o] >= 0 or taken[x]:
                    continue
                b = buf[x]
                buf[o] = b
                taken[x] = True
                blast[b] = last[o]
                pairs.append((x, o))
        for o in live.step_out[s]:
            if buf[o] < 0:
                buf[o] = len(bsize)
                bfirst.append(s)
                blast.append(last[o])
                bsize.append(nbytes[o])
    return buf, bfirst, blast, bsize, pairs


def online_offsets(nsteps: int, bfirst, blast, bsize):
    """Offsets from replaying the schedule with a best-fit heap; (offsets, peak)."""
    starts = [[] for _ in range(nsteps)]
    ends = [[] for _ in range(nsteps)]
    for b in range(len(bsize)):
        starts[bfirst[b]].append(b)
        if blast[b] < nsteps:
            ends[blast[b]].append(b)
    heap = OffsetHeap()
    off = [0] * len(bsize)
    alloc, free = heap.alloc, heap.free
    # larger buffers of one step first: fewer small holes under big blocks
    for s in range(nsteps):
        st = starts[s]
        if len(st) > 1:
            st.sort(key=lambda b: -bsize[b])
        for b in st:
            off[b] = alloc(bsize[b])
        for b in ends[s]:
            free(off[b], bsize[b])
    return off, heap.peak


def greedy_by_size_offsets(bfirst, blast, bsize):
    """Largest first, best-fitting gap among placed buffers overlapping in
    time; (offsets, peak). Placed buffers are kept sorted by offset, so a
    gap is the distance from the highest end below a buffer to its start."""
    n = len(bsize)
    order = sorted(range(n), key=lambda b: (-bsize[b], bfirst[b], b))
    cap = n + 1
    pf = np.zeros(cap, np.int64)   # sorted by offset: first, last, offset, end
    pl = np.full(cap, -1, np.int64)
    po = np.zeros(cap, np.int64)
    pe = np.zeros(cap, np.int64)
    off = [0] * n
    peak = 0
    k = 0
    big = np.iinfo(np.int64).max
    for b in order:
        f, l, sz = bfirst[b], blast[b], bsize[b]
        pos = 0
        if k:
            hit = (pf[:k] <= l) & (pl[:k] >= f)
            if hit.any():
                cm = np.maximum.accumulate(np.where(hit, pe[:k], 0))
                # the gap before placed buffer i: from the highest end below it
                gaps = po[:k].copy()
                gaps[1:] -= cm[:-1]
                gaps = np.where(hit & (gaps >= sz), gaps, big)
                j = int(gaps.argmin())
                if gaps[j] != big:
                    pos = int(po[j] - gaps[j])
                else:
                    pos = int(cm[-1])
        off[b] = pos
        i = int(np.searchsorted(po[:k], pos, side="right"))
        if i < k:
            pf[i + 1:k + 1] = pf[i:k]
            pl[i + 1:k + 1] = pl[i:k]
            po[i + 1:k + 1] = po[i:k]
            pe[i + 1:k + 1] = pe[i:k]
        pf[i], pl[i], po[i], pe[i] = f, l, pos, pos + sz
        k += 1
        if pos + sz > peak:
            peak = pos + sz
    return off, peak


def arena_plan(live: Liveness, lower_bound: int, fallback: Assignment | None = None,
               greedy_limit: int = GREEDY_LIMIT) -> Assignment:
    """Byte offsets in one buffer for every tensor (see the module docstring)."""
    buf, bfirst, blast, bsize, pairs = inplace_buffers(live)
    nsteps = live.num_steps
    off, peak = online_offsets(nsteps, bfirst, blast, bsize)
    how = "online best fit"
    if peak > lower_bound * (1 + GREEDY_SLACK) and len(bsize) <= greedy_limit:
        off2, peak2 = greedy_by_size_offsets(bfirst, blast, bsize)
        if peak2 < peak:
            off, peak, how = off2, peak2, "greedy by size"
    if fallback is not None and fallback.total < peak:
        return Assignment("arena", list(fallback.offset), fallback.total, list(fallback.slot),
                          list(fallback.slot_size), list(fallback.inplace),
                          note=f"the {fallback.name} plan's slots laid side by side")
    return Assignment("arena", [off[b] for b in buf], peak, buf, bsize, pairs, note=how)


class ArenaCheck:
    """What ``Plan.check_arena`` checked, once it passed: the plan of
    ``strategy`` (every tensor at its offset of one ``arena_bytes`` buffer)
    run by the arena interpreter over ``steps`` steps on ``runs`` input sets
    (random inputs of ``seeds``, or the feeds given), each output equal to
    the plain lowering's byte for byte. Its repr is that sentence, so a
    check typed at a prompt says what it did rather than nothing."""

    __slots__ = ("strategy", "train", "steps", "tensors", "arena_bytes", "outputs", "seeds",
                 "seconds")

    def __init__(self, strategy: str, train: bool, steps: int, tensors: int,
                 arena_bytes: int, outputs, seeds, seconds: float):
        self.strategy, self.train, self.steps, self.tensors = strategy, train, steps, tensors
        self.arena_bytes, self.outputs = arena_bytes, tuple(outputs)
        self.seeds = None if seeds is None else tuple(seeds)
        self.seconds = seconds

    @property
    def runs(self) -> int:
        return 1 if self.seeds is None else len(self.seeds)

    def __str__(self) -> str:
        inputs = ("the inputs given" if self.seeds is None else
                  "random inputs of seed" + ("s " if self.runs > 1 else " ")
                  + " and ".join(map(str, self.seeds)))
        outs = ", ".join(self.outputs[:4]) + (f" and {len(self.outputs) - 4} more"
                                              if len(self.outputs) > 4 else "")
        return (f"arena check passed: the {self.strategy} plan of the "
                f"{'training' if self.train else 'inference'} graph ({self.steps} steps, "
                f"{self.tensors} tensors at their offsets in one "
                f"{self.arena_bytes / 2 ** 20:,.2f} MiB buffer) run on {inputs}; "
                f"{len(self.outputs)} output(s) ({outs}) equal to the plain lowering's "
                f"byte for byte; {self.seconds:.1f} s")

    def __repr__(self) -> str:
        return f"<ArenaCheck: {self}>"
