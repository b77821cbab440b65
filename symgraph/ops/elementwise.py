"""Elementwise ops: unary math, activations, binary and scalar arithmetic.

Each op's gradient is written beside it (math in a comment). Where the
backward can be built from other registered ops it is; otherwise it is a
``_backward_<op>`` node that reads only what it needs (ReLU, sigmoid, tanh,
exp and sqrt read their output, so their input may be overwritten in place).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from ..errors import ShapeError
from .backward import register_backward
from .registry import (Attr, OpDef, Sample, choice_attr, count_attr, float_attr, numel,
                       register, unify)


def same_shape(p, in_shapes):
    """All inputs and the one output share a shape."""
    s = unify(in_shapes)
    return [s] * len(in_shapes), [s]


def elementwise_flops(p, in_shapes, out_shapes):
    return sum(numel(s) for s in out_shapes)


INPLACE_FIRST = [(0, 0)]
X = [Sample({}, [(3, 4)])]
POS = [Sample({}, [(3, 4)], low=0.5, high=2.0)]


def _unary(name, fn, *, reads, dfn, samples=X, aliases=(), doc="", family=None, attrs=None):
    """A unary elementwise op whose gradient is ``dfn(p, dy, v)``, where v is
    the input (reads='input') or the output (reads='output')."""
    op = register(OpDef(name=name, lower=lambda p, ctx, x: fn(p, x), infer_shape=same_shape,
                        inplace=INPLACE_FIRST, category="elementwise", family=family,
                        flops=elementwise_flops, samples=samples, aliases=aliases, doc=doc,
                        attrs=attrs or {}))
    register_backward(
        op, reads_inputs=(0,) if reads == "input" else (),
        reads_outputs=(0,) if reads == "output" else (),
        lower=lambda p, ctx, og, ins, outs: [dfn(p, og[0], (ins or outs)[0])],
        infer_shape=same_shape_bwd, inplace=[(0, 0)])
    return op


def same_shape_bwd(p, in_shapes):
    s = unify(in_shapes)
    return [s] * len(in_shapes), [s]


# y = exp(x); dx = dy * y
_unary("exp", lambda p, x: jnp.exp(x), reads="output", dfn=lambda p, dy, y: dy * y)
# y = log(x); dx = dy / x
_unary("log", lambda p, x: jnp.log(x), reads="input", dfn=lambda p, dy, x: dy / x, samples=POS)
# y = sqrt(x); dx = dy / (2 y)
_unary("sqrt", lambda p, x: jnp.sqrt(x), reads="output", dfn=lambda p, dy, y: dy / (2 * y),
       samples=POS)
# y = x^2; dx = 2 x dy
_unary("square", lambda p, x: x * x, reads="input", dfn=lambda p, dy, x: 2 * x * dy)
# y = |x|; dx = sign(x) dy
_unary("abs", lambda p, x: jnp.abs(x), reads="input", dfn=lambda p, dy, x: jnp.sign(x) * dy)
# y = max(x, 0); dx = dy * (y > 0)
_unary("relu", lambda p, x: jnp.maximum(x, 0), reads="output",
       dfn=lambda p, dy, y: jnp.where(y > 0, dy, 0), family="activation")
# y = 1 / (1 + e^-x); dx = dy y (1 - y)
_unary("sigmoid", lambda p, x: jax.nn.sigmoid(x), reads="output",
       dfn=lambda p, dy, y: dy * y * (1 - y), family="activation")
# y = tanh(x); dx = dy (1 - y^2)
_unary("tanh", lambda p, x: jnp.tanh(x), reads="output", dfn=lambda p, dy, y: dy * (1 - y * y),
       family="activation")

# y = -x; dx = -dy
register(OpDef(name="negative", lower=lambda p, ctx, x: -x, infer_shape=same_shape,
               inplace=INPLACE_FIRST, category="elementwise", flops=elementwise_flops,
               samples=X,
               gradient=lambda g, node, og: [g.op("negative", [og[0]])[0]]))

# y = clip(x, lo, hi); dx = dy where lo < x < hi
_clip = register(OpDef(
    name="clip", attrs={"a_min": Attr(float_attr), "a_max": Attr(float_attr)},
    lower=lambda p, ctx, x: jnp.clip(x, p.a_min, p.a_max), infer_shape=same_shape,
    inplace=INPLACE_FIRST, category="elementwise", flops=elementwise_flops,
    samples=[Sample({"a_min": -0.5, "a_max": 0.5}, [(3, 4)])]))
register_backward(_clip, lower=lambda p, ctx, og, ins, outs: [
    jnp.where((ins[0] > p.a_min) & (ins[0] < p.a_max), og[0], 0)],
    infer_shape=same_shape_bwd, inplace=[(0, 0)])


# --------------------------------------------------------------------------
# Activation: MXNet's one op for several nonlinearities
# --------------------------------------------------------------------------
_ACT = {
    "relu": (lambda x: jnp.maximum(x, 0), "output", lambda dy, y: jnp.where(y > 0, dy, 0)),
    "sigmoid": (jax.nn.sigmoid, "output", lambda dy, y: dy * y * (1 - y)),
    "tanh": (jnp.tanh, "output", lambda dy, y: dy * (1 - y * y)),
    # y = log(1 + e^x); dx = dy sigmoid(x)
    "softrelu": (jax.nn.softplus, "input", lambda dy, x: dy * jax.nn.sigmoid(x)),
    # y = x / (1 + |x|); dx = dy / (1 + |x|)^2
    "softsign": (lambda x: x / (1 + jnp.abs(x)), "input", lambda dy, x: dy / (1 + jnp.abs(x)) ** 2),
}

_activation = register(OpDef(
    name="Activation", attrs={"act_type": Attr(choice_attr(*_ACT))},
    lower=lambda p, ctx, x: _ACT[p.act_type][0](x), infer_shape=same_shape,
    inplace=INPLACE_FIRST, category="elementwise", flops=elementwise_flops, family="activation",
    samples=[Sample({"act_type": a}, [(2, 3, 4)]) for a in _ACT],
    doc="act_type: relu, sigmoid, tanh, softrelu, softsign"))
# reads the output for relu/sigmoid/tanh, the input otherwise
register_backward(
    _activation, reads_inputs=lambda p: [0] if _ACT[p.act_type][1] == "input" else [],
    reads_outputs=lambda p: [0] if _ACT[p.act_type][1] == "output" else [],
    lower=lambda p, ctx, og, ins, outs: [_ACT[p.act_type][2](og[0], (ins or outs)[0])],
    infer_shape=same_shape_bwd, inplace=INPLACE_FIRST, flops=elementwise_flops)


# --------------------------------------------------------------------------
# binary arithmetic on equal shapes
# --------------------------------------------------------------------------
BIN = [Sample({}, [(3, 4), (3, 4)])]


def _binary(name, fn, gradient=None, **kw):
    return register(OpDef(name=name, arguments=("lhs", "rhs"),
                          lower=lambda p, ctx, a, b: fn(a, b), infer_shape=same_shape,
                          inplace=[(0, 0), (1, 0)], category="elementwise",
                          flops=elementwise_flops, gradient=gradient, **kw))


# c = a + b; da = dc; db = dc
_binary("elemwise_add", jnp.add, gradient=lambda g, node, og: [og[0], og[0]],
        samples=BIN, aliases=("_plus", "_add"))
# c = a - b; da = dc; db = -dc
_binary("elemwise_sub", jnp.subtract,
        gradient=lambda g, node, og: [og[0], g.op("negative", [og[0]])[0] if g.need[1] else None],
        samples=BIN, aliases=("_minus", "_sub"))
# c = a * b; da = dc b; db = dc a
_binary("elemwise_mul", jnp.multiply, gradient=lambda g, node, og: [
    g.op("elemwise_mul", [og[0], node.inputs[1]], suffix="backward_lhs")[0] if g.need[0] else None,
    g.op("elemwise_mul", [og[0], node.inputs[0]], suffix="backward_rhs")[0] if g.need[1] else None],
    samples=BIN, aliases=("_mul",))
# c = a / b; da = dc / b; db = -dc a / b^2
_div = _binary("elemwise_div", jnp.divide, samples=[Sample({}, [(3, 4), (3, 4)], low=0.5, high=2)],
               aliases=("_div",))
register_backward(_div, lower=lambda p, ctx, og, ins, outs: [
    og[0] / ins[1], -og[0] * ins[0] / (ins[1] * ins[1])], inplace=[(0, 0)])


def _binary_reading_both(name, fn, dlhs, drhs, **kw):
    """A binary op on equal shapes whose ``_backward_`` node reads lhs and
    rhs (MXNet's ElemwiseGradUseIn); computes only the gradients asked for."""
    op = _binary(name, fn, **kw)

    def lower(p, ctx, og, ins, outs):
        a, b = ins
        need = p.need or (1, 1)
        return [dlhs(og[0], a, b) if need[0] else None, drhs(og[0], a, b) if need[1] else None]

    register_backward(op, lower=lower, inplace=[(0, 0)])
    return op


# c = max(a, b); da = dc [a >= b]; db = dc [a < b]  (ties go to lhs, as MXNet)
_binary_reading_both("_maximum", jnp.maximum, lambda dy, a, b: jnp.where(a >= b, dy, 0),
                     lambda dy, a, b: jnp.where(a < b, dy, 0), samples=BIN,
                     aliases=("_Maximum",), doc="Elementwise maximum of two equal shapes.")
# c = min(a, b); da = dc [a <= b]; db = dc [a > b]
_binary_reading_both("_minimum", jnp.minimum, lambda dy, a, b: jnp.where(a <= b, dy, 0),
                     lambda dy, a, b: jnp.where(a > b, dy, 0), samples=BIN,
                     aliases=("_Minimum",), doc="Elementwise minimum of two equal shapes.")
# c = a^b; da = dc b a^(b-1); db = dc a^b log a
_binary_reading_both("_power", jnp.power, lambda dy, a, b: dy * b * a ** (b - 1),
                     lambda dy, a, b: dy * a ** b * jnp.log(a),
                     samples=[Sample({}, [(3, 4), (3, 4)], low=0.5, high=2)],
                     aliases=("_Power",), doc="Elementwise lhs ** rhs of two equal shapes.")


def _sum_shape(p, in_shapes):
    if len(in_shapes) != p.num_args:
        raise ShapeError(f"expected {p.num_args} inputs, got {len(in_shapes)}")
    return same_shape(p, in_shapes)


# y = sum_i x_i; dx_i = dy
register(OpDef(
    name="ElementWiseSum", attrs={"num_args": Attr(count_attr)},
    arguments=lambda p: [f"arg{i}" for i in range(p.num_args)],
    lower=lambda p, ctx, *xs: sum(xs[1:], xs[0]), infer_shape=_sum_shape,
    inplace=lambda p: [(i, 0) for i in range(p.num_args)], category="elementwise",
    flops=elementwise_flops, aliases=("add_n",),
    gradient=lambda g, node, og: [og[0]] * node.params.num_args,
    samples=[Sample({"num_args": 3}, [(3, 4)] * 3)]))


# --------------------------------------------------------------------------
# scalar arithmetic: y = f(x, scalar)
# --------------------------------------------------------------------------
SCALAR = {"scalar": Attr(float_attr, 1.0)}


def _scalar(name, fn, *, reads=None, dfn, samples=None, aliases=()):
    op = register(OpDef(name=name, attrs=SCALAR, lower=lambda p, ctx, x: fn(x, p.scalar),
                        infer_shape=same_shape, inplace=INPLACE_FIRST, aliases=aliases,
                        category="elementwise", flops=elementwise_flops,
                        samples=samples or [Sample({"scalar": 1.5}, [(3, 4)])]))
    register_backward(
        op, reads_inputs=(0,) if reads == "input" else (),
        reads_outputs=(0,) if reads == "output" else (),
        lower=lambda p, ctx, og, ins, outs: [dfn(og[0], (ins or outs or [None])[0], p.scalar)],
        infer_shape=same_shape_bwd, inplace=[(0, 0)])
    return op


_scalar("_plus_scalar", lambda x, s: x + s, dfn=lambda dy, v, s: dy)
_scalar("_minus_scalar", lambda x, s: x - s, dfn=lambda dy, v, s: dy)
_scalar("_rminus_scalar", lambda x, s: s - x, dfn=lambda dy, v, s: -dy)
_scalar("_mul_scalar", lambda x, s: x * s, dfn=lambda dy, v, s: dy * s)
_scalar("_div_scalar", lambda x, s: x / s, dfn=lambda dy, v, s: dy / s)
# y = s / x; dx = -dy y / x = -dy s / x^2
_scalar("_rdiv_scalar", lambda x, s: s / x, reads="input", dfn=lambda dy, x, s: -dy * s / (x * x),
        samples=[Sample({"scalar": 1.5}, [(3, 4)], low=0.5, high=2)])
# y = x^s; dx = dy s x^(s-1)
_scalar("_power_scalar", lambda x, s: x ** s, reads="input",
        dfn=lambda dy, x, s: dy * s * x ** (s - 1),
        samples=[Sample({"scalar": 2.5}, [(3, 4)], low=0.5, high=2)])
# y = s^x; dx = dy y log(s)  -- reads only y (MXNet's ElemwiseGradUseOut)
_scalar("_rpower_scalar", lambda x, s: s ** x, reads="output",
        dfn=lambda dy, y, s: dy * y * jnp.log(s),
        samples=[Sample({"scalar": 2.5}, [(3, 4)])], aliases=("_RPowerScalar",))
_scalar("_maximum_scalar", lambda x, s: jnp.maximum(x, s), reads="input",
        dfn=lambda dy, x, s: jnp.where(x >= s, dy, 0),  # ties: to x, as MXNet
        samples=[Sample({"scalar": 0.1}, [(3, 4)])])
_scalar("_minimum_scalar", lambda x, s: jnp.minimum(x, s), reads="input",
        dfn=lambda dy, x, s: jnp.where(x <= s, dy, 0),
        samples=[Sample({"scalar": 0.1}, [(3, 4)])])


# --------------------------------------------------------------------------
# broadcast arithmetic: NumPy broadcasting (shapes right-aligned, a
# dimension of 1 stretches). Each gradient is summed back over the axes its
# input was stretched along. The inplace pairs hold only where the input has
# the output's size; the planner checks sizes, as NNVM's does.
# --------------------------------------------------------------------------
def broadcast_shape(lhs, rhs) -> tuple:
    """The shape of ``lhs op rhs`` under NumPy broadcasting; ShapeError if none."""
    n = max(len(lhs), len(rhs))
    a = (1,) * (n - len(lhs)) + tuple(lhs)
    b = (1,) * (n - len(rhs)) + tuple(rhs)
    out = []
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1:
            raise ShapeError(f"operands could not be broadcast together: lhs {tuple(lhs)}, "
                             f"rhs {tuple(rhs)} (dimensions {x} and {y} differ and "
                             f"neither is 1)")
        out.append(y if x == 1 else x)
    return tuple(out)


def sum_to_shape(x, shape):
    """Sums ``x`` over the axes along which ``shape`` was broadcast to x.shape."""
    shape = tuple(shape)
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(shape) if d == 1 and x.shape[lead + i] != 1)
    if axes:
        x = jnp.sum(x, axis=axes)
    return x.reshape(shape)


def _broadcast_shape_rule(p, s):
    lhs, rhs = s
    if lhs is None or rhs is None:
        return s, [None]
    return s, [broadcast_shape(lhs, rhs)]


BCAST = [Sample({}, [(3, 4), (3, 4)]), Sample({}, [(3, 1), (1, 4)]),
         Sample({}, [(2, 3, 4), (3, 1)]), Sample({}, [(1,), (2, 3)]),
         Sample({}, [(2, 1, 4), (2, 3, 1)])]
BCAST_POS = [Sample(s.attrs, s.shapes, low=0.5, high=2.0) for s in BCAST]


def _broadcast(name, fn, *, gradient=None, samples=BCAST, aliases=(), doc=""):
    return register(OpDef(
        name=name, arguments=("lhs", "rhs"), lower=lambda p, ctx, a, b: fn(a, b),
        infer_shape=_broadcast_shape_rule, inplace=[(0, 0), (1, 0)], category="elementwise",
        flops=elementwise_flops, gradient=gradient, samples=samples, aliases=aliases,
        doc=doc or f"{name}(lhs, rhs) with NumPy broadcasting."))


def _sum_like(g, dy, like, side):
    return g.op("_sum_to_like", [dy, like], suffix=f"backward_{side}")[0]


# c = a + b; da = sum_to(dc, a.shape); db = sum_to(dc, b.shape)
_broadcast("broadcast_add", jnp.add, aliases=("broadcast_plus",), gradient=lambda g, node, og: [
    _sum_like(g, og[0], node.inputs[0], "lhs") if g.need[0] else None,
    _sum_like(g, og[0], node.inputs[1], "rhs") if g.need[1] else None])


# c = a - b; da = sum_to(dc, a.shape); db = -sum_to(dc, b.shape)
def _broadcast_sub_gradient(g, node, og):
    da = _sum_like(g, og[0], node.inputs[0], "lhs") if g.need[0] else None
    db = None
    if g.need[1]:
        db = g.op("negative", [_sum_like(g, og[0], node.inputs[1], "rhs")],
                  suffix="backward_rhs_neg")[0]
    return [da, db]


_broadcast("broadcast_sub", jnp.subtract, aliases=("broadcast_minus",),
           gradient=_broadcast_sub_gradient)


def _broadcast_with_backward(name, fn, dlhs, drhs, **kw):
    """A broadcast op whose ``_backward_`` node reads lhs and rhs; dlhs/drhs
    give the full-size gradient, which is then summed to the input's shape."""
    op = _broadcast(name, fn, **kw)

    def lower(p, ctx, og, ins, outs):
        a, b = ins
        need = p.need or (1, 1)
        return [sum_to_shape(dlhs(og[0], a, b), a.shape) if need[0] else None,
                sum_to_shape(drhs(og[0], a, b), b.shape) if need[1] else None]

    register_backward(op, reads_inputs=(0, 1), lower=lower, category="reduction")
    return op


# c = a * b; da = sum_to(dc b); db = sum_to(dc a)
_broadcast_with_backward("broadcast_mul", jnp.multiply,
                         lambda dy, a, b: dy * b, lambda dy, a, b: dy * a)
# c = a / b; da = sum_to(dc / b); db = sum_to(-dc a / b^2)
_broadcast_with_backward("broadcast_div", jnp.divide,
                         lambda dy, a, b: dy / b, lambda dy, a, b: -dy * a / (b * b),
                         samples=BCAST_POS)
# c = max(a, b); da = sum_to(dc [a >= b]); db = sum_to(dc [a < b])  (ties go to lhs, as MXNet)
_broadcast_with_backward("broadcast_maximum", jnp.maximum,
                         lambda dy, a, b: jnp.where(a >= b, dy, 0),
                         lambda dy, a, b: jnp.where(a < b, dy, 0))
# c = min(a, b); da = sum_to(dc [a <= b]); db = sum_to(dc [a > b])
_broadcast_with_backward("broadcast_minimum", jnp.minimum,
                         lambda dy, a, b: jnp.where(a <= b, dy, 0),
                         lambda dy, a, b: jnp.where(a > b, dy, 0))
# c = a^b; da = sum_to(dc b a^(b-1)); db = sum_to(dc a^b log a)
_broadcast_with_backward("broadcast_power", jnp.power,
                         lambda dy, a, b: dy * b * a ** (b - 1),
                         lambda dy, a, b: dy * a ** b * jnp.log(a),
                         samples=BCAST_POS)


def _mod(a, b):
    """MXNet's mshadow_op::mod: the remainder with the divisor's sign (Python's
    ``%``), and 0 where the divisor is 0."""
    zero = b == 0
    r = jnp.remainder(a, jnp.where(zero, jnp.ones_like(b), b))
    return jnp.where(zero, jnp.zeros_like(r), r)


# c = a mod b; da = sum_to(dc); db = sum_to(-dc floor(a / b))  (MXNet's mod_grad, mod_rgrad)
_broadcast_with_backward("broadcast_mod", _mod, lambda dy, a, b: dy,
                         lambda dy, a, b: -dy * jnp.floor(a / b),
                         doc="broadcast_mod(lhs, rhs): the remainder of lhs / rhs with rhs's "
                             "sign (Python's %), 0 where rhs is 0, with NumPy broadcasting "
                             "(MXNet's mod). The gradient is dc for lhs and -dc floor(lhs / "
                             "rhs) for rhs.")
