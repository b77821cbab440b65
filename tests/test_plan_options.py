"""``sg.plan``'s options as one checked value (``PlanOptions``), and the
``Plan`` it returns built whole: no attribute set after construction."""
import dataclasses

import pytest

import symgraph as sg
from symgraph.errors import PlanError
from symgraph.memory import pipeline
from symgraph.memory.plan_options import PlanOptions

S = sg.sym
SHAPES = {"data": (4, 6)}


def mlp():
    with sg.AttrScope(ctx_group="stage1"):
        x = S.FullyConnected(S.Variable("data"), num_hidden=16, name="fc1")
        x = S.Activation(x, act_type="relu", name="relu1")
    with sg.AttrScope(ctx_group="stage2"):
        x = S.FullyConnected(x, num_hidden=16, name="fc2")
        x = S.Activation(x, act_type="tanh", name="tanh2")
        x = S.FullyConnected(x, num_hidden=3, name="fc3")
        return S.SoftmaxOutput(x, name="softmax")


def figures(p):
    return (p.total, p.internal, p.buckets, p.recompute, p.algorithm, p.budget, p.options,
            p.extra_flops, p.train, p.net, p.shapes)


@pytest.fixture
def built_whole(monkeypatch):
    """Plans made while it is active raise on any attribute set after
    ``Plan.__init__`` (``dataclasses.replace`` builds a new one: allowed)."""
    done = set()
    init = pipeline.Plan.__init__

    def whole_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        done.add(id(self))

    def no_setattr(self, name, value):
        if id(self) in done:
            raise AssertionError(f"Plan.{name} set after construction")
        object.__setattr__(self, name, value)

    monkeypatch.setattr(pipeline.Plan, "__init__", whole_init)
    monkeypatch.setattr(pipeline.Plan, "__setattr__", no_setattr)
    return done


@pytest.mark.parametrize("kw", [
    dict(),
    dict(train=True, optimizer="momentum"),
    dict(train=True, recompute="mirror", strategy="both", schedule="memory"),
    dict(train=True, recompute=["relu1"], optimizer="adam"),
    dict(train=True, budget=10 ** 9, recompute="none"),
    dict(train=True, group2ctx={"stage1": "cpu:1", "stage2": "cpu:2"}),
])
def test_plan_builds_its_options_then_the_plan_whole(built_whole, kw):
    p = sg.plan(mlp(), SHAPES, **kw)
    assert id(p) in built_whole
    opts = PlanOptions.of(**kw)
    assert figures(pipeline.plan_with_options(mlp(), SHAPES, opts)) == figures(p)
    assert (p.devices is not None) == ("group2ctx" in kw)
    if kw.get("recompute") == ["relu1"]:
        assert [r["name"] for r in p.recompute] == ["relu1"] and p.algorithm == "explicit"
        assert opts.explicit == ("relu1",)
    if "budget" in kw:
        assert p.budget == 10 ** 9 and p.algorithm == "none" and p.recompute == []


def test_options_are_one_frozen_value_checked_before_any_planning():
    opts = PlanOptions.of(train=True, budget="1GiB", mirror=True)
    assert (opts.budget, opts.algorithm, opts.layout) == (2 ** 30, "mirror", "NCHW")
    assert opts.recomputes and opts.plan_algorithm == "mirror"
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.budget = 1
    assert not PlanOptions.of().recomputes and PlanOptions.of().plan_algorithm is None
    for kw, match in [(dict(layout="NWHC"), "layout='NWHC'"),
                      (dict(strategy="lower_bound"), "lower_bound is a bound"),
                      (dict(strategy="best"), "unknown strategy 'best'"),
                      (dict(budget="1GiB"), "a budget needs a training plan"),
                      (dict(optimizer="adam"), "optimizer state needs a training plan"),
                      (dict(train=True, recompute="fast"), "recompute='fast'"),
                      (dict(train=True, mirror=True, recompute="sqrt"), "mirror=True")]:
        with pytest.raises(PlanError, match=match):
            PlanOptions.of(**kw)
        with pytest.raises(PlanError, match=match):  # plan() says the same, first
            sg.plan(mlp(), SHAPES, **kw)
