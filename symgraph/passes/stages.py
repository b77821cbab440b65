"""Stages: a training graph cut into programs that run one after another.

One XLA program for a whole training step decides for itself what it keeps
alive, and on XLA's CPU backend it keeps far more than a recompute plan
says (docs/memory.md, "Budgets and recompute"): a recomputed tensor is
computed again, but many segments' recomputed tensors and gradients are
alive at once. Between separate programs nothing is alive but what the
caller holds. ``stage_graphs(split, nbytes, k)`` cuts a ``TrainingSplit``'s
full graph into 2k stages: the forward ops cut into k contiguous segments
of about equal output bytes, then the backward of each segment, last
segment first. A backward node (or a recompute clone) runs in the stage of
the forward node it belongs to (``split.origin``), never before a stage
that computes one of its inputs. A stage's program reads the variables and
the entries earlier stages computed (fed by ``entry_key``) and returns the
entries later stages read, so what lives between programs is exactly the
plan's kept tensors (checkpoints, segment boundaries, gradients) and, while
a program runs, one segment's working set.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import PlanError
from ..graph import Entry, Graph, entry_key
from .gradient import TrainingSplit
from .infer import infer_shapes
from .recompute import forward_nodes


@dataclass
class Stage:
    """One program: ``graph`` (its outputs: ``returns`` then ``outputs``),
    ``reads`` (entry keys of earlier stages' entries it is fed),
    ``returns`` (entry keys later stages read), ``outputs`` (indices into
    the full graph's outputs it computes, forward outputs and gradients),
    ``nodes`` (the op nodes it computes, in topological order)."""

    index: int
    graph: Graph
    reads: list
    returns: list
    outputs: list
    nodes: list = field(default_factory=list)


def segment_of(fwd: list, nbytes, k: int) -> list:
    """The segment of each of the forward nodes ``fwd`` (topological
    order), cut into at most ``k`` contiguous segments of about equal
    output bytes (``nbytes(node)``)."""
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise PlanError(f"stages: k={k!r}; use a positive integer")
    sizes = [max(0, int(nbytes(n))) for n in fwd]
    total = sum(sizes) or 1
    out, acc = [], 0
    for b in sizes:
        # the segment is where the node's bytes start: equal shares of the total
        out.append(min(k - 1, int(acc * k / total)))
        acc += b
    return out


def default_segments(num_forward_ops: int) -> int:
    """Chen et al.'s sqrt(n) segments for n forward ops."""
    return max(1, round(math.sqrt(num_forward_ops)))


def stage_of(split: TrainingSplit, nbytes, k: int) -> tuple:
    """``(stage, number of stages)``: ``stage[i]`` is the stage of node
    ``i`` of ``split.full`` (see the module docstring; 0 for variables)."""
    full = split.full
    fwd = forward_nodes(full, split.num_outputs)
    segs = segment_of(fwd, nbytes, k)
    k = max(segs, default=0) + 1
    seg = {full.node_id(n): s for n, s in zip(fwd, segs)}
    by_name = {n.name: s for n, s in zip(fwd, segs)}
    stage = [0] * len(full.nodes)
    for i, n in enumerate(full.nodes):  # topological: inputs first
        if n.op is None:
            continue
        if i in seg:
            s = seg[i]
        else:
            origin = split.origin.get(n.name)
            s = 2 * k - 1 - by_name[origin] if origin in by_name else 0
        stage[i] = max([s] + [stage[full.node_id(e.node)] for e in n.inputs])
    return stage, 2 * k


def stage_graphs(split: TrainingSplit, nbytes, k: int) -> list:
    """The ``Stage`` programs of ``split.full`` in the order they run
    (stages with nothing to compute are left out)."""
    full = split.full
    stage, n = stage_of(split, nbytes, k)

    def stage_at(e: Entry) -> int:
        return stage[full.node_id(e.node)]
    entries: dict[str, Entry] = {}  # entry key -> an entry a later stage reads
    reads_of: dict[int, list] = {}
    for i, node in enumerate(full.nodes):
        if node.op is None:
            continue
        s = stage[i]
        for e in node.inputs:
            if e.node.op is not None and stage_at(e) < s:
                key = entry_key(e)
                entries[key] = e
                lst = reads_of.setdefault(s, [])
                if key not in lst:
                    lst.append(key)
    outs_of: dict[int, list] = {}
    for i, e in enumerate(full.outputs):
        if e.node.op is not None:
            outs_of.setdefault(stage_at(e), []).append(i)
    returns_of: dict[int, list] = {}
    for key, e in entries.items():
        returns_of.setdefault(stage_at(e), []).append(key)
    out = []
    for s in range(n):
        rets, idx = returns_of.get(s, []), outs_of.get(s, [])
        if not rets and not idx:
            continue
        g = full.rewrite(outputs=[entries[k] for k in rets] + [full.outputs[i] for i in idx])
        out.append(Stage(s, g, reads_of.get(s, []), rets, idx,
                         [nd for i, nd in enumerate(full.nodes)
                          if nd.op is not None and stage[i] == s]))
    # an output that is a variable (a gradient passed through) is fed, never computed
    return out


def cut(split: TrainingSplit, shapes: dict, segments: int | None = None) -> list:
    """``stage_graphs`` of ``split`` in ``segments`` forward segments
    (default: ``default_segments`` of the forward op count), a node's bytes
    from the shapes inferred from ``shapes`` (input name -> shape): the cut
    the staged step runs and its prediction accounts for."""
    g = split.graph
    inf = infer_shapes(g, shapes, partial=True)

    def nbytes(node):
        total = 0
        for i in range(node.num_outputs):
            eid = g.entry_id(Entry(node, i))
            shape, dtype = inf.shapes[eid], inf.dtypes[eid]
            if shape is not None:
                total += math.prod(shape) * np.dtype(dtype or "float32").itemsize
        return total
    k = segments or default_segments(len(forward_nodes(split.full, split.num_outputs)))
    return stage_graphs(split, nbytes, k)


def last_reads(stages: list) -> dict:
    """``{entry key: index in stages of its last reader}``."""
    last: dict[str, int] = {}
    for i, st in enumerate(stages):
        for key in st.reads:
            last[key] = i
    return last
