"""Backward ops generated from a forward op.

Most gradient rules create one ``_backward_<op>`` node whose inputs are
exactly the tensors the backward reads: some output gradients, some
forward inputs, some forward outputs. That is what the memory planner
sees, so choosing ``reads_inputs``/``reads_outputs`` well is a memory
decision (ReLU's backward reads its output, not its input, so the input
may be overwritten in place).

The backward node computes only the argument gradients the gradient pass
asks for (attribute ``need``, a 0/1 mask over the forward's arguments).
"""
from __future__ import annotations

from typing import Callable, Sequence

import jax
import jax.numpy as jnp

from .registry import Attr, OpDef, register, shape_attr


def never(g):
    """A boolean scalar read from float tensor ``g``'s first element that is
    always False (``g[0] * 0`` is 0, -0 or NaN, never above 0) and that XLA
    cannot fold: a value selected on it is made when ``g`` exists, not
    earlier, and passes bit for bit whatever ``g`` holds. The backward ties
    of ``lower.tie_to_first`` and the RNN backward use it."""
    return jnp.ravel(g)[0] * 0 > 0


def _as_tuple(out):
    if isinstance(out, (tuple, list)):
        return tuple(out)
    return (out,)


def _reads(spec, default):
    """A reads spec (indices, a function of the params, or None for
    ``default(p)``) as a function of the params."""
    if spec is None:
        return default
    if callable(spec):
        return lambda p: list(spec(p))
    return lambda p: list(spec)


def register_backward(fwd: OpDef, *, reads_inputs=None, reads_outputs=(),
                      reads_ograds=None, no_grad: Sequence[int] = (),
                      lower: Callable | None = None,
                      infer_shape: Callable | None = None,
                      infer_type: Callable | None = None,
                      inplace: Callable | Sequence = (),
                      category: str | None = None, flops: Callable | None = None,
                      inputs_for_shape_only: bool | Sequence[int] | Callable = False) -> OpDef:
    """Registers ``_backward_<fwd>`` and sets ``fwd.gradient`` to build it.

    The backward node's inputs are, in order, the gradients of forward
    outputs ``reads_ograds``, forward inputs ``reads_inputs`` and forward
    outputs ``reads_outputs``: each indices or a function of the parsed
    attributes (what a backward reads may depend on them: max pooling reads
    its input, avg pooling need not). ``reads_inputs=None`` means every
    argument; ``reads_ograds=None`` the gradient of every visible output.
    ``no_grad``: argument indices that never get a gradient (labels,
    indices, shape-only inputs). ``lower(p, ctx, ograds, ins, outs)``
    returns one gradient per forward argument (None for ones not needed).
    Without ``lower`` the gradient is ``jax.vjp`` of the forward lowering,
    which needs every argument read and no aux state.
    ``inputs_for_shape_only`` says the forward inputs it reads are read only
    for their shapes/dtypes (so they need not stay alive for it): True for
    all of them, or the forward input indices that are (``take`` reads its
    indices' values but only its data's shape), or a function of the parsed
    attributes giving either (MakeLoss reads its data's values only for
    normalization='valid').
    The backward op has ``fwd``'s family and
    ``forward=fwd``; ``flops`` and ``category`` default to the category's
    rule and ``fwd``'s category.
    """
    name = "_backward_" + fwd.name
    ri = _reads(reads_inputs, lambda p: list(range(len(fwd.arg_names(p)))))
    rg = _reads(reads_ograds, lambda p: list(range(fwd.num_visible_outputs(p))))
    ro = _reads(reads_outputs, None)
    no_grad = frozenset(no_grad)

    def need(p):
        n = len(fwd.arg_names(p))
        return list(p.need) if p.need else [0 if i in no_grad else 1 for i in range(n)]

    def arguments(p):
        fa, fo = fwd.arg_names(p), fwd.output_names(p)
        return ([f"ograd_{fo[i]}" for i in rg(p)] + [f"in_{fa[i]}" for i in ri(p)]
                + [f"out_{fo[i]}" for i in ro(p)])

    def outputs(p):
        fa = fwd.arg_names(p)
        return [f"grad_{fa[i]}" for i, m in enumerate(need(p)) if m]

    if lower is None:
        def lower(p, ctx, ograds, ins, outs):
            nv = fwd.num_visible_outputs(p)
            sel = rg(p)

            def f(*xs):
                res = _as_tuple(fwd.lower(p, ctx, *xs))[:nv]
                return tuple(res[i] for i in sel)

            primals, vjp = jax.vjp(f, *ins)
            cot = tuple(jnp.zeros_like(x) if g is None else g.astype(x.dtype)
                        for g, x in zip(ograds, primals))
            return vjp(cot)

    def node_lowering(rule):
        def lower_node(p, ctx, *xs):
            n_og, n_in = len(rg(p)), len(ri(p))
            grads = rule(p, ctx, xs[:n_og], xs[n_og:n_og + n_in], xs[n_og + n_in:])
            return tuple(g for g, m in zip(grads, need(p)) if m)
        return lower_node

    if infer_shape is None:
        def infer_shape(p, in_shapes):
            n_og = len(rg(p))
            read = dict(zip(ri(p), in_shapes[n_og:n_og + len(ri(p))]))
            return in_shapes, [read.get(i) for i, m in enumerate(need(p)) if m]

    def infer_shape_node(p, in_shapes):
        return infer_shape(p, in_shapes)

    def shape_inputs(p):
        n_og, read = len(rg(p)), ri(p)
        only = inputs_for_shape_only(p) if callable(inputs_for_shape_only) else \
            inputs_for_shape_only
        if only is True:
            return list(range(n_og, n_og + len(read)))
        return [n_og + k for k, i in enumerate(read) if i in set(only or ())]

    attrs = dict(fwd.attrs)
    attrs["need"] = Attr(shape_attr, (), "0/1 mask: which argument gradients to compute")
    bwd = register(OpDef(
        name=name, lower=node_lowering(lower), infer_shape=infer_shape_node, attrs=attrs,
        arguments=arguments, outputs=outputs, inplace=inplace, infer_type=infer_type,
        shape_inputs=shape_inputs,
        category=category or fwd.category, flops=flops, family=fwd.family, forward=fwd,
        backward_io=lambda p: (rg(p), ri(p), ro(p), [i for i, m in enumerate(need(p)) if m]),
        doc=f"Gradient of {fwd.name}; inputs are exactly what it reads."))

    def gradient(g, node, ograds):
        p = node.params
        want = [1 if x and i not in no_grad else 0 for i, x in enumerate(g.need)]
        if not any(want):
            return [None] * len(want)
        ins = [g.ograd_or_zeros(node, ograds, i) for i in rg(p)]
        ins += [node.inputs[i] for i in ri(p)]
        ins += [g.output(node, i) for i in ro(p)]
        attrs = {k: v for k, v in node.attrs.items() if not k.startswith("__")}
        attrs["need"] = tuple(want)
        outs = g.op(name, ins, attrs, suffix="backward")
        it = iter(outs)
        return [next(it) if m else None for m in want]

    fwd.gradient = gradient
    return bwd
