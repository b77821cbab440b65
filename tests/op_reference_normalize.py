"""References for symgraph/ops/normalize.py (LayerNorm, InstanceNorm,
GroupNorm, L2Normalization, UpSampling, _contrib_BilinearResize2D,
_contrib_AdaptiveAvgPooling2D, Pad, Crop, depth_to_space, space_to_depth).

Plain NumPy written from MXNet 1.9.1's definitions, apart from the
lowerings: statistics per normalised slice in loops, upsampling and
resizing as loops over output pixels, bilinear UpSampling as the scatter
of every input pixel through the deconvolution kernel, the block moves as
explicit index maps. None of them calls JAX.

REFERENCE_NORMALIZE[name](p, *inputs) -> the visible outputs.
GRAD_REFERENCE_NORMALIZE[name](p, inputs, dys) -> one gradient per argument
(None where the op gives none), written from the math.
"""
import itertools
import math

import numpy as np

from op_reference_tensor import registrar

REFERENCE_NORMALIZE = {}
GRAD_REFERENCE_NORMALIZE = {}
ref = registrar(REFERENCE_NORMALIZE)
grad_ref = registrar(GRAD_REFERENCE_NORMALIZE)


# --------------------------------------------------------------------------
# normalisations: (x - mean) / sqrt(var + eps) * gamma + beta per slice
# --------------------------------------------------------------------------
def _moments(v):
    """(mean, biased variance) of the values of v."""
    m = v.sum() / v.size
    return m, ((v - m) ** 2).sum() / v.size


@ref("LayerNorm")
def layer_norm(p, x, gamma, beta):
    ax = p.axis % x.ndim
    xm = np.moveaxis(x, ax, -1)
    y, mean, std = np.empty_like(xm), np.empty(xm.shape[:-1]), np.empty(xm.shape[:-1])
    for idx in np.ndindex(*xm.shape[:-1]):
        m, v = _moments(xm[idx])
        mean[idx], std[idx] = m, math.sqrt(v + p.eps)
        y[idx] = (xm[idx] - m) / std[idx] * gamma + beta
    y = np.moveaxis(y, -1, ax)
    if not p.output_mean_var:
        return y
    return y, np.expand_dims(mean, ax), np.expand_dims(std, ax)


@ref("InstanceNorm")
def instance_norm(p, x, gamma, beta):
    y = np.empty_like(x)
    for n, c in np.ndindex(*x.shape[:2]):
        m, v = _moments(x[n, c])
        y[n, c] = (x[n, c] - m) / math.sqrt(v + p.eps) * gamma[c] + beta[c]
    return y


@ref("GroupNorm")
def group_norm(p, x, gamma, beta):
    g = p.num_groups
    per = x.shape[1] // g
    y = np.empty_like(x)
    mean, std = np.empty((x.shape[0], g)), np.empty((x.shape[0], g))
    for n, k in np.ndindex(x.shape[0], g):
        part = x[n, k * per:(k + 1) * per]
        m, v = _moments(part)
        mean[n, k], std[n, k] = m, math.sqrt(v + p.eps)
        y[n, k * per:(k + 1) * per] = (part - m) / std[n, k] * gamma[k] + beta[k]
    return (y, mean, std) if p.output_mean_var else y


def _normalize_grad(x, dy, gamma, eps):
    """For y = gamma (x - m) / sqrt(v + eps) + beta over the values of one
    slice (gamma a scalar or shaped like x): d/dx of m is 1/M, of v is
    2 (x - m) / M, so dx = gamma s (dy - mean(dy) - xh mean(dy xh)) with
    s = 1/sqrt(v + eps) when gamma is one number; in general with
    w = dy gamma s: dx = w - mean(w) - xh mean(w xh). Returns (dx, xh)."""
    m, v = _moments(x)
    s = 1 / math.sqrt(v + eps)
    xh = (x - m) * s
    w = dy * gamma * s
    return w - w.mean() - xh * (w * xh).mean(), xh


@grad_ref("LayerNorm")
def layer_norm_grad(p, inputs, dys):
    x, gamma, _ = inputs
    ax = p.axis % x.ndim
    xm, dym = np.moveaxis(x, ax, -1), np.moveaxis(dys[0], ax, -1)
    dx, dgamma, dbeta = np.empty_like(xm), np.zeros_like(gamma), np.zeros_like(gamma)
    for idx in np.ndindex(*xm.shape[:-1]):
        dx[idx], xh = _normalize_grad(xm[idx], dym[idx], gamma, p.eps)
        dgamma += dym[idx] * xh
        dbeta += dym[idx]
    return [np.moveaxis(dx, -1, ax), dgamma, dbeta]


@grad_ref("InstanceNorm")
def instance_norm_grad(p, inputs, dys):
    x, gamma, _ = inputs
    dy = dys[0]
    dx, dgamma, dbeta = np.empty_like(x), np.zeros_like(gamma), np.zeros_like(gamma)
    for n, c in np.ndindex(*x.shape[:2]):
        dx[n, c], xh = _normalize_grad(x[n, c], dy[n, c], gamma[c], p.eps)
        dgamma[c] += (dy[n, c] * xh).sum()
        dbeta[c] += dy[n, c].sum()
    return [dx, dgamma, dbeta]


@grad_ref("GroupNorm")
def group_norm_grad(p, inputs, dys):
    x, gamma, _ = inputs
    dy = dys[0]
    g = p.num_groups
    per = x.shape[1] // g
    dx, dgamma, dbeta = np.empty_like(x), np.zeros_like(gamma), np.zeros_like(gamma)
    for n, k in np.ndindex(x.shape[0], g):
        sl = (n, slice(k * per, (k + 1) * per))
        dx[sl], xh = _normalize_grad(x[sl], dy[sl], gamma[k], p.eps)
        dgamma[k] += (dy[sl] * xh).sum()
        dbeta[k] += dy[sl].sum()
    return [dx, dgamma, dbeta]


# --------------------------------------------------------------------------
# L2Normalization: instance (per sample), channel (across the channels at
# each position), spatial (over each channel's positions)
# --------------------------------------------------------------------------
def _l2_slices(p, shape):
    """The index tuples of the slices normalised together."""
    if p.mode == "instance":
        return [(n,) for n in range(shape[0])]
    if p.mode == "spatial":
        return [(n, c) for n, c in np.ndindex(*shape[:2])]
    return [(n, slice(None)) + pos for n in range(shape[0]) for pos in np.ndindex(*shape[2:])]


@ref("L2Normalization")
def l2_normalization(p, x):
    y = np.empty_like(x)
    for sl in _l2_slices(p, x.shape):
        y[sl] = x[sl] / math.sqrt((x[sl] ** 2).sum() + p.eps)
    return y


@grad_ref("L2Normalization")
def l2_normalization_grad(p, inputs, dys):
    """y = x / n, n = sqrt(sum x^2 + eps): dy_j/dx_i = (delta_ij - y_i y_j) / n."""
    (x,), dy = inputs, dys[0]
    dx = np.empty_like(x)
    for sl in _l2_slices(p, x.shape):
        n = math.sqrt((x[sl] ** 2).sum() + p.eps)
        y = x[sl] / n
        dx[sl] = (dy[sl] - y * (dy[sl] * y).sum()) / n
    return [dx]


# --------------------------------------------------------------------------
# UpSampling
# --------------------------------------------------------------------------
def _nearest(x, k):
    """out[..., i, j] = x[..., i // k, j // k]."""
    out = np.empty(x.shape[:2] + (x.shape[2] * k, x.shape[3] * k))
    for i, j in np.ndindex(*out.shape[2:]):
        out[:, :, i, j] = x[:, :, i // k, j // k]
    return out


def bilinear_upsampling(scale, x, w):
    """MXNet's bilinear UpSampling: a Deconvolution with kernel k = 2 s - s % 2,
    stride s, pad ceil((s - 1) / 2), one group per channel: every input pixel
    (i, j) of channel c adds x w[c, 0] to the output window starting at
    (i s - pad, j s - pad)."""
    k, pad = 2 * scale - scale % 2, math.ceil((scale - 1) / 2)
    n, c, h, wd = x.shape
    full = np.zeros((n, c, (h - 1) * scale + k, (wd - 1) * scale + k))
    for i, j in np.ndindex(h, wd):
        full[:, :, i * scale:i * scale + k, j * scale:j * scale + k] += \
            x[:, :, i, j][:, :, None, None] * w[None, :, 0]
    return full[:, :, pad:pad + h * scale, pad:pad + wd * scale]


@ref("UpSampling")
def upsampling(p, *xs):
    if p.sample_type == "bilinear":
        return bilinear_upsampling(p.scale, *xs)
    oh = xs[0].shape[2] * p.scale
    ups = [_nearest(x, oh // x.shape[2]) for x in xs]
    if p.multi_input_mode == "sum":
        return np.sum(ups, axis=0)
    return np.concatenate(ups, axis=1)


@grad_ref("UpSampling")
def upsampling_grad(p, inputs, dys):
    """nearest: each input pixel gets the sum of the k x k output pixels it
    was copied to (its own channel slice with concat); bilinear: the
    scatter read backwards."""
    dy = dys[0]
    if p.sample_type == "bilinear":
        x, w = inputs
        s = p.scale
        k, pad = 2 * s - s % 2, math.ceil((s - 1) / 2)
        full = np.zeros(x.shape[:2] + ((x.shape[2] - 1) * s + k, (x.shape[3] - 1) * s + k))
        full[:, :, pad:pad + dy.shape[2], pad:pad + dy.shape[3]] = dy
        dx, dw = np.zeros_like(x), np.zeros_like(w)
        for i, j in np.ndindex(*x.shape[2:]):
            win = full[:, :, i * s:i * s + k, j * s:j * s + k]
            dx[:, :, i, j] = (win * w[None, :, 0]).sum(axis=(2, 3))
            dw[:, 0] += (win * x[:, :, i, j][:, :, None, None]).sum(axis=0)
        return [dx, dw]
    grads, begin = [], 0
    oh = inputs[0].shape[2] * p.scale
    for x in inputs:
        k = oh // x.shape[2]
        part = dy if p.multi_input_mode == "sum" else dy[:, begin:begin + x.shape[1]]
        begin += x.shape[1]
        g = np.zeros_like(x)
        for i, j in np.ndindex(*part.shape[2:]):
            g[:, :, i // k, j // k] += part[:, :, i, j]
        grads.append(g)
    return grads


# --------------------------------------------------------------------------
# _contrib_BilinearResize2D (MXNet 1.9.1's area_pixel source index)
# --------------------------------------------------------------------------
def resize_size(p, shape, like=None):
    h, w = shape[2:]
    if p.mode == "size":
        if p.scale_height is None:
            return p.height, p.width
        return (int(np.float32(p.scale_height) * np.float32(h)),
                int(np.float32(p.scale_width) * np.float32(w)))
    if p.mode == "odd_scale":
        def one(n, sc):
            return int(np.float32(sc) * np.float32(n)) if n % 2 == 0 else \
                int(np.float32(sc) * np.float32(n - 1)) + 1
        return one(h, p.scale_height), one(w, p.scale_width)
    if p.mode == "like":
        return like.shape[2], like.shape[3]
    to = {"to_even_down": lambda n: n - n % 2, "to_even_up": lambda n: n + n % 2,
          "to_odd_down": lambda n: n - 1 + n % 2, "to_odd_up": lambda n: n + 1 - n % 2}
    return to[p.mode](h), to[p.mode](w)


def source_index(dst, n_in, n_out, align):
    """Where output position dst reads along an axis (a real number)."""
    if n_out == 1:
        scale = 0.0
    else:
        scale = (n_in - 1) / (n_out - 1) if align else n_in / n_out
    if align:
        return scale * dst
    return max(scale * (dst + 0.5) - 0.5, 0.0)


def _resize_weights(n_in, n_out, align):
    """(n_out, n_in): the interpolation weights along one axis."""
    m = np.zeros((n_out, n_in))
    for o in range(n_out):
        src = source_index(o, n_in, n_out, align)
        lo = min(int(src), n_in - 1)
        hi = lo + 1 if lo < n_in - 1 else lo
        m[o, lo] += 1 - (src - lo)
        m[o, hi] += src - lo
    return m


@ref("_contrib_BilinearResize2D")
def bilinear_resize(p, x, like=None):
    oh, ow = resize_size(p, x.shape, like)
    mh, mw = (_resize_weights(n, m, p.align_corners) for n, m in zip(x.shape[2:], (oh, ow)))
    out = np.zeros(x.shape[:2] + (oh, ow))
    for o, q in np.ndindex(oh, ow):  # four taps (two where an index is clamped)
        for i in np.nonzero(mh[o])[0]:
            for j in np.nonzero(mw[q])[0]:
                out[:, :, o, q] += mh[o, i] * mw[q, j] * x[:, :, i, j]
    return out


@grad_ref("_contrib_BilinearResize2D")
def bilinear_resize_grad(p, inputs, dys):
    x = inputs[0]
    dy = dys[0]
    mh, mw = (_resize_weights(n, m, p.align_corners) for n, m in zip(x.shape[2:],
                                                                     dy.shape[2:]))
    return [np.einsum("oh,ncop,pw->nchw", mh, dy, mw)] + [None] * (len(inputs) - 1)


# --------------------------------------------------------------------------
# _contrib_AdaptiveAvgPooling2D
# --------------------------------------------------------------------------
def adaptive_size(p):
    size = tuple(p.output_size)
    return {0: (1, 1), 1: size * 2, 2: size}[len(size)]


def _windows(n_in, n_out):
    return [(math.floor(o * n_in / n_out), math.ceil((o + 1) * n_in / n_out))
            for o in range(n_out)]


@ref("_contrib_AdaptiveAvgPooling2D")
def adaptive_avg_pooling(p, x):
    oh, ow = adaptive_size(p)
    out = np.empty(x.shape[:2] + (oh, ow))
    for (o, (h0, h1)), (q, (w0, w1)) in itertools.product(
            enumerate(_windows(x.shape[2], oh)), enumerate(_windows(x.shape[3], ow))):
        out[:, :, o, q] = x[:, :, h0:h1, w0:w1].sum(axis=(2, 3)) / (w1 - w0) / (h1 - h0)
    return out


@grad_ref("_contrib_AdaptiveAvgPooling2D")
def adaptive_avg_pooling_grad(p, inputs, dys):
    (x,), dy = inputs, dys[0]
    dx = np.zeros_like(x)
    for (o, (h0, h1)), (q, (w0, w1)) in itertools.product(
            enumerate(_windows(x.shape[2], dy.shape[2])),
            enumerate(_windows(x.shape[3], dy.shape[3]))):
        dx[:, :, h0:h1, w0:w1] += (dy[:, :, o, q] / (h1 - h0) / (w1 - w0))[:, :, None, None]
    return [dx]


# --------------------------------------------------------------------------
# Pad (NumPy's pad: MXNet's modes are numpy's constant, edge, reflect)
# --------------------------------------------------------------------------
def _pairs(p, ndim):
    return [(p.pad_width[2 * i], p.pad_width[2 * i + 1]) for i in range(ndim)]


def _pad_source(i, n, lo, mode):
    """The input position output position i (of an axis padded by lo
    before) copies; None for the constant."""
    j = i - lo
    if 0 <= j < n:
        return j
    if mode == "constant":
        return None
    if mode == "edge":
        return min(max(j, 0), n - 1)
    return -j if j < 0 else 2 * (n - 1) - j  # reflect about the edge elements


@ref("Pad", "pad")
def pad(p, x):
    pairs = _pairs(p, x.ndim)
    out = np.empty(tuple(d + lo + hi for d, (lo, hi) in zip(x.shape, pairs)))
    for idx in np.ndindex(*out.shape[2:]):
        src = [_pad_source(i, n, lo, p.mode) for i, n, (lo, _) in zip(idx, x.shape[2:],
                                                                     pairs[2:])]
        out[(slice(None), slice(None)) + idx] = p.constant_value if None in src else \
            x[(slice(None), slice(None)) + tuple(src)]
    return out


@grad_ref("Pad", "pad")
def pad_grad(p, inputs, dys):
    (x,), dy = inputs, dys[0]
    pairs = _pairs(p, x.ndim)
    dx = np.zeros_like(x)
    for idx in np.ndindex(*dy.shape[2:]):
        src = [_pad_source(i, n, lo, p.mode) for i, n, (lo, _) in zip(idx, x.shape[2:],
                                                                     pairs[2:])]
        if None not in src:
            dx[(slice(None), slice(None)) + tuple(src)] += dy[(slice(None), slice(None)) + idx]
    return [dx]


# --------------------------------------------------------------------------
# Crop
# --------------------------------------------------------------------------
def crop_window(p, x, like=None):
    h, w = (like.shape[2], like.shape[3]) if like is not None else tuple(p.h_w)
    if p.center_crop:
        return (x.shape[2] - h) // 2, (x.shape[3] - w) // 2, h, w
    return p.offset[0], p.offset[1], h, w


@ref("Crop")
def crop(p, x, like=None):
    oy, ox, h, w = crop_window(p, x, like)
    return x[:, :, oy:oy + h, ox:ox + w].copy()


@grad_ref("Crop")
def crop_grad(p, inputs, dys):
    x = inputs[0]
    oy, ox, h, w = crop_window(p, x, inputs[1] if len(inputs) > 1 else None)
    dx = np.zeros_like(x)
    dx[:, :, oy:oy + h, ox:ox + w] = dys[0]
    return [dx] + [None] * (len(inputs) - 1)


# --------------------------------------------------------------------------
# depth_to_space / space_to_depth, DCR: out[n, c, h b + i, w b + j] =
# x[n, (i b + j) C' + c, h, w] with C' the output's channels
# --------------------------------------------------------------------------
@ref("depth_to_space")
def depth_to_space(p, x):
    b = p.block_size
    n, c, h, w = x.shape
    cc = c // (b * b)
    out = np.empty((n, cc, h * b, w * b))
    for ch, i, j in itertools.product(range(cc), range(b), range(b)):
        out[:, ch, i::b, j::b] = x[:, (i * b + j) * cc + ch]
    return out


@ref("space_to_depth")
def space_to_depth(p, x):
    b = p.block_size
    n, c, h, w = x.shape
    out = np.empty((n, c * b * b, h // b, w // b))
    for ch, i, j in itertools.product(range(c), range(b), range(b)):
        out[:, (i * b + j) * c + ch] = x[:, ch, i::b, j::b]
    return out


# each is the other's transpose (a permutation's adjoint is its inverse)
grad_ref("depth_to_space")(lambda p, inputs, dys: [space_to_depth(p, dys[0])])
grad_ref("space_to_depth")(lambda p, inputs, dys: [depth_to_space(p, dys[0])])
