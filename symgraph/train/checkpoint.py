"""Checkpoint files: ``prefix-symbol.json`` and ``prefix-%04d.params``.

The ``.params`` file is MXNet's NDArray-list format, so MXNet 1.x loads
what symgraph writes and the other way round: a uint64 magic (0x112), a
reserved uint64, the arrays, then their names (``arg:<name>`` for
arguments, ``aux:<name>`` for aux states). Each array is written in
MXNet's version-2 layout: magic 0xF993FAC9, storage type 0 (dense), the
shape (uint32 ndim, int64 dims), the context (int32 device type 1 = CPU,
int32 id), the dtype flag (0 float32, 1 float64, 2 float16, 3 uint8,
4 int32, 5 int8, 6 int64, 7 bool, 12 bfloat16) and the raw little-endian
data. Reading also accepts the version-1, version-3 and pre-version
layouts MXNet wrote earlier.

Every file is written to a temporary file and renamed into place
(``util.atomic_open``), so a crash while saving leaves the previous
checkpoint whole.
"""
from __future__ import annotations

import io
import struct
from collections import OrderedDict

import numpy as np

from ..errors import SerializationError
from ..util import atomic_open, atomic_write_text

LIST_MAGIC = 0x112
V1_MAGIC = 0xF993FAC8
V2_MAGIC = 0xF993FAC9
V3_MAGIC = 0xF993FACA
CPU_DEVICE_TYPE = 1


def _dtype_flags():
    flags = {0: "float32", 1: "float64", 2: "float16", 3: "uint8", 4: "int32", 5: "int8",
             6: "int64", 7: "bool"}
    try:
        import ml_dtypes  # shipped with jax; gives NumPy a bfloat16
        flags[12] = np.dtype(ml_dtypes.bfloat16)
    except ImportError:  # pragma: no cover - jax always brings it
        pass
    return {k: np.dtype(v) for k, v in flags.items()}


FLAG_TO_DTYPE = _dtype_flags()
DTYPE_TO_FLAG = {v: k for k, v in FLAG_TO_DTYPE.items()}


def _host(x) -> np.ndarray:
    if hasattr(x, "asnumpy"):
        return x.asnumpy()
    return np.asarray(x)


def _write_array(f, arr: np.ndarray) -> None:
    """One array in MXNet's version-2 layout."""
    flag = DTYPE_TO_FLAG.get(arr.dtype)
    if flag is None:
        raise SerializationError(f"cannot save an array of dtype {arr.dtype} in a .params file")
    f.write(struct.pack("<Ii", V2_MAGIC, 0))
    f.write(struct.pack("<I", arr.ndim) + struct.pack(f"<{arr.ndim}q", *arr.shape))
    if arr.ndim == 0:
        # MXNet (without numpy shape semantics) reads ndim 0 as "no array"
        raise SerializationError("cannot save a 0-dimensional array in MXNet's format; "
                                 "reshape it to (1,)")
    f.write(struct.pack("<iii", CPU_DEVICE_TYPE, 0, flag))
    f.write(np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"), copy=False).tobytes())


def save_params_file(path, arrays: dict) -> None:
    """Writes ``{name: array}`` as an MXNet ``.params`` file, atomically."""
    items = [(str(k), _host(v)) for k, v in arrays.items()]
    with atomic_open(path, "wb") as f:
        f.write(struct.pack("<QQ", LIST_MAGIC, 0))
        f.write(struct.pack("<Q", len(items)))
        for _, arr in items:
            _write_array(f, arr)
        f.write(struct.pack("<Q", len(items)))
        for name, _ in items:
            raw = name.encode("utf-8")
            f.write(struct.pack("<Q", len(raw)) + raw)


class _Reader:
    def __init__(self, data: bytes, path):
        self.buf = io.BytesIO(data)
        self.path = path

    def read(self, fmt: str):
        size = struct.calcsize(fmt)
        raw = self.buf.read(size)
        if len(raw) != size:
            raise SerializationError(f"{self.path}: the file ends early; it is not a whole "
                                     f".params file")
        return struct.unpack("<" + fmt, raw)

    def bytes(self, n: int) -> bytes:
        raw = self.buf.read(n)
        if len(raw) != n:
            raise SerializationError(f"{self.path}: the file ends early; it is not a whole "
                                     f".params file")
        return raw


def _read_array(r: _Reader):
    (magic,) = r.read("I")
    if magic in (V2_MAGIC, V3_MAGIC):
        (stype,) = r.read("i")
        if stype != 0:
            raise SerializationError(f"{r.path}: sparse arrays (storage type {stype}) are not "
                                     f"supported")
        (ndim,) = r.read("i")
        dims = r.read(f"{ndim}q") if ndim > 0 else ()
        if ndim <= 0 and magic == V2_MAGIC or ndim < 0:
            return None
    elif magic == V1_MAGIC:
        (ndim,) = r.read("I")
        dims = r.read(f"{ndim}q")
        if ndim == 0:
            return None
    else:  # before versioning: the first word is ndim, dims are uint32
        ndim = magic
        if ndim > 32:
            raise SerializationError(f"{r.path}: not an MXNet .params file (bad array header)")
        dims = r.read(f"{ndim}I")
        if ndim == 0:
            return None
    r.read("ii")  # context: device type, id
    (flag,) = r.read("i")
    dtype = FLAG_TO_DTYPE.get(flag)
    if dtype is None:
        raise SerializationError(f"{r.path}: unknown dtype flag {flag}")
    count = int(np.prod(dims, dtype=np.int64))
    data = r.bytes(count * dtype.itemsize)
    return np.frombuffer(data, dtype.newbyteorder("<")).astype(dtype).reshape(dims)


def load_params_file(path) -> "OrderedDict[str, np.ndarray]":
    """``{name: NumPy array}`` from an MXNet ``.params`` file."""
    with open(path, "rb") as f:
        r = _Reader(f.read(), path)
    header, _ = r.read("QQ")
    if header != LIST_MAGIC:
        raise SerializationError(f"{path}: not an MXNet .params file (magic {header:#x}, "
                                 f"expected {LIST_MAGIC:#x})")
    (n,) = r.read("Q")
    arrays = [_read_array(r) for _ in range(n)]
    (n_names,) = r.read("Q")
    names = []
    for _ in range(n_names):
        (length,) = r.read("Q")
        names.append(r.bytes(length).decode("utf-8"))
    if n_names == 0:
        names = [str(i) for i in range(n)]
    if len(names) != n:
        raise SerializationError(f"{path}: {n} arrays but {len(names)} names")
    return OrderedDict(zip(names, arrays))


def split_arg_aux(params: dict) -> tuple[dict, dict]:
    """``arg:``/``aux:`` keys into two dicts (unprefixed names are args)."""
    arg, aux = {}, {}
    for k, v in params.items():
        kind, sep, name = k.partition(":")
        if sep and kind == "aux":
            aux[name] = v
        elif sep and kind == "arg":
            arg[name] = v
        else:
            arg[k] = v
    return arg, aux


def params_path(prefix: str, epoch: int) -> str:
    return f"{prefix}-{int(epoch):04d}.params"


def symbol_path(prefix: str) -> str:
    return f"{prefix}-symbol.json"


def save_checkpoint(prefix: str, epoch: int, symbol, arg_params: dict, aux_params: dict,
                    remove_amp_cast: bool = True) -> None:
    """Writes ``prefix-symbol.json`` and ``prefix-%04d.params`` (each
    atomically), as ``mx.model.save_checkpoint``. Of several processes
    trained together (``'dist_sync'``) only process 0 writes, and every
    process waits until it has, so any of them can load the files next."""
    from ..parallel import distributed
    if distributed.is_writer():
        if symbol is not None:
            atomic_write_text(symbol_path(prefix), symbol.tojson())
        save = {f"arg:{k}": v for k, v in arg_params.items()}
        save.update({f"aux:{k}": v for k, v in (aux_params or {}).items()})
        save_params_file(params_path(prefix, epoch), save)
    distributed.barrier("symgraph_checkpoint")


def load_checkpoint(prefix: str, epoch: int):
    """``(symbol, arg_params, aux_params)`` with NDArray values, as
    ``mx.model.load_checkpoint``."""
    from .. import symbol as sym
    from ..ndarray import NDArray
    net = sym.load(symbol_path(prefix))
    arg, aux = split_arg_aux(load_params_file(params_path(prefix, epoch)))
    return (net, {k: NDArray(v) for k, v in arg.items()},
            {k: NDArray(v) for k, v in aux.items()})
