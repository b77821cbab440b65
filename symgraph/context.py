"""Device contexts: ``sg.cpu(i)`` and ``sg.gpu(i)`` name JAX devices.

The index counts this process's own devices (``jax.local_devices``): in
one of several processes joined by ``jax.distributed``, ``sg.cpu(0)`` is
that process's first CPU device, as in MXNet."""
from __future__ import annotations

import jax

from .errors import ContextError


class Context:
    """A device: ``cpu(0)``, ``gpu(1)``. Compares equal by kind and index."""

    __slots__ = ("device_type", "device_id")

    def __init__(self, device_type: str = "cpu", device_id: int = 0):
        if device_type not in ("cpu", "gpu"):
            raise ContextError(f"unknown device type '{device_type}'; use cpu or gpu")
        self.device_type = device_type
        self.device_id = int(device_id)

    @property
    def jax_device(self) -> jax.Device:
        """The JAX device; ContextError if this machine has no such device."""
        try:
            devs = jax.local_devices(backend=self.device_type)
        except RuntimeError:
            devs = []
        if self.device_id >= len(devs) or self.device_id < 0:
            have = f"{len(devs)} {self.device_type} device(s)" if devs else \
                f"no {self.device_type} device"
            raise ContextError(f"{self} does not exist: this machine has {have}")
        return devs[self.device_id]

    def __eq__(self, other):
        return isinstance(other, Context) and (self.device_type, self.device_id) == (
            other.device_type, other.device_id)

    def __hash__(self):
        return hash((self.device_type, self.device_id))

    def __repr__(self):
        return f"{self.device_type}({self.device_id})"

    @staticmethod
    def of(device: jax.Device) -> "Context":
        kind = "cpu" if device.platform == "cpu" else "gpu"
        return Context(kind, jax.local_devices(backend=kind).index(device))


def cpu(device_id: int = 0) -> Context:
    return Context("cpu", device_id)


def gpu(device_id: int = 0) -> Context:
    return Context("gpu", device_id)


def current_context() -> Context:
    return Context.of(jax.local_devices()[0])


def num_gpus() -> int:
    try:
        return len(jax.local_devices(backend="gpu"))
    except RuntimeError:
        return 0
