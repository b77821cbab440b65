"""Every op fact lives in its OpDef (issue 15, item 1): a registered op
lacking one is refused, every registered op has them all, and an op defined
in one place (here, in this file, with its NumPy reference) works
everywhere: shape inference, gradients (against finite differences),
viz colour, lowering, the memory plan."""
import jax.numpy as jnp
import numpy as np
import pytest

import symgraph as sg
from symgraph import viz
from symgraph.errors import OpError
from symgraph.graph import Entry, Graph, Node
from symgraph.ops import all_opdefs
from symgraph.ops import registry
from symgraph.ops.backward import register_backward
from symgraph.ops.registry import (FAMILIES, Attr, OpDef, Sample, int_attr, numel,
                                   register)

from grad_check import symgraph_gradients

OP = "TestChannelScale"


# --------------------------------------------------------------------------
# the op: everything about it in this one place
# --------------------------------------------------------------------------
def _scale_shape(p, s):
    data, _ = s
    return ([data, (data[p.axis],)], [data]) if data is not None else (s, [None])


def _bcast(p, w, ndim):
    return w.reshape([-1 if a == p.axis % ndim else 1 for a in range(ndim)])


def _scale_backward(p, ctx, ograds, ins, outs):  # reads dy, x and w
    dy, (x, w) = ograds[0], ins
    axes = tuple(a for a in range(x.ndim) if a != p.axis % x.ndim)
    return dy * _bcast(p, w, x.ndim), jnp.sum(dy * x, axis=axes)


def define_channel_scale():
    """y = x * w, w of shape (C,) broadcast along ``axis`` of x; as
    docs/design.md, "Adding an op", shows it."""
    _scale = register(OpDef(
        name=OP, attrs={"axis": Attr(int_attr, 1, "the channel axis")},
        arguments=("data", "weight"), infer_shape=_scale_shape,
        lower=lambda p, ctx, x, w: x * _bcast(p, w, x.ndim),
        category="opaque", family="normalization", anchor_weights=True,
        flops=lambda p, ins, outs: numel(outs[0]),
        samples=[Sample({}, [(2, 3, 4)]), Sample({"axis": -1}, [(2, 5)])]))
    register_backward(_scale, lower=_scale_backward,
                      flops=lambda p, ins, outs: 3 * numel(ins[0]))
    return _scale


def reference(p, x, w):
    shape = [1] * x.ndim
    shape[p.get("axis", 1) % x.ndim] = -1
    return x * w.reshape(shape)


@pytest.fixture(scope="module")
def channel_scale():
    op = define_channel_scale()
    yield op
    # out of the registry again: the registry-driven suites must not see it
    for name in (OP, "_backward_" + OP):
        registry._REGISTRY.pop(name, None)


# --------------------------------------------------------------------------
# a missing fact is refused
# --------------------------------------------------------------------------
def _identity(name, **kw):
    return OpDef(name=name, lower=lambda p, ctx, x: x, infer_shape=lambda p, s: (s, [s[0]]),
                 **kw)


def test_an_opaque_op_without_flops_is_refused():
    with pytest.raises(OpError, match="op 'no_flops': an opaque op needs flops"):
        register(_identity("no_flops"))
    assert "no_flops" not in sg.ops.list_ops()
    # elementwise ops count one per output element by default
    op = _identity("ew", category="elementwise")
    assert op.flops(None, [(2, 3)], [(2, 3)]) == 6


def test_a_family_outside_FAMILIES_is_refused():
    with pytest.raises(OpError, match="op 'odd': family 'layer' is not one of convolution"):
        _identity("odd", family="layer", category="elementwise")


def test_a_backward_op_outside_register_backward_is_refused():
    with pytest.raises(OpError, match="registered by register_backward"):
        register(_identity("_backward_mine", category="elementwise"))


def test_every_registered_op_has_every_fact():
    for op in all_opdefs():
        assert op.family in FAMILIES, op.name
        assert callable(op.flops), op.name
        assert isinstance(op.anchor_weights, bool) and isinstance(op.split_wgrad, bool)
        if op.name.startswith("_backward_"):
            assert op.forward is not None and op.family == op.forward.family, op.name
            assert op.forward.gradient is not None, op.name
        # the FLOP count is a non-negative int on every sample's shapes
        for sample in op.samples:
            probe = Node(op, "op", sample.attrs, [])
            names = op.arg_names(probe.params) + op.aux_names(probe.params)
            node = Node(op, "op", sample.attrs, [Entry(Node(None, n)) for n in names])
            g = Graph([Entry(node, i) for i in range(node.num_visible_outputs)])
            inf = sg.passes.infer.infer_shapes(g, dict(zip(names, sample.shapes)))
            ins = [inf.shapes[g.entry_id(e)] for e in node.inputs]
            outs = [inf.shapes[g.entry_id(e)] for e in g.outputs]
            n = op.flops(node.params, ins, outs)
            assert isinstance(n, (int, np.integer)) and n >= 0, (op.name, n)


# --------------------------------------------------------------------------
# the one-file op works everywhere
# --------------------------------------------------------------------------
def _net():
    data = sg.sym.Variable("data")
    h = sg.sym.TestChannelScale(data, name="scale")
    h = sg.sym.Activation(h, act_type="tanh", name="act")
    return sg.sym.LinearRegressionOutput(h, name="out")


def test_shape_inference(channel_scale):
    arg, out, _ = _net().infer_shape(data=(2, 3, 4))
    assert dict(zip(_net().list_arguments(), arg)) == {
        "data": (2, 3, 4), "scale_weight": (3,), "out_label": (2, 3, 4)}
    assert out == [(2, 3, 4)]


@pytest.mark.parametrize("attrs,shape", [({}, (2, 3, 4)), ({"axis": -1}, (3, 5))])
def test_lowering_and_gradient_against_finite_differences(channel_scale, attrs, shape):
    p, (x, w), (head,), (dx, dw) = symgraph_gradients(OP, attrs, shape)
    out = sg.nd.TestChannelScale(sg.nd.array(x, dtype="float64"),
                                 sg.nd.array(w, dtype="float64"), **attrs).asnumpy()
    np.testing.assert_allclose(out, reference(attrs, x, w), rtol=1e-12)

    def loss(x, w):
        return float(np.sum(reference(attrs, x, w) * head))

    eps = 1e-6
    for got, arg in ((dx, 0), (dw, 1)):
        base = [x, w]
        num = np.zeros_like(base[arg])
        for i in np.ndindex(num.shape):
            hi = [a.copy() for a in base]
            lo = [a.copy() for a in base]
            hi[arg][i] += eps
            lo[arg][i] -= eps
            num[i] = (loss(*hi) - loss(*lo)) / (2 * eps)
        np.testing.assert_allclose(got, num, rtol=1e-6, atol=1e-8)


def test_viz_colour_is_its_family(channel_scale):
    dot = viz.plot(_net(), shape={"data": (2, 3, 4)}).source
    assert viz.FAMILY_COLORS["normalization"] in dot
    node = next(n for n in Graph(_net().outputs).nodes if n.name == "scale")
    assert viz.op_family(node) == "normalization"


def test_plan_verified_and_run(channel_scale):
    # execute: the arena interpreter runs the plan with every tensor at its
    # planned offset and compares with the lowering byte for byte
    plan = sg.plan(_net(), {"data": (4, 3, 8)}, train=True, execute=True)
    assert plan.verified and plan.arena_checked
    names = {n.op.name for n in plan.graph.nodes if n.op is not None}
    assert {OP, "_backward_" + OP} <= names
    assert max(plan.footprint()) > 0
