"""Run the benchmarks: memory plans, planner speed, training throughput.

    symgraph bench memory [--nets vgg16,inception-bn] [--batch 32,64,128]
                          [--out DIR] [--quick]
    symgraph bench planner [ARGS ...]   (benchmarks/planner_speed.py)
    symgraph bench train [ARGS ...]     (benchmarks/train_throughput.py)

Each writes JSON, a markdown table and PNG charts under a results folder.
The planner and training benchmarks are scripts in the repository's
``benchmarks/`` folder; their arguments pass through unchanged.
"""
from __future__ import annotations

import argparse
import importlib.util
import os

from ..errors import SymgraphError

# bench name -> script in the repository's benchmarks/ folder
SCRIPTS = {"planner": "planner_speed.py", "train": "train_throughput.py"}


class BenchError(SymgraphError):
    """A benchmark that cannot run here."""


def add_arguments(parser) -> None:
    from . import memory
    subs = parser.add_subparsers(dest="bench", metavar="BENCH")
    m = subs.add_parser("memory", help="memory plans of the zoo nets beside XLA and MXNet",
                        description=memory.__doc__.strip().split("\n\n")[0])
    memory.add_arguments(m)
    for name, script in SCRIPTS.items():
        s = subs.add_parser(name, help=f"benchmarks/{script} (arguments pass through)",
                            add_help=False)
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
        return script_main(SCRIPTS[args.bench])(list(args.args))
    from ..cli import UsageError
    raise UsageError("symgraph bench: choose memory, planner or train")


def script_main(script: str):
    """``main(argv)`` of a script in the repository's benchmarks/ folder."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "benchmarks", script)
    if not os.path.exists(path):
        raise BenchError(f"benchmarks/{script} is not in this checkout; run "
                         f"`symgraph bench` from a source checkout of symgraph")
    spec = importlib.util.spec_from_file_location(f"_symgraph_bench_{script[:-3]}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "main"):
        raise BenchError(f"benchmarks/{script} has no main(argv)")
    return module.main
