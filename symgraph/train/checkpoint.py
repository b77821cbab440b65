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
    net = sym.load(symbol_path(prefix))
    arg, aux = load_arrays(params_path(prefix, epoch))
    return net, arg, aux


def load_arrays(path: str) -> tuple[dict, dict]:
    """``(arg_params, aux_params)`` of a ``.params`` file as NDArrays on the
    current context. With 64-bit JAX off an int64/float64 array is
    narrowed to 32 bits with a warning where that keeps its values, and
    refused by name where it would not (``ndarray_io.from_files``)."""
    from ..context import current_context
    from ..ndarray_io import from_files
    arg, aux = split_arg_aux(load_params_file(path))
    dev = current_context().jax_device
    names = [f"arg:{k}" for k in arg] + [f"aux:{k}" for k in aux]
    values = from_files([*arg.values(), *aux.values()], names, dev, path)
    return dict(zip(arg, values[:len(arg)])), dict(zip(aux, values[len(arg):]))
