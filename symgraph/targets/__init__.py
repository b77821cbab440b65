"""Which device a memory figure is for.

    from symgraph import targets
    t = targets.get('h100')            # a GPU description, compiled deviceless
    t = targets.get('my_gpu.txtpb')    # a user's description file
    t = targets.get('gpu')             # the GPU present (compiled on it, autotuned)
    t = targets.get('cpu')             # this machine's CPU (the default)
    with t.scope():                    # jax.jit(...).lower(...).compile() is for t
        compiled = step.lower().compile()
    t.check(compiled)                  # refuses a program compiled for another platform

A *target* is the device XLA compiles a program for. ``cpu`` and ``gpu`` are
devices present here; every other name is a GPU *description*: XLA's
``GpuTargetConfig`` in text form, shipped with the package (``specs/``,
written from NVIDIA's public specifications) or given as a file. A
description is compiled *deviceless*: XLA's GPU compiler runs on this
machine for that GPU (``jax.experimental.topologies``; the CUDA plugin,
``pip install 'symgraph[gpu-plan]'``, no GPU or driver needed).

What a deviceless figure leaves out (``DEVICELESS_GAPS``): without a device
nothing is autotuned, so every cuDNN convolution gets no workspace and gemms
take a default configuration. A convolution's workspace lives only during
its call, so at most one is alive at a time; XLA's autotuner considers only
algorithms whose workspace fits its scratch limit, 4 GiB by default
(``TF_CUDNN_WORKSPACE_LIMIT_IN_MB``). ``Target.workspace`` is that limit:
the allowance a "does it fit" answer adds for a net with convolutions.

How much of the device a program may use: JAX's GPU client preallocates
``XLA_PYTHON_CLIENT_MEM_FRACTION`` (default 0.75) of the device's memory
and XLA's buffers live in that pool; the rest is the CUDA context's and
other processes'. ``Target.pool`` is that figure.
"""
from __future__ import annotations

import contextlib
import difflib
import functools
import os
import re
import tempfile
from dataclasses import dataclass
from importlib import resources

from ..errors import SymgraphError

SPECS = "specs"
# the shipped descriptions, by file stem, and the short names users type
ALIASES = {"h100": "h100-sxm-80gb", "h100-sxm": "h100-sxm-80gb",
           "a100": "a100-sxm-80gb", "a100-80gb": "a100-sxm-80gb",
           "a100-40gb": "a100-sxm-40gb", "l4": "l4-24gb"}
# XLA's default cuDNN scratch limit (TF_CUDNN_WORKSPACE_LIMIT_IN_MB = 4096)
WORKSPACE_LIMIT = 4 << 30
# JAX's GPU client preallocates this fraction of the device's memory
DEFAULT_MEM_FRACTION = 0.75
DEVICELESS_GAPS = ("no autotuning: cuDNN convolutions get no workspace (the allowance "
                   "covers the one alive at a time) and gemms a default configuration")
GPU_EXTRA = "pip install 'symgraph[gpu-plan]'"


class TargetError(SymgraphError):
    """An unknown target, a description that does not parse, a missing
    plugin, or a program compiled for another device than asked."""


@dataclass(frozen=True)
class Target:
    """A device to compile for.

    ``name``: what the user asked for ('cpu', 'h100', a file's path);
    ``backend``: 'cpu' or 'gpu'; ``device``: the device's own name;
    ``memory``: its memory in bytes (None for the CPU: the host's);
    ``config``: the GpuTargetConfig text of a description (compiled
    deviceless), None for a device present."""

    name: str
    backend: str
    device: str
    memory: int | None = None
    config: str | None = None

    @property
    def deviceless(self) -> bool:
        return self.config is not None

    @property
    def pool(self) -> int | None:
        """Bytes XLA's buffers may take on the device: its memory times
        JAX's preallocated fraction (``XLA_PYTHON_CLIENT_MEM_FRACTION``)."""
        if self.memory is None:
            return None
        return int(self.memory * mem_fraction())

    @property
    def workspace(self) -> int:
        """The allowance for a convolution's cuDNN workspace, which a
        deviceless figure leaves out (0 where the figure has it)."""
        return WORKSPACE_LIMIT if self.deviceless else 0

    @contextlib.contextmanager
    def scope(self):
        """Inside, ``jax.jit(...).lower(...).compile()`` compiles for this
        target: a description's topology mesh (arguments without a
        sharding join it), or the device present."""
        import jax
        if self.deviceless:
            with jax.set_mesh(_mesh(self.config)):
                yield
        else:
            with jax.default_device(jax.devices(self.backend)[0]):
                yield

    def compile(self, lowerable, compiler_options: dict | None = None):
        """``lowerable.lower()`` (a ``symgraph.xla.Step``) or a
        ``jax.stages.Lowered``, compiled for this target and checked."""
        with self.scope():
            lowered = lowerable.lower() if hasattr(lowerable, "jit") else lowerable
            compiled = lowered.compile(compiler_options or None)
        self.check(compiled)
        return compiled

    def check(self, compiled) -> None:
        """TargetError unless ``compiled`` is a program for this backend:
        a lowering that lost the target's shardings compiles for the CPU
        without a word (``lower(lowering_platforms=('cuda',))`` does)."""
        got = compiled_platform(compiled)
        if got is not None and got != self.backend:
            raise TargetError(f"target {self.name}: the program was compiled for the "
                              f"{got.upper()}, not the {self.backend.upper()}; its figures "
                              f"would not be this device's")

    def to_json(self) -> dict:
        return {"name": self.name, "backend": self.backend, "device": self.device,
                "deviceless": self.deviceless, "memory": self.memory, "pool": self.pool,
                "workspace_allowance": self.workspace}

    def describe(self) -> str:
        """One line: the device and how its figure is had (``describe``)."""
        return describe(self.to_json())


def describe(t: dict) -> str:
    """One line for a target as ``Target.to_json`` gives it (reports keep
    the dict): the device and how its figure is had."""
    if t["backend"] == "cpu":
        return f"{t['device']} (cpu)"
    how = ("compiled deviceless: " + DEVICELESS_GAPS if t["deviceless"]
           else "compiled on the device, autotuned")
    mem = "" if t["memory"] is None else f", {_gib(t['memory'])} GiB"
    return f"{t['device']} ({t['name']}{mem}; {how})"


def mem_fraction() -> float:
    """JAX's preallocated fraction of a GPU's memory, as the environment sets it."""
    text = os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION")
    try:
        f = float(text) if text else DEFAULT_MEM_FRACTION
    except ValueError:
        raise TargetError(f"XLA_PYTHON_CLIENT_MEM_FRACTION={text!r} is not a number") from None
    return f if 0 < f <= 1 else DEFAULT_MEM_FRACTION


def compiled_platform(compiled) -> str | None:
    """'cpu' or 'gpu': the platform a ``jax.stages.Compiled`` runs on, read
    from its input shardings' devices (None for a program with no inputs)."""
    import jax
    # a staged step's sequence of programs has no shardings of its own
    for s in jax.tree.leaves(getattr(compiled, "input_shardings", None)):
        for d in getattr(s, "device_set", ()):
            return "gpu" if d.platform in ("gpu", "cuda", "rocm") else d.platform
    return None


def names() -> list:
    """The shipped descriptions' names (file stems) and their short names."""
    stems = sorted(p.name[:-len(".txtpb")] for p in resources.files(__package__)
                   .joinpath(SPECS).iterdir() if p.name.endswith(".txtpb"))
    return ["cpu", "gpu"] + sorted(ALIASES) + stems


def get(spec=None) -> Target:
    """The target ``spec`` names: None or 'cpu', 'gpu' (the GPU present),
    a shipped description ('h100', 'a100', 'a100-40gb', 'l4' or a file
    stem of ``specs/``), a path to a GpuTargetConfig text file, or a
    Target (returned as it is)."""
    if isinstance(spec, Target):
        return spec
    if spec is None or spec == "cpu":
        return Target("cpu", "cpu", "this machine's CPU")
    if not isinstance(spec, (str, os.PathLike)):
        raise TargetError(f"target={spec!r}: give a name ({', '.join(names())}) or a "
                          f"description file")
    spec = os.fspath(spec)
    if spec == "gpu":
        return _present_gpu()
    stem = ALIASES.get(spec.lower(), spec.lower())
    shipped = resources.files(__package__).joinpath(SPECS, stem + ".txtpb")
    if shipped.is_file():
        return from_text(shipped.read_text(), spec)
    if os.path.isfile(spec):
        with open(spec, encoding="utf-8", errors="replace") as f:
            return from_text(f.read(), spec)
    if os.sep in spec or spec.endswith((".txtpb", ".pbtxt", ".textproto")):
        raise TargetError(f"target {spec!r}: no such description file")
    near = difflib.get_close_matches(spec.lower(), names(), n=1, cutoff=0.5)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    raise TargetError(f"unknown target {spec!r}{hint} (targets: {', '.join(names())}, or a "
                      f"GpuTargetConfig text file)")


def from_text(text: str, name: str) -> Target:
    """A Target from a GpuTargetConfig in text form; TargetError naming the
    line XLA's parser stopped at when it does not parse."""
    memory = _field(text, "device_memory_size")
    device = _string_field(text, "device_description_str") or name
    _mesh_checked(text, name)
    return Target(name, "gpu", device, int(memory) if memory else None, text)


def _field(text: str, key: str):
    m = re.search(rf"^\s*{key}\s*:\s*([0-9.eE+]+)", text, re.M)
    return float(m.group(1)) if m else None


def _string_field(text: str, key: str):
    m = re.search(rf'^\s*{key}\s*:\s*"([^"]*)"', text, re.M)
    return m.group(1) if m else None


def _mesh_checked(text: str, name: str):
    try:
        return _mesh(text)
    except TargetError as err:
        raise TargetError(f"target {name}: {err}") from None


@functools.lru_cache(maxsize=8)
def _mesh(config: str):
    """A one-device mesh of the described GPU (``jax.experimental.topologies``)."""
    try:
        import jax_plugins.xla_cuda12  # noqa: F401  (the CUDA plugin: GPU compiler)
    except ImportError:
        raise TargetError(f"compiling for a GPU description needs JAX's CUDA plugin: "
                          f"{GPU_EXTRA}") from None
    import jax
    from jax.experimental import topologies
    with _stderr_captured() as log:
        try:
            topo = topologies.get_topology_desc(platform="cuda", target_config=config,
                                                topology="1x1x1")
        except NotImplementedError:
            raise TargetError("JAX's CUDA plugin did not start (a CUDA driver without a "
                              "GPU?): run with JAX_PLATFORMS=cpu") from None
        except Exception as err:  # XLA's parser logs the reason to stderr
            why = _parse_error(log()) or str(err).splitlines()[0]
            raise TargetError(f"the description does not parse: {why}") from None
        mesh = topologies.make_mesh(topo, (1,), ("x",))
    _replay(log())
    return mesh


def _parse_error(log: str) -> str | None:
    m = re.search(r"Error parsing text-format [\w.]+: (.*)", log)
    return m.group(1).strip() if m else None


@contextlib.contextmanager
def _stderr_captured():
    """Captures file descriptor 2 (XLA's C++ log) while inside; yields a
    function returning what was written."""
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        text = []

        def read():
            if not text:
                tmp.seek(0)
                text.append(tmp.read().decode(errors="replace"))
            return text[0]
        try:
            yield read
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            read()  # kept for a call after the block


def _present_gpu() -> Target:
    import jax
    try:
        dev = jax.devices("gpu")[0]
    except RuntimeError:
        raise TargetError("target gpu: no GPU here; name a description to compile for "
                          "one without it (h100, a100, a100-40gb, l4)") from None
    stats = dev.memory_stats() or {}
    memory = stats.get("bytes_limit")
    if memory is not None:  # bytes_limit is the pool already: the device's memory is more
        memory = int(memory / mem_fraction())
    return Target("gpu", "gpu", dev.device_kind, memory)


def _gib(n) -> str:
    return "?" if n is None else f"{n / 2 ** 30:.1f}"


def use_cpu_without_gpu() -> None:
    """Where JAX's CUDA plugin is installed but no NVIDIA GPU is (a laptop
    that installed the gpu-plan extra), make JAX start on the CPU: without
    it the plugin's start-up prints a long traceback and never registers,
    and descriptions cannot be compiled. A platform the user chose is kept
    (its start-up noise is held back all the same)."""
    if os.path.exists("/dev/nvidiactl"):
        return
    import importlib.util
    try:
        if importlib.util.find_spec("jax_plugins.xla_cuda12") is None:
            return
    except (ImportError, ValueError):
        return
    # the plugin logs "no CUDA driver" each time it is loaded: on import here,
    # and when the backends start (``start_quietly``)
    with _stderr_captured() as log:
        import jax
    _replay(log())
    if not os.environ.get("JAX_PLATFORMS") and not jax.config.jax_platforms:
        jax.config.update("jax_platforms", "cpu")
    _QUIET_START.append(True)


_QUIET_START: list = []


def start_quietly() -> None:
    """Starts JAX's backends with the CUDA plugin's start-up noise held back
    where the plugin is installed without a GPU (the command line calls it;
    a library must not start the backends at import: ``jax.distributed``
    needs to come first)."""
    if _QUIET_START:
        import jax
        with _stderr_captured() as log:
            jax.devices()
        _replay(log())


# what the CUDA plugin logs, without a GPU, each time it is loaded
_NOISE = re.compile(r"All log messages before absl::InitializeLog|cudart_stub\.cc.*"
                    r"Could not find cuda drivers")


def _replay(text: str) -> None:
    """Writes back to stderr what was captured, less the plugin's noise."""
    import sys
    rest = [line for line in text.splitlines(keepends=True) if not _NOISE.search(line)]
    if rest:
        sys.stderr.write("".join(rest))
