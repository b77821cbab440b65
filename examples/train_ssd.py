#!/usr/bin/env python3
"""Train an SSD detector and report its mAP@0.5 after every epoch.

    python examples/train_ssd.py                       # synthetic shapes, small SSD
    python examples/train_ssd.py --rec data/train.rec --val-rec data/val.rec \\
        --classes cat,dog --net ssd-300-vgg16
    python examples/train_ssd.py --voc VOCdevkit/VOC2007 --work-dir data/voc07

Without --rec or --voc it writes the synthetic detection set (circles,
squares and triangles on textured backgrounds, docs/detection.md) and
trains ssd-96-resnet18 at width 1/4 on 96x96 images from scratch with
Adam; docs/detection.md has the mAP per epoch it reached. With --rec or
--voc the defaults are MXNet's: ssd-300-vgg16 and SGD with momentum. Both
warm up linearly over the first epoch and decay the rate in steps. The
training symbol is the zoo's (MultiBoxTarget, SoftmaxOutput, smooth-L1
MakeLoss); validation scores MultiBoxDetection's output with
VOC07MApMetric (11-point; --metric area for the area under the curve).
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time

SYNTHETIC_NET, SYNTHETIC_WIDTH, SYNTHETIC_SIZE = "ssd-96-resnet18", 0.25, 96


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(__doc__.strip().split("\n\n")[1:]))
    src = p.add_argument_group("data (default: the synthetic shapes set)")
    src.add_argument("--rec", metavar="TRAIN.rec", help="training records packed with "
                     "detection labels (symgraph im2rec --pack-label); .idx beside it")
    src.add_argument("--val-rec", metavar="VAL.rec", help="validation records for the mAP")
    src.add_argument("--classes", metavar="N|NAMES", help="with --rec: the number of classes "
                     "or their names, comma-separated (background excluded)")
    src.add_argument("--voc", metavar="ROOT", help="a VOC-layout folder (JPEGImages/, "
                     "Annotations/, ImageSets/Main/); it is packed into --work-dir first")
    src.add_argument("--voc-train", default="trainval", help="VOC image set to train on")
    src.add_argument("--voc-val", default="test", help="VOC image set to validate on")
    src.add_argument("--work-dir", metavar="DIR", help="where the synthetic set or the packed "
                     "VOC records go, and are reused from (default: a temporary folder)")
    src.add_argument("--num-train", type=int, default=2000, help="synthetic training images")
    src.add_argument("--num-val", type=int, default=256, help="synthetic held-out images")
    net = p.add_argument_group("network")
    net.add_argument("--net", help=f"a zoo SSD (symgraph zoo lists them; default "
                     f"{SYNTHETIC_NET} on the synthetic set, ssd-300-vgg16 otherwise)")
    net.add_argument("--width", type=float, help=f"channel-width factor (default "
                     f"{SYNTHETIC_WIDTH} on the synthetic set, 1 otherwise)")
    net.add_argument("--data-shape", type=int, metavar="SIDE", help="square input side "
                     f"(default {SYNTHETIC_SIZE} on the synthetic set, the net's own otherwise)")
    opt = p.add_argument_group("training")
    opt.add_argument("--epochs", type=int, default=20)
    opt.add_argument("--batch-size", type=int, default=32)
    opt.add_argument("--optimizer", choices=("sgd", "adam"), help="sgd (with momentum, "
                     "MXNet's SSD recipe; the default with --rec/--voc) or adam (the default "
                     "on the synthetic set, where it learns far faster from scratch)")
    opt.add_argument("--lr", type=float, help="learning rate after warm-up (default 0.004 "
                     "for sgd as MXNet's, 0.001 for adam)")
    opt.add_argument("--momentum", type=float, default=0.9, help="sgd's momentum")
    opt.add_argument("--wd", type=float, default=5e-4, help="weight decay")
    opt.add_argument("--warmup-epochs", type=float, default=1.0,
                     help="linear warm-up from lr/10 over this many epochs")
    opt.add_argument("--lr-steps", default="14,18", metavar="E1,E2",
                     help="epochs after which the learning rate is multiplied by --lr-factor")
    opt.add_argument("--lr-factor", type=float, default=0.1)
    opt.add_argument("--metric", choices=("voc07", "area"), default="voc07",
                     help="mAP@0.5 as VOC 2007's 11-point mean or the area under the curve")
    opt.add_argument("--threads", type=int, default=2, help="image decode threads")
    opt.add_argument("--checkpoint", metavar="PREFIX", help="save PREFIX-symbol.json and "
                     "PREFIX-%%04d.params after each epoch")
    opt.add_argument("--progress", action="store_true", help="a progress bar per epoch")
    opt.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.rec and args.voc:
        p.error("give --rec or --voc, not both")
    if args.val_rec and not args.rec:
        p.error("--val-rec goes with --rec")
    if args.rec and not args.classes:
        p.error("--rec needs --classes (a number or comma-separated names)")
    for name in ("epochs", "batch_size", "num_train", "num_val", "threads"):
        if getattr(args, name) < (0 if name == "num_val" else 1):
            p.error(f"--{name.replace('_', '-')} must be positive")
    if args.data_shape is not None and args.data_shape < 16:
        p.error("--data-shape must be at least 16")
    try:
        args.lr_steps = [int(e) for e in args.lr_steps.split(",") if e.strip()]
    except ValueError:
        p.error(f"--lr-steps: expected whole epochs such as 20,26, got {args.lr_steps!r}")
    if any(e < 1 for e in args.lr_steps) or args.lr_steps != sorted(set(args.lr_steps)):
        p.error(f"--lr-steps: expected increasing epochs from 1, got {args.lr_steps}")
    synthetic = not (args.rec or args.voc)
    if args.net is None:
        args.net = SYNTHETIC_NET if synthetic else "ssd-300-vgg16"
    if args.width is None:
        args.width = SYNTHETIC_WIDTH if synthetic else 1.0
    if args.optimizer is None:
        args.optimizer = "adam" if synthetic else "sgd"
    if args.lr is None:
        args.lr = 0.001 if args.optimizer == "adam" else 0.004
    return args


def fail(message: str):
    """One error line and exit status 2, as argparse's own errors."""
    print(f"train_ssd.py: error: {message}", file=sys.stderr)
    sys.exit(2)


def need_file(path: str, what: str) -> str:
    if not os.path.isfile(path):
        fail(f"{what} {path} does not exist")
    return path


def class_names(spec: str) -> list:
    if spec.strip().isdigit():
        n = int(spec)
        if n < 1:
            fail("--classes must be at least 1")
        return [f"class{k}" for k in range(n)]
    names = [s.strip() for s in spec.split(",") if s.strip()]
    if not names:
        fail(f"--classes: no class names in {spec!r}")
    return names


def pack_voc(root: str, image_set: str, folder: str, quiet: bool) -> str:
    """``folder/voc_<set>.rec``, packed once from the VOC folder ``root``."""
    from symgraph import im2rec
    from symgraph.train import detection_data as dd
    rec = os.path.join(folder, f"voc_{image_set}.rec")
    if os.path.isfile(rec) and os.path.isfile(rec[:-4] + ".idx"):
        return rec
    lst = rec[:-4] + ".lst"
    dd.write_det_list(lst, dd.read_voc(root, image_set))
    count, skipped = im2rec.pack_list(lst, root, num_thread=2, progress=not quiet,
                                      detection=True)
    if skipped:
        fail(f"{len(skipped)} VOC image(s) could not be packed, first: {skipped[0]}")
    print(f"packed {count} images of {root} ({image_set}) into {rec}", flush=True)
    return rec


def prepare_data(args, folder: str):
    """(train .rec, validation .rec or None, class names)."""
    if args.rec:
        for path, what in ((args.rec, "training"), (args.val_rec, "validation")):
            if path and not path.endswith(".rec"):
                fail(f"{path}: the {what} data must be a .rec file (pack a detection .lst "
                     f"with `symgraph im2rec --pack-label`)")
            if path:
                need_file(path, f"{what} record file")
        return args.rec, args.val_rec, class_names(args.classes)
    if args.voc:
        from symgraph.train import detection_data as dd
        if not os.path.isdir(args.voc):
            fail(f"VOC folder {args.voc} does not exist")
        train = pack_voc(args.voc, args.voc_train, folder, not args.progress)
        val = pack_voc(args.voc, args.voc_val, folder, not args.progress)
        return train, val, list(dd.VOC_CLASSES)
    from symgraph.train import detection_data as dd
    prefix = os.path.join(folder, f"shapes{SYNTHETIC_SIZE}_s{args.seed}_{args.num_train}"
                                  f"_{args.num_val}")
    if not os.path.isfile(prefix + "_train.idx"):
        tic = time.time()
        dd.synthetic_detection_set(prefix, args.num_train, args.num_val,
                                   size=(SYNTHETIC_SIZE, SYNTHETIC_SIZE), seed=args.seed)
        print(f"wrote the synthetic set ({args.num_train} train, {args.num_val} held-out "
              f"images) in {time.time() - tic:.1f} s", flush=True)
    return prefix + "_train.rec", prefix + "_val.rec" if args.num_val else None, \
        list(dd.SHAPE_CLASSES)


def make_iters(args, train_rec: str, val_rec, side: int):
    import symgraph as sg
    norm = dict(mean_r=123.68, mean_g=116.78, mean_b=103.94, std_r=58.4, std_g=57.1,
                std_b=57.4, preprocess_threads=args.threads)
    # MXNet's SSD augmentation (expansion, IoU-constrained crops) for real
    # images; the synthetic set is varied enough with flips alone
    aug = dict(rand_pad_prob=0.5, max_pad_scale=4.0, rand_crop_prob=0.8, num_crop_sampler=5,
               min_crop_scales=0.3, min_crop_overlaps=(0.1, 0.3, 0.5, 0.7, 0.9),
               min_crop_aspect_ratios=0.5, max_crop_aspect_ratios=2.0) \
        if args.rec or args.voc else {}
    def idx(rec):
        path = os.path.splitext(rec)[0] + ".idx"
        return need_file(path, "record index")
    train = sg.io.ImageDetRecordIter(
        path_imgrec=train_rec, path_imgidx=idx(train_rec), data_shape=(3, side, side),
        batch_size=args.batch_size, shuffle=True, seed=args.seed, rand_mirror_prob=0.5,
        **aug, **norm)
    val = None
    if val_rec:
        # as many label rows as the training batches, so one bound shape serves both
        val = sg.io.ImageDetRecordIter(
            path_imgrec=val_rec, path_imgidx=idx(val_rec), data_shape=(3, side, side),
            batch_size=args.batch_size, max_objects=train.provide_label[0].shape[1], **norm)
        if val.provide_label[0].shape != train.provide_label[0].shape:
            fail(f"the validation labels have {val.provide_label[0].shape[2]} fields per "
                 f"object, the training labels {train.provide_label[0].shape[2]}")
    return train, val


def multibox_metric():
    """Training losses as MXNet's example/ssd reports them: the softmax
    cross-entropy over the anchors MultiBoxTarget labels (positives and mined
    negatives) and the smooth-L1 location loss per positive anchor."""
    import numpy as np
    import symgraph as sg

    class MultiBoxMetric(sg.metric.EvalMetric):
        def __init__(self):
            super().__init__("multibox")

        def reset(self):
            self.sums, self.counts = np.zeros(2), np.zeros(2)
            super().reset()

        def update(self, labels, preds):
            # outputs: cls_prob (N, classes+1, anchors), loc_loss, cls_label (N, anchors)
            cls_prob, loc_loss, cls_label = (np.asarray(p, np.float64) for p in preds[:3])
            valid = cls_label >= 0
            lab = np.where(valid, cls_label, 0).astype(np.int64)
            prob = np.take_along_axis(cls_prob, lab[:, None, :], axis=1)[:, 0]
            self.sums += (-np.log(np.maximum(prob[valid], 1e-12)).sum(), loc_loss.sum())
            self.counts += (valid.sum(), (cls_label > 0).sum())

        def get(self):
            vals = [s / c if c else float("nan") for s, c in zip(self.sums, self.counts)]
            return ["CrossEntropy", "SmoothL1"], vals

        get_global = get

    return MultiBoxMetric()


def main(argv=None) -> list:
    """Trains; returns the mAP after each epoch (empty without validation data)."""
    args = parse_args(argv)
    import symgraph as sg
    from symgraph.errors import SymgraphError

    try:
        info = sg.models.model_info(args.net)
    except SymgraphError as err:
        fail(str(err))
    if not args.net.startswith("ssd-"):
        fail(f"--net {args.net} is not an SSD; the zoo's SSDs are "
             f"{', '.join(n for n in sg.models.list_models() if n.startswith('ssd-'))}")
    side = args.data_shape or (SYNTHETIC_SIZE if args.net == SYNTHETIC_NET else
                               info.image_shape[1])
    tmp = None
    folder = args.work_dir
    if folder is None:
        tmp = tempfile.TemporaryDirectory(prefix="train_ssd_")
        folder = tmp.name
    elif not os.path.isdir(folder):
        fail(f"--work-dir {folder} does not exist")
    try:
        return train(args, folder, side)
    except SymgraphError as err:
        fail(str(err))
    finally:
        if tmp is not None:
            tmp.cleanup()


def train(args, folder: str, side: int) -> list:
    import symgraph as sg
    train_rec, val_rec, names = prepare_data(args, folder)
    train_it, val_it = make_iters(args, train_rec, val_rec, side)
    net = sg.models.get_model(args.net, num_classes=len(names), image_shape=(3, side, side),
                              mode="train", width=args.width)
    per_epoch = train_it.num_batches
    warmup = int(round(args.warmup_epochs * per_epoch))
    steps = [e * per_epoch for e in args.lr_steps]
    kw = dict(base_lr=args.lr, warmup_steps=warmup, warmup_begin_lr=args.lr / 10)
    sched = sg.lr_scheduler.MultiFactorScheduler(step=steps, factor=args.lr_factor, **kw) \
        if steps else sg.lr_scheduler.LRScheduler(**kw)
    opt_params = {"learning_rate": args.lr, "wd": args.wd, "lr_scheduler": sched}
    if args.optimizer == "sgd":
        opt_params["momentum"] = args.momentum
    metric_cls = sg.metric.VOC07MApMetric if args.metric == "voc07" else sg.metric.MApMetric
    # output 3 of the training symbol is MultiBoxDetection's
    val_metric = metric_cls(ovp_thresh=0.5, class_names=names, pred_idx=3)
    train_metric = multibox_metric()
    quiet = logging.getLogger("train_ssd")  # one line an epoch below instead of fit's
    quiet.setLevel(logging.WARNING)
    mod = sg.mod.Module(net, data_names=("data",), label_names=("label",), logger=quiet)
    history = []
    state = {"tic": time.time(), "start": time.time()}
    kind = "VOC07 11-point" if args.metric == "voc07" else "area"
    print(f"training {args.net} (width {args.width:g}, {side}x{side}, {len(names)} classes, "
          f"{args.optimizer} lr {args.lr:g}) on {train_rec}: {per_epoch} batches of {args.batch_size} an epoch; mAP@0.5 is "
          f"{kind}", flush=True)

    def report(epoch, val_map):
        (_, (ce, l1)) = train_metric.get()
        now = time.time()
        lr = sched((epoch + 1) * per_epoch)  # the rate of the epoch's last update
        line = (f"epoch {epoch + 1:3d}/{args.epochs}  cross-entropy {ce:.4f}  smooth-l1 "
                f"{l1:.4f}  lr {lr:.4g}  {now - state['tic']:6.1f} s")
        if val_map is not None:
            history.append(val_map)
            line += f"  val mAP@0.5 {val_map:.4f}"
        print(line + f"  (total {now - state['start']:.0f} s)", flush=True)
        state["tic"] = time.time()

    def score_end(params):
        report(params.epoch, dict(params.eval_metric.get_global_name_value())["mAP"])

    epoch_cb = []
    if val_it is None:
        epoch_cb.append(lambda epoch, *_: report(epoch, None))
    if args.checkpoint:
        epoch_cb.append(sg.callback.module_checkpoint(mod, args.checkpoint))
    batch_cb = [sg.callback.ProgressBar()] if args.progress else None
    mod.fit(train_it, eval_data=val_it, eval_metric=train_metric,
            validation_metric=val_metric, eval_end_callback=score_end,
            optimizer=args.optimizer, optimizer_params=opt_params,
            initializer=sg.init.Xavier(rnd_type="gaussian", factor_type="out", magnitude=2),
            num_epoch=args.epochs, seed=args.seed, batch_end_callback=batch_cb,
            epoch_end_callback=epoch_cb or None)
    if history:
        print(f"final val mAP@0.5 ({kind}): {history[-1]:.4f}  best {max(history):.4f}  "
              f"in {time.time() - state['start']:.0f} s", flush=True)
    return history


if __name__ == "__main__":
    main()
