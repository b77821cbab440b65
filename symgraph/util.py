"""Small helpers shared across symgraph."""
from __future__ import annotations

import os
import re
import stat
import tempfile
from contextlib import contextmanager

from .errors import SymgraphError


class WriteError(SymgraphError, OSError):
    """A file that cannot be written: ``cannot write PATH: reason``. An
    OSError too, so callers that catch OSError from a save still do."""


def _umask() -> int:
    # the umask can only be read by setting it; Linux shows it without
    # that race (another thread creating a file in between) in /proc
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _target_mode(path: str) -> int:
    """The permissions the written file should have: the replaced file's
    own, or what ``open(path, 'w')`` would give a new file (mkstemp makes
    its files 0600, unreadable to anyone else)."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return 0o666 & ~_umask()


def _cannot_write(path: str, err: OSError) -> WriteError:
    return WriteError(f"cannot write {path}: {err.strerror or err}")


@contextmanager
def atomic_open(path, mode: str = "w", **kwargs):
    """Write ``path`` through a temporary file in the same folder, renamed
    into place only when the block finishes: a crash never leaves a
    half-written file, and the old file stays until the new one is whole.
    The file gets the mode a plain ``open`` would give it (an existing
    file's mode is kept); a path that cannot be written raises WriteError."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise WriteError(f"cannot write {path}: it is a folder")
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                                   dir=folder)
    except (FileExistsError, NotADirectoryError) as err:
        raise WriteError(f"cannot write {path}: part of {os.path.dirname(path)} is a "
                         f"file, not a folder") from err
    except OSError as err:
        raise _cannot_write(path, err) from err
    try:
        with os.fdopen(fd, mode, **kwargs) as f:
            os.fchmod(f.fileno(), _target_mode(path))
            yield f
            f.flush()
            os.fsync(f.fileno())
        try:
            os.replace(tmp, path)
        except OSError as err:
            raise _cannot_write(path, err) from err
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_text(path, text: str) -> None:
    with atomic_open(path, "w", encoding="utf-8") as f:
        f.write(text)


def atomic_write_bytes(path, data: bytes) -> None:
    with atomic_open(path, "wb") as f:
        f.write(data)


def parse_dims(text: str) -> tuple:
    """``'64,3,224,224'`` or ``'64x3x224x224'`` -> ``(64, 3, 224, 224)``.
    ValueError naming the bad part for an empty dimension (``1,3,`` or
    ``1,3,x``: a stray ``x`` is a separator with nothing after it, never
    silently dropped) or anything but a positive whole number."""
    parts = re.split(r"[,x]", text)
    for d in parts:
        if not d.strip():
            raise ValueError("an empty dimension")
        if not re.fullmatch(r"\s*[0-9]+\s*", d) or int(d) == 0:
            raise ValueError(f"{d.strip()!r} is not a positive whole number")
    return tuple(int(d) for d in parts)


def short_repr(value, limit: int = 80) -> str:
    """``repr(value)`` on one line of at most ``limit`` characters, for
    error messages about input that may be huge or hold line breaks (a
    400-digit attribute, a 20,000-character name)."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 -- an object whose repr fails still gets named
        text = f"<a {type(value).__name__}>"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


@contextmanager
def busy(message: str, stream=None, interval: float = 0.1):
    """A spinner with the seconds spent, on ``stream`` (stderr) while a slow
    step runs (XLA compiling a program takes 10 s and more). Only on a
    terminal, and erased when the step ends: a pipe, a log or a test
    capturing stderr sees nothing, so an error stays one line."""
    import sys
    import threading
    import time
    stream = sys.stderr if stream is None else stream
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # a closed or odd stream
        tty = False
    if not tty:
        yield
        return
    done = threading.Event()
    start = time.monotonic()
    width = [0]

    def spin():
        frames = "|/-\\"
        k = 0
        while not done.wait(0 if k == 0 else interval):
            line = f"{frames[k % 4]} {message} ({time.monotonic() - start:.0f} s)"
            width[0] = max(width[0], len(line))
            stream.write("\r" + line)
            stream.flush()
            k += 1
    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        stream.write("\r" + " " * width[0] + "\r")
        stream.flush()


def tab_lines(path: str):
    """``(where, line, fields)`` for each non-blank line of a tab-separated
    file (an im2rec ``.lst``): ``where`` is ``path:line``, ``fields`` its
    stripped fields. UTF-8 whatever the locale (as MXNet's im2rec writes
    it); UnicodeDecodeError for a file that is not."""
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                yield f"{path}:{lineno}", line, [x.strip() for x in line.strip().split("\t")]
