#!/usr/bin/env python3
"""Images/s of sg.io.ImageRecordIter: decode + random resized crop to
224x224 + mirror + mean/std, per thread count, beside a plain Pillow loop
and (with ``--mxnet-python``) MXNet 1.9.1's ImageRecordIter on the same file.

    python benchmarks/image_io.py [--images 300] [--mxnet-python MXVENV/bin/python]
        [--out benchmarks/results/image_io/results.json]

The benchmark packs its own records: synthetic 500x375 JPEGs (quality 90,
smooth gradients plus noise, about the size of ImageNet photos) and the
same images resized to a 256-pixel short side. MXNet runs in its own
interpreter (never a symgraph dependency) with the same threads and
augmentation (``rand_crop``, ``random_resized_crop``, ``rand_mirror``,
mean/std).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

MEAN = (123.68, 116.78, 103.94)
STD = (58.4, 57.1, 57.4)

MXNET_SCRIPT = r"""
import json, sys, time
import mxnet as mx
rec, threads, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
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


def make_records(folder: str, n: int) -> dict:
    """``{'full': path, 'short256': path}``: n synthetic photos packed twice."""
    import simplejpeg
    from symgraph import recordio as rio
    from symgraph.im2rec import resize_image
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


def symgraph_rate(path: str, threads: int) -> float:
    import symgraph as sg
    it = sg.io.ImageRecordIter(path, (3, 224, 224), 32, rand_crop=True,
                               random_resized_crop=True, rand_mirror=True, shuffle=True,
                               mean_r=MEAN[0], mean_g=MEAN[1], mean_b=MEAN[2], std_r=STD[0],
                               std_g=STD[1], std_b=STD[2], preprocess_threads=threads,
                               prefetch_buffer=4, round_batch=False)
    for _ in it:  # warm-up epoch (page cache, thread start)
        pass
    it.reset()
    t = time.perf_counter()
    count = sum(32 - b.pad for b in it)
    rate = count / (time.perf_counter() - t)
    it.close()
    return rate


def pillow_rate(path: str) -> float:
    """A plain one-thread loop: Pillow decode, random resized crop, flip, normalise."""
    import io
    from PIL import Image
    from symgraph import recordio as rio
    from symgraph.train.image import _random_area_crop
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
    return len(r.keys) / (time.perf_counter() - t)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n\n")[0])
    p.add_argument("--images", type=int, default=300)
    p.add_argument("--threads", default=None, help="thread counts, e.g. 1,2 (default 1..cores)")
    p.add_argument("--mxnet-python", help="an interpreter with mxnet 1.9.1 installed")
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                 "image_io", "results.json"))
    args = p.parse_args(argv)
    cores = os.cpu_count() or 1
    threads = [int(t) for t in args.threads.split(",")] if args.threads else \
        list(range(1, cores + 1))
    # a shared machine's other work shows here: figures under load are not comparable
    results = {"cores": cores, "images": args.images, "load_average_before": os.getloadavg(),
               "rows": []}
    with tempfile.TemporaryDirectory() as tmp:
        paths = make_records(tmp, args.images)
        for kind, path in paths.items():
            row = {"records": kind, "pillow_1_thread": round(pillow_rate(path))}
            for t in threads:
                row[f"symgraph_{t}"] = round(symgraph_rate(path, t))
                if args.mxnet_python:
                    out = subprocess.run([args.mxnet_python, "-c", MXNET_SCRIPT, path, str(t),
                                          str(args.images)], capture_output=True, text=True,
                                         check=False)
                    if out.returncode:
                        raise SystemExit(f"MXNet failed: {out.stderr.strip()[-400:]}")
                    row[f"mxnet_{t}"] = round(json.loads(out.stdout.strip().splitlines()[-1])
                                              ["images_per_s"])
            row["scaling_efficiency"] = round(row[f"symgraph_{threads[-1]}"] / (
                threads[-1] * row[f"symgraph_{threads[0]}"] / threads[0]), 3)
            results["rows"].append(row)
            print(json.dumps(row))
    results["load_average_after"] = os.getloadavg()
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    return results


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
