"""symgraph: a memory-planning graph compiler for deep learning.

    import symgraph as sg
    net = sg.sym.FullyConnected(sg.sym.Variable('data'), num_hidden=10)
"""
from . import ops  # registers every op
from . import symbol as sym
from . import symbol
from . import ndarray as nd
from .context import Context, cpu, current_context, gpu, num_gpus
from .errors import (BindError, ContextError, GraphError, OpError, PlanError,
                     SerializationError, ShapeError, SymgraphError)
from .executor import Executor
from .graph import Entry, Graph, Node

__version__ = "0.1.0"

__all__ = ["sym", "symbol", "nd", "ops", "Context", "cpu", "gpu", "current_context",
           "num_gpus", "Executor", "Entry", "Graph", "Node", "SymgraphError", "GraphError",
           "OpError", "ShapeError", "SerializationError", "BindError", "ContextError",
           "PlanError"]
