"""Device contexts: ``sg.cpu(i)`` and ``sg.gpu(i)`` name JAX devices.

The index counts this process's own devices (``jax.local_devices``): in
one of several processes joined by ``jax.distributed``, ``sg.cpu(0)`` is
that process's first CPU device, as in MXNet."""
from __future__ import annotations

import os
import re

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
            hint = ""
            if self.device_type == "cpu":
                hint = (f"; to simulate {self.device_id + 1} or more CPU devices, set "
                        f"XLA_FLAGS=--xla_force_host_platform_device_count={self.device_id + 1}"
                        " before JAX starts (e.g. in the shell), or call "
                        "symgraph.context.simulate_cpu_devices(n) first")
            raise ContextError(f"{self} does not exist: this machine has {have}{hint}")
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


_COUNT_FLAG = "--xla_force_host_platform_device_count"


def simulate_cpu_devices(n: int) -> int:
    """Ask XLA for ``n`` CPU devices (``XLA_FLAGS=--xla_force_host_platform_device_count``)
    when this process has fewer; returns how many it will have.

    XLA reads the flag once, when JAX first uses a device, so this must run
    before that (importing symgraph is fine); later, a ContextError says so.
    A larger count already in ``XLA_FLAGS`` is kept."""
    flags = os.environ.get("XLA_FLAGS", "")
    found = re.search(_COUNT_FLAG + r"=(\d+)", flags)
    have = int(found.group(1)) if found else 1
    if have >= n:
        return have
    try:
        from jax._src import xla_bridge  # no public way to ask whether JAX has started
        started = xla_bridge.backends_are_initialized()
    except (ImportError, AttributeError):
        started = False
    if started:
        have = len(jax.local_devices(backend="cpu"))
        if have >= n:
            return have
        raise ContextError(f"cannot simulate {n} CPU devices: JAX has started with {have}; "
                           f"call simulate_cpu_devices before anything uses a device, or set "
                           f"XLA_FLAGS={_COUNT_FLAG}={n} before starting Python")
    flags = re.sub(_COUNT_FLAG + r"=\S*", "", flags).split()
    os.environ["XLA_FLAGS"] = " ".join(flags + [f"{_COUNT_FLAG}={n}"])
    return n


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
