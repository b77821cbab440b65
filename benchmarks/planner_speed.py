#!/usr/bin/env python3
"""Planner speed; the same as `symgraph bench planner`.

    python benchmarks/planner_speed.py [--sizes 1000,10000,100000] [--repeat 3]
                                       [--out DIR] [--no-resnet] [--quick]

See symgraph/bench/planner.py for what it measures.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from symgraph.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["bench", "planner", *sys.argv[1:]]))
