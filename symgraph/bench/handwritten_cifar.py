"""The DAWNBench CIFAR-10 recipe written by hand in plain JAX: the baseline
of ``symgraph bench cifar``. Nothing here imports symgraph -- only ``jax``
and ``numpy`` -- so the comparison is with what a JAX user would write.

    from symgraph.bench import handwritten_cifar as hc
    params, aux = hc.init(jax.random.key(0))               # NHWC net, HWIO weights
    step = hc.make_step(batch=512, dtype='bfloat16')       # jitted, donating
    aug = hc.make_augment('float32')                       # jitted
    x = aug(key, uint8_nhwc)                               # [N, 32, 32, 3]
    batch = hc.make_batch('float32')                       # gather + augment, on device
    x, labels = batch(key, epoch, nbatch, images_on_device, labels_on_device, idx)
    params, mom, aux, loss = step(params, mom, aux, x, labels, lr)

The net is ``resnet9-dawn`` (symgraph/models/resnet9.py) in NHWC: 3x3
convolutions without bias (``lax.conv_general_dilated``), BatchNorm with
batch statistics in training (computed in float32; eps 1e-5, moving
averages with momentum 0.9 and the biased variance, as MXNet's), ReLU,
2x2 max-pooling (``lax.reduce_window``), residual blocks in layer1 and
layer3, a global max-pool, a dense layer without bias times 0.125. The
loss is the cross-entropy summed over the batch against labels smoothed
as MXNet's ``SoftmaxOutput(smooth_alpha=0.2)`` (the true class 0.8, the
others 0.2/9). Parameters are float32 and cast to ``dtype`` where used
(so bfloat16 computes with float32 master weights, as symgraph's
``compute_dtype``); gradients come back in float32.

The update is MXNet's ``nag`` with ``rescale_grad = 1/batch`` and weight
decay on ``*_weight`` and ``*_gamma`` only (MXNet's default): ``g =
grad/batch + wd*w; mom = momentum*mom - lr*g; w += momentum*mom - lr*g``.
The augmentation (``augment``) is written here again in ``jax.numpy``,
on NHWC uint8 images: normalise, reflect-pad 4, a random 32x32 crop, a
left-right flip with probability 1/2, one 8x8 cutout lying inside the
image. ``ema_fn`` is the moving average of the weights and aux states.

Names are those of symgraph's net (``prep_conv_weight``,
``layer1_res2_bn_gamma``, ``fc_weight``, ...), so ``from_mxnet`` takes a
symgraph Module's parameters (OIHW convolution weights) onto this net.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

WIDTHS = (64, 128, 256, 512)
EPS, BN_MOMENTUM, OUTPUT_SCALE, SMOOTH_ALPHA = 1e-5, 0.9, 0.125, 0.2
MEAN = np.array([0.4914, 0.4822, 0.4465], np.float32) * 255
STD = np.array([0.2471, 0.2435, 0.2616], np.float32) * 255


def layers(widths=WIDTHS) -> list[tuple[str, int, int]]:
    """(name, input channels, output channels) of every conv-BN-ReLU."""
    w0, w1, w2, w3 = (int(v) for v in widths)
    return [("prep", 3, w0), ("layer1", w0, w1), ("layer1_res1", w1, w1),
            ("layer1_res2", w1, w1), ("layer2", w1, w2), ("layer3", w2, w3),
            ("layer3_res1", w3, w3), ("layer3_res2", w3, w3)]


def init(key, widths=WIDTHS, classes: int = 10):
    """(params, aux): Xavier-uniform weights (magnitude 3, the average of
    fan in and out), gamma 1, beta 0, moving mean 0, moving variance 1."""
    params, aux = {}, {}
    keys = jax.random.split(key, len(layers(widths)) + 1)
    for k, (name, cin, cout) in zip(keys, layers(widths)):
        scale = np.sqrt(3.0 / ((cin * 9 + cout * 9) / 2))
        params[f"{name}_conv_weight"] = jax.random.uniform(k, (3, 3, cin, cout), jnp.float32,
                                                           -scale, scale)
        params[f"{name}_bn_gamma"] = jnp.ones((cout,), jnp.float32)
        params[f"{name}_bn_beta"] = jnp.zeros((cout,), jnp.float32)
        aux[f"{name}_bn_moving_mean"] = jnp.zeros((cout,), jnp.float32)
        aux[f"{name}_bn_moving_var"] = jnp.ones((cout,), jnp.float32)
    c = int(widths[3])
    scale = np.sqrt(3.0 / ((c + classes) / 2))
    params["fc_weight"] = jax.random.uniform(keys[-1], (classes, c), jnp.float32, -scale, scale)
    return params, aux


def from_mxnet(arg_params: dict, aux_params: dict, dtype=None):
    """(params, aux) of this net from MXNet-layout arrays (NumPy or
    anything ``np.asarray`` reads): OIHW convolution weights become HWIO."""
    def arr(v):
        v = np.asarray(v.asnumpy() if hasattr(v, "asnumpy") else v)
        return jnp.asarray(v if dtype is None else v.astype(dtype))
    params = {k: arr(np.transpose(np.asarray(v.asnumpy() if hasattr(v, "asnumpy") else v),
                                  (2, 3, 1, 0))) if k.endswith("_conv_weight") else arr(v)
              for k, v in arg_params.items()}
    return params, {k: arr(v) for k, v in aux_params.items()}


# --------------------------------------------------------------------------
# the net
# --------------------------------------------------------------------------
def _conv_bn_relu(params, aux, new_aux, x, name, train, dtype):
    w = params[f"{name}_conv_weight"].astype(dtype)
    x = lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)),
                                 dimension_numbers=("NHWC", "HWIO", "NHWC"))
    stat = jnp.promote_types(dtype, jnp.float32)
    if train:
        xf = x.astype(stat)
        mean = xf.mean(axis=(0, 1, 2))
        var = jnp.square(xf - mean).mean(axis=(0, 1, 2))
        mm, mv = aux[f"{name}_bn_moving_mean"], aux[f"{name}_bn_moving_var"]
        new_aux[f"{name}_bn_moving_mean"] = mm * BN_MOMENTUM + \
            lax.stop_gradient(mean).astype(mm.dtype) * (1 - BN_MOMENTUM)
        new_aux[f"{name}_bn_moving_var"] = mv * BN_MOMENTUM + \
            lax.stop_gradient(var).astype(mv.dtype) * (1 - BN_MOMENTUM)
    else:
        mean = aux[f"{name}_bn_moving_mean"].astype(stat)
        var = aux[f"{name}_bn_moving_var"].astype(stat)
    scale = params[f"{name}_bn_gamma"].astype(stat) * lax.rsqrt(var + EPS)
    shift = params[f"{name}_bn_beta"].astype(stat) - mean * scale
    return jax.nn.relu(x * scale.astype(dtype) + shift.astype(dtype))


def _pool(x):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1),
                             (1, 2, 2, 1), "VALID")


def forward(params, aux, x, train: bool = True, dtype=jnp.float32):
    """(logits in float32 or float64, new aux) of NHWC images ``x``."""
    new_aux = dict(aux)
    x = x.astype(dtype)

    def cbr(x, name):
        return _conv_bn_relu(params, aux, new_aux, x, name, train, dtype)

    x = cbr(x, "prep")
    for name, residual in (("layer1", True), ("layer2", False), ("layer3", True)):
        x = _pool(cbr(x, name))
        if residual:
            x = x + cbr(cbr(x, f"{name}_res1"), f"{name}_res2")
    x = jnp.max(x, axis=(1, 2))
    logits = x @ params["fc_weight"].astype(dtype).T
    out = jnp.promote_types(dtype, jnp.float32)
    return logits.astype(out) * OUTPUT_SCALE, new_aux


def loss_fn(params, aux, x, labels, dtype=jnp.float32, alpha: float = SMOOTH_ALPHA):
    """(summed smoothed cross-entropy, (probabilities, new aux))."""
    logits, new_aux = forward(params, aux, x, True, dtype)
    k = logits.shape[-1]
    onehot = jax.nn.one_hot(labels.astype(jnp.int32), k, dtype=logits.dtype)
    target = onehot * (1 - alpha) + (1 - onehot) * (alpha / (k - 1))
    logp = jax.nn.log_softmax(logits)
    return -jnp.sum(target * logp), (jnp.exp(logp), new_aux)


def _decays(name: str) -> bool:
    return name.endswith("_weight") or name.endswith("_gamma")


def make_step(batch: int, dtype="float32", wd: float = 5e-4, momentum: float = 0.9,
              alpha: float = SMOOTH_ALPHA):
    """The jitted training step ``(params, mom, aux, x, labels, lr) ->
    (params, mom, aux, loss)``, params, momentum and aux donated."""
    dtype = jnp.dtype(dtype)

    def step(params, mom, aux, x, labels, lr):
        grads, (probs, new_aux) = jax.grad(loss_fn, has_aux=True)(params, aux, x, labels,
                                                                 dtype, alpha)
        new_p, new_m = {}, {}
        for k, w in params.items():
            g = grads[k] / batch + (wd * w if _decays(k) else 0.0)
            m = momentum * mom[k] - lr * g
            new_p[k], new_m[k] = w + momentum * m - lr * g, m
        return new_p, new_m, new_aux, probs

    return jax.jit(step, donate_argnums=(0, 1, 2))


def ema_fn(decay: float):
    """The jitted moving average ``(avg, params) -> avg`` (avg donated)."""
    return jax.jit(lambda avg, new: jax.tree.map(lambda a, w: decay * a + (1 - decay) * w,
                                                 avg, new), donate_argnums=(0,))


# --------------------------------------------------------------------------
# augmentation, NHWC uint8 in
# --------------------------------------------------------------------------
def augment(key, images, dtype=jnp.float32, pad: int = 4, cutout: int = 8):
    """Normalised, reflect-padded, randomly cropped, flipped and cut-out
    images (``dtype`` [N, H, W, C]) of a uint8 NHWC batch."""
    n, h, w, c = images.shape
    x = (images.astype(jnp.float32) - MEAN) / STD
    x = jnp.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)), mode="reflect")
    ky, kx, kf, kcy, kcx = jax.random.split(key, 5)
    oy = jax.random.randint(ky, (n,), 0, 2 * pad + 1)
    ox = jax.random.randint(kx, (n,), 0, 2 * pad + 1)
    x = jax.vmap(lambda im, a, b: lax.dynamic_slice(im, (a, b, 0), (h, w, c)))(x, oy, ox)
    flip = jax.random.bernoulli(kf, 0.5, (n,))
    x = jnp.where(flip[:, None, None, None], x[:, :, ::-1, :], x)
    cy = jax.random.randint(kcy, (n, 1, 1), 0, h - cutout + 1)
    cx = jax.random.randint(kcx, (n, 1, 1), 0, w - cutout + 1)
    rows = jnp.arange(h)[None, :, None]
    cols = jnp.arange(w)[None, None, :]
    hole = (rows >= cy) & (rows < cy + cutout) & (cols >= cx) & (cols < cx + cutout)
    return jnp.where(hole[..., None], 0.0, x).astype(dtype)


def make_augment(dtype="float32"):
    """``augment`` jitted for ``dtype``: ``(key, uint8 NHWC) -> images``."""
    return jax.jit(lambda key, images: augment(key, images, jnp.dtype(dtype)))


def make_batch(dtype="float32"):
    """The data path of a loop that keeps the whole uint8 NHWC set on the
    device: ``(key, epoch, batch number, images, labels, indices) ->
    (augmented images, labels)`` in one jitted program (the gather, the
    key ``fold_in(fold_in(key, epoch), batch)`` and ``augment``)."""
    def batch(key, epoch, nbatch, images, labels, idx):
        k = jax.random.fold_in(jax.random.fold_in(key, epoch), nbatch)
        return augment(k, images[idx], jnp.dtype(dtype)), labels[idx]
    return jax.jit(batch)


def normalize(images, dtype=jnp.float32):
    """Evaluation's half: normalisation only (uint8 NHWC in)."""
    return ((images.astype(jnp.float32) - MEAN) / STD).astype(dtype)
