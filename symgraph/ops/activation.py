"""Activations with parameters or randomness: the LeakyReLU family (leaky,
elu, selu, gelu, prelu with a learned slope per channel) and Dropout.

Part of the neural-network layers (``ops/nn.py`` imports them all);
names, attributes and defaults follow MXNet 1.x.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from .backward import register_backward
from .conv import _spatial_axes
from .registry import Attr, OpDef, Sample, choice_attr, float_attr, numel, register, shape_attr
from .tensor import _axis


# --------------------------------------------------------------------------
# LeakyReLU family: leaky, elu, selu, gelu and prelu (learned slope per channel).
# rrelu (random slope) is not implemented.
# --------------------------------------------------------------------------
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_LAMBDA = 1.0507009873554804934193349852946


def _lrelu_forward(p, x, gamma=None):
    t = p.act_type
    if t == "leaky":
        return jnp.where(x > 0, x, p.slope * x)
    if t == "elu":
        return jnp.where(x > 0, x, p.slope * jnp.expm1(x))
    if t == "selu":
        return _SELU_LAMBDA * jnp.where(x > 0, x, _SELU_ALPHA * jnp.expm1(x))
    if t == "gelu":  # MXNet 1.x uses the exact erf form
        return 0.5 * x * (1 + jax.scipy.special.erf(x / math.sqrt(2)))
    return jnp.where(x > 0, x, _prelu_gamma(gamma, x.ndim) * x)


def _prelu_gamma(gamma, ndim):
    return gamma.reshape((1, -1) + (1,) * (ndim - 2)) if ndim >= 2 else gamma


def _lrelu_reads_output(p) -> bool:
    # with a non-negative slope, y > 0 exactly where x > 0, and the derivative
    # can be written in y: the input may then be overwritten in place
    return p.act_type == "selu" or (p.act_type in ("leaky", "elu") and p.slope >= 0)


def _lrelu_shape(p, s):
    data = s[0]
    if p.act_type != "prelu" or data is None:
        return [data] * len(s), [data]
    gamma = s[1]
    if gamma is not None and tuple(gamma) == (1,):
        return s, [data]  # one slope shared by every channel
    return [data, (data[1] if len(data) >= 2 else 1,)], [data]


_lrelu = register(OpDef(
    name="LeakyReLU",
    attrs={"act_type": Attr(choice_attr("leaky", "elu", "prelu", "selu", "gelu"), "leaky",
                            "rrelu is not supported"),
           "slope": Attr(float_attr, 0.25), "lower_bound": Attr(float_attr, 0.125,
                                                                  "rrelu only"),
           "upper_bound": Attr(float_attr, 0.334, "rrelu only")},
    arguments=lambda p: ["data", "gamma"] if p.act_type == "prelu" else ["data"],
    lower=lambda p, ctx, x, gamma=None: _lrelu_forward(p, x, gamma),
    infer_shape=_lrelu_shape, inplace=[(0, 0)], category="elementwise", family="activation",
    flops=lambda p, ins, outs: numel(outs[0]),
    doc="leaky, elu, selu, gelu (erf) or prelu (gamma: one slope per channel, axis 1).",
    samples=[Sample({}, [(3, 4)]), Sample({"slope": -0.5}, [(2, 3, 2)]),
             Sample({"act_type": "elu", "slope": 0.7}, [(3, 4)]),
             Sample({"act_type": "elu", "slope": -0.3}, [(3, 4)]),
             Sample({"act_type": "selu"}, [(2, 3, 2)]),
             Sample({"act_type": "gelu"}, [(3, 4)], low=-3.0, high=3.0),
             Sample({"act_type": "prelu"}, [(2, 3, 2, 2)]),
             Sample({"act_type": "prelu"}, [(4, 3), (1,)])]))


def _lrelu_backward_rule(p, ctx, og, ins, outs):
    if p.act_type == "prelu":
        return _lrelu_backward_lower(p, og[0], *ins)
    return [_lrelu_backward_lower(p, og[0], (ins or outs)[0])]


def _lrelu_backward_lower(p, dy, v, gamma=None):
    """dx for leaky/elu/selu/gelu from v = the output or the input; for prelu
    (v = input) [dx, dgamma], None where not needed. Math per act_type in the
    comments."""
    t = p.act_type
    if _lrelu_reads_output(p):
        if t == "leaky":  # y = x or slope x; dx = dy (1 or slope)
            return jnp.where(v > 0, dy, p.slope * dy)
        if t == "elu":  # y = slope (e^x - 1) for x <= 0; dy/dx = y + slope
            return jnp.where(v > 0, dy, dy * (v + p.slope))
        # selu: y = L a (e^x - 1) for x <= 0; dy/dx = y + L a
        return jnp.where(v > 0, _SELU_LAMBDA * dy, dy * (v + _SELU_LAMBDA * _SELU_ALPHA))
    if t == "leaky":
        return jnp.where(v > 0, dy, p.slope * dy)
    if t == "elu":  # dx = dy slope e^x for x <= 0
        return jnp.where(v > 0, dy, dy * p.slope * jnp.exp(v))
    if t == "gelu":  # y = x Phi(x); dx = dy (Phi(x) + x phi(x))
        cdf = 0.5 * (1 + jax.scipy.special.erf(v / math.sqrt(2)))
        pdf = jnp.exp(-0.5 * v * v) / math.sqrt(2 * math.pi)
        return dy * (cdf + v * pdf)
    # prelu: y = x or gamma_c x; dx = dy (1 or gamma_c); dgamma_c = sum dy x [x <= 0]
    need = list(p.need) if p.need else [1, 1]
    out = [None, None]
    if need[0]:
        out[0] = jnp.where(v > 0, dy, _prelu_gamma(gamma, v.ndim) * dy)
    if need[1]:
        contrib = jnp.where(v > 0, 0, dy * v)
        if gamma.shape == (1,) or v.ndim < 2:
            out[1] = contrib.sum().reshape(gamma.shape)
        else:
            out[1] = contrib.sum(axis=_spatial_axes(v.ndim))
    return out


def _lrelu_backward_shape(p, s):
    if p.act_type != "prelu":
        return s, [s[1]]
    need = list(p.need) if p.need else [1, 1]
    return s, [x for x, m in zip([s[1], s[2]], need) if m]


# prelu reads the input and gamma; leaky/elu (slope >= 0) and selu the
# output; the others the input
register_backward(
    _lrelu,
    reads_inputs=lambda p: ([0, 1] if p.act_type == "prelu" else
                            [] if _lrelu_reads_output(p) else [0]),
    reads_outputs=lambda p: [0] if _lrelu_reads_output(p) else [],
    lower=_lrelu_backward_rule, infer_shape=_lrelu_backward_shape,
    # dx may overwrite dy; for prelu only when dx is computed (else output 0 is dgamma)
    inplace=lambda p: [] if p.act_type == "prelu" and p.need and not p.need[0] else [(0, 0)],
    category="opaque",  # prelu's gamma gradient is a reduction
    flops=lambda p, ins, outs: 3 * numel(ins[0]))


# --------------------------------------------------------------------------
# Dropout: y = x * mask, mask = keep / (1 - p), keep ~ Bernoulli(1 - p)
# --------------------------------------------------------------------------
def probability_attr(v):
    x = float_attr(v)
    if not 0.0 <= x < 1.0:
        raise ValueError(f"expected a probability in [0, 1), got {x}")
    return x


def _dropout_mask_shape(p, shape):
    axes = {_axis(a, len(shape), "axes") for a in p.axes}
    return tuple(1 if i in axes else d for i, d in enumerate(shape))


def _dropout_shape(p, s):
    data = s[0]
    return s, [data, None if data is None else _dropout_mask_shape(p, data)]


def _dropout_lower(p, ctx, x):
    """(y, mask). As in MXNet the hidden mask holds the scaled keep mask
    (0 or 1/(1-p)); when dropout is off it is all ones, so the backward
    dx = dy * mask is right in both cases without knowing the mode."""
    shape = _dropout_mask_shape(p, x.shape)
    if not (ctx.is_train or p.mode == "always") or p.p == 0:
        return x, jnp.ones(shape, x.dtype)
    keep = jax.random.bernoulli(ctx.rng(), 1.0 - p.p, shape)
    mask = keep.astype(x.dtype) * (1.0 / (1.0 - p.p))
    return x * mask, mask


_dropout = register(OpDef(
    name="Dropout",
    per_sample=False,  # its mask is drawn for the whole batch from one key
    attrs={"p": Attr(probability_attr, 0.5, "probability of dropping an element"),
           "mode": Attr(choice_attr("training", "always"), "training",
                        "training: identity outside training; always: drop in inference too"),
           "axes": Attr(shape_attr, (), "axes along which one mask value is shared")},
    outputs=("output", "mask"), visible_outputs=1, needs_rng=True,
    lower=_dropout_lower, infer_shape=_dropout_shape, inplace=[(0, 0)],
    # two outputs and a random draw: not a plain elementwise op for fusion
    category="opaque", flops=lambda p, ins, outs: numel(ins[0]),
    doc="Dropout; the hidden mask output holds 0 or 1/(1-p) per element.",
    samples=[Sample({}, [(4, 5)]), Sample({"p": 0.3, "axes": (1,)}, [(3, 4, 2)]),
             Sample({"p": 0.2, "mode": "always"}, [(2, 3, 2)])]))

# dx = dy * mask (mask already carries 1/(1-p)) -- reads the mask only
register_backward(_dropout, reads_inputs=(), reads_outputs=(1,),
                  lower=lambda p, ctx, og, ins, outs: [og[0] * outs[0]],
                  infer_shape=lambda p, s: (s, [s[0]]), inplace=[(0, 0)],
                  category="elementwise")
