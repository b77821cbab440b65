"""A footprint you can predict: the bytes the program that runs will need,
from the plan alone (nothing compiled).

    from symgraph.memory.predict import predict
    pr = predict(plan)               # plan: sg.plan(net, shapes, train=...)
    pr.total, pr.parts

XLA's figure for a program is temp + argument + output - alias
(``symgraph.xla.footprint``). The rule (docs/memory.md, "A footprint you
can predict", has the measurements behind it):

- *argument, output - alias* are known exactly: the arguments bucket
  (data, labels, parameters), aux states, the optimizer's state (SGD with
  momentum 0.9 unless another is named: the step ``xla.training_step``
  compiles), and the forward outputs (not donated, so not aliased).
- *temp* is the plan of the same graph as XLA sees it:
  0. ``identity`` and ``BlockGrad`` are no work and no buffer in XLA: the
     plan of the graph without them (``without_copies``);
  1. in training XLA fuses cheap forward ops (activations, BatchNorm's
     normalisation, elementwise ops) into their consumers and recomputes
     them in the backward from the tensor they read, instead of keeping
     their outputs: the prediction plans the graph with those ops
     recomputed (``passes.recompute.rewrite``) -- an op with more than one
     full-size input (a residual sum) only where it has one reader, as
     XLA fuses it only then; the recomputed ops read only by an
     elementwise op or a max pooling's backward are computed inside it and
     never stored (``_xla_fusion`` with ``_backward_light``);
  2. in training the fused step holds each parameter gradient in temp
     from the backward node that makes it until the update at the end:
     the prediction plans the gradients as internal tensors, where the
     plan keeps them in their own bucket;
  3. in training, some backward nodes hold a buffer while they run
     (``_node_workspace``): a convolution's backward the weight in the
     layout its data gradient reads, a stride-1 max pooling's backward one
     padded partial gradient per window offset, a strided one its padded
     input gradient;
  4. in inference, a cheap group read only by one elementwise or injective
     group (or, with channels-last activations, a pooling) is fused into
     it and never stored (``_xla_fusion``); a cheap node with one
     full-size input read by such a group and by another consumer too is
     stored for the other and computed again inside the group's loop,
     with the chain behind it (``duplicated``: ResNet-v1's unit outputs);
     a BatchNorm writes over its input where that dies (not where its loop
     ends in a pooling of an NCHW program), and a convolution holds a
     copy of its weight while it runs (``_inference_as_xla_runs``).

A plan that recomputes may run as the staged step (a program per segment,
train/staged.py), whose figure is a walk over the programs
(``predict_staged``): what the caller holds between programs is exact
from the cut, and each program adds its outputs and its own working set
(``_working_set``: the program as it is lowered -- with channels-last
measures its layout transposes, the loops XLA fuses, a max pool's backward
partials and a convolution's batch-minor copies).
``predict_program`` -- what ``Plan.predicted`` reports -- takes the
smaller of the two for such a plan, as a Module under a budget does.

On the CPU the *resident* memory a fresh run touches is that figure plus
what XLA's convolution libraries allocate outside XLA's buffers while a
call runs (``library_bytes``): YNNPACK a packed copy of the weight and a
padded copy of the input, one per worker thread for wide convolutions;
Eigen, for a strided convolution's input gradient, its columns and its
code. They free their copies after each call, so the largest call's
counts, as one malloc arena reuses the pages (glibc's per-thread arenas
may hold up to about three calls').
"""
from __future__ import annotations

import dataclasses
import functools
import math
import os
from dataclasses import dataclass, field

from ..graph import Entry
from .liveness import entry_nbytes

# what XLA recomputes in the backward rather than keeping (training)
CHEAP_FAMILIES = ("activation", "elementwise")
CHEAP_OPS = ("BatchNorm",)


@dataclass
class Prediction:
    """``total``: predicted bytes of the program (XLA's temp + argument +
    output - alias); ``parts``: arguments, aux, optimizer, outputs, temp;
    ``recomputed``: the forward nodes the rule takes XLA to recompute;
    ``library``: the CPU convolution library's bytes beyond XLA's figure
    (``library_bytes``), so ``resident`` is the memory a fresh CPU run
    touches."""

    total: int
    parts: dict
    recomputed: list = field(default_factory=list)
    program: str = "fused"
    library: int = 0

    @property
    def resident(self) -> int:
        return self.total + self.library

    def to_json(self) -> dict:
        return {"total": int(self.total), "parts": {k: int(v) for k, v in self.parts.items()},
                "program": self.program, "library": int(self.library),
                "resident": int(self.resident)}


# YNNPACK's bytes beyond a call's own copies: heap and code the run touches;
# Eigen's, once in a program that runs anything in Eigen (a strided
# convolution's input gradient, a FullyConnected's weight gradient): the
# code it pages in (benchmarks/library_scratch.py; the MLP's training step
# touches 5-6 MiB beyond XLA's figure, its inference under 1)
LIBRARY_BASE = 2 ** 19
EIGEN_BASE = 6 * 2 ** 20


def library_call_bytes(part: str, n: int, c: int, o: int, kernel: tuple, padded: tuple,
                       out: tuple, stride: tuple, itemsize: int = 4, threads: int = 1) -> int:
    """What one 2-D convolution call allocates outside XLA's buffers on the
    CPU: ``part`` 'fwd', 'dgrad' (input gradient) or 'wgrad' (weight
    gradient) of a convolution of n inputs of c channels to o channels,
    its input padded to ``padded`` and its output ``out`` spatial. In YNNPACK

    - forward: W + T * Xpad, the packed weight and the padded input;
    - input gradient, stride 1: W + T * Gpad, the output gradient padded
      by the kernel less one;
    - weight gradient: T * Xpad + G;

    plus ``LIBRARY_BASE``; in Eigen, which runs a strided convolution's
    input gradient, its columns N * Ho * Wo * C * kh * kw (the output
    gradient times the weight, before they are summed into the input's
    pixels) plus ``EIGEN_BASE``. T is ``threads`` (XLA's pool) where the
    call's output channels (weight gradient: the wider side) are >= 128
    and the kernel is wider than 1, else 1. Measured on single
    convolutions in plain ``jax.lax``, both layouts, with a 2-thread pool:
    YNNPACK's within 0.7 MiB, Eigen's within 3.8 MiB
    (benchmarks/results/library_scratch)."""
    kh, kw = kernel
    wide = kh * kw > 1
    weight = o * c * kh * kw * itemsize
    x_pad = n * c * padded[0] * padded[1] * itemsize
    if part == "fwd":
        return weight + (threads if o >= 128 and wide else 1) * x_pad + LIBRARY_BASE
    if part == "wgrad":
        return ((threads if max(c, o) >= 128 else 1) * x_pad
                + n * o * out[0] * out[1] * itemsize + LIBRARY_BASE)
    if tuple(stride) != (1, 1):
        return n * out[0] * out[1] * c * kh * kw * itemsize + EIGEN_BASE
    return (weight + (threads if c >= 128 and wide else 1)
            * n * o * (out[0] + kh - 1) * (out[1] + kw - 1) * itemsize + LIBRARY_BASE)


def library_bytes(plan, threads: int | None = None, backend: str | None = None) -> int:
    """The most XLA's CPU convolution libraries hold outside XLA's buffers
    at once while ``plan``'s program runs (0 off the CPU): the
    largest ``library_call_bytes`` over its 2-D convolutions (groups 1, no
    dilation) -- in training their backward's calls too, an input
    gradient only where the graph reads it. A strided convolution's
    backward runs its input gradient in Eigen beside its weight gradient
    in YNNPACK, so the two add up (the ResNet stem's at batch 16: 177.4
    MiB measured, 118.5 + 59.1 by the rule); a stride-1 one runs them one
    after the other (26.4 MiB, the larger call's 25.9). Eigen's code
    (``EIGEN_BASE``) counts once, beside the largest call, where anything
    runs in Eigen: a strided convolution's input gradient or a
    FullyConnected's weight gradient (XLA's CPU hands YNNPACK the forward
    dots only). ``threads``: XLA's pool, default the CPUs this process may
    run on."""
    import jax

    from ..ops.conv import _first
    if (backend or jax.default_backend()) != "cpu":
        return 0
    if threads is None:
        threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
            else (os.cpu_count() or 1)
    g, inf = plan.graph, plan.inferred
    # an input gradient is computed where a node reads it; the plan's graph
    # may output the data's gradient, which the step a Module runs drops
    read = {(id(e.node), e.index) for n in g.nodes for e in n.inputs}
    most, eigen = 0, False
    for n in g.nodes:
        name = n.op.name if n.op is not None else None
        if name == "_backward_FullyConnected":
            eigen = True
        if name not in ("Convolution", "_backward_Convolution") or len(n.params.kernel) != 2 \
                or n.params.num_group != 1 or any(d != 1 for d in (n.params.dilate or ())):
            continue
        # forward (data, weight) -> output; backward (output gradient, data, weight)
        x, y = (n.inputs[0], Entry(n, 0)) if name == "Convolution" else n.inputs[1::-1]
        b, c, h, w = _first(inf.shape(x), n.params)
        out = _first(inf.shape(y), n.params)[2:]
        pad = tuple(n.params.pad) or (0, 0)
        stride = tuple(n.params.stride) or (1, 1)

        def call(part):
            return library_call_bytes(part, b, c, n.params.num_filter, tuple(n.params.kernel),
                                      (h + 2 * pad[0], w + 2 * pad[1]), out, stride,
                                      _itemsize(inf.dtype(x)), threads)
        if name == "Convolution":
            most = max(most, call("fwd"))
        elif (id(n), 0) not in read:
            most = max(most, call("wgrad"))
        elif stride != (1, 1):  # Eigen's input gradient runs beside YNNPACK's weight gradient
            eigen = True
            most = max(most, call("wgrad") + call("dgrad") - EIGEN_BASE)
        else:
            most = max(most, call("wgrad"), call("dgrad"))
    return most + (EIGEN_BASE if eigen else 0)


def cheap(node) -> bool:
    """Whether XLA recomputes this forward op in the backward (see the rule)."""
    op = node.op
    return op is not None and not op.is_loss and (op.family in CHEAP_FAMILIES
                                                   or op.name in CHEAP_OPS)


def _optimizer_state(plan, optimizer) -> int:
    from .budget import optimizer_bytes
    if not plan.train:
        return 0
    return optimizer_bytes(plan.buckets["gradients"], "momentum" if optimizer is None
                           else optimizer)


def _forward_outputs(plan) -> int:
    g, inf = plan.graph, plan.inferred
    return sum(entry_nbytes(inf, g.entry_id(e)) for e in g.outputs[:plan.num_forward_outputs])


def _measures(plan) -> tuple:
    """The memory measures the Module's program gets for this plan (the rule)."""
    from .. import measures as measures_mod
    from ..graph import Graph
    g = Graph(plan.graph.outputs[:plan.num_forward_outputs])
    return tuple(measures_mod.default_measures(g, plan.train))


def _light(node, pooling: bool) -> bool:
    """An elementwise or injective op, or (``pooling``) a pooling: XLA
    fuses elementwise work on its input into its loop."""
    return node.op is not None and (node.op.category in ("elementwise", "injective")
                                    or (pooling and node.op.name == "Pooling"))


def _unary(node, inf, g) -> bool:
    """Whether ``node`` reads at most one input as large as its output (a
    ReLU, an inference BatchNorm: the rest are per-channel parameters) --
    XLA's "effectively at most unary" producers, which it fuses into a
    consumer even where other consumers keep it stored."""
    size = math.prod(inf.shapes[g.entry_id(Entry(node, 0))])
    return sum(math.prod(inf.shapes[g.entry_id(e)]) >= size for e in node.inputs) <= 1


def duplicated(g, inf, pooling: bool):
    """The inference graph ``g`` (shapes ``inf``; ``pooling``: activations
    channels-last, so a pooling fuses its input's loop) as XLA fuses it, with the cheap work it
    duplicates spelled out: a cheap node (BatchNorm, activation, elementwise)
    that reads at most one full-size input (``_unary``) is computed again
    inside the loop of each elementwise or injective consumer (or, with
    channels-last activations, a pooling) even where another consumer (a
    convolution) has it stored, and so is the chain behind it down to the
    first value that is stored for another reason. A ResNet-v1 unit's
    output (the ReLU of the shortcut sum) is read by the next unit's first
    convolution and by its shortcut sum: XLA stores it for the convolution
    and recomputes it -- from the two convolutions behind it, and so on back
    to the stage's first unit -- in the next sum's loop, so those
    convolutions' outputs live until the stage's last unit (measured:
    ResNet-v1-50 at batch 8, stage 1's conv3 and conv1sc outputs live in
    unit 3's sum). ``g`` itself where nothing is duplicated."""
    from ..graph import unique_name
    readers: dict = {}
    for n in g.nodes:
        for e in n.inputs:
            readers[(id(e.node), e.index)] = readers.get((id(e.node), e.index), 0) + 1
    outs = {(id(e.node), e.index) for e in g.outputs}
    taken = {n.name for n in g.nodes}

    def inside(e, mapped):  # e's value computed inside a consumer's loop
        q = e.node
        ins = [inside(x, mapped) if (cheap(x.node) and (id(x.node), x.index) not in outs
                                     and (readers[(id(x.node), x.index)] == 1
                                          or _unary(x.node, inf, g)))
               else mapped(x) for x in q.inputs]
        c = q.with_inputs(ins)
        c.name = unique_name(q.name + "_dup", taken)
        return Entry(c, e.index)

    def rebuild(n, mapped):
        fusible = _light(n, pooling) or cheap(n)
        return _rebuilt(n, [inside(e, mapped) if (fusible and cheap(e.node) and (id(e.node), e.index)
                                                  not in outs and readers[(id(e.node), e.index)] > 1
                                                  and _unary(e.node, inf, g))
                            else mapped(e) for e in n.inputs])
    return _remapped(g, rebuild)


def _rebuilt(n, ins):
    """``n`` reading ``ins``: ``n`` itself where those are its inputs."""
    return n if all(a == b for a, b in zip(ins, n.inputs)) else n.with_inputs(ins)


def _remapped(g, rebuild, dropped=None):
    """``g`` with each op node replaced by ``rebuild(node, mapped)`` (``mapped``
    gives an entry of ``g`` as the new graph has it; the node itself where
    nothing changes, never a node of ``g`` changed in place); the nodes in
    ``dropped`` (node id -> the entry that stands for its output) are left
    out, their readers reading that entry. ``g`` itself where nothing
    changed."""
    from ..graph import Graph
    dropped = dropped or {}
    new: dict = {}

    def mapped(e):
        if id(e.node) in dropped:
            return dropped[id(e.node)]
        m = new.get(id(e.node))
        return e if m is None else Entry(m, e.index)

    for n in g.nodes:
        if n.op is None or id(n) in dropped:
            continue
        c = rebuild(n, mapped)
        if c is not n:
            new[id(n)] = c
    if not new and not dropped:
        return g
    return Graph([mapped(e) for e in g.outputs])


def _backward_light(node) -> bool:
    """In training: an elementwise or injective op, or a max pooling's
    backward (it compares its input elementwise with the pooled output)."""
    return node.op is not None and (node.op.category in ("elementwise", "injective")
                                    or node.op.name == "_backward_Pooling")


def _xla_fusion(plan, light=None):
    """The plan's fusion with each cheap group (BatchNorm, activations,
    elementwise ops) read only by one group of elementwise or injective ops
    or a pooling (a ReLU, a Concat, a max-pool) merged into that group: in inference XLA computes
    such a group inside its consumer's loop and never stores its output,
    where the plan's fusion keeps a heavy op (BatchNorm) in a group of its
    own."""
    from ..passes.fuse import Fusion
    g, fusion = plan.graph, plan.fusion
    # measured: with channels-last activations XLA fuses BatchNorm and ReLU
    # into the max-pool's window loop; in NCHW it stores their output
    pooling = "channels_last" in _measures(plan)
    light = light or (lambda x: _light(x, pooling))
    nid = {id(n): i for i, n in enumerate(g.nodes)}
    readers = {}
    for i, n in enumerate(g.nodes):
        for e in n.inputs:
            readers.setdefault((id(e.node), e.index), set()).add(fusion.root[i])
    outs = {(id(e.node), e.index) for e in g.outputs}
    root = list(fusion.root)
    groups = {grp[-1]: list(grp) for grp in fusion.groups}
    for i, n in enumerate(g.nodes):  # topological: a merged group may merge on
        if n.op is None or fusion.root[i] != i:
            continue
        merged = list(groups.get(i, [i]))
        if not all(light(g.nodes[m]) for m in merged):
            continue
        for e in n.inputs if len(merged) == 1 else \
                [e for m in merged for e in g.nodes[m].inputs]:
            p = nid[id(e.node)]
            if e.node.op is None or root[p] != p or p in merged:
                continue
            members = groups.get(p, [p])
            if ((id(e.node), e.index) in outs or readers.get((id(e.node), e.index)) != {i}
                    or not all(cheap(g.nodes[m]) for m in members)):
                continue
            groups.pop(p, None)
            merged += members
        merged = sorted(set(merged))
        for m in merged:
            root[m] = i
        if len(merged) > 1:
            groups[i] = merged
    return Fusion(g, tuple(root), tuple(tuple(v) for v in groups.values()))


def _peak(plan, fusion, external) -> int:
    """The arena of ``plan``'s graph under ``fusion``, or the bytes live at a
    step plus its workspace (``_node_workspace``: backward nodes only) where
    that is more."""
    from ..passes.schedule import schedule as schedule_pass
    from . import arena as arena_mod
    from . import planner
    from .liveness import analyze
    g, inf = plan.graph, plan.inferred
    steps = schedule_pass(g, fusion, plan.options.get("schedule", "dfs"),
                          nbytes=lambda eid: entry_nbytes(inf, eid))
    live = analyze(g, inf, fusion, steps, external)
    lb, _, _ = planner.lower_bound(live)
    both = planner.pool_plan(live, "both", inplace=True, match_range=16, parallel_safe=True)
    total = arena_mod.arena_plan(live, lb, fallback=both).total
    ws = [sum(_node_workspace(g.nodes[nid], inf) for nid in step) for step in steps]
    return max([total] + [b + w for b, w in zip(live.live_bytes(), ws) if w])


def _node_workspace(n, inf) -> int:
    """Bytes XLA holds while ``n`` runs beyond its inputs and outputs (the
    fused training step):

    - a convolution's backward: its weight flipped and transposed for the
      data gradient (measured: ResNet-18 at batch 8, whose busiest step is
      in stage 4's backward, holds [3, 3, 512, 512] copies);
    - a stride-1 max pooling's backward (the 3x3 pools of Inception blocks)
      materialises one padded partial gradient per window offset
      (``ops/nn.py``'s phase sum; measured: GoogLeNet's in4e pool, nine of
      [8, 16, 16, 528]);
    - a strided one, its input gradient padded (ResNet-18 at batch 32:
      [32, 64, 114, 114] beside the stem's activations)."""
    if n.op is not None and n.op.name == "_backward_Convolution" and len(n.inputs) > 2:
        w = n.inputs[2]  # (output gradient, data, weight)
        return math.prod(inf.shape(w)) * _itemsize(inf.dtype(w))
    held, padded = _pool_buffers(n, inf)
    return held if not padded else padded


def _pool_buffers(n, inf) -> tuple:
    """(held, padded): the buffers of a max pooling's backward beyond its
    inputs. Stride 1: ``held``, one padded partial gradient per window
    offset, ``padded`` 0. Strided: ``held``, the gradient of the padded
    input as the phase stack ``ops/pool.py`` builds (each axis rounded up
    to a multiple of the stride), and ``padded``, the padded input (measured
    in the staged step's programs: GoogLeNet's pooling1, [2, 192, 57, 57]
    and [2, 192, 29, 2, 58]). (0, 0) for other nodes."""
    from ..ops.conv import _nchw_shape, is_channels_last
    from ..ops.nn import _pool_geometry
    if (n.op is None or n.op.name != "_backward_Pooling"
            or n.params.pool_type != "max" or n.params.global_pool):
        return 0, 0
    x = max((inf.shape(e) for e in n.inputs), key=math.prod)  # the pooled input
    if is_channels_last(n.params):
        x = _nchw_shape(x)
    kernel, stride, pad, _, extra = _pool_geometry(n.params, x)
    item = _itemsize(inf.dtype(n.inputs[0]))
    sides = [a + 2 * q + e for a, q, e in zip(x[2:], pad, extra)]
    padded = math.prod(x[:2]) * math.prod(sides) * item
    if all(v == 1 for v in stride):
        return math.prod(kernel) * padded, 0
    stacked = math.prod(x[:2]) * math.prod(-(-a // s) * s for a, s in zip(sides, stride)) * item
    return stacked, padded


def _itemsize(dtype) -> int:
    import numpy as np
    return np.dtype(dtype).itemsize


# ops XLA lowers to no work and no buffer: the value is the input's
NO_OPS = ("identity", "BlockGrad")


def without_copies(g):
    """``g`` with each ``NO_OPS`` node that is not an output removed, its
    readers reading its input (MXNet's ResNets start with ``identity`` on
    the data: a plan stores its output, the size of the data, for the
    backward of the BatchNorm after it; XLA reads the argument). ``g``
    itself where there is none."""
    outs = {(id(e.node), e.index) for e in g.outputs}
    to: dict = {}
    for n in g.nodes:
        if (n.op is not None and n.op.name in NO_OPS and len(n.inputs) == 1
                and (id(n), 0) not in outs):
            e = n.inputs[0]
            to[id(n)] = to.get(id(e.node), e)
    return _remapped(g, lambda n, mapped: _rebuilt(n, [mapped(e) for e in n.inputs]), to)


def _inference_as_xla_runs(g, nchw):
    """``g`` (an inference graph) as XLA's CPU program holds it: a
    BatchNorm is an elementwise loop, whose output XLA writes over its
    input where that dies (``_INPLACE_BATCHNORM``; measured in ResNet-18's
    buffer assignment: each BatchNorm+ReLU loop shares its convolution's
    output buffer), where the plan, as MXNet's, declares no such pair; and
    a convolution reads its weight through a copy in the layout XLA's CPU
    convolutions take (HWIO), alive while it runs (ResNet-18 at batch 8:
    its busiest step holds stage 4's [3, 3, 512, 512] copies)."""
    from ..graph import Node, unique_name
    from ..ops.registry import get_op
    taken = {n.name for n in g.nodes}
    copy = get_op("identity")
    readers: dict = {}
    for n in g.nodes:
        for e in n.inputs:
            readers.setdefault(id(e.node), []).append(n)

    def into_pooling(n):  # its loop ends in a pooling's layout change
        return any(r.op.name == "Pooling" or (cheap(r) and into_pooling(r))
                   for r in readers.get(id(n), []))

    def rebuild(n, mapped):
        ins = [mapped(e) for e in n.inputs]
        if n.op.name == "Convolution" and len(ins) > 1:
            w = Node(copy, unique_name(n.inputs[1].node.name + "_hwio", taken), {}, [ins[1]])
            ins[1] = Entry(w, 0)
        if n.op.name == "BatchNorm" and not (nchw and into_pooling(n)):
            c = n.with_inputs(ins)  # a copy: the plan's own node keeps its op
            c.op = _inplace_batchnorm()
            return c
        return _rebuilt(n, ins)
    return _remapped(g, rebuild)


@functools.cache
def _inplace_batchnorm():
    """BatchNorm's op with its output allowed over its data input: the
    prediction's view of XLA's inference loop, never registered."""
    from ..ops.registry import get_op
    return dataclasses.replace(get_op("BatchNorm"), inplace=[(0, 0)])


def _inferred(plan, graph):
    """Shapes and dtypes of ``graph``, a rewritten form of ``plan.graph``
    with the same variables."""
    from ..passes.infer import infer_shapes
    g, inf = plan.graph, plan.inferred
    shapes = {n.name: inf.shapes[g.entry_id_of_node(n)] for n in g.variables}
    dtypes = {n.name: inf.dtypes[g.entry_id_of_node(n)] for n in g.variables}
    return infer_shapes(graph, shapes, dtypes)


def _replanned(plan, graph, **kw):
    """The plan of ``graph``, a rewritten form of ``plan.graph`` with the
    same variables (not verified: the prediction reads its figures only)."""
    return plan.replan(graph, _inferred(plan, graph), train=plan.train,
                       num_forward_outputs=plan.num_forward_outputs,
                       fuse=plan.options.get("fuse", True),
                       schedule=plan.options.get("schedule", "dfs"), verify=False,
                       name=plan.net, **kw)


def predicted_temp(plan) -> tuple:
    """(bytes, recomputed node names): XLA's temp as the rule predicts it."""
    from ..passes.recompute import forward_nodes, rewrite
    if not plan.train and not plan.options.get("fuse", True):
        return plan.internal["arena"], []
    g = without_copies(plan.graph)
    inf = plan.inferred if g is plan.graph else _inferred(plan, g)
    if not plan.train:
        pooling = "channels_last" in _measures(plan)
        p2 = _replanned(plan, _inference_as_xla_runs(duplicated(g, inf, pooling), not pooling))
        return _peak(p2, _xla_fusion(p2), ()), []
    fwd = forward_nodes(g, plan.num_forward_outputs)
    readers: dict = {}
    for n in fwd:
        for e in n.inputs:
            readers[id(e.node)] = readers.get(id(e.node), 0) + 1
    # XLA recomputes a cheap node in the backward where it would fuse it
    # into its consumers: one with a single full-size input always; one
    # with more (a residual sum) only where it has a single reader -- a
    # ResNet-v2 unit's sum, read by the next unit's BatchNorm and sum, is
    # kept (and its two addends are not)
    names = [n.name for n in fwd if cheap(n) and (readers.get(id(n), 0) <= 1
                                                    or _unary(n, inf, g))]
    g2 = rewrite(g, plan.num_forward_outputs, names)
    grads = [g2.entry_id(e) for e in g2.outputs[plan.num_forward_outputs:]]
    # XLA's memory-optimized scheduler runs each parameter's update as soon
    # as its gradient is made (one gradient alive at a time); XLA's default
    # scheduler updates at the end, every gradient alive until then
    early = "scheduler" in _measures(plan)
    p2 = _replanned(plan, g2, external=grads if early else ())
    temp = _peak(p2, _xla_fusion(p2, _backward_light), grads if early else ())
    if early:
        temp += max((entry_nbytes(p2.inferred, e) for e in grads), default=0)
    return temp, names


def predict(plan, optimizer=None) -> Prediction:
    """The predicted footprint of the program a Module runs for ``plan``'s
    net (training: the fit step with ``optimizer``, default SGD with
    momentum 0.9; inference: predict's program)."""
    temp, names = predicted_temp(plan)
    outputs = _forward_outputs(plan)
    parts = {"arguments": plan.buckets["arguments"], "aux": plan.buckets["aux"],
             "optimizer": _optimizer_state(plan, optimizer), "outputs": outputs,
             # the forward outputs are planned tensors: counted once, as outputs
             "temp": max(0, temp - outputs)}
    return Prediction(total=int(sum(parts.values())), parts=parts, recomputed=names,
                      library=library_bytes(plan))


def predict_program(plan, optimizer=None) -> Prediction:
    """The prediction for the program a Module runs for ``plan``: ``predict``
    (the fused step, inference); for a plan that recomputes, as a Module
    under its budget picks (``train.staged.SmallerStep``), the smaller of
    that and ``predict_staged``."""
    fused = predict(plan, optimizer)
    if not plan.train or not getattr(plan, "recompute", None):
        return fused
    staged = predict_staged(plan, optimizer)
    return staged if staged.total < fused.total else fused


def predict_staged(plan, optimizer=None, segments=None) -> Prediction:
    """The predicted footprint of the staged step (``xla.training_step(plan,
    segments=...)``, train/staged.py; True or None: the default count) for
    a training plan: the resident arguments, aux and optimizer state plus
    the largest of ``staged_programs``' rows."""
    if not plan.train:
        from ..errors import PlanError
        raise PlanError("predict_staged needs a training plan (plan(..., train=True))")
    peak = max(r["held"] + r["output"] - r["alias"] + r["temp"]
               for r in staged_programs(plan, segments))
    outputs = _forward_outputs(plan)
    parts = {"arguments": plan.buckets["arguments"], "aux": plan.buckets["aux"],
             "optimizer": _optimizer_state(plan, optimizer), "outputs": outputs,
             "temp": max(0, peak - outputs)}
    return Prediction(total=int(sum(parts.values())), parts=parts, program="staged",
                      library=library_bytes(plan))


def staged_programs(plan, segments=None) -> list:
    """Per program of the staged step, as ``SequenceMemory.programs`` has
    them: ``held``, the entries earlier programs handed on that this or a
    later one reads, and the forward outputs and gradients made so far (the
    cut makes these exact); ``output``, what it hands on and outputs;
    ``alias``, the part of that written into handed-on entries it reads
    last (donated to it; ``_aliased``); ``temp``, its working set
    (``_working_set``) in the program as it is lowered: with channels-last
    measures, the stage graph ``passes.layout`` rewrites (``_as_lowered``:
    a program's inputs and outputs stay channel-first, so it transposes
    what it is handed into a convolution and what a convolution hands on).
    The update, last, holds every gradient."""
    from .. import measures as measures_mod
    from ..graph import Entry, Graph, entry_key
    from ..passes.gradient import HEAD_GRAD_SUFFIX, TrainingSplit, default_wrt
    from ..passes.infer import infer_shapes
    from ..passes.stages import cut, last_reads
    g, inf = plan.graph, plan.inferred
    # the split the Module's programs make (xla.training_step's): the plan's
    # forward graph, its parameters, its recompute set
    fwd = Graph(g.outputs[:plan.num_forward_outputs])
    wrt = [n for n in default_wrt(fwd) if not n.endswith(HEAD_GRAD_SUFFIX)]
    split = TrainingSplit(fwd, wrt, [r["name"] if isinstance(r, dict) else r
                                     for r in getattr(plan, "recompute", None) or ()])
    shapes = {n.name: inf.shapes[g.entry_id_of_node(n)] for n in g.variables}
    dtypes = {n.name: inf.dtypes[g.entry_id_of_node(n)] for n in g.variables}
    full = split.full
    stages = cut(split, {n.name: shapes[n.name] for n in fwd.variables if n.name not in wrt},
                 None if segments is True else segments)
    names = {n.name for n in full.variables}
    finf = infer_shapes(full, {k: v for k, v in shapes.items() if k in names}, dtypes,
                        partial=True)

    def size(e):
        return entry_nbytes(finf, full.entry_id(e))
    entries = {entry_key(Entry(n, i)): Entry(n, i) for n in full.nodes if n.op is not None
               for i in range(n.num_outputs)}
    # the plan's fused chains: XLA computes them in one loop, storing the end
    fused = {g.nodes[m].name for grp in plan.fusion.groups for m in grp[:-1]}
    # the measures its programs are lowered with (train.step's)
    ms = measures_mod.resolve(None, fwd, True, recompute=bool(getattr(plan, "recompute", None)))
    channels_last = "channels_last" in ms
    last = last_reads(stages)
    handed: dict = {}  # entry key -> bytes, while a later program reads it
    made = 0           # forward outputs and gradients so far
    rows = []
    for i, st in enumerate(stages):
        made_here = [full.outputs[j] for j in st.outputs] + [entries[k] for k in st.returns]
        outs = sum(size(full.outputs[j]) for j in st.outputs)
        rows.append({"program": f"stage {st.index}", "held": sum(handed.values()) + made,
                     "output": sum(size(e) for e in made_here),
                     "alias": _aliased(made_here, [entries[k] for k in st.reads
                                                   if last.get(k) == i], finf, full),
                     "temp": _working_set(*_as_lowered(st, full, finf, channels_last),
                                          fused=fused, wgrad_first="wgrad_first" in ms)})
        for k in st.returns:
            handed[k] = size(entries[k])
        for k in [k for k in handed if last.get(k, -1) <= i]:
            del handed[k]
        made += outs
    rows.append({"program": "update", "held": made, "output": 0, "alias": 0, "temp": 0})
    return rows


def _aliased(made: list, dying: list, inf, graph) -> int:
    """Bytes of the entries ``made`` that XLA can write into the donated
    ``dying`` ones: one each, of the same shape and dtype (a gradient into
    the saved tensor of its shape)."""
    free: dict = {}
    for e in dying:
        eid = graph.entry_id(e)
        free.setdefault((inf.shapes[eid], inf.dtypes[eid]), []).append(e)
    total = 0
    for e in made:
        eid = graph.entry_id(e)
        if free.get((inf.shapes[eid], inf.dtypes[eid])):
            free[(inf.shapes[eid], inf.dtypes[eid])].pop()
            total += entry_nbytes(inf, eid)
    return total


# XLA's CPU library calls (YNNPACK, Eigen): they read materialised inputs
LIBRARY_OPS = ("Convolution", "_backward_Convolution", "Deconvolution",
               "_backward_Deconvolution", "FullyConnected", "_backward_FullyConnected")
# computed in their readers' loops: gradient sums, a Concat's backward (slices)
LOOP_OPS = ("ElementWiseSum", "add_n", "_backward_Concat")
# the gradient sums among them: stored where their value reaches more than one
# stored reader (a Concat's backward slices for several convolutions)
SUM_OPS = ("ElementWiseSum", "add_n")


class _Shapes:
    """Shapes and dtypes by entry, as ``Inferred`` answers them."""

    def __init__(self):
        self.table: dict = {}

    def shape(self, e):
        return self.table[(id(e.node), e.index)][0]

    def dtype(self, e):
        return self.table[(id(e.node), e.index)][1]

    def nbytes(self, e) -> int:
        shape, dtype = self.table[(id(e.node), e.index)]
        return math.prod(shape) * _itemsize(dtype)


def _as_lowered(stage, full, finf, channels_last: bool) -> tuple:
    """``(stage, size, inf, layout)``: a stage as its program is lowered.
    With ``channels_last``, the stage graph ``passes.layout`` rewrites (as
    ``measures.lower_measured`` does: the nodes of the entries it is fed
    kept as they are), its nodes those the program computes; ``layout``:
    the names of the transposes the rewrite inserts. Shapes come from
    ``finf`` (the Inferred of ``full``, whose nodes the stage's are) and,
    for the program's own rewritten nodes, one pass of their ops' rules:
    inferring each stage graph whole (the forward behind it included) made
    this 10x slower on ResNet-152."""
    import types

    from ..graph import Entry, entry_key
    from ..ops.registry import same_type
    from ..passes.infer import Inferred
    from ..passes.layout import to_channels_last
    if not channels_last:
        return stage, (lambda e: entry_nbytes(finf, full.entry_id(e))), finf, frozenset()
    g = stage.graph
    ids = [full.entry_id(Entry(n, i)) for n in g.nodes for i in range(n.num_outputs)]
    inf = Inferred(g, tuple(finf.shapes[i] for i in ids), tuple(finf.dtypes[i] for i in ids))
    reads = set(stage.reads)
    fed = {n.name for n in g.nodes if n.op is not None and
           any(entry_key(Entry(n, i)) in reads for i in range(n.num_outputs))}
    g2 = to_channels_last(g, inferred=inf, keep=fed)
    own, stack = set(), [e.node for e in g2.outputs]
    while stack:  # what the program computes: back from its outputs to what it is fed
        n = stack.pop()
        if id(n) in own or n.op is None or n.name in fed:
            continue
        own.add(id(n))
        stack.extend(e.node for e in n.inputs)
    nodes = [n for n in g2.nodes if id(n) in own]
    by_name = {n.name: n for n in g.nodes}
    inf2 = _Shapes()
    for n in g2.nodes:
        if id(n) not in own:  # fed or a variable: channel-first, as in the stage graph
            if n.name in by_name:
                m = by_name[n.name]
                for i in range(n.num_outputs):
                    inf2.table[(id(n), i)] = (inf.shape(Entry(m, i)), inf.dtype(Entry(m, i)))
            continue
        ins = [inf2.shape(e) for e in n.inputs]
        _, outs = n.op.infer_shape(n.params, list(ins))
        _, types_ = (n.op.infer_type or same_type)(n.params, [inf2.dtype(e) for e in n.inputs],
                                                   n.num_outputs)
        for i, (shape, dtype) in enumerate(zip(outs, types_)):
            inf2.table[(id(n), i)] = (tuple(shape), dtype or "float32")
    layout = frozenset(n.name for n in nodes if n.name not in by_name)
    return (types.SimpleNamespace(nodes=nodes, graph=g2, index=stage.index), inf2.nbytes,
            inf2, layout)


def _working_set(stage, size, inf, layout=frozenset(), fused=frozenset(),
                 wgrad_first=False) -> int:
    """The most bytes a stage's program holds at once in temp: the tensors
    it makes and reads itself (not handed on, not outputs), each from its
    node until its last reader reads it, in the stage's topological order,
    plus what XLA holds while a node runs. The rule, read off XLA's buffer
    assignment of each program (the staged steps of GoogLeNet, VGG-16,
    Inception-BN, ResNet-50 and a CIFAR ResNet-20 under budgets; footprints
    within 2% at batch 2, but GoogLeNet's at 0.75 of its bytes, +4.5%):

    - a tensor that dies before an output of the program is written may lie
      in that output's buffer (XLA shares an output's allocation with values
      that end before it is defined): first fit, largest first;
    - a layout transpose (``layout``) is stored only for the library calls
      that read it (``LIBRARY_OPS``: convolutions), from the first to the
      last; other readers transpose in their own loop;
    - gradient sums and a Concat's backward (``LOOP_OPS``), and cheap ops
      (``cheap``) read by no library call and no heavy forward op, are
      computed in their readers' loops: never stored, their inputs held
      until those readers run (XLA fuses them: a stride-1 max pool's nine
      partial gradients live until the convolutions' backward that read
      the sum they go into). A convolution's backward reading one as its
      input does not count: it reads it through its batch-minor copy. But
      a gradient sum whose value reaches more than one stored reader
      through the loops after it (a Concat's backward slicing it for an
      inception block's four branches) is stored, and its partials die
      there (GoogLeNet's staged step at 0.75: +15.5% without this);
    - the outputs of nodes named in ``fused`` (the plan's fused chains)
      are never stored, unless a layout transpose reads them;
    - a max pooling's backward holds its gradient as ``_pool_buffers`` says
      (nine padded partials for a 3x3 stride-1 window, a phase stack for a
      strided one) until its readers run, and while a strided one runs,
      its padded input;
    - a convolution's backward holds batch-minor copies of its input and of
      its incoming gradient while it runs (the weight gradient's operands
      on XLA's CPU, [H, W, N, C] and [C, H, W, N]) -- with ``wgrad_first``
      (the measure) only before its data gradient is made, so the copies
      count as far as they exceed the data gradient.
    """
    from ..graph import Entry
    nodes = stage.nodes
    own = {id(n): i for i, n in enumerate(nodes)}
    keep = {(id(e.node), e.index) for e in stage.graph.outputs}
    fused = set(fused) - {e.node.name for n in nodes if n.name in layout for e in n.inputs}
    readers: dict = {}
    for i, n in enumerate(nodes):
        for e in n.inputs:
            if id(e.node) in own:
                readers.setdefault((id(e.node), e.index), []).append(i)

    def library(r):
        return nodes[r].op.name in LIBRARY_OPS

    def materialises(r, k):
        # a library call reads entry k materialised, but a convolution's
        # backward reads its input only through the weight gradient's
        # batch-minor copy (its workspace), which XLA computes cheap ops into
        n = nodes[r]
        if n.op.name == "_backward_Convolution" and k != (id(n.inputs[0].node),
                                                          n.inputs[0].index):
            return False
        return library(r)

    def heavy_forward(r):
        op = nodes[r].op
        return op.forward is None and op.category not in ("elementwise", "injective")
    # at: where a node's inputs are really read (later than the node where
    # it is computed in its readers' loops); loop: the nodes never stored;
    # span: a stored transpose's first and last library reader
    at: dict = {}
    loop: set = set()
    span: dict = {}
    reach: dict = {}  # a loop node's stored readers, through other loop nodes
    for i in range(len(nodes) - 1, -1, -1):
        n = nodes[i]
        ks = [(id(n), j) for j in range(n.num_outputs)]
        rks = [(r, k) for k in ks for r in readers.get(k, ())]
        rs = [r for r, _ in rks]
        if not rs or any(k in keep for k in ks):
            continue
        reached = set().union(*(reach[r] if r in loop else {r} for r in rs))
        later = [at.get(r, r) for r in rs if not (n.name in layout and library(r))]
        if n.name in layout:
            libs = [r for r in rs if library(r)]
            if libs:
                span[i] = (min(libs), max(libs))
                at[i] = max(later + [min(libs)])
            else:
                loop.add(i)
                at[i] = max(later)
        elif (n.op.name in LOOP_OPS or (cheap(n) and not any(
                materialises(r, k) or heavy_forward(r) for r, k in rks))) \
                and not (n.op.name in SUM_OPS and len(reached) > 1):
            loop.add(i)
            at[i] = max(later)
        if i in loop:
            reach[i] = reached
    values, outputs, seen = [], [], set()  # (start, end, bytes); (defined at, bytes)
    workspace = [0] * len(nodes)
    for i, n in enumerate(nodes):
        held, padded = _pool_buffers(n, inf)
        workspace[i] += padded
        if n.op is not None and n.op.name == "_backward_Convolution":
            copies = size(n.inputs[0]) + size(n.inputs[1])
            if wgrad_first and (id(n), 0) in readers and (id(n), 0) not in keep:
                copies = max(0, copies - size(Entry(n, 0)))  # gone before dx is made
            workspace[i] += copies
        for j in range(n.num_outputs):
            k = (id(n), j)
            if k in keep:
                if k not in seen:
                    seen.add(k)
                    outputs.append((i, size(Entry(n, j))))
                    workspace[i] += held
                continue
            if i in loop or (n.name in fused and not held):
                continue
            if i in span:
                values.append((*span[i], size(Entry(n, j))))
                continue
            end = max((at.get(r, r) for r in readers.get(k, ())), default=i)
            values.append((i, end, held or size(Entry(n, j))))
    # first fit into the buffers of outputs not yet written
    placed: list = [[] for _ in outputs]
    temp = []
    for v in sorted(values, key=lambda v: (-v[2], v[0])):
        for o, (defined, cap) in enumerate(outputs):
            if v[1] < defined and v[2] <= cap and all(
                    v[2] + sum(w[2] for w in placed[o] if w[0] <= t <= w[1]) <= cap
                    for t in range(v[0], v[1] + 1)):
                placed[o].append(v)
                break
        else:
            temp.append(v)
    return max((sum(b for s, e, b in temp if s <= i <= e) + workspace[i]
                for i in range(len(nodes))), default=0)
