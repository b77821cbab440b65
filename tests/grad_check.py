"""One op's gradients through symgraph (the explicit backward graph,
lowered) and the cases that tests/test_grad_reference.py and
tests/test_x64_off.py hold against the NumPy references of
tests/op_reference_nn.py. Imported as ``from grad_check import ...``."""
import jax
import numpy as np

from symgraph.graph import Entry, Graph, Node
from symgraph.lower import lower
from symgraph.ops import get_op
from symgraph.passes.gradient import build_gradient

# (op, attrs, data shape): every attribute that changes the gradient's
# geometry, alone and combined; small shapes (the references loop in Python)
CASES = [
    ("Convolution", {"kernel": (3, 3), "stride": (2, 2), "pad": (1, 2), "dilate": (2, 1),
                     "num_group": 2, "num_filter": 4}, (2, 4, 7, 8)),
    ("Convolution", {"kernel": (2, 3), "stride": (1, 2), "pad": (0, 1), "dilate": (1, 2),
                     "no_bias": True, "num_filter": 3}, (1, 3, 5, 7)),
    ("Convolution", {"kernel": (3, 3), "stride": (2, 2), "pad": (1, 1), "num_group": 3,
                     "num_filter": 6}, (2, 3, 6, 6)),  # depthwise, 2 filters each
    ("Convolution", {"kernel": (3,), "stride": (2,), "pad": (2,), "dilate": (2,),
                     "num_group": 2, "num_filter": 2}, (2, 2, 9)),
    ("Convolution", {"kernel": (2, 2, 2), "stride": (1, 2, 1), "pad": (1, 0, 1),
                     "dilate": (1, 1, 2), "num_filter": 2}, (1, 2, 3, 5, 4)),
    ("Deconvolution", {"kernel": (3, 3), "stride": (2, 2), "pad": (1, 1), "adj": (1, 0),
                       "num_group": 2, "num_filter": 4, "no_bias": False}, (2, 4, 3, 4)),
    ("Deconvolution", {"kernel": (4, 3), "stride": (2, 3), "pad": (1, 0), "dilate": (1, 2),
                       "num_filter": 3}, (1, 2, 3, 3)),
    ("Deconvolution", {"kernel": (3, 3), "stride": (2, 2), "target_shape": (8, 7),
                       "num_group": 2, "num_filter": 2}, (1, 2, 4, 4)),
    ("Deconvolution", {"kernel": (4,), "stride": (3,), "pad": (2,), "adj": (1,),
                       "num_filter": 2, "no_bias": False}, (2, 3, 4)),
    ("Deconvolution", {"kernel": (2, 2, 2), "stride": (2, 1, 2), "num_group": 2,
                       "num_filter": 2}, (1, 2, 2, 3, 2)),
    ("FullyConnected", {"num_hidden": 5}, (3, 2, 2, 3)),
    ("FullyConnected", {"num_hidden": 4, "no_bias": True}, (4, 6)),
    ("FullyConnected", {"num_hidden": 3, "flatten": False}, (2, 3, 5)),
    ("Pooling", {"kernel": (3, 3), "stride": (2, 2), "pad": (1, 1), "pool_type": "avg"},
     (2, 2, 7, 6)),
    ("Pooling", {"kernel": (3, 3), "stride": (2, 2), "pad": (1, 1), "pool_type": "avg",
                 "count_include_pad": False, "pooling_convention": "full"}, (1, 2, 6, 5)),
    ("Pooling", {"kernel": (3, 2), "pad": (1, 1), "pool_type": "avg",
                 "count_include_pad": False}, (1, 2, 4, 5)),  # stride 1: reads no data
    ("Pooling", {"kernel": (2, 3), "stride": (2, 1), "pad": (1, 1), "pool_type": "sum",
                 "pooling_convention": "full"}, (1, 2, 5, 4)),
    ("Pooling", {"global_pool": True, "pool_type": "avg"}, (2, 3, 3, 4)),
    ("Pooling", {"global_pool": True, "pool_type": "sum"}, (2, 3, 5)),
    ("Pooling", {"kernel": (2, 2, 2), "stride": (1, 2, 2), "pool_type": "avg",
                 "count_include_pad": False, "pad": (1, 0, 1)}, (1, 2, 3, 4, 4)),
    ("Pooling", {"kernel": (3, 3), "stride": (2, 2), "pad": (1, 1)}, (2, 2, 6, 7)),
    ("BatchNorm", {"fix_gamma": False}, (4, 3, 2, 3)),
    ("BatchNorm", {}, (4, 3, 2, 3)),  # fix_gamma: gamma is 1, no dgamma
    ("BatchNorm", {"fix_gamma": False, "axis": -1, "eps": 1e-5}, (3, 2, 4)),
    ("BatchNorm", {"fix_gamma": False, "output_mean_var": True}, (5, 2)),
    ("BatchNorm", {"fix_gamma": False, "use_global_stats": True}, (3, 2, 2, 2)),
]
CASE_IDS = [f"{op}-{i}" for i, (op, _, _) in enumerate(CASES)]


def op_graph(opname, attrs):
    """A graph of one op node named ``op`` over variables named after its
    inputs (arguments, then aux states); returns (graph, node, names)."""
    op = get_op(opname)
    probe = Node(op, "op", attrs, [])
    names = op.arg_names(probe.params) + op.aux_names(probe.params)
    node = Node(op, "op", attrs, [Entry(Node(None, n)) for n in names])
    return Graph([Entry(node, i) for i in range(node.num_visible_outputs)]), node, names


def random_inputs(opname, node, names, shapes, rng, dtype):
    """Random inputs by name; BatchNorm's gamma and moving variance positive."""
    vals = {}
    for n, s in zip(names, shapes):
        if opname == "BatchNorm" and n in ("gamma", "moving_var"):
            v = rng.uniform(0.5, 1.5, s)
        elif opname == "BatchNorm" and n == "data":
            v = rng.normal(size=s) * 2 + 1
        else:
            v = rng.normal(size=s)
        vals[n] = v.astype(dtype)
    return vals


def symgraph_gradients(opname, attrs, data_shape, dtype="float64", seed=0, is_train=True):
    """Runs one op's backward graph; returns (params, inputs, heads, grads):
    the random inputs (list, arguments then aux), the head gradients of the
    visible outputs and symgraph's gradient of every argument (list).
    ``data_shape``: the shape of input ``data``, or a dict of input shapes by
    name for ops whose inputs are not inferred from one ``data`` (``dot``'s
    lhs and rhs)."""
    from symgraph.passes.infer import infer_shapes
    g, node, names = op_graph(opname, attrs)
    shapes = dict(data_shape) if isinstance(data_shape, dict) else {"data": data_shape}
    inf = infer_shapes(g, shapes, dtypes={n: dtype for n in names})
    shapes = [inf.shapes[g.entry_id_of_node(e.node)] for e in node.inputs]
    rng = np.random.default_rng(seed)
    vals = random_inputs(opname, node, names, shapes, rng, dtype)
    wrt = names[:node.num_args]
    gg = build_gradient(g, wrt)
    heads = [rng.normal(size=inf.shape(e)).astype(dtype) for e in g.outputs]
    head_names = [e.node.output_names()[e.index] + "_head_grad" for e in g.outputs]
    used = {n.name for n in gg.variables}
    feeds = {**vals, **{k: h for k, h in zip(head_names, heads) if k in used}}
    outs, _ = jax.jit(lower(gg, is_train))(feeds, jax.random.key(0))
    grads = [np.asarray(o) for o in outs[len(g.outputs):]]
    return node.params, [vals[n] for n in names], heads, grads


def finite_differences(f, xs, heads, wrt=None, eps=1e-6):
    """d sum_k(f(*xs)_k * heads[k]) / d xs[i] for i in ``wrt`` (every input
    when None), central differences in the inputs' dtype (float64). ``f``
    returns an array or a tuple of them; ``heads`` is one array (for the
    first output) or a list (one per output, in order)."""
    heads = heads if isinstance(heads, list) else [heads]

    def loss(*v):
        out = f(*v)
        out = out if isinstance(out, tuple) else (out,)
        return sum(float(np.sum(o * h)) for o, h in zip(out, heads))

    grads = []
    for i in range(len(xs)) if wrt is None else wrt:
        g = np.zeros_like(xs[i])
        for idx in np.ndindex(xs[i].shape):
            hi, lo = list(xs), list(xs)
            hi[i], lo[i] = xs[i].copy(), xs[i].copy()
            hi[i][idx] += eps
            lo[i][idx] -= eps
            g[idx] = (loss(*hi) - loss(*lo)) / (2 * eps)
        grads.append(g)
    return grads


def node_over(opname, attrs, names, name="op"):
    """One op node named ``name`` over variables named ``names``: the graph
    of all its visible outputs, and the node."""
    node = Node(get_op(opname), name, attrs, [Entry(Node(None, n)) for n in names])
    return Graph([Entry(node, i) for i in range(node.num_visible_outputs)]), node


def assert_one_clear_error(opname, attrs, shapes, err, words):
    """Inferring ``opname`` over inputs of ``shapes`` raises ``err``: one
    line that names the node and the op and holds every one of ``words``."""
    import pytest
    from symgraph.errors import SymgraphError
    from symgraph.passes.infer import infer_shapes
    names = [f"x{i}" for i in range(len(shapes))]
    with pytest.raises(err) as info:
        g, _ = node_over(opname, attrs, names, name="bad_node")
        infer_shapes(g, dict(zip(names, shapes)))
    msg = str(info.value)
    assert "\n" not in msg
    assert "'bad_node'" in msg and f"({get_op(opname).name})" in msg, msg
    for w in words:
        assert w in msg, msg
    assert isinstance(info.value, SymgraphError)


def lowered_outputs(opname, attrs, *xs, is_train=False, key=None, hidden=False):
    """(outputs as NumPy arrays, the node) of ``opname`` lowered and run on
    inputs ``xs`` (their own dtypes): the visible outputs, or all of them
    with ``hidden``; each output's shape and dtype must be the inferred ones."""
    from symgraph.passes.infer import infer_shapes
    names = [f"x{i}" for i in range(len(xs))]
    node = Node(get_op(opname), "op", attrs, [Entry(Node(None, n)) for n in names])
    count = node.num_outputs if hidden else node.num_visible_outputs
    g = Graph([Entry(node, i) for i in range(count)])
    inf = infer_shapes(g, {n: x.shape for n, x in zip(names, xs)},
                       dtypes={n: x.dtype.name for n, x in zip(names, xs)})
    outs, _ = jax.jit(lower(g, is_train=is_train))(dict(zip(names, xs)), key)
    got = [np.asarray(o) for o in outs]
    for e, o in zip(g.outputs, got):
        assert o.shape == inf.shape(e), "inferred shape != lowered shape"
        assert o.dtype == np.dtype(inf.dtype(e)), "inferred dtype != lowered dtype"
    return got, node
