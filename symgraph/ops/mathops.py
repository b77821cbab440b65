"""Elementwise math, comparison and logic as MXNet 1.9.1 computes them:
rounding (``floor``, ``ceil``, ``round``, ``rint``, ``trunc``), ``sign``,
powers (``reciprocal``, ``rsqrt``), ``erf``, trigonometry and its
inverses, hyperbolic functions, logarithms and exponentials
(``log2``, ``log10``, ``log1p``, ``expm1``), ``hard_sigmoid``,
``softsign``, ``logical_not``, the comparisons with a scalar
(``_greater_scalar`` ...) and the broadcast comparisons and logic
(``broadcast_greater`` ..., ``broadcast_logical_and`` ...).

Semantics follow MXNet's kernels (src/operator/mshadow_op.h,
tensor/elemwise_unary_op_*.cc, elemwise_binary_scalar_op_logic.cc,
elemwise_binary_broadcast_op_logic.cc): ``round`` rounds half away from
zero (C's round), ``rint`` rounds a half *down* (MXNet's own rint:
``x - floor(x) <= ceil(x) - x ? floor : ceil``, so rint(1.5) = 1 and
rint(-1.5) = -2), comparisons and logic give 0/1 in the input's dtype.
Rounding, sign, comparisons and logic have a zero gradient, as MXNet's
(``MakeZeroGradNodes``; ``_backward_sign`` is zero too); the others have
MXNet's backward and read what it reads: the input (``ElemwiseGradUseIn``)
or, for ``tan``, the output.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from ..dtypes import np_dtype
from .elementwise import (BCAST, INPLACE_FIRST, POS, X, _binary, _broadcast,
                          elementwise_flops, same_shape)
from .elementwise import _unary as _elementwise_unary
from .registry import Attr, OpDef, Sample, bool_attr, float_attr, register

WIDE = [Sample({}, [(3, 4)], low=-3.0, high=3.0), Sample({}, [(2, 3, 2)], low=-3.0, high=3.0)]
UNIT = [Sample({}, [(3, 4)], low=-0.9, high=0.9)]  # inside (-1, 1): arcsin, arccos


def _keep_dtype(fn):
    """fn(x) in x's dtype (MXNet computes in the input's type: sin of an
    int32 tensor is an int32 tensor)."""
    return lambda p, x: fn(x).astype(x.dtype)


def _zero_gradient(g, node, og):
    return [None] * node.num_args


def _no_grad_unary(name, fn, doc, samples=WIDE):
    """A unary elementwise op with MXNet's zero gradient."""
    return register(OpDef(
        name=name, lower=lambda p, ctx, x: _keep_dtype(fn)(p, x), infer_shape=same_shape,
        inplace=INPLACE_FIRST, category="elementwise", flops=elementwise_flops,
        gradient=_zero_gradient, samples=samples, doc=doc + " Zero gradient (as MXNet)."))


def _unary(name, fn, *, reads, dfn, samples=X, doc=""):
    """``elementwise._unary`` computing in the input's dtype (``_keep_dtype``),
    with the op's attributes from ``_UNARY_ATTRS``."""
    return _elementwise_unary(name, lambda p, x: fn(p, x).astype(x.dtype), reads=reads,
                              dfn=dfn, samples=samples, doc=doc,
                              attrs=_UNARY_ATTRS.get(name, {}))


# --------------------------------------------------------------------------
# rounding: zero gradient
# --------------------------------------------------------------------------
def _round_half_away(x):
    """C's round: halves away from zero (jnp.round rounds them to even)."""
    t = jnp.trunc(x)
    return jnp.where(jnp.abs(x - t) >= 0.5, t + jnp.sign(x), t)


def _rint_mxnet(x):
    """MXNet's rint: the floor unless the ceiling is strictly nearer."""
    lo, hi = jnp.floor(x), jnp.ceil(x)
    return jnp.where(x - lo <= hi - x, lo, hi)


def _integral(fn):
    """fn for floating inputs; integers are already integral."""
    return lambda x: fn(x) if jnp.issubdtype(x.dtype, jnp.floating) else x


HALVES = [Sample({}, [(3, 4)], low=-3.0, high=3.0),
          Sample({}, [(2, 5)], low=-2.0, high=2.0, ints={0: 4})]  # integral floats

_no_grad_unary("floor", _integral(jnp.floor), "The largest integer <= x.", HALVES)
_no_grad_unary("ceil", _integral(jnp.ceil), "The smallest integer >= x.", HALVES)
_no_grad_unary("trunc", _integral(jnp.trunc), "x rounded toward zero.", HALVES)
_no_grad_unary("round", _integral(_round_half_away),
               "x rounded to the nearest integer, halves away from zero (C's round: "
               "round(-2.5) = -3).", HALVES)
_no_grad_unary("rint", _integral(_rint_mxnet),
               "x rounded to the nearest integer, halves toward -inf, as MXNet's rint "
               "(rint(1.5) = 1, rint(-1.5) = -2; NumPy's rounds them to even).", HALVES)
_no_grad_unary("sign", jnp.sign, "-1, 0 or 1 by the sign of x (MXNet's _backward_sign is "
                                 "zero).")
_no_grad_unary("logical_not", lambda x: (x == 0), "1 where x is 0, else 0, in x's dtype.",
               [Sample({}, [(3, 4)]), Sample({}, [(2, 5)], ints={0: 3})])


# --------------------------------------------------------------------------
# unary math with a gradient (math in each comment)
# --------------------------------------------------------------------------
_UNARY_ATTRS = {"hard_sigmoid": {"alpha": Attr(float_attr, 0.2, "slope"),
                                 "beta": Attr(float_attr, 0.5, "offset")}}

# y = 1 / x; dx = -dy / x^2
_unary("reciprocal", lambda p, x: 1 / x, reads="input", dfn=lambda p, dy, x: -dy / (x * x),
       samples=POS + [Sample({}, [(2, 3)], low=-2.0, high=-0.5)], doc="1 / x.")
# y = x^-1/2; dx = -dy / (2 x sqrt(x))
_unary("rsqrt", lambda p, x: 1 / jnp.sqrt(x), reads="input",
       dfn=lambda p, dy, x: dy * -0.5 / (jnp.sqrt(x) * x), samples=POS, doc="1 / sqrt(x).")
# y = erf(x); dx = dy 2/sqrt(pi) exp(-x^2)
_unary("erf", lambda p, x: jax.scipy.special.erf(x), reads="input",
       dfn=lambda p, dy, x: dy * (2 / math.sqrt(math.pi)) * jnp.exp(-(x * x)), samples=WIDE,
       doc="The Gauss error function.")
# y = sin(x); dx = dy cos(x)
_unary("sin", lambda p, x: jnp.sin(x), reads="input", dfn=lambda p, dy, x: dy * jnp.cos(x),
       samples=WIDE, doc="Sine (radians).")
# y = cos(x); dx = -dy sin(x)
_unary("cos", lambda p, x: jnp.cos(x), reads="input", dfn=lambda p, dy, x: -dy * jnp.sin(x),
       samples=WIDE, doc="Cosine (radians).")
# y = tan(x); dx = dy (1 + y^2)  -- reads only y (MXNet's ElemwiseGradUseOut)
_unary("tan", lambda p, x: jnp.tan(x), reads="output", dfn=lambda p, dy, y: dy * (y * y + 1),
       doc="Tangent (radians).")
# y = arcsin(x); dx = dy / sqrt(1 - x^2)
_unary("arcsin", lambda p, x: jnp.arcsin(x), reads="input",
       dfn=lambda p, dy, x: dy / jnp.sqrt(1 - x * x), samples=UNIT,
       doc="Inverse sine, in [-pi/2, pi/2]; NaN outside [-1, 1].")
# y = arccos(x); dx = -dy / sqrt(1 - x^2)
_unary("arccos", lambda p, x: jnp.arccos(x), reads="input",
       dfn=lambda p, dy, x: -dy / jnp.sqrt(1 - x * x), samples=UNIT,
       doc="Inverse cosine, in [0, pi]; NaN outside [-1, 1].")
# y = arctan(x); dx = dy / (1 + x^2)
_unary("arctan", lambda p, x: jnp.arctan(x), reads="input",
       dfn=lambda p, dy, x: dy / (x * x + 1), samples=WIDE, doc="Inverse tangent.")
# y = sinh(x); dx = dy cosh(x)
_unary("sinh", lambda p, x: jnp.sinh(x), reads="input", dfn=lambda p, dy, x: dy * jnp.cosh(x),
       samples=WIDE, doc="Hyperbolic sine.")
# y = cosh(x); dx = dy sinh(x)
_unary("cosh", lambda p, x: jnp.cosh(x), reads="input", dfn=lambda p, dy, x: dy * jnp.sinh(x),
       samples=WIDE, doc="Hyperbolic cosine.")
# y = log2(x); dx = dy / (x ln 2)
_unary("log2", lambda p, x: jnp.log2(x), reads="input",
       dfn=lambda p, dy, x: dy * (1 / math.log(2)) / x, samples=POS, doc="Base-2 logarithm.")
# y = log10(x); dx = dy / (x ln 10)
_unary("log10", lambda p, x: jnp.log10(x), reads="input",
       dfn=lambda p, dy, x: dy * (1 / math.log(10)) / x, samples=POS,
       doc="Base-10 logarithm.")
# y = log(1 + x); dx = dy / (1 + x)
_unary("log1p", lambda p, x: jnp.log1p(x), reads="input", dfn=lambda p, dy, x: dy / (x + 1),
       samples=[Sample({}, [(3, 4)], low=-0.9, high=2.0)],
       doc="log(1 + x), accurate for small x.")
# y = e^x - 1; dx = dy e^x  (MXNet's _backward_expm1 reads x)
_unary("expm1", lambda p, x: jnp.expm1(x), reads="input", dfn=lambda p, dy, x: dy * jnp.exp(x),
       samples=WIDE, doc="exp(x) - 1, accurate for small x.")
# y = x / (1 + |x|); dx = dy / (1 + |x|)^2
_unary("softsign", lambda p, x: x / (1 + jnp.abs(x)), reads="input",
       dfn=lambda p, dy, x: dy / (1 + jnp.abs(x)) ** 2, samples=WIDE, doc="x / (1 + |x|).")


# y = clip(alpha x + beta, 0, 1); dx = alpha dy where 0 < alpha x + beta < 1.
# alpha and beta are MXNet's real_t: float32, whatever the data's dtype
def _f32(v) -> float:
    return float(np.float32(v))


def _hard_sigmoid_backward(p, dy, x):
    a = _f32(p.alpha)
    z = a * x + _f32(p.beta)
    return jnp.where((z > 0) & (z < 1), dy * a, 0).astype(dy.dtype)


_unary("hard_sigmoid", lambda p, x: jnp.clip(_f32(p.alpha) * x + _f32(p.beta), 0, 1),
       reads="input",
       dfn=_hard_sigmoid_backward,
       samples=[Sample({}, [(3, 4)], low=-4.0, high=4.0),
                Sample({"alpha": 0.5, "beta": 0.25}, [(2, 3, 2)], low=-2.0, high=2.0)],
       doc="max(0, min(1, alpha x + beta)); the gradient is alpha inside (0, 1), else 0.")


# --------------------------------------------------------------------------
# comparisons with a scalar: 0/1 in the output dtype, zero gradient
# --------------------------------------------------------------------------
_INT_KINDS = ("int", "uint")


def scalar_out_type(p, dtype):
    """MXNet's NumpyBinaryScalarType: the input's dtype, except an integer
    input with a non-integer scalar gives float64, and a bool input int64
    (is_int) or float64."""
    if dtype is None:
        return None
    if dtype == "bool":
        return "int64" if p.is_int else "float64"
    if dtype.startswith(_INT_KINDS) and not p.is_int:
        return "float64"
    return dtype


def _scalar_type(p, in_types, n):
    return in_types, [scalar_out_type(p, in_types[0])]


def _scalar_lower(cmp):
    def lower(p, ctx, x):
        out = jax.dtypes.canonicalize_dtype(np_dtype(scalar_out_type(p, x.dtype.name)))
        # MXNet casts the input (bool, or integer with a float scalar) and the
        # scalar to the output dtype (DType(alpha) truncates for integers)
        s = np.asarray(p.scalar).astype(out)
        return cmp(x.astype(out), s).astype(out)
    return lower


SCALAR_ATTRS = {"scalar": Attr(float_attr, 1.0, "the scalar operand"),
                "is_int": Attr(bool_attr, True, "whether the scalar is an integer (MXNet's type "
                                                "rule for integer and bool inputs)")}
_CMP = {"equal": jnp.equal, "not_equal": jnp.not_equal, "greater": jnp.greater,
        "greater_equal": jnp.greater_equal, "lesser": jnp.less, "lesser_equal": jnp.less_equal}
_CMP_TEXT = {"equal": "==", "not_equal": "!=", "greater": ">", "greater_equal": ">=",
             "lesser": "<", "lesser_equal": "<="}
_MXNET_ALIAS = {"equal": "_EqualScalar", "not_equal": "_NotEqualScalar",
                "greater": "_GreaterScalar", "greater_equal": "_GreaterEqualScalar",
                "lesser": "_LesserScalar", "lesser_equal": "_LesserEqualScalar"}

for _name, _cmp in _CMP.items():
    register(OpDef(
        name=f"_{_name}_scalar", attrs=SCALAR_ATTRS, lower=_scalar_lower(_cmp),
        infer_shape=same_shape, infer_type=_scalar_type, inplace=INPLACE_FIRST,
        category="elementwise", flops=elementwise_flops, gradient=_zero_gradient,
        aliases=(_MXNET_ALIAS[_name],),
        samples=[Sample({"scalar": 0.25}, [(3, 4)]),
                 Sample({"scalar": 1}, [(2, 5)], ints={0: 3})],
        doc=f"1 where x {_CMP_TEXT[_name]} scalar, else 0, in the output dtype (the "
            f"input's; an integer input with is_int=False gives float64, a bool input "
            f"int64 or float64, as MXNet). Zero gradient."))


# --------------------------------------------------------------------------
# broadcast comparisons and logic: 0/1 in the inputs' dtype, zero gradient
# --------------------------------------------------------------------------
def _zero_pair(g, node, og):
    return [None, None]


BCAST_INTS = [Sample({}, [(3, 4), (3, 1)], ints={0: 3, 1: 3}),
              Sample({}, [(2, 1, 3), (4, 1)], ints={0: 2, 1: 2})]


def _to(fn):
    return lambda a, b: fn(a, b).astype(a.dtype)


def _truth(x):
    return x != 0


_BCAST_CMP = {**_CMP,
              "logical_and": lambda a, b: _truth(a) & _truth(b),
              "logical_or": lambda a, b: _truth(a) | _truth(b),
              "logical_xor": lambda a, b: _truth(a) != _truth(b)}
_BCAST_TEXT = {**_CMP_TEXT, "logical_and": "and", "logical_or": "or", "logical_xor": "xor"}

for _name, _cmp in _BCAST_CMP.items():
    _word = _BCAST_TEXT[_name]
    _what = (f"lhs {_word} rhs" if not _name.startswith("logical") else
             f"(lhs != 0) {_word} (rhs != 0)")
    _broadcast(f"broadcast_{_name}", _to(_cmp), gradient=_zero_pair,
               samples=BCAST + BCAST_INTS,
               doc=f"1 where {_what}, else 0, in the inputs' dtype, with NumPy "
                   f"broadcasting. Zero gradient.")


# the equal-shape forms (Symbol > Symbol in MXNet's symbol API); MXNet's
# aliases capitalise each word: _Greater_Equal, _Logical_And
SAME = [Sample({}, [(3, 4), (3, 4)]), Sample({}, [(2, 5), (2, 5)], ints={0: 3, 1: 3})]

for _name, _cmp in _BCAST_CMP.items():
    _word = _BCAST_TEXT[_name]
    _what = (f"lhs {_word} rhs" if not _name.startswith("logical") else
             f"(lhs != 0) {_word} (rhs != 0)")
    _binary(f"_{_name}", _to(_cmp), gradient=_zero_pair, samples=SAME,
            aliases=("_" + "_".join(w.capitalize() for w in _name.split("_")),),
            doc=f"1 where {_what}, else 0, in the inputs' dtype; lhs and rhs of one shape "
                f"(broadcast_{_name} broadcasts). Zero gradient.")
