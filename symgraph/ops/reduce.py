"""Reductions (sum, mean, max, min, prod) and softmax / log_softmax.

Reductions follow MXNet 1.x: ``axis`` is None, an int or a tuple (None or
``()`` reduces every axis), ``exclude`` reduces every axis *but* those, and
a reduction to a scalar without ``keepdims`` has shape ``(1,)``, not ``()``.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from ..errors import ShapeError
from .backward import register_backward
from .elementwise import broadcast_shape, sum_to_shape
from .registry import (Attr, OpDef, Sample, bool_attr, dtype_attr, float_attr, int_attr, numel,
                       optional_shape_attr, register)


def _input_flops(p, in_shapes, out_shapes):
    return numel(in_shapes[0])


# --------------------------------------------------------------------------
# axis reductions
# --------------------------------------------------------------------------
def reduce_axes(p, ndim: int) -> tuple:
    """The sorted axes that reduction ``p`` reduces for an input of rank ``ndim``."""
    if not p.axis:
        return tuple(range(ndim))  # MXNet ignores exclude here
    axes = []
    for a in p.axis:
        if not -ndim <= a < ndim:
            raise ShapeError(f"reduction axis {a} is out of range for an input of rank {ndim}")
        axes.append(a % ndim)
    if len(set(axes)) != len(axes):
        raise ShapeError(f"reduction axes {p.axis} name an axis twice")
    if p.exclude:
        axes = [i for i in range(ndim) if i not in axes]
    return tuple(sorted(axes))


def reduce_shape(p, shape) -> tuple:
    """Output shape of reduction ``p`` on ``shape``; (1,) for a full reduction."""
    axes = reduce_axes(p, len(shape))
    if p.keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes) or (1,)


def _keep_shape(p, shape) -> tuple:
    """The output shape with the reduced axes kept as 1 (it broadcasts to ``shape``)."""
    axes = reduce_axes(p, len(shape))
    return tuple(1 if i in axes else d for i, d in enumerate(shape))


def _reduce_infer(p, s):
    return s, [None if s[0] is None else reduce_shape(p, s[0])]


REDUCE_ATTRS = {
    "axis": Attr(optional_shape_attr, None, "axes to reduce (int or tuple); None: all"),
    "keepdims": Attr(bool_attr, False, "keep reduced axes with size 1"),
    "exclude": Attr(bool_attr, False, "reduce every axis except those in axis"),
}
REDUCE_SAMPLES = [Sample({}, [(2, 3, 4)]), Sample({"axis": 1}, [(2, 3, 4)]),
                  Sample({"axis": (0, 2), "keepdims": True}, [(2, 3, 4)]),
                  Sample({"axis": -1, "exclude": True}, [(2, 3, 4)]),
                  Sample({"axis": (0, 1), "exclude": True, "keepdims": True}, [(2, 3, 4)]),
                  Sample({"axis": (0, 1)}, [(2, 3)])]


def _reduction(name, fn, *, aliases=(), doc=""):
    def lower(p, ctx, x):
        return fn(x, axis=reduce_axes(p, x.ndim), keepdims=True).reshape(reduce_shape(p, x.shape))

    return register(OpDef(
        name=name, attrs=REDUCE_ATTRS, lower=lower, infer_shape=_reduce_infer,
        # reducing only axes after the batch's: each sample on its own
        per_sample=lambda p: bool(p.axis) and not p.exclude and all(a > 0 for a in p.axis),
        category="reduction", flops=_input_flops, samples=REDUCE_SAMPLES, aliases=aliases,
        doc=doc))


# y = sum(x, axes); dx = broadcast(dy)  (reads x's shape only)
register_backward(
    _reduction("sum", jnp.sum, aliases=("sum_axis",), doc="Sum over axis."),
    reads_inputs=(0,), inputs_for_shape_only=True, category="injective",
    lower=lambda p, ctx, og, ins, outs: [
        jnp.broadcast_to(og[0].reshape(_keep_shape(p, ins[0].shape)), ins[0].shape)])


# y = mean(x, axes); dx = broadcast(dy) / n, n = elements averaged per output
# (reads x's shape only)
def _mean_backward(p, ctx, og, ins, outs):
    shape = ins[0].shape
    n = numel(shape) // max(numel(og[0].shape), 1)
    return [jnp.broadcast_to(og[0].reshape(_keep_shape(p, shape)), shape) / n]


register_backward(_reduction("mean", jnp.mean, doc="Mean over axis."), reads_inputs=(0,),
                  inputs_for_shape_only=True, lower=_mean_backward, category="elementwise")


# y = max(x, axes); dx = dy where x == y (every tied maximum gets dy, as in MXNet)
def _chooser_backward(p, ctx, og, ins, outs):
    x, keep = ins[0], _keep_shape(p, ins[0].shape)
    return [jnp.where(x == outs[0].reshape(keep), og[0].reshape(keep), 0).astype(x.dtype)]


register_backward(_reduction("max", jnp.max, aliases=("max_axis",), doc="Maximum over axis."),
                  reads_inputs=(0,), reads_outputs=(0,), lower=_chooser_backward,
                  category="elementwise")
register_backward(_reduction("min", jnp.min, aliases=("min_axis",), doc="Minimum over axis."),
                  reads_inputs=(0,), reads_outputs=(0,), lower=_chooser_backward,
                  category="elementwise")

# y = prod(x, axes); dx = dy y / x  (MXNet's rule; undefined where x == 0)
register_backward(
    _reduction("prod", jnp.prod, doc="Product over axis."),
    reads_inputs=(0,), reads_outputs=(0,), category="elementwise",
    lower=lambda p, ctx, og, ins, outs: [
        og[0].reshape(_keep_shape(p, ins[0].shape))
        * outs[0].reshape(_keep_shape(p, ins[0].shape)) / ins[0]])


# --------------------------------------------------------------------------
# _sum_to_like: data summed down to the shape of like, the inverse of
# broadcasting like to data (the gradient of broadcast_add / broadcast_sub)
# --------------------------------------------------------------------------
def _sum_to_like_infer(p, s):
    data, like = s
    if data is not None and like is not None:
        if len(like) > len(data) or broadcast_shape(like, data) != tuple(data):
            raise ShapeError(f"like {tuple(like)} does not broadcast to data {tuple(data)}, "
                             f"so data cannot be summed down to it")
    return s, [like]


_sum_to_like = register(OpDef(
    name="_sum_to_like", arguments=("data", "like"),
    lower=lambda p, ctx, x, like: sum_to_shape(x, like.shape), infer_shape=_sum_to_like_infer,
    shape_inputs=(1,), category="reduction", flops=_input_flops,
    samples=[Sample({}, [(3, 4), (3, 4)]), Sample({}, [(2, 3, 4), (3, 1)]),
             Sample({}, [(2, 3), (1,)])],
    doc="data summed over the axes along which like broadcasts to it; reads like's "
        "shape only. The gradient of the broadcast ops."))


# y = sum_to(x, like.shape) is linear: dx = broadcast(dy, x.shape) (reads x's
# shape only); like's values never reach y, so it gets no gradient
register_backward(
    _sum_to_like, reads_inputs=(0,), inputs_for_shape_only=True, no_grad=(1,),
    lower=lambda p, ctx, og, ins, outs: [jnp.broadcast_to(og[0], ins[0].shape), None],
    infer_shape=lambda p, s: (s, [s[1]]), category="injective")


# --------------------------------------------------------------------------
# softmax / log_softmax along axis, with temperature, MXNet's dtype and
# use_length (a second input, length, masks each row past its length:
# those outputs are 0, as MXNet's masked kernel writes)
# --------------------------------------------------------------------------
def optional_float_attr(v):
    if v is None or (isinstance(v, str) and v.strip() in ("None", "none", "")):
        return None
    return float_attr(v)


_SOFTMAX_DTYPES = ("float16", "float32", "float64")


def _softmax_dtype_attr(v):
    if v is None or (isinstance(v, str) and v.strip() in ("None", "none", "")):
        return None
    t = dtype_attr(v)
    if t not in _SOFTMAX_DTYPES:
        raise ValueError(f"expected one of None, {', '.join(_SOFTMAX_DTYPES)}, got {v!r}")
    return t


_softmax_dtype_attr.choices = ("None",) + _SOFTMAX_DTYPES

SOFTMAX_ATTRS = {"axis": Attr(int_attr, -1, "the axis to normalise over"),
                 "temperature": Attr(optional_float_attr, None, "divides the input; None = 1"),
                 "dtype": Attr(_softmax_dtype_attr, None, "the output dtype; None: the "
                                                          "input's"),
                 "use_length": Attr(bool_attr, False, "take a second input, length: the "
                                                      "valid entries of each row along axis")}
SOFTMAX_SAMPLES = [Sample({}, [(3, 4)]), Sample({"axis": 1}, [(2, 3, 4)]),
                   Sample({"axis": 0, "temperature": 2.5}, [(3, 4)]),
                   Sample({"axis": -2, "temperature": 0.5}, [(2, 3, 4)]),
                   Sample({"use_length": True}, [(3, 4), (3,)], ints={1: 5}),
                   Sample({"use_length": True, "axis": 1, "temperature": 2.0},
                          [(2, 4, 3), (2, 3)], ints={1: 5}),
                   Sample({"dtype": "float32"}, [(3, 4)])]


def _softmax_arguments(p):
    return ["data", "length"] if p.use_length else ["data"]


def _length_shape(data, axis) -> tuple:
    """MXNet's length shape: the data's without axis, (1,) for a vector."""
    return tuple(d for i, d in enumerate(data) if i != axis) or (1,)


def _check_axis(p, s):
    data = s[0]
    if data is None:
        return s, [None]
    if not -len(data) <= p.axis < len(data):
        raise ShapeError(f"axis={p.axis} is out of range for an input of rank {len(data)}")
    if p.use_length:
        want = _length_shape(data, p.axis % len(data))
        if s[1] is not None and tuple(s[1]) != want:
            raise ShapeError(f"length {tuple(s[1])} must be {want}: data {tuple(data)} "
                             f"without axis {p.axis}")
        s = [data, want]
    return s, [data]


def _softmax_type(p, t, n):
    data = t[0] if t[0] is not None or not p.dtype else p.dtype
    return [data] + list(t[1:]), [p.dtype or data]


def _scaled(p, x):
    if p.dtype:
        x = x.astype(p.dtype)
    return x if p.temperature is None else x / p.temperature


def _inv_t(p):
    return 1.0 if p.temperature is None else 1.0 / p.temperature


def _valid(p, x, length):
    """True where the position along axis is below its row's length
    (truncated toward zero, as MXNet's static_cast)."""
    k = p.axis % x.ndim
    if jnp.issubdtype(length.dtype, jnp.floating):
        length = jnp.trunc(length)
    n = jnp.clip(length, -1, x.shape[k]).astype(jnp.int32)  # no overflow in the cast
    n = n.reshape(tuple(d for i, d in enumerate(x.shape) if i != k))
    pos = jnp.arange(x.shape[k], dtype=jnp.int32).reshape(
        tuple(-1 if i == k else 1 for i in range(x.ndim)))
    return pos < jnp.expand_dims(n, k)


def _softmax_lower(log):
    def lower(p, ctx, x, length=None):
        z = _scaled(p, x)
        if length is None:
            return (jax.nn.log_softmax if log else jax.nn.softmax)(z, axis=p.axis)
        valid = _valid(p, z, length)
        zm = jnp.where(valid, z, -jnp.inf)
        m = jnp.max(zm, axis=p.axis, keepdims=True)
        m = jax.lax.stop_gradient(jnp.where(jnp.isfinite(m), m, 0))
        e = jnp.where(valid, jnp.exp(zm - m), 0)
        total = jnp.sum(e, axis=p.axis, keepdims=True)
        total = jnp.where(total > 0, total, 1)  # a row of length 0 is all 0
        if log:
            return jnp.where(valid, z - m - jnp.log(total), 0)
        return e / total
    return lower


def _softmax_flops(p, in_shapes, out_shapes):
    return 5 * numel(in_shapes[0])  # max, subtract, exp, sum, divide


def _softmax_backward_flops(p, in_shapes, out_shapes):
    return 4 * numel(out_shapes[0])  # multiply, sum, subtract, scale


def _softmax_reads(p):
    # the data for its dtype only (dtype given), the lengths
    return ([0] if p.dtype else []) + ([1] if p.use_length else [])


def _softmax_backward(grad):
    """The backward lowering: ``grad(p, dy, y, valid)`` in the output's
    dtype, masked past each length, then in the data's dtype."""
    def lower(p, ctx, og, ins, outs):
        it = iter(ins)
        x = next(it) if p.dtype else None
        length = next(it) if p.use_length else None
        dy, y = og[0], outs[0]
        valid = None if length is None else _valid(p, y, length)
        dx = grad(p, dy, y, valid) * _inv_t(p)
        if valid is not None:
            dx = jnp.where(valid, dx, 0)
        return [dx if x is None else dx.astype(x.dtype), None]
    return lower


def _softmax_backward_type(p, t, n):
    # inputs: dy, [data], [length], y; dx has the data's dtype
    return t, [t[1] if p.dtype else t[0]]


def _register_softmax_backward(op, grad):
    register_backward(
        op, reads_inputs=_softmax_reads, reads_outputs=(0,), no_grad=(1,),
        inputs_for_shape_only=(0,), infer_shape=lambda p, s: (s, [s[0]]),
        infer_type=_softmax_backward_type, inplace=[(0, 0)], flops=_softmax_backward_flops,
        lower=_softmax_backward(grad))


_SOFTMAX_DOC = (" dtype: the output's (computed in it); use_length: a second input length, "
                "of data's shape without axis ((1,) for a vector, any dtype), keeps the "
                "first length[i] entries of each row along axis and writes 0 past them, as "
                "MXNet. Gradients flow to data only.")

_softmax = register(OpDef(
    name="softmax", attrs=SOFTMAX_ATTRS, arguments=_softmax_arguments,
    per_sample=lambda p: p.axis > 0 and not p.use_length,  # -1 is axis 0 of a vector
    lower=_softmax_lower(False), infer_shape=_check_axis, infer_type=_softmax_type,
    inplace=[(0, 0)], category="opaque", flops=_softmax_flops, samples=SOFTMAX_SAMPLES,
    family="activation", doc="softmax(x / temperature) along axis." + _SOFTMAX_DOC))
# y = softmax(x / T); dx = y (dy - sum(dy y, axis)) / T  -- reads y (and the
# lengths; the data's dtype only)
_register_softmax_backward(_softmax, lambda p, dy, y, valid: y * (
    dy - jnp.sum(dy * y, axis=p.axis, keepdims=True)))

_log_softmax = register(OpDef(
    name="log_softmax", attrs=SOFTMAX_ATTRS, arguments=_softmax_arguments,
    per_sample=lambda p: p.axis > 0 and not p.use_length,
    lower=_softmax_lower(True), infer_shape=_check_axis, infer_type=_softmax_type,
    inplace=[(0, 0)], category="opaque", flops=_softmax_flops,
    family="activation", samples=SOFTMAX_SAMPLES,
    doc="log(softmax(x / temperature)) along axis." + _SOFTMAX_DOC))


# y = log_softmax(x / T); dx = (dy - exp(y) sum(dy, axis)) / T, the sum over
# the valid entries only -- reads y (and the lengths)
def _log_softmax_grad(p, dy, y, valid):
    s = dy if valid is None else jnp.where(valid, dy, 0)
    return dy - jnp.exp(y) * jnp.sum(s, axis=p.axis, keepdims=True)


_register_softmax_backward(_log_softmax, _log_softmax_grad)
