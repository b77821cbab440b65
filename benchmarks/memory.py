#!/usr/bin/env python3
"""The memory benchmark; the same as `symgraph bench memory`.

    python benchmarks/memory.py [--nets vgg16,inception-bn] [--batch 32,64,128]
                                [--out benchmarks/results/memory] [--quick]

See symgraph/bench/memory.py for what it measures.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from symgraph.bench.memory import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
