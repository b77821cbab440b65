"""Normalization layers: BatchNorm (batch or moving statistics; the
backward reads the saved mean and inverse std) and LRN across channels.

Part of the neural-network layers (``ops/nn.py`` imports them all);
names, attributes and defaults follow MXNet 1.x.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..errors import ShapeError
from .backward import register_backward
from .conv import optional_float_attr
from .registry import Attr, OpDef, Sample, bool_attr, float_attr, int_attr, numel, register
from .tensor import _axis


# --------------------------------------------------------------------------
# BatchNorm: y = gamma (x - mean) / sqrt(var + eps) + beta per channel
# --------------------------------------------------------------------------
def _bn_visible(p):
    return 3 if p.output_mean_var else 1


def _bn_shape(p, s):
    data = s[0]
    if data is None:
        return s, [None, None, None]
    c = (data[_axis(p.axis, len(data), "axis")],)
    return [data, c, c, c, c], [data, c, c]


def _bn_bcast(p, ndim):
    ax = _axis(p.axis, ndim, "axis")
    return ax, tuple(i for i in range(ndim) if i != ax), (
        lambda v: v.reshape(tuple(-1 if i == ax else 1 for i in range(ndim))))


def _bn_uses_batch(p, ctx) -> bool:
    return ctx.is_train and not p.use_global_stats


def _bn_lower(p, ctx, x, gamma, beta, moving_mean, moving_var):
    """Outputs (y, mean, inverse std) and, in training, the new moving stats.

    Like MXNet 1.x the hidden ``var`` output holds the inverse standard
    deviation 1/sqrt(var + eps), not the variance; the moving variance is
    updated with the biased batch variance (MXNet's CPU kernel does too).
    """
    _, red, b = _bn_bcast(p, x.ndim)
    if _bn_uses_batch(p, ctx):
        mean = x.mean(axis=red)
        var = jnp.square(x - b(mean)).mean(axis=red)
    else:
        mean, var = moving_mean, moving_var
    invstd = lax.rsqrt(var + p.eps)
    scale = invstd if p.fix_gamma else invstd * gamma
    y = (x - b(mean)) * b(scale) + b(beta)
    # MXNet's backward ignores gradients arriving at mean/var: so do we
    outs = (y, lax.stop_gradient(mean), lax.stop_gradient(invstd))
    if not _bn_uses_batch(p, ctx):
        return outs, None
    m = p.momentum
    new_aux = (moving_mean * m + lax.stop_gradient(mean) * (1 - m),
               moving_var * m + lax.stop_gradient(var) * (1 - m))
    return outs, new_aux


def _bn_flops(p, ins, outs):
    return 5 * numel(ins[0])  # subtract, scale, shift plus the two statistics


_bn = register(OpDef(
    name="BatchNorm",
    per_sample=False,  # training normalises by the batch's mean and variance
    attrs={"eps": Attr(float_attr, 1e-3), "momentum": Attr(float_attr, 0.9),
           "fix_gamma": Attr(bool_attr, True, "gamma is taken as 1 and gets no gradient"),
           "use_global_stats": Attr(bool_attr, False, "use the moving stats in training too"),
           "output_mean_var": Attr(bool_attr, False, "make mean and inverse std visible"),
           "axis": Attr(int_attr, 1, "the channel axis"),
           "cudnn_off": Attr(bool_attr, False, "accepted, no effect"),
           "min_calib_range": Attr(optional_float_attr, None, "quantization; no effect"),
           "max_calib_range": Attr(optional_float_attr, None, "quantization; no effect")},
    arguments=("data", "gamma", "beta"), aux=("moving_mean", "moving_var"),
    outputs=("output", "mean", "var"), visible_outputs=_bn_visible,
    lower=_bn_lower, infer_shape=_bn_shape, flops=_bn_flops, family="normalization",
    doc="Batch normalisation; hidden outputs mean and inverse std (MXNet 1.x).",
    samples=[
        Sample({}, [(4, 3, 2, 2)], low=0.1, high=1.0),
        Sample({"fix_gamma": False, "eps": 1e-5}, [(3, 2, 3)], low=0.1, high=1.0),
        Sample({"fix_gamma": False, "output_mean_var": True}, [(4, 3, 2)], low=0.1, high=1.0),
        Sample({"fix_gamma": False, "use_global_stats": True}, [(3, 2, 2, 2)], low=0.1,
               high=1.0),
        Sample({"fix_gamma": False, "axis": -1, "momentum": 0.5}, [(3, 2, 4)], low=0.1,
               high=1.0),
        Sample({"fix_gamma": False}, [(6, 4)], low=0.1, high=1.0),
    ]))


# xh = (x - mean) invstd; dbeta = sum(dy); dgamma = sum(dy xh) (0 with fix_gamma);
# batch stats: dx = gamma invstd (dy - mean(dy) - xh mean(dy xh)); fixed: dx = gamma invstd dy
def _bn_backward(p, ctx, og, ins, outs):
    (dy,), (x, gamma), (mean, invstd) = og, ins, outs
    _, red, b = _bn_bcast(p, x.ndim)
    xh = (x - b(mean)) * b(invstd)
    dbeta = dy.sum(axis=red)
    dgamma = (dy * xh).sum(axis=red)
    scale = invstd if p.fix_gamma else invstd * gamma
    if _bn_uses_batch(p, ctx):
        m = x.size // x.shape[_axis(p.axis, x.ndim, "axis")]
        dx = b(scale) * (dy - b(dbeta / m) - xh * b(dgamma / m))
    else:
        dx = dy * b(scale)
    return [dx, jnp.zeros_like(gamma) if p.fix_gamma else dgamma, dbeta]


def _bn_backward_shape(p, s):
    og, x, gamma = s[:3]
    grads = [x, gamma, gamma]
    need = list(p.need) if p.need else [1, 1, 1]
    return s, [gr for gr, m in zip(grads, need) if m]


# reads data, gamma and the saved mean / inverse std -- not the output
register_backward(_bn, reads_inputs=(0, 1), reads_outputs=(1, 2), reads_ograds=(0,),
                  lower=_bn_backward, infer_shape=_bn_backward_shape,
                  # normalise, two sums, combine
                  flops=lambda p, ins, outs: 8 * numel(ins[1]))


# --------------------------------------------------------------------------
# LRN across channels: y = x / (knorm + alpha/nsize * sum_window x^2)^beta
# --------------------------------------------------------------------------
def odd_int_attr(v):
    n = int_attr(v)
    if n < 1 or n % 2 == 0:
        raise ValueError(f"expected an odd positive window size (MXNet's LRN), got {n}")
    return n


def _channel_window_sum(p, v):
    """sum over channels c - nsize//2 .. c + nsize//2 (zeros beyond the edges)."""
    h = p.nsize // 2
    window = (1, p.nsize) + (1,) * (v.ndim - 2)
    return lax.reduce_window(v, np.zeros((), v.dtype), lax.add, window, (1,) * v.ndim,
                             [(0, 0), (h, h)] + [(0, 0)] * (v.ndim - 2))


def _lrn_shape(p, s):
    data = s[0]
    if data is not None and len(data) < 3:
        raise ShapeError(f"LRN needs an input with channels and spatial axes (NCHW), "
                         f"got {tuple(data)}")
    return s, [data, data]


def _lrn_lower(p, ctx, x):
    norm = p.knorm + (p.alpha / p.nsize) * _channel_window_sum(p, x * x)
    return x * norm ** (-p.beta), norm


_lrn = register(OpDef(
    name="LRN",
    per_sample=True,
    attrs={"alpha": Attr(float_attr, 1e-4), "beta": Attr(float_attr, 0.75),
           "knorm": Attr(float_attr, 2.0), "nsize": Attr(odd_int_attr, doc="odd channel window")},
    outputs=("output", "tmp_norm"), visible_outputs=1, lower=_lrn_lower,
    infer_shape=_lrn_shape, category="opaque", family="normalization",
    flops=lambda p, ins, outs: numel(ins[0]) * (p.nsize + 4),
    doc="Local response normalisation across channels; hidden output tmp_norm (MXNet).",
    samples=[Sample({"nsize": 3}, [(2, 5, 2, 3)]),
             Sample({"nsize": 5, "alpha": 0.5, "beta": 0.6, "knorm": 1.0}, [(1, 6, 3, 2)]),
             Sample({"nsize": 3, "alpha": 2.0, "beta": 1.5, "knorm": 1.5}, [(2, 4, 3)])]))


# n = k + a/s W(x^2), y = x n^-b; dx = dy n^-b - (2ab/s) x W(dy x n^(-b-1)),
# W symmetric so it is its own transpose -- reads data and tmp_norm
def _lrn_backward(p, ctx, og, ins, outs):
    (dy,), (x,), (norm,) = og, ins, outs
    scaled = dy * x * norm ** (-p.beta - 1)
    return [dy * norm ** (-p.beta)
            - (2 * p.alpha * p.beta / p.nsize) * x * _channel_window_sum(p, scaled)]


register_backward(_lrn, reads_inputs=(0,), reads_outputs=(1,), lower=_lrn_backward,
                  infer_shape=lambda p, s: (s, [s[1]]),
                  flops=lambda p, ins, outs: numel(ins[1]) * (p.nsize + 8))
