"""Loss heads. Like MXNet's, they start the backward by themselves: the
forward output is the prediction, and the gradient of the data is the loss
gradient, whatever head gradient would arrive."""
from __future__ import annotations

import copy

import jax
import jax.numpy as jnp

from ..errors import ShapeError
from ..graph import Entry, Node
from .backward import register_backward
from .registry import Attr, OpDef, Sample, bool_attr, choice_attr, float_attr, get_op, numel, \
    register


def _softmax_output_shape(p, s):
    data, label = s
    if data is None:
        return s, [None]
    if p.multi_output:
        if len(data) < 2:
            raise ShapeError(f"multi_output needs data of rank >= 2 (batch, classes, "
                             f"positions...), got {tuple(data)}")
        want = (data[0],) + tuple(data[2:])
        # MXNet also takes the positions flattened, (n, d2*d3...), and (n, 1, d2, ...)
        fits = (want, (data[0], numel(data[2:])), (data[0], 1) + tuple(data[2:]))
    else:
        want = tuple(data[:-1])
        fits = (want,)
    if label is not None and tuple(label) not in fits and tuple(label) != tuple(data):
        raise ShapeError(f"label shape {tuple(label)} does not fit data {tuple(data)}; "
                         f"expected {want}")
    return [data, label if label is not None else want], [data]


def _matrix(p, shape) -> tuple:
    """The (rows, classes) matrix MXNet's kernel sees without multi_output:
    data flattened to (n, everything else), or with preserve_shape to
    (everything else, last axis). For 2-D data both are the data itself."""
    if p.preserve_shape:
        return (numel(shape[:-1]), shape[-1])
    return (shape[0], numel(shape[1:]))


def _softmax_output_lower(p, ctx, x, label):
    if p.multi_output:  # one softmax over axis 1 per sample and position
        return jax.nn.softmax(x, axis=1)
    # MXNet's softmax runs over all non-batch elements of (n, c, h ...) data
    return jax.nn.softmax(x.reshape(_matrix(p, x.shape)), axis=-1).reshape(x.shape)


def _out_grad_attr(v):
    if bool_attr(v):
        raise ValueError("out_grad=True (scale the gradient by a head gradient) is not "
                         "supported: symgraph's loss heads start the backward by themselves "
                         "and take no head gradient; use grad_scale, or a non-loss head such "
                         "as softmax with your own loss")
    return False


_out_grad_attr.choices = ("False",)  # what the op reference lists

SOFTMAX_OUTPUT_ATTRS = {
    "grad_scale": Attr(float_attr, 1.0), "ignore_label": Attr(float_attr, -1.0),
    "multi_output": Attr(bool_attr, False, "softmax over axis 1; labels (n, d1, ...)"),
    "use_ignore": Attr(bool_attr, False),
    "preserve_shape": Attr(bool_attr, False, "softmax over the last axis instead of over "
                           "all non-batch elements"),
    "normalization": Attr(choice_attr("null", "batch", "valid"), "null"),
    "out_grad": Attr(_out_grad_attr, False, "only False: loss heads take no head gradient"),
    "smooth_alpha": Attr(float_attr, 0.0, "label smoothing: the target class gets "
                         "1 - alpha, the others alpha / (classes - 1)"),
}


def _target(p, lab, k, dtype, axis):
    """One-hot labels, smoothed by smooth_alpha as MXNet's SmoothSoftmaxGrad."""
    target = jax.nn.one_hot(lab.astype(jnp.int32), k, dtype=dtype, axis=axis)
    if p.smooth_alpha:
        target = target * (1 - p.smooth_alpha) + (1 - target) * p.smooth_alpha / (k - 1)
    return target


def _grad_as_output_type(p, in_types, num_outputs):
    """The gradient has the dtype of the output it reads (the inputs are
    the label, then the output: the label may be an integer array)."""
    return list(in_types), [in_types[1]] * num_outputs


def _softmax_output_backward_flops(p, in_shapes, out_shapes):
    return 3 * numel(out_shapes[0])  # subtract the target, mask, scale


# y = softmax(x); dx = (y - onehot(label)) * grad_scale / norm; no label
# gradient. MXNet's kernel (softmax_output-inl.h), case by case:
# - labels of the output's shape (probabilities): (y - label) * grad_scale,
#   never normalized, nothing ignored;
# - multi_output: one softmax over axis 1 at each of the P positions
#   (P = the product of axes 2...), labels viewed as (n, P); with use_ignore
#   the positions labelled ignore_label get 0; no label smoothing (the
#   multi_output kernel has none); scaled by grad_scale / P ('null'),
#   grad_scale / (P n) ('batch') or grad_scale / valid ('valid': the count
#   of labels whose integer is not ignore_label's, with or without
#   use_ignore, at least 1);
# - otherwise rows of the (rows, classes) matrix take the labels in order
#   from the flattened label; 'batch' divides by the label's size, 'valid'
#   by its count of labels other than ignore_label (at least 1).
# ``total`` turns this device's 'valid' count into the count to divide by:
# itself on one device, its sum over the devices in data parallel (below)
def _softmax_output_backward(p, ctx, y, label, total=lambda count: count):
    if label.shape == y.shape:  # dense (probability) labels
        return (y - label.astype(y.dtype)) * jnp.asarray(p.grad_scale, y.dtype)
    ignore = int(p.ignore_label)
    if p.multi_output:
        n, k = y.shape[0], y.shape[1]
        positions = numel(y.shape[2:])
        lab = label.reshape(n, positions).astype(jnp.int32)
        grad = y.reshape(n, k, positions) - jax.nn.one_hot(lab, k, dtype=y.dtype, axis=1)
        if p.use_ignore:
            grad = grad * (lab != ignore).astype(y.dtype)[:, None, :]
        if p.normalization == "valid":
            n_valid = total((lab != ignore).sum())
            scale = p.grad_scale / jnp.maximum(n_valid, 1).astype(y.dtype)
        elif p.normalization == "batch":
            scale = jnp.asarray(p.grad_scale / positions / n, y.dtype)
        else:
            scale = jnp.asarray(p.grad_scale / positions, y.dtype)
        return (grad * scale).reshape(y.shape)
    # rows of the (rows, classes) matrix take the labels in order from the
    # flattened label; the normalizations count the whole label (for 2-D
    # data the two are the same)
    rows, k = _matrix(p, y.shape)
    flat = label.reshape(-1)
    lab = flat[:rows]
    keep = (lab.astype(jnp.int32) != ignore).astype(y.dtype) \
        if p.use_ignore else jnp.ones((rows,), y.dtype)
    grad = (y.reshape(rows, k) - _target(p, lab, k, y.dtype, -1)) * keep[:, None]
    grad = grad.reshape(y.shape)
    if p.normalization == "batch":
        return grad * (p.grad_scale / flat.size)
    if p.normalization == "valid":
        n_valid = total((flat.astype(jnp.int32) != ignore).sum())
        return grad * (p.grad_scale / jnp.maximum(n_valid, 1).astype(y.dtype))
    return grad * p.grad_scale


_softmax_output = register(OpDef(
    name="SoftmaxOutput", attrs=SOFTMAX_OUTPUT_ATTRS, arguments=("data", "label"),
    lower=_softmax_output_lower, infer_shape=_softmax_output_shape, is_loss=True,
    flops=lambda p, ins, outs: 5 * numel(ins[0]),  # a softmax; the loss is not computed
    aliases=("Softmax",),
    doc="Softmax with a cross-entropy gradient from label, as MXNet's: over all non-batch "
        "elements (data flattened to (n, rest)), over axis 1 with multi_output, over the "
        "last axis with preserve_shape. Labels are class indices (or probabilities of "
        "data's shape); smooth_alpha smooths them. The gradient is MXNet 1.9.1's: "
        "with multi_output it is divided by the positions (the product of axes 2...) "
        "unless normalization='valid', and smooth_alpha is not applied; probability "
        "labels are never normalized. A loss head: it takes no head gradient, so "
        "out_grad=True is refused.",
    samples=[Sample({}, [(4, 5), (4,)], ints={1: 5}),
             Sample({"grad_scale": 0.5, "normalization": "batch"}, [(4, 5), (4,)], ints={1: 5}),
             Sample({"multi_output": True}, [(2, 3, 4), (2, 4)], ints={1: 3}),
             Sample({"multi_output": True, "normalization": "batch", "grad_scale": 2.0},
                    [(2, 4, 3, 5), (2, 3, 5)], ints={1: 4}),
             Sample({"multi_output": True, "normalization": "valid", "use_ignore": True,
                     "ignore_label": 2}, [(3, 4, 6), (3, 6)], ints={1: 4}),
             Sample({"multi_output": True, "use_ignore": True, "ignore_label": 0},
                    [(2, 3, 2, 2), (2, 4)], ints={1: 3}),
             Sample({"use_ignore": True, "ignore_label": 1, "normalization": "valid"},
                    [(6, 3), (6,)], ints={1: 3}),
             Sample({"smooth_alpha": 0.2}, [(4, 5), (4,)], ints={1: 5}),
             Sample({"smooth_alpha": 0.1, "use_ignore": True, "ignore_label": 0,
                     "normalization": "valid"}, [(6, 4), (6,)], ints={1: 4}),
             # >2-D data: one softmax over all 12 non-batch elements (MXNet's
             # flattening); labels (2, 3), of which the first 2 are classes
             Sample({"normalization": "batch"}, [(2, 3, 4), (2, 3)], ints={1: 12}),
             Sample({"preserve_shape": True}, [(2, 3, 4), (2, 3)], ints={1: 4})]))


# reads its output and the label; the head gradient is not used
register_backward(
    _softmax_output, reads_ograds=(), reads_inputs=(1,), reads_outputs=(0,), no_grad=(1,),
    lower=lambda p, ctx, og, ins, outs: [_softmax_output_backward(p, ctx, outs[0], ins[0]),
                                         None],
    infer_shape=lambda p, s: (s, [s[1]]), infer_type=_grad_as_output_type, inplace=[(1, 0)],
    category="elementwise", flops=_softmax_output_backward_flops)


def softmax_output_over_devices(axis_name: str) -> OpDef:
    """SoftmaxOutput for a program run on each device's share of a batch
    (inside ``shard_map`` over ``axis_name``): 'valid' normalization divides
    by the valid count summed over the devices, so the gradients summed over
    the devices are those of the whole batch on one device ('null' and
    'batch' are unchanged: 'batch' is rescaled by the caller). Not
    registered; ``train.step`` puts it in place of SoftmaxOutput."""
    bwd = copy.copy(get_op("_backward_SoftmaxOutput"))
    # the registered backward's inputs: the label, then the output
    bwd.lower = lambda p, ctx, label, y: (_softmax_output_backward(
        p, ctx, y, label, total=lambda count: jax.lax.psum(count, axis_name)),)

    def gradient(g, node, og):
        name = g.unique(f"{node.name}_backward")
        attrs = {k: v for k, v in node.attrs.items() if not k.startswith("__")}
        out = Node(bwd, name, {**attrs, "need": (1, 0)}, [node.inputs[1], g.output(node, 0)])
        return [Entry(out, 0), None]

    op = copy.copy(_softmax_output)
    op.gradient = gradient
    return op


# y = x; dx = (y - label) * grad_scale / (number of outputs per sample)
def _linreg_shape(p, s):
    data, label = s
    if data is not None and label is not None and tuple(label) != tuple(data):
        if numel(label) != numel(data):
            raise ShapeError(f"label shape {tuple(label)} does not fit data {tuple(data)}")
    return [data, label if label is not None else data], [data]


_linreg = register(OpDef(
    name="LinearRegressionOutput", attrs={"grad_scale": Attr(float_attr, 1.0)},
    arguments=("data", "label"), lower=lambda p, ctx, x, label: x,
    infer_shape=_linreg_shape, is_loss=True, inplace=[(0, 0)], category="injective",
    samples=[Sample({}, [(4, 3), (4, 3)]), Sample({"grad_scale": 2.0}, [(4, 1), (4, 1)])]))


def _linreg_backward(p, ctx, y, label):
    per_sample = max(1, y.size // y.shape[0])
    return (y - label.reshape(y.shape)) * (p.grad_scale / per_sample)


register_backward(
    _linreg, reads_ograds=(), reads_inputs=(1,), reads_outputs=(0,), no_grad=(1,),
    lower=lambda p, ctx, og, ins, outs: [_linreg_backward(p, ctx, outs[0], ins[0]), None],
    infer_shape=lambda p, s: (s, [s[1]]), infer_type=_grad_as_output_type, inplace=[(1, 0)],
    category="elementwise")
