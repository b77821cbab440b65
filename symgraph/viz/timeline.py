"""The memory timeline: bytes in use at each step of the schedule under
every strategy, the live tensors, the lower bound, the peak and the start
of the backward (``timeline``, ``plot_timeline``; ``symgraph plan --plot``).
"""
from __future__ import annotations

import os

from ..util import atomic_write_bytes
from .draw import VizError, _forward_mask
from .planview import format_bytes


# --------------------------------------------------------------------------
# the memory timeline
# --------------------------------------------------------------------------
TIMELINE_STRATEGIES = ("naive", "inplace", "coshare", "both", "arena")
_TIMELINE_COLORS = {"naive": "#7f7f7f", "inplace": "#1f77b4", "coshare": "#ff7f0e",
                    "both": "#2ca02c", "arena": "#9467bd", "lower_bound": "#d62728"}


def timeline(plan) -> dict:
    """The data of the timeline picture: ``{strategy: bytes in use at each
    step}`` for every strategy (slot strategies count the slots touched so
    far, allocated up front as MXNet does; the arena its highest live byte)
    and ``'live'``: the bytes live at each step less what inplace can save
    there, whose maximum is the lower bound."""
    data = {s: plan.footprint(s) for s in TIMELINE_STRATEGIES}
    data["live"] = list(plan.profile)
    return data


def _byte_unit(n: float):
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= scale:
            return unit, scale
    return "bytes", 1


def plot_timeline(plan, path=None, *, title: str | None = None):
    """Memory per step of ``plan``'s schedule: one line per strategy, the
    live bytes (shaded) with the lower bound as a dashed line, and the peak
    step marked. Returns the matplotlib Figure; with ``path`` (.png .svg
    .pdf) it is also written there, atomically.

    This is ``symgraph plan NET.json --shape ... --plot OUT.png``: the
    picture that answers "where does my memory go"."""
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fmt = None
    if path is not None:
        fmt = os.path.splitext(os.fspath(path))[1].lower().lstrip(".")
        if fmt not in ("png", "svg", "pdf"):
            raise VizError(f"cannot write {os.fspath(path)!r}: unknown picture format "
                           f"'{fmt or '(no extension)'}'; use .png, .svg or .pdf")
    data = timeline(plan)
    nsteps = len(data["live"])
    top = max([plan.lower_bound] + [max(v, default=0) for v in data.values()])
    unit, scale = _byte_unit(top)
    # steps are numbered from 1, as `symgraph plan` reports the peak ("step 2/25")
    steps = list(range(1, nsteps + 1))

    fig = Figure(figsize=(9, 4.8), dpi=100)
    FigureCanvasAgg(fig)  # no pyplot: nothing global changes in the caller
    ax = fig.add_subplot(1, 1, 1)
    ax.fill_between(steps, [b / scale for b in data["live"]], step="mid", alpha=0.18,
                    color=_TIMELINE_COLORS["lower_bound"], linewidth=0,
                    label="live tensors (less inplace savings)")
    for s in TIMELINE_STRATEGIES:
        total = plan.internal[s]
        ax.plot(steps, [b / scale for b in data[s]], drawstyle="steps-mid",
                color=_TIMELINE_COLORS[s], linewidth=1.6,
                label=f"{s}: {format_bytes(total)}")
    ax.axhline(plan.lower_bound / scale, color=_TIMELINE_COLORS["lower_bound"],
               linestyle="--", linewidth=1.2,
               label=f"lower bound: {format_bytes(plan.lower_bound)}")
    if plan.peak_step is not None:
        peak = plan.peak_step + 1
        ax.axvline(peak, color=_TIMELINE_COLORS["lower_bound"], linestyle=":", linewidth=1)
        ax.plot([peak], [plan.lower_bound / scale], marker="v", markersize=9,
                color=_TIMELINE_COLORS["lower_bound"], linestyle="none")
        name = plan.live.step_name(plan.peak_step)
        if len(name) > 40:
            name = name[:37] + "..."
        ax.annotate(f"peak: step {peak}/{nsteps} ({name})",
                    xy=(peak, plan.lower_bound / scale), xytext=(0, 10),
                    textcoords="offset points", fontsize=8,
                    ha="right" if peak > nsteps / 2 else "left",
                    color=_TIMELINE_COLORS["lower_bound"])
    if plan.train:
        forward = _forward_mask(plan.graph, plan.num_forward_outputs)
        first_bwd = next((s for s, members in enumerate(plan.steps)
                          if not forward[members[-1]]), None)
        if first_bwd is not None:
            ax.axvline(first_bwd + 0.5, color="#999999", linewidth=0.8)
            ax.text(first_bwd + 1, 0.02, " backward", transform=ax.get_xaxis_transform(),
                    fontsize=8, color="#666666")
    ax.set_xlim(0.5, max(nsteps + 0.5, 1.5))
    ax.set_ylim(0, top / scale * 1.12 if top else 1)
    ax.set_xlabel("step of the schedule")
    ax.set_ylabel(f"memory in use ({unit})")
    ax.set_title(title or f"{plan.net}: internal memory per step "
                          f"({'training' if plan.train else 'inference'})", fontsize=11)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", framealpha=0.9)
    fig.tight_layout()
    if path is not None:
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt)
        atomic_write_bytes(path, buf.getvalue())
    return fig
