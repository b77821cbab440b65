"""Resampling layers of MXNet 1.9.1: UpSampling (nearest, or bilinear as a
depthwise Deconvolution with a weight input), _contrib_BilinearResize2D
and _contrib_AdaptiveAvgPooling2D (src/operator/nn/upsampling*,
contrib/bilinear_resize*, contrib/adaptive_avg_pooling*).

UpSampling nearest, BilinearResize2D and AdaptiveAvgPooling2D read no data
in their backward: only the output gradient and, where the output does not
determine it, the input's shape. The normalization layers are in
normalize.py, Pad, Crop and the block moves in spatial.py.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..errors import ShapeError
from .backward import register_backward
from .conv import _deconv_nobias, optional_float_attr
from .normalize import _need_rank
from .registry import (Attr, OpDef, Params, Sample, bool_attr, choice_attr, count_attr, int_attr,
                       numel, positive_int_attr, register, shape_attr)


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
