"""A depthwise convolution's weight gradient as per-tap sums on the CPU
(ops/conv.py ``_taps_pay``, ``_depthwise_taps``): XLA:CPU computes a grouped
weight gradient as dense masked (C, C, *kernel) products and keeps two, so
where twice the channels outnumber the output positions the taps are
smaller.

The gradients are checked against the NumPy reference written from the
math (tests/op_reference_nn.py), in float64, in both layouts (NHWC through
a transpose of the reference's NCHW)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grad_check import symgraph_gradients
from op_reference_nn import GRAD_REFERENCE_NN
from symgraph.ops import conv
from symgraph.ops.registry import get_op

MIB = 2 ** 20


def params(**attrs):
    from symgraph.graph import Node
    return Node(get_op("Convolution"), "c", attrs, []).params


@pytest.mark.parametrize("attrs,x,dy,pays", [
    # channels 64 > 2*3*3 output positions: taps
    ({"kernel": (3, 3), "pad": (1, 1), "num_group": 64, "num_filter": 64},
     (2, 64, 3, 3), (2, 64, 3, 3), True),
    # at the edge: 2*32 channels > 2*4*4 positions (the dense form keeps two
    # products); 2*16 is not
    ({"kernel": (3, 3), "pad": (1, 1), "num_group": 32, "num_filter": 32},
     (2, 32, 4, 4), (2, 32, 4, 4), True),
    ({"kernel": (3, 3), "pad": (1, 1), "num_group": 16, "num_filter": 16},
     (2, 16, 4, 4), (2, 16, 4, 4), False),
    # a big image: the dense product is smaller
    ({"kernel": (3, 3), "pad": (1, 1), "num_group": 8, "num_filter": 8},
     (2, 8, 16, 16), (2, 8, 16, 16), False),
    # two filters per group (not depthwise in the taps' sense), one group
    ({"kernel": (3, 3), "num_group": 64, "num_filter": 128}, (1, 64, 3, 3), (1, 128, 1, 1),
     False),
    ({"kernel": (3, 3), "num_filter": 64}, (1, 64, 3, 3), (1, 64, 1, 1), False),
    # channels last: the channels are the last axis
    ({"kernel": (3, 3), "pad": (1, 1), "num_group": 64, "num_filter": 64, "layout": "NHWC"},
     (2, 3, 3, 64), (2, 3, 3, 64), True)])
def test_the_taps_pay_where_twice_the_channels_outnumber_output_positions(attrs, x, dy, pays):
    assert conv._taps_pay(params(**attrs), jnp.zeros(x), jnp.zeros(dy)) is pays


CASES = [
    ({"kernel": (3, 3), "stride": (2, 2), "pad": (1, 1), "num_group": 12, "num_filter": 12},
     (1, 12, 5, 5)),
    ({"kernel": (3, 2), "stride": (1, 2), "pad": (2, 1), "dilate": (2, 1), "num_group": 20,
      "num_filter": 20, "no_bias": True}, (2, 20, 3, 3)),
    ({"kernel": (3,), "stride": (2,), "pad": (1,), "dilate": (2,), "num_group": 9,
      "num_filter": 9}, (1, 9, 7)),
]


@pytest.mark.parametrize("attrs,shape", CASES)
def test_taps_gradients_match_the_reference(attrs, shape):
    p, inputs, heads, grads = symgraph_gradients("Convolution", attrs, shape)
    dy = np.zeros(heads[0].shape)
    assert conv._taps_pay(p, jnp.asarray(inputs[0]), jnp.asarray(dy))  # the taps ran
    want = GRAD_REFERENCE_NN["Convolution"](p, inputs, heads)
    for k, (got, w) in enumerate(zip(grads, want)):
        np.testing.assert_allclose(got, w, rtol=1e-10, atol=1e-12, err_msg=f"input {k}")


@pytest.mark.parametrize("weight_layout", [None, "OIHW"])
def test_taps_gradients_in_channels_last(weight_layout):
    attrs = {"kernel": (3, 3), "stride": (2, 1), "pad": (1, 1), "num_group": 16,
             "num_filter": 16, "layout": "NHWC"}
    if weight_layout:
        attrs["weight_layout"] = weight_layout
    p, inputs, heads, grads = symgraph_gradients("Convolution", attrs, (1, 4, 3, 16))
    nchw = {k: v for k, v in attrs.items() if k not in ("layout", "weight_layout")}
    q = params(**nchw)
    x = inputs[0].transpose(0, 3, 1, 2)
    w = inputs[1] if weight_layout else inputs[1].transpose(0, 3, 1, 2)
    want = GRAD_REFERENCE_NN["Convolution"](q, [x, w, inputs[2]], [heads[0].transpose(0, 3, 1, 2)])
    np.testing.assert_allclose(grads[0], want[0].transpose(0, 2, 3, 1), rtol=1e-10, atol=1e-12)
    got_w = grads[1] if weight_layout else grads[1].transpose(0, 3, 1, 2)
    np.testing.assert_allclose(got_w, want[1], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(grads[2], want[2], rtol=1e-10, atol=1e-12)


def _backward_temp(monkeypatch, taps: bool) -> int:
    """XLA:CPU's temp bytes of a depthwise convolution's backward (256
    channels, 4x4x4 output positions), the taps switched on or off."""
    import symgraph as sg
    from symgraph.lower import lower
    from symgraph.memory.pipeline import as_graph
    from symgraph.passes.gradient import build_gradient
    if not taps:
        monkeypatch.setattr(conv, "_taps_pay", lambda p, x, dy: False)
    y = sg.sym.Convolution(sg.sym.Variable("data"), kernel=(3, 3), pad=(1, 1), num_group=256,
                           num_filter=256, no_bias=True, name="dw")
    g = build_gradient(as_graph(y), ["data", "dw_weight"])
    f32 = jnp.float32
    feeds = {"data": jax.ShapeDtypeStruct((4, 256, 4, 4), f32),
             "dw_weight": jax.ShapeDtypeStruct((256, 1, 3, 3), f32),
             "dw_output_head_grad": jax.ShapeDtypeStruct((4, 256, 4, 4), f32)}
    compiled = jax.jit(lower(g, True)).lower(feeds, jax.random.key(0)).compile()
    return compiled.memory_analysis().temp_size_in_bytes


def test_the_cpu_weight_gradient_is_not_densified(monkeypatch):
    dense = 256 * 256 * 9 * 4  # the masked (C, C, 3, 3) float32 product
    with monkeypatch.context() as m:
        without = _backward_temp(m, taps=False)
    with_taps = _backward_temp(monkeypatch, taps=True)
    assert without >= dense  # what the taps avoid (so this check can fail)
    assert with_taps < dense / 4
