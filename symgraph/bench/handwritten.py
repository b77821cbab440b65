"""The benchmarks' plain-JAX baseline, written by hand in ``jax.lax`` the way
a JAX user would write these nets: no symgraph graph, no symgraph lowering.

    from symgraph.bench import handwritten as hw
    step = hw.step('resnet-50', batch=64, image_size=224, layout='NHWC')
    compiled = step.lower().compile(step.compiler_options or None)
    compiled.memory_analysis()              # or symgraph.xla.memory(step)
    loss, params, mom, state = step.jit()(params, mom, state, x, y, key)

Nets (``NETS``): VGG-16, ResNet-50 and ResNet-152 (v1, the layout of symgraph's zoo with
``version=1``: the stride in each bottleneck's first 1x1 convolution,
BatchNorm after every convolution, with batch statistics in training),
Inception-BN and GoogLeNet, in NCHW (OIHW weights) or NHWC (HWIO weights).
Each is parameterized by its stage configuration so a small version can be
checked against symgraph (``vgg(...)``, ``resnet_v1(...)``). Parameter and
state names are those of symgraph's zoo (MXNet's), so ``from_mxnet`` maps
a Module's parameters onto a hand-written net.

The training step: softmax cross-entropy averaged over the batch,
``jax.value_and_grad``, then SGD with momentum (MXNet's rule,
``mom = momentum*mom - lr*grad; w += mom``), parameters and momentum
donated. The inference step returns the softmax. ``step`` gives either as a
``symgraph.xla.Step`` (function, ShapeDtypeStruct arguments, donated
arguments, compiler options), so it compiles with the options symgraph's
own steps get (``scheduler=True``: XLA's memory-optimized CPU scheduler).

Differences from the zoo that do not change the function at 224x224: the
last average pool is a global mean (the zoo's 7x7 window is global there),
so the nets also run at other image sizes. GoogLeNet's stride-2 max pools
round up, as the zoo's do.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..errors import SymgraphError

LAYOUTS = ("NCHW", "NHWC")
_DIMS = {"NCHW": ("NCHW", "OIHW", "NCHW"), "NHWC": ("NHWC", "HWIO", "NHWC")}


class HandwrittenError(SymgraphError):
    """An unknown net or layout, or parameters that do not fit the net."""


# --------------------------------------------------------------------------
# parameters: created on first use when initialising, looked up otherwise
# --------------------------------------------------------------------------
class Params:
    """The parameter and state dicts a forward pass reads.

    With ``key`` set it creates each parameter the first time a layer asks
    for it (He-normal convolution and dense weights, zero biases, BatchNorm
    gamma 1, beta 0, moving mean 0, moving variance 1) and records, for
    each dense layer that follows a flatten, the (C, H, W) it flattened
    (``from_mxnet`` needs it to reorder an NHWC net's first dense weight).
    """

    def __init__(self, params=None, state=None, key=None, dtype=jnp.float32, remat=None):
        self.params = {} if params is None else params
        self.state = {} if state is None else state
        self.new_state = {}
        self.key, self.dtype = key, dtype
        self.flattened = {}
        self.remat = remat

    def block(self, prefix: str, fn, x):
        """``fn(P, x)``, under ``jax.checkpoint`` with the policy ``remat``
        (a name in REMAT_POLICIES) when one is set: the way a JAX user
        checkpoints a net block by block. ``prefix``: the block's
        parameter and state names start with it, so only those enter the
        checkpointed function."""
        if self.remat is None or self.key is not None:  # initialising: plain
            return fn(self, x)
        mine = lambda d: {k: v for k, v in d.items() if k.startswith(prefix)}

        def pure(params, state, x):
            inner = Params(params, state, dtype=self.dtype)
            return fn(inner, x), inner.new_state
        policy = getattr(jax.checkpoint_policies, self.remat)
        y, new_state = jax.checkpoint(pure, policy=policy)(mine(self.params), mine(self.state), x)
        self.new_state.update(new_state)
        return y

    def param(self, name, shape, kind, fan_in=1):
        if name not in self.params:
            if self.key is None:
                raise HandwrittenError(f"no parameter {name!r} (shape {shape})")
            self.key, k = jax.random.split(self.key)
            if kind == "weight":
                v = jax.random.normal(k, shape, self.dtype) * float(np.sqrt(2.0 / fan_in))
            else:
                v = jnp.full(shape, 1.0 if kind == "gamma" else 0.0, self.dtype)
            self.params[name] = v
        return self.params[name]

    def stat(self, name, shape, fill):
        if name not in self.state:
            if self.key is None:
                raise HandwrittenError(f"no state {name!r} (shape {shape})")
            self.state[name] = jnp.full(shape, fill, self.dtype)
        return self.state[name]


# jax.checkpoint policies a hand-written step may apply per block
REMAT_POLICIES = ("nothing_saveable", "checkpoint_dots", "dots_with_no_batch_dims_saveable")


# --------------------------------------------------------------------------
# layers
# --------------------------------------------------------------------------
def _chan(layout):
    return 1 if layout == "NCHW" else 3


def _spatial_dims(layout):
    return (2, 3) if layout == "NCHW" else (1, 2)


def conv(P, x, name, filters, kernel, stride=1, pad=0, layout="NCHW", bias=True):
    cin = x.shape[_chan(layout)]
    shape = (filters, cin, kernel, kernel) if layout == "NCHW" else (kernel, kernel, cin, filters)
    w = P.param(f"{name}_weight", shape, "weight", cin * kernel * kernel)
    y = lax.conv_general_dilated(x, w, (stride, stride), [(pad, pad), (pad, pad)],
                                 dimension_numbers=_DIMS[layout])
    if bias:
        b = P.param(f"{name}_bias", (filters,), "bias")
        y = y + (b[:, None, None] if layout == "NCHW" else b)
    return y


def batch_norm(P, x, name, train, eps, momentum=0.9, layout="NCHW"):
    """Batch statistics in training (the moving ones updated, biased
    variance as MXNet does), the moving statistics otherwise."""
    c = x.shape[_chan(layout)]
    gamma, beta = P.param(f"{name}_gamma", (c,), "gamma"), P.param(f"{name}_beta", (c,), "beta")
    mm, mv = P.stat(f"{name}_moving_mean", (c,), 0.0), P.stat(f"{name}_moving_var", (c,), 1.0)
    axes = tuple(i for i in range(4) if i != _chan(layout))
    if train:
        mean = jnp.mean(x, axis=axes)
        var = jnp.mean(jnp.square(x - jnp.expand_dims(mean, axes)), axis=axes)
        P.new_state[f"{name}_moving_mean"] = mm * momentum + lax.stop_gradient(mean) * (1 - momentum)
        P.new_state[f"{name}_moving_var"] = mv * momentum + lax.stop_gradient(var) * (1 - momentum)
    else:
        mean, var = mm, mv
    scale = gamma * lax.rsqrt(var + eps)
    return x * jnp.expand_dims(scale, axes) + jnp.expand_dims(beta - mean * scale, axes)


def relu(x):
    return jnp.maximum(x, 0)


def _windows(layout, kernel, stride, pads):
    window, strides = [1] * 4, [1] * 4
    padding = [(0, 0)] * 4
    for d, p in zip(_spatial_dims(layout), pads):
        window[d], strides[d], padding[d] = kernel, stride, p
    return tuple(window), tuple(strides), padding


def max_pool(x, kernel, stride, pad=0, layout="NCHW", ceil=False):
    """``ceil``: the output size rounds up (the last window may run past
    the padded input, as MXNet's pooling_convention='full')."""
    pads = []
    for d in _spatial_dims(layout):
        span = x.shape[d] + 2 * pad - kernel
        out = (-(-span // stride) if ceil else span // stride) + 1
        pads.append((pad, pad + max(0, (out - 1) * stride + kernel - x.shape[d] - 2 * pad)))
    window, strides, padding = _windows(layout, kernel, stride, pads)
    return lax.reduce_window(x, np.array(-np.inf, x.dtype), lax.max, window, strides, padding)


def avg_pool(x, kernel, stride=1, pad=0, layout="NCHW"):
    """Average with the padding counted (MXNet's default count_include_pad);
    every window here lies within the padded input."""
    window, strides, padding = _windows(layout, kernel, stride, [(pad, pad)] * 2)
    return lax.reduce_window(x, np.zeros((), x.dtype), lax.add, window, strides, padding) / (kernel * kernel)


def global_avg_pool(x, layout="NCHW"):
    return jnp.mean(x, axis=_spatial_dims(layout))


def dense(P, x, name, units):
    """``x @ w + b`` with w (in, out); a 4-D x is flattened first (in its
    own layout's order)."""
    if x.ndim == 4:
        P.flattened[name] = x.shape[1:]
        x = x.reshape(x.shape[0], -1)
    w = P.param(f"{name}_weight", (x.shape[1], units), "weight", x.shape[1])
    return x @ w + P.param(f"{name}_bias", (units,), "bias")


def dropout(x, rate, key, train):
    if not train or rate == 0.0:
        return x
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0).astype(x.dtype)


# --------------------------------------------------------------------------
# the nets: forward(P, x, train, layout, key) -> logits
# --------------------------------------------------------------------------
@dataclass
class Net:
    """A hand-written net: ``forward(P, x, train, layout, key) -> logits``."""

    name: str
    forward: Callable
    num_classes: int
    meta: dict = field(default_factory=dict)

    def init(self, key, image_size: int, layout: str = "NCHW", dtype=jnp.float32,
             channels: int = 3):
        """(params, state) for a batch of images of ``image_size``."""
        _check_layout(layout)
        shape = _image_shape(1, channels, image_size, layout)
        P = Params(key=key, dtype=dtype)
        self.forward(P, jnp.zeros(shape, dtype), False, layout, None)
        self.meta.setdefault("flattened", {})[(image_size, layout)] = dict(P.flattened)
        return P.params, P.state

    def apply(self, params, state, x, train, layout="NCHW", key=None, remat=None):
        """(logits, new state): the state updated in training, unchanged
        otherwise; ``remat``: a jax.checkpoint policy applied per block."""
        P = Params(params, state, remat=remat)
        logits = self.forward(P, x, train, layout, key)
        return logits, {**state, **P.new_state}


def _check_layout(layout):
    if layout not in LAYOUTS:
        raise HandwrittenError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")


def _image_shape(batch, channels, size, layout):
    return (batch, channels, size, size) if layout == "NCHW" else (batch, size, size, channels)


VGG16 = ((2, 2, 3, 3, 3), (64, 128, 256, 512, 512))


def vgg(layers=VGG16[0], filters=VGG16[1], hidden=4096, num_classes=1000, rate=0.5) -> Net:
    """VGG: per stage ``layers[i]`` 3x3 convolutions of ``filters[i]`` with
    ReLU, a 2x2/2 max pool; two dense layers of ``hidden`` with ReLU and
    dropout ``rate``; the class scores ``fc8``."""
    def forward(P, x, train, layout, key):
        def stage(i, n):
            def run(P, x):
                for j in range(n):
                    x = relu(conv(P, x, f"conv{i + 1}_{j + 1}", filters[i], 3, pad=1,
                                  layout=layout))
                return max_pool(x, 2, 2, layout=layout)
            return run
        for i, n in enumerate(layers):
            x = P.block(f"conv{i + 1}_", stage(i, n), x)
        keys = jax.random.split(key, 2) if key is not None and train and rate else (None, None)
        for k, name in zip(keys, ("fc6", "fc7")):
            x = dropout(relu(dense(P, x, name, hidden)), rate, k, train)
        return dense(P, x, "fc8", num_classes)
    return Net("vgg", forward, num_classes)


RESNET50 = ((3, 4, 6, 3), (64, 256, 512, 1024, 2048))
RESNET_EPS = 2e-5


def resnet_v1(units=RESNET50[0], filters=RESNET50[1], bottleneck=True,
              num_classes=1000) -> Net:
    """ResNet v1 with the ImageNet stem (7x7/2 convolution, BatchNorm, ReLU,
    3x3/2 max pool); ``filters``: the stem width, then each stage's."""
    def unit(P, x, c, stride, project, name, train, layout):
        def cbn(x, f, k, s, p, suffix, bn):
            y = conv(P, x, f"{name}_{suffix}", f, k, s, p, layout, bias=False)
            return batch_norm(P, y, f"{name}_{bn}", train, RESNET_EPS, layout=layout)
        if bottleneck:
            y = relu(cbn(x, c // 4, 1, stride, 0, "conv1", "bn1"))
            y = relu(cbn(y, c // 4, 3, 1, 1, "conv2", "bn2"))
            y = cbn(y, c, 1, 1, 0, "conv3", "bn3")
        else:
            y = relu(cbn(x, c, 3, stride, 1, "conv1", "bn1"))
            y = cbn(y, c, 3, 1, 1, "conv2", "bn2")
        sc = cbn(x, c, 1, stride, 0, "conv1sc", "sc") if project else x
        return relu(y + sc)

    def forward(P, x, train, layout, key):
        x = conv(P, x, "conv0", filters[0], 7, 2, 3, layout, bias=False)
        x = relu(batch_norm(P, x, "bn0", train, RESNET_EPS, layout=layout))
        x = max_pool(x, 3, 2, 1, layout)
        channels = filters[0]
        for i, n in enumerate(units):
            stride = 1 if i == 0 else 2
            for j in range(n):
                s = stride if j == 0 else 1
                project = j == 0 and (s != 1 or channels != filters[i + 1])
                name = f"stage{i + 1}_unit{j + 1}"
                x = P.block(f"{name}_", lambda P, x, c=filters[i + 1], s=s, project=project,
                            name=name: unit(P, x, c, s, project, name, train, layout), x)
                channels = filters[i + 1]
        return dense(P, global_avg_pool(x, layout), "fc1", num_classes)
    return Net("resnet_v1", forward, num_classes)


INCEPTION_BN_EPS = 1e-10 + 1e-5


def inception_bn(num_classes=1000) -> Net:
    """Inception-BN (BN-Inception) as MXNet's inception-bn.py builds it."""
    def forward(P, x, train, layout, key):
        cat = lambda *xs: jnp.concatenate(xs, axis=_chan(layout))

        def cf(x, f, k, name, stride=1, pad=0):
            y = conv(P, x, f"conv_{name}", f, k, stride, pad, layout)
            return relu(batch_norm(P, y, f"bn_{name}", train, INCEPTION_BN_EPS, layout=layout))

        def block_a(x, n1, n3r, n3, nd3r, nd3, pool, proj, name):
            a = cf(x, n1, 1, f"{name}_1x1")
            b = cf(cf(x, n3r, 1, f"{name}_3x3_reduce"), n3, 3, f"{name}_3x3", pad=1)
            c = cf(x, nd3r, 1, f"{name}_double_3x3_reduce")
            c = cf(cf(c, nd3, 3, f"{name}_double_3x3_0", pad=1), nd3, 3,
                   f"{name}_double_3x3_1", pad=1)
            p = avg_pool(x, 3, 1, 1, layout) if pool == "avg" else max_pool(x, 3, 1, 1, layout)
            return cat(a, b, c, cf(p, proj, 1, f"{name}_proj"))

        def block_b(x, n3r, n3, nd3r, nd3, name):
            b = cf(cf(x, n3r, 1, f"{name}_3x3_reduce"), n3, 3, f"{name}_3x3", 2, 1)
            c = cf(x, nd3r, 1, f"{name}_double_3x3_reduce")
            c = cf(cf(c, nd3, 3, f"{name}_double_3x3_0", pad=1), nd3, 3,
                   f"{name}_double_3x3_1", 2, 1)
            return cat(b, c, max_pool(x, 3, 2, 1, layout))

        x = cf(x, 64, 7, "1", 2, 3)
        x = max_pool(x, 3, 2, layout=layout)
        x = cf(cf(x, 64, 1, "2_red"), 192, 3, "2", pad=1)
        x = max_pool(x, 3, 2, layout=layout)
        x = block_a(x, 64, 64, 64, 64, 96, "avg", 32, "3a")
        x = block_a(x, 64, 64, 96, 64, 96, "avg", 64, "3b")
        x = block_b(x, 128, 160, 64, 96, "3c")
        x = block_a(x, 224, 64, 96, 96, 128, "avg", 128, "4a")
        x = block_a(x, 192, 96, 128, 96, 128, "avg", 128, "4b")
        x = block_a(x, 160, 128, 160, 128, 160, "avg", 128, "4c")
        x = block_a(x, 96, 128, 192, 160, 192, "avg", 128, "4d")
        x = block_b(x, 128, 192, 192, 256, "4e")
        x = block_a(x, 352, 192, 320, 160, 224, "avg", 128, "5a")
        x = block_a(x, 352, 192, 320, 192, 224, "max", 128, "5b")
        return dense(P, global_avg_pool(x, layout), "fullyconnected0", num_classes)
    return Net("inception-bn", forward, num_classes)


def googlenet(num_classes=1000) -> Net:
    """GoogLeNet (Inception v1) without the auxiliary heads, as symgraph's zoo."""
    def forward(P, x, train, layout, key):
        def cf(x, f, k, name, stride=1, pad=0):
            return relu(conv(P, x, f"conv_{name}", f, k, stride, pad, layout))

        def block(x, n1, n3r, n3, n5r, n5, proj, name):
            a = cf(x, n1, 1, f"{name}_1x1")
            b = cf(cf(x, n3r, 1, f"{name}_3x3_reduce"), n3, 3, f"{name}_3x3", pad=1)
            c = cf(cf(x, n5r, 1, f"{name}_5x5_reduce"), n5, 5, f"{name}_5x5", pad=2)
            d = cf(max_pool(x, 3, 1, 1, layout), proj, 1, f"{name}_proj")
            return jnp.concatenate([a, b, c, d], axis=_chan(layout))

        down = lambda x: max_pool(x, 3, 2, layout=layout, ceil=True)
        x = down(cf(x, 64, 7, "conv1", 2, 3))
        x = down(cf(cf(x, 64, 1, "conv2"), 192, 3, "conv3", pad=1))
        x = block(x, 64, 96, 128, 16, 32, 32, "in3a")
        x = down(block(x, 128, 128, 192, 32, 96, 64, "in3b"))
        x = block(x, 192, 96, 208, 16, 48, 64, "in4a")
        x = block(x, 160, 112, 224, 24, 64, 64, "in4b")
        x = block(x, 128, 128, 256, 24, 64, 64, "in4c")
        x = block(x, 112, 144, 288, 32, 64, 64, "in4d")
        x = down(block(x, 256, 160, 320, 32, 128, 128, "in4e"))
        x = block(x, 256, 160, 320, 32, 128, 128, "in5a")
        x = block(x, 384, 192, 384, 48, 128, 128, "in5b")
        return dense(P, global_avg_pool(x, layout), "fullyconnected0", num_classes)
    return Net("googlenet", forward, num_classes)


RESNET152 = ((3, 8, 36, 3), RESNET50[1])


def resnet152_v1(num_classes=1000) -> Net:
    return resnet_v1(*RESNET152, num_classes=num_classes)


NETS = {"vgg16": vgg, "resnet-50": resnet_v1, "resnet-152": resnet152_v1,
        "inception-bn": inception_bn, "googlenet": googlenet}


def get_net(name: str, num_classes: int = 1000) -> Net:
    if name not in NETS:
        raise HandwrittenError(f"no hand-written net {name!r}; choose one of {', '.join(NETS)}")
    return NETS[name](num_classes=num_classes)


# --------------------------------------------------------------------------
# steps
# --------------------------------------------------------------------------
def cross_entropy(logits, labels):
    """Softmax cross-entropy averaged over the batch (labels: class indices)."""
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None].astype(jnp.int32), axis=1))


def train_step_fn(net: Net, layout="NCHW", lr=0.01, momentum=0.9, remat=None):
    """``(params, mom, state, x, labels, key) -> (loss, params, mom, state)``;
    ``remat``: a policy in REMAT_POLICIES applied per block (VGG: per stage,
    ResNet: per residual unit)."""
    if remat is not None and remat not in REMAT_POLICIES:
        raise HandwrittenError(f"remat={remat!r}; use one of {', '.join(REMAT_POLICIES)}")

    def loss_fn(params, state, x, labels, key):
        logits, new_state = net.apply(params, state, x, True, layout, key, remat)
        return cross_entropy(logits, labels), new_state

    def train_step(params, mom, state, x, labels, key):
        (loss, new_state), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            params, state, x, labels, key)
        mom = jax.tree.map(lambda m, g: momentum * m - lr * g, mom, grads)
        params = jax.tree.map(lambda p, m: p + m, params, mom)
        return loss, params, mom, new_state
    return train_step


def infer_step_fn(net: Net, layout="NCHW"):
    """``(params, state, x) -> softmax``."""
    def infer(params, state, x):
        return jax.nn.softmax(net.apply(params, state, x, False, layout)[0], axis=-1)
    return infer


def scheduler_options() -> dict:
    """XLA's memory-optimized CPU scheduler option, as symgraph's steps
    spell it (symgraph.measures, or symgraph.xla before the measures had a
    module of their own)."""
    try:
        from ..measures import SCHEDULER_OPTIONS
    except ImportError:
        from ..xla import SCHEDULER_OPTIONS
    return SCHEDULER_OPTIONS


def step(net, batch: int, image_size: int = 224, layout: str = "NCHW", train: bool = True,
         dtype="float32", num_classes: int = 1000, lr: float = 0.01, momentum: float = 0.9,
         scheduler: bool = False, compiler_options: dict | None = None, remat=None):
    """A ``symgraph.xla.Step`` of the hand-written ``net`` (a name in
    ``NETS`` or a ``Net``): the step function, ShapeDtypeStruct arguments,
    the donated arguments (training: params and momentum) and the compiler
    options (``scheduler``: XLA's memory-optimized CPU scheduler, the
    option symgraph's steps use, on the CPU backend only; ``remat``: a
    jax.checkpoint policy per block, training only)."""
    from .. import xla
    _check_layout(layout)
    net = get_net(net, num_classes) if isinstance(net, str) else net
    dtype = jnp.dtype(dtype)
    params, state = jax.eval_shape(lambda: net.init(jax.random.key(0), image_size, layout,
                                                    dtype))
    x = jax.ShapeDtypeStruct(_image_shape(batch, 3, image_size, layout), dtype)
    opts = dict(scheduler_options()) if scheduler and jax.default_backend() == "cpu" else {}
    opts.update(compiler_options or {})
    if not train:
        return xla.Step(infer_step_fn(net, layout), (params, state, x), (), opts)
    labels = jax.ShapeDtypeStruct((batch,), jnp.int32)
    key = jax.eval_shape(lambda: jax.random.key(0))
    return xla.Step(train_step_fn(net, layout, lr, momentum, remat),
                    (params, params, state, x, labels, key), (0, 1), opts)


def real_args(net, batch: int, image_size: int = 224, layout: str = "NCHW",
              train: bool = True, dtype="float32", num_classes: int = 1000, seed: int = 0):
    """Concrete arguments for ``step``'s function (same order): initialised
    parameters, zero momentum, fresh BatchNorm states, random images and
    labels; for timing a step."""
    _check_layout(layout)
    net = get_net(net, num_classes) if isinstance(net, str) else net
    key = jax.random.key(seed)
    kp, kx, ky, kd = jax.random.split(key, 4)
    params, state = net.init(kp, image_size, layout, jnp.dtype(dtype))
    x = jax.random.normal(kx, _image_shape(batch, 3, image_size, layout), jnp.dtype(dtype))
    if not train:
        return params, state, x
    labels = jax.random.randint(ky, (batch,), 0, net.num_classes, jnp.int32)
    return params, jax.tree.map(jnp.zeros_like, params), state, x, labels, kd


# --------------------------------------------------------------------------
# symgraph's (MXNet's) parameters on a hand-written net
# --------------------------------------------------------------------------
def from_mxnet(net: Net, arg_params: dict, aux_params: dict, image_size: int,
               layout: str = "NCHW", dtype=None):
    """(params, state) of ``net`` from MXNet-layout arrays (convolution
    weights OIHW, dense weights (out, in) over a CHW flatten): convolution
    weights become HWIO for NHWC, dense weights (in, out), and a dense
    layer after an NHWC flatten gets its inputs reordered to HWC."""
    params, state = jax.eval_shape(lambda: net.init(jax.random.key(0), image_size, layout))
    flattened = net.meta["flattened"][(image_size, layout)]
    out_p, out_s = {}, {}
    for name, spec in params.items():
        if name not in arg_params:
            raise HandwrittenError(f"from_mxnet: no parameter {name!r} given")
        v = np.asarray(arg_params[name])
        if v.ndim == 4 and layout == "NHWC":
            v = v.transpose(2, 3, 1, 0)
        elif v.ndim == 2:
            layer = name[:-len("_weight")]
            if layer in flattened and layout == "NHWC":
                h, w, c = flattened[layer]
                v = v.reshape(v.shape[0], c, h, w).transpose(0, 2, 3, 1).reshape(v.shape[0], -1)
            v = v.T
        if v.shape != spec.shape:
            raise HandwrittenError(f"from_mxnet: {name} has shape {v.shape}, the net "
                                   f"needs {spec.shape}")
        out_p[name] = jnp.asarray(v, dtype or v.dtype)
    for name in state:
        out_s[name] = jnp.asarray(np.asarray(aux_params[name]), dtype)
    return out_p, out_s


def to_mxnet_grads(net: Net, grads: dict, image_size: int, layout: str = "NCHW") -> dict:
    """Gradients of a hand-written net in MXNet's layouts (``from_mxnet``'s
    inverse on each array), for comparing with symgraph's."""
    flattened = net.meta["flattened"][(image_size, layout)]
    out = {}
    for name, g in grads.items():
        v = np.asarray(g)
        if v.ndim == 4 and layout == "NHWC":
            v = v.transpose(3, 2, 0, 1)
        elif v.ndim == 2:
            v = v.T
            layer = name[:-len("_weight")]
            if layer in flattened and layout == "NHWC":
                h, w, c = flattened[layer]
                v = v.reshape(v.shape[0], h, w, c).transpose(0, 3, 1, 2).reshape(v.shape[0], -1)
        out[name] = v
    return out
