"""Graph passes, each a pure function of a graph (docs/design.md, "The pipeline"):

    infer_shapes   -> Inferred (shapes and dtypes of every entry)
    build_gradient -> Graph (outputs, then the gradients asked for)
    prune          -> Graph (only what the requested outputs need)
    fuse           -> Fusion (groups of nodes run as one kernel; a side table)
    schedule       -> steps (the execution order a memory plan is made for)
"""
from .fuse import Fusion, fuse, no_fusion
from .gradient import build_gradient
from .infer import Inferred, infer_shapes
from .prune import prune
from .schedule import schedule

__all__ = ["Fusion", "Inferred", "build_gradient", "fuse", "infer_shapes", "no_fusion",
           "prune", "schedule"]
