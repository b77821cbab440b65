"""The fast CIFAR-10 recipe: symgraph's epoch beside the same recipe written
by hand in plain JAX, the data path's share of a step, the step's memory.

    symgraph bench cifar [--batch 512] [--images 5120] [--rounds 3]
        [--dtype bfloat16] [--widths 64,128,256,512] [--memory-batch 512]
        [--budget 16GiB] [--no-memory] [--seed 0] [--out DIR] [--quick]

Both sides train ``resnet9-dawn`` (symgraph/models/resnet9.py; by hand:
symgraph/bench/handwritten_cifar.py, NHWC, ``jax.lax`` only) on the same
uint8 images (random pixels, ``--images`` of them, whole batches) with
the recipe: Nesterov momentum 0.9, weight decay 5e-4, the triangular
learning rate (peak 0.4), label smoothing 0.2, pad-crop/flip/8x8-cutout
augmentation on the device, ``--dtype`` compute with float32 weights and
a moving average of the weights (0.99**5 every 5 updates). An epoch is

- symgraph: ``Module.fit`` for one epoch of a
  ``DeviceAugmentIter(NDArrayIter(..., dtype=None))`` (its fused step,
  the prefetching thread and the per-batch training metric included);
- plain JAX: a loop over the uint8 NHWC set held on the device that
  gathers and augments each batch there in one jitted program (its own
  ``augment``), runs its jitted step (``jax.grad``, NAG, parameters
  donated) and the moving average every 5 steps, blocking only at the
  end of the epoch.

One warm-up epoch each (compiling), then ``--rounds`` rounds of one epoch
per side, alternating which goes first; the best epoch of each side is
kept (the median too). The ratio is symgraph's images/s over plain
JAX's (above 1: symgraph faster). The data path: for each side, the time
to produce one augmented batch on the device (gather, copy, augment,
blocked) beside the time of one step on a ready batch (blocked), each
the median of ``--probe`` tries; their ratio is the data path's share of
the step. The HLO of both steps (at the timing batch) is summarised by
op counts (convolutions, transposes, copies, fusions) to explain a gap.
On a GPU whose dense peak is known (H100, H200, A100:
``bench.common.PEAK_FLOPS``) the MFU of each side: symgraph's FLOP count
of the step over the best epoch's time per step over the peak. Both
sides' projected time for 10 and 24 epochs of CIFAR-10's 50,000 images
(the series' runs reach 94% in that range) is epochs x 50,000 / images/s.
On a GPU, ``symgraph bench cifar --batch 512 --images 50000 --rounds 10``
times the issue's ten epochs on random pixels.

Memory (off with ``--no-memory``), at ``--memory-batch`` (512): the
plan of symgraph's training step (``Module.plan_memory``, arena strategy,
with the NAG state), XLA's figures for the step compiled for this
machine's CPU and for the deviceless ``h100`` target
(``Module.compiled_memory(target='h100')``), the hand-written step's XLA
temp on the CPU, and the largest batch whose plan fits ``--budget``
(``sg.max_batch``, training with NAG, in the compute dtype; confirmed by
XLA for the h100 target unless ``--quick``).

Results: results.json and results.md in ``--out``, or by default
``./bench-results/cifar`` (``cifar-quick`` with ``--quick``, which sets
batch 16, 64 images, widths 8,16,32,64, 1 round, memory batch 16) under
the current folder; the committed ``benchmarks/results/cifar`` is
replaced only when ``--out`` names it.
"""
from __future__ import annotations

import argparse
import datetime
import re
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import symgraph as sg

from ..cli import UsageError
from . import handwritten_cifar as hc
from .common import default_out, peak_flops, write_results
from .train import _load, machine

LR, MOMENTUM, WD = 0.4, 0.9, 5e-4
CIFAR_TRAIN = 50_000  # CIFAR-10's training images
EMA_DECAY, EMA_EVERY = 0.99 ** 5, 5
HLO_OPS = ("convolution", "transpose", "copy", "fusion", "reduce-window", "select-and-scatter")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit 2 (via symgraph's CLI)
        raise UsageError(f"{self.prog}: {message}")


def _widths(text):
    try:
        w = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"four integers, got {text!r}") from None
    if len(w) != 4 or min(w) < 1:
        raise argparse.ArgumentTypeError(f"four positive integers, got {text!r}")
    return w


def parse_args(argv):
    p = _Parser(prog="symgraph bench cifar", description=__doc__.strip().split("\n\n")[0])
    p.add_argument("--batch", type=int, help="training batch (default 512)")
    p.add_argument("--images", type=int, help="images per epoch (default 10 batches)")
    p.add_argument("--rounds", type=int, help="timed epochs per side (default 3)")
    p.add_argument("--probe", type=int, default=None, help="tries of the data-path and step "
                   "timings (default 5)")
    p.add_argument("--dtype", default="bfloat16", help="compute dtype (default bfloat16)")
    p.add_argument("--widths", type=_widths, help="prep,layer1,layer2,layer3 channels "
                   "(default 64,128,256,512)")
    p.add_argument("--memory-batch", type=int, help="batch of the memory figures "
                   "(default 512)")
    p.add_argument("--budget", default="16GiB", help="budget of the max-batch search "
                   "(default 16GiB)")
    p.add_argument("--measures", default="auto", help="symgraph's memory measures "
                   "(Module(memory_measures=)): auto (default), none, or comma-separated names")
    p.add_argument("--no-memory", action="store_true", help="skip the memory figures")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="results folder (default ./bench-results/cifar, "
                   "cifar-quick with --quick)")
    p.add_argument("--quick", action="store_true", help="tiny defaults for a smoke test "
                   "(explicit options still apply)")
    args = p.parse_args(argv)
    defaults = dict(batch=16, images=64, rounds=1, probe=2, widths=(8, 16, 32, 64),
                    memory_batch=16) if args.quick else \
        dict(batch=512, images=None, rounds=3, probe=5, widths=hc.WIDTHS, memory_batch=512)
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    args.images = args.images or 10 * args.batch
    if min(args.batch, args.rounds, args.probe, args.memory_batch) < 1:
        p.error("--batch, --rounds, --probe and --memory-batch must be positive")
    if args.images < args.batch:
        p.error(f"--images {args.images} is less than one batch of {args.batch}")
    try:
        jnp.dtype(args.dtype)
    except TypeError:
        p.error(f"--dtype: unknown dtype {args.dtype!r}")
    if args.measures not in ("auto", "none"):
        args.measures = tuple(m.strip() for m in args.measures.split(",") if m.strip())
        bad = sorted(set(args.measures) - set(sg.measures.MEASURES))
        if bad:
            p.error(f"--measures: unknown {', '.join(bad)}; choose from "
                    f"{', '.join(sg.measures.MEASURES)}")
    args.out = args.out or default_out("cifar", args.quick)
    return args


def _symbol(widths):
    return sg.models.resnet9.get_symbol(10, widths=widths)


def _quiet():
    """A logger for the timed Module: fit's per-epoch lines and its notes
    on calling fit again (already bound, initialised) are not shown."""
    import logging
    log = logging.getLogger("symgraph.bench.cifar")
    log.setLevel(logging.ERROR)
    return log


def _median(xs):
    return float(statistics.median(xs))


def _timed(fn, tries: int) -> float:
    """Median seconds of ``fn()`` (which blocks), after one untimed call."""
    fn()
    out = []
    for _ in range(tries):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return _median(out)


def hlo_ops(text: str) -> dict:
    """Counts of HLO_OPS instructions in an optimized HLO module's text
    (fused computations' bodies included), and the instruction count."""
    counts = {op: len(re.findall(rf"= [^=\n]*? {re.escape(op)}\(", text)) for op in HLO_OPS}
    counts["instructions"] = len(re.findall(r"^\s+(?:ROOT )?%?[\w.\-]+ = ", text, re.M))
    return counts


# --------------------------------------------------------------------------
# the two sides
# --------------------------------------------------------------------------
class SymgraphSide:
    """Module.fit, one epoch at a time, over a DeviceAugmentIter."""

    def __init__(self, x, y, args, total_updates):
        from ..train import augment
        self.args = args
        self.it = augment.DeviceAugmentIter(
            sg.io.NDArrayIter(x, y, args.batch, shuffle=True, seed=args.seed,
                              last_batch_handle="discard", dtype=None), seed=args.seed)
        self.mod = sg.mod.Module(_symbol(args.widths), compute_dtype=args.dtype,
                                 seed=args.seed, ema_decay=EMA_DECAY, ema_every=EMA_EVERY,
                                 memory_measures=args.measures, logger=_quiet())
        self.sched = sg.lr_scheduler.PiecewiseLinearScheduler.triangle(total_updates, LR)
        self.epoch = 0
        self.mod.bind(self.it.provide_data, self.it.provide_label)
        self.mod.init_params(sg.init.Xavier(), seed=args.seed)

    def run_epoch(self):
        self.mod.fit(self.it, begin_epoch=self.epoch, num_epoch=self.epoch + 1,
                     optimizer="nag", optimizer_params={"learning_rate": LR,
                                                        "momentum": MOMENTUM, "wd": WD,
                                                        "lr_scheduler": self.sched})
        jax.block_until_ready(self.mod._params)
        self.epoch += 1

    def _next(self):
        try:
            return self.it.next()
        except StopIteration:  # the epoch's batches used up: the next epoch's
            self.it.reset()
            return self.it.next()

    def batch_fn(self):
        """Produces one augmented batch on the device (blocked)."""
        return lambda: jax.block_until_ready(
            self.mod.prepare_batch(self._next()).data[0].data)

    def step_fn(self):
        placed = self.mod.prepare_batch(self._next())

        def step():
            self.mod.train_step(placed)
            jax.block_until_ready(self.mod._outputs)
        return step

    def hlo(self) -> str:
        m = self.mod
        shapes = {d.name: jax.ShapeDtypeStruct(d.shape, d.dtype or "float32")
                  for d in m._data_shapes + m._label_shapes}
        from ..train.step import batch_signature
        prog = m._programs.step(batch_signature(shapes), m._optimizer)
        return prog.lower(m._params, m._opt_states, m._aux, m._fixed, shapes,
                          m._scalar(0.1), m._scalar(1), m._key).compile().as_text()


class PlainSide:
    """The hand-written loop (handwritten_cifar): no symgraph code runs."""

    def __init__(self, x, y, args, total_updates, arg_params, aux_params):
        self.args, self.total = args, total_updates
        # the uint8 NHWC set on the device, once; each batch gathered there
        self.x = jax.device_put(np.ascontiguousarray(x.transpose(0, 2, 3, 1)))
        self.y = jax.device_put(y.astype(np.float32))
        self.n = len(x)
        self.params, self.aux = hc.from_mxnet(arg_params, aux_params)
        self.mom = jax.tree.map(jnp.zeros_like, self.params)
        self.avg = None
        self.step = hc.make_step(args.batch, args.dtype, WD, MOMENTUM)
        self.batch = hc.make_batch("float32")
        self.ema = hc.ema_fn(EMA_DECAY)
        self.base = jax.random.key(args.seed)
        self.t, self.epoch = 0, 0
        self.nb = len(x) // args.batch

    def lr(self, t):  # the triangle: 0 -> LR at a fifth -> 0, t counted from 1
        peak = 0.2 * self.total
        return LR * (t / peak if t <= peak else max(0.0, (self.total - t) /
                                                    (self.total - peak)))

    def _batch(self, e, b, order):
        idx = order[b * self.args.batch:(b + 1) * self.args.batch]
        return self.batch(self.base, e, b, self.x, self.y, idx)

    def run_epoch(self):
        order = np.random.default_rng([self.args.seed, self.epoch]).permutation(self.n)
        for b in range(self.nb):
            xb, yb = self._batch(self.epoch, b, order)
            if self.avg is None:
                self.avg = jax.tree.map(jnp.copy, (self.params, self.aux))
            self.t += 1
            self.params, self.mom, self.aux, _ = self.step(
                self.params, self.mom, self.aux, xb, yb, jnp.float32(self.lr(self.t)))
            if self.t % EMA_EVERY == 0:
                self.avg = self.ema(self.avg, (self.params, self.aux))
        jax.block_until_ready((self.params, self.avg))
        self.epoch += 1

    def batch_fn(self):
        order = np.arange(self.n)
        return lambda: jax.block_until_ready(self._batch(0, 0, order))

    def step_fn(self):
        xb, yb = self._batch(0, 0, np.arange(self.n))

        def step():
            self.params, self.mom, self.aux, probs = self.step(
                self.params, self.mom, self.aux, xb, yb, jnp.float32(0.01))
            jax.block_until_ready(probs)
        return step

    def hlo(self) -> str:
        xb, yb = self._batch(0, 0, np.arange(self.n))
        return self.step.lower(self.params, self.mom, self.aux, xb, yb,
                               jnp.float32(0.01)).compile().as_text()


# --------------------------------------------------------------------------
# measurements
# --------------------------------------------------------------------------
def measure_speed(args) -> dict:
    rng = np.random.default_rng(args.seed)
    x = rng.integers(0, 256, (args.images, 3, 32, 32), dtype=np.uint8)
    y = rng.integers(0, 10, args.images).astype(np.float32)
    nb = args.images // args.batch
    total = (args.rounds + 1) * nb
    sym = SymgraphSide(x, y, args, total)
    arg, aux = sym.mod.get_params()
    plain = PlainSide(x, y, args, total, arg, aux)
    first = {}
    for name, side in (("symgraph", sym), ("plain", plain)):  # warm-up epochs: compiling
        t0 = time.perf_counter()
        side.run_epoch()
        first[name] = time.perf_counter() - t0
    times = {"symgraph": [], "plain": []}
    for r in range(args.rounds):
        order = (("symgraph", sym), ("plain", plain))
        for name, side in (order if r % 2 == 0 else order[::-1]):
            t0 = time.perf_counter()
            side.run_epoch()
            times[name].append(time.perf_counter() - t0)
    images = nb * args.batch
    row = {"batches_per_epoch": nb, "images_per_epoch": images, "first_epoch_s": first,
           "epoch_s": times}
    for name in times:
        row[f"{name}_images_per_s"] = images / min(times[name])
        row[f"{name}_images_per_s_median"] = images / _median(times[name])
    row["ratio"] = row["symgraph_images_per_s"] / row["plain_images_per_s"]
    row["ratio_median"] = row["symgraph_images_per_s_median"] / row["plain_images_per_s_median"]
    for name, side in (("symgraph", sym), ("plain", plain)):
        data_s = _timed(side.batch_fn(), args.probe)
        step_s = _timed(side.step_fn(), args.probe)
        row[f"{name}_data_ms"], row[f"{name}_step_ms"] = 1e3 * data_s, 1e3 * step_s
        row[f"{name}_data_share"] = data_s / step_s
        row[f"{name}_hlo"] = hlo_ops(side.hlo())
    row["symgraph_measures"] = list(sym.mod.program_info()["measures"])
    # MFU where the device's peak is known: symgraph's FLOP count of the step
    plan = sg.plan(_symbol(args.widths), {"data": (args.batch, 3, 32, 32),
                                          "softmax_label": (args.batch,)}, train=True)
    row["step_flops"] = int(plan.step_flops)
    peak = peak_flops(jax.devices()[0].device_kind, args.dtype)
    for name in times:
        per_step = args.batch / row[f"{name}_images_per_s"]
        row[f"{name}_mfu"] = row["step_flops"] / per_step / peak if peak else None
        # the series' runs: 10 to 24 epochs of CIFAR-10's 50,000 images
        row[f"{name}_projected_s"] = {str(e): e * CIFAR_TRAIN / row[f"{name}_images_per_s"]
                                      for e in (10, 24)}
    return row


def measure_memory(args) -> dict:
    b = args.memory_batch
    mod = sg.mod.Module(_symbol(args.widths), compute_dtype=args.dtype, ema_decay=EMA_DECAY,
                        ema_every=EMA_EVERY, memory_measures=args.measures)
    mod.bind([sg.io.DataDesc("data", (b, 3, 32, 32))],
             [sg.io.DataDesc("softmax_label", (b,))])
    mod.init_params(sg.init.Xavier())
    mod.init_optimizer(optimizer="nag", optimizer_params={"learning_rate": LR,
                                                          "momentum": MOMENTUM, "wd": WD})
    plan = mod.plan_memory(optimizer="nag")
    out = {"batch": b, "plan_arena": int(plan.internal["arena"]), "plan_total": int(plan.total),
           "plan_buckets": {k: int(v) for k, v in plan.buckets.items()}}

    def figures(m):
        return {k: m.get(k) for k in ("temp", "argument", "output", "alias")}
    out["xla_cpu"] = figures(mod.compiled_memory())
    out["xla_h100"] = figures(mod.compiled_memory(target="h100"))
    params, aux = hc.init(jax.random.key(0), args.widths)
    step = hc.make_step(b, args.dtype, WD, MOMENTUM)
    shaped = jax.eval_shape(lambda: (params, params, aux))
    plain = step.lower(*shaped, jax.ShapeDtypeStruct((b, 32, 32, 3), jnp.float32),
                       jax.ShapeDtypeStruct((b,), jnp.float32),
                       jax.ShapeDtypeStruct((), jnp.float32)).compile().memory_analysis()
    out["plain_xla_cpu_temp"] = int(plain.temp_size_in_bytes)
    dtypes = {n: args.dtype for n in _symbol(args.widths).list_arguments()
              if n not in ("data", "softmax_label")}
    r = sg.max_batch(_symbol(args.widths), {"data": (1, 3, 32, 32), "softmax_label": (1,)},
                     args.budget, train=True, optimizer="nag", xla=not args.quick,
                     target="h100", progress=False, dtypes=dtypes)
    out["max_batch"] = {"budget": int(r.budget), "batch": int(r.batch), "plan_total": int(r.total),
                        "xla": r.xla, "confirmed_by_xla": not args.quick, "target": "h100"}
    return out


def markdown(res: dict, command: str) -> str:
    c, s = res["config"], res["speed"]
    mib = 2 ** 20
    lines = [f"# Fast CIFAR-10 recipe: symgraph beside plain JAX ({res['date']})", "",
             f"`{command}`", "",
             f"{res['device_kind']}; {res['machine'].get('cpu', res['machine']['machine'])}; "
             f"load average {res['load_average_1min']['start']} at start, "
             f"{res['load_average_1min']['end']} at the end (other work shares the cores)", "",
             f"resnet9-dawn widths {','.join(map(str, c['widths']))}, batch {c['batch']}, "
             f"{s['images_per_epoch']} images per epoch, {c['dtype']} compute, "
             f"{c['rounds']} timed epoch(s) per side (best / median); symgraph's memory "
             f"measures: {', '.join(s['symgraph_measures']) or 'none'}", "",
             "| | symgraph | plain JAX | ratio |", "|---|---|---|---|",
             f"| images/s, best epoch | {s['symgraph_images_per_s']:.1f} | "
             f"{s['plain_images_per_s']:.1f} | {s['ratio']:.3f} |",
             f"| images/s, median epoch | {s['symgraph_images_per_s_median']:.1f} | "
             f"{s['plain_images_per_s_median']:.1f} | {s['ratio_median']:.3f} |",
             f"| first epoch (compiling), s | {s['first_epoch_s']['symgraph']:.1f} | "
             f"{s['first_epoch_s']['plain']:.1f} | |",
             f"| one step on a ready batch, ms | {s['symgraph_step_ms']:.1f} | "
             f"{s['plain_step_ms']:.1f} | |",
             f"| producing a batch, ms | {s['symgraph_data_ms']:.2f} | "
             f"{s['plain_data_ms']:.2f} | |",
             f"| data path / step | {s['symgraph_data_share']:.2%} | "
             f"{s['plain_data_share']:.2%} | |"]
    if "step_flops" in s:
        lines += [f"| MFU ({s['step_flops'] / 1e9:.1f} GFLOP a step) | "
                  + " | ".join("-" if s[f"{n}_mfu"] is None else f"{s[f'{n}_mfu']:.1%}"
                               for n in ("symgraph", "plain")) + " | |"]
        lines += [f"| projected {e} epochs of 50,000 images, s | "
                  + " | ".join(f"{s[f'{n}_projected_s'][str(e)]:,.1f}"
                               for n in ("symgraph", "plain"))
                  + " | |" for e in (10, 24)]
    for op in (*HLO_OPS, "instructions"):
        lines.append(f"| HLO `{op}` | {s['symgraph_hlo'][op]} | {s['plain_hlo'][op]} | |")
    m = res.get("memory")
    if m:
        lines += ["", f"Memory of the training step at batch {m['batch']} (MiB):", "",
                  "| figure | MiB |", "|---|---|",
                  f"| symgraph plan, arena (internal) | {m['plan_arena'] / mib:.1f} |",
                  f"| symgraph plan, total (with weights, gradients, NAG state) | "
                  f"{m['plan_total'] / mib:.1f} |",
                  f"| XLA temp, CPU | {m['xla_cpu']['temp'] / mib:.1f} |",
                  f"| XLA temp, h100 (deviceless) | {m['xla_h100']['temp'] / mib:.1f} |",
                  f"| plain JAX step, XLA temp, CPU | {m['plain_xla_cpu_temp'] / mib:.1f} |",
                  "", f"Largest batch in {m['max_batch']['budget'] / 2 ** 30:.0f} GiB "
                  f"(training, NAG, {c['dtype']}): **{m['max_batch']['batch']}** (plan total "
                  f"{m['max_batch']['plan_total'] / mib:.1f} MiB"
                  + (f", XLA h100 {m['max_batch']['xla'] / mib:.1f} MiB)"
                     if m['max_batch']['xla'] else ", plans only)")]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    load_at_start = _load()
    dev = jax.devices()[0]
    speed = measure_speed(args)
    print(f"symgraph {speed['symgraph_images_per_s']:.1f} images/s, plain JAX "
          f"{speed['plain_images_per_s']:.1f} images/s, ratio {speed['ratio']:.3f} "
          f"(median {speed['ratio_median']:.3f}); data path / step: symgraph "
          f"{speed['symgraph_data_share']:.2%}, plain {speed['plain_data_share']:.2%}",
          flush=True)
    memory = None if args.no_memory else measure_memory(args)
    if memory:
        print(f"batch {memory['batch']}: plan arena {memory['plan_arena'] / 2 ** 20:.1f} MiB, "
              f"XLA temp cpu {memory['xla_cpu']['temp'] / 2 ** 20:.1f} MiB, h100 "
              f"{memory['xla_h100']['temp'] / 2 ** 20:.1f} MiB; max batch in {args.budget}: "
              f"{memory['max_batch']['batch']}", flush=True)
    res = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "device_kind": f"{dev.device_kind} ({dev.platform})", "machine": machine(),
           "load_average_1min": {"start": load_at_start, "end": _load()},
           "versions": {"symgraph": sg.__version__, "jax": jax.__version__},
           "config": {"batch": args.batch, "images": args.images, "rounds": args.rounds,
                      "probe": args.probe, "dtype": args.dtype, "widths": list(args.widths),
                      "memory_batch": args.memory_batch, "budget": args.budget,
                      "measures": args.measures if isinstance(args.measures, str)
                      else list(args.measures),
                      "seed": args.seed, "quick": args.quick, "lr": LR, "momentum": MOMENTUM,
                      "wd": WD, "ema": [EMA_DECAY, EMA_EVERY]},
           "speed": speed, "memory": memory}
    write_results(args.out, res, markdown(res, "symgraph bench cifar " + " ".join(argv)))
    print(f"wrote {args.out}/results.md", flush=True)
    return 0
