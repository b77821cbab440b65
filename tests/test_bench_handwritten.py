"""The hand-written plain-JAX baseline (symgraph/bench/handwritten.py):
the four benchmark nets have the zoo's parameters, name for name and shape
for shape, and small versions compute the same loss, gradients, BatchNorm
statistics and SGD step as symgraph's Module, in float64, in both layouts."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import symgraph as sg
from symgraph import models, xla
from symgraph.bench import handwritten as hw
from symgraph.models import resnet, vgg


def _zoo(name):
    if name.startswith("resnet-"):  # the hand-written ResNet is v1; the zoo's default is v2
        return resnet.get_symbol(num_layers=int(name[len("resnet-"):]), version=1)
    return models.get_model(name)


@pytest.mark.parametrize("name", list(hw.NETS))
def test_nets_have_the_zoo_parameters_and_states(name):
    net, sym = hw.get_net(name), _zoo(name)
    params, state = jax.eval_shape(lambda: net.init(jax.random.key(0), 224, "NCHW"))
    want = models.parameter_shapes(sym, (3, 224, 224))
    got = {k: tuple(v.shape[::-1]) if len(v.shape) == 2 else tuple(v.shape)
           for k, v in params.items()}  # dense weights are (in, out) here
    assert got == want
    _, _, aux = sym.infer_shape(data=(1, 3, 224, 224))
    assert dict(zip(sym.list_auxiliary_states(), map(tuple, aux))) == {
        k: tuple(v.shape) for k, v in state.items()}
    probs = jax.eval_shape(hw.infer_step_fn(net, "NHWC"), *jax.eval_shape(
        lambda: net.init(jax.random.key(0), 224, "NHWC")),
        jax.ShapeDtypeStruct((2, 224, 224, 3), jnp.float32))
    assert probs.shape == (2, 1000)


# --------------------------------------------------------------------------
# small nets against symgraph's Module, float64
# --------------------------------------------------------------------------
def _small_vgg():
    S = sg.sym
    x = vgg.get_feature(S.Variable("data"), (1, 2), (4, 6))
    for k in (6, 7):
        x = S.Activation(S.FullyConnected(x, num_hidden=8, name=f"fc{k}"), act_type="relu")
    sym = S.SoftmaxOutput(S.FullyConnected(x, num_hidden=5, name="fc8"), name="softmax")
    return sym, hw.vgg((1, 2), (4, 6), hidden=8, num_classes=5, rate=0.0), 12


def _small_resnet(bottleneck):
    filters = (8, 16, 24) if bottleneck else (8, 8, 16)  # basic: an identity first unit
    sym = resnet.resnet((2, 1), filters, 5, (3, 40, 40), bottle_neck=bottleneck, version=1)
    return sym, hw.resnet_v1((2, 1), filters, bottleneck, num_classes=5), 40


NETS = {"vgg": _small_vgg, "resnet-bottleneck": lambda: _small_resnet(True),
        "resnet-basic": lambda: _small_resnet(False)}


def _module_pass(sym, size, batch, rng):
    mod = sg.mod.Module(sym, context=sg.cpu())
    mod.bind([sg.io.DataDesc("data", (batch, 3, size, size), "float64")],
             [sg.io.DataDesc("softmax_label", (batch,), "float64")])
    mod.init_params(sg.init.Xavier(), seed=0)
    arg, aux = mod.get_params()
    # every parameter random (gamma around 1), moving stats not the defaults
    arg = {k: (rng.uniform(0.5, 1.5, v.shape) if k.endswith("gamma")
               else rng.normal(size=v.shape) * (0.3 if v.ndim > 1 else 0.1))
           for k, v in arg.items()}
    aux = {k: (rng.uniform(0.5, 2, v.shape) if k.endswith("var") else rng.normal(size=v.shape))
           for k, v in aux.items()}
    mod.set_params({k: sg.nd.array(v, dtype="float64") for k, v in arg.items()},
                   {k: sg.nd.array(v, dtype="float64") for k, v in aux.items()})
    x = rng.normal(size=(batch, 3, size, size))
    y = rng.integers(0, 5, size=batch)
    mod.forward(sg.io.DataBatch([sg.nd.array(x, dtype="float64")],
                                [sg.nd.array(y.astype(np.float64), dtype="float64")]),
                is_train=True)
    probs = mod.get_outputs()[0].asnumpy()
    mod.backward()
    grads = {k: v.asnumpy() for k, v in mod.get_grads().items()}
    _, new_aux = mod.get_params()
    return arg, aux, x, y, probs, grads, {k: v.asnumpy() for k, v in new_aux.items()}


_MODULE_PASSES = {}


def _module_pass_once(which):
    """The Module's pass of a small net, shared by both layouts' tests."""
    if which not in _MODULE_PASSES:
        sym, net, size = NETS[which]()
        _MODULE_PASSES[which] = (net, size) + _module_pass(sym, size, 2,
                                                           np.random.default_rng(0))
    return _MODULE_PASSES[which]


# both layouts of the VGG (an NHWC flatten reorders fc6's inputs); each
# ResNet in one layout (the layers are the same), to keep the test short
@pytest.mark.parametrize("which,layout", [("vgg", "NCHW"), ("vgg", "NHWC"),
                                          ("resnet-bottleneck", "NCHW"),
                                          ("resnet-basic", "NHWC")])
def test_small_net_step_equals_symgraphs_module(which, layout):
    # one donated training step from zero momentum with lr 1: the update is
    # minus the gradient of the mean cross-entropy, whose batch sum is what
    # SoftmaxOutput's backward gives
    net, size, arg, aux, x, y, probs, grads, new_aux = _module_pass_once(which)
    batch = x.shape[0]
    params, state = hw.from_mxnet(net, arg, aux, size, layout)
    step = hw.step(net, batch, size, layout, dtype="float64", num_classes=5, lr=1.0)
    mom = jax.tree.map(jnp.zeros_like, params)
    xs = x if layout == "NCHW" else x.transpose(0, 2, 3, 1)
    loss, p2, m2, st = step.jit()(params, mom, state, jnp.asarray(xs),
                                  jnp.asarray(y, jnp.int32), jax.random.key(0))
    assert float(loss) == pytest.approx(-np.mean(np.log(probs[np.arange(batch), y])), rel=1e-12)
    new = hw.to_mxnet_grads(net, p2, size, layout)
    momentum = hw.to_mxnet_grads(net, m2, size, layout)
    assert set(new) == set(grads)
    for k, g in grads.items():
        np.testing.assert_allclose(arg[k] - new[k], g / batch, rtol=1e-9, atol=1e-11,
                                   err_msg=k)
        np.testing.assert_allclose(momentum[k], -g / batch, rtol=1e-9, atol=1e-11, err_msg=k)
    for k, v in new_aux.items():  # BatchNorm's moving statistics
        np.testing.assert_allclose(np.asarray(st[k]), v, rtol=1e-10, atol=1e-12, err_msg=k)


def test_step_compiles_for_memory_analysis_with_symgraphs_options():
    net = hw.vgg((1,), (4,), hidden=8, num_classes=3)
    train = hw.step(net, 2, 8, "NHWC", scheduler=True)
    assert train.donate == (0, 1)
    if jax.default_backend() == "cpu":
        assert train.compiler_options == hw.scheduler_options()
    m = xla.memory(train)
    assert m is not None and m["temp"] > 0
    infer = hw.step(net, 2, 8, "NCHW", train=False)
    assert infer.donate == () and xla.memory(infer) is not None
    # real arguments of the same structure run; the loss falls on a repeated batch
    args = hw.real_args(net, 2, 8, "NHWC")
    f = train.jit()
    losses = []
    for _ in range(3):
        loss, p, m, st = f(*args)
        args = (p, m, st) + args[3:]
        losses.append(float(loss))
    assert losses[-1] < losses[0]
    probs = infer.jit()(*hw.real_args(net, 2, 8, "NCHW", train=False))
    np.testing.assert_allclose(np.asarray(probs).sum(axis=1), 1.0, rtol=1e-5)


def test_bad_net_or_layout_is_refused():
    with pytest.raises(hw.HandwrittenError, match="no hand-written net 'vgg19'"):
        hw.step("vgg19", 2)
    with pytest.raises(hw.HandwrittenError, match="layout must be one of NCHW, NHWC"):
        hw.step("vgg16", 2, layout="NCWH")


@pytest.mark.parametrize("which", ["vgg", "resnet-bottleneck"])
@pytest.mark.parametrize("policy", hw.REMAT_POLICIES)
def test_checkpointed_blocks_give_the_same_step(which, policy):
    # jax.checkpoint per block recomputes, it must not change the numbers:
    # the same step as symgraph's Module (float64), under every policy
    net, size, arg, aux, x, y, probs, grads, new_aux = _module_pass_once(which)
    batch = x.shape[0]
    params, state = hw.from_mxnet(net, arg, aux, size, "NCHW")
    step = hw.step(net, batch, size, "NCHW", dtype="float64", num_classes=5, lr=1.0,
                   remat=policy)
    mom = jax.tree.map(jnp.zeros_like, params)
    _, p2, _, st = step.jit()(params, mom, state, jnp.asarray(x), jnp.asarray(y, jnp.int32),
                              jax.random.key(0))
    new = hw.to_mxnet_grads(net, p2, size, "NCHW")
    for k, g in grads.items():
        np.testing.assert_allclose(arg[k] - new[k], g / batch, rtol=1e-9, atol=1e-11,
                                   err_msg=k)
    for k, v in new_aux.items():
        np.testing.assert_allclose(np.asarray(st[k]), v, rtol=1e-10, atol=1e-12, err_msg=k)


def test_unknown_remat_policy_is_refused():
    with pytest.raises(hw.HandwrittenError, match="remat="):
        hw.train_step_fn(hw.vgg((1,), (4,), hidden=8, num_classes=3), remat="everything")
