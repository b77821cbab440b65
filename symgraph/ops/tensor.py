"""Tensor ops: copies, gradient stops, zeros, shape manipulation, casts."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import ShapeError
from .backward import register_backward
from .registry import (Attr, OpDef, Sample, bool_attr, count_attr, dtype_attr, int_attr, numel,
                       optional_int_attr, register, shape_attr, unify)
from .elementwise import INPLACE_FIRST, X, elementwise_flops, same_shape


# y = x; dx = dy
register(OpDef(name="identity", lower=lambda p, ctx, x: x, infer_shape=same_shape,
               per_sample=True,
               inplace=INPLACE_FIRST, category="injective", samples=X,
               aliases=("_copy",), gradient=lambda g, node, og: [og[0]]))

# y = x; no gradient flows back
register(OpDef(name="BlockGrad", lower=lambda p, ctx, x: jax.lax.stop_gradient(x),
               per_sample=True,
               infer_shape=same_shape, inplace=INPLACE_FIRST, category="injective",
               samples=X, aliases=("stop_gradient",),
               gradient=lambda g, node, og: [None]))

# y = zeros with x's shape; reads x's shape only
register(OpDef(name="zeros_like", lower=lambda p, ctx, x: jnp.zeros_like(x),
               shape_inputs=(0,), infer_shape=same_shape, category="elementwise", samples=X,
               gradient=lambda g, node, og: [None]))


# Several backward rules below need the *shape* (or dtype) of a forward input
# but none of its values; as with zeros_like, such a node takes the input as
# an argument and its comment says "reads x's shape only".
def _attrs_of(node) -> dict:
    return {k: v for k, v in node.attrs.items() if not k.startswith("__")}


def _axis(axis: int, ndim: int, what: str) -> int:
    """``axis`` normalised to [0, ndim); ShapeError if out of range."""
    if not -ndim <= axis < ndim:
        raise ShapeError(f"{what}={axis} is out of range for an input of rank {ndim}")
    return axis % ndim


def _zero_flops(p, in_shapes, out_shapes):
    return 0  # data movement only


# y = x on another device (nnvm's _CrossDeviceCopy). The placement pass
# (passes/place.py) inserts one on every edge between devices and its side
# table says where each runs; inside one program it is the identity, and the
# staged runner (parallel/placement.py) moves the value. The gradient is the
# copy back. No inplace: input and output live on different devices.
register(OpDef(name="_CrossDeviceCopy", lower=lambda p, ctx, x: x, infer_shape=same_shape,
               per_sample=True,
               category="opaque", samples=X, flops=_zero_flops,
               gradient=lambda g, node, og: [g.op("_CrossDeviceCopy", [og[0]])[0]]))


# --------------------------------------------------------------------------
# Reshape: MXNet's codes 0 (copy a dim), -1 (infer), -2 (copy the rest),
# -3 (merge two dims), -4 (split a dim in two); reverse matches from the right
# --------------------------------------------------------------------------
def reshape_codes_attr(v) -> tuple:
    codes = shape_attr(v)
    i, inferred = 0, 0
    while i < len(codes):
        c = codes[i]
        if c < -4:
            raise ValueError(f"{c} is not a Reshape code (codes are 0, -1, -2, -3, -4)")
        if c == -1:
            inferred += 1
        if c == -4:
            if i + 2 >= len(codes):
                raise ValueError("-4 must be followed by the two dimensions to split into, "
                                 "e.g. (-4, 2, -1)")
            d1, d2 = codes[i + 1], codes[i + 2]
            if d1 in (0, -2, -3, -4) or d2 in (0, -2, -3, -4) or d1 < -1 or d2 < -1:
                raise ValueError(f"-4 splits into two dimensions, positive or -1, got {d1}, {d2}")
            if d1 == d2 == -1:
                raise ValueError("the two dimensions after -4 cannot both be -1")
            i += 3
            continue
        i += 1
    if inferred > 1:
        raise ValueError(f"{codes} has {inferred} times -1; at most one dimension "
                         f"can be inferred")
    return codes


def _reshape_by_codes(shape, dshape, reverse: bool) -> tuple:
    src, codes = list(dshape), list(shape)
    if reverse:
        if -4 in codes:
            # MXNet reverses the code list too, so the split sizes would come
            # before their -4: the combination is unusable there as well
            raise ShapeError("-4 cannot be combined with reverse=True")
        src.reverse()
        codes.reverse()
    out, k, i, inferred = [], 0, 0, None
    while i < len(codes):
        c = codes[i]
        if c in (0, -3, -4) and k + (c == -3) >= len(src):
            side = "right" if reverse else "left"
            raise ShapeError(f"code {c} of shape={tuple(shape)} reads input dimension "
                             f"{k + (c == -3)} (counted from the {side}), but the input "
                             f"{tuple(dshape)} has {len(src)} dimensions")
        if c == 0:
            out.append(src[k])
            k += 1
        elif c == -1:
            # the inferred dim sits at its *output* position (MXNet indexes by the
            # code position, which goes wrong after -2/-3/-4)
            inferred = len(out)
            out.append(1)
            k += 1
        elif c == -2:
            out.extend(src[k:])
            k = len(src)
        elif c == -3:
            out.append(src[k] * src[k + 1])
            k += 2
        elif c == -4:
            d0, (d1, d2) = src[k], codes[i + 1:i + 3]
            d1 = d0 // d2 if d1 == -1 else d1
            d2 = d0 // d1 if d2 == -1 else d2
            if d1 * d2 != d0:
                raise ShapeError(f"-4 splits dimension {d0} of input {tuple(dshape)} into "
                                 f"{d1} x {d2}, which does not multiply to {d0}")
            out += [d1, d2]
            k += 1
            i += 2
        else:
            out.append(c)
            k += 1
        i += 1
    if inferred is not None:
        rest = numel(out)
        if rest == 0 or numel(dshape) % rest:
            raise ShapeError(f"cannot infer the -1 of shape={tuple(shape)}: input "
                             f"{tuple(dshape)} has {numel(dshape)} elements, not a "
                             f"multiple of {rest}")
        out[inferred] = numel(dshape) // rest
    if reverse:
        out.reverse()
    return tuple(out)


def reshape_shape(p, dshape) -> tuple:
    """Reshape's output shape for input ``dshape``, by MXNet's rules."""
    dshape = tuple(dshape)
    if p.shape:
        out = _reshape_by_codes(p.shape, dshape, p.reverse)
        what = f"shape={p.shape}" + (" with reverse=True" if p.reverse else "")
    elif p.target_shape:
        # legacy: 0 marks the one inferred dim; keep_highest keeps dim 0
        out = list(p.target_shape)
        if p.keep_highest:
            out[0] = dshape[0]
        zeros = [i for i in range(1 if p.keep_highest else 0, len(out)) if out[i] == 0]
        if len(zeros) > 1:
            raise ShapeError(f"target_shape={p.target_shape} has more than one 0 to infer")
        if zeros:
            out[zeros[0]] = 1
            out[zeros[0]] = numel(dshape) // max(numel(out), 1)
        out = tuple(out)
        what = f"target_shape={p.target_shape}"
    else:
        raise ShapeError("Reshape needs the shape attribute, e.g. shape=(0, -1)")
    if numel(out) != numel(dshape):
        raise ShapeError(f"cannot reshape input {dshape} ({numel(dshape)} elements) with "
                         f"{what}: that gives {out} ({numel(out)} elements)")
    return out


def _reshape_infer(p, s):
    return s, [None if s[0] is None else reshape_shape(p, s[0])]


# y = reshape(x); dx = reshape_like(dy, x)  (reads x's shape only)
def _reshape_like_gradient(g, node, og):
    return [g.op("reshape_like", [og[0], node.inputs[0]])[0]]


register(OpDef(
    name="Reshape",
    # dim 0 kept (code 0 first, matched from the left): a slice reshapes alike
    per_sample=lambda p: p.shape[:1] == (0,) and not p.reverse,
    attrs={"shape": Attr(reshape_codes_attr, (), "new shape, with codes 0, -1, -2, -3, -4"),
           "reverse": Attr(bool_attr, False, "match the codes from the right"),
           "target_shape": Attr(shape_attr, (), "legacy: new shape, 0 = inferred"),
           "keep_highest": Attr(bool_attr, False, "legacy: keep dim 0 of the input")},
    lower=lambda p, ctx, x: x.reshape(reshape_shape(p, x.shape)), infer_shape=_reshape_infer,
    inplace=INPLACE_FIRST, category="injective", flops=_zero_flops,
    gradient=_reshape_like_gradient, aliases=("reshape",),
    samples=[Sample({"shape": (4, 6)}, [(2, 3, 4)]),
             Sample({"shape": (0, -1)}, [(2, 3, 4)]),
             Sample({"shape": (-2, 1)}, [(2, 3)]),
             Sample({"shape": (-3, 0)}, [(2, 3, 4)]),
             Sample({"shape": (-4, 2, -1, -2)}, [(6, 5)]),
             Sample({"shape": (-1, 0), "reverse": True}, [(2, 3, 4)]),
             Sample({"target_shape": (0, 0), "keep_highest": True}, [(2, 3, 4)]),
             Sample({"target_shape": (3, 0)}, [(2, 3, 4)])],
    doc="Reshape with MXNet's codes: 0 copies an input dim, -1 infers one dim, -2 "
        "copies the remaining dims, -3 merges two dims, -4 a b splits a dim into a x b; "
        "reverse=True matches codes from the right."))


# --------------------------------------------------------------------------
# reshape_like: lhs reshaped to (part of) rhs's shape
# --------------------------------------------------------------------------
def _span(begin, end, ndim, what):
    b = 0 if begin is None else begin + (ndim if begin < 0 else 0)
    e = ndim if end is None else end + (ndim if end < 0 else 0)
    if not 0 <= b <= e <= ndim:
        raise ShapeError(f"{what} range [{begin}, {end}) is out of range for rank {ndim}")
    return b, e


def reshape_like_shape(p, lhs, rhs) -> tuple:
    lb, le = _span(p.lhs_begin, p.lhs_end, len(lhs), "lhs")
    rb, re = _span(p.rhs_begin, p.rhs_end, len(rhs), "rhs")
    out = tuple(lhs[:lb]) + tuple(rhs[rb:re]) + tuple(lhs[le:])
    if numel(out) != numel(lhs):
        raise ShapeError(f"cannot reshape lhs {tuple(lhs)} like rhs {tuple(rhs)}: that gives "
                         f"{out}, which has {numel(out)} elements, not {numel(lhs)}")
    return out


def _reshape_like_infer(p, s):
    lhs, rhs = s
    if lhs is None or rhs is None:
        return s, [None]
    return s, [reshape_like_shape(p, lhs, rhs)]


_SPAN = {k: Attr(optional_int_attr, None, "sub-range of the shape (default: all)")
         for k in ("lhs_begin", "lhs_end", "rhs_begin", "rhs_end")}
# y = reshape(lhs, like rhs); dlhs = reshape_like(dy, lhs); rhs gets no gradient
# (reads rhs's shape only)
register(OpDef(
    name="reshape_like", arguments=("lhs", "rhs"), attrs=_SPAN,
    lower=lambda p, ctx, a, b: a.reshape(reshape_like_shape(p, a.shape, b.shape)),
    infer_shape=_reshape_like_infer, inplace=INPLACE_FIRST, shape_inputs=(1,),
    category="injective", flops=_zero_flops,
    gradient=lambda g, node, og: [
        g.op("reshape_like", [og[0], node.inputs[0]])[0] if g.need[0] else None, None],
    samples=[Sample({}, [(2, 6), (3, 4)]),
             Sample({"lhs_begin": 1, "rhs_begin": 0, "rhs_end": 2}, [(5, 6), (2, 3, 7)])],
    doc="lhs reshaped so that lhs.shape[lhs_begin:lhs_end] becomes "
        "rhs.shape[rhs_begin:rhs_end]; reads rhs's shape only."))


# --------------------------------------------------------------------------
# Flatten: (d0, d1, ...) -> (d0, d1 * ...)
# --------------------------------------------------------------------------
def _flatten_infer(p, s):
    d = s[0]
    if d is None:
        return s, [None]
    if len(d) < 1:
        raise ShapeError(f"Flatten needs an input of rank >= 1, got {tuple(d)}")
    return s, [(d[0], numel(d[1:]))]


# y = flatten(x); dx = reshape_like(dy, x)  (reads x's shape only)
register(OpDef(
    name="Flatten", lower=lambda p, ctx, x: x.reshape(x.shape[0], -1),
    per_sample=True,
    infer_shape=_flatten_infer, inplace=INPLACE_FIRST, category="injective",
    flops=_zero_flops, gradient=_reshape_like_gradient, aliases=("flatten",),
    samples=[Sample({}, [(2, 3, 4)]), Sample({}, [(5,)])],
    doc="Collapses every dimension but the first: (d0, d1, ...) -> (d0, d1*...)."))


# --------------------------------------------------------------------------
# transpose: permute axes (empty = reverse them)
# --------------------------------------------------------------------------
def _perm(p, ndim) -> tuple:
    if not p.axes:
        return tuple(reversed(range(ndim)))
    if len(p.axes) != ndim:
        raise ShapeError(f"axes={p.axes} has {len(p.axes)} entries, the input has rank {ndim}")
    perm = tuple(a % ndim if -ndim <= a < ndim else a for a in p.axes)
    if sorted(perm) != list(range(ndim)):
        raise ShapeError(f"axes={p.axes} is not a permutation of the axes 0..{ndim - 1}")
    return perm


def _transpose_infer(p, s):
    d = s[0]
    if d is None:
        return s, [None]
    return s, [tuple(d[i] for i in _perm(p, len(d)))]


# y = transpose(x, axes); dx = transpose(dy, inverse(axes))
def _transpose_gradient(g, node, og):
    axes = node.params.axes
    attrs = {}
    if axes:
        n = len(axes)
        attrs["axes"] = tuple(int(i) for i in np.argsort([a % n for a in axes]))
    return [g.op("transpose", [og[0]], attrs)[0]]


register(OpDef(
    name="transpose", attrs={"axes": Attr(shape_attr, (), "the permutation; () reverses")},
    per_sample=lambda p: p.axes[:1] == (0,),
    lower=lambda p, ctx, x: jnp.transpose(x, _perm(p, x.ndim)), infer_shape=_transpose_infer,
    category="injective", flops=_zero_flops, gradient=_transpose_gradient,
    samples=[Sample({}, [(2, 3, 4)]), Sample({"axes": (0, 2, 1)}, [(2, 3, 4)]),
             Sample({"axes": (1, -1, 0)}, [(2, 3, 4)])],
    doc="Permutes the axes; axes=() reverses them."))


# --------------------------------------------------------------------------
# expand_dims: insert an axis of size 1
# --------------------------------------------------------------------------
def _expand_axis(axis, ndim) -> int:
    if not -ndim - 1 <= axis <= ndim:
        raise ShapeError(f"axis={axis} is out of range for expand_dims of an input of "
                         f"rank {ndim} (valid: {-ndim - 1}..{ndim})")
    return axis % (ndim + 1)


def _expand_dims_infer(p, s):
    d = s[0]
    if d is None:
        return s, [None]
    a = _expand_axis(p.axis, len(d))
    return s, [tuple(d[:a]) + (1,) + tuple(d[a:])]


_expand_dims = register(OpDef(
    name="expand_dims", attrs={"axis": Attr(int_attr, doc="where the new axis goes")},
    per_sample=lambda p: p.axis > 0,
    lower=lambda p, ctx, x: jnp.expand_dims(x, _expand_axis(p.axis, x.ndim)),
    infer_shape=_expand_dims_infer, inplace=INPLACE_FIRST, category="injective",
    flops=_zero_flops,
    samples=[Sample({"axis": 0}, [(2, 3)]), Sample({"axis": 2}, [(2, 3)]),
             Sample({"axis": -1}, [(2, 3)]), Sample({"axis": -3}, [(2, 3)])],
    doc="Inserts an axis of size 1 at position axis (negative counts from the end)."))


def _squeeze_axis(p, ndim_out) -> int:
    return p.axis % ndim_out  # the output has one more axis than the input


def _expand_dims_backward_infer(p, s):
    d = s[0]
    if d is None:
        return s, [None]
    a = _squeeze_axis(p, len(d))
    return s, [tuple(d[:a]) + tuple(d[a + 1:])]


# y = expand_dims(x, axis); dx = squeeze(dy, axis) -- reads only dy
register_backward(
    _expand_dims, reads_inputs=(),
    lower=lambda p, ctx, og, ins, outs: [jnp.squeeze(og[0], _squeeze_axis(p, og[0].ndim))],
    infer_shape=_expand_dims_backward_infer, inplace=[(0, 0)], category="injective")


# --------------------------------------------------------------------------
# Concat: join along dim
# --------------------------------------------------------------------------
def _concat_infer(p, s):
    if len(s) != p.num_args:
        raise ShapeError(f"expected {p.num_args} inputs (num_args), got {len(s)}")
    known = [(i, tuple(x)) for i, x in enumerate(s) if x is not None]
    if not known:
        return s, [None]
    i0, first = known[0]
    nd = len(first)
    if nd == 0:
        raise ShapeError("Concat needs inputs of rank >= 1")
    dim = _axis(p.dim, nd, "dim")
    for i, x in known[1:]:
        if len(x) != nd or any(a != b for k, (a, b) in enumerate(zip(x, first)) if k != dim):
            raise ShapeError(f"input arg{i} has shape {x} but arg{i0} has {first}; all "
                             f"dimensions except dim={p.dim} must match")
    if len(known) < len(s):
        return s, [None]
    out = list(first)
    out[dim] = sum(x[dim] for _, x in known)
    return s, [tuple(out)]


_concat = register(OpDef(
    name="Concat",
    per_sample=lambda p: p.dim > 0,  # a negative dim may name axis 0
    attrs={"num_args": Attr(count_attr, doc="number of inputs"),
           "dim": Attr(int_attr, 1, "the axis to join along")},
    arguments=lambda p: [f"arg{i}" for i in range(p.num_args)],
    lower=lambda p, ctx, *xs: jnp.concatenate(xs, axis=p.dim), infer_shape=_concat_infer,
    category="injective", flops=_zero_flops, aliases=("concat",),
    samples=[Sample({"num_args": 3}, [(2, 1, 3), (2, 4, 3), (2, 2, 3)]),
             Sample({"num_args": 2, "dim": 0}, [(1, 3), (2, 3)]),
             Sample({"num_args": 2, "dim": -1}, [(2, 3, 1), (2, 3, 2)]),
             Sample({"num_args": 1}, [(2, 3)]),
             Sample({"num_args": 2}, [(2, 1, 3, 2), (2, 3, 3, 2)]),
             Sample({"num_args": 2, "dim": 2}, [(1, 2, 3, 2), (1, 2, 1, 2)])],
    doc="Joins num_args inputs along dim; the other dimensions must match."))


# y = concat(x_i); dx_i = the slice of dy at x_i's offset  (reads the x_i's shapes only)
def _concat_backward(p, ctx, og, ins, outs):
    dim = p.dim % og[0].ndim
    bounds = np.cumsum([x.shape[dim] for x in ins])[:-1]
    return jnp.split(og[0], [int(b) for b in bounds], axis=dim)


register_backward(_concat, inputs_for_shape_only=True, lower=_concat_backward)


# --------------------------------------------------------------------------
# SliceChannel / split: num_outputs equal parts along axis
# --------------------------------------------------------------------------
def _slice_channel_infer(p, s):
    d = s[0]
    if d is None:
        return s, [None] * p.num_outputs
    a = _axis(p.axis, len(d), "axis")
    n = d[a]
    if n % p.num_outputs:
        raise ShapeError(f"dimension {a} of input {tuple(d)} has size {n}, which "
                         f"num_outputs={p.num_outputs} does not divide")
    if p.squeeze_axis and n != p.num_outputs:
        raise ShapeError(f"squeeze_axis=True needs dimension {a} of input {tuple(d)} to "
                         f"equal num_outputs={p.num_outputs}")
    part = list(d)
    part[a] = n // p.num_outputs
    if p.squeeze_axis:
        del part[a]
    return s, [tuple(part)] * p.num_outputs


def _slice_channel_lower(p, ctx, x):
    a = p.axis % x.ndim
    parts = jnp.split(x, p.num_outputs, axis=a)
    return tuple(jnp.squeeze(y, a) for y in parts) if p.squeeze_axis else tuple(parts)


# y_i = split(x)_i; dx = concat(dy_i) -- an output nobody read gives zeros
def _slice_channel_gradient(g, node, og):
    p = node.params
    parts = [g.ograd_or_zeros(node, og, i) for i in range(p.num_outputs)]
    if p.squeeze_axis:
        parts = [g.op("expand_dims", [e], {"axis": p.axis}, suffix=f"backward_unsqueeze{i}")[0]
                 for i, e in enumerate(parts)]
    return [g.op("Concat", parts, {"num_args": p.num_outputs, "dim": p.axis})[0]]


register(OpDef(
    name="SliceChannel",
    per_sample=lambda p: p.axis > 0,
    attrs={"num_outputs": Attr(count_attr, doc="number of equal parts"),
           "axis": Attr(int_attr, 1, "the axis to split"),
           "squeeze_axis": Attr(bool_attr, False, "drop the split axis (its size must "
                                                  "equal num_outputs)")},
    outputs=lambda p: [f"output{i}" for i in range(p.num_outputs)],
    lower=_slice_channel_lower, infer_shape=_slice_channel_infer, category="injective",
    flops=_zero_flops, gradient=_slice_channel_gradient, aliases=("split",),
    samples=[Sample({"num_outputs": 2}, [(2, 4, 3)]),
             Sample({"num_outputs": 3, "axis": 0}, [(3, 2)]),
             Sample({"num_outputs": 3, "axis": -1, "squeeze_axis": True}, [(2, 2, 3)]),
             Sample({"num_outputs": 1}, [(2, 3)])],
    doc="Splits the input into num_outputs equal parts along axis."))


# --------------------------------------------------------------------------
# slice_axis: x[..., begin:end, ...] along one axis
# --------------------------------------------------------------------------
def slice_axis_range(p, shape) -> tuple:
    """(axis, begin, end) normalised by MXNet's rules; ShapeError if empty or out of range."""
    a = _axis(p.axis, len(shape), "axis")
    n = shape[a]
    b = p.begin + n if p.begin < 0 else p.begin
    e = n if p.end is None else (p.end + n if p.end < 0 else p.end)
    if not 0 <= b < e <= n:
        raise ShapeError(f"slice [{p.begin}, {p.end}) of axis {p.axis} is empty or out of "
                         f"range for input {tuple(shape)} (size {n})")
    return a, b, e


def _slice_axis_infer(p, s):
    d = s[0]
    if d is None:
        return s, [None]
    a, b, e = slice_axis_range(p, d)
    out = list(d)
    out[a] = e - b
    return s, [tuple(out)]


def _slice_axis_lower(p, ctx, x):
    a, b, e = slice_axis_range(p, x.shape)
    return jax.lax.slice_in_dim(x, b, e, axis=a)


_slice_axis = register(OpDef(
    name="slice_axis",
    per_sample=lambda p: p.axis > 0,
    attrs={"axis": Attr(int_attr, doc="the axis to slice"),
           "begin": Attr(int_attr, doc="first index (negative counts from the end)"),
           "end": Attr(optional_int_attr, doc="one past the last index; None = the end")},
    lower=_slice_axis_lower, infer_shape=_slice_axis_infer, category="injective",
    flops=_zero_flops,
    samples=[Sample({"axis": 1, "begin": 1, "end": 3}, [(2, 4)]),
             Sample({"axis": 0, "begin": -2, "end": None}, [(3, 2)]),
             Sample({"axis": -1, "begin": 0, "end": -1}, [(2, 3, 4)])],
    doc="Slices [begin, end) along axis; end=None slices to the end."))


# y = x[begin:end] along axis; dx = dy padded with zeros  (reads x's shape only)
def _slice_axis_backward(p, ctx, og, ins, outs):
    a, b, e = slice_axis_range(p, ins[0].shape)
    pads = [(0, 0)] * og[0].ndim
    pads[a] = (b, ins[0].shape[a] - e)
    return [jnp.pad(og[0], pads)]


register_backward(_slice_axis, reads_inputs=(0,), inputs_for_shape_only=True,
                  lower=_slice_axis_backward)


# --------------------------------------------------------------------------
# Cast: change the dtype
# --------------------------------------------------------------------------
CAST_DTYPES = ("float16", "bfloat16", "float32", "float64", "uint8", "int8", "int32",
               "int64", "bool")


def _cast_dtype(v) -> str:
    t = dtype_attr(v)
    if t not in CAST_DTYPES:
        raise ValueError(f"expected one of {', '.join(CAST_DTYPES)}, got {v!r}")
    return t


_cast_dtype.choices = CAST_DTYPES

_cast = register(OpDef(
    name="Cast", attrs={"dtype": Attr(_cast_dtype, doc="the output dtype")},
    lower=lambda p, ctx, x: x.astype(p.dtype), infer_shape=same_shape,
    infer_type=lambda p, t, n: (t, [p.dtype]), category="elementwise",
    flops=elementwise_flops, family="shape", aliases=("cast",),
    samples=[Sample({"dtype": "float64"}, [(3, 4)]),
             # float64 -> float32: the head gradient is float32, the input's
             # gradient float64 again (the registry test feeds heads of the
             # outputs' dtypes)
             Sample({"dtype": "float32"}, [(3, 4)]), Sample({"dtype": "float32"}, [(2, 3, 2)]),
             # an integer output has no gradient
             Sample({"dtype": "int32"}, [(3, 4)], low=-5, high=5, grad=False)],
    doc="Casts to dtype."))


# y = cast(x, t); dx = cast(dy, x.dtype)  (reads x's dtype only)
register_backward(
    _cast, reads_inputs=(0,), inputs_for_shape_only=True,
    lower=lambda p, ctx, og, ins, outs: [og[0].astype(ins[0].dtype)],
    infer_shape=lambda p, s: (s, [unify(s)]), infer_type=lambda p, t, n: (t, [t[1]]),
    flops=elementwise_flops)
