#!/usr/bin/env python3
"""The fast CIFAR-10 recipe beside plain JAX; the same as `symgraph bench cifar`.

    python benchmarks/cifar_fast.py [--batch 512] [--images N] [--rounds 3]
        [--dtype bfloat16] [--memory-batch 512] [--budget 16GiB] [--out DIR] [--quick]

See symgraph/bench/cifar.py for what it measures and
symgraph/bench/handwritten_cifar.py for the plain-JAX recipe.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from symgraph.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["bench", "cifar", *sys.argv[1:]]))
