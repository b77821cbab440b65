#!/usr/bin/env python3
"""Train CIFAR-10 with the DAWNBench recipe (David Page's ResNet-9).

    python examples/cifar10_fast.py --data cifar-10-batches-py   # the "python version"
    python examples/cifar10_fast.py --record cifar10_train.rec   # an im2rec file (90/10 split)
    python examples/cifar10_fast.py --synthetic                  # CIFAR-shaped stand-in
    python examples/cifar10_fast.py --digits --epochs 10         # sklearn digits at 32x32
    python examples/cifar10_fast.py --digits --quick             # tiny: seconds on a CPU

The recipe (docs/training.md, "Fast CIFAR-10"): ``resnet9-dawn`` with
label smoothing 0.2; batch 512; Nesterov momentum 0.9 (MXNet's ``nag``);
a learning rate rising linearly from 0 to ``--lr`` (0.4) over the first
fifth of the updates and back to 0 at the end; weight decay 5e-4; the
data held as uint8 and augmented on the device (reflect-pad 4 and a
random 32x32 crop, a left-right flip, one 8x8 cutout); bfloat16 compute
(``--dtype``) with float32 weights; a moving average of the weights
(EMA) for evaluation; flip test-time augmentation.

Weight decay: the recipe states ``5e-4 * batch`` on a loss *summed* over
the batch with a rate of ``0.4 / batch``, so a step is ``w -= 0.4/batch *
(sum_i g_i + 5e-4*batch*w) = 0.4 * (mean_i g_i + 5e-4*w)``. MXNet's
optimizers multiply the summed gradient by ``rescale_grad = 1/batch`` and
add ``wd*w`` before the rate, so the same step is ``lr=0.4, wd=5e-4``:
the value used here, whatever the batch.

The moving average: its horizon is ``min(100, updates/5)`` updates (at
least 2)
(``1 - 1/horizon`` per update), i.e. the recipe's ``0.99`` per update
(applied as ``0.99**5`` every 5 updates when an epoch has 50 or more) in
a full run, and the last fifth of the updates in a short one, where a
100-update horizon would mostly average the first weights.

Printed per epoch: the training loss (cross-entropy of the augmented
batches' outputs as they trained), the test accuracy (the average of the
weights, with flip TTA; beside it, that of the weights themselves), the
epoch's training wall time (the first includes compiling) and images/s;
at the end the training time (the sum of the epochs' wall times,
evaluation left out) until the test accuracy first reached ``--target``
(94%), or 'not reached'.
"""
from __future__ import annotations

import argparse
import logging
import sys
import time

WIDTHS = (64, 128, 256, 512)
QUICK_WIDTHS = (16, 32, 64, 128)


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="cifar10_fast.py",
                                description=__doc__.strip().split("\n\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", metavar="DIR", help="CIFAR-10's python version "
                     "(cifar-10-batches-py, or the folder holding it)")
    src.add_argument("--record", metavar="FILE.rec", help="a record file of 32x32 images "
                     "(symgraph im2rec); its last tenth tests")
    src.add_argument("--synthetic", action="store_true", help="cifar.synthetic_cifar10")
    src.add_argument("--digits", action="store_true", help="scikit-learn's digits at 32x32, "
                     "in colour (1,437 train, 360 test)")
    p.add_argument("--epochs", type=int, default=None, help="default 24 (3 with --quick)")
    p.add_argument("--batch", type=int, default=None, help="default 512 (64 with --quick)")
    p.add_argument("--lr", type=float, default=0.4, help="peak learning rate")
    p.add_argument("--wd", type=float, default=5e-4, help="weight decay, MXNet's convention")
    p.add_argument("--dtype", default="bfloat16", help="compute dtype: bfloat16, float16 or "
                   "float32")
    p.add_argument("--widths", default=None, help="channels of prep,layer1,layer2,layer3 "
                   "(default 64,128,256,512; 16,32,64,128 with --quick)")
    p.add_argument("--target", type=float, default=0.94, help="test accuracy to time")
    p.add_argument("--no-ema", action="store_true", help="evaluate the weights themselves")
    p.add_argument("--no-tta", action="store_true", help="no flip test-time augmentation")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="tiny: narrow net, batch 64, 3 "
                   "epochs, at most 1,024 training and 512 test images")
    args = p.parse_args(argv)
    args.epochs = args.epochs if args.epochs is not None else (3 if args.quick else 24)
    args.batch = args.batch if args.batch is not None else (64 if args.quick else 512)
    if args.widths is None:
        args.widths = QUICK_WIDTHS if args.quick else WIDTHS
    else:
        try:
            args.widths = tuple(int(v) for v in args.widths.split(","))
        except ValueError:
            p.error(f"--widths: four integers, got {args.widths!r}")
        if len(args.widths) != 4 or min(args.widths) < 1:
            p.error("--widths: four positive integers")
    if args.epochs < 1 or args.batch < 1 or args.lr <= 0 or args.wd < 0:
        p.error("--epochs, --batch and --lr must be positive, --wd not negative")
    return args


def fail(message: str):
    """One line on stderr and exit status 2 (bad input)."""
    print(f"cifar10_fast.py: error: {message}", file=sys.stderr)
    sys.exit(2)


def load(args):
    """The data set as uint8 (symgraph.train.cifar.Cifar)."""
    import numpy as np
    from symgraph.recordio import RecordIOError
    from symgraph.train import TrainError, cifar
    try:
        if args.data:
            data = cifar.load_cifar10(args.data)
        elif args.record:
            x, y = cifar.load_cifar10_record(args.record)
            if len(x) < 2:
                fail(f"{args.record}: {len(x)} image(s); need at least 2 to train and test")
            order = np.random.default_rng(args.seed).permutation(len(x))
            cut = max(1, len(x) - max(1, len(x) // 10))
            data = cifar.Cifar(x[order[:cut]], y[order[:cut]], x[order[cut:]],
                               y[order[cut:]], cifar.CLASSES)
        elif args.synthetic:
            data = cifar.synthetic_cifar10(2048 if args.quick else 10000,
                                           512 if args.quick else 2000, seed=args.seed)
        else:
            data = cifar.digits_cifar(args.seed)
    except (TrainError, RecordIOError, OSError) as err:
        fail(str(err).splitlines()[0] if str(err) else type(err).__name__)
    if args.quick:
        data = data._replace(x_train=data.x_train[:1024], y_train=data.y_train[:1024],
                             x_test=data.x_test[:512], y_test=data.y_test[:512])
    if len(data.x_train) < args.batch:
        fail(f"{len(data.x_train)} training images, fewer than one batch of {args.batch}")
    return data


def ema_settings(updates: int, per_epoch: int) -> tuple[float, int]:
    """(decay per averaging step, averaging period): a horizon of
    min(100, updates/5) updates (at least 2), averaged every 5 updates where an epoch
    has 50 or more (the recipe's 0.99**5 every 5)."""
    horizon = max(2.0, min(100.0, updates / 5))
    every = 5 if per_epoch >= 50 else 1
    return (1.0 - 1.0 / horizon) ** every, every


def main(argv=None) -> dict:
    """Trains; returns {'epochs': [per-epoch dicts], 'time_to_target': s or None}."""
    args = parse_args(argv)
    data = load(args)
    import symgraph as sg
    from symgraph.models import resnet9
    from symgraph.train import augment

    # fit's own per-epoch lines are not shown (this script prints its table);
    # a logger of its own, so symgraph's stays as the caller set it
    quiet = logging.getLogger("symgraph.examples.cifar10_fast")
    quiet.setLevel(logging.WARNING)
    train = augment.DeviceAugmentIter(
        sg.io.NDArrayIter(data.x_train, data.y_train.astype("float32"), args.batch,
                          shuffle=True, seed=args.seed, last_batch_handle="discard",
                          dtype=None), seed=args.seed)
    test = augment.DeviceAugmentIter(
        sg.io.NDArrayIter(data.x_test, data.y_test.astype("float32"), args.batch, dtype=None),
        train=False)
    per_epoch = len(data.x_train) // args.batch
    updates = args.epochs * per_epoch
    decay, every = ema_settings(updates, per_epoch)
    net = resnet9.get_symbol(len(data.classes), widths=args.widths)
    mod = sg.mod.Module(net, compute_dtype=args.dtype, seed=args.seed, logger=quiet,
                        ema_decay=None if args.no_ema else decay, ema_every=every)
    sched = sg.lr_scheduler.PiecewiseLinearScheduler.triangle(updates, args.lr)
    metric = sg.metric.CrossEntropy()
    print(f"resnet9-dawn widths {','.join(map(str, args.widths))}, {len(data.x_train)} train / "
          f"{len(data.x_test)} test images, batch {args.batch}, {args.epochs} epochs "
          f"({updates} updates), lr {args.lr} (triangle), nag momentum 0.9, wd {args.wd}, "
          f"{args.dtype}, EMA " + ("off" if args.no_ema else f"{decay:.4g} every {every}")
          + f", TTA {'off' if args.no_tta else 'flip'}", flush=True)
    print(f"{'epoch':>5} {'train loss':>10} {'test acc':>8} {'(weights)':>9} {'time s':>7} "
          f"{'images/s':>9}", flush=True)
    rows, state = [], {"t0": None, "train_s": 0.0, "reached": None}

    def end_of_epoch(epoch, *_):
        dt = time.perf_counter() - state["t0"]
        state["train_s"] += dt
        (_, loss), = metric.get_name_value()
        (_, acc), = mod.score(test, "acc", tta_flip=not args.no_tta)
        raw = acc if args.no_ema else mod.score(test, "acc", tta_flip=not args.no_tta,
                                                use_ema=False)[0][1]
        row = {"epoch": epoch + 1, "train_loss": float(loss), "test_acc": float(acc),
               "test_acc_weights": float(raw), "seconds": dt,
               "images_per_s": per_epoch * args.batch / dt}
        rows.append(row)
        if state["reached"] is None and acc >= args.target:
            state["reached"] = state["train_s"]
        print(f"{epoch + 1:5d} {loss:10.4f} {acc:8.4f} {raw:9.4f} {dt:7.2f} "
              f"{row['images_per_s']:9.1f}", flush=True)
        state["t0"] = time.perf_counter()  # evaluation left out of the next epoch's time

    state["t0"] = time.perf_counter()
    mod.fit(train, num_epoch=args.epochs, optimizer="nag", initializer=sg.init.Xavier(),
            optimizer_params={"learning_rate": args.lr, "momentum": 0.9, "wd": args.wd,
                              "lr_scheduler": sched},
            eval_metric=metric, epoch_end_callback=end_of_epoch, seed=args.seed)
    reached = state["reached"]
    print(f"time to {args.target:.0%}: " + (f"{reached:.1f} s of training" if reached is not None
                                            else "not reached")
          + f" (best test accuracy {max(r['test_acc'] for r in rows):.4f}, "
          f"{state['train_s']:.1f} s in all)", flush=True)
    return {"epochs": rows, "time_to_target": reached}


if __name__ == "__main__":
    main()
