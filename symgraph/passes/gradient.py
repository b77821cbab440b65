"""The gradient pass: an explicit backward graph built from each op's rule.

``build_gradient(graph, wrt)`` returns a new graph whose outputs are the
original outputs followed by the gradient of each variable in ``wrt``.
Backward nodes read exactly the tensors their rule names, which is what
the memory planner will see. Gradients of a tensor used several times are
summed (``ElementWiseSum``, as MXNet does). Only nodes on a path from a
``wrt`` variable to an output get a gradient; nothing else is built.

Head gradients: an output produced by a loss op (``SoftmaxOutput``,
``LinearRegressionOutput`` ...) starts the backward by itself; every other
output gets a variable ``<output name>_head_grad`` that the caller feeds.
The name is only a default: a second head of the same output (``Group([y,
y])``) or a clash with another node gets a numbered name, so callers learn
which variable belongs to which output from ``build_gradient_with_heads``,
never from the suffix.
"""
from __future__ import annotations

from typing import Sequence

from ..errors import GraphError
from ..graph import Entry, Graph, Node, entry_key, unique_name
from ..ops.registry import get_op
from ..util import short_repr


def is_label(name: str, label_names=None) -> bool:
    """Whether input ``name`` is a label: one of ``label_names``, or by
    default a name ending in 'label' (MXNet's convention)."""
    return name.endswith("label") if label_names is None else name in label_names


def default_wrt(graph: Graph, data_names=None, label_names=None) -> list:
    """The parameters: arguments other than the data and the labels
    (default: 'data' and names ending in 'label')."""
    data = {"data"} if data_names is None else set(data_names)
    return [name for name in graph.list_arguments()
            if name not in data and not is_label(name, label_names)]


HEAD_GRAD_SUFFIX = "_head_grad"


class GradBuilder:
    """What a gradient rule may use: make nodes, read outputs, know needs."""

    def __init__(self, taken: set[str], origin: dict | None = None):
        self._taken = taken
        self.need: list[bool] = []
        # backward node name -> the forward node whose rule made it (placement:
        # a gradient node runs on its forward node's device, as in nnvm)
        self.origin = {} if origin is None else origin

    def unique(self, base: str) -> str:
        return unique_name(base, self._taken)

    def op(self, opname: str, inputs: Sequence[Entry], attrs: dict | None = None,
           suffix: str = "backward", base: str | None = None) -> list[Entry]:
        """Creates a node of a registered op; returns its outputs."""
        name = self.unique(f"{base or self._current}_{suffix}")
        node = Node(get_op(opname), name, attrs or {}, list(inputs))
        self.origin[name] = self._current
        return [Entry(node, i) for i in range(node.num_outputs)]

    def output(self, node: Node, i: int) -> Entry:
        return Entry(node, i)

    def ograd_or_zeros(self, node: Node, ograds, i: int) -> Entry:
        g = ograds[i]
        if g is None:
            g = self.op("zeros_like", [Entry(node, i)], suffix=f"zero_ograd{i}")[0]
        return g


def _needs_gradient(graph: Graph, wrt_ids: set[int]) -> list[bool]:
    """Node ids on some path from a wrt variable (forward reachability)."""
    reach = [False] * len(graph.nodes)
    for i, n in enumerate(graph.nodes):
        if id(n) in wrt_ids:
            reach[i] = True
        elif n.op is not None:
            k = n.num_args
            reach[i] = any(reach[graph.node_id(e.node)] for e in n.inputs[:k])
    return reach


def build_gradient(graph: Graph, wrt: Sequence[str]) -> Graph:
    """Outputs: the graph's outputs, then d(outputs)/d(var) for var in wrt."""
    return build_gradient_with_heads(graph, wrt)[0]


def _check_wrt(wrt, by_name: dict) -> list:
    """``wrt`` as a list, or GraphError unless it holds distinct argument
    names: a string would be taken letter by letter, and a name given twice
    would count its gradient twice."""
    names = list(by_name)
    valid = ", ".join(names[:20]) + (f", ... ({len(names)} in all)" if len(names) > 20
                                     else "" if names else "none")
    if isinstance(wrt, (str, bytes)) or not hasattr(wrt, "__iter__"):
        raise GraphError(f"wrt must be a list of argument names ({valid}), got "
                         f"{type(wrt).__name__} {short_repr(wrt)}")
    wrt, seen = list(wrt), set()
    for name in wrt:
        if not isinstance(name, str) or name not in by_name:
            raise GraphError(f"cannot take the gradient of {short_repr(name)}: it is not an "
                             f"argument of the graph ({valid})")
        if name in seen:
            raise GraphError(f"wrt names {short_repr(name)} twice")
        seen.add(name)
    return wrt


def build_gradient_with_heads(graph: Graph, wrt: Sequence[str], origin: dict | None = None
                              ) -> tuple[Graph, list[tuple[str, int]]]:
    """``build_gradient``'s graph, and its head-gradient variables as
    ``(variable name, index of the graph output it is the gradient of)``
    pairs in output order (loss outputs and outputs no gradient reaches have
    none). ``origin``, if given, is filled with backward node name -> name
    of the forward node (or variable) whose gradient made it."""
    by_name = {n.name: n for n in graph.arguments}
    wrt = _check_wrt(wrt, by_name)
    wrt_nodes = [by_name[n] for n in wrt]
    reach = _needs_gradient(graph, {id(n) for n in wrt_nodes})
    g = GradBuilder({n.name for n in graph.nodes}, origin)

    # contributions to each entry's gradient, keyed by (node id, output index)
    contrib: dict[tuple[int, int], list[Entry]] = {}
    heads: list[tuple[str, int]] = []
    for out_index, e in enumerate(graph.outputs):
        nid = graph.node_id(e.node)
        if not reach[nid]:
            continue
        if e.node.op is not None and e.node.op.is_loss:
            contrib.setdefault((nid, e.index), [])  # the loss starts by itself
            continue
        name = e.node.output_names()[e.index] + HEAD_GRAD_SUFFIX
        # the head gradient has its output's shape and dtype (infer reads this)
        head = Node(None, g.unique(name), {"__like__": f"{e.node.name}:{e.index}"})
        heads.append((head.name, out_index))
        contrib.setdefault((nid, e.index), []).append(Entry(head, 0))

    def total(nid: int, idx: int, node: Node) -> Entry | None:
        parts = contrib.get((nid, idx))
        if not parts:
            return None
        if len(parts) == 1:
            return parts[0]
        g._current = node.name
        return g.op("ElementWiseSum", parts, {"num_args": len(parts)},
                    suffix=f"grad_sum{idx}" if idx else "grad_sum")[0]

    for nid in range(len(graph.nodes) - 1, -1, -1):
        node = graph.nodes[nid]
        if node.op is None or not reach[nid]:
            continue
        nv = node.num_visible_outputs
        ograds = [total(nid, i, node) for i in range(nv)]
        is_loss_start = node.op.is_loss and any((nid, i) in contrib for i in range(nv))
        if all(o is None for o in ograds) and not is_loss_start:
            continue
        if node.op.gradient is None:
            raise GraphError(f"op {node.op.name} (node '{node.name}') has no gradient "
                             f"rule; block the gradient with BlockGrad")
        k = node.num_args
        g.need = [reach[graph.node_id(e.node)] for e in node.inputs[:k]]
        g._current = node.name
        grads = node.op.gradient(g, node, ograds)
        if len(grads) != k:
            raise AssertionError(f"gradient rule of {node.op.name} returned "
                                 f"{len(grads)} gradients for {k} arguments")
        for e, gr, want in zip(node.inputs[:k], grads, g.need):
            if gr is not None and want:
                contrib.setdefault((graph.node_id(e.node), e.index), []).append(gr)

    outs = list(graph.outputs)
    for var in wrt_nodes:
        nid = graph.node_id(var)
        gr = total(nid, 0, var)
        if gr is None:  # no path to an output, or blocked: the gradient is zero
            g._current = var.name
            gr = g.op("zeros_like", [Entry(var, 0)], suffix="zero_grad")[0]
        outs.append(gr)
    return Graph(outs), heads


class TrainingSplit:
    """A graph split for training, the one way every program is built.

    ``full``: the forward outputs followed by the gradients of ``wrt``;
    ``heads``: ``(head-gradient variable, output index)`` for outputs that
    are not losses, from the gradient pass (never from names: ``Group([y,
    y])`` gives y two heads); ``saved``: the forward tensors the backward
    reads, as ``(entry key, Entry)``; ``forward``: a graph of the outputs
    followed by the saved tensors; ``backward``: a graph of the gradients
    that starts from the saved tensors (fed by entry key), the variables
    and the head gradients. The fused step lowers ``full``; the split path
    lowers ``forward`` then ``backward``: the same nodes either way.

    ``recompute``: names of forward op nodes to compute again for the
    backward (``passes.recompute.rewrite``): ``full`` reads their clones,
    the forward saves only the tensors the clones start from (the
    checkpoints) and the backward graph holds the clones.
    """

    def __init__(self, graph: Graph, wrt: Sequence[str], recompute: Sequence[str] = ()):
        from .recompute import recompute_of, rewrite
        self.graph = graph
        self.wrt = list(wrt)
        self.num_outputs = len(graph.outputs)
        self.origin: dict[str, str] = {}  # backward node -> its forward node
        self.full, heads = build_gradient_with_heads(graph, self.wrt, self.origin)
        self.recompute = tuple(recompute)
        if self.recompute:
            self.full = rewrite(self.full, self.num_outputs, self.recompute)
            for n in self.full.nodes:  # a clone runs where its original does
                if recompute_of(n) is not None:
                    self.origin[n.name] = recompute_of(n)
        fwd_ids = {id(n) for n in graph.nodes}
        saved: dict[str, Entry] = {}
        for n in self.full.nodes:
            if id(n) in fwd_ids or n.op is None:
                continue
            for e in n.inputs:
                if id(e.node) in fwd_ids and e.node.op is not None:
                    saved.setdefault(entry_key(e), e)
        self.saved = list(saved.items())
        self.forward = graph.rewrite(outputs=list(graph.outputs) + list(saved.values()))
        self.backward = self.full.rewrite(outputs=self.full.outputs[self.num_outputs:])
        fed = {n.name for n in self.backward.variables}
        self.heads = [(name, i) for name, i in heads if name in fed]

    @property
    def saved_keys(self) -> list[str]:
        return [k for k, _ in self.saved]
