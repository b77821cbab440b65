"""References for symgraph/ops/nn.py (convolution, pooling, normalization ...)."""
import numpy as np

REFERENCE_NN = {}
LOSS_GRAD_NN = {}
