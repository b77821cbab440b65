"""The glue ops of hybridized Gluon exports (MXNet 1.9.1) that make
tensors from shapes or from nothing: ``shape_array`` and ``size_array``
(a tensor's shape as int64), ``ones_like``, and the constants ``_zeros``,
``_ones``, ``_full`` and ``_arange`` (src/operator/tensor/init_op.h,
elemwise_unary_op_basic.cc), plus the constant-attribute helpers the
samplers (sampling.py) and index ops share. glue.py holds the slicing,
broadcasting and selection ops.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import ShapeError
from .elementwise import X
from .glue import _CONST_ATTRS, _const_shape, _dtype_of
from .reduce import optional_float_attr
from .registry import Attr, OpDef, Sample, bool_attr, float_attr, int_attr, register
from .tensor import CAST_DTYPES, _zero_flops


# --------------------------------------------------------------------------
# shape_array, size_array: a tensor's shape as an int64 tensor; ones_like
# --------------------------------------------------------------------------
_INT64 = "int64"


def _int64_array(values):
    # int64 as MXNet; with jax_enable_x64 off JAX stores int32 (as for Cast)
    return jnp.asarray(values, jax.dtypes.canonicalize_dtype(np.int64))


_SHAPE_OF = dict(shape_inputs=(0,), category="opaque", flops=_zero_flops, per_sample=False,
                 infer_type=lambda p, t, n: (t, [_INT64]),
                 gradient=lambda g, node, og: [None])

register(OpDef(
    name="shape_array", lower=lambda p, ctx, x: _int64_array(x.shape),
    infer_shape=lambda p, s: (s, [None if s[0] is None else (len(s[0]),)]),
    samples=[Sample({}, [(2, 3, 4)], grad=False), Sample({}, [(5,)], grad=False)],
    doc="The input's shape as a 1-D int64 tensor; reads the shape only, no gradient.",
    **_SHAPE_OF))

register(OpDef(
    name="size_array", lower=lambda p, ctx, x: _int64_array([x.size]),
    infer_shape=lambda p, s: (s, [(1,)]),
    samples=[Sample({}, [(2, 3, 4)], grad=False)],
    doc="The input's number of elements as an int64 tensor of shape (1,); reads the shape "
        "only, no gradient.", **_SHAPE_OF))

# y = ones with x's shape; reads x's shape only; no gradient (MXNet's zero gradient)
register(OpDef(name="ones_like", lower=lambda p, ctx, x: jnp.ones_like(x),
               shape_inputs=(0,), infer_shape=lambda p, s: (s, [s[0]]),
               category="elementwise", samples=X, gradient=lambda g, node, og: [None],
               doc="Ones with the input's shape and dtype; reads the shape only."))


# --------------------------------------------------------------------------
# constants: _zeros, _ones, _full, _arange (ops without inputs)
# --------------------------------------------------------------------------
def _const_lower(value):
    def lower(p, ctx):
        shape = tuple(p.shape)
        if 0 in shape:
            shape = ctx.out_shape(0)
            if shape is None or any(d != k for d, k in zip(shape, p.shape) if k):
                raise ShapeError(f"shape={tuple(p.shape)}: no consumer gives the dimensions "
                                 f"given as 0")
        return jnp.full(shape, value(p), p.dtype)
    return lower


def _constant(name, value, doc, attrs=None, samples=None):
    register(OpDef(
        name=name, arguments=(), attrs={**_CONST_ATTRS, **(attrs or {})},
        lower=_const_lower(value),
        infer_shape=_const_shape, infer_type=lambda p, t, n: (t, [p.dtype]),
        category="injective", flops=_zero_flops, family="other", per_sample=False,
        gradient=lambda g, node, og: [],
        samples=samples or [Sample({"shape": (2, 3)}, [], grad=False),
                            Sample({"shape": (4,), "dtype": "int32"}, [], grad=False),
                            Sample({"shape": (2, 1, 3), "dtype": "float64"}, [], grad=False)],
        doc=doc))


_constant("_zeros", lambda p: 0, "Zeros of shape and dtype (no inputs).")
_constant("_ones", lambda p: 1, "Ones of shape and dtype (no inputs).")
_constant("_full", lambda p: p.value, "shape and dtype filled with value (no inputs).",
          attrs={"value": Attr(float_attr, doc="the fill value")},
          samples=[Sample({"shape": (2, 3), "value": 2.5}, [], grad=False),
                   Sample({"shape": (3,), "value": -1.5, "dtype": "int32"}, [], grad=False),
                   Sample({"shape": (2, 2), "value": 0.25, "dtype": "float64"}, [],
                          grad=False)])


def _infer_range_attr(v) -> bool:
    if bool_attr(v):
        raise ValueError("infer_range=True (stop inferred from the output size its consumers "
                         "give) is not supported; give stop")
    return False


_infer_range_attr.choices = ("False",)


def arange_range(p) -> tuple:
    """(start, step, length) by MXNet's RangeShape: stop None counts from 0
    to start; the length is ceil((stop - start) / step) * repeat."""
    start, stop = (0.0, p.start) if p.stop is None else (p.start, p.stop)
    if p.step == 0:
        raise ShapeError("step=0: arange needs a nonzero step")
    if p.repeat < 1:
        raise ShapeError(f"repeat={p.repeat}: arange repeats each value at least once")
    if (p.step > 0 and not start < stop) or (p.step < 0 and not start > stop):
        raise ShapeError(f"arange from {start} to {stop} by step {p.step} is empty")
    return start, p.step, int(math.ceil((stop - start) / p.step)) * p.repeat


def _arange_lower(p, ctx):
    start, step, n = arange_range(p)
    dt = jnp.dtype(p.dtype)
    # MXNet: start + (i / repeat) * step, start and step cast to the dtype first
    s0, s1 = (np.asarray(v).astype(dt) for v in (start, step))
    i = (jnp.arange(n) // p.repeat).astype(dt)
    return (s0 + i * s1).astype(dt)


register(OpDef(
    name="_arange", arguments=(),
    attrs={"start": Attr(float_attr, doc="the first value (the end when stop is None)"),
           "stop": Attr(optional_float_attr, None, "the end, excluded; None: start is the "
                                                    "end and 0 the start"),
           "step": Attr(float_attr, 1.0, "the spacing"),
           "repeat": Attr(int_attr, 1, "how many times each value repeats"),
           "infer_range": Attr(_infer_range_attr, False, "False only"),
           "ctx": _CONST_ATTRS["ctx"],
           "dtype": Attr(_dtype_of(tuple(t for t in CAST_DTYPES if t != "bool")), "float32",
                         "the output dtype")},
    lower=_arange_lower,
    infer_shape=lambda p, s: (s, [(arange_range(p)[2],)]),
    infer_type=lambda p, t, n: (t, [p.dtype]),
    category="injective", flops=_zero_flops, family="other", per_sample=False,
    gradient=lambda g, node, og: [],
    samples=[Sample({"start": 5}, [], grad=False),
             Sample({"start": 1, "stop": 3, "step": 0.5, "repeat": 2}, [], grad=False),
             Sample({"start": 4, "stop": -2, "step": -1.5, "dtype": "float64"}, [],
                    grad=False),
             Sample({"start": 0, "stop": 7, "step": 2, "dtype": "int32"}, [], grad=False)],
    doc="Evenly spaced values in [start, stop) by step, each repeated repeat times "
        "(MXNet's arange; no inputs). infer_range=True is refused."))
