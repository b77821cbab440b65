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

The package: ``steps.py`` (the step views and a plain-JAX step),
``analysis.py`` (XLA's memory figures of a step or a plan), ``hlo.py``
(reading XLA's dump: the breakdown of its temp allocation),
``gpu_remat.py`` (XLA:GPU's own rematerialization at a memory limit, and
the FLOPs an optimized HLO text computes).
"""
from .analysis import (analysis_dict, best_step, compile_step, fit_budget, fit_on, footprint,
                       has_convolution, memory, plan_memory, plan_on, with_fit)
from .hlo import (DUMP_OPTIONS, KINDS, MIB, ROLES, Breakdown, Buffer, memory_breakdown,
                  parse_breakdown)
from .steps import (DEFAULT_OPTIMIZER, INFER_CANDIDATES, INFER_STEP_ARGS, MEASURES,
                    TRAIN_CANDIDATES, TRAIN_STEP_ARGS, Step, XlaError, compute_dtype_of,
                    inference_step, measures_label, plain_jax_step, plan_recompute,
                    plan_step, training_step)

__all__ = ["DEFAULT_OPTIMIZER", "DUMP_OPTIONS", "INFER_CANDIDATES", "INFER_STEP_ARGS", "KINDS",
           "MEASURES", "MIB", "ROLES", "TRAIN_CANDIDATES", "TRAIN_STEP_ARGS", "Breakdown",
           "Buffer", "Step", "XlaError", "analysis_dict", "best_step", "compile_step",
           "compute_dtype_of", "fit_budget", "fit_on", "footprint", "has_convolution",
           "inference_step", "measures_label", "memory", "memory_breakdown", "parse_breakdown",
           "plain_jax_step", "plan_memory", "plan_on", "with_fit", "plan_recompute", "plan_step", "training_step"]
