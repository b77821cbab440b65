"""The ``symgraph viz`` subcommand (its description is the package
docstring)."""
from __future__ import annotations

import os

from .draw import VizError, output_format, plot, render


# --------------------------------------------------------------------------
# the `symgraph viz` subcommand
# --------------------------------------------------------------------------
def add_arguments(parser) -> None:
    parser.add_argument("net", metavar="NET.json", help="network as MXNet symbol JSON")
    parser.add_argument("-o", "--output", metavar="OUT",
                        help="output file; its extension picks the format: .svg .png .pdf "
                             ".dot (default: NET.svg beside the input)")
    parser.add_argument("--shape", action="append", metavar="NAME=DIMS", default=[],
                        help="input shape, e.g. data=64,3,224,224 (repeatable); edges are "
                             "labelled with tensor shapes")
    parser.add_argument("--plan", action="store_true",
                        help="draw the memory plan (needs --shape): tensors coloured by "
                             "storage slot, bytes per node, fused groups, a legend of totals")
    parser.add_argument("--train", action="store_true",
                        help="draw the backward graph too (dashed, paler)")
    parser.add_argument("--strategy", default="arena",
                        choices=("naive", "inplace", "coshare", "both", "arena"),
                        help="with --plan: the strategy whose storage is drawn (default: "
                             "arena, as in symgraph plan)")
    parser.add_argument("--rankdir", default="TB", choices=("TB", "LR", "BT", "RL"),
                        help="layout direction: TB top to bottom (default), LR left to right")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--show-params", dest="hide_params", action="store_false",
                       help="draw weights, biases and aux states as input nodes")
    group.add_argument("--hide-params", dest="hide_params", action="store_true",
                       help="hide weights, biases and aux states (the default)")
    parser.set_defaults(hide_params=True)
    parser.add_argument("--range", dest="node_range", metavar="START:END",
                        help="draw only the nodes on paths from START to END, e.g. "
                             "conv3_1:conv4_1 (either side may be empty)")
    parser.add_argument("--collapse", metavar="REGEX",
                        help="draw each run of consecutive nodes whose names give the same "
                             "match (its first group, if any) as one block, e.g. "
                             "'stage\\d+_unit\\d+' for ResNet units")
    parser.add_argument("--title", help="graph name (default: the output node's name)")
    parser.add_argument("--group2ctx", metavar="GROUP=DEV,...", default=None,
                        help="draw the net placed by ctx_group, e.g. stage1=cpu:1,stage2=cpu:2, "
                             "with a _CrossDeviceCopy node on every edge between devices")


def load_net(path):
    """The Symbol in an MXNet symbol-JSON file (``symgraph.cli.load_net``)."""
    from ..cli import load_net as load
    return load(path)


def run(args) -> int:
    """``symgraph viz``: writes the picture, prints its path; 0 on success."""
    from ..cli import check_net_file, check_output_folder, parse_shapes

    out = args.output or os.path.splitext(args.net)[0] + ".svg"
    check_net_file(args.net)  # a missing input is named before its default output
    output_format(out)  # an unknown extension fails before any work
    check_output_folder(out)
    shape = parse_shapes(args.shape)
    if args.plan and not shape:
        raise VizError("--plan needs the input shapes: add --shape NAME=DIMS, e.g. "
                       "--shape data=64,3,224,224")
    group2ctx = None
    if args.group2ctx is not None:
        from ..parallel.placement import parse_group2ctx_arg
        group2ctx = parse_group2ctx_arg(args.group2ctx)
    net = load_net(args.net)
    dot = plot(net, shape=shape or None, plan=True if args.plan else None, train=args.train,
               strategy=args.strategy, hide_params=args.hide_params, rankdir=args.rankdir,
               node_range=args.node_range, collapse=args.collapse, title=args.title,
               group2ctx=group2ctx)
    render(dot, out)
    print(f"wrote {out}")
    return 0
