"""Plan the memory of a network (MXNet symbol JSON) and report it.

    symgraph plan NET.json --shape data=64,3,224,224 [--train] [--target h100] [--json]
                  [--plot OUT.png] [--budget 6GiB] [--optimizer NAME] [--recompute ALG]

The report gives the buckets (arguments, gradients, aux, internal), the
internal bytes under every strategy (naive, inplace, coshare, both, arena,
lower_bound) with the savings relative to naive, the peak step and the
tensors live there, and XLA's own figures for the program a Module runs
for the net -- the step ``fit`` compiles, or ``predict``'s program --
lowered with the memory measures ``--measures`` names (default ``auto``,
the rule a Module uses; ``none`` for the plain lowering; ``--no-xla``
skips compiling it). ``--target h100`` (a100,
a100-40gb, l4, a GpuTargetConfig file; gpu for the one present) compiles
that program for a GPU instead of this machine's CPU -- deviceless, no GPU
needed -- and says whether it fits the device. ``--json`` prints one JSON object;
``--plot OUT.png`` (or .svg, .pdf) also draws the memory per step of the
schedule under every strategy (``symgraph.viz.plot_timeline``).
``--budget 6GiB`` (training) recomputes forward tensors in the backward so
the total (arguments + gradients + aux + optimizer state + internal) fits,
with the least extra FLOPs (``memory/budget.py``); ``--optimizer`` counts
its state, ``--recompute`` picks the algorithm.

``--group2ctx stage1=cpu:1,stage2=cpu:2`` also plans each device's part of
a net whose nodes carry ctx_group attributes (``Plan.devices``);
``--split N`` proposes a placement over N devices balancing the per-device
peak and reports the largest one against one device: layer-wise stages,
or the batch of the first layers split over the devices and the rest in
stages, whichever holds less (memory/split.py; ``--layer-wise``: stages
only); ``-o OUT.json`` writes the net with the proposed ctx_group
attributes (memory/devices.py).
"""
from __future__ import annotations

import argparse
import json
import os
from dataclasses import replace

from ..cli import UsageError, check_output_folder, load_net, parse_shapes
from .. import measures as measures_mod
from .budget import ALGORITHMS, OPTIMIZER_STATES, BudgetError, parse_budget
from .planner import PLACED

OPTIMIZERS = tuple(OPTIMIZER_STATES)


def add_arguments(parser) -> None:
    """The options of ``symgraph plan``."""
    parser.add_argument("net", metavar="NET.json", help="network as MXNet symbol JSON")
    parser.add_argument("--shape", action="append", metavar="NAME=DIMS", default=[],
                        help="input shape, e.g. data=64,3,224,224 (repeat for each input)")
    parser.add_argument("--train", action="store_true",
                        help="plan the training graph (forward + parameter gradients)")
    parser.add_argument("--strategy", default="arena", choices=PLACED,
                        help="the plan to report as the internal bucket (default: arena)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--no-xla", action="store_true",
                        help="do not compile the lowered program for XLA's figures")
    parser.add_argument("--measures", default="auto", metavar="LIST",
                        help="the memory measures of the program XLA's figures are for: "
                             "auto (default: the rule a Module uses), none, or names "
                             "separated by commas: " + ", ".join(measures_mod.MEASURES)
                             + " (docs/memory.md, 'Plan vs XLA')")
    parser.add_argument("--target", default="cpu", metavar="NAME|FILE",
                        help="the device XLA's figures are for: cpu (default), gpu (the one "
                             "present), a GPU description compiled without the GPU: "
                             "h100, a100, a100-40gb, l4, or a GpuTargetConfig text file "
                             "(needs pip install 'symgraph[gpu-plan]'); the report says "
                             "whether the program fits the device")
    parser.add_argument("--compute-dtype", default=None,
                        choices=("float32", "bfloat16", "float16"),
                        help="plan the net, and compile its program, as a Module with this "
                             "compute_dtype runs it: float inputs kept as they are and "
                             "cast down inside, the casts planned (default: the net's "
                             "own dtypes)")
    parser.add_argument("--breakdown", action="store_true",
                        help="also show what XLA's temp holds at its busiest step: the "
                             "largest buffers, their kind and role, the node that made them")
    parser.add_argument("--schedule", default="dfs", choices=("dfs", "memory"),
                        help="execution order planned for (default: dfs, MXNet's order)")
    parser.add_argument("--layout", choices=("NCHW", "NHWC"), default=None,
                        help="plan the net as it is (NCHW, default) or rewritten channels-last "
                             "between its convolutions, the transposes planned (NHWC: the "
                             "graph the channels_last measure runs)")
    parser.add_argument("--no-fuse", action="store_true", help="do not fuse elementwise chains")
    parser.add_argument("--match-range", type=int, default=16, metavar="N",
                        help="co-share match range (MXNet's NNVM_EXEC_MATCH_RANGE, default 16)")
    parser.add_argument("--head", action="append", metavar="NAME", default=None,
                        help="plan only for this output of the graph (e.g. an internal one, "
                             "relu5_output); repeatable")
    # the old spelling: a file in viz and zoo, so users try it here for the report
    parser.add_argument("--output", dest="old_output", action="append", default=None,
                        help=argparse.SUPPRESS)
    parser.add_argument("--budget", metavar="SIZE", default=None,
                        help="training: recompute forward tensors so the total fits SIZE "
                             "(bytes, or 6GiB, 512MiB, 6GB = 6e9 bytes) with the least extra "
                             "FLOPs, and XLA's program of the step too (planned again to "
                             "the excess it holds); exit 2 naming the smallest total "
                             "reachable, or the smallest program compiled, if nothing fits")
    parser.add_argument("--allow-over-budget", action="store_true",
                        help="with --budget: where no program holds the budget, report the "
                             "smallest instead of exit 2")
    parser.add_argument("--optimizer", default=None, choices=OPTIMIZERS,
                        help="training: count this optimizer's state in the total "
                             "(sgd none, momentum/nag 1x, adam 2x the parameters)")
    parser.add_argument("--recompute", default="auto",
                        choices=("auto", "none") + ALGORITHMS,
                        help="training: what to recompute in the backward: auto (solver "
                             "under --budget, else nothing), none, mirror (MXNet's: cheap "
                             "ops), sqrt (Chen's sqrt(n) checkpoints), solver (least extra "
                             "FLOPs)")
    parser.add_argument("--execute", action="store_true",
                        help="also run the arena interpreter on random inputs for every "
                             "strategy (slow at real sizes)")
    parser.add_argument("--group2ctx", metavar="GROUP=DEV,...", default=None,
                        help="also plan each device's part: ctx_group name -> device, "
                             "e.g. stage1=cpu:1,stage2=cpu:2 (the devices need not exist here)")
    parser.add_argument("--split", type=int, metavar="N", default=None,
                        help="propose a placement over N devices (training) that balances "
                             "the per-device peak; report the largest against one device")
    parser.add_argument("--layer-wise", action="store_true",
                        help="with --split: cut the net's layers into stages only, never "
                             "split the batch of its first layers over the devices")
    parser.add_argument("-o", dest="split_out", metavar="OUT.json", default=None,
                        help="with --split: write the net with the proposed ctx_group "
                             "attributes to OUT.json (a batch split: the rewritten net)")
    _add_output_options(parser)


PLOT_FORMATS = ("png", "svg", "pdf")


def _add_output_options(parser) -> None:
    """Extra outputs of a plan, produced by ``_write_outputs``."""
    parser.add_argument("--plot", metavar="OUT.png", default=None,
                        help="also draw the memory timeline (bytes in use per step under "
                             "every strategy, the lower bound, the peak) to OUT.png, "
                             ".svg or .pdf")


def _check_output_options(args) -> None:
    """Bad output paths fail before any planning is done."""
    if args.old_output:
        raise UsageError(f"plan: --output is now --head (--head {args.old_output[0]} plans "
                         f"only for that output of the graph); to keep the report in a "
                         f"file, redirect it: symgraph plan ... > report.txt")
    if args.plot is not None:
        ext = os.path.splitext(args.plot)[1].lower().lstrip(".")
        if ext not in PLOT_FORMATS:
            raise UsageError(f"plan: --plot {args.plot!r}: unknown picture format "
                             f"'{ext or '(no extension)'}'; use .png, .svg or .pdf")
        check_output_folder(args.plot)


def _write_outputs(plan, args) -> None:
    """Writes the extra outputs registered in ``_add_output_options``."""
    if args.plot is not None:
        from ..viz import plot_timeline
        plot_timeline(plan, args.plot)  # written atomically


def run(args) -> int:
    """``symgraph plan``: prints the report (or JSON); 0 on success."""
    if not args.shape:
        raise UsageError("plan: --shape is required, e.g. --shape data=64,3,224,224")
    shapes = parse_shapes(args.shape)
    if args.match_range < 0:
        raise UsageError(f"plan: --match-range must be >= 0, got {args.match_range}")
    _check_output_options(args)
    budget = _budget(args)
    measures = _measures(args)
    target = _target(args)
    group2ctx = _check_devices_options(args)
    net = load_net(args.net)
    if args.split is not None:
        return _run_split(net, shapes, args)
    from .pipeline import plan
    options = dict(strategy=args.strategy, outputs=args.head, fuse=not args.no_fuse,
                   schedule=args.schedule, match_range=args.match_range, execute=args.execute,
                   name=os.path.splitext(os.path.basename(args.net))[0],
                   optimizer=args.optimizer, recompute=args.recompute, layout=args.layout,
                   compute_dtype=args.compute_dtype)
    if not args.no_xla and budget is not None and measures == "auto":
        from .. import xla
        from ..util import busy
        # the program a Module under the budget runs: planned again to XLA's
        # excess; where no plan fits, the step without recompute is compiled
        with busy(f"XLA is fitting the budgeted training step to {target.device}"):
            p, figures, holds = xla.fit_budget(
                net, shapes, budget, target, allow_over_budget=args.allow_over_budget,
                opt_in="--allow-over-budget", **options)
        # the report compares with the budget asked; the plan's own budget is
        # lower where it was made again to the excess XLA's program held
        planned_to = p.budget
        p = replace(p, budget=budget, xla={
            **figures, "budget_holds": holds,
            **({"planned_to": planned_to} if planned_to not in (None, budget) else {})})
    else:
        p = plan(net, shapes, train=args.train, budget=budget, group2ctx=group2ctx, **options)
    if not args.no_xla and p.xla is None:
        from .. import xla
        from ..util import busy
        what = "training step" if args.train else "inference program"
        with busy(f"XLA is compiling the Module's {what} for {target.device}"):
            p = replace(p, xla=xla.plan_memory(p, measures, target))
    breakdown = None
    if args.breakdown:
        from .. import xla
        from ..util import busy
        with busy("XLA is compiling the program whose temp --breakdown reads"):
            breakdown = xla.memory_breakdown(xla.plan_step(p, measures, target), graph=p)
    if args.json:
        doc = p.to_json()
        if breakdown is not None:
            doc["xla_breakdown"] = breakdown.to_json(top=BREAKDOWN_ROWS)
        print(json.dumps(doc))
    else:
        print(p.report())
        if breakdown is not None:
            print()
            print(breakdown.table(top=BREAKDOWN_ROWS))
    _write_outputs(p, args)
    return 0


BREAKDOWN_ROWS = 15


def _check_devices_options(args):
    """--group2ctx parsed, --split and -o checked, before any planning."""
    if args.split_out is not None and args.split is None:
        raise UsageError("plan: -o writes the net --split proposes; add --split N")
    if args.layer_wise and args.split is None:
        raise UsageError("plan: --layer-wise chooses how --split cuts; add --split N")
    if args.split is not None:
        if args.split < 1:
            raise UsageError(f"plan: --split takes a number of devices >= 1, got {args.split}")
        if args.group2ctx is not None:
            raise UsageError("plan: --split proposes its own placement; drop --group2ctx")
        if not args.train:
            raise UsageError("plan: --split balances the training plan; add --train")
        if args.split_out is not None:
            check_output_folder(args.split_out)
    if args.group2ctx is None:
        return None
    from ..parallel.placement import parse_group2ctx_arg
    return parse_group2ctx_arg(args.group2ctx)


def _run_split(net, shapes, args) -> int:
    """``symgraph plan --split N``: the proposal, its per-device plans, -o."""
    from .split import split
    p, sp = split(net, shapes, args.split, outputs=args.head, strategy=args.strategy,
                  fuse=not args.no_fuse, schedule=args.schedule,
                  match_range=args.match_range, batch_split=not args.layer_wise,
                  name=os.path.splitext(os.path.basename(args.net))[0])
    if args.split_out is not None:
        from ..serialize import save
        save(sp.graph(), args.split_out)  # atomic
    if args.json:
        print(json.dumps({"net": p.net, "shapes": {k: list(v) for k, v in p.shapes.items()},
                          "split": sp.to_json(), "devices": sp.devices.to_json()}))
        return 0
    mib = 2 ** 20
    print(f"split of {p.net} (training) over {args.split} devices: "
          f"group2ctx {sp.group2ctx_text()}")
    print(f"  largest per-device peak {sp.devices.peak / mib:,.1f} MiB = {sp.ratio:.3f}x "
          f"one device ({sp.one_device / mib:,.1f} MiB); stages end after "
          f"{', '.join(sp.cut_after)} ({sp.evaluations} placements planned)")
    if sp.batch is not None:
        b = sp.batch
        print(f"  batch split: the first {b['ops']} ops ({b['first']} .. {b['last']}) run on "
              f"slices of the batch, {' + '.join(map(str, b['shares']))} of {b['batch']} "
              f"samples, one per device, joined on axis 0 after {b['last']}")
    print(sp.devices.text(p.strategy, sp.one_device))
    if args.split_out is not None:
        print(f"wrote {args.split_out} (ctx_group attributes: {', '.join(sp.group2ctx)})")
    return 0


def _budget(args):
    """``--budget`` in bytes (None without one), and the training-only
    options refused without ``--train``, before any planning."""
    if not args.train:
        for flag, given in (("--budget", args.budget is not None),
                            ("--optimizer", args.optimizer is not None),
                            ("--recompute", args.recompute not in ("auto", "none"))):
            if given:
                raise UsageError(f"plan: {flag} needs --train (an inference plan has no "
                                 f"backward to recompute in, no optimizer state)")
    if args.budget is None:
        return None
    try:
        return parse_budget(args.budget)
    except BudgetError as err:
        raise UsageError(f"plan: --budget: {err}") from None


def _target(args):
    """``--target`` checked before any planning: a Target."""
    from .. import targets
    if args.no_xla and args.target != "cpu":
        raise UsageError("plan: --target names the device XLA's figures are for; drop "
                         "--no-xla")
    try:
        return targets.get(args.target)
    except targets.TargetError as err:
        raise UsageError(f"plan: --target: {err}") from None


def _measures(args):
    """``--measures`` checked before any planning: 'auto', or a tuple."""
    if args.no_xla and (args.measures != "auto" or args.breakdown):
        raise UsageError("plan: --measures and --breakdown need XLA's figures; drop --no-xla")
    try:
        ms = measures_mod.parse(args.measures)
    except measures_mod.MeasureError as err:
        raise UsageError(f"plan: --measures: {err}") from None
    return "auto" if ms is None else ms
