"""``sg.io``: MXNet's data iterators under one name.

The iterators over arrays (``NDArrayIter``, ``PrefetchingIter``,
``ResizeIter``, ``DataBatch``, ``DataDesc``, ``DataIter``) are
``symgraph.train.io``'s; ``ImageRecordIter`` is ``symgraph.train.image``'s
and ``ImageDetRecordIter`` ``symgraph.train.detection_io``'s, each loaded on
first use (they bring the image libraries). These modules sit below
this one, so none imports another in a circle.
"""
from __future__ import annotations

from .train import io as _io


def __getattr__(name):
    if name == "ImageRecordIter":
        from .train.image import ImageRecordIter
        return ImageRecordIter
    if name == "ImageDetRecordIter":
        from .train.detection_io import ImageDetRecordIter
        return ImageDetRecordIter
    try:
        return getattr(_io, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__():
    return sorted({n for n in dir(_io) if not n.startswith("_")}
                  | {"ImageRecordIter", "ImageDetRecordIter"})
