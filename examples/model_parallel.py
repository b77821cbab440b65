#!/usr/bin/env python3
"""Model parallel on one machine: a small CNN in two ctx_groups, trained by
a Module with ``group2ctxs`` on two (simulated) CPU devices, against the
same Module on one device.

    python examples/model_parallel.py                  # 5 steps, batch 32
    python examples/model_parallel.py --steps 20 --batch-size 64

On a CPU-only machine the script asks XLA for 3 simulated CPU devices
(``XLA_FLAGS=--xla_force_host_platform_device_count=3``), which must
happen before JAX starts, as here; a larger count already set is kept. It prints the largest difference
between the two runs' parameters, where each stage's arrays live, the
per-device memory plan, and the steps per second of both.
"""
from __future__ import annotations

import argparse
import sys
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.strip().split("\n\n")[0])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32)
    return p.parse_args(argv)


def two_stage_net(sg):
    """conv-BN-relu-pool twice on stage1, the classifier on stage2."""
    S = sg.sym
    x = S.Variable("data")
    with sg.AttrScope(ctx_group="stage1"):
        for i, f in enumerate((16, 32)):
            x = S.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=f, name=f"conv{i}")
            x = S.BatchNorm(x, name=f"bn{i}")
            x = S.Activation(x, act_type="relu", name=f"relu{i}")
            x = S.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max", name=f"pool{i}")
    with sg.AttrScope(ctx_group="stage2"):
        x = S.FullyConnected(S.Flatten(x, name="flat"), num_hidden=64, name="fc1")
        x = S.Activation(x, act_type="relu", name="relu_fc")
        x = S.FullyConnected(x, num_hidden=10, name="fc2")
        return S.SoftmaxOutput(x, name="softmax")


def train(sg, np, net, batches, batch_size, group2ctxs=None):
    mod = sg.mod.Module(net, context=sg.cpu(0), group2ctxs=group2ctxs)
    mod.bind([sg.io.DataDesc("data", (batch_size, 3, 32, 32))],
             [sg.io.DataDesc("softmax_label", (batch_size,))])
    mod.init_params(sg.init.Xavier(), seed=0)
    mod.init_optimizer(optimizer="sgd", optimizer_params={"learning_rate": 0.05,
                                                          "momentum": 0.9})
    mod.train_step(batches[0])  # compile
    t0 = time.perf_counter()
    for b in batches[1:]:
        mod.train_step(b)
    mod.get_outputs()[0].wait_to_read()
    rate = (len(batches) - 1) / (time.perf_counter() - t0)
    return mod, rate


def main(argv=None) -> int:
    args = parse_args(argv)
    import numpy as np
    import symgraph as sg
    from symgraph.context import simulate_cpu_devices
    simulate_cpu_devices(3)  # cpu(0) and the two stages' cpu(1), cpu(2)

    net = two_stage_net(sg)
    rng = np.random.default_rng(0)
    n = args.batch_size
    batches = [sg.io.DataBatch([rng.standard_normal((n, 3, 32, 32)).astype(np.float32)],
                               [rng.integers(0, 10, n).astype(np.float32)])
               for _ in range(args.steps + 1)]
    g2c = {"stage1": sg.cpu(1), "stage2": sg.cpu(2)}
    one, rate1 = train(sg, np, net, batches, n)
    two, rate2 = train(sg, np, net, batches, n, g2c)
    a1, a2 = one.get_params()[0], two.get_params()[0]
    diff = max(float(np.max(np.abs(a1[k].asnumpy() - a2[k].asnumpy()))) for k in a1)
    print(f"{args.steps} steps of batch {n}: largest parameter difference, two devices vs "
          f"one: {diff:.3g}")
    for k in ("conv0_weight", "bn0_moving_mean", "fc2_weight"):
        arr = two._params.get(k, two._aux.get(k))
        print(f"  {k:<18} on {sorted(d.id for d in arr.devices())}")
    plan = sg.plan(net, {"data": (n, 3, 32, 32)}, train=True, group2ctx=g2c)
    print(plan.devices.text("arena", plan.total))
    print(f"steps/s: one device {rate1:.1f}, two stages {rate2:.1f}")
    return 0 if diff < 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main())
