"""FullyConnected and Embedding: products with a whole weight matrix
(``y = x W^T + b``; ``y = weight[index]``).

Part of the neural-network layers (``ops/nn.py`` imports them all);
names, attributes and defaults follow MXNet 1.x.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from .backward import register_backward
from .registry import (Attr, OpDef, Sample, bool_attr, dtype_attr, numel, positive_int_attr,
                       register)


# --------------------------------------------------------------------------
# FullyConnected: y = x W^T + b, x flattened to (batch, -1) when flatten
# --------------------------------------------------------------------------
def _fc_args(p):
    return ["data", "weight"] if p.no_bias else ["data", "weight", "bias"]


def _fc_shape(p, s):
    data = s[0]
    if data is None:
        return s, [None]
    if p.flatten:
        batch, k = data[0], numel(data[1:])
        out = (batch, p.num_hidden)
    else:
        batch, k = data[:-1], data[-1]
        out = tuple(data[:-1]) + (p.num_hidden,)
    want = [data, (p.num_hidden, k)] + ([] if p.no_bias else [(p.num_hidden,)])
    return want, [out]


def _fc_lower(p, ctx, x, w, b=None):
    # always one 2-D product: on it XLA:CPU writes an elementwise reader (an
    # activation) over the product's buffer where it dies, as the plan has
    # it; the N-D product kept both (a token-mixing MLP's FullyConnected
    # and GELU in inference: XLA temp 1.5x the plan)
    lead = x.shape[:1] if p.flatten else x.shape[:-1]
    y = jnp.matmul(x.reshape(math.prod(lead), -1), w.T)
    if b is not None:
        y = y + b
    return y.reshape(*lead, y.shape[-1])


def _fc_flops(p, ins, outs):
    return 2 * numel(outs[0]) * ins[1][1]


_fc = register(OpDef(
    name="FullyConnected",
    per_sample=True,
    attrs={"num_hidden": Attr(positive_int_attr), "no_bias": Attr(bool_attr, False),
           "flatten": Attr(bool_attr, True)},
    arguments=_fc_args, lower=_fc_lower, infer_shape=_fc_shape, flops=_fc_flops,
    family="matmul", anchor_weights=True,
    samples=[Sample({"num_hidden": 5}, [(4, 3, 2)]),
             Sample({"num_hidden": 5, "no_bias": True}, [(4, 6)]),
             Sample({"num_hidden": 5, "flatten": False}, [(2, 3, 6)])]))


# dx = dy W; dW = dy^T x; db = sum(dy) -- reads data and weight, not bias
def _fc_backward(p, ctx, og, ins, outs):
    x, w = ins
    _, vjp = jax.vjp(lambda x, w: _fc_lower(p, ctx, x, w), x, w)
    dx, dw = vjp(og[0])
    db = None if p.no_bias else og[0].reshape(-1, og[0].shape[-1]).sum(0)
    return [dx, dw, db]


def _fc_backward_shape(p, s):
    og, x, w = s
    grads = [x, w] + ([] if p.no_bias else [(p.num_hidden,)])
    need = list(p.need) if p.need else [1] * len(grads)
    return s, [g for g, m in zip(grads, need) if m]


def _weighted_backward_flops(fwd_flops):
    """A layer's backward: its forward's work again for each of the data and
    weight gradients asked for, one add per output element for the bias's.
    Inputs: ograd, data, weight."""
    def flops(p, ins, outs):
        og, x, w = ins
        per = fwd_flops(p, [x, w], [og])
        need = list(p.need) if p.need else [1, 1, 0 if p.no_bias else 1]
        return per * (need[0] + need[1]) + (numel(og) if len(need) > 2 and need[2] else 0)
    return flops


register_backward(_fc, reads_inputs=(0, 1), lower=_fc_backward, infer_shape=_fc_backward_shape,
                  flops=_weighted_backward_flops(_fc_flops))


# --------------------------------------------------------------------------
# Embedding: y[..., :] = weight[index]; indices are floats holding integers
# (MXNet) and are clipped to [0, input_dim - 1] as MXNet's kernel does
# --------------------------------------------------------------------------
def _embedding_shape(p, s):
    data = s[0]
    want = [data, (p.input_dim, p.output_dim)]
    return want, [None if data is None else tuple(data) + (p.output_dim,)]


def _embedding_type(p, in_types, num_outputs):
    weight = in_types[1] or p.dtype
    return [in_types[0], weight], [weight]


def _indices(p, data):
    return jnp.clip(data.astype(jnp.int32), 0, p.input_dim - 1)


_embedding = register(OpDef(
    name="Embedding",
    per_sample=True,
    attrs={"input_dim": Attr(positive_int_attr, doc="vocabulary size"),
           "output_dim": Attr(positive_int_attr, doc="embedding size"),
           "dtype": Attr(dtype_attr, "float32", "dtype of weight and output"),
           "sparse_grad": Attr(bool_attr, False, "accepted; the gradient is always dense")},
    arguments=("data", "weight"), infer_shape=_embedding_shape, infer_type=_embedding_type,
    lower=lambda p, ctx, data, w: jnp.take(w, _indices(p, data), axis=0),
    flops=lambda p, ins, outs: 0, category="opaque", family="embedding",
    doc="Lookup table; data holds indices (as floats, like MXNet), clipped to the table.",
    samples=[Sample({"input_dim": 7, "output_dim": 3}, [(2, 5)], ints={0: 7}),
             Sample({"input_dim": 4, "output_dim": 2}, [(3, 2, 2)], ints={0: 4}),
             Sample({"input_dim": 5, "output_dim": 4, "dtype": "float64"}, [(6,)],
                    ints={0: 5})]))


# y = weight[i]; dweight = scatter-add of dy at rows i; the indices get no gradient
def _embedding_backward(p, ctx, dy, data):
    idx = _indices(p, data).reshape(-1)
    rows = dy.reshape(-1, p.output_dim)
    return jnp.zeros((p.input_dim, p.output_dim), dy.dtype).at[idx].add(rows)


# reads the output gradient and the indices; the indices get no gradient
register_backward(
    _embedding, reads_inputs=(0,), no_grad=(0,),
    lower=lambda p, ctx, og, ins, outs: [None, _embedding_backward(p, ctx, og[0], ins[0])],
    infer_shape=lambda p, s: (s, [(p.input_dim, p.output_dim)]),
    flops=lambda p, ins, outs: numel(ins[0]))  # one add per gradient element
