"""Learning-rate schedules: ``lr = scheduler(num_update)``.

Same classes, arguments and values as MXNet's ``mx.lr_scheduler``, with
one difference in kind: each schedule is a pure function of the update
count (MXNet's keep a running state), so asking twice or resuming from a
checkpoint gives the same rate. ``num_update`` counts updates from 1, as
the optimizer does. Every schedule can start with a warmup of
``warmup_steps`` updates, linear from ``warmup_begin_lr`` to ``base_lr`` or
constant at ``warmup_begin_lr``. ``PiecewiseLinearScheduler`` (not in
MXNet) is linear between given knots, as the DAWNBench CIFAR-10 recipe's.

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


class PiecewiseLinearScheduler(LRScheduler):
    """The rate linear between knots: ``knots_lrs[i]`` at update count
    ``knots_updates[i]``, straight lines between them, the first rate before
    the first knot and the last after the last (NumPy's ``interp``).

        # up from 0 to 0.4 over the first fifth of 1000 updates, down to 0 at the end
        sched = PiecewiseLinearScheduler([0, 200, 1000], [0.0, 0.4, 0.0])
        sched = PiecewiseLinearScheduler.triangle(1000, 0.4)    # the same

    ``knots_updates`` must increase (update counts, the first update being
    1). The knots are the rates themselves, and ``base_lr`` is their peak:
    an optimizer given another ``learning_rate`` sets ``base_lr`` to it,
    which scales every knot by ``learning_rate / peak`` (the shape kept).
    No separate warmup: a rising first segment is one."""

    def __init__(self, knots_updates, knots_lrs):
        xs = [float(v) for v in knots_updates]
        ys = [float(v) for v in knots_lrs]
        if not xs or len(xs) != len(ys):
            raise TrainError(f"PiecewiseLinearScheduler: knots_updates and knots_lrs need the "
                             f"same non-zero length, got {len(xs)} and {len(ys)}")
        if any(b <= a for a, b in zip(xs, xs[1:])) or xs[0] < 0:
            raise TrainError(f"PiecewiseLinearScheduler: knots_updates must be increasing "
                             f"update counts from 0 up, got {list(knots_updates)}")
        if any(y < 0 or not math.isfinite(y) for y in ys) or max(ys) <= 0:
            raise TrainError(f"PiecewiseLinearScheduler: knots_lrs must be finite, not "
                             f"negative, and one of them positive, got {list(knots_lrs)}")
        self.knots_updates = xs
        self.knots_lrs = ys
        super().__init__(max(ys))

    @classmethod
    def triangle(cls, max_update: int, peak_lr: float, peak_at: float = 0.2,
                 start_lr: float = 0.0, final_lr: float = 0.0) -> "PiecewiseLinearScheduler":
        """Linear from ``start_lr`` at update 0 up to ``peak_lr`` at
        ``peak_at * max_update``, then down to ``final_lr`` at ``max_update``
        (the DAWNBench CIFAR-10 schedule: up over the first fifth, down to 0)."""
        if max_update < 1 or not 0 < peak_at < 1:
            raise TrainError(f"PiecewiseLinearScheduler.triangle: need max_update >= 1 and "
                             f"0 < peak_at < 1, got {max_update}, {peak_at}")
        return cls([0, peak_at * max_update, max_update], [start_lr, peak_lr, final_lr])

    @property
    def base_lr(self):
        return max(self.knots_lrs)

    @base_lr.setter
    def base_lr(self, value):
        if not hasattr(self, "knots_lrs"):  # LRScheduler.__init__
            return
        value = float(value)
        peak = max(self.knots_lrs)
        if value != peak:
            self.knots_lrs = [y * value / peak for y in self.knots_lrs]

    def after_warmup(self, num_update):
        xs, ys = self.knots_updates, self.knots_lrs
        t = float(num_update)
        if t <= xs[0]:
            return ys[0]
        for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
            if t <= x1:
                return y0 + (y1 - y0) * (t - x0) / (x1 - x0)
        return ys[-1]
