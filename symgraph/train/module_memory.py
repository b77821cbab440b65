"""The Module's memory: the plan of what each device runs
(``plan_memory``), training to ``memory_budget`` or a ``recompute`` set,
and XLA's own figures for the step ``fit`` compiles (``compiled_memory``,
``program_info``). ``Module`` inherits ``MemoryFit``.

Under a budget the step is planned to it (``sg.plan(..., budget=)``, the
optimizer's state counted once it is known) and the programs recompute
what the plan recomputes; then the budget bounds the program XLA compiles,
not only the plan (``memory.budget.fit_program``): the step is compiled
again, planned to less, until XLA's footprint fits or the rounds run out.
"""
from __future__ import annotations

import jax

from . import TrainError
from .step import TrainPrograms, batch_signature


class MemoryFit:
    """Memory plans and budgets over the Module's state (``Module`` is the
    one)."""

    def plan_memory(self, **kwargs):
        """The memory planner's ``Plan`` of what each device runs: the
        training graph (or the inference graph, for a module not bound for
        training) at the per-device batch, in the compute dtype (2-byte
        activations with ``compute_dtype='bfloat16'``/``'float16'``). ``kwargs``
        go to ``sg.plan``."""
        self._check_bound("plan_memory")
        from ..memory import plan
        n = self._devices.n_local
        shapes = {d.name: (d.shape[0] // n,) + tuple(d.shape[1:]) if self.for_training
                  else tuple(d.shape) for d in self._data_shapes + self._label_shapes}
        dtypes = {d.name: d.dtype for d in self._data_shapes + self._label_shapes if d.dtype}
        return plan(self.symbol, shapes, train=self.for_training and bool(self._trainable),
                    dtypes=dtypes, wrt=self._trainable or None,
                    data_names=self._data_names, label_names=self._label_names,
                    compute_dtype=self._programs.compute_dtype, **kwargs)

    def _plan_recompute(self) -> None:
        """With ``memory_budget`` or ``recompute``: plans the training step
        (``plan_memory``) and has the programs recompute what the plan
        recomputes. Where no plan fits the budget, the step without recompute
        (``memory.budget.first_plan``: its program may hold less)."""
        if self._memory_budget is None and self._recompute_spec is None:
            return
        if not (self.for_training and self._trainable):
            self._budget_plan = None
            return
        if not hasattr(self._programs, "set_recompute"):
            raise TrainError("memory_budget/recompute: not supported with these programs "
                             "(group2ctxs)")
        from ..memory.budget import first_plan
        opt = self._budget_optimizer()
        if self._memory_budget is None:
            p = self.plan_memory(optimizer=opt, recompute=self._recompute_spec)
        else:
            p = first_plan(self._memory_budget, lambda b: self._plan_to(b, opt),
                           keep_recompute=self._keeps_recompute())
        self._follow(p)

    def _follow(self, p) -> None:
        """Has the training programs recompute what plan ``p`` recomputes."""
        self._budget_plan = p
        self._programs.set_recompute([r["name"] for r in p.recompute])
        # one program, or one per segment where XLA holds less so (train/staged.py);
        # compiled once for both compiled_memory and fit
        self._programs.segments = "auto"

    def _fit_budget_if_any(self) -> None:
        """``_fit_program_to_budget`` once the step is complete (bound, the
        optimizer known and its reducer set), under a budget."""
        if self._memory_budget is not None and self._budget_plan is not None:
            self._fit_program_to_budget()

    def _fit_program_to_budget(self) -> None:
        """The budget bounds the program that runs, not only the plan
        (``memory.budget.fit_program``: the step without recompute where
        XLA's figure says it fits, else plans again to the excess). The step
        that fits is the last compiled, so ``fit`` reuses it. Where none
        fits, BudgetError, or with ``allow_over_budget`` the smallest runs,
        with a warning."""
        from .. import xla
        from ..memory.budget import fit_program, fmt_bytes, over_budget
        opt = self._budget_optimizer()

        def footprint_of(p):
            self._follow(p)
            return xla.footprint(self.compiled_memory())

        fit = fit_program(self._budget_plan, self._memory_budget,
                          lambda b: self._plan_to(b, opt), footprint_of,
                          keep_recompute=self._keeps_recompute())
        self._follow(fit.plan)
        if not fit.fits and not self._allow_over_budget:
            raise over_budget(fit, self._memory_budget, "Module(allow_over_budget=True)")
        if not fit.fits:
            self.logger.warning("memory_budget %s: the smallest step XLA compiled holds %s "
                                "(its plan %s)", fmt_bytes(self._memory_budget),
                                fmt_bytes(fit.footprint), fmt_bytes(fit.plan.total))

    def _plan_to(self, budget, optimizer):
        """``plan_memory`` to ``budget`` with this Module's recompute set or
        algorithm; ``budget`` None: the plan with nothing recomputed."""
        if budget is None:
            return self.plan_memory(optimizer=optimizer)
        return self.plan_memory(budget=budget, optimizer=optimizer,
                                recompute=self._recompute_spec)

    def _keeps_recompute(self) -> bool:
        """An algorithm says how to recompute, the budget whether: only named
        nodes are recomputed whatever the budget."""
        return self._recompute_spec is not None and not isinstance(self._recompute_spec, str)

    def _budget_optimizer(self):
        """The optimizer as ``sg.plan(optimizer=)`` counts its state: by the
        number of arrays it keeps per parameter (SGD 0, momentum 1, Adam 2);
        None before ``init_optimizer``."""
        opt = self._optimizer
        if opt is None or not self._trainable:
            return None
        name = self._trainable[0]
        shape, dtype = self._param_info[name]
        k = len(jax.eval_shape(lambda w: tuple(opt.create_state(name, w)),
                               jax.ShapeDtypeStruct(shape, dtype)))
        return {0: "sgd", 1: "momentum"}.get(k, "adam")

    @property
    def budget_plan(self):
        """The ``Plan`` the training programs follow under ``memory_budget``
        or ``recompute`` (None otherwise): ``budget_plan.recompute`` lists
        the forward nodes recomputed, ``budget_plan.total`` the bytes."""
        return self._budget_plan

    def compiled_memory(self, target=None) -> dict:
        """XLA's own figures (bytes) for the training step ``fit`` runs at
        the bound shapes (on every device, with this Module's optimizer and
        memory measures): temp, argument, output and alias sizes, and
        ``program``, which says what was compiled.

        ``target``: compile instead the step ``fit`` would run on one device
        of that target (``symgraph.targets.get``: 'h100', 'a100', 'l4', a
        description file, 'gpu', 'cpu'), with the measure rule of its
        backend; ``program['target']`` names it and ``fit`` says whether it
        fits the device (``xla.fit_on``)."""
        self._check_optimizer("compiled_memory")
        from .. import xla
        if target is not None:
            return self._compiled_memory_for(target)
        shapes = {d.name: jax.ShapeDtypeStruct(self._devices.global_shape(d.shape),
                                               d.dtype or "float32",
                                               sharding=self._devices.batch_sharded())
                  for d in self._data_shapes + self._label_shapes}
        sig = batch_signature(shapes)
        prog = self._programs.step(sig, self._optimizer)
        lowered = prog.lower(self._params, self._opt_states, self._aux, self._fixed, shapes,
                             self._scalar(0.1), self._scalar(1), self._key)
        out = xla.analysis_dict(lowered.compile())
        out.pop("generated_code", None)
        out["program"] = self.program_info()
        return out

    def _compiled_memory_for(self, target) -> dict:
        """``compiled_memory(target=)``: the one-device step for ``target``."""
        from .. import targets, xla
        from ..parallel.data_parallel import DeviceSet
        t = targets.get(target)
        progs = TrainPrograms(self.symbol, self._data_names, self._label_names,
                              self._programs.trainable, self._programs.fixed, self._aux_names,
                              DeviceSet(None), self._compute_dtype, self._loss_scale,
                              self._memory_measures, recompute=self._programs.recompute,
                              segments=self._programs.segments, backend=t.backend)
        per_device = self._devices.n
        shapes = {}
        for d in self._data_shapes + self._label_shapes:
            shape = tuple(self._devices.global_shape(d.shape))
            shape = (shape[0] // per_device,) + shape[1:] if shape else shape
            shapes[d.name] = jax.ShapeDtypeStruct(shape, d.dtype or "float32")
        structs = jax.tree.map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype),
                               (self._params, self._opt_states, self._aux, self._fixed))
        prog = progs.step(batch_signature(shapes), self._optimizer)
        scalar = jax.ShapeDtypeStruct((), "float32")
        step = xla.Step(prog, (*structs, shapes, scalar, scalar,
                               jax.ShapeDtypeStruct((), self._key.dtype)),
                        info={**self.program_info(), "devices": 1, "backend": t.backend,
                              "target": t.to_json(),
                              "measures": list(progs.measures(self.for_training))},
                        jitted=True, target=t)
        out = xla.memory(step)
        out.pop("generated_code", None)
        out["program"] = step.info
        return xla.with_fit(out, t, self.symbol.graph())

    def program_info(self) -> dict:
        """What the training step ``fit`` compiles: devices, optimizer,
        compute dtype and memory measures."""
        self._check_bound("program_info")
        opt = self._optimizer
        return {"program": "Module.fit step", "devices": self._devices.n,
                "backend": jax.default_backend(),
                "optimizer": None if opt is None else opt.describe(),
                "compute_dtype": self._compute_dtype,
                "measures": list(self._programs.measures(self.for_training)),
                "recompute": len(getattr(self._programs, "recompute", ()))}
