"""The Executor: a bound symbol with its arrays, run as XLA programs.

Training is split at the tensors the backward reads: ``forward(is_train=
True)`` runs one program that returns the outputs plus those saved tensors;
``backward()`` runs a second program that starts from them (MXNet keeps
them between the two calls the same way). Inference is a third program.
Each is jitted once per shapes, lowered with the memory measures of
``symgraph.measures`` (chosen by its rule unless ``memory_measures`` names
them), so the programs keep the memory plan.
"""
from __future__ import annotations


import jax
import jax.numpy as jnp

from .context import Context, current_context
from .errors import BindError
from . import measures as measures_mod
from .graph import Graph
from .dtypes import dtype_name, require_storable
from .ndarray import NDArray
from .passes.gradient import TrainingSplit
from .passes.infer import infer_shapes

GRAD_REQS = ("write", "add", "null")


def _to_dict(values, names: list[str], what: str) -> dict:
    if values is None:
        return {}
    if isinstance(values, dict):
        extra = set(values) - set(names)
        if extra:
            raise BindError(f"{what}: {', '.join(sorted(extra))} not in the symbol's "
                            f"{what} ({', '.join(names)})")
        return dict(values)
    values = list(values)
    if len(values) != len(names):
        raise BindError(f"{what}: {len(values)} arrays given for {len(names)} names "
                        f"({', '.join(names)})")
    return dict(zip(names, values))


class Executor:
    def __init__(self, symbol, ctx: Context | None, args, args_grad=None, grad_req="write",
                 aux_states=None, seed: int = 0, memory_measures="auto", group2ctx=None,
                 memory_budget=None, recompute=None):
        self._symbol = symbol
        self._measures_spec = measures_mod.parse(memory_measures)
        self._ctx = ctx or current_context()
        self._device = self._ctx.jax_device
        g: Graph = symbol.graph()
        self._graph = g
        arg_names, aux_names = g.list_arguments(), g.list_auxiliary_states()
        self.arg_dict = {k: self._nd(v) for k, v in _to_dict(args, arg_names, "arguments").items()}
        missing = [n for n in arg_names if n not in self.arg_dict]
        if missing:
            raise BindError(f"no array bound for argument(s) {', '.join(missing)}")
        aux = _to_dict(aux_states, aux_names, "aux states")
        missing = [n for n in aux_names if n not in aux]
        if missing:
            raise BindError(f"no array bound for aux state(s) {', '.join(missing)}")
        self.aux_dict = {k: self._nd(v) for k, v in aux.items()}
        if isinstance(grad_req, str):
            grad_req = {n: grad_req for n in arg_names}
        elif not isinstance(grad_req, dict):
            grad_req = _to_dict(grad_req, arg_names, "grad_req")
        for n, r in grad_req.items():
            if r not in GRAD_REQS:
                raise BindError(f"grad_req for '{n}' is {r!r}; use one of {', '.join(GRAD_REQS)}")
        self._grad_req = {n: grad_req.get(n, "null") for n in arg_names}
        grads = _to_dict(args_grad, arg_names, "gradients")
        self.grad_dict = {}
        for n in arg_names:
            if self._grad_req[n] == "null":
                continue
            a = grads.get(n)
            self.grad_dict[n] = self._nd(a) if a is not None else NDArray(
                jnp.zeros_like(self.arg_dict[n].data))
        self.outputs: list[NDArray] = []
        self._key = jax.random.key(seed)
        self._step = 0
        self._saved = None
        self._programs: dict = {}
        self._wrt = [n for n in arg_names if self._grad_req[n] != "null"]
        self._group2ctx = None
        if group2ctx:  # model parallel: each array on its group's device
            from .parallel import placement
            self._group2ctx = placement.resolve_group2ctx(g, group2ctx)
            devs = placement.variable_devices(g, self._wrt, self._group2ctx, self._ctx)
            for d in (self.arg_dict, self.aux_dict, self.grad_dict):
                for k, v in d.items():
                    d[k] = NDArray(jax.device_put(v.data, devs[k].jax_device))
        # check the bound shapes now: a wrong array is named before anything is traced
        infer_shapes(g, {k: v.shape for k, v in {**self.arg_dict, **self.aux_dict}.items()})
        self.budget_plan = None
        self._recompute: list = []
        if memory_budget is not None or recompute is not None:
            self._plan_recompute(memory_budget, recompute)

    def _plan_recompute(self, budget, recompute) -> None:
        """The training plan under ``budget`` / ``recompute`` (``sg.plan``):
        the backward recomputes the forward nodes it names. BudgetError
        when nothing fits."""
        from .memory import plan
        if self._group2ctx is not None:
            raise BindError("memory_budget/recompute: not supported with group2ctx")
        if not self._wrt:
            raise BindError("memory_budget/recompute: nothing to train (every grad_req is "
                            "'null'): there is no backward to recompute in")
        shapes = {k: tuple(v.shape) for k, v in self.arg_dict.items()}
        dtypes = {k: str(v.dtype) for k, v in self.arg_dict.items()}
        self.budget_plan = plan(self._symbol, shapes, train=True, dtypes=dtypes,
                                wrt=self._wrt, budget=budget, recompute=recompute)
        self._recompute = [r["name"] for r in self.budget_plan.recompute]

    # -- construction ---------------------------------------------------------
    @classmethod
    def simple_bind(cls, symbol, ctx=None, grad_req="write", type_dict=None, shapes=None,
                    memory_measures="auto", group2ctx=None, memory_budget=None,
                    recompute=None):
        """Allocates zero arrays of the inferred shapes and binds them."""
        g = symbol.graph()
        type_dict = {k: dtype_name(v) for k, v in (type_dict or {}).items()}
        inf = infer_shapes(g, shapes or {}, dtypes=type_dict)
        ctx = ctx or current_context()
        dev = ctx.jax_device
        # a float64 the user asked for must not quietly become float32
        for n in g.variables:
            require_storable(inf.dtypes[g.entry_id_of_node(n)], f"simple_bind: '{n.name}'",
                             BindError)
        for name, e in zip(symbol.list_outputs(), g.outputs):
            require_storable(inf.dtype(e), f"simple_bind: output '{name}'", BindError)

        def zeros(n):
            eid = g.entry_id_of_node(n)
            return NDArray(jax.device_put(jnp.zeros(inf.shapes[eid], inf.dtypes[eid]), dev))

        args = {n.name: zeros(n) for n in g.arguments}
        aux = {n.name: zeros(n) for n in g.aux_states}
        return cls(symbol, ctx, args, None, grad_req, aux, memory_measures=memory_measures,
                   group2ctx=group2ctx, memory_budget=memory_budget, recompute=recompute)

    def _nd(self, v) -> NDArray:
        if isinstance(v, NDArray):
            return v
        return NDArray(jax.device_put(jnp.asarray(v), self._device))

    # -- properties ------------------------------------------------------------
    @property
    def arg_arrays(self) -> list[NDArray]:
        return [self.arg_dict[n] for n in self._graph.list_arguments()]

    @property
    def grad_arrays(self) -> list[NDArray | None]:
        return [self.grad_dict.get(n) for n in self._graph.list_arguments()]

    @property
    def aux_arrays(self) -> list[NDArray]:
        return [self.aux_dict[n] for n in self._graph.list_auxiliary_states()]

    @property
    def output_dict(self) -> dict:
        return dict(zip(self._symbol.list_outputs(), self.outputs))

    # -- programs ---------------------------------------------------------------
    def measures(self, train: bool) -> tuple:
        """The memory measures the training (or inference) programs use."""
        return measures_mod.resolve(self._measures_spec, self._graph, train,
                                    recompute=bool(self._recompute))

    def _program(self, kind: str):
        prog = self._programs.get(kind)
        if prog is not None:
            return prog
        g = self._graph
        ms = self.measures(kind != "infer")

        def jitted(graph, train=True):
            return measures_mod.jit(measures_mod.lower_measured(graph, train, ms), ms)
        if self._group2ctx is not None:  # one program per device segment
            from .parallel.placement import placed_programs
            prog = placed_programs(g, kind, self._wrt, self._group2ctx, self._ctx, ms)
            if len(prog) == 2:  # (program, placement): no backward
                prog = (prog[0], None) if kind == "infer" else (prog[0], None, [], [])
            else:
                prog = prog[:4]
        elif kind == "infer":
            prog = (jitted(g, False), None)
        elif not self._wrt:  # training mode without any gradient: no backward
            prog = (jitted(g), None, [], [])
        else:
            split = TrainingSplit(g, self._wrt, self._recompute)
            prog = (jitted(split.forward), jitted(split.backward), split.saved_keys,
                    split.heads)
        self._programs[kind] = prog
        return prog

    def _feeds(self) -> dict:
        feeds = {k: v.data for k, v in self.arg_dict.items()}
        feeds.update({k: v.data for k, v in self.aux_dict.items()})
        return feeds

    # -- running ----------------------------------------------------------------
    def forward(self, is_train: bool = False, **kwargs) -> list[NDArray]:
        for k, v in kwargs.items():
            if k not in self.arg_dict:
                raise BindError(f"forward: '{k}' is not an argument of the symbol")
            self.arg_dict[k][:] = v
        n_out = len(self._graph.outputs)
        key = jax.random.fold_in(self._key, self._step)
        self._step += 1
        if is_train:
            fwd, _, saved_keys, _ = self._program("train")
            outs, aux_new = fwd(self._feeds(), key)
            self._saved = dict(zip(saved_keys, outs[n_out:]))
            outs = outs[:n_out]
        else:
            fn, _ = self._program("infer")
            outs, aux_new = fn(self._feeds(), key)
            self._saved = None
        for k, v in aux_new.items():
            self.aux_dict[k]._set(v)
        self.outputs = [NDArray(o) for o in outs]
        return self.outputs

    def backward(self, out_grads=None) -> None:
        """Gradients into ``grad_dict`` (written or added per grad_req).

        ``out_grads`` are the head gradients of the non-loss outputs, in
        output order; None means ones (loss outputs need none)."""
        if self._saved is None:
            raise BindError("backward() needs a forward(is_train=True) first")
        if not self._wrt:
            return
        _, bwd, _, heads = self._program("train")
        feeds = self._feeds()
        feeds.update(self._saved)
        names = self._symbol.list_outputs()
        if out_grads is not None and not isinstance(out_grads, (list, tuple)):
            out_grads = [out_grads]
        for h, i in heads:
            if out_grads is None:
                feeds[h] = jnp.ones_like(self.outputs[i].data)
            else:
                if i >= len(out_grads) or out_grads[i] is None:
                    raise BindError(f"backward: no head gradient for output {i} "
                                    f"('{names[i]}')")
                og = out_grads[i]
                og = og.data if isinstance(og, NDArray) else jnp.asarray(og)
                # MXNet copies into an array like the output: its dtype, not the caller's
                feeds[h] = og.astype(self.outputs[i].data.dtype)
        grads, _ = bwd(feeds, None)
        for name, gr in zip(self._wrt, grads):
            if self._grad_req[name] == "add":
                self.grad_dict[name]._set(self.grad_dict[name].data + gr)
            else:
                self.grad_dict[name]._set(gr)

    def copy_params_from(self, arg_params: dict, aux_params: dict | None = None,
                         allow_extra_params: bool = False) -> None:
        for k, v in arg_params.items():
            if k in self.arg_dict:
                self.arg_dict[k][:] = v
            elif not allow_extra_params:
                raise BindError(f"'{k}' is not an argument of the symbol")
        for k, v in (aux_params or {}).items():
            if k in self.aux_dict:
                self.aux_dict[k][:] = v
            elif not allow_extra_params:
                raise BindError(f"'{k}' is not an aux state of the symbol")

    def debug_str(self) -> str:
        return self._graph.text()
