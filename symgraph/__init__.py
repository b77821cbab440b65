"""symgraph: a memory-planning graph compiler for deep learning.

    import symgraph as sg
    data = sg.sym.Variable('data')
    net = sg.sym.FullyConnected(data, num_hidden=10, name='fc')
    plan = sg.plan(net, {'data': (64, 100)}, train=True)
    print(plan.report())
"""
import importlib

from .targets import use_cpu_without_gpu

use_cpu_without_gpu()  # before any op touches JAX

from . import ops  # registers every op  # noqa: E402
from . import symbol as sym
from . import symbol
from . import ndarray as nd
from . import ndarray
from .context import Context, cpu, current_context, gpu, num_gpus
from .errors import (BindError, ContextError, GraphError, OpError, PlanError,
                     SerializationError, ShapeError, SymgraphError)
from . import measures
from .executor import Executor
from .graph import Entry, Graph, Node
from .symbol import AttrScope

__version__ = "0.1.0"

# Heavier parts load on first use, so `import symgraph` stays quick.
_LAZY = {
    "mod": "symgraph.train.module",
    "module": "symgraph.train.module",
    "io": "symgraph.io",
    "optimizer": "symgraph.train.optimizer",
    "lr_scheduler": "symgraph.train.lr_scheduler",
    "init": "symgraph.train.initializer",
    "initializer": "symgraph.train.initializer",
    "metric": "symgraph.train.metric",
    "callback": "symgraph.train.callback",
    "kv": "symgraph.parallel.kvstore",
    "kvstore": "symgraph.parallel.kvstore",
    "models": "symgraph.models",
    "viz": "symgraph.viz",
    "memory": "symgraph.memory",
    "xla": "symgraph.xla",
    "passes": "symgraph.passes",
    "recordio": "symgraph.recordio",
    "model": "symgraph.model",
}
# sg.plan is memory.plan, with target= for XLA's figures on a device (xla.plan_on)
_LAZY_ATTRS = {"plan": ("symgraph.xla.analysis", "plan_on"),
               "max_batch": ("symgraph.memory.maxbatch", "max_batch"),
               "BudgetError": ("symgraph.memory.budget", "BudgetError"),
               "Module": ("symgraph.train.module", "Module"),
               "random": ("symgraph.ndarray", "random")}


def __getattr__(name):
    if name in _LAZY:
        return importlib.import_module(_LAZY[name])
    if name in _LAZY_ATTRS:
        module, attr = _LAZY_ATTRS[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'symgraph' has no attribute '{name}'")


__all__ = ["sym", "symbol", "nd", "ndarray", "ops", "Context", "cpu", "gpu",
           "current_context", "num_gpus", "AttrScope", "measures", "Executor", "Entry", "Graph", "Node",
           "SymgraphError", "GraphError", "OpError", "ShapeError", "SerializationError",
           "BindError", "ContextError", "PlanError", *_LAZY, *_LAZY_ATTRS]
