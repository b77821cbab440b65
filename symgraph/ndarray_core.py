"""The NDArray type and the eager running of ops on it (``sg.nd``'s
machinery; ``symgraph.ndarray`` is the namespace users import, and holds
the constructors).

An NDArray is a mutable handle on an immutable ``jax.Array``: ``a[:] = b``,
``a += b`` and the executor's updates replace the array it holds, so every
holder of the handle sees the change (MXNet's in-place semantics). Its
methods and ``sg.nd.<Op>`` run a registered op through ``_invoke``: a
one-node graph, jitted once per op, attributes and input shapes, in
inference mode; ops that draw random numbers take a key from the one
generator ``sg.nd.random.seed`` seeds (``_next_key``).
"""
from __future__ import annotations

import numbers

import jax
import jax.numpy as jnp
import numpy as np

from .context import Context, current_context
from .dtypes import require_storable
from .errors import ContextError, OpError, ShapeError, UnknownOpError
from .util import short_repr

_ARRAY_TYPES = (np.ndarray, jax.Array)


def _shape(shape) -> tuple:
    if isinstance(shape, numbers.Integral):
        shape = (shape,)
    try:
        if isinstance(shape, (str, bytes)):
            raise TypeError(shape)
        shape = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        raise ShapeError(f"a shape is an int or a tuple of ints, got {short_repr(shape)}") \
            from None
    if any(d < 0 for d in shape):
        raise ShapeError(f"shape {shape} has a negative dimension")
    return shape


def _device(ctx) -> jax.Device:
    if ctx is None:
        ctx = current_context()
    if not isinstance(ctx, Context):
        raise TypeError(f"ctx must be a Context such as sg.cpu(0), got {ctx!r}")
    return ctx.jax_device  # ContextError when this machine has no such device


def _device_of(x: jax.Array):
    devs = x.devices()
    return next(iter(devs)) if len(devs) == 1 else None


class NDArray:
    """A mutable handle on a ``jax.Array`` (see the module docstring)."""

    __slots__ = ("_data", "__weakref__")

    def __init__(self, data):
        self._data = data if isinstance(data, jax.Array) else jnp.asarray(data)

    # -- the contract the executor relies on -------------------------------
    @property
    def data(self) -> jax.Array:
        return self._data

    def _set(self, value) -> None:
        self._data = value

    # -- properties -------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        return tuple(self._data.shape)

    @property
    def dtype(self):
        return np.dtype(self._data.dtype) if self._data.dtype != jnp.bfloat16 else self._data.dtype

    @property
    def size(self) -> int:
        return int(self._data.size)

    @property
    def ndim(self) -> int:
        return self._data.ndim

    @property
    def context(self) -> Context:
        return Context.of(next(iter(self._data.devices())))

    ctx = context

    @property
    def T(self) -> "NDArray":
        """The transpose (axes reversed)."""
        return NDArray(self._data.T)

    # -- host access -------------------------------------------------------------
    def asnumpy(self) -> np.ndarray:
        """A NumPy copy (blocks until the value is computed)."""
        return np.asarray(self._data)

    def asscalar(self):
        if self.size != 1:
            raise ShapeError(f"asscalar needs one element, this array has shape {self.shape}")
        return self.asnumpy().reshape(()).item()

    def __float__(self):
        return float(self.asscalar())

    def __int__(self):
        return int(self.asscalar())

    def __bool__(self):
        if self.size != 1:
            raise ShapeError(f"the truth value of an array of shape {self.shape} is "
                             f"ambiguous; use (a != 0).asnumpy().any() or .all()")
        return bool(self.asscalar())

    def wait_to_read(self) -> "NDArray":
        """Blocks until the value is computed."""
        self._data.block_until_ready()
        return self

    # -- copies, devices, dtypes ---------------------------------------------------------
    def copy(self) -> "NDArray":
        """A new array with its own buffer, on the same device."""
        return NDArray(jnp.copy(self._data))

    def copyto(self, other):
        """Copies into NDArray ``other`` (same shape; its dtype and device are
        kept) and returns it, or to a new array on Context ``other``."""
        if isinstance(other, NDArray):
            if other.shape != self.shape:
                raise ShapeError(f"copyto: source shape {self.shape} != target shape "
                                 f"{other.shape}")
            other[:] = self
            return other
        if isinstance(other, Context):
            return NDArray(jax.device_put(jnp.copy(self._data), other.jax_device))
        raise TypeError(f"copyto takes an NDArray or a Context, got {type(other).__name__}")

    def as_in_context(self, ctx: Context) -> "NDArray":
        """This array if it is on ``ctx`` already, else a copy there."""
        dev = _device(ctx)
        if _device_of(self._data) == dev:
            return self
        return NDArray(jax.device_put(self._data, dev))

    def astype(self, dtype, copy: bool = True) -> "NDArray":
        dt = require_storable(dtype, "astype")
        if not copy and dt == self._data.dtype:
            return self
        return NDArray(self._data.astype(dt))

    def reshape(self, *shape, reverse: bool = False, **kwargs) -> "NDArray":
        """MXNet's reshape, special codes 0, -1, -2, -3, -4 included."""
        if "shape" in kwargs:
            shape = kwargs.pop("shape")
        elif len(shape) == 1 and not isinstance(shape[0], numbers.Integral):
            shape = shape[0]
        if kwargs:
            raise TypeError(f"reshape got unexpected arguments {', '.join(kwargs)}")
        return _invoke("Reshape", (self,), {"shape": tuple(shape), "reverse": reverse})

    # -- indexing ------------------------------------------------------------------
    def __setitem__(self, key, value):
        key = key.data if isinstance(key, NDArray) else key
        v = value.data if isinstance(value, NDArray) else jnp.asarray(value)
        if isinstance(key, slice) and key == slice(None):
            try:
                v = jnp.broadcast_to(v.astype(self._data.dtype), self._data.shape)
            except ValueError:
                raise ShapeError(f"cannot assign an array of shape {tuple(v.shape)} to one of "
                                 f"shape {self.shape}") from None
            dev = _device_of(self._data)
            self._data = jax.device_put(v, dev) if dev is not None else v
        else:
            self._data = self._data.at[key].set(v.astype(self._data.dtype))

    def __getitem__(self, key) -> "NDArray":
        if isinstance(key, NDArray):
            key = key.data
        if isinstance(key, numbers.Integral) and not -len(self) <= key < len(self):
            # JAX clamps out-of-range indices; Python iteration needs the error
            raise IndexError(f"index {key} is out of range for axis 0 of size {len(self)}")
        return NDArray(self._data[key])

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def __array__(self, dtype=None, copy=None):
        a = np.asarray(self._data)
        return a.astype(dtype) if dtype is not None else a

    def __repr__(self):
        return f"\n{self.asnumpy()!r}\n<NDArray {'x'.join(map(str, self.shape))} @{self.context}>"

    # -- arithmetic: NumPy broadcasting, scalars keep the array's dtype --------------
    def _operand(self, other):
        if isinstance(other, NDArray):
            dev_a, dev_b = _device_of(self._data), _device_of(other._data)
            if dev_a is not None and dev_b is not None and dev_a != dev_b:
                raise ContextError(f"arrays on {self.context} and {other.context}; move one "
                                   f"with as_in_context")
            return other._data
        if isinstance(other, (numbers.Number, np.generic)):
            # a Python scalar is weakly typed, so float32 stays float32
            return other.item() if isinstance(other, np.generic) else other
        if isinstance(other, _ARRAY_TYPES):
            return jnp.asarray(other)
        return None

    def _binary(self, other, fn, reverse=False):
        b = self._operand(other)
        if b is None:
            return NotImplemented
        a = self._data
        return NDArray(fn(b, a) if reverse else fn(a, b))

    def _compare(self, other, fn):
        b = self._operand(other)
        if b is None:
            return NotImplemented
        # MXNet returns 0/1 in the operand's dtype, not booleans
        return NDArray(fn(self._data, b).astype(self._data.dtype))

    def _inplace(self, other, fn):
        res = self._binary(other, fn)
        if res is NotImplemented:
            return res
        self._data = res._data.astype(self._data.dtype)
        return self

    def __add__(self, o):
        return self._binary(o, jnp.add)

    def __radd__(self, o):
        return self._binary(o, jnp.add, True)

    def __sub__(self, o):
        return self._binary(o, jnp.subtract)

    def __rsub__(self, o):
        return self._binary(o, jnp.subtract, True)

    def __mul__(self, o):
        return self._binary(o, jnp.multiply)

    def __rmul__(self, o):
        return self._binary(o, jnp.multiply, True)

    def __truediv__(self, o):
        return self._binary(o, jnp.divide)

    def __rtruediv__(self, o):
        return self._binary(o, jnp.divide, True)

    def __mod__(self, o):
        return self._binary(o, jnp.mod)

    def __pow__(self, o):
        return self._binary(o, jnp.power)

    def __rpow__(self, o):
        return self._binary(o, jnp.power, True)

    def __iadd__(self, o):
        return self._inplace(o, jnp.add)

    def __isub__(self, o):
        return self._inplace(o, jnp.subtract)

    def __imul__(self, o):
        return self._inplace(o, jnp.multiply)

    def __itruediv__(self, o):
        return self._inplace(o, jnp.divide)

    def __ipow__(self, o):
        return self._inplace(o, jnp.power)

    def __neg__(self):
        return NDArray(-self._data)

    def __pos__(self):
        return self

    def __abs__(self):
        return NDArray(jnp.abs(self._data))

    def __eq__(self, o):
        return self._compare(o, jnp.equal)

    def __ne__(self, o):
        return self._compare(o, jnp.not_equal)

    def __lt__(self, o):
        return self._compare(o, jnp.less)

    def __le__(self, o):
        return self._compare(o, jnp.less_equal)

    def __gt__(self, o):
        return self._compare(o, jnp.greater)

    def __ge__(self, o):
        return self._compare(o, jnp.greater_equal)

    __hash__ = object.__hash__  # a handle: identity, as MXNet's

    # -- every registered op as a method: a.sum(axis=1), a.exp() -----------------
    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        from .ops import get_op
        try:
            get_op(name)
        except OpError as err:
            raise UnknownOpError(f"'NDArray' object has no attribute '{name}': {err}") from None
        return lambda *args, **kwargs: _invoke(name, (self,) + args, kwargs)


# --------------------------------------------------------------------------
# nd.<Op>: every registered op, run eagerly
# --------------------------------------------------------------------------
_RNG = {"key": None, "count": 0}
_COMPILED: dict = {}  # (op, attributes, input names) -> (one-node graph, jitted run)
_COMPILED_MAX = 512


def _next_key():
    """A fresh PRNG key per call, for ops that draw random numbers."""
    if _RNG["key"] is None:
        _RNG["key"] = jax.random.key(0)
    _RNG["count"] += 1
    return jax.random.fold_in(_RNG["key"], _RNG["count"])


def _is_array(v) -> bool:
    return isinstance(v, (NDArray, *_ARRAY_TYPES))


def _invoke(opname: str, args, kwargs):
    """Runs op ``opname`` on arrays through a one-node graph (inference mode)."""
    from .graph import Entry, Graph, Node
    from .lower import JaxInterpreter
    from .ops import get_op
    from .passes.infer import infer_shapes

    op = get_op(opname)
    where = f"nd.{opname}"
    kwargs = dict(kwargs)
    out = kwargs.pop("out", None)
    kwargs.pop("name", None)
    args = list(args)
    if len(args) == 1 and isinstance(args[0], (list, tuple)) and args[0] \
            and all(_is_array(a) for a in args[0]):
        args = list(args[0])  # nd.concat([a, b], dim=1)
    for i, a in enumerate(args):
        if not _is_array(a):
            example = next(iter(op.attrs), "attr")
            raise OpError(f"{where}: positional argument {i} is {a!r}, not an array; pass "
                          f"attributes by name, e.g. {where}(x, {example}=...)")
    kw_inputs = {k: v for k, v in kwargs.items() if _is_array(v)}
    attrs = {k: v for k, v in kwargs.items() if not _is_array(v)}
    if "num_args" in op.attrs and "num_args" not in attrs:
        attrs["num_args"] = len(args) + len(kw_inputs)
    raw, params = op.parse_attrs(attrs, where)
    names = op.arg_names(params) + op.aux_names(params)
    if len(args) > len(names):
        raise OpError(f"{where}: {len(args)} arrays given, but the op takes {len(names)} "
                      f"({', '.join(names)})")
    slots = dict(zip(names, args))
    for k, v in kw_inputs.items():
        if k not in names:
            raise OpError(f"{where}: no input named '{k}'; inputs are {', '.join(names)}")
        if k in slots:
            raise OpError(f"{where}: input '{k}' given twice (by position and by name)")
        slots[k] = v
    missing = [n for n in names if n not in slots]
    if missing:
        raise OpError(f"{where}: missing input(s) {', '.join(missing)}; the imperative API "
                      f"creates no parameters, pass every input as an array")

    values = [slots[n].data if isinstance(slots[n], NDArray) else jnp.asarray(slots[n])
              for n in names]
    devices = {d for d in (_device_of(v) for v in values) if d is not None}
    if len(devices) > 1:
        raise ContextError(f"{where}: inputs live on different devices "
                           f"({', '.join(sorted(str(Context.of(d)) for d in devices))}); "
                           f"move them with as_in_context")

    cache_key = (op.name, tuple(sorted(raw.items())), tuple(names))
    entry = _COMPILED.pop(cache_key, None)
    if entry is None:
        variables = [Node(None, n) for n in names]
        node = Node(op, where, attrs, [Entry(v) for v in variables])
        g = Graph([Entry(node, i) for i in range(node.num_visible_outputs)])

        def run(feeds, key):
            return JaxInterpreter(g, is_train=False, key=key).run(feeds)

        # one XLA program per op, attributes and shapes (jit's cache), so a
        # loop of imperative calls compiles once
        entry = (g, jax.jit(run))
        if len(_COMPILED) >= _COMPILED_MAX:
            _COMPILED.pop(next(iter(_COMPILED)))  # least recently used
    _COMPILED[cache_key] = entry
    g, fn = entry
    infer_shapes(g, {n: tuple(v.shape) for n, v in zip(names, values)})  # clear ShapeErrors
    outs = fn(dict(zip(names, values)), _next_key() if op.needs_rng else None)
    result = [NDArray(o) for o in outs]
    if out is not None:
        targets = out if isinstance(out, (list, tuple)) else [out]
        if len(targets) != len(result):
            raise OpError(f"{where}: out= has {len(targets)} arrays for {len(result)} outputs")
        for t, r in zip(targets, result):
            if not isinstance(t, NDArray):
                raise TypeError(f"{where}: out= must be NDArray(s), got {type(t).__name__}")
            if t.shape != r.shape:
                raise ShapeError(f"{where}: out= has shape {t.shape}, the output has {r.shape}")
            t[:] = r
        return out
    return result[0] if len(result) == 1 else result

