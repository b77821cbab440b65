"""Searching, ordering and norms as MXNet 1.9.1 computes them: ``argmax``,
``argmin``, ``topk``, ``sort``, ``argsort`` and ``norm``
(src/operator/tensor/broadcast_reduce_op.h, ordering_op-inl.h).

``argmax``/``argmin`` give the first occurrence, as a float (the input's
dtype), with MXNet's shapes: no axis, or a 1-D input, reduces to (1,).
``topk``, ``sort`` and ``argsort`` order along ``axis`` (None: the
flattened input); indices come in ``dtype`` (float32 by default, as
MXNet). Ties keep the lower index first (a stable sort; MXNet's GPU kernel
is stable, its CPU kernel's ``std::sort`` leaves the order of ties
unspecified). ``topk`` with ``k <= 0`` orders the whole axis.
Gradients: ``topk`` (value, both) and ``sort`` scatter the output gradient
back to the positions taken, reading the hidden or visible indices and
the input's shape only (MXNet's ``_backward_topk``); ``argmax``,
``argmin``, ``argsort`` and ``topk`` indices/mask have a zero gradient.
``norm`` (ord 1 or 2) reads its input and output: dx = dy sign(x), or
dy x / y (NaN where the norm is 0, as MXNet's).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..dtypes import np_dtype
from ..errors import ShapeError
from .backward import register_backward
from .glue import _dtype_of
from .indexing import _vjp_into, reduce_axis_shape
from .reduce import reduce_axes, reduce_shape
from .registry import (Attr, OpDef, Params, Sample, bool_attr, choice_attr, int_attr, numel,
                       optional_int_attr, optional_shape_attr, register)
from .tensor import _axis

INDEX_DTYPES = ("uint8", "int32", "int64", "float16", "float32", "float64")
_HIDDEN_INDEX = "int32"  # MXNet's index_t without MXNET_USE_INT64_TENSOR_SIZE


def _in_flops(p, in_shapes, out_shapes):
    return numel(in_shapes[0])


def _sort_flops(p, in_shapes, out_shapes):
    n = numel(in_shapes[0])
    return n * max(1, int(np.log2(max(n, 2))))


def _as(x, dtype):
    return x.astype(jax.dtypes.canonicalize_dtype(np_dtype(dtype)))


def _zero_gradient(g, node, og):
    return [None]


# --------------------------------------------------------------------------
# argmax, argmin: the first extreme along axis, in the input's dtype
# --------------------------------------------------------------------------
def _arg_infer(p, s):
    d = s[0]
    if d is None:
        return s, [None]
    if p.axis is not None:
        _axis(p.axis, len(d), "axis")
    return s, [reduce_axis_shape(d, p.axis, p.keepdims)]


def _arg(fn):
    def lower(p, ctx, x):
        out = reduce_axis_shape(x.shape, p.axis, p.keepdims)
        if p.axis is None:
            return fn(x.reshape(-1)).reshape(out).astype(x.dtype)
        return fn(x, axis=_axis(p.axis, x.ndim, "axis")).reshape(out).astype(x.dtype)
    return lower


_ARG_ATTRS = {"axis": Attr(optional_int_attr, None, "the axis to search; None: the "
                                                    "flattened input"),
              "keepdims": Attr(bool_attr, False, "keep the searched axis with size 1")}
_ARG_SAMPLES = [Sample({}, [(3, 4)]), Sample({"axis": 1}, [(2, 3, 4)]),
                Sample({"axis": -1, "keepdims": True}, [(2, 3, 4)]),
                Sample({"axis": 0}, [(5,)]), Sample({"keepdims": True}, [(2, 3)])]

for _name, _fn, _what in (("argmax", jnp.argmax, "maximum"), ("argmin", jnp.argmin, "minimum")):
    register(OpDef(
        name=_name, attrs=_ARG_ATTRS, lower=_arg(_fn), infer_shape=_arg_infer,
        category="reduction", flops=_in_flops, gradient=_zero_gradient,
        per_sample=lambda p: p.axis is not None and p.axis > 0, samples=_ARG_SAMPLES,
        doc=f"The index of the first {_what} along axis (of the flattened input when axis "
            f"is None), in the input's dtype as MXNet; no axis or a 1-D input gives shape "
            f"(1,). Zero gradient."))


# --------------------------------------------------------------------------
# topk, sort, argsort
# --------------------------------------------------------------------------
def order_geometry(p, shape, k=None, mask=False):
    """(axis or None, elements ordered per row, k, output shape) by MXNet's
    ParseTopKParam; ShapeError for a bad axis or k."""
    shape = tuple(shape)
    if p.axis is None:
        axis, n = None, numel(shape)
    else:
        axis = _axis(p.axis, len(shape), "axis")
        n = shape[axis]
    k = n if k is None or k <= 0 else k
    if k > n:
        raise ShapeError(f"k={k} is larger than the {n} elements along "
                         f"{'the flattened input' if axis is None else f'axis {p.axis}'} "
                         f"of input {shape}")
    if mask:
        out = shape
    elif axis is None:
        out = (k,)
    else:
        out = shape[:axis] + (k,) + shape[axis + 1:]
    return axis, n, k, out


def _rows(x, axis):
    """x with the ordered axis last (flattened when axis is None)."""
    return x.reshape(-1) if axis is None else jnp.moveaxis(x, axis, -1)


def _unrows(y, axis):
    return y if axis is None else jnp.moveaxis(y, -1, axis)


def _order(p, x, k):
    """(positions, values) of the first k in order along the axis, rows last."""
    axis = None if p.axis is None else _axis(p.axis, x.ndim, "axis")
    r = _rows(x, axis)
    idx = jnp.argsort(r, axis=-1, stable=True, descending=not p.is_ascend)[..., :k]
    return axis, idx, jnp.take_along_axis(r, idx, axis=-1)


def _taken(p, x, idx):
    """The elements of x at the ordered positions idx (output layout): the
    forward of the value output, whose vjp is the backward."""
    axis = None if p.axis is None else _axis(p.axis, x.ndim, "axis")
    j = _rows(idx, axis).astype(jnp.int32)
    return _unrows(jnp.take_along_axis(_rows(x, axis), j, axis=-1), axis)


_AXIS = Attr(optional_int_attr, -1, "the axis to order along; None: the flattened input")
_TOPK_RET = ("value", "indices", "mask", "both")


def _topk_outputs(p):
    return ["output"] if p.ret_typ in ("indices", "mask") else ["output", "indices"]


def _topk_infer(p, s):
    if s[0] is None:
        return s, [None] * len(_topk_outputs(p))
    _, _, _, out = order_geometry(p, s[0], p.k, p.ret_typ == "mask")
    return s, [out] * len(_topk_outputs(p))


def _topk_type(p, t, n):
    d = t[0]
    return t, {"value": [d, _HIDDEN_INDEX], "both": [d, p.dtype], "indices": [p.dtype],
               "mask": [d]}[p.ret_typ]


def _topk_lower(p, ctx, x):
    _, _, k, _ = order_geometry(p, x.shape, p.k)
    axis, idx, vals = _order(p, x, k)
    if p.ret_typ == "mask":
        r = _rows(x, axis)
        hot = jnp.put_along_axis(jnp.zeros(r.shape, x.dtype), idx, 1, axis=-1, inplace=False)
        return _unrows(hot, axis).reshape(x.shape)
    idx = _unrows(idx, axis)
    if p.ret_typ == "indices":
        return _as(idx, p.dtype)
    vals = _unrows(vals, axis)
    return vals, _as(idx, _HIDDEN_INDEX if p.ret_typ == "value" else p.dtype)


_topk = register(OpDef(
    name="topk",
    attrs={"axis": _AXIS, "k": Attr(int_attr, 1, "how many to take; <= 0: all"),
           "ret_typ": Attr(choice_attr(*_TOPK_RET), "indices",
                           "value, indices, mask (1 at the top k) or both (value, indices)"),
           "is_ascend": Attr(bool_attr, False, "take the k smallest instead of the largest"),
           "dtype": Attr(_dtype_of(INDEX_DTYPES), "float32", "the dtype of the indices")},
    outputs=_topk_outputs, visible_outputs=lambda p: 2 if p.ret_typ == "both" else 1,
    lower=_topk_lower, infer_shape=_topk_infer, infer_type=_topk_type,
    category="opaque", flops=_sort_flops,
    samples=[Sample({"k": 2}, [(3, 5)]),
             Sample({"k": 2, "ret_typ": "value", "axis": 0}, [(4, 3)]),
             Sample({"k": 3, "ret_typ": "both", "is_ascend": True, "axis": 1}, [(2, 4, 3)]),
             Sample({"k": 2, "ret_typ": "mask", "axis": -1}, [(2, 3, 4)]),
             Sample({"k": 0, "ret_typ": "value", "axis": None}, [(2, 3)]),
             Sample({"k": 4, "ret_typ": "indices", "axis": None, "dtype": "int32"},
                    [(3, 3)])],
    doc="The k largest (is_ascend: smallest) elements along axis (None: of the flattened "
        "input), in order: their values, indices (in dtype, float32 by default), a mask "
        "of the input's shape with 1 at them, or both values and indices. Ties keep the "
        "lower index first. value/both differentiate (dy goes back to the positions "
        "taken); indices and mask have a zero gradient."))


def _scatter_back(p, ctx, og, ins, outs):
    """dx: dy put back at the positions taken (the indices output); reads
    the input's shape only."""
    return [_vjp_into(lambda v: _taken(p, v, outs[0]), ins[0].shape, og[0])]


def _scatter_infer(p, s):
    return s, [s[1]]


def _scatter_type(p, t, n):
    return t, [t[0]]  # dy's dtype is the input's (value output)


register_backward(_topk, reads_ograds=(0,), reads_inputs=(0,), reads_outputs=(1,),
                  inputs_for_shape_only=True, lower=_scatter_back, infer_shape=_scatter_infer,
                  infer_type=_scatter_type, flops=lambda p, ins, outs: numel(outs[0]))
_topk_backward_rule = _topk.gradient


def _topk_gradient(g, node, og):
    if node.params.ret_typ in ("indices", "mask"):
        return [None]  # MXNet's MakeZeroGradNodes
    return _topk_backward_rule(g, node, og)


_topk.gradient = _topk_gradient


def _sort_infer(p, s):
    if s[0] is None:
        return s, [None, None]
    _, _, _, out = order_geometry(p, s[0])
    return s, [out, out]


def _sort_lower(p, ctx, x):
    axis, idx, vals = _order(p, x, None)
    return _unrows(vals, axis), _as(_unrows(idx, axis), _HIDDEN_INDEX)


_sort = register(OpDef(
    name="sort",
    attrs={"axis": _AXIS, "is_ascend": Attr(bool_attr, True, "ascending (else descending)")},
    outputs=("output", "indices"), visible_outputs=1,
    lower=_sort_lower, infer_shape=_sort_infer,
    infer_type=lambda p, t, n: (t, [t[0], _HIDDEN_INDEX]),
    category="opaque", flops=_sort_flops,
    samples=[Sample({}, [(3, 5)]), Sample({"axis": 0, "is_ascend": False}, [(4, 3)]),
             Sample({"axis": None}, [(2, 3)]), Sample({"axis": 1}, [(2, 3, 2)])],
    doc="The input sorted along axis (None: flattened), ascending unless is_ascend is "
        "False. The gradient puts dy back where each element came from (reads the "
        "hidden indices output and the input's shape only)."))
# y = sort(x); dx[order[i]] = dy[i]
register_backward(_sort, reads_ograds=(0,), reads_inputs=(0,), reads_outputs=(1,),
                  inputs_for_shape_only=True, lower=_scatter_back, infer_shape=_scatter_infer,
                  infer_type=_scatter_type, flops=lambda p, ins, outs: numel(outs[0]))


def _argsort_lower(p, ctx, x):
    axis, idx, _ = _order(p, x, None)
    return _as(_unrows(idx, axis), p.dtype)


register(OpDef(
    name="argsort",
    attrs={"axis": _AXIS, "is_ascend": Attr(bool_attr, True, "ascending (else descending)"),
           "dtype": Attr(_dtype_of(INDEX_DTYPES), "float32", "the dtype of the indices")},
    lower=_argsort_lower, infer_shape=lambda p, s: (s, [None if s[0] is None else
                                                        order_geometry(p, s[0])[3]]),
    infer_type=lambda p, t, n: (t, [p.dtype]),
    category="opaque", flops=_sort_flops, gradient=_zero_gradient,
    samples=[Sample({}, [(3, 5)]), Sample({"axis": 0, "is_ascend": False}, [(4, 3)]),
             Sample({"axis": None, "dtype": "int32"}, [(2, 3)])],
    doc="The indices that sort the input along axis (None: flattened), in dtype (float32 "
        "by default). Ties keep the lower index first. Zero gradient."))


# --------------------------------------------------------------------------
# norm: the L1 or L2 norm over axes
# --------------------------------------------------------------------------
def _ord_attr(v) -> int:
    n = int_attr(v)
    if n not in (1, 2):
        raise ValueError(f"ord={n}: only 1 and 2 are supported (as MXNet)")
    return n


_ord_attr.choices = ("1", "2")
_NORM_OUT = ("float16", "float32", "float64", "int64", "int32", "int8")


def _optional_out_dtype(v):
    if v is None or (isinstance(v, str) and v.strip() in ("None", "none", "")):
        return None
    return _dtype_of(_NORM_OUT)(v)


_optional_out_dtype.choices = ("None",) + _NORM_OUT


def _norm_axes(p) -> Params:
    return Params(axis=p.axis, keepdims=p.keepdims, exclude=False)


def _norm_lower(p, ctx, x):
    q = _norm_axes(p)
    axes = reduce_axes(q, x.ndim)
    if p.ord == 1:
        y = jnp.sum(jnp.abs(x), axis=axes, keepdims=True)
    else:
        y = jnp.sqrt(jnp.sum(x * x, axis=axes, keepdims=True))
    y = y.reshape(reduce_shape(q, x.shape))
    return y if p.out_dtype is None else _as(y, p.out_dtype)


_norm = register(OpDef(
    name="norm",
    attrs={"ord": Attr(_ord_attr, 2, "1: sum of |x|; 2: sqrt of the sum of squares"),
           "axis": Attr(optional_shape_attr, None, "axes to reduce (int or tuple); None or "
                                                   "(): all, giving shape (1,)"),
           "out_dtype": Attr(_optional_out_dtype, None, "the output dtype; None: the "
                                                        "input's"),
           "keepdims": Attr(bool_attr, False, "keep reduced axes with size 1")},
    lower=_norm_lower,
    infer_shape=lambda p, s: (s, [None if s[0] is None else reduce_shape(_norm_axes(p),
                                                                         s[0])]),
    infer_type=lambda p, t, n: (t, [t[0] if p.out_dtype is None else p.out_dtype]),
    category="reduction", flops=lambda p, ins, outs: 2 * numel(ins[0]),
    per_sample=lambda p: bool(p.axis) and all(a > 0 for a in p.axis),
    samples=[Sample({}, [(3, 4)]), Sample({"ord": 1}, [(2, 3, 4)]),
             Sample({"axis": 1}, [(2, 3, 4)]),
             Sample({"ord": 1, "axis": (0, 2), "keepdims": True}, [(2, 3, 4)]),
             Sample({"axis": (-1, -2)}, [(2, 3, 4)]),
             Sample({"axis": -1, "out_dtype": "float32"}, [(3, 4)])],
    doc="The L1 (ord=1) or L2 (ord=2) norm over axis; with no axis over everything, "
        "shape (1,). The L2 norm over two axes is the Frobenius norm, as MXNet computes."))


def _norm_backward(p, ctx, og, ins, outs):
    x, y = ins[0], outs[0]
    keep = reduce_shape(Params(axis=p.axis, keepdims=True, exclude=False), x.shape)
    dy = og[0].reshape(keep).astype(x.dtype)
    if p.ord == 1:  # y = sum |x|; dx = dy sign(x)
        return [dy * jnp.sign(x)]
    return [dy * x / y.reshape(keep).astype(x.dtype)]  # y = |x|_2; dx = dy x / y


register_backward(_norm, reads_inputs=(0,), reads_outputs=(0,), lower=_norm_backward,
                  infer_shape=lambda p, s: (s, [s[1]]), infer_type=lambda p, t, n: (t, [t[1]]),
                  category="opaque", flops=lambda p, ins, outs: 3 * numel(outs[0]))
