"""The staged training step: one step as a sequence of XLA programs.

``TrainPrograms.staged`` runs the training graph as ``passes.stages`` cuts
it: the forward in segments, then each segment's backward (recomputing
what the plan recomputes), then the optimizer update -- each a jitted
program, called one after another from Python. Between programs only what
the caller holds is alive: the parameters, optimizer state, batch, the
tensors the stages hand on (the plan's checkpoints and kept activations,
the gradients so far) -- and each program's own working set while it runs.
A tensor is donated to the last program that reads it, so XLA can reuse
its buffer. This is how a budgeted plan holds in the program that runs:
one XLA program over the whole step keeps many segments' recomputed
tensors alive at once on the CPU backend (docs/memory.md, "Budgets and
recompute").

The step has the fused step's signature and results
``step(params, states, aux, fixed, batch, lr, t, key) -> (params, states,
aux, outputs)``; ``step.lower(*args).compile()`` gives the whole
sequence's memory figures (``memory_analysis()``) so ``sg.xla`` reports it
like any program.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import jax
import numpy as np

from ..parallel.data_parallel import BATCH_AXIS, P


@dataclass
class SequenceMemory:
    """``memory_analysis()`` of a program sequence, in the fields XLA's has.

    ``argument``/``output``/``alias``: the step's own (its arguments, its
    results, the donated parameters, states and aux it writes in place).
    ``temp``: the rest of the peak: the tensors the programs hand on plus
    the running program's outputs and temp, at the program where that is
    largest (``peak_program``), so ``argument + output - alias + temp`` is
    the most the step holds at once."""

    temp_size_in_bytes: int
    argument_size_in_bytes: int
    output_size_in_bytes: int
    alias_size_in_bytes: int
    generated_code_size_in_bytes: int
    peak_program: str
    programs: list


def _nbytes(tree) -> int:
    return int(sum(np.prod(x.shape, dtype=np.int64) * _itemsize(x.dtype)
                   for x in jax.tree.leaves(tree)))


def _avals_key(args) -> tuple:
    """What a compiled program depends on in its arguments: shapes, dtypes
    and shardings over several devices (one device's is the default)."""
    leaves, tree = jax.tree.flatten(args)
    return tree, tuple((tuple(np.shape(x)), str(x.dtype), _sharding_key(x)) for x in leaves)


def _sharding_key(x):
    sharding = getattr(x, "sharding", None)
    if sharding is None or len(sharding.device_set) == 1:
        return None
    return str(sharding)


def _itemsize(dtype) -> int:
    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        # a key is its data; shapes only: nothing runs (a deviceless target has no device)
        data = jax.eval_shape(lambda: jax.random.key_data(jax.random.key(0)))
        return int(np.prod(data.shape)) * np.dtype(data.dtype).itemsize
    return np.dtype(dtype).itemsize


class StagedStep:
    """A training step run as ``stages`` (``passes.stages.Stage``) then an
    update; built by ``TrainPrograms.staged``."""

    def __init__(self, programs, split, stages, sig, optimizer, mults):
        from ..passes.stages import last_reads
        self.programs = programs
        self.split = split
        self.stages = stages
        self.sig = sig
        self.optimizer = optimizer
        self.mults = mults
        self.last = last_reads(stages)
        self.n_out = programs.n_out
        self.grad_names = list(programs.trainable)
        self._stage_fns = [self._stage_fn(i) for i in range(len(stages))]
        self._update_fn = self._update()
        self._cache: dict = {}

    # -- the programs --------------------------------------------------------------
    def _stage_fn(self, i: int):
        tp, st, split, sig = self.programs, self.stages[i], self.split, self.sig
        fn = tp._lower(st.graph, True)
        n_ret = len(st.returns)
        fwd_idx = [j for j in st.outputs if j < self.n_out]

        def local(params, aux, fixed, batch, kept, dying, t, rkey, scale):
            scale = scale[0] if scale is not None else None
            feeds = tp._feeds(params, fixed, aux, batch)
            feeds.update(tp._head_feeds(split, sig, loss_scale=scale))
            feeds.update({k: _local(v) for k, v in {**kept, **dying}.items()})
            outs, aux_upd = fn(feeds, tp._key(rkey, t))
            rets = {k: _per_device(o) for k, o in zip(st.returns, outs[:n_ret])}
            res = dict(zip(st.outputs, outs[n_ret:]))
            fwd = tp._finish_outputs([res[j] for j in fwd_idx], sig, fwd_idx)
            grads = {j: _per_device(res[j]) for j in st.outputs if j >= self.n_out}
            upd = {k: _per_device(v) for k, v in aux_upd.items()}
            return rets, dict(zip(fwd_idx, fwd)), grads, upd

        # on several devices a handed-on value has a leading device axis (a
        # BatchNorm's batch mean differs per device); on one, none: adding it
        # costs XLA a copy
        many = tp.devices.n > 1

        def _per_device(x):
            return x[None] if many else x

        def _local(x):
            return x[0] if many else x

        specs = tp.out_specs(sig)
        spmd = tp.devices.spmd(
            local,
            in_specs=(P(), P(), P(), P(BATCH_AXIS), P(BATCH_AXIS), P(BATCH_AXIS), P(), P(), P()),
            out_specs=(P(BATCH_AXIS), {j: specs[j] for j in fwd_idx}, P(BATCH_AXIS),
                       P(BATCH_AXIS)))
        return tp._jit(spmd, True, donate_argnums=(5,))

    def _update(self):
        tp, optimizer, mults = self.programs, self.optimizer, self.mults

        many = tp.devices.n > 1

        def local(params, states, aux, grads, aux_upd, lr, t):
            return tp.apply_step(optimizer, mults, params, states, aux,
                                 {k: g[0] if many else g for k, g in grads.items()},
                                 {k: v[0] if many else v for k, v in aux_upd.items()}, lr, t)

        spmd = tp.devices.spmd(local,
                               in_specs=(P(), P(), P(), P(BATCH_AXIS), P(BATCH_AXIS), P(), P()),
                               out_specs=(P(), P(), P()))
        return tp._jit(spmd, True, donate_argnums=(0, 1, 2))

    # -- running -------------------------------------------------------------------
    def _plan_args(self, i: int, held: dict) -> tuple:
        st = self.stages[i]
        kept = {k: held[k] for k in st.reads if self.last[k] != i}
        dying = {k: held.pop(k) for k in st.reads if self.last[k] == i}
        return kept, dying

    def _compiled(self, which, args, options=None):
        """The compiled program ``which`` (a stage's index or 'update') for
        arguments like ``args``: compiled once per argument shapes, dtypes
        and shardings, for running and for the figures alike."""
        key = (which, _avals_key(args))
        if key not in self._cache:
            fn = self._update_fn if which == "update" else self._stage_fns[which]
            with warnings.catch_warnings():  # a dying tensor no output can take
                warnings.filterwarnings("ignore", "Some donated buffers were not usable")
                self._cache[key] = fn.lower(*args).compile(options or None)
        return self._cache[key]

    def __call__(self, params, states, aux, fixed, batch, lr, t, rkey):
        _, scale_state = self.programs._split_scale_state(states)
        scale = scale_state[0] if scale_state is not None else None
        held: dict = {}
        outputs: dict = {}
        grads: dict = {}
        upd: dict = {}
        for i in range(len(self._stage_fns)):
            kept, dying = self._plan_args(i, held)
            a = (params, aux, fixed, batch, kept, dying, t, rkey, scale)
            rets, fwd, g, u = self._compiled(i, a)(*a)
            del a, kept, dying  # the dying tensors go with the program's last reference
            held.update(rets)
            outputs.update(fwd)
            grads.update(g)
            upd.update(u)
        grads = self._grads_by_name(grads)
        a = (params, states, aux, grads, upd, lr, t)
        new_p, new_s, new_aux = self._compiled("update", a)(*a)
        outs = [outputs[j] if j in outputs else self._passed(j, params, fixed, aux, batch)
                for j in range(self.n_out)]
        return new_p, new_s, new_aux, outs

    def _grads_by_name(self, grads: dict) -> dict:
        out = {}
        for j, name in enumerate(self.grad_names):
            g = grads.get(self.n_out + j)
            if g is None:  # the gradient is a variable passed through: not computed
                raise RuntimeError(f"staged step: no gradient computed for '{name}'")
            out[name] = g
        return out

    def _passed(self, j, params, fixed, aux, batch):
        name = self.split.full.outputs[j].node.name
        for d in (batch, params, fixed, aux):
            if name in d:
                return d[name]
        raise RuntimeError(f"staged step: output {j} ('{name}') is computed by no stage")

    # -- figures -------------------------------------------------------------------
    def lower(self, params, states, aux, fixed, batch, lr, t, rkey):
        return _StagedLowered(self, (params, states, aux, fixed, batch, lr, t, rkey))


class _StagedLowered:
    """Every program of a staged step lowered at the given argument shapes."""

    def __init__(self, step: StagedStep, args):
        self.step = step
        self.args = args

    def compile(self, compiler_options=None):
        return _StagedCompiled(self.step, self.args, compiler_options)


class _StagedCompiled:
    """The compiled sequence: its figures, and called, the step (each
    program compiled once, whichever comes first)."""

    def __init__(self, step: StagedStep, args, compiler_options):
        self.step, self.args, self.options = step, args, compiler_options

    def __call__(self, *args):
        return self.step(*args)

    def memory_analysis(self) -> SequenceMemory:
        """Walks the sequence with shapes only, compiling each program."""
        step = self.step
        params, states, aux, fixed, batch, lr, t, rkey = self.args
        _, scale_state = step.programs._split_scale_state(states)
        scale = None if scale_state is None else jax.ShapeDtypeStruct((1,), "float32")
        resident = _nbytes((params, states, aux, fixed, batch, lr, t))
        held, outputs, grads, upd = {}, {}, {}, {}
        peak, where, rows, code = 0, "", [], 0

        def hand_on():
            return _nbytes((held, outputs, grads, upd))

        for i, fn in enumerate(step._stage_fns):
            kept, dying = step._plan_args(i, held)
            a = (params, aux, fixed, batch, kept, dying, t, rkey, scale)
            m = step._compiled(i, a, self.options).memory_analysis()
            before = hand_on() + _nbytes(dying)
            now = resident + before + m.output_size_in_bytes - m.alias_size_in_bytes + \
                m.temp_size_in_bytes
            name = f"stage {step.stages[i].index}"
            rows.append({"program": name, "temp": int(m.temp_size_in_bytes),
                         "output": int(m.output_size_in_bytes), "held": int(before)})
            code += m.generated_code_size_in_bytes or 0
            if now > peak:
                peak, where = now, name
            rets, fwd, g, u = jax.eval_shape(fn, *a)
            held.update(rets)
            outputs.update(fwd)
            grads.update(g)
            upd.update(u)
        g = step._grads_by_name(grads)
        a = (params, states, aux, g, upd, lr, t)
        m = step._compiled("update", a, self.options).memory_analysis()
        now = resident + hand_on() + m.output_size_in_bytes - m.alias_size_in_bytes + \
            m.temp_size_in_bytes
        rows.append({"program": "update", "temp": int(m.temp_size_in_bytes),
                     "output": int(m.output_size_in_bytes), "held": int(hand_on())})
        code += m.generated_code_size_in_bytes or 0
        if now > peak:
            peak, where = now, "update"
        argument = _nbytes((params, states, aux, fixed, batch, lr, t, rkey))
        donated = _nbytes((params, states, aux))
        output = donated + _nbytes(outputs)
        temp = peak - (argument + output - donated)
        return SequenceMemory(int(temp), int(argument), int(output), int(donated), int(code),
                              where, rows)


def _footprint(ma) -> int:
    return (ma.argument_size_in_bytes + ma.output_size_in_bytes -
            (ma.alias_size_in_bytes or 0) + ma.temp_size_in_bytes)


class SmallerStep:
    """The fused step or the staged one, whichever XLA's figures say holds
    less at the arguments it is first called (or lowered) with: on small
    nets one program keeps a recompute plan within a few percent and
    avoids the handing on between programs; on large ones (ResNet-152) the
    one program holds nearly twice the plan and the staged one does not
    (docs/memory.md, "Budgets and recompute"). Each is compiled once; the
    choice is made per argument shapes."""

    def __init__(self, fused, staged: StagedStep | None):
        self.fused, self.staged = fused, staged  # staged None: the fused, compiled once
        self._chosen: dict = {}

    def choose(self, args) -> tuple:
        """``(name, program, {name: footprint})`` for arguments like ``args``."""
        key = _avals_key(args)
        if key not in self._chosen:
            compiled = self.fused.lower(*args).compile()
            sizes = {"fused": _footprint(compiled.memory_analysis())}
            if self.staged is not None:
                sizes["staged"] = _footprint(self.staged.lower(*args).compile()
                                             .memory_analysis())
            name = min(sizes, key=sizes.get)
            prog = compiled if name == "fused" else self.staged
            self._chosen[key] = (name, prog, sizes)
        return self._chosen[key]

    def __call__(self, *args):
        return self.choose(args)[1](*args)

    def lower(self, *args):
        name, prog, _ = self.choose(args)
        return self.staged.lower(*args) if name == "staged" else _Compiled(prog)


class _Compiled:
    """A compiled program in the place of its ``Lowered``."""

    def __init__(self, compiled):
        self.compiled = compiled

    def compile(self, compiler_options=None):
        return self.compiled
