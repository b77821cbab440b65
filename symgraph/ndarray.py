"""The imperative API over jax.Array, sharing the op registry.

    import symgraph as sg
    x = sg.nd.array([[1, 2], [3, 4]])            # float32, like MXNet
    y = sg.nd.FullyConnected(x, w, b, num_hidden=3)   # any registered op
    (x * 2 + 1).asnumpy()

An NDArray is a mutable handle on an immutable ``jax.Array``: ``a[:] = b``,
``a += b`` and the executor's updates replace the array it holds, so every
holder of the handle sees the change (MXNet's in-place semantics). Arrays
live on ``ctx.jax_device``; JAX runs asynchronously, ``wait_to_read`` and
``waitall`` block.

``nd.<Op>(...)`` runs a registered op eagerly: arrays are its inputs
(positionally in the op's input order, or by input name), everything else
is an attribute parsed by the op's schema. It builds a one-node graph, so
shape errors and attribute errors read as they do for symbols, and jits it
once per op, attributes and input shapes (a loop compiles once). Ops run in
inference mode (BatchNorm uses its moving statistics, Dropout is identity);
ops with several visible outputs return a list.

``nd.save``/``nd.load`` store dicts or lists of arrays (written
atomically) in MXNet's binary ``.params`` format (``symgraph.params``, the
format of the checkpoints too), so ``mx.nd.load`` reads what ``nd.save``
wrote and the other way round; ``nd.save(..., format='npz')`` writes NumPy
``.npz`` instead.

This module is the namespace: the constructors (``array``, ``zeros``,
``arange`` ...) and every op as a function. The NDArray type and the
eager running of ops are in ndarray_core.py, ``nd.random`` in
ndarray_random.py, ``save``/``load`` in ndarray_io.py.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .context import Context
from .dtypes import require_storable, to_dtype as _dtype
from .errors import ShapeError
from .ndarray_core import NDArray, _device, _invoke, _shape
from .ndarray_io import load, save
from .ndarray_random import random
from .ops.registry import OpFunctions

# --------------------------------------------------------------------------
# creation
# --------------------------------------------------------------------------
def array(source, ctx: Context | None = None, dtype=None) -> NDArray:
    """An NDArray from a nested list, NumPy array, jax.Array or NDArray.

    The dtype is ``dtype``, else the source's for an NDArray or jax.Array,
    else float32 (MXNet's default, also for NumPy sources: float64 NumPy data
    becomes float32 unless ``dtype='float64'`` is asked for, which needs
    ``jax_enable_x64``)."""
    if isinstance(source, NDArray):
        source = source.data
    if isinstance(source, jax.Array):
        dt = require_storable(_dtype(dtype, source.dtype), "nd.array")
        host = source.astype(dt)
    else:
        dt = require_storable(dtype, "nd.array")
        try:
            host = np.asarray(source, dtype=dt if dt != jnp.bfloat16 else np.float32)
        except (ValueError, TypeError) as err:
            raise ShapeError(f"nd.array cannot make an array of {type(source).__name__}: "
                             f"{err}") from None
        host = jnp.asarray(host, dtype=dt)
    return NDArray(jax.device_put(host, _device(ctx)))


def full(shape, val, ctx: Context | None = None, dtype=None) -> NDArray:
    """An array of ``shape`` filled with ``val`` (float32 unless ``dtype``)."""
    dt = require_storable(dtype, "nd.zeros/ones/full")
    return NDArray(jax.device_put(jnp.full(_shape(shape), val, dt), _device(ctx)))


def zeros(shape, ctx: Context | None = None, dtype=None, **kwargs) -> NDArray:
    return full(shape, 0, ctx, dtype)


def ones(shape, ctx: Context | None = None, dtype=None, **kwargs) -> NDArray:
    return full(shape, 1, ctx, dtype)


def empty(shape, ctx: Context | None = None, dtype=None) -> NDArray:
    """Zeros: JAX has no uninitialised memory."""
    return full(shape, 0, ctx, dtype)


def arange(start, stop=None, step=1.0, repeat: int = 1, ctx: Context | None = None,
           dtype=None) -> NDArray:
    """Evenly spaced values in [start, stop), each repeated ``repeat`` times
    (MXNet's arange; float32 unless ``dtype``)."""
    if step == 0:
        raise ShapeError("arange: step must not be 0")
    if int(repeat) < 1:
        raise ShapeError(f"arange: repeat must be at least 1, got {repeat}")
    values = np.arange(start, stop, step) if stop is not None else np.arange(start)
    values = np.repeat(values, int(repeat))
    dt = require_storable(dtype, "nd.arange")
    return NDArray(jax.device_put(jnp.asarray(values, dt), _device(ctx)))


def waitall() -> None:
    """Blocks until every live array is computed."""
    for a in jax.live_arrays():
        a.block_until_ready()


_OP_FUNCTIONS = OpFunctions("sg.nd", _invoke, "\n\nRuns eagerly on NDArrays.")
__getattr__ = _OP_FUNCTIONS.module_getattr


def __dir__():
    return OpFunctions.names(globals())


__all__ = ["NDArray", "array", "zeros", "ones", "empty", "full", "arange", "waitall", "save",
           "load", "random"]
