"""``split(net, shapes, n)``: the one-device training plan of a net and
the split of it over ``n`` devices that ``memory.devices.propose_split``
proposes (``symgraph plan --split N``). Apart from memory/devices.py so
that devices never imports the pipeline that plans with it."""
from __future__ import annotations

from ..passes.prune import prune
from .devices import propose_split
from .pipeline import as_graph, build_graph, plan as plan_fn


def split(net, shapes: dict, n: int, *, outputs=None, wrt=None, data_names=None,
          label_names=None, device_type: str = "cpu", **plan_kwargs) -> tuple:
    """(one-device training Plan, Split): ``propose_split`` for ``net``
    (a Symbol or Graph) at input ``shapes``; ``plan_kwargs`` go to
    ``plan`` (strategy, fuse, schedule, ...)."""
    p = plan_fn(net, shapes, train=True, outputs=outputs, wrt=wrt, data_names=data_names,
                label_names=label_names, **plan_kwargs)
    origin: dict = {}
    build_graph(net, p.shapes, True, None, outputs, wrt, data_names, label_names, origin)
    fwd = as_graph(net)
    if outputs is not None:
        fwd = prune(fwd, outputs)
    return p, propose_split(p, fwd, n, origin, device_type)
