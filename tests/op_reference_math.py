"""References for the math, comparison, indexing, ordering, sequence and
sampling ops (symgraph/ops/mathops.py, indexing.py, ordering.py,
sequence.py, sampling.py).

Plain NumPy (and scipy-free math), written from MXNet 1.9.1's documented
semantics and kernels (mshadow_op.h, indexing_op.h, ordering_op-inl.h,
sequence_*-inl.h), element by element or row by row where that is how
MXNet's kernel reads, and apart from the lowerings: round halves away
from zero, rint takes the floor unless the ceiling is strictly nearer,
comparisons give 0/1 in the input's dtype, float indices truncate toward
zero, ties in ordering keep the lower index first. The random ops have no
deterministic reference: REFERENCE_MATH gives their shape and dtype only
(tests/test_ops.py skips the values of ops that draw).
"""
import math

import numpy as np

from op_reference_tensor import registrar

REFERENCE_MATH = {}
ref = registrar(REFERENCE_MATH)


def _get(p, k, default=None):
    v = p.get(k, default)
    return default if v is None and default is not None else v


def _elementwise(fn):
    """fn applied to each element as a Python float, in x's dtype."""
    def reference(p, x):
        flat = [fn(float(v)) for v in np.asarray(x).ravel()]
        return np.array(flat, dtype=np.float64).reshape(x.shape).astype(x.dtype)
    return reference


# --------------------------------------------------------------------------
# unary math
# --------------------------------------------------------------------------
def c_round(v):  # C's round: halves away from zero
    t = math.trunc(v)
    return t + math.copysign(1.0, v) if abs(v - t) >= 0.5 else float(t)


def mxnet_rint(v):
    lo, hi = math.floor(v), math.ceil(v)
    return float(lo if v - lo <= hi - v else hi)


ref("floor")(_elementwise(math.floor))
ref("ceil")(_elementwise(math.ceil))
ref("trunc")(_elementwise(math.trunc))
ref("round")(_elementwise(c_round))
ref("rint")(_elementwise(mxnet_rint))
ref("sign")(_elementwise(lambda v: (v > 0) - (v < 0)))
ref("logical_not")(_elementwise(lambda v: 1.0 if v == 0 else 0.0))


def _same(fn):
    """fn(x) in x's dtype (MXNet computes in the input's type)."""
    def reference(p, x):
        with np.errstate(divide="ignore", invalid="ignore"):  # MXNet's inf and NaN
            return np.asarray(fn(x)).astype(x.dtype)
    return reference


ref("reciprocal")(_same(lambda x: 1.0 / x))
ref("rsqrt")(_same(lambda x: 1.0 / np.sqrt(x)))
ref("erf")(_elementwise(math.erf))
ref("sin")(_same(np.sin))
ref("cos")(_same(np.cos))
ref("tan")(_same(np.tan))
ref("arcsin")(_same(np.arcsin))
ref("arccos")(_same(np.arccos))
ref("arctan")(_same(np.arctan))
ref("sinh")(_same(np.sinh))
ref("cosh")(_same(np.cosh))
ref("log2")(_same(np.log2))
ref("log10")(_same(np.log10))
ref("log1p")(_same(np.log1p))
ref("expm1")(_same(np.expm1))
ref("softsign")(_same(lambda x: x / (1 + np.abs(x))))


@ref("hard_sigmoid")
def hard_sigmoid(p, x):
    # alpha and beta are MXNet's real_t (float32)
    a, b = float(np.float32(_get(p, "alpha", 0.2))), float(np.float32(_get(p, "beta", 0.5)))
    return np.minimum(np.maximum(a * x + b, 0.0), 1.0)


# --------------------------------------------------------------------------
# comparisons and logic
# --------------------------------------------------------------------------
CMP = {"equal": lambda a, b: a == b, "not_equal": lambda a, b: a != b,
       "greater": lambda a, b: a > b, "greater_equal": lambda a, b: a >= b,
       "lesser": lambda a, b: a < b, "lesser_equal": lambda a, b: a <= b}
LOGIC = {"logical_and": lambda a, b: (a != 0) and (b != 0),
         "logical_or": lambda a, b: (a != 0) or (b != 0),
         "logical_xor": lambda a, b: (a != 0) != (b != 0)}


def scalar_out_dtype(p, dtype):
    dtype = np.dtype(dtype)
    is_int = _get(p, "is_int", True)
    if dtype == np.bool_:
        return np.dtype(np.int64 if is_int else np.float64)
    if np.issubdtype(dtype, np.integer) and not is_int:
        return np.dtype(np.float64)
    return dtype


def _scalar_ref(cmp):
    def reference(p, x):
        out = scalar_out_dtype(p, x.dtype)
        s = np.asarray(_get(p, "scalar", 1.0)).astype(out)  # DType(alpha)
        xs = x.astype(out)
        flat = [1 if cmp(a, s) else 0 for a in xs.ravel()]
        return np.array(flat).reshape(x.shape).astype(out)
    return reference


def _broadcast_ref(cmp):
    def reference(p, a, b):
        a2, b2 = np.broadcast_arrays(a, b)
        flat = [1 if cmp(u, v) else 0 for u, v in zip(a2.ravel(), b2.ravel())]
        return np.array(flat).reshape(a2.shape).astype(a.dtype)
    return reference


for _name, _cmp in CMP.items():
    ref(f"_{_name}_scalar")(_scalar_ref(_cmp))
    ref(f"broadcast_{_name}")(_broadcast_ref(_cmp))
    ref(f"_{_name}")(_broadcast_ref(_cmp))  # the equal-shape form
for _name, _cmp in LOGIC.items():
    ref(f"broadcast_{_name}")(_broadcast_ref(_cmp))
    ref(f"_{_name}")(_broadcast_ref(_cmp))


# --------------------------------------------------------------------------
# one_hot, pick, gather_nd
# --------------------------------------------------------------------------
@ref("one_hot")
def one_hot(p, idx):
    depth = p["depth"]
    dtype = np.dtype(_get(p, "dtype", "float32"))
    on, off = _get(p, "on_value", 1.0), _get(p, "off_value", 0.0)
    out = np.full(idx.shape + (depth,), off).astype(dtype)
    for pos in np.ndindex(idx.shape):
        j = int(idx[pos])  # C's cast: toward zero
        if 0 <= j < depth:
            out[pos + (j,)] = np.asarray(on).astype(dtype)
    return out


def mxnet_index(v, n, mode):
    j = int(v)
    if mode == "clip":
        return min(max(j, 0), n - 1)
    j = j % n  # Python's % is C's made non-negative
    return j


@ref("pick")
def pick(p, data, index):
    axis = _get(p, "axis", -1) % data.ndim
    mode, keep = _get(p, "mode", "clip"), _get(p, "keepdims", False)
    rest = data.shape[:axis] + data.shape[axis + 1:]
    idx = index.reshape(rest)
    out = np.empty(rest, data.dtype)
    for pos in np.ndindex(rest):
        j = mxnet_index(idx[pos], data.shape[axis], mode)
        out[pos] = data[pos[:axis] + (j,) + pos[axis:]]
    if data.ndim == 1:
        return out.reshape(1)
    return np.expand_dims(out, axis) if keep else out


@ref("gather_nd")
def gather_nd(p, data, indices):
    m = indices.shape[0]
    ys = indices.shape[1:]
    out = np.empty(ys + data.shape[m:], data.dtype)
    for pos in np.ndindex(ys):
        where = tuple(int(indices[(k,) + pos] + data.shape[k]) % data.shape[k]
                      for k in range(m))
        out[pos] = data[where]
    return out


# --------------------------------------------------------------------------
# argmax, argmin, topk, sort, argsort, norm
# --------------------------------------------------------------------------
def _arg_reference(pick_first):
    def reference(p, x):
        axis, keep = p.get("axis"), _get(p, "keepdims", False)
        if axis is None or x.ndim == 1:
            v = float(pick_first(x.ravel()))
            return np.full((1,) * x.ndim if keep else (1,), v, x.dtype)
        y = pick_first(x, axis=axis).astype(x.dtype)  # NumPy's: the first occurrence
        return np.expand_dims(y, axis % x.ndim) if keep else y
    return reference


ref("argmax")(_arg_reference(np.argmax))
ref("argmin")(_arg_reference(np.argmin))


def _rows(x, axis):
    return x.reshape(1, -1) if axis is None else np.moveaxis(x, axis, -1)


def _order(row, ascend):
    """Positions of row in order, ties by lower position first."""
    keys = sorted(range(len(row)), key=lambda i: (row[i] if ascend else -row[i], i))
    return np.array(keys, dtype=np.int64)


def _ordered(p, x, ascend, k):
    axis = p.get("axis", -1)
    r = _rows(x, axis)
    n = r.shape[-1]
    k = n if k is None or k <= 0 else k
    idx = np.empty(r.shape[:-1] + (k,), np.int64)
    for pos in np.ndindex(r.shape[:-1]):
        idx[pos] = _order(r[pos], ascend)[:k]
    vals = np.take_along_axis(r, idx, axis=-1)
    if axis is None:
        return idx.reshape(-1), vals.reshape(-1), r, idx
    return np.moveaxis(idx, -1, axis), np.moveaxis(vals, -1, axis), r, idx


@ref("topk")
def topk(p, x):
    ret = _get(p, "ret_typ", "indices")
    idx, vals, r, ridx = _ordered(p, x, _get(p, "is_ascend", False), _get(p, "k", 1))
    dtype = np.dtype(_get(p, "dtype", "float32"))
    if ret == "mask":
        mask = np.zeros(r.shape, x.dtype)
        np.put_along_axis(mask, ridx, 1, axis=-1)
        axis = p.get("axis", -1)
        return mask.reshape(x.shape) if axis is None else np.moveaxis(mask, -1, axis)
    if ret == "indices":
        return idx.astype(dtype)
    if ret == "both":
        return vals, idx.astype(dtype)
    return vals


ref("sort")(lambda p, x: _ordered(p, x, _get(p, "is_ascend", True), None)[1])
ref("argsort")(lambda p, x: _ordered(p, x, _get(p, "is_ascend", True), None)[0].astype(
    np.dtype(_get(p, "dtype", "float32"))))


@ref("norm")
def norm(p, x):
    axis = p.get("axis")
    axes = tuple(range(x.ndim)) if not axis else tuple(a % x.ndim for a in axis)
    keep = _get(p, "keepdims", False)
    if _get(p, "ord", 2) == 1:
        y = np.sum(np.abs(x), axis=axes, keepdims=keep)
    else:
        y = np.sqrt(np.sum(x * x, axis=axes, keepdims=keep))
    y = np.asarray(y).reshape(1) if np.ndim(y) == 0 else y
    out = p.get("out_dtype")
    return y if out is None else y.astype(out)


# --------------------------------------------------------------------------
# SequenceMask, SequenceLast, SequenceReverse: step by step
# --------------------------------------------------------------------------
def _seq_lengths(p, x, lens):
    axis = _get(p, "axis", 0)
    t, b = x.shape[axis], x.shape[1 - axis]
    if not _get(p, "use_sequence_length", False):
        return [t] * b
    return [min(max(int(v), 0), t) for v in lens]


def _step(x, axis, s, i):
    """The index of step s of sequence i."""
    return (s, i) if axis == 0 else (i, s)


@ref("SequenceMask")
def sequence_mask(p, x, lens=None):
    axis = _get(p, "axis", 0)
    out = x.copy()
    value = np.asarray(np.float32(_get(p, "value", 0.0))).astype(x.dtype)
    for i, n in enumerate(_seq_lengths(p, x, lens)):
        for s in range(n, x.shape[axis]):
            out[_step(x, axis, s, i)] = value
    return out


@ref("SequenceLast")
def sequence_last(p, x, lens=None):
    axis = _get(p, "axis", 0)
    b = x.shape[1 - axis]
    out = np.empty((b,) + x.shape[2:], x.dtype)
    for i, n in enumerate(_seq_lengths(p, x, lens)):
        out[i] = x[_step(x, axis, max(n - 1, 0), i)]
    return out


@ref("SequenceReverse")
def sequence_reverse(p, x, lens=None):
    out = x.copy()
    for i, n in enumerate(_seq_lengths(p, x, lens)):
        for s in range(n):
            out[s, i] = x[n - 1 - s, i]
    return out


# --------------------------------------------------------------------------
# random ops: shape and dtype only (values are checked by their moments in
# tests/test_math_ops.py)
# --------------------------------------------------------------------------
def _random_like(p):
    dtype = _get(p, "dtype", "float32")
    return np.zeros(tuple(p["shape"]), "float32" if dtype in (None, "None") else dtype)


ref("_random_uniform")(_random_like)
ref("_random_normal")(_random_like)


@ref("_sample_multinomial")
def sample_multinomial(p, data):
    shape = tuple(_get(p, "shape", ()))
    out = (shape or (1,)) if data.ndim == 1 else data.shape[:-1] + shape
    draws = np.zeros(out, _get(p, "dtype", "int32"))
    return (draws, np.zeros(out, data.dtype)) if _get(p, "get_prob", False) else draws


# --------------------------------------------------------------------------
# softmax / log_softmax with use_length (the reference of softmax itself
# lives in op_reference_tensor.py; this is its masked row-by-row form)
# --------------------------------------------------------------------------
def masked_softmax(p, x, length, log=False):
    """MXNet's masked kernel: entries of each row at or past its length are
    0; the rest are the softmax (log_softmax) of the first length entries."""
    axis = _get(p, "axis", -1) % x.ndim
    t = _get(p, "temperature", None) or 1.0
    dtype = p.get("dtype") or x.dtype
    r = np.moveaxis(x.astype(dtype), axis, -1)
    lens = np.asarray(length).reshape(r.shape[:-1])
    out = np.zeros(r.shape, dtype)
    for pos in np.ndindex(r.shape[:-1]):
        n = int(lens[pos])
        if n <= 0:
            continue
        z = r[pos][:n] / t
        z = z - z.max()
        out[pos][:n] = z - np.log(np.exp(z).sum()) if log else np.exp(z) / np.exp(z).sum()
    return np.moveaxis(out, -1, axis)
