"""Recompute to a memory budget: memory against step time, per algorithm.

    symgraph bench recompute [--nets resnet-50,resnet-152,vgg16,inception-v3]
        [--batch 32] [--fractions 1,0.75,0.5,0.35,0.25]
        [--algorithms mirror,sqrt,solver] [--time-batch B] [--steps 2] [--rounds 2]
        [--no-time] [--no-checkpoint] [--mxnet MXNET.json] [--out DIR] [--quick]
        [--target cpu|h100|a100|a100-40gb|l4|FILE] [--compute-dtype float32|bfloat16]

For each zoo net at ``--batch``: the training plan without recompute gives
the internal bytes I0 and the rest of the total (arguments, gradients, aux
states and the momentum the step's SGD keeps) R. A budget of fraction f is ``R + f * I0``. For each algorithm
and fraction, the point is the program a ``Module(memory_budget=,
recompute=ALG)`` runs (``memory.budget.fit_program``): ``sg.plan(...,
budget=, recompute=ALG)`` picks the recompute set (or says nothing fits);
the step without recompute is taken where its program fits; where XLA's
program holds more than the budget the plan is made again to the excess.
Each program is compiled (not run) once and XLA's footprint read from
``memory_analysis()`` (temp + argument + output - alias). Step times come
from running the programs the points end on at ``--time-batch`` (default:
``--batch``; the program the Module picked at ``--batch``), each raced in
turn with the step without recompute in one process, best round kept, as
ratios to that step, one at a time, then let go.

Beside them, in the same run: the hand-written plain-JAX net
(``bench/handwritten.py``; VGG-16, ResNet-50, ResNet-152) with
``jax.checkpoint`` per block under each policy (``nothing_saveable``,
``checkpoint_dots``, ``dots_with_no_batch_dims_saveable``) and without, the
same two figures; and MXNet 1.9.1's mirror (``MXNET_BACKWARD_DO_MIRROR``)
from ``benchmarks/results/memory/mxnet.json`` (MXNet's storage blocks for
operator outputs, MiB, training at that batch), where it has the net.

With ``--target`` naming a GPU description (``h100``, ``a100``, ``l4``, a
GpuTargetConfig file; ``symgraph.targets``) every program is compiled
*deviceless* for that GPU: nothing runs, so there are no step times
(``--no-time`` is implied, and the output says so). Each budget then also
gets XLA:GPU's own rematerialization at the same limit: the step without
recompute compiled with ``xla_gpu_memory_limit_slop_factor`` set so XLA's
limit is the budget (``xla.gpu_remat``: the largest integer factor whose
limit is at most the budget), its footprint, whether it holds, and the
FLOPs of the instructions it recomputed (counted from the optimized HLO
text, as a share of the program without them); the ``jax.checkpoint`` rows
are compiled for the target too, with their FLOPs counted the same way.
``--compute-dtype bfloat16``: the Module's mixed precision (float32
weights, bfloat16 compute), planned as a Module plans it (``sg.plan(...,
compute_dtype=)``: the weights' bfloat16 copies planned); the hand-written
net runs wholly in it.

Writes ``results.json``, ``results.md`` and ``frontier.png`` atomically
under ``--out``, by default ``./bench-results/recompute`` under the current
folder (``recompute-quick`` with ``--quick``).
"""
from __future__ import annotations

import os
import platform
import sys
import time

from .common import BenchError, default_out
# the output (results.md, frontier.png) is recompute_report's; its helpers stay reachable here
from .recompute_report import _monotone, _vs_budget, markdown, write

__all__ = ["main", "parse_args", "measure_net", "race", "Runner", "markdown", "write",
           "_monotone", "_vs_budget"]

NETS = ("resnet-50", "resnet-152", "vgg16", "inception-v3")
# the state the step keeps (xla.training_step: SGD with momentum 0.9), in the budget
OPTIMIZER = "momentum"
FRACTIONS = (1.0, 0.75, 0.5, 0.35, 0.25)
COMPUTE_DTYPES = ("float32", "bfloat16", "float16")
MIB = 2 ** 20


def _floats(text: str) -> list:
    try:
        vals = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        vals = []
    if not vals or any(not 0 < v <= 1 for v in vals):
        raise ValueError(f"expected fractions in (0, 1] like 1,0.5, got {text!r}")
    return vals


def parse_args(argv):
    from ..cli import _Parser
    from ..memory.budget import ALGORITHMS
    p = _Parser(prog="symgraph bench recompute", description=__doc__.strip().split("\n\n")[0])
    p.add_argument("--nets", help=f"comma-separated zoo names (default {','.join(NETS)})")
    p.add_argument("--batch", type=int, help="batch of the memory figures (default 32)")
    p.add_argument("--image", type=int, help="image height and width (default: the net's own)")
    p.add_argument("--fractions", help="budgets as fractions of the no-recompute internal "
                   "bytes (default 1,0.75,0.5,0.35,0.25)")
    p.add_argument("--algorithms", help=f"comma-separated (default {','.join(ALGORITHMS)})")
    p.add_argument("--time-batch", type=int, help="batch of the step timings (default: --batch)")
    p.add_argument("--steps", type=int, default=2, help="steps per timing (default 2)")
    p.add_argument("--rounds", type=int, default=2, help="timing rounds, best kept (default 2)")
    p.add_argument("--no-time", action="store_true", help="memory figures only")
    p.add_argument("--no-checkpoint", action="store_true",
                   help="skip the hand-written net's jax.checkpoint policies")
    p.add_argument("--mxnet", help="MXNet's figures (default: "
                   "benchmarks/results/memory/mxnet.json in a checkout, if there)")
    p.add_argument("--out", help="results folder (default ./bench-results/recompute, with "
                   "--quick ./bench-results/recompute-quick, recompute-TARGET for a GPU "
                   "--target, under the current folder)")
    p.add_argument("--quick", action="store_true",
                   help="a smoke test: resnet-cifar-20 at batch 4, 32x32, fractions 1,0.5 "
                        "(where nothing needs recomputing); its figures mean nothing")
    p.add_argument("--target", help="the device the programs are compiled for: cpu (default) "
                   "or a GPU description (h100, a100, a100-40gb, l4, a GpuTargetConfig file) "
                   "compiled deviceless -- nothing runs, so --no-time is implied -- with "
                   "XLA:GPU's own rematerialization at each budget beside")
    p.add_argument("--compute-dtype", default="float32", choices=COMPUTE_DTYPES,
                   help="the Module's compute dtype (default float32)")
    args = p.parse_args(argv)
    from .. import targets
    try:
        args.target = targets.get(args.target)
    except targets.TargetError as err:
        p.error(f"--target: {err}")
    args.time_note = None
    if args.target.deviceless:
        args.time_note = (f"no step times: target {args.target.name} is a GPU description "
                          f"compiled deviceless, nothing runs (--no-time implied)")
        args.no_time = True
    try:
        args.fractions = _floats(args.fractions) if args.fractions else \
            ([1.0, 0.5] if args.quick else list(FRACTIONS))
    except ValueError as err:
        p.error(f"--fractions: {err}")
    args.nets = (args.nets.split(",") if args.nets else
                 ["resnet-cifar-20"] if args.quick else list(NETS))
    args.algorithms = args.algorithms.split(",") if args.algorithms else list(ALGORITHMS)
    bad = [a for a in args.algorithms if a not in ALGORITHMS]
    if bad:
        p.error(f"--algorithms: unknown {bad[0]!r}; choose from {', '.join(ALGORITHMS)}")
    if args.batch is None:
        args.batch = 4 if args.quick else 32
    if args.time_batch is None:
        args.time_batch = args.batch
    if min(args.batch, args.time_batch, args.steps, args.rounds) < 1:
        p.error("--batch, --time-batch, --steps and --rounds must be at least 1")
    if args.out is None:
        name = "recompute" if args.target.backend == "cpu" else \
            f"recompute-{os.path.basename(args.target.name)}"
        args.out = default_out(name, args.quick)
    if args.mxnet is None:
        here = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__)))), "benchmarks", "results", "memory", "mxnet.json")
        args.mxnet = here if os.path.exists(here) else None
    return args


# -- programs ---------------------------------------------------------------------
def _shapes(name: str, batch: int, image: int | None) -> dict:
    from ..models import data_shapes
    shapes = data_shapes(name, batch)
    if image:
        shapes = {k: (v[:2] + (image, image) if len(v) == 4 else v) for k, v in shapes.items()}
    return shapes


def _footprint(step) -> dict:
    from .. import xla
    m = xla.memory(step)
    if m is None:
        return {"temp": None, "footprint": None}
    return {"temp": m["temp"], "footprint": xla.footprint(m)}


def _concrete(tree, seed=0):
    """Arrays for a step's ShapeDtypeStruct arguments (small random floats)."""
    import jax
    import jax.numpy as jnp
    key = [jax.random.key(seed)]

    def make(x):
        if not isinstance(x, jax.ShapeDtypeStruct):
            return x
        if jnp.issubdtype(x.dtype, jnp.floating):
            key[0], k = jax.random.split(key[0])
            return (jax.random.normal(k, x.shape, jnp.float32) * 0.05).astype(x.dtype)
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            return jax.random.key(seed)
        return jnp.zeros(x.shape, x.dtype)
    return jax.tree.map(make, tree)


class Runner:
    """A compiled step and its arguments, run ``steps`` times with the
    donated arguments fed back from the outputs."""

    def __init__(self, step, feed):
        import jax
        self.fn = step.jit()
        args = list(_concrete(step.args))
        if step.args and isinstance(step.args[-1], jax.Array):
            args[-1] = step.args[-1]
        self.args, self.feed = args, feed
        self.run(1)  # compiles

    def run(self, steps: int) -> float:
        import jax
        t = time.perf_counter()
        for _ in range(steps):
            out = self.fn(*self.args)
            self.args = self.feed(self.args, out)
        jax.block_until_ready(self.args)
        return time.perf_counter() - t


def _feed_module(args, out):  # (params, states, aux, outs) for donated (0, 1, 2)
    return [out[0], out[1], out[2], *args[3:]]


def _feed_handwritten(args, out):  # (loss, params, mom, state) for donated (0, 1)
    return [out[1], out[2], out[3], *args[3:]]


def symgraph_step(net, shapes, names, segments="auto", target=None, compute_dtype="float32"):
    """The Module's training step for ``net`` with ``names`` recomputed
    (``segments`` as ``xla.training_step`` takes it), compiled for
    ``target`` in ``compute_dtype`` (float32 weights, as a Module keeps
    them)."""
    from .. import xla
    from ..memory import plan
    p = plan(net, shapes, train=True, verify=False, compute_dtype=compute_dtype)
    return xla.training_step(p, recompute=list(names), segments=segments, target=target)


def race(runners: list, rounds: int, steps: int) -> list:
    """Seconds per step of each runner, best of ``rounds`` rounds run in
    turn, so the machine's drift hits every program alike."""
    best = [None] * len(runners)
    for _ in range(rounds):
        for i, r in enumerate(runners):
            dt = r.run(steps) / steps
            best[i] = dt if best[i] is None else min(best[i], dt)
    return best


def _free():
    """Let go of a set's compiled programs and arguments before the next
    (ResNet-152 at batch 32 holds about 1 GB per set)."""
    import gc
    gc.collect()


# -- one net ----------------------------------------------------------------------
class _Programs:
    """XLA's figures of the step with each recompute set at ``--batch``,
    compiled once per set and let go (``footprint_of`` for
    ``fit_program``); ``sets`` keeps them by set, the empty one first."""

    def __init__(self, net, shapes, bar=None, label="", target=None, compute_dtype="float32"):
        self.net, self.shapes, self.bar, self.label = net, shapes, bar, label
        self.target, self.compute_dtype = target, compute_dtype
        self.sets: dict[tuple, dict] = {}

    def info(self, names: tuple) -> dict:
        if names not in self.sets:
            if self.bar is not None:
                self.bar.set_postfix_str(f"{self.label}: compiling program {len(self.sets) + 1}"
                                         f" ({len(names)} recomputed)")
            from ..xla import gpu_remat
            step = symgraph_step(self.net, self.shapes, names, target=self.target,
                                 compute_dtype=self.compute_dtype)
            fig = gpu_remat.program_figures(step)
            if fig["footprint"] is None:
                raise BenchError("bench recompute: XLA gives no memory_analysis() on this "
                                 "backend")
            info = {"names": list(names), "temp": fig["temp"], "footprint": fig["footprint"],
                    "hlo_flops": (fig.get("flops") or {}).get("total")}
            if not names:  # what XLA's own remat is compared against
                info["figures"] = {k: fig[k] for k in ("argument", "output", "alias", "flops")}
            # a budgeted Module runs the fused or the staged step, whichever holds less
            info["program"] = step.fn.choose(step.args)[0] if hasattr(step.fn, "choose") \
                else "fused"
            self.sets[names] = info
            del step
            _free()
        return self.sets[names]

    def footprint_of(self, p) -> int:
        return self.info(_names(p))["footprint"]


def _names(p) -> tuple:
    return tuple(sorted(r["name"] for r in p.recompute))


def _how(fit, first, base) -> str:
    """How a Module under the budget came to the program: the algorithm's
    plan, the step without recompute (where its program fits, also where no
    plan fits: ``first_plan``), or a plan made again to the excess."""
    if not fit.fits:
        return "over: the smallest compiled"
    if fit.plan is base and first is base:
        return "no recompute: no plan fits, its program does"
    if not fit.plan.recompute and first.recompute:
        return "no recompute: its program fits"
    replans = sum(1 for q, _ in fit.tried if q.recompute and q is not first)
    return f"planned again x{replans}" if replans else "the algorithm's plan"


def _budget_points(net, shapes, args, row, programs: _Programs, base) -> None:
    """``row['points']``: for every algorithm and fraction, the program a
    ``Module(memory_budget=, recompute=ALG)`` runs (``fit_program``: the
    algorithm's plan, the step without recompute where its program fits,
    or a plan made again where XLA holds more than the budget). ``base``:
    the plan without recompute."""
    import symgraph as sg
    from ..memory.budget import BudgetError, first_plan, fit_program
    internal0, rest = row["internal0"], row["rest"]
    dtype = getattr(args, "compute_dtype", "float32")
    for alg in args.algorithms:
        def plan_for(budget, alg=alg):
            if budget is None:
                return base
            return sg.plan(net, shapes, train=True, budget=budget, recompute=alg,
                           optimizer=OPTIMIZER, compute_dtype=dtype)
        for f in args.fractions:
            budget = int(rest + f * internal0)
            t = time.perf_counter()
            try:
                first = first_plan(budget, plan_for)
            except BudgetError as err:
                row["points"].append({"algorithm": alg, "fraction": f, "budget": budget,
                                      "fits": False, "smallest": err.smallest,
                                      "plan_s": round(time.perf_counter() - t, 3)})
                continue
            plan_s = round(time.perf_counter() - t, 3)
            fit = fit_program(first, budget, plan_for, programs.footprint_of)
            p = fit.plan
            first_info = programs.sets.get(_names(first), {})
            row["points"].append({
                "algorithm": alg, "fraction": f, "budget": budget, "fits": True,
                "set": _names(p), "how": _how(fit, first, base), "plan_total": p.total,
                "internal": p.internal["arena"], "recomputed": len(p.recompute),
                "extra_flops_share": p.extra_flops / max(p.step_flops, 1), "plan_s": plan_s,
                # the algorithm's own plan, and its program where it was compiled
                "first": {"plan_total": first.total, "recomputed": len(first.recompute),
                          "xla_footprint": first_info.get("footprint")},
                "programs_compiled": len(fit.tried)})


def _xla_remat_points(net, shapes, args, row, programs: _Programs) -> None:
    """``row['xla_remat']``: for every fraction, XLA:GPU's own
    rematerialization of the step without recompute at the budget
    (``xla.gpu_remat.at_budget``), compiled once per slop factor."""
    from ..xla import gpu_remat
    plain = programs.info(())["figures"]
    step = symgraph_step(net, shapes, (), target=args.target,
                         compute_dtype=args.compute_dtype)
    by_factor = {}
    for f in args.fractions:
        budget = int(row["rest"] + f * row["internal0"])
        s = gpu_remat.slop_factor_for(budget, args.target.memory, gpu_remat.io_bytes(plain))
        if programs.bar is not None:
            programs.bar.set_postfix_str(f"{programs.label}: XLA remat at {f:g} "
                                         f"(slop factor {s})")
        if s not in by_factor:
            by_factor[s] = gpu_remat.at_budget(step, budget, plain)
        r = dict(by_factor[s])
        r.update(fraction=f, budget=budget, holds=r["footprint"] <= budget)
        row["xla_remat"].append(r)
    del step
    _free()


def _time_step(name, net, names, program, args):
    """A Runner of the step with ``names`` recomputed at ``--time-batch``:
    the program (fused or staged) the Module picked at ``--batch``."""
    segments = True if program == "staged" else None
    return Runner(symgraph_step(net, _shapes(name, args.time_batch, args.image), names,
                                segments, compute_dtype=getattr(args, "compute_dtype",
                                                                "float32")), _feed_module)


def measure_net(name: str, args, bar=None) -> dict:
    """One net's row. The programs are compiled at ``--batch`` for XLA's
    figures (compile only, let go at once); then each program some point
    runs is timed at ``--time-batch`` against the step without recompute
    (kept for the whole net) and let go before the next, so memory holds
    two steps at a time, not all."""
    import symgraph as sg
    net = sg.models.get_model(name)
    shapes = _shapes(name, args.batch, args.image)
    target = getattr(args, "target", None)
    dtype = getattr(args, "compute_dtype", "float32")
    base = sg.plan(net, shapes, train=True, optimizer=OPTIMIZER, compute_dtype=dtype)
    row = {"net": name, "optimizer": OPTIMIZER, "batch": args.batch, "compute_dtype": dtype,
           "shapes": {k: list(v) for k, v in shapes.items()},
           "internal0": base.internal["arena"], "rest": base.total - base.internal["arena"],
           "points": [], "checkpoint": [], "xla_remat": []}
    programs = _Programs(net, shapes, bar, name, target, dtype)
    programs.info(())
    _budget_points(net, shapes, args, row, programs, base)
    if target is not None and target.backend == "gpu" and target.memory:
        _xla_remat_points(net, shapes, args, row, programs)
    run = [()] + list(dict.fromkeys(p["set"] for p in row["points"] if p["fits"]
                                    and p["set"]))
    timed = not args.no_time
    t0 = None  # the step without recompute: best of every race it ran in
    base_runner = None
    for i, names in enumerate(run if timed else []):
        info = programs.sets[names]
        if bar is not None:
            bar.set_postfix_str(f"{name}: timing program {i + 1} of {len(run)}")
        if not names:
            base_runner = _time_step(name, net, names, info["program"], args)
            t0 = info["step_s"] = race([base_runner], args.rounds, args.steps)[0]
            continue
        runner = _time_step(name, net, names, info["program"], args)
        dt, db = race([runner, base_runner], args.rounds, args.steps)
        info["step_s"], info["step_ratio"] = dt, dt / db
        t0 = min(t0, db)
        del runner
        _free()
    if not args.no_checkpoint:
        row["checkpoint"], seen = _checkpoint_rows(name, shapes, args, base_runner)
        t0 = min([t0, *seen]) if timed else None
    del base_runner
    _free()
    for p in row["points"]:
        if p["fits"]:
            info = programs.sets[p.pop("set")]
            p["xla_footprint"] = info["footprint"]
            p["xla_temp"] = info["temp"]
            plain_flops = programs.sets[()].get("hlo_flops")
            p["hlo_extra_flops_share"] = (
                None if info.get("hlo_flops") is None or not plain_flops
                else info["hlo_flops"] / plain_flops - 1)
            p["program"] = info["program"]
            p["step_s"] = info.get("step_s")
            p["step_ratio"] = 1.0 if timed and not info["names"] else info.get("step_ratio")
    row["programs_compiled"] = len(programs.sets)
    row["no_recompute"] = {"plan_total": base.total, "xla_footprint": programs.sets[()]["footprint"],
                           "xla_temp": programs.sets[()]["temp"], "step_s": t0,
                           "hlo_flops": programs.sets[()].get("hlo_flops")}
    return row


def _checkpoint_rows(name, shapes, args, base_runner) -> tuple:
    """The hand-written plain-JAX net under each ``jax.checkpoint`` policy:
    XLA's figures, and step times raced against the plain-JAX net without
    checkpoint and symgraph's step without recompute (``base_runner``).
    Returns the rows and the times ``base_runner`` took in those races."""
    from ..xla import gpu_remat
    from . import handwritten as hwmod
    if name not in hwmod.NETS:
        return [], []
    size = shapes["data"][-1]
    target = getattr(args, "target", None)
    cpu = target is None or target.backend == "cpu"
    dtype = getattr(args, "compute_dtype", "float32")
    rows, plain, seen, flops0 = [], None, [], None
    for policy in (None, *hwmod.REMAT_POLICIES):
        # the CPU scheduler's options only where the program is for the CPU
        step = hwmod.step(name, args.batch, size, scheduler=cpu, remat=policy, dtype=dtype)
        step.target = target
        fig = gpu_remat.program_figures(step)
        flops = (fig.get("flops") or {}).get("total")
        flops0 = flops if policy is None else flops0
        c = {"policy": policy or "none", "xla_temp": fig["temp"],
             "xla_footprint": fig["footprint"], "hlo_flops": flops,
             "hlo_extra_flops_share": None if flops is None or not flops0
             else flops / flops0 - 1}
        if not args.no_time:
            runner = Runner(step if args.time_batch == args.batch else
                            hwmod.step(name, args.time_batch, size, scheduler=True,
                                       remat=policy, dtype=dtype), _feed_handwritten)
            if plain is None:
                plain = runner
                dt, ds = race([runner, base_runner], args.rounds, args.steps)
                dh = dt
            else:
                dt, dh, ds = race([runner, plain, base_runner], args.rounds, args.steps)
            c.update(step_s=dt, step_ratio_to_plain_jax=dt / dh,
                     step_ratio_to_symgraph=dt / ds)
            seen.append(ds)
            del runner
        else:
            c.update(step_s=None, step_ratio_to_plain_jax=None, step_ratio_to_symgraph=None)
        rows.append(c)
        del step
        _free()
    del plain
    return rows, seen


def _mxnet(args, name, batch):
    if not args.mxnet:
        return None
    from .memory import load_mxnet
    mx = load_mxnet(args.mxnet)
    r = mx and mx["rows"].get((name, batch, "train"))
    if not r or "mirror" not in r:
        return None
    return {"both_mib": r.get("both"), "mirror_mib": r["mirror"],
            "what": "MXNet's storage blocks for operator outputs (internal), MiB"}


def main(argv=None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    import jax
    from tqdm import tqdm
    res = {"argv": " ".join(argv or []), "machine": f"{platform.machine()}, "
           f"{os.cpu_count()} cores, {jax.default_backend()}", "jax": jax.__version__,
           "date": time.strftime("%Y-%m-%d", time.gmtime()),
           "target": args.target.to_json(), "compute_dtype": args.compute_dtype,
           "time_note": args.time_note, "quick": args.quick, "rows": []}
    if args.time_note:
        print(f"bench recompute: {args.time_note}", file=sys.stderr)
    os.makedirs(args.out, exist_ok=True)
    with tqdm(args.nets, desc="bench recompute", unit="net", file=sys.stderr) as bar:
        for name in bar:
            row = measure_net(name, args, bar)
            # MXNet's figures are float32 training
            row["mxnet"] = _mxnet(args, name, args.batch) if args.compute_dtype == "float32" \
                else None
            res["rows"].append(row)
            write(res, args.out)  # after each net: a long run keeps what it measured
    if not res["rows"]:
        raise BenchError("bench recompute: no net measured")
    print(markdown(res))
    if args.quick:
        from .recompute_report import SMOKE_WHAT
        from .common import smoke_note
        print(smoke_note(SMOKE_WHAT))
    print(f"wrote {args.out}/results.json, results.md and frontier.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
