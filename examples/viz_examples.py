#!/usr/bin/env python3
"""Draw the example pictures of docs/cli.md (``symgraph viz`` and
``symgraph plan --plot``) into a folder.

    python examples/viz_examples.py            # into ./viz-examples/
    python examples/viz_examples.py /tmp/pics  # anywhere else
    python examples/viz_examples.py --docs     # rewrites docs/images/ (the committed ones)

The default folder is a new one in the current directory, so that trying
the example leaves a checkout's tracked pictures alone; ``--docs`` is for
refreshing them after a change to what ``symgraph viz`` draws.

Graphs are SVG (small, sharp at any zoom), the memory timeline a PNG.
Every picture is drawn through the same functions the CLI uses
(``sg.viz.plot`` + ``sg.viz.render``, ``sg.viz.plot_timeline``), so the
docs show what the commands draw. Needs Graphviz's ``dot`` program.
"""
from __future__ import annotations

import argparse
import os

import symgraph as sg
from symgraph import viz

HERE = os.path.dirname(os.path.abspath(__file__))
DOCS_OUT = os.path.join(os.path.dirname(HERE), "docs", "images")
DEFAULT_OUT = "viz-examples"


CONV_SHAPE = {"data": (32, 3, 32, 32)}


def main(out_dir: str = DEFAULT_OUT) -> list[str]:
    """Writes the pictures into ``out_dir``; returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    conv = sg.models.get_model("convnet")  # symgraph zoo convnet -o convnet.json
    mlp = sg.models.get_model("mlp")
    written = []

    def graph(name, dot):
        written.append(viz.render(dot, os.path.join(out_dir, name)))

    # `symgraph viz mlp.json`: no shapes, op types and attributes only
    graph("viz_mlp.svg", viz.plot(mlp, rankdir="LR", title="mlp"))
    # `symgraph viz convnet.json --shape data=32,3,32,32`: shapes on the edges
    graph("viz_shapes.svg", viz.plot(conv, shape=CONV_SHAPE, title="convnet"))
    # `--show-params`: weights, biases and BatchNorm states drawn too
    graph("viz_params.svg", viz.plot(conv, shape=CONV_SHAPE, hide_params=False,
                                     title="convnet"))
    # `--plan`: one colour per storage slot, bytes per node, fused clusters
    infer = sg.plan(conv, CONV_SHAPE, strategy="both", name="convnet")
    graph("viz_plan.svg", viz.plot(conv, plan=infer, title="convnet"))
    # `--plan --train`: the backward graph dashed and paler beside the forward
    train = sg.plan(conv, CONV_SHAPE, train=True, strategy="both", name="convnet")
    graph("viz_train.svg", viz.plot(conv, plan=train, title="convnet"))
    # `--collapse`: a ResNet drawn one block per residual unit
    resnet = sg.models.get_model("resnet-cifar-20")
    graph("viz_collapse.svg", viz.plot(resnet, shape={"data": (32, 3, 32, 32)},
                                       collapse=r"stage\d+_unit\d+", title="resnet-cifar-20"))
    # `symgraph plan convnet.json --shape ... --train --plot timeline.png`
    path = os.path.join(out_dir, "plan_timeline.png")
    viz.plot_timeline(train, path)
    written.append(path)
    return written


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n\n")[0])
    p.add_argument("out_dir", nargs="?", default=None,
                   help=f"folder to draw into (default: ./{DEFAULT_OUT}/)")
    p.add_argument("--docs", action="store_true",
                   help="draw into the checkout's docs/images/ (rewrites the committed pictures)")
    args = p.parse_args(argv)
    if args.docs and args.out_dir:
        p.error("give a folder or --docs, not both")
    return args


if __name__ == "__main__":
    args = parse_args()
    for p in main(DOCS_OUT if args.docs else args.out_dir or DEFAULT_OUT):
        print(f"wrote {p}  ({os.path.getsize(p) / 1024:.0f} KiB)")
