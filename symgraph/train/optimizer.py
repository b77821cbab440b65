"""Optimizers: SGD (momentum, weight decay), NAG (Nesterov), Adam, AdamW,
RMSProp (plain and centered), with MXNet's arguments and update rules.

An optimizer has two halves:

- on the host, the bookkeeping MXNet's has: the update count, the learning
  rate (from ``learning_rate`` or an ``lr_scheduler``), and per-parameter
  ``lr_mult``/``wd_mult`` (from ``set_lr_mult``/``set_wd_mult`` and from the
  ``__lr_mult__``/``__wd_mult__`` hints of the symbol's variables). As in
  MXNet, weight decay is off for parameters whose names do not end in
  ``_weight`` or ``_gamma`` unless a ``wd_mult`` says otherwise.
- on the device, ``step(weight, grad, state, lr, wd, t)``: a pure function of
  arrays that the Module traces into its one compiled training step (the
  learning rate, weight decay and update count are traced scalars, so a
  schedule never recompiles). ``Updater`` runs the same function eagerly,
  one parameter at a time, for ``Module.update`` and the KVStore.

Every rule first scales the gradient by ``rescale_grad`` and clips it to
``[-clip_gradient, clip_gradient]`` when that is set.
"""
from __future__ import annotations

import math
import pickle

import jax
import jax.numpy as jnp
import numpy as np

from . import TrainError
from .lr_scheduler import LRScheduler


class Optimizer:
    """Base class. Subclasses define ``create_state`` and ``step``; register
    them with ``@Optimizer.register`` to make them available by name."""

    opt_registry: dict[str, type] = {}

    def __init__(self, rescale_grad: float = 1.0, param_idx2name: dict | None = None,
                 wd: float = 0.0, clip_gradient: float | None = None,
                 learning_rate: float | None = None, lr_scheduler: LRScheduler | None = None,
                 sym=None, begin_num_update: int = 0, multi_precision: bool = False,
                 param_dict: dict | None = None):
        self.rescale_grad = float(rescale_grad)
        self.wd = float(wd)
        self.clip_gradient = None if clip_gradient is None or clip_gradient < 0 else \
            float(clip_gradient)
        self.lr_scheduler = lr_scheduler
        if lr_scheduler is not None and not callable(lr_scheduler):
            raise TrainError(f"lr_scheduler must be callable (an LRScheduler), got "
                             f"{type(lr_scheduler).__name__}")
        if learning_rate is None:
            learning_rate = lr_scheduler.base_lr if lr_scheduler is not None else \
                self.default_learning_rate
        self.lr = float(learning_rate)
        if lr_scheduler is not None and hasattr(lr_scheduler, "base_lr"):
            lr_scheduler.base_lr = self.lr
        # master weights are float32 in symgraph whatever the compute dtype
        # (see Module's compute_dtype); the flag is kept for MXNet's signature,
        # and Module refuses True for float16/bfloat16 weights (no master copy)
        self.multi_precision = bool(multi_precision)
        self.begin_num_update = int(begin_num_update)
        self.num_update = int(begin_num_update)
        self._index_update_count: dict = {}
        self.idx2name = dict(param_idx2name or {})
        self.param_dict = dict(param_dict or {})
        self.sym_info = (sym.attr_dict(), sym.list_arguments()) if sym is not None else ()
        self.lr_mult: dict = {}
        self.wd_mult: dict = {}
        self.set_lr_mult({})
        self.set_wd_mult({})
        self._jit_step = None

    default_learning_rate = 0.01

    # -- registry ---------------------------------------------------------------
    @staticmethod
    def register(klass: type) -> type:
        """Class decorator: makes ``klass`` available as ``create('<name>')``."""
        name = klass.__name__.lower()
        Optimizer.opt_registry[name] = klass
        return klass

    @staticmethod
    def create_optimizer(name: str, **kwargs) -> "Optimizer":
        klass = Optimizer.opt_registry.get(str(name).lower())
        if klass is None:
            raise TrainError(f"unknown optimizer '{name}'; known: "
                             f"{', '.join(sorted(Optimizer.opt_registry))}")
        try:
            return klass(**kwargs)
        except TypeError as err:
            raise TrainError(f"optimizer '{name}': {err}") from None

    # -- learning rate and multipliers -----------------------------------------------
    @property
    def learning_rate(self) -> float:
        """The base rate of the current update (the scheduler's, if any)."""
        if self.lr_scheduler is not None:
            return float(self.lr_scheduler(self.num_update))
        return self.lr

    def set_learning_rate(self, lr: float) -> None:
        if self.lr_scheduler is not None:
            raise TrainError("set_learning_rate: this optimizer follows an lr_scheduler; "
                             "change the scheduler instead")
        self.lr = float(lr)

    def _sym_hint(self, key: str) -> dict:
        if not self.sym_info:
            return {}
        attrs, names = self.sym_info
        return {n: float(attrs[n][key]) for n in names if n in attrs and key in attrs[n]}

    def set_lr_mult(self, args_lr_mult: dict) -> None:
        """Per-parameter learning-rate multipliers, over the symbol's
        ``__lr_mult__`` hints."""
        self.lr_mult = self._sym_hint("__lr_mult__")
        self.lr_mult.update(args_lr_mult)

    def set_wd_mult(self, args_wd_mult: dict) -> None:
        """Per-parameter weight-decay multipliers. Names not ending in
        ``_weight`` or ``_gamma`` (biases, BatchNorm's beta) get 0, then the
        symbol's ``__wd_mult__`` hints and ``args_wd_mult`` apply."""
        self.wd_mult = {}
        for n in self.idx2name.values():
            if not (str(n).endswith("_weight") or str(n).endswith("_gamma")):
                self.wd_mult[n] = 0.0
        self.wd_mult.update(self._sym_hint("__wd_mult__"))
        self.wd_mult.update(args_wd_mult)

    def _name(self, index):
        return self.idx2name.get(index, index)

    def _mults(self, index) -> tuple[float, float]:
        name = self._name(index)
        lr_mult = self.param_dict[name].lr_mult if name in self.param_dict else \
            self.lr_mult.get(name, 1.0)
        wd_mult = self.wd_mult.get(name, 1.0)
        if not isinstance(name, str) or name in self.wd_mult:
            return float(lr_mult), float(wd_mult)
        # a name the optimizer was not told about up front: same default rule
        if not (name.endswith("_weight") or name.endswith("_gamma")):
            wd_mult = 0.0
        return float(lr_mult), float(wd_mult)

    def _get_lr(self, index) -> float:
        return self.learning_rate * self._mults(index)[0]

    def _get_wd(self, index) -> float:
        return self.wd * self._mults(index)[1]

    def _update_count(self, index) -> int:
        """Counts one more update of ``index``; returns its count."""
        c = self._index_update_count.get(index, self.begin_num_update) + 1
        self._index_update_count[index] = c
        self.num_update = max(c, self.num_update)
        return c

    def begin_update(self) -> tuple[float, int]:
        """Counts one update of every parameter at once (the Module's fused
        step); returns ``(learning rate, update count)`` for it."""
        self.num_update += 1
        for k in self._index_update_count:
            self._index_update_count[k] = self.num_update
        return self.learning_rate, self.num_update

    # -- the device half ---------------------------------------------------------------
    def create_state(self, index, weight) -> tuple:
        """The per-parameter state arrays (a tuple, maybe empty)."""
        return ()

    def step(self, weight, grad, state: tuple, lr, wd, t):
        """``(new weight, new state)`` from traced arrays; ``lr``/``wd``
        include this parameter's multipliers, ``t`` counts updates from 1."""
        raise NotImplementedError

    def _preprocess(self, grad):
        grad = grad * self.rescale_grad
        if self.clip_gradient is not None:
            grad = jnp.clip(grad, -self.clip_gradient, self.clip_gradient)
        return grad

    def update(self, index, weight, grad, state) -> tuple:
        """Eager update of one NDArray ``weight`` (replaced in place) with
        ``grad``; returns the new state. Counts one update of ``index``."""
        t = self._update_count(index)
        lr, wd = self._get_lr(index), self._get_wd(index)
        if self._jit_step is None:
            self._jit_step = jax.jit(self.step, donate_argnums=(0, 2))
        w = _data(weight)
        scalar = np.float64 if w.dtype == np.float64 else np.float32
        new_w, new_state = self._jit_step(w, _data(grad).astype(w.dtype), tuple(state),
                                          scalar(lr), scalar(wd), scalar(t))
        weight._set(new_w)
        return new_state

    # -- identity ------------------------------------------------------------------------
    def describe(self) -> str:
        """``sgd(momentum=0.9)``: the optimizer's registered name and the
        hyperparameters that differ from its defaults, for reports."""
        fresh = type(self)()
        mine, base = self.hyperparams(), fresh.hyperparams()
        keep = {k: v for k, v in mine.items() if k != "rescale_grad" and base.get(k) != v}
        return f"{type(self).__name__.lower()}(" + ", ".join(f"{k}={v!r}" for k, v in sorted(keep.items())) + ")"

    def hyperparams(self) -> dict:
        """The constants baked into ``step`` (a compiled step is reused only
        while these stay the same)."""
        skip = {"lr", "wd", "lr_scheduler", "num_update", "begin_num_update", "idx2name",
                "param_dict", "sym_info", "lr_mult", "wd_mult", "_index_update_count",
                "_jit_step"}
        return {k: v for k, v in vars(self).items() if k not in skip}

    def __getstate__(self):
        state = dict(vars(self))
        state["_jit_step"] = None
        return state

    def __repr__(self):
        hp = ", ".join(f"{k}={v}" for k, v in self.hyperparams().items())
        return f"{type(self).__name__}(lr={self.lr}, wd={self.wd}, {hp})"


def _data(x):
    return x.data if hasattr(x, "data") and not isinstance(x, (np.ndarray, jax.Array)) else \
        jnp.asarray(x)


register = Optimizer.register
create = Optimizer.create_optimizer


def _one_minus_pow(beta: float, t):
    """``1 - beta**t`` without float32's cancellation (1 - 0.999 keeps only
    about 4 digits): ``-expm1(t log beta)`` with the log taken in float64."""
    if beta <= 0.0:
        return jnp.ones_like(t)
    return -jnp.expm1(t * math.log(beta))


def _zeros(weight):
    return jnp.zeros(weight.shape, weight.dtype)


@register
class SGD(Optimizer):
    """MXNet's SGD: ``mom = momentum*mom - lr*(g + wd*w); w += mom``, or
    ``w -= lr*(g + wd*w)`` without momentum (``g`` rescaled and clipped;
    the weight-decay term is not clipped)."""

    def __init__(self, momentum: float = 0.0, lazy_update: bool = True, **kwargs):
        # lazy_update changes only MXNet's updates of row_sparse gradients;
        # symgraph's are dense, for which both values give the same update
        super().__init__(**kwargs)
        self.momentum = float(momentum)

    def create_state(self, index, weight):
        return (_zeros(weight),) if self.momentum != 0.0 else ()

    def step(self, weight, grad, state, lr, wd, t):
        g = self._preprocess(grad)
        if self.momentum == 0.0:
            return weight - lr * (g + wd * weight), ()
        mom = self.momentum * state[0] - lr * (g + wd * weight)
        return weight + mom, (mom,)


@register
class NAG(SGD):
    """Nesterov momentum, MXNet's ``nag_mom_update`` (MXNet 1.6 to 2.x):
    ``g' = g + wd*w; mom = momentum*mom - lr*g'; w += momentum*mom - lr*g'``
    -- weight decay in both the momentum and the step, the rate inside the
    momentum as SGD's. (MXNet 1.5's kernel kept ``mom = momentum*mom + g'``
    and ``w -= lr*(g + momentum*mom)``, the decay only in the momentum;
    for a constant rate without decay the two agree.)"""

    def step(self, weight, grad, state, lr, wd, t):
        if self.momentum == 0.0:
            return super().step(weight, grad, state, lr, wd, t)
        g = self._preprocess(grad) + wd * weight
        mom = self.momentum * state[0] - lr * g
        return weight + self.momentum * mom - lr * g, (mom,)


Optimizer.opt_registry["nesterov"] = NAG


@register
class Adam(Optimizer):
    """MXNet's Adam: ``g' = clip(rescale*g + wd*w)``; moments ``m``, ``v``;
    ``w -= lr*sqrt(1-beta2^t)/(1-beta1^t) * m / (sqrt(v) + epsilon)``
    (bias correction folded into the rate, epsilon outside it)."""

    default_learning_rate = 0.001

    def __init__(self, learning_rate: float | None = None, beta1: float = 0.9,
                 beta2: float = 0.999, epsilon: float = 1e-8, lazy_update: bool = True,
                 **kwargs):
        # lazy_update: as SGD's, the same update for dense gradients
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.beta1, self.beta2, self.epsilon = float(beta1), float(beta2), float(epsilon)

    def create_state(self, index, weight):
        return (_zeros(weight), _zeros(weight))

    def step(self, weight, grad, state, lr, wd, t):
        g = grad * self.rescale_grad + wd * weight
        if self.clip_gradient is not None:
            g = jnp.clip(g, -self.clip_gradient, self.clip_gradient)
        m, v = state
        m = self.beta1 * m + (1.0 - self.beta1) * g
        v = self.beta2 * v + (1.0 - self.beta2) * g * g
        lr_t = lr * jnp.sqrt(_one_minus_pow(self.beta2, t)) / _one_minus_pow(self.beta1, t)
        return weight - lr_t * m / (jnp.sqrt(v) + self.epsilon), (m, v)


@register
class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter; optax's and
    PyTorch's form): ``w -= lr*(m_hat/(sqrt(v_hat) + epsilon) + wd*w)`` with
    bias-corrected moments of the rescaled, clipped gradient."""

    def step(self, weight, grad, state, lr, wd, t):
        g = self._preprocess(grad)
        m, v = state
        m = self.beta1 * m + (1.0 - self.beta1) * g
        v = self.beta2 * v + (1.0 - self.beta2) * g * g
        m_hat = m / _one_minus_pow(self.beta1, t)
        v_hat = v / _one_minus_pow(self.beta2, t)
        return weight - lr * (m_hat / (jnp.sqrt(v_hat) + self.epsilon) + wd * weight), (m, v)


@register
class RMSProp(Optimizer):
    """MXNet's RMSProp with ``g' = clip(rescale*g + wd*w)``. Plain (Tieleman
    & Hinton): ``n = (1-gamma1) g'^2 + gamma1 n; w -= lr g'/sqrt(n + eps)``.
    Centered (Graves, ``centered=True``): also ``gm = (1-gamma1) g' +
    gamma1 gm``, ``delta = gamma2 delta - lr g'/sqrt(n - gm^2 + eps)``,
    ``w += delta``. ``clip_weights`` clips the weights after the step."""

    default_learning_rate = 0.001

    def __init__(self, learning_rate: float | None = None, gamma1: float = 0.9,
                 gamma2: float = 0.9, epsilon: float = 1e-8, centered: bool = False,
                 clip_weights: float | None = None, **kwargs):
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.gamma1, self.gamma2 = float(gamma1), float(gamma2)
        self.epsilon = float(epsilon)
        self.centered = bool(centered)
        self.clip_weights = None if clip_weights is None or clip_weights < 0 else \
            float(clip_weights)

    def create_state(self, index, weight):
        if self.centered:
            return (_zeros(weight), _zeros(weight), _zeros(weight))
        return (_zeros(weight),)

    def step(self, weight, grad, state, lr, wd, t):
        g = grad * self.rescale_grad + wd * weight
        if self.clip_gradient is not None:
            g = jnp.clip(g, -self.clip_gradient, self.clip_gradient)
        n = (1.0 - self.gamma1) * g * g + self.gamma1 * state[0]
        if self.centered:
            gm = (1.0 - self.gamma1) * g + self.gamma1 * state[1]
            delta = self.gamma2 * state[2] - lr * g / jnp.sqrt(n - gm * gm + self.epsilon)
            w, new_state = weight + delta, (n, gm, delta)
        else:
            w, new_state = weight - lr * g / jnp.sqrt(n + self.epsilon), (n,)
        if self.clip_weights is not None:
            w = jnp.clip(w, -self.clip_weights, self.clip_weights)
        return w, new_state


class Updater:
    """Applies an optimizer eagerly to ``(index, grad, weight)`` triples,
    keeping one state per index (MXNet's ``get_updater``)."""

    def __init__(self, optimizer: Optimizer):
        self.optimizer = optimizer
        self.states: dict = {}

    def __call__(self, index, grad, weight) -> None:
        if index not in self.states:
            self.states[index] = self.optimizer.create_state(index, _data(weight))
        self.states[index] = self.optimizer.update(index, weight, grad, self.states[index])

    def get_states(self, dump_optimizer: bool = False) -> bytes:
        """The states (and optionally the optimizer) as bytes."""
        host = {k: tuple(np.asarray(s) for s in v) for k, v in self.states.items()}
        return pickle.dumps((host, self.optimizer) if dump_optimizer else host)

    def set_states(self, states: bytes) -> None:
        obj = pickle.loads(states)
        if isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[1], Optimizer):
            obj, self.optimizer = obj
        self.states = {k: tuple(jnp.asarray(s) for s in v) for k, v in obj.items()}


def get_updater(optimizer: Optimizer) -> Updater:
    return Updater(optimizer)
