"""One training graph's recompute candidates, and the real planner as their judge.

``Problem`` holds the facts ``memory/budget.py``'s algorithms choose
recompute sets from -- the forward nodes that may be recomputed, their
bytes and FLOPs, the articulation points and the segments between them --
and the sets each algorithm proposes (mirror's, Chen's checkpoints, the
solver's ladder). ``Problem.evaluate`` plans a set for real
(``internal_bytes``: the same fuse, schedule, liveness and strategy as
every plan, not an estimate); ``budget.frontier`` keeps the Pareto points.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..graph import Graph
from ..passes.cast import CAST_ATTR
from ..passes.infer import Inferred
from ..passes.recompute import RECOMPUTE_ATTR, forward_nodes, is_recompute, rewrite
from .liveness import entry_nbytes

ALGORITHMS = ("mirror", "sqrt", "solver")
# the op families MXNet's mirror recomputes (MXNET_BACKWARD_DO_MIRROR); the
# solver's middle level per segment recomputes them too
MIRROR_FAMILIES = ("activation", "normalization", "pooling", "elementwise", "shape")
FORCE_ATTR = "__force_mirroring__"
STAGE_ATTR = "__mirror_stage__"


# -- FLOPs ----------------------------------------------------------------------------
def node_flops(graph: Graph, inf: Inferred, node) -> int:
    """FLOPs of one run of an op node (its OpDef's count)."""
    ins = [inf.shape(e) for e in node.inputs]
    base = graph.entry_id_of_node(node)
    outs = [inf.shapes[base + i] for i in range(node.num_outputs)]
    f = node.op.flops
    return int(f(node.params, ins, outs)) if f is not None else 0


def graph_flops(graph: Graph, inf: Inferred) -> int:
    """FLOPs of every op node of ``graph`` (a training step for a training graph)."""
    return sum(node_flops(graph, inf, n) for n in graph.nodes if n.op is not None)


def rewritten_inferred(full: Graph, inf: Inferred, r: Graph) -> Inferred:
    """The shapes of a rewritten graph without inferring again: a clone's
    entries are its original's, every other node keeps its name."""
    if r is full:
        return inf
    by_name = {n.name: n for n in full.nodes}
    shapes, dtypes = [], []
    for n in r.nodes:
        src = by_name[n.attrs[RECOMPUTE_ATTR] if is_recompute(n) else n.name]
        base = full.entry_id_of_node(src)
        for i in range(n.num_outputs):
            shapes.append(inf.shapes[base + i])
            dtypes.append(inf.dtypes[base + i])
    return Inferred(r, tuple(shapes), tuple(dtypes))


# -- recompute sets ---------------------------------------------------------------------
@dataclass(frozen=True)
class Point:
    """One recompute set, planned: forward node names (topological order),
    the FLOPs their recompute adds, the internal bytes of the plan."""

    names: tuple
    extra_flops: int
    internal: int
    source: str


class Problem:
    """The facts the algorithms need about one training graph, and the real
    planner as the judge of a recompute set (``evaluate``)."""

    def __init__(self, full: Graph, inf: Inferred, num_forward_outputs: int, *,
                 strategy: str = "arena", fuse: bool = True, schedule="dfs",
                 match_range: int = 16, parallel_safe: bool = True):
        self.full, self.inf, self.n_fwd = full, inf, num_forward_outputs
        self.opts = dict(strategy=strategy, fuse=fuse, schedule=schedule,
                         match_range=match_range, parallel_safe=parallel_safe)
        self.fwd = forward_nodes(full, num_forward_outputs)
        kept_out = {id(e.node) for e in full.outputs[:num_forward_outputs]}
        self.bytes = {}
        self.flops = {}
        self.candidates = []  # recomputable nodes, topological order
        for n in self.fwd:
            base = full.entry_id_of_node(n)
            self.bytes[n.name] = sum(entry_nbytes(inf, base + i) for i in range(n.num_outputs))
            self.flops[n.name] = node_flops(full, inf, n)
            # a forward output stays alive anyway; random ops would draw anew;
            # a compute dtype's cast is the Module's feed, no node of its program
            if id(n) not in kept_out and not n.op.needs_rng and CAST_ATTR not in n.attrs:
                self.candidates.append(n)
        self.cand_names = {n.name for n in self.candidates}
        self.articulation = self._articulation()
        self._cache: dict = {}
        self._finish: dict = {}
        self._ladder = None

    # -- structure ------------------------------------------------------------------
    def cheap(self, node) -> bool:
        """Whether mirror recomputes ``node``'s op (its family)."""
        return node.op.family in MIRROR_FAMILIES

    def _articulation(self) -> list:
        """Positions (in ``fwd``) of candidate nodes every later forward
        computation depends on only through their outputs: after them, no
        other op node's output is still needed (variables are kept anyway)."""
        fwd = self.fwd
        last = {n.name: i for i, n in enumerate(fwd)}
        for i, n in enumerate(fwd):
            for e in n.inputs:
                if e.node.op is not None:
                    last[e.node.name] = max(last[e.node.name], i)
        for e in self.full.outputs[:self.n_fwd]:
            last[e.node.name] = len(fwd)  # alive to the end
        ends: dict[int, int] = {}
        active, out = 0, []
        for i, n in enumerate(fwd):
            active -= ends.pop(i, 0)
            if last[n.name] > i:
                active += 1
                ends[last[n.name]] = ends.get(last[n.name], 0) + 1
                if active == 1 and n.name in self.cand_names:
                    out.append(i)
        return out

    def segments(self) -> list:
        """Candidate nodes between consecutive articulation points: a list
        of (nodes, closing articulation node or None for the tail)."""
        segs, start = [], 0
        for a in self.articulation + [len(self.fwd)]:
            inner = [n for n in self.fwd[start:a] if n.name in self.cand_names]
            close = self.fwd[a] if a < len(self.fwd) else None
            segs.append((inner, close))
            start = a + 1
        return [s for s in segs if s[0] or s[1] is not None]

    # -- the judge --------------------------------------------------------------------
    def rewritten(self, names):
        r = rewrite(self.full, self.n_fwd, list(names))
        return r, rewritten_inferred(self.full, self.inf, r)

    def evaluate(self, names, source: str) -> Point:
        """The real plan's internal bytes for recomputing ``names`` (only
        clones that the backward ends up reading count: the rest are
        pruned with the graph)."""
        wanted = set(names)
        names = tuple(n.name for n in self.fwd if n.name in wanted)
        hit = self._cache.get(names)
        if hit is not None:
            return hit
        r, rinf = self.rewritten(names)
        cloned = {c.attrs[RECOMPUTE_ATTR] for c in r.nodes if is_recompute(c)}
        kept = tuple(n for n in names if n in cloned)
        if kept != names:
            hit = self._cache.get(kept)
            if hit is not None:
                self._cache[names] = hit
                return hit
        internal, finish = internal_bytes(
            r, rinf, [r.entry_id(e) for e in r.outputs[self.n_fwd:]], lazy=True, **self.opts)
        p = Point(kept, sum(self.flops[n] for n in kept), internal, source)
        self._cache[names] = self._cache[kept] = p
        if finish is not None:
            self._finish[kept] = finish
        return p

    def exact(self, p: Point) -> Point:
        """``p`` with the arena's figure as ``plan_graph`` gives it: the
        'both' plan's slots when those take less (``evaluate`` leaves that
        check for the points that make the frontier: it costs as much as
        the arena)."""
        finish = self._finish.pop(p.names, None)
        if finish is None:
            return p
        q = Point(p.names, p.extra_flops, finish(), p.source)
        for k, v in list(self._cache.items()):
            if v is p:
                self._cache[k] = q
        return q

    # -- candidate sets ----------------------------------------------------------------
    def mirror_sets(self) -> list:
        """(label, names): MXNet's mirror set; with ``__mirror_stage__``
        attributes, memonger's plan at each threshold of a grid."""
        def forced(n):
            v = n.attrs.get(FORCE_ATTR)
            return None if v is None else v.strip().lower() in ("true", "1")
        plain = [n.name for n in self.candidates
                 if (forced(n) if forced(n) is not None else self.cheap(n))]
        staged = [n for n in self.candidates if STAGE_ATTR in n.attrs]
        if not staged:
            return [("mirror", plain)]
        total = sum(self.bytes[n.name] for n in self.candidates)
        out = []
        for k in range(0, 9):
            threshold = total * k / 16
            keep = memonger_keep(self.candidates, self.bytes, threshold)
            out.append((f"mirror stages {k}/16",
                        [n.name for n in self.candidates
                         if (forced(n) if forced(n) is not None else n.name not in keep)]))
        return out

    def checkpoint_set(self, checkpoints) -> list:
        """Everything recomputable but the checkpoints (node names)."""
        return [n.name for n in self.candidates if n.name not in checkpoints]

    def even_checkpoints(self, k: int) -> set:
        """k articulation nodes nearest the quantiles j/(k+1) of the
        cumulative candidate bytes (Chen's evenly spaced segments)."""
        arts = self.articulation
        if k <= 0 or not arts:
            return set()
        cum, acc = {}, 0
        for i, n in enumerate(self.fwd):
            if n.name in self.cand_names:
                acc += self.bytes[n.name]
            cum[i] = acc
        chosen = set()
        for j in range(1, k + 1):
            target = acc * j / (k + 1)
            best = min(arts, key=lambda a: abs(cum[a] - target))
            chosen.add(self.fwd[best].name)
        return chosen

    def greedy_checkpoints(self, threshold: float) -> set:
        """Chen's budget-driven variant: a checkpoint at the first
        articulation point where the bytes since the last one pass
        ``threshold``."""
        arts = set(self.articulation)
        chosen, acc = set(), 0
        for i, n in enumerate(self.fwd):
            if n.name not in self.cand_names:
                continue
            acc += self.bytes[n.name]
            if i in arts and acc > threshold:
                chosen.add(n.name)
                acc = 0
        return chosen

    def drop_order(self) -> list:
        """Checkpoints closing a segment to drop after the ladder's end,
        cheapest per byte first: dropping one computes its node again and
        the segment's nodes no backward node reads (a ResNet unit's last
        convolution, feeding the add); no two neighbours, so no
        recompute spans more than two segments."""
        fwd = {id(n) for n in self.fwd}
        read = {e.node.name for n in self.full.nodes if n.op is not None and id(n) not in fwd
                for e in n.inputs if id(e.node) in fwd}
        rows = []
        for inner, close in self.segments():
            if close is None or close.name not in self.cand_names or not self.bytes[close.name]:
                continue
            cost = self.flops[close.name] + sum(self.flops[n.name] for n in inner
                                                 if n.name not in read)
            rows.append((cost / self.bytes[close.name], close.name))
        rows.sort()
        pos = {self.fwd[i].name: k for k, i in enumerate(self.articulation)}
        dropped, out = set(), []
        for _, name in rows:
            k = pos[name]
            if k - 1 not in dropped and k + 1 not in dropped:
                dropped.add(k)
                out.append(name)
        return out

    def sqrt_k(self) -> int:
        return max(1, round(math.sqrt(len(self.candidates))))

    def ladder(self) -> list:
        """``segment_ladder()``, computed once."""
        if self._ladder is None:
            self._ladder = self.segment_ladder()
        return self._ladder

    def segment_ladder(self) -> list:
        """Prefixes of the per-segment upgrades (keep -> cheap -> all but
        the closing checkpoint) in order of extra FLOPs per byte dropped,
        the lower convex hull of each segment's three choices."""
        moves = []
        for si, (inner, close) in enumerate(self.segments()):
            levels = [(0, 0, [])]
            # cheap: as mirror, the closing node too when it is cheap (the
            # checkpoint moves back to the last expensive op's output)
            cheap = [n.name for n in inner + ([close] if close is not None else [])
                     if self.cheap(n) and n.name in self.cand_names]
            every = [n.name for n in inner]
            for names in (cheap, every):
                b = sum(self.bytes[x] for x in names)
                f = sum(self.flops[x] for x in names)
                if b > levels[-1][0]:
                    levels.append((b, f, names))
            # lower convex hull: drop a level whose ratio is worse than the next's
            hull = [levels[0]]
            for lv in levels[1:]:
                while len(hull) >= 2 and _ratio(hull[-2], hull[-1]) > _ratio(hull[-1], lv):
                    hull.pop()
                hull.append(lv)
            for a, b in zip(hull, hull[1:]):
                moves.append((_ratio(a, b), si, b[2]))
        moves.sort(key=lambda m: (m[0], m[1]))
        chosen: dict[int, list] = {}
        prefixes = []
        for _, si, names in moves:
            chosen[si] = names
            prefixes.append([x for v in chosen.values() for x in v])
        return prefixes


def _ratio(a, b) -> float:
    db = b[0] - a[0]
    return (b[1] - a[1]) / db if db > 0 else math.inf


def memonger_keep(candidates, nbytes: dict, threshold: float) -> set:
    """The stage boundaries MXNet's memonger (``make_mirror_plan``) keeps
    at ``threshold`` bytes: walking the nodes, bytes gather; at a node
    with ``__mirror_stage__`` that starts a new stage ('True', or a value
    other than the last), it is kept when the gathered bytes pass the
    threshold (and the count restarts); the following nodes of a kept
    stage (same value) are kept too."""
    keep, local, last_stage, decision = set(), 0, None, None
    for n in candidates:
        local += nbytes[n.name]
        stage = n.attrs.get(STAGE_ATTR)
        if stage is None:
            continue
        if stage == "True" or stage != last_stage:
            if local > threshold:
                keep.add(n.name)
                local, decision = 0, "keep"
            else:
                decision = "mirror"
            last_stage = stage
        elif decision == "keep":
            keep.add(n.name)
    return keep


# -- the strategies' figure, as plan_graph computes it ----------------------------------
def internal_bytes(g: Graph, inf: Inferred, external, *, strategy="arena", fuse=True,
                   schedule="dfs", match_range=16, parallel_safe=True, lazy=False):
    """The internal bytes ``plan_graph`` reports for ``strategy`` (the same
    passes, without the other strategies and the verification). ``lazy``:
    (the arena's own figure, a function giving the exact one -- the 'both'
    plan's when smaller, as ``arena_plan``'s fallback -- or None)."""
    from ..passes.fuse import fuse as fuse_pass, no_fusion
    from ..passes.schedule import schedule as schedule_pass
    from . import arena as arena_mod, planner
    from .liveness import analyze
    fusion = fuse_pass(g) if fuse else no_fusion(g)
    steps = schedule_pass(g, fusion, schedule, nbytes=lambda eid: entry_nbytes(inf, eid))
    live = analyze(g, inf, fusion, steps, external)
    def both():
        return planner.pool_plan(live, "both", inplace=True, match_range=match_range,
                                 parallel_safe=parallel_safe).total

    if strategy == "naive":
        total = planner.naive(live).total
    elif strategy == "inplace":
        total = planner.pool_plan(live, "inplace", inplace=True, match_range=0,
                                  parallel_safe=parallel_safe).total
    elif strategy == "coshare":
        total = planner.pool_plan(live, "coshare", inplace=False, match_range=match_range,
                                  parallel_safe=parallel_safe).total
    elif strategy == "both":
        total = both()
    else:
        lb, _, _ = planner.lower_bound(live)
        raw = arena_mod.arena_plan(live, lb).total
        if raw <= lb:  # no plan beats the bound: 'both' cannot take less
            return (raw, None) if lazy else raw
        if lazy:
            return raw, lambda: min(raw, both())
        return min(raw, both())
    return (total, None) if lazy else total


def recompute_rows(problem: Problem, names) -> list:
    """``Plan.recompute``: one dict per recomputed node, forward order;
    ``bytes`` is the node's output bytes (what the forward no longer keeps
    for the backward), ``flops`` one run of the node."""
    by = {n.name: n for n in problem.fwd}
    return [{"name": x, "op": by[x].op.name, "bytes": int(problem.bytes[x]),
             "flops": int(problem.flops[x])} for x in names]
