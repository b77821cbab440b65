"""References for the ops of MXNet's ONNX exporter set that symgraph gained
beside it (tests/test_mxnet_op_set.py lists the set): broadcast_mod,
_random_uniform_like, the transformer contrib ops (_contrib_div_sqrt_dim,
_contrib_interleaved_matmul_selfatt_qk/_valatt), slice_like, _split_v2,
_contrib_arange_like and _contrib_box_decode.

Plain NumPy, written from MXNet 1.9.1's operator source (mshadow_op.h's mod,
transformer.cc's strided GEMMs read index by index, matrix_op-inl.h's
SliceLike and Split shapes, init_op.h's range_fwd, bounding_box-inl.h's
box_decode kernel) and apart from the lowerings, so a wrong lowering cannot
agree with itself.
"""
import math

import numpy as np

from op_reference_tensor import registrar

REFERENCE_ONNX = {}
ref = registrar(REFERENCE_ONNX)


def _get(p, k, default):
    v = p.get(k, default)
    return default if v is None else v


# --------------------------------------------------------------------------
# broadcast_mod: mshadow_op::mod, branch by branch in double
# --------------------------------------------------------------------------
def mx_mod(a: float, b: float) -> float:
    a, b = float(a), float(b)
    if b == 0:
        return 0.0
    if b < 0:
        if a < 0:
            return -math.fmod(-a, -b)
        r = math.fmod(a, -b)
        return r + (b if r != 0 else 0.0)
    if a < 0:
        r = math.fmod(-a, b)
        return -r + (b if r != 0 else 0.0)
    return math.fmod(a, b)


@ref("broadcast_mod")
def broadcast_mod(p, a, b):
    a2, b2 = np.broadcast_arrays(a, b)
    out = np.array([mx_mod(x, y) for x, y in zip(a2.ravel(), b2.ravel())])
    return out.reshape(a2.shape).astype(np.result_type(a, b))


# --------------------------------------------------------------------------
# _random_uniform_like: shape and dtype only (the values are checked by their
# range and moments in tests/test_onnx_set_ops.py)
# --------------------------------------------------------------------------
ref("_random_uniform_like")(lambda p, x: np.zeros_like(x))


# --------------------------------------------------------------------------
# transformer.cc: the interleaved projections (L, B, heads * 3 * D), the
# attention batch b * heads + h
# --------------------------------------------------------------------------
ref("_contrib_div_sqrt_dim")(lambda p, x: x / math.sqrt(x.shape[-1]))


def _qkv(p, x, b, h, which, i):
    """Part ``which`` (0 q, 1 k, 2 v) of head h of sequence b at step i: the
    D values at offset (h * 3 + which) * D of x[i, b] (MXNet's strides)."""
    heads = p["heads"]
    d = x.shape[2] // (3 * heads)
    start = (h * 3 + which) * d
    return x[i, b, start:start + d]


@ref("_contrib_interleaved_matmul_selfatt_qk")
def selfatt_qk(p, x):
    length, batch, e3 = x.shape
    heads = p["heads"]
    d = e3 // (3 * heads)
    out = np.zeros((batch * heads, length, length), x.dtype)
    for b in range(batch):
        for h in range(heads):
            for i in range(length):
                for j in range(length):
                    out[b * heads + h, i, j] = (_qkv(p, x, b, h, 0, i)
                                                @ _qkv(p, x, b, h, 1, j)) / math.sqrt(d)
    return out


@ref("_contrib_interleaved_matmul_selfatt_valatt")
def selfatt_valatt(p, x, att):
    length, batch, e3 = x.shape
    heads = p["heads"]
    d = e3 // (3 * heads)
    out = np.zeros((length, batch, heads * d), x.dtype)
    for b in range(batch):
        for h in range(heads):
            for i in range(length):
                acc = np.zeros(d, x.dtype)
                for j in range(length):
                    acc += att[b * heads + h, i, j] * _qkv(p, x, b, h, 2, j)
                out[i, b, h * d:(h + 1) * d] = acc
    return out


# --------------------------------------------------------------------------
# slice_like, _split_v2, _contrib_arange_like
# --------------------------------------------------------------------------
@ref("slice_like")
def slice_like(p, x, like):
    axes = tuple(_get(p, "axes", ()))
    axes = range(x.ndim) if not axes else [a % x.ndim for a in axes]
    index = [slice(None)] * x.ndim
    for a in axes:
        index[a] = slice(0, like.shape[a])
    return x[tuple(index)]


@ref("_split_v2")
def split_v2(p, x):
    axis = _get(p, "axis", 1) % x.ndim
    n = x.shape[axis]
    sections = _get(p, "sections", 0)
    if sections > 0:
        parts = np.array_split(x, sections, axis=axis)  # the first n % sections one longer
    else:
        idx = list(p["indices"])
        parts = [np.take(x, range(b, e), axis=axis) for b, e in zip(idx, idx[1:] + [n])]
    if _get(p, "squeeze_axis", False):
        parts = [np.squeeze(q, axis) for q in parts]
    return tuple(parts)


@ref("_contrib_arange_like")
def arange_like(p, x):
    axis = p.get("axis")
    shape = x.shape if axis is None else (x.shape[axis],)
    start, step, repeat = _get(p, "start", 0.0), _get(p, "step", 1.0), _get(p, "repeat", 1)
    i = np.arange(int(np.prod(shape))) // repeat
    # range_fwd: start + (i / repeat) * step with start and step cast to the dtype
    s0, s1 = np.asarray(start).astype(x.dtype), np.asarray(step).astype(x.dtype)
    return (s0 + i.astype(x.dtype) * s1).astype(x.dtype).reshape(shape)


# --------------------------------------------------------------------------
# _contrib_box_decode: the kernel, box by box
# --------------------------------------------------------------------------
@ref("_contrib_box_decode")
def box_decode(p, x, anchors):
    std = [_get(p, f"std{k}", 1.0) for k in range(4)]
    clip, fmt = _get(p, "clip", -1.0), _get(p, "format", "center")
    a = anchors.reshape(-1, 4)
    out = np.zeros_like(x)
    for b in range(x.shape[0]):
        for n in range(x.shape[1]):
            ax, ay, aw, ah = a[n]
            if fmt == "corner":
                aw, ah = aw - ax, ah - ay
                ax, ay = ax + aw * 0.5, ay + ah * 0.5
            dx, dy, dw, dh = x[b, n] * std
            if clip > 0:
                dw, dh = min(dw, clip), min(dh, clip)
            ox, oy = dx * aw + ax, dy * ah + ay
            ow, oh = math.exp(dw) * aw * 0.5, math.exp(dh) * ah * 0.5
            out[b, n] = (ox - ow, oy - oh, ox + ow, oy + oh)
    return out
