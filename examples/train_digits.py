#!/usr/bin/env python3
"""Train an MLP or a small CNN on scikit-learn's handwritten digits.

    python examples/train_digits.py                       # MLP, 1 device
    python examples/train_digits.py --net cnn --devices 8 # CNN, data parallel
    python examples/train_digits.py --dtype bfloat16 --checkpoint /tmp/digits

The 1,797 8x8 images ship with scikit-learn, so nothing is downloaded.
Four of five images train, the rest test; the script prints the test
accuracy (about 97% in a few seconds on a CPU). ``--devices N`` splits
each batch over N devices; on a CPU-only machine it asks XLA for N
simulated devices, which must happen before JAX starts, as here.
"""
from __future__ import annotations

import argparse
import logging
import sys


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n\n")[0])
    p.add_argument("--net", choices=("mlp", "cnn"), default="mlp")
    p.add_argument("--devices", type=int, default=1, help="devices to split each batch over")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--optimizer", default="sgd")
    p.add_argument("--dtype", default="float32", help="compute dtype: float32 or bfloat16")
    p.add_argument("--checkpoint", metavar="PREFIX", help="save PREFIX-symbol.json and "
                   "PREFIX-%%04d.params after each epoch")
    p.add_argument("--progress", action="store_true", help="tqdm progress bars")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def load_data(seed: int = 0, image: bool = False):
    """(train x, train y, test x, test y): pixels scaled to [0, 1]."""
    import numpy as np
    try:
        from sklearn.datasets import load_digits
    except ModuleNotFoundError:
        sys.exit("train_digits.py: the digits come with scikit-learn, which is not installed: "
                 "pip install 'symgraph[examples]' (or pip install scikit-learn)")
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.float32)
    if image:
        x = x.reshape(-1, 1, 8, 8)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    cut = int(len(x) * 0.8)
    return x[:cut], y[:cut], x[cut:], y[cut:]


def get_net(kind: str):
    """The MLP (64-64 hidden, ReLU) or a two-conv CNN, ending in SoftmaxOutput."""
    import symgraph as sg
    S = sg.sym
    x = S.Variable("data")
    if kind == "mlp":
        x = S.FullyConnected(x, num_hidden=64, name="fc1")
        x = S.Activation(x, act_type="relu", name="relu1")
        x = S.FullyConnected(x, num_hidden=64, name="fc2")
        x = S.Activation(x, act_type="relu", name="relu2")
    else:
        x = S.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=16, name="conv1")
        x = S.Activation(x, act_type="relu", name="relu1")
        x = S.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool1")
        x = S.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=32, name="conv2")
        x = S.Activation(x, act_type="relu", name="relu2")
        x = S.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool2")
        x = S.Flatten(x, name="flatten")
    x = S.FullyConnected(x, num_hidden=10, name="fc_out")
    return S.SoftmaxOutput(x, name="softmax")


def main(argv=None) -> float:
    """Trains and returns the test accuracy."""
    args = parse_args(argv)
    import symgraph as sg
    from symgraph.context import simulate_cpu_devices
    if args.devices > 1:  # used only where the GPUs are fewer; harmless beside them
        simulate_cpu_devices(args.devices)

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    xtr, ytr, xte, yte = load_data(args.seed, image=args.net == "cnn")
    train = sg.io.NDArrayIter(xtr, ytr, batch_size=args.batch_size, shuffle=True,
                              seed=args.seed)
    test = sg.io.NDArrayIter(xte, yte, batch_size=args.batch_size)
    contexts = [sg.cpu(i) for i in range(args.devices)] if sg.num_gpus() < args.devices \
        else [sg.gpu(i) for i in range(args.devices)]
    mod = sg.mod.Module(get_net(args.net), context=contexts, compute_dtype=args.dtype)
    batch_cb = [sg.callback.Speedometer(args.batch_size, frequent=10)]
    if args.progress:
        batch_cb.append(sg.callback.ProgressBar())
    epoch_cb = sg.callback.module_checkpoint(mod, args.checkpoint, save_optimizer_states=True) \
        if args.checkpoint else None
    params = {"learning_rate": args.lr}
    if args.optimizer in ("sgd", "nag"):
        params["momentum"] = 0.9
    mod.fit(train, eval_data=test, optimizer=args.optimizer, optimizer_params=params,
            initializer=sg.init.Xavier(), num_epoch=args.epochs, seed=args.seed,
            batch_end_callback=batch_cb, epoch_end_callback=epoch_cb)
    (_, acc), = mod.score(test, "acc")
    print(f"test accuracy: {acc:.4f} ({args.net}, {args.devices} device(s), {args.dtype})")
    return acc


if __name__ == "__main__":
    main()
