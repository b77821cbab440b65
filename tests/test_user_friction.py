"""What a new user met (issue 29), each tried as a user would: the example
scripts in a fresh process on a plain CPU, the docs' snippet as written,
the quick benchmarks' output, the plan report and JSON against what was
asked, and docs/cli.md against ``--help`` and a real ``plan --json``."""
import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

import symgraph as sg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def doc(name):
    with open(os.path.join(ROOT, "docs", name), encoding="utf-8") as f:
        return f.read()


def fresh_env():
    """A user's shell: CPU only, no device count asked of XLA."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    env.pop("XLA_FLAGS", None)
    return env


def run(argv, cwd, timeout=300):
    return subprocess.run(argv, cwd=cwd, env=fresh_env(), capture_output=True, text=True,
                          timeout=timeout)


def symgraph_cli(*argv, cwd):
    return run([sys.executable, "-m", "symgraph.cli", *argv], cwd)


def example(name, *argv, cwd):
    return run([sys.executable, os.path.join(ROOT, "examples", name), *argv], cwd)


# --------------------------------------------------------------------------
# 1. devices: the examples simulate what they need; the error says how
# --------------------------------------------------------------------------
def test_train_dist_with_devices_4_runs_on_a_one_device_cpu(tmp_path):
    r = example("train_dist.py", "--devices", "4", "--epochs", "2", "--samples", "32",
                "--prefix", str(tmp_path / "ckpt" / "mlp"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "rank 0/1: 4 device(s), resumed run differs by 0" in r.stdout


def test_model_parallel_example_runs_on_a_one_device_cpu(tmp_path):
    r = example("model_parallel.py", "--steps", "1", "--batch-size", "4", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "largest parameter difference, two devices vs one" in r.stdout
    assert "fc2_weight         on [2]" in r.stdout


def test_a_missing_cpu_device_names_the_xla_flags_way():
    code = "import symgraph as sg; sg.cpu(5).jax_device"
    r = run([sys.executable, "-c", code], ROOT)
    assert r.returncode == 1, r.stderr[-2000:]
    last, = [ln for ln in r.stderr.splitlines() if ln.startswith("symgraph.errors.ContextError")]
    assert last.startswith("symgraph.errors.ContextError: cpu(5) does not exist")
    assert "XLA_FLAGS=--xla_force_host_platform_device_count=6" in last
    assert "simulate_cpu_devices" in last


def test_simulate_cpu_devices_keeps_a_larger_count_and_refuses_once_jax_started():
    code = """
import os
os.environ['XLA_FLAGS'] = '--xla_dump_to=/nonexistent-never-written --xla_force_host_platform_device_count=5'
from symgraph.context import simulate_cpu_devices
from symgraph.errors import ContextError
assert simulate_cpu_devices(3) == 5              # more already asked: kept
os.environ['XLA_FLAGS'] = '--xla_force_host_platform_device_count=2'
assert simulate_cpu_devices(4) == 4
assert os.environ['XLA_FLAGS'] == '--xla_force_host_platform_device_count=4'
import jax
assert len(jax.devices('cpu')) == 4
try:
    simulate_cpu_devices(8)
except ContextError as err:
    assert 'JAX has started with 4' in str(err), err
else:
    raise SystemExit('no error')
print('ok')
"""
    r = run([sys.executable, "-c", code], ROOT)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_the_ctx_group_snippet_of_training_md_runs_as_written(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", doc("training.md"), re.S)
    snippet, = [b for b in blocks if "ctx_group='stage1'" in b]
    check = ("\nimport numpy as np\n"
             "assert sorted(ex.arg_dict['conv_weight'].asnumpy().shape) == [3, 3, 3, 16]\n"
             "print('ran')\n")
    r = run([sys.executable, "-c", snippet + check], tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().endswith("ran")


# --------------------------------------------------------------------------
# 2. viz_examples: argparse, and the tracked pictures left alone
# --------------------------------------------------------------------------
def test_viz_examples_help_makes_no_folder(tmp_path):
    r = example("viz_examples.py", "--help", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: viz_examples.py") and "--docs" in r.stdout
    assert os.listdir(tmp_path) == []
    bad = example("viz_examples.py", "--colour", cwd=tmp_path)
    assert bad.returncode == 2 and "unrecognized arguments: --colour" in bad.stderr
    assert os.listdir(tmp_path) == []


def _svg_texts(path):
    return [t.text for t in ET.parse(path).getroot().iter("{http://www.w3.org/2000/svg}text")]


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_viz_examples_draws_into_the_current_folder_and_the_committed_ones_match(tmp_path):
    images = os.path.join(ROOT, "docs", "images")
    before = {n: os.stat(os.path.join(images, n)).st_mtime_ns for n in os.listdir(images)}
    r = example("viz_examples.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    after = {n: os.stat(os.path.join(images, n)).st_mtime_ns for n in os.listdir(images)}
    assert after == before  # the tracked pictures are untouched
    drawn = sorted(os.listdir(tmp_path / "viz-examples"))
    assert drawn == sorted(before)
    # what the pictures say (labels, shapes, bytes) is what the code draws now;
    # Graphviz's coordinates may differ from one version to another
    for name in drawn:
        if name.endswith(".svg"):
            assert _svg_texts(tmp_path / "viz-examples" / name) == \
                _svg_texts(os.path.join(images, name)), \
                f"docs/images/{name} is stale: python examples/viz_examples.py --docs"


# --------------------------------------------------------------------------
# 3. quick benchmarks: meaningful at their size, or plainly a smoke run
# --------------------------------------------------------------------------
def test_bench_io_quick_says_it_is_a_smoke_run_and_draws_no_scaling_from_one_count(tmp_path):
    pytest.importorskip("simplejpeg")
    r = symgraph_cli("bench", "io", "--quick", "--images", "32", "--no-train", "--out",
                     "io", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "SMOKE RUN (--quick)" in r.stdout and "mean nothing" in r.stdout
    res = json.loads((tmp_path / "io" / "results.json").read_text())
    assert len(res["threads"]) == 1 and res["quick"] is True
    assert all(row["scaling_efficiency"] is None for row in res["rows"])
    md = (tmp_path / "io" / "results.md").read_text()
    assert "SMOKE RUN" in md and "scaling" not in md


def test_bench_io_scaling_divides_two_thread_counts():
    from symgraph.bench.io import markdown
    res = {"threads": [1, 2], "mxnet": False, "argv": "", "machine": "m", "date": "d",
           "load_average_before": [0.0], "load_average_after": [0.0],
           "rows": [{"records": "full", "pillow_1_thread": 10, "symgraph_1": 10,
                     "symgraph_2": 15, "scaling_efficiency": 0.75}]}
    md = markdown(res)
    assert "| scaling 1->2 |" in md and "| 0.75 |" in md and "SMOKE" not in md


def test_bench_planner_quick_times_after_a_warm_up(tmp_path):
    r = symgraph_cli("bench", "planner", "--quick", "--out", "pl", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads((tmp_path / "pl" / "results.json").read_text())
    assert res["meta"]["repeat"] == 3 and res["meta"]["warm_up_s"] > 0
    md = (tmp_path / "pl" / "results.md").read_text()
    assert "after an untimed warm-up plan" in md and "Quick run: small sizes only" in md


def test_bench_memory_quick_says_so_and_cuts_an_outlier_bar(tmp_path, monkeypatch):
    r = symgraph_cli("bench", "memory", "--quick", "--nets", "mlp", "--modes", "train",
                     "--no-progress", "--out", "mem", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "SMOKE RUN (--quick)" in r.stdout
    assert "SMOKE RUN" in (tmp_path / "mem" / "results.md").read_text()
    res = json.loads((tmp_path / "mem" / "results.json").read_text())
    row, = res["rows"]
    # the chart: a bar 20x the naive one is cut at 1.5x naive, not the axis stretched to it
    naive = row["bytes"]["internal"]["naive"]
    row["xla"]["temp"] = 20 * naive
    from symgraph.bench import report
    figs = []
    monkeypatch.setattr(report, "_save", lambda fig, path: figs.append(fig))
    report.charts(res, str(tmp_path))
    overview = figs[-1]
    top = overview.axes[0].get_ylim()[1]
    assert top == pytest.approx(report.CLIP)  # relative to naive
    texts = [t.get_text() for t in overview.axes[0].texts]
    assert any(t.startswith("20\n(cut)") for t in texts), texts
    assert "SMOKE RUN" in overview._suptitle.get_text()


def test_bench_recompute_quick_output_says_nothing_was_recomputed():
    from symgraph.bench import recompute, recompute_report
    assert recompute.markdown is recompute_report.markdown  # the split kept the names
    point = {"algorithm": "solver", "fraction": 0.5, "budget": 100, "fits": True,
             "xla_footprint": 90, "xla_temp": 40, "plan_total": 95, "recomputed": 0,
             "extra_flops_share": 0.0, "step_ratio": 1.0, "program": "fused",
             "how": "no recompute: its program fits",
             "first": {"plan_total": 95, "recomputed": 2, "xla_footprint": None}}
    res = {"argv": "--quick", "machine": "m", "date": "d", "jax": "j", "quick": True,
           "rows": [{"net": "resnet-cifar-20", "batch": 4, "internal0": 60, "rest": 40,
                     "optimizer": "momentum", "points": [point], "checkpoint": [],
                     "no_recompute": {"plan_total": 95, "xla_footprint": 90, "xla_temp": 40}}]}
    md = recompute_report.markdown(res)
    assert "SMOKE RUN (--quick)" in md
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    shown = []
    orig = plt.Figure.savefig
    try:
        plt.Figure.savefig = lambda fig, f, **kw: shown.append(fig)
        recompute_report.chart(res, os.devnull)
    finally:
        plt.Figure.savefig = orig
    fig, = shown
    assert "SMOKE RUN" in fig._suptitle.get_text()
    assert any("nothing recomputed" in t.get_text() for t in fig.axes[0].texts)
    for name in ("recompute.py", "recompute_report.py"):
        with open(os.path.join(ROOT, "symgraph", "bench", name)) as f:
            assert len(f.readlines()) <= 600


# --------------------------------------------------------------------------
# 4. the plan report says what was asked
# --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def nets(tmp_path_factory):
    folder = tmp_path_factory.mktemp("nets")
    for name in ("mlp", "convnet"):
        sg.models.get_model(name).save(str(folder / f"{name}.json"))
    return folder


def test_a_budget_report_compares_with_the_budget_asked(nets):
    # 1,000,000 bytes: the plan fits it (0.93 MB) but XLA's program (1.3 MB) does not
    argv = ("plan", "mlp.json", "--shape", "data=8,784", "--train", "--budget", "1000000",
            "--allow-over-budget")
    r = symgraph_cli(*argv, cwd=nets)
    assert r.returncode == 0, r.stderr[-2000:]
    budget_row, = [ln for ln in r.stdout.splitlines() if ln.strip().startswith("budget ")
                   and "1,000,000" in ln]
    assert "the plan's total is" in budget_row
    share = float(re.search(r"is ([\d.]+)% of it", budget_row).group(1))
    total = int(re.search(r"^\s+total\s+([\d,]+)", r.stdout, re.M).group(1).replace(",", ""))
    assert share == pytest.approx(100 * total / 1_000_000, abs=0.05)
    held = re.search(r"budget 1\.0 MiB: XLA's program holds ([\d.]+) MiB, over it", r.stdout)
    assert held, r.stdout[-1500:]
    j = json.loads(symgraph_cli(*argv, "--json", cwd=nets).stdout)
    assert j["budget"] == 1_000_000 and j["xla"]["budget_holds"] is False


def test_no_xla_and_layout_are_reported(nets):
    r = symgraph_cli("plan", "convnet.json", "--shape", "data=2,3,32,32", "--layout", "NHWC",
                     "--no-xla", cwd=nets)
    assert r.returncode == 0, r.stderr[-2000:]
    head = r.stdout.splitlines()[0]
    assert head.startswith("memory plan: convnet (inference, layout NHWC")
    assert "XLA's program" not in r.stdout and "xla: not computed" in r.stdout
    j = json.loads(symgraph_cli("plan", "convnet.json", "--shape", "data=2,3,32,32",
                                "--layout", "NHWC", "--no-xla", "--json", cwd=nets).stdout)
    assert j["layout"] == "NHWC" and j["xla"] is None


def test_python_plans_are_named_by_their_name_or_not_at_all():
    net = sg.models.get_model("mlp")
    unnamed = sg.plan(net, {"data": (2, 784)})
    assert unnamed.report().splitlines()[0] == "memory plan (inference)  data=2,784"
    assert unnamed.to_json()["net"] is None and "layout" not in unnamed.to_json()
    named = sg.plan(net, {"data": (2, 784)}, name="mlp")
    assert named.report().startswith("memory plan: mlp (inference)")


def test_check_arena_says_what_it_checked():
    p = sg.plan(sg.models.get_model("mlp"), {"data": (2, 784)}, name="mlp")
    done = p.check_arena()
    assert done.strategy == "arena" and done.seeds == (0, 1) and done.runs == 2
    assert done.outputs == ("softmax_output",) and done.arena_bytes == p.internal["arena"]
    text = repr(done)
    assert text.startswith("<ArenaCheck: arena check passed: the arena plan of the inference")
    assert "seeds 0 and 1" in text and "byte for byte" in text
    assert "arena interpreter: arena" in p.report()


# --------------------------------------------------------------------------
# 5. docs/cli.md is true to --help and to the JSON
# --------------------------------------------------------------------------
def test_every_command_of_symgraph_help_is_in_the_usage_block():
    r = symgraph_cli("--help", cwd=ROOT)
    assert r.returncode == 0
    listed = r.stdout.split("positional arguments:")[1].split("options:")[0]
    commands = re.findall(r"^    ([a-z][a-z0-9-]*)", listed, re.M)
    assert {"plan", "max-batch", "launch"} <= set(commands)  # the parse found them
    usage = re.search(r"```\n(.*?)```", doc("cli.md"), re.S).group(1)
    shown = set(re.findall(r"^symgraph ([a-z][a-z0-9-]*)", usage, re.M))
    assert shown == set(commands)
    bench = re.search(r"^    bench\s+(.*)$", listed, re.M).group(1)
    from symgraph.bench import SCRIPTS
    for name in ("memory", *SCRIPTS):
        assert name in bench  # the one-line help names every benchmark


def test_the_documented_json_keys_are_in_a_real_plan(nets):
    r = symgraph_cli("plan", "mlp.json", "--shape", "data=8,784", "--train", "--json",
                     cwd=nets)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout)
    section = doc("cli.md").split("### The JSON")[1].split("\n### ")[0]
    listed = section.split("\n\n")[2]  # the bullet list of the keys every plan has
    keys = set(re.findall(r"`([a-z_]+(?:\.[a-z_]+)*)`", listed))
    assert {"xla.program.recompute", "xla.program.segments", "bytes.optimizer"} <= keys
    for key in sorted(keys):
        node = got
        for part in key.split("."):
            assert isinstance(node, dict) and part in node, f"{key} is not in plan --json"
            node = node[part]


def test_cli_md_states_the_launch_bound():
    from symgraph.parallel import launch
    text = doc("cli.md")
    row = next(ln for ln in text.splitlines() if ln.startswith("| `-n N` |"))
    assert f"1 to {launch.MAX_PROCESSES}" in row
    assert "needs a source checkout" not in text and "run from a source" not in text


def test_viz_says_graphviz_is_drawing_while_it_waits(tmp_path, monkeypatch):
    # a picture of thousands of nodes takes Graphviz tens of seconds: on a
    # terminal the wait has a line (erased after), a pipe sees nothing
    import io
    import sys

    import symgraph as sg
    from symgraph.viz import plot, render

    class Terminal(io.StringIO):
        def isatty(self):
            return True
    x = sg.sym.Variable("data")
    for i in range(3):
        x = sg.sym.relu(sg.sym.FullyConnected(x, num_hidden=4, name=f"fc{i}"), name=f"r{i}")
    term = Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    render(plot(x), tmp_path / "net.svg")
    assert (tmp_path / "net.svg").stat().st_size > 0
    shown = term.getvalue()
    assert "Graphviz is drawing" in shown and shown.endswith("\r")
