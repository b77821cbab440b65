"""``split(net, shapes, n)``: the one-device training plan of a net and
the split of it over ``n`` devices with the smallest largest per-device
total this search finds (``symgraph plan --split N``). Apart from
memory/devices.py so that devices never imports the pipeline that plans
with it.

Two kinds of split are searched, and the one with the smaller peak kept:

- layer-wise (``memory.devices.propose_split``): the forward ops'
  topological order cut into n contiguous stages, each cut moved by
  bisection;
- batch split (Krizhevsky's "one weird trick", which is what Mariana does
  for its activation-heavy layers): the first k ops run on n slices of the
  batch, slice d on device d (``passes/batch_split.py``: every copy reads
  the same weights, the slices are joined on axis 0 where the prefix
  ends), the rest of the net cut layer-wise over the devices. A layer-wise
  cut cannot balance a net whose first layers alone hold much of the peak
  (VGG-16's first two convolutions at 224x224x64: their backward needs 2.4
  of its 4.8 GiB at batch 64); a slice of the batch can. The prefix ends
  where the tensor joined is smallest so far (after each pooling, in a
  CNN), up to the first op that couples samples (BatchNorm in training,
  Dropout, the loss: ``OpDef.per_sample``); for each such k the shares
  (uneven: the device that also holds the large fully-connected weights
  takes fewer samples) and the cuts of the rest are balanced by
  bisection, each device's total planned (not estimated) every time.
"""
from __future__ import annotations

from ..context import Context
from ..passes.batch_split import batch_prefix, split_batch
from ..passes.infer import infer_shapes
from ..passes.place import with_groups
from ..passes.prune import prune
from .devices import Split, _replace_graph, plan_devices, propose_split
from .liveness import entry_nbytes
from .pipeline import as_graph, build_graph, default_wrt, plan as plan_fn


def split(net, shapes: dict, n: int, *, outputs=None, wrt=None, data_names=None,
          label_names=None, device_type: str = "cpu", batch_split: bool = True,
          **plan_kwargs) -> tuple:
    """(one-device training Plan, Split): the better of ``propose_split``
    (layer-wise) and, with ``batch_split``, the batch split search for
    ``net`` (a Symbol or Graph) at input ``shapes``; ``plan_kwargs`` go to
    ``plan`` (strategy, fuse, schedule, ...)."""
    p = plan_fn(net, shapes, train=True, outputs=outputs, wrt=wrt, data_names=data_names,
                label_names=label_names, **plan_kwargs)
    origin: dict = {}
    build_graph(net, p.shapes, True, None, outputs, wrt, data_names, label_names, origin)
    fwd = as_graph(net)
    if outputs is not None:
        fwd = prune(fwd, outputs)
    best = propose_split(p, fwd, n, origin, device_type)
    if batch_split and n > 1:
        if wrt is None:
            wrt = default_wrt(fwd, data_names, label_names)
        found = _search_batch_split(p, fwd, n, wrt, device_type, plan_kwargs,
                                    best.evaluations)
        if found is not None and found.devices.peak < best.devices.peak:
            best = found
        elif found is not None:
            best.evaluations = found.evaluations
    return p, best


def _stage_groups(bs, forward, k: int, cuts: list, names: list) -> dict:
    """node name -> stage of the batch-split forward graph ``bs.graph``:
    slice d's copies on stage d, the slices of the data where the data
    lives (stage 1), the ops of the rest cut at ``cuts`` (indices in the
    original forward order), a join with its first reader, every variable
    with its first reader."""
    ops = [x.name for x in forward.nodes if x.op is not None]
    bounds = [k, *cuts, len(ops)]
    grp = {}
    for i in range(len(bounds) - 1):
        for name in ops[bounds[i]:bounds[i + 1]]:
            grp[name] = names[i]
    for name, d in bs.part.items():
        grp[name] = names[d]
    for name in bs.slices + bs.shared:
        grp[name] = names[0]
    g = bs.graph
    concats = set(bs.concats)
    for x in g.nodes:  # each join goes where its first reader runs
        for e in x.inputs:
            if e.node.name in concats and e.node.name not in grp and x.name in grp:
                grp[e.node.name] = grp[x.name]
    for name in concats:
        grp.setdefault(name, names[-1])
    for x in g.nodes:
        if x.op is None:
            continue
        for e in x.inputs:
            if e.node.op is None and e.node.name not in grp:
                grp[e.node.name] = grp[x.name]
    return grp


def _prefix_ends(forward, k_max: int, batch_inputs, shapes: dict) -> list:
    """The prefix lengths worth trying: k in 1..k_max where the batch
    tensors that cross from the prefix to the rest (what the joins hold)
    are smaller than at every shorter prefix."""
    args = set(forward.list_arguments())
    inf = infer_shapes(forward, {a: v for a, v in shapes.items() if a in args})
    ops = [x for x in forward.nodes if x.op is not None]
    pos = {id(x): i for i, x in enumerate(ops)}
    last = {}  # entry id -> op count after its last reader (outputs: all ops)
    for x in ops:
        for e in x.inputs:
            last[forward.entry_id(e)] = pos[id(x)] + 1
    for e in forward.outputs:
        last[forward.entry_id(e)] = len(ops) + 1
    batch = {forward.entry_id_of_node(x) for x in forward.variables if x.name in batch_inputs}
    made = []  # batch entries of prefix ops
    out, best = [], None
    for k in range(1, k_max + 1):
        x = ops[k - 1]
        if any(forward.entry_id(e) in batch for e in x.inputs):
            first = forward.entry_id_of_node(x)
            for j in range(x.num_outputs):
                batch.add(first + j)
                made.append(first + j)
        crossing = sum(entry_nbytes(inf, e) for e in made if last.get(e, 0) > k)
        if best is None or crossing < best:
            best = crossing
            out.append(k)
    return out


def _bisect(bounds: list, i: int, lo: int, hi: int, totals) -> int:
    """The value of ``bounds[i]`` in lo..hi with the smallest largest total,
    where device i's total grows with it and device i+1's shrinks: the
    smallest value where i holds at least i+1, or the one before it."""
    def at(c):
        return totals(bounds[:i] + [c] + bounds[i + 1:])
    a, b = lo, hi
    while a < b:
        c = (a + b) // 2
        t = at(c)
        if t[i] >= t[i + 1]:
            b = c
        else:
            a = c + 1
    return min((c for c in (a - 1, a) if lo <= c <= hi), key=lambda c: (max(at(c)), c))


def _search_batch_split(plan, forward, n: int, wrt, device_type: str, plan_kwargs: dict,
                        evaluations: int) -> Split | None:
    """The best batch split of ``forward`` over ``n`` devices (module
    docstring), or None where the net allows none."""
    wrt = list(wrt)
    batch_inputs = [a for a in forward.list_arguments() if a not in set(wrt)]
    k_max, _ = batch_prefix(forward, batch_inputs, plan.shapes)
    sizes = {tuple(plan.shapes[a])[:1] for a in batch_inputs if a in plan.shapes}
    if not k_max or len(sizes) != 1 or not next(iter(sizes)) or next(iter(sizes))[0] < n:
        return None
    batch = next(iter(sizes))[0]
    ops = [x.name for x in forward.nodes if x.op is not None]
    names = [f"stage{i + 1}" for i in range(n)]
    g2c = {name: Context(device_type, i) for i, name in enumerate(names)}
    kw = {k: v for k, v in plan_kwargs.items() if k != "verify"}
    plans: dict = {}
    cache: dict = {}

    def planned(k, shares, verify=False):
        key = (k, tuple(shares), verify)
        if key not in plans:
            bs = split_batch(forward, k, shares, batch_inputs, plan.shapes)
            origin: dict = {}
            bp = plan_fn(bs.graph, plan.shapes, train=True, wrt=wrt, verify=verify, **kw)
            build_graph(bs.graph, bp.shapes, True, None, None, wrt, None, None, origin)
            plans[key] = (bs, bp, origin)
        return plans[key]

    def place(k, cum, cuts, verify=False):
        shares = [b - a for a, b in zip([0, *cum], [*cum, batch])]
        bs, bp, origin = planned(k, shares, verify)
        grp = _stage_groups(bs, forward, k, cuts, names)
        g = with_groups(bp.graph, {x.name: grp.get(x.name) for x in bp.graph.nodes})
        return bs, grp, plan_devices(_replace_graph(bp, g), g2c, origin, verify=verify)

    def evaluate(k, cum, cuts):
        key = (k, tuple(cum), tuple(cuts))
        if key not in cache:
            totals = {d.device: d.total for d in place(k, cum, cuts)[2].plans}
            cache[key] = [totals.get(str(g2c[nm]), 0) for nm in names]
        return cache[key]

    best = None
    for k in _prefix_ends(forward, k_max, set(batch_inputs), plan.shapes):
        cum = [round(batch * (i + 1) / n) for i in range(n - 1)]
        cuts = [k] * (n - 1)  # the rest on the last device to start with
        for _ in range(3):
            before = (list(cum), list(cuts))
            for i in range(n - 1):
                lo = cum[i - 1] + 1 if i else 1
                hi = cum[i + 1] - 1 if i + 1 < n - 1 else batch - 1
                cum[i] = _bisect(cum, i, lo, hi, lambda c: evaluate(k, c, cuts))
            for i in range(n - 1):
                lo = cuts[i - 1] if i else k
                hi = cuts[i + 1] if i + 1 < n - 1 else len(ops)
                cuts[i] = _bisect(cuts, i, lo, hi, lambda c: evaluate(k, cum, c))
            if (cum, cuts) == before:
                break
        peak = max(evaluate(k, cum, cuts))
        if best is None or peak < best[0]:
            best = (peak, k, list(cum), list(cuts))
    if best is None:
        return None
    _, k, cum, cuts = best
    bs, grp, devs = place(k, cum, cuts, verify=True)
    shares = [b - a for a, b in zip([0, *cum], [*cum, batch])]
    info = {"ops": k, "first": ops[0], "last": ops[k - 1], "shares": shares,
            "batch": batch}
    return Split(list(cuts), grp, g2c, devs, plan.total, evaluations + len(cache),
                 bs.graph, batch=info, cut_names=[ops[c - 1] for c in cuts])


__all__ = ["split"]
