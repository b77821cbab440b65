"""Data parallelism: one program, the batch split over a mesh of devices.

A ``DeviceSet`` is the devices a Module runs on. With one device, a
program is a plain ``jax.jit`` on it. With several, the program is wrapped
in ``jax.shard_map`` over a one-axis ``Mesh`` (axis ``'batch'``): every
device runs the same lowered graph on its slice of the batch, and the
gradients are summed with ``psum`` inside the same compiled step, so the
optimizer then updates identical replicated weights on every device (what
``pmap`` data parallelism did; ``pmap`` is in maintenance mode since JAX
0.8 and is built on ``jit`` + ``shard_map`` itself).

Why a sum and not a mean: the symbolic gradient of a per-sample loss head
(SoftmaxOutput with the default ``normalization='null'``, linear
regression) over a batch is the sum of the per-sample gradients, so the
sum over devices of each device's gradient is exactly the single-device
gradient of the whole batch; the optimizer's ``rescale_grad = 1/batch``
then makes it a mean, as MXNet's KVStore does. Heads normalized by the
batch (``normalization='batch'``) are rewritten per device with
``grad_scale / n`` (see ``train.step``), which again makes the sum exact;
heads normalized by the count of valid labels (``'valid'``) divide by that
count summed over the devices (a ``psum`` inside the step), since the
devices' counts differ.
There is no automatic differentiation through ``shard_map`` here (the
backward is the explicit gradient graph), so the replicated-input gradient
trap of ``check_vma`` does not arise; ``check_vma=False`` keeps
collectives plain sums.

Across processes (``DeviceSet(contexts, processes=True)`` after
``jax.distributed`` joined them, what a ``'dist_sync'`` kvstore asks for)
the mesh holds the same local devices of every process, in process order,
so the program and its ``psum`` span all of them. Each process then
passes its own rows of the batch (``put_batch`` assembles the global batch
with ``jax.make_array_from_process_local_data``), replicated values are
process 0's (broadcast, so an initializer seeded differently per process
cannot leave the replicas apart), and ``local_value`` gives back this
process's rows of a result.
"""
from __future__ import annotations

from typing import Callable, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

from ..context import Context, current_context
from ..errors import BindError, ContextError

BATCH_AXIS = "batch"
P = PartitionSpec


class DeviceSet:
    """The devices of a Module: contexts -> JAX devices, mesh, shardings."""

    def __init__(self, contexts: Context | Sequence[Context] | None = None,
                 processes: bool = False):
        if contexts is None:
            contexts = [current_context()]
        elif isinstance(contexts, Context):
            contexts = [contexts]
        contexts = list(contexts)
        if not contexts:
            raise ContextError("a Module needs at least one context")
        for c in contexts:
            if not isinstance(c, Context):
                raise ContextError(f"context must be sg.cpu(i) or sg.gpu(i), got {c!r}")
        if len(set(contexts)) != len(contexts):
            raise ContextError(f"the same device appears twice in {contexts}; data parallel "
                               f"training needs distinct devices")
        kinds = {c.device_type for c in contexts}
        if len(kinds) > 1:
            raise ContextError(f"contexts mix device types {sorted(kinds)}; use one kind")
        self.contexts = contexts
        self.devices = [c.jax_device for c in contexts]
        self.n_local = len(self.devices)
        self.processes = jax.process_count() if processes else 1
        self.process_index = jax.process_index() if processes else 0
        if self.processes > 1:
            self.devices = self._every_process(contexts[0].device_type, self.devices)
        self.n = len(self.devices)
        self.mesh = Mesh(np.array(self.devices), (BATCH_AXIS,)) if self.n > 1 else None
        self._shardings = None

    @staticmethod
    def _every_process(kind, mine):
        """The devices at the local indices of ``mine`` in every process
        (process order): each process must name the same local devices."""
        local = jax.local_devices(backend=kind)
        idx = [local.index(d) for d in mine]
        by_process: dict = {}
        for d in jax.devices(kind):
            by_process.setdefault(d.process_index, []).append(d)
        out = []
        for p in sorted(by_process):
            devs = by_process[p]
            if max(idx) >= len(devs):
                raise ContextError(f"process {p} has {len(devs)} {kind} device(s), this one "
                                   f"trains on local device {max(idx)}; give every process "
                                   f"the same devices (symgraph launch --devices-per-process)")
            out += [devs[i] for i in idx]
        return out

    def __repr__(self):
        if self.processes > 1:
            return f"DeviceSet({self.contexts} in each of {self.processes} processes)"
        return f"DeviceSet({self.contexts})"

    # -- shardings ------------------------------------------------------------
    def _make_shardings(self):
        if self._shardings is None:
            if self.n == 1:
                one = SingleDeviceSharding(self.devices[0])
                self._shardings = (one, one)
            else:
                self._shardings = (NamedSharding(self.mesh, P()),
                                   NamedSharding(self.mesh, P(BATCH_AXIS)))
        return self._shardings

    def replicated(self):
        """Sharding of parameters and optimizer state: a full copy per device."""
        return self._make_shardings()[0]

    def batch_sharded(self):
        """Sharding of a batch: split along axis 0 over the devices."""
        return self._make_shardings()[1]

    def put_replicated(self, tree):
        if self.processes == 1:
            return jax.device_put(tree, self.replicated())
        from jax.experimental import multihost_utils
        leaves, treedef = jax.tree_util.tree_flatten(tree)
        # process 0's values everywhere (np.asarray reads a replicated global array locally)
        host = multihost_utils.broadcast_one_to_all([np.asarray(x) for x in leaves])
        target = self.replicated()
        return treedef.unflatten([jax.device_put(np.asarray(h), target) for h in host])

    def put_batch(self, tree):
        """Copies host arrays to the devices, split along the batch axis
        (arrays already placed so are passed through). Across processes
        each passes its own rows: the batch is theirs concatenated in
        process order."""
        target = self.batch_sharded()
        leaves = jax.tree_util.tree_leaves(tree)
        if all(isinstance(x, jax.Array) and x.sharding == target for x in leaves):
            return tree
        if self.n > 1:
            for x in jax.tree_util.tree_leaves(tree):
                if np.ndim(x) == 0 or np.shape(x)[0] % self.n_local:
                    raise BindError(
                        f"a batch of {np.shape(x)[0] if np.ndim(x) else 'no'} samples cannot be "
                        f"split evenly over {self.n_local} devices; use a batch size that is "
                        f"a multiple of {self.n_local}")
        if self.processes > 1:
            def assemble(x):
                x = np.asarray(x)
                return jax.make_array_from_process_local_data(
                    target, x, (x.shape[0] * self.processes,) + x.shape[1:])
            return jax.tree_util.tree_map(assemble, tree)
        return jax.device_put(tree, self.batch_sharded())

    def local_value(self, x):
        """This process's part of a program's result: its rows of a
        batch-split array, one copy of a replicated one (``x`` itself in
        one process)."""
        if self.processes == 1 or not isinstance(x, jax.Array) or x.is_fully_addressable:
            return x
        if x.is_fully_replicated:
            return x.addressable_shards[0].data
        rows = {}
        for s in x.addressable_shards:
            rows.setdefault(s.index[0].start or 0, s.data)
        return np.concatenate([np.asarray(rows[k]) for k in sorted(rows)])

    def global_shape(self, shape) -> tuple:
        """The shape of a batch whose rows every process contributes
        ``shape[0]`` of."""
        return (shape[0] * self.processes,) + tuple(shape[1:])

    def check_batch_size(self, batch_size: int, what: str = "batch size") -> None:
        if batch_size % self.n_local:
            raise BindError(f"{what} {batch_size} cannot be split evenly over {self.n_local} "
                            f"devices ({self.contexts}); use a multiple of {self.n_local}")

    # -- programs ----------------------------------------------------------------
    def spmd(self, local_fn: Callable, in_specs, out_specs) -> Callable:
        """``local_fn`` as one program over all devices: itself on one
        device, ``shard_map`` over the mesh on several. Specs use
        ``P(BATCH_AXIS)`` for batch-split values and ``P()`` for replicated."""
        if self.n == 1:
            return local_fn
        return jax.shard_map(local_fn, mesh=self.mesh, in_specs=in_specs, out_specs=out_specs,
                             check_vma=False)

    def sum_over_devices(self, tree):
        """Inside ``spmd``: the sum over devices (nothing on one device)."""
        if self.n == 1:
            return tree
        return jax.lax.psum(tree, BATCH_AXIS)

    def mean_over_devices(self, tree):
        if self.n == 1:
            return tree
        return jax.lax.pmean(tree, BATCH_AXIS)

    def device_index(self):
        """Inside ``spmd``: this device's position in the mesh (0 on one)."""
        if self.n == 1:
            return 0
        return jax.lax.axis_index(BATCH_AXIS)
