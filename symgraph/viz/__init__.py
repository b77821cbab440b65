"""Draw a network, and its memory plan, with Graphviz.

    symgraph viz NET.json [-o OUT.svg|.png|.pdf|.dot] [--shape data=64,3,224,224]
                          [--plan [--train] [--strategy arena]] [--rankdir TB|LR]
                          [--show-params] [--range START:END] [--collapse REGEX]

Nodes show the op and its key attributes (kernel/stride, filters, hidden
units, activation type), coloured by op family as ``mx.viz.plot_network``
colours them; edges carry tensor shapes once shapes are known. With
``--plan`` every tensor (edge) takes the colour of its storage slot, so
tensors that share memory share a colour; nodes show the bytes they
allocate, fused groups are drawn as clusters and a legend gives the plan's
totals per bucket. ``--train`` draws the backward graph too, dashed and
paler than the forward. From Python, ``sg.viz.plot(net, shape=...)``
returns a ``graphviz.Digraph`` (shown inline in Jupyter) and
``sg.viz.render(dot, 'net.svg')`` writes it. MXNet's
``sg.viz.plot_network(net, shape=...)`` and ``sg.viz.print_summary(net,
shape=...)`` (its table of layers and parameter counts) are there too.
"""
# The docstring is `symgraph viz --help`'s description. The package:
# draw.py (graph drawing), labels.py (titles, colours, names escaped for
# Graphviz), picture.py (formats, pictures written),
# planview.py (plan colouring), timeline.py (the memory timeline of
# `symgraph plan --plot`), cli.py (the command).
from .cli import add_arguments, load_net, run
from .draw import (FAMILY_COLORS, FORMATS, INSTALL_GRAPHVIZ, LEGEND_ID, TEXT_LIMIT, VizError,
                   dot_id, op_family, output_format, parameter_names, placed_graph, plot,
                   render, training_graph)
from .planview import PlanView, distinct_colors, format_bytes, node_allocations, plan_view
from .summary import plot_network, print_summary, summary_rows
from .timeline import TIMELINE_STRATEGIES, plot_timeline, timeline

__all__ = ["FAMILY_COLORS", "FORMATS", "INSTALL_GRAPHVIZ", "LEGEND_ID", "PlanView",
           "TEXT_LIMIT", "TIMELINE_STRATEGIES", "VizError", "add_arguments", "distinct_colors",
           "dot_id", "format_bytes", "load_net", "node_allocations", "op_family",
           "output_format", "parameter_names", "placed_graph", "plan_view", "plot",
           "plot_network", "plot_timeline", "print_summary", "render", "run", "summary_rows",
           "timeline", "training_graph"]
