"""Several processes on ``jax.distributed``: who this process is, and one
call that joins it to the others.

A process learns its place from environment variables, which
``symgraph launch`` sets for every process it starts (set them by hand on
a cluster):

    SYMGRAPH_COORDINATOR     host:port of process 0's coordinator service
    SYMGRAPH_NUM_PROCESSES   how many processes take part
    SYMGRAPH_PROCESS_ID      this process's rank, 0 .. N-1
    SYMGRAPH_LOCAL_DEVICES   devices each process uses (informational; on
                             CPU the launcher also sets XLA_FLAGS=
                             --xla_force_host_platform_device_count=K)
    SYMGRAPH_LOCAL_DEVICE_IDS  optional, e.g. 2,3: the GPUs this process
                             sees (jax.distributed's local_device_ids;
                             CPU devices ignore it). launch gives rank r
                             the ids r*K .. r*K+K-1.

Under SLURM (``srun``) the rank and count come from ``SLURM_PROCID`` and
``SLURM_NTASKS`` when the SYMGRAPH_ variables are not set, and the
coordinator is the first host of ``SLURM_STEP_NODELIST`` (or
``SLURM_JOB_NODELIST``) on port ``SYMGRAPH_PORT`` (default 12321).

``initialize()`` (what ``sg.kv.create('dist_sync')`` calls) passes those
to ``jax.distributed.initialize`` before JAX starts its backend; after it
``jax.devices()`` lists every process's devices and one jitted program
can span them all. CPU collectives go through gloo.
"""
from __future__ import annotations

import os
import re
import sys

from ..errors import SymgraphError

ENV_COORDINATOR = "SYMGRAPH_COORDINATOR"
ENV_NUM_PROCESSES = "SYMGRAPH_NUM_PROCESSES"
ENV_PROCESS_ID = "SYMGRAPH_PROCESS_ID"
ENV_LOCAL_DEVICES = "SYMGRAPH_LOCAL_DEVICES"
ENV_LOCAL_DEVICE_IDS = "SYMGRAPH_LOCAL_DEVICE_IDS"
ENV_PORT = "SYMGRAPH_PORT"
DEFAULT_SLURM_PORT = 12321
# how long process 0 waits for the others to connect (jax's default is 300 s)
INIT_TIMEOUT_S = 120
# a process that ends waits this long for the others at JAX's shutdown
# barrier (jax: 300 s); a dead process is noticed after HEARTBEAT_S (jax: 100)
SHUTDOWN_TIMEOUT_S = 30
HEARTBEAT_S = 30


class DistributedError(SymgraphError):
    """A process cannot join (or has not joined) the others: missing or
    contradictory settings, JAX started too early."""


def _int_env(env, name):
    text = env.get(name)
    if text is None or text == "":
        return None
    try:
        return int(text)
    except ValueError:
        raise DistributedError(f"{name}={text!r} is not a whole number") from None


def first_slurm_host(nodelist: str) -> str:
    """The first host of a SLURM node list: ``'node[03-05,9],gpu1'`` -> ``'node03'``."""
    m = re.match(r"([^,\[]*)(?:\[([^\]]*)\])?", nodelist.strip())
    prefix, ranges = m.group(1), m.group(2)
    if not ranges:
        return prefix
    first = ranges.split(",")[0].split("-")[0]
    return prefix + first


def settings_from_env(env=None) -> dict | None:
    """``{'coordinator', 'num_processes', 'process_id'}`` from the
    SYMGRAPH_ variables (or SLURM's); None when neither names more than
    this one process."""
    env = os.environ if env is None else env
    num = _int_env(env, ENV_NUM_PROCESSES)
    rank = _int_env(env, ENV_PROCESS_ID)
    coord = env.get(ENV_COORDINATOR) or None
    if num is None and rank is None and coord is None:
        num, rank = _int_env(env, "SLURM_NTASKS"), _int_env(env, "SLURM_PROCID")
        nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
        if num is None or num <= 1 or rank is None or not nodes:
            return None
        port = _int_env(env, ENV_PORT) or DEFAULT_SLURM_PORT
        coord = f"{first_slurm_host(nodes)}:{port}"
    missing = [n for n, v in ((ENV_COORDINATOR, coord), (ENV_NUM_PROCESSES, num),
                              (ENV_PROCESS_ID, rank)) if v is None]
    if missing:
        raise DistributedError(f"{', '.join(missing)} not set: a process started by hand "
                               f"needs {ENV_COORDINATOR}, {ENV_NUM_PROCESSES} and "
                               f"{ENV_PROCESS_ID} (symgraph launch sets them)")
    settings = check_settings(coord, num, rank)
    ids = env.get(ENV_LOCAL_DEVICE_IDS)
    if ids:
        try:
            settings["local_device_ids"] = [int(i) for i in ids.split(",")]
        except ValueError:
            raise DistributedError(f"{ENV_LOCAL_DEVICE_IDS}={ids!r} is not a list of device "
                                   f"numbers such as 0,1") from None
    return settings


def check_settings(coordinator, num_processes, process_id) -> dict:
    if not isinstance(coordinator, str) or not re.fullmatch(r"[^\s:]+:\d+", coordinator):
        raise DistributedError(f"coordinator {coordinator!r} is not HOST:PORT")
    if num_processes < 1:
        raise DistributedError(f"the number of processes must be at least 1, got "
                               f"{num_processes}")
    if not 0 <= process_id < num_processes:
        raise DistributedError(f"process id {process_id} is not in [0, {num_processes})")
    return {"coordinator": coordinator, "num_processes": int(num_processes),
            "process_id": int(process_id)}


def is_initialized() -> bool:
    """Whether this process has joined others through jax.distributed."""
    from jax._src import distributed
    return distributed.global_state.client is not None


def initialize(coordinator: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, timeout_s: int = INIT_TIMEOUT_S,
               local_device_ids=None) -> dict:
    """Joins this process to the others (``jax.distributed.initialize``),
    from the arguments or else the environment; returns the settings used.
    A second call in the same process changes nothing. Must run before JAX
    computes anything (JAX's own rule)."""
    import jax
    given = (coordinator, num_processes, process_id)
    if all(v is None for v in given):
        settings = settings_from_env()
        if settings is None:
            raise DistributedError(
                "no other processes to join: run the script under `symgraph launch -n N -- "
                f"python SCRIPT` or set {ENV_COORDINATOR}, {ENV_NUM_PROCESSES} and "
                f"{ENV_PROCESS_ID}")
    elif any(v is None for v in given):
        raise DistributedError("pass coordinator, num_processes and process_id together "
                               "(or none of them, to read the environment)")
    else:
        settings = check_settings(coordinator, int(num_processes), int(process_id))
    if local_device_ids is not None:
        settings["local_device_ids"] = [int(i) for i in local_device_ids]
    if is_initialized():
        have = {"num_processes": jax.process_count(), "process_id": jax.process_index()}
        want = {k: settings[k] for k in have}
        if have != want:
            raise DistributedError(f"this process already joined as {have}; cannot join "
                                   f"again as {want}")
        return settings
    from jax._src import xla_bridge
    if xla_bridge.backends_are_initialized():
        raise DistributedError(
            "jax.distributed must start before JAX does: call sg.kv.create('dist_sync') "
            "(or symgraph.parallel.distributed.initialize()) at the top of the script, "
            "before creating any Module or array")
    if settings["process_id"] == 0:
        _check_port_free(settings["coordinator"])
    try:  # gloo is the default in jax 0.10; set it so an older default cannot hang
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    except (AttributeError, ValueError):  # pragma: no cover - option renamed or gone
        pass
    jax.distributed.initialize(coordinator_address=settings["coordinator"],
                               num_processes=settings["num_processes"],
                               process_id=settings["process_id"],
                               local_device_ids=settings.get("local_device_ids"),
                               initialization_timeout=int(timeout_s),
                               heartbeat_timeout_seconds=HEARTBEAT_S,
                               shutdown_timeout_seconds=SHUTDOWN_TIMEOUT_S)
    if settings["num_processes"] > 1:
        _exit_on_uncaught_exception()
    return settings


def _check_port_free(coordinator: str) -> None:
    """Process 0 serves the coordinator on its port (all interfaces): a
    port in use aborts the whole process inside JAX, so say so first."""
    import errno
    import socket
    port = int(coordinator.rpartition(":")[2])
    with socket.socket() as s:
        try:
            s.bind(("", port))
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                raise DistributedError(f"coordinator port {port} is in use; process 0 serves "
                                       f"the coordinator there: pick a free port") from None


def _exit_on_uncaught_exception() -> None:
    """An uncaught exception ends this process at once (exit 1) after its
    traceback: at a normal exit JAX waits for the others at a shutdown
    barrier they never reach while they wait for this one in a collective
    (jax#38503), so the run would hang instead of failing."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        try:
            previous(kind, value, tb)
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(1)

    sys.excepthook = hook


def is_writer() -> bool:
    """Whether this process writes shared files (checkpoints): process 0,
    or a process that joined no others. Does not start JAX."""
    if not is_initialized():
        return True
    import jax
    return jax.process_index() == 0


def check_same_everywhere(value: int, what: str) -> None:
    """DistributedError in every process when the processes' ``value``
    differ (a process with fewer steps would leave the others waiting in a
    collective for ever)."""
    if not is_initialized():
        return
    import jax
    import numpy as np
    if jax.process_count() == 1:
        return
    from jax.experimental import multihost_utils
    every = [int(v) for v in np.ravel(multihost_utils.process_allgather(
        np.asarray([int(value)], np.int64)))]
    if len(set(every)) > 1:
        seen = ", ".join(f"rank {r}: {v}" for r, v in enumerate(every))
        raise DistributedError(f"the processes differ in {what} ({seen}); every process must "
                               f"run the same steps (give every part the same number of "
                               f"batches)")


def barrier(name: str = "symgraph_barrier") -> None:
    """Waits until every process reaches the barrier of this name."""
    if not is_initialized():
        return
    import jax
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils
        multihost_utils.sync_global_devices(name)
