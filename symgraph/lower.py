"""Lowering to JAX: a graph becomes a pure function of its feeds.

``Interpreter`` runs a graph node by node and frees each value after its
last use; the JAX lowering is the subclass that evaluates each node with its
op's ``lower`` (inside ``jax.jit`` that yields one XLA program per graph and
shapes). The memory planner's arena interpreter is another subclass.

Values can be fed for any entry, not only variables: that is how the
Executor splits training into a forward program that returns the tensors
the backward reads, and a backward program that starts from them.
"""
from __future__ import annotations

import zlib

import jax
import jax.numpy as jnp

from .errors import BindError, SymgraphError
from .graph import Entry, Graph, Node, entry_key  # noqa: F401 (entry_key: re-exported)
from .ops.backward import never
from .ops.conv import CONVOLUTIONS
from .passes.recompute import RECOMPUTE_ATTR


class LowerCtx:
    """What an op's lowering may know besides its inputs."""

    __slots__ = ("is_train", "_key", "node_name", "wgrad_chunks", "wgrad_first",
                 "_out_shapes")

    def __init__(self, is_train: bool, key=None, node_name: str = "", wgrad_chunks: int = 1,
                 wgrad_first: bool = False, out_shapes=None):
        self.is_train = is_train
        self._key = key
        self.node_name = node_name
        # () -> the node's inferred output shapes, for an op whose attributes
        # leave a dimension to its consumers (MXNet's 0 in ``_zeros``' shape)
        self._out_shapes = out_shapes
        # > 1: weight gradients summed over this many batch slices; True:
        # the weight gradient before the data gradient (both set only for
        # the backward nodes of ops declaring ``split_wgrad``)
        self.wgrad_chunks = wgrad_chunks
        self.wgrad_first = wgrad_first

    def out_shape(self, i: int = 0) -> tuple:
        """Output ``i``'s shape as shape inference found it."""
        if self._out_shapes is None:
            raise SymgraphError(f"node '{self.node_name}': its output shapes are not known "
                                f"while lowering")
        return self._out_shapes()[i]

    def rng(self):
        """A PRNG key private to this node (derived from the node's name)."""
        if self._key is None:
            raise SymgraphError(f"node '{self.node_name}' needs a random key")
        return jax.random.fold_in(self._key, zlib.crc32(self.node_name.encode()) & 0x7FFFFFFF)

    def linear_grads(self, f, x, w, dy):
        """(dx, dw) of ``y = f(x, w)``, linear in each, batch on axis 0. With
        ``wgrad_chunks`` k > 1 (and a batch k divides) the weight gradient
        is the sum of k gradients over batch slices, each slice tied to the
        previous slice's gradient: XLA's CPU convolutions compute a weight
        gradient from batch-minor copies of x and dy, and one slice's copies
        at a time are 1/k the size (the ``split_wgrad`` memory measure,
        symgraph/xla/). Unrolled: inside a ``lax.scan`` loop the training
        step of a small ResNet ran 3-15x slower on XLA's CPU backend.
        With ``wgrad_first`` the weight gradient comes first and the data
        gradient's ``dy`` is tied to it (the ``wgrad_first`` measure): the
        batch-minor copies die before dx is allocated."""
        if not self.wgrad_first:
            _, vjp_x = jax.vjp(lambda x: f(x, w), x)
            return vjp_x(dy)[0], self._weight_grad(f, x, w, dy)
        dw = self._weight_grad(f, x, w, dy)
        s = _anchor_flag(dw)
        _, vjp_x = jax.vjp(lambda x: f(x, w), x)
        return vjp_x(dy if s is None else _tie(dy, s))[0], dw

    def _weight_grad(self, f, x, w, dy):
        k, n = self.wgrad_chunks, x.shape[0]
        if k <= 1 or n % k:
            _, vjp_w = jax.vjp(lambda w: f(x, w), w)
            return vjp_w(dy)[0]
        m, dw = n // k, None
        for i in range(k):
            xs, ds = x[i * m:(i + 1) * m], dy[i * m:(i + 1) * m]
            if dw is not None:
                dw, xs, ds = tie_to_first([dw, xs, ds])
            _, vjp_w = jax.vjp(lambda w: f(xs, w), w)
            g = vjp_w(ds)[0]
            dw = g if dw is None else dw + g
        return dw


class Interpreter:
    """Runs a graph node by node; subclasses override ``eval_node``.

    ``run(feeds)`` takes values by variable name or by ``entry_key`` and
    returns the graph's outputs. Nodes whose needed outputs are all fed are
    not run; values are dropped after their last reader.
    """

    def __init__(self, graph: Graph):
        self.graph = graph

    def eval_node(self, node: Node, inputs: list) -> list:
        raise NotImplementedError

    def run(self, feeds: dict) -> list:
        g = self.graph
        values: dict[int, object] = {}
        for n in g.nodes:
            for i in range(n.num_outputs):
                k = n.name if n.op is None else entry_key(Entry(n, i))
                if k in feeds:
                    values[g.entry_id(Entry(n, i))] = feeds[k]
        needed = self._needed(values)
        remaining = [0] * g.num_entries
        for nid in needed:
            for e in g.nodes[nid].inputs:
                remaining[g.entry_id(e)] += 1
        for e in g.outputs:
            remaining[g.entry_id(e)] += 1
        for nid in self.order(needed):
            node = g.nodes[nid]
            base = g.row_ptr[nid]
            if all(base + i in values for i in range(node.num_outputs)):
                continue
            if node.op is None:
                raise BindError(f"no value given for input '{node.name}'")
            ins = []
            for e in node.inputs:
                eid = g.entry_id(e)
                ins.append(values[eid])
                remaining[eid] -= 1
                if remaining[eid] == 0:
                    del values[eid]
            ins = self.prepare_inputs(nid, ins, values)
            outs = self.eval_node(node, ins)
            for i, v in enumerate(outs):
                if remaining[base + i] > 0:
                    values[base + i] = v
        return [values[g.entry_id(e)] for e in g.outputs]

    def order(self, needed: set) -> list:
        """The node ids of ``needed`` in the order they are evaluated."""
        return sorted(needed)

    def prepare_inputs(self, nid: int, inputs: list, values: dict) -> list:
        """The inputs node ``nid`` is evaluated with (``values``: the live
        values by entry id)."""
        return inputs

    def _needed(self, fed: dict) -> set[int]:
        g = self.graph
        needed: set[int] = set()
        stack = [g.entry_id(e) for e in g.outputs]
        seen = set()
        while stack:
            eid = stack.pop()
            if eid in seen or eid in fed:
                continue
            seen.add(eid)
            nid = _node_of(g, eid)
            if nid in needed:
                continue
            needed.add(nid)
            stack.extend(g.entry_id(e) for e in g.nodes[nid].inputs)
        return needed


def _node_of(g: Graph, eid: int) -> int:
    import bisect
    return bisect.bisect_right(g.row_ptr, eid) - 1


class JaxInterpreter(Interpreter):
    """Evaluates each node with its op's JAX lowering; collects aux updates."""

    def __init__(self, graph: Graph, is_train: bool, key=None, anchor: str | None = None,
                 wgrad_chunks: int = 1, wgrad_first: bool = False, anchor_tie: str = "add",
                 inferred=None, keep_shared: str | None = None):
        super().__init__(graph)
        # entry ids computed once into a buffer of their own (``shared_entries``)
        self._shared = shared_entries(graph, keep_shared) if keep_shared else frozenset()
        self._keep_shared = keep_shared
        if anchor_tie not in ANCHOR_TIES:
            raise SymgraphError(f"anchor_tie={anchor_tie!r}; use one of "
                                f"{', '.join(map(repr, ANCHOR_TIES))}")
        self.anchor_tie = anchor_tie
        if anchor is not None and anchor not in ANCHORS:
            raise SymgraphError(f"anchor={anchor!r}; use None or one of "
                                f"{', '.join(map(repr, ANCHORS))}")
        if not isinstance(wgrad_chunks, int) or wgrad_chunks < 1:
            raise SymgraphError(f"wgrad_chunks={wgrad_chunks!r}; use a positive integer")
        self.is_train = is_train
        self.key = key
        self.anchor = anchor
        self.wgrad_chunks = wgrad_chunks
        self.wgrad_first = wgrad_first
        self.aux_updates: dict[str, object] = {}
        self._clones = _CloneAnchors(graph)
        # shapes for ops that ask (``LowerCtx.out_shape``): given, or inferred
        # from the feeds when first asked
        self._inferred = inferred
        self._feed_shapes: dict = {}

    def order(self, needed):
        return self._clones.order(needed)

    def prepare_inputs(self, nid, inputs, values):
        """A recompute clone's inputs that are neither clones nor variables
        (the checkpoints it starts from) are tied to the incoming
        gradient of the backward node that first needs the recomputed
        values: XLA can then neither merge the clone with the forward node
        it repeats (CSE: same op, same operands) nor compute it early, in
        the forward, and keep its result alive until the backward -- which
        would undo the recompute."""
        anchor = self._clones.anchor.get(nid)
        if anchor is None or anchor not in values or CLONE_TIE is None:
            return inputs
        clones = self._clones.clone_ids
        g = self.graph
        node = g.nodes[nid]
        # variables (weights) stay as they are: a tied copy of a weight costs
        # its size, and the tied activations already keep the clone apart;
        # a clone that reads only variables (the first layer) ties its data
        keep = [e.node.op is None or g.node_id(e.node) in clones for e in node.inputs]
        if all(keep) and not any(g.node_id(e.node) in clones for e in node.inputs):
            keep = [i > 0 for i in range(len(keep))]
        if CLONE_TIE == "barrier":  # measured, not used: see CLONE_TIE
            sel = [x for x, k in zip(inputs, keep) if not k]
            _, sel = jax.lax.optimization_barrier((values[anchor], sel))
            it = iter(sel)
            return [x if k else next(it) for x, k in zip(inputs, keep)]
        s = _anchor_flag(values[anchor])
        if s is None:
            return inputs
        return [x if k else _tie(x, s) for x, k in zip(inputs, keep)]

    def run(self, feeds: dict) -> list:
        names = {n.name for n in self.graph.variables}
        self._feed_shapes = {k: tuple(v.shape) for k, v in feeds.items() if k in names}
        return super().run(feeds)

    def _out_shapes_of(self, node) -> list:
        """The node's output shapes, inferred from the feeds' shapes on the
        first call (only ops that ask, such as a ``_zeros`` whose shape
        has MXNet's 0, pay for it)."""
        if self._inferred is None:
            from .passes.infer import infer_shapes
            self._inferred = infer_shapes(self.graph, self._feed_shapes, partial=True)
        base = self.graph.entry_id_of_node(node)
        return list(self._inferred.shapes[base:base + node.num_outputs])

    def eval_node(self, node, inputs):
        outs = self.apply(node, node.op.lower, inputs)
        if self._shared:
            base = self.graph.entry_id_of_node(node)
            keep = [i for i in range(len(outs)) if base + i in self._shared]
            if keep:
                kept = _kept([outs[i] for i in keep], self._keep_shared)
                for i, v in zip(keep, kept):
                    outs[i] = v
        return outs

    def apply(self, node, lowering, inputs):
        """``lowering(params, ctx, *inputs)`` for ``node``: its outputs as a
        list, aux updates collected, errors naming the node."""
        fwd = node.op.forward  # set for backward ops: the op facts below are its
        wgrad = fwd is not None and fwd.split_wgrad
        # a recompute clone draws the random numbers of the node it repeats
        # (a recomputed Dropout drops the same units)
        original = node.attrs.get(RECOMPUTE_ATTR)
        ctx = LowerCtx(self.is_train, self.key, original or node.name,
                       self.wgrad_chunks if wgrad else 1, wgrad and self.wgrad_first,
                       out_shapes=lambda: self._out_shapes_of(node))
        if len(inputs) > 1 and _anchored(self.anchor, fwd):
            inputs = (tie_to_first(inputs) if self.anchor_tie == "add" else
                      barrier_to_first(inputs, [e.node.op is None for e in node.inputs]))
        try:
            with jax.named_scope(node.name):  # XLA's metadata names the node (xla/hlo.py reads it)
                res = lowering(node.params, ctx, *inputs)
        except SymgraphError:
            raise
        except Exception as err:  # name the node; the op's own message follows
            raise SymgraphError(f"while lowering node '{node.name}' ({node.op.name}) "
                                f"with inputs {[tuple(x.shape) for x in inputs]}: "
                                f"{type(err).__name__}: {err}") from err
        n_aux = len(node.op.aux_names(node.params))
        if n_aux:
            outs, new_aux = res
            # a clone's aux updates are the forward's again: applied once
            if self.is_train and new_aux is not None and original is None:
                for e, v in zip(node.inputs[node.num_args:], new_aux):
                    self.aux_updates[e.node.name] = v
        else:
            outs = res
        if not isinstance(outs, (tuple, list)):
            outs = (outs,)
        return list(outs)


def tie_to_first(inputs: list) -> list:
    """Ties tensors to the first one: each is selected by a predicate read
    from it (``_anchor_flag``, ``_tie``) that XLA cannot fold, so
    no work on the other tensors can start before the first exists, and
    the values pass bit for bit, whatever the first holds (inf, NaN).
    The anchor measure ties a backward node's inputs to its incoming
    gradient: the layout copies XLA's CPU convolutions make of saved
    activations move from the forward pass, where they would be kept alive
    until the backward, to where they are used. (XLA's CPU pipeline drops
    an ``optimization_barrier`` before scheduling, docs/memory.md: on the
    CPU only a data dependence orders work.)"""
    s = _anchor_flag(inputs[0])
    if s is None:
        return inputs
    # tensors only: a bias or a scale costs nothing to keep
    return [inputs[0]] + [_tie(x, s) for x in inputs[1:]]


def barrier_to_first(inputs: list, variable: list) -> list:
    """Ties tensors to the first one through ``jax.lax.optimization_barrier``:
    the values pass through without a copy, and nothing that reads them can
    run before the first exists. Variables (weights, biases) stay untied:
    they are arguments, there is no early work on them to prevent. The GPU
    form of the anchor: ``tie_to_first``'s elementwise tie materialises a
    copy of each tensor a cuDNN, cuBLAS or Triton call reads (on VGG-16 a
    784 MiB activation and the 392 MiB fc6 weight, docs/memory.md "Which
    device")."""
    g = inputs[0]
    sel = [i for i in range(1, len(inputs)) if not variable[i]
           and jnp.issubdtype(inputs[i].dtype, jnp.floating) and inputs[i].ndim >= 2]
    if g.size == 0 or not sel:
        return inputs
    _, tied = jax.lax.optimization_barrier((g, [inputs[i] for i in sel]))
    out = list(inputs)
    for i, x in zip(sel, tied):
        out[i] = x
    return out


def _anchor_flag(g):
    """``ops.backward.never(g)``, or None if ``g`` is empty or not float."""
    if g.size == 0 or not jnp.issubdtype(g.dtype, jnp.floating):
        return None
    return never(g)


def _tie(x, s):
    """``x`` tied to anchor ``s`` (``_anchor_flag``), for float tensors
    of two or more dimensions (what ``tie_to_first`` ties), ``x`` otherwise:
    selected where ``s`` is False, so every value passes bit for bit (an
    add would flush subnormals on XLA's CPU backend, and spread a NaN)."""
    if not (hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.floating) and x.ndim >= 2):
        return x
    return jnp.where(s, jnp.zeros((), x.dtype), x)


# How a recompute clone's inputs are tied to the backward: 'add' (``_tie``,
# as tie_to_first; it was ``x + g[0]*0`` when measured), 'barrier'
# (jax.lax.optimization_barrier over the gradient and the inputs) or None
# (not tied; XLA then merges the clone with its original). Measured on
# XLA:CPU (benchmarks/recompute_program.py, docs/memory.md): untied, the
# recompute is undone (temp as without it); 'add' keeps it; 'barrier'
# kept it as well or worse (a 16-layer MLP: 42 against 26 MiB).
# Module-level so the benchmark can compare them.
CLONE_TIE = "add"


class _CloneAnchors:
    """Where a graph's recompute clones (``passes.recompute``) run and what
    they are tied to. A clone's first use is the earliest node, in the
    graph's order, that is no clone and reads it directly or through other
    clones; the clone is evaluated right before that node, its non-clone
    inputs tied to that node's incoming gradient (its first input computed
    by the backward). Graphs without clones keep the graph's order."""

    def __init__(self, graph: Graph):
        nodes = graph.nodes
        self.clone_ids = {i for i, n in enumerate(nodes)
                          if n.op is not None and RECOMPUTE_ATTR in n.attrs}
        self.anchor: dict[int, int] = {}
        self.first_use: dict[int, int] = {}
        if not self.clone_ids:
            return
        # backward-derived entries: outputs of backward ops, of nodes reading
        # one, and head gradients (variables shaped like an output)
        bwd = [False] * len(nodes)
        for i, n in enumerate(nodes):
            if i in self.clone_ids:
                continue
            if n.op is None:
                bwd[i] = "__like__" in n.attrs
            else:
                bwd[i] = n.op.forward is not None or \
                    any(bwd[graph.node_id(e.node)] for e in n.inputs)
        users: dict[int, list] = {}
        for i, n in enumerate(nodes):
            for e in n.inputs:
                users.setdefault(graph.node_id(e.node), []).append(i)
        for c in sorted(self.clone_ids, reverse=True):  # users of a clone come later
            first = min((self.first_use.get(u, u) for u in users.get(c, ())), default=None)
            if first is None:
                continue
            self.first_use[c] = first
            grad = next((graph.entry_id(e) for e in nodes[first].inputs
                         if graph.node_id(e.node) not in self.clone_ids
                         and bwd[graph.node_id(e.node)]), None)
            if grad is not None:
                self.anchor[c] = grad

    def order(self, needed) -> list:
        if not self.first_use:
            return sorted(needed)
        later: dict[int, list] = {}
        out = []
        for i in sorted(needed):
            f = self.first_use.get(i)
            if f is not None and f in needed:
                later.setdefault(f, []).append(i)  # topological among themselves
            else:
                out.append(i)
        res = []
        for i in out:
            res.extend(later.get(i, ()))
            res.append(i)
        return res


# The keep_shared measure's values: outputs of forward ops of these
# categories (``OpDef.category``) that KEEP_SHARED_READERS or more nodes
# read. XLA fuses an elementwise producer into each of its consumers and
# computes it again in each, which keeps the producer's own inputs alive
# until the last reader ran (a transformer's residual sum ``x + branch``,
# read by the next LayerNorm and the next sum, kept every earlier branch's
# output on a GPU; a post-activation residual unit's output, read by the
# next unit's convolution and its sum, kept the unit's two convolution
# outputs on the CPU). Kept, the value is a buffer of its own, computed
# once, as the plan has it. Adding the injective ops (Concat, transpose)
# saved nothing and cost DenseNet 12 MiB on a GPU
# (benchmarks/results/gpu_targets/keep_shared.md).
KEEP_SHARED_CATEGORIES = ("elementwise",)
KEEP_SHARED_READERS = 2
# How a shared value is kept: 'barrier', one optimization barrier (XLA:GPU);
# 'branch', the false branch of a conditional on a never-true flag
# (``ops.backward.never``), which XLA:CPU cannot fuse into the readers --
# it drops optimization barriers before fusing. The branch copies the
# value, so on the CPU only values a convolution reads beside an
# elementwise op are kept: the sums of a pre-activation ResNet-50 (read by
# a BatchNorm and the next sum), kept too, took its inference from 245 to
# 294 MiB at batch 32.
KEEP_SHARED_TIES = ("barrier", "branch")


def shared_entries(graph: Graph, tie: str = "barrier") -> frozenset:
    """The entry ids the keep_shared measure keeps (``KEEP_SHARED_TIES``):
    outputs of forward ops in ``KEEP_SHARED_CATEGORIES`` that
    ``KEEP_SHARED_READERS`` or more nodes read (a graph output is no
    reader: its buffer is the program's); for 'branch', of those, the ones
    a convolution and an elementwise op both read."""
    if tie not in KEEP_SHARED_TIES:
        raise SymgraphError(f"keep_shared={tie!r}; use one of "
                            f"{', '.join(map(repr, KEEP_SHARED_TIES))}")
    out = set()
    for n in graph.nodes:
        if n.op is None or n.op.forward is not None or \
                n.op.category not in KEEP_SHARED_CATEGORIES:
            continue
        for i in range(n.num_outputs):
            e = Entry(n, i)
            readers = graph.users(e)
            if len(readers) < KEEP_SHARED_READERS:
                continue
            if tie == "branch" and not (
                    any(r.op.name in CONVOLUTIONS for r in readers) and
                    any(r.op.category in KEEP_SHARED_CATEGORIES for r in readers)):
                continue
            out.add(graph.entry_id(e))
    return frozenset(out)


def _kept(values: list, tie: str) -> list:
    """``values`` computed once, each into a buffer of its own (``tie``)."""
    if tie == "barrier":
        return list(jax.lax.optimization_barrier(values))
    flags = [_anchor_flag(v) for v in values]  # None: an empty or integer value, left as is
    return [v if s is None else jax.lax.cond(s, jnp.zeros_like, lambda x: x, v)
            for v, s in zip(values, flags)]


# lower(..., anchor=...): 'backward' ties every backward node to its incoming
# gradient, 'weights' those of ops declaring ``anchor_weights``
ANCHORS = ("backward", "weights")
# how the anchor ties: 'add' (``tie_to_first``, an elementwise tie, once an
# add: XLA:CPU) or 'barrier' (``barrier_to_first``: XLA:GPU, whose library
# calls cannot fuse the elementwise tie)
ANCHOR_TIES = ("add", "barrier")


def _anchored(anchor: str | None, fwd) -> bool:
    """Whether a node whose op's forward op is ``fwd`` (None: not a backward
    op) is tied to its incoming gradient."""
    if anchor is None or fwd is None:
        return False
    return anchor == "backward" or fwd.anchor_weights


def lower(graph: Graph, is_train: bool = False, anchor: str | None = None,
          wgrad_chunks: int = 1, wgrad_first: bool = False, anchor_tie: str = "add",
          keep_shared: str | None = None):
    """Graph -> pure function ``f(feeds, key) -> (outputs, aux_updates)``.

    ``feeds`` maps variable names (and optionally ``entry_key``s of inner
    entries) to arrays. Wrap it in ``jax.jit`` to get one XLA program.
    Memory measures, off by default (docs/memory.md, "Plan vs XLA"): ``anchor``
    ``'backward'`` ties every backward node's inputs to its incoming
    gradient, ``'weights'`` only those of ops declaring ``anchor_weights``
    (Convolution, Deconvolution and FullyConnected), so XLA cannot compute
    from saved activations early;
    ``wgrad_chunks=k`` sums the weight gradients of ops declaring
    ``split_wgrad`` (Convolution and Deconvolution) over k batch slices, one after the other, so the
    batch-minor copies XLA's CPU convolutions make for them are 1/k the
    size; ``wgrad_first`` computes those ops' weight gradients before
    their data gradients, so the copies are gone before the data gradient
    is allocated. ``anchor_tie``: how the anchor ties (``ANCHOR_TIES``).
    ``keep_shared`` ('barrier' or 'branch', ``KEEP_SHARED_TIES``) keeps
    each value ``shared_entries`` names, every reader reading the kept
    value (bit for bit the same), so XLA computes it once rather than
    inside each reader (docs/memory.md, "Which device").
    """
    # channels-last programs are lowered from passes.layout's rewrite
    # (measures.lower_measured): the graph says where values change layout

    def fn(feeds, key=None):
        interp = JaxInterpreter(graph, is_train, key, anchor, wgrad_chunks, wgrad_first,
                                anchor_tie, keep_shared=keep_shared)
        outs = interp.run(feeds)
        return outs, interp.aux_updates
    return fn
