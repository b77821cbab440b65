"""MXNet 1.9.1's sequence ops: ``SequenceMask``, ``SequenceLast`` and
``SequenceReverse`` (src/operator/sequence_{mask,last,reverse}-inl.h).

The data is (time, batch, ...) with ``axis=0``, or (batch, time, ...) with
``axis=1`` (``SequenceReverse``: axis 0 only, as MXNet). With
``use_sequence_length`` a second input ``sequence_length`` of shape
(batch,) (any dtype; floats truncated) gives each sequence's length;
without it every sequence is full. A length outside [0, time] is clamped
to it (MXNet reads outside the tensor there). The gradients go to the
data only; each backward reads the output gradient and the lengths (and,
for ``SequenceLast``, the data's shape), never the data's values.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ..errors import ShapeError
from .backward import register_backward
from .indexing import _vjp_into, bounded_index
from .registry import (Attr, OpDef, Sample, bool_attr, float_attr, int_attr, numel, register,
                       same_type)

_USE = Attr(bool_attr, False, "take a second input sequence_length of shape (batch,)")


def _arguments(p):
    return ["data", "sequence_length"] if p.use_sequence_length else ["data"]


def _geometry(p, shape, axes=(0, 1)):
    """(time axis, batch axis) of data ``shape``; ShapeError if bad."""
    if p.axis not in axes:
        raise ShapeError(f"axis={p.axis}: the sequence axis must be "
                         f"{' or '.join(map(str, axes))}, as MXNet")
    if len(shape) < 2:
        raise ShapeError(f"data {tuple(shape)} must have rank 2 or more (time and batch)")
    return p.axis, 1 - p.axis


def _infer(out_shape, axes=(0, 1)):
    def infer(p, s):
        data = s[0]
        if data is None:
            return s, [None]
        t, b = _geometry(p, data, axes)
        s = list(s)
        if p.use_sequence_length:
            want = (data[b],)
            if s[1] is not None and tuple(s[1]) != want:
                raise ShapeError(f"sequence_length {tuple(s[1])} must be {want}: one length "
                                 f"per sequence of data {tuple(data)} (batch axis {b})")
            s[1] = want
        return s, [out_shape(tuple(data), t)]
    return infer


def _type(p, in_types, n):
    # data gives the output's dtype; the lengths keep their own
    return same_type(p, in_types, n, free=(1,))


def _lengths(p, x, lens):
    """Each sequence's length as int32 of shape (batch,), clamped to [0, time]."""
    t = x.shape[p.axis]
    if lens is None:
        return jnp.full((x.shape[1 - p.axis],), t, jnp.int32)
    return bounded_index(lens, t + 1)  # truncated, clipped to [0, t]


def _valid(p, x, lens):
    """A boolean of x's rank, broadcasting against x: time step < length."""
    n = _lengths(p, x, lens)
    steps = jnp.arange(x.shape[p.axis], dtype=jnp.int32)
    mask = steps[:, None] < n[None, :] if p.axis == 0 else steps[None, :] < n[:, None]
    return mask.reshape(mask.shape + (1,) * (x.ndim - 2))


def _data_flops(p, in_shapes, out_shapes):
    return numel(in_shapes[0])


def _reads_lengths(p):
    return [1] if p.use_sequence_length else []


def _grad_shape(p, s):
    return s, [s[0]]


# --------------------------------------------------------------------------
# SequenceMask: value past each sequence's length
# --------------------------------------------------------------------------
def _mask_value(p, dtype):
    # MXNet's value is a float (real_t), cast to the data's dtype
    return np.asarray(np.float32(p.value)).astype(dtype)


def _mask_lower(p, ctx, x, lens=None):
    if not p.use_sequence_length:
        return x
    return jnp.where(_valid(p, x, lens), x, _mask_value(p, x.dtype))


_mask = register(OpDef(
    name="SequenceMask", arguments=_arguments,
    attrs={"use_sequence_length": _USE,
           "value": Attr(float_attr, 0.0, "the value past each sequence's end"),
           "axis": Attr(int_attr, 0, "the time axis: 0 (time, batch, ...) or 1 (batch, "
                                     "time, ...)")},
    lower=_mask_lower, infer_shape=_infer(lambda d, t: d), infer_type=_type,
    inplace=[(0, 0)], category="opaque", flops=_data_flops,
    samples=[Sample({"use_sequence_length": True}, [(4, 3, 2), (3,)], ints={1: 5}),
             Sample({"use_sequence_length": True, "axis": 1, "value": -2.5},
                    [(3, 4), (3,)], ints={1: 5}),
             Sample({}, [(3, 2)])],
    doc="data with every step at or past its sequence's length set to value (no change "
        "without use_sequence_length). The gradient is dy, zero past each end."))


# y = mask(x); dx = dy where the step is inside its sequence, else 0
def _mask_backward(p, ctx, og, ins, outs):
    dy = og[0]
    if not p.use_sequence_length:
        return [dy, None]
    return [jnp.where(_valid(p, dy, ins[0]), dy, jnp.zeros((), dy.dtype)), None]


register_backward(_mask, reads_inputs=_reads_lengths, no_grad=(1,), lower=_mask_backward,
                  infer_shape=_grad_shape, inplace=[(0, 0)], category="opaque",
                  flops=lambda p, ins, outs: numel(outs[0]))


# --------------------------------------------------------------------------
# SequenceLast: each sequence's last step
# --------------------------------------------------------------------------
def _last_shape(d, t):
    return d[:t] + d[t + 1:]


def _last(p, x, lens):
    """x at step length - 1 of each sequence (step 0 for a length of 0)."""
    j = jnp.maximum(_lengths(p, x, lens) - 1, 0)
    shape = [1] * x.ndim
    shape[1 - p.axis] = -1  # the batch axis
    j = j.reshape(shape)
    return jnp.take_along_axis(x, j, axis=p.axis).squeeze(p.axis)


_seq_last = register(OpDef(
    name="SequenceLast", arguments=_arguments,
    attrs={"use_sequence_length": _USE,
           "axis": Attr(int_attr, 0, "the time axis: 0 (time, batch, ...) or 1 (batch, "
                                     "time, ...)")},
    lower=lambda p, ctx, x, lens=None: _last(p, x, lens), infer_shape=_infer(_last_shape),
    infer_type=_type, category="opaque", flops=lambda p, ins, outs: 0,
    samples=[Sample({"use_sequence_length": True}, [(4, 3, 2), (3,)], ints={1: 5}),
             Sample({"use_sequence_length": True, "axis": 1}, [(3, 4), (3,)], ints={1: 5}),
             Sample({}, [(3, 2, 2)]), Sample({"axis": 1}, [(2, 3)])],
    doc="Each sequence's last step (length - 1; the last step without "
        "use_sequence_length): data without the time axis. The gradient puts dy back at "
        "those steps."))


# y = x[len - 1]; dx = dy at those steps, 0 elsewhere (reads x's shape only)
def _last_backward(p, ctx, og, ins, outs):
    x, lens = ins[0], (ins[1] if p.use_sequence_length else None)
    return [_vjp_into(lambda v: _last(p, v, lens), x.shape, og[0]), None]


register_backward(_seq_last, reads_inputs=lambda p: [0] + _reads_lengths(p),
                  inputs_for_shape_only=(0,), no_grad=(1,), lower=_last_backward,
                  infer_shape=lambda p, s: (s, [s[1]]), category="opaque",
                  flops=lambda p, ins, outs: numel(outs[0]))


# --------------------------------------------------------------------------
# SequenceReverse: the first length steps of each sequence reversed
# --------------------------------------------------------------------------
def _reverse(p, x, lens):
    n = _lengths(p, x, lens)[None, :]                      # (1, batch)
    t = jnp.arange(x.shape[0], dtype=jnp.int32)[:, None]   # (time, 1)
    src = jnp.where(t < n, n - 1 - t, t)                   # past the end: unchanged
    return jnp.take_along_axis(x, src.reshape(src.shape + (1,) * (x.ndim - 2)), axis=0)


def _reverse_lower(p, ctx, x, lens=None):
    if not p.use_sequence_length:
        return jnp.flip(x, axis=0)
    return _reverse(p, x, lens)


_seq_reverse = register(OpDef(
    name="SequenceReverse", arguments=_arguments,
    attrs={"use_sequence_length": _USE,
           "axis": Attr(int_attr, 0, "the time axis: 0 only (time, batch, ...), as MXNet")},
    lower=_reverse_lower, infer_shape=_infer(lambda d, t: d, axes=(0,)), infer_type=_type,
    category="opaque", flops=lambda p, ins, outs: 0,
    samples=[Sample({"use_sequence_length": True}, [(4, 3, 2), (3,)], ints={1: 5}),
             Sample({"use_sequence_length": True}, [(5, 2), (2,)], ints={1: 6}),
             Sample({}, [(3, 2, 2)])],
    doc="Reverses the first length steps of each sequence along axis 0 (all of them "
        "without use_sequence_length); steps past the end stay. The gradient is the same "
        "reversal of dy."))


# the reversal is its own inverse: dx = reverse(dy) with the same lengths
register_backward(
    _seq_reverse, reads_inputs=_reads_lengths, no_grad=(1,),
    lower=lambda p, ctx, og, ins, outs: [
        _reverse_lower(p, ctx, og[0], ins[0] if ins else None), None],
    infer_shape=_grad_shape, category="opaque", flops=lambda p, ins, outs: 0)
