"""Graph drawing: the graph drawn (``plot``: shapes, the plan's colours,
the backward, ranges and collapsed blocks) and the graphs it draws
(training and placed graphs, node ranges, collapsed blocks). How nodes
look and names escaped for Graphviz are in labels.py, pictures written
(``render``) in picture.py; their public names are importable from here.
"""
from __future__ import annotations

import html
import re
from collections import Counter
from collections.abc import Mapping

from ..errors import ShapeError
from ..graph import Entry, Graph
from ..passes.infer import parameter_names
from ..util import short_repr
from .labels import (FAMILY_COLORS, LEGEND_ID, TEXT_LIMIT, _clean, _html_text, _op_detail,
                     _op_title, _plain_text, dot_id, op_family)
from .picture import FORMATS, INSTALL_GRAPHVIZ, VizError, output_format, render
from .planview import PlanView, _lighten, format_bytes, plan_view


# --------------------------------------------------------------------------
# the drawing
# --------------------------------------------------------------------------
def _as_graph(net) -> Graph:
    if isinstance(net, Graph):
        return net
    outputs = getattr(net, "outputs", None)
    if outputs is None:
        raise VizError(f"plot takes a Symbol or a Graph, got {type(net).__name__}")
    return Graph(outputs)


def _infer(graph: Graph, shape: dict | None):
    from ..passes.infer import infer_shapes
    if shape:
        return infer_shapes(graph, shape, partial=True)
    try:  # shape hints in the file (``__shape__``) label what they can
        return infer_shapes(graph, {}, partial=True)
    except ShapeError:
        return None


def training_graph(graph: Graph) -> Graph:
    """The graph with its backward part, as ``sg.plan(..., train=True)``
    builds it: gradients of every argument but the data and the labels."""
    from ..memory import default_wrt
    from ..passes import build_gradient, prune
    wrt = default_wrt(graph)
    if not wrt:
        raise VizError("--train: the network has no parameters to take gradients of "
                       "(every argument is data or a label)")
    return prune(build_gradient(graph, wrt))


def placed_graph(graph: Graph, group2ctx: dict, train: bool = False) -> Graph:
    """The graph (with its backward part when ``train``) placed by
    ``group2ctx``: the copies between devices are nodes of it."""
    from ..memory import default_wrt
    from ..memory.devices import default_device
    from ..parallel.placement import resolve_group2ctx
    from ..passes import prune
    from ..passes.gradient import build_gradient_with_heads
    from ..passes.place import place
    g2c = resolve_group2ctx(graph, group2ctx, check_devices=False)
    origin: dict = {}
    if train:
        training_graph(graph)  # the same checks
        graph = prune(build_gradient_with_heads(graph, default_wrt(graph), origin)[0])
    return place(graph, g2c, default_device(g2c), origin).graph


def _forward_mask(graph: Graph, num_forward_outputs: int) -> list[bool]:
    """Nodes the first ``num_forward_outputs`` outputs depend on."""
    mask = [False] * len(graph.nodes)
    for e in graph.outputs[:num_forward_outputs]:
        mask[graph.node_id(e.node)] = True
    for i in range(len(graph.nodes) - 1, -1, -1):
        if mask[i]:
            for e in graph.nodes[i].inputs:
                mask[graph.node_id(e.node)] = True
    return mask


def _parse_range(node_range):
    if node_range is None:
        return None
    if isinstance(node_range, str):
        start, sep, end = node_range.partition(":")
        if not sep:
            raise VizError(f"bad range {short_repr(node_range)}: expected START:END such as "
                           f"conv3_1:conv4_1 (either side may be empty)")
        return start.strip() or None, end.strip() or None
    start, end = node_range
    return start or None, end or None


def _select_range(graph: Graph, node_range) -> list[bool] | None:
    """Nodes on a path from START to END (both included), as a mask."""
    rng = _parse_range(node_range)
    if rng is None:
        return None
    by_name = {n.name: i for i, n in enumerate(graph.nodes)}
    for nm in rng:
        if nm is not None and nm not in by_name:
            import difflib
            near = difflib.get_close_matches(nm, list(by_name), n=3)
            hint = f"; did you mean {', '.join(near)}?" if near else ""
            raise VizError(f"range: no node named '{nm}'{hint}")
    start, end = rng
    n = len(graph.nodes)
    down = [start is None] * n  # reachable from start
    if start is not None:
        down[by_name[start]] = True
        for i, node in enumerate(graph.nodes):
            if not down[i] and any(down[graph.node_id(e.node)] for e in node.inputs):
                down[i] = True
    up = [end is None] * n  # reaches end
    if end is not None:
        up[by_name[end]] = True
        for i in range(n - 1, -1, -1):
            if up[i]:
                for e in graph.nodes[i].inputs:
                    up[graph.node_id(e.node)] = True
    mask = [a and b for a, b in zip(down, up)]
    if not any(mask):
        raise VizError(f"range {start}:{end}: '{end}' does not depend on '{start}'")
    return mask


def _block_keys(graph: Graph, drawn: list[bool], collapse: str | None) -> list:
    """Unit id of each node: nodes collapse into one block when a run of
    consecutive op nodes (in topological order) has the same key, the
    regex's first group (or whole match) on the node name. A run of a
    topological order is convex -- no path leaves it and comes back -- so
    the collapsed picture stays acyclic."""
    unit = list(range(len(graph.nodes)))
    if not collapse:
        return unit
    try:
        pattern = re.compile(collapse)
    except re.error as err:
        raise VizError(f"bad --collapse pattern {short_repr(collapse)}: {err}") from None

    def key(name):
        m = pattern.search(name)
        if not m:
            return None
        return m.group(1) if m.groups() and m.group(1) is not None else m.group(0)

    run_key, run_start = None, None
    for i, node in enumerate(graph.nodes):
        if node.op is None or not drawn[i]:
            continue  # variables have no inputs, so they never break convexity
        k = key(node.name)
        if k is not None and k == run_key:
            unit[i] = run_start
        else:
            run_key, run_start = k, i
    return unit


def plot(net, shape: dict | None = None, plan=None, train: bool = False, *,
         strategy: str | None = None, hide_params: bool = True, rankdir: str = "TB",
         node_range=None, collapse: str | None = None, title: str | None = None,
         node_attrs: dict | None = None, group2ctx: dict | None = None):
    """A ``graphviz.Digraph`` of ``net`` (a Symbol or a Graph).

    shape: input shapes (``{'data': (64, 3, 224, 224)}``); edges are then
        labelled with tensor shapes (shape hints in the net count too).
    plan: True to plan memory with ``sg.plan`` (needs ``shape``), or a
        ``Plan`` already made (its graph is drawn; ``train`` follows it).
        Tensors are coloured by storage slot (same slot, same colour;
        different slots, different colours), nodes show the bytes the plan
        grows by at them, fused groups are clusters, a legend gives the
        totals per bucket.
    train: draw the backward graph too (dashed, paler, running upwards
        beside the forward).
    strategy: the plan strategy whose storage is drawn (naive, inplace,
        coshare, both, arena); default 'arena' (as ``sg.plan`` and
        ``symgraph plan``), or the given Plan's own.
    hide_params: hide weights, biases and aux states (the default).
    rankdir: 'TB' (top to bottom), 'LR' (left to right), 'BT' or 'RL'.
    node_range: ``'conv3_1:conv4_1'`` draws only the nodes on paths from
        one node to the other; either side may be empty. Tensors coming
        from outside the range are drawn as small dashed stubs.
    collapse: a regex; each run of consecutive nodes whose names give the
        same match (its first group if it has one) is drawn as one block,
        e.g. ``r'stage\\d+_unit\\d+'`` for ResNet units.
    node_attrs: Graphviz attributes for every node (e.g. ``{'fontsize': '12'}``).
    group2ctx: ctx_group name -> device: draw the placed graph, with the
        ``_CrossDeviceCopy`` node of every edge between devices (with
        ``plan``, the placed graph's plan, copies planned too).
    """
    import graphviz

    if rankdir not in ("TB", "LR", "BT", "RL"):
        raise VizError(f"rankdir must be TB, LR, BT or RL, got {rankdir!r}")
    if shape is not None and not isinstance(shape, Mapping):
        # a bare tuple would be read as input names ("'2' is not an input")
        example = tuple(shape) if isinstance(shape, (tuple, list)) else (2, 1, 28, 28)
        raise VizError(f"shape must be a dict of input shapes such as {{'data': {example}}}, "
                       f"got {short_repr(shape)}")
    graph = _as_graph(net)
    n_fwd = len(graph.outputs)
    pv = None
    if plan is not None and plan is not False:
        if plan is True:
            from .. import memory
            pl = memory.plan(graph, shape or {}, train=train, strategy=strategy or "arena",
                             group2ctx=group2ctx)
            if group2ctx is not None:
                pl = pl.devices.whole  # the placed graph planned as one schedule
        else:
            pl = plan
        pv = plan_view(pl, strategy or pl.strategy)
        graph, inferred, train, n_fwd = pl.graph, pl.inferred, pl.train, pl.num_forward_outputs
    else:
        if group2ctx is not None:
            graph = placed_graph(graph, group2ctx, train)
        elif train:
            graph = training_graph(graph)
        inferred = _infer(graph, shape)

    drawn = _select_range(graph, node_range) or [True] * len(graph.nodes)
    params = parameter_names(graph) if hide_params else set()
    is_bwd = [not f for f in _forward_mask(graph, n_fwd)]
    unit = _block_keys(graph, drawn, collapse)

    name = title or (graph.outputs[0].node.name if graph.outputs else "net")
    dot = graphviz.Digraph(
        name=dot_id(name, 0),
        graph_attr={"rankdir": rankdir, "fontname": "Helvetica", "fontsize": "11",
                    "nodesep": "0.25", "ranksep": "0.35"},
        node_attr={"shape": "box", "style": "rounded,filled", "fontname": "Helvetica",
                   "fontsize": "10", "margin": "0.12,0.04", "height": "0.3",
                   **(node_attrs or {})},
        edge_attr={"fontname": "Helvetica", "fontsize": "8", "arrowsize": "0.6",
                   "color": "#555555"})

    def ident(i):
        return dot_id(graph.nodes[i].name, i)

    # -- which units are drawn ---------------------------------------------
    members: dict[int, list[int]] = {}
    for i, node in enumerate(graph.nodes):
        if not drawn[i] or (node.op is None and node.name in params):
            continue
        members.setdefault(unit[i], []).append(i)
    # fused groups become clusters (where every member is drawn on its own)
    cluster_of = {}
    if pv is not None:
        for k, group in enumerate(pv.plan.fused_groups):
            if all(drawn[i] and len(members.get(unit[i], ())) == 1 for i in group):
                for i in group:
                    cluster_of[i] = k

    def unit_id(i):
        u = unit[i]
        return ident(u) if len(members.get(u, ())) == 1 else "block " + ident(u)

    clusters: dict[int, list] = {}
    for u, ids in members.items():
        if len(ids) == 1:
            attrs = _node_attrs(graph, ids[0], is_bwd[ids[0]], pv)
        else:
            attrs = _block_attrs(graph, ids, is_bwd, pv)
        k = cluster_of.get(u)
        if k is not None:
            clusters.setdefault(k, []).append((unit_id(u), attrs))
        else:
            dot.node(unit_id(u), **attrs)
    for k, stmts in clusters.items():
        with dot.subgraph(name=f"cluster_fused{k}") as c:
            c.attr(label=f"fused {k}", style="dashed,rounded", color="#7f7f7f",
                   fontsize="9", fontcolor="#7f7f7f", tooltip=f"fused group {k}")
            for name, attrs in stmts:
                c.node(name, **attrs)

    # -- edges: one per (tensor, reading unit) ---------------------------------
    stubs = set()
    seen_edges = set()
    for i, node in enumerate(graph.nodes):
        if node.op is None or unit[i] not in members or i not in members[unit[i]]:
            continue
        for e in node.inputs:
            src = graph.node_id(e.node)
            if unit[src] == unit[i]:
                continue  # inside a collapsed block
            if e.node.op is None and e.node.name in params:
                continue
            eid = graph.entry_id(e)
            if (eid, unit[i]) in seen_edges:
                continue
            seen_edges.add((eid, unit[i]))
            inside = unit[src] in members
            if inside:
                tail = unit_id(src)
            else:  # produced outside the range: a small stub stands for it
                tail = ident(src) + " (outside)"
                if tail not in stubs:
                    stubs.add(tail)
                    dot.node(tail, label=_plain_text(e.node.name), shape="box",
                             style="dashed,rounded",
                             color="#999999", fontcolor="#777777", fontsize="8")
            attrs = _edge_attrs(graph, e, inferred, pv, is_bwd[i] or is_bwd[src])
            if is_bwd[src] and is_bwd[i] and inside:
                # the backward runs from the loss back to the data: drawn
                # upwards beside the forward it mirrors, every edge stays
                # short (a long edge costs dot a node per rank it crosses)
                dot.edge(unit_id(i), tail, dir="back", **attrs)
            else:
                dot.edge(tail, unit_id(i), **attrs)

    if pv is not None:
        dot.node(LEGEND_ID, label=_legend(pv), shape="plaintext", style="",
                 tooltip="memory plan totals")
    if len(members) > 400:
        # keep dot's crossing minimisation and positioning passes bounded on
        # very large graphs: their iteration limits scale with the node count
        # and each iteration with the graph, so the defaults are quadratic
        # (nslimit=4 took 11 s on a trained ResNet-269, nslimit=1 1.5 s and
        # drew it narrower)
        dot.graph_attr.update(mclimit="0.25", nslimit="1", nslimit1="4", searchsize="20",
                              remincross="false")
    return dot


def _shape_text(inferred, eid) -> str | None:
    if inferred is None:
        return None
    s = inferred.shapes[eid]
    if s is None:
        return None
    text = "x".join(str(d) for d in s) if s else "scalar"
    t = inferred.dtypes[eid]
    return text if t in (None, "float32") else f"{text} {t}"


def _edge_attrs(graph, e: Entry, inferred, pv, backward: bool) -> dict:
    eid = graph.entry_id(e)
    attrs = {}
    label = _shape_text(inferred, eid)
    if label:
        attrs["label"] = label
    # the tooltip names the tensor (tests and users hovering read it)
    names = e.node.output_names()
    tip = names[e.index] if e.index < len(names) else e.node.name
    tip = _clean(tip)
    if pv is not None:
        slot = pv.storage.get(eid)
        if slot is not None:
            attrs["color"] = pv.slot_color[slot]
            attrs["penwidth"] = "2.2"
            tip += f" slot {slot}"
    attrs["tooltip"] = _plain_text(tip)
    if backward:
        attrs["style"] = "dashed"
    return attrs


def _first_slot(graph, i, pv):
    for k in range(graph.nodes[i].num_outputs):
        slot = pv.storage.get(graph.row_ptr[i] + k)
        if slot is not None:
            return slot
    return None


def _node_attrs(graph, i, backward, pv) -> dict:
    node = graph.nodes[i]
    fill = FAMILY_COLORS[op_family(node)]
    if backward:
        fill = _lighten(fill)
    if node.op is None:
        attrs = {"label": f"<<B>{_html_text(node.name)}</B>>", "shape": "oval",
                 "fillcolor": fill, "tooltip": _plain_text(node.name)}
        if backward:
            attrs["style"] = "filled,dashed"
        return attrs
    lines = [f"<B>{_html_text(_op_title(node))}</B>"]
    detail = _op_detail(node)
    if detail:
        lines.append(_html_text(detail))
    lines.append(f'<FONT POINT-SIZE="8">{_html_text(node.name)}</FONT>')
    attrs = {"fillcolor": fill, "tooltip": _plain_text(node.name)}
    if pv is not None:
        lines += _alloc_lines(pv, [i])
        slot = _first_slot(graph, i, pv)
        if slot is not None:  # the border shows the node's output tensor too
            attrs["color"] = pv.slot_color[slot]
            attrs["penwidth"] = "2"
    attrs["label"] = "<" + "<BR/>".join(lines) + ">"
    if backward:
        attrs["style"] = "rounded,filled,dashed"
    return attrs


def _alloc_lines(pv, ids) -> list[str]:
    new = sum(pv.new_bytes.get(i, 0) for i in ids)
    reused = sum(pv.reused.get(i, 0) for i in ids)
    out = []
    if new:
        out.append(f'<FONT POINT-SIZE="8">+{format_bytes(new)}</FONT>')
    if reused:
        out.append(f'<FONT POINT-SIZE="8">reuses {reused} slot{"s" if reused > 1 else ""}'
                   f'</FONT>')
    return out


def _block_attrs(graph, ids, is_bwd, pv) -> dict:
    ops = Counter(_op_title(graph.nodes[i]) for i in ids)
    first, last = graph.nodes[ids[0]].name, graph.nodes[ids[-1]].name
    summary = ", ".join(f"{c}x {o}" if c > 1 else o for o, c in ops.most_common(3))
    if len(ops) > 3:
        summary += ", ..."
    lines = [f"<B>{_html_text(first)} .. {_html_text(last)}</B>",
             _html_text(f"{len(ids)} nodes: {summary}")]
    if pv is not None:
        lines += _alloc_lines(pv, ids)
    fams = Counter(op_family(graph.nodes[i]) for i in ids)
    fill = FAMILY_COLORS[fams.most_common(1)[0][0]]
    backward = all(is_bwd[i] for i in ids)
    return {"label": "<" + "<BR/>".join(lines) + ">", "shape": "box3d",
            "style": "filled,dashed" if backward else "filled",
            "fillcolor": _lighten(fill) if backward else fill,
            "tooltip": _plain_text(f"{_clean(first)} .. {_clean(last)}", 2 * TEXT_LIMIT + 4)}


def _legend(pv: PlanView) -> str:
    pl = pv.plan
    rows = [f'<TR><TD COLSPAN="2"><B>memory plan: {html.escape(pv.strategy)}, '
            f'{"training" if pl.train else "inference"}</B></TD></TR>']
    for k in ("arguments", "gradients", "aux"):
        rows.append(f'<TR><TD ALIGN="LEFT">{k}</TD>'
                    f'<TD ALIGN="RIGHT">{format_bytes(pl.buckets.get(k, 0))}</TD></TR>')
    for k, v in pl.internal.items():
        name = f"<B>internal {k}</B>" if k == pv.strategy else f"internal {k}"
        rows.append(f'<TR><TD ALIGN="LEFT">{name}</TD>'
                    f'<TD ALIGN="RIGHT">{format_bytes(v)}</TD></TR>')
    rows.append(f'<TR><TD COLSPAN="2"><FONT POINT-SIZE="8">{len(pv.slot_color)} storage '
                f'slots; one colour each</FONT></TD></TR>')
    return ('<<TABLE BORDER="1" CELLBORDER="0" CELLSPACING="0" CELLPADDING="3" '
            'COLOR="#999999">' + "".join(rows) + "</TABLE>>")


# what viz/__init__, cli.py and summary.py import from here (labels.py's and
# picture.py's names among them)
__all__ = ["FAMILY_COLORS", "FORMATS", "INSTALL_GRAPHVIZ", "LEGEND_ID", "TEXT_LIMIT", "VizError",
           "dot_id", "op_family", "output_format", "parameter_names", "placed_graph", "plot",
           "render", "training_graph"]
