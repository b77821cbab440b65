"""Learning-rate schedules: ``lr = scheduler(num_update)``.

Same classes, arguments and values as MXNet's ``mx.lr_scheduler``, with
one difference in kind: each schedule is a pure function of the update
count (MXNet's keep a running state), so asking twice or resuming from a
checkpoint gives the same rate. ``num_update`` counts updates from 1, as
the optimizer does. Every schedule can start with a warmup of
``warmup_steps`` updates, linear from ``warmup_begin_lr`` to ``base_lr`` or
constant at ``warmup_begin_lr``.

    sched = sg.lr_scheduler.FactorScheduler(step=100, factor=0.5)
    sg.mod.Module(net).fit(it, optimizer_params={'learning_rate': 0.1,
                                                 'lr_scheduler': sched})
"""
from __future__ import annotations

import math

from . import TrainError


class LRScheduler:
    """Base class; ``__call__(num_update) -> lr``. ``base_lr`` is set by
    the optimizer from its ``learning_rate`` when that is given."""

    def __init__(self, base_lr: float = 0.01, warmup_steps: int = 0,
                 warmup_begin_lr: float = 0.0, warmup_mode: str = "linear"):
        self.base_lr = float(base_lr)
        if int(warmup_steps) != warmup_steps or warmup_steps < 0:
            raise TrainError(f"warmup_steps must be a non-negative integer, got {warmup_steps}")
        if warmup_mode not in ("linear", "constant"):
            raise TrainError(f"warmup_mode={warmup_mode!r}; use 'linear' or 'constant'")
        self.warmup_steps = int(warmup_steps)
        self.warmup_begin_lr = float(warmup_begin_lr)
        self.warmup_mode = warmup_mode

    def get_warmup_lr(self, num_update: int) -> float:
        if self.warmup_mode == "constant":
            return self.warmup_begin_lr
        return self.warmup_begin_lr + (self.base_lr - self.warmup_begin_lr) * \
            float(num_update) / float(self.warmup_steps)

    def __call__(self, num_update: int) -> float:
        if num_update < self.warmup_steps:
            return self.get_warmup_lr(num_update)
        return self.after_warmup(num_update)

    def after_warmup(self, num_update: int) -> float:
        return self.base_lr

    def __repr__(self):
        fields = ", ".join(f"{k}={v}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"


class FactorScheduler(LRScheduler):
    """``base_lr * factor**k`` after ``k*step`` updates (changes at update
    ``k*step + 1``), never below ``stop_factor_lr``."""

    def __init__(self, step: int, factor: float = 1.0, stop_factor_lr: float = 1e-8,
                 base_lr: float = 0.01, warmup_steps: int = 0, warmup_begin_lr: float = 0.0,
                 warmup_mode: str = "linear"):
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        if step < 1:
            raise TrainError(f"FactorScheduler: step must be at least 1, got {step}")
        if factor > 1.0:
            raise TrainError(f"FactorScheduler: factor {factor} > 1 would raise the rate")
        self.step = int(step)
        self.factor = float(factor)
        self.stop_factor_lr = float(stop_factor_lr)

    def after_warmup(self, num_update):
        k = max(0, -(-int(num_update) // self.step) - 1)
        return max(self.base_lr * self.factor ** k, self.stop_factor_lr)


class MultiFactorScheduler(LRScheduler):
    """Multiplies by ``factor`` once past each update count in ``step``."""

    def __init__(self, step, factor: float = 1.0, base_lr: float = 0.01,
                 warmup_steps: int = 0, warmup_begin_lr: float = 0.0,
                 warmup_mode: str = "linear"):
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        step = list(step)
        if not step or any(s < 1 for s in step) or any(b <= a for a, b in zip(step, step[1:])):
            raise TrainError(f"MultiFactorScheduler: step must be an increasing list of "
                             f"positive update counts, got {step}")
        if factor > 1.0:
            raise TrainError(f"MultiFactorScheduler: factor {factor} > 1 would raise the rate")
        self.step = step
        self.factor = float(factor)

    def after_warmup(self, num_update):
        k = sum(1 for s in self.step if num_update > s)
        return self.base_lr * self.factor ** k


class PolyScheduler(LRScheduler):
    """``final + (base - final) * (1 - t/T)**pwr`` over the updates after
    warmup (``T = max_update - warmup_steps``); ``final_lr`` afterwards."""

    def __init__(self, max_update: int, base_lr: float = 0.01, pwr: float = 2,
                 final_lr: float = 0.0, warmup_steps: int = 0, warmup_begin_lr: float = 0.0,
                 warmup_mode: str = "linear"):
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        if max_update < 1 or max_update <= warmup_steps:
            raise TrainError(f"{type(self).__name__}: max_update ({max_update}) must be at "
                             f"least 1 and above warmup_steps ({warmup_steps})")
        self.max_update = int(max_update)
        self.power = float(pwr)
        self.final_lr = float(final_lr)

    @property
    def max_steps(self) -> int:
        return self.max_update - self.warmup_steps

    def _shape(self, frac: float) -> float:
        return (1.0 - frac) ** self.power

    def after_warmup(self, num_update):
        n = min(int(num_update), self.max_update)
        frac = float(n - self.warmup_steps) / float(self.max_steps)
        return self.final_lr + (self.base_lr - self.final_lr) * self._shape(frac)


class CosineScheduler(PolyScheduler):
    """``final + (base - final) * (1 + cos(pi t/T)) / 2`` over the updates
    after warmup; ``final_lr`` afterwards."""

    def __init__(self, max_update: int, base_lr: float = 0.01, final_lr: float = 0.0,
                 warmup_steps: int = 0, warmup_begin_lr: float = 0.0,
                 warmup_mode: str = "linear"):
        super().__init__(max_update, base_lr, 1.0, final_lr, warmup_steps, warmup_begin_lr,
                         warmup_mode)

    def _shape(self, frac):
        return (1.0 + math.cos(math.pi * frac)) / 2.0


class WarmupScheduler(LRScheduler):
    """Warmup in front of another schedule: ``warmup_steps`` updates of
    warmup, then ``scheduler(num_update)``. Its ``base_lr`` is the wrapped
    schedule's."""

    def __init__(self, scheduler: LRScheduler, warmup_steps: int,
                 warmup_begin_lr: float = 0.0, warmup_mode: str = "linear"):
        self.scheduler = scheduler
        super().__init__(scheduler.base_lr, warmup_steps, warmup_begin_lr, warmup_mode)

    @property
    def base_lr(self):
        return self.scheduler.base_lr

    @base_lr.setter
    def base_lr(self, value):
        self.scheduler.base_lr = float(value)

    def after_warmup(self, num_update):
        return self.scheduler(num_update)
