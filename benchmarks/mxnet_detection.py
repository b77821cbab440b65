#!/usr/bin/env python3
"""Detection ops and a small SSD side by side: MXNet 1.9.1 against symgraph.

MXNet is never a dependency of symgraph: run this script with MXNet's own
interpreter, made outside the repository, and name an interpreter that has
symgraph with ``--python``:

    python -m venv MXVENV && MXVENV/bin/pip install mxnet==1.9.1 numpy==1.23.5
    MXVENV/bin/python benchmarks/mxnet_detection.py --python python3 \\
        [--out benchmarks/results/mxnet_detection]

Every case is one symbol built with MXNet's symbol API and saved as JSON;
MXNet binds it, runs it on random inputs (forward, then backward under a
random head gradient where the op has one) and writes inputs, outputs and
gradients to a .npz; symgraph then loads the very same JSON
(``sg.sym.load_json``), runs the same inputs and head gradients, and
compares. The cases:

  MultiBoxPrior       sizes/ratios/steps/offsets/clip on odd feature maps
  MultiBoxTarget      random anchors with duplicated rows (IoU ties),
                      duplicated labels, -1 padding rows, boxes partly or
                      wholly outside the image, a batch whose images hold 0,
                      1, 3 and 6 objects, cls_pred with equal background
                      probabilities (mining ties); with and without
                      negative mining and overlap_threshold
  MultiBoxDetection   tied scores, every nms/force_suppress/topk/clip mode
  box_nms             corner/center in and out formats, topk, valid_thresh,
                      id_index/background_id/force_suppress, tied scores;
                      its gradient
  box_iou, box_decode every format (box_decode: std, clip)
  smooth_l1, L2Normalization (instance/channel/spatial), MakeLoss
                      (grad_scale, normalization null/batch/valid): outputs
                      and gradients
  ROIPooling, ROIAlign outputs and gradients
  ssd                 the zoo's ssd-300-vgg16 training symbol at width
                      1/16, 3x300x300, 3 classes, batch 2 (exported by
                      symgraph, loaded by MXNet): every output and every
                      parameter gradient of one training step, float32

Judging: indices, class ids, masks and class targets must be equal;
everything else within ``max|symgraph - mxnet| <= 1e-5 * max(1,
max|mxnet|)``; the SSD's gradients within 1e-4 of the largest of each
gradient (``max|d| / max|mxnet|``), with the norm-relative error beside.
Results: results.json and results.md in ``--out``.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import tempfile

import numpy as np

os.environ["MXNET_SUBGRAPH_BACKEND"] = "NONE"

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join("benchmarks", "results", "mxnet_detection")
TOL = 1e-5
SSD_TOL = 1e-4
SSD = {"name": "ssd-300-vgg16", "width": 1 / 16, "image": (3, 300, 300), "classes": 3,
       "batch": 2, "objects": 4}


# -- the cases (built and run under MXNet's interpreter) ---------------------------------------

def _boxes(rng, n, lo=0.0, hi=1.0, min_size=0.05, max_size=0.5):
    """n corner boxes with x1 < x2, y1 < y2."""
    xy = rng.uniform(lo, hi, (n, 2))
    wh = rng.uniform(min_size, max_size, (n, 2))
    return np.concatenate([xy, xy + wh], axis=1)


def _labels(rng, counts, width=5, classes=3, pad=8):
    """(batch, pad, width): counts[i] objects in image i, then -1 rows;
    duplicated and out-of-image boxes among them."""
    lab = -np.ones((len(counts), pad, width))
    for i, c in enumerate(counts):
        if not c:
            continue
        b = _boxes(rng, c, -0.1, 0.9, 0.1, 0.4)
        if c >= 3:
            b[1] = b[0]                                  # the same box twice
            b[2] = [1.05, 1.1, 1.3, 1.4]                 # wholly outside the image
        if c >= 5:
            b[4] = [-0.3, -0.2, 0.25, 0.35]              # partly outside
        lab[i, :c, 0] = rng.integers(0, classes, c)
        lab[i, :c, 1:5] = b
        if width > 5:
            lab[i, :c, 5:] = rng.uniform(0, 1, (c, width - 5))
    return lab


def _anchors(rng, n=64):
    a = _boxes(rng, n, 0.0, 0.8, 0.1, 0.35)
    a[5] = a[4]                                          # tied IoU with every label
    a[9] = a[4]
    a[20:24] = a[30:34]
    return a[None]


def cases(mx, rng) -> list:
    """Each case: name, symbol, inputs, the outputs judged exactly, whether
    to run backward, and which input gradients to compare."""
    S = mx.sym
    out = []

    def add(name, sym, inputs, exact=(), grad=(), columns=None):
        out.append({"name": name, "sym": sym, "inputs": inputs, "exact": list(exact),
                    "grad": list(grad), "columns": columns})

    # MultiBoxPrior
    d = S.Variable("data")
    for i, kw in enumerate([dict(sizes=(0.2, 0.45), ratios=(1, 2, 0.5)),
                            dict(sizes=(0.3,), ratios=(1, 3, 1 / 3), clip=True),
                            dict(sizes=(0.1, 0.25, 0.6), ratios=(1, 2), steps=(0.1, 0.15),
                                 offsets=(0.3, 0.7)),
                            dict(sizes=(0.9,), ratios=(1,), clip=True, steps=(0.5, 0.25))]):
        add(f"MultiBoxPrior/{i}", S.contrib.MultiBoxPrior(d, **kw),
            {"data": rng.normal(0, 1, (2, 3, 5, 7))})

    # MultiBoxTarget
    a, lab, cp = S.Variable("anchor"), S.Variable("label"), S.Variable("cls_pred")
    anchors = _anchors(rng)
    labels = _labels(rng, [0, 1, 3, 6])
    cls_random = rng.normal(0, 1, (4, 4, anchors.shape[1]))
    cls_tied = np.round(rng.normal(0, 1, (4, 4, anchors.shape[1])))
    cls_tied[:, :, 40:] = 0.5                            # equal background probabilities
    for i, (kw, cls) in enumerate([
            (dict(), cls_random),
            (dict(overlap_threshold=0.3, negative_mining_ratio=3, negative_mining_thresh=0.5),
             cls_random),
            (dict(overlap_threshold=0.4, negative_mining_ratio=2, negative_mining_thresh=0.4),
             cls_tied),
            (dict(overlap_threshold=0.0, negative_mining_ratio=-1, ignore_label=-2,
                  variances=(0.2, 0.1, 0.3, 0.25)), cls_tied),
            (dict(overlap_threshold=0.2, negative_mining_ratio=1.5,
                  negative_mining_thresh=0.3, minimum_negative_samples=5), cls_random)]):
        add(f"MultiBoxTarget/{i}", S.contrib.MultiBoxTarget(a, lab, cp, **kw),
            {"anchor": anchors, "label": labels, "cls_pred": cls}, exact=(1, 2))
    # anchors from MultiBoxPrior, wider labels (6 columns, as some datasets write)
    prior = S.contrib.MultiBoxPrior(S.Variable("feat"), sizes=(0.2, 0.5), ratios=(1, 2, 0.5))
    add("MultiBoxTarget/prior", S.contrib.MultiBoxTarget(prior, lab, cp,
                                                         negative_mining_ratio=3),
        {"feat": np.zeros((1, 1, 6, 6)), "label": _labels(rng, [2, 5, 0], width=6),
         "cls_pred": rng.normal(0, 1, (3, 3, 144))}, exact=(1, 2))

    # MultiBoxDetection
    prob, loc = S.Variable("cls_prob"), S.Variable("loc_pred")
    n = anchors.shape[1]
    logits = rng.normal(0, 1.5, (3, 4, n))
    logits[:, :, 10:20] = logits[:, :, 10:11]            # tied scores
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    lp = rng.normal(0, 0.5, (3, 4 * n))
    for i, kw in enumerate([dict(),
                            dict(threshold=0.2, nms_threshold=0.45),
                            dict(threshold=0.05, nms_threshold=0.3, force_suppress=True),
                            dict(threshold=0.1, nms_threshold=0.5, nms_topk=12, clip=False),
                            dict(threshold=0.15, nms_threshold=1.5, variances=(0.2, 0.2, 0.1,
                                                                             0.1))]):
        add(f"MultiBoxDetection/{i}", S.contrib.MultiBoxDetection(prob, loc, a, **kw),
            {"cls_prob": p, "loc_pred": lp, "anchor": anchors}, columns={"exact": [0]})

    # box_nms
    x = S.Variable("data")
    recs = np.zeros((2, 3, 20, 6))
    recs[..., 0] = rng.integers(-1, 3, (2, 3, 20))
    recs[..., 1] = np.round(rng.uniform(0, 1, (2, 3, 20)), 1)   # many tied scores
    recs[..., 2:] = _boxes(rng, 120, 0, 0.7, 0.1, 0.4).reshape(2, 3, 20, 4)
    recs[0, 0, 3] = recs[0, 0, 2]
    center = recs.copy()
    center[..., 2:4] = (recs[..., 2:4] + recs[..., 4:6]) / 2
    center[..., 4:6] = recs[..., 4:6] - recs[..., 2:4]
    for i, (kw, data) in enumerate([
            (dict(overlap_thresh=0.5), recs),
            (dict(overlap_thresh=0.3, valid_thresh=0.35, topk=7, id_index=0), recs),
            (dict(overlap_thresh=0.4, id_index=0, background_id=1, force_suppress=False), recs),
            (dict(overlap_thresh=0.4, id_index=0, force_suppress=True), recs),
            (dict(overlap_thresh=0.5, in_format="center", out_format="corner", id_index=0),
             center),
            (dict(overlap_thresh=0.5, in_format="corner", out_format="center", topk=5), recs),
            (dict(overlap_thresh=0.6, coord_start=1, score_index=5, id_index=0),
             recs[..., [0, 2, 3, 4, 5, 1]])]):
        add(f"box_nms/{i}", S.contrib.box_nms(x, **kw), {"data": data}, grad=("data",))

    # box_iou
    lhs, rhs = S.Variable("lhs"), S.Variable("rhs")
    l1, r1 = _boxes(rng, 7).reshape(7, 4), _boxes(rng, 10).reshape(2, 5, 4)
    r1[0, 0] = l1[0]
    for fmt in ("corner", "center"):
        add(f"box_iou/{fmt}", S.contrib.box_iou(lhs, rhs, format=fmt), {"lhs": l1, "rhs": r1})

    # box_decode
    an = S.Variable("anchors")
    for i, kw in enumerate([dict(),
                            dict(std0=0.1, std1=0.1, std2=0.2, std3=0.2, clip=2.0),
                            dict(format="center", std0=0.5, std1=1.5, std2=0.7, std3=1.2),
                            dict(format="corner", clip=0.5)]):
        add(f"box_decode/{i}", S.contrib.box_decode(x, an, **kw),
            {"data": rng.normal(0, 1.5, (2, 9, 4)), "anchors": _boxes(rng, 9)[None]})

    # smooth_l1, L2Normalization, MakeLoss
    for sigma in (1.0, 0.5, 3.0):
        add(f"smooth_l1/{sigma}", S.smooth_l1(x, scalar=sigma),
            {"data": rng.normal(0, 2, (4, 9))}, grad=("data",))
    for mode in ("instance", "channel", "spatial"):
        add(f"L2Normalization/{mode}", S.L2Normalization(x, mode=mode, eps=1e-6),
            {"data": rng.normal(0, 1, (2, 3, 4, 5))}, grad=("data",))
    add("L2Normalization/instance-2d", S.L2Normalization(x, eps=1e-3),
        {"data": rng.normal(0, 1, (3, 6))}, grad=("data",))
    for i, kw in enumerate([dict(), dict(grad_scale=0.25), dict(normalization="batch"),
                            dict(normalization="valid", valid_thresh=0.3, grad_scale=2.0),
                            dict(normalization="valid", valid_thresh=5.0)]):
        add(f"MakeLoss/{i}", S.MakeLoss(x * 2, **kw),
            {"data": np.abs(rng.normal(0, 1, (4, 5))) * (rng.uniform(0, 1, (4, 5)) > 0.4)},
            grad=("data",))

    # ROIPooling, ROIAlign
    feat, rois = S.Variable("data"), S.Variable("rois")
    fm = rng.normal(0, 1, (2, 3, 12, 14))
    r = np.concatenate([rng.integers(0, 2, (5, 1)), _boxes(rng, 5, 0, 10, 2, 8) * 1.3], 1)
    add("ROIPooling", S.ROIPooling(feat, rois, pooled_size=(3, 4), spatial_scale=0.7),
        {"data": fm, "rois": r}, grad=("data",))
    for i, kw in enumerate([dict(pooled_size=(3, 3), spatial_scale=0.8),
                            dict(pooled_size=(2, 4), spatial_scale=0.5, sample_ratio=2),
                            dict(pooled_size=(3, 2), spatial_scale=1.0, sample_ratio=1,
                                 aligned=True)]):
        add(f"ROIAlign/{i}", S.contrib.ROIAlign(feat, rois, **kw), {"data": fm, "rois": r},
            grad=("data",))
    return out


def run_case(mx, case, rng) -> dict:
    sym = case["sym"]
    inputs = {k: np.asarray(v, np.float32) for k, v in case["inputs"].items()}
    args = {k: mx.nd.array(v) for k, v in inputs.items()}
    res = {f"input:{k}": v for k, v in inputs.items()}
    if case["grad"]:
        grads = {k: mx.nd.zeros(args[k].shape) for k in case["grad"]}
        ex = sym.bind(mx.cpu(), args=args, args_grad=grads,
                      grad_req={k: ("write" if k in grads else "null") for k in args})
        outs = ex.forward(is_train=True)
        heads = [rng.normal(0, 1, o.shape).astype(np.float32) for o in outs]
        ex.backward([mx.nd.array(h) for h in heads])
        for i, h in enumerate(heads):
            res[f"head:{i}"] = h
        for k, g in grads.items():
            res[f"grad:{k}"] = g.asnumpy()
    else:
        outs = sym.bind(mx.cpu(), args=args, grad_req="null").forward(is_train=False)
    for i, o in enumerate(outs):
        res[f"out:{i}"] = o.asnumpy()
    return res


def mxnet_ssd(mx, work: str, rng) -> None:
    """One training step of the exported small SSD: outputs and every
    parameter gradient, from random parameters, images and labels."""
    net = mx.sym.load(os.path.join(work, "ssd.json"))
    b = SSD["batch"]
    shapes = {"data": (b, *SSD["image"]), "label": (b, SSD["objects"], 5)}
    arg_shapes, _, aux_shapes = net.infer_shape(**shapes)
    args, grads = {}, {}
    for name, shape in zip(net.list_arguments(), arg_shapes):
        if name == "data":
            v = rng.normal(0, 1, shape)
        elif name == "label":
            v = _labels(rng, [1, 4], classes=SSD["classes"], pad=SSD["objects"])
            v[..., 1:] = np.clip(v[..., 1:], -1, 1)
        elif name.endswith("_scale"):
            v = rng.uniform(10, 20, shape)
        else:
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
            v = rng.normal(0, np.sqrt(2 / max(fan_in, 1)), shape)
            if name.endswith("_bias"):
                v = rng.normal(0, 0.05, shape)
        args[name] = mx.nd.array(v.astype(np.float32))
        if name not in shapes:
            grads[name] = mx.nd.zeros(shape)
    aux = {n: mx.nd.array(rng.uniform(0.5, 1, s).astype(np.float32))
           for n, s in zip(net.list_auxiliary_states(), aux_shapes)}
    ex = net.bind(mx.cpu(), args=args, args_grad=grads, aux_states=aux,
                  grad_req={n: ("write" if n in grads else "null") for n in args})
    outs = ex.forward(is_train=True)
    ex.backward()
    res = {f"arg:{k}": v.asnumpy() for k, v in args.items()}
    res.update({f"aux:{k}": v.asnumpy() for k, v in aux.items()})
    res.update({f"out:{i}": o.asnumpy() for i, o in enumerate(outs)})
    res.update({f"grad:{k}": g.asnumpy() for k, g in grads.items()})
    np.savez(os.path.join(work, "ssd-mxnet.npz"), **res)


def mxnet_side(work: str, seed: int) -> list:
    import mxnet as mx
    rng = np.random.default_rng(seed)
    mx.random.seed(seed)
    meta = []
    for i, case in enumerate(cases(mx, rng)):
        res = run_case(mx, case, rng)
        stem = f"case{i:03d}"
        with open(os.path.join(work, stem + ".json"), "w") as f:
            f.write(case["sym"].tojson())
        np.savez(os.path.join(work, stem + ".npz"), **res)
        meta.append({"name": case["name"], "stem": stem, "exact": case["exact"],
                     "grad": case["grad"], "columns": case["columns"]})
    mxnet_ssd(mx, work, rng)
    return meta


# -- the symgraph side (runs under --python) -------------------------------------------------

def _err(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return float("inf")
    return float(np.max(np.abs(a - b), initial=0.0)) / max(1.0, float(np.max(np.abs(b),
                                                                              initial=0.0)))


def _mismatch_count(a, b) -> int:
    a, b = np.asarray(a), np.asarray(b)
    return int(a.size if a.shape != b.shape else np.count_nonzero(a != b))


def symgraph_case(sg, work: str, m: dict) -> dict:
    ref = dict(np.load(os.path.join(work, m["stem"] + ".npz")))
    with open(os.path.join(work, m["stem"] + ".json")) as f:
        net = sg.sym.load_json(f.read())
    inputs = {k[6:]: v for k, v in ref.items() if k.startswith("input:")}
    args = {k: sg.nd.array(v) for k, v in inputs.items()}
    row = {"case": m["name"], "exact_mismatches": 0, "max_err": 0.0}
    if m["grad"]:
        grads = {k: sg.nd.zeros(v.shape) for k, v in inputs.items() if k in m["grad"]}
        ex = net.bind(sg.cpu(), args=args, args_grad=grads,
                      grad_req={k: ("write" if k in grads else "null") for k in args})
        outs = ex.forward(is_train=True)
        heads = [ref[f"head:{i}"] for i in range(len(outs))]
        ex.backward([sg.nd.array(h) for h in heads])
        row["grad_err"] = max(_err(grads[k].asnumpy(), ref[f"grad:{k}"]) for k in grads)
    else:
        outs = net.bind(sg.cpu(), args=args, grad_req="null").forward(is_train=False)
    nout = sum(k.startswith("out:") for k in ref)
    if len(outs) != nout:
        row["error"] = f"{len(outs)} outputs, MXNet {nout}"
        row["match"] = False
        return row
    for i, o in enumerate(outs):
        mine, theirs = o.asnumpy(), ref[f"out:{i}"]
        if mine.shape != theirs.shape:
            row["error"] = f"output {i} shape {mine.shape}, MXNet {theirs.shape}"
            row["match"] = False
            return row
        if i in m["exact"]:
            row["exact_mismatches"] += _mismatch_count(mine, theirs)
            continue
        cols = (m["columns"] or {}).get("exact", [])
        if cols:
            row["exact_mismatches"] += _mismatch_count(mine[..., cols], theirs[..., cols])
            rest = [c for c in range(mine.shape[-1]) if c not in cols]
            mine, theirs = mine[..., rest], theirs[..., rest]
        row["max_err"] = max(row["max_err"], _err(mine, theirs))
    row["covers"] = _covers(m["name"], ref)
    row["match"] = (row["exact_mismatches"] == 0 and row["max_err"] <= TOL
                    and row.get("grad_err", 0.0) <= TOL)
    return row


def _covers(name: str, ref: dict) -> str:
    """What MXNet's result holds, so a case that matches trivially shows."""
    op = name.split("/")[0]
    if op == "MultiBoxTarget":
        mask, cls = ref["out:1"], ref["out:2"]
        pos, neg = int(np.count_nonzero(mask[:, ::4])), int(np.count_nonzero(cls == 0))
        return f"{pos} positive, {neg} negative, {cls.size - pos - neg} ignored"
    if op == "MultiBoxDetection":
        c = ref["out:0"][..., 0]
        return f"{int(np.count_nonzero(c >= 0))} kept of {c.size}"
    if op == "box_nms":
        o = ref["out:0"]
        kept = np.any(o != -1, axis=-1)  # suppressed rows are all -1
        return f"{int(np.count_nonzero(kept))} kept of {kept.size}"
    return ""


def symgraph_ssd(sg, work: str) -> dict:
    ref = dict(np.load(os.path.join(work, "ssd-mxnet.npz")))
    net = sg.sym.load(os.path.join(work, "ssd.json"))
    args = {k[4:]: sg.nd.array(v) for k, v in ref.items() if k.startswith("arg:")}
    aux = {k[4:]: sg.nd.array(v) for k, v in ref.items() if k.startswith("aux:")}
    names = [k[5:] for k in ref if k.startswith("grad:")]
    grads = {k: sg.nd.zeros(args[k].shape) for k in names}
    ex = net.bind(sg.cpu(), args=args, args_grad=grads, aux_states=aux,
                  grad_req={n: ("write" if n in grads else "null") for n in args})
    outs = ex.forward(is_train=True)
    ex.backward()
    cls_target = ref["out:2"]
    row = {"case": "ssd", "config": SSD, "outputs": [], "gradients": len(names),
           "positive_anchors": int(np.count_nonzero(cls_target > 0)),
           "negative_anchors": int(np.count_nonzero(cls_target == 0))}
    for i, o in enumerate(outs):
        mine, theirs = o.asnumpy(), ref[f"out:{i}"]
        exact = mine.shape == theirs.shape and i in (2,)
        row["outputs"].append({"shape": list(theirs.shape), "max_err": _err(mine, theirs),
                               "mismatches": _mismatch_count(mine, theirs) if exact else None})
    errs, norms = {}, {}
    for k in names:
        a, b = grads[k].asnumpy().astype(np.float64), ref[f"grad:{k}"].astype(np.float64)
        scale = float(np.max(np.abs(b))) or 1.0
        errs[k] = float(np.max(np.abs(a - b))) / scale
        norms[k] = float(np.linalg.norm(a - b)) / (float(np.linalg.norm(b)) or 1.0)
    worst = max(errs, key=errs.get)
    row.update(grad_err=errs[worst], worst_gradient=worst, grad_norm_err=max(norms.values()),
               output_err=max(o["max_err"] for o in row["outputs"][:2]),
               cls_target_mismatches=row["outputs"][2]["mismatches"])
    row["match"] = (row["grad_err"] <= SSD_TOL and row["output_err"] <= SSD_TOL
                    and row["cls_target_mismatches"] == 0)
    return row


def export_ssd(work: str) -> None:
    import symgraph as sg
    net = sg.models.get_model(SSD["name"], num_classes=SSD["classes"], image_shape=SSD["image"],
                              width=SSD["width"])
    net.save(os.path.join(work, "ssd.json"))


def symgraph_side(work: str) -> None:
    import symgraph as sg
    with open(os.path.join(work, "cases.json")) as f:
        meta = json.load(f)
    rows = []
    for m in meta:
        try:
            row = symgraph_case(sg, work, m)
        except Exception as e:  # a case that fails is a row, not a crash
            row = {"case": m["name"], "error": f"{type(e).__name__}: {str(e).splitlines()[0]}",
                   "match": False}
        print(json.dumps(row), flush=True)
        rows.append(row)
    try:
        row = symgraph_ssd(sg, work)
    except Exception as e:
        row = {"case": "ssd", "error": f"{type(e).__name__}: {str(e).splitlines()[0]}",
               "match": False}
    print(json.dumps(row), flush=True)
    rows.append(row)
    with open(os.path.join(work, "rows.json"), "w") as f:
        json.dump(rows, f)


# -- report --------------------------------------------------------------------------------

def _markdown(rows: list, meta: dict) -> str:
    lines = ["# Detection ops: symgraph against MXNet 1.9.1", "",
             f"{meta['when']}, {meta['machine']}; command: `{meta['command']}`.", "",
             "Every case is one symbol JSON written by MXNet and loaded by symgraph, run on "
             "the same float32 inputs (and head gradients) on the CPU. *exact*: elements of "
             "indices, class ids, masks and class targets that differ (target 0); *max err*: "
             "max|symgraph - mxnet| / max(1, max|mxnet|) over the other outputs, *grad err* "
             f"the same over the input gradients (target {TOL:g}).", "",
             "*MXNet's result* says what the case exercises (MultiBoxTarget: anchors "
             "positive, negative and ignored over the batch; detection and NMS: rows kept).",
             "", "| case | exact | max err | grad err | match | MXNet's result |",
             "|---|---|---|---|---|---|"]
    ssd = None
    for r in rows:
        if r["case"] == "ssd":
            ssd = r
            continue
        if "error" in r:
            lines.append(f"| {r['case']} | {r['error']} | | | no | |")
            continue
        g = f"{r['grad_err']:.1e}" if "grad_err" in r else "-"
        lines.append(f"| {r['case']} | {r['exact_mismatches']} | {r['max_err']:.1e} | {g} | "
                     f"{'yes' if r['match'] else 'no'} | {r.get('covers', '')} |")
    ops = [r for r in rows if r["case"] != "ssd"]
    lines += ["", f"{sum(r['match'] for r in ops)} of {len(ops)} cases match."]
    if ssd:
        c = ssd.get("config", SSD)
        lines += ["", "## A small SSD's training step", "",
                  f"The zoo's `{c['name']}` training symbol at width {c['width']:g}, image "
                  f"{'x'.join(map(str, c['image']))}, {c['classes']} classes, batch "
                  f"{c['batch']}, float32, exported by symgraph and loaded by MXNet; random "
                  "parameters, images and labels (-1 padded, some boxes outside the "
                  f"image); one forward and backward. Target {SSD_TOL:g}.", ""]
        if "error" in ssd:
            lines.append(f"Error: {ssd['error']}")
        else:
            lines += ["| what | figure |", "|---|---|",
                      f"| cls_prob, loc_loss: max err | {ssd['output_err']:.1e} |",
                      f"| cls_target elements that differ | {ssd['cls_target_mismatches']} |",
                      f"| anchors positive / negative (MXNet) | {ssd['positive_anchors']} / "
                      f"{ssd['negative_anchors']} |",
                      f"| parameter gradients | {ssd['gradients']} |",
                      f"| worst gradient: max abs diff / max abs | {ssd['grad_err']:.1e} "
                      f"({ssd['worst_gradient']}) |",
                      f"| worst gradient: norm relative | {ssd['grad_norm_err']:.1e} |",
                      f"| match | {'yes' if ssd['match'] else 'no'} |"]
    return "\n".join(lines) + "\n"


def write_atomic(path: str, text: str) -> None:
    """Writes ``text`` to ``path`` atomically (symgraph.util cannot be
    imported in MXNet's venv; mxnet_ssd300.py uses this one too)."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)  # mkstemp makes it private
    os.replace(tmp, path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=None,
                    help="an interpreter with symgraph (for the symgraph side)")
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--side", choices=["both", "symgraph", "export"], default="both",
                    help=argparse.SUPPRESS)
    ap.add_argument("--work", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.side == "symgraph":
        symgraph_side(args.work)
        return 0
    if args.side == "export":
        export_ssd(args.work)
        return 0
    if not args.python:
        ap.error("--python: an interpreter that has symgraph is needed")
    env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS="cpu")
    env.pop("MXNET_SUBGRAPH_BACKEND", None)
    with tempfile.TemporaryDirectory() as work:
        me = os.path.abspath(__file__)
        subprocess.run([args.python, me, "--side", "export", "--work", work], check=True,
                       env=env)
        meta = mxnet_side(work, args.seed)
        with open(os.path.join(work, "cases.json"), "w") as f:
            json.dump(meta, f)
        subprocess.run([args.python, me, "--side", "symgraph", "--work", work], check=True,
                       env=env)
        with open(os.path.join(work, "rows.json")) as f:
            rows = json.load(f)
    import mxnet as mx
    meta = {"when": _dt.date.today().isoformat(),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, mxnet {mx.__version__}",
            "command": "MXVENV/bin/python benchmarks/mxnet_detection.py --python python3"
                       + (f" --seed {args.seed}" if args.seed else "")}
    os.makedirs(args.out, exist_ok=True)
    write_atomic(os.path.join(args.out, "results.json"),
           json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    text = _markdown(rows, meta)
    write_atomic(os.path.join(args.out, "results.md"), text)
    print(text)
    return 0 if all(r["match"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
