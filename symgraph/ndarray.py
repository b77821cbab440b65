"""The imperative API over jax.Array, sharing the op registry.

An NDArray is a mutable handle on an immutable ``jax.Array``: ``a[:] = b``
and the executor's updates replace the array it holds.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .context import Context, current_context
from .errors import BindError


class NDArray:
    __slots__ = ("_data", "__weakref__")

    def __init__(self, data):
        self._data = data if isinstance(data, jax.Array) else jnp.asarray(data)

    @property
    def data(self) -> jax.Array:
        return self._data

    def _set(self, value) -> None:
        self._data = value

    @property
    def shape(self) -> tuple:
        return tuple(self._data.shape)

    @property
    def dtype(self):
        return np.dtype(self._data.dtype) if self._data.dtype != jnp.bfloat16 else self._data.dtype

    @property
    def size(self) -> int:
        return int(self._data.size)

    @property
    def ndim(self) -> int:
        return self._data.ndim

    @property
    def context(self) -> Context:
        return Context.of(next(iter(self._data.devices())))

    ctx = context

    def asnumpy(self) -> np.ndarray:
        return np.asarray(self._data)

    def asscalar(self):
        if self.size != 1:
            raise BindError(f"asscalar needs one element, this array has shape {self.shape}")
        return self.asnumpy().reshape(()).item()

    def wait_to_read(self) -> "NDArray":
        self._data.block_until_ready()
        return self

    def __setitem__(self, key, value):
        v = value.data if isinstance(value, NDArray) else jnp.asarray(value)
        if isinstance(key, slice) and key == slice(None):
            v = jnp.broadcast_to(v.astype(self._data.dtype), self._data.shape)
            dev = next(iter(self._data.devices()))
            self._data = jax.device_put(v, dev)
        else:
            self._data = self._data.at[key].set(v.astype(self._data.dtype))

    def __getitem__(self, key) -> "NDArray":
        return NDArray(self._data[key])

    def __array__(self, dtype=None, copy=None):
        a = np.asarray(self._data)
        return a.astype(dtype) if dtype is not None else a

    def __repr__(self):
        return f"\n{self.asnumpy()!r}\n<NDArray {'x'.join(map(str, self.shape))} @{self.context}>"

    def __len__(self):
        return self.shape[0]
