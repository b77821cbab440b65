"""The glue ops of hybridized Gluon exports (MXNet 1.9.1): slicing and
squeezing, broadcasting to a shape and selection (``where``, ``take``),
plus the attribute helpers of the ops that make tensors. Joining,
repeating and axis moves (``stack``, ``tile``, ``repeat``, ``reverse``,
``SwapAxis``) are in arrange.py; shapes as tensors (``shape_array``,
``size_array``) and constants (``ones_like``, ``_zeros``, ``_ones``,
``_full``, ``_arange``) in constants.py. The equal-shape binary
``_maximum``, ``_minimum``, ``_power`` and ``_rpower_scalar`` live beside
their siblings in ``elementwise.py``.

Semantics, defaults and refusals follow MXNet's operator source
(src/operator/tensor/matrix_op-inl.h, broadcast_reduce_op.h, init_op.h,
indexing_op.h, control_flow_op.h, src/operator/swapaxis-inl.h). Where MXNet
would make a tensor with a 0 dimension (an empty slice, ``repeats=0``, a 0 in
``tile``'s reps) symgraph refuses it, as every tensor it plans has a size.
Each backward reads only what it needs: the gradient of a data movement
reads the output gradient and at most its input's *shape*.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import ShapeError
from ..util import short_repr
from .backward import register_backward
from .elementwise import elementwise_flops
from .registry import (Attr, OpDef, Sample, _literal, choice_attr, dtype_attr, int_attr,
                       optional_shape_attr, register, shape_attr, unify)
from .tensor import CAST_DTYPES, _axis, _reshape_like_gradient, _zero_flops


def _sum_to_like(g, dy, like, side="backward"):
    """dy summed down to ``like``'s shape (reads like's shape only): the
    gradient of every broadcast, MXNet's ``_broadcast_backward``."""
    return g.op("_sum_to_like", [dy, like], suffix=side)[0]


def _axes(axes, ndim: int, what: str) -> tuple:
    """``axes`` normalised to [0, ndim); ShapeError if one is out of range or
    named twice."""
    out = tuple(_axis(a, ndim, what) for a in axes)
    if len(set(out)) != len(out):
        raise ShapeError(f"{what}={tuple(axes)} names an axis twice")
    return out


# --------------------------------------------------------------------------
# slice: x[b0:e0:s0, b1:e1:s1, ...], None entries defaulting by the step
# --------------------------------------------------------------------------
def optional_int_tuple_attr(v) -> tuple:
    """``"(0, None, -1)"``, ``[0, None]``, ``2`` -> a tuple of ints and Nones
    (MXNet's ``Tuple<optional<int>>``); None or ``()`` -> ``()``."""
    v = _literal(v)
    if v is None:
        return ()
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return (int(v),)
    if isinstance(v, (tuple, list)) and all(
            x is None or (isinstance(x, (int, np.integer)) and not isinstance(x, bool))
            for x in v):
        return tuple(None if x is None else int(x) for x in v)
    raise ValueError(f"expected a tuple of ints or None such as (0, None, -1), got "
                     f"{short_repr(v)}")


def slice_ranges(p, shape) -> list:
    """(begin, end, step, size) per sliced axis, by MXNet's GetIndexRange:
    a None step is 1; a None begin is 0 (the last index for a negative
    step), a None end the size (before the first index for a negative step);
    negative begin/end count from the end, then clamp. end is -1 where the
    slice runs through index 0 backwards. ShapeError if the slice is empty
    or the attributes do not fit the input."""
    nd = len(shape)
    begin, end, step = p.begin, p.end, p.step
    if nd == 0:
        raise ShapeError("slice takes an input of rank >= 1")
    if len(begin) != len(end):
        raise ShapeError(f"begin={begin} and end={end} must have the same length")
    if len(begin) > nd:
        raise ShapeError(f"begin={begin} slices {len(begin)} axes, but the input "
                         f"{tuple(shape)} has rank {nd}")
    if step and len(step) != len(begin):
        raise ShapeError(f"step={step} and begin={begin} must have the same length")
    out = []
    for i in range(len(begin)):
        s = 1 if not step or step[i] is None else step[i]
        if s == 0:
            raise ShapeError(f"step={step}: the step of axis {i} cannot be 0")
        n = shape[i]
        b = begin[i] if begin[i] is not None else (n - 1 if s < 0 else 0)
        e = end[i] if end[i] is not None else (-1 if s < 0 else n)
        b = b + n if b < 0 else b
        e = e + n if e < 0 and end[i] is not None else e
        b = 0 if b < 0 and s > 0 else b
        b = n - 1 if b > n - 1 and s < 0 else b
        b = -1 if b < 0 or b > n - 1 else b
        e = min(max(e, -1), n)
        if b < 0 or b == e:
            size = 0
        elif s > 0:
            size = (e - b - 1) // s + 1 if e > b else 0
        else:
            size = (b - e - 1) // (-s) + 1 if e < b else 0
        if size == 0:
            raise ShapeError(f"slice begin={begin}, end={end}, step={step} is empty along "
                             f"axis {i} of input {tuple(shape)}")
        out.append((b, e, s, size))
    return out


def _slice_index(p, shape) -> tuple:
    return tuple(slice(b, None if e < 0 else e, s) for b, e, s, _ in slice_ranges(p, shape))


def _slice_infer(p, s):
    d = s[0]
    if d is None:
        return s, [None]
    out = list(d)
    for i, (_, _, _, size) in enumerate(slice_ranges(p, d)):
        out[i] = size
    return s, [tuple(out)]


def _slice_keeps_axis0(p) -> bool:
    if not p.begin:
        return True
    return (p.begin[0] is None and p.end[0] is None
            and (not p.step or p.step[0] in (None, 1)))


_slice = register(OpDef(
    name="slice",
    attrs={"begin": Attr(optional_int_tuple_attr, doc="first index per axis (None: from "
                                                      "the start for the step's direction)"),
           "end": Attr(optional_int_tuple_attr, doc="one past the last index per axis "
                                                    "(None: to the end)"),
           "step": Attr(optional_int_tuple_attr, (), "step per axis (None or (): 1)")},
    lower=lambda p, ctx, x: x[_slice_index(p, x.shape)], infer_shape=_slice_infer,
    category="injective", flops=_zero_flops, per_sample=_slice_keeps_axis0, aliases=("crop",),
    samples=[Sample({"begin": (0, 1), "end": (2, 4)}, [(3, 4)]),
             Sample({"begin": (None, 0), "end": (None, 3), "step": (-1, 2)}, [(3, 4)]),
             Sample({"begin": (-2,), "end": (None,)}, [(4, 3, 2)]),
             Sample({"begin": (None, -1, None), "end": (None, 0, None),
                     "step": (None, -1, 2)}, [(2, 4, 5)]),
             Sample({"begin": (1, -5), "end": (100, -1), "step": (2, None)}, [(5, 6)])],
    doc="x[b0:e0:s0, ...] over the first len(begin) axes (MXNet's slice): a None step is "
        "1, a None begin/end runs from/to the end the step starts/stops at, negative "
        "entries count from the end; an empty slice is refused."))


# y = x[slices]; dx = zeros with dy scattered at the slices  (reads x's shape only)
def _slice_backward(p, ctx, og, ins, outs):
    shape = ins[0].shape
    return [jnp.zeros(shape, og[0].dtype).at[_slice_index(p, shape)].set(og[0])]


register_backward(_slice, reads_inputs=(0,), inputs_for_shape_only=True,
                  lower=_slice_backward)


# --------------------------------------------------------------------------
# squeeze: drop axes of size 1
# --------------------------------------------------------------------------
def squeeze_shape(p, shape) -> tuple:
    """The shape without the size-1 axes ``p.axis`` names (all of them when
    None); at least (1,), as MXNet keeps one dimension."""
    shape = tuple(shape)
    if p.axis is None:
        kept = [d for d in shape if d != 1]
    else:
        axes = _axes(p.axis, len(shape), "axis")
        for a in axes:
            if shape[a] != 1:
                raise ShapeError(f"cannot squeeze axis {a} of input {shape}: its size is "
                                 f"{shape[a]}, not 1")
        kept = [d for i, d in enumerate(shape) if i not in axes]
    return tuple(kept) or (1,)


_squeeze = register(OpDef(
    name="squeeze",
    attrs={"axis": Attr(optional_shape_attr, None, "the axes of size 1 to drop (int or "
                                                   "tuple); None: every one")},
    lower=lambda p, ctx, x: x.reshape(squeeze_shape(p, x.shape)),
    infer_shape=lambda p, s: (s, [None if s[0] is None else squeeze_shape(p, s[0])]),
    inplace=[(0, 0)], category="injective", flops=_zero_flops,
    per_sample=lambda p: p.axis is not None and all(a > 0 for a in p.axis),
    # y = squeeze(x); dx = reshape_like(dy, x)  (reads x's shape only)
    gradient=_reshape_like_gradient,
    samples=[Sample({}, [(1, 3, 1, 2)]), Sample({"axis": 0}, [(1, 3, 1)]),
             Sample({"axis": (-1, 0)}, [(1, 3, 1)]), Sample({}, [(1, 1)])],
    doc="Drops the axes of size 1 that axis names (every one when axis is None); "
        "keeps at least one dimension, as MXNet: squeeze of (1, 1) is (1,)."))


# --------------------------------------------------------------------------
# broadcast_to, broadcast_axis, broadcast_like: stretch axes of size 1
# --------------------------------------------------------------------------
def broadcast_to_shape(p, shape) -> tuple:
    shape, target = tuple(shape), tuple(p.shape)
    if len(target) != len(shape):
        raise ShapeError(f"cannot broadcast input {shape} to shape={target}: the ranks "
                         f"differ (a 0 in shape keeps that dimension)")
    out = []
    for i, (d, t) in enumerate(zip(shape, target)):
        if t < 0:
            raise ShapeError(f"shape={target} has a negative dimension")
        if t == 0:
            out.append(d)
        elif d in (1, t):
            out.append(t)
        else:
            raise ShapeError(f"cannot broadcast input {shape} to shape={target}: dimension "
                             f"{i} has size {d}, which is neither 1 nor {t}")
    return tuple(out)


def _broadcast_gradient(g, node, og):
    """dx = dy summed to x's shape; a second input (like) gets none."""
    dx = _sum_to_like(g, og[0], node.inputs[0]) if g.need[0] else None
    return [dx] + [None] * (len(node.inputs) - 1)


_BCAST_DOC = " The gradient sums over the stretched axes (reads x's shape only)."

register(OpDef(
    name="broadcast_to",
    attrs={"shape": Attr(shape_attr, (), "the output shape; 0 keeps the input's dimension")},
    lower=lambda p, ctx, x: jnp.broadcast_to(x, broadcast_to_shape(p, x.shape)),
    infer_shape=lambda p, s: (s, [None if s[0] is None else broadcast_to_shape(p, s[0])]),
    category="injective", flops=_zero_flops, gradient=_broadcast_gradient,
    per_sample=lambda p: p.shape[:1] == (0,),
    samples=[Sample({"shape": (2, 3, 4)}, [(2, 1, 4)]), Sample({"shape": (0, 3)}, [(2, 1)]),
             Sample({"shape": (3, 0, 2)}, [(1, 4, 1)]), Sample({"shape": (2, 3)}, [(2, 3)])],
    doc="Broadcasts axes of size 1 to shape (same rank); a 0 in shape keeps the "
        "input's dimension." + _BCAST_DOC))


def broadcast_axis_shape(p, shape) -> tuple:
    shape = tuple(shape)
    if len(p.axis) != len(p.size):
        raise ShapeError(f"axis={p.axis} and size={p.size} must have the same length")
    out = list(shape)
    for a, n in zip(p.axis, p.size):
        k = _axis(a, len(shape), "axis")
        if out[k] != 1:
            raise ShapeError(f"broadcast_axis: axis {a} of input {shape} has size "
                             f"{out[k]}; only an axis of size 1 broadcasts")
        if n < 1:
            raise ShapeError(f"size={p.size}: a broadcast size must be positive")
        out[k] = n
    return tuple(out)


register(OpDef(
    name="broadcast_axis",
    attrs={"axis": Attr(shape_attr, (), "the axes to broadcast (each of size 1)"),
           "size": Attr(shape_attr, (), "the size each axis becomes")},
    lower=lambda p, ctx, x: jnp.broadcast_to(x, broadcast_axis_shape(p, x.shape)),
    infer_shape=lambda p, s: (s, [None if s[0] is None else broadcast_axis_shape(p, s[0])]),
    category="injective", flops=_zero_flops, gradient=_broadcast_gradient,
    per_sample=lambda p: all(a > 0 for a in p.axis), aliases=("broadcast_axes",),
    samples=[Sample({"axis": 1, "size": 3}, [(2, 1, 4)]),
             Sample({"axis": (0, -1), "size": (2, 5)}, [(1, 3, 1)]),
             Sample({}, [(2, 3)])],
    doc="Broadcasts each axis in axis (of size 1) to the matching size." + _BCAST_DOC))


def broadcast_like_shape(p, lhs, rhs) -> tuple:
    lhs, rhs = tuple(lhs), tuple(rhs)
    if p.lhs_axes is None or p.rhs_axes is None:
        if len(lhs) != len(rhs):
            raise ShapeError(f"cannot broadcast lhs {lhs} like rhs {rhs}: the ranks differ")
        for i, (a, b) in enumerate(zip(lhs, rhs)):
            if a not in (1, b):
                raise ShapeError(f"cannot broadcast lhs {lhs} like rhs {rhs}: dimension {i} "
                                 f"has size {a}, which is neither 1 nor {b}")
        return rhs
    if len(p.lhs_axes) != len(p.rhs_axes):
        raise ShapeError(f"lhs_axes={p.lhs_axes} and rhs_axes={p.rhs_axes} must have the "
                         f"same length")
    if not p.lhs_axes:
        raise ShapeError("lhs_axes=() names no axis; leave both out to broadcast like the "
                         "whole of rhs")
    out = list(lhs)
    for la, ra in zip(p.lhs_axes, p.rhs_axes):
        i = _axis(la, len(lhs), "lhs_axes entry")
        j = _axis(ra, len(rhs), "rhs_axes entry")
        if lhs[i] != 1:
            raise ShapeError(f"lhs axis {la} of lhs {lhs} has size {lhs[i]}; only an axis of "
                             f"size 1 broadcasts")
        out[i] = rhs[j]
    return tuple(out)


def _broadcast_like_infer(p, s):
    lhs, rhs = s
    if lhs is None or rhs is None:
        return s, [None]
    return s, [broadcast_like_shape(p, lhs, rhs)]


register(OpDef(
    name="broadcast_like", arguments=("lhs", "rhs"),
    attrs={"lhs_axes": Attr(optional_shape_attr, None, "axes of lhs to broadcast"),
           "rhs_axes": Attr(optional_shape_attr, None, "the axes of rhs whose sizes they take")},
    lower=lambda p, ctx, a, b: jnp.broadcast_to(a, broadcast_like_shape(p, a.shape, b.shape)),
    infer_shape=_broadcast_like_infer, shape_inputs=(1,), category="injective",
    flops=_zero_flops, gradient=_broadcast_gradient, per_sample=False,
    samples=[Sample({}, [(1, 3), (2, 3)]), Sample({}, [(2, 1, 1), (2, 4, 5)]),
             Sample({"lhs_axes": (0,), "rhs_axes": (-1,)}, [(1,), (2, 5)]),
             Sample({"lhs_axes": (0, 2), "rhs_axes": (1, 0)}, [(1, 3, 1), (4, 2)])],
    doc="Broadcasts lhs like rhs: to rhs's shape (same rank, lhs's axes 1 or equal), or, "
        "with lhs_axes and rhs_axes, each named lhs axis (of size 1) to the size of the "
        "matching rhs axis. Reads rhs's shape only; rhs gets no gradient." + _BCAST_DOC))


def _type_of_data(in_types, data) -> tuple:
    """The dtype rule of an op whose inputs ``data`` share the output's
    dtype and whose other inputs (a condition, indices) have any dtype and
    lend none (MXNet's WhereOpType, TakeOpType)."""
    known = {in_types[i] for i in data} - {None}
    if len(known) > 1:
        raise ShapeError(f"inputs must have one dtype, got "
                         f"{', '.join(str(in_types[i]) for i in data)}")
    if not known:
        return in_types, [None]
    t = known.pop()
    return [t if i in data else x for i, x in enumerate(in_types)], [t]


# --------------------------------------------------------------------------
# where: condition ? x : y
# --------------------------------------------------------------------------
def _where_infer(p, s):
    c, x, y = s
    t = unify([x, y], "x and y")
    if c is not None and t is not None:
        c, t = tuple(c), tuple(t)
        if len(c) == 1 and len(t) > 1:
            if c[0] != t[0]:
                raise ShapeError(f"a 1-D condition {c} must have x's first dimension "
                                 f"({t[0]}); x is {t}")
        elif c != t:
            raise ShapeError(f"condition {c} must have the shape of x and y {t}, or be 1-D "
                             f"with their first dimension")
    return [c, t, t], [t]


def _cond(c, ndim):
    """The condition as a boolean broadcasting against an input of rank ``ndim``."""
    if c.ndim != ndim:
        c = c.reshape(c.shape + (1,) * (ndim - c.ndim))
    return c != 0


_where = register(OpDef(
    name="where", arguments=("condition", "x", "y"),
    lower=lambda p, ctx, c, x, y: jnp.where(_cond(c, x.ndim), x, y),
    infer_shape=_where_infer,
    infer_type=lambda p, t, n: _type_of_data(t, (1, 2)),
    category="elementwise", flops=elementwise_flops,
    per_sample=False,  # a 1-D condition of x's first size need not carry the batch
    samples=[Sample({}, [(3, 4), (3, 4), (3, 4)], ints={0: 2}),
             Sample({}, [(3,), (3, 2, 2), (3, 2, 2)], ints={0: 2})],
    doc="x where condition is nonzero, else y; condition has their shape or is 1-D of "
        "their first dimension (choosing rows), and any dtype. Gradients flow to x and y, "
        "none to condition."))


# y = where(c, a, b); da = dy [c != 0]; db = dy [c == 0]  -- reads dy and c
def _where_backward(p, ctx, og, ins, outs):
    dy, c = og[0], _cond(ins[0], og[0].ndim)
    need = p.need or (0, 1, 1)
    zero = jnp.zeros((), dy.dtype)
    return [None, jnp.where(c, dy, zero) if need[1] else None,
            jnp.where(c, zero, dy) if need[2] else None]


def _where_backward_infer(p, s):
    need = p.need or (0, 1, 1)
    return s, [s[0]] * sum(1 for m in need if m)


register_backward(_where, reads_inputs=(0,), no_grad=(0,), lower=_where_backward,
                  infer_shape=_where_backward_infer, flops=elementwise_flops)


# --------------------------------------------------------------------------
# take: a[..., indices, ...] along axis; indices are floats holding integers
# --------------------------------------------------------------------------
def _take_mode(v):
    s = str(v).strip()
    if s == "raise":
        raise ValueError("mode 'raise' checks the indices while running, which a compiled "
                         "XLA program cannot do; use clip or wrap")
    return choice_attr("clip", "wrap")(s)


_take_mode.choices = ("clip", "wrap")


def take_indices(p, idx, n):
    """The integer indices MXNet reads: truncated toward zero, then clipped
    to [0, n) or wrapped (modulo n, negative from the end)."""
    if jnp.issubdtype(idx.dtype, jnp.floating):
        idx = jnp.trunc(idx)
    idx = jnp.clip(idx, 0, n - 1) if p.mode == "clip" else jnp.remainder(idx, n)
    return idx.astype(jnp.int32 if n < 2 ** 31 else jax.dtypes.canonicalize_dtype(np.int64))


def _take(p, a, idx):
    axis = p.axis % a.ndim
    return jnp.take(a, take_indices(p, idx, a.shape[axis]), axis=axis, mode="clip")


def _take_infer(p, s):
    a, idx = s
    if a is None or idx is None:
        return s, [None]
    k = _axis(p.axis, len(a), "axis")
    return s, [tuple(a[:k]) + tuple(idx) + tuple(a[k + 1:])]


_take_op = register(OpDef(
    name="take", arguments=("a", "indices"),
    attrs={"axis": Attr(int_attr, 0, "the axis to take along"),
           "mode": Attr(_take_mode, "clip", "out-of-range indices: clip to the ends, or wrap "
                                            "around")},
    lower=lambda p, ctx, a, idx: _take(p, a, idx), infer_shape=_take_infer,
    infer_type=lambda p, t, n: _type_of_data(t, (0,)),
    category="injective", flops=_zero_flops, per_sample=False,
    samples=[Sample({}, [(5, 3), (2, 4)], ints={1: 5}),
             Sample({"axis": 1, "mode": "wrap"}, [(2, 4, 3), (5,)], ints={1: 9}),
             Sample({"axis": -1}, [(2, 3), (2, 2)], ints={1: 6})],
    doc="a[..., indices, ...] along axis: the output's shape is a's with that axis "
        "replaced by indices' shape. Indices (any dtype, floats holding integers as MXNet) "
        "are truncated, then clipped or wrapped by mode; 'raise' is refused (a compiled "
        "program cannot raise). The gradient goes to a only."))


# y = take(a, i); da = dy scattered back (summed where indices repeat); reads dy,
# the indices and a's shape only
def _take_backward(p, ctx, og, ins, outs):
    a, idx = ins
    zeros = jnp.zeros(a.shape, og[0].dtype)
    _, vjp = jax.vjp(lambda v: _take(p, v, idx), zeros)
    return [vjp(og[0])[0], None]


register_backward(_take_op, reads_inputs=(0, 1), inputs_for_shape_only=(0,), no_grad=(1,),
                  lower=_take_backward, infer_shape=lambda p, s: (s, [s[1]]),
                  category="reduction")


# --------------------------------------------------------------------------
# attributes of the ops that make tensors (constants.py, sampling.py) and of
# the index ops, kept here where those modules import them from
# --------------------------------------------------------------------------
def _dtype_of(choices):
    """A dtype attribute (MXNet's names and NumPy's) limited to ``choices``."""
    pick = choice_attr(*choices)

    def parse(v):
        return pick(dtype_attr(v))
    parse.choices = choices
    return parse


def string_attr(v) -> str:
    """Any text (MXNet's ``ctx``, the device of an imperative call: kept,
    not used)."""
    return "" if v is None else str(v)


def _const_shape(p, s):
    """``p.shape``; a 0 in it is MXNet's dimension the consumers give (the
    zero begin state a hybridized Gluon RNN exports, ``(layers, 0,
    hidden)``): the output stays unknown until a consumer's inference
    fills it in, and the lowering takes the inferred shape."""
    shape = tuple(p.shape)
    if not shape:
        raise ShapeError("shape=() gives no output shape; give one such as shape=(2, 3)")
    if any(d < 0 for d in shape):
        raise ShapeError(f"shape={shape}: a dimension is negative; each is positive, or 0 "
                         f"for one its consumer gives")
    return s, [None if 0 in shape else shape]


_CONST_ATTRS = {"shape": Attr(shape_attr, (), "the output shape"),
                "ctx": Attr(string_attr, "", "MXNet's device of an imperative call; ignored"),
                "dtype": Attr(_dtype_of(CAST_DTYPES), "float32", "the output dtype")}
