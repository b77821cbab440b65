"""Normalization, resampling and spatial rearrangement layers of MXNet 1.9.1
that models bring beside the classic ones: LayerNorm, InstanceNorm,
GroupNorm, L2Normalization, UpSampling, _contrib_BilinearResize2D,
_contrib_AdaptiveAvgPooling2D, Pad, Crop, depth_to_space, space_to_depth.

Names, attributes, defaults, hidden outputs and what each backward reads
are MXNet 1.9.1's (src/operator/nn/layer_norm*, group_norm*,
instance_norm*, l2_normalization*, upsampling*, contrib/bilinear_resize*,
contrib/adaptive_avg_pooling*, pad*, crop*, tensor/matrix_op*):

- LayerNorm, GroupNorm and InstanceNorm keep their statistics as hidden
  outputs (LayerNorm/GroupNorm: mean and std = sqrt(var + eps);
  InstanceNorm: mean and the biased variance) and their backward reads the
  data, gamma and those statistics, never the output. No gradient flows
  back through the visible mean/std of ``output_mean_var``.
- L2Normalization's backward reads its output and the hidden norm, not the
  data, and may write the data gradient over the output gradient.
- UpSampling nearest, Pad, Crop, BilinearResize2D and AdaptiveAvgPooling2D
  read no data in their backward: only the output gradient and, where the
  output does not determine it, the input's shape.
- depth_to_space and space_to_depth are each other's gradient.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..errors import ShapeError
from .backward import register_backward
from .conv import _deconv_nobias, optional_float_attr
from .registry import (Attr, OpDef, Params, Sample, bool_attr, choice_attr, count_attr, float_attr,
                       int_attr, numel, positive_int_attr, register, shape_attr)
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


# --------------------------------------------------------------------------
# UpSampling: nearest (1-N inputs, concat or sum) or bilinear (a depthwise
# Deconvolution with a weight input, as MXNet defines it)
# --------------------------------------------------------------------------
def _up_args(p):
    if p.sample_type == "nearest":
        return [f"arg{i}" for i in range(p.num_args)]
    return ["data", "weight"]


def _bilinear_deconv(p, channels):
    """MXNet's Deconvolution behind bilinear UpSampling: kernel 2s - s % 2,
    stride s, pad ceil((s - 1) / 2), one group per channel, no bias."""
    s = p.scale
    k, q = 2 * s - s % 2, -(-(s - 1) // 2)
    return Params(kernel=(k, k), stride=(s, s), pad=(q, q), dilate=(1, 1), adj=(0, 0),
                  target_shape=(), num_group=channels, num_filter=channels, no_bias=True,
                  layout=None)


def _nearest_scales(p, shapes):
    """Each input's own scale: the output is (scale * h0, scale * w0) of the
    first input; every other input is upsampled to it (MXNet's rule)."""
    oh, ow = shapes[0][2] * p.scale, shapes[0][3] * p.scale
    out = []
    for i, sh in enumerate(shapes):
        if oh % sh[2] or ow % sh[3] or oh // sh[2] != ow // sh[3]:
            raise ShapeError(f"UpSampling: input arg{i} {tuple(sh)} does not upsample to the "
                             f"output's {oh} x {ow} (scale={p.scale} times arg0's "
                             f"{shapes[0][2]} x {shapes[0][3]}) by one integer factor")
        out.append(oh // sh[2])
    return out


def _up_shape(p, s):
    if p.sample_type == "bilinear":
        data = s[0]
        if data is None:
            return s, [None]
        _need_rank(data, 4, 4, "UpSampling", "NCHW")
        if p.num_filter != data[1]:
            raise ShapeError(f"bilinear UpSampling needs num_filter equal to the channels "
                             f"of data {tuple(data)} ({data[1]}), got num_filter="
                             f"{p.num_filter}")
        k = 2 * p.scale - p.scale % 2
        return [data, (data[1], 1, k, k)], [(data[0], data[1], data[2] * p.scale,
                                              data[3] * p.scale)]
    if any(sh is None for sh in s):
        return s, [None]
    for i, sh in enumerate(s):
        _need_rank(sh, 4, 4, f"UpSampling (input arg{i})", "NCHW")
        if sh[0] != s[0][0]:
            raise ShapeError(f"UpSampling: inputs must share the batch size, got arg0 "
                             f"{tuple(s[0])} and arg{i} {tuple(sh)}")
    _nearest_scales(p, s)
    if p.multi_input_mode == "sum":
        if any(sh[1] != s[0][1] for sh in s):
            raise ShapeError(f"UpSampling with multi_input_mode=sum needs one channel count, "
                             f"got {', '.join(str(tuple(sh)) for sh in s)}")
        c = s[0][1]
    else:
        c = sum(sh[1] for sh in s)
    return s, [(s[0][0], c, s[0][2] * p.scale, s[0][3] * p.scale)]


def _nearest(x, k):
    n, c, h, w = x.shape
    return jnp.broadcast_to(x[:, :, :, None, :, None], (n, c, h, k, w, k)).reshape(
        n, c, h * k, w * k)


def _up_lower(p, ctx, *xs):
    if p.sample_type == "bilinear":
        x, w = xs
        return _deconv_nobias(_bilinear_deconv(p, x.shape[1]), x, w)
    ups = [_nearest(x, k) for x, k in zip(xs, _nearest_scales(p, [x.shape for x in xs]))]
    if len(ups) == 1:
        return ups[0]
    if p.multi_input_mode == "sum":
        out = ups[0]
        for u in ups[1:]:
            out = out + u
        return out
    return jnp.concatenate(ups, axis=1)


def _up_flops(p, ins, outs):
    if p.sample_type == "bilinear":
        return 2 * numel(ins[0]) * numel(ins[1][1:])
    return numel(outs[0]) if len(ins) > 1 and p.multi_input_mode == "sum" else 0


_up = register(OpDef(
    name="UpSampling",
    attrs={"scale": Attr(positive_int_attr, doc="the output is scale times arg0's H and W"),
           "sample_type": Attr(choice_attr("nearest", "bilinear"),
                               doc="bilinear: a Deconvolution with a weight input"),
           "num_args": Attr(count_attr, doc="inputs (nearest); bilinear takes data "
                                                   "and weight whatever it says"),
           "num_filter": Attr(int_attr, 0, "bilinear: the channels of data"),
           "multi_input_mode": Attr(choice_attr("concat", "sum"), "concat",
                                    "nearest with several inputs: concatenate along the "
                                    "channels or add")},
    arguments=_up_args, lower=_up_lower, infer_shape=_up_shape, flops=_up_flops,
    family="pooling", per_sample=True,
    doc="Upsamples NCHW data by an integer scale. nearest: every input arg_i is repeated to "
        "(scale * H0, scale * W0) and the results concatenated along the channels (or "
        "added, multi_input_mode=sum). bilinear: MXNet's Deconvolution with weight "
        "(C, 1, k, k), k = 2 scale - scale % 2, stride scale, pad ceil((scale - 1) / 2), "
        "one group per channel (num_filter must be C); MXNet fills that weight with the "
        "bilinear kernel (sg.init.Bilinear, or a Variable with init='bilinear').",
    samples=[Sample({"scale": 2, "sample_type": "nearest", "num_args": 1}, [(2, 3, 2, 3)]),
             Sample({"scale": 2, "sample_type": "nearest", "num_args": 2},
                    [(2, 2, 4, 4), (2, 3, 2, 2)]),
             Sample({"scale": 3, "sample_type": "nearest", "num_args": 2,
                     "multi_input_mode": "sum"}, [(1, 2, 2, 2), (1, 2, 6, 6)]),
             Sample({"scale": 2, "sample_type": "bilinear", "num_filter": 3, "num_args": 2},
                    [(2, 3, 3, 3)]),
             Sample({"scale": 3, "sample_type": "bilinear", "num_filter": 2, "num_args": 2},
                    [(1, 2, 2, 3)])]))


def _up_reads(p):
    """nearest reads no data: one input's shape follows from the output
    gradient's, several inputs are read for their shapes only; bilinear
    reads data and weight (the deconvolution's gradients)."""
    if p.sample_type == "bilinear":
        return [0, 1]
    return [] if p.num_args == 1 else list(range(p.num_args))


def _up_backward(p, ctx, og, ins, outs):
    dy = og[0]
    if p.sample_type == "bilinear":
        x, w = ins
        return list(ctx.linear_grads(lambda x, w: _deconv_nobias(
            _bilinear_deconv(p, x.shape[1]), x, w), x, w, dy))
    shapes = [x.shape for x in ins] or [_up_input_shape(p, dy.shape)]
    grads, begin = [], 0
    for sh, k in zip(shapes, _nearest_scales(p, shapes)):
        part = dy if p.multi_input_mode == "sum" or len(shapes) == 1 else \
            dy[:, begin:begin + sh[1]]
        begin += sh[1]
        grads.append(part.reshape(sh[0], sh[1], sh[2], k, sh[3], k).sum(axis=(3, 5)))
    return grads


def _up_input_shape(p, og):
    return (og[0], og[1], og[2] // p.scale, og[3] // p.scale)


def _up_backward_shape(p, s):
    if p.sample_type == "nearest" and p.num_args == 1:
        return s, [None if s[0] is None else _up_input_shape(p, s[0])]
    read = s[1:]
    need = list(p.need) if p.need else [1] * len(read)
    return s, [sh for sh, m in zip(read, need) if m]


_up_backward_op = register_backward(
    _up, reads_inputs=_up_reads, lower=_up_backward, infer_shape=_up_backward_shape,
    flops=lambda p, ins, outs: (4 * numel(ins[1]) * numel(ins[2][1:])
                                if p.sample_type == "bilinear" else numel(ins[0])))
# which inputs are read for their shape only depends on sample_type (nearest:
# all it reads; bilinear: none), so it is set here rather than given to
# register_backward; the backward node's inputs are dy, then what it reads
_up_backward_op.shape_inputs = lambda p: (
    list(range(1, 1 + len(_up_reads(p)))) if p.sample_type == "nearest" else [])


# --------------------------------------------------------------------------
# _contrib_BilinearResize2D: bilinear resampling of NCHW to a new H x W
# --------------------------------------------------------------------------
_RESIZE_MODES = ("size", "odd_scale", "like", "to_even_down", "to_even_up", "to_odd_down",
                 "to_odd_up")


def _f32_size(scale, n):
    """int(scale * n) computed in float32, as MXNet's shape rule does."""
    with np.errstate(over="ignore", invalid="ignore"):
        v = np.float32(scale) * np.float32(n)
    if not np.isfinite(v) or abs(v) >= 2 ** 31:
        raise ShapeError(f"a scale of {scale} gives a size out of range for an axis of {n}")
    return int(v)


def _resize_out(p, data, like):
    """(height, width) of the output by MXNet 1.9.1's BilinearSampleOpInferShape."""
    h, w = data[2], data[3]
    if p.mode == "size":
        if p.scale_height is None:
            return p.height, p.width
        if p.scale_width is None:
            raise ShapeError("scale_height without scale_width: MXNet 1.9.1 reads "
                             "scale_width whenever scale_height is given; give both")
        return _f32_size(p.scale_height, h), _f32_size(p.scale_width, w)
    if p.mode == "odd_scale":
        if p.scale_height is None or p.scale_width is None:
            raise ShapeError("mode=odd_scale needs scale_height and scale_width")
        return tuple(_f32_size(sc, n) if n % 2 == 0 else _f32_size(sc, n - 1) + 1
                     for sc, n in ((p.scale_height, h), (p.scale_width, w)))
    if p.mode == "like":
        return like[2], like[3]
    even = p.mode.startswith("to_even")
    step = -1 if p.mode.endswith("down") else 1
    return tuple(n if (n % 2 == 0) == even else n + step for n in (h, w))


def _resize_shape(p, s):
    data = s[0]
    like = s[1] if p.mode == "like" else None
    if data is None or (p.mode == "like" and like is None):
        return s, [None]
    _need_rank(data, 4, 4, "BilinearResize2D", "NCHW")
    if like is not None:
        _need_rank(like, 4, 4, "BilinearResize2D's like input", "NCHW")
    oh, ow = _resize_out(p, data, like)
    if oh < 1 or ow < 1:
        raise ShapeError(f"BilinearResize2D of data {tuple(data)} gives an empty output "
                         f"{oh} x {ow} (mode={p.mode}, height={p.height}, width={p.width}, "
                         f"scale_height={p.scale_height}, scale_width={p.scale_width})")
    return s, [(data[0], data[1], oh, ow)]


def _taps(n_in, n_out, align, dtype):
    """MXNet's source index of each output position along one axis: the
    lower tap, the upper tap (the same at the last input) and the upper
    tap's weight. Index arithmetic in float32 as MXNet's (float64 for
    float64 data)."""
    ft = np.float64 if np.dtype(dtype) == np.float64 else np.float32
    if n_out > 1:
        scale = ft(n_in - 1) / ft(n_out - 1) if align else ft(n_in) / ft(n_out)
    else:
        scale = ft(0)
    dst = np.arange(n_out, dtype=ft)
    src = scale * dst if align else np.maximum(scale * (dst + ft(0.5)) - ft(0.5), ft(0))
    lo = np.minimum(src.astype(np.int64), n_in - 1)
    hi = np.where(lo < n_in - 1, lo + 1, lo)
    lam = (src - lo.astype(ft)).astype(dtype)
    return lo, hi, lam


def _resize(x, out_hw, align):
    """h0l (w0l a + w1l b) + h1l (w0l c + w1l d), MXNet's order of terms."""
    (h0, h1, lh), (w0, w1, lw) = (_taps(n, m, align, x.dtype)
                                  for n, m in zip(x.shape[2:], out_hw))
    one = np.ones((), x.dtype)
    t = (one - lw) * jnp.take(x, w0, axis=3) + lw * jnp.take(x, w1, axis=3)
    lh = lh[:, None]
    return (one - lh) * jnp.take(t, h0, axis=2) + lh * jnp.take(t, h1, axis=2)


def _resize_lower(p, ctx, x, like=None):
    return _resize(x, _resize_out(p, x.shape, None if like is None else like.shape),
                   p.align_corners)


_resize_op = register(OpDef(
    name="_contrib_BilinearResize2D",
    attrs={"height": Attr(positive_int_attr, 1, "output height (mode=size without "
                                                 "scale_height)"),
           "width": Attr(positive_int_attr, 1, "output width (mode=size without "
                                                "scale_height)"),
           "scale_height": Attr(optional_float_attr, None, "output height = int(scale * H)"),
           "scale_width": Attr(optional_float_attr, None, "output width = int(scale * W); "
                                                          "read only with scale_height"),
           "mode": Attr(choice_attr(*_RESIZE_MODES), "size",
                        "size, odd_scale, like (the H and W of input like), or to the "
                        "nearest even/odd size down or up"),
           "align_corners": Attr(bool_attr, True, "corner pixels' centres map to each "
                                                  "other (src = dst (in-1)/(out-1)); "
                                                  "else src = (dst+0.5) in/out - 0.5")},
    arguments=lambda p: ["data", "like"] if p.mode == "like" else ["data"],
    shape_inputs=lambda p: [1] if p.mode == "like" else [],
    lower=_resize_lower, infer_shape=_resize_shape, family="pooling", per_sample=True,
    flops=lambda p, ins, outs: 6 * numel(outs[0]),
    doc="Bilinear resize of NCHW data to (height, width), to int(scale * H/W) in float32 "
        "(mode=size with scale_height; as MXNet 1.9.1, scale_width is read only when "
        "scale_height is given), or by mode (odd_scale, like, to_even_down, to_even_up, "
        "to_odd_down, to_odd_up); align_corners as MXNet 1.9.1 (default True). The "
        "backward reads only the output gradient (and the input's shape); like gets no "
        "gradient.",
    samples=[Sample({"height": 5, "width": 7}, [(2, 2, 3, 4)]),
             Sample({"height": 2, "width": 3, "align_corners": False}, [(1, 2, 5, 7)]),
             Sample({"scale_height": 1.5, "scale_width": 0.5}, [(1, 2, 4, 6)]),
             Sample({"mode": "like"}, [(1, 2, 3, 3), (1, 3, 5, 4)]),
             Sample({"mode": "odd_scale", "scale_height": 2.0, "scale_width": 2.0},
                    [(1, 1, 3, 4)]),
             Sample({"mode": "to_even_up", "align_corners": False}, [(1, 2, 3, 5)]),
             Sample({"height": 4, "width": 4}, [(1, 1, 4, 4)]),
             Sample({"height": 7, "width": 3, "align_corners": False}, [(1, 2, 3, 4)])]))


def _transposed(f, shape, dtype, dy):
    """The adjoint of the linear ``f`` (of inputs of ``shape``) applied to dy."""
    (dx,) = jax.linear_transpose(f, jax.ShapeDtypeStruct(tuple(shape), dtype))(dy)
    return dx


def _resize_backward(p, ctx, og, ins, outs):  # reads dy and the data's shape
    dy, x = og[0], ins[0]
    return [_transposed(lambda v: _resize(v, dy.shape[2:], p.align_corners), x.shape,
                        dy.dtype, dy), None]


register_backward(_resize_op, reads_inputs=(0,), inputs_for_shape_only=True, no_grad=(1,),
                  lower=_resize_backward, flops=lambda p, ins, outs: 6 * numel(ins[0]))


# --------------------------------------------------------------------------
# _contrib_AdaptiveAvgPooling2D: average over windows [floor(o in / out),
# ceil((o + 1) in / out)) per output position
# --------------------------------------------------------------------------
def _adaptive_out(p):
    size = tuple(p.output_size)
    if len(size) > 2:
        raise ShapeError(f"output_size={size}: give one size or (height, width)")
    if any(v < 1 for v in size):
        raise ShapeError(f"output_size={size}: sizes must be >= 1")
    return {0: (1, 1), 1: size * 2, 2: size}[len(size)]


def _adaptive_shape(p, s):
    data = s[0]
    _adaptive_out(p)  # attribute errors surface without shapes
    if data is None:
        return s, [None]
    _need_rank(data, 4, 4, "AdaptiveAvgPooling2D", "NCHW")
    return s, [tuple(data[:2]) + _adaptive_out(p)]


def _window_matrix(n_in, n_out, dtype):
    """(n_out, n_in): row o averages input positions start..end-1."""
    m = np.zeros((n_out, n_in), dtype)
    for o in range(n_out):
        start, end = (o * n_in) // n_out, -(-((o + 1) * n_in) // n_out)
        m[o, start:end] = 1 / (end - start)
    return m


def _adaptive(x, out_hw):
    n, c, h, w = x.shape
    oh, ow = out_hw
    if h % oh == 0 and w % ow == 0:  # equal windows: a reshape and a sum
        kh, kw = h // oh, w // ow
        return x.reshape(n, c, oh, kh, ow, kw).sum(axis=(3, 5)) / np.asarray(kh * kw, x.dtype)
    hi = lax.Precision.HIGHEST
    t = jnp.einsum("nchw,pw->nchp", x, _window_matrix(w, ow, x.dtype), precision=hi)
    return jnp.einsum("oh,nchp->ncop", _window_matrix(h, oh, x.dtype), t, precision=hi)


_adaptive_op = register(OpDef(
    name="_contrib_AdaptiveAvgPooling2D",
    attrs={"output_size": Attr(shape_attr, (), "() for 1 x 1, s for s x s, or (h, w)")},
    lower=lambda p, ctx, x: _adaptive(x, _adaptive_out(p)),
    infer_shape=_adaptive_shape, family="pooling", per_sample=True,
    flops=lambda p, ins, outs: numel(ins[0]),
    doc="Adaptive average pooling of NCHW data to output_size: output (o_h, o_w) averages "
        "rows floor(o_h H / out_h) .. ceil((o_h + 1) H / out_h) - 1 and likewise columns "
        "(MXNet 1.9.1); the backward reads only the output gradient and the input's shape.",
    samples=[Sample({"output_size": (2, 3)}, [(2, 2, 4, 6)]),
             Sample({"output_size": 3}, [(1, 2, 5, 7)]),
             Sample({}, [(2, 3, 3, 2)]),
             Sample({"output_size": (4, 5)}, [(1, 1, 3, 3)])]))


def _adaptive_backward(p, ctx, og, ins, outs):
    dy, x = og[0], ins[0]
    return [_transposed(lambda v: _adaptive(v, dy.shape[2:]), x.shape, dy.dtype, dy)]


register_backward(_adaptive_op, reads_inputs=(0,), inputs_for_shape_only=True,
                  lower=_adaptive_backward, flops=lambda p, ins, outs: numel(outs[0]))


# --------------------------------------------------------------------------
# Pad: constant / edge / reflect padding of the spatial axes of 4-D and 5-D
# --------------------------------------------------------------------------
def _pad_pairs(p, data):
    """((before, after) per axis) for ``data``; ShapeError for what MXNet
    refuses: other ranks, padding of the batch or channel axes, a spec of
    another length, reflection as wide as the axis."""
    _need_rank(data, 4, 5, "Pad", "NCHW or NCDHW; MXNet pads only their spatial axes")
    pw = tuple(p.pad_width)
    if len(pw) != 2 * len(data):
        raise ShapeError(f"pad_width={pw} has {len(pw)} entries; data {tuple(data)} needs "
                         f"{2 * len(data)} (before, after per axis)")
    if any(pw[:4]):
        raise ShapeError(f"pad_width={pw}: MXNet pads only the spatial axes; its first four "
                         f"entries (batch and channel) must be 0")
    if any(v < 0 for v in pw):
        raise ShapeError(f"pad_width={pw}: widths must be >= 0")
    pairs = [(pw[2 * i], pw[2 * i + 1]) for i in range(len(data))]
    if p.mode == "reflect":
        for i, (lo, hi) in enumerate(pairs[2:], 2):
            if max(lo, hi) >= data[i]:
                raise ShapeError(f"mode=reflect needs widths smaller than the axis: "
                                 f"pad_width={pw} pads axis {i} of data {tuple(data)} by "
                                 f"{max(lo, hi)}")
    return pairs


def _pad_shape(p, s):
    data = s[0]
    if data is None:
        return s, [None]
    pairs = _pad_pairs(p, data)
    return s, [tuple(d + lo + hi for d, (lo, hi) in zip(data, pairs))]


def _pad(p, x, pairs, constant):
    if p.mode == "constant":
        return lax.pad(x, np.asarray(constant).astype(x.dtype), [(lo, hi, 0) for lo, hi in pairs])
    return jnp.pad(x, pairs, mode=p.mode)


_pad_op = register(OpDef(
    name="Pad", aliases=("pad",),
    attrs={"mode": Attr(choice_attr("constant", "edge", "reflect"),
                        doc="constant: constant_value; edge: the edge values; reflect: "
                            "mirrored about the edge (numpy's reflect)"),
           "pad_width": Attr(shape_attr, doc="(before_1, after_1, ..., before_N, after_N); "
                                             "the batch and channel entries 0"),
           "constant_value": Attr(float_attr, 0.0, "mode=constant's value")},
    lower=lambda p, ctx, x: _pad(p, x, _pad_pairs(p, x.shape), p.constant_value),
    infer_shape=_pad_shape, category="injective", per_sample=True,
    flops=lambda p, ins, outs: 0,
    doc="Pads the spatial axes of 4-D (NCHW) or 5-D (NCDHW) data, pad_width in MXNet's "
        "2 * ndim form with zeros for the batch and channel axes; reflect widths must be "
        "smaller than the axis (MXNet 1.9.1). The backward reads only the output gradient.",
    samples=[Sample({"mode": "constant", "pad_width": (0, 0, 0, 0, 1, 2, 2, 1),
                     "constant_value": 0.5}, [(2, 2, 3, 3)]),
             Sample({"mode": "edge", "pad_width": (0, 0, 0, 0, 2, 1, 0, 3)}, [(2, 2, 3, 2)]),
             Sample({"mode": "reflect", "pad_width": (0, 0, 0, 0, 2, 1, 1, 2)},
                    [(1, 2, 3, 4)]),
             Sample({"mode": "reflect", "pad_width": (0, 0, 0, 0, 1, 1, 1, 0, 0, 1)},
                    [(1, 1, 2, 3, 2)]),
             Sample({"mode": "edge", "pad_width": (0, 0, 0, 0, 0, 2, 1, 1, 2, 0)},
                    [(2, 1, 2, 2, 3)]),
             Sample({"mode": "constant", "pad_width": (0, 0, 0, 0, 1, 0, 0, 1, 1, 1)},
                    [(1, 2, 2, 2, 2)])]))


def _pad_backward(p, ctx, og, ins, outs):  # reads the output gradient only
    dy = og[0]
    pairs = [(p.pad_width[2 * i], p.pad_width[2 * i + 1]) for i in range(dy.ndim)]
    in_shape = tuple(d - lo - hi for d, (lo, hi) in zip(dy.shape, pairs))
    if p.mode == "constant":
        return [dy[tuple(slice(lo, lo + n) for (lo, _), n in zip(pairs, in_shape))]]
    return [_transposed(lambda v: _pad(p, v, pairs, 0), in_shape, dy.dtype, dy)]


def _pad_backward_shape(p, s):
    og = s[0]
    if og is None:
        return s, [None]
    pw = tuple(p.pad_width)
    return s, [tuple(d - pw[2 * i] - pw[2 * i + 1] for i, d in enumerate(og))]


register_backward(_pad_op, reads_inputs=(), lower=_pad_backward,
                  infer_shape=_pad_backward_shape, category="opaque",
                  flops=lambda p, ins, outs: numel(ins[0]))


# --------------------------------------------------------------------------
# Crop: an H x W window of NCHW data (h_w, or the H and W of a second input)
# --------------------------------------------------------------------------
def _crop_window(p, data, like):
    """(offset_y, offset_x, h, w); ShapeError where MXNet refuses."""
    if len(p.offset) != 2 or len(p.h_w) != 2:
        raise ShapeError(f"offset={tuple(p.offset)} and h_w={tuple(p.h_w)} take two entries "
                         f"each: (y, x) and (h, w)")
    if like is None:
        h, w = p.h_w
        if not (1 <= h <= data[2] and 1 <= w <= data[3]):
            raise ShapeError(f"h_w={tuple(p.h_w)} must be within 1 .. the data's "
                             f"{data[2]} x {data[3]} (data {tuple(data)})")
    else:
        h, w = like[2], like[3]
        if h > data[2] or w > data[3]:
            raise ShapeError(f"crop_like {tuple(like)} is larger than data {tuple(data)} "
                             f"in H or W")
    if p.center_crop:
        return (data[2] - h) // 2, (data[3] - w) // 2, h, w
    oy, ox = p.offset
    if not (0 <= oy <= data[2] - h and 0 <= ox <= data[3] - w):
        raise ShapeError(f"offset={tuple(p.offset)} puts the {h} x {w} window outside data "
                         f"{tuple(data)}: need 0 <= y <= {data[2] - h}, 0 <= x <= "
                         f"{data[3] - w}")
    return oy, ox, h, w


def _crop_shape(p, s):
    data = s[0]
    like = s[1] if p.num_args == 2 else None
    if data is None or (p.num_args == 2 and like is None):
        return s, [None]
    _need_rank(data, 4, 4, "Crop", "NCHW")
    if like is not None:
        _need_rank(like, 4, 4, "Crop's crop_like", "NCHW")
    *_, h, w = _crop_window(p, data, like)
    return s, [(data[0], data[1], h, w)]


def _crop_lower(p, ctx, x, like=None):
    oy, ox, h, w = _crop_window(p, x.shape, None if like is None else like.shape)
    return x[:, :, oy:oy + h, ox:ox + w]


def crop_args_attr(v) -> int:
    """Crop's num_args: 1 (data, cropped to h_w) or 2 (data, crop_like)."""
    n = int_attr(v)
    if n not in (1, 2):
        raise ValueError(f"Crop takes 1 input (data, cropped to h_w) or 2 (data, crop_like), "
                         f"got {n}")
    return n


_crop = register(OpDef(
    name="Crop",
    attrs={"num_args": Attr(crop_args_attr, doc="1: crop to h_w; 2: to the H and W of "
                                                "the second input (crop_like)"),
           "offset": Attr(shape_attr, (0, 0), "(y, x) of the window's corner"),
           "h_w": Attr(shape_attr, (0, 0), "(h, w) of the window (num_args=1)"),
           "center_crop": Attr(bool_attr, False, "centre the window; offset ignored")},
    arguments=lambda p: [f"arg{i}" for i in range(p.num_args)],
    shape_inputs=lambda p: [1] if p.num_args == 2 else [],
    lower=_crop_lower, infer_shape=_crop_shape, category="injective", per_sample=True,
    flops=lambda p, ins, outs: 0,
    doc="Crops NCHW data (arg0) to h_w, or to the H and W of arg1 (crop_like, read for its "
        "shape only), at offset (y, x) or centred (MXNet 1.9.1). The backward reads only "
        "the output gradient (and the data's shape); crop_like gets no gradient.",
    samples=[Sample({"num_args": 1, "h_w": (2, 3), "offset": (1, 1)}, [(2, 2, 4, 5)]),
             Sample({"num_args": 1, "h_w": (2, 2), "center_crop": True}, [(1, 2, 5, 5)]),
             Sample({"num_args": 2}, [(2, 2, 5, 6), (2, 3, 3, 4)]),
             Sample({"num_args": 2, "center_crop": True}, [(1, 2, 6, 7), (1, 1, 3, 3)]),
             Sample({"num_args": 2, "offset": (2, 1)}, [(2, 2, 5, 4), (2, 2, 3, 2)])]))


def _crop_backward(p, ctx, og, ins, outs):  # dy padded back with zeros
    dy, x = og[0], ins[0]
    oy, ox = ((x.shape[2] - dy.shape[2]) // 2, (x.shape[3] - dy.shape[3]) // 2) \
        if p.center_crop else tuple(p.offset)
    pads = [(0, 0, 0), (0, 0, 0), (oy, x.shape[2] - dy.shape[2] - oy, 0),
            (ox, x.shape[3] - dy.shape[3] - ox, 0)]
    return [lax.pad(dy, np.zeros((), dy.dtype), pads), None]


register_backward(_crop, reads_inputs=(0,), inputs_for_shape_only=True, no_grad=(1,),
                  lower=_crop_backward, category="injective",
                  flops=lambda p, ins, outs: 0)


# --------------------------------------------------------------------------
# depth_to_space / space_to_depth (DCR order, as MXNet and ONNX's default)
# --------------------------------------------------------------------------
def _d2s_shape(p, s):
    data = s[0]
    if data is None:
        return s, [None]
    _need_rank(data, 4, 4, "depth_to_space", "NCHW")
    b = p.block_size
    if data[1] % (b * b):
        raise ShapeError(f"depth_to_space: the channels of data {tuple(data)} ({data[1]}) "
                         f"must be a multiple of block_size^2 = {b * b}")
    return s, [(data[0], data[1] // (b * b), data[2] * b, data[3] * b)]


def _s2d_shape(p, s):
    data = s[0]
    if data is None:
        return s, [None]
    _need_rank(data, 4, 4, "space_to_depth", "NCHW")
    b = p.block_size
    if data[2] % b or data[3] % b:
        raise ShapeError(f"space_to_depth: H and W of data {tuple(data)} must be multiples "
                         f"of block_size={b}")
    return s, [(data[0], data[1] * b * b, data[2] // b, data[3] // b)]


def _d2s_lower(p, ctx, x):
    n, c, h, w = x.shape
    b = p.block_size
    y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    return y.reshape(n, c // (b * b), h * b, w * b)


def _s2d_lower(p, ctx, x):
    n, c, h, w = x.shape
    b = p.block_size
    y = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
    return y.reshape(n, c * b * b, h // b, w // b)


def _inverse_gradient(other):
    def gradient(g, node, og):
        return [g.op(other, [og[0]], {"block_size": node.params.block_size})[0]]
    return gradient


_BLOCK = {"block_size": Attr(positive_int_attr, doc="the side of the blocks moved")}

register(OpDef(
    name="depth_to_space", attrs=_BLOCK, lower=_d2s_lower, infer_shape=_d2s_shape,
    category="injective", per_sample=True, flops=lambda p, ins, outs: 0,
    gradient=_inverse_gradient("space_to_depth"),
    doc="Moves channel blocks into space (DCR): (N, C, H, W) -> (N, C/b^2, H b, W b), "
        "out[n, c, h b + i, w b + j] = x[n, (i b + j) C/b^2 + c, h, w] (MXNet 1.9.1); "
        "the gradient is space_to_depth.",
    samples=[Sample({"block_size": 2}, [(2, 8, 2, 3)]),
             Sample({"block_size": 3}, [(1, 9, 2, 2)]),
             Sample({"block_size": 1}, [(1, 2, 2, 2)])]))

register(OpDef(
    name="space_to_depth", attrs=_BLOCK, lower=_s2d_lower, infer_shape=_s2d_shape,
    category="injective", per_sample=True, flops=lambda p, ins, outs: 0,
    gradient=_inverse_gradient("depth_to_space"),
    doc="Moves spatial blocks into the channels, the inverse of depth_to_space: (N, C, H, "
        "W) -> (N, C b^2, H/b, W/b) (MXNet 1.9.1); the gradient is depth_to_space.",
    samples=[Sample({"block_size": 2}, [(2, 2, 4, 6)]),
             Sample({"block_size": 3}, [(1, 1, 3, 6)])]))
