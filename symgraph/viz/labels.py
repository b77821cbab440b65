"""What a drawn node looks like: op families and their colours (mx.viz's
palette), the op's title and key attributes, and names escaped so that
Graphviz can hold them whatever they hold (node ids, HTML-like labels,
quoted attributes). draw.py draws with them.
"""
from __future__ import annotations

import html
import re

from ..graph import Node


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

