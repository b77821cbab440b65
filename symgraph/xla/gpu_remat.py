"""XLA:GPU's own rematerialization at a memory limit, and the FLOPs a
program's text says it computes.

    from symgraph.xla import gpu_remat
    r = gpu_remat.at_budget(step, budget)   # step: compiled for a GPU target
    r["footprint"], r["holds"], r["slop_factor"], r["limit"], r["extra_flops_share"]
    gpu_remat.hlo_flops(compiled.as_text())  # {"total", "remat", "remat_instructions"}

XLA:GPU runs ``HloRematerialization`` after scheduling, with the
scheduler's memory limit (``GetSchedulerMemoryLimit`` in
``xla/service/gpu/gpu_hlo_schedule.cc``, the version JAX's CUDA plugin
ships)::

    base  = device_memory_size * 80 / 100          (integer arithmetic)
    io    = parameters + outputs - aliased outputs (device bytes)
    limit = (base - io) * xla_gpu_memory_limit_slop_factor / 100

The pass holds the parameters and temporaries to that limit (the outputs
are added to both sides: ``Can't reduce memory use below X``, logged where
it cannot get there, names the limit plus the outputs' bytes), so for a
step whose outputs alias its donated inputs the limit bounds about the
footprint (temp + argument + output - alias).
The slop factor is an integer percent, so the limit moves in steps of
(base - io) / 100: about 680 MB on an 80 GB H100. ``slop_factor_for``
takes the largest factor whose limit is at most the budget (never a looser
limit than the budget; 0 -- XLA recomputes all it can -- where 1% is more).

The remat pass clones each instruction it recomputes under the name of
the original with ``.remat`` (``.remat2``, ...) appended; ``hlo_flops``
counts the FLOPs of those clones, and of the whole program, from the
optimized HLO text (``Compiled.as_text()``; ``cost_analysis()`` is not
available without a device): convolutions (cuDNN custom calls too) 2 x
output x kernel work, dots and cuBLAS gemms 2 x output x contracted size,
reductions one per element read, other arithmetic one per element made,
data movement (copies, transposes, broadcasts, slices, bitcasts) none.
"""
from __future__ import annotations

import re

from .. import targets
from .analysis import analysis_dict, compile_step, footprint

SLOP_OPTION = "xla_gpu_memory_limit_slop_factor"
BASE_PERCENT = 80  # GetSchedulerMemoryLimit: device_memory_size * 80 / 100
REMAT_NAME = re.compile(r"\.remat\d*$")
CANT_REDUCE = re.compile(r"Can't reduce memory use below .*?\((\d+) bytes\).*?only reduced to "
                         r".*?\((\d+) bytes\), down from .*?\((\d+) bytes\)")


# -- the limit ------------------------------------------------------------------------
def base_limit(device_memory: int) -> int:
    """XLA:GPU's base for the limit: 80% of the device's memory."""
    return int(device_memory) * BASE_PERCENT // 100


def limit_for(slop_factor: int, device_memory: int, io: int) -> int:
    """The memory limit XLA:GPU's rematerialization gets with
    ``xla_gpu_memory_limit_slop_factor=slop_factor`` on a device of
    ``device_memory`` bytes, for a program whose parameters and outputs
    (aliased ones once) take ``io`` bytes."""
    return max(0, (base_limit(device_memory) - int(io)) * int(slop_factor) // 100)


def slop_factor_for(budget: int, device_memory: int, io: int) -> int:
    """The largest slop factor whose limit (``limit_for``) is at most
    ``budget`` bytes: 0 (a limit of 0, XLA recomputes all it can) where
    even 1% is more than the budget."""
    room = base_limit(device_memory) - int(io)
    if room <= 0:
        return 0
    s = max(0, int(budget) * 100 // room)
    while s > 0 and limit_for(s, device_memory, io) > budget:
        s -= 1
    while limit_for(s + 1, device_memory, io) <= budget:
        s += 1
    return s


def io_bytes(figures: dict) -> int:
    """Parameters + outputs - aliased outputs, from ``memory_analysis()``."""
    return figures["argument"] + figures["output"] - (figures["alias"] or 0)


# -- FLOPs from the HLO text ------------------------------------------------------------
_ARRAY = re.compile(r"\b(pred|[subf]\d+|bf16|f8e\w+|c64|c128|token)\[([0-9,]*)\]")
_COMP = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s*\(.*\)\s*->\s*.*\{\s*$")
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_FREE = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "reshape",
         "broadcast", "transpose", "copy", "copy-start", "copy-done", "slice",
         "dynamic-slice", "dynamic-update-slice", "concatenate", "pad", "iota",
         "after-all", "partition-id", "replica-id", "gather", "reverse",
         "optimization-barrier", "bitcast-convert", "send", "recv", "send-done", "recv-done",
         "add-dependency", "domain", "opt-barrier", "async-start", "async-done",
         "async-update", "get-dimension-size"}
_CONV_TARGETS = ("__cudnn$convForward", "__cudnn$convBiasActivationForward",
                 "__cudnn$convBackwardInput", "__cudnn$convBackwardFilter")


def _dims(text: str) -> list:
    """The array shapes in a shape string, as lists of dimensions."""
    return [[int(d) for d in m.group(2).split(",") if d] for m in _ARRAY.finditer(text)]


def _count(dims) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def _split_shape(rest: str) -> tuple:
    """(shape text, opcode, the rest) of what follows ``name = ``."""
    if rest.startswith("("):  # a tuple shape: up to its matching parenthesis
        depth = 0
        for i, ch in enumerate(rest):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0:
                shape, tail = rest[:i + 1], rest[i + 1:].lstrip()
                break
        else:
            return rest, "", ""
    else:
        shape, _, tail = rest.partition(" ")
    m = re.match(r"([\w\-]+)\((.*)$", tail)
    if not m:
        return shape, tail.split("(")[0], ""
    return shape, m.group(1), m.group(2)


def _operands(args: str) -> list:
    """Operand names of an instruction (the text after ``opcode(``)."""
    depth, cur, out = 1, [], []
    for ch in args:
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
            if depth == 0:
                break
        cur.append(ch)
    for part in "".join(cur).split(","):
        m = re.search(r"%([\w.\-]+)\s*$", part.strip())
        if m:
            out.append(m.group(1))
    return out


def parse_hlo(text: str) -> dict:
    """``{computation: [(name, shape text, opcode, rest of the line), ...]}``
    and ``"__entry__"``: the entry computation's name."""
    comps, cur, entry = {}, None, None
    for line in text.splitlines():
        if cur is None:
            m = _COMP.match(line.strip())
            if m:
                cur = m.group(1)
                comps[cur] = []
                if line.lstrip().startswith("ENTRY"):
                    entry = cur
            continue
        if line.strip() == "}":
            cur = None
            continue
        m = _INSTR.match(line)
        if m:
            shape, op, rest = _split_shape(m.group(2))
            comps[cur].append((m.group(1), shape, op, rest))
    comps["__entry__"] = entry
    return comps


def _conv_flops(y, w, labels: str) -> int:
    """2 x |y| x |w| / output features: the forward convolution's
    multiply-adds (y: the output or its gradient, w: the kernel or its
    gradient; ``labels``: dim_labels, the output's after '->')."""
    out = labels.split("->")[-1] if labels else ""
    f = out.find("f")
    co = y[f] if 0 <= f < len(y) else 1
    return 2 * _count(y) * _count(w) // max(co, 1)


def _instr_flops(comps, shapes, name, shape, op, rest, memo) -> int:
    out = _dims(shape)
    if op in _FREE or not op:
        return 0
    called = re.findall(r"\b(?:calls|body)=%?([\w.\-]+)", rest)
    if op in ("fusion", "call", "while", "conditional", "async-start") and called:
        return sum(_comp_flops(comps, c, memo) for c in called)
    ops = _operands(rest)
    if op == "custom-call":
        target = re.search(r'custom_call_target="([^"]+)"', rest)
        target = target.group(1) if target else ""
        labels = re.search(r"dim_labels=([\w>\-]+)", rest)
        labels = labels.group(1) if labels else ""
        if target in _CONV_TARGETS:
            opd = [shapes.get(o, []) for o in ops]
            res = out[0] if out else []
            if target.endswith("BackwardInput"):
                y, w = opd[0] if opd else [], opd[1] if len(opd) > 1 else []
            elif target.endswith("BackwardFilter"):
                y, w = opd[1] if len(opd) > 1 else [], res
            else:
                y, w = res, opd[1] if len(opd) > 1 else []
            return _conv_flops(y, w, labels)
        if "gemm" in target or "matmul" in target:
            k = re.search(r'"lhs_contracting_dimensions":\[([^\]]*)\]', rest)
            lhs = shapes.get(ops[0], []) if ops else []
            idx = [int(x.strip('" ')) for x in k.group(1).split(",") if x.strip('" ')] \
                if k else []
            kk = _count(lhs[i] for i in idx if i < len(lhs)) if idx else 1
            return 2 * _count(out[0] if out else []) * kk
        if called:
            return sum(_comp_flops(comps, c, memo) for c in called)
        return 0
    if op == "convolution":
        labels = re.search(r"dim_labels=([\w>\-]+)", rest)
        w = shapes.get(ops[1], []) if len(ops) > 1 else []
        return _conv_flops(out[0] if out else [], w, labels.group(1) if labels else "")
    if op == "dot":
        k = re.search(r"lhs_contracting_dims=\{([0-9,]*)\}", rest)
        lhs = shapes.get(ops[0], []) if ops else []
        idx = [int(x) for x in k.group(1).split(",") if x] if k else []
        return 2 * _count(out[0] if out else []) * _count(lhs[i] for i in idx if i < len(lhs))
    if op in ("reduce", "reduce-window", "select-and-scatter", "scatter"):
        read = ops[:max(1, len(ops) // 2)] if op == "reduce" else ops[:1]
        return sum(_count(shapes.get(o, [])) for o in read)
    return sum(_count(d) for d in out)  # elementwise: one per element made


def _comp_flops(comps, comp, memo, names=None) -> int:
    if comp in memo and names is None:
        return memo[comp]
    shapes, total = {}, 0
    for name, shape, op, rest in comps.get(comp, ()):
        d = _dims(shape)
        shapes[name] = d[0] if d else []
        f = _instr_flops(comps, shapes, name, shape, op, rest, memo)
        total += f
        if names is not None:
            names[name] = f
    if names is None:
        memo[comp] = total
    return total


def hlo_flops(text: str) -> dict:
    """FLOPs of an optimized HLO module's text: ``total`` (the entry
    computation, through the computations it calls), ``remat`` (the
    entry's instructions XLA's rematerialization cloned: names ending in
    ``.remat``, ``.remat2``, ...) and ``remat_instructions`` (how many)."""
    comps = parse_hlo(text)
    entry = comps.pop("__entry__")
    if entry is None:
        raise ValueError("no ENTRY computation in the HLO text")
    per, memo = {}, {}
    total = _comp_flops(comps, entry, memo, per)
    remat = {n: f for n, f in per.items() if REMAT_NAME.search(n)}
    return {"total": total, "remat": sum(remat.values()), "remat_instructions": len(remat)}


def _text(compiled) -> str | None:
    try:
        return compiled.as_text()
    except Exception:  # a staged step's sequence of programs has no one text
        return None


# -- XLA's remat at a budget ------------------------------------------------------------
def compile_logged(step, compiler_options=None) -> tuple:
    """(compiled, what XLA logged to stderr while compiling)."""
    with targets._stderr_captured() as log:
        compiled = compile_step(step, compiler_options)
    text = log()
    targets._replay("".join(line for line in text.splitlines(keepends=True)
                            if "Can't reduce memory use" not in line))
    return compiled, text


def program_figures(step, compiler_options=None) -> dict:
    """``memory_analysis()`` figures, the footprint, the HLO FLOPs and what
    the remat pass said, of ``step`` compiled with ``compiler_options``."""
    compiled, log = compile_logged(step, compiler_options)
    m = analysis_dict(compiled)
    if m is None:  # the backend says nothing
        return {"temp": None, "argument": None, "output": None, "alias": None,
                "footprint": None, "flops": None, "cant_reduce": None}
    text = _text(compiled)
    flops = hlo_flops(text) if text else None
    said = CANT_REDUCE.search(log)
    return {**m, "footprint": footprint(m), "flops": flops,
            "cant_reduce": None if not said else
            {"limit": int(said.group(1)), "reached": int(said.group(2)),
             "from": int(said.group(3))}}


def at_budget(step, budget: int, plain: dict | None = None) -> dict:
    """XLA:GPU's own rematerialization of ``step`` (a step without
    recompute, compiled for a GPU target with a known memory) at
    ``budget`` bytes: the slop factor whose limit is at most the budget,
    that limit, the footprint XLA's program then holds, whether it holds
    the budget, whether XLA said it could not reach its limit, and the
    FLOPs of the instructions it recomputed as a share of the program
    without its remat (``plain``: ``program_figures(step)``, computed when
    not given)."""
    t = targets.get(step.target)
    if t.backend != "gpu" or t.memory is None:
        raise ValueError(f"XLA:GPU's remat needs a GPU target with a known memory, not "
                         f"{t.name}")
    if plain is None:
        plain = program_figures(step)
    io = io_bytes(plain)
    s = slop_factor_for(budget, t.memory, io)
    got = program_figures(step, {SLOP_OPTION: s})
    base = (plain["flops"] or {}).get("total")
    extra = (got["flops"] or {}).get("remat")
    limit = limit_for(s, t.memory, io)
    said = got["cant_reduce"]
    if said:  # XLA logs its limit plus the outputs' bytes: the formula checked
        said["limit_matches"] = said["limit"] - got["output"] == limit
    return {"slop_factor": s, "limit": limit, "io": io,
            "footprint": got["footprint"], "temp": got["temp"],
            "holds": got["footprint"] <= budget, "cant_reduce": got["cant_reduce"],
            "remat_instructions": (got["flops"] or {}).get("remat_instructions"),
            "extra_flops": extra, "flops_total": (got["flops"] or {}).get("total"),
            "flops_plain": base,
            "extra_flops_share": None if extra is None or not base else extra / base}
