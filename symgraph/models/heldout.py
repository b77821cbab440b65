"""The held-out nets: families no XLA-side rule of symgraph is fitted on.

The measure rule, the budget fit and max-batch may be tuned on the zoo
(``sg.models.list_models()``); a rule is accepted only by its figures on
these nets, reported apart (``benchmarks/heldout.py``). They are not in
the zoo's list on purpose: nothing in symgraph may name them.

    from symgraph.models import heldout
    net, shapes = heldout.get("mobilenet-v2", batch=32)
    heldout.NAMES

Each is a small member of a family users bring, written as its authors
describe it, with the ops a hand-written MXNet symbol of it would use:

- ``mobilenet-v1``: depthwise-separable convolutions (``num_group`` =
  channels), BatchNorm, ReLU.
- ``mobilenet-v2``: inverted residual units with ReLU6 written as
  ``clip(0, 6)``, linear bottlenecks, shortcuts where the shape allows.
- ``densenet``: dense blocks (each layer's output concatenated to its
  input), BN-ReLU-conv bottleneck layers, average-pool transitions.
- ``unet``: an encoder-decoder for per-pixel classes: Deconvolution up,
  skip Concats, ``SoftmaxOutput(multi_output=True)`` on (N, H, W) labels.
- ``mixer``: token- and channel-mixing MLPs on image patches, LayerNorm
  built from broadcast ops, GELU.
- ``resnext``: grouped-convolution bottleneck units with post-activation
  (conv-BN, the sum, then ReLU).
- ``vit``: a transformer encoder on patches: multi-head attention by
  ``batch_dot`` and ``softmax``, LayerNorm from broadcast ops, GELU.
- ``lstm-lm``: a two-layer LSTM language model unrolled over time from
  FullyConnected, SliceChannel and elementwise gates.
- ``biased-convnet``: a plain VGG-style net whose biases are separate
  ``broadcast_add`` nodes (as some converters write them).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .. import symbol as sym
from ..errors import SymgraphError


@dataclass(frozen=True)
class Heldout:
    name: str
    build: Callable          # build() -> Symbol
    shapes: Callable         # shapes(batch) -> {input: shape}
    doc: str


def _bn(x, name):
    return sym.BatchNorm(data=x, fix_gamma=False, eps=1e-5, momentum=0.9, name=name)


def _conv(x, filters, kernel, stride=1, pad=0, group=1, name=None, bias=False):
    return sym.Convolution(data=x, num_filter=filters, kernel=(kernel, kernel),
                           stride=(stride, stride), pad=(pad, pad), num_group=group,
                           no_bias=not bias, name=name)


def _relu(x, name):
    return sym.Activation(data=x, act_type="relu", name=name)


def _classifier(x, classes, name="fc"):
    x = sym.Pooling(data=x, global_pool=True, pool_type="avg", kernel=(1, 1), name=f"{name}_pool")
    x = sym.FullyConnected(data=sym.Flatten(data=x), num_hidden=classes, name=name)
    return sym.SoftmaxOutput(data=x, name="softmax")


def _images(size, channels=3):
    return lambda batch: {"data": (batch, channels, size, size), "softmax_label": (batch,)}


# -- convolutional families -------------------------------------------------------
def mobilenet_v1(classes=100, width=(32, 64, 128, 128, 256, 256, 512, 512, 1024)):
    strides = (1, 2, 1, 2, 1, 2, 1, 2)
    x = _relu(_bn(_conv(sym.Variable("data"), width[0], 3, 2, 1, name="conv0"), "bn0"), "relu0")
    for i, (c_in, c_out, s) in enumerate(zip(width, width[1:], strides)):
        x = _relu(_bn(_conv(x, c_in, 3, s, 1, group=c_in, name=f"dw{i}"), f"dw{i}_bn"),
                  f"dw{i}_relu")
        x = _relu(_bn(_conv(x, c_out, 1, name=f"pw{i}"), f"pw{i}_bn"), f"pw{i}_relu")
    return _classifier(x, classes)


def _relu6(x, name):
    return sym.clip(x, a_min=0.0, a_max=6.0, name=name)


def mobilenet_v2(classes=100, stages=((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2),
                                      (6, 64, 2, 2), (6, 96, 2, 1), (6, 160, 2, 2))):
    x = _relu6(_bn(_conv(sym.Variable("data"), 32, 3, 2, 1, name="conv0"), "bn0"), "relu0")
    c_in = 32
    for si, (t, c, n, s) in enumerate(stages):
        for j in range(n):
            name, stride = f"s{si}u{j}", s if j == 0 else 1
            h = x
            if t != 1:
                h = _relu6(_bn(_conv(h, c_in * t, 1, name=f"{name}_expand"), f"{name}_bn1"),
                           f"{name}_relu1")
            h = _relu6(_bn(_conv(h, c_in * t, 3, stride, 1, group=c_in * t, name=f"{name}_dw"),
                           f"{name}_bn2"), f"{name}_relu2")
            h = _bn(_conv(h, c, 1, name=f"{name}_project"), f"{name}_bn3")
            x = x + h if stride == 1 and c_in == c else h
            c_in = c
    x = _relu6(_bn(_conv(x, 640, 1, name="conv_last"), "bn_last"), "relu_last")
    return _classifier(x, classes)


def densenet(classes=100, growth=24, blocks=(6, 6, 6)):
    x = _conv(sym.Variable("data"), 2 * growth, 3, 1, 1, name="conv0")
    channels = 2 * growth
    for b, layers in enumerate(blocks):
        for i in range(layers):
            name = f"b{b}l{i}"
            h = _conv(_relu(_bn(x, f"{name}_bn1"), f"{name}_relu1"), 4 * growth, 1,
                      name=f"{name}_conv1")
            h = _conv(_relu(_bn(h, f"{name}_bn2"), f"{name}_relu2"), growth, 3, 1, 1,
                      name=f"{name}_conv2")
            x = sym.Concat(x, h, dim=1, name=f"{name}_concat")
            channels += growth
        if b + 1 < len(blocks):
            channels //= 2
            x = _conv(_relu(_bn(x, f"t{b}_bn"), f"t{b}_relu"), channels, 1, name=f"t{b}_conv")
            x = sym.Pooling(data=x, kernel=(2, 2), stride=(2, 2), pool_type="avg",
                            name=f"t{b}_pool")
    return _classifier(_relu(_bn(x, "bn_final"), "relu_final"), classes)


def unet(classes=8, widths=(32, 64, 128, 256)):
    x = sym.Variable("data")
    skips = []
    for i, w in enumerate(widths):
        x = _relu(_bn(_conv(x, w, 3, 1, 1, name=f"enc{i}a"), f"enc{i}a_bn"), f"enc{i}a_relu")
        x = _relu(_bn(_conv(x, w, 3, 1, 1, name=f"enc{i}b"), f"enc{i}b_bn"), f"enc{i}b_relu")
        if i + 1 < len(widths):
            skips.append(x)
            x = sym.Pooling(data=x, kernel=(2, 2), stride=(2, 2), pool_type="max",
                            name=f"pool{i}")
    for i, w in reversed(list(enumerate(widths[:-1]))):
        x = sym.Deconvolution(data=x, num_filter=w, kernel=(2, 2), stride=(2, 2),
                              no_bias=True, name=f"up{i}")
        x = sym.Concat(x, skips[i], dim=1, name=f"cat{i}")
        x = _relu(_bn(_conv(x, w, 3, 1, 1, name=f"dec{i}a"), f"dec{i}a_bn"), f"dec{i}a_relu")
        x = _relu(_bn(_conv(x, w, 3, 1, 1, name=f"dec{i}b"), f"dec{i}b_bn"), f"dec{i}b_relu")
    x = _conv(x, classes, 1, name="score", bias=True)
    return sym.SoftmaxOutput(data=x, multi_output=True, name="softmax")


def _pixels(size):
    return lambda batch: {"data": (batch, 3, size, size), "softmax_label": (batch, size, size)}


def resnext(classes=100, units=(2, 2, 2, 2), width=128, cardinality=32):
    x = _relu(_bn(_conv(sym.Variable("data"), 64, 7, 2, 3, name="conv0"), "bn0"), "relu0")
    x = sym.Pooling(data=x, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="max",
                    name="pool0")
    for si, n in enumerate(units):
        inner, out = width * 2 ** si, 2 * width * 2 ** si
        for j in range(n):
            name, stride = f"s{si}u{j}", 2 if j == 0 and si > 0 else 1
            h = _relu(_bn(_conv(x, inner, 1, name=f"{name}_conv1"), f"{name}_bn1"),
                      f"{name}_relu1")
            h = _relu(_bn(_conv(h, inner, 3, stride, 1, group=cardinality, name=f"{name}_conv2"),
                          f"{name}_bn2"), f"{name}_relu2")
            h = _bn(_conv(h, out, 1, name=f"{name}_conv3"), f"{name}_bn3")
            sc = x if j > 0 else _bn(_conv(x, out, 1, stride, name=f"{name}_sc"),
                                     f"{name}_sc_bn")
            x = _relu(h + sc, f"{name}_relu")
    return _classifier(x, classes)


def biased_convnet(classes=100, widths=(64, 128, 256, 256, 512)):
    x = sym.Variable("data")
    for i, w in enumerate(widths):
        x = _conv(x, w, 3, 1, 1, name=f"conv{i}")
        x = sym.broadcast_add(x, sym.Variable(f"conv{i}_b", shape=(1, w, 1, 1)),
                              name=f"conv{i}_bias")
        x = _relu(x, f"relu{i}")
        x = sym.Pooling(data=x, kernel=(2, 2), stride=(2, 2), pool_type="max", name=f"pool{i}")
    x = _relu(sym.FullyConnected(data=sym.Flatten(data=x), num_hidden=512, name="fc6"), "relu6")
    x = sym.FullyConnected(data=x, num_hidden=classes, name="fc7")
    return sym.SoftmaxOutput(data=x, name="softmax")


# -- sequence families ------------------------------------------------------------
def _layer_norm(x, dim, name, eps=1e-5):
    """LayerNorm over the last axis from broadcast ops, as a symbol written
    by hand before MXNet had the op."""
    mu = sym.mean(x, axis=-1, keepdims=True, name=f"{name}_mean")
    d = sym.broadcast_sub(x, mu, name=f"{name}_center")
    var = sym.mean(sym.square(d, name=f"{name}_sq"), axis=-1, keepdims=True,
                   name=f"{name}_var")
    std = sym.sqrt(var + eps, name=f"{name}_std")
    y = sym.broadcast_div(d, std, name=f"{name}_norm")
    y = sym.broadcast_mul(y, sym.Variable(f"{name}_gamma", shape=(dim,)), name=f"{name}_scale")
    return sym.broadcast_add(y, sym.Variable(f"{name}_beta", shape=(dim,)), name=f"{name}_shift")


def _gelu(x, name):
    return sym.LeakyReLU(data=x, act_type="gelu", name=name)


def _mlp(x, hidden, out, name):
    x = sym.FullyConnected(data=x, num_hidden=hidden, flatten=False, name=f"{name}_fc1")
    return sym.FullyConnected(data=_gelu(x, f"{name}_gelu"), num_hidden=out, flatten=False,
                              name=f"{name}_fc2")


def _patches(dim, patch):
    x = _conv(sym.Variable("data"), dim, patch, patch, name="patch", bias=True)
    x = sym.reshape(x, shape=(0, 0, -1), name="patch_flat")           # (N, D, T)
    return sym.transpose(x, axes=(0, 2, 1), name="tokens")             # (N, T, D)


def _token_head(x, classes):
    x = sym.mean(x, axis=1, name="token_mean")
    return sym.SoftmaxOutput(data=sym.FullyConnected(data=x, num_hidden=classes, name="head"),
                             name="softmax")


def mixer(classes=100, dim=256, tokens=64, blocks=6, patch=8):
    x = _patches(dim, patch)
    for b in range(blocks):
        name = f"b{b}"
        h = sym.transpose(_layer_norm(x, dim, f"{name}_ln1"), axes=(0, 2, 1), name=f"{name}_t1")
        h = _mlp(h, 2 * tokens, tokens, f"{name}_token")
        x = x + sym.transpose(h, axes=(0, 2, 1), name=f"{name}_t2")
        x = x + _mlp(_layer_norm(x, dim, f"{name}_ln2"), 4 * dim, dim, f"{name}_channel")
    return _token_head(_layer_norm(x, dim, "ln_final"), classes)


def vit(classes=100, dim=192, heads=3, blocks=6, patch=8, tokens=64):
    x = _patches(dim, patch)
    x = sym.broadcast_add(x, sym.Variable("pos_embed", shape=(1, tokens, dim)), name="pos")
    d = dim // heads
    for b in range(blocks):
        name = f"b{b}"
        h = _layer_norm(x, dim, f"{name}_ln1")
        qkv = sym.FullyConnected(data=h, num_hidden=3 * dim, flatten=False, name=f"{name}_qkv")
        qkv = sym.reshape(qkv, shape=(0, 0, 3 * heads, d), name=f"{name}_qkv_heads")
        qkv = sym.transpose(qkv, axes=(0, 2, 1, 3), name=f"{name}_qkv_t")  # (N, 3H, T, d)
        q, k, v = sym.SliceChannel(qkv, num_outputs=3, axis=1, name=f"{name}_split")
        q, k, v = (sym.reshape(t, shape=(-1, tokens, d), name=f"{name}_{c}")
                   for t, c in zip((q, k, v), "qkv"))                     # (N*H, T, d)
        att = sym.batch_dot(q, k, transpose_b=True, name=f"{name}_scores")
        att = sym.softmax(att * (d ** -0.5), axis=-1, name=f"{name}_attn")
        h = sym.batch_dot(att, v, name=f"{name}_mix")                       # (N*H, T, d)
        h = sym.reshape(h, shape=(-1, heads, tokens, d), name=f"{name}_unheads")
        h = sym.reshape(sym.transpose(h, axes=(0, 2, 1, 3), name=f"{name}_mix_t"),
                        shape=(0, 0, -1), name=f"{name}_merge")
        x = x + sym.FullyConnected(data=h, num_hidden=dim, flatten=False, name=f"{name}_proj")
        x = x + _mlp(_layer_norm(x, dim, f"{name}_ln2"), 4 * dim, dim, f"{name}_mlp")
    return _token_head(_layer_norm(x, dim, "ln_final"), classes)


def lstm_lm(vocab=2000, embed=256, hidden=256, layers=2, steps=24):
    data = sym.Variable("data")
    x = sym.Embedding(data=data, input_dim=vocab, output_dim=embed, name="embed")
    xs = sym.SliceChannel(x, num_outputs=steps, axis=1, squeeze_axis=True, name="time")
    seq = [xs[t] for t in range(steps)]
    for layer in range(layers):
        i2h_w, h2h_w = sym.Variable(f"l{layer}_i2h_weight"), sym.Variable(f"l{layer}_h2h_weight")
        i2h_b, h2h_b = sym.Variable(f"l{layer}_i2h_bias"), sym.Variable(f"l{layer}_h2h_bias")
        h = c = None
        out = []
        for t, xt in enumerate(seq):
            name = f"l{layer}t{t}"
            gates = sym.FullyConnected(data=xt, weight=i2h_w, bias=i2h_b, num_hidden=4 * hidden,
                                       name=f"{name}_i2h")
            if h is not None:
                gates = gates + sym.FullyConnected(data=h, weight=h2h_w, bias=h2h_b,
                                                   num_hidden=4 * hidden, name=f"{name}_h2h")
            i, f, g, o = sym.SliceChannel(gates, num_outputs=4, name=f"{name}_gates")
            i = sym.Activation(data=i, act_type="sigmoid", name=f"{name}_i")
            f = sym.Activation(data=f, act_type="sigmoid", name=f"{name}_f")
            g = sym.Activation(data=g, act_type="tanh", name=f"{name}_g")
            o = sym.Activation(data=o, act_type="sigmoid", name=f"{name}_o")
            c = i * g if c is None else f * c + i * g
            h = o * sym.Activation(data=c, act_type="tanh", name=f"{name}_tanh")
            out.append(h)
        seq = out
    x = sym.Concat(*seq, dim=0, name="steps")          # (T*N, hidden), time-major
    x = sym.FullyConnected(data=x, num_hidden=vocab, name="decoder")
    label = sym.reshape(sym.transpose(sym.Variable("softmax_label"), axes=(1, 0)),
                        shape=(-1,), name="label_time_major")
    return sym.SoftmaxOutput(data=x, label=label, name="softmax")


def _tokens(steps):
    return lambda batch: {"data": (batch, steps), "softmax_label": (batch, steps)}


HELDOUT = {h.name: h for h in (
    Heldout("mobilenet-v1", mobilenet_v1, _images(128), "depthwise-separable convolutions"),
    Heldout("mobilenet-v2", mobilenet_v2, _images(128),
            "inverted residuals, ReLU6 as clip, linear bottlenecks"),
    Heldout("densenet", densenet, _images(64), "dense Concat blocks"),
    Heldout("unet", unet, _pixels(96),
            "encoder-decoder, Deconvolution, per-pixel SoftmaxOutput(multi_output)"),
    Heldout("mixer", mixer, _images(64), "token-mixing MLP, LayerNorm from broadcast ops, GELU"),
    Heldout("resnext", resnext, _images(128), "grouped convolutions, post-activation residual"),
    Heldout("vit", vit, _images(64), "attention by batch_dot and softmax"),
    Heldout("lstm-lm", lstm_lm, _tokens(24), "two-layer LSTM unrolled over 24 steps"),
    Heldout("biased-convnet", biased_convnet, _images(128),
            "plain conv net, biases as broadcast_add"),
)}
NAMES = tuple(HELDOUT)


def get(name: str, batch: int = 32):
    """(symbol, input shapes at ``batch``) of the held-out net ``name``."""
    if name not in HELDOUT:
        raise SymgraphError(f"unknown held-out net {name!r}; choose from {', '.join(NAMES)}")
    h = HELDOUT[name]
    return h.build(), h.shapes(batch)
