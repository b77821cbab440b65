"""The suite's other tests run with jax_enable_x64 on (tests/conftest.py);
users run with it off. Here, with it off (the x64_off marker): every op's
forward and the layers' gradients against the NumPy references in float32
with float32 tolerances, a Module trained by ``fit`` against a NumPy
float64 replay of the same steps, and NDArray basics."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import symgraph as sg
from symgraph.errors import SymgraphError
from symgraph.graph import Entry, Graph, Node
from symgraph.lower import lower
from symgraph.ops import all_opdefs
from symgraph.passes.infer import infer_shapes

from grad_check import CASE_IDS, CASES, symgraph_gradients
from op_reference import REFERENCE
from op_reference_nn import GRAD_REFERENCE_NN

pytestmark = pytest.mark.x64_off


def test_x64_is_off_here_and_float32_is_the_default():
    assert not jax.config.read("jax_enable_x64")
    assert jnp.asarray(np.zeros(2)).dtype == jnp.float32
    assert sg.nd.zeros((2, 3)).dtype == np.float32
    # process-wide: a thread (Module.fit's prefetch) sees it off too
    import threading
    seen = []
    t = threading.Thread(target=lambda: seen.append(jax.config.read("jax_enable_x64")))
    t.start()
    t.join()
    assert seen == [False]


# --------------------------------------------------------------------------
# every op's forward, float32 in and out, against the float64 NumPy reference
# --------------------------------------------------------------------------
def _is_64bit(sample):
    return any(isinstance(v, str) and "64" in v for v in sample.attrs.values())


FORWARD = [(op, i, s) for op in all_opdefs() if not op.name.startswith("_backward")
           and not op.needs_rng for i, s in enumerate(op.samples) if not _is_64bit(s)]


@pytest.mark.parametrize("op,i,sample", FORWARD, ids=[f"{op.name}-{i}" for op, i, _ in FORWARD])
def test_forward_in_float32_matches_reference(op, i, sample):
    n = Node(op, "op", sample.attrs, [])
    names = op.arg_names(n.params) + op.aux_names(n.params)
    variables = [Node(None, f"in_{nm}") for nm in names]
    node = Node(op, "op", sample.attrs, [Entry(v) for v in variables])
    g = Graph([Entry(node, k) for k in range(node.num_visible_outputs)])
    known = {f"in_{nm}": s for nm, s in zip(names, sample.shapes)}
    inf = infer_shapes(g, known, dtypes={v.name: "float32" for v in variables})
    rng = np.random.default_rng(i)
    vals = {}
    for k, v in enumerate(variables):
        shape = inf.shapes[g.entry_id_of_node(v)]
        if k in sample.ints:
            vals[v.name] = rng.integers(0, sample.ints[k], size=shape).astype(np.float32)
        else:
            vals[v.name] = rng.uniform(sample.low, sample.high, size=shape).astype(np.float32)
    outs, _ = jax.jit(lower(g, is_train=False))(vals, jax.random.key(0))
    want = REFERENCE[op.name](node.params, *[vals[v.name].astype(np.float64) for v in variables])
    want = want if isinstance(want, tuple) else (want,)
    for o, w in zip(outs, want):
        if np.issubdtype(np.asarray(w).dtype, np.floating):
            assert o.dtype != jnp.float64  # nothing turns 64-bit behind the user's back
        np.testing.assert_allclose(np.asarray(o, np.float64), w, rtol=2e-5, atol=2e-6)


# --------------------------------------------------------------------------
# the layers' gradients in float32
# --------------------------------------------------------------------------
@pytest.mark.parametrize("opname,attrs,shape", CASES, ids=CASE_IDS)
def test_gradient_in_float32_matches_numpy_reference(opname, attrs, shape):
    p, inputs, heads, grads = symgraph_gradients(opname, attrs, shape, dtype="float32")
    want = GRAD_REFERENCE_NN[opname](p, [x.astype(np.float64) for x in inputs],
                                     [h.astype(np.float64) for h in heads])
    for k, (got, w) in enumerate(zip(grads, want)):
        assert got.dtype == np.float32
        scale = max(1.0, float(np.abs(w).max()))
        np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-5 * scale,
                                   err_msg=f"{opname} {attrs}: gradient of input {k}")


# --------------------------------------------------------------------------
# Module.fit, float32, against a NumPy float64 replay
# --------------------------------------------------------------------------
def _mlp():
    S = sg.sym
    x = S.FullyConnected(S.Variable("data"), num_hidden=6, name="fc1")
    x = S.Activation(x, act_type="relu", name="relu1")
    x = S.FullyConnected(x, num_hidden=3, name="fc2")
    return S.SoftmaxOutput(x, name="softmax")


def _numpy_replay(params, xs, ys, batch, lr, momentum, epochs):
    """SGD with momentum (MXNet's rule, gradients rescaled by 1/batch) on
    FC-ReLU-FC-softmax cross-entropy, in float64."""
    p = {k: v.astype(np.float64) for k, v in params.items()}
    mom = {k: np.zeros_like(v) for k, v in p.items()}
    for _ in range(epochs):
        for s in range(0, len(xs), batch):
            x, y = xs[s:s + batch].astype(np.float64), ys[s:s + batch].astype(int)
            h = x @ p["fc1_weight"].T + p["fc1_bias"]
            a = np.maximum(h, 0)
            z = a @ p["fc2_weight"].T + p["fc2_bias"]
            e = np.exp(z - z.max(1, keepdims=True))
            dz = e / e.sum(1, keepdims=True) - np.eye(3)[y]
            da = dz @ p["fc2_weight"]
            dh = da * (h > 0)
            grads = {"fc2_weight": dz.T @ a, "fc2_bias": dz.sum(0),
                     "fc1_weight": dh.T @ x, "fc1_bias": dh.sum(0)}
            for k in p:
                mom[k] = momentum * mom[k] - lr * grads[k] / batch
                p[k] = p[k] + mom[k]
    return p


def test_module_fit_in_float32_matches_a_numpy_replay():
    rng = np.random.default_rng(0)
    xs = rng.normal(size=(32, 5)).astype(np.float32)
    ys = rng.integers(0, 3, size=32).astype(np.float32)
    init = {"fc1_weight": rng.normal(size=(6, 5)) * 0.5, "fc1_bias": rng.normal(size=6) * 0.1,
            "fc2_weight": rng.normal(size=(3, 6)) * 0.5, "fc2_bias": np.zeros(3)}
    init32 = {k: v.astype(np.float32) for k, v in init.items()}
    mod = sg.mod.Module(_mlp(), context=sg.cpu())
    it = sg.io.NDArrayIter(xs, ys, batch_size=8, label_name="softmax_label")
    mod.fit(it, num_epoch=2, optimizer="sgd",
            optimizer_params={"learning_rate": 0.2, "momentum": 0.9},
            arg_params={k: sg.nd.array(v) for k, v in init32.items()})
    got, _ = mod.get_params()
    want = _numpy_replay(init32, xs, ys, 8, 0.2, 0.9, 2)
    for k, w in want.items():
        assert got[k].dtype == np.float32
        np.testing.assert_allclose(got[k].asnumpy(), w, rtol=1e-4, atol=1e-5, err_msg=k)
    # it learned something: the replay is not the initial weights
    assert max(np.abs(want[k] - init[k]).max() for k in init) > 0.05


def test_module_in_float32_scores_what_it_trained_on():
    # forward after fit gives the softmax of the trained weights, in float32
    rng = np.random.default_rng(1)
    xs = rng.normal(size=(16, 5)).astype(np.float32)
    ys = (xs[:, 0] > 0).astype(np.float32)
    mod = sg.mod.Module(_mlp(), context=sg.cpu())
    it = sg.io.NDArrayIter(xs, ys, batch_size=8, label_name="softmax_label")
    mod.fit(it, num_epoch=30, optimizer="sgd", initializer=sg.init.Xavier(),
            optimizer_params={"learning_rate": 0.5, "momentum": 0.9}, seed=0)
    (acc,) = [v for _, v in mod.score(it, "acc")]
    assert acc >= 0.9
    out = mod.predict(it)
    assert out.dtype == np.float32 and out.shape == (16, 3)


# --------------------------------------------------------------------------
# NDArray basics
# --------------------------------------------------------------------------
def test_ndarray_basics_in_float32():
    a = sg.nd.array([[1.0, 2.0], [3.0, 4.0]])
    b = sg.nd.ones((2, 2)) * 2
    assert a.dtype == np.float32 and b.dtype == np.float32
    np.testing.assert_array_equal((a + b).asnumpy(), [[3, 4], [5, 6]])
    np.testing.assert_array_equal((a * b - 1).asnumpy(), [[1, 3], [5, 7]])
    np.testing.assert_allclose((1 / a).asnumpy(), [[1, 0.5], [1 / 3, 0.25]], rtol=1e-7)
    a += 1
    np.testing.assert_array_equal(a.asnumpy(), [[2, 3], [4, 5]])
    # a NumPy float64 array becomes float32, as in MXNet (nd.array's default)
    c = sg.nd.array(np.arange(6, dtype=np.float64).reshape(2, 3))
    assert c.dtype == np.float32
    assert c.reshape((3, 2)).asnumpy().tolist() == [[0, 1], [2, 3], [4, 5]]
    # ops through sg.nd stay float32
    r = sg.nd.relu(a - 3)
    assert r.dtype == np.float32 and r.asnumpy().tolist() == [[0, 0], [1, 2]]
    w = c.reshape((3, 2))
    y = sg.nd.FullyConnected(a, w, num_hidden=3, no_bias=True)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y.asnumpy(), a.asnumpy() @ w.asnumpy().T)


@pytest.mark.parametrize("make", [
    lambda: sg.nd.zeros((2,), dtype="float64"),
    lambda: sg.nd.array([1.0, 2.0], dtype="float64"),
    lambda: sg.nd.ones((2,)).astype("int64"),
])
def test_ndarray_refuses_64_bit_dtypes_when_x64_is_off(make):
    # JAX would silently make 32 bits; symgraph says so instead
    with pytest.raises(SymgraphError, match="64-bit JAX"):
        make()
