"""References for the output and loss ops (symgraph/ops/loss.py's
SoftmaxOutput gradient, symgraph/ops/losses.py: MakeLoss, make_loss,
LogisticRegressionOutput, MAERegressionOutput, SVMOutput,
SoftmaxActivation, smooth_l1, CTCLoss).

Plain NumPy written from MXNet 1.9.1's kernels, apart from the lowerings:
the loss gradients element by element as the C++ loops write them
(softmax_output-inl.h with mshadow's SoftmaxGrad/SmoothSoftmaxGrad,
make_loss-inl.h, regression_output*, svm_output.cc), and CTC from Graves
et al. (2006) in probability space with the per-frame rescaling of the
paper (the lowering works in log space with lax.scan), its gradient from
the rescaled forward and backward variables (eq. 16), plus a brute-force
sum over every alignment for small cases. None of them calls JAX.

REFERENCE_LOSS[name](p, *inputs) -> the visible outputs.
LOSS_GRAD_LOSS[name](p, output, *inputs) -> the gradient of the data of a
loss head (which takes no head gradient).
GRAD_REFERENCE_LOSS[name](p, inputs, dys) -> one gradient per argument
(None where the op gives none) of the ordinary differentiable ops.
"""
import itertools
import math

import numpy as np

from op_reference_tensor import registrar

REFERENCE_LOSS = {}
LOSS_GRAD_LOSS = {}
GRAD_REFERENCE_LOSS = {}
ref = registrar(REFERENCE_LOSS)
loss_grad = registrar(LOSS_GRAD_LOSS)
grad_ref = registrar(GRAD_REFERENCE_LOSS)


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _flat_2d(shape):
    """mshadow's TShape::FlatTo2D: (product of all axes but the last, the
    last); a scalar is (1, 1)."""
    if len(shape) == 0:
        return 1, 1
    return int(np.prod(shape[:-1])), int(shape[-1])


# --------------------------------------------------------------------------
# SoftmaxOutput's gradient, as SoftmaxOutputOp::Backward computes it
# --------------------------------------------------------------------------
@loss_grad("SoftmaxOutput")
def softmax_output_grad(p, y, x, label):
    gs = p.grad_scale
    if label.shape == y.shape:  # probabilities: grad_scale only, no normalization
        return (y - label) * gs
    ig = int(p.ignore_label)  # static_cast<int>, as every comparison in the kernel
    if p.multi_output:
        # (n, k, P) data, (n, P) labels; SoftmaxGrad (3-D): no smoothing
        n, k = y.shape[0], y.shape[1]
        positions = int(np.prod(y.shape[2:]))
        out = y.reshape(n, k, positions)
        lab = label.reshape(n, positions)
        g = np.empty_like(out)
        for i in range(n):
            for j in range(positions):
                c = int(lab[i, j])
                for cls in range(k):
                    if p.use_ignore and c == ig:
                        g[i, cls, j] = 0.0
                    else:
                        g[i, cls, j] = out[i, cls, j] - (1.0 if cls == c else 0.0)
        if p.normalization == "batch":
            count = n  # label.size(0)
        elif p.normalization == "valid":
            count = sum(1 for v in lab.reshape(-1) if int(v) != ig) or 1
        else:
            count = 1
        # grad_scale / (valid ? 1 : s3[2]) / valid_cnt
        scale = gs / (1 if p.normalization == "valid" else positions) / count
        return (g * scale).reshape(y.shape)
    # the (rows, classes) matrix; the label flattened, row r takes label[r]
    if p.preserve_shape:
        rows, k = _flat_2d(y.shape)
    else:
        rows, k = y.shape[0], y.size // y.shape[0]
    out = y.reshape(rows, k)
    flat = label.reshape(-1)
    a = p.smooth_alpha
    g = np.empty_like(out)
    for r in range(rows):
        c = int(flat[r])
        for cls in range(k):
            if p.use_ignore and c == ig:
                g[r, cls] = 0.0
            elif a == 0:
                g[r, cls] = out[r, cls] - (1.0 if cls == c else 0.0)
            else:  # SmoothSoftmaxGrad
                g[r, cls] = out[r, cls] - 1.0 + a if cls == c else out[r, cls] - a / (k - 1)
    if p.normalization == "batch":
        count = flat.size  # label.size(0) of the 1-D label
    elif p.normalization == "valid":
        count = sum(1 for v in flat if int(v) != ig) or 1
    else:
        count = 1
    return (g * (gs / count)).reshape(y.shape)


# --------------------------------------------------------------------------
# MakeLoss and make_loss: the output is the data
# --------------------------------------------------------------------------
ref("MakeLoss", "make_loss")(lambda p, x: x.copy())


@loss_grad("MakeLoss")
def make_loss_grad(p, y, x):
    if p.normalization == "valid":
        # sumall(threshold(valid_thresh, data)), threshold(a, b) = a < b; max(1, .)
        count = max(1.0, float(sum(1 for v in x.reshape(-1) if p.valid_thresh < v)))
        return np.full(x.shape, p.grad_scale / count)
    if p.normalization == "batch":
        return np.full(x.shape, p.grad_scale / _flat_2d(x.shape)[0])
    return np.full(x.shape, p.grad_scale)


loss_grad("make_loss")(lambda p, y, x: np.ones_like(x))


# --------------------------------------------------------------------------
# regression outputs: grad = op(out, label) * grad_scale / (label.Size / label[0])
# --------------------------------------------------------------------------
ref("LogisticRegressionOutput")(lambda p, x, label: 1 / (1 + np.exp(-x)))
ref("MAERegressionOutput")(lambda p, x, label: x.copy())


def _num_output(label):
    return label.size / label.shape[0]


@loss_grad("LogisticRegressionOutput")
def logistic_grad(p, y, x, label):
    return (y - label.reshape(y.shape)) * (p.grad_scale / _num_output(label))


@loss_grad("MAERegressionOutput")
def mae_grad(p, y, x, label):
    lab = label.reshape(-1)
    g = np.array([1.0 if a - b > 0 else -1.0 for a, b in zip(y.reshape(-1), lab)])
    return g.reshape(y.shape) * (p.grad_scale / _num_output(label))


# --------------------------------------------------------------------------
# SVMOutput: L1_SVM / L2_SVM of svm_output.cc, row by row
# --------------------------------------------------------------------------
ref("SVMOutput")(lambda p, x, label: x.copy())


@loss_grad("SVMOutput")
def svm_grad(p, y, x, label):
    rows, k = _flat_2d(y.shape)
    src = y.reshape(rows, k)
    lab = label.reshape(-1)
    m, c = p.margin, p.regularization_coefficient
    dst = np.empty_like(src)
    for r in range(rows):
        t = int(lab[r])
        for cls in range(k):
            v = src[r, cls]
            if p.use_linear:
                dst[r, cls] = -float(m > v) * c if cls == t else float(m > -v) * c
            elif cls == t:
                dst[r, cls] = (2 * (m - v) if m > v else 0.0) * -c
            else:
                dst[r, cls] = (-2 * (m + v) if m > -v else 0.0) * -c
    return dst.reshape(y.shape)


# --------------------------------------------------------------------------
# SoftmaxActivation: softmax over the last axis (instance) or axis 1 (channel)
# --------------------------------------------------------------------------
def _sa_axis(p):
    return 1 if p.mode == "channel" else -1


ref("SoftmaxActivation")(lambda p, x: _softmax(x, _sa_axis(p)))


@grad_ref("SoftmaxActivation")
def softmax_activation_grad(p, inputs, dys):
    """d softmax: dx_i = y_i (dy_i - sum_j dy_j y_j) along the axis."""
    y = _softmax(inputs[0], _sa_axis(p))
    dy = dys[0]
    return [y * (dy - (dy * y).sum(axis=_sa_axis(p), keepdims=True))]


# --------------------------------------------------------------------------
# smooth_l1 (mshadow_op::smooth_l1_loss and smooth_l1_gradient)
# --------------------------------------------------------------------------
def _smooth_l1_one(v, sigma):
    bsq = sigma * sigma
    ibsq = 1.0 / bsq if bsq else math.inf
    if v > ibsq:
        return v - 0.5 * ibsq
    if v < -ibsq:
        return -v - 0.5 * ibsq
    return 0.5 * v * v * bsq


def _smooth_l1_grad_one(v, sigma):
    bsq = sigma * sigma
    ibsq = 1.0 / bsq if bsq else math.inf
    if v > ibsq:
        return 1.0
    if v < -ibsq:
        return -1.0
    return bsq * v


@ref("smooth_l1", "_npx_smooth_l1")
def smooth_l1(p, x):
    return np.vectorize(lambda v: _smooth_l1_one(v, p.scalar), otypes=[float])(x)


@grad_ref("smooth_l1", "_npx_smooth_l1")
def smooth_l1_grad(p, inputs, dys):
    d = np.vectorize(lambda v: _smooth_l1_grad_one(v, p.scalar), otypes=[float])(inputs[0])
    return [dys[0] * d]


# --------------------------------------------------------------------------
# CTCLoss: Graves et al. 2006, rescaled forward-backward per sample
# --------------------------------------------------------------------------
def ctc_samples(p, x, label, *lengths):
    """(blank, [(labels, frames)]) per sample, as MXNet reads its inputs:
    the label up to label_lengths or to the first padding value (0 with
    blank_label=first, -1 with last); the frames from data_lengths or all."""
    t_max, n, c = x.shape
    blank = 0 if p.blank_label == "first" else c - 1
    lengths = list(lengths)
    dl = lengths.pop(0) if p.use_data_lengths else None
    ll = lengths.pop(0) if p.use_label_lengths else None
    out = []
    for b in range(n):
        row = [int(v) for v in label[b]]
        if ll is not None:
            size = min(max(int(ll[b]), 0), len(row))
        else:
            pad = 0 if p.blank_label == "first" else -1
            size = row.index(pad) if pad in row else len(row)
        frames = t_max if dl is None else min(max(int(dl[b]), 0), t_max)
        out.append((row[:size], frames))
    return blank, out


def ctc_one(logits, lab, blank):
    """(cost, gradient of the logits) of one sample: logits (T, C) of its
    frames, lab its labels. Labels that do not fit the frames (length +
    repeated neighbours > T) cost 0 with gradient 0, as warp-ctc; labels
    no alignment reaches (a blank among them) cost inf, gradient 0."""
    frames, c = logits.shape
    grad = np.zeros_like(logits)
    size = len(lab)
    repeats = sum(1 for i in range(1, size) if lab[i] == lab[i - 1])
    if size + repeats > frames or frames == 0:
        return 0.0, grad
    y = _softmax(logits, -1)
    states = 2 * size + 1
    ext = [blank] * states
    ext[1::2] = lab

    def skip_from(s):  # s - 2 -> s allowed
        return s >= 2 and ext[s] != blank and ext[s] != ext[s - 2]

    alpha = np.zeros((frames, states))
    alpha[0, 0] = y[0, ext[0]]
    if states > 1:
        alpha[0, 1] = y[0, ext[1]]
    log_p = 0.0
    for t in range(frames):
        if t:
            for s in range(states):
                a = alpha[t - 1, s] + (alpha[t - 1, s - 1] if s >= 1 else 0.0)
                if skip_from(s):
                    a += alpha[t - 1, s - 2]
                alpha[t, s] = a * y[t, ext[s]]
        scale = alpha[t].sum()
        if scale == 0:  # no alignment (a blank among the labels): -log 0
            return math.inf, grad
        alpha[t] /= scale
        log_p += math.log(scale)
    end = alpha[-1, -1] + (alpha[-1, -2] if states > 1 else 0.0)
    if end == 0:  # no alignment (a blank among the labels): -log 0
        return math.inf, grad
    log_p += math.log(end)

    beta = np.zeros((frames, states))
    beta[-1, -1] = y[-1, ext[-1]]
    if states > 1:
        beta[-1, -2] = y[-1, ext[-2]]
    beta[-1] /= beta[-1].sum()
    for t in range(frames - 2, -1, -1):
        for s in range(states):
            b = beta[t + 1, s] + (beta[t + 1, s + 1] if s + 1 < states else 0.0)
            if s + 2 < states and skip_from(s + 2):
                b += beta[t + 1, s + 2]
            beta[t, s] = b * y[t, ext[s]]
        beta[t] /= beta[t].sum()
    for t in range(frames):
        ab = alpha[t] * beta[t]
        z = sum(ab[s] / y[t, ext[s]] for s in range(states))
        for k in range(c):
            hit = sum(ab[s] for s in range(states) if ext[s] == k)
            grad[t, k] = y[t, k] - hit / (y[t, k] * z)
    return -log_p, grad


def ctc_cost_and_grad(p, x, label, *lengths):
    """(costs (N,), gradient of the costs' sum with respect to x (T, N, C))."""
    blank, samples = ctc_samples(p, x, label, *lengths)
    costs = np.zeros(x.shape[1])
    grad = np.zeros_like(x)
    for b, (lab, frames) in enumerate(samples):
        costs[b], grad[:frames, b] = ctc_one(x[:frames, b], lab, blank)
    return costs, grad


def ctc_brute_force(logits, lab, blank):
    """-log of the sum over every path of T classes that collapses (merge
    repeats, drop blanks) to lab of the product of its softmax
    probabilities; C^T paths, for small cases only."""
    y = _softmax(logits, -1)
    frames, c = logits.shape
    total = 0.0
    for path in itertools.product(range(c), repeat=frames):
        merged = [k for i, k in enumerate(path) if i == 0 or k != path[i - 1]]
        if [k for k in merged if k != blank] == list(lab):
            total += float(np.prod([y[t, k] for t, k in enumerate(path)]))
    return -math.log(total) if total > 0 else math.inf


@ref("CTCLoss", "ctc_loss", "_contrib_CTCLoss", "_contrib_ctc_loss")
def ctc_loss(p, x, label, *lengths):
    return ctc_cost_and_grad(p, x, label, *lengths)[0]


@grad_ref("CTCLoss", "ctc_loss", "_contrib_CTCLoss", "_contrib_ctc_loss")
def ctc_loss_grad(p, inputs, dys):
    x, label, lengths = inputs[0], inputs[1], inputs[2:]
    grad = ctc_cost_and_grad(p, x, label, *lengths)[1]
    return [dys[0][None, :, None] * grad] + [None] * (1 + len(lengths))
