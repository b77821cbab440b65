"""symgraph's logger: MXNet's training lines (``Epoch[0] Batch [0-50]
Speed: ...``, ``Epoch[0] Train-accuracy=...``) reach the screen without
configuring logging, and follow the program's configuration once it has one.

MXNet logs through the root logger, so ``fit`` prints nothing until the
program calls ``logging.basicConfig(level=logging.INFO)``. Here the
``symgraph`` logger is at INFO with a fallback handler that writes the bare
message to stderr only while the root logger has no handler; once logging
is configured, records go to its handlers (filtered by the root's level,
as the root logger would) and the fallback is silent.
``logging.getLogger('symgraph').setLevel(logging.WARNING)`` quiets it.
"""
from __future__ import annotations

import logging
import sys

NAME = "symgraph"


class _Fallback(logging.Handler):
    """Writes a record to (the current) stderr while logging is not configured."""

    def emit(self, record) -> None:
        if logging.getLogger().handlers:
            return
        try:
            # sys.stderr at emit time: a redirect or a test's capture sees it
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - logging must never raise into training
            self.handleError(record)


def _below_configured_root(record) -> bool:
    """False for a record the configured root logger would not log."""
    root = logging.getLogger()
    return not root.handlers or record.levelno >= root.getEffectiveLevel()


def get_logger() -> logging.Logger:
    """The ``symgraph`` logger, set up once (see the module docstring)."""
    logger = logging.getLogger(NAME)
    if not any(isinstance(h, _Fallback) for h in logger.handlers):
        handler = _Fallback()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.addFilter(_below_configured_root)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.INFO)
    return logger
