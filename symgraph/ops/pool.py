"""Pooling: max / avg / sum over windows (global, padding conventions,
``count_include_pad``), and its backward, which finds each window's first
maximum from the input alone.

Part of the neural-network layers (``ops/nn.py`` imports them all);
names, attributes and defaults follow MXNet 1.x.
"""
from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..errors import ShapeError
from .backward import register_backward
from .conv import (_LAYOUTS, _first, _in_layout, _nchw_shape, _nhwc_order, _per_dim,
                   _spatial_rank, is_channels_last, layout_attr, optional_bool_attr)
from .registry import (Attr, OpDef, Sample, bool_attr, choice_attr, numel, optional_int_attr,
                       register, shape_attr)


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
    per_sample=True,
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
