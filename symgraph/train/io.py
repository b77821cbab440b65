"""Data iterators, MXNet style: ``DataDesc``, ``DataBatch``, ``DataIter``,
``NDArrayIter`` and a ``PrefetchingIter`` that prepares batches on a
background thread.

    it = sg.io.NDArrayIter(x, y, batch_size=32, shuffle=True,
                           last_batch_handle='pad')
    for batch in it:             # DataBatch: .data, .label, .pad
        ...
    it.reset()                   # next epoch (a new permutation when shuffling)

Batches hold ``sg.nd.NDArray``s on ``sg.cpu(0)``, as MXNet's iterators
give (``batch.data[0].asnumpy()``, ``.as_in_context(ctx)``, ``.shape``,
``.dtype``, ``.context``); the Module moves them to its devices, so the same
iterator feeds one device or eight. Shuffling is reproducible: the
order of epoch ``e`` is a function of ``(seed, e)``, which is what lets
``fit(begin_epoch=k)`` resume with the data order of an uninterrupted run.
"""
from __future__ import annotations

import queue
import threading
from collections import OrderedDict, namedtuple
from typing import Callable

import jax
import numpy as np

from ..context import cpu
from ..dtypes import require_storable
from ..ndarray import NDArray
from . import TrainError


# XLA's CPU client aliases a host buffer with this alignment instead of copying it
HOST_ALIGN = 64


def aligned_zeros(shape, dtype) -> np.ndarray:
    """A zeroed NumPy array whose buffer starts on a ``HOST_ALIGN``-byte
    boundary, so that ``batch_ndarrays`` wraps it without a copy."""
    dtype = np.dtype(dtype)
    shape = tuple(int(d) for d in shape)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    buf = np.zeros(nbytes + HOST_ALIGN, np.uint8)  # calloc: pages are touched when written
    start = -buf.ctypes.data % HOST_ALIGN
    return buf[start:start + nbytes].view(dtype).reshape(shape)


def batch_device() -> jax.Device:
    """Where iterators put their batches: ``sg.cpu(0)``, as MXNet's."""
    return cpu(0).jax_device


def batch_ndarrays(arrays) -> list | None:
    """``arrays`` (NumPy arrays, jax arrays or NDArrays) as NDArrays: an
    NDArray stays as it is, a jax array is wrapped where it lies, host
    arrays go to ``sg.cpu(0)`` in one ``jax.device_put`` (no copy for a
    C-contiguous array aligned as ``aligned_zeros`` makes them: the
    NDArray then shares that buffer, which must not be written again)."""
    if arrays is None:
        return None
    out = list(arrays)
    host = [i for i, a in enumerate(out) if not isinstance(a, (NDArray, jax.Array))]
    if host:
        placed = jax.device_put([np.asarray(out[i]) for i in host], batch_device())
        for i, a in zip(host, placed):
            out[i] = a
    return [a if isinstance(a, NDArray) else NDArray(a) for a in out]


class DataDesc(namedtuple("DataDesc", ["name", "shape"])):
    """Name and shape of one input, plus ``dtype`` and ``layout`` (``'NCHW'``);
    a ``(name, shape)`` tuple, so old code that unpacks it still works."""

    def __new__(cls, name, shape, dtype="float32", layout="NCHW"):
        ret = super().__new__(cls, name, tuple(int(d) for d in shape))
        ret.dtype = dtype if dtype is None else np.dtype(dtype).name if dtype != "bfloat16" \
            else "bfloat16"
        ret.layout = layout
        return ret

    def __repr__(self):
        return f"DataDesc[{self.name},{self.shape},{self.dtype},{self.layout}]"

    @staticmethod
    def get_batch_axis(layout) -> int:
        """The axis of the batch (``'N'``) in ``layout``; 0 when unknown."""
        return 0 if layout is None else max(layout.find("N"), 0)

    @staticmethod
    def get_list(shapes, types=None) -> list:
        """``[(name, shape)]`` (and optionally ``[(name, dtype)]``) -> DataDescs."""
        types = dict(types or [])
        return [DataDesc(n, s, types.get(n, "float32")) for n, s in shapes]


def as_descs(descs) -> list[DataDesc]:
    """DataDescs from DataDescs, ``(name, shape)`` pairs or a ``{name: shape}`` dict."""
    if descs is None:
        return []
    if isinstance(descs, dict):
        descs = list(descs.items())
    out = []
    for d in descs:
        if isinstance(d, DataDesc):
            out.append(d)
        else:
            try:
                name, shape = d
            except (TypeError, ValueError):
                raise TrainError(f"expected a DataDesc or a (name, shape) pair, got {d!r}") \
                    from None
            out.append(DataDesc(name, shape))
    return out


class DataBatch:
    """One batch: ``data`` and ``label`` are lists of arrays in the order of
    ``provide_data``/``provide_label`` (the iterators here give NDArrays on
    ``sg.cpu(0)``; the Module also takes NumPy or jax arrays in a batch
    built by hand); ``pad`` counts the samples at the end
    that only fill the last batch (they are left out of metrics and
    predictions); ``index`` gives each sample's position in the data set."""

    def __init__(self, data, label=None, pad=0, index=None, bucket_key=None,
                 provide_data=None, provide_label=None):
        if data is not None and not isinstance(data, (list, tuple)):
            raise TrainError(f"DataBatch.data must be a list of arrays, got "
                             f"{type(data).__name__}")
        if label is not None and not isinstance(label, (list, tuple)):
            raise TrainError(f"DataBatch.label must be a list of arrays, got "
                             f"{type(label).__name__}")
        self.data = list(data) if data is not None else None
        self.label = list(label) if label is not None else None
        self.pad = int(pad or 0)
        self.index = index
        self.bucket_key = bucket_key
        self.provide_data = provide_data
        self.provide_label = provide_label

    def __repr__(self):
        shapes = [tuple(d.shape) for d in self.data or []]
        lshapes = [tuple(d.shape) for d in self.label or []]
        return f"DataBatch: data shapes: {shapes} label shapes: {lshapes} pad: {self.pad}"


class DataIter:
    """Base class: iterate with ``for batch in it`` or ``it.next()``; call
    ``reset()`` to start the next epoch. Subclasses implement ``next`` (or
    ``iter_next`` with ``getdata``/``getlabel``/``getpad``/``getindex``)
    and the ``provide_data``/``provide_label`` properties. ``next`` gives
    the batch's arrays as NDArrays (host arrays ``getdata`` returns go to
    ``sg.cpu(0)``)."""

    def __init__(self, batch_size: int = 0):
        self.batch_size = batch_size

    def __iter__(self):
        return self

    def reset(self) -> None:
        pass

    def next(self) -> DataBatch:
        if self.iter_next():
            return DataBatch(batch_ndarrays(self.getdata()), batch_ndarrays(self.getlabel()),
                             self.getpad(), self.getindex(), provide_data=self.provide_data,
                             provide_label=self.provide_label)
        raise StopIteration

    def __next__(self) -> DataBatch:
        return self.next()

    def iter_next(self) -> bool:
        raise NotImplementedError

    def getdata(self):
        raise NotImplementedError

    def getlabel(self):
        return None

    def getindex(self):
        return None

    def getpad(self) -> int:
        return 0

    @property
    def provide_data(self) -> list[DataDesc]:
        raise NotImplementedError

    @property
    def provide_label(self) -> list[DataDesc]:
        return []


LAST_BATCH_HANDLES = ("pad", "discard", "roll_over")


def _named_arrays(data, default_name: str, dtype, what: str) -> "OrderedDict[str, np.ndarray]":
    """MXNet's naming: one array -> ``default_name``; a list -> ``_0_<name>``,
    ``_1_<name>``...; a dict keeps its names."""
    if data is None:
        return OrderedDict()
    if isinstance(data, dict):
        items = list(data.items())
    elif isinstance(data, (list, tuple)):
        if len(data) == 1:
            items = [(default_name, data[0])]
        else:
            items = [(f"_{i}_{default_name}", d) for i, d in enumerate(data)]
    else:
        items = [(default_name, data)]
    out = OrderedDict()
    for name, arr in items:
        a = np.asarray(arr)
        if a.ndim == 0:
            raise TrainError(f"NDArrayIter: {what} '{name}' is a scalar; it needs a "
                             f"leading sample axis")
        if dtype is not None:
            a = a.astype(dtype, copy=False)
        out[name] = a
    return out


@jax.jit
def _gather(arrays, idx):
    """The rows ``idx`` of each array: one compiled program per batch, on
    the arrays' device (cheaper than NumPy's indexing and a copy to it)."""
    return [a[idx] for a in arrays]


class NDArrayIter(DataIter):
    """Batches over in-memory arrays (NumPy arrays, NDArrays or jax arrays).

    ``last_batch_handle`` says what happens to the samples that do not fill
    the last batch: ``'pad'`` fills it with samples from the start of the
    epoch's order and reports how many in ``batch.pad``; ``'discard'`` drops
    them; ``'roll_over'`` keeps them for the first batch of the next epoch.
    ``shuffle`` draws a new permutation each epoch from ``(seed, epoch)``;
    ``seed=None`` draws the seed from NumPy's global generator once, so
    ``np.random.seed`` makes runs repeatable as in MXNet. ``dtype`` (float32
    by default, as MXNet's iterators give) converts data and labels;
    ``None`` keeps their dtypes (a 64-bit one needs ``jax_enable_x64``:
    the first batch raises ``TrainError`` without it, and ``Module.bind``
    refuses the float64 ``provide_data`` before that).

    Batches hold NDArrays on ``sg.cpu(0)``, as MXNet's: the arrays are
    copied there once, at the first batch, and each batch's rows are
    gathered there by one compiled program (``getindex()`` gives their
    positions in the data).

    ``part_index``/``num_parts`` (training in several processes): the
    iterator walks the batches of ``batch_size * num_parts`` samples that
    one process would, and yields part ``part_index`` of each (its
    ``batch_size`` rows, in order; ``pad`` counts the padding among them).
    The parts of all processes, concatenated in order, are those batches,
    and every part has the same number of batches. With ``shuffle`` every
    part needs the same ``seed``.
    """

    def __init__(self, data, label=None, batch_size: int = 1, shuffle: bool = False,
                 last_batch_handle: str = "pad", data_name: str = "data",
                 label_name: str = "softmax_label", seed: int | None = None,
                 dtype="float32", part_index: int = 0, num_parts: int = 1):
        super().__init__(int(batch_size))
        if self.batch_size <= 0:
            raise TrainError(f"NDArrayIter: batch_size must be positive, got {batch_size}")
        if int(num_parts) < 1 or not 0 <= int(part_index) < int(num_parts):
            raise TrainError(f"NDArrayIter: part_index {part_index} is not in [0, "
                             f"num_parts={num_parts})")
        self.part_index, self.num_parts = int(part_index), int(num_parts)
        if self.num_parts > 1 and shuffle and seed is None:
            raise TrainError("NDArrayIter: shuffle with num_parts > 1 needs seed= (the same "
                             "in every part, so that the parts split the same order)")
        # the batch every part's rows are taken from
        self._step = self.batch_size * self.num_parts
        if last_batch_handle not in LAST_BATCH_HANDLES:
            raise TrainError(f"NDArrayIter: last_batch_handle={last_batch_handle!r}; use one "
                             f"of {', '.join(LAST_BATCH_HANDLES)}")
        if dtype is not None:
            dtype = require_storable(dtype, "NDArrayIter", error=TrainError)
        self.data = _named_arrays(data, data_name, dtype, "data")
        if not self.data:
            raise TrainError("NDArrayIter needs at least one data array")
        self.label = _named_arrays(label, label_name, dtype, "label")
        sizes = {k: len(v) for k, v in [*self.data.items(), *self.label.items()]}
        if len(set(sizes.values())) != 1:
            raise TrainError(f"NDArrayIter: arrays differ in their number of samples: "
                             f"{sizes}")
        self.num_data = next(iter(sizes.values()))
        if self.num_data == 0:
            raise TrainError("NDArrayIter: the data set is empty")
        if last_batch_handle == "discard" and self.num_data < self._step:
            raise TrainError(f"NDArrayIter: {self.num_data} samples make no full batch of "
                             f"{self._step} with last_batch_handle='discard'")
        self.shuffle = bool(shuffle)
        self.last_batch_handle = last_batch_handle
        if seed is None:
            seed = int(np.random.randint(0, 2 ** 31 - 1))
        self.seed = int(seed)
        self._on_device = None  # the arrays on cpu(0), from the first batch on
        self.epoch = 0
        self._leftover = np.zeros(0, np.int64)
        self._start_epoch()

    # -- order -------------------------------------------------------------
    def _permutation(self, epoch: int) -> np.ndarray:
        if not self.shuffle:
            return np.arange(self.num_data)
        return np.random.default_rng([self.seed, epoch]).permutation(self.num_data)

    def _start_epoch(self) -> None:
        perm = self._permutation(self.epoch)
        self._order = np.concatenate([self._leftover, perm])
        self._perm = perm
        self._cursor = 0
        self._batch_idx = None

    def reset(self) -> None:
        """Starts the next epoch (``roll_over`` carries the leftover samples)."""
        n = len(self._order)
        rest = n % self._step
        if self.last_batch_handle == "roll_over" and rest and self._cursor >= n:
            self._leftover = self._order[n - rest:]  # the epoch ran out: carry them
        else:
            self._leftover = np.zeros(0, np.int64)
        self.epoch += 1
        self._start_epoch()

    def set_epoch(self, epoch: int) -> None:
        """Positions the iterator at the start of epoch ``epoch`` (what an
        uninterrupted run would see after ``epoch`` resets; a ``roll_over``
        leftover from earlier epochs is not reconstructed)."""
        self.epoch = int(epoch)
        self._leftover = np.zeros(0, np.int64)
        self._start_epoch()

    # -- iteration ------------------------------------------------------------
    def iter_next(self) -> bool:
        n, b = len(self._order), self._step
        start = self._cursor
        if start >= n:
            return False
        end = start + b
        if end > n and self.last_batch_handle != "pad":
            self._cursor = n
            return False
        idx = self._order[start:end]
        self._pad = 0
        if len(idx) < b:  # 'pad': fill from the start of this epoch's order
            self._pad = b - len(idx)
            fill = np.resize(self._perm, self._pad)
            idx = np.concatenate([idx, fill])
        if self.num_parts > 1:  # this part's rows; the padding is at the end
            lo = self.part_index * self.batch_size
            hi = lo + self.batch_size
            self._pad = max(0, hi - max(lo, b - self._pad))
            idx = idx[lo:hi]
        self._batch_idx = idx
        self._cursor = end
        return True

    def _take(self) -> list:
        """The current batch's rows of every array (data, then labels), NDArrays."""
        if self._batch_idx is None:
            raise TrainError("NDArrayIter: no current batch; call next() first")
        if self._on_device is None:
            self._place()
        idx = self._batch_idx.astype(np.int32 if self.num_data < 2 ** 31 else np.int64)
        return [NDArray(a) for a in _gather(self._on_device, idx)]

    def _place(self) -> None:
        """Copies the arrays to cpu(0) once; ``data``/``label`` then hold
        host views of those buffers (no second copy kept)."""
        arrays = [*self.data.items(), *self.label.items()]
        for name, a in arrays:  # an NDArray cannot hold 64 bits without x64
            require_storable(a.dtype, f"NDArrayIter: '{name}'", error=TrainError)
        placed = jax.device_put([a for _, a in arrays], batch_device())
        for names, on_device in ((self.data, placed[:len(self.data)]),
                                 (self.label, placed[len(self.data):])):
            for k, d in zip(list(names), on_device):
                names[k] = np.asarray(d)  # a view of the buffer on cpu(0)
        self._on_device = placed

    def next(self) -> DataBatch:
        if not self.iter_next():
            raise StopIteration
        arrays = self._take()  # data and labels in one program
        n = len(self.data)
        return DataBatch(arrays[:n], arrays[n:] or None, self.getpad(), self.getindex(),
                         provide_data=self.provide_data, provide_label=self.provide_label)

    def getdata(self):
        return self._take()[:len(self.data)]

    def getlabel(self):
        return self._take()[len(self.data):] if self.label else None

    def getpad(self) -> int:
        return self._pad

    def getindex(self):
        return self._batch_idx

    @property
    def num_batches(self) -> int:
        """Batches in the current epoch."""
        n = len(self._order)
        return -(-n // self._step) if self.last_batch_handle == "pad" else \
            n // self._step

    def __len__(self) -> int:
        return self.num_batches

    @property
    def provide_data(self) -> list[DataDesc]:
        return [DataDesc(k, (self.batch_size,) + v.shape[1:], v.dtype.name)
                for k, v in self.data.items()]

    @property
    def provide_label(self) -> list[DataDesc]:
        return [DataDesc(k, (self.batch_size,) + v.shape[1:], v.dtype.name)
                for k, v in self.label.items()]


_END = object()


class _Failure:
    def __init__(self, err: BaseException):
        self.err = err


class PrefetchingIter(DataIter):
    """Wraps an iterator and reads ahead on a background thread.

    Up to ``depth`` batches wait in a queue while the device computes on
    the current one. ``transform(batch) -> batch`` runs on the background
    thread too; the Module passes one that copies the arrays to its devices,
    so the host-to-device copy also overlaps the step. An exception raised
    by the wrapped iterator is raised again by ``next()`` in the caller.
    ``reset()`` stops the thread, resets the wrapped iterator and reads on.
    """

    def __init__(self, base: DataIter, depth: int = 2, transform: Callable | None = None):
        super().__init__(getattr(base, "batch_size", 0))
        if depth < 1:
            raise TrainError(f"PrefetchingIter: depth must be at least 1, got {depth}")
        self.base = base
        self.depth = int(depth)
        self.transform = transform
        self._queue: queue.Queue | None = None
        self._stop: threading.Event | None = None
        self._thread: threading.Thread | None = None
        self._done = False

    def _start(self) -> None:
        self._queue = queue.Queue(maxsize=self.depth)
        self._stop = threading.Event()
        self._done = False
        q, stop, base, transform = self._queue, self._stop, self.base, self.transform

        def work():
            try:
                while not stop.is_set():
                    try:
                        batch = base.next()
                    except StopIteration:
                        item = _END
                    else:
                        item = transform(batch) if transform is not None else batch
                    while not stop.is_set():
                        try:
                            q.put(item, timeout=0.05)
                            break
                        except queue.Full:
                            continue
                    if item is _END:
                        return
            except BaseException as err:  # handed to the consumer, raised there
                q.put(_Failure(err))

        self._thread = threading.Thread(target=work, name="symgraph-prefetch", daemon=True)
        self._thread.start()

    def _shutdown(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        while self._thread.is_alive():
            try:  # unblock a producer waiting on a full queue
                self._queue.get_nowait()
            except queue.Empty:
                self._thread.join(0.05)
        self._thread = None
        self._queue = None

    def next(self) -> DataBatch:
        if self._done:
            raise StopIteration
        if self._thread is None:
            self._start()
        item = self._queue.get()
        if isinstance(item, _Failure):
            self._shutdown()
            self._done = True
            raise item.err
        if item is _END:
            self._thread.join()
            self._thread = None
            self._done = True
            raise StopIteration
        return item

    def reset(self) -> None:
        self._shutdown()
        self.base.reset()
        self._done = False

    def close(self) -> None:
        """Stops the background thread (also done by ``reset`` and at exit)."""
        self._shutdown()

    def __del__(self):
        try:
            self._shutdown()
        except Exception:
            pass

    def set_epoch(self, epoch: int) -> None:
        self._shutdown()
        if not hasattr(self.base, "set_epoch"):
            raise TrainError(f"{type(self.base).__name__} cannot be positioned at an epoch")
        self.base.set_epoch(epoch)
        self._done = False

    @property
    def provide_data(self):
        return self.base.provide_data

    @property
    def provide_label(self):
        return self.base.provide_label

    @property
    def num_batches(self):
        return getattr(self.base, "num_batches", None)


class ResizeIter(DataIter):
    """Makes an epoch exactly ``size`` batches long, restarting the wrapped
    iterator when it runs out (``reset_internal``) or continuing it."""

    def __init__(self, data_iter: DataIter, size: int, reset_internal: bool = True):
        super().__init__(data_iter.batch_size)
        self.data_iter = data_iter
        self.size = int(size)
        self.reset_internal = reset_internal
        self._count = 0

    def reset(self) -> None:
        self._count = 0
        if self.reset_internal:
            self.data_iter.reset()

    def next(self) -> DataBatch:
        if self._count >= self.size:
            raise StopIteration
        try:
            batch = self.data_iter.next()
        except StopIteration:
            self.data_iter.reset()
            batch = self.data_iter.next()
        self._count += 1
        return batch

    @property
    def num_batches(self) -> int:
        return self.size

    @property
    def provide_data(self):
        return self.data_iter.provide_data

    @property
    def provide_label(self):
        return self.data_iter.provide_label
