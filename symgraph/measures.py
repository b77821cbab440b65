"""Memory measures: how symgraph lowers a graph so that XLA keeps the plan.

Every program symgraph compiles (the Executor's forward and backward, the
Module's fused training step on one or several devices, inference) is
lowered with a *measure set*. By default the set is chosen by
``default_measures`` from the backend and the graph -- a rule, so binding
compiles nothing extra -- and a user can name one (``memory_measures=`` on
``bind``/``simple_bind``/``Module``, ``--measures`` on the CLI) or turn
them off (``'none'``).

The measures (docs/memory.md, "Plan vs XLA", has the measured effect of each):

- ``scheduler``: XLA's memory-optimized CPU scheduler (a compiler option;
  CPU only, ignored elsewhere).
- ``anchor``: every backward node's inputs are tied to its incoming
  gradient, so XLA cannot start work on a saved activation (a layout copy)
  in the forward pass and keep the result alive until the backward;
  ``anchor_weights``: the same for the backward of Convolution,
  Deconvolution and FullyConnected only.
- ``channels_last``: the graph is lowered as ``passes.layout`` rewrites
  it: convolutions channels-last and the ops after them following, so
  XLA's CPU convolutions need no transposed copy of the activations
  (inputs and outputs stay NCHW; the transposes are graph nodes).
- ``single_op``: XLA's CPU backend hands YNNPACK one convolution or dot
  per call (a compiler option; ``channels_last`` implies it), so no
  library call runs a chain of them with buffers ``memory_analysis()``
  does not see.
- ``split_wgrad``: the weight gradient of each convolution is the sum over
  the batch's two halves, the second tied to the first, so one half's
  batch-minor copies are alive at a time. Training only.
- ``wgrad_first``: each convolution's backward computes the weight
  gradient before the data gradient and ties the data gradient's input to
  it, so the batch-minor copies die before the data gradient is allocated.
  Training only.
- ``keep_shared``: a value an elementwise op makes and two or more nodes
  read is computed once into a buffer of its own, every reader reading it
  (``lower.shared_entries``), instead of XLA fusing the op into each
  reader, where the op's own inputs stay alive until the last reader ran
  (a transformer's residual sum ``x + branch``, read by the next LayerNorm
  and the next sum, kept every earlier branch's output on a GPU; a
  post-activation residual unit's output kept its two convolution outputs
  on the CPU). Off the CPU through an optimization barrier; on the CPU,
  which drops those, as a conditional's branch, and only for values a
  convolution reads beside an elementwise op. The values pass bit for
  bit. Inference only in the rules (``GPU_INFER``,
  ``CPU_POST_ACTIVATION_INFER``).
- ``no_split_k``: XLA:GPU's gemms reduce their whole contraction in one
  pass (a compiler option; GPU only, ignored on the CPU): no split-K
  partial sums, which a gemm's default configuration -- what a deviceless
  compile gets, with no autotuning -- writes beside the plan's tensors
  (the held-out MLP-mixer's fc2: f32[4, 2048, 256], the size of its hidden
  layer). Inference only in the GPU rule.
"""
from __future__ import annotations

import jax

from .errors import SymgraphError
from .graph import Graph
from .ops.conv import CONVOLUTIONS

MEASURES = ("scheduler", "anchor", "anchor_weights", "channels_last", "single_op",
            "split_wgrad", "wgrad_first", "keep_shared", "no_split_k")
# split_wgrad's batch slices: halves (quarters did no better)
WGRAD_CHUNKS = 2
SCHEDULER_OPTIONS = {"xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED"}
# XLA's CPU backend hands convolutions and dots to YNNPACK one op at a time:
# with channels-last activations it would otherwise fuse whole convolution
# chains into one library call whose buffers memory_analysis() does not see
SINGLE_OP_FUSIONS = {"xla_cpu_experimental_ynn_fusion_type":
                     "LIBRARY_FUSION_TYPE_INDIVIDUAL_CONVOLUTION,LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}

# The CPU rule for graphs with 2-D convolutions. XLA:CPU's convolutions
# work channels-last, so plain and Inception-style nets lower channels-last
# (no transposed copies) with the anchor (no saved activation turned into a
# layout copy early); in inference, with the memory-optimized scheduler.
# Residual nets are the exception: channels-last slowed their steps, while
# the memory-optimized scheduler alone keeps their temp well under the plan
# (XLA recomputes BatchNorm and ReLU in the backward itself). Fitted on the
# zoo (benchmarks/results/module_step), judged on the held-out nets
# (benchmarks/results/heldout).
CPU_TRAIN = ("channels_last", "anchor")
CPU_INFER = ("channels_last", "scheduler")
CPU_RESIDUAL = ("scheduler",)
# Residual nets' inference asks YNNPACK for one convolution per call: left
# to itself it runs a stage's convolutions as one call, which holds every
# weight of the stage in its layout at once, outside XLA's figure. Not in
# training, where the single calls held more than the chains.
CPU_RESIDUAL_INFER = ("scheduler", "single_op")
# ... and keeps a post-activation unit's output, which a convolution and
# the next unit's sum read (``keep_shared``): XLA:CPU computed it again
# inside the sum from the unit's two convolution outputs and kept both
# alive. Fitted on the zoo's resnet-v1-50 (inference at batch 32: 441 ->
# 294 MiB, its plan); judged on the held-out ResNeXt (128 -> 96, its plan;
# benchmarks/results/heldout). A pre-activation ResNet has no such value
# (its set is unchanged). Not in training, where XLA's recomputing saved
# memory: the same values kept took ResNeXt's step from 121 to 188 MiB.
CPU_POST_ACTIVATION_INFER = CPU_RESIDUAL_INFER + ("keep_shared",)
# Deep residual nets train with the anchor under XLA's default scheduler:
# the memory-optimized scheduler hoists backward work that needs no
# gradient (a BatchNorm backward's normalised input, a recomputed ReLU) to
# the start of the backward for many units at once, which outgrows what it
# saves from between 16 and 33 shortcuts on (benchmarks/results/residual_measures).
CPU_DEEP_RESIDUAL_TRAIN = ("anchor",)
DEEP_RESIDUAL_ADDS = 24
# ops that add their inputs: where two activations meet, a residual shortcut
ADD_OPS = ("elemwise_add", "_Plus", "_plus", "_add", "ElementWiseSum", "add_n",
           "broadcast_add", "broadcast_plus")

# A program that recomputes ties each backward node to its incoming
# gradient too: without it XLA computes backward work from the saved and
# recomputed tensors early and keeps the results. Residual nets that
# recompute also go channels-last (benchmarks/results/recompute_program).
RECOMPUTE_ANCHOR = ("anchor",)
RECOMPUTE_RESIDUAL = ("channels_last", "scheduler", "anchor")
# Plain and Inception-style conv nets that recompute also take the weight
# gradient first: a recomputed convolution input is alive through its
# backward, and XLA held it beside the output gradient, the data gradient
# and the weight gradient's two batch-minor copies. Without recompute it
# held more on residual nets, so only here.
RECOMPUTE_CPU_TRAIN = CPU_TRAIN + ("wgrad_first",)
# On a GPU, training conv nets take the anchor (tied by an optimization
# barrier, weights untied): XLA:GPU fuses a ReLU's backward mask, which does
# not need the incoming gradient, into the convolution's backward and reads
# the raw convolution output there, so it keeps both that output and the
# ReLU's for every convolution feeding another (benchmarks/results/gpu_targets).
GPU_TRAIN = ("anchor",)
# GPU inference of a graph with shared elementwise values (``keep_shared``):
# the held-out transformer and MLP-mixer went 15.0 -> 13.5 and 22.0 ->
# 18.0 MiB (batch 32; 10.5 and 12.0 with the split-K gemms off, their
# plans), no zoo net changed. Not in training: there it held more on every
# net whose figure it changed (Inception-BN 1,876 -> 2,409 MiB at batch 64;
# benchmarks/results/gpu_targets/keep_shared.md).
GPU_INFER = ("keep_shared",)
# ... and every gemm unsplit (``no_split_k``): with both, the held-out ViT
# and MLP-mixer hold their plans in inference (10.5 and 12.0 MiB). Their
# speed on a device is not measured here (no GPU was at hand): split-K is
# what the autotuner may pick for a gemm of few output tiles and a long
# reduction. Not in training, where no figure asked for it.
GPU_GEMM_INFER = ("no_split_k",)
NO_SPLIT_K_OPTIONS = {"xla_gpu_experimental_force_split_k": 1}
GEMMS = ("FullyConnected", "batch_dot", "dot", "_linalg_gemm2")


def recompute_measures(measures: tuple, backend: str | None = None) -> tuple:
    """The rule's measure set for a training program that recomputes: on the
    CPU, ``RECOMPUTE_RESIDUAL`` for residual conv nets (deep ones too),
    ``RECOMPUTE_CPU_TRAIN`` for other conv nets, ``anchor`` added to any
    other set; unchanged elsewhere (not measured on a GPU)."""
    if (backend or jax.default_backend()) != "cpu":
        return tuple(measures)
    if tuple(measures) in (CPU_RESIDUAL, CPU_DEEP_RESIDUAL_TRAIN):
        return RECOMPUTE_RESIDUAL
    if tuple(measures) == CPU_TRAIN:
        return RECOMPUTE_CPU_TRAIN
    if "anchor" in measures or "anchor_weights" in measures:
        return tuple(measures)
    return tuple(measures) + RECOMPUTE_ANCHOR

# the sets best_step tries (benchmarks, tests): each won on some net
TRAIN_CANDIDATES = ((), ("scheduler",), ("anchor",), ("anchor_weights",),
                    ("anchor_weights", "scheduler"), ("channels_last", "anchor"),
                    ("channels_last", "anchor_weights"),
                    ("channels_last", "split_wgrad", "anchor"),
                    ("channels_last", "split_wgrad", "anchor_weights"),
                    ("channels_last", "split_wgrad", "scheduler"))
INFER_CANDIDATES = ((), ("scheduler",), ("scheduler", "single_op"), ("channels_last",),
                    ("channels_last", "scheduler"))


class MeasureError(SymgraphError):
    """An unknown or contradictory memory measure."""


def _has_conv2d(graph: Graph) -> bool:
    return any(n.op is not None and n.op.name in CONVOLUTIONS and
               len(n.params.kernel) == 2 for n in graph.nodes)


def shortcuts(graph: Graph) -> int:
    """How many residual shortcuts a forward graph has: adds whose inputs
    are both activations (no parameter such as a bias or LayerNorm's beta)
    that meet a convolution away -- a Convolution or Deconvolution feeds
    one of them but not the other. What the rule asks is whether XLA's CPU
    convolutions run between a tensor and the sum that reads it again
    (a residual unit), not whether the net adds: a LayerNorm's or a
    token-mixing MLP's sums, a bias add and an LSTM's gate sums are not
    shortcuts."""
    ancestors: list = []  # per node, a bit set of the nodes it depends on
    conv_bits = 0
    count = 0
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    for i, n in enumerate(graph.nodes):
        bits = 1 << i
        for e in n.inputs:
            bits |= ancestors[index[id(e.node)]]
        ancestors.append(bits)
        if n.op is None:
            continue
        if n.op.name in CONVOLUTIONS:
            conv_bits |= 1 << i
        elif n.op.name in ADD_OPS and len(n.inputs) >= 2 and \
                all(e.node.op is not None for e in n.inputs):
            sides = [ancestors[index[id(e.node)]] for e in n.inputs]
            common = sides[0]
            for b in sides[1:]:
                common &= b
            if any((b & ~common) & conv_bits for b in sides):
                count += 1
    return count


def default_measures(graph: Graph, train: bool, backend: str | None = None) -> tuple:
    """The measure set symgraph lowers ``graph`` (a forward graph) with when
    none is named.

    On the CPU, graphs with 2-D convolutions get ``CPU_TRAIN`` /
    ``CPU_INFER`` (the layout and anchor measures are about the copies XLA's
    CPU convolutions make), or ``CPU_RESIDUAL`` / ``CPU_RESIDUAL_INFER``
    where it has residual shortcuts (``shortcuts``: channels-last slows
    those down) -- ``CPU_DEEP_RESIDUAL_TRAIN`` in training with more than
    ``DEEP_RESIDUAL_ADDS`` of them, ``CPU_POST_ACTIVATION_INFER`` in
    inference where a convolution and an elementwise op read one value
    (``lower.shared_entries(graph, 'branch')``); other graphs (MLPs,
    sequence models) need none.
    On a GPU (``GPU_TRAIN``): the anchor in training conv nets, tied by an
    optimization barrier; in inference ``GPU_INFER`` (``keep_shared``)
    where an elementwise value has two or more readers and
    ``GPU_GEMM_INFER`` (``no_split_k``) where it has gemms, nothing else.
    XLA's GPU backend chooses convolution layouts itself and has no
    scheduler option of the CPU's kind (docs/memory.md, "Which device")."""
    backend = backend or jax.default_backend()
    if backend != "cpu":
        if train:
            return GPU_TRAIN if _has_conv2d(graph) else ()
        from .lower import shared_entries
        gemms = any(n.op is not None and n.op.name in GEMMS for n in graph.nodes)
        return (GPU_INFER if shared_entries(graph) else ()) + \
            (GPU_GEMM_INFER if gemms else ())
    if not _has_conv2d(graph):
        return ()
    adds = shortcuts(graph)
    if adds > DEEP_RESIDUAL_ADDS and train:
        return CPU_DEEP_RESIDUAL_TRAIN
    if adds and train:
        return CPU_RESIDUAL
    if adds:
        from .lower import shared_entries
        return CPU_POST_ACTIVATION_INFER if shared_entries(graph, "branch") else \
            CPU_RESIDUAL_INFER
    return CPU_TRAIN if train else CPU_INFER


def parse(spec) -> tuple | None:
    """A measure spec as given by a user: None or ``'auto'`` (the rule),
    ``'none'``/``()`` (nothing), a ``'a+b'`` / ``'a,b'`` string or a
    sequence of names. Returns the validated tuple, or None for the rule."""
    if spec is None or spec == "auto":
        return None
    if isinstance(spec, str):
        names = [] if spec.strip() == "none" else \
            [s.strip() for s in spec.replace(",", "+").split("+") if s.strip()]
    else:
        try:
            names = list(spec)
        except TypeError:
            raise MeasureError(f"memory_measures={spec!r}; give 'auto', 'none' or measure "
                               f"names from {', '.join(MEASURES)}") from None
    bad = [m for m in names if m not in MEASURES]
    if bad:
        raise MeasureError(f"unknown memory measure(s) {', '.join(map(repr, bad))}; choose "
                           f"from {', '.join(MEASURES)} (or 'auto', 'none')")
    if {"anchor", "anchor_weights"} <= set(names):
        raise MeasureError("choose one of the measures anchor and anchor_weights")
    return tuple(dict.fromkeys(names))


def resolve(spec, graph: Graph, train: bool, recompute: bool = False,
            backend: str | None = None) -> tuple:
    """The measure set a program of ``graph`` is lowered with: the user's
    ``spec`` (see ``parse``) or, for None/'auto', ``default_measures``,
    changed by ``recompute_measures`` for a training program that
    recomputes (``recompute``).
    ``split_wgrad`` and ``wgrad_first`` are dropped in inference (there is
    no weight gradient)."""
    ms = parse(spec)
    if ms is None:
        ms = default_measures(graph, train, backend)
        if train and recompute:
            ms = recompute_measures(ms, backend)
    if not train:
        ms = tuple(m for m in ms if m not in ("split_wgrad", "wgrad_first"))
    return ms


def label(measures) -> str:
    """How reports name a measure set: ``channels_last+anchor``, or ``none``."""
    return "+".join(measures) or "none"


def lower_options(measures, backend: str | None = None) -> dict:
    """``lower()``'s keyword arguments for a measure set on ``backend``: the
    anchor ties by a select on a flag read from the gradient on the CPU
    (``lower.tie_to_first``; XLA:CPU drops optimization barriers before
    scheduling), by an optimization barrier elsewhere
    (``lower.barrier_to_first``); ``keep_shared`` keeps values by a
    conditional's branch on the CPU, by an optimization barrier elsewhere
    (``lower.KEEP_SHARED_TIES``)."""
    ms = set(measures)
    cpu = (backend or jax.default_backend()) == "cpu"
    return {"anchor": "backward" if "anchor" in ms else
            "weights" if "anchor_weights" in ms else None,
            "wgrad_chunks": WGRAD_CHUNKS if "split_wgrad" in ms else 1,
            "wgrad_first": "wgrad_first" in ms,
            "anchor_tie": "add" if cpu else "barrier",
            "keep_shared": ("branch" if cpu else "barrier") if "keep_shared" in ms else None}


def compiler_options(measures, backend: str | None = None) -> dict:
    """XLA compiler options for a measure set (CPU options only on the CPU,
    GPU options only off it)."""
    ms = set(measures)
    if (backend or jax.default_backend()) != "cpu":
        return dict(NO_SPLIT_K_OPTIONS) if "no_split_k" in ms else {}
    opts = dict(SCHEDULER_OPTIONS) if "scheduler" in ms else {}
    if "channels_last" in ms or "single_op" in ms:
        opts.update(SINGLE_OP_FUSIONS)
    return opts


def lower_measured(graph: Graph, is_train: bool, measures, backend: str | None = None):
    """``lower.lower`` of ``graph`` with the measure set ``measures`` for
    ``backend``; with ``channels_last``, of the graph ``passes.layout`` rewrites."""
    from .lower import lower
    if "channels_last" not in set(measures):
        return lower(graph, is_train, **lower_options(measures, backend))
    return _lower_channels_last(graph, is_train, lower_options(measures, backend))


def _lower_channels_last(graph: Graph, is_train: bool, options: dict):
    """The lowering of ``to_channels_last(graph)``, rewritten when traced:
    the pass needs every value's shape, known only from the feeds (which
    may hold inner entries: those nodes are kept as they are)."""
    from .graph import Entry, entry_key
    from .lower import lower
    from .passes.layout import to_channels_last

    def fn(feeds, key=None):
        fed = {n.name for n in graph.nodes if n.op is not None and
               any(entry_key(Entry(n, i)) in feeds for i in range(n.num_outputs))}
        shapes = _entry_shapes(graph, is_train, feeds, key)
        rewritten = to_channels_last(graph, inferred=shapes, keep=fed)
        return lower(rewritten, is_train, **options)(feeds, key)
    return fn


class _TracedShapes:
    """Every entry's shape found by tracing the lowering (``_entry_shapes``),
    held as ``passes.infer.Inferred.shapes`` holds them: what
    ``passes.layout.to_channels_last`` reads of an ``Inferred``."""

    def __init__(self, shapes: list):
        self.shapes = shapes


def _entry_shapes(graph: Graph, is_train: bool, feeds: dict, key) -> _TracedShapes:
    """The shape of every entry the feeds determine: the plain lowering,
    traced abstractly (nothing is computed), records them."""
    from .graph import Entry, entry_key
    from .lower import JaxInterpreter
    shapes: list = [None] * graph.num_entries
    for n in graph.nodes:
        for i in range(n.num_outputs):
            k = n.name if n.op is None else entry_key(Entry(n, i))
            if k in feeds:
                shapes[graph.row_ptr[graph.node_id(n)] + i] = tuple(feeds[k].shape)

    class Recorder(JaxInterpreter):
        def eval_node(self, node, inputs):
            outs = super().eval_node(node, inputs)
            base = graph.row_ptr[graph.node_id(node)]
            for i, v in enumerate(outs):
                shapes[base + i] = tuple(v.shape)
            return outs

    jax.eval_shape(lambda f, k: Recorder(graph, is_train, k).run(f), feeds, key)
    return _TracedShapes(shapes)


def jit(fn, measures, backend: str | None = None, **kwargs):
    """``jax.jit`` with the compiler options of ``measures`` for ``backend``."""
    opts = compiler_options(measures, backend)
    return jax.jit(fn, compiler_options=opts or None, **kwargs)
