"""Normalization layers of MXNet 1.9.1 that models bring beside the
classic ones (BatchNorm and LRN are in norm.py): LayerNorm, InstanceNorm,
GroupNorm and L2Normalization, plus the rank check the resampling
(resample.py) and spatial (spatial.py) layers share.

Names, attributes, defaults, hidden outputs and what each backward reads
are MXNet 1.9.1's (src/operator/nn/layer_norm*, group_norm*,
instance_norm*, l2_normalization*):

- LayerNorm, GroupNorm and InstanceNorm keep their statistics as hidden
  outputs (LayerNorm/GroupNorm: mean and std = sqrt(var + eps);
  InstanceNorm: mean and the biased variance) and their backward reads the
  data, gamma and those statistics, never the output. No gradient flows
  back through the visible mean/std of ``output_mean_var``.
- L2Normalization's backward reads its output and the hidden norm, not the
  data, and may write the data gradient over the output gradient.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..errors import ShapeError
from .backward import register_backward
from .registry import (Attr, OpDef, Sample, bool_attr, choice_attr, float_attr, int_attr, numel,
                       positive_int_attr, register)
from .tensor import _axis


def _need_rank(data, low, high, what, layout):
    """ShapeError unless ``data`` has rank low..high."""
    if not low <= len(data) <= high:
        want = f"rank {low}" if low == high else (
            f"rank >= {low}" if high > 99 else f"rank {low} to {high}")
        raise ShapeError(f"{what} needs an input of {want} ({layout}), got {tuple(data)}")


def _affine_backward_shape(p, s):
    """Backward of a normalization (inputs: ograd, data, gamma, two saved
    statistics) -> gradients of data, gamma, beta (beta's shape is gamma's)."""
    x, gamma = s[1], s[2]
    grads = [x, gamma, gamma]
    need = list(p.need) if p.need else [1, 1, 1]
    return s, [gr for gr, m in zip(grads, need) if m]


def _normalize_grads(dy, xh, scale, stat):
    """dx of y = xh * gamma + beta where xh = (x - mean) / std normalises x
    over the axes ``stat``: with w = dy gamma / std (``scale`` = gamma / std),
    dx = w - mean(w) - xh mean(w xh), the means over ``stat``."""
    w = dy * scale
    return w - w.mean(axis=stat, keepdims=True) - xh * (w * xh).mean(axis=stat, keepdims=True)


# --------------------------------------------------------------------------
# LayerNorm: normalise along one axis; gamma, beta of that axis's length
# --------------------------------------------------------------------------
def _ln_shape(p, s):
    data = s[0]
    if data is None:
        return s, [None, None, None]
    ax = _axis(p.axis, len(data), "axis")
    c = (data[ax],)
    moments = tuple(1 if i == ax else d for i, d in enumerate(data))
    return [data, c, c], [tuple(data), moments, moments]


def _ln_view(p, ndim):
    ax = _axis(p.axis, ndim, "axis")
    return ax, (lambda v: v.reshape(tuple(-1 if i == ax else 1 for i in range(ndim))))


def _ln_lower(p, ctx, x, gamma, beta):
    ax, b = _ln_view(p, x.ndim)
    mean = x.mean(axis=ax, keepdims=True)
    xc = x - mean
    std = jnp.sqrt(jnp.square(xc).mean(axis=ax, keepdims=True) + np.asarray(p.eps, x.dtype))
    y = xc / std * b(gamma) + b(beta)
    # MXNet passes no gradient through the visible mean and std
    return y, lax.stop_gradient(mean), lax.stop_gradient(std)


_ln = register(OpDef(
    name="LayerNorm",
    attrs={"axis": Attr(int_attr, -1, "the axis normalised (negative: from the end)"),
           "eps": Attr(float_attr, 1e-5, "added to the variance"),
           "output_mean_var": Attr(bool_attr, False, "make mean and std visible")},
    arguments=("data", "gamma", "beta"), outputs=("output", "mean", "std"),
    visible_outputs=lambda p: 3 if p.output_mean_var else 1,
    lower=_ln_lower, infer_shape=_ln_shape, inplace=[(0, 0)], family="normalization",
    per_sample=lambda p: p.axis > 0,  # axis 0 (or -1 of a vector) mixes the samples
    flops=lambda p, ins, outs: 7 * numel(ins[0]),
    doc="Layer normalisation along axis: out = (x - mean) / sqrt(var + eps) * gamma + beta, "
        "gamma and beta of the axis's length; hidden outputs mean and std (the input's "
        "shape with the axis 1), visible with output_mean_var (MXNet 1.9.1).",
    samples=[Sample({}, [(2, 3, 4)]),
             Sample({"axis": 1, "eps": 1e-3}, [(2, 3, 4)]),
             Sample({"axis": 0, "output_mean_var": True}, [(3, 4)]),
             Sample({"axis": -2, "output_mean_var": True}, [(2, 4, 3, 2)]),
             Sample({}, [(5,)])]))


# xh = (x - mean) / std; dbeta = sum(dy), dgamma = sum(dy xh) over the other
# axes; dx = w - mean(w) - xh mean(w xh) along the axis, w = dy gamma / std
def _ln_backward(p, ctx, og, ins, outs):
    (dy,), (x, gamma), (mean, std) = og, ins, outs
    ax, b = _ln_view(p, x.ndim)
    red = tuple(i for i in range(x.ndim) if i != ax)
    xh = (x - mean) / std
    dx = _normalize_grads(dy, xh, b(gamma) / std, ax)
    return [dx, (dy * xh).sum(axis=red), dy.sum(axis=red)]


register_backward(_ln, reads_inputs=(0, 1), reads_outputs=(1, 2), reads_ograds=(0,),
                  lower=_ln_backward, infer_shape=_affine_backward_shape,
                  flops=lambda p, ins, outs: 10 * numel(ins[1]))


# --------------------------------------------------------------------------
# InstanceNorm: per sample and channel over the spatial axes
# --------------------------------------------------------------------------
def _in_shape(p, s):
    data = s[0]
    if data is None:
        return s, [None, None, None]
    _need_rank(data, 3, 999, "InstanceNorm", "batch, channel, spatial...")
    c, nc = (data[1],), tuple(data[:2])
    return [data, c, c], [tuple(data), nc, nc]


def _channel(v, ndim):
    return v.reshape((1, -1) + (1,) * (ndim - 2))


def _in_lower(p, ctx, x, gamma, beta):
    space = tuple(range(2, x.ndim))
    mean = x.mean(axis=space, keepdims=True)
    xc = x - mean
    var = jnp.square(xc).mean(axis=space, keepdims=True)
    y = xc / jnp.sqrt(var + np.asarray(p.eps, x.dtype))
    return (y * _channel(gamma, x.ndim) + _channel(beta, x.ndim),
            lax.stop_gradient(mean.reshape(x.shape[:2])),
            lax.stop_gradient(var.reshape(x.shape[:2])))


_in = register(OpDef(
    name="InstanceNorm",
    attrs={"eps": Attr(float_attr, 1e-3, "added to the variance")},
    arguments=("data", "gamma", "beta"), outputs=("output", "mean", "var"),
    visible_outputs=1, lower=_in_lower, infer_shape=_in_shape, family="normalization",
    per_sample=True, flops=lambda p, ins, outs: 7 * numel(ins[0]),
    doc="Instance normalisation: each sample's channel over its spatial axes, "
        "out = (x - mean) / sqrt(var + eps) * gamma + beta, gamma and beta per channel; "
        "input (N, C, spatial...) of rank >= 3; hidden outputs mean and the (biased) "
        "variance, shape (N, C) (MXNet 1.9.1).",
    samples=[Sample({}, [(2, 3, 4)]),
             Sample({"eps": 1e-5}, [(2, 2, 3, 3)]),
             Sample({}, [(1, 2, 2, 3, 2)])]))


# the batch-statistics rule of BatchNorm per (sample, channel) -- reads data,
# gamma, mean and var (as MXNet's DeclareBackwardDependency)
def _in_backward(p, ctx, og, ins, outs):
    (dy,), (x, gamma), (mean, var) = og, ins, outs
    space = tuple(range(2, x.ndim))
    stat = (x.shape[0], x.shape[1]) + (1,) * len(space)
    std = jnp.sqrt(var.reshape(stat) + np.asarray(p.eps, x.dtype))
    xh = (x - mean.reshape(stat)) / std
    red = (0,) + space
    dx = _normalize_grads(dy, xh, _channel(gamma, x.ndim) / std, space)
    return [dx, (dy * xh).sum(axis=red), dy.sum(axis=red)]


register_backward(_in, reads_inputs=(0, 1), reads_outputs=(1, 2), reads_ograds=(0,),
                  lower=_in_backward, infer_shape=_affine_backward_shape,
                  flops=lambda p, ins, outs: 10 * numel(ins[1]))


# --------------------------------------------------------------------------
# GroupNorm: channels in num_groups groups, each sample's group normalised;
# gamma and beta per group (MXNet 1.9.1's shapes: (num_groups,))
# --------------------------------------------------------------------------
def _gn_shape(p, s):
    data = s[0]
    if data is None:
        return s, [None, None, None]
    _need_rank(data, 3, 999, "GroupNorm", "batch, channel, spatial...")
    if data[1] % p.num_groups:
        raise ShapeError(f"num_groups={p.num_groups} must divide the channels ({data[1]}) "
                         f"of data {tuple(data)}")
    g, ng = (p.num_groups,), (data[0], p.num_groups)
    return [data, g, g], [tuple(data), ng, ng]


def _groups(p, v):
    return v.reshape(v.shape[0], p.num_groups, -1)


def _gn_lower(p, ctx, x, gamma, beta):
    xg = _groups(p, x)
    mean = xg.mean(axis=2, keepdims=True)
    xc = xg - mean
    std = jnp.sqrt(jnp.square(xc).mean(axis=2, keepdims=True) + np.asarray(p.eps, x.dtype))
    y = xc / std * gamma.reshape(1, -1, 1) + beta.reshape(1, -1, 1)
    return y.reshape(x.shape), lax.stop_gradient(mean[..., 0]), lax.stop_gradient(std[..., 0])


_gn = register(OpDef(
    name="GroupNorm",
    attrs={"num_groups": Attr(positive_int_attr, 1, "groups of channels, dividing C"),
           "eps": Attr(float_attr, 1e-5, "added to the variance"),
           "output_mean_var": Attr(bool_attr, False, "make mean and std visible")},
    arguments=("data", "gamma", "beta"), outputs=("output", "mean", "std"),
    visible_outputs=lambda p: 3 if p.output_mean_var else 1,
    lower=_gn_lower, infer_shape=_gn_shape, inplace=[(0, 0)], family="normalization",
    per_sample=True, flops=lambda p, ins, outs: 7 * numel(ins[0]),
    doc="Group normalisation: data (N, C, spatial...) seen as (N, num_groups, C/num_groups "
        "* spatial), each group normalised, out = (x - mean) / sqrt(var + eps) * gamma + "
        "beta with gamma and beta per group, shape (num_groups,) as in MXNet 1.9.1; hidden "
        "outputs mean and std, shape (N, num_groups), visible with output_mean_var.",
    samples=[Sample({"num_groups": 2}, [(2, 4, 3)]),
             Sample({"num_groups": 3, "output_mean_var": True}, [(2, 6, 2, 2)]),
             Sample({}, [(3, 2, 2, 2)]),
             Sample({"num_groups": 4, "eps": 1e-3}, [(2, 4, 5)])]))


def _gn_backward(p, ctx, og, ins, outs):
    (dy,), (x, gamma), (mean, std) = og, ins, outs
    dyg = _groups(p, dy)
    mean, std = mean[..., None], std[..., None]
    xh = (_groups(p, x) - mean) / std
    dx = _normalize_grads(dyg, xh, gamma.reshape(1, -1, 1) / std, 2)
    return [dx.reshape(x.shape), (dyg * xh).sum(axis=(0, 2)), dyg.sum(axis=(0, 2))]


register_backward(_gn, reads_inputs=(0, 1), reads_outputs=(1, 2), reads_ograds=(0,),
                  lower=_gn_backward, infer_shape=_affine_backward_shape,
                  flops=lambda p, ins, outs: 10 * numel(ins[1]))


# --------------------------------------------------------------------------
# L2Normalization: x / sqrt(sum x^2 + eps) per instance, channel or spatial
# --------------------------------------------------------------------------
def _l2_axes(p, ndim):
    """The axes summed: instance: all but the batch; channel: the channel
    axis (one norm per sample and position); spatial: the spatial axes."""
    if p.mode == "instance":
        return tuple(range(1, ndim))
    return (1,) if p.mode == "channel" else tuple(range(2, ndim))


def _l2_shape(p, s):
    data = s[0]
    if data is None:
        return s, [None, None]
    if p.mode == "instance":
        _need_rank(data, 1, 999, "L2Normalization", "batch, ...")
        norm = (data[0],)
    else:
        _need_rank(data, 3, 999, f"L2Normalization with mode={p.mode}",
                   "batch, channel, spatial...")
        norm = (data[0], 1) + tuple(data[2:]) if p.mode == "channel" else tuple(data[:2])
    return s, [tuple(data), norm]


def _l2_view(p, norm, ndim):
    """The saved norm broadcast against the data."""
    if p.mode == "channel":
        return norm
    return norm.reshape(norm.shape + (1,) * (ndim - norm.ndim))


def _l2_lower(p, ctx, x):
    axes = _l2_axes(p, x.ndim)
    norm = jnp.sqrt(jnp.square(x).sum(axis=axes, keepdims=p.mode == "channel")
                    + np.asarray(p.eps, x.dtype))
    return x / _l2_view(p, norm, x.ndim), norm


_l2 = register(OpDef(
    name="L2Normalization",
    attrs={"eps": Attr(float_attr, 1e-10, "added to the sum of squares"),
           "mode": Attr(choice_attr("instance", "channel", "spatial"), "instance",
                        "instance: over each sample; channel: across the channels at "
                        "each position; spatial: over each channel's positions")},
    outputs=("output", "norm"), visible_outputs=1, lower=_l2_lower, infer_shape=_l2_shape,
    family="normalization", per_sample=True, flops=lambda p, ins, outs: 3 * numel(ins[0]),
    doc="x / sqrt(sum(x^2) + eps), the sum over each sample (instance), across the channels "
        "at each position (channel: norm (N, 1, spatial...)) or over each channel's "
        "positions (spatial: norm (N, C)); hidden output norm (MXNet 1.9.1; channel and "
        "spatial need rank >= 3).",
    samples=[Sample({}, [(3, 4)]),
             Sample({"mode": "channel"}, [(2, 3, 4)]),
             Sample({"mode": "spatial"}, [(2, 3, 2, 2)]),
             Sample({"mode": "instance", "eps": 1e-4}, [(2, 3, 2, 2)]),
             Sample({"mode": "channel"}, [(1, 2, 2, 3, 2)])]))


# y = x / n, n = sqrt(sum x^2 + eps): dx = (dy - y sum(dy y)) / n -- reads the
# output and the norm only; the data gradient may overwrite dy
def _l2_backward(p, ctx, og, ins, outs):
    (dy,), (y, norm) = og, outs
    axes = _l2_axes(p, y.ndim)
    dot = (dy * y).sum(axis=axes, keepdims=True)
    return [(dy - y * dot) / _l2_view(p, norm, y.ndim)]


register_backward(_l2, reads_inputs=(), reads_outputs=(0, 1), lower=_l2_backward,
                  infer_shape=lambda p, s: (s, [s[0] or s[1]]), inplace=[(0, 0)],
                  flops=lambda p, ins, outs: 4 * numel(ins[0]))
