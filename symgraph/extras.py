"""Which pip extra brings each optional third-party package.

``pip install symgraph`` brings what planning, ``viz``, ``max-batch`` and
training need (JAX, NumPy, graphviz, tqdm). The rest is imported where it
is used and comes with an extra of pyproject.toml, so a command that lacks
one can say which to install instead of failing on an import.
"""
from __future__ import annotations

# top-level module -> the extra of pyproject.toml that installs it
EXTRA_OF = {
    "cv2": "images",          # ImageRecordIter's resize
    "simplejpeg": "images",   # JPEG decode of record files
    "PIL": "images",          # PNG decode, im2rec's resize
    "matplotlib": "plots",    # benchmark charts, viz timelines
    "sklearn": "examples",    # the digits the examples train on
    "jax_cuda12_plugin": "gpu-plan",  # deviceless GPU compiles (--target h100)
}


def install_hint(module: str) -> str:
    """How to install ``module`` (its top-level name): the extra that brings
    it, or the package itself where no extra does."""
    top = module.split(".")[0]
    extra = EXTRA_OF.get(top)
    if extra is None:
        return f"pip install {top}"
    return f"pip install 'symgraph[{extra}]'"
