"""Image pipeline speed: images/s of ``sg.io.ImageRecordIter`` and how long
a training step waits for its batch.

    symgraph bench io [--images 300] [--threads 1,2] [--mxnet-python PY]
                      [--train-batches 24] [--no-train] [--out DIR] [--quick]

Packs its own records: synthetic 500x375 JPEGs (quality 90, smooth
gradients plus noise, about the size of ImageNet photos) and the same
images resized to a 256-pixel short side. Times decode + random resized
crop to 224x224 + mirror + mean/std per thread count (1 to the machine's
cores), beside a plain one-thread Pillow loop and, with
``--mxnet-python`` (an interpreter with mxnet 1.9.1 installed, never a
symgraph dependency), MXNet's ImageRecordIter on the same file with the
same threads and augmentation, in the same run.

The training run fits a small CNN (three conv-BN-ReLU-pool blocks) on
112x112 random resized crops of the full-size records, the way
``Module.fit`` runs: a prefetching thread prepares the next batches and
copies them to the device while the step computes. Each step is waited
for before the next batch is asked for, so the time spent in ``next()`` is
the time the step waited for data and nothing else.

Writes ``results.json`` and ``results.md`` atomically under ``--out``, by
default ``./bench-results/io`` (``io-quick`` with ``--quick``) under the
current folder; the committed run is ``benchmarks/results/image_io``.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

from .common import default_out, smoke_note

SMOKE_WHAT = "the images/s and the data-wait share"

MEAN = (123.68, 116.78, 103.94)
STD = (58.4, 57.1, 57.4)
BATCH = 32

MXNET_SCRIPT = r"""
import json, sys, time
import mxnet as mx
rec, threads = sys.argv[1], int(sys.argv[2])
it = mx.io.ImageRecordIter(path_imgrec=rec, data_shape=(3, 224, 224), batch_size=32,
    random_resized_crop=True, min_random_area=0.08, rand_mirror=True,
    mean_r=123.68, mean_g=116.78, mean_b=103.94, std_r=58.4, std_g=57.1, std_b=57.4,
    preprocess_threads=threads, prefetch_buffer=4, round_batch=False)
for b in it: b.data[0].wait_to_read()   # warm-up epoch
it.reset(); t = time.perf_counter(); count = 0
for b in it:
    b.data[0].wait_to_read(); count += 32 - b.pad
print(json.dumps({"images_per_s": count / (time.perf_counter() - t)}))
"""


def parse_args(argv):
    from ..cli import _Parser
    p = _Parser(prog="symgraph bench io", description=__doc__.strip().split("\n\n")[0])
    p.add_argument("--images", type=int, help="images packed per record file (default 300)")
    p.add_argument("--threads", help="thread counts, e.g. 1,2 (default 1 to the cores)")
    p.add_argument("--mxnet-python", help="an interpreter with mxnet 1.9.1, for its "
                   "ImageRecordIter beside symgraph's")
    p.add_argument("--train-batches", type=int,
                   help="batches of the training run (default 24)")
    p.add_argument("--no-train", action="store_true", help="skip the training run")
    p.add_argument("--out", help="results folder (default ./bench-results/io, with --quick "
                   "./bench-results/io-quick, under the current folder)")
    p.add_argument("--quick", action="store_true",
                   help="a smoke test: 64 images, one thread count (so no scaling), 4 "
                        "training batches; its figures mean nothing")
    args = p.parse_args(argv)
    cores = os.cpu_count() or 1
    if args.images is None:
        args.images = 64 if args.quick else 300
    if args.train_batches is None:
        args.train_batches = 4 if args.quick else 24
    try:
        args.threads = ([int(t) for t in args.threads.split(",")] if args.threads else
                        [cores] if args.quick else list(range(1, cores + 1)))
    except ValueError:
        p.error(f"--threads: expected counts like 1,2, got {args.threads!r}")
    if args.images < BATCH or args.train_batches < 1 or min(args.threads) < 1:
        p.error(f"--images must be at least {BATCH}, --train-batches and --threads at least 1")
    if args.out is None:
        args.out = default_out("io", args.quick)
    return args


def make_records(folder: str, n: int) -> dict:
    """``{'full': path, 'short256': path}``: n synthetic photos packed twice."""
    import simplejpeg

    from .. import recordio as rio
    from ..im2rec import resize_image
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[:375, :500].astype(np.float32)
    paths = {k: os.path.join(folder, f"{k}.rec") for k in ("full", "short256")}
    writers = {k: rio.MXIndexedRecordIO(p[:-4] + ".idx", p, "w") for k, p in paths.items()}
    for i in range(n):
        a, b, c = rng.uniform(0.1, 0.6, 3)
        base = np.stack([xx * a, yy * b, (xx + yy) * c * 0.5], -1)
        img = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
        header = (0, i % 10, i, 0)
        writers["full"].write_idx(i, rio.pack(header, simplejpeg.encode_jpeg(img, 90)))
        small = resize_image(img, (341, 256))
        writers["short256"].write_idx(i, rio.pack(header, simplejpeg.encode_jpeg(small, 90)))
    for w in writers.values():
        w.close()
    return paths


def _iterator(path: str, threads: int, size: int = 224, shuffle: bool = True):
    import symgraph as sg
    return sg.io.ImageRecordIter(path, (3, size, size), BATCH, random_resized_crop=True,
                                 rand_mirror=True, shuffle=shuffle, mean_r=MEAN[0],
                                 mean_g=MEAN[1], mean_b=MEAN[2], std_r=STD[0], std_g=STD[1],
                                 std_b=STD[2], preprocess_threads=threads, prefetch_buffer=4,
                                 round_batch=False)


def symgraph_rate(path: str, threads: int) -> float:
    it = _iterator(path, threads)
    for _ in it:  # warm-up epoch (page cache, thread start)
        pass
    it.reset()
    t = time.perf_counter()
    count = sum(BATCH - b.pad for b in it)
    rate = count / (time.perf_counter() - t)
    it.close()
    return rate


def pillow_rate(path: str) -> float:
    """A plain one-thread loop: Pillow decode, random resized crop, flip, normalise."""
    import io

    from PIL import Image

    from .. import recordio as rio
    from ..train.image import _random_area_crop
    r = rio.MXIndexedRecordIO(path[:-4] + ".idx", path, "r")
    rng = np.random.default_rng(0)
    mean, std = np.float32(MEAN), np.float32(STD)
    t = time.perf_counter()
    for key in r.keys:
        _, payload = rio.unpack(r.read_idx(key))
        im = Image.open(io.BytesIO(payload)).convert("RGB")
        x, y, w, h = _random_area_crop(rng, im.width, im.height, (0.08, 1), (3 / 4, 4 / 3))
        arr = np.asarray(im.resize((224, 224), Image.BILINEAR, box=(x, y, x + w, y + h)))
        if rng.random() < 0.5:
            arr = arr[:, ::-1]
        ((arr - mean) / std).transpose(2, 0, 1)
    r.close()
    return len(r.keys) / (time.perf_counter() - t)


def mxnet_rate(python: str, path: str, threads: int) -> float:
    env = {**os.environ, "MXNET_SUBGRAPH_BACKEND": "NONE"}
    out = subprocess.run([python, "-c", MXNET_SCRIPT, path, str(threads)], capture_output=True,
                         text=True, check=False, env=env)
    if out.returncode:
        from .common import BenchError
        raise BenchError(f"MXNet's ImageRecordIter failed: "
                         f"{(out.stderr.strip().splitlines() or ['no output'])[-1][:200]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["images_per_s"]


def small_cnn():
    import symgraph as sg
    x = sg.sym.Variable("data")
    for i, c in enumerate((16, 32, 64)):
        x = sg.sym.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=c, name=f"conv{i}")
        x = sg.sym.BatchNorm(x, name=f"bn{i}")
        x = sg.sym.Activation(x, act_type="relu", name=f"relu{i}")
        x = sg.sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max", name=f"pool{i}")
    x = sg.sym.Pooling(x, global_pool=True, kernel=(1, 1), pool_type="avg", name="gap")
    x = sg.sym.FullyConnected(sg.sym.Flatten(x), num_hidden=10, name="fc")
    return sg.sym.SoftmaxOutput(x, name="softmax")


def train_wait(path: str, threads: int, batches: int) -> dict:
    """Fits the small CNN on ``path`` for ``batches`` steps as ``fit`` does
    (prefetch thread, batches copied to the device ahead); returns the
    share of the time the steps waited for their batch."""
    import symgraph as sg
    from ..train.io import PrefetchingIter
    it = _iterator(path, threads, size=112)
    mod = sg.mod.Module(small_cnn())
    mod.bind(it.provide_data, it.provide_label)
    mod.init_params(sg.init.Xavier(), seed=0)
    mod.init_optimizer(optimizer="sgd", optimizer_params={"learning_rate": 0.01})
    source = PrefetchingIter(it, depth=2, transform=mod.prepare_batch)
    # the first step compiles: not counted
    mod.train_step(source.next())
    mod.get_outputs()[0].asnumpy()
    wait = step = 0.0
    done = 0
    while done < batches:
        t0 = time.perf_counter()
        try:
            batch = source.next()
        except StopIteration:
            source.reset()
            continue
        t1 = time.perf_counter()
        mod.train_step(batch)
        mod.get_outputs()[0].asnumpy()  # the step is finished before the next batch is asked for
        t2 = time.perf_counter()
        wait += t1 - t0
        step += t2 - t1
        done += 1
    source.close()
    it.close()
    return {"batches": done, "batch_size": BATCH, "threads": threads, "input": "112x112",
            "wait_s": round(wait, 3), "step_s": round(step, 3),
            "wait_share": round(wait / (wait + step), 4),
            "step_images_per_s": round(done * BATCH / step)}


def markdown(res: dict) -> str:
    threads = res["threads"]
    head = ["records", "Pillow, 1 thread"]
    for t in threads:
        head += [f"symgraph {t}"] + ([f"MXNet {t}"] if res["mxnet"] else [])
    # scaling needs two thread counts: one count over itself is 1.00 by construction
    scaling = len(threads) > 1
    if scaling:
        head.append(f"scaling {threads[0]}->{threads[-1]}")
    lines = ["# Image pipeline speed", ""]
    if res.get("quick"):
        lines += [f"**{smoke_note(SMOKE_WHAT)}**", ""]
    lines += [
             f"`symgraph bench io {res['argv']}` on {res['machine']}, {res['date']}; "
             f"load average before {res['load_average_before'][0]:.2f}, after "
             f"{res['load_average_after'][0]:.2f}.", "",
             "Images/s: decode + random resized crop to 224x224 + mirror + mean/std.", "",
             "| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for r in res["rows"]:
        cells = [r["records"], f"{r['pillow_1_thread']:,}"]
        for t in threads:
            cells.append(f"{r[f'symgraph_{t}']:,}")
            if res["mxnet"]:
                cells.append(f"{r[f'mxnet_{t}']:,}")
        if scaling:
            cells.append(f"{r['scaling_efficiency']:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    if res.get("train"):
        tr = res["train"]
        lines += ["", f"Training run (small CNN, {tr['input']} crops of the full-size records, "
                  f"batch {tr['batch_size']}, {tr['threads']} decode threads, "
                  f"{tr['batches']} steps): the step waited for data "
                  f"{tr['wait_share'] * 100:.1f}% of the time ({tr['wait_s']} s of "
                  f"{tr['wait_s'] + tr['step_s']:.2f} s); steps ran at "
                  f"{tr['step_images_per_s']:,} images/s."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    from tqdm import tqdm

    from ..util import atomic_write_text
    cores = os.cpu_count() or 1
    res = {"argv": " ".join(argv or []), "machine": f"{platform.machine()}, {cores} cores",
           "date": time.strftime("%Y-%m-%d", time.gmtime()), "images": args.images,
           "threads": args.threads, "mxnet": bool(args.mxnet_python), "quick": args.quick,
           # a shared machine's other work shows here: figures under load are not comparable
           "load_average_before": os.getloadavg(), "rows": []}
    with tempfile.TemporaryDirectory() as tmp:
        paths = make_records(tmp, args.images)
        todo = [(kind, t, who) for kind in paths for t in args.threads
                for who in (("symgraph", "mxnet") if args.mxnet_python else ("symgraph",))]
        rows = {kind: {"records": kind} for kind in paths}
        with tqdm(total=len(todo) + len(paths) + (0 if args.no_train else 1),
                  desc="bench io", file=sys.stderr) as bar:
            for kind, path in paths.items():
                rows[kind]["pillow_1_thread"] = round(pillow_rate(path))
                bar.update()
            for kind, t, who in todo:
                rate = (symgraph_rate(paths[kind], t) if who == "symgraph" else
                        mxnet_rate(args.mxnet_python, paths[kind], t))
                rows[kind][f"{who}_{t}"] = round(rate)
                bar.update()
            if not args.no_train:
                res["train"] = train_wait(paths["full"], args.threads[-1], args.train_batches)
                bar.update()
        lo, hi = args.threads[0], args.threads[-1]
        for row in rows.values():
            # per-thread rate at the most threads over that at the fewest; none from one count
            row["scaling_efficiency"] = round(row[f"symgraph_{hi}"] / (
                hi * row[f"symgraph_{lo}"] / lo), 3) if hi != lo else None
            res["rows"].append(row)
            print(json.dumps(row))
    if res.get("train"):
        print(json.dumps({"train": res["train"]}))
    res["load_average_after"] = os.getloadavg()
    atomic_write_text(os.path.join(args.out, "results.json"), json.dumps(res, indent=1) + "\n")
    atomic_write_text(os.path.join(args.out, "results.md"), markdown(res))
    if args.quick:
        print(smoke_note(SMOKE_WHAT))
    print(f"wrote {os.path.join(args.out, 'results.json')} and results.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
