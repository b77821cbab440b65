"""Plan colouring: what a memory plan tells the picture -- a distinct
colour per storage slot, the bytes each node allocates, the slots reused
(``PlanView``, ``plan_view``, ``node_allocations``).
"""
from __future__ import annotations

import colorsys
from dataclasses import dataclass, field


# --------------------------------------------------------------------------
# colours of storage slots: many, distinct, readable on white
# --------------------------------------------------------------------------
def distinct_colors(n: int) -> list[str]:
    """``n`` pairwise different colours as ``#rrggbb``; neighbours in the
    list differ in hue (golden-ratio steps), later rounds vary saturation
    and value so that no two colours ever coincide."""
    out: list[str] = []
    seen: set[str] = set()
    i = 0
    levels = [(0.85, 0.80), (0.55, 0.95), (0.95, 0.55), (0.40, 0.70), (0.70, 0.40)]
    while len(out) < n:
        h = (i * 0.6180339887498949) % 1.0
        s, v = levels[(i // 12) % len(levels)]
        r, g, b = colorsys.hsv_to_rgb(h, s, v)
        c = f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"
        if c not in seen:
            seen.add(c)
            out.append(c)
        i += 1
    return out


def format_bytes(n: int) -> str:
    """``1536`` -> ``1.5 KiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _lighten(color: str, amount: float = 0.55) -> str:
    r, g, b = (int(color[i:i + 2], 16) for i in (1, 3, 5))
    r, g, b = (round(c + (255 - c) * amount) for c in (r, g, b))
    return f"#{r:02x}{g:02x}{b:02x}"


# --------------------------------------------------------------------------
# what the plan tells the picture
# --------------------------------------------------------------------------
@dataclass
class PlanView:
    """The parts of a memory plan (``symgraph.memory.Plan``) a picture shows,
    for one strategy, keyed by the plan's graph.

    ``storage``: entry id -> storage slot (planned tensors only);
    ``slot_color``: slot -> colour, pairwise different; ``new_bytes``: node
    id -> bytes the plan's memory grows by at that node's step (these sum to
    the strategy's ``internal`` total); ``reused``: node id -> number of its
    outputs placed in storage that an earlier tensor used.
    """

    plan: object
    strategy: str
    storage: dict = field(default_factory=dict)
    slot_color: dict = field(default_factory=dict)
    new_bytes: dict = field(default_factory=dict)
    reused: dict = field(default_factory=dict)


def plan_view(plan, strategy: str | None = None) -> PlanView:
    """Storage slots, their colours and per-node allocations of ``plan``
    under ``strategy`` (default: the plan's own)."""
    strategy = strategy or plan.strategy
    a = plan.assignment(strategy)  # PlanError for lower_bound or an unknown name
    live = plan.live
    storage = plan.storage(strategy)
    # colours in order of first use, so neighbouring slots differ in hue
    order: dict = {}
    for t in range(live.num_tensors):
        order.setdefault(a.slot[t], len(order))
    colors = distinct_colors(len(order))
    slot_color = {slot: colors[k] for slot, k in order.items()}
    # the running maximum of the footprint: what each step adds to the plan
    new_bytes, reused = {}, {}
    high = 0
    touched = set()
    for s, fp in enumerate(plan.footprint(strategy)):
        root = plan.steps[s][-1]
        if fp > high:
            new_bytes[root] = new_bytes.get(root, 0) + fp - high
            high = fp
        for t in live.step_out[s]:
            if a.slot[t] in touched:
                reused[root] = reused.get(root, 0) + 1
            touched.add(a.slot[t])
    return PlanView(plan, strategy, storage, slot_color, new_bytes, reused)


def node_allocations(plan, strategy: str | None = None) -> dict:
    """``{node name: bytes}``: how much the plan's memory grows at each node
    (a fused group's root carries its group). The values sum to the
    strategy's ``internal`` bytes; these are the figures ``--plan`` shows."""
    pv = plan_view(plan, strategy)
    nodes = plan.graph.nodes
    return {nodes[i].name: b for i, b in pv.new_bytes.items()}
