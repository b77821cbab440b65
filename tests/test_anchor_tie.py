"""The anchor's tie (lower.tie_to_first, issue 29): values tied to an
incoming gradient pass bit for bit whatever the gradient holds -- inf,
NaN, -0.0 -- and the tie is still there after XLA optimises the program."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import symgraph as sg
from symgraph.lower import lower, tie_to_first
from symgraph.passes.gradient import build_gradient

S = sg.sym
SPECIAL = [np.inf, -np.inf, np.nan, 0.0, -0.0, 3.0]


_tie = jax.jit(lambda g, x, t, b: tie_to_first([g, x, t, b]))


def _bits(a):
    a = np.asarray(a)
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
@pytest.mark.parametrize("g0", SPECIAL)
def test_tied_values_pass_bit_for_bit(dtype, g0):
    x = np.array([[-0.0, 0.0, np.inf, -np.inf], [np.nan, -3.5, 7.0, 1.0]], np.float64)
    x = jnp.asarray(x, dtype)
    tiny = jnp.full((2, 2), jnp.finfo(dtype).smallest_subnormal, dtype)
    g = jnp.full((3, 2), g0, dtype)
    bias = jnp.ones(3, dtype)
    out = _tie(g, x, tiny, bias)
    for got, want in zip(out, (g, x, tiny, bias)):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(_bits(got), _bits(want))


def test_the_tie_survives_xla_optimisation():
    """The tied tensor is still computed from the gradient in the compiled
    program: the flag read from g is compared and selected on, not folded."""
    g = jnp.ones((3, 2), jnp.float32)
    x = jnp.ones((2, 4), jnp.float32)
    text = jax.jit(lambda g, x: tie_to_first([g, x])).lower(g, x).compile().as_text()
    assert "compare(" in text and "select(" in text


@pytest.mark.parametrize("g0", [np.inf, np.nan])
def test_anchored_gradients_equal_the_plain_ones_with_inf_and_nan_heads(g0):
    """A conv net's gradients under the anchor, split_wgrad and wgrad_first
    ties are those of the plain lowering when the head gradient's first
    element is inf or NaN: NaN exactly where it is NaN there (the old
    ``x + g[0]*0`` tie turned every tied input into NaN)."""
    h = S.Convolution(S.Variable("data"), kernel=(3, 3), num_filter=2, name="c")
    h = S.Activation(h, act_type="relu", name="r")
    net = S.FullyConnected(h, num_hidden=3, name="fc")
    g = net.graph()
    wrt = ["data", "c_weight", "fc_weight"]
    gg = build_gradient(g, wrt)
    rng = np.random.default_rng(0)
    feeds = {"data": rng.normal(size=(4, 1, 5, 5)), "c_weight": rng.normal(size=(2, 1, 3, 3)),
             "c_bias": rng.normal(size=2), "fc_weight": rng.normal(size=(3, 18)),
             "fc_bias": rng.normal(size=3)}
    head = rng.normal(size=(4, 3))
    head[0, 0] = g0
    feeds[next(n.name for n in gg.variables if n.name.endswith("_head_grad"))] = head
    plain, _ = jax.jit(lower(gg, True))(feeds)
    assert not np.isnan(np.asarray(plain[3])[1:]).all()  # not NaN throughout
    for kw in ({"anchor": "backward"}, {"anchor": "weights"},
               {"wgrad_chunks": 2, "anchor": "backward"}, {"wgrad_first": True}):
        got, _ = jax.jit(lower(gg, True, **kw))(feeds)
        for name, a, b in zip(gg.list_outputs(), plain, got):
            a, b = np.asarray(a), np.asarray(b)
            np.testing.assert_array_equal(np.isnan(b), np.isnan(a), err_msg=f"{kw} {name}")
            # split_wgrad sums the weight gradient in halves: rounding only
            np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12, equal_nan=True,
                                       err_msg=f"{kw} {name}")
