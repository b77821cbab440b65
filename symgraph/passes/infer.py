"""Shape and dtype inference.

``infer_shapes(graph, {'data': (64, 3, 224, 224)})`` fills in the shape of
every entry, parameter shapes included (each op infers its weights from the
data, as MXNet does). Results are side tables indexed by entry id; the
graph is not touched. Sweeps repeat until nothing changes, so a variable
that a later op determines is known to an earlier one too.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..dtypes import dtype_name, hint_name
from ..errors import ShapeError
from ..graph import Graph
from ..ops.registry import same_type, shape_attr
from ..util import short_repr

# the largest tensor a shape may describe: its element count must fit in
# int64, or byte counts and NumPy's products overflow silently
MAX_ELEMENTS = 2 ** 63 - 1


def check_shape(name, shape) -> tuple:
    """``shape`` as a tuple of Python ints; ShapeError naming ``name`` unless
    it is a tuple or list of positive ints (Python or NumPy). Strings,
    floats and bools are refused, never coerced: ``'23'`` is not (2, 3) and
    ``(2.7, 784)`` not (2, 784)."""
    if isinstance(shape, np.ndarray) and shape.ndim == 1:
        shape = shape.tolist()
    if not isinstance(shape, (tuple, list)):
        raise ShapeError(f"shape of '{name}' must be a tuple of positive ints such as "
                         f"(64, 784), got {short_repr(shape)}")
    for d in shape:
        if (isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer))
                or d <= 0):
            raise ShapeError(f"shape of '{name}' must be a tuple of positive ints such as "
                             f"(64, 784), got {short_repr(shape)}")
    dims = tuple(int(d) for d in shape)
    if math.prod(dims) > MAX_ELEMENTS:
        raise ShapeError(f"shape of '{name}' is too large: {short_repr(dims)} has more than "
                         f"2**63 elements")
    return dims


def check_shapes(shapes) -> dict:
    """``{input name: shape}`` validated where shapes enter (``sg.plan``,
    ``infer_shape``, binding): names are strings, each shape is a tuple of
    positive ints (``check_shape``) or None for unknown."""
    if shapes is None:
        return {}
    if not isinstance(shapes, Mapping):
        raise ShapeError(f"shapes must be a dict of input shapes such as "
                         f"{{'data': (64, 784)}}, got {short_repr(shapes)}")
    out = {}
    for name, shape in shapes.items():
        if not isinstance(name, str):
            raise ShapeError(f"input names must be strings, got {short_repr(name)}")
        out[name] = None if shape is None else check_shape(name, shape)
    return out


# MXNet's naming of parameters (as mx.viz hides them)
_PARAM_SUFFIXES = ("_weight", "_bias", "_gamma", "_beta", "_moving_mean", "_moving_var",
                   "_running_mean", "_running_var")


def parameter_names(graph: Graph) -> set[str]:
    """Variables that are parameters or aux states rather than data/labels.

    Like mx.viz: names with a parameter suffix (``_weight``, ``_bias`` ...),
    plus aux states and the inputs an op created itself under a name other
    than data or label (``fc1_weight`` for ``FullyConnected``'s weight).
    """
    params = {n.name for n in graph.aux_states}
    for n in graph.nodes:
        if n.op is None:
            if n.name.endswith(_PARAM_SUFFIXES):
                params.add(n.name)
            continue
        names = n.op.arg_names(n.params) + n.op.aux_names(n.params)
        for arg, e in zip(names, n.inputs):
            if (e.node.op is None and arg not in ("data", "label", "lhs", "rhs")
                    and e.node.name == f"{n.name}_{arg}"):
                params.add(e.node.name)
    return params


def data_inputs(graph: Graph) -> list[str]:
    """The variables a user gives shapes for: data and labels, not the
    parameters inferred from them (all variables if every one looks like
    a parameter)."""
    params = parameter_names(graph)
    names = [n.name for n in graph.variables if n.name not in params]
    return names or [n.name for n in graph.variables]


@dataclass(frozen=True)
class Inferred:
    """Shapes and dtypes of every entry of ``graph`` (None where unknown)."""

    graph: Graph
    shapes: tuple
    dtypes: tuple

    def shape(self, entry) -> tuple | None:
        return self.shapes[self.graph.entry_id(entry)]

    def dtype(self, entry) -> str | None:
        return self.dtypes[self.graph.entry_id(entry)]


def _var_hint(node, key, parse):
    v = node.attrs.get(key)
    if v is None:
        return None
    try:
        return parse(v)
    except ValueError:
        raise ShapeError(f"variable '{node.name}': bad {key} hint {short_repr(v)}") from None


def _merge(table, eid, value, what, node, slot):
    old = table[eid]
    if value is None:
        return False
    value = tuple(value) if isinstance(value, (tuple, list)) else value
    if old is None:
        if what == "shape" and (any(d <= 0 for d in value) or math.prod(value) > MAX_ELEMENTS):
            # an op's attributes gave an impossible tensor (MXNet checks each op)
            raise ShapeError(f"node '{node.name}' ({node.op.name if node.op else 'variable'})"
                             f": {slot} would have shape {short_repr(value)}; every "
                             f"dimension must be positive and the size below 2**63")
        table[eid] = value
        return True
    if old != value:
        raise ShapeError(f"node '{node.name}' ({node.op.name if node.op else 'variable'}): "
                         f"{what} of {slot} is {old}, but the op needs {value}")
    return False


def _run(graph: Graph, known: dict, kind: str):
    table: list = [None] * graph.num_entries
    names = {n.name for n in graph.variables}
    for k in known:
        if k not in names:
            given = data_inputs(graph)
            rest = len(names) - len(given)
            raise ShapeError(f"{short_repr(k)} is not an input of the graph; its inputs are "
                             f"{', '.join(given)}"
                             + (f" ({rest} parameters and aux states are inferred from "
                                f"them)" if rest else ""))
    for n in graph.variables:
        eid = graph.entry_id_of_node(n)
        if n.name in known and known[n.name] is not None:
            v = known[n.name]
            # a dtype by any name JAX knows (bfloat16 too); ShapeError otherwise
            table[eid] = v if kind == "shape" else dtype_name(v)
        elif kind == "shape":
            hint = _var_hint(n, "__shape__", shape_attr)
            if hint and all(d > 0 for d in hint):
                table[eid] = hint
        else:
            hint = _var_hint(n, "__dtype__", hint_name)
            if hint:
                table[eid] = hint
    # variables that take another entry's shape/dtype (head gradients)
    like = []
    by_name = {n.name: n for n in graph.nodes}
    for n in graph.variables:
        ref = n.attrs.get("__like__")
        if ref:
            src, _, idx = ref.rpartition(":")
            if src in by_name:
                like.append((graph.entry_id_of_node(n),
                             graph.entry_id_of_node(by_name[src]) + int(idx), n))
    changed = True
    while changed:
        changed = False
        for dst, src, n in like:
            if table[src] is not None:
                changed |= _merge(table, dst, table[src], kind, n, "the output it is the "
                                  "gradient of")
        for nid, node in enumerate(graph.nodes):
            if node.op is None:
                continue
            in_ids = [graph.entry_id(e) for e in node.inputs]
            ins = [table[i] for i in in_ids]
            base = graph.row_ptr[nid]
            n_out = node.num_outputs
            try:
                if kind == "shape":
                    new_in, outs = node.op.infer_shape(node.params, list(ins))
                else:
                    rule = node.op.infer_type or same_type
                    new_in, outs = rule(node.params, list(ins), n_out)
            except (ShapeError, IndexError, ValueError, TypeError, ZeroDivisionError,
                    OverflowError) as err:
                # an op's rule written for the ranks it takes, given another
                # (FullyConnected on a scalar): the inputs are at fault
                why = str(err) if isinstance(err, ShapeError) else \
                    f"inputs it cannot take ({type(err).__name__}: {err})"
                shown = ", ".join(f"{nm}={s}" for nm, s in zip(
                    node.op.arg_names(node.params) + node.op.aux_names(node.params), ins))
                raise ShapeError(f"node '{node.name}' ({node.op.name}): {why} "
                                 f"[inputs: {shown}]") from None
            if len(outs) != n_out:
                raise AssertionError(f"{node.op.name}.infer_{kind} gave {len(outs)} outputs")
            what = "shape" if kind == "shape" else "dtype"
            # once per node, not per input: linear in a 4,000-input ElementWiseSum
            slot_names = node.op.arg_names(node.params) + node.op.aux_names(node.params)
            for slot, (i, v) in enumerate(zip(in_ids, new_in)):
                changed |= _merge(table, i, v, what, node, f"input '{slot_names[slot]}'")
            for k, v in enumerate(outs):
                changed |= _merge(table, base + k, v, what, node, f"output {k}")
    return table


def infer_shapes(graph: Graph, shapes: dict, dtypes: dict | None = None,
                 partial: bool = False) -> Inferred:
    """Shapes and dtypes of every entry. Unknown dtypes default to float32.

    With ``partial=False`` a shape that cannot be inferred is an error that
    names the inputs whose shapes are missing.
    """
    shape_table = _run(graph, check_shapes(shapes), "shape")
    dtypes = dict(dtypes or {})
    for n in graph.variables:
        if n.name not in dtypes and "__dtype__" not in n.attrs:
            dtypes[n.name] = None
    type_table = _run(graph, {k: v for k, v in dtypes.items() if v is not None}, "dtype")
    type_table = [t or "float32" for t in type_table]
    if not partial:
        missing = [n.name for n in graph.variables
                   if shape_table[graph.entry_id_of_node(n)] is None]
        unknown = [i for i, s in enumerate(shape_table) if s is None]
        if missing or unknown:
            if missing:
                # name the data and labels to give, not the weights they determine
                params = parameter_names(graph)
                missing = [m for m in missing if m not in params] or missing
                raise ShapeError(f"cannot infer the shape of {', '.join(missing)}: give "
                                 f"it, e.g. infer_shape({missing[0]}=(...))")
            nid = next(i for i in range(len(graph.nodes)) if graph.row_ptr[i + 1] > unknown[0])
            raise ShapeError(f"cannot infer the output shape of node "
                             f"'{graph.nodes[nid].name}' ({graph.nodes[nid].op.name})")
    return Inferred(graph, tuple(shape_table), tuple(type_table))
