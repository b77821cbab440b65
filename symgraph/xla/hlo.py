"""Reading XLA's dump: ``memory_breakdown`` compiles with the dump switched
on and ``parse_breakdown`` reads its buffer assignment, live ranges and
optimized HLO to say what the temp allocation holds at its busiest step
(see the package docstring for the kinds and roles).
"""
from __future__ import annotations

import glob
import os
import re
import tempfile
from dataclasses import dataclass

import jax

from ..graph import Graph
from ..train.step import UPDATE_SCOPE
from .analysis import analysis_dict, compile_step
from .steps import XlaError

MIB = 2 ** 20


# --------------------------------------------------------------------------
# the breakdown
# --------------------------------------------------------------------------
KINDS = ("layout", "convolution", "matmul", "pooling", "normalization", "reduction", "rng",
         "fusion", "other")
_FAMILY_KINDS = ("convolution", "matmul", "pooling", "normalization")
ROLES = ("kept for backward", "forward", "backward", "update", "unknown")


@dataclass
class Buffer:
    """One value XLA placed in its temp allocation."""

    name: str        # HLO value, e.g. 'transpose_copy_fusion.23' or 'while.9{1}'
    shape: str
    nbytes: int
    offset: int
    start: int       # live range in XLA's instruction sequence
    end: int
    kind: str
    role: str
    node: str | None  # the symgraph node it comes from, when the metadata says
    op_name: str


@dataclass
class Breakdown:
    """What XLA's temp allocation holds at its busiest step.

    ``temp``: ``memory_analysis()`` temp bytes; ``allocations``: the sizes of
    the temp allocations the buffer assignment lists (their sum is ``temp``);
    ``peak_live``: the bytes of temp values live at the busiest step (the
    rest of ``temp`` is fragmentation); ``live``: those values, largest
    first, each byte counted once (their sum is at most ``peak_live``);
    ``by_kind`` / ``by_role``: their bytes grouped.
    """

    temp: int
    allocations: list
    peak_step: int
    peak_live: int
    live: list
    analysis: dict

    @property
    def by_kind(self) -> dict:
        return _group(self.live, "kind", KINDS)

    @property
    def by_role(self) -> dict:
        return _group(self.live, "role", ROLES)

    @property
    def by_kind_role(self) -> dict:
        out: dict = {}
        for b in self.live:
            out[(b.kind, b.role)] = out.get((b.kind, b.role), 0) + b.nbytes
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def to_json(self, top: int = 20) -> dict:
        return {"temp": self.temp, "allocations": self.allocations,
                "peak_step": self.peak_step, "peak_live": self.peak_live,
                "fragmentation": self.temp - self.peak_live,
                "by_kind": self.by_kind, "by_role": self.by_role,
                "by_kind_role": [{"kind": k, "role": r, "bytes": v}
                                 for (k, r), v in self.by_kind_role.items()],
                "largest": [{"name": b.name, "shape": b.shape, "bytes": b.nbytes,
                             "kind": b.kind, "role": b.role, "node": b.node}
                            for b in self.live[:top]]}

    def table(self, top: int = 15) -> str:
        """Plain-text report: totals, groups, the largest live buffers."""
        lines = [f"XLA temp {self.temp / MIB:,.1f} MiB; live at its busiest step "
                 f"({self.peak_step}): {self.peak_live / MIB:,.1f} MiB "
                 f"(fragmentation {(self.temp - self.peak_live) / MIB:,.1f} MiB)",
                 "", f"{'kind':<12} {'role':<18} {'MiB':>10}"]
        for (k, r), v in self.by_kind_role.items():
            lines.append(f"{k:<12} {r:<18} {v / MIB:>10,.1f}")
        lines += ["", f"{'MiB':>9}  {'kind':<12} {'role':<18} {'node':<24} value"]
        for b in self.live[:top]:
            lines.append(f"{b.nbytes / MIB:>9,.1f}  {b.kind:<12} {b.role:<18} "
                         f"{(b.node or '-'):<24} {b.name} {b.shape}")
        return "\n".join(lines)


def _group(bufs, attr, order) -> dict:
    out = {k: 0 for k in order}
    for b in bufs:
        out[getattr(b, attr)] = out.get(getattr(b, attr), 0) + b.nbytes
    return {k: v for k, v in out.items() if v}


DUMP_OPTIONS = {"xla_dump_hlo_as_text": True}


def memory_breakdown(step_or_lowered, graph=None,
                     compiler_options: dict | None = None) -> Breakdown:
    """Compiles with XLA's dump on and explains its temp allocation (see the
    module docstring). ``graph``: the ``Plan`` (or ``Graph``) that was
    lowered, so values are attributed to its nodes and forward/backward
    roles."""
    with tempfile.TemporaryDirectory(prefix="symgraph-xla-") as d:
        compiled = compile_step(step_or_lowered, {**(compiler_options or {}), **DUMP_OPTIONS,
                                                  "xla_dump_to": d})
        analysis = analysis_dict(compiled)
        files = {}
        for suffix in ("buffer-assignment.txt", "live-range.txt", "after_optimizations.txt"):
            found = sorted(glob.glob(os.path.join(d, f"*{suffix}")), key=os.path.getmtime)
            if not found:
                raise XlaError(f"XLA wrote no *{suffix} (backend {jax.default_backend()}); "
                               f"the breakdown needs its dump")
            with open(found[-1]) as f:
                files[suffix] = f.read()
    return parse_breakdown(files["buffer-assignment.txt"], files["live-range.txt"],
                           files["after_optimizations.txt"], analysis, graph)


_ALLOC = re.compile(r"^allocation (\d+): size (\d+)(.*):\s*$")
_VALUE = re.compile(r"^ value: <\d+ (\S+?)(\{[\d,]*\})?(?: \(phi\))? @\d+> "
                    r"\(size=(\d+),offset=(\d+)\): (.*)$")
_RANGE = re.compile(r"^\s+(\S+?)(\{[\d,]*\}):(\d+)-(\d+)\s*$")
_SEQ = re.compile(r"^\s+(\d+):(\S+)\s*$")
_INSTR = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = (.*?) ([a-z][\w\-]*)\((.*)$")
_COMP = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) .*\{\s*$")
_OPNAME = re.compile(r'op_name="([^"]*)"')
_CALLS = re.compile(r"calls=%?([\w.\-]+)")
_NOT_TEMP = ("parameter", "constant", "maybe-live-out", "thread-local", "output shape")


def _temp_allocations(text: str) -> dict:
    """allocation index -> (size, [(value key, nbytes, offset, shape)])."""
    out, cur = {}, None
    for line in text.splitlines():
        m = _ALLOC.match(line)
        if m:
            attrs = m.group(3)
            cur = None
            if not any(k in attrs for k in _NOT_TEMP):
                cur = int(m.group(1))
                out[cur] = (int(m.group(2)), [])
            continue
        if line.startswith("Total bytes") or not line.startswith(" value:"):
            if not line.startswith(" "):
                cur = None if not m else cur
            continue
        if cur is None:
            continue
        v = _VALUE.match(line)
        if v:
            key = v.group(1) + (v.group(2) or "{}")
            out[cur][1].append((key, int(v.group(3)), int(v.group(4)), v.group(5).strip()))
    return out


def _live_ranges(text: str) -> dict:
    out, on = {}, False
    for line in text.splitlines():
        if line.strip() == "BufferLiveRange:":
            on = True
            continue
        if on:
            m = _RANGE.match(line)
            if not m:
                if out:
                    break
                continue
            out[m.group(1) + m.group(2)] = (int(m.group(3)), int(m.group(4)))
    return out


def _hlo(text: str):
    """(instr name -> (opcode, op_name, called computation)), (computation
    -> [opcodes]), (computation -> first op_name inside)."""
    instrs, comp_ops, comp_name, cur = {}, {}, {}, None
    lines = text.splitlines()
    for line in lines:
        if not line.startswith(" "):
            m = _COMP.match(line)
            cur = m.group(1) if m else None
            if cur:
                comp_ops.setdefault(cur, [])
            continue
        m = _INSTR.match(line)
        if not m:
            continue
        name, opcode, rest = m.group(1), m.group(3), m.group(4)
        op = _OPNAME.search(rest)
        calls = _CALLS.search(rest)
        instrs[name] = (opcode, op.group(1) if op else "", calls.group(1) if calls else None,
                        rest)
        if cur is not None:
            if line.lstrip().startswith("ROOT "):
                comp_ops[cur].append(("ROOT", opcode))
            else:
                comp_ops[cur].append(opcode)
            if op and cur not in comp_name:
                comp_name[cur] = op.group(1)
    for c, ops in comp_ops.items():  # the root last
        roots = [o[1] for o in ops if isinstance(o, tuple)]
        comp_ops[c] = [o for o in ops if not isinstance(o, tuple)] + roots
    return instrs, comp_ops, comp_name


def _kind(opcode: str, ops: list, op_name: str, rest: str) -> str:
    """What an instruction computes; ``ops``: the opcodes of the computation
    it calls (a fusion's), root last."""
    allops = set(ops) | {opcode}
    tail = op_name.rsplit("/", 1)[-1]
    root = next((o for o in reversed(ops) if o not in ("bitcast", "parameter", "tuple")),
                opcode)
    if "convolution" in allops or "conv_general_dilated" in tail:
        return "convolution"
    if "dot" in allops or tail in ("dot_general", "matmul"):
        return "matmul"
    if allops & {"reduce-window", "select-and-scatter"} or "reduce_window" in tail:
        return "pooling"
    if allops & {"rng-bit-generator", "rng", "while"} or "threefry" in op_name \
            or "random" in op_name:
        return "rng"
    if "reduce" in allops:
        return "reduction"
    if opcode in ("copy", "transpose") or (opcode == "fusion" and root in ("transpose", "copy")):
        return "layout"
    if opcode == "fusion":
        return "fusion"
    return "other"


def _scopes(op_name: str) -> list:
    """The names in an op_name path with JAX's wrappers (jvp(...),
    transpose(...)) taken off, outermost first."""
    out = []
    for part in op_name.split("/")[1:]:  # the first part is the jit'd function
        while True:
            m = re.fullmatch(r"[\w]+\((.*)\)", part)
            if not m:
                break
            part = m.group(1)
        if part:
            out.append(part)
    return out


def parse_breakdown(assignment: str, live_range: str, hlo: str, analysis: dict | None = None,
                    graph=None) -> Breakdown:
    """The ``Breakdown`` from the text of XLA's dump files; ``graph``: a
    ``Plan`` or a ``Graph`` (all of whose outputs are forward outputs)."""
    temps = _temp_allocations(assignment)
    if not temps:
        raise XlaError("the buffer assignment lists no temp allocation")
    ranges = _live_ranges(live_range)
    instrs, comp_ops, comp_name = _hlo(hlo)
    backward_nodes, node_names, node_family = set(), set(), {}
    if graph is not None:
        n_fwd = getattr(graph, "num_forward_outputs", None)
        graph = getattr(graph, "graph", graph)
        # the op families the breakdown names as kinds of their own (a
        # backward op has its forward op's family)
        node_family = {n.name: n.op.family for n in graph.nodes if n.op is not None}
        node_names = set(node_family)
        fwd = _forward_nodes(graph, n_fwd)
        backward_nodes = node_names - fwd
    values = []  # (key, nbytes, offset, shape, start, end)
    for size, vals in temps.values():
        for key, nbytes, offset, shape in vals:
            r = ranges.get(key)
            if r is None or nbytes == 0:
                continue
            values.append((key, nbytes, offset, shape, r[0], r[1]))
    # the busiest step: the most bytes of the temp allocations in use
    events = sorted({v[4] for v in values})
    best_t, best = (events[0] if events else 0), -1
    for t in events:
        used = _union([(v[2], v[2] + v[1]) for v in values if v[4] <= t <= v[5]])
        if used > best:
            best_t, best = t, used
    live = [v for v in values if v[4] <= best_t <= v[5]]
    # backward begins at the first instruction of a backward node
    bwd_start = None
    seq = [m.group(2) for m in map(_SEQ.match, live_range.splitlines()) if m]
    for i, name in enumerate(seq):
        if _role_of(instrs, comp_name, name, node_names, backward_nodes)[0] == "backward":
            bwd_start = i
            break
    bufs = []
    for key, nbytes, offset, shape, s, e in live:
        name = key[:-2] if key.endswith("{}") else key
        base = name.split("{")[0]
        opcode, op_name, calls, rest = instrs.get(base, ("", "", None, ""))
        op_name = op_name or comp_name.get(calls, "")
        kind = _kind(opcode, comp_ops.get(calls, []), op_name, rest)
        role, node = _role_of(instrs, comp_name, base, node_names, backward_nodes)
        if kind in ("fusion", "other") and node_family.get(node) in _FAMILY_KINDS:
            kind = node_family[node]  # say which op family
        if role == "forward" and bwd_start is not None and e > bwd_start:
            role = "kept for backward"
        bufs.append(Buffer(name, shape, nbytes, offset, s, e, kind, role, node, op_name))
    # values sharing bytes (in-place updates, loop-carried values) are counted
    # once: the largest keeps them, so the rows never add up to more than temp
    uniq = []
    for b in sorted(bufs, key=lambda b: (-b.nbytes, b.start, b.name)):
        if any(b.offset < u.offset + u.nbytes and u.offset < b.offset + b.nbytes
               for u in uniq):
            continue
        uniq.append(b)
    temp = (analysis or {}).get("temp")
    alloc_sizes = [size for size, _ in temps.values()]
    return Breakdown(temp=temp if temp is not None else sum(alloc_sizes),
                     allocations=alloc_sizes, peak_step=best_t, peak_live=max(best, 0),
                     live=uniq, analysis=analysis or {})


def _union(intervals) -> int:
    total, end = 0, -1
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def _role_of(instrs, comp_name, name, node_names, backward_nodes):
    opcode, op_name, calls, _ = instrs.get(name, ("", "", None, ""))
    op_name = op_name or comp_name.get(calls, "")
    if not op_name:
        return "unknown", None
    scopes = _scopes(op_name)
    node = next((s for s in scopes if s in node_names), None)
    if UPDATE_SCOPE in scopes:
        return "update", node
    if node is not None:
        return ("backward" if node in backward_nodes else "forward"), node
    if "transpose(" in op_name:  # JAX autodiff's backward
        return "backward", None
    return "forward", None


def _forward_nodes(graph: Graph, n_fwd: int | None) -> set:
    """Names of the nodes the first ``n_fwd`` outputs (the forward outputs;
    a training graph's gradients follow them) need."""
    stack = [e.node for e in graph.outputs[:n_fwd]]
    seen = set()
    while stack:
        n = stack.pop()
        if n.name in seen:
            continue
        seen.add(n.name)
        stack.extend(e.node for e in n.inputs)
    return seen
