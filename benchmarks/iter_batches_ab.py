#!/usr/bin/env python3
"""Iterator throughput before and after a change to the iterators, in one
process, the two versions taking turns (a loaded machine slows both alike).

    python benchmarks/iter_batches_ab.py --before DIR [--images 300] [--rounds 5]
        [--out benchmarks/results/image_io]

``DIR`` holds the earlier ``io.py`` and ``image.py`` of ``symgraph/train``
(e.g. ``git show <commit>:symgraph/train/image.py > DIR/image.py``); the
working tree's are "after". Measures, per version:

- ``ImageRecordIter`` images/s over an epoch of ``bench io``'s records
  (full-size and short-side-256 JPEGs, random resized crop to 224,
  mirror, mean/std), 1 and 2 threads, batch 32; and the same epoch with
  each batch handed to ``Module.prepare_batch`` (what ``fit``'s prefetch
  thread does: the batch placed on the module's device);
- ``NDArrayIter`` microseconds per batch until its arrays are there:
  small rows (1000 x 10, batch 32) and image-like rows (5000 x 3x32x32,
  batch 128), alone and with ``prepare_batch``.

Each figure is the median over ``rounds`` alternations; the ratio is
after / before (above 1: faster after). Writes ``iter_batches_ab.json`` and
``iter_batches_ab.md`` under ``--out``.
"""
import argparse
import importlib.util
import json
import os
import platform
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402


def _load_before(folder: str, name: str):
    """``folder/name.py`` as a module of the package ``symgraph.train`` (its
    relative imports resolve there)."""
    spec = importlib.util.spec_from_file_location(f"symgraph.train._before_{name}",
                                                  os.path.join(folder, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    mod.__package__ = "symgraph.train"
    spec.loader.exec_module(mod)
    return mod


def _median(xs):
    return float(np.median(xs))


def image_rates(cls, path, threads, module=None):
    from symgraph.bench.io import BATCH, MEAN, STD
    it = cls(path, (3, 224, 224), BATCH, random_resized_crop=True, rand_mirror=True,
             shuffle=True, mean_r=MEAN[0], mean_g=MEAN[1], mean_b=MEAN[2], std_r=STD[0],
             std_g=STD[1], std_b=STD[2], preprocess_threads=threads, prefetch_buffer=4,
             round_batch=False)
    t = time.perf_counter()
    count = 0
    for b in it:
        _ready(module.prepare_batch(b) if module is not None else b)
        count += BATCH - b.pad
    rate = count / (time.perf_counter() - t)
    it.close()
    return rate


def _ready(batch):
    """Waits for the batch's arrays (a jax array is computed asynchronously)."""
    for a in [*batch.data, *(batch.label or [])]:
        a = a.data if hasattr(a, "asnumpy") else a
        if hasattr(a, "block_until_ready"):
            a.block_until_ready()


def ndarrayiter_us(cls, x, y, batch, module=None, epochs=3):
    """Microseconds per batch until the batch's arrays are there (placed on
    the module's device with ``module``)."""
    it = cls(x, y, batch_size=batch, shuffle=True, seed=0)
    for b in it:  # warm-up (compiles)
        if module is not None:
            module.prepare_batch(b)
    n, t = 0, time.perf_counter()
    for _ in range(epochs):
        it.reset()
        for b in it:
            _ready(module.prepare_batch(b) if module is not None else b)
            n += 1
    return (time.perf_counter() - t) / n * 1e6


def _module(shape, batch):
    import symgraph as sg
    net = sg.sym.SoftmaxOutput(sg.sym.FullyConnected(sg.sym.Flatten(sg.sym.Variable("data")),
                                                     num_hidden=10, name="fc"), name="softmax")
    mod = sg.mod.Module(net, context=sg.cpu(0))
    mod.bind([("data", (batch,) + tuple(shape))], [("softmax_label", (batch,))])
    mod.init_params(sg.init.Xavier(), seed=0)
    return mod


def write(res: dict, out: str) -> None:
    """Adds the medians and ratios to ``res`` and writes ``iter_batches_ab.json``
    and ``.md`` under ``out``. The ratio is the median over rounds of the
    speed after / before within a round (the two ran back to back, so a
    change in the machine's load mostly cancels); above 1: faster after."""
    for row in res["rows"]:
        b, a = (np.asarray(row["samples"][k], float) for k in ("before", "after"))
        per_s = row["measure"].endswith("images/s")
        row["before"], row["after"] = round(_median(b), 1), round(_median(a), 1)
        row["after_over_before_speed"] = round(_median(a / b if per_s else b / a), 3)
    with open(os.path.join(out, "iter_batches_ab.json"), "w") as f:
        f.write(json.dumps(res, indent=1) + "\n")
    lines = ["# Iterator throughput: NumPy batches (before) and NDArray batches (after)", "",
             f"`python benchmarks/iter_batches_ab.py {res['argv']}` on {res['machine']}, "
             f"{res['date']} UTC; load average before {res['load_average_before'][0]:.2f}, "
             f"after {res['load_average_after'][0]:.2f}. Medians of {res['rounds']} rounds, "
             "the two versions taking turns in one process; the last column is the median "
             "over rounds of the speed ratio within a round.", "",
             "| measure | before | after | speed after / before |", "|---|---:|---:|---:|"]
    for row in res["rows"]:
        lines.append(f"| {row['measure']} | {row['before']:,} | {row['after']:,} | "
                     f"{row['after_over_before_speed']:.2f} |")
    with open(os.path.join(out, "iter_batches_ab.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="folder with the earlier io.py, image.py")
    ap.add_argument("--images", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=os.path.join("bench-results", "io"))
    args = ap.parse_args(argv)

    from symgraph.bench.io import make_records
    from symgraph.train import image as image_after
    from symgraph.train import io as io_after
    io_before = _load_before(args.before, "io")
    image_before = _load_before(args.before, "image")
    versions = {"before": (io_before.NDArrayIter, image_before.ImageRecordIter),
                "after": (io_after.NDArrayIter, image_after.ImageRecordIter)}
    res = {"argv": " ".join(sys.argv[1:] if argv is None else argv),
           "machine": f"{platform.machine()}, {os.cpu_count()} cores",
           "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
           "load_average_before": os.getloadavg(), "rounds": args.rounds, "rows": []}
    samples = {}

    def add(key, version, value):
        samples.setdefault(key, {"before": [], "after": []})[version].append(value)

    with tempfile.TemporaryDirectory() as tmp:
        paths = make_records(tmp, args.images)
        mod224 = _module((3, 224, 224), 32)
        for kind, path in paths.items():  # warm the page cache
            image_rates(versions["after"][1], path, 2)
        rng = np.random.default_rng(0)
        small = (rng.normal(size=(1000, 10)).astype(np.float32),
                 rng.integers(0, 10, 1000).astype(np.float32))
        big = (rng.normal(size=(5000, 3, 32, 32)).astype(np.float32),
               rng.integers(0, 10, 5000).astype(np.float32))
        mod_small, mod_big = _module((10,), 32), _module((3, 32, 32), 128)
        for r in range(args.rounds):
            order = ("before", "after") if r % 2 == 0 else ("after", "before")
            for v in order:
                nd_cls, img_cls = versions[v]
                for kind, path in paths.items():
                    for threads in (1, 2):
                        add(f"ImageRecordIter {kind}, {threads} thread(s), images/s", v,
                            image_rates(img_cls, path, threads))
                    add(f"ImageRecordIter {kind}, 2 threads + prepare_batch, images/s", v,
                        image_rates(img_cls, path, 2, mod224))
                add("NDArrayIter 1000x10, batch 32, us/batch", v,
                    ndarrayiter_us(nd_cls, *small, 32, epochs=30))
                add("NDArrayIter 1000x10, batch 32 + prepare_batch, us/batch", v,
                    ndarrayiter_us(nd_cls, *small, 32, mod_small, epochs=30))
                add("NDArrayIter 5000x3x32x32, batch 128, us/batch", v,
                    ndarrayiter_us(nd_cls, *big, 128))
                add("NDArrayIter 5000x3x32x32, batch 128 + prepare_batch, us/batch", v,
                    ndarrayiter_us(nd_cls, *big, 128, mod_big))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    res["rows"] = [{"measure": key, "samples": {k: [round(x, 1) for x in v]
                                                for k, v in s.items()}}
                   for key, s in samples.items()]
    res["load_average_after"] = os.getloadavg()
    os.makedirs(args.out, exist_ok=True)
    write(res, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
