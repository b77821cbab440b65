"""The imperative API over jax.Array, sharing the op registry.

    import symgraph as sg
    x = sg.nd.array([[1, 2], [3, 4]])            # float32, like MXNet
    y = sg.nd.FullyConnected(x, w, b, num_hidden=3)   # any registered op
    (x * 2 + 1).asnumpy()

An NDArray is a mutable handle on an immutable ``jax.Array``: ``a[:] = b``,
``a += b`` and the executor's updates replace the array it holds, so every
holder of the handle sees the change (MXNet's in-place semantics). Arrays
live on ``ctx.jax_device``; JAX runs asynchronously, ``wait_to_read`` and
``waitall`` block.

``nd.<Op>(...)`` runs a registered op eagerly: arrays are its inputs
(positionally in the op's input order, or by input name), everything else
is an attribute parsed by the op's schema. It builds a one-node graph, so
shape errors and attribute errors read as they do for symbols, and jits it
once per op, attributes and input shapes (a loop compiles once). Ops run in
inference mode (BatchNorm uses its moving statistics, Dropout is identity);
ops with several visible outputs return a list.

``nd.save``/``nd.load`` store dicts or lists of arrays (written
atomically) in MXNet's binary ``.params`` format (``symgraph.params``, the
format of the checkpoints too), so ``mx.nd.load`` reads what ``nd.save``
wrote and the other way round; ``nd.save(..., format='npz')`` writes NumPy
``.npz`` instead.
"""
from __future__ import annotations

import numbers

import jax
import jax.numpy as jnp
import numpy as np

from .context import Context, current_context
from .dtypes import require_storable, to_dtype as _dtype
from .errors import ContextError, OpError, ShapeError, UnknownOpError
from .ndarray_io import load, save
from .ops.registry import OpFunctions
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
# creation
# --------------------------------------------------------------------------
def array(source, ctx: Context | None = None, dtype=None) -> NDArray:
    """An NDArray from a nested list, NumPy array, jax.Array or NDArray.

    The dtype is ``dtype``, else the source's for an NDArray or jax.Array,
    else float32 (MXNet's default, also for NumPy sources: float64 NumPy data
    becomes float32 unless ``dtype='float64'`` is asked for, which needs
    ``jax_enable_x64``)."""
    if isinstance(source, NDArray):
        source = source.data
    if isinstance(source, jax.Array):
        dt = require_storable(_dtype(dtype, source.dtype), "nd.array")
        host = source.astype(dt)
    else:
        dt = require_storable(dtype, "nd.array")
        try:
            host = np.asarray(source, dtype=dt if dt != jnp.bfloat16 else np.float32)
        except (ValueError, TypeError) as err:
            raise ShapeError(f"nd.array cannot make an array of {type(source).__name__}: "
                             f"{err}") from None
        host = jnp.asarray(host, dtype=dt)
    return NDArray(jax.device_put(host, _device(ctx)))


def full(shape, val, ctx: Context | None = None, dtype=None) -> NDArray:
    """An array of ``shape`` filled with ``val`` (float32 unless ``dtype``)."""
    dt = require_storable(dtype, "nd.zeros/ones/full")
    return NDArray(jax.device_put(jnp.full(_shape(shape), val, dt), _device(ctx)))


def zeros(shape, ctx: Context | None = None, dtype=None, **kwargs) -> NDArray:
    return full(shape, 0, ctx, dtype)


def ones(shape, ctx: Context | None = None, dtype=None, **kwargs) -> NDArray:
    return full(shape, 1, ctx, dtype)


def empty(shape, ctx: Context | None = None, dtype=None) -> NDArray:
    """Zeros: JAX has no uninitialised memory."""
    return full(shape, 0, ctx, dtype)


def arange(start, stop=None, step=1.0, repeat: int = 1, ctx: Context | None = None,
           dtype=None) -> NDArray:
    """Evenly spaced values in [start, stop), each repeated ``repeat`` times
    (MXNet's arange; float32 unless ``dtype``)."""
    if step == 0:
        raise ShapeError("arange: step must not be 0")
    if int(repeat) < 1:
        raise ShapeError(f"arange: repeat must be at least 1, got {repeat}")
    values = np.arange(start, stop, step) if stop is not None else np.arange(start)
    values = np.repeat(values, int(repeat))
    dt = require_storable(dtype, "nd.arange")
    return NDArray(jax.device_put(jnp.asarray(values, dt), _device(ctx)))


def waitall() -> None:
    """Blocks until every live array is computed."""
    for a in jax.live_arrays():
        a.block_until_ready()


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


# --------------------------------------------------------------------------
# nd.random (and sg.random): MXNet's samplers and mx.random.seed
# --------------------------------------------------------------------------
def _seed(seed_state, ctx="all") -> None:
    """Seeds the random draws of ``sg.nd.random`` and of ops such as
    Dropout run through ``sg.nd``, as ``mx.random.seed``: after
    ``seed(n)`` the same calls give the same numbers. ``ctx`` is accepted
    for MXNet's signature; one generator serves every device here.
    Executors and Modules keep their own keys (their ``seed=``)."""
    if isinstance(seed_state, bool) or not isinstance(seed_state, numbers.Integral):
        raise OpError(f"random.seed: seed_state must be an int, got {short_repr(seed_state)}")
    if ctx != "all" and not isinstance(ctx, Context):
        raise OpError(f"random.seed: ctx is 'all' or a Context, got {short_repr(ctx)}")
    _RNG["key"] = jax.random.key(int(seed_state) % 2 ** 32)
    _RNG["count"] = 0


def _no_extra(where, kwargs):
    if kwargs:
        raise OpError(f"{where}: unknown argument(s) {', '.join(map(str, kwargs))}")


def _sample_args(where, params, shape, dtype, out, default_dtype):
    for pname, v in params.items():
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            got = "an NDArray" if _is_array(v) else short_repr(v)
            raise OpError(f"{where}: {pname} must be a number, got {got} (arrays of "
                          f"parameters are not supported)")
    if out is not None and not isinstance(out, NDArray):
        raise OpError(f"{where}: out= must be an NDArray, got {type(out).__name__}")
    if shape is None:
        shape = out.shape if out is not None else (1,)  # MXNet draws one number
    shape = _shape(shape)
    if dtype is None:
        dtype = out.dtype if out is not None else default_dtype
    return shape, require_storable(dtype, where)


def _deliver(where, value, ctx, out):
    if out is not None:
        if out.shape != value.shape:
            raise ShapeError(f"{where}: out= has shape {out.shape}, the draw has {value.shape}")
        out[:] = NDArray(value)
        return out
    return NDArray(jax.device_put(value, _device(ctx)))


def _uniform(low=0.0, high=1.0, shape=None, dtype=None, ctx=None, out=None, **kwargs):
    """Draws from [low, high), as ``mx.nd.random.uniform`` (float32; one
    number when ``shape`` is not given)."""
    where = "nd.random.uniform"
    _no_extra(where, kwargs)
    shape, dt = _sample_args(where, {"low": low, "high": high}, shape, dtype, out, "float32")
    if not jnp.issubdtype(dt, jnp.floating):
        raise OpError(f"{where}: dtype must be a float type, got {dt.name}")
    if not low <= high:
        raise OpError(f"{where}: low ({low}) must not exceed high ({high})")
    value = jax.random.uniform(_next_key(), shape, dt, low, high)
    return _deliver(where, value, ctx, out)


def _normal(loc=0.0, scale=1.0, shape=None, dtype=None, ctx=None, out=None, **kwargs):
    """Draws from N(loc, scale**2), as ``mx.nd.random.normal``."""
    where = "nd.random.normal"
    _no_extra(where, kwargs)
    shape, dt = _sample_args(where, {"loc": loc, "scale": scale}, shape, dtype, out, "float32")
    if not jnp.issubdtype(dt, jnp.floating):
        raise OpError(f"{where}: dtype must be a float type, got {dt.name}")
    if scale < 0:
        raise OpError(f"{where}: scale must not be negative, got {scale}")
    value = jax.random.normal(_next_key(), shape, dt) * jnp.asarray(scale, dt) + \
        jnp.asarray(loc, dt)
    return _deliver(where, value, ctx, out)


def _randint(low, high, shape=None, dtype=None, ctx=None, out=None, **kwargs):
    """Integers from [low, high), as ``mx.nd.random.randint`` (int32)."""
    where = "nd.random.randint"
    _no_extra(where, kwargs)
    for pname, v in (("low", low), ("high", high)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise OpError(f"{where}: {pname} must be an int, got {short_repr(v)}")
    shape, dt = _sample_args(where, {"low": low, "high": high}, shape, dtype, out, "int32")
    if not jnp.issubdtype(dt, jnp.integer):
        raise OpError(f"{where}: dtype must be int32 or int64, got {dt.name}")
    if not low < high:
        raise OpError(f"{where}: low ({low}) must be below high ({high})")
    info = jnp.iinfo(dt)
    if low < info.min or high - 1 > info.max:
        raise OpError(f"{where}: [{low}, {high}) does not fit {dt.name}")
    value = jax.random.randint(_next_key(), shape, low, high, dt)
    return _deliver(where, value, ctx, out)


def _shuffle(data, out=None, **kwargs):
    """``data`` with its first axis in a random order (a new array; the
    rows themselves unchanged), as ``mx.nd.random.shuffle``."""
    where = "nd.random.shuffle"
    _no_extra(where, kwargs)
    if not isinstance(data, NDArray):
        raise OpError(f"{where}: data must be an NDArray, got {type(data).__name__}")
    if data.ndim == 0:
        raise ShapeError(f"{where}: data must have at least one axis")
    value = jax.random.permutation(_next_key(), data.data, axis=0, independent=False)
    if out is not None:
        return _deliver(where, value, None, out)
    return NDArray(value)


def _random_namespace():
    import types
    mod = types.ModuleType("symgraph.ndarray.random", "MXNet's ``mx.nd.random`` (and "
                           "``mx.random``): uniform, normal, randint, shuffle and seed.")
    for name, fn in (("seed", _seed), ("uniform", _uniform), ("normal", _normal),
                     ("randint", _randint), ("shuffle", _shuffle)):
        fn.__name__ = name
        fn.__qualname__ = name
        setattr(mod, name, fn)
    mod.__all__ = ["seed", "uniform", "normal", "randint", "shuffle"]
    return mod


random = _random_namespace()


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


_OP_FUNCTIONS = OpFunctions("sg.nd", _invoke, "\n\nRuns eagerly on NDArrays.")
__getattr__ = _OP_FUNCTIONS.module_getattr


def __dir__():
    return OpFunctions.names(globals())


__all__ = ["NDArray", "array", "zeros", "ones", "empty", "full", "arange", "waitall", "save",
           "load", "random"]
