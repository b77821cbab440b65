"""An exponential moving average of the weights, for ``Module(ema_decay=)``.

    mod = sg.mod.Module(net, ema_decay=0.99 ** 5, ema_every=5)
    mod.fit(train, ...)                  # the average follows the updates
    mod.score(test, 'acc')               # evaluated with the averaged weights
    mod.score(test, 'acc', use_ema=False)  # with the trained weights themselves
    arg, aux = mod.get_ema_params()

What is averaged: every trained parameter **and the aux states**
(BatchNorm's moving mean and variance), so the averaged weights are
evaluated with statistics averaged alike (the DAWNBench recipe averages
its model's whole state the same way). Fixed parameters do not change and
are not averaged.

The rule: the average starts as the weights just before the first update
(or as a checkpoint's average), and after every update whose count ``t``
(from 1) is a multiple of ``every``::

    ema = decay * ema + (1 - decay) * value

``decay`` applies per averaging step, i.e. once every ``every`` updates:
to keep the horizon of a per-update decay ``d``, pass ``d ** every``. The
average is kept on the devices (replicated like the weights, float32 where
the master weights are) and updated by one small jitted program with the
old average donated; the host copies nothing.

Checkpoints: ``save_checkpoint`` writes the average beside the weights as
``prefix-%04d.ema.params`` (MXNet's ``.params`` format, ``arg:``/``aux:``
names, so ``mx.nd.load`` reads it), and ``Module.load(prefix, epoch,
ema_decay=...)`` takes it back, so a resumed run continues the same
average. ``prefix-%04d.params`` keeps the trained weights.
"""
from __future__ import annotations

import functools
import os

import jax
import numpy as np

from . import TrainError


def ema_path(prefix: str, epoch: int) -> str:
    return f"{prefix}-{int(epoch):04d}.ema.params"


def _blend(decay, ema, value):
    return jax.tree.map(lambda e, v: (e * decay + v.astype(e.dtype) * (1 - decay))
                        .astype(e.dtype), ema, value)


class WeightEMA:
    """The average's state: ``values`` (``{'arg': {...}, 'aux': {...}}`` of
    device arrays, None before the first update) and ``pending`` (host
    arrays from a checkpoint, placed at first use)."""

    def __init__(self, decay, every: int = 1):
        try:
            decay = float(decay)
        except (TypeError, ValueError):
            raise TrainError(f"ema_decay must be a number in (0, 1), got {decay!r}") from None
        if not 0.0 < decay < 1.0:
            raise TrainError(f"ema_decay must be in (0, 1), got {decay}")
        if int(every) != every or every < 1:
            raise TrainError(f"ema_every must be a positive integer, got {every!r}")
        self.decay, self.every = decay, int(every)
        self.values = None
        self.pending = None
        self._tree = jax.jit(functools.partial(_blend, decay), donate_argnums=0)
        self._leaf = jax.jit(lambda e, v: _blend(decay, e, v), donate_argnums=0)

    def reset(self) -> None:
        """New weights (``init_params``): the average starts again from them."""
        self.values = None

    def _place(self, params: dict, aux: dict, devices) -> None:
        """A checkpoint's average onto the devices, once its names match."""
        if self.pending is None:
            return
        want = (sorted(params), sorted(aux))
        got = (sorted(self.pending["arg"]), sorted(self.pending["aux"]))
        if want != got:
            raise TrainError(f"the saved weight average holds {got[0]} and {got[1]}; the "
                             f"module trains {want[0]} with aux {want[1]}")
        host = {"arg": {k: v.astype(params[k].dtype) for k, v in self.pending["arg"].items()},
                "aux": {k: v.astype(aux[k].dtype) for k, v in self.pending["aux"].items()}}
        self.values = devices.put_replicated(host)
        self.pending = None

    def begin(self, params: dict, aux: dict, devices) -> None:
        """Before an update: the average exists (a copy of the weights about
        to be updated, where there was none)."""
        if self.values is None:
            self._place(params, aux, devices)
        if self.values is None:
            self.values = jax.tree.map(lambda a: a.copy(), {"arg": dict(params),
                                                            "aux": dict(aux)})

    def after(self, t, params: dict, aux: dict) -> None:
        """After update ``t``: blend when ``t`` is a multiple of ``every``."""
        if self.values is None or int(t) % self.every:
            return
        value = {"arg": dict(params), "aux": dict(aux)}
        leaves = jax.tree.leaves(value)
        placements = {frozenset(getattr(a, "sharding").device_set) for a in leaves
                      if isinstance(a, jax.Array)}
        if len(placements) <= 1:
            self.values = self._tree(self.values, value)
        else:  # placed (group2ctxs): each array on its own device, one program each
            self.values = jax.tree.map(self._leaf, self.values, value)

    def current(self, params: dict, aux: dict, devices):
        """``(arg, aux)`` device arrays of the average, or None before any."""
        if self.values is None:
            self._place(params, aux, devices)
        if self.values is None:
            return None
        return self.values["arg"], self.values["aux"]

    # -- checkpoints -----------------------------------------------------------------------
    def save(self, prefix: str, epoch: int) -> None:
        """``prefix-%04d.ema.params`` (process 0 of several writes)."""
        if self.values is None and self.pending is None:
            return
        from ..parallel import distributed
        from .checkpoint import save_params_file
        src = self.values if self.values is not None else self.pending
        if distributed.is_writer():
            save = {f"arg:{k}": np.asarray(v) for k, v in src["arg"].items()}
            save.update({f"aux:{k}": np.asarray(v) for k, v in src["aux"].items()})
            save_params_file(ema_path(prefix, epoch), save)
        distributed.barrier("symgraph_ema_checkpoint")

    def load(self, path: str) -> None:
        """Takes the average of a ``.ema.params`` file (placed at first use)."""
        from .checkpoint import load_params_file, split_arg_aux
        if not os.path.exists(path):
            raise TrainError(f"no weight average at {path}")
        arg, aux = split_arg_aux(load_params_file(path))
        self.pending = {"arg": {k: np.asarray(v) for k, v in arg.items()},
                        "aux": {k: np.asarray(v) for k, v in aux.items()}}
        self.values = None
