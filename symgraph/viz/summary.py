"""MXNet's ``mx.viz.plot_network`` and ``mx.viz.print_summary``.

``plot_network`` is ``plot`` under MXNet's name and arguments.
``print_summary`` prints MXNet's table: one row per layer with its name and
op, its output shape without the batch axis, its parameter count and the
layers it reads, then the total. A parameter is a learnable argument a
layer reads (weights, biases, BatchNorm's gamma and beta; the moving
statistics are aux states, not parameters), counted from the inferred
shapes at the first layer that reads it. MXNet counts Convolution,
FullyConnected, BatchNorm and Embedding only; here every layer's learnable
inputs count (Deconvolution, a PReLU's gamma, LayerNorm ...), so the total
is the number of values training updates.
"""
from __future__ import annotations

import math
import numbers

from ..errors import ShapeError
from ..passes.infer import infer_shapes, parameter_names
from ..util import short_repr
from .draw import FORMATS, VizError, plot

_HEADER = ("Layer (type)", "Output Shape", "Param #", "Previous Layer")


def _symbol_graph(symbol, what: str):
    from ..symbol import Symbol
    if not isinstance(symbol, Symbol):
        raise VizError(f"{what} takes a Symbol, got {type(symbol).__name__}")
    return symbol.graph()


def plot_network(symbol, title: str = "plot", save_format: str = "pdf", shape=None,
                 dtype=None, node_attrs=None, hide_weights: bool = True):
    """A ``graphviz.Digraph`` of ``symbol``, as ``mx.viz.plot_network``:
    ``title`` names the graph, ``shape`` (``{'data': (1, 3, 224, 224)}``)
    labels the edges with tensor shapes, ``node_attrs`` are Graphviz
    attributes of every node, ``hide_weights`` hides weights, biases and
    BatchNorm's parameters and statistics. ``save_format`` is the format
    ``dot.render()`` writes. ``dtype`` is taken for MXNet's signature; the
    edges carry shapes only. ``sg.viz.plot`` draws more (plans, the
    backward, ranges)."""
    _symbol_graph(symbol, "plot_network")
    if save_format not in FORMATS:
        raise VizError(f"plot_network: save_format is one of {', '.join(FORMATS)}, got "
                       f"{short_repr(save_format)}")
    if node_attrs is not None and not isinstance(node_attrs, dict):
        raise VizError(f"plot_network: node_attrs must be a dict of Graphviz attributes, got "
                       f"{short_repr(node_attrs)}")
    dot = plot(symbol, shape=shape, hide_params=bool(hide_weights),
               title=str(title) if title else None,
               node_attrs={str(k): str(v) for k, v in (node_attrs or {}).items()})
    dot.format = save_format
    return dot


def _positions(line_length, positions) -> list[int]:
    if isinstance(line_length, bool) or not isinstance(line_length, numbers.Integral) \
            or line_length <= 0:
        raise VizError(f"print_summary: line_length must be a positive int, got "
                       f"{short_repr(line_length)}")
    try:
        pos = [float(p) for p in positions]
    except (TypeError, ValueError):
        pos = []
    if len(pos) != 4 or any(b <= a for a, b in zip([0.0] + pos, pos)):
        raise VizError(f"print_summary: positions must be 4 increasing column ends "
                       f"(fractions of line_length or characters), got "
                       f"{short_repr(positions)}")
    if pos[-1] <= 1:
        return [int(line_length * p) for p in pos]
    return [int(p) for p in pos]


def summary_rows(symbol, shape=None) -> tuple[list, int]:
    """``([(layer (type), output shape, param #, [previous layers]), ...],
    total params)``: what ``print_summary`` prints."""
    graph = _symbol_graph(symbol, "print_summary")
    if shape is not None:
        inferred = infer_shapes(graph, shape)  # every shape, or a ShapeError naming it
    else:
        try:  # shape hints in the net (__shape__) give what they can
            inferred = infer_shapes(graph, {}, partial=True)
        except ShapeError:
            inferred = None
    aux = {n.name for n in graph.aux_states}
    params = parameter_names(graph) - aux
    shown_vars = {n.name for n in graph.variables if n.name not in params and n.name not in aux
                  and not (n.name == "label" or n.name.endswith("_label"))}

    def out_shape(node):
        if inferred is None:
            return ""
        s = inferred.shapes[graph.entry_id_of_node(node)]
        return "" if s is None else "x".join(str(d) for d in s[1:])

    rows, counted, total = [], set(), 0
    for node in graph.nodes:
        if node.op is None:
            if node.name in shown_vars:
                rows.append((f"{node.name}(null)", out_shape(node), 0, []))
            continue
        count = 0
        for e in node.inputs[:node.num_args]:
            v = e.node
            if v.op is None and v.name in params and v.name not in counted:
                counted.add(v.name)
                s = inferred.shapes[graph.entry_id_of_node(v)] if inferred else None
                count += math.prod(s) if s is not None else 0
        previous = [e.node.name for e in node.inputs
                    if e.node.op is not None or e.node.name in shown_vars]
        rows.append((f"{node.name}({node.op.name})", out_shape(node), count, previous))
        total += count
    return rows, total


def print_summary(symbol, shape=None, line_length: int = 120,
                  positions=(.44, .64, .74, 1.)) -> None:
    """Prints ``symbol``'s layers as ``mx.viz.print_summary`` does: Layer
    (type), Output Shape (without the batch axis), Param #, Previous Layer,
    then ``Total params``. ``shape``: input shapes
    (``{'data': (1, 3, 224, 224)}``); without it shapes and counts are
    what the net's shape hints give. ``positions``: where each column
    ends, as fractions of ``line_length`` or in characters."""
    cols = _positions(line_length, positions)
    rows, total = summary_rows(symbol, shape)

    def line(fields):
        text = ""
        for end, field in zip(cols, fields):
            text = (text + str(field))[:end]
            text += " " * (end - len(text))
        print(text)

    print("_" * line_length)
    line(_HEADER)
    print("=" * line_length)
    for k, (layer, out, count, previous) in enumerate(rows):
        line([layer, out, count, previous[0] if previous else ""])
        for p in previous[1:]:
            line(["", "", "", p])
        print(("=" if k == len(rows) - 1 else "_") * line_length)
    print(f"Total params: {total}")
    print("_" * line_length)
