"""Data parallel training in several processes (kvstore='dist_sync').

    symgraph launch -n 2 --devices-per-process 2 -- python examples/train_dist.py
    python examples/train_dist.py --devices 4        # the same batches in one process

``--devices N`` outside a launcher simulates N CPU devices when the
machine has fewer (``XLA_FLAGS=--xla_force_host_platform_device_count=N``,
set before JAX starts, as here); under ``symgraph launch`` each process
has the ``--devices-per-process`` it was given.

Under ``symgraph launch`` every process trains on its own part of each
batch of ``--batch`` samples (``NDArrayIter(part_index=rank,
num_parts=workers)``); the step is one program over every process's
devices, so the parameters equal one process training on the whole
batches. Rank 0 writes a checkpoint after each epoch; the run then
resumes from the first epoch's checkpoint, in every process, and checks
that the resumed parameters equal the uninterrupted ones. ``--out``
saves the final parameters (rank 0).
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile

import numpy as np


def net(sg):
    data = sg.sym.Variable("data")
    x = sg.sym.FullyConnected(data, num_hidden=16, name="fc1")
    x = sg.sym.BatchNorm(x, name="bn1")
    x = sg.sym.Activation(x, act_type="relu", name="relu1")
    x = sg.sym.FullyConnected(x, num_hidden=4, name="fc2")
    return sg.sym.SoftmaxOutput(x, name="softmax")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", type=int, default=None,
                   help="devices of this process (default: all of them)")
    p.add_argument("--batch", type=int, default=16, help="samples per step, all processes")
    p.add_argument("--samples", type=int, default=72)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--prefix", default=None, help="checkpoint prefix (default: a temp folder)")
    p.add_argument("--out", default=None, help="rank 0 saves the final parameters here (.npz)")
    p.add_argument("--fail-rank", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--hang-rank", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--uneven", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--kill-rank", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    import symgraph as sg
    from symgraph.parallel import distributed
    from symgraph.context import simulate_cpu_devices
    from symgraph.util import atomic_open

    # join the other processes before JAX starts (only under a launcher)
    launched = distributed.settings_from_env()
    if args.devices and not launched:
        simulate_cpu_devices(args.devices)
    kv = sg.kv.create("dist_sync") if launched else sg.kv.create("local")
    rank, workers = kv.rank, kv.num_workers
    if args.fail_rank == rank:
        raise RuntimeError(f"rank {rank} fails on purpose")
    if args.kill_rank == rank:  # as the kernel's OOM killer would
        import signal
        os.kill(os.getpid(), signal.SIGKILL)
    if args.hang_rank == rank:
        import time
        print(f"rank {rank} hangs on purpose", flush=True)
        time.sleep(3600)
    import jax
    # the store itself: a push sums over every process
    kv.init("check", sg.nd.array(np.zeros(3, np.float32)))
    kv.push("check", sg.nd.array(np.full(3, rank + 1, np.float32)))
    total = sg.nd.array(np.zeros(3, np.float32))
    kv.pull("check", out=total)
    print(f"rank {rank}: kv push summed to {total.asnumpy()[0]:g}", flush=True)
    n_dev = args.devices or len(jax.local_devices())
    ctx = [sg.cpu(i) for i in range(n_dev)]
    # sg.cpu(i) names this process's own devices
    assert all(c.jax_device.process_index == jax.process_index() for c in ctx)
    if args.batch % workers:
        print(f"--batch {args.batch} is not a multiple of {workers} processes", file=sys.stderr)
        return 2

    rng = np.random.default_rng(0)  # the same data in every process
    X = rng.standard_normal((args.samples, 10)).astype(np.float32)
    y = (X[:, :4].argmax(1)).astype(np.float32)

    def data_iter():
        if args.uneven:  # 3 batches in rank 0, 2 in rank 1: refused, not a hang
            n = 3 * 8 - 8 * rank
            return sg.io.NDArrayIter(X[:n], y[:n], batch_size=8)
        return sg.io.NDArrayIter(X, y, batch_size=args.batch // workers, shuffle=True, seed=7,
                                 part_index=rank, num_parts=workers)

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    # one folder for every process of a run: rank 0 writes, all read
    run_id = os.environ.get(distributed.ENV_COORDINATOR, str(os.getpid())).replace(":", "_")
    prefix = args.prefix or os.path.join(tempfile.gettempdir(), f"train_dist-{run_id}", "mlp")
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    opt = {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-4}
    mod = sg.mod.Module(net(sg), context=ctx)
    # validation: each process scores its part (its own metric, as MXNet's)
    val = sg.io.NDArrayIter(X[:32], y[:32], batch_size=args.batch // workers,
                            part_index=rank, num_parts=workers)
    mod.fit(data_iter(), eval_data=val, kvstore=kv, optimizer="sgd", optimizer_params=opt,
            initializer=sg.init.Xavier(), seed=1, num_epoch=args.epochs,
            epoch_end_callback=sg.callback.module_checkpoint(mod, prefix,
                                                             save_optimizer_states=True))
    arg, aux = mod.get_params()

    # every rank resumes from the first checkpoint rank 0 wrote
    again = sg.mod.Module.load(prefix, 1, load_optimizer_states=True, context=ctx)
    again.fit(data_iter(), kvstore=kv, optimizer="sgd", optimizer_params=opt,
              begin_epoch=1, num_epoch=args.epochs)
    arg2, aux2 = again.get_params()
    worst = max(float(np.max(np.abs(a[k].asnumpy() - b[k].asnumpy())))
                for a, b in ((arg, arg2), (aux, aux2)) for k in a)
    print(f"rank {rank}/{workers}: {n_dev} device(s), resumed run differs by {worst:.3g}",
          flush=True)
    # the three-call path too: forward_backward + update on two batches
    for _, batch in zip(range(2), data_iter()):
        again.forward_backward(batch)
        again.update()
    arg3, _ = again.get_params()
    if args.out and rank == 0:
        values = {f"arg:{k}": v.asnumpy() for k, v in arg.items()}
        values.update({f"aux:{k}": v.asnumpy() for k, v in aux.items()})
        values.update({f"resumed:{k}": v.asnumpy() for k, v in {**arg2, **aux2}.items()})
        values.update({f"threecall:{k}": v.asnumpy() for k, v in arg3.items()})
        with atomic_open(args.out, "wb") as f:
            np.savez(f, **values)
    return 0


if __name__ == "__main__":
    sys.exit(main())
