"""Verification: the static overlap check and the arena interpreter.

Both must catch a wrong plan (the tests break plans on purpose), and both
must pass the planner's own plans on real network structures.
"""
import random

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import symgraph as sg
from symgraph.errors import PlanError
from symgraph.memory import PLACED, StaticCheck, check_arena, check_placement, check_slots
from symgraph.bench.randnet import random_net


def _clobber_net():
    """a = tanh(fc(data)); b = sigmoid(a); out = a * b: a is read after b
    is written, so b written over a corrupts the output."""
    d = sg.sym.Variable("data")
    fc = sg.sym.FullyConnected(d, num_hidden=8, name="fc")
    a = sg.sym.tanh(fc, name="a")
    b = sg.sym.sigmoid(a, name="b")
    return sg.sym.elemwise_mul(a, b, name="out"), {"data": (3, 8)}


def _tensor(p, name):
    lv = p.live
    return next(t for t in range(lv.num_tensors) if lv.tensor_name(t) == name)


def test_two_live_tensors_forced_to_share_are_caught_both_ways():
    net, shapes = _clobber_net()
    p = sg.plan(net, shapes, fuse=False)
    p.check_arena("arena")  # the real plan passes
    a, b = _tensor(p, "a_output"), _tensor(p, "b_output")
    assert p.live.first[a] < p.live.first[b] < p.live.last[a]  # both live at b's step

    # byte offsets: b put on top of a
    arena = p.assignment("arena")
    offset = list(arena.offset)
    offset[b] = offset[a]
    with pytest.raises(PlanError, match=r"verify broken: .* b_output .* overlaps a_output"):
        check_placement(p.live, offset, name="broken")
    # b's step reads a: the interpreter refuses the overlap before running it
    with pytest.raises(PlanError, match="output b_output .* overlaps its input a_output"):
        check_arena(p.live, offset, arena.total, False, name="broken")

    # storage ids: b given a's slot
    naive = p.assignment("naive")
    slot = list(naive.slot)
    slot[b] = slot[a]
    with pytest.raises(PlanError, match=r"b_output is written into slot .* holds a_output"):
        check_slots(p.live, slot, naive.slot_size, name="broken")
    from symgraph.memory.planner import slot_offsets
    with pytest.raises(PlanError, match="output b_output .* overlaps its input a_output"):
        check_arena(p.live, slot_offsets(slot, naive.slot_size), naive.total, False)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rnd=st.randoms(use_true_random=False), n=st.integers(3, 25), data=st.data())
def test_random_broken_plans_are_caught_statically(rnd, n, data):
    net, shapes = random_net(rnd, n)
    p = sg.plan(net, shapes)
    lv = p.live
    # pairs of tensors live at one step that are not a declared inplace pair
    clash = [(x, o) for o in range(lv.num_tensors) for x in range(lv.num_tensors)
             if lv.first[x] < lv.first[o] <= lv.last[x] and
             (x, o) not in lv.pairs[lv.first[o]]]
    assume(clash)
    x, o = data.draw(st.sampled_from(clash))
    offset = list(p.assignment("arena").offset)
    offset[o] = offset[x] + data.draw(st.integers(0, max(lv.nbytes[x] - 1, 0)))
    with pytest.raises(PlanError, match="overlaps"):
        check_placement(lv, offset)
    slot = list(range(lv.num_tensors))
    sizes = [max(lv.nbytes[x], lv.nbytes[o]) if k == x else lv.nbytes[k]
             for k in range(lv.num_tensors)]
    slot[o] = x
    with pytest.raises(PlanError, match="is written into slot"):
        check_slots(lv, slot, sizes)


def test_an_inplace_pair_passes_but_an_undeclared_one_does_not():
    net, shapes = _clobber_net()
    p = sg.plan(net, shapes, fuse=False, strategy="inplace")
    inplace = p.assignment("inplace")
    assert inplace.inplace  # fc -> tanh in place
    StaticCheck(p.live).check_slots(inplace.slot, inplace.slot_size)
    # sigmoid may write in place, but not over a: a is still read by 'out'
    a, b = _tensor(p, "a_output"), _tensor(p, "b_output")
    slot = list(inplace.slot)
    slot[b] = slot[a]
    with pytest.raises(PlanError, match="holds a_output"):
        StaticCheck(p.live).check_slots(slot, inplace.slot_size)


def test_slot_too_small_is_caught():
    net, shapes = _clobber_net()
    p = sg.plan(net, shapes, fuse=False)
    a = p.assignment("naive")
    sizes = list(a.slot_size)
    sizes[a.slot[0]] -= 1
    with pytest.raises(PlanError, match="does not fit slot"):
        check_slots(p.live, a.slot, sizes)


def test_static_check_does_not_trust_the_planners_lifetimes():
    net, shapes = _clobber_net()
    p = sg.plan(net, shapes, fuse=False)
    a = _tensor(p, "a_output")
    check = StaticCheck(p.live)
    # recomputed from the steps' reads and writes: a is read by 'out'
    assert check.last[a] == p.live.last[a] == p.live.num_steps - 1
    # a planner that thinks a dies early is caught by the recomputed lifetimes
    p.live.last[a] = p.live.first[a]
    lv = p.live
    b = _tensor(p, "b_output")
    offset = list(p.assignment("naive").offset)
    offset[b] = offset[a]
    with pytest.raises(PlanError, match="overlaps"):
        check_placement(lv, offset)


def test_arena_interpreter_outputs_equal_the_lowering_exactly():
    import numpy as np

    from symgraph.lower import lower
    from symgraph.memory.verify import ArenaInterpreter, random_feeds
    net, shapes = _clobber_net()
    p = sg.plan(net, shapes)
    a = p.assignment("arena")
    feeds = random_feeds(p.live, seed=3)
    got = ArenaInterpreter(p.live, a.offset, a.total, False).run(feeds)
    ref, _ = lower(p.graph, False)(feeds, None)
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(ref[0]))
    assert np.isfinite(np.asarray(got[0])).all()


# -- real structures at small shapes ----------------------------------------------
ZOO = [("vgg16", "3,32,32"), ("inception-bn", "3,28,28")]


@pytest.mark.parametrize("name,image", ZOO)
@pytest.mark.parametrize("train", [False, True])
def test_zoo_nets_verify_and_arena_run_matches(name, image, train):
    net = sg.models.get_model(name, num_classes=10, image_shape=image)
    dims = tuple(int(d) for d in image.split(","))
    p = sg.plan(net, {"data": (2,) + dims}, train=train)
    assert p.verified
    i = p.internal
    assert i["lower_bound"] <= i["arena"] <= i["both"] <= i["naive"]
    assert i["both"] < i["naive"]
    # training runs every backward op too: the two plans that reuse most
    for s in (PLACED if not train else ("both", "arena")):
        p.check_arena(s)
    assert p.arena_checked


def test_check_arena_compares_with_tolerance_when_asked():
    net, shapes = random_net(random.Random(5), 12)
    p = sg.plan(net, shapes)
    a = p.assignment("both")
    check_arena(p.live, a.offset, a.total, False, rtol=1e-6, atol=1e-6)
