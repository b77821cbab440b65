"""Corrupted plans: every one must be caught by the static check and,
separately, by the arena interpreter.

Random nets are planned (a verified plan of a random strategy), then the
plan is broken one way at a time:

- ``overlap``: a tensor moved onto another that is live when it is written;
- ``inplace``: an output given the range of an input its op declares it may
  overwrite, where that is unsafe (the input is read later, read twice by
  the op, or is a graph output);
- ``shift``: a tensor's offset moved by 1-3 elements onto a neighbour whose
  lifetime meets its own.

The static check (``check_placement``) must reject every one. The
interpreter must reject every one that changes what some step reads: a
byte model here (no poisoning, the plain lowering's values) says which do;
the rest are run too, and counted apart: the moved tensor writes the bytes
the other holds (a relu zero over a relu zero), or the other is read only
for its shape (``zeros_like``'s input, which the planner's liveness counts
as a read).

Run with ``-s`` or ``-rP`` to see the counts.
"""
from collections import Counter

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import symgraph as sg
from symgraph.errors import PlanError
from symgraph.lower import JaxInterpreter
from symgraph.memory import PLACED, StaticCheck, check_arena, check_placement, check_slots
from symgraph.memory.liveness import PLANNED, declared_pairs
from symgraph.bench.randnet import random_net
from symgraph.memory.verify import random_feeds

KINDS = ("overlap", "inplace", "shift")
SEEDS = (0, 1)  # check_arena's default seeds: the byte model sees the same values
PER_KIND = 6    # corruptions of each kind per net


class _Record(JaxInterpreter):
    """The plain lowering, keeping every entry's value (its bytes)."""

    def __init__(self, graph, is_train, key):
        super().__init__(graph, is_train, key)
        self.values = {}

    def eval_node(self, node, inputs):
        outs = super().eval_node(node, inputs)
        base = self.graph.row_ptr[self.graph.node_id(node)]
        for k, v in enumerate(outs):
            self.values[base + k] = np.asarray(v).tobytes()
        return outs


def _reference_bytes(lv, train):
    """Per seed, tensor -> the bytes the plain lowering computes for it."""
    out = []
    for seed in SEEDS:
        rec = _Record(lv.graph, train, jax.random.key(seed))
        rec.run(random_feeds(lv, seed))
        out.append([rec.values[lv.entry[t]] for t in range(lv.num_tensors)])
    return out


def _data_reads(lv):
    """Per step, the planned tensors its ops read values from (not those
    read only for their shape, as zeros_like's input)."""
    g = lv.graph
    out = []
    for members in lv.steps:
        reads = []
        for nid in members:
            node = g.nodes[nid]
            shape_only = set(node.op.shape_inputs(node.params))
            for i, eid in enumerate(lv.in_eids[nid]):
                t = lv.tensor_of[eid] if lv.kind[eid] == PLANNED else -1
                if t >= 0 and i not in shape_only:
                    reads.append(t)
        out.append(reads)
    return out


def _changes_a_read(lv, check, offset, total, ref) -> bool:
    """Whether the plan makes some step read bytes other than its tensor's
    (memory keeps what was last written there: no poisoning), or writes an
    output over an input or output of its own step other than through an
    inplace pair the static rules allow."""
    nb = lv.nbytes
    step_in = _data_reads(lv)

    def meet(a, b):
        return offset[a] < offset[b] + nb[b] and offset[b] < offset[a] + nb[a]

    for s in range(lv.num_steps):
        al = check.allowed[s] or {}
        outs = lv.step_out[s]
        for j, o in enumerate(outs):
            for x in set(step_in[s]):
                if meet(o, x) and not (x in al.get(o, ()) and offset[x] == offset[o]
                                       and nb[x] == nb[o]):
                    return True
            if any(meet(o, o2) for o2 in outs[:j]):
                return True
    for values in ref:
        mem = bytearray(total)
        for s in range(lv.num_steps):
            for t in step_in[s]:
                if bytes(mem[offset[t]:offset[t] + nb[t]]) != values[t]:
                    return True
            for o in lv.step_out[s]:
                mem[offset[o]:offset[o] + nb[o]] = values[o]
        for t in range(lv.num_tensors):
            if lv.pinned[t] and bytes(mem[offset[t]:offset[t] + nb[t]]) != values[t]:
                return True
    return False


def _candidates(lv, check, offset):
    """Corruptions of each kind: kind -> [(tensor moved, new offset, victim)]."""
    n, nb = lv.num_tensors, lv.nbytes
    first, last = check.first, check.last
    g = lv.graph

    def item(t):
        return int(np.dtype(lv.inferred.dtypes[lv.entry[t]]).itemsize)

    out = {k: [] for k in KINDS}
    # two tensors live at once: b written while a is live, b put somewhere on a
    for b in range(n):
        s = first[b]
        al = check.allowed[s] or {}
        for a in range(n):
            if a != b and first[a] < s <= last[a] and a not in al.get(b, ()):
                k = item(b)
                lo, hi = -(nb[b] // k) + 1, nb[a] // k - 1  # in b's elements
                out["overlap"].append((b, a, lo, hi, k))
    # unsafe inplace pairs: declared by the op, not allowed by the static rules
    rp = g.row_ptr
    internal = {rp[m]: m for grp in lv.fusion.groups for m in grp[:-1]}
    for s, members in enumerate(lv.steps):
        al = check.allowed[s] or {}
        for xe, oe in declared_pairs(g, members, lv.in_eids, internal):
            x, o = lv.tensor_of[xe], lv.tensor_of[oe]
            if x >= 0 and o >= 0 and nb[x] == nb[o] and x not in al.get(o, ()):
                out["inplace"].append((o, x, offset[x]))
    # an offset shifted by a few elements onto a tensor whose lifetime meets
    for t in range(n):
        k = item(t)
        for d in (-3, -2, -1, 1, 2, 3):
            a = offset[t] + d * k
            if a < 0:
                continue
            for v in range(n):
                if (v != t and first[v] <= last[t] and first[t] <= last[v]
                        and a < offset[v] + nb[v] and offset[v] < a + nb[t]
                        and not (offset[v] < offset[t] + nb[t]
                                 and offset[t] < offset[v] + nb[v])):
                    out["shift"].append((t, v, a))
                    break
    return out


def _apply(kind, cand, offset, data):
    off = list(offset)
    if kind == "overlap":
        b, a, lo, hi, k = cand
        d = data.draw(st.integers(lo, hi), label="overlap at")
        off[b] = max(offset[a] + d * k, 0)
        return off, b, a
    t, v, a = cand
    off[t] = a
    return off, t, v


def _mechanism(msg: str) -> str:
    if "overlaps its input" in msg or "outputs" in msg and "overlap" in msg:
        return "step overlap"
    if "holds poison" in msg:
        return "read finds poison"
    if "another tensor's values" in msg:
        return "read finds other bytes"
    if "in place over" in msg:
        return "run aliased"
    return "outputs differ"


def _run_corruptions(tally, settings_kw):
    @settings(deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck), **settings_kw)
    @given(rnd=st.randoms(use_true_random=False), n=st.integers(4, 14),
           train=st.booleans(), strategy=st.sampled_from(PLACED), data=st.data())
    def run(rnd, n, train, strategy, data):
        net, shapes = random_net(rnd, n, loss=train)
        try:
            p = sg.plan(net, shapes, train=train)
        except PlanError:  # no parameters to train: plan the inference graph
            train = False
            p = sg.plan(net, shapes)
        lv, a = p.live, p.assignment(strategy)
        check_arena(lv, a.offset, a.total, train, name=strategy)  # the plan itself passes
        check = StaticCheck(lv)
        ref = _reference_bytes(lv, train)
        cands = _candidates(lv, check, a.offset)
        for kind in KINDS:
            if not cands[kind]:
                continue
            for _ in range(PER_KIND):
                cand = data.draw(st.sampled_from(cands[kind]), label=kind)
                off, moved, other = _apply(kind, cand, a.offset, data)
                total = max(a.total, max(o + b for o, b in zip(off, lv.nbytes)))
                # real: both non-empty, lifetimes meet, ranges meet
                assert lv.nbytes[moved] > 0 and lv.nbytes[other] > 0
                assert (check.first[moved] <= check.last[other]
                        and check.first[other] <= check.last[moved])
                assert (off[moved] < off[other] + lv.nbytes[other]
                        and off[other] < off[moved] + lv.nbytes[moved])
                c = tally[kind]
                c["injected"] += 1
                with pytest.raises(PlanError, match="overlaps"):
                    check_placement(lv, off, name="broken")
                c["static caught"] += 1
                must = _changes_a_read(lv, check, off, total, ref)
                c["change a read" if must else "change no read"] += 1
                try:
                    check_arena(lv, off, total, train, name="broken")
                except PlanError as err:
                    c["interpreter caught"] += 1
                    c["by " + _mechanism(str(err))] += 1
                    if not must:
                        c["caught though no read changes"] += 1
                else:
                    assert not must, (f"{kind}: the interpreter missed {lv.tensor_name(moved)} "
                                      f"moved to {off[moved]} onto {lv.tensor_name(other)}")
    run()


def test_every_injected_corruption_is_caught(record_property):
    tally = {k: Counter() for k in KINDS}
    _run_corruptions(tally, {"max_examples": 22})
    lines = [f"{k:8s} " + ", ".join(f"{name} {v}" for name, v in sorted(tally[k].items()))
             for k in KINDS]
    print("\ncorruptions injected and caught per kind:\n" + "\n".join(lines))
    for k in KINDS:
        record_property(f"corruptions_{k}", dict(tally[k]))
    total = sum(tally[k]["injected"] for k in KINDS)
    assert total >= 300, f"only {total} corruptions injected"
    for k in KINDS:
        c = tally[k]
        assert c["injected"] >= 60, f"only {c['injected']} {k} corruptions"
        assert c["static caught"] == c["injected"]
        # every one that changes a read is caught (the assert inside the run),
        # and nearly all change one
        assert c["interpreter caught"] >= c["change a read"]
        assert c["change a read"] >= 0.9 * c["injected"], c


# -- one plan broken each way, each check ------------------------------------------
def _fork_net():
    """fc = FC(data); a = tanh(fc); b = sigmoid(fc); c = negative(b);
    out = a * c. Neither b's step nor c's reads a, which out reads last;
    b dies (read by c) before that, c lives until then."""
    d = sg.sym.Variable("data")
    fc = sg.sym.FullyConnected(d, num_hidden=6, name="fc")
    a = sg.sym.tanh(fc, name="a")
    b = sg.sym.sigmoid(fc, name="b")
    c = sg.sym.negative(b, name="c")
    return sg.sym.elemwise_mul(a, c, name="out"), {"data": (2, 5)}


def _broken(kind):
    """(plan, broken offsets, total, moved tensor, other tensor) from the
    naive plan (every tensor its own range, in the order written)."""
    net, shapes = _fork_net()
    p = sg.plan(net, shapes, fuse=False)
    lv = p.live
    t = {lv.tensor_name(i): i for i in range(lv.num_tensors)}
    fc, a, b, c = t["fc_output"], t["a_output"], t["b_output"], t["c_output"]
    assert lv.first[fc] < lv.first[a] < lv.first[b] < lv.first[c] < lv.last[a]
    assert lv.last[b] < lv.last[a] == lv.last[c]
    naive = p.assignment("naive")
    off = list(naive.offset)
    assert off[b] == off[a] + lv.nbytes[a]  # side by side
    if kind == "overlap":  # c written on a, which out reads later
        off[c], moved, other = off[a], c, a
    elif kind == "inplace":  # tanh may overwrite its input, but b reads fc later
        off[a], moved, other = off[fc], a, fc
    else:  # b one element lower: its first element on a's last; b dies first
        off[b], moved, other = off[b] - 4, b, a
    return p, off, naive, moved, other


@pytest.mark.parametrize("kind", KINDS)
def test_each_check_fails_on_a_plan_broken_each_way(kind):
    p, off, naive, moved, other = _broken(kind)
    lv = p.live
    mname, oname = lv.tensor_name(moved), lv.tensor_name(other)
    p.check_arena("naive")  # unbroken, it passes
    # static, byte ranges
    with pytest.raises(PlanError, match=f"broken: .* tensor {mname} .* overlaps {oname}"):
        check_placement(lv, off, name="broken")
    # static, storage ids: the moved tensor given the other's slot (a shifted
    # offset is no slot plan; it shares the slot only in part)
    if kind != "shift":
        slot = list(naive.slot)
        slot[moved] = slot[other]
        with pytest.raises(PlanError, match=f"{mname} is written into slot .* holds {oname}"):
            check_slots(lv, slot, naive.slot_size, name="broken")
    # the interpreter: the overlap of a step's output with its input is refused
    # before it runs; a tensor overwritten while live is seen when read
    want = {"overlap": f"at step \\d+ \\('out'\\) tensor {oname} .* holds another tensor's "
                       f"values in 12 of 12 elements",
            "inplace": f"output {mname} .* overlaps its input {oname}",
            "shift": f"at step \\d+ \\('out'\\) tensor {oname} .* holds poison \\(memory "
                     f"freed\\) in 1 of 12 elements"}[kind]
    with pytest.raises(PlanError, match=want):
        check_arena(lv, off, naive.total, False, name="broken")


def test_poison_reaches_the_output_without_the_read_check():
    # b over a's last element: b dies and is poisoned before out reads a, so
    # out reads a NaN; the outputs are compared byte for byte (no equal_nan)
    p, off, naive, moved, other = _broken("shift")
    lv = p.live
    with pytest.raises(PlanError, match=f"tensor {lv.tensor_name(other)} .* holds poison"):
        check_arena(lv, off, naive.total, False)
    with pytest.raises(PlanError, match=r"different 'out_output' .*\(1 of 12 elements differ"):
        check_arena(lv, off, naive.total, False, check_reads=False)
