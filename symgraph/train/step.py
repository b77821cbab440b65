"""The compiled training programs of a Module.

``TrainPrograms`` turns a symbol into jitted programs over a ``DeviceSet``:

- ``fused``: forward, backward and the optimizer update as ONE XLA program
  (what ``fit`` runs each batch). Parameters, optimizer state and aux
  states are donated, so XLA updates them in place.
- ``forward_train`` / ``backward`` / ``update``: the same computation split
  the way MXNet's ``forward(is_train=True)``, ``backward()`` and
  ``update()`` are; the forward returns the tensors the backward reads
  (as the Executor does), so nothing is computed twice.
- ``infer``: the forward in inference mode (``score``, ``predict``).

The gradient is the explicit backward graph of ``passes.gradient`` lowered
by ``lower.lower`` -- the graph the memory planner plans -- not ``jax.grad``
of the forward. Loss heads start the backward themselves; any other output
gets a head gradient of ones (a scalar output is taken to be a mean over
the batch, so on n devices its head gradient is 1/n).

Mixed precision: with ``compute_dtype='bfloat16'`` (or float16) the
float32 master weights, aux states and float inputs are cast down inside
the program, the gradients come back cast up to float32, and the optimizer
updates the float32 weights. ``loss_scale`` multiplies the loss heads'
``grad_scale`` (and the head gradients) and divides the gradients again,
for float16. ``loss_scale='dynamic'`` (or a ``DynamicLossScale``) keeps the
scale in the optimizer state instead and changes it inside the compiled
step: a step whose gradients are not all finite is skipped and halves the
scale, ``growth_interval`` finite steps in a row double it.
"""
from __future__ import annotations

import copy
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from .. import measures as measures_mod
from ..dtypes import is_float
from ..graph import Entry, Graph, Node
from ..ops.loss import softmax_output_over_devices
from ..ops.registry import OpDef
from ..parallel.data_parallel import BATCH_AXIS, P, DeviceSet
from ..passes.gradient import TrainingSplit
from ..passes.infer import infer_shapes
from . import TrainError

LOW_PRECISION = ("bfloat16", "float16")
# the optimizer's part of a step is named so in XLA's metadata (xla reads it)
UPDATE_SCOPE = "optimizer_update"
# the optimizer-state entry of the dynamic loss scale: (scale, finite steps
# since the last change), float32 and int32 arrays of shape (1,) so that
# save_optimizer_states writes them like any state (MXNet's format has no 0-d)
LOSS_SCALE_STATE = "__loss_scale__"
# the graph variable the dynamic scale is fed through
LOSS_SCALE_VAR = "__loss_scale__"


@dataclasses.dataclass(frozen=True)
class DynamicLossScale:
    """Dynamic loss scaling for float16: the scale starts at ``init_scale``;
    a step whose gradients are not all finite is skipped (weights, optimizer
    state and aux states stay as they were) and divides the scale by
    ``factor`` (never below 1); after ``growth_interval`` finite steps in a
    row the scale is multiplied by ``factor``."""

    init_scale: float = 2.0 ** 15
    growth_interval: int = 2000
    factor: float = 2.0

    def __post_init__(self):
        if not (self.init_scale >= 1 and self.growth_interval >= 1 and self.factor > 1):
            raise TrainError(f"{self}: needs init_scale >= 1, growth_interval >= 1 and "
                             f"factor > 1")

    def initial_state(self) -> tuple:
        return (np.full((1,), self.init_scale, np.float32), np.zeros((1,), np.int32))

    def next_state(self, state: tuple, finite) -> tuple:
        """The state after a step whose gradients were (not) all finite."""
        scale, good = state
        good = jnp.where(finite, good + 1, 0)
        grow = good >= self.growth_interval
        scale = jnp.where(finite, jnp.where(grow, scale * self.factor, scale),
                          jnp.maximum(scale / self.factor, 1.0))
        return scale.astype(jnp.float32), jnp.where(grow, 0, good).astype(jnp.int32)


def loss_scaling(loss_scale) -> tuple[float, DynamicLossScale | None]:
    """``(static scale, dynamic scaling or None)`` from a Module's
    ``loss_scale``: a positive number, 'dynamic' or a DynamicLossScale."""
    if isinstance(loss_scale, DynamicLossScale):
        return 1.0, loss_scale
    if isinstance(loss_scale, str):
        if loss_scale != "dynamic":
            raise TrainError(f"loss_scale={loss_scale!r}; use a positive number, 'dynamic' "
                             f"or sg.mod.DynamicLossScale(...)")
        return 1.0, DynamicLossScale()
    if not float(loss_scale) > 0:
        raise TrainError(f"loss_scale must be positive, got {loss_scale}")
    return float(loss_scale), None


def _scale_in_float32(p, ctx, x, scale):
    # at least float32, so that a scale past float16's range (65504) still
    # works (an overflow of the product gives inf, which halves the scale)
    wide = jnp.promote_types(x.dtype, jnp.float32)
    return (x.astype(wide) * scale.astype(wide)).astype(x.dtype)


# not registered: it exists only in the gradient graphs built here
SCALE_BY = OpDef(name="_loss_scale_mul", lower=_scale_in_float32,
                 arguments=("data", "scale"),
                 infer_shape=lambda p, s: ([s[0], s[1] if s[1] is not None else ()], [s[0]]),
                 category="elementwise")


def scaled_gradient_op(op: OpDef, scale_var: Node) -> OpDef:
    """A copy of loss op ``op`` whose gradient rule multiplies the gradients
    it starts by the variable ``scale_var`` (fed at run time, so the scale
    can change without recompiling)."""
    rule = op.gradient

    def gradient(g, node, ograds):
        out = []
        for gr in rule(g, node, ograds):
            if gr is not None:
                mul = Node(SCALE_BY, g.unique(f"{node.name}_loss_scale"), {},
                           [gr, Entry(scale_var, 0)])
                gr = Entry(mul, 0)
            out.append(gr)
        return out

    new = copy.copy(op)
    new.gradient = gradient
    return new


def scale_loss_heads(graph: Graph, scale_of, loss_op=None) -> Graph:
    """A copy of ``graph`` whose loss nodes have ``grad_scale`` multiplied by
    ``scale_of(node)`` and, with ``loss_op``, the op ``loss_op(op)`` (nodes
    left as they were are kept; nodes downstream of a rewritten one are
    rebuilt). The forward computation is unchanged."""
    def scaled(n: Node, inputs: list):
        if n.op is None or not n.op.is_loss:
            return None
        s = scale_of(n)
        op = n.op if loss_op is None else loss_op(n.op)
        if s == 1.0 and op is n.op:
            return None
        attrs = dict(n.attrs)
        if s != 1.0:
            if "grad_scale" not in n.op.attrs:
                raise TrainError(
                    f"loss node '{n.name}' ({n.op.name}) has no grad_scale attribute, so "
                    f"its gradient cannot be scaled by {s:g} (needed for loss scaling or "
                    f"for batch normalization over several devices)")
            attrs["grad_scale"] = repr(float(n.params.grad_scale) * s)
        return Node(op, n.name, attrs, inputs)
    return graph.rewrite(scaled)


class TrainPrograms:
    """The jitted programs for one symbol, parameter split and device set.

    ``trainable``: parameters that get gradients and updates; ``fixed``:
    arguments that are neither data nor trained; ``aux``: aux states;
    ``data_names``/``label_names``: the batch. Programs are built lazily per
    batch signature (names, shapes, dtypes).
    """

    def __init__(self, symbol, data_names, label_names, trainable, fixed, aux,
                 devices: DeviceSet, compute_dtype: str = "float32", loss_scale: float = 1.0,
                 memory_measures="auto", recompute=(), segments=None,
                 backend: str | None = None):
        self.symbol = symbol
        self.graph: Graph = symbol.graph()
        self.data_names = list(data_names)
        self.label_names = list(label_names)
        self.trainable = list(trainable)
        self.fixed = list(fixed)
        self.aux = list(aux)
        self.devices = devices
        self.compute_dtype = None if compute_dtype in (None, "float32", "float64") else \
            str(jnp.dtype(compute_dtype))
        if self.compute_dtype is not None and self.compute_dtype not in LOW_PRECISION:
            raise TrainError(f"compute_dtype={compute_dtype!r}; use float32, bfloat16 or "
                             f"float16")
        # a static scale is baked into the graph; a dynamic one is fed
        self.loss_scale, self.dynamic = loss_scaling(loss_scale)
        self._scale_var = Node(None, LOSS_SCALE_VAR) if self.dynamic else None
        self.n_out = len(self.graph.outputs)
        self._measures_spec = measures_mod.parse(memory_measures)
        self._cache: dict = {}
        self._reduce = devices.sum_over_devices
        self.recompute = tuple(recompute or ())
        # the step ``step`` gives: None fused, True or a count staged, 'auto' the smaller
        self.segments = segments
        # the backend the programs are compiled for (None: JAX's default);
        # the measure rule and the compiler options follow it
        self.backend = backend

    def set_recompute(self, names) -> None:
        """Recompute these forward nodes from now on; programs are rebuilt."""
        names = tuple(names or ())
        if names != self.recompute:
            self.recompute = names
            self._cache = {k: v for k, v in self._cache.items() if k[0] in ("outs", "infer")}

    def set_reducer(self, reduce) -> None:
        """How gradients are combined across devices inside the programs
        (a KVStore's ``step_reducer``); compiled programs are rebuilt."""
        if reduce is not self._reduce:
            self._reduce = reduce
            self._cache = {k: v for k, v in self._cache.items()
                           if k[0] not in ("fused", "bwd", "staged", "smaller")}

    # -- graphs -----------------------------------------------------------------
    def _train_graph(self) -> Graph:
        n = self.devices.n

        def scale_of(node):
            s = self.loss_scale
            norm = node.params.get("normalization") if node.params else None
            if n > 1 and norm == "batch":
                s /= n  # each device normalizes by its own batch: the sum needs 1/n
            return s

        def loss_op(op):
            # 'valid' counts differ per device: divide by their sum over the devices
            if n > 1 and op.name == "SoftmaxOutput":
                op = softmax_output_over_devices(BATCH_AXIS)
            if self.dynamic is not None:
                op = scaled_gradient_op(op, self._scale_var)
            return op
        return scale_loss_heads(self.graph, scale_of, loss_op)

    def _gradient(self, wrt) -> TrainingSplit:
        key = ("grad", tuple(wrt), self.recompute)
        if key not in self._cache:
            self._cache[key] = TrainingSplit(self._train_graph(), list(wrt), self.recompute)
        return self._cache[key]

    def measures(self, train: bool) -> tuple:
        """The memory measures the training (or inference) programs use."""
        return measures_mod.resolve(self._measures_spec, self.graph, train,
                                    recompute=bool(self.recompute), backend=self.backend)

    def _lower(self, graph: Graph, train: bool):
        return measures_mod.lower_measured(graph, train, self.measures(train), self.backend)

    def _jit(self, fn, train: bool, **kwargs):
        return measures_mod.jit(fn, self.measures(train), self.backend, **kwargs)

    # -- shapes -----------------------------------------------------------------------
    def local_shapes(self, sig) -> dict:
        """Per-device shapes of the batch inputs of signature ``sig``."""
        n = self.devices.n
        return {name: (shape[0] // n,) + tuple(shape[1:]) for name, shape, _ in sig}

    def _outputs_info(self, sig):
        """Per output: (per-device shape, has a batch axis)."""
        key = ("outs", sig)
        if key not in self._cache:
            local = self.local_shapes(sig)
            inf = infer_shapes(self.graph, local, partial=True)
            b = next(iter(local.values()))[0] if local else None
            info = []
            for e in self.graph.outputs:
                s = inf.shapes[self.graph.entry_id(e)]
                if s is None:
                    raise TrainError(f"cannot infer the shape of output '{e!r}' from the "
                                     f"batch shapes {local}")
                info.append((tuple(s), len(s) > 0 and s[0] == b))
            self._cache[key] = info
        return self._cache[key]

    def out_specs(self, sig):
        return [P(BATCH_AXIS) if batched else P() for _, batched in self._outputs_info(sig)]

    # -- pieces used inside the programs ------------------------------------------------
    def _cast(self, x):
        if self.compute_dtype is not None and is_float(x.dtype):
            return x.astype(self.compute_dtype)
        return x

    def _feeds(self, params, fixed, aux, batch) -> dict:
        feeds = {k: self._cast(v) for k, v in params.items()}
        feeds.update({k: self._cast(v) for k, v in fixed.items()})
        feeds.update({k: self._cast(v) for k, v in aux.items()})
        for k, v in batch.items():
            feeds[k] = self._cast(v) if k not in self.label_names else v
        return feeds

    def _head_feeds(self, split: TrainingSplit, sig, given=None, loss_scale=None) -> dict:
        """Head gradients of the non-loss outputs: ``given`` (per device, by
        output index) or ones, times the loss scale (``loss_scale``, traced,
        when dynamic); a non-batch output's is divided by the device count.
        With dynamic scaling the scale variable is fed too."""
        info = self._outputs_info(sig)
        feeds = {}
        if loss_scale is None:
            loss_scale = self.loss_scale
        else:  # dynamic: the loss heads' scaled gradients read it too
            feeds[LOSS_SCALE_VAR] = loss_scale
        dtype = self.compute_dtype or "float32"
        for var, i in split.heads:
            shape, batched = info[i]
            scale = loss_scale / (1 if batched else self.devices.n)
            if given is not None and given.get(i) is not None:
                feeds[var] = (given[i] * scale).astype(self._cast(given[i]).dtype)
            else:
                feeds[var] = jnp.full(shape, scale, jnp.float32).astype(dtype)
        return feeds

    def _key(self, key, t):
        k = jax.random.fold_in(key, jnp.asarray(t).astype(jnp.uint32))
        return jax.random.fold_in(k, self.devices.device_index())

    def _unscale(self, g, loss_scale=None):
        """A gradient in float32 (or the weights' precision), divided by the
        loss scale (``loss_scale``, traced, when dynamic)."""
        g = g.astype(jnp.float32) if self.compute_dtype else g
        if loss_scale is not None:
            return g / loss_scale.astype(g.dtype)
        return g / self.loss_scale if self.loss_scale != 1.0 else g

    def _combine_grads(self, grads: dict, loss_scale=None) -> dict:
        return self._reduce({k: self._unscale(g, loss_scale) for k, g in grads.items()})

    def _skip_if_not_finite(self, grads, old, new, states):
        """With dynamic scaling: ``new`` (a tree like ``old``, the step's
        results) where every gradient is finite, ``old`` where not, and the
        next loss-scale state. The gradients are summed over the devices
        already, so every device decides the same."""
        finite = jnp.array(True)
        for g in grads.values():
            finite = finite & jnp.all(jnp.isfinite(g))
        kept = jax.tree.map(lambda a, b: jnp.where(finite, b, a), old, new)
        return kept, self.dynamic.next_state(states[LOSS_SCALE_STATE], finite)

    @staticmethod
    def _split_scale_state(states: dict):
        """``(optimizer states, loss-scale state or None)``."""
        rest = {k: v for k, v in states.items() if k != LOSS_SCALE_STATE}
        return rest, states.get(LOSS_SCALE_STATE)

    def _combine_aux(self, aux: dict, updates: dict) -> dict:
        upd = {k: v.astype(aux[k].dtype) for k, v in updates.items() if k in aux}
        return {**aux, **self.devices.mean_over_devices(upd)}

    def _finish_outputs(self, outs, sig, indices=None):
        """The forward outputs (those at ``indices``, default all) as the
        step returns them: float32, a non-batch output averaged over devices."""
        outs = [o.astype(jnp.float32) if self.compute_dtype and is_float(o.dtype) else o
                for o in outs]
        info = self._outputs_info(sig)
        if indices is not None:
            info = [info[i] for i in indices]
        return [o if batched else self.devices.mean_over_devices(o)
                for o, (_, batched) in zip(outs, info)]

    @staticmethod
    def apply_optimizer(optimizer, params, grads, states, lr, t, mults):
        """New (params, states) from one optimizer step of every parameter."""
        new_p, new_s = {}, {}
        with jax.named_scope(UPDATE_SCOPE):
            for name, w in params.items():
                lr_mult, wd_mult = mults[name]
                new_p[name], new_s[name] = optimizer.step(
                    w, grads[name].astype(w.dtype), tuple(states[name]), lr * lr_mult,
                    optimizer.wd * wd_mult, t)
        return new_p, new_s

    def loss_scale_of(self, states: dict):
        """The dynamic loss scale held in ``states`` (traced), or None."""
        _, scale_state = self._split_scale_state(states)
        return scale_state[0][0] if scale_state is not None else None

    def apply_step(self, optimizer, mults, params, states, aux, grads, aux_upd, lr, t):
        """Inside a program, after the backward: ``(params, states, aux)``
        updated from the per-device gradients ``grads`` (combined over the
        devices, unscaled) and aux updates; with dynamic loss scaling, a
        step with inf/nan gradients changes nothing but the scale."""
        opt_states, scale_state = self._split_scale_state(states)
        scale = scale_state[0][0] if scale_state is not None else None
        grads = self._combine_grads(grads, scale)
        new_p, new_s = self.apply_optimizer(optimizer, params, grads, opt_states, lr, t, mults)
        new_aux = self._combine_aux(aux, aux_upd)
        if scale_state is not None:
            kept, scale_state = self._skip_if_not_finite(
                grads, (params, opt_states, aux), (new_p, new_s, new_aux), states)
            new_p, new_s, new_aux = kept
            new_s[LOSS_SCALE_STATE] = scale_state
        return new_p, new_s, new_aux

    @staticmethod
    def optimizer_key(optimizer, names) -> tuple:
        """What the compiled update depends on besides traced scalars."""
        mults = tuple((n, *optimizer._mults(n)) for n in names)
        return (type(optimizer), repr(sorted(optimizer.hyperparams().items(), key=str)),
                optimizer.wd, mults)

    # -- the programs -------------------------------------------------------------------
    def fused(self, sig, optimizer):
        """``step(params, states, aux, fixed, batch, lr, t, key) ->
        (params, states, aux, outputs)``: forward, backward and update."""
        okey = self.optimizer_key(optimizer, self.trainable)
        key = ("fused", sig, okey)
        if key in self._cache:
            return self._cache[key]
        split = self._gradient(self.trainable)
        fn = self._lower(split.full, True)
        n_out, names = self.n_out, self.trainable
        mults = {m[0]: m[1:] for m in okey[3]}

        def local(params, states, aux, fixed, batch, lr, t, rkey):
            scale = self.loss_scale_of(states)
            feeds = self._feeds(params, fixed, aux, batch)
            feeds.update(self._head_feeds(split, sig, loss_scale=scale))
            outs, aux_upd = fn(feeds, self._key(rkey, t))
            new_p, new_s, new_aux = self.apply_step(
                optimizer, mults, params, states, aux, dict(zip(names, outs[n_out:])), aux_upd,
                lr, t)
            return new_p, new_s, new_aux, self._finish_outputs(outs[:n_out], sig)

        spmd = self.devices.spmd(
            local, in_specs=(P(), P(), P(), P(), P(BATCH_AXIS), P(), P(), P()),
            out_specs=(P(), P(), P(), self.out_specs(sig)))
        prog = self._jit(spmd, True, donate_argnums=(0, 1, 2))
        self._cache[key] = prog
        return prog

    def stage_cut(self, sig, segments=None) -> tuple:
        """``(split, stages)``: the training split and its ``passes.stages``
        cut into ``segments`` forward segments (default: sqrt of the forward
        op count) and their backwards -- what ``staged`` runs."""
        from ..passes.stages import cut
        key = ("cut", sig, segments)
        if key not in self._cache:
            split = self._gradient(self.trainable)
            self._cache[key] = split, cut(split, self.local_shapes(sig), segments)
        return self._cache[key]

    def staged(self, sig, optimizer, segments=None):
        """The training step as a sequence of programs (``train/staged.py``):
        the forward in ``segments`` segments (default: sqrt of the forward
        op count), each segment's backward, then the update; same
        signature and results as ``fused``."""
        from .staged import StagedStep
        okey = self.optimizer_key(optimizer, self.trainable)
        key = ("staged", sig, okey, segments)
        if key in self._cache:
            return self._cache[key]
        split, stages = self.stage_cut(sig, segments)
        prog = StagedStep(self, split, stages, sig, optimizer,
                          {m[0]: m[1:] for m in okey[3]})
        self._cache[key] = prog
        return prog

    def step(self, sig, optimizer):
        """The training step ``fit`` runs, by ``segments``: None, ``fused``;
        True or a count, ``staged``; 'auto' (a budgeted Module), whichever of
        the two XLA says holds less (``train.staged.SmallerStep``)."""
        if self.segments == "auto":
            from .staged import SmallerStep
            key = ("smaller", sig, self.optimizer_key(optimizer, self.trainable))
            if key not in self._cache:
                # nothing recomputed: the fused step alone, compiled once
                self._cache[key] = SmallerStep(self.fused(sig, optimizer),
                                               self.staged(sig, optimizer)
                                               if self.recompute else None)
            return self._cache[key]
        if self.segments:
            return self.staged(sig, optimizer, None if self.segments is True else self.segments)
        return self.fused(sig, optimizer)

    def forward_train(self, sig, wrt):
        """``f(params, aux, fixed, batch, t, key) -> (outputs, saved, aux)``;
        ``saved`` holds, per device, what the backward reads."""
        key = ("fwd", sig, tuple(wrt))
        if key in self._cache:
            return self._cache[key]
        split = self._gradient(wrt)
        saved_keys = split.saved_keys
        fn = self._lower(split.forward, True)
        n_out = self.n_out

        def local(params, aux, fixed, batch, t, rkey):
            outs, aux_upd = fn(self._feeds(params, fixed, aux, batch), self._key(rkey, t))
            saved = [s[None] for s in outs[n_out:]]  # a leading device axis
            return self._finish_outputs(outs[:n_out], sig), saved, \
                self._combine_aux(aux, aux_upd)

        spmd = self.devices.spmd(
            local, in_specs=(P(), P(), P(), P(BATCH_AXIS), P(), P()),
            out_specs=(self.out_specs(sig), [P(BATCH_AXIS)] * len(saved_keys), P()))
        prog = self._jit(spmd, True)
        self._cache[key] = prog
        return prog

    def backward(self, sig, wrt):
        """``f(params, aux, fixed, batch, saved, heads, t, key, scale) -> grads``:
        parameter gradients summed over devices, input gradients split;
        ``scale`` is the dynamic loss scale, shape (1,) (None without one)."""
        key = ("bwd", sig, tuple(wrt))
        if key in self._cache:
            return self._cache[key]
        split = self._gradient(wrt)
        saved_keys = split.saved_keys
        fn = self._lower(split.backward, True)
        inputs = set(self.data_names) | set(self.label_names)

        def local(params, aux, fixed, batch, saved, heads, t, rkey, scale):
            scale = scale[0] if scale is not None else None  # shape (1,) as stored
            feeds = self._feeds(params, fixed, aux, batch)
            feeds.update(zip(saved_keys, [s[0] for s in saved]))
            feeds.update(self._head_feeds(split, sig, {i: h for i, h in enumerate(heads)},
                                          loss_scale=scale))
            outs, _ = fn(feeds, self._key(rkey, t))
            grads = dict(zip(wrt, outs))
            pgrads = self._combine_grads({k: v for k, v in grads.items() if k not in inputs},
                                         scale)
            igrads = {k: self._unscale(v, scale) for k, v in grads.items() if k in inputs}
            return pgrads, igrads

        head_specs = self.out_specs(sig)
        spmd = self.devices.spmd(
            local, in_specs=(P(), P(), P(), P(BATCH_AXIS), [P(BATCH_AXIS)] * len(saved_keys),
                             head_specs, P(), P(), P()),
            out_specs=(P(), P(BATCH_AXIS)))
        prog = self._jit(spmd, True)
        self._cache[key] = prog
        return prog

    def update(self, optimizer):
        """``f(params, grads, states, lr, t) -> (params, states)``, donated;
        with dynamic loss scaling, skipped where a gradient is not finite."""
        okey = self.optimizer_key(optimizer, self.trainable)
        key = ("update", okey)
        if key in self._cache:
            return self._cache[key]
        mults = {m[0]: m[1:] for m in okey[3]}

        def update(params, grads, states, lr, t):
            opt_states, scale_state = self._split_scale_state(states)
            new_p, new_s = self.apply_optimizer(optimizer, params, grads, opt_states, lr, t,
                                                mults)
            if scale_state is not None:
                kept, scale_state = self._skip_if_not_finite(
                    grads, (params, opt_states), (new_p, new_s), states)
                new_p, new_s = kept
                new_s[LOSS_SCALE_STATE] = scale_state
            return new_p, new_s

        prog = jax.jit(update, donate_argnums=(0, 2))
        self._cache[key] = prog
        return prog

    def infer(self, sig):
        """``f(params, aux, fixed, batch, t, key) -> outputs`` (inference)."""
        key = ("infer", sig)
        if key in self._cache:
            return self._cache[key]
        fn = self._lower(self.graph, False)

        def local(params, aux, fixed, batch, t, rkey):
            outs, _ = fn(self._feeds(params, fixed, aux, batch), self._key(rkey, t))
            return self._finish_outputs(outs, sig)

        spmd = self.devices.spmd(local, in_specs=(P(), P(), P(), P(BATCH_AXIS), P(), P()),
                                 out_specs=self.out_specs(sig))
        prog = self._jit(spmd, False)
        self._cache[key] = prog
        return prog


def batch_signature(batch: dict) -> tuple:
    """Hashable (name, shape, dtype) of a placed or host batch."""
    return tuple((k, tuple(np.shape(v)), str(v.dtype)) for k, v in batch.items())
