"""Every op's inplace declaration, run aliased.

For each registered op that declares (input, output) pairs, on its samples
(forward ops) or as the gradient pass builds it from a forward op's sample
(``_backward_*`` ops and the ops gradient rules use): a one-op graph whose
declared input is a planned tensor (a ``_copy`` of a variable), planned with
the output forced onto that input's range. The arena interpreter must take
the pair (run the op aliased: position-wise ops chunk by chunk over their
input) and give the bytes of the op run normally.
"""
import jax
import numpy as np
import pytest

import symgraph as sg
from symgraph.errors import PlanError
from symgraph.graph import Entry, Graph, Node
from symgraph.lower import JaxInterpreter, lower
from symgraph.memory import ArenaInterpreter, StaticCheck
from symgraph.ops import all_opdefs
from symgraph.ops.registry import OpDef, _REGISTRY
from symgraph.passes.gradient import build_gradient

COPY = _REGISTRY["_copy"]


def _sample_values(sample, shapes, rng):
    vals = []
    for k, shape in enumerate(shapes):
        if k in sample.ints:
            vals.append(rng.integers(0, sample.ints[k], size=shape).astype("float32"))
        else:
            vals.append(rng.uniform(sample.low, sample.high, size=shape).astype("float32"))
    return vals


class _Inputs(JaxInterpreter):
    """The plain lowering, keeping each node's input values."""

    def __init__(self, graph, key):
        super().__init__(graph, True, key)
        self.inputs = {}

    def eval_node(self, node, inputs):
        self.inputs[node.name] = [np.asarray(x) for x in inputs]
        return super().eval_node(node, inputs)


def _pairs(op, attrs):
    return [tuple(pk) for pk in op.inplace(Node(op, "op", attrs, []).params)]


def _instances(wanted):
    """(op, attrs, input values) of op applications whose declared pairs
    ``wanted(op, attrs)`` says are still to run: the samples of each op,
    and the nodes of the gradient graph of each sample (run only when one
    of them is wanted)."""
    rng = np.random.default_rng(0)
    for op in all_opdefs():
        for sample in op.samples:
            n = Node(op, "op", sample.attrs, [])
            names = op.arg_names(n.params) + op.aux_names(n.params)
            variables = [Node(None, f"in_{nm}") for nm in names]
            node = Node(op, "op", sample.attrs, [Entry(v) for v in variables])
            g = Graph([Entry(node, i) for i in range(node.num_visible_outputs)])
            known = {v.name: s for v, s in zip(variables, sample.shapes)}
            try:
                inf = sg.passes.infer.infer_shapes(g, known)
            except sg.errors.SymgraphError:
                continue
            shapes = [inf.shapes[g.entry_id_of_node(v)] for v in variables]
            vals = _sample_values(sample, shapes, rng)
            if wanted(op, node.attrs):
                yield op, dict(node.attrs), vals
            if not sample.grad:
                continue
            wrt = [v.name for k, v in enumerate(variables[:node.num_args])
                   if k not in sample.ints]
            if not wrt:
                continue
            gg = build_gradient(g, wrt)
            if not any(nd.op is not None and nd.name != "op" and wanted(nd.op, nd.attrs)
                       for nd in gg.nodes):
                continue
            feeds = {v.name: x for v, x in zip(variables, vals)}
            ginf = sg.passes.infer.infer_shapes(gg, {**known, **{
                h.name: inf.shapes[g.entry_id(e)] for h, e in _heads(gg, g)}})
            for h in gg.variables:
                if h.name not in feeds:
                    feeds[h.name] = rng.normal(size=ginf.shapes[gg.entry_id_of_node(h)]
                                               ).astype("float32")
            rec = _Inputs(gg, jax.random.key(1))
            rec.run({k: jax.numpy.asarray(v) for k, v in feeds.items()})
            for nd in gg.nodes:
                if (nd.op is not None and nd.name != "op" and nd.name in rec.inputs
                        and wanted(nd.op, nd.attrs)):
                    yield nd.op, dict(nd.attrs), rec.inputs[nd.name]


def _heads(gg, g):
    """(head-gradient variable, the output it belongs to)."""
    by_name = {v.name: v for v in gg.variables}
    for e in g.outputs:
        name = e.node.output_names()[e.index] + "_head_grad"
        if name in by_name:
            yield by_name[name], e


def _aliased_graph(op, attrs, vals, i):
    """One op whose input i is a _copy of a variable (so it is planned)."""
    variables = [Node(None, f"v{k}") for k in range(len(vals))]
    ins = [Entry(v) for v in variables]
    ins[i] = Entry(Node(COPY, "x", {}, [ins[i]]))
    node = Node(op, "op", attrs, ins)
    g = Graph([Entry(node, k) for k in range(node.num_visible_outputs)])
    return g, node, {v.name: x for v, x in zip(variables, vals)}


def _run_aliased(op, attrs, vals, i, k):
    """Plans the one-op graph with output k over input i, runs it in the
    arena and normally; None where input i and output k differ in size
    (the planner never pairs them), else the interpreter."""
    if i >= len(vals):
        raise AssertionError(f"{op.name} declares input {i}, it has {len(vals)} inputs")
    g, node, feeds = _aliased_graph(op, attrs, vals, i)
    p = sg.plan(g, {n: x.shape for n, x in feeds.items()},
                dtypes={n: "float32" for n in feeds}, fuse=False)
    lv = p.live
    x = lv.tensor_of[g.entry_id(node.inputs[i])]
    o = lv.tensor_of[g.row_ptr[g.node_id(node)] + k]
    if x < 0 or o < 0 or lv.nbytes[x] != lv.nbytes[o]:
        return None
    naive = p.assignment("naive")
    off = list(naive.offset)
    off[o] = off[x]
    StaticCheck(lv).check_offsets(off, name="aliased")  # a pair the plan may take
    for seed in (0, 1):
        key = jax.random.key(seed)
        fd = {n: v + np.float32(0.125 * seed) * (v != np.round(v)) for n, v in feeds.items()}
        interp = ArenaInterpreter(lv, off, naive.total, True, key)
        got = interp.run(fd)
        assert (x, o) in interp.inplace_taken
        # JAX arrays, as the interpreter's (NumPy would divide otherwise)
        ref, _ = lower(g, True)({n: jax.numpy.asarray(v) for n, v in fd.items()}, key)
        for nm, a, b in zip(g.list_outputs(), got, ref):
            assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), (
                f"{op.name} output {k} over input {i}: '{nm}' differs when run aliased")
    return interp


def test_every_inplace_declaration_holds_when_run_aliased():
    exercised, declaring = set(), set()

    def wanted(op, attrs):
        pairs = _pairs(op, attrs)
        if pairs:
            declaring.add(op.name)
        return any((op.name,) + pk not in exercised for pk in pairs)

    for op, attrs, vals in _instances(wanted):
        for i, k in _pairs(op, attrs):
            if (op.name, i, k) not in exercised and _run_aliased(op, attrs, vals, i, k):
                exercised.add((op.name, i, k))
    done = {name for name, _, _ in exercised}
    print(f"\n{len(exercised)} inplace pairs of {len(done)} ops run aliased")
    # every op seen declaring a pair (on a sample or as a gradient builds it)
    # ran aliased on at least one of them; pairs never run had inputs of
    # another size than the output in every instance (a broadcast operand)
    assert not declaring - done, f"declared but never run aliased: {sorted(declaring - done)}"
    # and every op whose pairs do not depend on its attributes was seen
    for op in all_opdefs():
        try:
            fixed = op.inplace(None)
        except (AttributeError, TypeError):  # the pairs read the attributes
            continue
        assert not fixed or op.name in done, f"{op.name}: no instance found to run"
    assert len(done) >= 60


def _reverse_lower(p, ctx, x):
    return x.reshape(-1)[::-1].reshape(x.shape)


def test_a_wrong_inplace_declaration_is_caught():
    # reversing the elements reads, for the last ones, elements an in-place
    # kernel has already overwritten: a position-wise op it is not
    bad = OpDef("test_reverse", lower=_reverse_lower,
                infer_shape=lambda p, s: (s, [s[0]]), inplace=[(0, 0)], category="injective")
    vals = [np.arange(16, dtype="float32").reshape(2, 8)]
    with pytest.raises(PlanError, match="output op_output written in place over x_output "
                                        "differs from the step run out of place"):
        _run_aliased(bad, {}, vals, 0, 0)
    # the same op declared opaque is taken to read its input before writing
    bad.category = "opaque"
    assert _run_aliased(bad, {}, vals, 0, 0) is not None
