"""Verification of a memory plan, two independent ways.

Static checks (``StaticCheck``), which recompute every tensor's lifetime
from the steps' reads and writes rather than trust the planner's arrays:

- ``check_offsets`` (byte ranges, any strategy): replays the schedule with
  the set of live byte ranges and fails when a tensor written at a step
  overlaps a tensor live there -- unless it is a declared inplace pair:
  same range, the op declares it, the input is read once at this step,
  dies here and is no graph output;
- ``check_slots`` (storage ids): the tensors of one slot, in order, never
  overlap in time but for such a pair, and each fits its slot.

Every strategy is checked before a plan is reported (slot strategies by
storage id and by byte range of their slots laid side by side is the same
question; the arena by byte range).

``ArenaInterpreter`` (dynamic): a subclass of ``lower.JaxInterpreter`` that
runs the graph in the plan's schedule with every planned tensor stored at
its planned offset of one NumPy buffer (filled with NaN-like bytes first).
Each op is computed by its JAX lowering from the bytes it finds there, so
a wrong plan clobbers a live tensor and the outputs differ from the plain
lowering's; ``check_arena`` compares them.
"""
from __future__ import annotations

import bisect

import numpy as np

from ..errors import PlanError
from ..lower import JaxInterpreter, lower
from .liveness import PLANNED, Liveness, declared_pairs


class StaticCheck:
    """What the static checks need, recomputed from the steps' reads and
    writes once per liveness: lifetimes, and for each step the declared
    inplace pairs whose input is read once there, dies there and is no
    graph output."""

    def __init__(self, live: Liveness):
        self.live = live
        n = live.num_tensors
        nsteps = live.num_steps
        first = [-1] * n
        last = [-1] * n
        for s, outs in enumerate(live.step_out):
            for t in outs:
                if first[t] != -1:
                    raise PlanError(f"verify: tensor {live.tensor_name(t)} is written twice")
                first[t] = s
        for s, ins in enumerate(live.step_in):
            for t in ins:
                if first[t] == -1 or first[t] >= s:
                    raise PlanError(f"verify: tensor {live.tensor_name(t)} is read at step "
                                    f"{s} before it is written")
                last[t] = s
        g = live.graph
        pinned = set()
        for e in g.outputs:
            t = live.tensor_of[g.entry_id(e)]
            if t >= 0:
                pinned.add(t)
                last[t] = nsteps
        for t in range(n):
            if last[t] < first[t]:
                last[t] = first[t]
        rp = g.row_ptr
        internal = {}
        for grp in live.fusion.groups:
            for m in grp[:-1]:
                internal[rp[m]] = m
        # per step: output -> inputs it may take over in place
        self.allowed = [None] * nsteps
        for s in range(nsteps):
            if not live.step_out[s]:
                continue
            ins = live.step_in[s]
            for xe, oe in declared_pairs(g, live.steps[s], live.in_eids, internal):
                x, o = live.tensor_of[xe], live.tensor_of[oe]
                if (x >= 0 and o >= 0 and x not in pinned and last[x] == s
                        and ins.count(x) == 1):
                    if self.allowed[s] is None:
                        self.allowed[s] = {}
                    self.allowed[s].setdefault(o, []).append(x)
        self.first, self.last = first, last
        self.dies = [[] for _ in range(nsteps)]
        for t in range(n):
            if last[t] < nsteps:
                self.dies[last[t]].append(t)

    def _may_share(self, x: int, o: int) -> bool:
        """Whether o may take x's storage in place (o written when x dies)."""
        s = self.first[o]
        al = self.allowed[s]
        return self.last[x] == s and al is not None and x in al.get(o, ())

    def check_slots(self, slot, slot_size, nbytes=None, name: str = "plan") -> None:
        """Storage ids: tensors of one slot never live at the same step (but
        for a declared inplace pair) and each fits its slot."""
        live = self.live
        nbytes = live.nbytes if nbytes is None else nbytes
        if len(slot) != live.num_tensors:
            raise PlanError(f"verify {name}: {len(slot)} slots for {live.num_tensors} tensors")
        first, last = self.first, self.last
        holder: dict = {}   # slot -> the tensor that last took it
        for t in sorted(range(live.num_tensors), key=first.__getitem__):
            k = slot[t]
            if k is None or not 0 <= k < len(slot_size):
                raise PlanError(f"verify {name}: tensor {live.tensor_name(t)} has no storage")
            if nbytes[t] > slot_size[k]:
                raise PlanError(f"verify {name}: tensor {live.tensor_name(t)} "
                                f"({nbytes[t]} bytes) does not fit slot {k} "
                                f"({slot_size[k]} bytes)")
            prev = holder.get(k)
            if prev is not None and last[prev] >= first[t] and not (
                    last[prev] == first[t] and nbytes[prev] == nbytes[t]
                    and self._may_share(prev, t)):
                s = first[t]
                raise PlanError(
                    f"verify {name}: at step {s} ('{live.step_name(s)}') tensor "
                    f"{live.tensor_name(t)} is written into slot {k}, which holds "
                    f"{live.tensor_name(prev)}, live until step {last[prev]}")
            holder[k] = t

    def check_offsets(self, offset, nbytes=None, name: str = "plan") -> None:
        """Byte ranges: a tensor written at a step overlaps no tensor live
        there, but for a declared inplace pair at the same offset."""
        live = self.live
        nbytes = live.nbytes if nbytes is None else nbytes
        n = live.num_tensors
        if len(offset) != n:
            raise PlanError(f"verify {name}: {len(offset)} offsets for {n} tensors")
        for t in range(n):
            if offset[t] is None or offset[t] < 0:
                raise PlanError(f"verify {name}: tensor {live.tensor_name(t)} has no storage")
        starts: list = []  # live ranges, disjoint, sorted by start
        ends: list = []
        owner: list = []
        bl, br = bisect.bisect_left, bisect.bisect_right

        def remove(t):
            i = bl(starts, offset[t])
            while i < len(starts) and owner[i] != t and starts[i] == offset[t]:
                i += 1
            if not (i < len(starts) and owner[i] == t):  # an invariant of this check
                raise PlanError(f"verify {name}: lost the live range of tensor "
                                f"{live.tensor_name(t)} (a bug in the check)")
            del starts[i], ends[i], owner[i]

        for s in range(live.num_steps):
            outs = live.step_out[s]
            handed = ()
            al = self.allowed[s]
            if al is not None:
                # an input handed to an output in place leaves the live set first
                handed = set()
                for o in outs:
                    for x in al.get(o, ()):
                        if (x not in handed and offset[x] == offset[o]
                                and nbytes[x] == nbytes[o]):
                            handed.add(x)
                            remove(x)
                            break
            for o in outs:
                a = offset[o]
                b = a + nbytes[o]
                i = br(starts, a)
                clash = None
                if i > 0 and ends[i - 1] > a:
                    clash = owner[i - 1]
                elif i < len(starts) and starts[i] < b:
                    clash = owner[i]
                if clash is not None:
                    raise PlanError(
                        f"verify {name}: at step {s} ('{live.step_name(s)}') tensor "
                        f"{live.tensor_name(o)} [{a}, {b}) overlaps "
                        f"{live.tensor_name(clash)} [{offset[clash]}, "
                        f"{offset[clash] + nbytes[clash]}), which is live there")
                starts.insert(i, a)
                ends.insert(i, b)
                owner.insert(i, o)
            for t in self.dies[s]:
                if t not in handed:
                    remove(t)


def check_placement(live: Liveness, offset, nbytes=None, name: str = "plan") -> None:
    """Raises PlanError when two tensors live at one step overlap in memory
    other than through a declared inplace pair (byte ranges)."""
    StaticCheck(live).check_offsets(offset, nbytes, name)


def check_slots(live: Liveness, slot, slot_size, nbytes=None, name: str = "plan") -> None:
    """Raises PlanError when two tensors live at one step share a storage
    slot other than through a declared inplace pair, or a slot is too small."""
    StaticCheck(live).check_slots(slot, slot_size, nbytes, name)


# --------------------------------------------------------------------------
# the arena interpreter
# --------------------------------------------------------------------------
class ArenaInterpreter(JaxInterpreter):
    """Runs ``live.graph`` step by step with every planned tensor stored at
    ``offset[t]`` of one NumPy buffer; other values (variables, parameter
    gradients, fused intermediates) are kept aside."""

    def __init__(self, live: Liveness, offset, total: int, is_train: bool, key=None,
                 fill: int = 0xFF):
        super().__init__(live.graph, is_train, key)
        self.live = live
        self.offset = offset
        self.total = int(total)
        self.fill = fill
        self.buffer = None

    def _view(self, t: int):
        live = self.live
        eid = live.entry[t]
        shape = live.inferred.shapes[eid]
        dtype = np.dtype(_np_dtype(live.inferred.dtypes[eid]))
        count = int(np.prod(shape, dtype=np.int64))
        return np.frombuffer(self.buffer, dtype=dtype, count=count,
                             offset=int(self.offset[t])).reshape(shape)

    def run(self, feeds: dict) -> list:
        import jax.numpy as jnp
        live, g = self.live, self.graph
        rp = g.row_ptr
        # 0xFF bytes read as NaN for floats: a read of an unwritten range shows
        self.buffer = bytearray([self.fill]) * max(self.total, 1)
        aside: dict[int, object] = {}
        for n in g.variables:
            eid = rp[g.node_id(n)]
            if n.name not in feeds:
                raise PlanError(f"arena run: no value given for input '{n.name}'")
            aside[eid] = jnp.asarray(feeds[n.name])
        kind, tensor_of, in_eids = live.kind, live.tensor_of, live.in_eids
        for members in live.steps:
            for nid in members:
                node = g.nodes[nid]
                ins = []
                for eid in in_eids[nid]:
                    t = tensor_of[eid] if kind[eid] == PLANNED else -1
                    if t >= 0:
                        ins.append(jnp.asarray(self._view(t).copy()))
                    else:
                        ins.append(aside[eid])
                outs = self.eval_node(node, ins)
                for k, v in enumerate(outs):
                    eid = rp[nid] + k
                    t = tensor_of[eid] if kind[eid] == PLANNED else -1
                    if t < 0:
                        aside[eid] = v
                        continue
                    view = self._view(t)
                    arr = np.asarray(v)
                    if arr.shape != view.shape:
                        raise PlanError(f"arena run: node '{node.name}' output {k} has shape "
                                        f"{arr.shape}, the plan expected {view.shape}")
                    view[...] = arr
        result = []
        for e in g.outputs:
            eid = g.entry_id(e)
            t = tensor_of[eid] if kind[eid] == PLANNED else -1
            result.append(jnp.asarray(self._view(t).copy()) if t >= 0 else aside[eid])
        return result


def _np_dtype(name):
    try:
        return np.dtype(name)
    except TypeError:
        import jax.numpy as jnp
        return jnp.dtype(name)


def random_feeds(live: Liveness, seed: int = 0, label_names=None) -> dict:
    """Random values for every variable of the planned graph: uniform in
    [-1, 1) for floats, small class indices for labels (names ending in
    'label', or those given) and integer inputs."""
    rng = np.random.default_rng(seed)
    g, inf = live.graph, live.inferred
    feeds = {}
    for n in g.variables:
        eid = g.entry_id_of_node(n)
        shape, dt = inf.shapes[eid], _np_dtype(inf.dtypes[eid])
        is_label = n.name.endswith("label") if label_names is None else n.name in label_names
        if is_label or not np.issubdtype(dt, np.floating):
            feeds[n.name] = rng.integers(0, 2, size=shape).astype(dt)
        else:
            feeds[n.name] = rng.uniform(-1.0, 1.0, size=shape).astype(dt)
    return feeds


def check_arena(live: Liveness, offset, total: int, is_train: bool, feeds=None, key=None,
                name: str = "plan", rtol: float = 0.0, atol: float = 0.0) -> None:
    """Runs the arena interpreter and the plain lowering on the same inputs;
    PlanError naming the first output that differs (exact by default:
    both compute the same ops on the same values)."""
    import jax
    feeds = random_feeds(live) if feeds is None else feeds
    if key is None:
        key = jax.random.key(0)
    ref, _ = lower(live.graph, is_train)(feeds, key)
    got = ArenaInterpreter(live, offset, total, is_train, key).run(feeds)
    names = live.graph.list_outputs()
    for nm, a, b in zip(names, got, ref):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or not np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
            diff = np.nanmax(np.abs(a.astype(np.float64) - b.astype(np.float64))) \
                if a.shape == b.shape else "shape"
            raise PlanError(f"verify {name}: the arena run gives a different '{nm}' "
                            f"than the plain lowering (max difference {diff})")
