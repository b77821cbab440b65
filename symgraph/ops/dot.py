"""Matrix products of two tensors: ``dot`` and ``batch_dot`` (MXNet 1.9.1,
src/operator/tensor/dot-inl.h), both with ``transpose_a``/``transpose_b``.

``dot(a, b)`` contracts one axis of each input: the last of ``a`` (the first
when ``transpose_a``) with the first of ``b`` (the last when
``transpose_b``); the output's shape is the other axes of ``a`` then those of
``b``, so 2-D x 2-D is ``op(a) @ op(b)``. As in MXNet a 1-D input takes part
as a row (lhs) or a column (rhs) and adds no axis to the output, its
transpose changes nothing, and 1-D x 1-D gives shape ``(1,)`` and refuses
either transpose. Higher ranks are MXNet's too: ``a`` is read as the matrix
``(prod(a.shape[:-1]), a.shape[-1])`` (``(a.shape[0], prod(rest))`` when
transposed), ``b`` alike.

``batch_dot(a, b)``: inputs of one rank N >= 3 with equal leading N - 2
(batch) dimensions; ``out[i...] = op(a[i...]) @ op(b[i...])`` over the last
two axes.

Each backward is a ``_backward_<op>`` node reading the output gradient and
both inputs, computing only the input gradients asked for (MXNet's
DotBackward_/BatchDotBackward_): for ``c = op(a) @ op(b)``,
``d op(a) = dc op(b)^T`` and ``d op(b) = op(a)^T dc``, transposed back where
the input was.
"""
from __future__ import annotations

import jax

from ..errors import ShapeError
from ..util import short_repr
from .backward import register_backward
from .registry import Attr, OpDef, Sample, bool_attr, float_attr, numel, register


def _forward_stype(v):
    """MXNet's storage hint; symgraph's tensors are dense, so only None and
    'default' are taken."""
    s = "None" if v is None else str(v).strip()
    if s in ("", "None", "none"):
        return None
    if s == "default":
        return s
    if s in ("csr", "row_sparse"):
        raise ValueError(f"{s} (sparse) output is not supported; symgraph's tensors are "
                         f"dense: leave it out or give 'default'")
    raise ValueError(f"expected None or default, got {short_repr(v)}")


_forward_stype.choices = ("None", "default")

DOT_ATTRS = {
    "transpose_a": Attr(bool_attr, False, "transpose the first input before the product"),
    "transpose_b": Attr(bool_attr, False, "transpose the second input before the product"),
    "forward_stype": Attr(_forward_stype, None, "MXNet's output storage hint: dense only"),
}


def _matmul(x, y, tx: bool, ty: bool, nbatch: int = 0):
    """``op(x) @ op(y)`` over the last two axes, the ``nbatch`` leading axes
    batched; op transposes where asked (no transpose is materialised)."""
    nd = x.ndim
    batch = tuple(range(nbatch))
    cx = nd - 2 if tx else nd - 1
    cy = nd - 1 if ty else nd - 2
    return jax.lax.dot_general(x, y, (((cx,), (cy,)), (batch, batch)))


def _grads(p, dc, a, b, nbatch):
    """(da, db) of ``c = op(a) @ op(b)``; None where ``p.need`` says not."""
    ta, tb = p.transpose_a, p.transpose_b
    need = p.need or (1, 1)
    da = db = None
    if need[0]:
        # d op(a) = dc op(b)^T; a = op(a)^T when transposed: da = op(b) dc^T
        da = _matmul(b, dc, tb, True, nbatch) if ta else _matmul(dc, b, False, not tb, nbatch)
    if need[1]:
        # d op(b) = op(a)^T dc; b = op(b)^T when transposed: db = dc^T op(a)
        db = _matmul(dc, a, True, ta, nbatch) if tb else _matmul(a, dc, not ta, False, nbatch)
    return da, db


# --------------------------------------------------------------------------
# dot
# --------------------------------------------------------------------------
def _dot_geometry(p, lhs, rhs):
    """(lhs as a matrix, rhs as a matrix, output shape, contracted size) by
    MXNet's DotShape; ShapeError naming both shapes if they do not fit."""
    lhs, rhs = tuple(lhs), tuple(rhs)
    ta, tb = p.transpose_a, p.transpose_b
    if not lhs or not rhs:
        raise ShapeError(f"dot takes inputs of rank >= 1, got lhs {lhs}, rhs {rhs}")
    if len(lhs) == 1 and len(rhs) == 1:
        if ta or tb:
            raise ShapeError(f"dot of two vectors {lhs} x {rhs} cannot transpose them "
                             f"(transpose_a={ta}, transpose_b={tb})")
        if lhs[0] != rhs[0]:
            raise ShapeError(f"dot shape error: vectors lhs {lhs} and rhs {rhs} differ in "
                             f"length")
        return (1, lhs[0]), (rhs[0], 1), (1,), lhs[0]
    # lhs: contract its first axis when transposed, else its last
    lk, lfree = (lhs[0], lhs[1:]) if ta else (lhs[-1], lhs[:-1])
    rk, rfree = (rhs[-1], rhs[:-1]) if tb else (rhs[0], rhs[1:])
    if lk != rk:
        la = "first" if ta else "last"
        ra = "last" if tb else "first"
        raise ShapeError(f"dot shape error: lhs {lhs} x rhs {rhs} (transpose_a={ta}, "
                         f"transpose_b={tb}): the {la} axis of lhs ({lk}) must equal the "
                         f"{ra} axis of rhs ({rk})")
    lmat = (lk, numel(lfree)) if ta else (numel(lfree), lk)
    rmat = (numel(rfree), rk) if tb else (rk, numel(rfree))
    out = (tuple(lfree) if len(lhs) > 1 else ()) + (tuple(rfree) if len(rhs) > 1 else ())
    return lmat, rmat, out, lk


def _dot_shape(p, s):
    lhs, rhs = s
    if lhs is None or rhs is None:
        return s, [None]  # one input does not determine the other
    return s, [_dot_geometry(p, lhs, rhs)[2]]


def _dot_lower(p, ctx, a, b):
    lmat, rmat, out, _ = _dot_geometry(p, a.shape, b.shape)
    c = _matmul(a.reshape(lmat), b.reshape(rmat), p.transpose_a, p.transpose_b)
    return c.reshape(out)


def _dot_flops(p, ins, outs):
    return 2 * numel(outs[0]) * _dot_geometry(p, ins[0], ins[1])[3]


def _dot_backward(p, ctx, og, ins, outs):  # reads dc, a and b
    a, b = ins
    lmat, rmat, out, _ = _dot_geometry(p, a.shape, b.shape)
    dc = og[0].reshape(lmat[1 if p.transpose_a else 0], rmat[0 if p.transpose_b else 1])
    da, db = _grads(p, dc, a.reshape(lmat), b.reshape(rmat), 0)
    return [None if da is None else da.reshape(a.shape),
            None if db is None else db.reshape(b.shape)]


def _backward_flops(geometry):
    """The forward's product again for each input gradient asked for.
    Inputs: the output gradient, lhs, rhs."""
    def flops(p, ins, outs):
        dc, a, b = ins
        per = 2 * numel(dc) * geometry(p, a, b)
        return per * sum(p.need or (1, 1))
    return flops


_dot = register(OpDef(
    name="dot", attrs=DOT_ATTRS, arguments=("lhs", "rhs"),
    infer_shape=_dot_shape, lower=_dot_lower, flops=_dot_flops,
    category="opaque", family="matmul",
    # not per-sample: whether axis 0 of the output is lhs's samples depends
    # on the ranks (a 1-D lhs) and on which input carries the batch
    per_sample=False,
    samples=[Sample({}, [(3, 4), (4, 5)]),
             Sample({"transpose_a": True}, [(4, 3), (4, 5)]),
             Sample({"transpose_b": True}, [(3, 4), (5, 4)]),
             Sample({"transpose_a": True, "transpose_b": True}, [(4, 3), (5, 4)]),
             Sample({}, [(4,), (4,)]),
             Sample({}, [(4,), (4, 5)]),
             Sample({"transpose_b": True}, [(3, 4), (4,)]),
             Sample({"transpose_a": True}, [(4, 2, 3), (4, 5)]),
             Sample({"transpose_b": True}, [(2, 3, 4), (5, 2, 4)])],
    doc="Matrix product op(lhs) @ op(rhs), op transposing where transpose_a/transpose_b "
        "say. 1-D inputs act as a row (lhs) or a column (rhs); 1-D x 1-D gives shape (1,). "
        "Higher ranks as MXNet: the last axis of lhs (its first if transpose_a) meets the "
        "first of rhs (its last if transpose_b), the other axes make the output."))

register_backward(_dot, reads_inputs=(0, 1), lower=_dot_backward,
                  flops=_backward_flops(lambda p, a, b: _dot_geometry(p, a, b)[3]))


# --------------------------------------------------------------------------
# batch_dot
# --------------------------------------------------------------------------
def _batch_dot_geometry(p, lhs, rhs, op="batch_dot", min_rank=3):
    """(output shape, contracted size) by MXNet's BatchDotShape (``op``'s
    inputs: rank ``min_rank`` or more); ShapeError naming both shapes if
    they do not fit."""
    lhs, rhs = tuple(lhs), tuple(rhs)
    ta, tb = p.transpose_a, p.transpose_b
    if len(lhs) < min_rank or len(lhs) != len(rhs):
        raise ShapeError(f"{op} takes two inputs of one rank >= {min_rank} (batch..., rows, "
                         f"columns), got lhs {lhs}, rhs {rhs}")
    if lhs[:-2] != rhs[:-2]:
        raise ShapeError(f"{op} shape error: the batch dimensions of lhs {lhs} and "
                         f"rhs {rhs} differ ({lhs[:-2]} vs {rhs[:-2]})")
    m, lk = (lhs[-1], lhs[-2]) if ta else (lhs[-2], lhs[-1])
    n, rk = (rhs[-2], rhs[-1]) if tb else (rhs[-1], rhs[-2])
    if lk != rk:
        raise ShapeError(f"{op} shape error: lhs {lhs} x rhs {rhs} (transpose_a={ta}, "
                         f"transpose_b={tb}): lhs's inner dimension {lk} must equal rhs's "
                         f"{rk}")
    return lhs[:-2] + (m, n), lk


def _batch_dot_shape(p, s):
    lhs, rhs = s
    if lhs is None or rhs is None:
        return s, [None]
    return s, [_batch_dot_geometry(p, lhs, rhs)[0]]


def _batch_dot_lower(p, ctx, a, b):
    return _matmul(a, b, p.transpose_a, p.transpose_b, a.ndim - 2)


def _batch_dot_flops(p, ins, outs):
    return 2 * numel(outs[0]) * _batch_dot_geometry(p, ins[0], ins[1])[1]


def _batch_dot_backward(p, ctx, og, ins, outs):  # reads dc, a and b
    a, b = ins
    return list(_grads(p, og[0], a, b, a.ndim - 2))


_batch_dot = register(OpDef(
    name="batch_dot", attrs=DOT_ATTRS, arguments=("lhs", "rhs"),
    infer_shape=_batch_dot_shape, lower=_batch_dot_lower, flops=_batch_dot_flops,
    category="opaque", family="matmul",
    # sample i of the output reads sample i of both inputs (the batch
    # dimensions must be equal, so both carry it)
    per_sample=True,
    samples=[Sample({}, [(2, 3, 4), (2, 4, 5)]),
             Sample({"transpose_a": True}, [(2, 4, 3), (2, 4, 5)]),
             Sample({"transpose_b": True}, [(2, 3, 4), (2, 5, 4)]),
             Sample({"transpose_a": True, "transpose_b": True}, [(3, 4, 2), (3, 5, 4)]),
             Sample({"transpose_b": True}, [(2, 3, 2, 4), (2, 3, 5, 4)])],
    doc="Batched matrix product: out[i] = op(lhs[i]) @ op(rhs[i]) over the last two "
        "axes, op transposing where transpose_a/transpose_b say; inputs of one rank "
        ">= 3 whose leading (batch) dimensions are equal."))

register_backward(_batch_dot, reads_inputs=(0, 1), lower=_batch_dot_backward,
                  flops=_backward_flops(lambda p, a, b: _batch_dot_geometry(p, a, b)[1]))


# --------------------------------------------------------------------------
# _linalg_gemm2: alpha * op(A) @ op(B) over the last two axes (MXNet's
# la_op.h, the matrix rows on axis -2)
# --------------------------------------------------------------------------
def _row_axis(v):
    """MXNet's ``axis``: where the matrices' rows lie; only -2 (the last two
    axes hold the matrices) is taken."""
    a = int(v)
    if a != -2:
        raise ValueError(f"only axis=-2 (matrices on the last two axes) is supported, got {a}; "
                         f"transpose the inputs to put the matrices last")
    return a


def _gemm2_geometry(p, a, b):
    return _batch_dot_geometry(p, a, b, op="_linalg_gemm2", min_rank=2)


def _gemm2_shape(p, s):
    a, b = s
    if a is None or b is None:
        return s, [None]
    return s, [_gemm2_geometry(p, a, b)[0]]


def _gemm2_backward(p, ctx, og, ins, outs):  # reads dc, A and B
    a, b = ins
    return [None if g is None else p.alpha * g
            for g in _grads(p, og[0], a, b, a.ndim - 2)]


_gemm2 = register(OpDef(
    name="_linalg_gemm2", aliases=("linalg_gemm2",),
    attrs={"transpose_a": DOT_ATTRS["transpose_a"], "transpose_b": DOT_ATTRS["transpose_b"],
           "alpha": Attr(float_attr, 1.0, "the product's scale"),
           "axis": Attr(_row_axis, -2, "the axis of the matrices' rows: -2 only")},
    arguments=("A", "B"), infer_shape=_gemm2_shape,
    lower=lambda p, ctx, a, b: p.alpha * _matmul(a, b, p.transpose_a, p.transpose_b,
                                                 a.ndim - 2),
    flops=lambda p, ins, outs: 2 * numel(outs[0]) * _gemm2_geometry(p, ins[0], ins[1])[1],
    category="opaque", family="matmul",
    samples=[Sample({}, [(3, 4), (4, 5)]),
             Sample({"transpose_a": True, "alpha": 0.5}, [(2, 4, 3), (2, 4, 5)]),
             Sample({"transpose_b": True, "alpha": -2.0}, [(2, 3, 4), (2, 5, 4)])],
    doc="alpha * op(A) @ op(B) over the last two axes (leading axes batched, equal), op "
        "transposing where transpose_a/transpose_b say (MXNet's linalg.gemm2)."))

register_backward(_gemm2, reads_inputs=(0, 1), lower=_gemm2_backward,
                  flops=_backward_flops(lambda p, a, b: _gemm2_geometry(p, a, b)[1]))
