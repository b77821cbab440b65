#!/usr/bin/env python3
"""Image pipeline speed; the same as `symgraph bench io`.

    python benchmarks/image_io.py [--images 300] [--threads 1,2]
        [--mxnet-python MXVENV/bin/python] [--out DIR] [--quick]

See symgraph/bench/io.py for what it measures.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from symgraph.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["bench", "io", *sys.argv[1:]]))
