"""Registry-driven op tests: every registered op, every sample, checked
forward against tests/op_reference.py, its inferred shapes against the
lowered output, and its symbolic gradient against a NumPy gradient
reference where one exists (GRAD_REFERENCE: the layers whose backward is
itself built from jax.vjp of the forward lowering, so a vjp check would
compare the code with itself), else against jax.vjp of its lowering (ops
whose backward is written by hand). Nobody has to remember to add an op
here."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import symgraph as sg
from symgraph.graph import Entry, Graph, Node
from symgraph.lower import lower
from symgraph.ops import all_opdefs
from symgraph.passes.gradient import build_gradient
from symgraph.passes.infer import infer_shapes

from op_reference import LOSS_GRAD, REFERENCE
from op_reference_nn import GRAD_REFERENCE_NN as GRAD_REFERENCE

FORWARD_OPS = [op for op in all_opdefs() if not op.name.startswith("_backward")]
CASES = [(op, i, s) for op in FORWARD_OPS for i, s in enumerate(op.samples)]
IDS = [f"{op.name}-{i}" for op, i, _ in CASES]


def test_every_op_has_samples_and_a_reference():
    missing = [op.name for op in FORWARD_OPS if not op.samples]
    assert not missing, f"ops without samples: {missing}"
    no_ref = [op.name for op in FORWARD_OPS if op.name not in REFERENCE]
    assert not no_ref, f"ops without a reference: {no_ref}"


def test_every_op_has_a_gradient_rule():
    # an op with no gradient would be skipped by the vjp check below and fail
    # only when a user's backward reaches it; ops that stop the gradient say
    # so with a rule that returns None (BlockGrad, zeros_like)
    missing = [op.name for op in FORWARD_OPS if op.gradient is None]
    assert not missing, f"ops without a gradient rule: {missing}"


def _single_op_graph(op, sample):
    n = Node(op, "op", sample.attrs, [])
    names = op.arg_names(n.params) + op.aux_names(n.params)
    shapes = list(sample.shapes)
    assert len(shapes) <= len(names)
    variables = [Node(None, f"in_{nm}") for nm in names]
    node = Node(op, "op", sample.attrs, [Entry(v) for v in variables])
    g = Graph([Entry(node, i) for i in range(node.num_visible_outputs)])
    known = {f"in_{nm}": s for nm, s in zip(names, shapes)}
    return g, node, variables, known


def _inputs(sample, g, inf, variables, rng):
    vals = {}
    for k, v in enumerate(variables):
        shape = inf.shapes[g.entry_id_of_node(v)]
        dtype = "float64"
        if k in sample.ints:
            vals[v.name] = rng.integers(0, sample.ints[k], size=shape).astype(dtype)
        else:
            vals[v.name] = rng.uniform(sample.low, sample.high, size=shape).astype(dtype)
    return vals


@pytest.mark.parametrize("op,i,sample", CASES, ids=IDS)
def test_forward_matches_reference_and_shapes(op, i, sample):
    g, node, variables, known = _single_op_graph(op, sample)
    inf = infer_shapes(g, known)
    rng = np.random.default_rng(i)
    vals = _inputs(sample, g, inf, variables, rng)
    outs, _ = jax.jit(lower(g, is_train=False))(vals, jax.random.key(0))
    for e, o in zip(g.outputs, outs):
        assert tuple(o.shape) == inf.shapes[g.entry_id(e)], "inferred shape != lowered shape"
    if op.needs_rng:
        return  # random ops are checked by their own tests
    want = REFERENCE[op.name](node.params, *[vals[v.name] for v in variables])
    want = want if isinstance(want, tuple) else (want,)
    for o, w in zip(outs, want):
        np.testing.assert_allclose(np.asarray(o), w, rtol=1e-6, atol=1e-8)


def _grad_cases():
    # every sample not marked grad=False; an op without a rule fails here too
    return [(op, i, s) for op, i, s in CASES if s.grad]


@pytest.mark.parametrize("op,i,sample", _grad_cases(),
                         ids=[f"{op.name}-{i}" for op, i, _ in _grad_cases()])
def test_gradient_matches_reference(op, i, sample):
    g, node, variables, known = _single_op_graph(op, sample)
    # the inputs are float64; the head gradients take each output's dtype
    # (Cast to float32 needs a float32 head)
    inf = infer_shapes(g, known, dtypes={v.name: "float64" for v in variables})
    rng = np.random.default_rng(100 + i)
    vals = _inputs(sample, g, inf, variables, rng)
    n_args = node.num_args
    wrt = [v.name for k, v in enumerate(variables[:n_args]) if k not in sample.ints]
    gg = build_gradient(g, wrt)
    heads = {}
    for e in g.outputs:
        name = e.node.output_names()[e.index] + "_head_grad"
        heads[name] = rng.normal(size=inf.shapes[g.entry_id(e)]).astype(inf.dtype(e))
    feeds = {**vals, **{k: v for k, v in heads.items()
                        if k in {n.name for n in gg.variables}}}
    outs, _ = jax.jit(lower(gg, is_train=True))(feeds, jax.random.key(1))
    grads = dict(zip(wrt, outs[len(g.outputs):]))

    args = [jnp.asarray(vals[v.name]) for v in variables]
    if op.is_loss:
        y = np.asarray(outs[0])
        want = LOSS_GRAD[op.name](node.params, y, *[vals[v.name] for v in variables])
        np.testing.assert_allclose(np.asarray(grads[wrt[0]]), want, rtol=1e-6, atol=1e-9)
        return
    if op.name in GRAD_REFERENCE:
        heads_in_order = [heads[e.node.output_names()[e.index] + "_head_grad"] for e in g.outputs]
        want = GRAD_REFERENCE[op.name](node.params, [vals[v.name] for v in variables],
                                       heads_in_order)
        for k, v in enumerate(variables[:n_args]):
            if v.name in grads:
                np.testing.assert_allclose(np.asarray(grads[v.name]), want[k], rtol=1e-10,
                                           atol=1e-12, err_msg=f"gradient of input {v.name}")
        return
    key = jax.random.key(1)
    ctx = sg.lower.LowerCtx(True, key, "op")
    idx = [k for k, v in enumerate(variables[:n_args]) if v.name in grads]

    def f(*xs):
        full = list(args)
        for k, x in zip(idx, xs):
            full[k] = x
        res = op.lower(node.params, ctx, *full)
        if op.aux_names(node.params):
            res = res[0]
        res = res if isinstance(res, (tuple, list)) else (res,)
        return tuple(res[: node.num_visible_outputs])

    _, vjp = jax.vjp(f, *[args[k] for k in idx])
    cot = tuple(jnp.asarray(heads[e.node.output_names()[e.index] + "_head_grad"])
                for e in g.outputs)
    want = vjp(cot)
    for k, w in zip(idx, want):
        got = np.asarray(grads[variables[k].name])
        np.testing.assert_allclose(got, np.asarray(w), rtol=1e-6, atol=1e-9,
                                   err_msg=f"gradient of input {variables[k].name}")
