"""The output and loss ops of MXNet 1.9.1 beyond SoftmaxOutput and
LinearRegressionOutput (ops/loss.py): MakeLoss and make_loss,
LogisticRegressionOutput, MAERegressionOutput, SVMOutput,
SoftmaxActivation, smooth_l1 and CTCLoss.

Names, attributes, defaults and gradients are those of MXNet 1.9.1's
kernels (src/operator/make_loss-inl.h, regression_output*, svm_output*,
nn/softmax_activation*, tensor/elemwise_binary_scalar_op_extended.cc and
mshadow_op.h for smooth_l1, nn/ctc_loss* with 3rdparty/ctc_include):

- The loss heads (MakeLoss, make_loss, the regression outputs, SVMOutput)
  start the backward by themselves, as SoftmaxOutput does: the gradient of
  the data is the one MXNet's kernel writes, whatever head gradient would
  arrive. MakeLoss's 'batch' divides by the rows of MXNet's 2-D view of the
  data (every axis but the last: 1 for a vector), 'valid' by the count of
  elements above valid_thresh (at least 1). The regression outputs divide
  by the outputs per sample (the label's size over its first axis).
- SoftmaxActivation and smooth_l1 are ordinary differentiable ops. On
  input of rank > 2, SoftmaxActivation's mode=instance takes the softmax
  over the last axis as MXNet's CPU kernel does (its cuDNN kernel refuses
  such input); MXNet's CPU backward then sums over axis 1, which is not
  that softmax's gradient: symgraph's backward is the gradient of the
  forward (the two agree on 2-D input and in mode=channel).
- CTCLoss returns the per-sample negative log likelihood and, as a hidden
  second output, its gradient with respect to the activations, computed in
  the forward as MXNet does (warp-ctc's cost_and_grad); the backward reads
  only the head gradient and that hidden output. A sample whose labels
  cannot be aligned in its frames (label length + repeats > data length)
  costs 0 with gradient 0 (warp-ctc returns 0 for it); one the count
  admits but no alignment fits (a blank among its labels) costs inf with
  gradient 0; frames past a sample's data length get gradient 0 (MXNet's
  SequenceMask).
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax

from ..errors import ShapeError
from .backward import register_backward
from .loss import _grad_as_output_type
from .registry import (Attr, OpDef, Sample, bool_attr, choice_attr, float_attr, numel,
                       register)


def _rows(shape) -> int:
    """The rows of MXNet's FlatTo2D view: every axis but the last (a vector
    is one row; a scalar one row of one)."""
    return numel(shape[:-1]) if len(shape) else 1


def _need_rank(shape, low, what, layout):
    if len(shape) < low:
        raise ShapeError(f"{what} needs an input of rank >= {low} ({layout}), got {tuple(shape)}")


# --------------------------------------------------------------------------
# MakeLoss / make_loss: y = x; dx = grad_scale / norm (no head gradient)
# --------------------------------------------------------------------------
def _identity_shape(p, s):
    return [s[0]], [s[0]]


def _make_loss_backward(p, ctx, og, ins, outs):
    (x,) = ins
    norm = p.get("normalization", "null")
    scale = p.get("grad_scale", 1.0)
    if norm == "valid":  # MXNet: sum(valid_thresh < x), at least 1
        count = (x > jnp.asarray(p.valid_thresh, x.dtype)).sum().astype(x.dtype)
        value = jnp.asarray(scale, x.dtype) / jnp.maximum(count, 1)
    elif norm == "batch":
        value = jnp.asarray(scale / _rows(x.shape), x.dtype)
    else:
        value = jnp.asarray(scale, x.dtype)
    return [jnp.broadcast_to(value, x.shape)]


_make_loss = register(OpDef(
    name="MakeLoss",
    attrs={"grad_scale": Attr(float_attr, 1.0, "the gradient of every element"),
           "valid_thresh": Attr(float_attr, 0.0, "with normalization='valid': the elements "
                                "above it are counted"),
           "normalization": Attr(choice_attr("null", "batch", "valid"), "null",
                                 "divide the gradient by nothing, the rows (all axes but "
                                 "the last) or the count of elements above valid_thresh")},
    lower=lambda p, ctx, x: x, infer_shape=_identity_shape, is_loss=True, inplace=[(0, 0)],
    category="injective",
    doc="Makes its input a loss (MXNet 1.9.1): the output is the input, the gradient of "
        "the input is grad_scale everywhere, divided by the rows of the input's 2-D view "
        "(every axis but the last; 1 for a vector) with normalization='batch', or by the "
        "count of elements above valid_thresh (at least 1) with 'valid'. A loss head: it "
        "takes no head gradient.",
    samples=[Sample({}, [(4, 3)]),
             Sample({"grad_scale": 0.5, "normalization": "batch"}, [(2, 3, 4)]),
             Sample({"normalization": "batch"}, [(5,)]),
             Sample({"normalization": "valid", "valid_thresh": 0.2, "grad_scale": 3.0},
                    [(4, 3)])]))

# reads the data only for its shape, except to count it with 'valid'
register_backward(_make_loss, reads_ograds=(), reads_inputs=(0,), lower=_make_loss_backward,
                  inputs_for_shape_only=lambda p: p.normalization != "valid",
                  category="opaque", flops=lambda p, ins, outs: 2 * numel(outs[0]))

_make_loss_lc = register(OpDef(
    name="make_loss", outputs=("loss",), lower=lambda p, ctx, x: x,
    infer_shape=_identity_shape, is_loss=True, inplace=[(0, 0)], category="injective",
    doc="Makes its input a loss (MXNet's make_loss): the output is the input, the "
        "gradient of the input is 1 everywhere (ones_like). A loss head.",
    samples=[Sample({}, [(3, 4)])]))

register_backward(_make_loss_lc, reads_ograds=(), reads_inputs=(0,),
                  lower=_make_loss_backward, inputs_for_shape_only=True,
                  category="opaque", flops=lambda p, ins, outs: numel(outs[0]))


# --------------------------------------------------------------------------
# LogisticRegressionOutput (y = sigmoid(x)) and MAERegressionOutput (y = x):
# dx = (y - label) or sign(y - label), times grad_scale / outputs per sample
# --------------------------------------------------------------------------
def _regression_shape(p, s):
    """MXNet's RegressionOpShape: an unknown label is (n,) for (n, 1) data,
    else the data's shape; a given one has the data's first axis and size."""
    data, label = s
    if data is None:
        return s, [None]
    _need_rank(data, 1, "a regression output", "samples first")
    if label is None:
        label = (data[0],) if len(data) == 2 and data[1] == 1 else tuple(data)
    elif len(label) == 0 or label[0] != data[0] or numel(label) != numel(data):
        raise ShapeError(f"label shape {tuple(label)} does not fit data {tuple(data)}: it "
                         f"needs the data's first axis ({data[0]}) and size ({numel(data)})")
    return [data, label], [data]


def _per_sample(label) -> int:
    return max(1, label.size // label.shape[0]) if label.ndim else 1


def _logistic_grad(p, y, label):
    return (y - label.reshape(y.shape).astype(y.dtype)) * (p.grad_scale / _per_sample(label))


def _mae_grad(p, y, label):
    sign = jnp.where(y - label.reshape(y.shape).astype(y.dtype) > 0, 1, -1).astype(y.dtype)
    return sign * (p.grad_scale / _per_sample(label))


REGRESSION_ATTRS = {"grad_scale": Attr(float_attr, 1.0, "scales the gradient")}
_REG_SAMPLES = [Sample({}, [(4, 3), (4, 3)]), Sample({"grad_scale": 2.0}, [(4, 1), (4,)]),
                Sample({"grad_scale": 0.5}, [(2, 3, 2), (2, 6)])]

_logistic = register(OpDef(
    name="LogisticRegressionOutput", attrs=REGRESSION_ATTRS, arguments=("data", "label"),
    lower=lambda p, ctx, x, label: jax.nn.sigmoid(x), infer_shape=_regression_shape,
    is_loss=True, inplace=[(0, 0)], category="opaque",
    flops=lambda p, ins, outs: 4 * numel(outs[0]),
    doc="The logistic function of the input, with the gradient of binary cross-entropy "
        "(MXNet 1.9.1): d data = (output - label) * grad_scale / m, m the outputs per "
        "sample (the label's size over its first axis). An unknown label is (n,) for "
        "(n, 1) data, else the data's shape. A loss head.",
    samples=_REG_SAMPLES))

_mae = register(OpDef(
    name="MAERegressionOutput", attrs=REGRESSION_ATTRS, arguments=("data", "label"),
    lower=lambda p, ctx, x, label: x, infer_shape=_regression_shape, is_loss=True,
    inplace=[(0, 0)], category="injective",
    doc="The input, with the gradient of the mean absolute error (MXNet 1.9.1): "
        "d data = sign(output - label) * grad_scale / m (-1 where they are equal, as "
        "MXNet's minus_sign), m the outputs per sample. A loss head.",
    samples=_REG_SAMPLES))

for _op, _rule in ((_logistic, _logistic_grad), (_mae, _mae_grad)):
    # reads the label and its output (MXNet's RegressionOpGrad); dx over the output
    register_backward(
        _op, reads_ograds=(), reads_inputs=(1,), reads_outputs=(0,), no_grad=(1,),
        lower=lambda p, ctx, og, ins, outs, rule=_rule: [rule(p, outs[0], ins[0]), None],
        infer_shape=lambda p, s: (s, [s[1]]), infer_type=_grad_as_output_type,
        inplace=[(1, 0)], category="elementwise")


# --------------------------------------------------------------------------
# SVMOutput: y = x; the L1- or L2-SVM gradient over the last axis
# --------------------------------------------------------------------------
def _svm_shape(p, s):
    data, label = s
    if data is None:
        return s, [None]
    _need_rank(data, 2, "SVMOutput", "samples..., classes")
    want = tuple(data[:-1])
    if label is not None and tuple(label) != want:
        raise ShapeError(f"label shape {tuple(label)} does not fit data {tuple(data)}; "
                         f"expected {want}")
    return [data, want], [data]


def _svm_grad(p, y, label):
    """MXNet's L1_SVM/L2_SVM over the (rows, classes) view: at the label's
    class k, -c [m > y_k] (L1) or -2c (m - y_k) [m > y_k] (L2); elsewhere
    c [m > -y] (L1) or 2c (m + y) [m > -y] (L2)."""
    k = y.shape[-1]
    out = y.reshape(-1, k)
    lab = label.reshape(-1).astype(jnp.int32)
    at = jnp.arange(k)[None, :] == lab[:, None]
    m, c = jnp.asarray(p.margin, y.dtype), jnp.asarray(p.regularization_coefficient, y.dtype)
    zero = jnp.zeros((), y.dtype)
    if p.use_linear:
        g = jnp.where(at, -c * (m > out).astype(y.dtype), c * (m > -out).astype(y.dtype))
    else:
        g = jnp.where(at, jnp.where(m > out, -2 * c * (m - out), zero),
                      jnp.where(m > -out, 2 * c * (m + out), zero))
    return g.reshape(y.shape)


_svm = register(OpDef(
    name="SVMOutput",
    attrs={"margin": Attr(float_attr, 1.0, "the margin outputs are pushed beyond"),
           "regularization_coefficient": Attr(float_attr, 1.0, "scales the gradient"),
           "use_linear": Attr(bool_attr, False, "the L1-SVM gradient instead of the L2-SVM's")},
    arguments=("data", "label"), lower=lambda p, ctx, x, label: x, infer_shape=_svm_shape,
    is_loss=True, inplace=[(0, 0)], category="injective",
    doc="The input, with a support vector machine's gradient (MXNet 1.9.1) over the last "
        "axis (the classes; every other axis a sample), labels of the data's shape "
        "without its last axis: at the label's class k, -c [margin > y_k] (use_linear, "
        "L1-SVM) or -2c (margin - y_k) [margin > y_k] (L2-SVM); at the other classes "
        "c [margin > -y] or 2c (margin + y) [margin > -y]; c = "
        "regularization_coefficient. A loss head.",
    samples=[Sample({}, [(4, 3), (4,)], ints={1: 3}),
             Sample({"use_linear": True, "margin": 0.5}, [(5, 4), (5,)], ints={1: 4}),
             Sample({"regularization_coefficient": 0.5, "margin": 0.3}, [(2, 3, 4), (2, 3)],
                    ints={1: 4})]))

# reads the label and its output; dx may overwrite the output (MXNet's
# BackwardInplaceOption)
register_backward(
    _svm, reads_ograds=(), reads_inputs=(1,), reads_outputs=(0,), no_grad=(1,),
    lower=lambda p, ctx, og, ins, outs: [_svm_grad(p, outs[0], ins[0]), None],
    infer_shape=lambda p, s: (s, [s[1]]), infer_type=_grad_as_output_type, inplace=[(1, 0)],
    category="elementwise", flops=lambda p, ins, outs: 4 * numel(outs[0]))


# --------------------------------------------------------------------------
# SoftmaxActivation: softmax over the last axis (instance) or axis 1 (channel)
# --------------------------------------------------------------------------
def _sa_axis(p) -> int:
    return 1 if p.mode == "channel" else -1


def _sa_shape(p, s):
    data = s[0]
    if data is None:
        return s, [None]
    if p.mode == "channel":
        _need_rank(data, 3, "SoftmaxActivation mode=channel", "batch, channel, spatial...")
    _need_rank(data, 1, "SoftmaxActivation", "instances..., classes")
    return [data], [data]


_sa = register(OpDef(
    name="SoftmaxActivation",
    attrs={"mode": Attr(choice_attr("instance", "channel"), "instance",
                        "instance: over the last axis; channel: over axis 1 at each "
                        "position")},
    lower=lambda p, ctx, x: jax.nn.softmax(x, axis=_sa_axis(p)), infer_shape=_sa_shape,
    inplace=[(0, 0)], family="activation", per_sample=lambda p: p.mode == "channel",
    flops=lambda p, ins, outs: 5 * numel(outs[0]),
    doc="Softmax (MXNet 1.9.1's deprecated SoftmaxActivation): mode=instance over the "
        "last axis of the input (MXNet's CPU kernel's 2-D view; its cuDNN kernel takes "
        "2-D input only), mode=channel over axis 1 at every position of an input of "
        "rank >= 3. The backward reads the output, not the input: dx = y (dy - sum(dy y)) "
        "over the same axis.",
    samples=[Sample({}, [(3, 5)]), Sample({"mode": "channel"}, [(2, 3, 4)]),
             Sample({"mode": "channel"}, [(2, 4, 2, 3)]), Sample({}, [(2, 3, 4)])]))

# dx = y (dy - sum over the axis of dy y); reads dy and y, dx may overwrite
# dy (MXNet's FInplaceOption) -- a reduction reads all of dy first: opaque
register_backward(
    _sa, reads_ograds=(0,), reads_inputs=(), reads_outputs=(0,),
    lower=lambda p, ctx, og, ins, outs: [outs[0] * (og[0] - (og[0] * outs[0]).sum(
        axis=_sa_axis(p), keepdims=True))],
    infer_shape=lambda p, s: (s, [s[1]]), inplace=[(0, 0)], category="opaque",
    flops=lambda p, ins, outs: 4 * numel(outs[0]))


# --------------------------------------------------------------------------
# smooth_l1: 0.5 (sigma x)^2 where |x| < 1/sigma^2, else |x| - 0.5/sigma^2
# --------------------------------------------------------------------------
def _sigma2(p):
    s2 = p.scalar * p.scalar
    return s2, (1.0 / s2 if s2 else math.inf)


def _smooth_l1(p, ctx, x):
    s2, inv = _sigma2(p)
    return jnp.where(x > inv, x - 0.5 * inv,
                     jnp.where(x < -inv, -x - 0.5 * inv, 0.5 * s2 * x * x)).astype(x.dtype)


def _smooth_l1_grad(p, dy, x):
    s2, inv = _sigma2(p)
    d = jnp.where(x > inv, 1.0, jnp.where(x < -inv, -1.0, s2 * x)).astype(x.dtype)
    return dy * d


_smooth = register(OpDef(
    name="smooth_l1",
    attrs={"scalar": Attr(float_attr, 1.0, "sigma"),
           "is_int": Attr(bool_attr, True, "MXNet's flag of an integer scalar; the scalar "
                          "is read as a number either way")},
    lower=_smooth_l1, infer_shape=_identity_shape, inplace=[(0, 0)], category="elementwise",
    flops=lambda p, ins, outs: 4 * numel(outs[0]), aliases=("_npx_smooth_l1",),
    doc="Smooth L1 (MXNet 1.9.1): 0.5 (sigma x)^2 where |x| < 1/sigma^2, else "
        "|x| - 0.5/sigma^2, sigma = scalar; gradient sigma^2 x inside, sign(x) outside.",
    samples=[Sample({}, [(3, 4)], low=-2, high=2), Sample({"scalar": 2.0}, [(2, 3, 4)]),
             Sample({"scalar": 0.5}, [(5,)], low=-6, high=6)]))

# reads its input (MXNet's ElemwiseGradUseIn); dx may overwrite dy
register_backward(_smooth, reads_ograds=(0,), reads_inputs=(0,),
                  lower=lambda p, ctx, og, ins, outs: [_smooth_l1_grad(p, og[0], ins[0])],
                  infer_shape=lambda p, s: (s, [s[1]]), inplace=[(0, 0)],
                  category="elementwise")


# --------------------------------------------------------------------------
# CTCLoss: per-sample negative log likelihood; forward in log space
# --------------------------------------------------------------------------
def _ctc_args(p):
    return (["data", "label"] + (["data_lengths"] if p.use_data_lengths else [])
            + (["label_lengths"] if p.use_label_lengths else []))


def _ctc_shape(p, s):
    data, label, rest = s[0], s[1], list(s[2:])
    if data is not None and len(data) != 3:
        raise ShapeError(f"CTCLoss needs data of rank 3 (sequence length, batch, alphabet), "
                         f"got {tuple(data)}")
    if label is not None and len(label) != 2:
        raise ShapeError(f"CTCLoss needs a label of rank 2 (batch, label length), got "
                         f"{tuple(label)}")
    n = data[1] if data is not None else (label[0] if label is not None else None)
    if data is not None and label is not None:
        if data[1] != label[0]:
            raise ShapeError(f"the batch of data {tuple(data)} (axis 1) and of label "
                             f"{tuple(label)} (axis 0) differ")
        if label[1] > data[0]:
            raise ShapeError(f"label length {label[1]} exceeds the sequence length "
                             f"{data[0]} of data {tuple(data)}")
    for k, (name, sh) in enumerate(zip(_ctc_args(p)[2:], rest)):
        if sh is not None and (len(sh) != 1 or (n is not None and sh[0] != n)):
            raise ShapeError(f"{name} must be a vector of the batch size ({n}), got "
                             f"{tuple(sh)}")
        if sh is None and n is not None:
            rest[k] = (n,)
    outs = [(n,) if n is not None else None, tuple(data) if data is not None else None]
    return [data, label, *rest], outs


def _ctc_type(p, in_types, num_outputs):
    """The outputs have the data's dtype; labels and lengths keep theirs."""
    dt = in_types[0]
    return [dt] + [t if t is not None else dt for t in in_types[1:]], [dt] * num_outputs


def _lse(a, b):
    return jnp.logaddexp(a, b)


def ctc_nll(p, x, label, data_lengths=None, label_lengths=None):
    """The negative log likelihood (N,) of each sample's labels under the
    softmax over the alphabet of ``x`` (T, N, C): Graves' forward recursion
    over the labels with blanks between and around (S = 2 L + 1 states),
    in log space, one ``lax.scan`` step per frame. Impossible states hold a
    large finite negative instead of -inf, so the gradient has no NaN."""
    t_max, n, c = x.shape
    width = label.shape[1]
    blank = 0 if p.blank_label == "first" else c - 1
    cdt = jnp.promote_types(x.dtype, jnp.float32)
    neg = jnp.asarray(-1e30, cdt)
    lab = label.astype(jnp.int32)
    if label_lengths is None:  # up to the first padding value (0 or -1)
        pad = lab == (0 if p.blank_label == "first" else -1)
        llen = jnp.where(pad.any(axis=1), jnp.argmax(pad, axis=1), width).astype(jnp.int32)
    else:
        llen = jnp.clip(label_lengths.astype(jnp.int32), 0, width)
    tlen = (jnp.full((n,), t_max, jnp.int32) if data_lengths is None
            else jnp.clip(data_lengths.astype(jnp.int32), 0, t_max))
    inside = jnp.arange(width)[None, :] < llen[:, None]
    lab = jnp.where(inside, jnp.clip(lab, 0, c - 1), blank)
    states = 2 * width + 1
    ext = jnp.full((n, states), blank, jnp.int32).at[:, 1::2].set(lab)
    repeats = ((lab[:, 1:] == lab[:, :-1]) & inside[:, 1:]).sum(axis=1)
    feasible = llen + repeats <= tlen
    # s - 2 -> s: not onto a blank, nor between two equal labels
    skip = jnp.zeros((n, states), bool).at[:, 2:].set(
        (ext[:, 2:] != blank) & (ext[:, 2:] != ext[:, :-2]))
    logp = jax.nn.log_softmax(x.astype(cdt), axis=-1)
    emit = jnp.take_along_axis(logp, jnp.broadcast_to(ext[None], (t_max, n, states)), axis=2)
    alpha0 = jnp.where(jnp.arange(states)[None, :] < 2, emit[0], neg)

    def step(alpha, xs):
        e, t = xs
        one = jnp.concatenate([jnp.full((n, 1), neg), alpha[:, :-1]], axis=1)
        two = jnp.concatenate([jnp.full((n, 2), neg), alpha[:, :-2]], axis=1)
        new = _lse(_lse(alpha, one), jnp.where(skip, two, neg)) + e
        return jnp.where((t < tlen)[:, None], new, alpha), None

    alpha, _ = lax.scan(step, alpha0, (emit[1:], jnp.arange(1, t_max)))
    last = jnp.take_along_axis(alpha, (2 * llen)[:, None], axis=1)[:, 0]
    before = jnp.take_along_axis(alpha, jnp.maximum(2 * llen - 1, 0)[:, None], axis=1)[:, 0]
    ll = jnp.where(llen > 0, _lse(last, before), last)
    # no frames: the empty labelling has probability 1, any other 0
    ll = jnp.where(tlen == 0, jnp.where(llen == 0, jnp.zeros((), cdt), neg), ll)
    # probability 0 where the count allowed it (a blank among the labels):
    # the cost is infinite, as warp-ctc's -log(0), with gradient 0
    cost = jnp.where(ll < neg / 10, jnp.asarray(jnp.inf, cdt), -ll)
    return jnp.where(feasible, cost, jnp.zeros((), cdt))


def _ctc_inputs(p, lengths):
    lengths = list(lengths)
    dl = lengths.pop(0) if p.use_data_lengths else None
    ll = lengths.pop(0) if p.use_label_lengths else None
    return dl, ll


def _ctc_lower(p, ctx, x, label, *lengths):
    dl, ll = _ctc_inputs(p, lengths)
    # the cost and its gradient in one pass (warp-ctc's cost_and_grad); a
    # program that never reads the hidden gradient drops it
    cost, vjp = jax.vjp(lambda v: ctc_nll(p, v, label, dl, ll), x)
    (grad,) = vjp(jnp.ones_like(cost))
    return cost.astype(x.dtype), grad.astype(x.dtype)


def _ctc_flops(p, ins, outs):
    t, n, c = ins[0] if ins[0] is not None else (0, 0, 0)
    states = 2 * (ins[1][1] if ins[1] is not None else 0) + 1
    return 3 * (5 * t * n * c + 10 * t * n * states)  # forward and its gradient


_ctc = register(OpDef(
    name="CTCLoss",
    attrs={"use_data_lengths": Attr(bool_attr, False, "read each sample's frames from "
                                    "input data_lengths"),
           "use_label_lengths": Attr(bool_attr, False, "read each sample's label length from "
                                     "input label_lengths, else up to the first padding "
                                     "value (0 with blank_label=first, -1 with last)"),
           "blank_label": Attr(choice_attr("first", "last"), "first",
                               "the blank is class 0 (first) or the last class")},
    arguments=_ctc_args, outputs=("output0", "output1"), visible_outputs=1,
    lower=_ctc_lower, infer_shape=_ctc_shape, infer_type=_ctc_type, family="loss",
    flops=_ctc_flops, aliases=("ctc_loss", "_contrib_CTCLoss", "_contrib_ctc_loss"),
    doc="Connectionist temporal classification loss (MXNet 1.9.1): data (sequence length, "
        "batch, alphabet) of activations (a softmax over the alphabet is taken inside), "
        "label (batch, label length) of class indices; the output (batch,) is each "
        "sample's negative log likelihood. The gradient of the activations is computed "
        "in the forward into a hidden output of the data's shape, as MXNet does; the "
        "backward scales it by the head gradient. A sample whose labels do not fit its "
        "frames (label length + repeated neighbours > frames) costs 0, gradient 0; frames "
        "past data_lengths get gradient 0.",
    samples=[Sample({}, [(6, 2, 4), (2, 3)], ints={1: 4}),
             Sample({"blank_label": "last"}, [(5, 3, 5), (3, 2)], ints={1: 4}),
             # labels 0..2 with the blank last: no blank among them
             Sample({"use_data_lengths": True, "use_label_lengths": True,
                     "blank_label": "last"},
                    [(6, 3, 4), (3, 3), (3,), (3,)], ints={1: 3, 2: 7, 3: 4}),
             Sample({"use_data_lengths": True, "blank_label": "last"},
                    [(5, 2, 3), (2, 2), (2,)], ints={1: 2, 2: 6}),
             Sample({"use_label_lengths": True, "blank_label": "last"},
                    [(4, 2, 3), (2, 2), (2,)], ints={1: 2, 2: 3})]))


def _ctc_backward_shape(p, s):
    need = list(p.need) if p.need else [1]
    return s, [s[1] if i == 0 else None for i, m in enumerate(need) if m]


# reads the head gradient (batch,) and the hidden gradient; d data = the
# hidden gradient times each sample's head gradient (MXNet's
# _backward_ctc_loss); no gradient for labels and lengths
register_backward(
    _ctc, reads_ograds=(0,), reads_inputs=(), reads_outputs=(1,), no_grad=(1, 2, 3),
    lower=lambda p, ctx, og, ins, outs: [og[0].astype(outs[0].dtype)[None, :, None] * outs[0],
                                         None, None, None],
    infer_shape=_ctc_backward_shape, category="opaque",
    flops=lambda p, ins, outs: numel(ins[1]))

