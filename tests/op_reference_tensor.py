"""References for shape ops, broadcasting, reductions and softmax."""
import numpy as np

REFERENCE_TENSOR = {}
