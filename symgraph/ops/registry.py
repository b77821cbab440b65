"""The op registry: one OpDef per op holds everything about it.

An OpDef carries the attribute schema (MXNet-style strings such as
``"(3, 3)"`` or ``"True"`` as well as Python values), the names of its
inputs, aux states and outputs, shape and dtype inference (including the
inference of parameter shapes from the data shape), its gradient rule (and,
for a backward op, what it reads), inplace options, fusion category, op
family (pictures and XLA's temp breakdown), FLOP count, what the lowering's
memory measures may do to its backward, and its JAX lowering, plus sample
attributes that the registry-driven tests use. Adding an op touches one
file: the family module that registers it (docs/design.md, "Adding an op").
"""
from __future__ import annotations

import ast
import difflib
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..dtypes import dtype_attr  # noqa: F401 - the op files take it from here
from ..errors import OpError, ShapeError
from ..util import short_repr

# the fusion categories an op may declare
CATEGORIES = ("elementwise", "injective", "reduction", "opaque")
# the op families: viz colours nodes by them (convolution, matmul and
# embedding alike as layers), XLA's temp breakdown names values by them
FAMILIES = ("convolution", "matmul", "embedding", "activation", "normalization", "pooling",
            "shape", "loss", "elementwise", "other")

REQUIRED = object()

# Attributes MXNet writes for some ops that only matter to its own kernels
# (cuDNN tuning, workspace sizes, layouts we do not support other than the
# default). Files that carry them must still load, so ops accept them.
MXNET_KERNEL_HINTS = ("workspace", "cudnn_tune", "cudnn_off")


# --------------------------------------------------------------------------
# attribute parsers: each takes a Python value or an MXNet string
# --------------------------------------------------------------------------
def _literal(v):
    if isinstance(v, str):
        s = v.strip()
        if s in ("None", "none", ""):
            return None
        try:
            return ast.literal_eval(s)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            # not a Python literal: the parser's own limits ('-' * 10**5 + '1'
            # overflows its stack as a MemoryError) included; the caller
            # refuses the string by name
            return s
    return v


def shape_attr(v) -> tuple:
    """``"(3, 3)"``, ``"[3,3]"``, ``"3"``, ``(3, 3)``, ``3`` -> ``(3, 3)``/``(3,)``."""
    v = _literal(v)
    if v is None:
        return ()
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return (int(v),)
    if isinstance(v, (tuple, list)) and all(
            isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in v):
        return tuple(int(x) for x in v)
    raise ValueError(f"expected a tuple of ints such as (3, 3), got {short_repr(v)}")


def optional_shape_attr(v):
    v = _literal(v)
    return None if v is None else shape_attr(v)


def int_attr(v) -> int:
    v = _literal(v)
    if (isinstance(v, bool) or not isinstance(v, (int, np.integer, float))
            or (isinstance(v, float) and (not math.isfinite(v) or int(v) != v))):
        raise ValueError(f"expected an integer, got {short_repr(v)}")
    return int(v)


def positive_int_attr(v) -> int:
    """An integer of at least 1 (a count or a size: ``num_hidden``, ``num_args``)."""
    n = int_attr(v)
    if n < 1:
        raise ValueError(f"expected a positive integer, got {short_repr(v)}")
    return n


MAX_COUNT = 1 << 16  # more inputs or outputs than this is refused, not built


def count_attr(v) -> int:
    """A number of inputs or outputs (``num_args``, ``num_outputs``): 1 to
    MAX_COUNT. A node with 2**40 outputs would hang while its output names
    are made, so such a file is refused at once."""
    n = positive_int_attr(v)
    if n > MAX_COUNT:
        raise ValueError(f"expected a count up to {MAX_COUNT}, got {n}")
    return n


def optional_int_attr(v):
    v = _literal(v)
    return None if v is None else int_attr(v)


def float_attr(v) -> float:
    """A number: a Python number or its text. ``inf`` and ``nan`` are taken
    as MXNet writes them (``str(float('inf'))``); a finite literal too large
    for a float (``1e999``, 400 digits) is refused, not read as inf."""
    if isinstance(v, str) and v.strip().lower() in _NON_FINITE:
        return float(v)
    text, v = v, _literal(v)
    if isinstance(v, bool) or not isinstance(v, (int, float, np.number)):
        raise ValueError(f"expected a number, got {short_repr(v)}")
    try:
        f = float(v)
    except OverflowError:  # an integer of hundreds of digits
        f = None
    if f is None or (isinstance(text, str) and not math.isfinite(f)):
        raise ValueError(f"{short_repr(text)} is out of the range of a float")
    return f


_NON_FINITE = ("inf", "+inf", "-inf", "infinity", "-infinity", "nan")


def bool_attr(v) -> bool:
    if isinstance(v, str):
        s = v.strip().lower()
        if s in ("true", "1"):
            return True
        if s in ("false", "0"):
            return False
        raise ValueError(f"expected True or False, got {short_repr(v)}")
    if isinstance(v, (bool, np.bool_)) or (isinstance(v, (int, float, np.number))
                                            and v in (0, 1)):
        return bool(v)
    raise ValueError(f"expected True or False, got {short_repr(v)}")


def choice_attr(*choices: str) -> Callable[[Any], str]:
    def parse(v):
        s = str(v)
        if s not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {short_repr(s)}")
        return s
    parse.choices = choices
    return parse


def format_attr(v) -> str:
    """A Python value as MXNet writes it in JSON."""
    if isinstance(v, str):
        return v
    if isinstance(v, (bool, np.bool_)):
        return "True" if v else "False"
    if isinstance(v, (tuple, list)):
        return "(" + ", ".join(format_attr(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    if isinstance(v, type) or isinstance(v, np.dtype):
        return np.dtype(v).name
    if v is None:
        return "None"
    return str(v)


@dataclass(frozen=True)
class Attr:
    parse: Callable[[Any], Any]
    default: Any = REQUIRED
    doc: str = ""


class Params(dict):
    """Parsed attributes; read as ``p.kernel`` or ``p['kernel']``."""

    def __getattr__(self, k):
        try:
            return self[k]
        except KeyError:
            raise AttributeError(k) from None


@dataclass(frozen=True)
class Sample:
    """Attributes and input shapes that the registry-driven tests run.

    ``low``/``high`` bound the random inputs (e.g. positive for ``log``);
    ``ints`` maps an input index to an exclusive upper bound for integer
    valued inputs (labels, embedding indices).
    """

    attrs: dict
    shapes: Sequence[tuple]
    low: float = -1.0
    high: float = 1.0
    ints: dict = field(default_factory=dict)
    grad: bool = True  # False where the gradient is not defined everywhere sampled


# --------------------------------------------------------------------------
# the OpDef
# --------------------------------------------------------------------------
def _const(value):
    return lambda p: value


_CATEGORY_FAMILY = {"elementwise": "elementwise", "injective": "shape"}


def _out_elements(p, in_shapes, out_shapes):
    return sum(numel(s) for s in out_shapes)


def _in_elements(p, in_shapes, out_shapes):
    return sum(numel(s) for s in in_shapes)


_CATEGORY_FLOPS = {"elementwise": _out_elements, "injective": lambda p, ins, outs: 0,
                   "reduction": _in_elements}


@dataclass(eq=False)
class OpDef:
    """Everything about one op. See the module docstring.

    lower(p, ctx, *inputs): inputs are the arguments followed by the aux
        states; returns one array, a tuple of outputs, or, for ops with aux
        states, ``(outputs, new_aux)``.
    infer_shape(p, in_shapes) -> (in_shapes, out_shapes): entries may be
        None where unknown; parameter shapes are filled in from the data.
    infer_type(p, in_types, num_outputs) -> (in_types, out_types); default:
        the inputs must share one dtype, and the outputs have it; shape-only
        inputs and the labels of loss ops may differ (see ``default_type``).
    gradient(node, ograds) -> one Entry or None per argument input; ograds
        holds one Entry per output (None where no gradient flows). Rules
        build nodes of other registered ops, often a ``_backward_<op>``.
    inplace(p) -> [(input index, output index)] pairs where the output may
        overwrite the input when the input dies at this op.
    category: 'elementwise' | 'injective' | 'reduction' | 'opaque'
    shape_inputs(p) -> input indices read only for their shape and dtype
        (``zeros_like``'s input, the ``like`` of ``_sum_to_like``): they do
        not keep the tensor's data alive, and the planner knows it.
    family: one of ``FAMILIES``; default 'loss' for loss ops, else from the
        category (elementwise -> 'elementwise', injective -> 'shape', others
        'other'). A backward op has its forward op's.
    flops(p, in_shapes, out_shapes) -> int: floating-point operations of one
        run (the recompute cost model weighs ops by it). Default by category:
        elementwise one per output element, injective none, reduction one per
        input element; an opaque op must give its own.
    anchor_weights: the lowering's ``anchor='weights'`` measure ties this
        op's backward node to its incoming gradient (layers with a weight).
    split_wgrad: this op's backward computes its weight gradient with
        ``ctx.linear_grads``, which the ``wgrad_chunks`` measure sums over
        batch slices and the ``wgrad_first`` measure computes before the
        data gradient; the lowering sets ``ctx.wgrad_chunks`` and
        ``ctx.wgrad_first`` for it only.
    forward: a backward op's forward op (``register_backward`` sets it).
    backward_io(p) -> (ograds, ins, outs, grads): for a backward op, the
        forward output indices whose gradients it reads, the forward input
        and output indices it reads (its inputs, in that order), and the
        forward argument indices whose gradients it writes (its outputs);
        ``register_backward`` sets it (the layout pass reads it).
    per_sample(p) -> bool: in training, sample i (axis 0) of every output
        reads only sample i of the inputs that carry the batch and all of
        the others (weights), so a slice of the batch runs on its own and
        the weight gradients summed over the slices are the whole batch's
        (``passes/batch_split.py`` splits only such ops). Default: True for
        elementwise ops, False otherwise; False where samples meet
        (BatchNorm's batch statistics, a loss normalised by the batch),
        where random numbers are drawn for the whole batch (Dropout), or
        where axis 0 moves (transpose, a Reshape not keeping dim 0).
    """

    name: str
    lower: Callable
    infer_shape: Callable
    attrs: dict = field(default_factory=dict)
    arguments: Callable | Sequence[str] = ("data",)
    aux: Callable | Sequence[str] = ()
    outputs: Callable | Sequence[str] = ("output",)
    visible_outputs: Callable | int | None = None
    infer_type: Callable | None = None
    gradient: Callable | None = None
    inplace: Callable | Sequence = ()
    shape_inputs: Callable | Sequence = ()
    category: str = "opaque"
    flops: Callable | None = None
    is_loss: bool = False
    needs_rng: bool = False
    family: str | None = None
    anchor_weights: bool = False
    split_wgrad: bool = False
    forward: OpDef | None = None
    backward_io: Callable | None = None
    per_sample: Callable | bool | None = None
    samples: Sequence[Sample] = ()
    doc: str = ""
    aliases: Sequence[str] = ()

    def __post_init__(self):
        for fname in ("arguments", "aux", "outputs", "inplace", "shape_inputs"):
            v = getattr(self, fname)
            if not callable(v):
                setattr(self, fname, _const(list(v)))
        if self.visible_outputs is None:
            self.visible_outputs = lambda p: len(self.outputs(p))
        elif not callable(self.visible_outputs):
            self.visible_outputs = _const(self.visible_outputs)
        if self.infer_type is None:
            self.infer_type = self.default_type
        if self.category not in CATEGORIES:
            raise OpError(f"op '{self.name}': category {self.category!r} is not one of "
                          f"{', '.join(CATEGORIES)}")
        if self.family is None:
            self.family = "loss" if self.is_loss else _CATEGORY_FAMILY.get(self.category,
                                                                           "other")
        if self.family not in FAMILIES:
            raise OpError(f"op '{self.name}': family {self.family!r} is not one of "
                          f"{', '.join(FAMILIES)}")
        if self.flops is None:
            self.flops = _CATEGORY_FLOPS.get(self.category)  # opaque: the op's own
        if self.per_sample is None:
            self.per_sample = self.category == "elementwise"
        if not callable(self.per_sample):
            self.per_sample = _const(bool(self.per_sample))

    # names and counts
    def arg_names(self, p) -> list[str]:
        return list(self.arguments(p))

    def aux_names(self, p) -> list[str]:
        return list(self.aux(p))

    def output_names(self, p) -> list[str]:
        return list(self.outputs(p))

    def num_outputs(self, p) -> int:
        return len(self.outputs(p))

    def num_visible_outputs(self, p) -> int:
        return self.visible_outputs(p)

    # attributes
    def parse_attrs(self, attrs: dict, node_name: str = "?"):
        """Returns (attrs as MXNet strings, parsed Params); OpError if bad."""
        raw: dict[str, str] = {}
        parsed = Params()
        for k, v in attrs.items():
            if k.startswith("__") and k.endswith("__"):
                raw[k] = format_attr(v)
                continue
            spec = self.attrs.get(k)
            if spec is None:
                if k in MXNET_KERNEL_HINTS:
                    raw[k] = format_attr(v)
                    continue
                near = difflib.get_close_matches(k, list(self.attrs), n=3)
                hint = f"; did you mean {', '.join(near)}?" if near else (
                    f"; it accepts {', '.join(sorted(self.attrs)) or 'no attributes'}")
                raise OpError(f"node '{node_name}' ({self.name}): unknown attribute "
                              f"{short_repr(k)}{hint}")
            try:
                parsed[k] = spec.parse(v)
            except (ValueError, TypeError, OverflowError) as err:
                raise OpError(f"node '{node_name}' ({self.name}): attribute "
                              f"{k}={short_repr(v)}: {err}") from None
            raw[k] = format_attr(v)
        for k, spec in self.attrs.items():
            if k not in parsed:
                if spec.default is REQUIRED:
                    raise OpError(f"node '{node_name}' ({self.name}): missing required "
                                  f"attribute '{k}'")
                parsed[k] = spec.default
        return raw, parsed

    def default_type(self, p, in_types, num_outputs):
        """The dtype rule of an op without its own: ``same_type`` over the
        inputs whose values it computes with. Exempt are the inputs read for
        their shape only (``zeros_like``'s, ``_sum_to_like``'s ``like``), the
        labels of loss ops (MXNet feeds integer or float labels alike), and
        every input of an internal ``_backward_`` op: its inputs are forward
        tensors already checked at the forward op, and may mix gradients with
        integer indices or labels."""
        if self.name.startswith("_backward_"):
            free = range(len(in_types))
        else:
            free = set(self.shape_inputs(p))
            if self.is_loss:
                free |= set(range(1, len(self.arg_names(p))))
        return same_type(p, in_types, num_outputs, free)

    def __repr__(self):
        return f"OpDef({self.name})"


# --------------------------------------------------------------------------
# the registry
# --------------------------------------------------------------------------
_REGISTRY: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    """Adds ``op`` to the registry; OpError if it lacks a fact the rest of
    symgraph reads without asking (the family is checked on construction)."""
    if op.flops is None:
        raise OpError(f"op '{op.name}': an {op.category} op needs flops(p, in_shapes, "
                      f"out_shapes); only elementwise, injective and reduction ops have "
                      f"a default")
    if op.name.startswith("_backward_") and op.forward is None:
        raise OpError(f"op '{op.name}': backward ops are registered by register_backward "
                      f"(ops/backward.py), which records their forward op")
    for n in (op.name, *op.aliases):
        if n in _REGISTRY:
            raise RuntimeError(f"op {n} registered twice")
        _REGISTRY[n] = op
    return op


def get_op(name: str) -> OpDef:
    if not isinstance(name, str):
        raise OpError(f"an op name is a string such as 'Convolution', got {short_repr(name)}")
    try:
        return _REGISTRY[name]
    except KeyError:
        public = [k for k in _REGISTRY if not k.startswith("_backward")]
        low = name.lower()
        near = [k for k in public if k.lower() == low][:1]
        near += [k for k in difflib.get_close_matches(name, public, n=3, cutoff=0.5)
                 if k not in near]
        hint = f"; nearest known ops: {', '.join(near)}" if near else ""
        raise OpError(f"unknown op {short_repr(name)}{hint}") from None


def list_ops(include_internal: bool = False) -> list[str]:
    """Registered op names (aliases included); internal ops start with '_'."""
    names = sorted(_REGISTRY)
    if not include_internal:
        names = [n for n in names if not n.startswith("_backward")]
    return names


class OpFunctions:
    """The registered ops as the functions of a module (``sg.sym.relu``,
    ``sg.nd.relu``), made once per op: ``call(opname, args, kwargs)`` runs
    one; ``where`` names the module in the error for an unknown name; the
    docstring is the op's, then ``note``. A module's ``__getattr__`` is
    ``module_getattr``; its ``__dir__`` is ``names(globals())``."""

    def __init__(self, where: str, call: Callable, note: str = ""):
        self.where, self.call, self.note = where, call, note
        self._made: dict = {}

    def __call__(self, name: str):
        fn = self._made.get(name)
        if fn is None:
            op = get_op(name)
            call = self.call

            def fn(*args, **kwargs):
                return call(name, args, kwargs)

            fn.__name__ = fn.__qualname__ = name
            fn.__doc__ = (op.doc or f"The {name} op.") + self.note
            self._made[name] = fn
        return fn

    def module_getattr(self, name: str):
        from ..errors import UnknownOpError
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self(name)
        except OpError as err:
            raise UnknownOpError(f"{self.where} has no attribute '{name}': {err}") from None

    @staticmethod
    def names(module_globals: dict) -> list:
        return sorted(list(module_globals) + list_ops())


def all_opdefs() -> list[OpDef]:
    """Each OpDef once (aliases folded)."""
    seen, out = set(), []
    for op in _REGISTRY.values():
        if id(op) not in seen:
            seen.add(id(op))
            out.append(op)
    return out


# --------------------------------------------------------------------------
# helpers shared by the op families
# --------------------------------------------------------------------------
def same_type(p, in_types, num_outputs, free=()):
    """All inputs and outputs share one dtype: the known dtypes of the inputs
    not in ``free`` must agree (ShapeError naming them if not, as MXNet
    refuses float32 + int32); unknown inputs and the outputs get it. Inputs
    in ``free`` keep their own dtype and only lend theirs when no other is
    known."""
    free = set(free)
    checked = [t for i, t in enumerate(in_types) if t is not None and i not in free]
    known = checked[0] if checked else next((t for t in in_types if t is not None), None)
    if any(t != known for t in checked):
        raise ShapeError(f"inputs must have one dtype, got {', '.join(map(str, checked))}")
    return [known if t is None else t for t in in_types], [known] * num_outputs


def unify(shapes, what: str = "inputs") -> tuple | None:
    """The one shape all known ``shapes`` agree on; ShapeError if they differ."""
    known = [s for s in shapes if s is not None]
    if not known:
        return None
    first = tuple(known[0])
    for s in known[1:]:
        if tuple(s) != first:
            raise ShapeError(f"{what} must have the same shape, got "
                             f"{', '.join(str(tuple(x)) for x in known)}")
    return first


def numel(shape) -> int:
    return int(math.prod(shape)) if shape is not None else 0
