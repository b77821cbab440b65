"""Graph-free allocators: a storage-block pool (MXNet's) and an offset heap.

``BlockPool`` is NNVM's ``GraphAllocator`` without the graph. ``request``
returns a block id for ``nbytes``; ``release`` puts a block back in the
free pool. A free block of size s serves a request r when
``r // match_range <= s <= r * match_range``: first the smallest free block
at least r, else the largest one below r; the block then grows to
``max(s, r)``. ``match_range=0`` never reuses (every request is a new
block), ``1`` reuses exact sizes only; MXNet's default is 16.

Each released block carries a *stamp* (any value; for the planner, the
tensor that held it) and a request may pass ``usable(stamp) -> bool``: only
blocks whose stamp it accepts may serve it. That is how the planner keeps
ops that could run in parallel from sharing storage, without the allocator
knowing what a graph is. A release may also say ``until``: the last
``now`` at which its stamp can be accepted; a request made ``now`` later
drops the block from the free pool without asking ``usable`` (the result
is the same, the scan is shorter -- blocks nothing can take any more
would otherwise be scanned by every request).

``OffsetHeap`` hands out byte offsets in one buffer: best fit among the
holes freed so far, else the top; freed neighbours merge. Its ``peak`` is
the arena size an online (schedule-order) placement needs.
"""
from __future__ import annotations

import bisect

from ..errors import PlanError


class BlockPool:
    """A pool of storage blocks matched by size (see the module docstring)."""

    def __init__(self, match_range: int = 16):
        if match_range < 0:
            raise ValueError(f"match_range must be >= 0, got {match_range}")
        self.match_range = int(match_range)
        self.sizes: list[int] = []       # block id -> size (grows)
        self._free_sizes: list[int] = []  # sorted distinct sizes with free blocks
        self._free: dict[int, list] = {}  # size -> [(block id, stamp, until)] oldest first
        self._is_free: list[bool] = []

    def __len__(self) -> int:
        return len(self.sizes)

    @property
    def total(self) -> int:
        """Bytes of all blocks ever allocated (at their grown sizes)."""
        return sum(self.sizes)

    @property
    def num_free(self) -> int:
        return sum(len(v) for v in self._free.values())

    def _new(self, nbytes: int) -> int:
        self.sizes.append(nbytes)
        self._is_free.append(False)
        return len(self.sizes) - 1

    def _take(self, size: int, i: int) -> int:
        lst = self._free[size]
        bid = lst.pop(i)[0]
        if not lst:
            del self._free[size]
            del self._free_sizes[bisect.bisect_left(self._free_sizes, size)]
        self._is_free[bid] = False
        return bid

    def request(self, nbytes: int, usable=None, now=None) -> int:
        """A block of at least ``nbytes``: a matching free one, or a new one.
        ``usable(stamp)``: which free blocks may serve it; ``now``: blocks
        released with an ``until`` below it are dropped (see the module
        docstring)."""
        if nbytes < 0:
            raise ValueError(f"cannot request {nbytes} bytes")
        mr = self.match_range
        if mr == 0 or not self._free_sizes:
            return self._new(nbytes)
        sizes = self._free_sizes
        lo = bisect.bisect_left(sizes, nbytes // mr)
        mid = bisect.bisect_left(sizes, nbytes)
        hi = bisect.bisect_right(sizes, nbytes * mr)
        # larger-or-equal blocks first, nearest size first; then smaller ones
        # (candidate sizes are listed first: a scan may drop a size's last block)
        for size in sizes[mid:hi]:
            found = self._scan(size, usable, now)
            if found is not None:
                return self._take(size, found)
        for size in sizes[lo:mid][::-1]:
            found = self._scan(size, usable, now)
            if found is not None:
                bid = self._take(size, found)
                self.sizes[bid] = max(self.sizes[bid], nbytes)  # the block grows
                return bid
        return self._new(nbytes)

    def _scan(self, size: int, usable, now):
        """Index of the oldest free block of ``size`` that ``usable`` accepts."""
        lst = self._free[size]
        if usable is None:
            return 0
        expired = 0
        found = None
        for i, (_, stamp, until) in enumerate(lst):
            if now is not None and until is not None and until < now:
                expired += 1
                continue
            if usable(stamp):
                found = i
                break
        if expired:
            # drop the expired blocks seen before the found one (they stay
            # marked free: never handed out again)
            end = len(lst) if found is None else found
            keep = [e for e in lst[:end] if e[2] is None or e[2] >= now]
            lst[:end] = keep
            if found is not None:
                found = len(keep)
            elif not lst:
                del self._free[size]
                del self._free_sizes[bisect.bisect_left(self._free_sizes, size)]
        return found

    def release(self, block: int, stamp=None, until=None) -> None:
        """Returns ``block`` to the free pool, stamped (see the module docstring)."""
        # invariant: a block is free at most once, or two tensors would share it
        if self._is_free[block]:
            raise PlanError(f"block {block} released twice (a planner bug: two tensors "
                            f"would share its storage)")
        self._is_free[block] = True
        size = self.sizes[block]
        lst = self._free.get(size)
        if lst is None:
            lst = self._free[size] = []
            bisect.insort(self._free_sizes, size)
        lst.append((block, stamp, until))


class OffsetHeap:
    """Byte offsets in one growing buffer: best-fit holes, merged on free."""

    def __init__(self):
        self._starts: list[int] = []  # free holes below the top, sorted
        self._ends: list[int] = []
        self.top = 0                  # end of the highest block in use
        self.peak = 0

    def alloc(self, nbytes: int) -> int:
        """The offset of a new block: the smallest hole that fits (lowest on
        ties), else the top."""
        best, best_size = -1, None
        starts, ends = self._starts, self._ends
        for i in range(len(starts)):
            size = ends[i] - starts[i]
            if size >= nbytes and (best_size is None or size < best_size):
                best, best_size = i, size
                if size == nbytes:
                    break
        if best >= 0:
            off = starts[best]
            if best_size == nbytes:
                del starts[best], ends[best]
            else:
                starts[best] = off + nbytes
            return off
        off = self.top  # holes touching the top were given back to it on free
        self.top = off + nbytes
        if self.top > self.peak:
            self.peak = self.top
        return off

    def free(self, offset: int, nbytes: int) -> None:
        """Returns ``[offset, offset + nbytes)``; merges it with neighbours."""
        if nbytes == 0:
            return
        end = offset + nbytes
        starts, ends = self._starts, self._ends
        i = bisect.bisect_left(starts, offset)
        # invariant: the range is in use, so it overlaps no hole
        if not ((i == len(starts) or starts[i] >= end) and (i == 0 or ends[i - 1] <= offset)):
            raise PlanError(f"double free of bytes [{offset}, {end}) (a planner bug: two "
                            f"tensors would share them)")
        if i > 0 and ends[i - 1] == offset:
            i -= 1
            offset = starts[i]
            del starts[i], ends[i]
        if i < len(starts) and starts[i] == end:
            end = ends[i]
            del starts[i], ends[i]
        if end == self.top:
            self.top = offset  # the hole at the top gives the top back
            return
        starts.insert(i, offset)
        ends.insert(i, end)
