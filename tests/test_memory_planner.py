"""The memory planner: strategies, their ordering, the arena, the lower bound.

Property tests run the whole pipeline on random DAGs (branches, joins,
multi-output nodes, tensors read many times, random widths) and check what
every plan must satisfy; the allocators are tested on their own.
"""
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import symgraph as sg
from symgraph.errors import PlanError
from symgraph.memory import PLACED, STRATEGIES, BlockPool, OffsetHeap
from symgraph.memory.planner import inplace_saving
from symgraph.bench.randnet import chain_net, random_net

PROPS = settings(max_examples=30, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow])


def train_plan(net, shapes, **kw):
    """A training plan whose gradients are taken of every input but labels
    (random nets may have no parameters)."""
    g = sg.memory.as_graph(net)
    wrt = [a for a in g.list_arguments() if not a.endswith("label")]
    return sg.plan(net, shapes, train=True, wrt=wrt, **kw)


def assert_ordered(p):
    i = p.internal
    assert set(i) == set(STRATEGIES)
    assert i["lower_bound"] <= i["arena"] <= i["both"] <= i["naive"]
    assert i["inplace"] <= i["naive"]
    assert i["coshare"] <= i["naive"]


# -- property tests over random DAGs ---------------------------------------------
@PROPS
@given(rnd=st.randoms(use_true_random=False), n=st.integers(1, 40), train=st.booleans(),
       fuse=st.booleans(), schedule=st.sampled_from(["dfs", "memory"]),
       match_range=st.sampled_from([0, 1, 2, 16]))
def test_random_dags_verify_and_order(rnd, n, train, fuse, schedule, match_range):
    net, shapes = random_net(rnd, n, loss=train and rnd.random() < 0.5)
    kw = dict(fuse=fuse, schedule=schedule, match_range=match_range)
    p = train_plan(net, shapes, **kw) if train else sg.plan(net, shapes, **kw)
    assert p.verified
    assert_ordered(p)
    # naive is the sum of the planned tensors, the bound at least the largest one
    assert p.internal["naive"] == sum(p.live.nbytes)
    assert p.lower_bound >= max(p.live.nbytes, default=0)
    for s in PLACED:
        a = p.assignment(s)
        # every tensor fits in the strategy's address space
        assert all(0 <= a.offset[t] and a.offset[t] + p.live.nbytes[t] <= a.total
                   for t in range(p.live.num_tensors))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rnd=st.randoms(use_true_random=False), n=st.integers(1, 18), train=st.booleans(),
       fuse=st.booleans(), schedule=st.sampled_from(["dfs", "memory"]))
def test_random_dags_arena_run_matches_every_strategy(rnd, n, train, fuse, schedule):
    net, shapes = random_net(rnd, n, loss=train and rnd.random() < 0.5)
    kw = dict(fuse=fuse, schedule=schedule, execute=True)
    p = train_plan(net, shapes, **kw) if train else sg.plan(net, shapes, **kw)
    assert sorted(p.arena_checked) == sorted(PLACED)


def test_window_free_random_net_with_many_readers():
    # window=None: any earlier tensor may be read, so tensors live long
    net, shapes = random_net(random.Random(7), 60, window=None)
    p = sg.plan(net, shapes, execute=True)
    assert_ordered(p)
    assert max(len(r) for r in p.live.readers) >= 3


def test_chain_reaches_the_bound():
    net, shapes = chain_net(200)
    for train in (False, True):
        p = sg.plan(net, shapes, train=train)
        assert_ordered(p)
        assert p.internal["arena"] == p.lower_bound
    # inference keeps only a few tensors of a 200-deep chain
    p = sg.plan(net, shapes)
    assert p.internal["arena"] < p.internal["naive"] / 10


# -- strategies on hand-built graphs ----------------------------------------------
def _mlp_chain():
    x = sg.sym.Variable("data")
    x = sg.sym.FullyConnected(x, num_hidden=16, name="fc1")
    x = sg.sym.Activation(x, act_type="relu", name="relu1")
    x = sg.sym.FullyConnected(x, num_hidden=16, name="fc2")
    x = sg.sym.Activation(x, act_type="relu", name="relu2")
    x = sg.sym.FullyConnected(x, num_hidden=16, name="fc3")
    return x, {"data": (4, 16)}


def test_naive_gives_every_tensor_its_own_slot():
    net, shapes = _mlp_chain()
    p = sg.plan(net, shapes, fuse=False)
    a = p.assignment("naive")
    assert sorted(a.slot) == list(range(p.live.num_tensors))
    assert a.total == sum(p.live.nbytes) == 5 * 4 * 16 * 4


def test_inplace_activation_overwrites_its_input():
    net, shapes = _mlp_chain()
    p = sg.plan(net, shapes, fuse=False)
    a = p.assignment("inplace")
    names = {p.live.tensor_name(x): p.live.tensor_name(o) for x, o in a.inplace}
    assert names == {"fc1_output": "relu1_output", "fc2_output": "relu2_output"}
    st_ = p.storage("inplace")
    eid = {p.live.tensor_name(t): e for t, e in enumerate(p.live.entry)}
    assert st_[eid["fc1_output"]] == st_[eid["relu1_output"]]
    # inplace alone reuses nothing else: 3 slots for 5 tensors
    assert len(set(a.slot)) == 3


def test_coshare_reuses_a_dead_tensors_slot_and_pins_outputs():
    net, shapes = _mlp_chain()
    p = sg.plan(net, shapes, fuse=False)
    a = p.assignment("coshare")
    assert a.inplace == []
    # chain: at most two tensors live at once (input and output of a step)
    assert len(set(a.slot)) == 2
    # the graph output is pinned: it never takes an inplace slot, lives to the end
    out = p.live.tensor_of[p.graph.entry_id(p.graph.outputs[0])]
    assert p.live.pinned[out] and p.live.last[out] == p.live.num_steps


def test_match_range_zero_disables_coshare():
    net, shapes = _mlp_chain()
    p = sg.plan(net, shapes, fuse=False, match_range=0)
    assert p.internal["coshare"] == p.internal["naive"]


def test_parallel_branches_do_not_share_under_parallel_safe():
    # two independent branches from data: b's ops could run beside a's
    d = sg.sym.Variable("data")
    a1 = sg.sym.tanh(d, name="a1")
    a2 = sg.sym.sigmoid(a1, name="a2")
    b1 = sg.sym.negative(d, name="b1")
    b2 = sg.sym.abs(b1, name="b2")
    net = sg.sym.Group([a2, b2])
    shapes = {"data": (4, 8)}
    safe = sg.plan(net, shapes, fuse=False, parallel_safe=True)
    free = sg.plan(net, shapes, fuse=False, parallel_safe=False)
    lv = safe.live
    name = {lv.tensor_name(t): t for t in range(lv.num_tensors)}
    # a1 dies at a2 (step 2); b1 is written at step 3 by an op that does not depend on a2
    for s in ("coshare", "both"):
        assert safe.assignment(s).slot[name["a1_output"]] != \
            safe.assignment(s).slot[name["b1_output"]]
    assert free.assignment("coshare").slot[name["a1_output"]] == \
        free.assignment("coshare").slot[name["b1_output"]]
    assert free.internal["coshare"] < safe.internal["coshare"]


def test_lower_bound_is_the_largest_live_sum():
    net, shapes = _mlp_chain()
    p = sg.plan(net, shapes, fuse=False)
    live = p.live.live_bytes()
    assert max(live) == 2 * 4 * 16 * 4
    # relu steps can hand their input over in place, so only one tensor counts there
    assert p.lower_bound == max(p.profile) == 2 * 4 * 16 * 4
    assert p.profile[p.peak_step] == p.lower_bound


def test_lower_bound_is_not_a_plan():
    net, shapes = _mlp_chain()
    with pytest.raises(PlanError, match="bound, not a plan"):
        sg.plan(net, shapes, strategy="lower_bound")
    with pytest.raises(PlanError, match="unknown strategy"):
        sg.plan(net, shapes, strategy="greedy")
    p = sg.plan(net, shapes)
    with pytest.raises(PlanError, match="bound, not a plan"):
        p.assignment("lower_bound")


def test_inplace_saving_is_a_maximum_matching():
    nb = [10, 10, 7, 5]
    # one input offered to two outputs: only one can take it
    assert inplace_saving([(0, 2), (0, 3)], nb) == 7
    # an augmenting path: 2 takes 1 so that 3 can take 0
    assert inplace_saving([(0, 2), (1, 2), (0, 3)], nb) == 12
    assert inplace_saving([(0, 2)], nb) == 7


def test_plan_report_and_json_agree():
    net, shapes = _mlp_chain()
    p = sg.plan(net, shapes, train=True)
    j = p.to_json()
    assert j["bytes"]["internal"] == p.internal
    # data, the weights and biases, and the head gradient of the output (no loss op)
    assert j["bytes"]["arguments"] == 4 * (4 * 16 + 3 * (16 * 16 + 16) + 4 * 16)
    assert j["bytes"]["gradients"] == 4 * 3 * (16 * 16 + 16)
    text = p.report()
    for s in STRATEGIES:
        assert s in text
    assert f"{p.internal['naive']:,}" in text
    assert "peak (lower bound) at step" in text


def test_plan_footprint_peaks_at_the_total():
    net, shapes = random_net(random.Random(3), 30)
    p = sg.plan(net, shapes)
    for s in ("naive", "both", "arena"):
        assert max(p.footprint(s)) == p.internal[s]
    assert max(p.footprint("lower_bound")) == p.lower_bound


# -- graph-free allocators ----------------------------------------------------
def test_block_pool_match_range():
    pool = BlockPool(match_range=2)
    a = pool.request(100)
    pool.release(a)
    assert pool.request(300) != a        # 100 < 300 / 2: out of range, a new block
    assert pool.request(150) == a        # 150 / 2 <= 100: served, grows to 150
    assert pool.sizes[a] == 150
    pool.release(a)
    assert pool.request(40) != a         # 150 > 40 * 2
    assert pool.request(80) == a         # 80 <= 150 <= 160, keeps its size
    assert pool.sizes[a] == 150


def test_block_pool_prefers_the_smallest_larger_block_and_stamps():
    pool = BlockPool(16)
    big, mid = pool.request(1000), pool.request(200)
    pool.release(big, "x")
    pool.release(mid, "y")
    assert pool.request(150, lambda stamp: stamp == "x") == big
    assert pool.request(150) == mid
    pool.release(mid)
    with pytest.raises(PlanError, match="released twice"):
        pool.release(mid)


def test_block_pool_zero_range_never_reuses():
    pool = BlockPool(0)
    a = pool.request(8)
    pool.release(a)
    assert pool.request(8) != a
    assert pool.total == 16


def test_offset_heap_best_fit_and_merge():
    h = OffsetHeap()
    a, b, c = h.alloc(100), h.alloc(50), h.alloc(100)
    assert (a, b, c) == (0, 100, 150)
    h.free(b, 50)
    h.free(a, 100)         # merges with b's hole: [0, 150)
    assert h.alloc(150) == 0
    assert h.peak == 250
    h.free(c, 100)         # the top comes back
    assert h.top == 150
    with pytest.raises(PlanError, match="double free"):
        h.free(0, 10)
        h.free(0, 10)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30), st.integers(1, 64)),
                min_size=1, max_size=40))
def test_offset_heap_never_overlaps_live_blocks(events):
    # intervals [start, start + length] with sizes; replay in time order
    blocks = [(s, s + d, sz) for s, d, sz in events]
    h = OffsetHeap()
    off = {}
    for step in range(0, 62):
        for i, (s, e, sz) in enumerate(blocks):
            if s == step:
                off[i] = h.alloc(sz)
        live = [i for i, (s, e, _) in enumerate(blocks) if s <= step <= e]
        ranges = sorted((off[i], off[i] + blocks[i][2]) for i in live)
        assert all(r1[1] <= r2[0] for r1, r2 in zip(ranges, ranges[1:]))
        for i, (s, e, sz) in enumerate(blocks):
            if e == step:
                h.free(off[i], sz)
    assert h.peak >= max(sz for _, _, sz in blocks)


def test_arena_offsets_are_bytes_in_one_buffer():
    net, shapes = random_net(random.Random(11), 25)
    p = sg.plan(net, shapes)
    offs = p.offsets("arena")
    assert set(offs) == set(p.live.entry)
    assert max(o + p.live.nbytes[p.live.tensor_of[e]] for e, o in offs.items()) \
        <= p.internal["arena"]


def test_block_pool_drops_blocks_past_their_until():
    pool = BlockPool(16)
    a, b = pool.request(100), pool.request(100)
    pool.release(a, "a", until=3)
    pool.release(b, "b", until=9)
    # at step 5 block a can no longer be taken: b serves, a is gone from the pool
    assert pool.request(100, lambda stamp: True, now=5) == b
    assert pool.num_free == 0
    assert pool.request(100, lambda stamp: True, now=5) not in (a, b)


@PROPS
@given(rnd=st.randoms(use_true_random=False), n=st.integers(1, 40), train=st.booleans())
def test_ancestor_sets_match_a_brute_force_search(rnd, n, train):
    net, shapes = random_net(rnd, n, window=rnd.choice([None, 3, 8]))
    p = train_plan(net, shapes) if train else sg.plan(net, shapes)
    lv, g = p.live, p.graph
    step_of = {nid: s for s, members in enumerate(lv.steps) for nid in members}
    nid_of = {id(nd): i for i, nd in enumerate(g.nodes)}
    anc = []
    for s, members in enumerate(lv.steps):
        a = set()
        for m in members:
            for e in g.nodes[m].inputs:
                q = step_of.get(nid_of[id(e.node)])
                if q is not None and q != s:
                    a |= anc[q] | {q}
        anc.append(a)
    for s in range(lv.num_steps):
        assert {r for r in range(lv.num_steps) if lv.is_ancestor(r, s)} == anc[s]
        later = [s2 for s2 in range(lv.num_steps) if s in anc[s2]]
        assert lv.reach[s] == max(later, default=s)
    for t in range(lv.num_tensors):
        for s in range(lv.first[t] + 1, lv.num_steps):
            touched = lv.readers[t] or [lv.first[t]]
            assert lv.all_readers_before(t, s) == all(r in anc[s] for r in touched)


def test_training_plan_of_an_output_listed_twice():
    """Each listing of an output gets its own head gradient, with the
    output's shape (the gradient pass names the second ``..._head_grad1``)."""
    x = sg.sym.Variable("data")
    y = sg.sym.FullyConnected(x, num_hidden=4, name="fc")
    p = sg.plan(sg.sym.Group([y, y]), {"data": (2, 3)}, train=True, execute=True)
    heads = [n for n in p.graph.variables if "head_grad" in n.name]
    assert len(heads) == 2
    assert all(p.inferred.shapes[p.graph.entry_id_of_node(n)] == (2, 4) for n in heads)
