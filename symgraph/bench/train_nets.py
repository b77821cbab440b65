"""The two nets ``symgraph bench train`` times, each written twice: as a
symgraph Symbol and by hand in plain JAX (NCHW, the same initial weights),
with the hand-written data-parallel training step beside them."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

import symgraph as sg

CLASSES = 10
LR, MOMENTUM = 0.01, 0.9
BN_EPS, BN_MOMENTUM = 2e-5, 0.9

# --------------------------------------------------------------------------
# the nets in symgraph
# --------------------------------------------------------------------------
S = sg.sym
VGG_STAGES = (32, 64, 128)
RESNET_STAGES = ((16, 1), (32, 2), (64, 2))


def vgg_symbol():
    x = S.Variable("data")
    for i, width in enumerate(VGG_STAGES):
        for j in range(2):
            x = S.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=width,
                              name=f"conv{i}_{j}")
            x = S.Activation(x, act_type="relu", name=f"relu{i}_{j}")
        x = S.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max", name=f"pool{i}")
    x = S.Flatten(x, name="flatten")
    x = S.FullyConnected(x, num_hidden=256, name="fc1")
    x = S.Activation(x, act_type="relu", name="relu_fc1")
    x = S.FullyConnected(x, num_hidden=CLASSES, name="fc2")
    return S.SoftmaxOutput(x, name="softmax")


def _bn(x, name):
    return S.BatchNorm(x, fix_gamma=False, eps=BN_EPS, momentum=BN_MOMENTUM, name=name)


def resnet_symbol():
    x = S.Convolution(S.Variable("data"), kernel=(3, 3), pad=(1, 1), num_filter=16,
                      no_bias=True, name="stem_conv")
    x = S.Activation(_bn(x, "stem_bn"), act_type="relu", name="stem_relu")
    width_in = 16
    for i, (width, stride) in enumerate(RESNET_STAGES):
        y = S.Convolution(x, kernel=(3, 3), pad=(1, 1), stride=(stride, stride),
                          num_filter=width, no_bias=True, name=f"s{i}_conv1")
        y = S.Activation(_bn(y, f"s{i}_bn1"), act_type="relu", name=f"s{i}_relu1")
        y = S.Convolution(y, kernel=(3, 3), pad=(1, 1), num_filter=width, no_bias=True,
                          name=f"s{i}_conv2")
        y = _bn(y, f"s{i}_bn2")
        short = x if (width == width_in and stride == 1) else S.Convolution(
            x, kernel=(1, 1), stride=(stride, stride), num_filter=width, no_bias=True,
            name=f"s{i}_short")
        x = S.Activation(y + short, act_type="relu", name=f"s{i}_relu2")
        width_in = width
    x = S.Pooling(x, global_pool=True, kernel=(1, 1), pool_type="avg", name="gap")
    x = S.FullyConnected(S.Flatten(x, name="flatten"), num_hidden=CLASSES, name="fc")
    return S.SoftmaxOutput(x, name="softmax")


# --------------------------------------------------------------------------
# the same nets in plain JAX (NCHW, the parameters named as symgraph names them)
# --------------------------------------------------------------------------
def _conv(x, w, b=None, stride=1, pad=1):
    y = lax.conv_general_dilated(x, w, (stride, stride), [(pad, pad), (pad, pad)],
                                 dimension_numbers=("NCHW", "OIHW", "NCHW"))
    return y if b is None else y + b[None, :, None, None]


def _maxpool(x):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")


def _batchnorm(x, p, aux, name, new_aux):
    mean = x.mean(axis=(0, 2, 3))
    var = jnp.square(x - mean[None, :, None, None]).mean(axis=(0, 2, 3))
    new_aux[f"{name}_moving_mean"] = aux[f"{name}_moving_mean"] * BN_MOMENTUM + \
        lax.stop_gradient(mean) * (1 - BN_MOMENTUM)
    new_aux[f"{name}_moving_var"] = aux[f"{name}_moving_var"] * BN_MOMENTUM + \
        lax.stop_gradient(var) * (1 - BN_MOMENTUM)
    scale = p[f"{name}_gamma"] * lax.rsqrt(var + BN_EPS)
    return (x - mean[None, :, None, None]) * scale[None, :, None, None] + \
        p[f"{name}_beta"][None, :, None, None]


def vgg_plain(p, aux, x):
    for i in range(len(VGG_STAGES)):
        for j in range(2):
            x = jax.nn.relu(_conv(x, p[f"conv{i}_{j}_weight"], p[f"conv{i}_{j}_bias"]))
        x = _maxpool(x)
    x = x.reshape(x.shape[0], -1)
    x = jax.nn.relu(x @ p["fc1_weight"].T + p["fc1_bias"])
    return x @ p["fc2_weight"].T + p["fc2_bias"], {}


def resnet_plain(p, aux, x):
    new_aux: dict = {}
    x = jax.nn.relu(_batchnorm(_conv(x, p["stem_conv_weight"]), p, aux, "stem_bn", new_aux))
    width_in = 16
    for i, (width, stride) in enumerate(RESNET_STAGES):
        y = _conv(x, p[f"s{i}_conv1_weight"], stride=stride)
        y = jax.nn.relu(_batchnorm(y, p, aux, f"s{i}_bn1", new_aux))
        y = _batchnorm(_conv(y, p[f"s{i}_conv2_weight"]), p, aux, f"s{i}_bn2", new_aux)
        short = x if (width == width_in and stride == 1) else \
            _conv(x, p[f"s{i}_short_weight"], stride=stride, pad=0)
        x = jax.nn.relu(y + short)
        width_in = width
    x = x.mean(axis=(2, 3))
    return x @ p["fc_weight"].T + p["fc_bias"], new_aux


NETS = {"resnet": (resnet_symbol, resnet_plain), "vgg": (vgg_symbol, vgg_plain)}


def plain_step_fn(forward, devices: list, batch: int):
    """The hand-written training step: jax.grad of the summed cross-entropy
    (the gradient SoftmaxOutput starts), a psum over devices, MXNet's SGD
    with momentum and rescale 1/batch, in one jitted program."""
    n = len(devices)

    def local(params, mom, aux, x, y):
        def loss(p):
            logits, new_aux = forward(p, aux, x)
            logp = jax.nn.log_softmax(logits)
            return -jnp.sum(jnp.take_along_axis(logp, y[:, None].astype(jnp.int32), 1)), \
                (jax.nn.softmax(logits), new_aux)

        grads, (probs, new_aux) = jax.grad(loss, has_aux=True)(params)
        if n > 1:
            grads = lax.psum(grads, "batch")
            new_aux = lax.pmean(new_aux, "batch")
        mom = jax.tree.map(lambda m, g: MOMENTUM * m - LR * (g / batch), mom, grads)
        params = jax.tree.map(lambda w, m: w + m, params, mom)
        return params, mom, {**aux, **new_aux}, probs

    if n == 1:
        return jax.jit(local, donate_argnums=(0, 1, 2))
    mesh = Mesh(np.array(devices), ("batch",))
    fn = jax.shard_map(local, mesh=mesh, in_specs=(P(), P(), P(), P("batch"), P("batch")),
                       out_specs=(P(), P(), P(), P("batch")), check_vma=False)
    return jax.jit(fn, donate_argnums=(0, 1, 2))
