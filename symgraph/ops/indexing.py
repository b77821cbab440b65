"""Index arithmetic as MXNet 1.9.1 computes it: ``one_hot``, ``pick`` and
``gather_nd`` (src/operator/tensor/indexing_op.h, broadcast_reduce_op.h).

Indices may have any dtype; float indices hold integers and are truncated
toward zero first, as MXNet's ``static_cast``. ``one_hot`` leaves an index
outside [0, depth) all ``off_value``; ``pick`` clips or wraps by ``mode``;
``gather_nd`` wraps by MXNet's ``(index + size) % size``, which is exact for
the indices MXNet accepts ([-size, size)); MXNet raises on others while
running, which a compiled program cannot, so here they wrap. Gradients go
to the data only (MXNet gives the indices ``zeros_like``), and each backward
reads the output gradient, the indices and the data's *shape* only.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..dtypes import np_dtype
from ..errors import ShapeError
from .backward import register_backward
from .glue import _dtype_of, _type_of_data
from .registry import (Attr, OpDef, Sample, bool_attr, choice_attr, float_attr, int_attr,
                       numel, optional_int_attr, register)
from .tensor import CAST_DTYPES, _axis


def bounded_index(idx, n: int, mode: str = "clip"):
    """int32 indices in [0, n) from indices of any dtype: floats truncated
    toward zero, then clipped to the ends or wrapped (modulo n), in the
    indices' own dtype so that no value overflows the cast."""
    if jnp.issubdtype(idx.dtype, jnp.floating):
        idx = jnp.trunc(idx)
    idx = jnp.clip(idx, 0, n - 1) if mode == "clip" else jnp.remainder(idx, n)
    return idx.astype(jnp.int32)


def _out_flops(p, in_shapes, out_shapes):
    return numel(out_shapes[0])


# --------------------------------------------------------------------------
# one_hot: indices (any shape) -> indices.shape + (depth,)
# --------------------------------------------------------------------------
def _depth_attr(v) -> int:
    n = int_attr(v)
    if n < 1:
        raise ValueError(f"depth={n}: expected a positive depth (0 would make an empty "
                         f"tensor)")
    return n


def _one_hot_lower(p, ctx, idx):
    if jnp.issubdtype(idx.dtype, jnp.floating):
        idx = jnp.trunc(idx)
    hot = idx[..., None] == jnp.arange(p.depth).astype(idx.dtype)
    dt = jax.dtypes.canonicalize_dtype(np_dtype(p.dtype))
    # MXNet fills off_value, then writes DType(on_value) (truncated for integers)
    on, off = (np.asarray(v).astype(dt) for v in (p.on_value, p.off_value))
    return jnp.where(hot, on, off).astype(dt)


register(OpDef(
    name="one_hot", arguments=("indices",),
    attrs={"depth": Attr(_depth_attr, doc="the size of the one-hot dimension"),
           "on_value": Attr(float_attr, 1.0, "the value at the index"),
           "off_value": Attr(float_attr, 0.0, "the value elsewhere"),
           "dtype": Attr(_dtype_of(CAST_DTYPES), "float32", "the output dtype")},
    lower=_one_hot_lower,
    infer_shape=lambda p, s: (s, [None if s[0] is None else tuple(s[0]) + (p.depth,)]),
    infer_type=lambda p, t, n: (t, [p.dtype]),
    category="opaque", flops=_out_flops,
    gradient=lambda g, node, og: [None],
    samples=[Sample({"depth": 4}, [(3,)], ints={0: 6}),
             Sample({"depth": 3, "on_value": 2.5, "off_value": -1}, [(2, 3)], ints={0: 3}),
             Sample({"depth": 5, "dtype": "int32"}, [(4,)], low=-1.0, high=5.0)],
    doc="indices.shape + (depth,): on_value where the last axis equals the index "
        "(truncated toward zero), off_value elsewhere and for indices outside [0, depth). "
        "Zero gradient."))


# --------------------------------------------------------------------------
# pick: data[..., index, ...] along axis, one element per position
# --------------------------------------------------------------------------
def reduce_axis_shape(shape, axis, keepdims) -> tuple:
    """MXNet's ReduceAxisShapeImpl: the shape without ``axis`` (kept as 1
    with keepdims); a 1-D input, or no axis, reduces to (1,)."""
    shape = tuple(shape)
    if axis is None or len(shape) == 1:
        return (1,) * len(shape) if keepdims else (1,)
    k = _axis(axis, len(shape), "axis")
    if keepdims:
        return shape[:k] + (1,) + shape[k + 1:]
    return shape[:k] + shape[k + 1:]


def _pick_axis(p, ndim) -> int:
    if p.axis is None:
        raise ShapeError("axis=None (picking from the flattened input) is not supported by "
                         "pick, as in MXNet; give an axis")
    return _axis(p.axis, ndim, "axis")


def _pick_infer(p, s):
    data, index = s
    if data is None:
        return s, [None]
    k = _pick_axis(p, len(data))
    out = reduce_axis_shape(data, k, p.keepdims)
    keep, drop = reduce_axis_shape(data, k, True), reduce_axis_shape(data, k, False)
    if index is None:
        index = out
    elif tuple(index) not in (keep, drop):
        raise ShapeError(f"index {tuple(index)} must have data {tuple(data)}'s shape without "
                         f"axis {p.axis}: {drop}, or {keep} with the axis kept")
    return [data, tuple(index)], [out]


def _pick(p, data, index):
    k = _pick_axis(p, data.ndim)
    j = bounded_index(index, data.shape[k], p.mode)
    j = j.reshape(reduce_axis_shape(data.shape, k, True))
    got = jnp.take_along_axis(data, j, axis=k)
    return got.reshape(reduce_axis_shape(data.shape, k, p.keepdims))


_pick_op = register(OpDef(
    name="pick", arguments=("data", "index"),
    attrs={"axis": Attr(optional_int_attr, -1, "the axis to pick along (None is refused, "
                                                "as MXNet)"),
           "keepdims": Attr(bool_attr, False, "keep the picked axis with size 1"),
           "mode": Attr(choice_attr("clip", "wrap"), "clip",
                        "out-of-range indices: clip to the ends, or wrap around")},
    lower=lambda p, ctx, data, index: _pick(p, data, index), infer_shape=_pick_infer,
    infer_type=lambda p, t, n: _type_of_data(t, (0,)),
    category="opaque", flops=_out_flops, aliases=("choose_element_0index",),
    samples=[Sample({"axis": 1}, [(3, 4), (3,)], ints={1: 4}),
             Sample({"axis": 0, "mode": "wrap"}, [(3, 4), (4,)], ints={1: 7}),
             Sample({"axis": -1, "keepdims": True}, [(2, 3, 5), (2, 3, 1)], ints={1: 5}),
             Sample({"axis": 1}, [(2, 3, 2), (2, 1, 2)], ints={1: 3})],
    doc="out[i] = data[i with index[i] inserted at axis]: one element per position of "
        "the other axes. index has data's shape without axis (or with it as 1); float "
        "indices are truncated, then clipped or wrapped by mode. The gradient goes to "
        "data only."))


# y = pick(x, i); dx = dy scattered to the picked positions (summed where an
# element is picked twice); reads dy, the indices and x's shape only
def _vjp_into(fwd, shape, dy):
    zeros = jnp.zeros(shape, dy.dtype)
    _, vjp = jax.vjp(fwd, zeros)
    return vjp(dy)[0]


register_backward(
    _pick_op, reads_inputs=(0, 1), inputs_for_shape_only=(0,), no_grad=(1,),
    lower=lambda p, ctx, og, ins, outs: [
        _vjp_into(lambda v: _pick(p, v, ins[1]), ins[0].shape, og[0]), None],
    infer_shape=lambda p, s: (s, [s[1]]), category="opaque",
    flops=lambda p, ins, outs: numel(outs[0]))


# --------------------------------------------------------------------------
# gather_nd: indices (M, Y...) address the first M axes of data
# --------------------------------------------------------------------------
def gather_nd_shape(data, indices) -> tuple:
    data, indices = tuple(data), tuple(indices)
    if len(indices) < 2:
        raise ShapeError(f"indices {indices} must have at least 2 dimensions (M, Y0, ...), "
                         f"as MXNet's gather_nd")
    m = indices[0]
    if not 1 <= m <= len(data):
        raise ShapeError(f"indices {indices} address {m} axes, but data {data} has rank "
                         f"{len(data)}")
    return indices[1:] + data[m:]


def _gather_nd(data, indices):
    m = indices.shape[0]
    sizes = np.asarray(data.shape[:m]).reshape((m,) + (1,) * (indices.ndim - 1))
    # MXNet: static_cast<index_t>(index + size) % size, in the indices' dtype
    j = indices + sizes.astype(indices.dtype)
    if jnp.issubdtype(indices.dtype, jnp.floating):
        j = jnp.trunc(j)
    j = jnp.remainder(j, sizes.astype(indices.dtype)).astype(jnp.int32)
    return data[tuple(j[k] for k in range(m))]


def _gather_nd_infer(p, s):
    data, indices = s
    if data is None or indices is None:
        return s, [None]
    return s, [gather_nd_shape(data, indices)]


_gather_nd_op = register(OpDef(
    name="gather_nd", arguments=("data", "indices"),
    lower=lambda p, ctx, data, idx: _gather_nd(data, idx), infer_shape=_gather_nd_infer,
    infer_type=lambda p, t, n: _type_of_data(t, (0,)),
    category="opaque", flops=_out_flops,
    samples=[Sample({}, [(3, 4), (2, 5)], ints={1: 3}),
             Sample({}, [(2, 3, 4), (1, 2, 2)], ints={1: 2}),
             Sample({}, [(4, 3), (2, 3)], low=-3.0, high=2.9)],
    doc="out[y..., x...] = data[indices[0, y...], ..., indices[M-1, y...], x...]: indices "
        "of shape (M, Y...) give an output of shape Y + data.shape[M:]. Negative indices "
        "count from the end (MXNet's (i + size) % size); MXNet raises on indices outside "
        "[-size, size) while running, here they wrap. The gradient goes to data only."))

# y = gather_nd(x, i); dx = dy scattered back (summed where indices repeat);
# reads dy, the indices and x's shape only
register_backward(
    _gather_nd_op, reads_inputs=(0, 1), inputs_for_shape_only=(0,), no_grad=(1,),
    lower=lambda p, ctx, og, ins, outs: [
        _vjp_into(lambda v: _gather_nd(v, ins[1]), ins[0].shape, og[0]), None],
    infer_shape=lambda p, s: (s, [s[1]]), category="opaque",
    flops=lambda p, ins, outs: numel(ins[0]))
