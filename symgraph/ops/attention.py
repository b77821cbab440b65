"""The self-attention ops of MXNet 1.9.1's transformer contrib
(src/operator/contrib/transformer.cc, transformer-inl.h), which GluonNLP's
BERT exports use: ``_contrib_div_sqrt_dim``,
``_contrib_interleaved_matmul_selfatt_qk`` and
``_contrib_interleaved_matmul_selfatt_valatt``.

The interleaved ops read one projection tensor ``queries_keys_values`` of
shape (seq_length, batch, heads * 3 * head_dim), laid out per head as
(heads, 3, head_dim): head h's query, key and value are
``qkv.reshape(L, B, heads, 3, D)[:, :, h, 0|1|2, :]``. The attention
batches are (batch, head) pairs, batch-major: attention batch ``b * heads + h``.

- ``selfatt_qk``: out[b*H + h, i, j] = q[i, b, h] . k[j, b, h] / sqrt(D), of
  shape (B * heads, L, L).
- ``selfatt_valatt``: out[i, b, h*D + d] = sum_j attention[b*H + h, i, j]
  v[j, b, h, d], of shape (L, B, heads * D).

MXNet's kernels take float32 on CPU only; symgraph takes any float dtype.
The last dimension must divide into 3 * heads (MXNet truncates
silently). Both backwards read the forward's inputs (MXNet's
ElemwiseGradUseIn) and are the vjp of the forward.
"""
from __future__ import annotations

import math

import jax.numpy as jnp

from ..errors import ShapeError
from .backward import register_backward
from .elementwise import X, elementwise_flops, same_shape
from .registry import Attr, OpDef, Sample, numel, positive_int_attr, register

# --------------------------------------------------------------------------
# _contrib_div_sqrt_dim: x / sqrt(x.shape[-1])
# --------------------------------------------------------------------------


def _div_sqrt_dim(x):
    return x / jnp.asarray(math.sqrt(x.shape[-1]), x.dtype)


# y = x / sqrt(n); dx = dy / sqrt(n): the op itself on dy (MXNet's ElemwiseGradUseNone)
register(OpDef(
    name="_contrib_div_sqrt_dim", lower=lambda p, ctx, x: _div_sqrt_dim(x),
    infer_shape=same_shape, inplace=[(0, 0)], category="elementwise",
    flops=elementwise_flops,
    per_sample=False,  # a 1-D input's last axis is its batch: the divisor is its size
    gradient=lambda g, node, og: [g.op("_contrib_div_sqrt_dim", [og[0]],
                                       suffix="backward")[0]],
    samples=X + [Sample({}, [(2, 3, 5)]), Sample({}, [(7,)])],
    doc="data / sqrt(data.shape[-1]): the scaling of attention scores by the square "
        "root of the head size. The gradient is the same scaling of dy."))


# --------------------------------------------------------------------------
# the interleaved self-attention products
# --------------------------------------------------------------------------
_HEADS = {"heads": Attr(positive_int_attr, doc="the number of attention heads")}


def _qkv_geometry(p, qkv) -> tuple:
    """(L, B, D) of queries_keys_values ``qkv``; ShapeError if it is not
    (seq_length, batch, heads * 3 * head_dim)."""
    qkv = tuple(qkv)
    if len(qkv) != 3:
        raise ShapeError(f"queries_keys_values {qkv} must be 3-D (seq_length, batch, "
                         f"heads * 3 * head_dim)")
    if qkv[2] % (3 * p.heads):
        raise ShapeError(f"queries_keys_values {qkv}: the last dimension {qkv[2]} must be "
                         f"heads * 3 * head_dim, a multiple of 3 * heads = {3 * p.heads}")
    return qkv[0], qkv[1], qkv[2] // (3 * p.heads)


def _split_qkv(p, x, which):
    """Part ``which`` (0 queries, 1 keys, 2 values) of x: (L, B, heads, D)."""
    length, batch, d = _qkv_geometry(p, x.shape)
    return x.reshape(length, batch, p.heads, 3, d)[:, :, :, which, :]


def _qk_shape(p, s):
    if s[0] is None:
        return s, [None]
    length, batch, _ = _qkv_geometry(p, s[0])
    return s, [(batch * p.heads, length, length)]


def _qk_lower(p, ctx, x):
    q, k = _split_qkv(p, x, 0), _split_qkv(p, x, 1)
    d = q.shape[-1]
    out = jnp.einsum("ibhd,jbhd->bhij", q, k) / jnp.asarray(math.sqrt(d), x.dtype)
    return out.reshape(-1, x.shape[0], x.shape[0])


_qk = register(OpDef(
    name="_contrib_interleaved_matmul_selfatt_qk", attrs=_HEADS,
    arguments=("queries_keys_values",), infer_shape=_qk_shape, lower=_qk_lower,
    category="opaque", family="matmul", per_sample=False,
    flops=lambda p, ins, outs: 2 * numel(outs[0]) * _qkv_geometry(p, ins[0])[2],
    samples=[Sample({"heads": 2}, [(3, 2, 12)]), Sample({"heads": 1}, [(4, 1, 6)]),
             Sample({"heads": 3}, [(2, 3, 9)])],
    doc="Self-attention scores from interleaved projections (seq_length, batch, "
        "heads * 3 * head_dim): out[b * heads + h, i, j] = q_i . k_j / sqrt(head_dim) for "
        "head h of sequence b, shape (batch * heads, seq_length, seq_length)."))

# dq = dout k / sqrt(D), dk = dout^T q / sqrt(D): twice the forward's product
register_backward(_qk, flops=lambda p, ins, outs: (
    4 * numel(ins[0]) * _qkv_geometry(p, ins[1])[2]))


def _valatt_shape(p, s):
    qkv, att = s
    if qkv is None:
        return s, [None]
    length, batch, d = _qkv_geometry(p, qkv)
    want = (batch * p.heads, length, length)
    if att is not None and tuple(att) != want:
        raise ShapeError(f"attention {tuple(att)} must be {want}: (batch * heads, "
                         f"seq_length, seq_length) for queries_keys_values {tuple(qkv)} and "
                         f"heads={p.heads}")
    return [tuple(qkv), want], [(length, batch, p.heads * d)]


def _valatt_lower(p, ctx, x, att):
    v = _split_qkv(p, x, 2)                      # (L, B, H, D)
    length, batch, heads, d = v.shape
    a = att.reshape(batch, heads, length, length)
    return jnp.einsum("bhij,jbhd->ibhd", a, v).reshape(length, batch, heads * d)


_valatt = register(OpDef(
    name="_contrib_interleaved_matmul_selfatt_valatt", attrs=_HEADS,
    arguments=("queries_keys_values", "attention"), infer_shape=_valatt_shape,
    lower=_valatt_lower, category="opaque", family="matmul", per_sample=False,
    flops=lambda p, ins, outs: 2 * numel(outs[0]) * ins[0][0],
    samples=[Sample({"heads": 2}, [(3, 2, 12), (4, 3, 3)]),
             Sample({"heads": 1}, [(4, 1, 6)]),
             Sample({"heads": 3}, [(2, 3, 9), (9, 2, 2)])],
    doc="Attention-weighted values from interleaved projections (seq_length, batch, "
        "heads * 3 * head_dim) and attention (batch * heads, seq_length, seq_length): "
        "out[i, b, h * head_dim + d] = sum_j attention[b * heads + h, i, j] v_j[d], shape "
        "(seq_length, batch, heads * head_dim)."))

# dv = attention^T dout, dattention = dout v^T: twice the forward's product
register_backward(_valatt, flops=lambda p, ins, outs: 4 * numel(ins[0]) * ins[1][0])
