"""Where a Module is in MXNet's order -- ``bind``, ``init_params``,
``init_optimizer`` -- as one value, ``Stage``, instead of three flags that
could disagree. MXNet's flags (``binded``, ``params_initialized``,
``optimizer_initialized``) are read from it.

Parameters may come before ``bind`` (``set_params``, ``Module.load``): they
wait for it (``PARAMS_WAITING``), and ``bind`` places them. A rebind that
trains other parameters drops the optimizer (``TRAINING`` back to
``READY``): its state no longer matches them.
"""
from __future__ import annotations

import enum

from . import TrainError


class Stage(enum.Enum):
    NEW = "created"
    PARAMS_WAITING = "parameters set, waiting for bind"
    BOUND = "bound"
    READY = "bound, with parameters"
    TRAINING = "bound, with parameters and an optimizer"

    @property
    def bound(self) -> bool:
        return self in (Stage.BOUND, Stage.READY, Stage.TRAINING)

    @property
    def has_params(self) -> bool:
        return self in (Stage.PARAMS_WAITING, Stage.READY, Stage.TRAINING)

    @property
    def has_optimizer(self) -> bool:
        return self is Stage.TRAINING

    def bind(self) -> "Stage":
        """After ``bind``: waiting parameters are placed."""
        return {Stage.NEW: Stage.BOUND, Stage.PARAMS_WAITING: Stage.READY}.get(self, self)

    def with_params(self) -> "Stage":
        """After parameters are set: placed when bound, waiting otherwise."""
        if self.has_params:
            return self
        return Stage.READY if self.bound else Stage.PARAMS_WAITING

    def with_optimizer(self) -> "Stage":
        if not (self.bound and self.has_params):
            raise TrainError(f"an optimizer needs a bound module with parameters; it is "
                             f"{self.value}")
        return Stage.TRAINING

    def without_optimizer(self) -> "Stage":
        return Stage.READY if self is Stage.TRAINING else self


class Lifecycle:
    """The Module's ``Stage`` (``_stage``), MXNet's flags read from it, and
    the errors for a call made out of order. The Module sets ``_stage``
    to ``Stage.NEW`` and moves it on with ``Stage``'s transitions."""

    @property
    def stage(self) -> Stage:
        return self._stage

    @property
    def binded(self) -> bool:
        return self._stage.bound

    @property
    def params_initialized(self) -> bool:
        return self._stage.has_params

    @property
    def optimizer_initialized(self) -> bool:
        return self._stage.has_optimizer

    def _check_bound(self, what):
        if not self._stage.bound:
            raise TrainError(f"{what}: call bind() first (or fit(), which binds)")

    def _check_params(self, what):
        self._check_bound(what)
        if not self._stage.has_params:
            raise TrainError(f"{what}: call init_params() first")

    def _check_optimizer(self, what):
        if not self._stage.has_optimizer:
            raise TrainError(f"{what}: call init_optimizer() first")
