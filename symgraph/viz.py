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
``sg.viz.render(dot, 'net.svg')`` writes it.
"""
from __future__ import annotations

import colorsys
import html
import os
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from .errors import ShapeError, SymgraphError
from .graph import Entry, Graph, Node
from .passes.infer import parameter_names  # noqa: F401  (part of viz's API)
from .util import atomic_write_bytes, atomic_write_text, short_repr

FORMATS = ("svg", "png", "pdf", "dot")

INSTALL_GRAPHVIZ = (
    "Graphviz's `dot` program is not on PATH; install Graphviz (Debian/Ubuntu: "
    "apt-get install graphviz; macOS: brew install graphviz; conda: conda install "
    "graphviz) or write DOT text with -o NET.dot")


class VizError(SymgraphError):
    """A picture that cannot be drawn or written."""


# --------------------------------------------------------------------------
# op families and their colours (mx.viz.plot_network's palette)
# --------------------------------------------------------------------------
FAMILY_COLORS = {
    "input": "#8dd3c7",
    "layer": "#fb8072",          # convolution, fully connected, embedding
    "activation": "#ffffb3",
    "normalization": "#bebada",
    "pooling": "#80b1d3",
    "shape": "#fdb462",          # concat, flatten, reshape, slicing ...
    "loss": "#b3de69",
    "elementwise": "#fccde5",
    "other": "#d9d9d9",
}
# the OpDef families drawn alike: mx.viz.plot_network colours every layer
# with weights the same
_COLOR_GROUP = {"convolution": "layer", "matmul": "layer", "embedding": "layer"}
_BACKWARD_PREFIX = "_backward_"


def op_family(node: Node) -> str:
    """The colour group of a node: 'input' for variables, else its OpDef's
    family (a backward op has its forward op's), layers with weights as one."""
    if node.op is None:
        return "input"
    return _COLOR_GROUP.get(node.op.family, node.op.family)


def _dims(v) -> str:
    return "x".join(str(d) for d in v) if v else "1"


def _window(p) -> str:
    """``kernel/stride`` (``3x3/1x1``); an unset stride is 1 along every axis."""
    kernel = p.get("kernel") or ()
    stride = p.get("stride") or (1,) * len(kernel)
    return f"{_dims(kernel)}/{_dims(stride)}"


def _op_detail(node: Node) -> str:
    """The key attributes of a node, as mx.viz shows them (``3x3/2x2, 64``)."""
    p = node.params or {}
    name = node.op.name
    if name.startswith(_BACKWARD_PREFIX):
        name = name[len(_BACKWARD_PREFIX):]
    if name in ("Convolution", "Deconvolution"):
        s = f"{_window(p)}, {p.get('num_filter')}"
        if (p.get("num_group") or 1) > 1:
            s += f", {p['num_group']} groups"
        return s
    if name == "FullyConnected":
        return str(p.get("num_hidden"))
    if name in ("Activation", "LeakyReLU"):
        return str(p.get("act_type", ""))
    if name == "Pooling":
        if p.get("global_pool"):
            return f"{p.get('pool_type', 'max')}, global"
        return f"{p.get('pool_type', 'max')}, {_window(p)}"
    if name == "Dropout":
        return f"p={p.get('p')}"
    # otherwise the attributes the user set explicitly, briefly
    shown = [f"{k}={v}" for k, v in node.attrs.items()
             if not k.startswith("__") and k not in ("need", "num_args", "workspace",
                                                    "cudnn_tune", "cudnn_off")]
    text = ", ".join(shown[:3])
    return text if len(text) <= 40 else text[:37] + "..."


def _op_title(node: Node) -> str:
    name = node.op.name
    if name.startswith(_BACKWARD_PREFIX):
        return name[len(_BACKWARD_PREFIX):] + " grad"
    return name


# --------------------------------------------------------------------------
# colours of storage slots: many, distinct, readable on white
# --------------------------------------------------------------------------
def distinct_colors(n: int) -> list[str]:
    """``n`` pairwise different colours as ``#rrggbb``; neighbours in the
    list differ in hue (golden-ratio steps), later rounds vary saturation
    and value so that no two colours ever coincide."""
    out: list[str] = []
    seen: set[str] = set()
    i = 0
    levels = [(0.85, 0.80), (0.55, 0.95), (0.95, 0.55), (0.40, 0.70), (0.70, 0.40)]
    while len(out) < n:
        h = (i * 0.6180339887498949) % 1.0
        s, v = levels[(i // 12) % len(levels)]
        r, g, b = colorsys.hsv_to_rgb(h, s, v)
        c = f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"
        if c not in seen:
            seen.add(c)
            out.append(c)
        i += 1
    return out


def format_bytes(n: int) -> str:
    """``1536`` -> ``1.5 KiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _lighten(color: str, amount: float = 0.55) -> str:
    r, g, b = (int(color[i:i + 2], 16) for i in (1, 3, 5))
    r, g, b = (round(c + (255 - c) * amount) for c in (r, g, b))
    return f"#{r:02x}{g:02x}{b:02x}"


# --------------------------------------------------------------------------
# what the plan tells the picture
# --------------------------------------------------------------------------
@dataclass
class PlanView:
    """The parts of a memory plan (``symgraph.memory.Plan``) a picture shows,
    for one strategy, keyed by the plan's graph.

    ``storage``: entry id -> storage slot (planned tensors only);
    ``slot_color``: slot -> colour, pairwise different; ``new_bytes``: node
    id -> bytes the plan's memory grows by at that node's step (these sum to
    the strategy's ``internal`` total); ``reused``: node id -> number of its
    outputs placed in storage that an earlier tensor used.
    """

    plan: object
    strategy: str
    storage: dict = field(default_factory=dict)
    slot_color: dict = field(default_factory=dict)
    new_bytes: dict = field(default_factory=dict)
    reused: dict = field(default_factory=dict)


def plan_view(plan, strategy: str | None = None) -> PlanView:
    """Storage slots, their colours and per-node allocations of ``plan``
    under ``strategy`` (default: the plan's own)."""
    strategy = strategy or plan.strategy
    a = plan.assignment(strategy)  # PlanError for lower_bound or an unknown name
    live = plan.live
    storage = plan.storage(strategy)
    # colours in order of first use, so neighbouring slots differ in hue
    order: dict = {}
    for t in range(live.num_tensors):
        order.setdefault(a.slot[t], len(order))
    colors = distinct_colors(len(order))
    slot_color = {slot: colors[k] for slot, k in order.items()}
    # the running maximum of the footprint: what each step adds to the plan
    new_bytes, reused = {}, {}
    high = 0
    touched = set()
    for s, fp in enumerate(plan.footprint(strategy)):
        root = plan.steps[s][-1]
        if fp > high:
            new_bytes[root] = new_bytes.get(root, 0) + fp - high
            high = fp
        for t in live.step_out[s]:
            if a.slot[t] in touched:
                reused[root] = reused.get(root, 0) + 1
            touched.add(a.slot[t])
    return PlanView(plan, strategy, storage, slot_color, new_bytes, reused)


def node_allocations(plan, strategy: str | None = None) -> dict:
    """``{node name: bytes}``: how much the plan's memory grows at each node
    (a fused group's root carries its group). The values sum to the
    strategy's ``internal`` bytes; these are the figures ``--plan`` shows."""
    pv = plan_view(plan, strategy)
    nodes = plan.graph.nodes
    return {nodes[i].name: b for i, b in pv.new_bytes.items()}


# --------------------------------------------------------------------------
# names as Graphviz can hold them, whatever they hold
# --------------------------------------------------------------------------
TEXT_LIMIT = 120  # characters of a name shown; dot refuses strings over 16,384
LEGEND_ID = "__legend__"  # the plan's legend; a node of that name gets another id
_UNSAFE = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")
# a name used as a node id as it is: none of the characters DOT, its HTML
# strings or edge ports give a meaning (':' names a port, '<...>' is HTML),
# nothing the scanner cannot hold, and short
_PLAIN_ID = re.compile(r"[^\x00-\x1f\x7f\ud800-\udfff:#<>\\]{1,200}")


def _clean(text, limit: int = TEXT_LIMIT) -> str:
    """``text`` with line breaks and tabs as spaces, other control characters
    and lone surrogates (JSON's ``\\ud800``) as U+FFFD, cut to ``limit``."""
    text = _UNSAFE.sub(lambda m: " " if m.group() in "\t\n\r" else "\ufffd", str(text))
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


def _html_text(text, limit: int = TEXT_LIMIT) -> str:
    """``text`` inside an HTML-like label."""
    return html.escape(_clean(text, limit))


def _plain_text(text, limit: int = TEXT_LIMIT):
    """``text`` as a quoted attribute value (tooltip, plain label): its
    backslashes literal (not ``\\n`` or ``\\N``), never read as HTML."""
    import graphviz
    return graphviz.escape(_clean(text, limit))


def dot_id(name: str, index: int) -> str:
    """The DOT id of node ``index`` named ``name``: the name itself where
    that is safe (SVG titles then name the node), else a cleaned prefix and
    the index (unique: a plain name holds no '#')."""
    if _PLAIN_ID.fullmatch(name) and name.strip() == name and name != LEGEND_ID:
        return name
    return re.sub(r"[^\w.-]", "_", name[:40]) + f"#{index}"


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
    from .passes.infer import infer_shapes
    if shape:
        return infer_shapes(graph, shape, partial=True)
    try:  # shape hints in the file (``__shape__``) label what they can
        return infer_shapes(graph, {}, partial=True)
    except ShapeError:
        return None


def training_graph(graph: Graph) -> Graph:
    """The graph with its backward part, as ``sg.plan(..., train=True)``
    builds it: gradients of every argument but the data and the labels."""
    from .memory import default_wrt
    from .passes import build_gradient, prune
    wrt = default_wrt(graph)
    if not wrt:
        raise VizError("--train: the network has no parameters to take gradients of "
                       "(every argument is data or a label)")
    return prune(build_gradient(graph, wrt))


def placed_graph(graph: Graph, group2ctx: dict, train: bool = False) -> Graph:
    """The graph (with its backward part when ``train``) placed by
    ``group2ctx``: the copies between devices are nodes of it."""
    from .memory import default_wrt
    from .memory.devices import default_device
    from .parallel.placement import resolve_group2ctx
    from .passes import prune
    from .passes.gradient import build_gradient_with_heads
    from .passes.place import place
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
            from . import memory
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


# --------------------------------------------------------------------------
# the memory timeline
# --------------------------------------------------------------------------
TIMELINE_STRATEGIES = ("naive", "inplace", "coshare", "both", "arena")
_TIMELINE_COLORS = {"naive": "#7f7f7f", "inplace": "#1f77b4", "coshare": "#ff7f0e",
                    "both": "#2ca02c", "arena": "#9467bd", "lower_bound": "#d62728"}


def timeline(plan) -> dict:
    """The data of the timeline picture: ``{strategy: bytes in use at each
    step}`` for every strategy (slot strategies count the slots touched so
    far, allocated up front as MXNet does; the arena its highest live byte)
    and ``'live'``: the bytes live at each step less what inplace can save
    there, whose maximum is the lower bound."""
    data = {s: plan.footprint(s) for s in TIMELINE_STRATEGIES}
    data["live"] = list(plan.profile)
    return data


def _byte_unit(n: float):
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= scale:
            return unit, scale
    return "bytes", 1


def plot_timeline(plan, path=None, *, title: str | None = None):
    """Memory per step of ``plan``'s schedule: one line per strategy, the
    live bytes (shaded) with the lower bound as a dashed line, and the peak
    step marked. Returns the matplotlib Figure; with ``path`` (.png .svg
    .pdf) it is also written there, atomically.

    This is ``symgraph plan NET.json --shape ... --plot OUT.png``: the
    picture that answers "where does my memory go"."""
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fmt = None
    if path is not None:
        fmt = os.path.splitext(os.fspath(path))[1].lower().lstrip(".")
        if fmt not in ("png", "svg", "pdf"):
            raise VizError(f"cannot write {os.fspath(path)!r}: unknown picture format "
                           f"'{fmt or '(no extension)'}'; use .png, .svg or .pdf")
    data = timeline(plan)
    nsteps = len(data["live"])
    top = max([plan.lower_bound] + [max(v, default=0) for v in data.values()])
    unit, scale = _byte_unit(top)
    # steps are numbered from 1, as `symgraph plan` reports the peak ("step 2/25")
    steps = list(range(1, nsteps + 1))

    fig = Figure(figsize=(9, 4.8), dpi=100)
    FigureCanvasAgg(fig)  # no pyplot: nothing global changes in the caller
    ax = fig.add_subplot(1, 1, 1)
    ax.fill_between(steps, [b / scale for b in data["live"]], step="mid", alpha=0.18,
                    color=_TIMELINE_COLORS["lower_bound"], linewidth=0,
                    label="live tensors (less inplace savings)")
    for s in TIMELINE_STRATEGIES:
        total = plan.internal[s]
        ax.plot(steps, [b / scale for b in data[s]], drawstyle="steps-mid",
                color=_TIMELINE_COLORS[s], linewidth=1.6,
                label=f"{s}: {format_bytes(total)}")
    ax.axhline(plan.lower_bound / scale, color=_TIMELINE_COLORS["lower_bound"],
               linestyle="--", linewidth=1.2,
               label=f"lower bound: {format_bytes(plan.lower_bound)}")
    if plan.peak_step is not None:
        peak = plan.peak_step + 1
        ax.axvline(peak, color=_TIMELINE_COLORS["lower_bound"], linestyle=":", linewidth=1)
        ax.plot([peak], [plan.lower_bound / scale], marker="v", markersize=9,
                color=_TIMELINE_COLORS["lower_bound"], linestyle="none")
        name = plan.live.step_name(plan.peak_step)
        if len(name) > 40:
            name = name[:37] + "..."
        ax.annotate(f"peak: step {peak}/{nsteps} ({name})",
                    xy=(peak, plan.lower_bound / scale), xytext=(0, 10),
                    textcoords="offset points", fontsize=8,
                    ha="right" if peak > nsteps / 2 else "left",
                    color=_TIMELINE_COLORS["lower_bound"])
    if plan.train:
        forward = _forward_mask(plan.graph, plan.num_forward_outputs)
        first_bwd = next((s for s, members in enumerate(plan.steps)
                          if not forward[members[-1]]), None)
        if first_bwd is not None:
            ax.axvline(first_bwd + 0.5, color="#999999", linewidth=0.8)
            ax.text(first_bwd + 1, 0.02, " backward", transform=ax.get_xaxis_transform(),
                    fontsize=8, color="#666666")
    ax.set_xlim(0.5, max(nsteps + 0.5, 1.5))
    ax.set_ylim(0, top / scale * 1.12 if top else 1)
    ax.set_xlabel("step of the schedule")
    ax.set_ylabel(f"memory in use ({unit})")
    ax.set_title(title or f"{plan.net}: internal memory per step "
                          f"({'training' if plan.train else 'inference'})", fontsize=11)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", framealpha=0.9)
    fig.tight_layout()
    if path is not None:
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt)
        atomic_write_bytes(path, buf.getvalue())
    return fig


# --------------------------------------------------------------------------
# writing files
# --------------------------------------------------------------------------
def output_format(path) -> str:
    """The format named by a file's extension; VizError if not supported."""
    ext = os.path.splitext(os.fspath(path))[1].lower().lstrip(".")
    if ext == "gv":
        ext = "dot"
    if ext not in FORMATS:
        raise VizError(f"cannot write {os.fspath(path)!r}: unknown format "
                       f"'{ext or '(no extension)'}'; use one of "
                       f"{', '.join('.' + f for f in FORMATS)}")
    return ext


def render(dot, path) -> str:
    """Writes ``dot`` (a graphviz.Digraph) to ``path`` in the format its
    extension names (.svg .png .pdf .dot), atomically; returns the path.
    Every format but .dot runs Graphviz's ``dot`` program."""
    import graphviz

    fmt = output_format(path)
    if fmt == "dot":
        atomic_write_text(path, dot.source)
        return os.fspath(path)
    try:
        data = dot.pipe(format=fmt, quiet=True)
    except graphviz.ExecutableNotFound:
        raise VizError(f"cannot write {os.fspath(path)!r}: {INSTALL_GRAPHVIZ}") from None
    except graphviz.CalledProcessError as err:
        detail = (err.stderr or b"").decode(errors="replace").strip().splitlines()
        raise VizError(f"Graphviz's dot failed on {os.fspath(path)!r}: "
                       f"{detail[-1] if detail else err}") from None
    except OSError as err:
        # dot quit before reading the whole graph (a broken pipe): not a
        # closed stdout of ours, so it must not pass for one
        raise VizError(f"Graphviz's dot failed on {os.fspath(path)!r}: it stopped reading "
                       f"the graph ({err.strerror or err})") from None
    atomic_write_bytes(path, data)
    return os.fspath(path)


# --------------------------------------------------------------------------
# the `symgraph viz` subcommand
# --------------------------------------------------------------------------
def add_arguments(parser) -> None:
    parser.add_argument("net", metavar="NET.json", help="network as MXNet symbol JSON")
    parser.add_argument("-o", "--output", metavar="OUT",
                        help="output file; its extension picks the format: .svg .png .pdf "
                             ".dot (default: NET.svg beside the input)")
    parser.add_argument("--shape", action="append", metavar="NAME=DIMS", default=[],
                        help="input shape, e.g. data=64,3,224,224 (repeatable); edges are "
                             "labelled with tensor shapes")
    parser.add_argument("--plan", action="store_true",
                        help="draw the memory plan (needs --shape): tensors coloured by "
                             "storage slot, bytes per node, fused groups, a legend of totals")
    parser.add_argument("--train", action="store_true",
                        help="draw the backward graph too (dashed, paler)")
    parser.add_argument("--strategy", default="arena",
                        choices=("naive", "inplace", "coshare", "both", "arena"),
                        help="with --plan: the strategy whose storage is drawn (default: "
                             "arena, as in symgraph plan)")
    parser.add_argument("--rankdir", default="TB", choices=("TB", "LR", "BT", "RL"),
                        help="layout direction: TB top to bottom (default), LR left to right")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--show-params", dest="hide_params", action="store_false",
                       help="draw weights, biases and aux states as input nodes")
    group.add_argument("--hide-params", dest="hide_params", action="store_true",
                       help="hide weights, biases and aux states (the default)")
    parser.set_defaults(hide_params=True)
    parser.add_argument("--range", dest="node_range", metavar="START:END",
                        help="draw only the nodes on paths from START to END, e.g. "
                             "conv3_1:conv4_1 (either side may be empty)")
    parser.add_argument("--collapse", metavar="REGEX",
                        help="draw each run of consecutive nodes whose names give the same "
                             "match (its first group, if any) as one block, e.g. "
                             "'stage\\d+_unit\\d+' for ResNet units")
    parser.add_argument("--title", help="graph name (default: the output node's name)")
    parser.add_argument("--group2ctx", metavar="GROUP=DEV,...", default=None,
                        help="draw the net placed by ctx_group, e.g. stage1=cpu:1,stage2=cpu:2, "
                             "with a _CrossDeviceCopy node on every edge between devices")


def load_net(path):
    """The Symbol in an MXNet symbol-JSON file (``symgraph.cli.load_net``)."""
    from .cli import load_net as load
    return load(path)


def run(args) -> int:
    """``symgraph viz``: writes the picture, prints its path; 0 on success."""
    from .cli import check_net_file, check_output_folder, parse_shapes

    out = args.output or os.path.splitext(args.net)[0] + ".svg"
    check_net_file(args.net)  # a missing input is named before its default output
    output_format(out)  # an unknown extension fails before any work
    check_output_folder(out)
    shape = parse_shapes(args.shape)
    if args.plan and not shape:
        raise VizError("--plan needs the input shapes: add --shape NAME=DIMS, e.g. "
                       "--shape data=64,3,224,224")
    group2ctx = None
    if args.group2ctx is not None:
        from .parallel.placement import parse_group2ctx_arg
        group2ctx = parse_group2ctx_arg(args.group2ctx)
    net = load_net(args.net)
    dot = plot(net, shape=shape or None, plan=True if args.plan else None, train=args.train,
               strategy=args.strategy, hide_params=args.hide_params, rankdir=args.rankdir,
               node_range=args.node_range, collapse=args.collapse, title=args.title,
               group2ctx=group2ctx)
    render(dot, out)
    print(f"wrote {out}")
    return 0
