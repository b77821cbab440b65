"""``sg.io``: MXNet's data iterators under one name.

The iterators over arrays (``NDArrayIter``, ``PrefetchingIter``,
``ResizeIter``, ``DataBatch``, ``DataDesc``, ``DataIter``) are
``symgraph.train.io``'s; ``ImageRecordIter`` is ``symgraph.train.image``'s,
loaded on first use (it brings the image libraries). Both modules sit below
this one, so neither imports the other in a circle.
"""
from __future__ import annotations

from .train import io as _io


def __getattr__(name):
    if name == "ImageRecordIter":
        from .train.image import ImageRecordIter
        return ImageRecordIter
    try:
        return getattr(_io, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__():
    return sorted({n for n in dir(_io) if not n.startswith("_")} | {"ImageRecordIter"})
