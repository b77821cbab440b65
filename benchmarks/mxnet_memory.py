#!/usr/bin/env python3
"""MXNet 1.9.1's memory plan for the zoo nets: the figure symgraph's plan sits beside.

MXNet is never a dependency of symgraph. Run this script with MXNet's own
interpreter, made outside the repository:

    python -m venv MXVENV && MXVENV/bin/pip install mxnet==1.9.1 numpy==1.23.5
    MXVENV/bin/python benchmarks/mxnet_memory.py [--nets vgg16,googlenet ...]
        [--batch 32,64,128] [--out benchmarks/results/memory/mxnet.json]

The nets are the very files ``symgraph zoo NAME -o NAME.json`` writes
(made with ``--python``, an interpreter that has symgraph and its
dependencies), loaded with ``mx.sym.load``: the same graphs, and a check that
symgraph's JSON loads in real MXNet. For each net the script also compares
MXNet's ``infer_shape`` of every parameter and aux state with symgraph's.

For each net, batch size and mode it ``simple_bind``s the symbol
(``MXNET_SUBGRAPH_BACKEND=NONE``, so the CPU build does not fuse
conv+BN+ReLU before planning) and reads ``Total N MB allocated`` from
``executor.debug_str()``, under several planner settings:

  both      the default: inplace, then co-share with NNVM_EXEC_MATCH_RANGE=16
  exact     NNVM_EXEC_MATCH_RANGE=1: co-share only between equal sizes
  inplace   NNVM_EXEC_MATCH_RANGE=0: no co-sharing. Inplace still happens --
            MXNet's planner applies it before it looks at the match range
  mirror    (training) MXNET_BACKWARD_DO_MIRROR=1, its recompute option
  write_all (training) the default settings with simple_bind's default
            grad_req='write' for every argument, data and label included

Training binds ask for the parameter gradients only (grad_req 'null' for
data and label), as Module.fit binds and as symgraph's training plan is
made, except ``write_all``.

Binding plans memory but does not touch it (MXNet allocates on first use),
so even the largest configurations cost little RAM here. ``--facts`` runs
small nets whose figures can be worked out by hand, to check what the
figure counts.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import re
import subprocess
import sys
import tempfile

# before mxnet is imported: no fusion of conv+BN+ReLU ahead of planning
os.environ["MXNET_SUBGRAPH_BACKEND"] = "NONE"

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_NETS = ["alexnet", "vgg16", "googlenet", "inception-bn", "inception-v3", "resnet-50",
                "resnet-152", "resnet-v1-50", "vgg16-bn", "resnet-18"]
DEFAULT_OUT = os.path.join("benchmarks", "results", "memory", "mxnet.json")
TOTAL_RE = re.compile(r"Total (\d+) MB allocated")

# setting name -> environment for the bind (None: unset, MXNet's default)
SETTINGS = {
    "both": {"NNVM_EXEC_MATCH_RANGE": None, "MXNET_BACKWARD_DO_MIRROR": None},
    "exact": {"NNVM_EXEC_MATCH_RANGE": "1", "MXNET_BACKWARD_DO_MIRROR": None},
    "inplace": {"NNVM_EXEC_MATCH_RANGE": "0", "MXNET_BACKWARD_DO_MIRROR": None},
    "mirror": {"NNVM_EXEC_MATCH_RANGE": None, "MXNET_BACKWARD_DO_MIRROR": "1"},
    "write_all": {"NNVM_EXEC_MATCH_RANGE": None, "MXNET_BACKWARD_DO_MIRROR": None},
}
TRAIN_ONLY = ("mirror", "write_all")


def _set_env(env: dict) -> None:
    # MXNet reads these with getenv at every bind, so changing os.environ
    # (which calls putenv) between binds takes effect in this process
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def planned_mib(mx, net, shapes: dict, train: bool, setting: str = "both",
                type_dict=None) -> int:
    """MXNet's ``Total N MB allocated`` for one bind of ``net``."""
    _set_env(SETTINGS[setting])
    try:
        if not train:
            grad_req = "null"
        elif setting == "write_all":
            grad_req = "write"
        else:  # the parameters' gradients only, as Module.fit binds
            grad_req = {n: ("null" if n in shapes else "write") for n in net.list_arguments()}
        ex = net.simple_bind(mx.cpu(), grad_req=grad_req, type_dict=type_dict, **shapes)
        found = TOTAL_RE.findall(ex.debug_str())
        if not found:
            raise RuntimeError("no 'Total N MB allocated' line in executor.debug_str()")
        return int(found[-1])
    finally:
        _set_env(SETTINGS["both"])


# --------------------------------------------------------------------------
# facts: what the figure counts, on nets small enough to work out by hand
# --------------------------------------------------------------------------
def check_facts(mx) -> dict:
    """Each entry: the figure MXNet reports, the figure worked out by hand
    under the stated hypothesis, and whether they agree."""
    n, w = 1024, 1024  # every hidden activation is n*w*4 bytes = 4 MiB
    data = mx.sym.Variable("data")
    x = data
    for i in range(3):
        x = mx.sym.FullyConnected(x, num_hidden=w, name=f"fc{i}")
        x = mx.sym.Activation(x, act_type="relu", name=f"relu{i}")
    x = mx.sym.FullyConnected(x, num_hidden=10, name="fc_out")
    net = mx.sym.SoftmaxOutput(x, name="softmax")
    shapes = {"data": (n, w), "softmax_label": (n,)}
    facts = {}

    def record(key, got, want, why):
        facts[key] = {"mxnet_mib": got, "expected_mib": want, "ok": got == want, "why": why}

    # three 4 MiB activations (ReLU in place on its FC output), 40 KiB of
    # scores; weights (3 x 4 MiB) and data (4 MiB) would add 16 if counted
    record("infer_no_coshare", planned_mib(mx, net, shapes, False, "inplace"), 12,
           "NNVM_EXEC_MATCH_RANGE=0: 3 FC outputs of 4 MiB, each ReLU in place (inplace is "
           "still on), scores 40 KiB; floored. Data and weights (16 MiB) are not counted.")
    record("infer_default", planned_mib(mx, net, shapes, False, "both"), 8,
           "default: fc2 reuses fc0's freed 4 MiB block, so two blocks of 4 MiB")
    os.environ["MXNET_EXEC_ENABLE_INPLACE"] = "false"
    try:
        got = planned_mib(mx, net, shapes, False, "inplace")
    finally:
        os.environ.pop("MXNET_EXEC_ENABLE_INPLACE", None)
    record("enable_inplace_env_ignored", got, 12,
           "MXNET_EXEC_ENABLE_INPLACE=false changes nothing: no code in 1.9.1 reads it")
    # float64 data: the planner still assumes 4 bytes per element
    record("infer_float64_counts_4_bytes",
           planned_mib(mx, net, shapes, False, "inplace",
                       type_dict={"data": "float64"}), 12,
           "float64 net: the same 12 MiB, not 24 -- every element is counted as 4 bytes")
    # training, no co-share: the three forward activations stay live; the
    # backward makes three 4 MiB input gradients (each ReLU backward in
    # place); fc0's input gradient is the data gradient, an argument
    # gradient, which lives outside the plan like the weight gradients
    _set_env(SETTINGS["inplace"])
    try:
        ex = net.simple_bind(mx.cpu(), grad_req="write", **shapes)
        got = int(TOTAL_RE.findall(ex.debug_str())[-1])
    finally:
        _set_env(SETTINGS["both"])
    record("train_no_coshare", got, 24,
           "training, NNVM_EXEC_MATCH_RANGE=0: 3 activations + 3 backward input gradients of "
           "4 MiB; argument gradients (weights, data) are not counted")
    _set_env(SETTINGS["inplace"])
    try:
        ex = net.simple_bind(mx.cpu(), grad_req={"data": "null", "softmax_label": "null",
                                                 **{k: "write" for k in net.list_arguments()
                                                    if k not in shapes}}, **shapes)
        got = int(TOTAL_RE.findall(ex.debug_str())[-1])
    finally:
        _set_env(SETTINGS["both"])
    record("train_unrequested_output_counted", got, 28,
           "as above with no data gradient requested: fc0's backward still writes its input "
           "gradient into a planned 4 MiB block, freed at once but counted")
    return facts


# --------------------------------------------------------------------------
# the zoo nets, exported by symgraph
# --------------------------------------------------------------------------
_SHAPES_PROGRAM = r"""
import json, sys
import symgraph.models as m
out = {}
for name in sys.argv[1:]:
    info = m.model_info(name)
    net = m.get_model(name)
    shape = info.image_shape
    a, o, x = net.infer_shape(data=(1, *shape))
    out[name] = {"image_shape": list(shape),
                 "args": {k: list(v) for k, v in zip(net.list_arguments(), a)},
                 "aux": {k: list(v) for k, v in zip(net.list_auxiliary_states(), x)},
                 "outputs": [list(v) for v in o]}
print(json.dumps(out))
"""


def export_nets(python: str, nets: list, folder: str) -> dict:
    """Writes ``folder/NAME.json`` with ``symgraph zoo`` and returns
    symgraph's own shapes of every argument and aux state (batch 1)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("MXNET_SUBGRAPH_BACKEND", None)
    for name in nets:
        subprocess.run([python, "-m", "symgraph.cli", "zoo", name, "-o",
                        os.path.join(folder, f"{name}.json")], check=True, env=env, cwd=REPO)
    res = subprocess.run([python, "-c", _SHAPES_PROGRAM, *nets], check=True, env=env,
                         cwd=REPO, capture_output=True, text=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def compare_shapes(mx, net, ours: dict) -> dict:
    """MXNet's infer_shape beside symgraph's, for every argument and aux state."""
    a, o, x = net.infer_shape(data=(1, *ours["image_shape"]))
    theirs_args = {k: list(v) for k, v in zip(net.list_arguments(), a)}
    theirs_aux = {k: list(v) for k, v in zip(net.list_auxiliary_states(), x)}
    mismatches = []
    for kind, mine, theirs in (("argument", ours["args"], theirs_args),
                               ("aux", ours["aux"], theirs_aux)):
        for k in sorted(set(mine) | set(theirs)):
            if mine.get(k) != theirs.get(k):
                mismatches.append({"kind": kind, "name": k, "symgraph": mine.get(k),
                                   "mxnet": theirs.get(k)})
    if [list(v) for v in o] != ours["outputs"]:
        mismatches.append({"kind": "output", "name": "outputs", "symgraph": ours["outputs"],
                           "mxnet": [list(v) for v in o]})

    def count(d):
        return sum(_prod(v) for k, v in d.items() if k != "data" and not k.endswith("_label"))

    return {"agree": not mismatches, "mismatches": mismatches[:20],
            "num_arguments": len(theirs_args), "num_aux": len(theirs_aux),
            "parameters_mxnet": count(theirs_args), "parameters_symgraph": count(ours["args"])}


def _prod(v) -> int:
    r = 1
    for d in v:
        r *= int(d)
    return r


def machine_info(mx) -> dict:
    mem = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    import numpy
    return {"platform": platform.platform(), "machine": platform.machine(),
            "processor": platform.processor() or None, "cpu_count": os.cpu_count(),
            "memory_gib": mem, "python": platform.python_version(),
            "mxnet": mx.__version__, "numpy": numpy.__version__,
            "mxnet_features": sorted(f.name for f in mx.runtime.Features().values()
                                     if f.enabled)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nets", default=",".join(DEFAULT_NETS),
                        help="comma-separated zoo names (default: %(default)s)")
    parser.add_argument("--batch", default="32,64,128", help="batch sizes (default: %(default)s)")
    parser.add_argument("--out", default=os.path.join(REPO, DEFAULT_OUT),
                        help="results JSON (default: benchmarks/results/memory/mxnet.json)")
    parser.add_argument("--python", default="python3",
                        help="an interpreter with symgraph installed, to export the nets "
                             "(default: %(default)s from PATH)")
    parser.add_argument("--json-dir", help="keep the exported symbol files here")
    parser.add_argument("--facts", action="store_true", help="only run the facts check")
    args = parser.parse_args(argv)

    import mxnet as mx
    result = {"tool": "benchmarks/mxnet_memory.py",
              "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
              "machine": machine_info(mx),
              "env": {"MXNET_SUBGRAPH_BACKEND": "NONE"},
              "unit": "MiB as MXNet prints it: 'Total N MB allocated' = planned bytes >> 20",
              "settings": {"both": "default (inplace + co-share, NNVM_EXEC_MATCH_RANGE=16)",
                           "exact": "NNVM_EXEC_MATCH_RANGE=1",
                           "inplace": "NNVM_EXEC_MATCH_RANGE=0 (inplace only, no co-share)",
                           "mirror": "MXNET_BACKWARD_DO_MIRROR=1",
                           "write_all": "grad_req 'write' for every argument (others: "
                                        "parameters only, data and label 'null')"},
              "facts": check_facts(mx)}
    for k, v in result["facts"].items():
        print(f"fact {k}: MXNet {v['mxnet_mib']} MiB, expected {v['expected_mib']} "
              f"-> {'ok' if v['ok'] else 'DIFFERENT'}", file=sys.stderr)
    if args.facts:
        print(json.dumps(result["facts"], indent=1))
        return 0

    nets = [n.strip() for n in args.nets.split(",") if n.strip()]
    batches = [int(b) for b in args.batch.split(",") if b.strip()]
    folder = args.json_dir or tempfile.mkdtemp(prefix="symgraph-zoo-")
    os.makedirs(folder, exist_ok=True)
    ours = export_nets(args.python, nets, folder)
    result["nets"], result["rows"] = {}, []
    for name in nets:
        net = mx.sym.load(os.path.join(folder, f"{name}.json"))
        info = {"image_shape": ours[name]["image_shape"], "json_loads": True,
                "shapes": compare_shapes(mx, net, ours[name])}
        result["nets"][name] = info
        print(f"{name}: loads, shapes agree: {info['shapes']['agree']}", file=sys.stderr)
        for batch in batches:
            shapes = {"data": (batch, *ours[name]["image_shape"]), "softmax_label": (batch,)}
            for mode in ("train", "infer"):
                row = {"net": name, "batch": batch, "mode": mode}
                for setting in SETTINGS:
                    if mode == "infer" and setting in TRAIN_ONLY:
                        continue
                    row[setting] = planned_mib(mx, net, shapes, mode == "train", setting)
                result["rows"].append(row)
                print(f"  batch {batch} {mode}: " + ", ".join(
                    f"{k} {v}" for k, v in row.items() if k not in ("net", "batch", "mode")),
                    file=sys.stderr)
    text = json.dumps(result, indent=1) + "\n"
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    # written atomically (this script cannot import symgraph.util in MXNet's venv)
    fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=".mxnet.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, args.out)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
