"""What every benchmark shares: where results go by default and the error
a benchmark that cannot run raises. Kept apart from the ``symgraph bench``
command (``bench/__init__.py``), which imports the benchmarks."""
from __future__ import annotations

import json
import os

from ..errors import SymgraphError

RESULTS_ROOT = "bench-results"

# dense peak FLOP/s by device kind (NVIDIA's datasheets; float32 as TF32),
# for MFU: a step's FLOPs over its time over this
PEAK_FLOPS = {"H100": {"bfloat16": 989e12, "float32": 494e12},
              "H200": {"bfloat16": 989e12, "float32": 494e12},
              "A100": {"bfloat16": 312e12, "float32": 156e12}}


def peak_flops(device_kind: str, dtype: str) -> float | None:
    """The dense peak of a device whose kind names one of PEAK_FLOPS' GPUs."""
    return next((v for k, v in PEAK_FLOPS.items() if k in device_kind), {}).get(dtype)


class BenchError(SymgraphError):
    """A benchmark that cannot run here."""


def cpu_model() -> str | None:
    """The CPU's model name (Linux's /proc/cpuinfo), None where unknown."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                        None)
    except OSError:
        return None


def smoke_note(what: str) -> str:
    """The line a ``--quick`` run prints, and puts in its table and chart:
    it checks that the benchmark runs, at sizes where ``what`` (its
    figures) say nothing about a real run."""
    return (f"SMOKE RUN (--quick): checks that the benchmark runs end to end; at these toy "
            f"sizes {what} mean nothing -- run without --quick for real figures")


def default_out(name: str, quick: bool = False) -> str:
    """Where a benchmark writes without ``--out``: ``bench-results/NAME``
    (``NAME-quick``) under the current folder -- never the committed
    results, which only an explicit ``--out`` replaces."""
    return os.path.join(RESULTS_ROOT, f"{name}-quick" if quick else name)


def write_results(out: str, res: dict, markdown: str) -> None:
    """``results.json`` (``res``) and ``results.md`` (``markdown``) under
    ``out``, made if missing, each written atomically."""
    from ..util import atomic_write_text
    os.makedirs(out, exist_ok=True)
    atomic_write_text(os.path.join(out, "results.json"), json.dumps(res, indent=1))
    atomic_write_text(os.path.join(out, "results.md"), markdown)
