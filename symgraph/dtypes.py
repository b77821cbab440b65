"""Dtypes, one place: names as symbols, NDArrays, attributes and files
spell them, MXNet's numeric dtype flags, sizes, and the 64-bit check.

Everything else in symgraph reads a dtype through these functions, so a
name is accepted (or refused, with the same message) the same way by
``sg.sym.var(dtype=...)``, ``sg.nd.array(..., dtype=...)``, a ``Cast``
attribute, a ``__dtype__`` hint in a JSON file and a ``.params`` file.
"""
from __future__ import annotations

import re

import ml_dtypes  # shipped with jax; gives NumPy a bfloat16
import numpy as np

from .errors import ShapeError
from .util import short_repr

# MXNet's dtype flags (mshadow's type codes), as ``.params`` files and
# ``__dtype__`` hints in symbol JSON store them
MXNET_FLAGS = {0: "float32", 1: "float64", 2: "float16", 3: "uint8", 4: "int32", 5: "int8",
               6: "int64", 7: "bool", 12: "bfloat16"}

# a plain name only reaches NumPy: it reads '(2, 3)f' as a sub-array dtype
# and parses '(1e308, 2)' with its own parser (a SyntaxError)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def np_dtype(dtype) -> np.dtype:
    """The NumPy dtype of a name, type or dtype, ``'bfloat16'`` included
    (NumPy alone does not know that name)."""
    if isinstance(dtype, str) and dtype == "bfloat16":
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype)


def dtype_attr(v) -> str:
    """A dtype given by name (``float32``) or as a NumPy type, as an op
    attribute takes it: its name, or ValueError (the attribute parser
    names the attribute)."""
    if not isinstance(v, (type, np.dtype)) and not _NAME.fullmatch(str(v)):
        raise ValueError(f"expected a dtype name such as float32, got {short_repr(v)}")
    try:
        return np.dtype(str(v) if not isinstance(v, (type, np.dtype)) else v).name
    except (TypeError, ValueError):
        raise ValueError(f"expected a dtype name such as float32, got {short_repr(v)}") \
            from None


_FLAG_NAMES = {str(k): v for k, v in MXNET_FLAGS.items()}


def hint_name(v) -> str:
    """A variable's ``__dtype__`` hint from symbol JSON: MXNet writes the
    flag (``'0'``), symgraph the name; ValueError for anything else."""
    v = _FLAG_NAMES.get(str(v), v)
    if v == "bfloat16":
        return v
    return dtype_attr(v)


def to_dtype(dtype, default="float32", error=ShapeError):
    """A JAX/NumPy dtype from a name, type or dtype (``None`` -> ``default``);
    ``error`` for a name that is not one."""
    import jax.numpy as jnp
    if dtype is None:
        dtype = default
    plain = not isinstance(dtype, str) or _NAME.fullmatch(dtype)
    try:
        if plain:
            return jnp.dtype(dtype)
    except (TypeError, ValueError):
        pass
    raise error(f"unknown dtype {short_repr(dtype)}; use e.g. float32, float16, int32")


def dtype_name(dtype) -> str:
    """The name of a dtype given as a name, type or dtype (``'float32'``,
    ``np.float64``, ``'bfloat16'``); ShapeError for a misspelled one. The
    Symbol API's dtype hints and type dicts read dtypes through it too."""
    return to_dtype(dtype).name


def require_storable(dtype, what: str, error=ShapeError):
    """``dtype`` if JAX can make arrays of it. With ``jax_enable_x64`` off,
    JAX silently turns float64/int64 into float32/int32; a caller who asked
    for 64 bits gets ``error`` instead of a quietly different array."""
    import jax
    dt = to_dtype(dtype)
    canonical = jax.dtypes.canonicalize_dtype(dt)
    if canonical != dt:
        raise error(f"{what}: {dt.name} needs 64-bit JAX, which is off; call "
                    f"jax.config.update('jax_enable_x64', True) at startup (without it "
                    f"JAX would silently make {canonical.name})")
    return dt


def narrow_for_jax(host: np.ndarray, what: str, error=ShapeError):
    """``(array, narrowed)``: ``host`` as JAX can hold it. With 64-bit JAX
    off a 64-bit array is narrowed to 32 bits when that keeps it: integers
    must every one fit the 32-bit type exactly (else ``error`` naming
    ``what`` and the first value that does not); floats (and complex) are
    rounded to float32 (complex64), what MXNet users get on a GPU, unless
    a finite value lies beyond float32's range and would become inf.
    ``narrowed`` says whether the array changed dtype (callers warn)."""
    import jax
    dt = host.dtype
    try:
        target = np.dtype(jax.dtypes.canonicalize_dtype(dt))
    except TypeError:
        return host, False  # a dtype JAX does not know; jnp.asarray words it
    if target == dt:
        return host, False
    advice = ("call jax.config.update('jax_enable_x64', True) at startup to load it "
              "as it is")
    if dt.kind in "iu" and target.kind in "iu":
        info = np.iinfo(target)
        bad = (host < info.min) | (host > info.max)
        if bad.any():
            v = host[bad].flat[0]
            raise error(f"{what}: {dt.name} value {v} does not fit {target.name}, which "
                        f"64-bit JAX being off would narrow it to; {advice}")
        return host.astype(target), True
    if dt.kind in "fc" and target.kind in "fc":
        with np.errstate(over="ignore"):
            narrowed = host.astype(target)
        grew = np.isinf(narrowed) & np.isfinite(host)
        if grew.any():
            v = host[grew].flat[0]
            raise error(f"{what}: {dt.name} value {v} is beyond {target.name}'s range, which "
                        f"64-bit JAX being off would narrow it to (it would become inf); "
                        f"{advice}")
        return narrowed, True
    require_storable(dt, what, error)  # anything else: the plain refusal
    return host, False


_ITEMSIZE: dict = {}


def itemsize(dtype) -> int:
    """Bytes per element of a dtype name (bfloat16 included); cached, as
    liveness asks once per tensor."""
    v = _ITEMSIZE.get(dtype)
    if v is None:
        v = _ITEMSIZE[dtype] = np_dtype(dtype).itemsize
    return v


def is_float(dtype) -> bool:
    """Whether ``dtype`` is a floating type (bfloat16 and float16 included)."""
    import jax.numpy as jnp  # NumPy does not count ml_dtypes' bfloat16 as floating
    return jnp.issubdtype(dtype, jnp.floating)
