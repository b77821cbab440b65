"""``sg.model``: MXNet's ``mx.model`` checkpoint functions.

    sg.model.save_checkpoint('net', 3, symbol, arg_params, aux_params)
    symbol, arg_params, aux_params = sg.model.load_checkpoint('net', 3)

``prefix-symbol.json`` and ``prefix-%04d.params`` (``arg:``/``aux:`` names),
the files ``mx.model.save_checkpoint`` writes and ``mx.model.load_checkpoint``
reads; written atomically (``symgraph.train.checkpoint``). Loaded values are
NDArrays on the current context.
"""
from __future__ import annotations

from .train.checkpoint import (load_arrays, load_checkpoint, params_path, save_checkpoint,
                               split_arg_aux)


def load_params(prefix: str, epoch: int) -> tuple[dict, dict]:
    """``(arg_params, aux_params)`` of ``prefix-%04d.params``, as
    ``mx.model.load_params``."""
    return load_arrays(params_path(prefix, epoch))


__all__ = ["load_checkpoint", "save_checkpoint", "load_params", "params_path",
           "split_arg_aux"]
