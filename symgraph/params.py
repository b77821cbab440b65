"""MXNet's binary NDArray-list format (``.params`` files), read and written.

``nd.save``/``nd.load`` and the checkpoints (``symgraph.train.checkpoint``)
both go through this module, so MXNet 1.x loads what symgraph writes and
the other way round. The layout: a uint64 magic (0x112), a reserved
uint64, the number of arrays and the arrays, then the number of names and
the names (none for a list). Each array is written in MXNet's version-2
layout: magic 0xF993FAC9, storage type 0 (dense), the shape (uint32 ndim,
int64 dims), the context (int32 device type 1 = CPU, int32 id), the dtype
flag (``dtypes.MXNET_FLAGS``: 0 float32, 1 float64, 2 float16, 3 uint8,
4 int32, 5 int8, 6 int64, 7 bool, 12 bfloat16) and the raw little-endian
data. Reading also accepts the version-1, version-3 and pre-version
layouts MXNet wrote earlier.

Files are written to a temporary file and renamed into place
(``util.atomic_open``), so a crash while saving leaves the previous file
whole.
"""
from __future__ import annotations

import io
import struct
from collections import OrderedDict

import numpy as np

from .dtypes import MXNET_FLAGS, np_dtype
from .errors import SerializationError
from .util import atomic_open

LIST_MAGIC = 0x112
V1_MAGIC = 0xF993FAC8
V2_MAGIC = 0xF993FAC9
V3_MAGIC = 0xF993FACA
CPU_DEVICE_TYPE = 1

FLAG_TO_DTYPE = {k: np_dtype(v) for k, v in MXNET_FLAGS.items()}
DTYPE_TO_FLAG = {v: k for k, v in FLAG_TO_DTYPE.items()}


def is_params_file(head: bytes) -> bool:
    """Whether a file's first 8 bytes are MXNet's list magic."""
    return len(head) >= 8 and struct.unpack("<Q", head[:8])[0] == LIST_MAGIC


def _host(x) -> np.ndarray:
    if hasattr(x, "asnumpy"):
        return x.asnumpy()
    return np.asarray(x)


def _write_array(f, arr: np.ndarray) -> None:
    """One array in MXNet's version-2 layout."""
    flag = DTYPE_TO_FLAG.get(arr.dtype)
    if flag is None:
        raise SerializationError(f"cannot save an array of dtype {arr.dtype} in MXNet's "
                                 f".params format (it has {', '.join(MXNET_FLAGS.values())})")
    if arr.ndim == 0:
        # MXNet (without numpy shape semantics) reads ndim 0 as "no array"
        raise SerializationError("cannot save a 0-dimensional array in MXNet's format; "
                                 "reshape it to (1,)")
    f.write(struct.pack("<Ii", V2_MAGIC, 0))
    f.write(struct.pack("<I", arr.ndim) + struct.pack(f"<{arr.ndim}q", *arr.shape))
    f.write(struct.pack("<iii", CPU_DEVICE_TYPE, 0, flag))
    f.write(np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"), copy=False).tobytes())


def write(path, arrays: list, names: list | None = None) -> None:
    """Writes ``arrays`` (NumPy arrays, NDArrays, jax.Arrays) as an MXNet
    ``.params`` file, atomically; ``names`` None writes a list, as
    ``mx.nd.save`` does for one."""
    hosts = [_host(a) for a in arrays]
    for a in hosts:  # refuse before the file is opened: nothing half-written
        if a.ndim == 0 or a.dtype not in DTYPE_TO_FLAG:
            _write_array(io.BytesIO(), a)
    with atomic_open(path, "wb") as f:
        f.write(struct.pack("<QQ", LIST_MAGIC, 0))
        f.write(struct.pack("<Q", len(hosts)))
        for arr in hosts:
            _write_array(f, arr)
        names = [] if names is None else [str(n) for n in names]
        f.write(struct.pack("<Q", len(names)))
        for name in names:
            raw = name.encode("utf-8")
            f.write(struct.pack("<Q", len(raw)) + raw)


def save_params_file(path, arrays: dict) -> None:
    """Writes ``{name: array}`` as an MXNet ``.params`` file, atomically."""
    write(path, list(arrays.values()), list(arrays))


class _Reader:
    def __init__(self, data: bytes, path):
        self.buf = io.BytesIO(data)
        self.path = path

    def read(self, fmt: str):
        return struct.unpack("<" + fmt, self.bytes(struct.calcsize(fmt)))

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


def read(path) -> tuple[list, list | None]:
    """``(arrays, names)`` from an MXNet ``.params`` file: NumPy arrays, and
    their names, None when the file holds an unnamed list."""
    try:
        with open(path, "rb") as f:
            r = _Reader(f.read(), path)
    except OSError as err:
        raise SerializationError(f"cannot read .params file '{path}': "
                                 f"{err.strerror or err}") from None
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
        try:
            names.append(r.bytes(length).decode("utf-8"))
        except UnicodeDecodeError:
            raise SerializationError(f"{path}: an array name is not UTF-8 text") from None
    if n_names == 0:
        return arrays, None
    if len(names) != n:
        raise SerializationError(f"{path}: {n} arrays but {len(names)} names")
    return arrays, names


def load_params_file(path) -> "OrderedDict[str, np.ndarray]":
    """``{name: NumPy array}`` from an MXNet ``.params`` file (an unnamed
    list's arrays are named ``'0'``, ``'1'``, ...)."""
    arrays, names = read(path)
    return OrderedDict(zip(names if names is not None else map(str, range(len(arrays))),
                           arrays))
