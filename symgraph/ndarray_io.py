"""Arrays on disk: ``sg.nd.save`` and ``sg.nd.load`` (MXNet's binary
``.params`` format, or NumPy ``.npz`` for what it cannot hold), and the
NDArrays of arrays read from a file (64-bit ones narrowed where JAX runs
32-bit)."""
from __future__ import annotations

import json
import os
import warnings
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from . import params
from .dtypes import narrow_for_jax
from .context import Context
from .errors import SerializationError
from .util import short_repr

if TYPE_CHECKING:
    from .ndarray_core import NDArray

_FORMAT = "symgraph-ndarray"
SAVE_FORMATS = ("mxnet", "npz")


def save(fname, data, format: str = "mxnet") -> None:
    """Stores a dict ``{name: array}`` or a list of arrays (or one array) in
    ``fname``, atomically: in MXNet's binary ``.params`` format by default,
    the file ``mx.nd.save`` writes and ``mx.nd.load`` reads; with
    ``format='npz'`` as NumPy ``.npz`` (for dtypes MXNet has no flag for,
    and 0-dimensional arrays)."""
    from .ndarray_core import _ARRAY_TYPES, NDArray
    if format not in SAVE_FORMATS:
        raise SerializationError(f"nd.save: format is 'mxnet' or 'npz', got "
                                 f"{short_repr(format)}")
    if isinstance(data, (NDArray, *_ARRAY_TYPES)):
        data = [data]
    if isinstance(data, dict):
        kind, names, values = "dict", [str(k) for k in data], list(data.values())
    elif isinstance(data, (list, tuple)):
        kind, names, values = "list", None, list(data)
    else:
        raise TypeError(f"nd.save takes a dict or a list of arrays, got {type(data).__name__}")
    hosts = [np.asarray(v.data if isinstance(v, NDArray) else v) for v in values]
    if format == "mxnet":
        params.write(fname, hosts, names)
        return
    from .util import atomic_open
    arrays, dtypes = {}, []
    for i, host in enumerate(hosts):
        dtypes.append(str(jnp.dtype(host.dtype)))
        if host.dtype == jnp.bfloat16:  # .npz has no bfloat16: store the bits
            host = host.view(np.uint16)
        arrays[f"a{i}"] = host
    meta = {"format": _FORMAT, "version": 1, "kind": kind, "names": names, "dtypes": dtypes}
    arrays["__symgraph__"] = np.array(json.dumps(meta))
    with atomic_open(fname, "wb") as f:
        np.savez(f, **arrays)


def from_file(host: np.ndarray, dev, where: str, name) -> NDArray:
    """An NDArray on ``dev`` of an array read from file ``where``; with
    64-bit JAX off an int64/float64 array is narrowed to 32 bits with a
    warning where that keeps its values, else refused by name
    (``from_files``, ``dtypes.narrow_for_jax``)."""
    return from_files([host], [name], dev, where)[0]


def from_files(hosts, names, dev, where: str) -> list:
    """NDArrays on ``dev`` of the arrays ``hosts`` (named ``names``) read
    from file ``where``. With 64-bit JAX off, 64-bit arrays are narrowed to
    32 bits where that keeps them (integers: every value fits; floats:
    rounded to float32, none overflowing) and one warning names them; an
    array narrowing would change raises SerializationError naming it."""
    from .ndarray_core import NDArray
    out, narrowed = [], []
    for host, name in zip(hosts, names):
        value, changed = narrow_for_jax(host, f"{where}: array {short_repr(name)}",
                                        SerializationError)
        if changed:
            narrowed.append(f"{short_repr(name)} {host.dtype.name}->{value.dtype.name}")
        out.append(NDArray(jax.device_put(jnp.asarray(value), dev)))
    if narrowed:
        shown = ", ".join(narrowed[:5]) + (f" and {len(narrowed) - 5} more"
                                            if len(narrowed) > 5 else "")
        warnings.warn(f"{where}: 64-bit JAX is off, so {len(narrowed)} 64-bit array(s) were "
                      f"narrowed to 32 bits, every value kept (floats rounded to float32): "
                      f"{shown}; call jax.config.update('jax_enable_x64', True) at startup "
                      f"to load them as they are", stacklevel=3)
    return out


def load(fname, ctx: Context | None = None):
    """The dict or list ``nd.save`` stored, in either format; reads MXNet's
    binary ``.params`` files (a dict, or a list when the file has no
    names)."""
    from .ndarray_core import _device
    where = os.fspath(fname)
    dev = _device(ctx)
    try:
        with open(fname, "rb") as f:
            head = f.read(8)
    except OSError as err:
        raise SerializationError(f"cannot read '{where}': {err.strerror or err}") from None
    if params.is_params_file(head):
        hosts, names = params.read(fname)
        keys = names if names is not None else range(len(hosts))
        values = from_files(hosts, list(keys), dev, where)
        return values if names is None else dict(zip(names, values))
    if head[:2] != b"PK":  # .npz files are zip archives
        raise SerializationError(f"'{where}' is neither an array file written by nd.save "
                                 f"nor an MXNet .params file")
    try:
        with np.load(fname, allow_pickle=False) as z:
            meta = json.loads(str(z["__symgraph__"]))
            if meta.get("format") != _FORMAT:
                raise ValueError("not written by nd.save")
            hosts = []
            for i, dt in enumerate(meta["dtypes"]):
                host = z[f"a{i}"]
                if dt == "bfloat16":
                    host = host.view(jnp.bfloat16)
                hosts.append(host)
    except (ValueError, KeyError, OSError, json.JSONDecodeError) as err:
        raise SerializationError(f"'{where}' is not an array file written by nd.save "
                                 f"({err})") from None
    keys = meta["names"] if meta["kind"] == "dict" else range(len(hosts))
    values = from_files(hosts, list(keys), dev, where)
    if meta["kind"] == "dict":
        return dict(zip(meta["names"], values))
    return values
