"""Pictures written: the formats ``symgraph viz`` writes, VizError, the
format a file's extension names (``output_format``) and ``render``, which
writes a graphviz.Digraph atomically (DOT text, or Graphviz's ``dot``
program's output). draw.py, summary.py and timeline.py draw what it writes.
"""
from __future__ import annotations

import os

from ..errors import SymgraphError
from ..util import atomic_write_bytes, atomic_write_text, busy

FORMATS = ("svg", "png", "pdf", "dot")

INSTALL_GRAPHVIZ = (
    "Graphviz's `dot` program is not on PATH; install Graphviz (Debian/Ubuntu: "
    "apt-get install graphviz; macOS: brew install graphviz; conda: conda install "
    "graphviz) or write DOT text with -o NET.dot")


class VizError(SymgraphError):
    """A picture that cannot be drawn or written."""


# --------------------------------------------------------------------------
# writing files
# --------------------------------------------------------------------------
def output_format(path) -> str:
    """The format named by a file's extension; VizError if not supported."""
    ext = os.path.splitext(os.fspath(path))[1].lower().lstrip(".")
    if ext == "gv":
        ext = "dot"
    if ext not in FORMATS:
        raise VizError(f"cannot write {os.fspath(path)!r}: unknown format "
                       f"'{ext or '(no extension)'}'; use one of "
                       f"{', '.join('.' + f for f in FORMATS)}")
    return ext


def render(dot, path) -> str:
    """Writes ``dot`` (a graphviz.Digraph) to ``path`` in the format its
    extension names (.svg .png .pdf .dot), atomically; returns the path.
    Every format but .dot runs Graphviz's ``dot`` program."""
    import graphviz

    fmt = output_format(path)
    if fmt == "dot":
        atomic_write_text(path, dot.source)
        return os.fspath(path)
    try:
        # a graph of thousands of nodes takes Graphviz tens of seconds: say so
        with busy(f"Graphviz is drawing {os.fspath(path)}"):
            data = dot.pipe(format=fmt, quiet=True)
    except graphviz.ExecutableNotFound:
        raise VizError(f"cannot write {os.fspath(path)!r}: {INSTALL_GRAPHVIZ}") from None
    except graphviz.CalledProcessError as err:
        detail = (err.stderr or b"").decode(errors="replace").strip().splitlines()
        raise VizError(f"Graphviz's dot failed on {os.fspath(path)!r}: "
                       f"{detail[-1] if detail else err}") from None
    except OSError as err:
        # dot quit before reading the whole graph (a broken pipe): not a
        # closed stdout of ours, so it must not pass for one
        raise VizError(f"Graphviz's dot failed on {os.fspath(path)!r}: it stopped reading "
                       f"the graph ({err.strerror or err})") from None
    atomic_write_bytes(path, data)
    return os.fspath(path)
