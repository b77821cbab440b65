"""References for the glue ops of Gluon exports (symgraph/ops/glue.py) and
the equal-shape binary ops beside them (_maximum, _minimum, _power,
_rpower_scalar).

Plain NumPy, written from MXNet 1.9.1's documented semantics and apart from
the lowerings, so a wrong lowering cannot agree with itself: slices are
Python's (whose None and clamping rules are MXNet's), take truncates float
indices and clips or wraps them, squeeze keeps one dimension, shapes and
sizes are int64.
"""
import math

import numpy as np

from op_reference_tensor import registrar

REFERENCE_GLUE = {}
ref = registrar(REFERENCE_GLUE)


ref("_maximum")(lambda p, a, b: np.maximum(a, b))
ref("_minimum")(lambda p, a, b: np.minimum(a, b))
ref("_power")(lambda p, a, b: np.power(a, b))
ref("_rpower_scalar")(lambda p, x: np.power(p["scalar"], x))


@ref("slice")
def slice_(p, x):
    begin, end = p["begin"], p["end"]
    step = p.get("step") or (None,) * len(begin)
    return x[tuple(slice(b, e, s) for b, e, s in zip(begin, end, step))]


@ref("squeeze")
def squeeze(p, x):
    axis = p.get("axis")
    y = np.squeeze(x, axis=None if axis is None else tuple(axis))
    return y.reshape(1) if y.ndim == 0 else y  # MXNet keeps one dimension


@ref("broadcast_to")
def broadcast_to(p, x):
    return np.broadcast_to(x, tuple(d if t == 0 else t for d, t in zip(x.shape, p["shape"])))


@ref("broadcast_axis")
def broadcast_axis(p, x):
    shape = list(x.shape)
    for a, n in zip(p.get("axis", ()), p.get("size", ())):
        shape[a] = n
    return np.broadcast_to(x, tuple(shape))


@ref("broadcast_like")
def broadcast_like(p, a, b):
    la, ra = p.get("lhs_axes"), p.get("rhs_axes")
    if la is None or ra is None:
        return np.broadcast_to(a, b.shape)
    shape = list(a.shape)
    for i, j in zip(la, ra):
        shape[i] = b.shape[j]
    return np.broadcast_to(a, tuple(shape))


@ref("where")
def where(p, c, x, y):
    if c.ndim != x.ndim:  # 1-D: chooses rows
        c = c.reshape(c.shape + (1,) * (x.ndim - 1))
    return np.where(c != 0, x, y)


def take_indices(mode, idx, n):
    """MXNet's index rule: truncate toward zero, then clip or wrap."""
    j = np.trunc(idx).astype(np.int64)
    return np.clip(j, 0, n - 1) if mode == "clip" else np.mod(j, n)


@ref("take")
def take(p, a, idx):
    axis = p.get("axis", 0)
    return np.take(a, take_indices(p.get("mode", "clip"), idx, a.shape[axis]), axis=axis)


ref("stack")(lambda p, *xs: np.stack(xs, axis=p.get("axis", 0)))
ref("tile")(lambda p, x: np.tile(x, tuple(p["reps"])))
ref("repeat")(lambda p, x: np.repeat(x, p["repeats"], axis=p.get("axis")))
ref("reverse")(lambda p, x: np.flip(x, axis=tuple(p["axis"])))
ref("SwapAxis")(lambda p, x: np.swapaxes(x, p.get("dim1", 0), p.get("dim2", 0)))
ref("shape_array")(lambda p, x: np.array(x.shape, dtype=np.int64))
ref("size_array")(lambda p, x: np.array([x.size], dtype=np.int64))
ref("ones_like")(lambda p, x: np.ones_like(x))
ref("_zeros")(lambda p: np.zeros(p["shape"], dtype=p.get("dtype", "float32")))
ref("_ones")(lambda p: np.ones(p["shape"], dtype=p.get("dtype", "float32")))
ref("_full")(lambda p: np.full(p["shape"], p["value"], dtype=p.get("dtype", "float32")))


@ref("_arange")
def arange(p):
    start, stop = p["start"], p.get("stop")
    if stop is None:
        start, stop = 0.0, start
    step, repeat = p.get("step", 1.0), p.get("repeat", 1)
    dtype = np.dtype(p.get("dtype", "float32"))
    n = math.ceil((stop - start) / step)
    # MXNet casts start and step to the dtype, then start + k * step
    values = np.asarray(start).astype(dtype) + np.arange(n).astype(dtype) * \
        np.asarray(step).astype(dtype)
    return np.repeat(values.astype(dtype), repeat)
