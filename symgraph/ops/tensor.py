"""Tensor ops: copies, gradient stops, zeros, shape manipulation, casts."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from .backward import register_backward
from .registry import Attr, OpDef, Sample, dtype_attr, register
from .elementwise import INPLACE_FIRST, X, same_shape


# y = x; dx = dy
register(OpDef(name="identity", lower=lambda p, ctx, x: x, infer_shape=same_shape,
               inplace=INPLACE_FIRST, category="injective", samples=X,
               aliases=("_copy",), gradient=lambda g, node, og: [og[0]]))

# y = x; no gradient flows back
register(OpDef(name="BlockGrad", lower=lambda p, ctx, x: jax.lax.stop_gradient(x),
               infer_shape=same_shape, inplace=INPLACE_FIRST, category="injective",
               samples=X, aliases=("stop_gradient",),
               gradient=lambda g, node, og: [None]))

# y = zeros with x's shape; reads x's shape only
register(OpDef(name="zeros_like", lower=lambda p, ctx, x: jnp.zeros_like(x),
               infer_shape=same_shape, category="elementwise", samples=X,
               gradient=lambda g, node, og: [None]))
