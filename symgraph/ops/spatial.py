"""Spatial rearrangement layers of MXNet 1.9.1: Pad, Crop,
depth_to_space and space_to_depth (src/operator/pad*, crop*,
tensor/matrix_op*).

Pad and Crop read no data in their backward: only the output gradient and,
where the output does not determine it, the input's shape.
depth_to_space and space_to_depth are each other's gradient. The
normalization layers are in normalize.py, the resampling ones in
resample.py.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..errors import ShapeError
from .backward import register_backward
from .normalize import _need_rank
from .registry import (Attr, OpDef, Sample, bool_attr, choice_attr, float_attr, int_attr, numel,
                       positive_int_attr, register, shape_attr)
from .resample import _transposed




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
