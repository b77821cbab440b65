"""The glue ops of hybridized Gluon exports (MXNet 1.9.1) that join,
repeat and move axes: ``stack``, ``tile``, ``repeat``, ``reverse`` and
``SwapAxis`` (src/operator/tensor/matrix_op-inl.h,
src/operator/swapaxis-inl.h). glue.py holds the slicing, broadcasting and
selection ops and the conventions all of them follow; constants.py the
shape tensors and constants.

Where MXNet would make a tensor with a 0 dimension (``repeats=0``, a 0 in
``tile``'s reps) symgraph refuses it. Each backward reads the output
gradient and at most its input's *shape*.
"""
from __future__ import annotations

import jax.numpy as jnp

from ..errors import ShapeError
from .backward import register_backward
from .glue import _axes
from .registry import (Attr, OpDef, Sample, count_attr, int_attr, numel, optional_int_attr,
                       positive_int_attr, register, shape_attr, unify)
from .tensor import _attrs_of, _axis, _zero_flops


# --------------------------------------------------------------------------
# stack: join along a new axis
# --------------------------------------------------------------------------
def _stack_infer(p, s):
    if len(s) != p.num_args:
        raise ShapeError(f"expected {p.num_args} inputs (num_args), got {len(s)}")
    d = unify(s, "the inputs of stack")
    if d is None:
        return s, [None]
    k = _axis(p.axis, len(d) + 1, "axis")
    return [d] * len(s), [tuple(d[:k]) + (p.num_args,) + tuple(d[k:])]


# y = stack(x_i); dx_i = the i-th slice of dy along axis, the axis dropped
def _stack_gradient(g, node, og):
    p = node.params
    return g.op("SliceChannel", [og[0]], {"num_outputs": p.num_args, "axis": p.axis,
                                          "squeeze_axis": True})


register(OpDef(
    name="stack",
    attrs={"axis": Attr(int_attr, 0, "where the new axis goes in the output"),
           "num_args": Attr(count_attr, doc="number of inputs")},
    arguments=lambda p: [f"arg{i}" for i in range(p.num_args)],
    lower=lambda p, ctx, *xs: jnp.stack(xs, axis=p.axis % (xs[0].ndim + 1)),
    infer_shape=_stack_infer, category="injective", flops=_zero_flops,
    gradient=_stack_gradient, per_sample=lambda p: p.axis > 0,
    samples=[Sample({"num_args": 2}, [(2, 3), (2, 3)]),
             Sample({"num_args": 3, "axis": 1}, [(2, 3)] * 3),
             Sample({"num_args": 2, "axis": -1}, [(2, 3), (2, 3)]),
             Sample({"num_args": 1}, [(4,)])],
    doc="Joins num_args inputs of one shape along a new axis (an axis of the output; "
        "negative counts from its end)."))


# --------------------------------------------------------------------------
# tile and repeat
# --------------------------------------------------------------------------
def _tile_geometry(p, shape):
    """(input shape, reps), both promoted to one rank by leading 1s."""
    reps = tuple(p.reps)
    for r in reps:
        if r < 1:
            raise ShapeError(f"reps={reps}: every repetition count must be positive (0 "
                             f"would make an empty tensor)")
    n = max(len(shape), len(reps))
    return (1,) * (n - len(shape)) + tuple(shape), (1,) * (n - len(reps)) + reps


def tile_shape(p, shape) -> tuple:
    if not p.reps:
        return tuple(shape)
    xs, rs = _tile_geometry(p, shape)
    return tuple(d * r for d, r in zip(xs, rs))


_tile = register(OpDef(
    name="tile", attrs={"reps": Attr(shape_attr, doc="repetitions per axis, from the right")},
    lower=lambda p, ctx, x: jnp.tile(x, tuple(p.reps)) if p.reps else x,
    infer_shape=lambda p, s: (s, [None if s[0] is None else tile_shape(p, s[0])]),
    category="injective", flops=_zero_flops, per_sample=False,
    samples=[Sample({"reps": (2, 3)}, [(2, 2)]), Sample({"reps": (2,)}, [(2, 3)]),
             Sample({"reps": (2, 1, 3)}, [(2, 2)]), Sample({"reps": ()}, [(2, 3)])],
    doc="Repeats the whole array reps[i] times along each axis; reps shorter than the "
        "rank repeats the last axes, longer adds leading axes (numpy.tile)."))


# y = tile(x, reps); dx = dy summed over its tiles  (reads x's shape only)
def _tile_backward(p, ctx, og, ins, outs):
    shape = ins[0].shape
    if not p.reps:
        return [og[0]]
    xs, rs = _tile_geometry(p, shape)
    split = tuple(v for r, d in zip(rs, xs) for v in (r, d))
    summed = jnp.sum(og[0].reshape(split), axis=tuple(range(0, 2 * len(xs), 2)))
    return [summed.reshape(shape)]


register_backward(_tile, reads_inputs=(0,), inputs_for_shape_only=True, lower=_tile_backward,
                  category="reduction")


def repeat_shape(p, shape) -> tuple:
    shape = tuple(shape)
    if p.axis is None:
        return (numel(shape) * p.repeats,)
    k = _axis(p.axis, len(shape), "axis")
    return shape[:k] + (shape[k] * p.repeats,) + shape[k + 1:]


def _repeat_lower(p, ctx, x):
    if p.axis is None:
        return jnp.repeat(x.reshape(-1), p.repeats)
    return jnp.repeat(x, p.repeats, axis=p.axis % x.ndim)


_repeat = register(OpDef(
    name="repeat",
    attrs={"repeats": Attr(positive_int_attr, doc="how many times each element repeats (0, "
                                                  "an empty tensor, is refused)"),
           "axis": Attr(optional_int_attr, None, "the axis to repeat along; None: the "
                                                 "flattened input, giving a 1-D output")},
    lower=_repeat_lower,
    infer_shape=lambda p, s: (s, [None if s[0] is None else repeat_shape(p, s[0])]),
    category="injective", flops=_zero_flops,
    per_sample=lambda p: p.axis is not None and p.axis > 0,
    samples=[Sample({"repeats": 2}, [(2, 3)]), Sample({"repeats": 3, "axis": 1}, [(2, 2)]),
             Sample({"repeats": 2, "axis": -3}, [(2, 3, 2)])],
    doc="Repeats each element repeats times along axis (of the flattened input when "
        "axis is None, giving a 1-D output)."))


# y = repeat(x); dx = dy summed over each element's copies  (reads x's shape only)
def _repeat_backward(p, ctx, og, ins, outs):
    shape, dy = ins[0].shape, og[0]
    if p.axis is None:
        return [jnp.sum(dy.reshape(-1, p.repeats), axis=1).reshape(shape)]
    k = p.axis % len(shape)
    split = shape[:k] + (shape[k], p.repeats) + shape[k + 1:]
    return [jnp.sum(dy.reshape(split), axis=k + 1)]


register_backward(_repeat, reads_inputs=(0,), inputs_for_shape_only=True,
                  lower=_repeat_backward, category="reduction")


# --------------------------------------------------------------------------
# reverse (flip) and SwapAxis (swapaxes)
# --------------------------------------------------------------------------
def _reverse_infer(p, s):
    if s[0] is not None:
        _axes(p.axis, len(s[0]), "axis")
    return s, [s[0]]


# y = reverse(x, axes); dx = reverse(dy, axes)
register(OpDef(
    name="reverse", attrs={"axis": Attr(shape_attr, doc="the axes to reverse")},
    lower=lambda p, ctx, x: jnp.flip(x, _axes(p.axis, x.ndim, "axis")) if p.axis else x,
    infer_shape=_reverse_infer, category="injective", flops=_zero_flops,
    per_sample=lambda p: all(a > 0 for a in p.axis), aliases=("flip",),
    gradient=lambda g, node, og: [g.op("reverse", [og[0]], _attrs_of(node))[0]],
    samples=[Sample({"axis": 0}, [(3, 4)]), Sample({"axis": (0, 2)}, [(2, 3, 4)]),
             Sample({"axis": -1}, [(2, 5)])],
    doc="Reverses the order of the elements along each axis in axis (negative axes "
        "count from the end, which MXNet's kernel refuses)."))


def _swap(p, ndim) -> tuple:
    a = _axis(p.dim1, ndim, "dim1")
    b = _axis(p.dim2, ndim, "dim2")
    perm = list(range(ndim))
    perm[a], perm[b] = b, a
    return tuple(perm)


# y = swapaxes(x, d1, d2); dx = swapaxes(dy, d1, d2)
register(OpDef(
    name="SwapAxis",
    attrs={"dim1": Attr(int_attr, 0, "the first axis"),
           "dim2": Attr(int_attr, 0, "the second axis")},
    lower=lambda p, ctx, x: jnp.transpose(x, _swap(p, x.ndim)),
    infer_shape=lambda p, s: (s, [None if s[0] is None else
                                  tuple(s[0][i] for i in _swap(p, len(s[0])))]),
    category="injective", flops=_zero_flops, aliases=("swapaxes",),
    per_sample=lambda p: p.dim1 > 0 and p.dim2 > 0,
    gradient=lambda g, node, og: [g.op("SwapAxis", [og[0]], _attrs_of(node))[0]],
    samples=[Sample({"dim1": 0, "dim2": 1}, [(2, 3)]), Sample({"dim1": 1, "dim2": -1},
                                                              [(2, 3, 4)]),
             Sample({}, [(2, 3)])],
    doc="Swaps axes dim1 and dim2."))

