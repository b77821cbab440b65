"""Model parallel training in a Module: ``Module(..., group2ctxs={...})``.

The Module's data-parallel path compiles one program over a device mesh;
model parallel cannot, since JAX compiles a program for one set of devices
and the stages of a placed net sit on different ones. So ``PlacedDevices``
stands in for the Module's ``DeviceSet`` (each parameter, gradient,
optimizer state, aux state and batch input goes to the device of its
ctx_group) and ``PlacedTrainPrograms`` for its ``TrainPrograms``: the same
graphs, head gradients, random keys and optimizer step, but the forward
and backward run as ``placement.StagedProgram``s (one jitted program per
device segment, ``_CrossDeviceCopy`` nodes as transfers) and the update as
one jitted program per device over that device's parameters. The results
equal the one-device Module's.

One mapping only: MXNet's worker groups (a list of mappings, one per
data-parallel replica) are refused with a clear error.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from ..context import Context, current_context
from ..errors import ContextError
from ..passes.place import place
from ..train import TrainError
from ..train.step import TrainPrograms
from .data_parallel import BATCH_AXIS
from .placement import Replicas, StagedProgram, placed_split, resolve_group2ctx


class Pipelined(dict):
    """A group2ctx mapping whose batch runs as ``microbatches`` microbatches
    pushed through the stages GPipe-style: every microbatch's forward,
    then every backward, the gradients summed, the moving statistics
    averaged -- data parallel over ``microbatches`` slices of the batch,
    one after the other, so the stages can work on different microbatches
    at once. ``Module(net, group2ctxs=Pipelined({'stage1': sg.cpu(1), ...},
    microbatches=4))``."""

    def __init__(self, group2ctx: dict, microbatches: int):
        super().__init__(group2ctx)
        if not isinstance(microbatches, int) or microbatches < 1:
            raise ContextError(f"microbatches must be a positive integer, got {microbatches!r}")
        self.microbatches = microbatches


class PlacedDevices:
    """What a Module asks of its devices, for R placed replicas (worker
    groups; R = 1 is plain model parallel): replica r runs nodes without a
    group on ``contexts[r]`` and group g on ``group2ctxs[r][g]``. Device d
    of the placement is played, in each replica, by one device; those R
    devices form ``meshes[d]``. Parameters, optimizer and aux states are
    replicated over the mesh of their variable's device, batch inputs split
    over it along axis 0."""

    processes = 1
    process_index = 0
    mesh = None

    def __init__(self, symbol, group2ctxs, context=None):
        from jax.sharding import Mesh

        maps = list(group2ctxs) if isinstance(group2ctxs, (list, tuple)) else [group2ctxs]
        if not maps:
            raise ContextError("group2ctxs is an empty list; give one mapping per context")
        if context is None:
            ctxs = [current_context()]
        elif isinstance(context, (list, tuple)):
            ctxs = list(context)
        else:
            ctxs = [context]
        if len(maps) != len(ctxs):
            raise ContextError(
                f"{len(ctxs)} context(s) and {len(maps)} group2ctxs mapping(s): worker groups "
                f"take one mapping per context (Module(context=[c0, c1], group2ctxs=[{{...}}, "
                f"{{...}}])), model parallel one context and one mapping")
        for c in ctxs:
            if not isinstance(c, Context):
                raise ContextError(f"context must be sg.cpu(i) or sg.gpu(i), got {c!r}")
        graph = symbol.graph()
        g2cs = [resolve_group2ctx(graph, m) for m in maps]
        for r, m in enumerate(g2cs[1:], 1):
            if set(m) != set(g2cs[0]):
                raise ContextError(f"group2ctxs[{r}] maps groups {sorted(m)}, group2ctxs[0] "
                                   f"maps {sorted(g2cs[0])}; every replica maps the same groups")
        # device d of the placement, in each replica (the order place() numbers them)
        layouts = []
        for ctx, m in zip(ctxs, g2cs):
            devs = [ctx]
            for c in m.values():
                if c not in devs:
                    devs.append(c)
            layouts.append((devs, {g: devs.index(c) for g, c in m.items()}))
        for r, (devs, index) in enumerate(layouts[1:], 1):
            if index != layouts[0][1] or len(devs) != len(layouts[0][0]):
                raise ContextError(f"group2ctxs[{r}] shares devices between groups (or with "
                                   f"its context) differently from group2ctxs[0]; every "
                                   f"replica needs the same layout")
        self.microbatches = getattr(maps[0], "microbatches", 1)
        if any(getattr(m, "microbatches", 1) != self.microbatches for m in maps):
            raise ContextError("every group2ctxs mapping must ask for the same microbatches")
        self.replicas = len(ctxs)
        # the slices of a batch, as data parallel over that many devices cuts it
        self.n = self.n_local = self.replicas * self.microbatches
        self.contexts = ctxs
        self.group2ctx = g2cs[0]
        self.group2ctxs = g2cs
        self.devices = [c.jax_device for c in ctxs]
        self.meshes = []
        for d in range(len(layouts[0][0])):
            devs = [layout[0][d] for layout in layouts]
            if len(set(devs)) != len(devs):
                raise ContextError(f"device {devs[0]} plays the same part in two replicas; "
                                   f"worker groups need distinct devices")
            self.meshes.append(Mesh([c.jax_device for c in devs], (BATCH_AXIS,)))
        pl = place(graph, self.group2ctx, ctxs[0])
        self.var_index = {n.name: pl.device[n.name] for n in pl.graph.variables}
        self.train_programs = PlacedTrainPrograms
        self._sums: dict = {}

    def __repr__(self):
        return f"PlacedDevices({self.group2ctxs}, contexts {self.contexts})"

    def mesh_of(self, name: str):
        return self.meshes[self.var_index.get(name, 0)]

    def _put(self, tree: dict, spec) -> dict:
        from jax.sharding import NamedSharding
        return {k: jax.device_put(v, NamedSharding(self.mesh_of(k), spec))
                for k, v in tree.items()}

    def put_replicated(self, tree: dict) -> dict:
        return self._put(tree, P())

    def put_batch(self, tree: dict) -> dict:
        return self._put(tree, P(BATCH_AXIS))

    def replicated(self):
        from jax.sharding import NamedSharding
        return NamedSharding(self.meshes[0], P())

    def batch_sharded(self):
        from jax.sharding import NamedSharding
        return NamedSharding(self.meshes[0], P(BATCH_AXIS))

    def local_value(self, x):
        return x

    def global_shape(self, shape) -> tuple:
        return tuple(shape)

    def check_batch_size(self, batch_size: int, what: str = "batch size") -> None:
        if batch_size % self.n:
            raise ContextError(f"{what} {batch_size} cannot be split evenly over "
                               f"{self.replicas} worker group(s) x {self.microbatches} "
                               f"microbatch(es); use a multiple of {self.n}")

    def spmd(self, local_fn, in_specs=None, out_specs=None):
        return local_fn

    def sum_over_devices(self, tree: dict) -> dict:
        """Per-replica gradients (a leading replica axis) summed, replicated
        over their parameter's mesh."""
        from jax.sharding import NamedSharding
        out = {}
        for k, g in tree.items():
            mesh = self.mesh_of(k)
            fn = self._sums.get(id(mesh))
            if fn is None:
                fn = self._sums[id(mesh)] = jax.jit(
                    lambda x: x.sum(0), out_shardings=NamedSharding(mesh, P()))
            out[k] = fn(g)
        return out

    def mean_over_devices(self, tree):
        return tree  # aux updates are averaged inside the segments

    def device_index(self):
        return 0


class PlacedTrainPrograms(TrainPrograms):
    """``TrainPrograms`` whose programs run placed (see the module doc).
    Values passed between segments carry a leading replica axis; the
    programs here stack and unstack them so the Module sees what the
    data-parallel path gives it."""

    def __init__(self, symbol, data_names, label_names, trainable, fixed, aux, devices,
                 compute_dtype="float32", loss_scale=1.0, memory_measures="auto",
                 recompute=()):
        super().__init__(symbol, data_names, label_names, trainable, fixed, aux, devices,
                         compute_dtype, loss_scale, memory_measures, recompute)
        if self.compute_dtype is not None or self.dynamic is not None:
            raise TrainError("model parallel (group2ctxs) trains in float32 or float64 with "
                             "a fixed loss scale; compute_dtype and dynamic loss scaling are "
                             "not built for it")
        if self.recompute:
            raise TrainError("model parallel (group2ctxs) does not recompute forward nodes")
        self.batch_names = set(self.data_names) | set(self.label_names)

    def set_recompute(self, names) -> None:
        if tuple(names or ()):
            raise TrainError("memory_budget/recompute is not built for model parallel "
                             "(group2ctxs): plan each device with sg.plan(..., group2ctx=...)")

    # -- pieces ----------------------------------------------------------------------
    def _replicas(self, heads=()) -> Replicas:
        return Replicas(self.devices.meshes, self.batch_names, [h for h, _ in heads],
                        self.devices.microbatches)

    def _placed(self, wrt):
        key = ("placed", tuple(wrt))
        if key not in self._cache:
            split = self._gradient(wrt)
            pl, saved = placed_split(split, self.devices.group2ctx, self.devices.contexts[0])
            self._cache[key] = (split, pl, saved)
        return self._cache[key]

    @staticmethod
    def _base_key(rkey, t):
        # the step's key; each segment folds in its slice's index (data
        # parallel's device index), so one slice draws as one device does
        return jax.random.fold_in(rkey, jnp.asarray(t).astype(jnp.uint32))

    def _micro(self, x, m: int):
        """Microbatch m of a batch array: rows m of each replica's part (the
        whole array with one microbatch)."""
        mb = self.devices.microbatches
        if mb == 1:
            return x
        r = self.devices.replicas
        rows = x.shape[0] // (r * mb)
        return x.reshape((r, mb, rows) + tuple(x.shape[1:]))[:, m].reshape(
            (r * rows,) + tuple(x.shape[1:]))

    def _micro_feeds(self, params, fixed, aux, batch, m: int) -> dict:
        return self._feeds(params, fixed, aux, {k: self._micro(v, m) for k, v in batch.items()})

    def _stacked_heads(self, split, sig, given=None, m: int = 0) -> dict:
        """Head-gradient feeds of microbatch m with a leading replica axis."""
        info = self._outputs_info(sig)
        if given:
            given = {i: (self._micro(h, m) if h is not None and info[i][1] else h)
                     for i, h in given.items()}
        feeds = self._head_feeds(split, sig, given)
        r = self.devices.replicas
        for var, i in split.heads:
            v, local = feeds[var], info[i][0]
            feeds[var] = (jnp.broadcast_to(v, (r,) + tuple(v.shape)) if tuple(v.shape) == local
                          else v.reshape((r,) + local))
        return feeds

    def _unstack(self, per_micro: list, batched: bool):
        """One value as one device gives it, from its stacked (replica axis
        first) value per microbatch: batch rows in the order data parallel
        cuts them (replica, then microbatch), others averaged."""
        if not batched:
            return sum(o.mean(0) for o in per_micro) / len(per_micro)
        x = per_micro[0] if len(per_micro) == 1 else jnp.stack(per_micro, axis=1)
        return x.reshape((-1,) + tuple(per_micro[0].shape[2:]))

    def _unstack_outputs(self, per_micro: list, sig) -> list:
        info = self._outputs_info(sig)
        res = [self._unstack([outs[i] for outs in per_micro], batched)
               for i, (_, batched) in enumerate(info)]
        return self._finish_outputs(res, sig)

    @staticmethod
    def _mean_aux(updates: list) -> dict:
        if len(updates) == 1:
            return updates[0]
        return {k: sum(u[k] for u in updates) / len(updates) for k in updates[0]}

    def _update_fn(self, optimizer):
        """(params, grads, states, lr, t) -> (params, states): one jitted
        update per mesh, over the parameters replicated there."""
        okey = self.optimizer_key(optimizer, self.trainable)
        key = ("update", okey)
        if key in self._cache:
            return self._cache[key]
        mults = {m[0]: m[1:] for m in okey[3]}
        by_dev: dict = {}
        for n in self.trainable:
            by_dev.setdefault(self.devices.var_index[n], []).append(n)
        jitted = {d: jax.jit(lambda p, g, s, lr, t, names=tuple(names): self.apply_optimizer(
            optimizer, p, g, s, lr, t, {n: mults[n] for n in names}))
            for d, names in by_dev.items()}

        def update(params, grads, states, lr, t):
            new_p, new_s = dict(params), dict(states)
            for d, names in by_dev.items():
                p, s = jitted[d]({n: params[n] for n in names}, {n: grads[n] for n in names},
                                 {n: states[n] for n in names}, lr, t)
                new_p.update(p)
                new_s.update(s)
            return new_p, new_s
        self._cache[key] = update
        return update

    def _split_programs(self, wrt):
        """(split, forward program, backward program, saved keys) for the
        gradients of ``wrt``: what the forward saves, the backward reads."""
        key = ("split_programs", tuple(wrt))
        if key not in self._cache:
            split, pl, saved = self._placed(wrt)
            g, n_out = pl.graph, self.n_out
            variables = {n.name for n in g.variables}
            fwd = StagedProgram(pl, list(g.outputs[:n_out]) + list(saved.values()), variables,
                                True, self.measures(True), self._replicas())
            bwd = StagedProgram(pl, g.outputs[n_out:], variables | set(saved), True,
                                self.measures(True), self._replicas(split.heads))
            self._cache[key] = (split, fwd, bwd, list(saved))
        return self._cache[key]

    def _forward_all(self, fwd, params, aux, fixed, batch, key) -> tuple:
        """Every microbatch's forward, in order (GPipe's first phase):
        (outputs per microbatch, saved per microbatch, averaged aux updates)."""
        outs, saved, upds = [], [], []
        for m in range(self.devices.microbatches):
            o, u = fwd(self._micro_feeds(params, fixed, aux, batch, m), key, m)
            outs.append(o[:self.n_out])
            saved.append(o[self.n_out:])
            upds.append(u)
        return outs, saved, self._mean_aux(upds)

    def _backward_all(self, split, bwd, saved_keys, wrt, params, aux, fixed, batch, saved,
                      sig, key, given=None) -> dict:
        """Every microbatch's backward, last first (GPipe's second phase):
        the gradients of ``wrt`` summed over the microbatches (replica axis
        kept), input gradients in batch order."""
        grads, inputs = {}, {}
        for m in reversed(range(self.devices.microbatches)):
            feeds = self._micro_feeds(params, fixed, aux, batch, m)
            feeds.update(zip(saved_keys, saved[m]))
            feeds.update(self._stacked_heads(split, sig, given, m))
            outs, _ = bwd(feeds, key, m)
            for k, g in zip(wrt, outs):
                if k in self.batch_names:
                    inputs.setdefault(k, {})[m] = g
                else:
                    grads[k] = g if k not in grads else grads[k] + g
        igrads = {k: self._unscale(self._unstack([v[m] for m in sorted(v)], True))
                  for k, v in inputs.items()}
        return self._combine_grads(grads), igrads

    # -- the programs ------------------------------------------------------------------
    def update(self, optimizer):
        return self._update_fn(optimizer)

    def fused(self, sig, optimizer):
        key = ("fused", sig, self.optimizer_key(optimizer, self.trainable))
        if key in self._cache:
            return self._cache[key]
        update = self._update_fn(optimizer)
        n_out, names = self.n_out, self.trainable
        if self.devices.microbatches > 1:
            split, fwd, bwd, saved_keys = self._split_programs(names)

            def step(params, states, aux, fixed, batch, lr, t, rkey):
                k = self._base_key(rkey, t)
                outs, saved, aux_upd = self._forward_all(fwd, params, aux, fixed, batch, k)
                grads, _ = self._backward_all(split, bwd, saved_keys, names, params, aux,
                                              fixed, batch, saved, sig, k)
                new_p, new_s = update(params, grads, states, lr, t)
                return new_p, new_s, self._combine_aux(aux, aux_upd), \
                    self._unstack_outputs(outs, sig)
            step.programs = fwd.num_programs + bwd.num_programs
        else:  # one pass of the whole graph: forward and backward in one walk
            split, pl, _ = self._placed(names)
            variables = {n.name for n in pl.graph.variables}
            prog = StagedProgram(pl, pl.graph.outputs, variables, True, self.measures(True),
                                 self._replicas(split.heads))

            def step(params, states, aux, fixed, batch, lr, t, rkey):
                feeds = self._feeds(params, fixed, aux, batch)
                feeds.update(self._stacked_heads(split, sig))
                outs, aux_upd = prog(feeds, self._base_key(rkey, t))
                grads = self._combine_grads(dict(zip(names, outs[n_out:])))
                new_p, new_s = update(params, grads, states, lr, t)
                return new_p, new_s, self._combine_aux(aux, aux_upd), \
                    self._unstack_outputs([outs[:n_out]], sig)
            step.programs = prog.num_programs
        step.lower = _no_single_program
        self._cache[key] = step
        return step

    def forward_train(self, sig, wrt):
        key = ("fwd", sig, tuple(wrt))
        if key in self._cache:
            return self._cache[key]
        _, fwd_prog, _, _ = self._split_programs(wrt)

        def fwd(params, aux, fixed, batch, t, rkey):
            outs, saved, aux_upd = self._forward_all(fwd_prog, params, aux, fixed, batch,
                                                     self._base_key(rkey, t))
            return self._unstack_outputs(outs, sig), saved, self._combine_aux(aux, aux_upd)
        self._cache[key] = fwd
        return fwd

    def backward(self, sig, wrt):
        key = ("bwd", sig, tuple(wrt))
        if key in self._cache:
            return self._cache[key]
        split, _, bwd_prog, saved_keys = self._split_programs(wrt)

        def bwd(params, aux, fixed, batch, saved, heads, t, rkey, scale):
            return self._backward_all(split, bwd_prog, saved_keys, wrt, params, aux, fixed,
                                      batch, saved, sig, self._base_key(rkey, t),
                                      dict(enumerate(heads)))
        self._cache[key] = bwd
        return bwd

    def infer(self, sig):
        key = ("infer", sig)
        if key in self._cache:
            return self._cache[key]
        pl = place(self.graph, self.devices.group2ctx, self.devices.contexts[0])
        prog = StagedProgram(pl, pl.graph.outputs, {n.name for n in pl.graph.variables},
                             False, self.measures(False), self._replicas())

        def infer(params, aux, fixed, batch, t, rkey):
            k = self._base_key(rkey, t)
            outs = [prog(self._micro_feeds(params, fixed, aux, batch, m), k, m)[0]
                    for m in range(self.devices.microbatches)]
            return self._unstack_outputs(outs, sig)
        self._cache[key] = infer
        return infer


def _no_single_program(*args, **kwargs):
    raise TrainError("a model-parallel step is one XLA program per device segment, not one "
                     "program: XLA's figures for it are not built; sg.plan(..., group2ctx=...) "
                     "gives the memory per device")
