"""Neural-network layers: FullyConnected, Convolution, Pooling, BatchNorm ...

Layout is NCHW (MXNet's default). Each layer infers its parameter shapes
from the data shape, so ``infer_shape(data=...)`` yields every weight.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from ..errors import ShapeError
from .backward import register_backward
from .registry import Attr, OpDef, Sample, bool_attr, int_attr, numel, register


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
    if p.flatten:
        x = x.reshape(x.shape[0], -1)
    y = jnp.matmul(x, w.T)
    return y if b is None else y + b


def _fc_flops(p, ins, outs):
    return 2 * numel(outs[0]) * ins[1][1]


_fc = register(OpDef(
    name="FullyConnected",
    attrs={"num_hidden": Attr(int_attr), "no_bias": Attr(bool_attr, False),
           "flatten": Attr(bool_attr, True)},
    arguments=_fc_args, lower=_fc_lower, infer_shape=_fc_shape, flops=_fc_flops,
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


register_backward(_fc, reads_inputs=(0, 1), lower=_fc_backward, infer_shape=_fc_backward_shape)
