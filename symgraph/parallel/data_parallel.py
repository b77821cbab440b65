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

    def __init__(self, contexts: Context | Sequence[Context] | None = None):
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
        self.n = len(self.devices)
        self.mesh = Mesh(np.array(self.devices), (BATCH_AXIS,)) if self.n > 1 else None
        self._shardings = None

    def __repr__(self):
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
        return jax.device_put(tree, self.replicated())

    def put_batch(self, tree):
        """Copies host arrays to the devices, split along the batch axis
        (arrays already placed so are passed through)."""
        target = self.batch_sharded()
        leaves = jax.tree_util.tree_leaves(tree)
        if all(isinstance(x, jax.Array) and x.sharding == target for x in leaves):
            return tree
        if self.n > 1:
            for x in jax.tree_util.tree_leaves(tree):
                if np.ndim(x) == 0 or np.shape(x)[0] % self.n:
                    raise BindError(
                        f"a batch of {np.shape(x)[0] if np.ndim(x) else 'no'} samples cannot be "
                        f"split evenly over {self.n} devices; use a batch size that is a "
                        f"multiple of {self.n}")
        return jax.device_put(tree, self.batch_sharded())

    def check_batch_size(self, batch_size: int, what: str = "batch size") -> None:
        if batch_size % self.n:
            raise BindError(f"{what} {batch_size} cannot be split evenly over {self.n} "
                            f"devices ({self.contexts}); use a multiple of {self.n}")

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
