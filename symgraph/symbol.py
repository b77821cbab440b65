"""The declarative API, MXNet 1.x style.

    import symgraph as sg
    data = sg.sym.Variable('data')
    net = sg.sym.Convolution(data=data, kernel=(3, 3), num_filter=64, name='conv1')
    net = sg.sym.Activation(net, act_type='relu')
    arg_shapes, out_shapes, aux_shapes = net.infer_shape(data=(64, 3, 224, 224))

Every registered op is a function of this module (``sg.sym.<Op>``). Inputs
that are not given (weights, biases, BatchNorm's gamma/beta and moving
statistics) are created as variables named ``<node>_<input>``.
"""
from __future__ import annotations

import threading
import warnings
from typing import Sequence

import numpy as np

from . import serialize
from .dtypes import dtype_name, np_dtype
from .errors import GraphError, OpError, ShapeError
from .graph import Entry, Graph, Node
from .ops import get_op
from .ops.registry import OpFunctions, format_attr
from .passes.infer import infer_shapes
from .serialize import HIDDEN_KEYS
from .util import short_repr


# --------------------------------------------------------------------------
# automatic names: convolution0, convolution1, ...
# --------------------------------------------------------------------------
class NameManager:
    """Hands out ``<hint><n>`` names; ``with NameManager():`` starts afresh."""

    _local = threading.local()

    def __init__(self):
        self._counter: dict[str, int] = {}

    def get(self, name: str | None, hint: str) -> str:
        if name:
            return name
        hint = hint.lower()
        n = self._counter.get(hint, 0)
        self._counter[hint] = n + 1
        return f"{hint}{n}"

    def __enter__(self):
        self._old = NameManager.current()
        NameManager._local.current = self
        return self

    def __exit__(self, *exc):
        NameManager._local.current = self._old

    @staticmethod
    def current() -> "NameManager":
        cur = getattr(NameManager._local, "current", None)
        if cur is None:
            cur = NameManager._local.current = NameManager()
        return cur


# --------------------------------------------------------------------------
# attribute scopes: with AttrScope(ctx_group='stage1'): ...
# --------------------------------------------------------------------------
def _stored_key(k: str) -> str:
    """How a variable stores a user attribute: MXNet's hidden keys
    (ctx_group, lr_mult ...) with double underscores, others as given."""
    return f"__{k}__" if k in HIDDEN_KEYS else k


class AttrScope:
    """Attributes every symbol created inside the ``with`` block gets, as
    MXNet's ``mx.AttrScope``: ``with sg.AttrScope(ctx_group='stage1'):``
    puts ``__ctx_group__`` on the op nodes and the variables (parameters
    included) made there. Scopes nest (the inner value wins); an attribute
    given to a symbol explicitly wins over the scope's."""

    _local = threading.local()

    def __init__(self, **kwargs):
        for k, v in kwargs.items():
            if not isinstance(v, str):
                raise GraphError(f"AttrScope: attribute '{k}' must be a string, got {v!r}")
        self._attr = dict(kwargs)
        self._old = None

    def get(self, attr: dict | None) -> dict:
        """The scope's attributes updated with ``attr``."""
        out = dict(self._attr)
        out.update(attr or {})
        return out

    def __enter__(self):
        self._old = AttrScope.current()
        merged = dict(self._old._attr)
        merged.update(self._attr)
        self._attr = merged
        AttrScope._local.current = self
        return self

    def __exit__(self, *exc):
        AttrScope._local.current = self._old

    @staticmethod
    def current() -> "AttrScope":
        cur = getattr(AttrScope._local, "current", None)
        if cur is None:
            cur = AttrScope._local.current = AttrScope()
        return cur


def _scope_attrs() -> dict:
    """The current scope's attributes as nodes store them (``__ctx_group__``)."""
    return {k if k.startswith("__") else f"__{k}__": v
            for k, v in AttrScope.current()._attr.items()}


# --------------------------------------------------------------------------
# Symbol
# --------------------------------------------------------------------------
class Symbol:
    """A list of output entries of a graph (one for most symbols)."""

    __slots__ = ("_outputs",)

    def __init__(self, outputs: Sequence[Entry]):
        self._outputs = tuple(outputs)

    # -- structure ---------------------------------------------------------
    @property
    def outputs(self) -> tuple:
        return self._outputs

    def graph(self) -> Graph:
        return Graph(self._outputs)

    @property
    def name(self) -> str | None:
        return self._outputs[0].node.name if len(self._outputs) == 1 else None

    def list_arguments(self) -> list[str]:
        return self.graph().list_arguments()

    def list_outputs(self) -> list[str]:
        return [e.node.output_names()[e.index] for e in self._outputs]

    def list_auxiliary_states(self) -> list[str]:
        return self.graph().list_auxiliary_states()

    def list_inputs(self) -> list[str]:
        return [n.name for n in self.graph().variables]

    def get_internals(self) -> "Symbol":
        """Every visible output of every node, as one grouped symbol."""
        entries = []
        for n in self.graph().nodes:
            entries += [Entry(n, i) for i in range(n.num_visible_outputs)]
        return Symbol(entries)

    def get_children(self) -> "Symbol | None":
        ins = [e for o in self._outputs for e in o.node.inputs]
        return Symbol(ins) if ins else None

    def __len__(self):
        return len(self._outputs)

    def __iter__(self):
        return (Symbol([e]) for e in self._outputs)

    def __getitem__(self, key) -> "Symbol":
        if isinstance(key, str):
            names = self.list_outputs()
            if key not in names:
                # MXNet also lets a node's name pick its single output
                hits = [i for i, e in enumerate(self._outputs) if e.node.name == key]
                if len(hits) != 1:
                    raise GraphError(f"no output named '{key}'; outputs are "
                                     f"{', '.join(names[:20])}{' ...' if len(names) > 20 else ''}")
                return Symbol([self._outputs[hits[0]]])
            return Symbol([self._outputs[names.index(key)]])
        if isinstance(key, slice):
            return Symbol(self._outputs[key])
        if not -len(self._outputs) <= key < len(self._outputs):
            raise IndexError(f"output {key} out of range ({len(self._outputs)} outputs)")
        return Symbol([self._outputs[key]])

    # -- attributes -------------------------------------------------------------
    def attr(self, key: str):
        node = self._single("attr")
        v = node.attrs.get(key)
        if v is None:
            v = node.attrs.get(f"__{key}__")
        return v

    def list_attr(self) -> dict:
        return dict(self._single("list_attr").attrs)

    def attr_dict(self) -> dict:
        return {n.name: dict(n.attrs) for n in self.graph().nodes if n.attrs}

    def _single(self, what: str) -> Node:
        if len(self._outputs) != 1:
            raise GraphError(f"{what} needs a symbol with one output, this one has "
                             f"{len(self._outputs)}")
        return self._outputs[0].node

    # -- inference ----------------------------------------------------------------
    def _shape_dict(self, args, kwargs) -> dict:
        if args:
            names = self.list_arguments()
            if len(args) > len(names):
                raise ShapeError(f"{len(args)} positional shapes for {len(names)} arguments")
            kwargs = {**{n: s for n, s in zip(names, args) if s is not None}, **kwargs}
        return kwargs

    def _infer(self, known: dict, partial: bool, what="shape"):
        g = self.graph()
        if what == "shape":
            inf = infer_shapes(g, known, partial=partial)
            table = inf.shapes
        else:
            inf = infer_shapes(g, {}, dtypes=known, partial=True)
            table = inf.dtypes
        return self._tables(g, table)

    def _infer_shape_or_raise(self, *args, **kwargs):
        """infer_shape that raises ShapeError naming the missing inputs
        instead of returning ``(None, None, None)``: for internal callers
        that cannot go on without every shape."""
        return self._infer(self._shape_dict(args, kwargs), partial=False)

    def infer_shape(self, *args, **kwargs):
        """(argument shapes, output shapes, aux shapes). Parameter shapes
        come from the data shape. As MXNet's: when the shapes given do not
        determine every shape, a warning names the inputs to give and the
        result is ``(None, None, None)``; shapes that contradict each other
        raise ShapeError."""
        known = self._shape_dict(args, kwargs)
        g = self.graph()
        inf = infer_shapes(g, known, partial=True)  # raises on conflicts only
        if all(s is not None for s in inf.shapes):
            return self._tables(g, inf.shapes)
        try:  # the strict pass words what is missing
            infer_shapes(g, known, partial=False)
        except ShapeError as err:
            warnings.warn(f"infer_shape: {err}", stacklevel=2)
        return None, None, None

    def infer_shape_partial(self, *args, **kwargs):
        """Like infer_shape, but what cannot be inferred is ``()`` (MXNet's
        unknown shape) instead of making the whole result None."""
        a, o, x = self._infer(self._shape_dict(args, kwargs), partial=True)
        unknown = ()
        return ([unknown if s is None else s for s in a], [unknown if s is None else s for s in o],
                [unknown if s is None else s for s in x])

    def infer_type(self, *args, **kwargs):
        """(argument dtypes, output dtypes, aux dtypes) as NumPy scalar types
        (``numpy.float32``), as MXNet's; dtypes nothing determines are
        float32. Known dtypes are names, NumPy types or dtypes."""
        known = self._shape_dict(args, kwargs)
        a, o, x = self._infer({k: dtype_name(v) for k, v in known.items()}, True, "type")
        return ([_np_type(t) for t in a], [_np_type(t) for t in o], [_np_type(t) for t in x])

    def infer_type_partial(self, *args, **kwargs):
        """infer_type (every dtype is determined: the default is float32)."""
        return self.infer_type(*args, **kwargs)

    # -- composition ------------------------------------------------------------
    def __call__(self, *args, name: str | None = None, **kwargs) -> "Symbol":
        """A new symbol with free variables replaced by other symbols, as
        MXNet's ``Symbol.__call__``: ``net(data=other)`` replaces the
        variable named ``data`` (an argument or an aux state);
        ``net(other, ...)`` replaces the arguments in ``list_arguments()``
        order. ``name=`` renames the output node. This symbol is unchanged."""
        if args and kwargs:
            raise GraphError("compose takes the replacing symbols either positionally or "
                             "by name, not both")
        node = self._outputs[0].node if self._outputs else None
        if node is None or node.op is None:
            raise GraphError(f"a variable cannot be composed ({node.name if node else 'empty'}"
                             f"); compose the symbol that reads it")
        g = self.graph()
        if args:
            names = self.list_arguments()
            if len(args) > len(names):
                raise GraphError(f"compose: {len(args)} symbols for {len(names)} arguments "
                                 f"({', '.join(names)})")
            kwargs = dict(zip(names, args))
        inputs = [n.name for n in g.variables]
        for k, v in kwargs.items():
            if k not in inputs:
                raise GraphError(f"compose: {short_repr(k)} is not a free variable of this "
                                 f"symbol; they are {', '.join(inputs)}")
            if not isinstance(v, Symbol):
                raise GraphError(f"compose: '{k}' must be replaced by a Symbol, got "
                                 f"{type(v).__name__}")
            if len(v.outputs) != 1:
                raise GraphError(f"compose: '{k}' is replaced by a group of {len(v.outputs)} "
                                 f"outputs; pick one with [i]")
        if name is not None and (not isinstance(name, str) or not name):
            raise GraphError(f"compose: name must be a non-empty string, got {name!r}")
        new: dict[int, Entry] = {}  # id(old node) -> entry standing for its output 0

        def moved(e):
            m = new.get(id(e.node))
            return e if m is None else Entry(m.node, m.index + e.index)

        for n in g.nodes:
            if n.op is None:
                if n.name in kwargs:
                    new[id(n)] = kwargs[n.name].outputs[0]
                continue
            ins = [moved(e) for e in n.inputs]
            if any(a is not b for a, b in zip(ins, n.inputs)):
                new[id(n)] = Entry(n.with_inputs(ins), 0)
        outs = [moved(e) for e in self._outputs]
        if name is not None:
            head = outs[0].node
            renamed = head.with_inputs(head.inputs)
            renamed.name = name
            outs = [Entry(renamed, e.index) if e.node is head else e for e in outs]
        composed = Symbol(outs)
        composed.graph()  # duplicate names, cycles: GraphError now, not at bind
        return composed

    @staticmethod
    def _tables(g, table):
        args = [table[g.entry_id_of_node(n)] for n in g.arguments]
        outs = [table[g.entry_id(e)] for e in g.outputs]
        aux = [table[g.entry_id_of_node(n)] for n in g.aux_states]
        return args, outs, aux

    # -- serialization -------------------------------------------------------------
    def tojson(self) -> str:
        return serialize.to_json(self.graph())

    def save(self, fname: str) -> None:
        serialize.save(self.graph(), fname)

    # -- binding -------------------------------------------------------------------
    def simple_bind(self, ctx=None, grad_req="write", type_dict=None, memory_measures="auto",
                    group2ctx=None, memory_budget=None, recompute=None, **shapes):
        """Binds zero arrays of the inferred shapes. ``memory_measures``:
        how the programs are lowered (``symgraph.measures``: 'auto', 'none'
        or measure names). ``group2ctx``: ctx_group name -> device (model
        parallel, docs/training.md). ``memory_budget`` ('6GiB', bytes) /
        ``recompute`` ('mirror', 'sqrt', 'solver', node names): the backward
        recomputes what ``sg.plan(..., budget=, recompute=)`` chooses
        (``Executor.budget_plan``)."""
        from .executor import Executor
        return Executor.simple_bind(self, ctx, grad_req=grad_req, type_dict=type_dict,
                                    shapes=shapes, memory_measures=memory_measures,
                                    group2ctx=group2ctx, memory_budget=memory_budget,
                                    recompute=recompute)

    def bind(self, ctx=None, args=None, args_grad=None, grad_req="write", aux_states=None,
             memory_measures="auto", group2ctx=None, memory_budget=None, recompute=None):
        from .executor import Executor
        return Executor(self, ctx, args, args_grad, grad_req, aux_states,
                        memory_measures=memory_measures, group2ctx=group2ctx,
                        memory_budget=memory_budget, recompute=recompute)

    def eval(self, ctx=None, **kwargs):
        """Runs the symbol once on NDArrays (inference); returns the outputs."""
        ex = self.bind(ctx, args=kwargs, grad_req="null")
        return ex.forward()

    # -- operators ------------------------------------------------------------------
    def _binary(self, other, op, scalar_op, reverse=False):
        if isinstance(other, Symbol):
            a, b = (other, self) if reverse else (self, other)
            return _apply(op, [a, b], {})
        if isinstance(other, (int, float, np.number)):
            return _apply(scalar_op, [self], {"scalar": float(other)})
        return NotImplemented

    def __add__(self, o):
        return self._binary(o, "elemwise_add", "_plus_scalar")

    __radd__ = __add__

    def __sub__(self, o):
        return self._binary(o, "elemwise_sub", "_minus_scalar")

    def __rsub__(self, o):
        return self._binary(o, "elemwise_sub", "_rminus_scalar", reverse=True)

    def __mul__(self, o):
        return self._binary(o, "elemwise_mul", "_mul_scalar")

    __rmul__ = __mul__

    def __truediv__(self, o):
        return self._binary(o, "elemwise_div", "_div_scalar")

    def __rtruediv__(self, o):
        return self._binary(o, "elemwise_div", "_rdiv_scalar", reverse=True)

    def __pow__(self, o):
        if isinstance(o, (int, float, np.number)):
            return _apply("_power_scalar", [self], {"scalar": float(o)})
        return NotImplemented

    def __neg__(self):
        return _apply("negative", [self], {})

    def __copy__(self):
        return Symbol(self._outputs)

    def __repr__(self):
        if len(self._outputs) == 1:
            return f"<Symbol {self._outputs[0].node.name}>"
        return f"<Symbol group [{', '.join(self.list_outputs())}]>"

    def debug_str(self) -> str:
        return self.graph().text()


def _np_type(name):
    """A dtype name as the NumPy scalar type MXNet's infer_type gives
    (``numpy.float32``; ml_dtypes' type for bfloat16)."""
    return None if name is None else np_dtype(name).type


# --------------------------------------------------------------------------
# construction
# --------------------------------------------------------------------------
def Variable(name: str, attr: dict | None = None, shape=None, lr_mult=None, wd_mult=None,
             dtype=None, init=None, **kwargs) -> Symbol:
    """A named input: data, label or parameter. Hints are stored as attrs."""
    if not isinstance(name, str):
        raise GraphError(f"Variable name must be a string, got {name!r}")
    attrs = {_stored_key(k): str(v) for k, v in AttrScope.current().get(attr).items()}
    if shape is not None:
        attrs["__shape__"] = format_attr(tuple(shape))
    if dtype is not None:
        attrs["__dtype__"] = dtype_name(dtype)
    if lr_mult is not None:
        attrs["__lr_mult__"] = str(lr_mult)
    if wd_mult is not None:
        attrs["__wd_mult__"] = str(wd_mult)
    if init is not None:
        attrs["__init__"] = init if isinstance(init, str) else init.dumps()
    for k, v in kwargs.items():
        attrs[k if k.startswith("__") else f"__{k}__"] = str(v)
    return Symbol([Entry(Node(None, name, attrs), 0)])


var = Variable


def Group(symbols: Sequence[Symbol]) -> Symbol:
    """One symbol whose outputs are those of ``symbols``, in order."""
    outs = []
    for s in symbols:
        if not isinstance(s, Symbol):
            raise GraphError(f"Group takes symbols, got {type(s).__name__}")
        outs.extend(s.outputs)
    return Symbol(outs)


def _apply(opname: str, inputs: Sequence, attrs: dict, name: str | None = None,
           kw_inputs: dict | None = None) -> Symbol:
    op = get_op(opname)
    name = NameManager.current().get(name, op.name.lstrip("_") if not op.name.startswith("_")
                                     else op.name.lstrip("_"))
    # attributes first: they decide the input names (no_bias, num_args ...)
    if op.attrs.get("num_args") is not None and "num_args" not in attrs:
        attrs = {**attrs, "num_args": len(inputs)}
    node_attrs, params = op.parse_attrs(attrs, name)
    arg_names = op.arg_names(params)
    aux_names = op.aux_names(params)
    slots: dict[str, Symbol] = {}
    if len(inputs) > len(arg_names):
        raise OpError(f"node '{name}' ({op.name}): {len(inputs)} positional inputs, but the op "
                      f"takes {len(arg_names)} ({', '.join(arg_names)})")
    for n, s in zip(arg_names, inputs):
        slots[n] = s
    for n, s in (kw_inputs or {}).items():
        if n not in arg_names and n not in aux_names:
            raise OpError(f"node '{name}' ({op.name}): no input named '{n}'; inputs are "
                          f"{', '.join(arg_names + aux_names)}")
        slots[n] = s
    entries = []
    for n in arg_names + aux_names:
        s = slots.get(n)
        if s is None:
            s = Variable(f"{name}_{n}")
        if not isinstance(s, Symbol):
            raise OpError(f"node '{name}' ({op.name}): input '{n}' must be a Symbol, got "
                          f"{type(s).__name__}")
        if len(s.outputs) != 1:
            raise OpError(f"node '{name}' ({op.name}): input '{n}' is a group of "
                          f"{len(s.outputs)} outputs; pick one with [i]")
        entries.append(s.outputs[0])
    scoped = _scope_attrs()
    if scoped:
        attrs = {**{k: v for k, v in scoped.items() if k not in attrs}, **attrs}
    node = Node(op, name, attrs, entries)
    return Symbol([Entry(node, i) for i in range(node.num_visible_outputs)])


def _call_op(opname: str, args, kwargs) -> Symbol:
    """``sg.sym.OP(*inputs, name=, attr=, **attrs_or_named_inputs)``: a
    Symbol keyword is a named input, anything else an attribute; one
    list or tuple stands for the inputs."""
    name, attr = kwargs.pop("name", None), kwargs.pop("attr", None)
    inputs = list(args)
    kw_inputs, attrs = {}, {}
    for k, v in kwargs.items():
        (kw_inputs if isinstance(v, Symbol) else attrs)[k] = v
    if attr:
        attrs.update({k if k.startswith("__") else f"__{k}__": v for k, v in attr.items()})
    if len(inputs) == 1 and isinstance(inputs[0], (list, tuple)):
        inputs = list(inputs[0])
    return _apply(opname, inputs, attrs, name, kw_inputs)


_OP_FUNCTIONS = OpFunctions("sg.sym", _call_op)
__getattr__ = _OP_FUNCTIONS.module_getattr


def __dir__():
    return OpFunctions.names(globals())


def load(fname: str) -> Symbol:
    """The symbol stored in an MXNet symbol-JSON file (any MXNet version)."""
    return Symbol(serialize.load(fname).outputs)


def load_json(text: str) -> Symbol:
    """The symbol described by MXNet symbol-JSON ``text``."""
    return Symbol(serialize.from_json(text).outputs)
