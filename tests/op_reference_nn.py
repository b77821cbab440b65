"""References for symgraph/ops/nn.py (convolution, pooling, normalization ...).

Plain NumPy written from MXNet 1.x's documented semantics and kernels, apart
from the lowerings: convolution as a sum over kernel offsets of strided
slices, deconvolution as a scatter of each input element into the output,
pooling as a loop over output windows with MXNet's window clipping, LRN as
a loop over channels. None of them calls JAX.
"""
import itertools
import math

import numpy as np

from op_reference_tensor import registrar

REFERENCE_NN = {}
LOSS_GRAD_NN = {}
ref = registrar(REFERENCE_NN)


def _per_dim(v, default, n):
    return tuple(v) if v else (default,) * n


def _bias(y, b):
    return y if b is None else y + b.reshape((1, -1) + (1,) * (y.ndim - 2))


# --------------------------------------------------------------------------
# Convolution: y = sum over kernel offsets of (strided input slice) x weight
# --------------------------------------------------------------------------
@ref("Convolution")
def convolution(p, x, w, b=None):
    n = x.ndim - 2
    k = tuple(p.kernel)
    s, d = _per_dim(p.stride, 1, n), _per_dim(p.dilate, 1, n)
    pad = _per_dim(p.pad, 0, n)
    xp = np.pad(x, [(0, 0), (0, 0)] + [(q, q) for q in pad])
    out = [(xp.shape[2 + i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(n)]
    groups, cg, fg = p.num_group, x.shape[1] // p.num_group, w.shape[0] // p.num_group
    y = np.zeros((x.shape[0], w.shape[0], *out))
    for off in itertools.product(*[range(kk) for kk in k]):
        sl = tuple(slice(o * d[i], o * d[i] + (out[i] - 1) * s[i] + 1, s[i])
                   for i, o in enumerate(off))
        patch = xp[(slice(None), slice(None)) + sl]
        for gi in range(groups):
            wk = w[(slice(gi * fg, (gi + 1) * fg), slice(None)) + off]  # (F/G, C/G)
            y[:, gi * fg:(gi + 1) * fg] += np.einsum(
                "nc...,fc->nf...", patch[:, gi * cg:(gi + 1) * cg], wk)
    return _bias(y, b)


# --------------------------------------------------------------------------
# Deconvolution: every input element scatters weight[c, f, k] * x into
# output position i*stride + k*dilate - pad (the adjoint of a convolution)
# --------------------------------------------------------------------------
def deconv_pad_adj(p, in_spatial):
    """(pad, adj) after MXNet's target_shape rule."""
    n = len(in_spatial)
    k, s, d = tuple(p.kernel), _per_dim(p.stride, 1, n), _per_dim(p.dilate, 1, n)
    pad, adj = _per_dim(p.pad, 0, n), _per_dim(p.adj, 0, n)
    if p.target_shape and any(p.target_shape):
        total = [s[i] * (in_spatial[i] - 1) + d[i] * (k[i] - 1) + 1 - p.target_shape[i]
                 for i in range(n)]
        pad = tuple((t + 1) // 2 for t in total)
        adj = tuple(t % 2 for t in total)
    return pad, adj


@ref("Deconvolution")
def deconvolution(p, x, w, b=None):
    n = x.ndim - 2
    k, s, d = tuple(p.kernel), _per_dim(p.stride, 1, n), _per_dim(p.dilate, 1, n)
    inn = x.shape[2:]
    pad, adj = deconv_pad_adj(p, inn)
    full = [(inn[i] - 1) * s[i] + d[i] * (k[i] - 1) + 1 for i in range(n)]
    groups, cg, fg = p.num_group, x.shape[1] // p.num_group, w.shape[1]
    buf = np.zeros((x.shape[0], groups * fg) + tuple(f + a for f, a in zip(full, adj)))
    for off in itertools.product(*[range(kk) for kk in k]):
        sl = tuple(slice(o * d[i], o * d[i] + (inn[i] - 1) * s[i] + 1, s[i])
                   for i, o in enumerate(off))
        for gi in range(groups):
            wk = w[(slice(gi * cg, (gi + 1) * cg), slice(None)) + off]  # (C/G, F/G)
            buf[(slice(None), slice(gi * fg, (gi + 1) * fg)) + sl] += np.einsum(
                "nc...,cf->nf...", x[:, gi * cg:(gi + 1) * cg], wk)
    crop = tuple(slice(pad[i], full[i] - pad[i] + adj[i]) for i in range(n))
    return _bias(buf[(slice(None), slice(None)) + crop], b)


# --------------------------------------------------------------------------
# Pooling: one window at a time, clipped as in MXNet's pool.h
# --------------------------------------------------------------------------
def pool_output_size(in_size, k, s, pad, convention):
    """MXNet: valid = floor((in + 2 pad - k) / s) + 1, full = ceil(...) + 1."""
    span = in_size + 2 * pad - k
    return (math.ceil(span / s) if convention == "full" else span // s) + 1


@ref("Pooling")
def pooling(p, x):
    n = x.ndim - 2
    inn = x.shape[2:]
    if p.global_pool:
        k, s, pad = inn, (1,) * n, (0,) * n
    else:
        k, s, pad = tuple(p.kernel), _per_dim(p.stride, 1, n), _per_dim(p.pad, 0, n)
    out = [pool_output_size(inn[i], k[i], s[i], pad[i], p.pooling_convention)
           for i in range(n)]
    include = p.count_include_pad is None or p.count_include_pad
    y = np.empty(x.shape[:2] + tuple(out))
    for o in np.ndindex(*out):
        start = [o[i] * s[i] - pad[i] for i in range(n)]
        end = [min(start[i] + k[i], inn[i] + pad[i]) for i in range(n)]
        lo = [max(v, 0) for v in start]
        hi = [min(v, inn[i]) for i, v in enumerate(end)]
        region = x[(slice(None), slice(None)) + tuple(slice(a, b) for a, b in zip(lo, hi))]
        region = region.reshape(x.shape[:2] + (-1,))
        at = (slice(None), slice(None)) + o
        if p.pool_type == "max":
            y[at] = region.max(axis=-1) if region.shape[-1] else -np.inf
        elif p.pool_type == "sum":
            y[at] = region.sum(axis=-1)
        else:
            count = np.prod([(e - b) if include else (h - l)
                             for b, e, l, h in zip(start, end, lo, hi)])
            y[at] = region.sum(axis=-1) / count
    return y


def max_pool_grad(p, x, dy):
    """MXNet's max-pool backward: each window's gradient goes to the first
    maximum in row-major order within the window."""
    n = x.ndim - 2
    inn = x.shape[2:]
    if p.global_pool:
        k, s, pad = inn, (1,) * n, (0,) * n
    else:
        k, s, pad = tuple(p.kernel), _per_dim(p.stride, 1, n), _per_dim(p.pad, 0, n)
    dx = np.zeros_like(x)
    for nc in np.ndindex(*x.shape[:2]):
        for o in np.ndindex(*dy.shape[2:]):
            lo = [max(o[i] * s[i] - pad[i], 0) for i in range(n)]
            hi = [min(o[i] * s[i] - pad[i] + k[i], inn[i]) for i in range(n)]
            best, where = -np.inf, None
            for pos in itertools.product(*[range(a, b) for a, b in zip(lo, hi)]):
                if x[nc + pos] > best:
                    best, where = x[nc + pos], pos
            if where is not None:
                dx[nc + where] += dy[nc + o]
    return dx


# --------------------------------------------------------------------------
# BatchNorm
# --------------------------------------------------------------------------
def _bn_view(p, x):
    ax = p.axis % x.ndim
    red = tuple(i for i in range(x.ndim) if i != ax)
    shape = [1] * x.ndim
    shape[ax] = x.shape[ax]
    return red, lambda v: np.reshape(v, shape)


@ref("BatchNorm")
def batchnorm_infer(p, x, gamma, beta, moving_mean, moving_var):
    """Inference: the moving statistics; visible mean/var outputs are the
    moving mean and the inverse std 1/sqrt(moving_var + eps)."""
    _, b = _bn_view(p, x)
    g = np.ones_like(gamma) if p.fix_gamma else gamma
    invstd = 1 / np.sqrt(moving_var + p.eps)
    y = (x - b(moving_mean)) * b(invstd) * b(g) + b(beta)
    return (y, moving_mean, invstd) if p.output_mean_var else y


def batchnorm_train(p, x, gamma, beta, moving_mean, moving_var):
    """Training: (y, batch mean, inverse std, new moving mean, new moving var)."""
    red, b = _bn_view(p, x)
    mean = x.mean(axis=red)
    var = ((x - b(mean)) ** 2).mean(axis=red)
    g = np.ones_like(gamma) if p.fix_gamma else gamma
    y = (x - b(mean)) / np.sqrt(b(var) + p.eps) * b(g) + b(beta)
    m = p.momentum
    return (y, mean, 1 / np.sqrt(var + p.eps),
            moving_mean * m + mean * (1 - m), moving_var * m + var * (1 - m))


# Dropout is random; the registry test only checks its shapes. Outside
# training (mode='training') it is the identity.
ref("Dropout")(lambda p, x: x)


# --------------------------------------------------------------------------
# LRN across channels, MXNet: norm = knorm + alpha/nsize * sum x^2 over
# channels c - nsize//2 .. c + nsize//2; y = x * norm^-beta
# --------------------------------------------------------------------------
@ref("LRN")
def lrn(p, x):
    c = x.shape[1]
    h = p.nsize // 2
    norm = np.empty_like(x)
    for ch in range(c):
        lo, hi = max(0, ch - h), min(c, ch + h + 1)
        norm[:, ch] = p.knorm + p.alpha / p.nsize * (x[:, lo:hi] ** 2).sum(axis=1)
    return x * norm ** (-p.beta)


# --------------------------------------------------------------------------
# LeakyReLU family (MXNet's formulas; gelu is the erf form)
# --------------------------------------------------------------------------
_erf = np.vectorize(math.erf)


@ref("LeakyReLU")
def leaky_relu(p, x, gamma=None):
    neg = x <= 0
    if p.act_type == "leaky":
        return np.where(neg, p.slope * x, x)
    if p.act_type == "elu":
        return np.where(neg, p.slope * (np.exp(x) - 1), x)
    if p.act_type == "selu":
        lam, alpha = 1.0507009873554804934193349852946, 1.6732632423543772848170429916717
        return lam * np.where(neg, alpha * (np.exp(x) - 1), x)
    if p.act_type == "gelu":
        return 0.5 * x * (1 + _erf(x / np.sqrt(2)))
    slope = gamma.reshape((1, -1) + (1,) * (x.ndim - 2)) if x.ndim >= 2 else gamma
    return np.where(neg, slope * x, x)


# --------------------------------------------------------------------------
# Embedding: rows of the table; indices clipped to the table as in MXNet
# --------------------------------------------------------------------------
@ref("Embedding")
def embedding(p, data, weight):
    return weight[np.clip(data.astype(np.int64), 0, p.input_dim - 1)]


def embedding_weight_grad(p, data, dy):
    dw = np.zeros((p.input_dim, p.output_dim))
    np.add.at(dw, np.clip(data.astype(np.int64), 0, p.input_dim - 1).reshape(-1),
              dy.reshape(-1, p.output_dim))
    return dw


# --------------------------------------------------------------------------
# Gradients, written as the adjoints of the loops above (NumPy only).
# GRAD_REFERENCE_NN[name](p, inputs, dy) -> gradient of each argument
# (data, weight, bias ...), None where the op gives none. ``inputs`` are the
# arguments then the aux states; ``dy`` the head gradients of the visible
# outputs. ``train``: BatchNorm's mode (batch statistics unless
# use_global_stats).
# --------------------------------------------------------------------------
GRAD_REFERENCE_NN = {}
grad_ref = registrar(GRAD_REFERENCE_NN)


def _contract(a, b):
    """sum over batch and space of a[n, c, ...] b[n, f, ...] -> (c, f)."""
    return np.einsum("ncs,nfs->cf", a.reshape(a.shape[:2] + (-1,)),
                     b.reshape(b.shape[:2] + (-1,)))


def _bias_grad(dy):
    return dy.sum(axis=(0,) + tuple(range(2, dy.ndim)))


@grad_ref("Convolution")
def convolution_grad(p, inputs, dys, train=True):
    """y = sum_off patch(off) . w[:, :, off]: each offset's patch (a strided
    slice of the padded input) gets dy . w back, and w[:, :, off] gets
    patch . dy."""
    x, w = inputs[:2]
    (dy,) = dys[:1]
    n = x.ndim - 2
    k = tuple(p.kernel)
    s, d = _per_dim(p.stride, 1, n), _per_dim(p.dilate, 1, n)
    pad = _per_dim(p.pad, 0, n)
    xp = np.pad(x, [(0, 0), (0, 0)] + [(q, q) for q in pad])
    out = dy.shape[2:]
    groups, cg, fg = p.num_group, x.shape[1] // p.num_group, w.shape[0] // p.num_group
    dxp, dw = np.zeros_like(xp), np.zeros_like(w)
    for off in itertools.product(*[range(kk) for kk in k]):
        sl = tuple(slice(o * d[i], o * d[i] + (out[i] - 1) * s[i] + 1, s[i])
                   for i, o in enumerate(off))
        for gi in range(groups):
            cs, fs = slice(gi * cg, (gi + 1) * cg), slice(gi * fg, (gi + 1) * fg)
            wk = w[(fs, slice(None)) + off]  # (F/G, C/G)
            dxp[(slice(None), cs) + sl] += np.einsum("nf...,fc->nc...", dy[:, fs], wk)
            dw[(fs, slice(None)) + off] += _contract(xp[(slice(None), cs) + sl], dy[:, fs]).T
    dx = dxp[(slice(None), slice(None)) + tuple(slice(q, q + x.shape[2 + i])
                                                for i, q in enumerate(pad))]
    return [dx, dw] + ([] if p.no_bias else [_bias_grad(dy)])


@grad_ref("Deconvolution")
def deconvolution_grad(p, inputs, dys, train=True):
    """The scatter of ``deconvolution`` read backwards: dy padded back to the
    uncropped buffer; each input element gathers buffer-grad . w, and
    w[:, :, off] gets x . buffer-grad over the positions it wrote."""
    x, w = inputs[:2]
    (dy,) = dys[:1]
    n = x.ndim - 2
    k, s, d = tuple(p.kernel), _per_dim(p.stride, 1, n), _per_dim(p.dilate, 1, n)
    inn = x.shape[2:]
    pad, adj = deconv_pad_adj(p, inn)
    full = [(inn[i] - 1) * s[i] + d[i] * (k[i] - 1) + 1 for i in range(n)]
    groups, cg, fg = p.num_group, x.shape[1] // p.num_group, w.shape[1]
    dbuf = np.zeros((x.shape[0], groups * fg) + tuple(f + a for f, a in zip(full, adj)))
    crop = tuple(slice(pad[i], full[i] - pad[i] + adj[i]) for i in range(n))
    dbuf[(slice(None), slice(None)) + crop] = dy
    dx, dw = np.zeros_like(x), np.zeros_like(w)
    for off in itertools.product(*[range(kk) for kk in k]):
        sl = tuple(slice(o * d[i], o * d[i] + (inn[i] - 1) * s[i] + 1, s[i])
                   for i, o in enumerate(off))
        for gi in range(groups):
            cs, fs = slice(gi * cg, (gi + 1) * cg), slice(gi * fg, (gi + 1) * fg)
            wk = w[(cs, slice(None)) + off]  # (C/G, F/G)
            part = dbuf[(slice(None), fs) + sl]
            dx[:, cs] += np.einsum("nf...,cf->nc...", part, wk)
            dw[(cs, slice(None)) + off] += _contract(x[:, cs], part)
    return [dx, dw] + ([] if p.no_bias else [_bias_grad(dy)])


@grad_ref("FullyConnected")
def fully_connected_grad(p, inputs, dys, train=True):
    """y = x W^T + b: dx = dy W, dW = dy^T x, db = sum of dy's rows."""
    x, w = inputs[:2]
    (dy,) = dys[:1]
    x2 = x.reshape(x.shape[0], -1) if p.flatten else x.reshape(-1, x.shape[-1])
    d2 = dy.reshape(-1, dy.shape[-1])
    grads = [(d2 @ w).reshape(x.shape), d2.T @ x2]
    return grads + ([] if p.no_bias else [d2.sum(axis=0)])


@grad_ref("Pooling")
def pooling_grad(p, inputs, dys, train=True):
    """max: MXNet's first-max routing; avg/sum: each window's gradient (over
    its count for avg) spread over the input elements the window sums."""
    (x,), (dy,) = inputs[:1], dys[:1]
    if p.pool_type == "max":
        return [max_pool_grad(p, x, dy)]
    n = x.ndim - 2
    inn = x.shape[2:]
    if p.global_pool:
        k, s, pad = inn, (1,) * n, (0,) * n
    else:
        k, s, pad = tuple(p.kernel), _per_dim(p.stride, 1, n), _per_dim(p.pad, 0, n)
    include = p.count_include_pad is None or p.count_include_pad
    dx = np.zeros_like(x)
    for o in np.ndindex(*dy.shape[2:]):
        start = [o[i] * s[i] - pad[i] for i in range(n)]
        end = [min(start[i] + k[i], inn[i] + pad[i]) for i in range(n)]
        lo = [max(v, 0) for v in start]
        hi = [min(v, inn[i]) for i, v in enumerate(end)]
        g = dy[(slice(None), slice(None)) + o]
        if p.pool_type == "avg":
            g = g / np.prod([(e - b) if include else (h - l)
                             for b, e, l, h in zip(start, end, lo, hi)])
        region = (slice(None), slice(None)) + tuple(slice(a, b) for a, b in zip(lo, hi))
        dx[region] += g.reshape(g.shape + (1,) * n)
    return [dx]


@grad_ref("BatchNorm")
def batchnorm_grad(p, inputs, dys, train=True):
    """y = g xh + beta, xh = (x - mean) invstd. With batch statistics mean and
    invstd depend on x: d/dx of mean is 1/m, of var is 2 (x - mean) / m, so
    dx = g invstd (dy - mean(dy) - xh mean(dy xh)); with the moving ones
    dx = g invstd dy. dgamma = sum(dy xh) (0 with fix_gamma, where g = 1),
    dbeta = sum(dy). Gradients into the visible mean/var outputs are
    dropped, as MXNet does."""
    x, gamma, _beta, moving_mean, moving_var = inputs
    dy = dys[0]
    red, b = _bn_view(p, x)
    if train and not p.use_global_stats:
        mean = x.mean(axis=red)
        var = ((x - b(mean)) ** 2).mean(axis=red)
    else:
        mean, var = moving_mean, moving_var
    invstd = 1 / np.sqrt(var + p.eps)
    xh = (x - b(mean)) * b(invstd)
    g = np.ones_like(gamma) if p.fix_gamma else gamma
    dbeta, dgamma = dy.sum(axis=red), (dy * xh).sum(axis=red)
    if train and not p.use_global_stats:
        m = x.size // x.shape[p.axis % x.ndim]
        dx = b(g * invstd) * (dy - b(dbeta / m) - xh * b(dgamma / m))
    else:
        dx = dy * b(g * invstd)
    return [dx, np.zeros_like(gamma) if p.fix_gamma else dgamma, dbeta]


@grad_ref("Embedding")
def embedding_grad(p, inputs, dys, train=True):
    return [None, embedding_weight_grad(p, inputs[0], dys[0])]
