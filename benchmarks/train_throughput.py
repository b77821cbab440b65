#!/usr/bin/env python3
"""Training throughput; the same as `symgraph bench train`.

    python benchmarks/train_throughput.py [--nets resnet,vgg] [--batch 32,64,128]
        [--devices 1,2,4,8] [--image 32] [--steps 3] [--rounds 5]
        [--out DIR] [--quick]

See symgraph/bench/train.py for what it measures.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from symgraph.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["bench", "train", *sys.argv[1:]]))
