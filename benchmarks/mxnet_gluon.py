#!/usr/bin/env python3
"""Gluon exports side by side: MXNet 1.9.1 against symgraph, outputs and gradients.

What a user moving from MXNet brings are the files ``HybridBlock.export``
writes: ``NAME-symbol.json`` and ``NAME-0000.params``. This script makes
them in MXNet, runs them in MXNet, then loads the very same files in
symgraph and compares. MXNet is never a dependency of symgraph: run the
script with MXNet's own interpreter, made outside the repository, and name
an interpreter that has symgraph with ``--python``:

    python -m venv MXVENV && MXVENV/bin/pip install mxnet==1.9.1 numpy==1.23.5
    MXVENV/bin/python benchmarks/mxnet_gluon.py --python python3 \\
        [--nets resnet18_v1,lstm-lm ...] [--out benchmarks/results/mxnet_gluon]

The nets:

  vision      ten models of ``mxnet.gluon.model_zoo.vision`` at 224x224
              (Inception-v3 at 299x299), batch 2
  lstm-lm     Embedding -> 2-layer bidirectional LSTM -> Dense decoder
  gru-lm      the same with a GRU: both export ``_rnn_param_concat`` + ``RNN``
  transformer a transformer encoder block written with MXNet's symbol API
              (multi-head attention with batch_dot and softmax, LayerNorm,
              a GELU feed-forward, residual sums), saved with random params

Every parameter and aux state is set to random values before the export
(moving variances positive), so no check passes because a weight is zero
or one. For each net and each side:

  output      ``forward(is_train=False)``: inference (BatchNorm's moving
              statistics)
  gradients   ``forward(is_train=True)`` then ``backward`` with one random
              head gradient, the same on both sides: the gradient of every
              float argument, data included. Dropout layers are given
              ``p=0`` in the file both sides run for this, so the
              comparison is deterministic; BatchNorm uses batch statistics.

The figure is the relative error ``max|symgraph - mxnet| / max|mxnet|``
per array, the largest over the outputs and over the gradients; the
target is 1e-5. Beside it, the largest ``||symgraph - mxnet|| /
||mxnet||`` over the gradients, which a few elements far apart (a
max-pooling window whose largest inputs tie within the rounding can send
its gradient elsewhere) move little. A gradient that is zero in exact
arithmetic (a
convolution's bias ahead of a BatchNorm in training: the mean takes it
out) holds only rounding on both sides; such a gradient (below 1e-6 of the
largest) is judged against the largest gradient's scale. ``--dtype
float64`` runs both sides in float64: where float32 differs by more than
the target, float64 tells a semantic difference from float32 rounding
amplified through BatchNorm's training backward at batch 2. In float32
the MXNet side also runs the same files and head gradient in float64
("exact"): the last two columns give, over the gradients that are not zero
in exact arithmetic, the worst ``||float32 - exact|| / ||exact||`` of
symgraph's float32 gradients and of MXNet's own -- the rounding each
framework's float32 carries.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import tempfile

import numpy as np

# before mxnet is imported: run each op as written, no oneDNN subgraph fusion
os.environ["MXNET_SUBGRAPH_BACKEND"] = "NONE"

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join("benchmarks", "results", "mxnet_gluon")
VISION = ["resnet18_v1", "resnet50_v1", "resnet18_v2", "mobilenet1.0", "mobilenetv2_1.0",
          "densenet121", "squeezenet1.0", "vgg16_bn", "alexnet", "inceptionv3"]
SEQUENCE = ["lstm-lm", "gru-lm"]
NETS = VISION + SEQUENCE + ["transformer"]
TOLERANCE = 1e-5
ZERO = 1e-6       # a gradient below this fraction of the largest one is zero
VOCAB, EMBED, HIDDEN, SEQ_LEN, SEQ_BATCH = 50, 16, 24, 12, 3


# -- the MXNet side (runs under MXNet's interpreter) ---------------------------------------

def _randomize(params: dict, rng) -> None:
    """Random values for every parameter (the dict of name -> NDArray)."""
    import mxnet as mx
    for name, arr in params.items():
        shape = arr.shape
        if name.endswith(("running_var", "moving_var")):
            value = rng.uniform(0.5, 1.5, shape)
        elif name.endswith(("running_mean", "moving_mean")):
            value = rng.normal(0, 0.1, shape)
        elif name.endswith(("gamma",)):
            value = rng.uniform(0.8, 1.2, shape)
        else:
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
            value = rng.normal(0, 1 / np.sqrt(max(fan_in, 1)), shape)
        arr[:] = mx.nd.array(value, dtype=arr.dtype)


def _gluon_vision(name: str, prefix: str, rng, dtype):
    from mxnet.gluon.model_zoo import vision
    size = 299 if name == "inceptionv3" else 224
    return _export(vision.get_model(name, pretrained=False),
                   rng.normal(0, 1, (2, 3, size, size)), prefix, rng, dtype)


def _export(net, data, prefix: str, rng, dtype) -> dict:
    """``net`` initialised, cast, hybridized, run once on ``data``, every
    parameter made random, then exported as ``prefix``; its input."""
    import mxnet as mx
    net.initialize(mx.init.Xavier())
    net.cast(dtype)
    x = mx.nd.array(data, dtype=dtype)
    net.hybridize()
    net(x)
    _randomize({k: v.data() for k, v in net.collect_params().items()}, rng)
    net(x)
    net.export(prefix, epoch=0)
    return {"data": x.asnumpy()}


def _gluon_lm(cell: str, prefix: str, rng, dtype):
    import mxnet as mx
    from mxnet.gluon import nn, rnn

    class LM(mx.gluon.HybridBlock):
        def __init__(self):
            super().__init__()
            with self.name_scope():
                self.embed = nn.Embedding(VOCAB, EMBED)
                layer = rnn.LSTM if cell == "lstm" else rnn.GRU
                self.rnn = layer(HIDDEN, num_layers=2, bidirectional=True, layout="TNC",
                                 input_size=EMBED)
                self.decoder = nn.Dense(VOCAB, flatten=False, in_units=2 * HIDDEN)

        def hybrid_forward(self, F, tokens):
            return self.decoder(self.rnn(self.embed(tokens)))

    return _export(LM(), rng.integers(0, VOCAB, (SEQ_LEN, SEQ_BATCH)), prefix, rng, dtype)


def _transformer(prefix: str, rng, dtype, batch=2, seq=10, units=32, heads=4, hidden=64):
    """One post-norm encoder block as MXNet users write it with mx.sym."""
    import mxnet as mx
    sym = mx.sym
    x = sym.Variable("data")                                       # (batch, seq, units)
    qkv = sym.FullyConnected(x, num_hidden=3 * units, flatten=False, name="qkv")
    qkv = sym.reshape(qkv, shape=(0, 0, 3, heads, -1))             # (b, s, 3, h, d)
    qkv = sym.transpose(qkv, axes=(2, 0, 3, 1, 4))                 # (3, b, h, s, d)
    q, k, v = (sym.reshape(sym.squeeze(sym.slice_axis(qkv, axis=0, begin=i, end=i + 1),
                                       axis=0), shape=(-3, 0, 0)) for i in range(3))
    scores = sym.batch_dot(q, k, transpose_b=True) / float(np.sqrt(units // heads))
    attn = sym.softmax(scores, axis=-1)
    ctx = sym.batch_dot(attn, v)                                   # (b*h, s, d)
    ctx = sym.reshape(ctx, shape=(-4, -1, heads, 0, 0))            # (b, h, s, d)
    ctx = sym.reshape(sym.transpose(ctx, axes=(0, 2, 1, 3)), shape=(0, 0, -3))
    proj = sym.FullyConnected(ctx, num_hidden=units, flatten=False, name="proj")
    h1 = sym.LayerNorm(x + proj, axis=-1, name="ln1")
    ff = sym.FullyConnected(h1, num_hidden=hidden, flatten=False, name="ff1")
    ff = sym.LeakyReLU(ff, act_type="gelu")
    ff = sym.FullyConnected(ff, num_hidden=units, flatten=False, name="ff2")
    out = sym.LayerNorm(h1 + ff, axis=-1, name="ln2")
    shapes, _, _ = out.infer_shape(data=(batch, seq, units))
    params = {}
    for name, shape in zip(out.list_arguments(), shapes):
        if name != "data":
            params[f"arg:{name}"] = mx.nd.zeros(shape, dtype=dtype)
    _randomize(params, rng)
    mx.model.save_checkpoint(prefix, 0, out, {k[4:]: v for k, v in params.items()}, {})
    return {"data": rng.normal(0, 1, (batch, seq, units)).astype(dtype)}


def _without_dropout(text: str) -> str:
    graph = json.loads(text)
    for node in graph["nodes"]:
        if node["op"] == "Dropout":
            node.setdefault("attrs", {})["p"] = "0"
    return json.dumps(graph)


def _run_mxnet(prefix: str, inputs: dict, rng, tokens: bool, head=None,
               cast=None) -> dict:
    """Inference outputs, then gradients of every float argument (under
    ``head``, else a random one); ``cast``: run in that dtype instead."""
    import mxnet as mx
    with open(f"{prefix}-symbol.json") as f:
        text = f.read()
    loaded = mx.nd.load(f"{prefix}-0000.params")
    if cast:
        loaded = {k: v.astype(cast) for k, v in loaded.items()}
        inputs = {k: v.astype(cast) for k, v in inputs.items()}
    arg = {k[4:]: v for k, v in loaded.items() if k.startswith("arg:")}
    aux = {k[4:]: v for k, v in loaded.items() if k.startswith("aux:")}
    data = {k: mx.nd.array(v, dtype=v.dtype) for k, v in inputs.items()}
    result = {}

    net = mx.sym.load_json(text)
    exe = net.bind(mx.cpu(), args={**arg, **data}, aux_states=aux, grad_req="null")
    result["out"] = exe.forward(is_train=False)[0].asnumpy()

    net = mx.sym.load_json(_without_dropout(text))
    # token ids feed an Embedding: no gradient for them
    float_args = [n for n in net.list_arguments() if n != "data" or not tokens]
    args = {**arg, **data}
    grads = {n: mx.nd.zeros(args[n].shape, dtype=args[n].dtype) for n in float_args}
    exe = net.bind(mx.cpu(), args=args, args_grad=grads, aux_states=aux,
                   grad_req={n: ("write" if n in grads else "null") for n in args})
    out = exe.forward(is_train=True)[0]
    head = rng.normal(0, 1, out.shape) if head is None else head
    exe.backward(mx.nd.array(head, dtype=out.dtype))
    result["train_out"] = out.asnumpy()
    result["head"] = head
    for n, g in grads.items():
        result[f"grad:{n}"] = g.asnumpy()
    return result


def mxnet_side(names: list[str], work: str, seed: int, dtype: str) -> None:
    import mxnet as mx
    for i, name in enumerate(names):
        rng = np.random.default_rng(seed + i)
        mx.random.seed(seed + i)
        prefix = os.path.join(work, name)
        if name in VISION:
            inputs = _gluon_vision(name, prefix, rng, dtype)
        elif name in SEQUENCE:
            inputs = _gluon_lm(name.split("-")[0], prefix, rng, dtype)
        else:
            inputs = _transformer(prefix, rng, dtype)
        ref = _run_mxnet(prefix, inputs, rng, tokens=name in SEQUENCE)
        if dtype == "float32" and name not in SEQUENCE:
            # MXNet's own float32 error: the same file and head run in float64
            # (not the RNN exports: their begin state's _zeros is float32 in the file)
            exact = _run_mxnet(prefix, inputs, rng, name in SEQUENCE, ref["head"], "float64")
            ref.update({f"exact:{k}": v for k, v in exact.items() if k != "head"})
        np.savez(f"{prefix}-mxnet.npz", **{f"input:{k}": v for k, v in inputs.items()}, **ref)
        print(f"mxnet {name}: out {ref['out'].shape}, "
              f"{sum(k.startswith('grad:') for k in ref)} gradients", flush=True)


# -- the symgraph side (runs under --python) -------------------------------------------------

def _relative(a, b, floor: float = 0.0) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    scale = max(float(np.max(np.abs(b))), floor) or 1.0
    return float(np.max(np.abs(a - b))) / scale


def _norm_relative(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b)) / (float(np.linalg.norm(b)) or 1.0)


def symgraph_side(names: list[str], work: str) -> list[dict]:
    import symgraph as sg
    from symgraph.train.checkpoint import load_checkpoint
    rows = []
    for name in names:
        prefix = os.path.join(work, name)
        ref = dict(np.load(f"{prefix}-mxnet.npz"))
        inputs = {k[6:]: v for k, v in ref.items() if k.startswith("input:")}
        row = {"net": name}
        try:
            net, arg, aux = load_checkpoint(prefix, 0)
            data = {k: sg.nd.array(v, dtype=v.dtype) for k, v in inputs.items()}
            exe = net.bind(sg.cpu(), args={**arg, **data}, aux_states=aux, grad_req="null")
            out = exe.forward(is_train=False)[0].asnumpy()
            row["output_rel_err"] = _relative(out, ref["out"])

            with open(f"{prefix}-symbol.json") as f:
                train_net = sg.sym.load_json(_without_dropout(f.read()))
            grads = {k[5:]: None for k in ref if k.startswith("grad:")}
            args = {**arg, **data}
            args_grad = {n: sg.nd.zeros(args[n].shape, dtype=args[n].dtype) for n in grads}
            exe = train_net.bind(sg.cpu(), args=args, args_grad=args_grad, aux_states=aux,
                                 grad_req={n: ("write" if n in grads else "null") for n in args})
            train_out = exe.forward(is_train=True)[0].asnumpy()
            exe.backward(sg.nd.array(ref["head"], dtype=train_out.dtype))
            row["train_output_rel_err"] = _relative(train_out, ref["train_out"])
            mine = {n: args_grad[n].asnumpy() for n in grads}
            # a gradient that is zero in exact arithmetic (a bias before a
            # BatchNorm in training) holds only rounding: judged against the
            # largest gradient's scale, not its own
            scale = max(float(np.max(np.abs(ref[f"grad:{n}"]))) for n in grads)
            errs = {n: _relative(mine[n], ref[f"grad:{n}"], floor=ZERO * scale) for n in grads}
            row["zero_gradients"] = sum(float(np.max(np.abs(ref[f"grad:{n}"]))) < ZERO * scale
                                        for n in grads)
            worst = max(errs, key=errs.get)
            row["grad_norm_rel_err"] = max(_norm_relative(mine[n], ref[f"grad:{n}"])
                                           for n in grads if float(np.max(np.abs(
                                               ref[f"grad:{n}"]))) >= ZERO * scale)
            if "exact:out" in ref:
                # float32 against the same file run in float64 by MXNet: how far
                # each side's float32 is from exact, gradient by gradient
                live = [n for n in grads if float(np.max(np.abs(ref[f"exact:grad:{n}"])))
                        >= ZERO * max(float(np.max(np.abs(ref[f"exact:grad:{k}"])))
                                      for k in grads)]
                for side, got in (("symgraph", mine), ("mxnet", {n: ref[f"grad:{n}"]
                                                                  for n in grads})):
                    row[f"{side}_vs_exact"] = max(
                        _norm_relative(got[n], ref[f"exact:grad:{n}"]) for n in live)
            if os.environ.get("GLUON_DEBUG"):
                print(sorted(errs.items(), key=lambda kv: -kv[1])[:8])
            row.update(gradients=len(errs), grad_rel_err=errs[worst], worst_gradient=worst)
            row["ops"] = sorted({n["op"] for n in json.loads(net.tojson())["nodes"]} - {"null"})
            row["match"] = max(row["output_rel_err"], row["train_output_rel_err"],
                               row["grad_rel_err"]) <= TOLERANCE
        except Exception as e:   # a net that does not load or run is a row, not a crash
            row.update(error=f"{type(e).__name__}: {str(e).splitlines()[0]}", match=False)
        print(json.dumps({k: v for k, v in row.items() if k != "ops"}), flush=True)
        rows.append(row)
    return rows


def _markdown(rows: list[dict], meta: dict) -> str:
    lines = ["# Gluon exports: symgraph against MXNet 1.9.1", "",
             f"{meta['when']}, {meta['machine']}; command: `{meta['command']}`.", "",
             f"Relative error = max|symgraph - mxnet| / max|mxnet|, {meta['dtype']}, CPU; "
             "inference output, training-mode output, and the worst gradient of all "
             f"float arguments (data included). Target: {TOLERANCE:g}.", "",
             "| net | output | train output | gradients | gradients (norm) | worst gradient "
             "| match | symgraph vs exact | MXNet vs exact |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['net']} | {r['error']} | | | | | no | | |")
        else:
            zero = f", {r['zero_gradients']} zero" if r.get("zero_gradients") else ""
            lines.append(f"| {r['net']} | {r['output_rel_err']:.1e} | "
                         f"{r['train_output_rel_err']:.1e} | {r['grad_rel_err']:.1e} "
                         f"({r['gradients']}{zero}) | {r['grad_norm_rel_err']:.1e} | "
                         f"{r['worst_gradient']} | {'yes' if r['match'] else 'no'} | "
                         + " | ".join(f"{r[k]:.1e}" if k in r else "-"
                                      for k in ("symgraph_vs_exact", "mxnet_vs_exact"))
                         + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nets", default=",".join(NETS))
    ap.add_argument("--python", default=None,
                    help="an interpreter with symgraph (for the symgraph side)")
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                    help="float64 separates a semantic difference from float32 rounding")
    ap.add_argument("--side", choices=["both", "symgraph"], default="both",
                    help=argparse.SUPPRESS)
    ap.add_argument("--work", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    names = [n for n in args.nets.split(",") if n]
    unknown = sorted(set(names) - set(NETS))
    if unknown:
        ap.error(f"unknown nets {unknown}; choose from {NETS}")
    if args.side == "symgraph":
        rows = symgraph_side(names, args.work)
        with open(os.path.join(args.work, "rows.json"), "w") as f:
            json.dump(rows, f)
        return 0
    if not args.python:
        ap.error("--python: an interpreter that has symgraph is needed")
    with tempfile.TemporaryDirectory() as work:
        mxnet_side(names, work, args.seed, args.dtype)
        env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS="cpu",
                   JAX_ENABLE_X64=str(int(args.dtype == "float64")))
        subprocess.run([args.python, os.path.abspath(__file__), "--side", "symgraph",
                        "--work", work, "--nets", ",".join(names)], check=True, env=env)
        with open(os.path.join(work, "rows.json")) as f:
            rows = json.load(f)
    import mxnet as mx
    meta = {"when": _dt.date.today().isoformat(), "dtype": args.dtype,
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, mxnet {mx.__version__}",
            "command": "MXVENV/bin/python benchmarks/mxnet_gluon.py --python python3"
                       + (f" --nets {args.nets}" if args.nets != ",".join(NETS) else "")
                       + (f" --dtype {args.dtype}" if args.dtype != "float32" else "")}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(_markdown(rows, meta))
    print(_markdown(rows, meta))
    return 0 if all(r["match"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
