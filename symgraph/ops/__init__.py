"""The op registry and every op family. Importing this registers all ops."""
from . import elementwise, tensor, dot, reduce, nn, loss  # noqa: F401  (registration)
from . import glue, arrange, constants  # noqa: F401  (registration)
from . import normalize, resample, spatial  # noqa: F401  (registration)
from . import losses  # noqa: F401  (registration)
from . import mathops, indexing, ordering, sequence, sampling  # noqa: F401  (registration)
from . import detection  # noqa: F401  (registration)
from . import rnn, rnn_backward  # noqa: F401  (registration)
from . import attention, slicing, boxes  # noqa: F401  (registration)
from .registry import OpDef, Sample, all_opdefs, get_op, list_ops, register

__all__ = ["OpDef", "Sample", "all_opdefs", "get_op", "list_ops", "register"]
