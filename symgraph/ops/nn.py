"""Neural-network layers: FullyConnected, Convolution, Deconvolution, Pooling,
BatchNorm, Dropout, LRN, LeakyReLU, Embedding.

Names, attributes and defaults follow MXNet 1.x. Layout is channel-first
(NCW/NCHW/NCDHW, MXNet's default); the kernel's length picks 1-D/2-D/3-D.
Each layer infers its parameter shapes from the data shape, so
``infer_shape(data=...)`` yields every weight. Every backward reads only
what its math needs (listed beside each rule); notably max pooling's
backward compares the input against the output instead of keeping argmax
indices, and BatchNorm's reads the saved mean and inverse std.
"""
from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..errors import ShapeError
from .backward import register_backward
from .registry import (Attr, OpDef, Sample, bool_attr, choice_attr, dtype_attr,
                       float_attr, int_attr, numel, optional_int_attr, positive_int_attr,
                       register, shape_attr)
from .tensor import _attrs_of, _axis


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
# shared geometry of Convolution, Deconvolution and Pooling: channel-first
# (NCW/NCHW/NCDHW, the default) or, for Convolution and Pooling, channel-last
# (NWC/NHWC/NDHWC) as MXNet's layout attribute says
# --------------------------------------------------------------------------
_LAYOUTS = {1: "NCW", 2: "NCHW", 3: "NCDHW"}
CHANNELS_LAST = {1: "NWC", 2: "NHWC", 3: "NDHWC"}


def layout_attr(v):
    """None or a layout: channel-first (NCW, NCHW, NCDHW) or channel-last
    (NWC, NHWC, NDHWC)."""
    v = None if v in (None, "None", "") else str(v)
    if v is not None and v not in (*_LAYOUTS.values(), *CHANNELS_LAST.values()):
        raise ValueError(f"expected None, {', '.join(_LAYOUTS.values())} or "
                         f"{', '.join(CHANNELS_LAST.values())}, got {v!r}")
    return v


layout_attr.choices = ("None", *_LAYOUTS.values(), *CHANNELS_LAST.values())


def channel_first_layout_attr(v):
    """None or a channel-first layout (Deconvolution has no channel-last one)."""
    v = layout_attr(v)
    if v in CHANNELS_LAST.values():
        raise ValueError(f"expected None, NCW, NCHW or NCDHW (channel-first layouts), got {v!r}")
    return v


channel_first_layout_attr.choices = ("None", *_LAYOUTS.values())


_WEIGHT_LAYOUTS = {1: ("OIW", "OWI"), 2: ("OIHW", "OHWI"), 3: ("OIDHW", "ODHWI")}


def weight_layout_attr(v):
    """None (MXNet's: the data layout's) or a convolution weight layout."""
    v = None if v in (None, "None", "") else str(v)
    known = [w for pair in _WEIGHT_LAYOUTS.values() for w in pair]
    if v is not None and v not in known:
        raise ValueError(f"expected None or one of {', '.join(known)}, got {v!r}")
    return v


weight_layout_attr.choices = ("None", *[w for pair in _WEIGHT_LAYOUTS.values() for w in pair])


def _weight_channels_last(p) -> bool:
    """Whether a convolution's weight is (O, *kernel, I): MXNet's for a
    channel-last layout, unless ``weight_layout`` says otherwise."""
    return p.weight_layout.endswith("I") if p.weight_layout else is_channels_last(p)


def is_channels_last(p) -> bool:
    """Whether a node's ``layout`` attribute holds the channels last."""
    return p.get("layout") in CHANNELS_LAST.values()


def _first(shape, p) -> tuple:
    """``shape`` in channel-first order (it is given in ``p``'s layout)."""
    return _nchw_shape(shape) if is_channels_last(p) else tuple(shape)


def _in_layout(shape, p) -> tuple:
    """A channel-first ``shape`` in ``p``'s layout."""
    return _nhwc_order(shape) if is_channels_last(p) else tuple(shape)


def optional_bool_attr(v):
    v = None if v in (None, "None", "none", "") else v
    return None if v is None else bool_attr(v)


def optional_float_attr(v):
    v = None if v in (None, "None", "none", "") else v
    return None if v is None else float_attr(v)


def _spatial_rank(p, n: int) -> int:
    """Checks that an ``n``-D window fits the layout attribute; returns n."""
    if n not in _LAYOUTS:
        raise ShapeError(f"kernel={tuple(p.kernel)} has {n} dimensions; 1, 2 or 3 are supported")
    if p.layout is not None and p.layout not in (_LAYOUTS[n], CHANNELS_LAST[n]):
        raise ShapeError(f"layout={p.layout} does not fit a {n}-D kernel {tuple(p.kernel)}; "
                         f"use layout={_LAYOUTS[n]} (or {CHANNELS_LAST[n]}) or leave it out")
    return n


def _per_dim(p, name: str, default: int, n: int, minimum: int) -> tuple:
    """Attribute ``name`` with one entry per spatial dim (``default`` if empty)."""
    v = tuple(p[name]) if p[name] else (default,) * n
    if len(v) != n:
        raise ShapeError(f"{name}={v} has {len(v)} entries, but the kernel "
                         f"{tuple(p.kernel)} has {n}; give one per spatial dimension")
    if any(x < minimum for x in v):
        raise ShapeError(f"{name}={v}: every entry must be >= {minimum}")
    return v


def _conv_geometry(p):
    """(rank, stride, pad, dilate) of a Convolution or Deconvolution."""
    n = _spatial_rank(p, len(p.kernel))
    if p.get("weight_layout") and p.weight_layout not in _WEIGHT_LAYOUTS[n]:
        raise ShapeError(f"weight_layout={p.weight_layout} does not fit a {n}-D kernel "
                         f"{tuple(p.kernel)}; use {' or '.join(_WEIGHT_LAYOUTS[n])}")
    if any(k < 1 for k in p.kernel):
        raise ShapeError(f"kernel={tuple(p.kernel)}: every entry must be >= 1")
    return (n, _per_dim(p, "stride", 1, n, 1), _per_dim(p, "pad", 0, n, 0),
            _per_dim(p, "dilate", 1, n, 1))


def _check_data_rank(data, n: int, what: str, p=None):
    if len(data) != n + 2:
        layout = CHANNELS_LAST[n] if p is not None and is_channels_last(p) else _LAYOUTS[n]
        raise ShapeError(f"data {tuple(data)} must be {n + 2}-D ({layout}) for a "
                         f"{n}-D {what}")


def _check_groups(p, channels: int):
    if p.num_filter < 1:
        raise ShapeError(f"num_filter={p.num_filter} must be >= 1")
    if p.num_group < 1 or channels % p.num_group or p.num_filter % p.num_group:
        raise ShapeError(f"num_group={p.num_group} must divide both the input channels "
                         f"({channels}) and num_filter ({p.num_filter})")


def _add_bias(y, b, p=None):
    """y + b with the bias along the channel axis (b None: y)."""
    if b is None:
        return y
    return y + (b if p is not None and is_channels_last(p) else
                b.reshape((1, -1) + (1,) * (y.ndim - 2)))


def _spatial_axes(ndim, p=None):
    """The axes other than the channel axis (batch and space)."""
    if p is not None and is_channels_last(p):
        return tuple(range(ndim - 1))
    return (0,) + tuple(range(2, ndim))


CONV_ATTRS = {
    "kernel": Attr(shape_attr, doc="window size, e.g. (3, 3); its length sets 1-D/2-D/3-D"),
    "stride": Attr(shape_attr, (), "default 1 per dimension"),
    "dilate": Attr(shape_attr, (), "default 1 per dimension"),
    "pad": Attr(shape_attr, (), "zero padding on both sides, default 0"),
    "num_filter": Attr(positive_int_attr),
    "num_group": Attr(positive_int_attr, 1),
    "no_bias": Attr(bool_attr, False),
    "layout": Attr(layout_attr, None, "NCW, NCHW, NCDHW (default) or channel-last NWC, NHWC, "
                                      "NDHWC (weight then (num_filter, *kernel, C/num_group))"),
    "weight_layout": Attr(weight_layout_attr, None,
                          "symgraph's: the weight's layout when not the data layout's "
                          "(OIHW with layout=NHWC: passes/layout.py keeps weights as they are)"),
}


def _conv_args(p):
    return ["data", "weight"] if p.no_bias else ["data", "weight", "bias"]


def _weight_flops(p, ins, outs):
    # one multiply-add per (output element, weight element of its group)
    return 2 * numel(outs[0]) * numel(ins[1][1:])


# --------------------------------------------------------------------------
# Convolution: y[n, f] = sum_c,k w[f, c, k] x_pad[n, g(f)*C/G + c, o*s + k*d] + b[f]
# --------------------------------------------------------------------------
def _conv_shape(p, s):
    n, stride, pad, dilate = _conv_geometry(p)
    if s[0] is None:
        return s, [None]
    _check_data_rank(s[0], n, "convolution", p)
    data = _first(s[0], p)
    _check_groups(p, data[1])
    out = []
    for i in range(n):
        dk = dilate[i] * (p.kernel[i] - 1) + 1
        padded = data[2 + i] + 2 * pad[i]
        if dk > padded:
            raise ShapeError(f"kernel {tuple(p.kernel)} (dilated size {dk}) is larger than "
                             f"the padded input ({padded}) along spatial axis {i}")
        out.append((padded - dk) // stride[i] + 1)
    w = (p.num_filter, data[1] // p.num_group, *p.kernel)
    want = [s[0], _nhwc_order(w) if _weight_channels_last(p) else w]
    want += [] if p.no_bias else [(p.num_filter,)]
    return want, [_in_layout((data[0], p.num_filter, *out), p)]


def _conv_nobias(p, x, w):
    n, stride, pad, dilate = _conv_geometry(p)
    dn = None
    if is_channels_last(p) or p.weight_layout:
        data = p.layout or _LAYOUTS[n]
        spatial = data[2:] if data[1] == "C" else data[1:-1]
        weight = ("O" + spatial + "I") if _weight_channels_last(p) else ("OI" + spatial)
        dn = (data, weight, data)
    return lax.conv_general_dilated(x, w, stride, [(q, q) for q in pad], rhs_dilation=dilate,
                                    feature_group_count=p.num_group, dimension_numbers=dn)


def _conv_lower(p, ctx, x, w, b=None):
    return _add_bias(_conv_nobias(p, x, w), b, p)


_conv = register(OpDef(
    name="Convolution", attrs=CONV_ATTRS, arguments=_conv_args, lower=_conv_lower,
    infer_shape=_conv_shape, flops=_weight_flops, family="convolution", anchor_weights=True,
    split_wgrad=True,
    doc="N-D convolution (NCW/NCHW/NCDHW); weight (num_filter, C/num_group, *kernel); "
        "channel-last layouts (NWC/NHWC/NDHWC) take (num_filter, *kernel, C/num_group).",
    samples=[
        Sample({"kernel": (3, 3), "num_filter": 4}, [(2, 3, 5, 5)]),
        Sample({"kernel": (3, 2), "stride": (2, 1), "pad": (1, 1), "num_filter": 3},
               [(2, 2, 6, 5)]),
        Sample({"kernel": (3, 3), "dilate": (2, 1), "no_bias": True, "num_filter": 2},
               [(1, 2, 7, 6)]),
        Sample({"kernel": (3, 1), "num_group": 2, "num_filter": 4, "stride": (1, 2)},
               [(2, 4, 5, 5)]),
        Sample({"kernel": (3, 3), "num_group": 3, "num_filter": 3, "pad": (1, 1),
                "layout": "NCHW"}, [(1, 3, 4, 4)]),  # depthwise
        Sample({"kernel": (3,), "stride": (2,), "pad": (1,), "num_filter": 3}, [(2, 2, 9)]),
        Sample({"kernel": (2, 2, 2), "pad": (1, 0, 1), "num_filter": 2, "layout": "NCDHW"},
               [(1, 2, 3, 4, 3)]),
    ]))


# dx = conv^T(dy, w); dw = corr(x, dy); db = sum(dy over batch and space) -- reads x and w
def _conv_backward(p, ctx, og, ins, outs):
    x, w = ins
    dx, dw = ctx.linear_grads(lambda x, w: _conv_nobias(p, x, w), x, w, og[0])
    db = None if p.no_bias else og[0].sum(axis=_spatial_axes(og[0].ndim, p))
    return [dx, dw, db]


def _weighted_backward_shape(p, s):
    # inputs: ograd, data, weight -> gradients of data, weight (and bias)
    og, x, w = s
    grads = [x, w] + ([] if p.no_bias else [(p.num_filter,)])
    need = list(p.need) if p.need else [1] * len(grads)
    return s, [g for g, m in zip(grads, need) if m]


register_backward(_conv, reads_inputs=(0, 1), lower=_conv_backward,
                  infer_shape=_weighted_backward_shape, flops=_weighted_backward_flops(_weight_flops))


# --------------------------------------------------------------------------
# Deconvolution: the transpose (gradient) of a Convolution whose weight has
# the same layout, weight (C_in, num_filter/num_group, *kernel) as in MXNet
# --------------------------------------------------------------------------
def _deconv_geometry(p, in_spatial):
    """(rank, stride, pad, adj, dilate, output spatial size) for ``in_spatial``.

    Output = (in - 1) * stride - 2 * pad + dilate * (kernel - 1) + 1 + adj.
    A non-zero target_shape overrides pad and adj as MXNet's InferPad does:
    total = (in - 1) * stride + dilated kernel - target; pad = ceil(total / 2);
    adj = total % 2.
    """
    n, stride, pad, dilate = _conv_geometry(p)
    adj = _per_dim(p, "adj", 0, n, 0)
    dk = [dilate[i] * (p.kernel[i] - 1) + 1 for i in range(n)]
    full = [(in_spatial[i] - 1) * stride[i] + dk[i] for i in range(n)]
    if p.target_shape and any(p.target_shape):
        target = _per_dim(p, "target_shape", 0, n, 1)
        if any(t > f for t, f in zip(target, full)):
            raise ShapeError(f"target_shape={target} is larger than the largest output "
                             f"{tuple(full)} this input and kernel can give")
        total = [f - t for f, t in zip(full, target)]
        pad = tuple((t + 1) // 2 for t in total)
        adj = tuple(t % 2 for t in total)
    out = tuple(full[i] - 2 * pad[i] + adj[i] for i in range(n))
    if any(o < 1 for o in out):
        raise ShapeError(f"pad={pad} leaves an empty output {out} for input "
                         f"{tuple(in_spatial)} and kernel {tuple(p.kernel)}")
    return n, stride, pad, adj, dilate, out


def _deconv_shape(p, s):
    data = s[0]
    if data is None:
        _conv_geometry(p)  # attribute errors surface even without shapes
        return s, [None]
    n = _spatial_rank(p, len(p.kernel))
    _check_data_rank(data, n, "deconvolution")
    _check_groups(p, data[1])
    *_, out = _deconv_geometry(p, data[2:])
    want = [data, (data[1], p.num_filter // p.num_group, *p.kernel)]
    want += [] if p.no_bias else [(p.num_filter,)]
    return want, [(data[0], p.num_filter, *out)]


def _deconv_nobias(p, x, w):
    n, stride, pad, adj, dilate, _ = _deconv_geometry(p, x.shape[2:])
    g, cin, fpg, k = p.num_group, x.shape[1], w.shape[1], tuple(p.kernel)
    # a convolution over the stride-dilated input with the kernel flipped and
    # its in/out channels swapped per group: (G, Cin/G, F/G) -> (G*F/G, Cin/G)
    wt = w.reshape((g, cin // g, fpg) + k).swapaxes(1, 2).reshape((g * fpg, cin // g) + k)
    wt = jnp.flip(wt, axis=tuple(range(2, 2 + n)))
    edge = [dilate[i] * (k[i] - 1) - pad[i] for i in range(n)]  # may be negative: a crop
    return lax.conv_general_dilated(x, wt, (1,) * n, [(e, e + a) for e, a in zip(edge, adj)],
                                    lhs_dilation=stride, rhs_dilation=dilate,
                                    feature_group_count=g)


def _deconv_lower(p, ctx, x, w, b=None):
    return _add_bias(_deconv_nobias(p, x, w), b)


def _deconv_flops(p, ins, outs):
    # every input element meets every weight element of its group once
    return 2 * numel(ins[0]) * numel(ins[1][1:])


_deconv = register(OpDef(
    name="Deconvolution",
    attrs={**{k: v for k, v in CONV_ATTRS.items() if k != "weight_layout"},
           "no_bias": Attr(bool_attr, True),
           "layout": Attr(channel_first_layout_attr, None,
                          "only channel-first (NCW, NCHW, NCDHW)"),
           "adj": Attr(shape_attr, (), "extra rows/cols at the high end, default 0"),
           "target_shape": Attr(shape_attr, (), "output spatial size; overrides pad and adj")},
    arguments=_conv_args, lower=_deconv_lower, infer_shape=_deconv_shape, flops=_deconv_flops,
    family="convolution", anchor_weights=True, split_wgrad=True,
    doc="Transposed convolution; weight (C_in, num_filter/num_group, *kernel).",
    samples=[
        Sample({"kernel": (3, 3), "num_filter": 4}, [(2, 3, 4, 4)]),
        Sample({"kernel": (3, 3), "stride": (2, 2), "pad": (1, 1), "adj": (1, 0),
                "num_filter": 2, "no_bias": False}, [(2, 3, 3, 4)]),
        Sample({"kernel": (2, 3), "dilate": (2, 1), "num_group": 2, "num_filter": 4},
               [(1, 4, 3, 3)]),
        Sample({"kernel": (3, 3), "stride": (2, 2), "target_shape": (8, 7), "num_filter": 2},
               [(1, 2, 4, 4)]),
        Sample({"kernel": (4,), "stride": (3,), "pad": (2,), "num_filter": 2, "no_bias": False},
               [(2, 3, 4)]),
        Sample({"kernel": (2, 2, 2), "stride": (2, 1, 2), "num_filter": 2}, [(1, 2, 2, 3, 2)]),
    ]))


# dx = conv(dy, w) (the adjoint of the transposed conv); dw likewise; db = sum(dy)
def _deconv_backward(p, ctx, og, ins, outs):
    x, w = ins
    dx, dw = ctx.linear_grads(lambda x, w: _deconv_nobias(p, x, w), x, w, og[0])
    db = None if p.no_bias else og[0].sum(axis=_spatial_axes(og[0].ndim))
    return [dx, dw, db]


register_backward(_deconv, reads_inputs=(0, 1), lower=_deconv_backward,
                  infer_shape=_weighted_backward_shape,
                  flops=_weighted_backward_flops(_deconv_flops))


# --------------------------------------------------------------------------
# Pooling: max / avg / sum over windows, NCW/NCHW/NCDHW
# --------------------------------------------------------------------------
POOL_ATTRS = {
    "kernel": Attr(shape_attr, (), "window size; ignored with global_pool"),
    "pool_type": Attr(choice_attr("max", "avg", "sum"), "max"),
    "global_pool": Attr(bool_attr, False, "pool over the whole spatial extent"),
    "pooling_convention": Attr(choice_attr("valid", "full"), "valid",
                               "valid: floor of the output size; full: ceil"),
    "stride": Attr(shape_attr, (), "default 1 per dimension"),
    "pad": Attr(shape_attr, (), "default 0 per dimension"),
    "count_include_pad": Attr(optional_bool_attr, None,
                              "avg: count padding in the divisor (None means True)"),
    "p_value": Attr(optional_int_attr, None, "lp pooling only, which is not supported"),
    "layout": Attr(layout_attr, None, "NCW, NCHW, NCDHW (default) or channel-last NWC, NHWC, "
                                      "NDHWC"),
}


def _pool_window(p, ndim: int):
    """(kernel, stride, pad) for an input of rank ``ndim``; global_pool needs
    the input's spatial size, so its kernel is returned as None."""
    if p.global_pool:
        n = ndim - 2
        if n not in _LAYOUTS:
            raise ShapeError(f"global pooling needs a 3-D to 5-D input, got rank {ndim}")
        return None, (1,) * n, (0,) * n
    if not p.kernel:
        raise ShapeError("kernel is required unless global_pool=True")
    n = _spatial_rank(p, len(p.kernel))
    if any(k < 1 for k in p.kernel):
        raise ShapeError(f"kernel={tuple(p.kernel)}: every entry must be >= 1")
    return tuple(p.kernel), _per_dim(p, "stride", 1, n, 1), _per_dim(p, "pad", 0, n, 0)


def _pool_geometry(p, in_shape):
    """(kernel, stride, pad, output spatial size, extra high padding).

    valid: out = floor((in + 2 pad - k) / s) + 1; full: ceil instead of floor,
    so the last window may run past the padded input by ``extra`` elements.
    """
    n = len(in_shape) - 2
    kernel, stride, pad = _pool_window(p, len(in_shape))
    if kernel is None:
        kernel = tuple(in_shape[2:])
    elif n != len(kernel):
        raise ShapeError(f"data {tuple(in_shape)} must be {len(kernel) + 2}-D "
                         f"({_LAYOUTS[len(kernel)]}) for a {len(kernel)}-D kernel")
    out, extra = [], []
    for i in range(n):
        span = in_shape[2 + i] + 2 * pad[i] - kernel[i]
        if span < 0:
            raise ShapeError(f"kernel {kernel} is larger than the padded input "
                             f"({in_shape[2 + i] + 2 * pad[i]}) along spatial axis {i}")
        o = (-(-span // stride[i]) if p.pooling_convention == "full" else span // stride[i]) + 1
        out.append(o)
        extra.append(max(0, (o - 1) * stride[i] + kernel[i] - (in_shape[2 + i] + 2 * pad[i])))
    return kernel, stride, pad, tuple(out), tuple(extra)


def _pool_shape(p, s):
    if s[0] is None:
        if not p.global_pool:
            _pool_window(p, len(p.kernel) + 2)  # attribute errors surface early
        return s, [None]
    data = _first(s[0], p)
    *_, out, _ = _pool_geometry(p, data)
    return [s[0]], [_in_layout(tuple(data[:2]) + out, p)]


def _window_args(kernel, stride, pad, extra):
    return ((1, 1) + kernel, (1, 1) + stride,
            [(0, 0), (0, 0)] + [(q, q + e) for q, e in zip(pad, extra)])


def _avg_divisor(p, in_spatial, kernel, stride, pad, out):
    """Per output window, how many elements MXNet divides by (a constant).

    With count_include_pad the window is clipped to the padded input, else
    to the input itself; a window with nothing to count divides by 0 (NaN).
    """
    include = p.count_include_pad is None or p.count_include_pad
    counts = []
    for i, o in enumerate(out):
        start = np.arange(o) * stride[i] - pad[i]
        end = np.minimum(start + kernel[i], in_spatial[i] + pad[i])
        if not include:
            start, end = np.maximum(start, 0), np.minimum(end, in_spatial[i])
        counts.append(np.maximum(end - start, 0))
    div = counts[0]
    for c in counts[1:]:
        div = np.multiply.outer(div, c)
    return div


def _pool_lower(p, ctx, x):
    if is_channels_last(p):
        return _pool_channels_last(p, ctx, x)
    kernel, stride, pad, out, extra = _pool_geometry(p, x.shape)
    window, strides, padding = _window_args(kernel, stride, pad, extra)
    if p.pool_type == "max":
        return lax.reduce_window(x, np.array(-np.inf, x.dtype), lax.max, window, strides, padding)
    total = lax.reduce_window(x, np.zeros((), x.dtype), lax.add, window, strides, padding)
    if p.pool_type == "sum":
        return total
    return total / _avg_divisor(p, x.shape[2:], kernel, stride, pad, out).astype(x.dtype)


def _pool_flops(p, ins, outs):
    kernel = _first(ins[0], p)[2:] if p.global_pool else tuple(p.kernel)
    return numel(outs[0]) * numel(kernel)


_pool = register(OpDef(
    name="Pooling", attrs=POOL_ATTRS, lower=_pool_lower, infer_shape=_pool_shape,
    flops=_pool_flops, family="pooling",
    doc="max/avg/sum pooling; pooling_convention full rounds the output size up.",
    samples=[
        Sample({"kernel": (2, 2), "stride": (2, 2)}, [(2, 3, 6, 6)]),
        Sample({"kernel": (3, 3), "stride": (2, 2), "pad": (1, 1),
                "pooling_convention": "full"}, [(2, 2, 7, 6)]),
        Sample({"kernel": (3, 2), "stride": (2, 3), "pooling_convention": "full"},
               [(1, 2, 6, 7)]),
        Sample({"kernel": (3, 3), "pad": (1, 1), "pool_type": "avg"}, [(2, 2, 4, 5)]),
        Sample({"kernel": (3, 3), "stride": (2, 2), "pad": (1, 1), "pool_type": "avg",
                "count_include_pad": False, "pooling_convention": "full"}, [(1, 2, 6, 5)]),
        Sample({"kernel": (2, 3), "stride": (2, 2), "pool_type": "avg"}, [(2, 2, 5, 7)]),
        Sample({"kernel": (2, 2), "pool_type": "sum"}, [(2, 2, 4, 3)]),
        Sample({"kernel": (2, 2), "stride": (2, 1), "pad": (1, 0), "pool_type": "sum",
                "pooling_convention": "full"}, [(1, 2, 4, 3)]),
        Sample({"global_pool": True, "kernel": (7, 7)}, [(2, 3, 3, 4)]),
        Sample({"global_pool": True, "pool_type": "avg"}, [(2, 3, 3, 4)]),
        Sample({"global_pool": True, "pool_type": "sum"}, [(2, 3, 5)]),
        Sample({"kernel": (3,), "stride": (2,), "layout": "NCW"}, [(2, 3, 8)]),
        Sample({"kernel": (2, 2, 2), "stride": (1, 2, 2), "pool_type": "avg"},
               [(1, 2, 3, 4, 4)]),
    ]))


def _pool_channels_last(p, ctx, x):
    """Pooling of a channel-last tensor: the same windows, the channel axis last."""
    nchw = _nchw_shape(x.shape)
    kernel, stride, pad, out, extra = _pool_geometry(p, nchw)
    window, strides, padding = map(_nhwc_order, _window_args(kernel, stride, pad, extra))
    if p.pool_type == "max":
        return lax.reduce_window(x, np.array(-np.inf, x.dtype), lax.max, window, strides, padding)
    total = lax.reduce_window(x, np.zeros((), x.dtype), lax.add, window, strides, padding)
    if p.pool_type == "sum":
        return total
    return total / _avg_divisor(p, nchw[2:], kernel, stride, pad, out)[..., None].astype(x.dtype)


def _pool_backward_reads(p) -> list[str]:
    """What _backward_Pooling reads besides the output gradient.

    max reads the input only (never an index tensor, nor the output: each
    window's first max is found from the input, _max_pool_backward). avg/sum
    read the input only for its shape, and only where the pooled shape does
    not determine it (a stride > 1 rounds, global_pool forgets the window).
    """
    if p.pool_type == "max":
        return ["data"]
    stride = () if p.global_pool else _per_dim(p, "stride", 1, len(p.kernel), 1)
    return ["data"] if p.global_pool or any(s > 1 for s in stride) else []


def _pool_input_shape(p, og_shape):
    # stride 1 everywhere: out = in + 2 pad - k + 1 under either convention
    og_shape = _first(og_shape, p)
    kernel, _, pad = _pool_window(p, len(og_shape))
    return _in_layout(tuple(og_shape[:2]) + tuple(o - 1 + k - 2 * q
                                                  for o, k, q in zip(og_shape[2:], kernel, pad)),
                      p)


def _nchw_shape(shape) -> tuple:
    """The NCHW shape of a tensor held channels-last (N, H, W, C)."""
    return (shape[0], shape[-1]) + tuple(shape[1:-1])


def _nhwc_order(t) -> tuple:
    """A per-axis tuple in NCHW order, reordered for channels-last."""
    return (t[0],) + tuple(t[2:]) + (t[1],)


def _max_pool_backward(p, x, dy, channels_last=False):
    """dx: each window's gradient goes to its first maximum in row-major
    order (MXNet's tie rule), found from the input alone: a running max over
    the window offsets keeps the first offset holding it, in an output-sized
    index (int8 for windows up to 127 elements). No scatter, no index tensor
    the size of the input, and no comparison with the saved output: in one
    fused program XLA may compute the pooled input twice with different
    rounding, and windows whose recomputed input equalled the saved max
    nowhere lost their gradient (issue 11: a 2% error in the stem's updates).

    The input grid is split by phase (position mod stride): a phase gathers
    its gradient from whole-window shifts of the output grid, and the phases
    are interleaved by a stack and a reshape. No strided (interior) padding,
    so XLA fuses the whole sum into one loop instead of materialising one
    padded partial per window offset (GoogLeNet's training temp: -32%,
    docs/memory.md, "Plan vs XLA"). ``channels_last``: x, dy are NHWC."""
    nd = x.ndim
    spatial = list(range(1, nd - 1)) if channels_last else list(range(2, nd))

    def per_axis(items, rest):
        """``items`` on the spatial axes, ``rest`` on the batch and channel axes."""
        out = [rest] * nd
        for a, v in zip(spatial, items):
            out[a] = v
        return out

    kernel, stride, pad, out, extra = _pool_geometry(
        p, _nchw_shape(x.shape) if channels_last else x.shape)
    zero = np.zeros((), dy.dtype)
    if p.global_pool:  # one window: argmax's first maximum, one index per (n, c)
        if channels_last:  # a tensor of one pixel per channel: not worth a rule
            t = lambda v: jnp.moveaxis(v, -1, 1)
            return jnp.moveaxis(_max_pool_backward(p, t(x), t(dy)), 1, -1)
        flat = x.reshape(x.shape[:2] + (-1,))
        at = jnp.argmax(flat, axis=-1)[..., None]
        return jnp.where(lax.broadcasted_iota(at.dtype, flat.shape, 2) == at,
                         dy.reshape(dy.shape[:2] + (1,)), zero).reshape(x.shape)
    # padding is -inf and only a strictly greater value takes a window, so
    # padding never wins (a window of -inf inputs gives no gradient)
    xp = jnp.pad(x, per_axis([(q, q + e) for q, e in zip(pad, extra)], (0, 0)),
                 constant_values=-jnp.inf)
    offsets = list(itertools.product(*[range(k) for k in kernel]))
    kind = np.int8 if len(offsets) <= 127 else np.int32
    best = jnp.full(dy.shape, -jnp.inf, x.dtype)
    first = jnp.full(dy.shape, -1, kind)
    for i, off in enumerate(offsets):
        v = xp[tuple(per_axis([slice(o, o + (m - 1) * s + 1, s)
                               for o, m, s in zip(off, out, stride)], slice(None)))]
        take = v > best  # strictly: an equal value later in the window does not win
        best = jnp.where(take, v, best)
        first = jnp.where(take, np.array(i, kind), first)
    # won[k]: dy where offset k holds the window's first max
    won = {off: jnp.where(first == i, dy, zero) for i, off in enumerate(offsets)}
    # padded position m*s + r (per axis) is offset r + j*s of window m - j
    rows = [-(-xp.shape[a] // s) for a, s in zip(spatial, stride)]
    acc_shape = list(dy.shape)
    for a, n in zip(spatial, rows):
        acc_shape[a] = n

    def phase(r):
        acc = jnp.zeros(acc_shape, dy.dtype)
        for j in itertools.product(*[range(-(-(k - q) // s))
                                     for k, q, s in zip(kernel, r, stride)]):
            k = tuple(q + i * s for q, i, s in zip(r, j, stride))
            shift = per_axis([(i, n - o - i, 0) for i, n, o in zip(j, rows, out)], (0, 0, 0))
            acc = acc + lax.pad(won[k], zero, shift)
        return acc

    def interleave(r, axis):
        """The phases r + (0..s-1, ...) of one axis woven into its full length."""
        if axis == len(kernel):
            return phase(r)
        d = spatial[axis]
        parts = jnp.stack([interleave(r + (q,), axis + 1) for q in range(stride[axis])], d + 1)
        return parts.reshape(parts.shape[:d] + (-1,) + parts.shape[d + 2:])

    dxp = interleave((), 0)
    return dxp[tuple(per_axis([slice(q, q + x.shape[a]) for q, a in zip(pad, spatial)],
                              slice(None)))]


def _pool_backward_lower(p, ctx, og, ins, outs):
    return [_pool_backward(p, og[0], *ins, channels_last=is_channels_last(p))]


def _pool_backward(p, dy, *read, channels_last=False):
    if p.pool_type == "max":
        return _max_pool_backward(p, read[0], dy, channels_last)
    nchw = _nchw_shape if channels_last else tuple
    if read:
        in_nchw = nchw(read[0].shape)
    elif is_channels_last(p):  # the node's own layout
        in_nchw = _first(_pool_input_shape(p, dy.shape), p)
    else:
        in_nchw = _pool_input_shape(p, nchw(dy.shape))
    kernel, stride, pad, out, extra = _pool_geometry(p, in_nchw)
    if p.pool_type == "avg":
        div = _avg_divisor(p, in_nchw[2:], kernel, stride, pad, out).astype(dy.dtype)
        dy = dy / (div[..., None] if channels_last else div)
    window, strides, padding = _window_args(kernel, stride, pad, extra)
    in_shape = in_nchw
    if channels_last:
        window, strides, padding = _nhwc_order(window), _nhwc_order(strides), _nhwc_order(padding)
        in_shape = _nhwc_order(in_nchw)
    # the window sum is linear: its transpose spreads each dy over its window
    summed = lambda v: lax.reduce_window(v, np.zeros((), dy.dtype), lax.add, window,
                                         strides, padding)
    (dx,) = jax.linear_transpose(summed, jax.ShapeDtypeStruct(in_shape, dy.dtype))(dy)
    return dx


def _pool_backward_shape(p, s):
    if p.pool_type == "max" or _pool_backward_reads(p):
        return s, [s[1]]
    return s, [None if s[0] is None else _pool_input_shape(p, s[0])]


# max: dx = dy at the first max of each window; avg: dx = sum of dy/count over
# windows; sum: the same without the count. max reads the input, avg/sum the
# output gradient (and the input for its shape where strides hide it).
register_backward(
    _pool, reads_inputs=lambda p: [0] * len(_pool_backward_reads(p)),
    lower=_pool_backward_lower, infer_shape=_pool_backward_shape,
    flops=lambda p, ins, outs: _pool_flops(p, outs, ins[:1]))


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
