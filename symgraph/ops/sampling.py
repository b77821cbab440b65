"""Random sampling as MXNet 1.9.1's ops (src/operator/random/sample_op.h,
sample_multinomial_op.h): ``_random_uniform``, ``_random_normal`` (no
inputs, like ``_zeros``), ``_random_uniform_like`` (its input's shape and
dtype, which is all it reads) and ``_sample_multinomial``.

Draws use the node's own key (``LowerCtx.rng``, as Dropout): the same key
and node name give the same numbers, in training and inference alike
(MXNet samples in both). The numbers are not MXNet's (another generator);
the distributions are. ``_sample_multinomial`` inverts the CDF as MXNet's
kernel does (the first class whose cumulative probability reaches a
uniform draw), so probabilities that do not sum to 1 bias the last class;
with ``get_prob`` its second output is the log-probability of each draw,
whose gradient MXNet defines (REINFORCE): d data[c] += d prob / data[c] at
each drawn class c.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from ..dtypes import np_dtype
from ..errors import ShapeError
from .backward import register_backward
from .glue import _CONST_ATTRS, _const_shape, _dtype_of
from .registry import Attr, OpDef, Sample, bool_attr, float_attr, numel, register, shape_attr

_FLOAT_OUT = ("float32", "float64", "float16")


def _sample_dtype(v):
    """MXNet's dtype of a sampler: None (float32) or a float type."""
    if v is None or (isinstance(v, str) and v.strip() in ("None", "none", "")):
        return "float32"
    return _dtype_of(_FLOAT_OUT)(v)


_sample_dtype.choices = ("None",) + _FLOAT_OUT


def _canonical(dtype):
    return jax.dtypes.canonicalize_dtype(np_dtype(dtype))


def _sampler(name, draw, check, attrs, doc, samples, aliases):
    def infer(p, s):
        check(p)
        return _const_shape(p, s)

    register(OpDef(
        name=name, arguments=(),
        attrs={**attrs, "shape": _CONST_ATTRS["shape"], "ctx": _CONST_ATTRS["ctx"],
               "dtype": Attr(_sample_dtype, "float32", "the output dtype (None: float32)")},
        lower=lambda p, ctx: draw(p, ctx.rng(), _canonical(p.dtype)),
        infer_shape=infer, infer_type=lambda p, t, n: (t, [p.dtype]),
        needs_rng=True, category="opaque", flops=lambda p, ins, outs: numel(outs[0]),
        family="other", per_sample=False, gradient=lambda g, node, og: [],
        samples=samples, aliases=aliases, doc=doc))


def _check_uniform(p):
    if not p.low < p.high:
        raise ShapeError(f"low={p.low} must be less than high={p.high}")


def _check_normal(p):
    if not p.scale >= 0:
        raise ShapeError(f"scale={p.scale} must be non-negative")


_sampler("_random_uniform",
         lambda p, key, dt: jax.random.uniform(key, p.shape, dt, p.low, p.high),
         _check_uniform,
         {"low": Attr(float_attr, 0.0, "the lower bound (included)"),
          "high": Attr(float_attr, 1.0, "the upper bound (excluded)")},
         "Uniform draws in [low, high) of shape and dtype (no inputs; random).",
         [Sample({"shape": (2, 3)}, [], grad=False),
          Sample({"shape": (4,), "low": -2, "high": 5, "dtype": "float64"}, [], grad=False)],
         ("uniform", "random_uniform"))
_sampler("_random_normal",
         lambda p, key, dt: (p.loc + p.scale * jax.random.normal(key, p.shape, dt)).astype(dt),
         _check_normal,
         {"loc": Attr(float_attr, 0.0, "the mean"),
          "scale": Attr(float_attr, 1.0, "the standard deviation")},
         "Normal draws of mean loc and standard deviation scale, of shape and dtype (no "
         "inputs; random).",
         [Sample({"shape": (2, 3)}, [], grad=False),
          Sample({"shape": (3, 1, 2), "loc": 1.5, "scale": 0.5, "dtype": "float16"}, [],
                 grad=False)],
         ("normal", "random_normal"))


def _like_shape(p, s):
    _check_uniform(p)
    return s, [s[0]]


def _like_type(p, t, n):
    if t[0] is not None and t[0] not in _FLOAT_OUT:
        raise ShapeError(f"data is {t[0]}: _random_uniform_like draws {', '.join(_FLOAT_OUT)} "
                         f"only, in data's dtype")
    return t, [t[0]]


# y = uniform draws of x's shape and dtype; reads x's shape only; MXNet's zero gradient
register(OpDef(
    name="_random_uniform_like",
    attrs={"low": Attr(float_attr, 0.0, "the lower bound (included)"),
           "high": Attr(float_attr, 1.0, "the upper bound (excluded)")},
    lower=lambda p, ctx, x: jax.random.uniform(ctx.rng(), x.shape, x.dtype, p.low, p.high),
    infer_shape=_like_shape, infer_type=_like_type,
    shape_inputs=(0,), needs_rng=True, category="opaque", per_sample=False, family="other",
    flops=lambda p, ins, outs: numel(outs[0]), gradient=lambda g, node, og: [None],
    samples=[Sample({}, [(2, 3)], grad=False),
             Sample({"low": -2, "high": 5}, [(4, 1, 2)], grad=False)],
    doc="Uniform draws in [low, high) with data's shape and dtype (a float type); reads "
        "data's shape only (random; zero gradient)."))


# --------------------------------------------------------------------------
# _sample_multinomial: draws of class indices from the last axis' probabilities
# --------------------------------------------------------------------------
_MULTI_OUT = ("uint8", "int32", "float16", "float32", "float64")


def _multinomial_shape(p, data) -> tuple:
    data = tuple(data)
    if len(data) == 1:
        return tuple(p.shape) or (1,)
    return data[:-1] + tuple(p.shape)


def _multinomial_infer(p, s):
    if s[0] is None:
        return s, [None] * (2 if p.get_prob else 1)
    if any(d < 1 for d in p.shape):
        raise ShapeError(f"shape={tuple(p.shape)}: every dimension must be positive")
    out = _multinomial_shape(p, s[0])
    return s, [out] * (2 if p.get_prob else 1)


def _classes(p, data, key):
    """The drawn class indices, int32, in the output's shape."""
    k = data.shape[-1]
    rows = data.reshape(-1, k)
    m = max(numel(p.shape), 1)
    u = jax.random.uniform(key, (rows.shape[0], m), jnp.float32)
    cum = jnp.cumsum(rows.astype(jnp.float32), axis=-1)
    # the first class whose cumulative probability is >= u (MXNet's binary search)
    c = jnp.sum(cum[:, None, :] < u[:, :, None], axis=-1)
    return jnp.minimum(c, k - 1).astype(jnp.int32).reshape(_multinomial_shape(p, data.shape))


def _log_prob(p, data, c):
    """log data[..., c] for each draw c (the get_prob output)."""
    k = data.shape[-1]
    rows = data.reshape(-1, k)
    flat = c.reshape(rows.shape[0], -1)
    return jnp.log(jnp.take_along_axis(rows, flat, axis=-1)).reshape(c.shape)


def _multinomial_lower(p, ctx, data):
    c = _classes(p, data, ctx.rng())
    out = c.astype(_canonical(p.dtype))
    return (out, _log_prob(p, data, c)) if p.get_prob else out


_multinomial = register(OpDef(
    name="_sample_multinomial",
    attrs={"shape": Attr(shape_attr, (), "draws per distribution (); (): one"),
           "get_prob": Attr(bool_attr, False, "also output the log-probability of each draw"),
           "dtype": Attr(_dtype_of(_MULTI_OUT), "int32", "the dtype of the drawn indices")},
    outputs=lambda p: ["output", "prob"] if p.get_prob else ["output"],
    lower=_multinomial_lower, infer_shape=_multinomial_infer,
    infer_type=lambda p, t, n: (t, [p.dtype] + ([t[0]] if p.get_prob else [])),
    needs_rng=True, category="opaque", per_sample=False, aliases=("sample_multinomial",),
    flops=lambda p, ins, outs: numel(ins[0]) * max(numel(p.shape), 1),
    samples=[Sample({}, [(3, 4)], low=0.1, high=1.0, grad=False),
             Sample({"shape": (2, 3), "get_prob": True}, [(2, 5)], low=0.1, high=1.0,
                    grad=False),
             Sample({"shape": 4, "dtype": "float32"}, [(3,)], low=0.1, high=1.0,
                    grad=False)],
    doc="Draws class indices from each distribution on data's last axis (which should "
        "sum to 1): output shape data.shape[:-1] + shape (shape for a 1-D data; (1,) "
        "when both are empty). get_prob adds the log-probability of each draw, whose "
        "gradient flows to data (d prob / p at the drawn class); the indices have none."))


# prob = log data[c]; d data[c] += d prob / data[c]  (reads d prob, data, the draws)
def _multinomial_backward(p, ctx, og, ins, outs):
    data, c = ins[0], outs[0].astype(jnp.int32)
    _, vjp = jax.vjp(lambda v: _log_prob(p, v, c), data)
    return vjp(og[0].astype(data.dtype))


def _multinomial_gradient_type(p, t, n):
    return t, [t[1]]  # the data's dtype


register_backward(_multinomial, reads_ograds=(1,), reads_inputs=(0,), reads_outputs=(0,),
                  lower=_multinomial_backward, infer_shape=lambda p, s: (s, [s[1]]),
                  infer_type=_multinomial_gradient_type,
                  flops=lambda p, ins, outs: numel(ins[0]))
_multinomial_rule = _multinomial.gradient


def _multinomial_gradient(g, node, og):
    if not node.params.get_prob:
        return [None]  # the drawn indices: MXNet's zero gradient
    return _multinomial_rule(g, node, og)


_multinomial.gradient = _multinomial_gradient
