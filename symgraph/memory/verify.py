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
its planned offset of one byte buffer. Each op is computed by its JAX
lowering from the bytes it finds there; every tensor is poisoned after its
last read, every read must find the bytes written, an output may overlap
its own step's inputs only as a declared inplace pair (run aliased), and
``check_arena`` compares the outputs with the plain lowering's byte for
byte on two input seeds.
"""
from __future__ import annotations

import bisect

import numpy as np

from ..dtypes import np_dtype
from ..errors import PlanError
from ..lower import JaxInterpreter, lower
from ..passes.gradient import is_label
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

    def check_assignments(self, a: dict) -> None:
        """Every plan of ``a`` (``naive`` .. ``both`` by storage slot,
        ``arena`` by offset); PlanError naming the first that fails."""
        for s in ("naive", "inplace", "coshare", "both"):
            self.check_slots(a[s].slot, a[s].slot_size, name=s)
        self.check_offsets(a["arena"].offset, name="arena")

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
# ops whose kernels are position-wise: an output written over its input in
# place may only read the input's elements it has not yet overwritten
STREAMED = ("elementwise", "injective")


def poison_bytes(dtype, nbytes: int) -> bytes:
    """The bytes a dead tensor of ``dtype`` is overwritten with: all ones
    for floats (a NaN whose payload no arithmetic produces) and bools, the
    most negative value for signed ints, the largest for unsigned ones."""
    import jax.numpy as jnp
    dt = np_dtype(dtype)
    if jnp.issubdtype(dt, jnp.integer):
        info = np.iinfo(dt)
        v = info.max if info.min == 0 else info.min
        return np.full(nbytes // dt.itemsize, v, dtype=dt).tobytes()
    return b"\xff" * nbytes


class ArenaInterpreter(JaxInterpreter):
    """Runs ``live.graph`` step by step with every planned tensor stored at
    ``offset[t]`` of one byte buffer; other values (variables, parameter
    gradients, fused intermediates) are kept aside. Each op computes from
    the bytes it finds there, so a wrong plan shows:

    - the buffer starts poisoned, and every tensor's bytes are poisoned
      (``poison_bytes``: NaN for floats) right after its last read, so a
      read of memory that something else wrote, or that is dead, sees it;
    - ``check_reads``: every read of a tensor must find the bytes its
      writer stored (PlanError naming the tensor, the step and whether the
      bytes are poison or another tensor's), even where the op's result
      would hide the change (a relu of negatives, half a SliceChannel);
    - an output of a step may not overlap an input or another output of
      the same step -- whose bytes a real kernel reads while writing --
      unless it is a declared inplace pair the plan took: same range, the
      input read once there, dying there, no graph output;
    - such a pair is run aliased: for ops whose kernels are position-wise
      (every member ``elementwise`` or ``injective``) the step is
      recomputed chunk by chunk from the buffer as its in-place outputs
      overwrite their inputs (chunks in the order 0, k-1, 1, k-2, ...),
      so an op that reads elements it has overwritten (in either
      direction) is caught; other ops are taken to read their whole input
      before writing (as MXNet's softmax kernels do).

    ``inplace_taken`` lists the (input, output) tensor pairs run in place.
    The lifetimes are recomputed here from the nodes' inputs, not taken
    from the planner's arrays. Inputs an op reads only for their shape
    (``OpDef.shape_inputs``) are no reads: the op gets a poisoned array of
    the right shape.
    """

    def __init__(self, live: Liveness, offset, total: int, is_train: bool, key=None,
                 check_reads: bool = True, chunks: int = 4):
        super().__init__(live.graph, is_train, key, inferred=live.inferred)
        self.live = live
        self.offset = [int(o) for o in offset]
        self.total = int(total)
        self.check_reads = check_reads
        self.chunks = max(int(chunks), 1)
        self.buffer = None
        self.inplace_taken: list = []
        self._prepare()

    # -- what the run needs, from the graph and the offsets --------------------------
    def _prepare(self) -> None:
        live, g = self.live, self.graph
        if len(self.offset) != live.num_tensors:
            raise PlanError(f"arena run: {len(self.offset)} offsets for "
                            f"{live.num_tensors} tensors")
        inf = live.inferred
        n = live.num_tensors
        self.shape = [tuple(inf.shapes[live.entry[t]]) for t in range(n)]
        self.dtype = [np.dtype(np_dtype(inf.dtypes[live.entry[t]])) for t in range(n)]
        self.nbytes = [int(np.prod(s, dtype=np.int64)) * d.itemsize
                       for s, d in zip(self.shape, self.dtype)]
        for t in range(n):
            a = self.offset[t]
            if a < 0 or a + self.nbytes[t] > self.total:
                raise PlanError(f"arena run: tensor {live.tensor_name(t)} "
                                f"[{a}, {a + self.nbytes[t]}) lies outside the arena of "
                                f"{self.total} bytes")
        kind, tensor_of, in_eids, rp = live.kind, live.tensor_of, live.in_eids, g.row_ptr
        nsteps = live.num_steps

        def planned(eid):
            return tensor_of[eid] if kind[eid] == PLANNED else -1

        writer = [-1] * n
        last = [-1] * n
        reads = []      # per step: the planned tensors its ops read data from (repeats kept)
        outs = []       # per step: the planned tensors it writes
        for s, members in enumerate(live.steps):
            rs, ws = [], []
            for nid in members:
                node = g.nodes[nid]
                shape_only = set(node.op.shape_inputs(node.params))
                for i, eid in enumerate(in_eids[nid]):
                    t = planned(eid)
                    if t >= 0 and i not in shape_only:
                        if writer[t] < 0 or writer[t] >= s:
                            raise PlanError(f"arena run: step {s} ('{live.step_name(s)}') "
                                            f"reads {live.tensor_name(t)} before it is written")
                        rs.append(t)
                        last[t] = s
                for eid in range(rp[nid], rp[nid + 1]):
                    t = planned(eid)
                    if t >= 0:
                        writer[t] = s
                        ws.append(t)
            reads.append(rs)
            outs.append(ws)
        pinned = {planned(g.entry_id(e)) for e in g.outputs} - {-1}
        internal = {}
        for grp in live.fusion.groups:
            for m in grp[:-1]:
                internal[rp[m]] = m
        # per step: output -> the input it takes over in place (declared, taken
        # by the plan: same range; allowed: read once here, dies here, no output)
        inplace = [{} for _ in range(nsteps)]
        for s, members in enumerate(live.steps):
            if not outs[s]:
                continue
            for xe, oe in declared_pairs(g, members, in_eids, internal):
                x, o = planned(xe), planned(oe)
                if (x >= 0 and o >= 0 and self.offset[x] == self.offset[o]
                        and self.nbytes[x] == self.nbytes[o] and x not in pinned
                        and last[x] == s and reads[s].count(x) == 1
                        and x not in inplace[s].values() and o not in inplace[s]):
                    inplace[s][o] = x
        self.writer, self.last, self.reads, self.outs = writer, last, reads, outs
        self.pinned, self.inplace = pinned, inplace
        self.dies = [[] for _ in range(nsteps)]
        for t in range(n):
            if t in pinned:
                continue
            self.dies[last[t] if last[t] >= 0 else writer[t]].append(t)

    def _range(self, t: int) -> tuple:
        return self.offset[t], self.offset[t] + self.nbytes[t]

    def _view(self, t: int):
        count = self.nbytes[t] // self.dtype[t].itemsize
        return np.frombuffer(self.buffer, dtype=self.dtype[t], count=count,
                             offset=self.offset[t]).reshape(self.shape[t])

    def _poison(self, t: int) -> None:
        a, b = self._range(t)
        self.buffer[a:b] = poison_bytes(self.dtype[t], b - a)

    def _check_step(self, s: int) -> None:
        """An output overlaps no input and no other output of its step, but
        for an inplace pair the plan took."""
        live = self.live
        outs, al = self.outs[s], self.inplace[s]
        ins = sorted(set(self.reads[s]))
        for j, o in enumerate(outs):
            a, b = self._range(o)
            for x in ins:
                c, d = self._range(x)
                if a < d and c < b and al.get(o) != x:
                    raise PlanError(
                        f"arena run: at step {s} ('{live.step_name(s)}') output "
                        f"{live.tensor_name(o)} [{a}, {b}) overlaps its input "
                        f"{live.tensor_name(x)} [{c}, {d}), which is no inplace pair "
                        f"the plan may take there")
            for o2 in outs[:j]:
                c, d = self._range(o2)
                if a < d and c < b:
                    raise PlanError(
                        f"arena run: at step {s} ('{live.step_name(s)}') outputs "
                        f"{live.tensor_name(o2)} [{c}, {d}) and {live.tensor_name(o)} "
                        f"[{a}, {b}) overlap")

    def _read(self, t: int, s: int, checked: bool):
        view = self._view(t)
        if checked and self.check_reads:
            got, want = view.tobytes(), self.written[t]
            if got != want:
                live = self.live
                where = f"step {s} ('{live.step_name(s)}')" if s < live.num_steps \
                    else "the end (graph output)"
                poison = poison_bytes(self.dtype[t], len(got))
                nbad = sum(1 for k in range(0, len(got), self.dtype[t].itemsize)
                           if got[k:k + self.dtype[t].itemsize]
                           != want[k:k + self.dtype[t].itemsize])
                what = "poison (memory freed)" if all(
                    got[k] == poison[k] for k in range(len(got)) if got[k] != want[k]) \
                    else "another tensor's values"
                raise PlanError(
                    f"arena run: at {where} tensor {live.tensor_name(t)} "
                    f"[{self.offset[t]}, {self.offset[t] + self.nbytes[t]}) holds {what} "
                    f"in {nbad} of {view.size} elements written at step {self.writer[t]}: "
                    f"overwritten while live")
        import jax.numpy as jnp
        return jnp.asarray(view.copy())

    def _eval_step(self, s: int, aside: dict, checked: bool) -> dict:
        """Runs the ops of step s reading planned inputs from the buffer;
        entry id -> value of every output (fused intermediates go aside)."""
        import jax.numpy as jnp
        live, g = self.live, self.graph
        kind, tensor_of, rp = live.kind, live.tensor_of, g.row_ptr
        local: dict = {}
        cache: dict = {}
        for nid in live.steps[s]:
            node = g.nodes[nid]
            shape_only = set(node.op.shape_inputs(node.params))
            ins = []
            for i, eid in enumerate(live.in_eids[nid]):
                t = tensor_of[eid] if kind[eid] == PLANNED else -1
                if t < 0:
                    ins.append(local[eid] if eid in local else aside[eid])
                elif i in shape_only:  # the op may use its shape, never its data
                    ins.append(jnp.asarray(np.frombuffer(
                        poison_bytes(self.dtype[t], self.nbytes[t]),
                        dtype=self.dtype[t]).reshape(self.shape[t])))
                else:
                    if t not in cache:
                        cache[t] = self._read(t, s, checked)
                    ins.append(cache[t])
            for k, v in enumerate(self.eval_node(node, ins)):
                local[rp[nid] + k] = v
        return local

    def _store(self, t: int, v, node_name: str, k: int, lo: int = 0, hi: int | None = None):
        view = self._view(t)
        arr = np.asarray(v)
        if arr.shape != view.shape or arr.dtype != view.dtype:
            raise PlanError(f"arena run: node '{node_name}' output {k} is "
                            f"{arr.dtype}{list(arr.shape)}, the plan expected "
                            f"{view.dtype}{list(view.shape)}")
        if hi is None:
            view[...] = arr
        else:
            view.reshape(-1)[lo:hi] = arr.reshape(-1)[lo:hi]

    def run(self, feeds: dict) -> list:
        import jax.numpy as jnp
        live, g = self.live, self.graph
        rp = g.row_ptr
        kind, tensor_of = live.kind, live.tensor_of
        self.buffer = bytearray(b"\xff") * max(self.total, 1)  # poison: NaN for floats
        self.written: dict = {}
        self.inplace_taken = []
        aside: dict = {}
        for n in g.variables:
            if n.name not in feeds:
                raise PlanError(f"arena run: no value given for input '{n.name}'")
            aside[rp[g.node_id(n)]] = jnp.asarray(feeds[n.name])
        for s, members in enumerate(live.steps):
            self._check_step(s)
            local = self._eval_step(s, aside, checked=True)
            al = self.inplace[s]
            streamed = bool(al) and all(g.nodes[nid].op.category in STREAMED
                                        for nid in members)
            for nid in members:
                for k in range(g.nodes[nid].num_outputs):
                    eid = rp[nid] + k
                    t = tensor_of[eid] if kind[eid] == PLANNED else -1
                    if t < 0:
                        aside[eid] = local[eid]
                    elif not (streamed and t in al):
                        self._store(t, local[eid], g.nodes[nid].name, k)
            if al:
                self.inplace_taken.extend((x, o) for o, x in al.items())
            if streamed:
                self._run_aliased(s, local, aside)
            for t in self.outs[s]:
                self.written[t] = self._view(t).tobytes()
            # dead after this step: inputs read for the last time (but those an
            # output took over in place) and outputs nobody reads; the step
            # check above made sure no other output lies there
            taken = set(al.values())
            for t in self.dies[s]:
                if t not in taken:
                    self._poison(t)
        result = []
        for e in g.outputs:
            eid = g.entry_id(e)
            t = tensor_of[eid] if kind[eid] == PLANNED else -1
            result.append(self._read(t, live.num_steps, True) if t >= 0 else aside[eid])
        return result

    def _run_aliased(self, s: int, local: dict, aside: dict) -> None:
        """Writes step s's in-place outputs chunk by chunk over their inputs,
        recomputing the step from the buffer before each chunk; PlanError if
        the result differs from the step run out of place."""
        live = self.live
        al = self.inplace[s]
        eid_of = {o: live.entry[o] for o in al}
        size = {o: self.nbytes[o] // self.dtype[o].itemsize for o in al}
        k = self.chunks
        order = []
        lo_i, hi_i = 0, k - 1
        while lo_i <= hi_i:  # 0, k-1, 1, k-2, ...: reads in both directions show
            order.append(lo_i)
            if hi_i != lo_i:
                order.append(hi_i)
            lo_i, hi_i = lo_i + 1, hi_i - 1
        for j, c in enumerate(order):
            vals = local if j == 0 else self._eval_step(s, aside, checked=False)
            for o in al:
                n = size[o]
                self._store(o, vals[eid_of[o]], live.step_name(s), 0,
                            n * c // k, n * (c + 1) // k)
        for o, x in al.items():
            want = np.asarray(local[eid_of[o]])
            got = self._view(o)
            if got.tobytes() != want.tobytes():
                raise PlanError(
                    f"arena run: at step {s} ('{live.step_name(s)}') output "
                    f"{live.tensor_name(o)} written in place over {live.tensor_name(x)} "
                    f"differs from the step run out of place: its inplace declaration "
                    f"does not hold (the op reads elements it has already overwritten)")


def random_feeds(live: Liveness, seed: int = 0, label_names=None) -> dict:
    """Random values for every variable of the planned graph: uniform in
    [-1, 1) for floats, small class indices for labels (names ending in
    'label', or those given) and integer inputs."""
    rng = np.random.default_rng(seed)
    g, inf = live.graph, live.inferred
    feeds = {}
    for n in g.variables:
        eid = g.entry_id_of_node(n)
        shape, dt = inf.shapes[eid], np_dtype(inf.dtypes[eid])
        if is_label(n.name, label_names) or not np.issubdtype(dt, np.floating):
            feeds[n.name] = rng.integers(0, 2, size=shape).astype(dt)
        else:
            feeds[n.name] = rng.uniform(-1.0, 1.0, size=shape).astype(dt)
    return feeds


def check_arena(live: Liveness, offset, total: int, is_train: bool, feeds=None, key=None,
                name: str = "plan", rtol: float = 0.0, atol: float = 0.0,
                seeds=(0, 1), check_reads: bool = True) -> None:
    """Runs the arena interpreter and the plain lowering on the same inputs,
    once per seed of ``seeds`` (inputs from ``random_feeds``, the random key
    from the seed: a clobbered value that happens to be right for one input
    is not for the other), or once on ``feeds`` if given. PlanError when
    the interpreter finds the plan wrong, or naming the first output that
    differs: the same bytes by default (both compute the same ops on the
    same values; a NaN equals nothing but the same NaN, so poison read
    from a freed tensor fails), else ``rtol``/``atol`` without equal_nan."""
    import jax
    import jax.numpy as jnp
    runs = [(feeds, key)] if feeds is not None else [
        (random_feeds(live, seed), key) for seed in seeds]
    interp = ArenaInterpreter(live, offset, total, is_train, check_reads=check_reads)
    names = live.graph.list_outputs()
    for (fd, k), seed in zip(runs, seeds):
        k = jax.random.key(seed) if k is None else k
        interp.key = k
        got = interp.run(fd)  # first: a wrong plan usually stops it early
        # JAX arrays, as the interpreter's: an op given NumPy arrays may compute
        # with NumPy (x / 1.5 rounds otherwise than XLA's x * (1 / 1.5))
        ref, _ = lower(live.graph, is_train)({n: jnp.asarray(v) for n, v in fd.items()}, k)
        for nm, a, b in zip(names, got, ref):
            a, b = np.asarray(a), np.asarray(b)
            if a.shape != b.shape or a.dtype != b.dtype:
                raise PlanError(f"verify {name}: the arena run gives '{nm}' as "
                                f"{a.dtype}{list(a.shape)}, the plain lowering as "
                                f"{b.dtype}{list(b.shape)}")
            same = (a.tobytes() == b.tobytes() if rtol == 0 and atol == 0 else
                    np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=False))
            if not same:
                bad = int(np.sum(~np.isclose(a, b, rtol=rtol, atol=atol))) \
                    if a.dtype.kind in "fc" else int(np.sum(a != b))
                raise PlanError(f"verify {name}: the arena run gives a different '{nm}' "
                                f"than the plain lowering ({bad} of {a.size} elements differ"
                                f"{'' if feeds is not None else f', input seed {seed}'})")
