"""The step views: the jitted programs a Module runs for a plan's net
(``training_step``, ``inference_step``, ``plan_step``), seen from outside
with ShapeDtypeStruct arguments, and a plain-JAX step of the same net to
compare with (``plain_jax_step``). See the package docstring.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import jax
import jax.numpy as jnp

from .. import measures as measures_mod
from .. import targets
from ..errors import SymgraphError
from ..graph import Graph
from ..lower import lower
from ..passes.cast import without_casts
from ..train.step import UPDATE_SCOPE

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
    program it is (devices, optimizer, measures, target); ``target``: the
    ``symgraph.targets.Target`` it is compiled for (None: JAX's default
    backend).
    """

    fn: object
    args: tuple
    donate: tuple = ()
    compiler_options: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    jitted: bool = False
    target: object = None

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
    """(forward graph, trainable, data names, label names) of a Plan: the
    graph the Module compiles, which casts in its feeds where the plan has
    the casts of a compute dtype as nodes."""
    g = without_casts(Graph(plan.graph.outputs[:plan.num_forward_outputs]))
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


def compute_dtype_of(plan, compute_dtype=None) -> str:
    """The dtype the program computes in: ``compute_dtype`` where given,
    else the one the plan was made in (``plan(..., compute_dtype=)``)."""
    if compute_dtype is None:
        compute_dtype = (plan.options or {}).get("compute_dtype") or "float32"
    if compute_dtype not in ("float32", "float64", "bfloat16", "float16"):
        raise XlaError(f"compute_dtype={compute_dtype!r}; use float32, bfloat16 or float16")
    return compute_dtype


def _programs(plan, measures, compute_dtype=None, recompute=(), backend=None):
    from ..parallel.data_parallel import DeviceSet
    from ..symbol import Symbol
    from ..train.step import TrainPrograms
    g, wrt, data, labels = _program_parts(plan)
    compute_dtype = compute_dtype_of(plan, compute_dtype)
    fixed = [n for n in g.list_arguments() if n not in wrt and n not in data + labels]
    progs = TrainPrograms(Symbol(g.outputs), data, labels, wrt, fixed,
                          g.list_auxiliary_states(), DeviceSet(None), compute_dtype,
                          memory_measures=measures, recompute=recompute, backend=backend)
    inf = plan.inferred
    # the forward graph's variables are the plan graph's: same inferred shapes
    structs = _structs(plan.graph, inf, {n.name for n in g.variables})
    return progs, g, structs, wrt, data + labels, fixed


def _signature(structs: dict, names) -> tuple:
    return tuple((k, tuple(structs[k].shape), str(structs[k].dtype)) for k in names)


def training_step(plan, optimizer=None, measures="auto", recompute=None,
                  segments="auto", target=None, compute_dtype=None) -> Step:
    """The training step ``Module.fit`` runs for a training ``Plan``'s net,
    on one device: ``TrainPrograms.fused`` -- forward, the explicit
    backward, the optimizer update (SGD with momentum 0.9 unless
    ``optimizer``, an ``sg.optimizer.Optimizer``, is given), parameters,
    optimizer state and aux states donated -- lowered with ``measures``
    ('auto': the rule a Module uses; 'none'; or names). Not a second
    implementation: the same object a Module compiles. Its arguments are
    ``TRAIN_STEP_ARGS``. ``recompute``: forward node names computed again
    in the backward; default: those the plan recomputes (a budgeted
    plan), as a Module under that budget runs it. ``segments``: the step
    runs staged (``TrainPrograms.staged``, a program per segment) in that
    many segments, True for the default count, None as one fused program;
    'auto', as a Module under a budget: where it recomputes, whichever of
    the two XLA's figures say holds less. ``target``: the device it is
    compiled for (``symgraph.targets.get``: 'cpu' by default, 'h100', a
    description file, 'gpu'); the measure rule follows its backend.
    ``compute_dtype``: the Module's (float32, bfloat16, float16); default
    the plan's (``compute_dtype_of``)."""
    from ..train import optimizer as opt_mod
    target = targets.get(target)
    if not plan.train:
        raise XlaError("training_step needs a training plan (plan(..., train=True))")
    if recompute is None:
        recompute = plan_recompute(plan)
    progs, g, structs, wrt, batch, fixed = _programs(plan, measures, compute_dtype,
                                                     recompute, target.backend)
    bsz = structs[batch[0]].shape[0] if batch else 1
    if optimizer is None:
        name, params = DEFAULT_OPTIMIZER
        optimizer = opt_mod.create(name, learning_rate=0.01, rescale_grad=1.0 / bsz,
                                   **dict(params))
    if segments == "auto" and not recompute:
        segments = None
    progs.segments = segments
    prog = progs.step(_signature(structs, batch), optimizer)
    params = {k: structs[k] for k in wrt}
    states = {k: jax.eval_shape(lambda w, k=k: tuple(optimizer.create_state(k, w)), v)
              for k, v in params.items()}
    scalar = jax.ShapeDtypeStruct((), jnp.float32)
    args = (params, states, {k: structs[k] for k in g.list_auxiliary_states()},
            {k: structs[k] for k in fixed}, {k: structs[k] for k in batch}, scalar, scalar,
            jax.random.key(0))
    ms = progs.measures(True)
    return Step(prog, args, (0, 1, 2), measures_mod.compiler_options(ms, target.backend),
                {"program": "Module.fit step", "devices": 1,
                 "backend": target.backend, "target": target.to_json(),
                 "optimizer": optimizer.describe(), "measures": list(ms),
                 "recompute": len(recompute), "segments": segments,
                 "compute_dtype": progs.compute_dtype or "float32"}, jitted=True, target=target)


def inference_step(plan, measures="auto", target=None, compute_dtype=None) -> Step:
    """The inference program ``Module.predict``/``score`` run for an
    inference ``Plan``'s net, on one device (``TrainPrograms.infer``),
    compiled for ``target`` (see ``training_step``). Its arguments are
    ``INFER_STEP_ARGS``."""
    if plan.train:
        raise XlaError("inference_step needs an inference plan (train=False)")
    target = targets.get(target)
    progs, g, structs, _, batch, fixed = _programs(plan, measures, compute_dtype,
                                                   backend=target.backend)
    prog = progs.infer(_signature(structs, batch))
    scalar = jax.ShapeDtypeStruct((), jnp.float32)
    args = ({}, {k: structs[k] for k in g.list_auxiliary_states()},
            {k: structs[k] for k in fixed}, {k: structs[k] for k in batch}, scalar,
            jax.random.key(0))
    ms = progs.measures(False)
    return Step(prog, args, (), measures_mod.compiler_options(ms, target.backend),
                {"program": "Module.predict", "devices": 1,
                 "backend": target.backend, "target": target.to_json(),
                 "measures": list(ms), "compute_dtype": progs.compute_dtype or "float32"},
                jitted=True, target=target)


def plan_step(plan, measures="auto", target=None, compute_dtype=None) -> Step:
    """The program a Plan's XLA figures come from: ``training_step`` for a
    training plan, ``inference_step`` otherwise, compiled for ``target``."""
    return (training_step if plan.train else inference_step)(
        plan, measures=measures, target=target, compute_dtype=compute_dtype)


def _gradient_names(plan) -> list:
    """The parameter each gradient output belongs to: ``build_gradient``
    appends them in ``wrt`` order, and the plan's ``wrt`` is the default."""
    from ..memory.pipeline import default_wrt
    from ..passes.gradient import HEAD_GRAD_SUFFIX
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
    from ..memory.pipeline import as_graph, default_wrt
    from ..passes.infer import infer_shapes
    ms = set(measures or ())
    if not ms <= {"scheduler", "donate"}:
        raise XlaError(f"plain_jax_step takes the measures scheduler and donate, not "
                       f"{sorted(ms - {'scheduler', 'donate'})}")
    g = as_graph(net)
    inf = infer_shapes(g, dict(shapes))
    heads, losses = [], []
    for e in g.outputs:  # a loss head's loss is computed from its data input
        if e.node.op is not None and e.node.op.is_loss:
            if e.node.op.name not in ("SoftmaxOutput", "LinearRegressionOutput"):
                raise XlaError(f"plain_jax_step: no loss for the head op {e.node.op.name}")
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
                # MXNet's multi_output gradient is divided by the positions
                per = max(1, y.size // (y.shape[0] * k)) if prm.multi_output else 1
                loss = loss - prm.grad_scale / per * jnp.sum(onehot * logp)
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
