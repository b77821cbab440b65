"""Neural-network layers: FullyConnected, Convolution, Deconvolution, Pooling,
BatchNorm, Dropout, LRN, LeakyReLU, Embedding -- one module per layer
family: ``dense.py`` (FullyConnected, Embedding), ``conv.py``
(Convolution, Deconvolution and the window geometry Pooling shares),
``pool.py``, ``norm.py`` (BatchNorm, LRN), ``activation.py`` (LeakyReLU
family, Dropout). Importing this module registers them all.

Names, attributes and defaults follow MXNet 1.x. Layout is channel-first
(NCW/NCHW/NCDHW, MXNet's default); the kernel's length picks 1-D/2-D/3-D.
Each layer infers its parameter shapes from the data shape, so
``infer_shape(data=...)`` yields every weight. Every backward reads only
what its math needs (listed beside each rule); notably max pooling's
backward compares the input against the output instead of keeping argmax
indices, and BatchNorm's reads the saved mean and inverse std.
"""
from __future__ import annotations

# registration order: each family after those it imports from
from . import dense, conv, pool, norm, activation  # noqa: F401
# read as ops.nn.* by the layout pass and memory.predict
from .conv import CHANNELS_LAST, is_channels_last  # noqa: F401
from .pool import _pool_geometry  # noqa: F401
