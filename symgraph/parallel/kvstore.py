"""MXNet's KVStore API on JAX devices: ``sg.kv.create('local'|'device')``.

    kv = sg.kv.create('device')
    kv.init('w', sg.nd.array(np.zeros((3, 4))))
    kv.push('w', [grad_on_cpu0, grad_on_cpu1])   # summed (then updated, if an
    kv.pull('w', out=[w_on_cpu0, w_on_cpu1])     # optimizer is set) and copied back

A push of several values adds them up. With ``'device'`` the values stay on
their devices: when they are on distinct devices they are assembled into
one array sharded over those devices and summed by a compiled reduction
(an all-reduce across the devices, the result replicated on each), so a
pull onto any of them copies nothing. With ``'local'`` the sum is made in
host (CPU) memory, as MXNet's local store does. ``set_optimizer`` makes
push apply the optimizer to the stored weight with the summed gradient
(MXNet's update-on-kvstore).

``Module.fit(kvstore=...)`` takes a name or a store. Its training step
combines the gradients of its devices with the store's ``step_reducer``
inside the one compiled program (a ``psum`` for both 'local' and 'device';
on one machine a round trip through host memory would only be slower) and
updates the weights right after it in the same program.

``'dist_sync'`` trains across processes: ``create('dist_sync')`` joins
this process to the others through ``jax.distributed``
(``parallel.distributed``; ``symgraph launch`` starts the processes), and
``rank``/``num_workers`` are the process index and count. A Module given
such a store compiles one step over every process's devices, so the
gradient sum is the same ``psum``, now across processes. ``push`` sums
over the values of every process (each process pushes, all get the same
sum). ``dist_async`` (updates applied as they arrive) and
``dist_device_sync`` are not built and raise a KVStoreError naming what is.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from ..errors import SymgraphError
from ..ndarray import NDArray

KV_TYPES = ("local", "device")
DIST_SUPPORTED = ("dist_sync",)
ALIASES = {"local_update_cpu": "local", "local_allreduce_cpu": "local",
           "local_allreduce_device": "device", "nccl": "device"}
DIST_TYPES = ("dist_sync", "dist_async", "dist_device_sync", "dist_sync_device", "dist",
              "horovod", "byteps", "p3")


class KVStoreError(SymgraphError):
    """A KVStore misuse: an unknown type, a key not initialized, a shape
    that does not match the stored value."""


def _data(x):
    if isinstance(x, NDArray):
        return x.data
    return jnp.asarray(x)


def _device_of(x):
    return next(iter(x.devices()))


def _as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


class KVStore:
    """A single-process key-value store over this machine's devices."""

    def __init__(self, kind: str = "local"):
        if kind not in KV_TYPES:
            raise KVStoreError(f"unknown kvstore type '{kind}'; use one of "
                               f"{', '.join(KV_TYPES)}")
        self._type = kind
        self._store: dict = {}
        self._updater = None
        self._optimizer = None
        self._reducers: dict = {}

    # -- identity -------------------------------------------------------------
    @property
    def type(self) -> str:
        return self._type

    @property
    def rank(self) -> int:
        return 0

    @property
    def num_workers(self) -> int:
        return 1

    def barrier(self) -> None:
        """Nothing to wait for in one process."""

    @property
    def is_distributed(self) -> bool:
        """Whether the store spans several processes (``'dist_sync'``)."""
        return False

    def __repr__(self):
        return f"KVStore({self._type}, {len(self._store)} keys)"

    # -- keys -------------------------------------------------------------------
    @staticmethod
    def _pairs(key, value, what):
        """``(key, values)`` pairs from one key or a list of keys."""
        if isinstance(key, (list, tuple)):
            if not isinstance(value, (list, tuple)) or len(value) != len(key):
                raise KVStoreError(f"{what}: {len(key)} keys need a list of {len(key)} values")
            return list(zip(key, value))
        return [(key, value)]

    def _get(self, key, what):
        if key not in self._store:
            raise KVStoreError(f"{what}: key {key!r} has not been initialized; call "
                               f"kv.init({key!r}, value) first")
        return self._store[key]

    # -- the API -------------------------------------------------------------------
    def init(self, key, value) -> None:
        """Stores the initial value of each key (a copy)."""
        for k, v in self._pairs(key, value, "init"):
            if k in self._store:
                raise KVStoreError(f"init: key {k!r} is already initialized")
            v = _as_list(v)[0]
            arr = _data(v)
            self._store[k] = self._home(jnp.array(arr, copy=True))

    def push(self, key, value, priority: int = 0) -> None:
        """Adds up the values pushed for each key (one per device) and
        stores the sum, or applies the optimizer with it when one is set."""
        for k, vals in self._pairs(key, value, "push"):
            stored = self._get(k, "push")
            vals = [_data(v) for v in _as_list(vals)]
            for v in vals:
                if tuple(v.shape) != tuple(stored.shape):
                    raise KVStoreError(f"push: key {k!r} holds shape {tuple(stored.shape)}, "
                                       f"a value of shape {tuple(v.shape)} was pushed")
            merged = self._reduce(vals)
            if self._updater is not None:
                weight = NDArray(self._home(stored))
                # the sum may be replicated over the pushing devices: the update
                # runs where the stored weight lives
                grad = jax.device_put(self._home(merged).astype(stored.dtype),
                                      weight.data.sharding)
                self._updater(k, NDArray(grad), weight)
                self._store[k] = weight.data
            else:
                self._store[k] = merged.astype(stored.dtype)

    def pull(self, key, out=None, priority: int = 0, ignore_sparse: bool = True) -> None:
        """Copies each key's value into the NDArrays of ``out`` (on their
        own devices)."""
        if out is None:
            raise KVStoreError("pull needs out=: the NDArray(s) to copy the value into")
        for k, outs in self._pairs(key, out, "pull"):
            stored = self._get(k, "pull")
            for o in _as_list(outs):
                if not isinstance(o, NDArray):
                    raise KVStoreError(f"pull: out must be NDArrays (jax arrays cannot be "
                                       f"written), got {type(o).__name__}")
                if tuple(o.shape) != tuple(stored.shape):
                    raise KVStoreError(f"pull: key {k!r} holds shape {tuple(stored.shape)}, "
                                       f"out has shape {o.shape}")
                o._set(self._on(stored, _device_of(o.data)).astype(o.data.dtype))

    def pushpull(self, key, value, out=None, priority: int = 0) -> None:
        """``push`` then ``pull`` (into ``value`` itself when ``out`` is None)."""
        self.push(key, value, priority)
        self.pull(key, value if out is None else out, priority)

    def broadcast(self, key, value, out, priority: int = 0) -> None:
        """``init`` with ``value`` then ``pull`` into ``out``."""
        self.init(key, value)
        self.pull(key, out, priority)

    def set_optimizer(self, optimizer) -> None:
        """Makes push update the stored weights with ``optimizer``."""
        from ..train.optimizer import get_updater
        self._optimizer = optimizer
        self._updater = get_updater(optimizer)

    def set_updater(self, updater) -> None:
        """Makes push call ``updater(key, summed_grad, stored_weight)``."""
        self._updater = updater

    _set_updater = set_updater

    @property
    def optimizer(self):
        return self._optimizer

    def save_optimizer_states(self, fname: str, dump_optimizer: bool = False) -> None:
        from ..util import atomic_write_bytes
        if self._updater is None or not hasattr(self._updater, "get_states"):
            raise KVStoreError("save_optimizer_states: no optimizer is set")
        atomic_write_bytes(fname, self._updater.get_states(dump_optimizer))

    def load_optimizer_states(self, fname: str) -> None:
        if self._updater is None or not hasattr(self._updater, "set_states"):
            raise KVStoreError("load_optimizer_states: no optimizer is set")
        with open(fname, "rb") as f:
            self._updater.set_states(f.read())

    # -- where sums happen ----------------------------------------------------------
    def _home(self, x):
        """Where a stored value lives: host memory for 'local'."""
        if self._type == "local":
            return jax.device_put(x, jax.devices("cpu")[0])
        return x

    @staticmethod
    def _on(x, device):
        """``x`` on ``device``: the local shard when x is replicated there."""
        for s in getattr(x, "addressable_shards", []):
            if s.device == device and s.data.shape == x.shape:
                return s.data
        return jax.device_put(x, device)

    def _reduce(self, vals):
        if len(vals) == 1:
            return self._home(vals[0])
        if self._type == "local":
            cpu = jax.devices("cpu")[0]
            total = jax.device_put(vals[0], cpu)
            for v in vals[1:]:
                total = total + jax.device_put(v, cpu)
            return total
        devices = [_device_of(v) for v in vals]
        if len(set(devices)) != len(devices):  # several values on one device
            total = vals[0]
            for v in vals[1:]:
                total = total + jax.device_put(v, devices[0])
            return total
        return self._allreduce(vals, devices)

    def _allreduce(self, vals, devices):
        """Sum of one value per device, by a compiled all-reduce; the result
        is replicated on those devices."""
        key = tuple(devices)
        mesh = self._reducers.get(key)
        if mesh is None:
            mesh = self._reducers[key] = Mesh(np.array(devices), ("kv",))
        shape = (len(vals),) + tuple(vals[0].shape)
        dtype = vals[0].dtype
        stacked = jax.make_array_from_single_device_arrays(
            shape, NamedSharding(mesh, P("kv")), [v.astype(dtype)[None] for v in vals])
        summed = jax.jit(lambda x: x.sum(0), out_shardings=NamedSharding(mesh, P()))
        return summed(stacked)

    # -- the Module's in-step reduction -------------------------------------------------
    def step_reducer(self, devices):
        """The function that combines gradients across ``devices`` inside a
        compiled training step (a psum over the device mesh)."""
        return devices.sum_over_devices


class DistKVStore(KVStore):
    """``'dist_sync'``: the store of one process among several joined by
    ``jax.distributed``; pushes are summed over every process."""

    def __init__(self, kind: str = "dist_sync", **settings):
        from . import distributed
        self.settings = distributed.initialize(**settings)
        super().__init__("local")
        self._type = kind

    @property
    def rank(self) -> int:
        return jax.process_index()

    @property
    def num_workers(self) -> int:
        return jax.process_count()

    @property
    def is_distributed(self) -> bool:
        return True

    def barrier(self) -> None:
        """Waits for every process (MXNet's ``kv.barrier()``)."""
        from . import distributed
        distributed.barrier("symgraph_kv_barrier")

    def _home(self, x):
        return jax.device_put(x, jax.local_devices(backend="cpu")[0])

    def _reduce(self, vals):
        # this process's sum in host memory, then the sum over the processes
        from jax.experimental import multihost_utils
        cpu = jax.local_devices(backend="cpu")[0]
        total = jax.device_put(vals[0], cpu)
        for v in vals[1:]:
            total = total + jax.device_put(v, cpu)
        if jax.process_count() == 1:
            return total
        every = multihost_utils.process_allgather(np.asarray(total))
        return self._home(jnp.asarray(every.sum(0), dtype=total.dtype))


def create(name="local", **settings) -> KVStore:
    """A store by type name ('local', 'device' or 'dist_sync'), or ``name``
    itself when it is already a KVStore. ``settings`` (coordinator,
    num_processes, process_id) go to ``jax.distributed`` for 'dist_sync';
    without them it reads the environment ``symgraph launch`` sets."""
    if isinstance(name, KVStore):
        return name
    if not isinstance(name, str):
        raise KVStoreError(f"kvstore must be a type name or a KVStore, got "
                           f"{type(name).__name__}")
    kind = ALIASES.get(name, name)
    if kind in DIST_SUPPORTED:
        return DistKVStore(kind, **settings)
    if kind in DIST_TYPES or kind.startswith("dist"):
        raise KVStoreError(
            f"kvstore '{name}' is not supported; across processes symgraph supports "
            f"'dist_sync' (gradients summed inside each synchronous step), on one machine "
            f"'local' and 'device'")
    if settings:
        raise KVStoreError(f"kvstore '{name}' takes no settings ({', '.join(settings)} "
                           f"are for 'dist_sync')")
    return KVStore(kind)
