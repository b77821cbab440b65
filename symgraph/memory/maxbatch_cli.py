"""The largest batch of a network that fits a memory budget.

    symgraph max-batch NET.json --shape data=1,3,224,224 --budget 16GiB [--train] [--target h100]
                       [--optimizer NAME] [--compute-dtype DTYPE] [--no-recompute]
                       [--no-xla] [--json]

The batch is set on the first axis of every input --shape gives (any batch
will do). The search plans the net at batches 1, 2, 4, ... until the plan's
total (arguments, gradients, aux, optimizer state, internal) no longer fits
the budget, then bisects -- nothing is run. In training the planner may
recompute forward tensors in the backward to fit (--no-recompute: plans as
they are). XLA's figure (temp + argument + output - alias) of the program a
Module would run, compiled, not run, then decides: from the plans' answer
the batch is stepped down while that figure is above the budget and
searched up while the next batch's program fits, so the batch printed is
the largest whose program fits and the next one's does not (--no-xla
skips the compiles: the plans' answer). With a GPU --target (h100, a100,
a100-40gb, l4, a description file, gpu) the program is compiled for that
device (deviceless for a description) and the budget defaults to the
device's memory JAX's allocator takes less a convolution workspace
allowance. --compute-dtype bfloat16 (or float16) plans and compiles each
batch as a Module with that compute_dtype runs it (float32 weights, the
step in the low dtype). In a terminal a progress bar
on stderr shows the search. --json prints {"batch": N, "total": bytes, "recompute": [...],
"xla": bytes or null, "budget": bytes, "plan_batch": N, "train": bool,
"notes": [...], "target": {...}}.
"""
from __future__ import annotations

import json

from ..cli import UsageError, load_net, parse_shapes

MIB = 2 ** 20


def add_arguments(parser) -> None:
    """The options of ``symgraph max-batch``."""
    parser.add_argument("net", metavar="NET.json", help="network as MXNet symbol JSON")
    parser.add_argument("--shape", action="append", metavar="NAME=DIMS", default=[],
                        help="input shape at any batch, e.g. data=1,3,224,224 (repeat for "
                             "each input); the batch is its first dimension")
    parser.add_argument("--budget", default=None, metavar="BYTES",
                        help="the memory budget: bytes, or a number with a unit (16GiB, "
                             "512MiB, 6GB = 6e9 bytes); required on the CPU, with a GPU "
                             "--target it defaults to the part of the device JAX's allocator "
                             "takes less a convolution workspace allowance")
    parser.add_argument("--target", default="cpu", metavar="NAME|FILE",
                        help="the device the batch must fit: cpu (default), gpu (the one "
                             "present), or a GPU description compiled without the GPU: h100, "
                             "a100, a100-40gb, l4, or a GpuTargetConfig text file")
    parser.add_argument("--train", action="store_true",
                        help="the training step (forward, backward, gradients); default: "
                             "inference")
    parser.add_argument("--optimizer", default=None, metavar="NAME",
                        help="count this optimizer's state too (sgd, momentum, adam, ...)")
    parser.add_argument("--compute-dtype", default=None,
                        choices=("float32", "bfloat16", "float16"),
                        help="plan and compile each batch as a Module with this "
                             "compute_dtype runs it: float32 weights cast down inside "
                             "(default: the net's own dtypes)")
    parser.add_argument("--no-recompute", action="store_true",
                        help="plan without recomputing forward tensors in the backward")
    parser.add_argument("--no-xla", action="store_true",
                        help="answer by the plans alone, compiling nothing")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args) -> int:
    """``symgraph max-batch``: prints the batch found (or JSON); 0 on success."""
    if not args.shape:
        raise UsageError("max-batch: --shape is required, e.g. --shape data=1,3,224,224")
    shapes = parse_shapes(args.shape)
    from .budget import parse_budget
    from .maxbatch import _optimizer, max_batch
    from .. import targets
    try:
        target = targets.get(args.target)
    except targets.TargetError as err:
        raise UsageError(f"max-batch: --target: {err}") from None
    if args.budget is None and target.pool is None:
        raise UsageError("max-batch: --budget is required (or a GPU --target, whose memory "
                         "is the default budget)")
    if args.no_xla and target.backend != "cpu":
        raise UsageError("max-batch: a GPU --target is answered by XLA's figure; drop --no-xla")
    # a malformed budget fails before the net is read
    budget = None if args.budget is None else parse_budget(args.budget)
    if args.optimizer is not None and not args.train:
        raise UsageError("max-batch: --optimizer needs --train (inference keeps no "
                         "optimizer state)")
    _optimizer(args.optimizer)
    net = load_net(args.net)
    r = max_batch(net, shapes, budget, train=args.train, optimizer=args.optimizer,
                  recompute=not args.no_recompute, xla=not args.no_xla, target=target,
                  compute_dtype=args.compute_dtype)
    if args.json:
        print(json.dumps(r.to_json()))
        return 0
    mode = "training" if r.train else "inference"
    if args.compute_dtype not in (None, "float32"):
        mode += f", computing in {args.compute_dtype}"
    print(f"max batch: {r.batch}  ({mode}, budget {r.budget:,} bytes = "
          f"{r.budget / MIB:,.1f} MiB; {r.plans} plans)")
    print(f"  target: {target.describe()}")
    if args.budget is None:
        print(f"  budget: the {target.pool / MIB:,.1f} MiB JAX's allocator takes of the "
              f"device, less {(target.pool - r.budget) / MIB:,.1f} MiB for a convolution "
              f"workspace")
    print(f"  plan total at batch {r.batch}: {r.total:,} bytes ({r.total / MIB:,.1f} MiB)")
    if r.recompute:
        saved = sum(int(x.get("bytes", 0)) for x in r.recompute)
        print(f"  recomputed: {len(r.recompute)} tensors, {saved / MIB:,.1f} MiB saved")
    if r.xla is not None:
        print(f"  XLA's figure at batch {r.batch}: {r.xla:,} bytes ({r.xla / MIB:,.1f} MiB), "
              f"compiled, not run")
    elif not args.no_xla:
        print("  XLA: no figures from this backend")
    for note in r.notes:
        print(f"  note: {note}")
    return 0
