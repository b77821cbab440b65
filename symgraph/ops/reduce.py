"""Reductions (sum, mean, max) and softmax / log_softmax."""
