"""Regenerates the MXNet-written files in this folder (not run by the tests).

Needs MXNet 1.9.1 in its own environment (never a symgraph dependency):
    python -m venv mxvenv && mxvenv/bin/pip install mxnet==1.9.1 numpy==1.23.5
    MXNET_SUBGRAPH_BACKEND=NONE mxvenv/bin/python tests/data/make_mxnet_files.py

It writes:
  mlp-symbol.json                  an MLP saved by MXNet 1.9.1
  convnet-symbol.json              a small conv net saved by MXNet 1.9.1, with
                                   hints (__shape__, __lr_mult__, __ctx_group__)
  memonger-symbol.json             residual units with memonger's __mirror_stage__
                                   and __force_mirroring__ hints
  *-legacy-upgraded-symbol.json    MXNet 1.9.1's own upgrade of the hand-written
                                   pre-0.9 files *-legacy-symbol.json, saved again
  mxnet-dict.params, mxnet-list.params
                                   arrays saved by mx.nd.save (a dict, a list)
and prints MXNet's infer_shape of each net (the figures tests/test_serialize.py
checks against).
"""
import os

import mxnet as mx

HERE = os.path.dirname(os.path.abspath(__file__))


def mlp():
    data = mx.sym.Variable("data")
    fc1 = mx.sym.FullyConnected(data, num_hidden=8, name="fc1")
    act = mx.sym.Activation(fc1, act_type="relu", name="relu1")
    fc2 = mx.sym.FullyConnected(act, num_hidden=3, name="fc2")
    return mx.sym.SoftmaxOutput(fc2, name="softmax")


def convnet():
    data = mx.sym.Variable("data", shape=(2, 3, 8, 8), lr_mult=0.5)
    with mx.AttrScope(ctx_group="dev1"):
        conv = mx.sym.Convolution(data, kernel=(3, 3), num_filter=4, pad=(1, 1),
                                  workspace=256, name="conv1", attr={"lr_mult": "2"})
    bn = mx.sym.BatchNorm(conv, fix_gamma=False, eps=1e-3, name="bn1")
    act = mx.sym.Activation(bn, act_type="relu", name="relu1")
    pool = mx.sym.Pooling(act, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool1")
    flat = mx.sym.Flatten(pool, name="flatten1")
    fc = mx.sym.FullyConnected(flat, num_hidden=5, name="fc1")
    return mx.sym.SoftmaxOutput(fc, name="softmax")


def memonger():
    """Residual units as MXNet's image-classification resnet.py builds them
    with memonger=True (the shortcut marked as a stage end with
    _set_attr(mirror_stage='True')), and force_mirroring set on two nodes
    as memonger's search_plan does."""
    data = mx.sym.Variable("data")
    body = mx.sym.Convolution(data, num_filter=8, kernel=(3, 3), pad=(1, 1), no_bias=True,
                              name="conv0")
    body = mx.sym.BatchNorm(body, fix_gamma=False, eps=2e-5, name="bn0")
    body = mx.sym.Activation(body, act_type="relu", name="relu0")
    for i in range(3):
        name = f"unit{i + 1}"
        bn1 = mx.sym.BatchNorm(body, fix_gamma=False, eps=2e-5, name=name + "_bn1")
        act1 = mx.sym.Activation(bn1, act_type="relu", name=name + "_relu1")
        conv1 = mx.sym.Convolution(act1, num_filter=8, kernel=(3, 3), pad=(1, 1),
                                   no_bias=True, name=name + "_conv1")
        bn2 = mx.sym.BatchNorm(conv1, fix_gamma=False, eps=2e-5, name=name + "_bn2")
        act2 = mx.sym.Activation(bn2, act_type="relu", name=name + "_relu2")
        conv2 = mx.sym.Convolution(act2, num_filter=8, kernel=(3, 3), pad=(1, 1),
                                   no_bias=True, name=name + "_conv2")
        shortcut = body
        shortcut._set_attr(mirror_stage="True")
        body = conv2 + shortcut
    body._set_attr(mirror_stage="True")
    internals = body.get_internals()
    internals["unit2_conv1_output"]._set_attr(force_mirroring="True")
    internals["unit1_relu2_output"]._set_attr(force_mirroring="False")
    pool = mx.sym.Pooling(body, global_pool=True, kernel=(7, 7), pool_type="avg", name="pool1")
    fc = mx.sym.FullyConnected(mx.sym.Flatten(pool), num_hidden=4, name="fc1")
    return mx.sym.SoftmaxOutput(fc, name="softmax")


def show(name, sym, **shapes):
    args, outs, aux = sym.infer_shape(**shapes)
    print(name)
    print("  args", dict(zip(sym.list_arguments(), args)))
    print("  outs", outs)
    print("  aux ", dict(zip(sym.list_auxiliary_states(), aux)))


if __name__ == "__main__":
    mlp().save(os.path.join(HERE, "mlp-symbol.json"))
    convnet().save(os.path.join(HERE, "convnet-symbol.json"))
    memonger().save(os.path.join(HERE, "memonger-symbol.json"))
    mx.nd.save(os.path.join(HERE, "mxnet-dict.params"),
               {"arg:w": mx.nd.array([[1, 2, 3], [4, 5, 6]]),
                "aux:m": mx.nd.array([0.5, -1], dtype="float64")})
    mx.nd.save(os.path.join(HERE, "mxnet-list.params"),
               [mx.nd.arange(4, dtype="int32"), mx.nd.ones((1, 2), dtype="float16")])
    show("mlp", mlp(), data=(4, 6))
    show("convnet", convnet(), data=(2, 3, 8, 8))
    for stem in ("mlp", "convnet"):
        sym = mx.sym.load(os.path.join(HERE, f"{stem}-legacy-symbol.json"))
        sym.save(os.path.join(HERE, f"{stem}-legacy-upgraded-symbol.json"))
        show(f"{stem}-legacy", sym,
             data=(4, 6) if stem == "mlp" else (2, 3, 8, 8))
