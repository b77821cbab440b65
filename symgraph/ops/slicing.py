"""Ops shaped by a tensor's shape rather than its values, as MXNet 1.9.1
(src/operator/tensor/matrix_op-inl.h, init_op.h): ``slice_like`` (the
corner of ``data`` of ``shape_like``'s size), ``_split_v2`` (parts between
given indices, or ``sections`` parts as ``numpy.array_split``) and
``_contrib_arange_like`` (a range laid over a tensor's shape).

Where MXNet would make a tensor with a 0 dimension (an empty part of
``_split_v2``) symgraph refuses it, as every tensor it plans has a size.
``slice_like``'s ``shape_like`` and ``arange_like``'s ``data`` are read
for their shapes only: neither keeps its data alive, and neither gets a
gradient (MXNet's zeros).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from ..errors import ShapeError
from .backward import register_backward
from .glue import string_attr
from .registry import (MAX_COUNT, Attr, OpDef, Sample, bool_attr, float_attr, int_attr,
                       optional_int_attr, register, shape_attr)
from .tensor import _axis, _zero_flops

# --------------------------------------------------------------------------
# slice_like: data[0:like[0], 0:like[1], ...] over axes (all when empty)
# --------------------------------------------------------------------------


def slice_like_shape(p, data, like) -> tuple:
    """The output shape by MXNet's SliceLikeShape; ShapeError if it does not fit."""
    data, like = tuple(data), tuple(like)
    out = list(data)
    if not p.axes:
        if len(data) != len(like):
            raise ShapeError(f"slice_like without axes slices every axis: data {data} and "
                             f"shape_like {like} must have one rank; give axes")
        axes = range(len(data))
    else:
        axes = []
        for a in p.axes:
            k = _axis(a, len(data), "axes")
            if k >= len(like):
                raise ShapeError(f"axes={tuple(p.axes)}: axis {k} is out of range for "
                                 f"shape_like {like}")
            axes.append(k)
    for k in axes:
        if like[k] > data[k]:
            raise ShapeError(f"slice_like: axis {k} of shape_like {like} ({like[k]}) "
                             f"exceeds data {data} ({data[k]})")
        out[k] = like[k]
    return tuple(out)


def _slice_like_infer(p, s):
    data, like = s
    if data is None or like is None:
        return s, [None]
    return s, [slice_like_shape(p, data, like)]


_slice_like = register(OpDef(
    name="slice_like", arguments=("data", "shape_like"),
    attrs={"axes": Attr(shape_attr, (), "the axes to slice (negative count from the end); "
                                        "(): every axis")},
    lower=lambda p, ctx, x, like: x[tuple(slice(0, n) for n in
                                          slice_like_shape(p, x.shape, like.shape))],
    infer_shape=_slice_like_infer, shape_inputs=(1,), category="injective",
    flops=_zero_flops,
    samples=[Sample({}, [(3, 4), (2, 3)]), Sample({"axes": (0,)}, [(3, 4), (2, 3)]),
             Sample({"axes": (-1,)}, [(3, 4), (2, 3)]),
             Sample({"axes": (0, 2)}, [(2, 3, 4, 5), (1, 2, 3)]),
             Sample({"axes": "(1,)"}, [(2, 3), (5, 3)])],
    doc="data[0:d0, 0:d1, ...] where d are shape_like's dimensions on axes (every axis "
        "when axes is empty: then both inputs have one rank). shape_like is read for its "
        "shape only and gets no gradient; data's gradient is dy padded with zeros."))


# y = x[0:like]; dx = dy padded with zeros at the ends (reads x's shape only)
def _slice_like_backward(p, ctx, og, ins, outs):
    shape, dy = ins[0].shape, og[0]
    return [jnp.pad(dy, [(0, n - m) for n, m in zip(shape, dy.shape)]), None]


register_backward(_slice_like, reads_inputs=(0,), inputs_for_shape_only=True, no_grad=(1,),
                  lower=_slice_like_backward,
                  infer_shape=lambda p, s: (s, [s[1]]))


# --------------------------------------------------------------------------
# _split_v2: parts between indices along axis, or sections near-equal parts
# --------------------------------------------------------------------------
def _num_parts(p) -> int:
    return p.sections if p.sections > 0 else len(p.indices)


def split_bounds(p, shape) -> tuple:
    """(axis, [(begin, end) of each part]) by MXNet's SplitOpShape; ShapeError
    if a part would be empty or the indices do not cover the axis."""
    a = _axis(p.axis, len(shape), "axis")
    n = shape[a]
    if p.sections > 0:
        # GetSplitIndices: the first n % sections parts one longer (numpy.array_split)
        small, extra = divmod(n, p.sections)
        sizes = [small + (i < extra) for i in range(p.sections)]
        starts = [sum(sizes[:i]) for i in range(p.sections)]
    else:
        starts = list(p.indices)
        if starts[0] != 0:
            raise ShapeError(f"indices={tuple(p.indices)} must start at 0 (MXNet's "
                             f"split_v2 writes indices as (0,) + the split points): the "
                             f"parts must cover axis {a} of input {tuple(shape)}")
    bounds = list(zip(starts, starts[1:] + [n]))
    if any(not b < e for b, e in bounds):
        what = (f"sections={p.sections}" if p.sections > 0
                else f"indices={tuple(p.indices)}")
        raise ShapeError(f"{what} gives an empty part of axis {a} (size {n}) of input "
                         f"{tuple(shape)}: the split points must increase and stay below "
                         f"{n}")
    if p.squeeze_axis and any(e - b != 1 for b, e in bounds):
        raise ShapeError(f"squeeze_axis=True needs every part of axis {a} of input "
                         f"{tuple(shape)} to have size 1 (axis size {n} = "
                         f"{len(bounds)} parts)")
    return a, bounds


def _check_split(p):
    if p.sections == 0 and not p.indices:
        raise ShapeError("_split_v2 needs indices (0, split points...) or sections > 0; both "
                         "are empty")
    if p.sections == 0 and any(i < 0 for i in p.indices):
        raise ShapeError(f"indices={tuple(p.indices)} must not be negative")


def _split_infer(p, s):
    _check_split(p)
    if s[0] is None:
        return s, [None] * _num_parts(p)
    d = tuple(s[0])
    a, bounds = split_bounds(p, d)
    outs = []
    for b, e in bounds:
        part = list(d)
        part[a] = e - b
        if p.squeeze_axis:
            del part[a]
        outs.append(tuple(part))
    return s, outs


def _split_lower(p, ctx, x):
    a, bounds = split_bounds(p, x.shape)
    parts = [jax.lax.slice_in_dim(x, b, e, axis=a) for b, e in bounds]
    return tuple(jnp.squeeze(y, a) for y in parts) if p.squeeze_axis else tuple(parts)


# y_i = x[b_i:e_i] along axis; dx = concat(dy_i) -- a part nobody read gives zeros
def _split_gradient(g, node, og):
    p = node.params
    parts = [g.ograd_or_zeros(node, og, i) for i in range(_num_parts(p))]
    if p.squeeze_axis:
        parts = [g.op("expand_dims", [e], {"axis": p.axis}, suffix=f"backward_unsqueeze{i}")[0]
                 for i, e in enumerate(parts)]
    return [g.op("Concat", parts, {"num_args": len(parts), "dim": p.axis},
                 suffix="backward")[0]]


def _sections_attr(v) -> int:
    n = int_attr(v)
    if not 0 <= n <= MAX_COUNT:
        raise ValueError(f"expected 0 (split at indices) or a number of sections up to "
                         f"{MAX_COUNT}, got {n}")
    return n


def _split_outputs(p):
    # no parts at all is refused by shape inference, which names the node
    return [f"output{i}" for i in range(max(_num_parts(p), 1))]


register(OpDef(
    name="_split_v2",
    attrs={"indices": Attr(shape_attr, doc="where each part starts along axis, from 0 "
                                           "(ignored when sections > 0)"),
           "axis": Attr(int_attr, 1, "the axis to split"),
           "squeeze_axis": Attr(bool_attr, False, "drop the split axis (every part must "
                                                  "have size 1)"),
           "sections": Attr(_sections_attr, 0, "split into this many near-equal parts (the "
                                               "first ones one longer); 0: split at indices")},
    outputs=_split_outputs, per_sample=lambda p: p.axis > 0,
    lower=_split_lower, infer_shape=_split_infer, category="injective",
    flops=_zero_flops, gradient=_split_gradient,
    samples=[Sample({"indices": (0, 1), "axis": 0}, [(3, 2, 2)]),
             Sample({"indices": (0, 1, 3)}, [(2, 5)]),
             Sample({"indices": "()", "sections": 2, "axis": 1}, [(3, 4, 1)]),
             Sample({"indices": (), "sections": 3, "axis": -1}, [(2, 7)]),
             Sample({"indices": (0, 1, 2), "axis": -1, "squeeze_axis": True}, [(2, 3)]),
             Sample({"indices": (0,), "axis": 0}, [(2, 3)])],
    doc="Splits data along axis at indices (where each part starts: (0, i1, i2, ...)), or, "
        "with sections > 0, into sections near-equal parts (the first ones one longer, as "
        "numpy.array_split). squeeze_axis drops the axis from parts of size 1. Empty "
        "parts are refused."))


# --------------------------------------------------------------------------
# _contrib_arange_like: start + (i // repeat) * step over data's shape
# --------------------------------------------------------------------------
def _arange_like_shape(p, data) -> tuple:
    if p.repeat < 1:
        raise ShapeError(f"repeat={p.repeat}: each value repeats at least once")
    if p.axis is None:
        return tuple(data)
    return (data[_axis(p.axis, len(data), "axis")],)


def _arange_like_lower(p, ctx, x):
    shape = _arange_like_shape(p, x.shape)
    dt = x.dtype
    n = 1
    for d in shape:
        n *= d
    # MXNet's range_fwd: start + (i / repeat) * step, start and step in the dtype
    s0, s1 = (jnp.asarray(v).astype(dt) for v in (p.start, p.step))
    i = (jnp.arange(n) // p.repeat).astype(dt)
    return (s0 + i * s1).astype(dt).reshape(shape)


register(OpDef(
    name="_contrib_arange_like",
    attrs={"start": Attr(float_attr, 0.0, "the first value"),
           "step": Attr(float_attr, 1.0, "the spacing"),
           "repeat": Attr(int_attr, 1, "how many times each value repeats"),
           "ctx": Attr(string_attr, "", "MXNet's device of an imperative call; ignored"),
           "axis": Attr(optional_int_attr, None, "None: data's shape; else a 1-D range of "
                                                 "data's size on this axis")},
    lower=_arange_like_lower,
    infer_shape=lambda p, s: (s, [None if s[0] is None else _arange_like_shape(p, s[0])]),
    shape_inputs=(0,), category="injective", flops=_zero_flops, family="other",
    per_sample=False, gradient=lambda g, node, og: [None],
    samples=[Sample({}, [(3, 4)], grad=False),
             Sample({"start": 1.5, "step": -0.5, "repeat": 2}, [(2, 3)], grad=False),
             Sample({"axis": -1, "start": 2}, [(3, 4)], grad=False),
             Sample({"axis": 0, "step": 3}, [(5, 2)], grad=False)],
    doc="Evenly spaced values start + (i // repeat) * step in data's shape and dtype (the "
        "row-major index i), or a 1-D range of data.shape[axis] values with axis; reads "
        "data's shape only (no gradient)."))
