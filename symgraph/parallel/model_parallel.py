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
from jax.sharding import SingleDeviceSharding

from ..context import Context, current_context
from ..errors import ContextError
from ..passes.place import place
from ..train import TrainError
from ..train.step import TrainPrograms
from .placement import StagedProgram, placed_split, resolve_group2ctx


class PlacedDevices:
    """What a Module asks of its devices, for one placed replica: the
    default device ``contexts[0]`` (nodes without a group) and each
    variable's device from the placement."""

    n = n_local = processes = 1
    process_index = 0
    mesh = None

    def __init__(self, symbol, group2ctxs, context=None):
        if isinstance(group2ctxs, (list, tuple)):
            if len(group2ctxs) != 1:
                raise ContextError(
                    f"group2ctxs has {len(group2ctxs)} mappings: worker groups (model parallel "
                    f"inside each, data parallel across them) are not built; give one mapping")
            group2ctxs = group2ctxs[0]
        if isinstance(context, (list, tuple)):
            if len(context) != 1:
                raise ContextError(f"model parallel (group2ctxs) takes one default context, "
                                   f"got {len(context)}; data parallel across replicas is "
                                   f"not built with group2ctxs")
            context = context[0]
        ctx = context or current_context()
        if not isinstance(ctx, Context):
            raise ContextError(f"context must be sg.cpu(i) or sg.gpu(i), got {ctx!r}")
        self.contexts = [ctx]
        self.devices = [ctx.jax_device]
        graph = symbol.graph()
        self.group2ctx = resolve_group2ctx(graph, group2ctxs)
        pl = place(graph, self.group2ctx, ctx)
        self.var_device = {n.name: pl.device_of(n).jax_device for n in pl.graph.variables}
        self.train_programs = PlacedTrainPrograms

    def __repr__(self):
        return f"PlacedDevices({self.group2ctx}, default {self.contexts[0]})"

    def _put(self, tree: dict) -> dict:
        return {k: jax.device_put(v, self.var_device.get(k, self.devices[0]))
                for k, v in tree.items()}

    put_replicated = put_batch = _put

    def replicated(self):
        return SingleDeviceSharding(self.devices[0])

    batch_sharded = replicated

    def local_value(self, x):
        return x

    def global_shape(self, shape) -> tuple:
        return tuple(shape)

    def check_batch_size(self, batch_size: int, what: str = "batch size") -> None:
        return None

    def spmd(self, local_fn, in_specs=None, out_specs=None):
        return local_fn

    def sum_over_devices(self, tree):
        return tree

    mean_over_devices = sum_over_devices

    def device_index(self):
        return 0


class PlacedTrainPrograms(TrainPrograms):
    """``TrainPrograms`` whose programs run placed (see the module doc)."""

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

    def _placed(self, wrt):
        key = ("placed", tuple(wrt))
        if key not in self._cache:
            split = self._gradient(wrt)
            pl, saved = placed_split(split, self.devices.group2ctx, self.devices.contexts[0])
            self._cache[key] = (split, pl, saved)
        return self._cache[key]

    def _update_fn(self, optimizer):
        """(params, grads, states, lr, t) -> (params, states): one jitted
        update per device, over the parameters that live there."""
        okey = self.optimizer_key(optimizer, self.trainable)
        key = ("update", okey)
        if key in self._cache:
            return self._cache[key]
        mults = {m[0]: m[1:] for m in okey[3]}
        by_dev: dict = {}
        for n in self.trainable:
            by_dev.setdefault(self.devices.var_device[n], []).append(n)
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

    def update(self, optimizer):
        return self._update_fn(optimizer)

    def fused(self, sig, optimizer):
        key = ("fused", sig, self.optimizer_key(optimizer, self.trainable))
        if key in self._cache:
            return self._cache[key]
        split, pl, _ = self._placed(self.trainable)
        variables = {n.name for n in pl.graph.variables}
        prog = StagedProgram(pl, pl.graph.outputs, variables, True, self.measures(True))
        update = self._update_fn(optimizer)
        n_out, names = self.n_out, self.trainable

        def step(params, states, aux, fixed, batch, lr, t, rkey):
            feeds = self._feeds(params, fixed, aux, batch)
            feeds.update(self._head_feeds(split, sig))
            outs, aux_upd = prog(feeds, self._key(rkey, t))
            grads = self._combine_grads(dict(zip(names, outs[n_out:])))
            new_p, new_s = update(params, grads, states, lr, t)
            return new_p, new_s, self._combine_aux(aux, aux_upd), \
                self._finish_outputs(outs[:n_out], sig)
        step.programs = prog.num_programs
        self._cache[key] = step
        return step

    def forward_train(self, sig, wrt):
        key = ("fwd", sig, tuple(wrt))
        if key in self._cache:
            return self._cache[key]
        split, pl, saved = self._placed(wrt)
        g, n_out = pl.graph, self.n_out
        variables = {n.name for n in g.variables}
        prog = StagedProgram(pl, list(g.outputs[:n_out]) + list(saved.values()), variables,
                             True, self.measures(True))

        def fwd(params, aux, fixed, batch, t, rkey):
            outs, aux_upd = prog(self._feeds(params, fixed, aux, batch), self._key(rkey, t))
            return self._finish_outputs(outs[:n_out], sig), outs[n_out:], \
                self._combine_aux(aux, aux_upd)
        self._cache[key] = fwd
        return fwd

    def backward(self, sig, wrt):
        key = ("bwd", sig, tuple(wrt))
        if key in self._cache:
            return self._cache[key]
        split, pl, saved = self._placed(wrt)
        g, n_out = pl.graph, self.n_out
        variables = {n.name for n in g.variables}
        prog = StagedProgram(pl, g.outputs[n_out:], variables | set(saved), True,
                             self.measures(True))
        saved_keys = list(saved)
        inputs = set(self.data_names) | set(self.label_names)

        def bwd(params, aux, fixed, batch, saved_values, heads, t, rkey, scale):
            feeds = self._feeds(params, fixed, aux, batch)
            feeds.update(zip(saved_keys, saved_values))
            feeds.update(self._head_feeds(split, sig, {i: h for i, h in enumerate(heads)}))
            outs, _ = prog(feeds, self._key(rkey, t))
            grads = dict(zip(wrt, outs))
            pgrads = self._combine_grads({k: v for k, v in grads.items() if k not in inputs})
            igrads = {k: self._unscale(v) for k, v in grads.items() if k in inputs}
            return pgrads, igrads
        self._cache[key] = bwd
        return bwd

    def infer(self, sig):
        key = ("infer", sig)
        if key in self._cache:
            return self._cache[key]
        pl = place(self.graph, self.devices.group2ctx, self.devices.contexts[0])
        prog = StagedProgram(pl, pl.graph.outputs, {n.name for n in pl.graph.variables},
                             False, self.measures(False))

        def infer(params, aux, fixed, batch, t, rkey):
            outs, _ = prog(self._feeds(params, fixed, aux, batch), self._key(rkey, t))
            return self._finish_outputs(outs, sig)
        self._cache[key] = infer
        return infer
