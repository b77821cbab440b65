"""Checkpoint files: ``prefix-symbol.json`` and ``prefix-%04d.params``.

The ``.params`` file is MXNet's NDArray-list format (``symgraph.params``),
so MXNet 1.x loads what symgraph writes and the other way round; the names
are ``arg:<name>`` for arguments and ``aux:<name>`` for aux states.

Every file is written to a temporary file and renamed into place
(``util.atomic_open``), so a crash while saving leaves the previous
checkpoint whole.
"""
from __future__ import annotations

# load_params_file/save_params_file are read from here by the Module too
from ..params import load_params_file, save_params_file
from ..util import atomic_write_text


def split_arg_aux(params: dict) -> tuple[dict, dict]:
    """``arg:``/``aux:`` keys into two dicts (unprefixed names are args)."""
    arg, aux = {}, {}
    for k, v in params.items():
        kind, sep, name = k.partition(":")
        if sep and kind == "aux":
            aux[name] = v
        elif sep and kind == "arg":
            arg[name] = v
        else:
            arg[k] = v
    return arg, aux


def params_path(prefix: str, epoch: int) -> str:
    return f"{prefix}-{int(epoch):04d}.params"


def symbol_path(prefix: str) -> str:
    return f"{prefix}-symbol.json"


def save_checkpoint(prefix: str, epoch: int, symbol, arg_params: dict, aux_params: dict,
                    remove_amp_cast: bool = True) -> None:
    """Writes ``prefix-symbol.json`` and ``prefix-%04d.params`` (each
    atomically), as ``mx.model.save_checkpoint``. Of several processes
    trained together (``'dist_sync'``) only process 0 writes, and every
    process waits until it has, so any of them can load the files next."""
    from ..parallel import distributed
    if distributed.is_writer():
        if symbol is not None:
            atomic_write_text(symbol_path(prefix), symbol.tojson())
        save = {f"arg:{k}": v for k, v in arg_params.items()}
        save.update({f"aux:{k}": v for k, v in (aux_params or {}).items()})
        save_params_file(params_path(prefix, epoch), save)
    distributed.barrier("symgraph_checkpoint")


def load_checkpoint(prefix: str, epoch: int):
    """``(symbol, arg_params, aux_params)`` with NDArray values, as
    ``mx.model.load_checkpoint``."""
    from .. import symbol as sym
    from ..context import current_context
    from ..ndarray import from_file
    net = sym.load(symbol_path(prefix))
    path = params_path(prefix, epoch)
    arg, aux = split_arg_aux(load_params_file(path))
    dev = current_context().jax_device
    # an int64 array with 64-bit JAX off is refused by name, not narrowed
    return (net, {k: from_file(v, dev, path, f"arg:{k}") for k, v in arg.items()},
            {k: from_file(v, dev, path, f"aux:{k}") for k, v in aux.items()})
