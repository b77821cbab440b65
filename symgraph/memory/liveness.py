"""Liveness: which tensors exist, when each is created and last read.

The planner never looks at the graph again after this stage: ``analyze``
turns (graph, shapes, fusion, schedule) into integer arrays indexed by
tensor id, and every strategy, the lower bound and the static check are
linear passes over them.

What is planned (a "tensor"): every op output except

- outputs that are gradients of the parameters (bucket ``gradients``:
  they are written straight into the user's gradient buffers, as MXNet
  binds them), passed in as ``external``;
- outputs computed inside a fused group and read only there (registers);
- empty tensors.

Variables (inputs, parameters, aux states, head gradients) are never
planned. Graph outputs that are planned (the forward outputs, e.g. the
softmax) are *pinned*: live from their step to the end of the schedule, and
never overwritten in place -- which is also how MXNet counts them.

Time is the step index in the schedule. Tensor t occupies memory at every
step s with ``first[t] <= s <= last[t]``; an output may overlap an input of
its own step only through a declared inplace pair (see ``pairs``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..dtypes import itemsize
from ..errors import PlanError
from ..graph import Graph
from ..passes.fuse import Fusion

# entry kinds
VAR, EXTERNAL, NOSTORE, PLANNED = 0, 1, 2, 3
# how many steps above the ancestor base are tracked exactly (bits)
ANC_WINDOW = 4096

def entry_nbytes(inferred, eid: int) -> int:
    """``prod(shape) * itemsize`` of one entry, no padding (docs/memory.md)."""
    return math.prod(inferred.shapes[eid]) * itemsize(inferred.dtypes[eid])


@dataclass(eq=False)
class Liveness:
    """The planning problem for one schedule, as arrays.

    Per tensor t: ``entry[t]`` (entry id), ``nbytes[t]``, ``first[t]`` (the
    step writing it), ``last[t]`` (the last step reading it; ``num_steps``
    for pinned graph outputs, ``first[t]`` when nothing reads it),
    ``readers[t]`` (the steps reading it, ascending), ``pinned[t]``.

    Per step s: ``step_in[s]`` planned tensors read (one item per input
    slot, repeats kept), ``step_out[s]`` planned tensors written,
    ``dies[s]`` tensors whose last step is s, ``pairs[s]`` the inplace
    candidates ``(x, o)``: o's op declares it may overwrite x, x is last
    read here and read once here, is not pinned and has o's size
    (MXNet's conditions).

    Ancestors, to keep ops that could run in parallel from sharing storage:
    step r is an ancestor of step s (s depends on r's outputs, directly or
    not) when ``r < anc_base[s]`` or bit ``r - anc_base[s]`` of
    ``anc_bits[s]`` is set -- every step below the base is an ancestor, the
    bits say which of the next ones are. A window of ``ANC_WINDOW`` bits
    keeps it linear; beyond it a step counts as no ancestor (safe).
    ``reach[r]``: the last step that depends on step r (r itself if none),
    so r is an ancestor of no step after it; the queries ask it first, so
    the bits of such steps do not matter and the base moves past them.
    ``until[t]``: the smallest reach of the steps that touched tensor t.
    """

    graph: Graph
    inferred: object
    fusion: Fusion
    steps: tuple
    kind: list
    tensor_of: list
    entry: list
    nbytes: list
    first: list
    last: list
    readers: list
    pinned: list
    step_in: list
    step_out: list
    dies: list
    pairs: list
    anc_base: list
    anc_bits: list
    in_eids: list
    reach: list
    until: list

    @property
    def num_steps(self) -> int:
        return len(self.steps)

    @property
    def num_tensors(self) -> int:
        return len(self.entry)

    def tensor_name(self, t: int) -> str:
        return entry_name(self.graph, self.entry[t])

    def step_name(self, s: int) -> str:
        nodes = self.graph.nodes
        return "+".join(nodes[nid].name for nid in self.steps[s])

    def live_bytes(self) -> list:
        """Sum of the bytes of the tensors live at each step."""
        n = self.num_steps
        delta = [0] * (n + 2)
        nb, first, last = self.nbytes, self.first, self.last
        for t in range(len(nb)):
            delta[first[t]] += nb[t]
            delta[last[t] + 1] -= nb[t]
        out, run = [0] * n, 0
        for s in range(n):
            run += delta[s]
            out[s] = run
        return out

    def is_ancestor(self, r: int, s: int) -> bool:
        """Whether step s depends on step r (False may also mean unknown,
        beyond the window)."""
        if self.reach[r] < s:
            return False
        b = self.anc_base[s]
        return r < b or (r < s and ((self.anc_bits[s] >> (r - b)) & 1) == 1)

    def all_readers_before(self, t: int, s: int, skip_self: bool = False) -> bool:
        """Whether every step that touches tensor t (its readers, or its
        writer when nothing reads it) is an ancestor of step s, so that
        reusing t's storage at s adds no ordering between ops that could
        otherwise run in parallel. ``skip_self``: ignore s among t's readers."""
        if self.until[t] < s:
            return False  # a step that touched t is an ancestor of no step from s on
        b, bits = self.anc_base[s], self.anc_bits[s]
        rs = self.readers[t] or (self.first[t],)
        for r in reversed(rs):  # descending: below the base every step is an ancestor
            if r < b:
                return True
            if not (skip_self and r == s):
                if r >= s or not (bits >> (r - b)) & 1:
                    return False
        return True

    def reusable_until(self, t: int) -> int:
        """The last step at which ``all_readers_before(t, s)`` can hold: after
        it, some step that touched t is an ancestor of no step."""
        return self.until[t]

    def live_at(self, s: int) -> list:
        """Tensor ids live at step s."""
        f, l = self.first, self.last
        return [t for t in range(len(f)) if f[t] <= s <= l[t]]


def entry_name(graph: Graph, eid: int) -> str:
    """``<node>_<output>`` as get_internals() names it (the node name for
    variables)."""
    import bisect
    nid = bisect.bisect_right(graph.row_ptr, eid) - 1
    node = graph.nodes[nid]
    return node.output_names()[eid - graph.row_ptr[nid]]


def input_entry_ids(graph: Graph) -> list:
    """For each node, the entry ids of its inputs."""
    nid_of = {id(n): i for i, n in enumerate(graph.nodes)}
    rp = graph.row_ptr
    return [[rp[nid_of[id(e.node)]] + e.index for e in n.inputs] for n in graph.nodes]


def declared_pairs(graph: Graph, members, in_eids, internal: dict) -> list:
    """Inplace pairs ``(input entry id, output entry id)`` a step declares.

    For a single op: its ``OpDef.inplace`` pairs. For a fused group: an
    output of the root may overwrite an external input reached through a
    chain of declared pairs of its members (each elementwise), e.g.
    ``relu(x + b)`` may write over x or b. ``internal`` maps the entry id of
    each fused member's output to that member.
    """
    nodes, rp = graph.nodes, graph.row_ptr
    root = members[-1]
    rnode = nodes[root]
    result = []
    for i, k in rnode.op.inplace(rnode.params):
        out_eid = rp[root] + k
        stack = [in_eids[root][i]]
        seen = set()
        while stack:
            eid = stack.pop()
            m = internal.get(eid)
            if m is None:
                if eid not in seen:
                    seen.add(eid)
                    result.append((eid, out_eid))
                continue
            if m in seen:
                continue
            seen.add(m)
            mnode = nodes[m]
            chain = [in_eids[m][i2] for i2, k2 in mnode.op.inplace(mnode.params) if k2 == 0]
            stack.extend(reversed(chain))
    return result


def analyze(graph: Graph, inferred, fusion: Fusion, steps, external=()) -> Liveness:
    """Liveness of every planned tensor for the schedule ``steps``.

    ``external``: entry ids that are not planned (parameter gradients).
    Raises PlanError when ``steps`` is not a topological order of the op
    nodes with each node exactly once.
    """
    nodes = graph.nodes
    rp = graph.row_ptr
    n_entries = graph.num_entries
    in_eids = input_entry_ids(graph)
    shapes, dtypes = inferred.shapes, inferred.dtypes

    kind = [PLANNED] * n_entries
    entry_node = [0] * n_entries
    for nid, node in enumerate(nodes):
        for k in range(rp[nid], rp[nid + 1]):
            entry_node[k] = nid
        if node.op is None:
            kind[rp[nid]] = VAR
    internal = {}
    for grp in fusion.groups:
        for m in grp[:-1]:
            internal[rp[m]] = m
            kind[rp[m]] = NOSTORE
    for eid in external:
        if kind[eid] == PLANNED:
            kind[eid] = EXTERNAL

    nsteps = len(steps)
    step_of = [-1] * len(nodes)
    for s, members in enumerate(steps):
        for nid in members:
            if step_of[nid] != -1:
                raise PlanError(f"schedule: node '{nodes[nid].name}' appears in two steps")
            if nodes[nid].op is None:
                raise PlanError(f"schedule: variable '{nodes[nid].name}' is not a step")
            step_of[nid] = s
    for nid, node in enumerate(nodes):
        if node.op is not None and step_of[nid] == -1:
            raise PlanError(f"schedule: node '{node.name}' ({node.op.name}) is in no step")

    tensor_of = [-1] * n_entries
    entry, nbytes, first = [], [], []
    step_in = [None] * nsteps
    step_out = [None] * nsteps
    readers: list = []
    anc_base = [0] * nsteps
    anc_bits = [0] * nsteps
    step_preds = [()] * nsteps
    cap = (1 << ANC_WINDOW) - 1
    item = {}
    for s, members in enumerate(steps):
        ins = []
        preds = set()
        for nid in members:
            for eid in in_eids[nid]:
                k = kind[eid]
                if k == VAR:
                    continue
                p = entry_node[eid]
                q = step_of[p]
                if q != s:
                    if q > s:
                        raise PlanError(
                            f"schedule: step {s} ('{nodes[nid].name}') reads "
                            f"{entry_name(graph, eid)} before step {q} writes it")
                    preds.add(q)
                if k == PLANNED:
                    t = tensor_of[eid]
                    ins.append(t)
                    rs = readers[t]
                    if not rs or rs[-1] != s:
                        rs.append(s)
        outs = []
        for nid in members:
            for eid in range(rp[nid], rp[nid + 1]):
                if kind[eid] != PLANNED:
                    continue
                dt = dtypes[eid]
                isz = item.get(dt)
                if isz is None:
                    isz = item[dt] = itemsize(dt)
                nb = math.prod(shapes[eid]) * isz
                if nb == 0:
                    kind[eid] = NOSTORE
                    continue
                t = len(entry)
                tensor_of[eid] = t
                entry.append(eid)
                nbytes.append(nb)
                first.append(s)
                readers.append([])
                outs.append(t)
        step_in[s] = ins
        step_out[s] = outs
        if preds:
            step_preds[s] = preds

    # reach[r]: the last step depending on r; r is an ancestor of no step after it
    reach = list(range(nsteps))
    for s in range(nsteps - 1, -1, -1):
        r = reach[s]
        for q in step_preds[s]:
            if reach[q] < r:
                reach[q] = r
    for s in range(nsteps):
        preds = step_preds[s]
        if not preds:
            continue
        # ancestors(s) = union over preds q of ancestors(q) and q itself
        base = max(anc_base[q] for q in preds)
        bits = 0
        for q in preds:
            bits |= anc_bits[q] >> (base - anc_base[q])
            if q >= base:
                bits |= 1 << (q - base)
        while True:
            run = (bits ^ (bits + 1)).bit_length() - 1  # trailing ones
            if run:
                base += run
                bits >>= run
            # a step no later step depends on (reach < s) is answered by reach,
            # so its bit is free: counting it lets the base move past it
            if base < s and reach[base] < s:
                base += 1
                bits >>= 1
                continue
            break
        if bits > cap:
            bits &= cap
        anc_base[s] = base
        anc_bits[s] = bits

    ntensors = len(entry)
    last = [rs[-1] if rs else f for rs, f in zip(readers, first)]
    pinned = [False] * ntensors
    for e in graph.outputs:
        t = tensor_of[graph.entry_id(e)]
        if t >= 0:
            pinned[t] = True
            last[t] = nsteps
    until = [min(reach[r] for r in rs) if rs else reach[f] for rs, f in zip(readers, first)]
    dies = [[] for _ in range(nsteps)]
    for t in range(ntensors):
        lt = last[t]
        if lt < nsteps:
            dies[lt].append(t)

    # inplace candidates, now that every tensor's last step is known
    pairs = [()] * nsteps
    for s, members in enumerate(steps):
        outs = step_out[s]
        if not outs:
            continue
        dp = declared_pairs(graph, members, in_eids, internal)
        if not dp:
            continue
        ins = step_in[s]
        cand = []
        for xe, oe in dp:
            x, o = tensor_of[xe], tensor_of[oe]
            if x < 0 or o < 0 or pinned[x] or last[x] != s or nbytes[x] != nbytes[o]:
                continue
            if ins.count(x) != 1:
                continue  # MXNet: the input must have no other reader
            cand.append((x, o))
        if cand:
            pairs[s] = cand
    return Liveness(graph, inferred, fusion, tuple(steps), kind, tensor_of, entry, nbytes,
                    first, last, readers, pinned, step_in, step_out, dies, pairs, anc_base,
                    anc_bits, in_eids, reach, until)
