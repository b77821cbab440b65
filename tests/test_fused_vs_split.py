"""Gradients that do not depend on how XLA fuses (issue 11, item 6).

The max-pool backward used to route each window's gradient to the input
equal to the saved output. Inside one fused training step XLA may compute
the pooled input a second time with different rounding, so some windows
found no equal input and lost their gradient: at 224x224 a ResNet stem's
updates before the pool were off by 2-11% in the fused step and right in
the split path (forward/backward/update). The backward now finds each
window's first maximum from the input alone.

Here: the rule against a NumPy reference in both layouts (ties, padding),
the stem at the real image size against a hand-written jax.lax step (not
symgraph's lowering), and the zoo's ImageNet nets, fused step against the
split path, in float64 at 224x224, batch 2.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import symgraph as sg
from symgraph.lower import lower
from symgraph.passes.gradient import build_gradient
from symgraph.passes.infer import infer_shapes
from symgraph.passes.layout import to_channels_last
from op_reference_nn import max_pool_grad
from test_nn_ops import op_graph

S = sg.sym
LR, MOMENTUM = 0.1, 0.9


# --------------------------------------------------------------------------
# the rule: NCHW and channels-last against MXNet's first-max routing
# --------------------------------------------------------------------------
POOLS = [{"kernel": (3, 3), "stride": (2, 2), "pad": (1, 1)},
         {"kernel": (3, 3), "stride": (2, 2), "pad": (1, 1), "pooling_convention": "full"},
         {"kernel": (2, 3), "stride": (1, 2), "pad": (1, 0)},
         {"kernel": (2, 2), "stride": (2, 2)},
         {"global_pool": True}]


@pytest.mark.parametrize("attrs", POOLS)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_max_pool_backward_routes_ties_to_first_max(attrs, layout):
    """Integer inputs in {-1, 0, 1}: most windows hold several maxima, and
    windows at the border mix padding in; every window's gradient must go
    to its first maximum in row-major order, once."""
    rng = np.random.default_rng(len(str(attrs)))
    x = rng.integers(-1, 2, size=(2, 3, 7, 8)).astype(np.float64)
    g, node = op_graph("Pooling", {"pool_type": "max", **attrs})
    gg = build_gradient(g, ["data"])
    y_shape = infer_shapes(g, {"data": x.shape}).shape(g.outputs[0])
    dy = rng.normal(size=y_shape)
    if layout == "NHWC":  # the pooling and its backward channels-last (passes/layout.py)
        gg = to_channels_last(gg, {"data": x.shape, "op_output_head_grad": y_shape},
                              lead=("Pooling",))
        assert {n.params.get("layout") for n in gg.nodes if n.op is not None and
                "Pooling" in n.op.name} == {"NHWC"}
    run = jax.jit(lower(gg, True))
    (_, dx), _ = run({"data": x, "op_output_head_grad": dy}, jax.random.key(0))
    want = max_pool_grad(node.params, x, dy)
    np.testing.assert_allclose(np.asarray(dx), want, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(np.asarray(dx).sum(), dy.sum(), rtol=1e-12)



# --------------------------------------------------------------------------
# one step, fused and split, through the Module API
# --------------------------------------------------------------------------
def stem(num_classes=5):
    """ResNet's stem, the smallest net that showed the fused step wrong."""
    x = S.BatchNorm(S.Variable("data"), fix_gamma=True, name="bn_data")
    x = S.Convolution(x, kernel=(7, 7), stride=(2, 2), pad=(3, 3), num_filter=8,
                      no_bias=True, name="conv0")
    x = S.BatchNorm(x, fix_gamma=False, name="bn0")
    x = S.Activation(x, act_type="relu", name="relu0")
    x = S.Pooling(x, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="max", name="pool0")
    x = S.FullyConnected(S.Flatten(x), num_hidden=num_classes, name="fc")
    return S.SoftmaxOutput(x, name="softmax")


def module(net, shapes, devices=1, params=None, **kw):
    mod = sg.mod.Module(net, context=[sg.cpu(i) for i in range(devices)], **kw)
    mod.bind([sg.io.DataDesc("data", shapes["data"], "float64")],
             [sg.io.DataDesc("softmax_label", shapes["softmax_label"], "float64")])
    if params is None:
        mod.init_params(sg.init.Xavier(magnitude=2.0), seed=0)
    else:
        mod.init_params(arg_params=params[0], aux_params=params[1])
    mod.init_optimizer(optimizer="sgd",
                       optimizer_params={"learning_rate": LR, "momentum": MOMENTUM})
    return mod


def batch_for(shapes, num_classes, seed=0):
    rng = np.random.default_rng(seed)
    return sg.io.DataBatch([rng.normal(size=shapes["data"])],
                           [rng.integers(0, num_classes, shapes["softmax_label"]).astype(float)])


def host(mod):
    arg, aux = mod.get_params()
    return {k: v.asnumpy() for k, v in arg.items()}, {k: v.asnumpy() for k, v in aux.items()}


def fused_and_split(net, shapes, num_classes, devices=1, **kw):
    """Parameters before, after one train_step, after forward/backward/update."""
    fused = module(net, shapes, devices, **kw)
    before = host(fused)
    b = batch_for(shapes, num_classes)
    fused.train_step(b)
    split = module(net, shapes, devices, params=before, **kw)
    split.forward(b, is_train=True)
    split.backward()
    split.update()
    return before, host(fused), host(split)


def worst_update_error(before, a, b):
    """max over parameters of |update_a - update_b| / |update_b| (maxima
    over the parameter's elements: an error of the step itself, not diluted
    by the weights), and the parameter it is at. Updates are measured
    against at least 1e-3 of the step's largest: a bias before a BatchNorm
    has a gradient that is zero in exact arithmetic, its update is the
    roundoff of a sum over the batch and the image."""
    steps = {k: b[k] - before[k] for k in b}
    floor = 1e-3 * max([np.abs(v).max() for v in steps.values()], default=0.0)
    worst = (0.0, "")
    for k, step in steps.items():
        err = np.abs(a[k] - b[k]).max() / (max(np.abs(step).max(), floor) or 1.0)
        worst = max(worst, (err, k))
    return worst


def assert_same_step(before, a, b, rtol=1e-10):
    """Every parameter and aux state to ``rtol`` of its own update."""
    for i, what in enumerate(("parameter", "aux state")):
        err, at = worst_update_error(before[i], a[i], b[i])
        print(f"{what}s: worst update error {err:.1e} relative, at {at}")
        assert err <= rtol, f"{what} {at}: update differs by {err:.2e} relative"
    # most parameters moved: the comparison is about a real update
    moved = [k for k in b[0] if np.abs(b[0][k] - before[0][k]).max() > 0]
    assert len(moved) >= len(b[0]) // 2


def stem_reference(arg, aux, x, label):
    """The stem's SGD-momentum step written by hand in jax.lax (NCHW), with
    jax.grad: batch statistics, MXNet's eps=1e-3, the loss whose gradient is
    SoftmaxOutput's, rescale_grad = 1/batch, moving stats with momentum 0.9."""
    def bn(v, beta, gamma, eps=1e-3):
        mean = v.mean(axis=(0, 2, 3), keepdims=True)
        var = jnp.square(v - mean).mean(axis=(0, 2, 3), keepdims=True)
        c = lambda t: t[None, :, None, None]
        return (v - mean) / jnp.sqrt(var + eps) * c(gamma) + c(beta), mean, var

    def net(p):
        h, m1, v1 = bn(x, p["bn_data_beta"], jnp.ones_like(p["bn_data_beta"]))
        h = lax.conv_general_dilated(h, p["conv0_weight"], (2, 2), [(3, 3), (3, 3)],
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"))
        h, m2, v2 = bn(h, p["bn0_beta"], p["bn0_gamma"])
        h = lax.reduce_window(jnp.maximum(h, 0), -jnp.inf, lax.max, (1, 1, 3, 3),
                              (1, 1, 2, 2), [(0, 0), (0, 0), (1, 1), (1, 1)])
        z = h.reshape(h.shape[0], -1) @ p["fc_weight"].T + p["fc_bias"]
        loss = -jnp.take_along_axis(jax.nn.log_softmax(z), label[:, None], 1).sum()
        return loss, (m1, v1, m2, v2)

    trained = {k: v for k, v in arg.items() if k != "bn_data_gamma"}  # fix_gamma
    grads, (m1, v1, m2, v2) = jax.grad(net, has_aux=True)(trained)
    new = dict(arg)
    for k, g in grads.items():  # first step: mom = -lr * g / batch, w += mom
        new[k] = arg[k] - LR * np.asarray(g) / x.shape[0]
    stats = {"bn_data": (m1, v1), "bn0": (m2, v2)}
    new_aux = {}
    for k, v in aux.items():
        layer, kind = k.rsplit("_moving_", 1)
        batch = np.asarray(stats[layer][0 if kind == "mean" else 1]).ravel()
        new_aux[k] = v * 0.9 + batch * 0.1
    return new, new_aux


def test_stem_at_224_fused_equals_split_equals_hand_written_jax():
    shapes = {"data": (2, 3, 224, 224), "softmax_label": (2,)}
    before, fused, split = fused_and_split(stem(), shapes, 5)
    assert_same_step(before, fused, split)
    b = batch_for(shapes, 5)
    ref = stem_reference(*before, b.data[0], b.label[0].astype(int))
    assert_same_step(before, fused, ref)


def test_stem_data_parallel_fused_equals_split():
    shapes = {"data": (4, 3, 224, 224), "softmax_label": (4,)}
    assert_same_step(*fused_and_split(stem(), shapes, 5, devices=2))


# --------------------------------------------------------------------------
# the zoo's ImageNet nets at their real size: one compile of each program
# --------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["resnet-50", "vgg11", "googlenet", "inception-bn"])
def test_zoo_net_at_224_fused_equals_split(name):
    net = sg.models.get_model(name, num_classes=10)
    shapes = sg.models.data_shapes(name, 2)
    assert shapes["data"] == (2, 3, 224, 224)
    assert_same_step(*fused_and_split(net, shapes, 10))
