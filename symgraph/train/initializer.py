"""Parameter initializers with MXNet's formulas and naming convention.

``init(desc, arr)`` fills the NumPy array ``arr`` (or an NDArray) for the
parameter named ``desc``. As MXNet's ``Initializer`` does, the rule is
picked by the name's suffix: ``*_weight`` gets the initializer's own
distribution, ``*_bias`` and ``*_beta`` zeros, ``*_gamma`` ones, BatchNorm's
``*_moving_mean`` zeros and ``*_moving_var`` ones. A variable created with
``init=`` (its ``__init__`` hint) uses that initializer instead.

    Xavier(rnd_type='uniform', factor_type='avg', magnitude=3)
        fan_in = shape[1]*prod(shape[2:]), fan_out = shape[0]*prod(shape[2:])
        factor = (fan_in+fan_out)/2 | fan_in | fan_out
        scale = sqrt(magnitude/factor); U(-scale, scale) or N(0, scale)
    MSRAPrelu(factor_type='avg', slope=0.25)
        Xavier('gaussian', factor_type, magnitude=2/(1+slope^2))  (He et al.)
    Uniform(scale=0.07) U(-scale, scale);  Normal(sigma=0.01) N(0, sigma)
    Constant(value), Zero(), One()

Random draws come from a NumPy ``Generator`` (``rng=``), so a seed makes
initialization repeatable.
"""
from __future__ import annotations

import json
import re

import numpy as np

from . import TrainError

_REGISTRY: dict[str, type] = {}


def register(klass: type) -> type:
    """Class decorator: ``create('<lowercase class name>')`` builds it."""
    _REGISTRY[klass.__name__.lower()] = klass
    return klass


class InitDesc(str):
    """A parameter name carrying the variable's hint attributes (``attrs``)
    and, optionally, a ``global_init`` to use for the suffix rules."""

    def __new__(cls, name: str, attrs: dict | None = None, global_init=None):
        ret = super().__new__(cls, name)
        ret.attrs = dict(attrs or {})
        ret.global_init = global_init
        return ret


class Initializer:
    """Base class. Subclasses override ``_init_weight`` (and maybe others)."""

    def __init__(self, **kwargs):
        self._kwargs = kwargs
        self._rng: np.random.Generator | None = None

    def dumps(self) -> str:
        """``'["xavier", {"magnitude": 2}]'``: what a variable's ``__init__``
        hint stores; ``create`` reads it back."""
        return json.dumps([type(self).__name__.lower(), self._kwargs])

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self._kwargs.items())
        return f"{type(self).__name__}({args})"

    # -- entry point ----------------------------------------------------------
    def __call__(self, desc, arr, rng: np.random.Generator | None = None):
        """Fills ``arr`` (NumPy array, filled in place, or NDArray) for the
        parameter ``desc``."""
        if not isinstance(desc, InitDesc):
            desc = InitDesc(str(desc))
        self._rng = rng if rng is not None else (self._rng or np.random.default_rng())
        target = arr if isinstance(arr, np.ndarray) else np.zeros(arr.shape, np.float32)
        hint = desc.attrs.get("__init__")
        if hint:
            create(hint)._fill(desc, target, self._rng, by_suffix=False)
        else:
            self._fill(desc, target, self._rng, by_suffix=True)
        if target is not arr:
            arr[:] = target
        return arr

    def _fill(self, desc, arr, rng, by_suffix: bool) -> None:
        self._rng = rng
        if not by_suffix:
            self._init_weight(desc, arr)
            return
        name = str(desc)
        if name.endswith("upsampling"):
            self._init_bilinear(desc, arr)
        elif name.endswith("moving_mean") or name.endswith("moving_avg"):
            self._init_zero(desc, arr)
        elif name.endswith("moving_var"):
            self._init_one(desc, arr)
        elif name.endswith("moving_inv_var"):
            self._init_zero(desc, arr)
        elif name.endswith("bias"):
            self._init_bias(desc, arr)
        elif name.endswith("gamma"):
            self._init_gamma(desc, arr)
        elif name.endswith("beta"):
            self._init_beta(desc, arr)
        elif name.endswith("weight"):
            self._init_weight(desc, arr)
        elif name.endswith("min"):
            self._init_zero(desc, arr)
        elif name.endswith("max"):
            self._init_one(desc, arr)
        else:
            self._init_default(desc, arr)

    # -- the rules --------------------------------------------------------------
    def _init_zero(self, _, arr):
        arr[...] = 0.0

    def _init_one(self, _, arr):
        arr[...] = 1.0

    def _init_bias(self, _, arr):
        arr[...] = 0.0

    def _init_gamma(self, _, arr):
        arr[...] = 1.0

    def _init_beta(self, _, arr):
        arr[...] = 0.0

    def _init_bilinear(self, _, arr):
        # the bilinear upsampling kernel, as MXNet's Bilinear initializer
        shape = arr.shape
        weight = np.zeros(int(np.prod(shape)), dtype="float32")
        f = np.ceil(shape[3] / 2.0)
        c = (2 * f - 1 - f % 2) / (2.0 * f)
        for i in range(weight.size):
            x = i % shape[3]
            y = (i // shape[3]) % shape[2]
            weight[i] = (1 - abs(x / f - c)) * (1 - abs(y / f - c))
        arr[...] = weight.reshape(shape)

    def _init_weight(self, desc, arr):
        raise NotImplementedError(f"{type(self).__name__} must override _init_weight")

    def _init_default(self, desc, arr):
        raise TrainError(
            f"no initialization rule for parameter '{desc}': the default rules cover names "
            f"ending in weight, bias, gamma (1), beta (0), moving_mean (0) and moving_var "
            f"(1); give the variable one with sg.sym.Variable('{desc}', "
            f"init=sg.init.Uniform(0.07)) or pass arg_params")


@register
class Zero(Initializer):
    """Zeros everywhere."""

    def _init_weight(self, _, arr):
        arr[...] = 0.0


@register
class One(Initializer):
    """Ones everywhere."""

    def _init_weight(self, _, arr):
        arr[...] = 1.0


@register
class Constant(Initializer):
    """``value`` for weights (a scalar or an array of the weight's shape)."""

    def __init__(self, value=0.0):
        super().__init__(value=value)
        self.value = value

    def _init_weight(self, _, arr):
        arr[...] = np.asarray(self.value)


@register
class Uniform(Initializer):
    """Weights drawn from U(-scale, scale)."""

    def __init__(self, scale: float = 0.07):
        super().__init__(scale=scale)
        self.scale = float(scale)

    def _init_weight(self, _, arr):
        arr[...] = self._rng.uniform(-self.scale, self.scale, arr.shape)


@register
class Normal(Initializer):
    """Weights drawn from N(0, sigma^2)."""

    def __init__(self, sigma: float = 0.01):
        super().__init__(sigma=sigma)
        self.sigma = float(sigma)

    def _init_weight(self, _, arr):
        arr[...] = self._rng.normal(0.0, self.sigma, arr.shape)


@register
class Xavier(Initializer):
    """Glorot & Bengio's initialization with MXNet's parameters (see the
    module docstring for the formula)."""

    def __init__(self, rnd_type: str = "uniform", factor_type: str = "avg",
                 magnitude: float = 3):
        super().__init__(rnd_type=rnd_type, factor_type=factor_type, magnitude=magnitude)
        if rnd_type not in ("uniform", "gaussian"):
            raise TrainError(f"Xavier: rnd_type={rnd_type!r}; use 'uniform' or 'gaussian'")
        if factor_type not in ("avg", "in", "out"):
            raise TrainError(f"Xavier: factor_type={factor_type!r}; use 'avg', 'in' or 'out'")
        self.rnd_type = rnd_type
        self.factor_type = factor_type
        self.magnitude = float(magnitude)

    def scale_for(self, shape) -> float:
        """The bound (uniform) or standard deviation (gaussian) for ``shape``."""
        hw_scale = float(np.prod(shape[2:])) if len(shape) > 2 else 1.0
        fan_in, fan_out = shape[1] * hw_scale, shape[0] * hw_scale
        factor = {"avg": (fan_in + fan_out) / 2.0, "in": fan_in, "out": fan_out}[
            self.factor_type]
        return float(np.sqrt(self.magnitude / factor))

    def _init_weight(self, desc, arr):
        if arr.ndim < 2:
            raise TrainError(f"Xavier cannot initialize '{desc}' of shape {arr.shape}: it "
                             f"needs at least 2 dimensions")
        scale = self.scale_for(arr.shape)
        if self.rnd_type == "uniform":
            arr[...] = self._rng.uniform(-scale, scale, arr.shape)
        else:
            arr[...] = self._rng.normal(0.0, scale, arr.shape)


@register
class MSRAPrelu(Xavier):
    """He et al.'s initialization for (P)ReLU nets: Gaussian Xavier with
    ``magnitude = 2 / (1 + slope^2)``."""

    def __init__(self, factor_type: str = "avg", slope: float = 0.25):
        super().__init__("gaussian", factor_type, 2.0 / (1 + slope ** 2))
        self._kwargs = {"factor_type": factor_type, "slope": slope}


_REGISTRY["he"] = MSRAPrelu
_REGISTRY["msra"] = MSRAPrelu


@register
class Bilinear(Initializer):
    """The bilinear upsampling kernel (for Deconvolution weights)."""

    def _init_weight(self, desc, arr):
        self._init_bilinear(desc, arr)


@register
class Mixed(Initializer):
    """The first initializer whose regular expression matches the name:
    ``Mixed(['.*fc.*', '.*'], [Xavier(), Uniform(0.1)])``."""

    def __init__(self, patterns, initializers):
        if len(patterns) != len(initializers):
            raise TrainError(f"Mixed: {len(patterns)} patterns for {len(initializers)} "
                             f"initializers")
        super().__init__()
        self.map = [(re.compile(p), i) for p, i in zip(patterns, initializers)]

    def dumps(self):
        raise TrainError("Mixed cannot be stored in a variable's __init__ hint")

    def _fill(self, desc, arr, rng, by_suffix):
        for pattern, init in self.map:
            if pattern.match(str(desc)):
                init._fill(desc, arr, rng, by_suffix)
                return
        raise TrainError(f"Mixed: no pattern matches parameter '{desc}'; add '.*' as the "
                         f"last pattern for a default")


@register
class Load(Initializer):
    """Values from a dict (or a ``.params`` file) by name, ``default_init``
    for names it lacks. ``arg:``/``aux:`` prefixes are ignored."""

    def __init__(self, param, default_init: Initializer | None = None, verbose: bool = False):
        super().__init__()
        if isinstance(param, str):
            from ..params import load_params_file
            param = load_params_file(param)
        self.param = {k.split(":", 1)[-1]: np.asarray(v) for k, v in param.items()}
        self.default_init = default_init

    def dumps(self):
        raise TrainError("Load cannot be stored in a variable's __init__ hint")

    def _fill(self, desc, arr, rng, by_suffix):
        name = str(desc)
        if name in self.param:
            if self.param[name].shape != arr.shape:
                raise TrainError(f"Load: '{name}' has shape {self.param[name].shape} in the "
                                 f"loaded values, the net needs {arr.shape}")
            arr[...] = self.param[name]
        elif self.default_init is not None:
            self.default_init._fill(desc, arr, rng, by_suffix)
        else:
            raise TrainError(f"Load: no value for '{name}' and no default_init")


def create(init, **kwargs) -> Initializer:
    """An initializer from an instance, a name (``'xavier'``) or a
    ``dumps()`` string (``'["xavier", {"magnitude": 2}]'``)."""
    if isinstance(init, Initializer):
        return init
    if isinstance(init, str) and init.lstrip().startswith("["):
        try:
            name, args = json.loads(init)
        except (ValueError, TypeError):
            raise TrainError(f"bad initializer description {init!r}") from None
        return create(name, **args)
    klass = _REGISTRY.get(str(init).lower())
    if klass is None:
        raise TrainError(f"unknown initializer '{init}'; known: {', '.join(sorted(_REGISTRY))}")
    try:
        return klass(**kwargs)
    except TypeError as err:
        raise TrainError(f"initializer '{init}': {err}") from None
