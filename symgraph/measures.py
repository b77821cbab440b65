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
- ``channels_last``: 4-D activations stay NHWC between the ops that have a
  channels-last rule, so XLA's CPU convolutions need no transposed copy of
  them (inputs and outputs stay NCHW).
- ``split_wgrad``: the weight gradient of each convolution is the sum over
  the batch's two halves, the second tied to the first, so one half's
  batch-minor copies are alive at a time. Training only.
"""
from __future__ import annotations

import jax

from .errors import SymgraphError
from .graph import Graph

MEASURES = ("scheduler", "anchor", "anchor_weights", "channels_last", "split_wgrad")
# split_wgrad's batch slices (halves: quarters did no better on the small
# test nets, and worse on the Inception-like one)
WGRAD_CHUNKS = 2
SCHEDULER_OPTIONS = {"xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED"}
# XLA's CPU backend hands convolutions and dots to YNNPACK one op at a time:
# with channels-last activations it would otherwise fuse whole convolution
# chains into one library call whose buffers memory_analysis() does not see
SINGLE_OP_FUSIONS = {"xla_cpu_experimental_ynn_fusion_type":
                     "LIBRARY_FUSION_TYPE_INDIVIDUAL_CONVOLUTION,LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}

# The rule's choices on the CPU for graphs with 2-D convolutions, measured
# on VGG-16, Inception-BN, ResNet-50 and GoogLeNet at batch 64
# (benchmarks/results/module_step): channels_last+anchor keeps plain and
# Inception-style conv nets within 1.15x of the arena plan in training and
# runs them faster than the plain lowering (VGG-16 1.08x, Inception-BN
# 1.08x); channels_last+scheduler in inference. Residual nets are the
# exception: channels-last ran ResNet-50's step at 0.86x, while XLA's
# memory-optimized scheduler alone runs at full speed and brings its temp
# to half the plan.
CPU_TRAIN = ("channels_last", "anchor")
CPU_INFER = ("channels_last", "scheduler")
CPU_RESIDUAL = ("scheduler",)
# ops that add two activations: a residual net's shortcut
RESIDUAL_ADDS = ("elemwise_add", "_Plus", "_plus", "ElementWiseSum", "add_n", "broadcast_add")

# A program that recomputes ties each backward node to its incoming
# gradient too: without it XLA computed backward work from the saved and
# recomputed tensors early and kept the results (a 16-layer MLP, batch 512,
# a checkpoint every 4 layers: temp 38 MiB plain, 26 MiB anchored, against
# the plan's 18 MiB; a small ResNet: 21.1 -> 20.1 MiB, plan 18.8 MiB;
# benchmarks/recompute_program.py)
RECOMPUTE_ANCHOR = ("anchor",)

# the sets best_step tries (benchmarks, tests): each won on some net
TRAIN_CANDIDATES = ((), ("scheduler",), ("anchor",), ("anchor_weights",),
                    ("anchor_weights", "scheduler"), ("channels_last", "anchor"),
                    ("channels_last", "anchor_weights"),
                    ("channels_last", "split_wgrad", "anchor"),
                    ("channels_last", "split_wgrad", "anchor_weights"),
                    ("channels_last", "split_wgrad", "scheduler"))
INFER_CANDIDATES = ((), ("scheduler",), ("channels_last",), ("channels_last", "scheduler"))


class MeasureError(SymgraphError):
    """An unknown or contradictory memory measure."""


def _has_conv2d(graph: Graph) -> bool:
    return any(n.op is not None and n.op.name in ("Convolution", "Deconvolution") and
               len(n.params.kernel) == 2 for n in graph.nodes)


def _has_residual_adds(graph: Graph) -> bool:
    return any(n.op is not None and n.op.name in RESIDUAL_ADDS for n in graph.nodes)


def default_measures(graph: Graph, train: bool, backend: str | None = None) -> tuple:
    """The measure set symgraph lowers ``graph`` (a forward graph) with when
    none is named.

    On the CPU, graphs with 2-D convolutions get ``CPU_TRAIN`` /
    ``CPU_INFER`` (the layout and anchor measures are about the copies XLA's
    CPU convolutions make), or ``CPU_RESIDUAL`` when activations are added
    (residual shortcuts: channels-last slows those down); other graphs
    (MLPs, sequence models) need none.
    On a GPU none: XLA's GPU backend chooses convolution layouts itself and
    has no scheduler option of the CPU's kind (docs/memory.md, "On a GPU")."""
    backend = backend or jax.default_backend()
    if backend != "cpu" or not _has_conv2d(graph):
        return ()
    if _has_residual_adds(graph):
        return CPU_RESIDUAL
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


def resolve(spec, graph: Graph, train: bool, recompute: bool = False) -> tuple:
    """The measure set a program of ``graph`` is lowered with: the user's
    ``spec`` (see ``parse``) or, for None/'auto', ``default_measures``,
    with ``anchor`` added on the CPU for a training program that recomputes
    (``recompute``; see ``RECOMPUTE_ANCHOR``).
    ``split_wgrad`` is dropped in inference (there is no weight gradient)."""
    ms = parse(spec)
    if ms is None:
        ms = default_measures(graph, train)
        if (train and recompute and jax.default_backend() == "cpu"
                and "anchor" not in ms and "anchor_weights" not in ms):
            ms = ms + RECOMPUTE_ANCHOR
    if not train:
        ms = tuple(m for m in ms if m != "split_wgrad")
    return ms


def label(measures) -> str:
    """How reports name a measure set: ``channels_last+anchor``, or ``none``."""
    return "+".join(measures) or "none"


def lower_options(measures) -> dict:
    """``lower()``'s keyword arguments for a measure set."""
    ms = set(measures)
    return {"anchor": "backward" if "anchor" in ms else
            "weights" if "anchor_weights" in ms else None,
            "layout": "NHWC" if "channels_last" in ms else "NCHW",
            "wgrad_chunks": WGRAD_CHUNKS if "split_wgrad" in ms else 1}


def compiler_options(measures, backend: str | None = None) -> dict:
    """XLA compiler options for a measure set (CPU options only on the CPU)."""
    if (backend or jax.default_backend()) != "cpu":
        return {}
    ms = set(measures)
    opts = dict(SCHEDULER_OPTIONS) if "scheduler" in ms else {}
    if "channels_last" in ms:
        opts.update(SINGLE_OP_FUSIONS)
    return opts


def lower_measured(graph: Graph, is_train: bool, measures):
    """``lower.lower`` of ``graph`` with the measure set ``measures``."""
    from .lower import lower
    return lower(graph, is_train, **lower_options(measures))


def jit(fn, measures, **kwargs):
    """``jax.jit`` with the compiler options of ``measures``."""
    opts = compiler_options(measures)
    return jax.jit(fn, compiler_options=opts or None, **kwargs)
