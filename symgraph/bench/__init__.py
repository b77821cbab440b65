"""Run the benchmarks: memory plans, planner speed, training throughput,
the image pipeline, recompute to a budget, the fast CIFAR-10 recipe.

    symgraph bench memory [--nets vgg16,inception-bn] [--batch 32,64,128]
                          [--out DIR] [--quick]
    symgraph bench planner [ARGS ...]   (symgraph/bench/planner.py)
    symgraph bench train [ARGS ...]     (symgraph/bench/train.py)
    symgraph bench io [ARGS ...]        (symgraph/bench/io.py)
    symgraph bench recompute [ARGS ...] (symgraph/bench/recompute.py)
    symgraph bench cifar [ARGS ...]     (symgraph/bench/cifar.py)

Each writes JSON, a markdown table (and PNG charts) under a results
folder: ``--out``, or ``./bench-results/NAME`` under the current folder
(``NAME-quick`` with ``--quick``). Only an explicit ``--out`` writes into a
checkout's committed ``benchmarks/results/``, so a smoke test or a partial
run never replaces a full one. The benchmarks live in the package, so an
installed symgraph runs them from any folder; ``benchmarks/*.py`` in a
checkout are thin wrappers of the same code. All but ``memory`` parse
their own arguments (they pass through unchanged).
"""
from __future__ import annotations

import argparse
import importlib

# bench name -> (module of this package with main(argv), one-line help)
SCRIPTS = {"planner": ("planner", "time sg.plan on random DAGs, chains and ResNet-152"),
           "train": ("train", "symgraph's training step beside a hand-written JAX step"),
           "io": ("io", "images/s of ImageRecordIter beside Pillow and MXNet; data wait in "
                        "training"),
           "recompute": ("recompute", "memory against step time under budgets, per recompute "
                                      "algorithm, beside jax.checkpoint and MXNet's mirror"),
           "cifar": ("cifar", "the fast CIFAR-10 recipe's epoch beside plain JAX; data path "
                              "share; the step's memory")}


def add_arguments(parser) -> None:
    from . import memory
    subs = parser.add_subparsers(dest="bench", metavar="BENCH")
    m = subs.add_parser("memory", help="memory plans of the zoo nets beside XLA and MXNet",
                        description=memory.__doc__.strip().split("\n\n")[0])
    memory.add_arguments(m)
    for name, (_module, text) in SCRIPTS.items():
        s = subs.add_parser(name, help=f"{text} (--help lists the options)", add_help=False)
        # argparse's REMAINDER still rejects a leading option (`--steps 3`),
        # so this parser takes every remaining word as the script's argv
        s.__class__ = type("PassThroughParser", (type(s),), {"parse_known_args": _pass_through})


def _pass_through(self, args=None, namespace=None):
    namespace = namespace if namespace is not None else argparse.Namespace()
    namespace.args = list(args or [])
    return namespace, []


def run(args) -> int:
    if args.bench == "memory":
        from . import memory
        return memory.run(args)
    if args.bench in SCRIPTS:
        return script_main(SCRIPTS[args.bench][0])(list(args.args))
    from ..cli import UsageError
    raise UsageError("symgraph bench: choose memory, planner, train, io, recompute or cifar")


def script_main(name: str):
    """``main(argv)`` of the benchmark module ``name`` of this package."""
    return importlib.import_module(f"{__name__}.{name}").main
