"""Convolution and Deconvolution, and the geometry they share with Pooling:
channel-first (NCW/NCHW/NCDHW) or, where MXNet's ``layout`` says so,
channel-last; kernel, stride, pad, dilate and groups per spatial axis.

Part of the neural-network layers (``ops/nn.py`` imports them all);
names, attributes and defaults follow MXNet 1.x.
"""
from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
from jax import lax

from ..errors import ShapeError
from .backward import register_backward
from .dense import _weighted_backward_flops
from .registry import (Attr, OpDef, Sample, bool_attr, float_attr, numel, positive_int_attr,
                       register, shape_attr)

# the ops this module defines that convolve (what memory rules ask of a graph)
CONVOLUTIONS = ("Convolution", "Deconvolution")

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


def _nchw_shape(shape) -> tuple:
    """The NCHW shape of a tensor held channels-last (N, H, W, C)."""
    return (shape[0], shape[-1]) + tuple(shape[1:-1])


def _nhwc_order(t) -> tuple:
    """A per-axis tuple in NCHW order, reordered for channels-last."""
    return (t[0],) + tuple(t[2:]) + (t[1],)


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
    per_sample=True,
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
        Sample({"kernel": (3, 2), "num_group": 4, "num_filter": 4, "pad": (1, 0),
                "stride": (2, 1), "dilate": (1, 2)}, [(2, 4, 7, 6)]),  # depthwise, strided
        Sample({"kernel": (3,), "stride": (2,), "pad": (1,), "num_filter": 3}, [(2, 2, 9)]),
        Sample({"kernel": (2, 2, 2), "pad": (1, 0, 1), "num_filter": 2, "layout": "NCDHW"},
               [(1, 2, 3, 4, 3)]),
    ]))


# -- a depthwise convolution's weight gradient as per-tap sums, on the CPU ------------
def _taps_pay(p, x, dy) -> bool:
    """Whether a convolution's weight gradient is cheaper as per-tap sums:
    a depthwise one (a group per channel, one filter each) whose channels C
    outnumber half its output positions N*prod(out spatial). XLA:CPU computes
    a grouped weight gradient as a dense one of masked (C, C, *kernel)
    products (C times the FLOPs) and keeps two of them, the product and its
    copy in the weight's layout (2*C^2*k elements); the taps hold k products
    of N*C*prod(out) elements at most, fewer exactly when 2*C > N*prod(out)."""
    cl = is_channels_last(p)
    c = x.shape[-1] if cl else x.shape[1]
    positions = dy.size // dy.shape[-1 if cl else 1]
    return p.num_group == c == p.num_filter and c > 1 and 2 * c > positions


def _taps_weight_grad(p, x, dy):
    """dw[c, 0, *t] = sum over batch and output positions o of
    x_pad[n, c, o*stride + t*dilate] * dy[n, c, o], one sum per tap t, in
    the weight's layout."""
    n, stride, pad, dilate = _conv_geometry(p)
    cl = is_channels_last(p)
    space = tuple(range(1, 1 + n)) if cl else tuple(range(2, 2 + n))
    widths = [(0, 0)] * x.ndim
    for i, a in enumerate(space):
        widths[a] = (pad[i], pad[i])
    xp = jnp.pad(x, widths)
    out = [dy.shape[a] for a in space]
    sums = []
    for tap in itertools.product(*(range(k) for k in p.kernel)):
        start, limit, step = [0] * x.ndim, list(xp.shape), [1] * x.ndim
        for i, a in enumerate(space):
            start[a] = tap[i] * dilate[i]
            limit[a] = start[a] + (out[i] - 1) * stride[i] + 1
            step[a] = stride[i]
        window = lax.slice(xp, start, limit, step)
        sums.append(jnp.sum(window * dy, axis=(0, *space)))   # (C,)
    taps = jnp.stack(sums, -1).reshape(-1, *p.kernel)       # (C, *kernel)
    return taps[..., None] if _weight_channels_last(p) else taps[:, None]


def _depthwise_taps(p):
    """``_conv_nobias`` whose weight gradient is the per-tap sums on the CPU
    (``lax.platform_dependent``: a GPU compile keeps its own, cuDNN has
    depthwise kernels); the data gradient is the convolution's own."""
    @jax.custom_vjp
    def conv(x, w):
        return _conv_nobias(p, x, w)

    def fwd(x, w):
        return conv(x, w), (x, w)

    def bwd(res, dy):
        x, w = res
        dx = jax.vjp(lambda x: _conv_nobias(p, x, w), x)[1](dy)[0]
        dw = lax.platform_dependent(
            x, dy, cpu=lambda x, dy: _taps_weight_grad(p, x, dy).astype(w.dtype),
            default=lambda x, dy: jax.vjp(lambda w: _conv_nobias(p, x, w), w)[1](dy)[0])
        return dx, dw

    conv.defvjp(fwd, bwd)
    return conv


# dx = conv^T(dy, w); dw = corr(x, dy); db = sum(dy over batch and space) -- reads x and w
def _conv_backward(p, ctx, og, ins, outs):
    x, w = ins
    f = (_depthwise_taps(p) if _taps_pay(p, x, og[0])
         else lambda x, w: _conv_nobias(p, x, w))
    dx, dw = ctx.linear_grads(f, x, w, og[0])
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
    per_sample=True,
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
