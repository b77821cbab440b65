"""Plan vs XLA: what the compiled program really holds.

    import symgraph as sg
    from symgraph import xla
    p = sg.plan(net, {'data': (64, 3, 224, 224)}, train=True)
    step = xla.training_step(p)        # the step Module.fit compiles, one device
    xla.memory(step)                   # memory_analysis() as a dict
    step.info                          # which program: devices, optimizer, measures
    b = xla.memory_breakdown(step, graph=p)              # what XLA's temp holds
    print(b.table())
    xla.training_step(p, measures='none')                # the plain lowering

``training_step`` and ``inference_step`` are not programs of their own:
they build the Module's ``TrainPrograms`` for the plan's net and return the
jitted program a Module would run, with ShapeDtypeStruct arguments. The
memory measures (``symgraph.measures``) are chosen by the same rule a
Module uses unless named.

``memory_breakdown`` compiles with XLA's dump switched on (a temporary
folder, through ``compiler_options``: a ``Compiled`` object does not carry
its buffer assignment in a readable form) and reads three of the files XLA
writes: the buffer assignment (which values share the temp allocation, at
which offsets), the live ranges (when each value lives in the schedule XLA
chose) and the optimized HLO (what each value is). At the step where the
temp allocation's live bytes peak it classifies every live value by

- ``kind``: ``layout`` (a transpose or copy: XLA's CPU convolutions and
  dots want other layouts than NCHW), ``convolution``, ``matmul``,
  ``pooling``, ``normalization``, ``reduction``, ``rng``, ``fusion``
  (other fused elementwise work), ``other``;
- ``role``: ``kept for backward`` (made by the forward, alive after the
  backward began), ``forward``, ``backward``, ``update`` (the optimizer),
  ``unknown`` (XLA kept no metadata for it).

The symgraph node a value comes from is read from the HLO metadata: the
lowering runs every node inside ``jax.named_scope(node.name)``.

``best_step`` compiles a list of measure sets and keeps the one with the
least temp (benchmarks: how far the rule's choice is from the best).
docs/memory.md ("Plan vs XLA") has the measured effect of each measure.
"""
from __future__ import annotations

import glob
import os
import re
import tempfile
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp

from . import measures as measures_mod
from .errors import SymgraphError
from .graph import Graph
from .lower import lower
from .train.step import UPDATE_SCOPE

MIB = 2 ** 20
# the measures moved to symgraph.measures; these names stay for the benchmarks
MEASURES = measures_mod.MEASURES
TRAIN_CANDIDATES = measures_mod.TRAIN_CANDIDATES
INFER_CANDIDATES = measures_mod.INFER_CANDIDATES
measures_label = measures_mod.label


class XlaError(SymgraphError):
    """XLA's figures or dump could not be had or read."""


# --------------------------------------------------------------------------
# programs: the Module's own, seen from outside; plain JAX for comparison
# --------------------------------------------------------------------------
def _structs(graph: Graph, inferred, names) -> dict:
    out = {}
    for n in graph.variables:
        if n.name in names:
            eid = graph.entry_id_of_node(n)
            out[n.name] = jax.ShapeDtypeStruct(tuple(inferred.shapes[eid]),
                                               jnp.dtype(inferred.dtypes[eid]))
    return out


def _split(graph: Graph, wrt) -> tuple:
    """(parameter names, aux names, batch names) of a graph's variables."""
    aux = set(graph.list_auxiliary_states())
    batch = [n.name for n in graph.variables if n.name not in aux and n.name not in wrt]
    return list(wrt), graph.list_auxiliary_states(), batch


def _sgd(params: dict, grads: dict, lr: float) -> dict:
    with jax.named_scope(UPDATE_SCOPE):
        return {k: params[k] - lr * grads[k] for k in params}


@dataclass
class Step:
    """A program and what to call it with.

    ``fn`` is a function, or (``jitted``) the jitted program itself -- the
    one a Module runs; ``args`` are ShapeDtypeStructs for ``lower()``;
    ``compiler_options`` go to ``Lowered.compile``; ``info`` says which
    program it is (devices, optimizer, measures).
    """

    fn: object
    args: tuple
    donate: tuple = ()
    compiler_options: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    jitted: bool = False

    def jit(self):
        if self.jitted:
            return self.fn
        return jax.jit(self.fn, donate_argnums=self.donate,
                       compiler_options=self.compiler_options or None)

    def lower(self):
        return self.jit().lower(*self.args)


# the optimizer reports compile by default: what the targets name
DEFAULT_OPTIMIZER = ("sgd", (("momentum", 0.9),))
TRAIN_STEP_ARGS = ("params", "states", "aux", "fixed", "batch", "lr", "t", "key")
INFER_STEP_ARGS = ("params", "aux", "fixed", "batch", "t", "key")


def _program_parts(plan):
    """(forward graph, trainable, data names, label names, shapes) of a Plan."""
    g = Graph(plan.graph.outputs[:plan.num_forward_outputs])
    wrt = _gradient_names(plan) if plan.train else []
    batch = [n for n in g.list_arguments() if n not in wrt]
    if not plan.train:
        batch = [n for n in batch if _is_batch(n)]
    labels = [n for n in batch if n.endswith("label")]
    data = [n for n in batch if n not in labels]
    return g, wrt, data, labels


def plan_recompute(plan) -> list:
    """The forward node names a plan recomputes (a budgeted plan's
    ``recompute`` entries; none for other plans)."""
    return [r["name"] if isinstance(r, dict) else r
            for r in getattr(plan, "recompute", None) or ()]


def _programs(plan, measures, compute_dtype="float32", recompute=()):
    from .parallel.data_parallel import DeviceSet
    from .symbol import Symbol
    from .train.step import TrainPrograms
    g, wrt, data, labels = _program_parts(plan)
    fixed = [n for n in g.list_arguments() if n not in wrt and n not in data + labels]
    progs = TrainPrograms(Symbol(g.outputs), data, labels, wrt, fixed,
                          g.list_auxiliary_states(), DeviceSet(None), compute_dtype,
                          memory_measures=measures, recompute=recompute)
    inf = plan.inferred
    # the forward graph's variables are the plan graph's: same inferred shapes
    structs = _structs(plan.graph, inf, {n.name for n in g.variables})
    return progs, g, structs, wrt, data + labels, fixed


def _signature(structs: dict, names) -> tuple:
    return tuple((k, tuple(structs[k].shape), str(structs[k].dtype)) for k in names)


def training_step(plan, optimizer=None, measures="auto", recompute=None) -> Step:
    """The training step ``Module.fit`` runs for a training ``Plan``'s net,
    on one device: ``TrainPrograms.fused`` -- forward, the explicit
    backward, the optimizer update (SGD with momentum 0.9 unless
    ``optimizer``, an ``sg.optimizer.Optimizer``, is given), parameters,
    optimizer state and aux states donated -- lowered with ``measures``
    ('auto': the rule a Module uses; 'none'; or names). Not a second
    implementation: the same object a Module compiles. Its arguments are
    ``TRAIN_STEP_ARGS``. ``recompute``: forward node names computed again
    in the backward; default: those the plan recomputes (a budgeted
    plan), as a Module under that budget runs it."""
    from .train import optimizer as opt_mod
    if not plan.train:
        raise XlaError("training_step needs a training plan (plan(..., train=True))")
    if recompute is None:
        recompute = plan_recompute(plan)
    progs, g, structs, wrt, batch, fixed = _programs(plan, measures, recompute=recompute)
    bsz = structs[batch[0]].shape[0] if batch else 1
    if optimizer is None:
        name, params = DEFAULT_OPTIMIZER
        optimizer = opt_mod.create(name, learning_rate=0.01, rescale_grad=1.0 / bsz,
                                   **dict(params))
    prog = progs.fused(_signature(structs, batch), optimizer)
    params = {k: structs[k] for k in wrt}
    states = {k: jax.eval_shape(lambda w, k=k: tuple(optimizer.create_state(k, w)), v)
              for k, v in params.items()}
    scalar = jax.ShapeDtypeStruct((), jnp.float32)
    args = (params, states, {k: structs[k] for k in g.list_auxiliary_states()},
            {k: structs[k] for k in fixed}, {k: structs[k] for k in batch}, scalar, scalar,
            jax.random.key(0))
    ms = progs.measures(True)
    return Step(prog, args, (0, 1, 2), measures_mod.compiler_options(ms),
                {"program": "Module.fit step", "devices": 1,
                 "backend": jax.default_backend(), "optimizer": optimizer.describe(),
                 "measures": list(ms), "recompute": len(recompute)}, jitted=True)


def inference_step(plan, measures="auto") -> Step:
    """The inference program ``Module.predict``/``score`` run for an
    inference ``Plan``'s net, on one device (``TrainPrograms.infer``).
    Its arguments are ``INFER_STEP_ARGS``."""
    if plan.train:
        raise XlaError("inference_step needs an inference plan (train=False)")
    progs, g, structs, _, batch, fixed = _programs(plan, measures)
    prog = progs.infer(_signature(structs, batch))
    scalar = jax.ShapeDtypeStruct((), jnp.float32)
    args = ({}, {k: structs[k] for k in g.list_auxiliary_states()},
            {k: structs[k] for k in fixed}, {k: structs[k] for k in batch}, scalar,
            jax.random.key(0))
    ms = progs.measures(False)
    return Step(prog, args, (), measures_mod.compiler_options(ms),
                {"program": "Module.predict", "devices": 1,
                 "backend": jax.default_backend(), "measures": list(ms)}, jitted=True)


def plan_step(plan, measures="auto") -> Step:
    """The program a Plan's XLA figures come from: ``training_step`` for a
    training plan, ``inference_step`` otherwise."""
    return (training_step if plan.train else inference_step)(plan, measures=measures)


def plan_memory(plan, measures="auto") -> dict | None:
    """XLA's ``memory_analysis()`` of the program a Module runs for the
    plan's net (``plan_step``: training, the step ``fit`` runs on one
    device, SGD with momentum; inference, the program ``predict`` runs):
    temp, argument, output and alias bytes, and ``program`` (what was
    compiled: devices, optimizer, measures); None when the backend gives
    nothing (temp, argument and output all 0 or unknown), a field it does
    not know is None. ``measures``: 'auto' (the rule a Module uses),
    'none', or names. ``plan.xla = plan_memory(plan)`` puts the figures in
    the plan's report and JSON."""
    step = plan_step(plan, measures)
    m = memory(step)
    if m is None or not any(m[k] for k in ("temp", "argument", "output")):
        return None
    return {**{k: m[k] for k in ("temp", "argument", "output", "alias")},
            "program": step.info}


def _gradient_names(plan) -> list:
    """The parameter each gradient output belongs to: ``build_gradient``
    appends them in ``wrt`` order, and the plan's ``wrt`` is the default."""
    from .memory.pipeline import default_wrt
    from .passes.gradient import HEAD_GRAD_SUFFIX
    g, inf = plan.graph, plan.inferred
    wrt = [n for n in default_wrt(g) if not n.endswith(HEAD_GRAD_SUFFIX)]
    grads = g.outputs[plan.num_forward_outputs:]
    shape = {n.name: inf.shapes[g.entry_id_of_node(n)] for n in g.variables}
    if len(wrt) != len(grads) or any(shape[w] != inf.shapes[g.entry_id(e)]
                                     for w, e in zip(wrt, grads)):
        raise XlaError("training_step: the plan's gradients are not those of the default "
                       "parameters (plan with the default wrt)")
    return wrt


def _is_batch(name: str) -> bool:
    return name == "data" or name.endswith("label")


def plain_jax_step(net, shapes: dict, lr: float = 0.01, train: bool = True,
                   measures=()) -> Step:
    """The same net as plain JAX would train it: ``jax.value_and_grad`` of
    symgraph's forward lowering, then SGD. Loss heads become their losses
    (SoftmaxOutput: cross-entropy from the logits, LinearRegressionOutput:
    squared error, as the heads' gradients say); any other output is summed
    (a head gradient of ones). ``measures``: only ``scheduler`` and
    ``donate`` apply."""
    from .memory.pipeline import as_graph, default_wrt
    from .passes.infer import infer_shapes
    ms = set(measures or ())
    if not ms <= {"scheduler", "donate"}:
        raise XlaError(f"plain_jax_step takes the measures scheduler and donate, not "
                       f"{sorted(ms - {'scheduler', 'donate'})}")
    g = as_graph(net)
    inf = infer_shapes(g, dict(shapes))
    heads, losses = [], []
    for e in g.outputs:  # a loss head's loss is computed from its data input
        if e.node.op is not None and e.node.op.is_loss:
            heads.append(e.node.inputs[0])
            losses.append((e.node.op.name, e.node.params, e.node.inputs[1]))
        else:
            heads.append(e)
            losses.append(None)
    labels = [x[2] for x in losses if x is not None]
    fwd = Graph(heads + labels)
    run = lower(fwd, train)
    wrt = default_wrt(g)
    params, aux, batch = _split(g, wrt)

    def forward(p, a, b, key):
        (outs, new_aux) = run({**p, **a, **b}, key)
        outs, labs = outs[:len(heads)], iter(outs[len(heads):])
        preds, loss = [], 0.0
        for y, how in zip(outs, losses):
            if how is None:
                preds.append(y)
                loss = loss + jnp.sum(y)
                continue
            op, prm, _ = how
            lab = next(labs)
            if op == "SoftmaxOutput":
                logp = jax.nn.log_softmax(y, axis=1 if prm.multi_output else -1)
                k = y.shape[1 if prm.multi_output else -1]
                onehot = jax.nn.one_hot(lab.astype(jnp.int32), k, dtype=y.dtype,
                                        axis=1 if prm.multi_output else -1)
                loss = loss - prm.grad_scale * jnp.sum(onehot * logp)
                preds.append(jnp.exp(logp))
            elif op == "LinearRegressionOutput":
                per = max(1, y.size // y.shape[0])
                loss = loss + prm.grad_scale / per * 0.5 * jnp.sum(
                    (y - lab.reshape(y.shape)) ** 2)
                preds.append(y)
            else:
                raise XlaError(f"plain_jax_step: no loss for the head op {op}")
        return loss, (preds, new_aux)

    args = (_structs(g, inf, params), _structs(g, inf, aux), _structs(g, inf, batch),
            jax.random.key(0))
    if not train:
        def infer(p, a, b, key):
            return forward(p, a, b, key)[1][0]
        return Step(infer, args, (), measures_mod.compiler_options(ms & {'scheduler'}))

    def step(p, a, b, key):
        (_, (preds, new_aux)), grads = jax.value_and_grad(forward, has_aux=True)(p, a, b, key)
        return preds, _sgd(p, grads, lr), {**a, **new_aux}

    return Step(step, args, (0, 1) if "donate" in ms else (), measures_mod.compiler_options(ms & {'scheduler'}))


def best_step(make, candidates) -> tuple:
    """``(measures, Step, memory dict, {measures: temp})``: the candidate
    measure set whose compiled program has the least temp (the first of
    equals), and every candidate's temp; ``make(measures) -> Step``."""
    best, temps = None, {}
    for ms in candidates:
        step = make(tuple(ms))
        m = memory(step)
        if m is None or m["temp"] is None:
            raise XlaError("the backend gives no memory_analysis(): nothing to choose by")
        temps[tuple(ms)] = m["temp"]
        if best is None or m["temp"] < best[2]["temp"]:
            best = (tuple(ms), step, m)
    if best is None:
        raise XlaError("best_step: no candidates")
    return best + (temps,)


# --------------------------------------------------------------------------
# figures
# --------------------------------------------------------------------------
def analysis_dict(compiled) -> dict | None:
    """``memory_analysis()`` as a dict (bytes; None where the backend says
    nothing)."""
    ma = compiled.memory_analysis()
    if ma is None:
        return None
    out = {}
    for k in ("temp", "argument", "output", "alias", "generated_code"):
        v = getattr(ma, f"{k}_size_in_bytes", None)
        out[k] = int(v) if v is not None and v >= 0 else None
    return out


def footprint(m: dict) -> int:
    """Bytes the step needs on the device: arguments + outputs not aliased
    to a donated argument + temp."""
    return m["argument"] + m["output"] - (m["alias"] or 0) + m["temp"]


def memory(step_or_lowered, compiler_options: dict | None = None) -> dict | None:
    """Compiles (a ``Step`` or a ``jax.stages.Lowered``) and returns
    ``analysis_dict``."""
    lowered, opts = _lowered(step_or_lowered, compiler_options)
    return analysis_dict(lowered.compile(opts or None))


def _lowered(x, compiler_options):
    if isinstance(x, Step):
        return x.lower(), {**x.compiler_options, **(compiler_options or {})}
    return x, dict(compiler_options or {})


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
    lowered, opts = _lowered(step_or_lowered, compiler_options)
    with tempfile.TemporaryDirectory(prefix="symgraph-xla-") as d:
        compiled = lowered.compile({**opts, **DUMP_OPTIONS, "xla_dump_to": d})
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
