"""Start N processes of a command on this machine, joined for training
in several processes (as MXNet's tools/launch.py --launcher local):

    symgraph launch -n 2 --devices-per-process 2 -- python train.py --epochs 3

Every process gets these environment variables (read by
sg.kv.create('dist_sync'), which joins it to the others through
jax.distributed):

    SYMGRAPH_COORDINATOR     127.0.0.1:PORT, served by process 0
    SYMGRAPH_NUM_PROCESSES   N
    SYMGRAPH_PROCESS_ID      its rank, 0 .. N-1
    SYMGRAPH_LOCAL_DEVICES   K (--devices-per-process)
    SYMGRAPH_LOCAL_DEVICE_IDS  i*K .. i*K+K-1: the GPUs process i sees, on
                             a machine with N*K of them (CPUs ignore it)
    XLA_FLAGS                --xla_force_host_platform_device_count=K added,
                             so each process has K CPU devices

Each line a process prints is forwarded prefixed by "[rank i] " (its
standard error to standard error). Each process starts in its own process
group. When a process exits with an error, or the run passes --timeout,
the others are stopped (SIGTERM, then SIGKILL after a few seconds: JAX
catches SIGTERM) and the launcher exits 1 with one line naming the rank.
When the run ends, however it ends, every process group is ended the same
way, so nothing a process left running in the background outlives the
run. -n is at most 256 and --devices-per-process at most 256
(MAX_PROCESSES, MAX_DEVICES_PER_PROCESS): one machine runs no more
usefully, and a larger -n would only start processes until the machine
runs out.
On a cluster set the same variables by hand, or run under SLURM's srun:
SLURM_PROCID and SLURM_NTASKS are read when the SYMGRAPH_ variables are
not set.
"""
from __future__ import annotations

import errno
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

from ..errors import SymgraphError
from .distributed import (ENV_COORDINATOR, ENV_LOCAL_DEVICE_IDS, ENV_LOCAL_DEVICES,
                          ENV_NUM_PROCESSES, ENV_PROCESS_ID)

# seconds between SIGTERM and SIGKILL when stopping the processes
GRACE_S = 3.0
HOST = "127.0.0.1"
# bounds of -n and --devices-per-process (docs/cli.md states them)
MAX_PROCESSES = 256
MAX_DEVICES_PER_PROCESS = 256


class LaunchError(SymgraphError):
    """Bad arguments to ``symgraph launch``."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on now."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def check_port(port: int) -> None:
    if not 1 <= port <= 65535:
        raise LaunchError(f"launch: --port {port} is not a TCP port (1-65535)")
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
        except OSError as err:
            why = "is in use" if err.errno == errno.EADDRINUSE else f"cannot be used ({err})"
            raise LaunchError(f"launch: --port {port} {why} on {HOST}; pick another or leave "
                              f"--port out for a free one") from None


def check_counts(num, devices) -> None:
    """LaunchError unless 1 <= num <= MAX_PROCESSES and 1 <= devices <=
    MAX_DEVICES_PER_PROCESS."""
    for what, v, most in (("-n", num, MAX_PROCESSES),
                          ("--devices-per-process", devices, MAX_DEVICES_PER_PROCESS)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise LaunchError(f"launch: {what} must be a whole number, got {v!r}")
        if v < 1:
            raise LaunchError(f"launch: {what} must be at least 1, got {v}")
        if v > most:
            raise LaunchError(f"launch: {what} is at most {most} on one machine, got {v}")


def process_env(base: dict, rank: int, num: int, port: int, devices: int) -> dict:
    """The environment of process ``rank``."""
    env = dict(base)
    env[ENV_COORDINATOR] = f"{HOST}:{port}"
    env[ENV_NUM_PROCESSES] = str(num)
    env[ENV_PROCESS_ID] = str(rank)
    env[ENV_LOCAL_DEVICES] = str(devices)
    env[ENV_LOCAL_DEVICE_IDS] = ",".join(str(rank * devices + i) for i in range(devices))
    flags = re.sub(r"--xla_force_host_platform_device_count=\S*", "",
                   env.get("XLA_FLAGS", "")).split()
    env["XLA_FLAGS"] = " ".join(flags + [f"--xla_force_host_platform_device_count={devices}"])
    env.setdefault("PYTHONUNBUFFERED", "1")  # lines arrive as printed, not at exit
    return env


def _forward(stream, prefix: bytes, out, lock) -> None:
    for line in iter(stream.readline, b""):
        if not line.endswith(b"\n"):
            line += b"\n"
        with lock:
            out.write(prefix + line)
            out.flush()
    stream.close()


def _stop(procs, grace: float) -> None:
    """SIGTERM to every process's group, SIGKILL to what is left of them
    after ``grace`` seconds. Every group, not only the live processes': a
    process that exited (0 or not) may have left children running in it."""
    for p in procs:
        _signal(p, signal.SIGTERM)
    end = time.monotonic() + grace
    while time.monotonic() < end and any(_group_alive(p) for p in procs):
        time.sleep(0.05)
    for p in procs:
        if _group_alive(p):
            _signal(p, signal.SIGKILL)
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - unkillable
            pass


def _group_alive(p) -> bool:
    """Whether ``p`` or anything in its process group still runs (the
    group's id is p's pid, kept by the kernel while the group has a
    member)."""
    if p.poll() is None:
        return True
    try:
        os.killpg(p.pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _signal(p, sig) -> None:
    try:
        os.killpg(p.pid, sig)  # its own session: the command's children too
    except (ProcessLookupError, PermissionError):
        pass


def _how(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def launch(command, num: int, devices: int = 1, port: int | None = None,
           timeout: float | None = None, grace: float = GRACE_S, out=None, err=None,
           env=None) -> tuple[int, str | None]:
    """Runs ``num`` processes of ``command``; returns ``(exit code, error
    line or None)``: 0 when every process exited 0."""
    check_counts(num, devices)
    out = out or sys.stdout.buffer
    err = err or sys.stderr.buffer
    port = free_port() if port is None else port
    base = dict(os.environ if env is None else env)
    lock = threading.Lock()
    procs, threads = [], []
    try:
        for rank in range(num):
            try:
                p = subprocess.Popen(command, env=process_env(base, rank, num, port, devices),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
            except OSError as e:
                raise LaunchError(f"launch: cannot start {command[0]!r}: "
                                  f"{e.strerror or e}") from None
            procs.append(p)
            tag = f"[rank {rank}] ".encode()
            for stream, sink in ((p.stdout, out), (p.stderr, err)):
                t = threading.Thread(target=_forward, args=(stream, tag, sink, lock),
                                     daemon=True)
                t.start()
                threads.append(t)
        start = time.monotonic()
        failure = None
        while True:
            codes = [p.poll() for p in procs]
            bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                rank, code = bad[0]
                others = sum(c is None for c in codes)
                failure = (f"rank {rank} {_how(code)}"
                           + (f"; stopped the other {others} process(es)" if others else ""))
                break
            if all(c == 0 for c in codes):
                break
            if timeout is not None and time.monotonic() - start > timeout:
                running = [str(r) for r, c in enumerate(codes) if c is None]
                failure = (f"timed out after {timeout:g} s with rank(s) {', '.join(running)} "
                           f"still running; stopped them")
                break
            time.sleep(0.05)
        _stop(procs, grace)
        for t in threads:
            t.join(timeout=5)
        return (0, None) if failure is None else (1, failure)
    finally:
        _stop(procs, 0.0)  # an exception (Ctrl-C) leaves nothing running


def add_arguments(p) -> None:
    p.add_argument("-n", "--num-processes", type=int, required=True, metavar="N",
                   help=f"how many processes to start (1 to {MAX_PROCESSES})")
    p.add_argument("--devices-per-process", type=int, default=1, metavar="K",
                   help=f"CPU devices each process simulates (XLA_FLAGS; 1 to "
                        f"{MAX_DEVICES_PER_PROCESS}); default 1")
    p.add_argument("--port", type=int, default=None, metavar="P",
                   help="coordinator port on 127.0.0.1 (default: a free one)")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="stop every process after S seconds (default: no limit)")
    p.add_argument("command", nargs="...", metavar="-- CMD ARGS",
                   help="the command every process runs, after --")


def run(args) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise LaunchError("launch: no command given; write it after --, such as "
                          "symgraph launch -n 2 -- python train.py")
    check_counts(args.num_processes, args.devices_per_process)
    if args.timeout is not None and not args.timeout > 0:
        raise LaunchError(f"launch: --timeout must be a positive number of seconds, got "
                          f"{args.timeout:g}")
    if args.port is not None:
        check_port(args.port)
    code, failure = launch(command, args.num_processes, args.devices_per_process,
                           args.port, args.timeout)
    if failure:
        print(f"symgraph: error: launch: {failure}", file=sys.stderr, flush=True)
    return code
