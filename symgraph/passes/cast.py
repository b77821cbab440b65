"""Compute dtype: a graph that reads its float inputs through casts.

A Module with ``compute_dtype='bfloat16'`` keeps its parameters and data
in float32 and casts them down inside its program
(``TrainPrograms._feeds``). Each cast's output is a temporary: XLA holds it
from the first op that reads it to the last -- in training, the backward
op that reads the weight again (VGG-16 in bfloat16 on a GPU: 256 MiB of
weight copies alive at the peak). ``compute_in`` makes the casts explicit
nodes so that the planner plans them as the tensors they are; everything
downstream infers the compute dtype, and the gradient pass carries each
parameter's gradient back through its cast to float32, as the Module
returns it. Labels are read as they are (the Module does not cast them),
and aux states are planned in the compute dtype (``compute_in``).

The planned graph is not the program: a Module casts in its feeds, and
``without_casts`` gives back the graph it compiles (XLA:GPU schedules the
two differently: VGG-16's step in bfloat16 held 0.7% more temp with the
casts as nodes). Pure: the input graph is not changed; the casts are named
``<variable>_<dtype>`` and marked with ``CAST_ATTR``.
"""
from __future__ import annotations

from ..graph import Entry, Graph, Node, unique_name
from ..ops import get_op

COMPUTE_DTYPES = ("bfloat16", "float16", "float32", "float64")
CAST_ATTR = "__compute_dtype_cast__"


def compute_in(graph: Graph, dtype: str, inferred, labels=()) -> Graph:
    """``graph`` with every float argument whose dtype is not ``dtype``
    (but those named in ``labels``) read through a ``Cast`` to ``dtype``.
    Aux states are not: a variable is an aux state by the slot an op reads
    it in, so one read through a cast would become an argument; infer them
    in ``dtype`` (``variable_types``) -- the op reads them in it, and they
    are vectors (BatchNorm's statistics). ``inferred``: an ``Inferred`` of
    ``graph`` (the variables' dtypes, as names). Shape inference cannot see
    through a cast to a weight's shape: infer the new graph with the
    variables' shapes and dtypes given (``variable_types``)."""
    cast = get_op("Cast")
    names = {n.name for n in graph.nodes}
    keep = set(labels) | set(graph.list_auxiliary_states())

    def through_cast(node: Node, inputs: list):
        if node.op is not None or node.name in keep:
            return None
        dt = inferred.dtypes[graph.entry_id_of_node(node)]
        if dt == dtype or dt not in COMPUTE_DTYPES:
            return None  # already in it, or not a float (an index, a mask)
        c = Node(cast, unique_name(f"{node.name}_{dtype}", names),
                 {"dtype": dtype, CAST_ATTR: "1"}, [Entry(node, 0)])
        return [Entry(c, 0)]

    return graph.rewrite(through_cast)


def without_casts(graph: Graph) -> Graph:
    """``graph`` with the casts ``compute_in`` added bypassed: each reader
    reads the variable again."""
    return graph.rewrite(lambda node, inputs: inputs if CAST_ATTR in node.attrs else None)


def variable_types(graph: Graph, inferred, dtype: str) -> tuple:
    """(shapes, dtypes): every variable's inferred shape and dtype, by name
    -- what inference of the graph ``compute_in`` makes needs given: a
    weight's shape is not inferred through its cast, a label keeps its own
    dtype rather than the compute dtype of the data beside it, and a float
    aux state is in ``dtype``."""
    shapes, dtypes = {}, {}
    aux = set(graph.list_auxiliary_states())
    for n in graph.variables:
        eid = graph.entry_id_of_node(n)
        if inferred.shapes[eid] is not None:
            shapes[n.name] = tuple(inferred.shapes[eid])
        dt = inferred.dtypes[eid]
        if dt is not None:
            dtypes[n.name] = dtype if n.name in aux and dt in COMPUTE_DTYPES else dt
    return shapes, dtypes
