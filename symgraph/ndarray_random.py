"""``sg.nd.random`` (and ``sg.random``): MXNet's samplers ``uniform``,
``normal``, ``randint`` and ``shuffle`` and ``mx.random.seed``, drawing
from the one generator that ops such as Dropout run through ``sg.nd``
draw from too (``ndarray_core._next_key``).
"""
from __future__ import annotations

import numbers

import jax
import jax.numpy as jnp

from .context import Context
from .dtypes import require_storable
from .errors import OpError, ShapeError
from .ndarray_core import _RNG, NDArray, _device, _is_array, _next_key, _shape
from .util import short_repr


# --------------------------------------------------------------------------
# nd.random (and sg.random): MXNet's samplers and mx.random.seed
# --------------------------------------------------------------------------
def _seed(seed_state, ctx="all") -> None:
    """Seeds the random draws of ``sg.nd.random`` and of ops such as
    Dropout run through ``sg.nd``, as ``mx.random.seed``: after
    ``seed(n)`` the same calls give the same numbers. ``ctx`` is accepted
    for MXNet's signature; one generator serves every device here.
    Executors and Modules keep their own keys (their ``seed=``)."""
    if isinstance(seed_state, bool) or not isinstance(seed_state, numbers.Integral):
        raise OpError(f"random.seed: seed_state must be an int, got {short_repr(seed_state)}")
    if ctx != "all" and not isinstance(ctx, Context):
        raise OpError(f"random.seed: ctx is 'all' or a Context, got {short_repr(ctx)}")
    _RNG["key"] = jax.random.key(int(seed_state) % 2 ** 32)
    _RNG["count"] = 0


def _no_extra(where, kwargs):
    if kwargs:
        raise OpError(f"{where}: unknown argument(s) {', '.join(map(str, kwargs))}")


def _sample_args(where, params, shape, dtype, out, default_dtype):
    for pname, v in params.items():
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            got = "an NDArray" if _is_array(v) else short_repr(v)
            raise OpError(f"{where}: {pname} must be a number, got {got} (arrays of "
                          f"parameters are not supported)")
    if out is not None and not isinstance(out, NDArray):
        raise OpError(f"{where}: out= must be an NDArray, got {type(out).__name__}")
    if shape is None:
        shape = out.shape if out is not None else (1,)  # MXNet draws one number
    shape = _shape(shape)
    if dtype is None:
        dtype = out.dtype if out is not None else default_dtype
    return shape, require_storable(dtype, where)


def _deliver(where, value, ctx, out):
    if out is not None:
        if out.shape != value.shape:
            raise ShapeError(f"{where}: out= has shape {out.shape}, the draw has {value.shape}")
        out[:] = NDArray(value)
        return out
    return NDArray(jax.device_put(value, _device(ctx)))


def _uniform(low=0.0, high=1.0, shape=None, dtype=None, ctx=None, out=None, **kwargs):
    """Draws from [low, high), as ``mx.nd.random.uniform`` (float32; one
    number when ``shape`` is not given)."""
    where = "nd.random.uniform"
    _no_extra(where, kwargs)
    shape, dt = _sample_args(where, {"low": low, "high": high}, shape, dtype, out, "float32")
    if not jnp.issubdtype(dt, jnp.floating):
        raise OpError(f"{where}: dtype must be a float type, got {dt.name}")
    if not low <= high:
        raise OpError(f"{where}: low ({low}) must not exceed high ({high})")
    value = jax.random.uniform(_next_key(), shape, dt, low, high)
    return _deliver(where, value, ctx, out)


def _normal(loc=0.0, scale=1.0, shape=None, dtype=None, ctx=None, out=None, **kwargs):
    """Draws from N(loc, scale**2), as ``mx.nd.random.normal``."""
    where = "nd.random.normal"
    _no_extra(where, kwargs)
    shape, dt = _sample_args(where, {"loc": loc, "scale": scale}, shape, dtype, out, "float32")
    if not jnp.issubdtype(dt, jnp.floating):
        raise OpError(f"{where}: dtype must be a float type, got {dt.name}")
    if scale < 0:
        raise OpError(f"{where}: scale must not be negative, got {scale}")
    value = jax.random.normal(_next_key(), shape, dt) * jnp.asarray(scale, dt) + \
        jnp.asarray(loc, dt)
    return _deliver(where, value, ctx, out)


def _randint(low, high, shape=None, dtype=None, ctx=None, out=None, **kwargs):
    """Integers from [low, high), as ``mx.nd.random.randint`` (int32)."""
    where = "nd.random.randint"
    _no_extra(where, kwargs)
    for pname, v in (("low", low), ("high", high)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise OpError(f"{where}: {pname} must be an int, got {short_repr(v)}")
    shape, dt = _sample_args(where, {"low": low, "high": high}, shape, dtype, out, "int32")
    if not jnp.issubdtype(dt, jnp.integer):
        raise OpError(f"{where}: dtype must be int32 or int64, got {dt.name}")
    if not low < high:
        raise OpError(f"{where}: low ({low}) must be below high ({high})")
    info = jnp.iinfo(dt)
    if low < info.min or high - 1 > info.max:
        raise OpError(f"{where}: [{low}, {high}) does not fit {dt.name}")
    value = jax.random.randint(_next_key(), shape, low, high, dt)
    return _deliver(where, value, ctx, out)


def _shuffle(data, out=None, **kwargs):
    """``data`` with its first axis in a random order (a new array; the
    rows themselves unchanged), as ``mx.nd.random.shuffle``."""
    where = "nd.random.shuffle"
    _no_extra(where, kwargs)
    if not isinstance(data, NDArray):
        raise OpError(f"{where}: data must be an NDArray, got {type(data).__name__}")
    if data.ndim == 0:
        raise ShapeError(f"{where}: data must have at least one axis")
    value = jax.random.permutation(_next_key(), data.data, axis=0, independent=False)
    if out is not None:
        return _deliver(where, value, None, out)
    return NDArray(value)


def _random_namespace():
    import types
    mod = types.ModuleType("symgraph.ndarray.random", "MXNet's ``mx.nd.random`` (and "
                           "``mx.random``): uniform, normal, randint, shuffle and seed.")
    for name, fn in (("seed", _seed), ("uniform", _uniform), ("normal", _normal),
                     ("randint", _randint), ("shuffle", _shuffle)):
        fn.__name__ = name
        fn.__qualname__ = name
        setattr(mod, name, fn)
    mod.__all__ = ["seed", "uniform", "normal", "randint", "shuffle"]
    return mod


random = _random_namespace()

