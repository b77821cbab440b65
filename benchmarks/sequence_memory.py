#!/usr/bin/env python3
"""The planner on sequence nets: an LSTM language model on MXNet's fused
``RNN`` op and a transformer encoder stack, plan beside XLA's figure.

    python benchmarks/sequence_memory.py [--nets rnn-lm,transformer]
        [--targets cpu,h100] [--out benchmarks/results/sequence_memory]

The nets, at the sizes their users run them:

  rnn-lm       PTB's "medium" LSTM language model as a hybridized Gluon
               export builds it: Embedding 10,000 x 650, a 2-layer LSTM of
               650 (the ``RNN`` op, parameters in MXNet's flat vector, the
               zero begin state ``_zeros(shape=(2, 0, 650))``), a decoder to
               the vocabulary, SoftmaxOutput; 35 steps, batch 20
  transformer  a BERT-base encoder stack written with MXNet's symbol API:
               12 post-norm blocks of 768 units, 12 heads, a 3,072 GELU
               feed-forward; a classifier on the first token; sequence 128,
               batch 16

For each net and mode (training: the step ``Module.fit`` compiles, SGD
with momentum; inference: ``Module.predict``'s program): symgraph's arena
plan and lower bound (``sg.plan``), and XLA's temp of the program for each
target (``cpu``: this machine; ``h100``: compiled deviceless for the H100
description, which needs the ``gpu-plan`` extra). The ``RNN`` op is one
node to the planner: its per-step gates live inside the op's ``lax.scan``
(and its backward runs the scan again), so its plan counts the op's inputs
and outputs, not the gates -- the figures show what that leaves out.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MIB = 2 ** 20


def rnn_lm(vocab=10000, embed=650, hidden=650, layers=2):
    import symgraph as sg
    S = sg.sym
    tokens = S.Variable("data")                                      # (time, batch)
    x = S.Embedding(tokens, input_dim=vocab, output_dim=embed, name="embed")
    state = S._zeros(shape=(layers, 0, hidden), name="h0")
    cell = S._zeros(shape=(layers, 0, hidden), name="c0")
    x = S.RNN(x, S.Variable("lstm_parameters"), state, cell, mode="lstm",
              state_size=hidden, num_layers=layers, name="lstm")
    logits = S.FullyConnected(S.reshape(x, shape=(-1, hidden)), num_hidden=vocab,
                              name="decoder")
    return S.SoftmaxOutput(logits, S.reshape(S.Variable("softmax_label"), shape=(-1,)),
                           name="softmax")


def transformer(blocks=12, units=768, heads=12, hidden=3072, classes=2):
    import symgraph as sg
    S = sg.sym
    x = S.Variable("data")                                           # (batch, seq, units)
    for i in range(blocks):
        p = f"block{i}_"
        qkv = S.FullyConnected(x, num_hidden=3 * units, flatten=False, name=p + "qkv")
        qkv = S.transpose(S.reshape(qkv, shape=(0, 0, 3, heads, -1)), axes=(2, 0, 3, 1, 4))
        q, k, v = (S.reshape(S.squeeze(S.slice_axis(qkv, axis=0, begin=j, end=j + 1), axis=0),
                             shape=(-3, 0, 0)) for j in range(3))
        att = S.softmax(S.batch_dot(q, k, transpose_b=True) / float((units // heads) ** 0.5),
                        axis=-1)
        ctx = S.reshape(S.batch_dot(att, v), shape=(-4, -1, heads, 0, 0))
        ctx = S.reshape(S.transpose(ctx, axes=(0, 2, 1, 3)), shape=(0, 0, -3))
        h = S.LayerNorm(x + S.FullyConnected(ctx, num_hidden=units, flatten=False,
                                             name=p + "proj"), axis=-1, name=p + "ln1")
        ff = S.LeakyReLU(S.FullyConnected(h, num_hidden=hidden, flatten=False, name=p + "ff1"),
                         act_type="gelu")
        ff = S.FullyConnected(ff, num_hidden=units, flatten=False, name=p + "ff2")
        x = S.LayerNorm(h + ff, axis=-1, name=p + "ln2")
    first = S.squeeze(S.slice_axis(x, axis=1, begin=0, end=1), axis=1)
    return S.SoftmaxOutput(S.FullyConnected(first, num_hidden=classes, name="classifier"),
                           name="softmax")


NETS = {"rnn-lm": (rnn_lm, {"data": (35, 20), "softmax_label": (35, 20)}),
        "transformer": (transformer, {"data": (16, 128, 768), "softmax_label": (16,)})}


def measure(name: str, targets: list[str]) -> list[dict]:
    from symgraph import xla
    from symgraph.memory import plan
    build, shapes = NETS[name]
    net = build()
    rows = []
    for mode in ("train", "infer"):
        p = plan(net, shapes, train=mode == "train", name=name)
        row = {"net": name, "mode": mode, "shapes": shapes, "arena": p.internal["arena"],
               "lower_bound": p.internal["lower_bound"], "naive": p.internal["naive"]}
        for target in targets:
            t0 = time.perf_counter()
            m = xla.plan_memory(p, target=target)
            row[target] = {"temp": m["temp"], "ratio": m["temp"] / p.internal["arena"],
                           "measures": m["program"]["measures"],
                           "compile_s": round(time.perf_counter() - t0, 1)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def markdown(rows, targets, command) -> str:
    head = " | ".join(f"XLA temp {t} MiB | temp / arena {t}" for t in targets)
    lines = ["# Sequence nets: plan beside XLA", "", f"Command: `{command}`", "",
             f"| net | mode | naive MiB | arena MiB | lower bound MiB | {head} |",
             "|---|---|--:|--:|--:|" + "--:|--:|" * len(targets)]
    for r in rows:
        cells = " | ".join(f"{r[t]['temp'] / MIB:,.0f} | {r[t]['ratio']:.2f}" for t in targets)
        lines.append(f"| {r['net']} | {r['mode']} | {r['naive'] / MIB:,.0f} | "
                     f"{r['arena'] / MIB:,.0f} | {r['lower_bound'] / MIB:,.0f} | {cells} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nets", default=",".join(NETS))
    ap.add_argument("--targets", default="cpu,h100")
    ap.add_argument("--out", default=os.path.join("bench-results", "sequence_memory"))
    args = ap.parse_args(argv)
    targets = args.targets.split(",")
    rows = [r for name in args.nets.split(",") for r in measure(name, targets)]
    command = "python benchmarks/sequence_memory.py " + " ".join(argv or sys.argv[1:])
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"command": command, "rows": rows}, f, indent=1)
    text = markdown(rows, targets, command.strip())
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
