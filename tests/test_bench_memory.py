"""`symgraph bench memory --quick`: the result files, their keys, and the
orderings every plan must satisfy. Benchmarks are never timed here."""
import json

import pytest

from symgraph.cli import main

STRATEGIES = ("naive", "inplace", "coshare", "both", "arena", "lower_bound")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    # MXNet's figures for one of the quick rows, as benchmarks/mxnet_memory.py writes them
    (out / "mxnet.json").write_text(json.dumps({
        "date": "2026-01-01T00:00:00+00:00", "machine": {"mxnet": "1.9.1"},
        "nets": {"mlp": {"shapes": {"agree": True}}},
        "rows": [{"net": "mlp", "batch": 4, "mode": "train", "both": 1, "inplace": 2}]}))
    # --quick compiles no side-by-side steps by default: ask for them here
    assert main(["bench", "memory", "--quick", "--compare-at", "4", "--out", str(out),
                 "--no-progress"]) == 0
    return out, json.loads((out / "results.json").read_text())


def test_quick_run_writes_json_markdown_and_charts(quick_run):
    out, res = quick_run
    assert {"tool", "date", "machine", "versions", "config", "rows", "mxnet"} <= set(res)
    assert {"jax", "jaxlib", "symgraph", "python"} <= set(res["versions"])
    assert res["config"]["quick"] is True
    assert {(r["net"], r["batch"], r["mode"]) for r in res["rows"]} == {
        (n, 4, m) for n in ("mlp", "resnet-cifar-20") for m in ("train", "infer")}
    md = (out / "results.md").read_text()
    assert "| net | batch | naive |" in md and "resnet-cifar-20" in md
    for name in ("mlp.png", "resnet-cifar-20.png", "overview_batch4.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_every_plan_verified_and_ordered(quick_run):
    _, res = quick_run
    for r in res["rows"]:
        assert r["verified"] is True
        assert {"arguments", "gradients", "aux", "internal"} <= set(r["bytes"])
        b = r["bytes"]["internal"]
        assert set(b) == set(STRATEGIES)
        assert 0 < b["lower_bound"] <= b["arena"] <= b["both"] <= b["naive"]
        assert b["inplace"] <= b["naive"] and b["coshare"] <= b["naive"]
        assert r["savings"]["arena"] == pytest.approx(1 - b["arena"] / b["naive"])
        assert r["plan_seconds"] > 0
        other = r["other_schedule"]
        assert other["lower_bound"] <= other["arena"]
        if r["mode"] == "train":
            assert r["bytes"]["gradients"] > 0
        else:
            assert r["bytes"]["gradients"] == 0


def test_xla_figures_and_training_costs_more(quick_run):
    _, res = quick_run
    rows = {(r["net"], r["mode"]): r for r in res["rows"]}
    for r in res["rows"]:
        assert set(r["xla"]) == {"temp", "argument", "output", "alias", "program"}
        assert r["xla"]["argument"] > 0
        # the figure is the program the Module runs, and says so
        assert r["xla"]["program"]["program"] == ("Module.fit step" if r["mode"] == "train"
                                                  else "Module.predict")
    for net in ("mlp", "resnet-cifar-20"):
        assert (rows[net, "train"]["bytes"]["internal"]["lower_bound"]
                > rows[net, "infer"]["bytes"]["internal"]["lower_bound"])
    params = rows["resnet-cifar-20", "train"]["parameters"]
    assert rows["resnet-cifar-20", "train"]["bytes"]["gradients"] == 4 * params


def test_lowered_and_plain_jax_steps_side_by_side(quick_run):
    """--compare-at 4: every row has XLA's temp for symgraph's
    step under its best measure set (the least of the candidates it
    compiled, none included) beside the plain-JAX step's, and the ratios
    are those figures'."""
    from symgraph import xla
    out, res = quick_run
    assert res["config"]["compare_at"] == [4]
    for r in res["rows"]:
        st = r["steps"]
        cands = xla.TRAIN_CANDIDATES if r["mode"] == "train" else xla.INFER_CANDIDATES
        assert set(st["symgraph_temps"]) == {xla.measures_label(ms) for ms in cands}
        best = st["symgraph"]
        assert best["temp"] == min(st["symgraph_temps"].values())
        assert st["symgraph_temps"][xla.measures_label(best["measures"])] == best["temp"]
        assert set(st["plain_jax"]) == {"none", "scheduler"}
        assert st["plain_jax"]["none"]["temp"] > 0
        assert st["best_over_arena"] == pytest.approx(
            best["temp"] / r["bytes"]["internal"]["arena"])
        assert st["best_over_plain_jax"] == pytest.approx(
            best["temp"] / st["plain_jax"]["none"]["temp"])
    md = (out / "results.md").read_text()
    assert "## Lowered step vs plain JAX" in md and "| step/plain |" in md


def test_mxnet_figures_are_merged(quick_run):
    _, res = quick_run
    rows = {(r["net"], r["mode"]): r for r in res["rows"]}
    assert rows["mlp", "train"]["mxnet_mib"] == {"both": 1, "inplace": 2}
    assert rows["mlp", "train"]["arena_over_mxnet"] == pytest.approx(
        rows["mlp", "train"]["bytes"]["internal"]["arena"] / 2 ** 20)
    assert rows["mlp", "infer"]["mxnet_mib"] is None
    assert res["mxnet"]["version"] == "1.9.1"


@pytest.mark.parametrize("argv,msg", [
    (["bench", "memory", "--nets", "nonet"], "unknown model 'nonet'"),
    (["bench", "memory", "--batch", "x"], "--batch"),
    (["bench", "memory", "--modes", "fit"], "unknown mode 'fit'"),
    (["bench", "memory", "--compare-at", "64,x"], "--compare-at"),
    (["bench", "memory", "--mxnet", "/nonexistent/mxnet.json"], "no file"),
    (["bench"], "choose memory"),
])
def test_bad_input_exits_2_with_one_line(argv, msg, capsys, tmp_path):
    assert main([*argv, *(["--out", str(tmp_path)] if len(argv) > 1 else [])]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1


def test_bench_train_passes_its_arguments_through(monkeypatch):
    import symgraph.bench as bench
    seen = {}

    def fake_script_main(script):
        def fake_main(argv):
            seen[script] = argv
            return 0
        return fake_main

    monkeypatch.setattr(bench, "script_main", fake_script_main)
    # a leading option must reach the script, not argparse
    assert main(["bench", "train", "--steps", "3", "--quick"]) == 0
    assert main(["bench", "planner", "--help"]) == 0
    assert seen == {"train": ["--steps", "3", "--quick"], "planner": ["--help"]}


def test_committed_results_and_docs_agree():
    import os

    from symgraph.bench import report
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "benchmarks", "results", "memory", "results.json")) as f:
        res = json.load(f)
    assert not res["config"]["quick"] and {32, 64, 128} <= set(res["config"]["batches"])
    for net in ("vgg16", "inception-bn", "googlenet", "resnet-50", "resnet-152"):
        assert {(r["batch"], r["mode"]) for r in res["rows"] if r["net"] == net} == {
            (b, m) for b in (32, 64, 128) for m in ("train", "infer")}
    assert all(r["verified"] for r in res["rows"])
    with open(os.path.join(root, "docs", "benchmarks.md")) as f:
        doc = f.read()
    # the headline table in the docs is the one the committed results give,
    # and so is the side-by-side of the lowered and plain-JAX steps
    assert report.doc_block(res) in doc
    assert 64 in res["config"]["compare_at"] and report.steps_table(res) in doc
    with open(os.path.join(root, "benchmarks", "results", "memory", "results.md")) as f:
        assert f.read() == report.markdown(res)


def test_quick_without_out_never_writes_the_committed_results(tmp_path, monkeypatch, capsys):
    import os

    from symgraph.bench import memory as bench_memory
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    committed = os.path.join(root, "benchmarks", "results", "memory")
    real_write, written = bench_memory.write_results, []

    def guarded_write(result, out, **kwargs):
        # refuse rather than clobber the committed full run should this regress
        assert os.path.realpath(out) != os.path.realpath(committed)
        written.append(out)
        return real_write(result, out, **kwargs)

    monkeypatch.setattr(bench_memory, "write_results", guarded_write)
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "memory", "--quick", "--no-xla", "--no-charts",
                 "--no-progress"]) == 0
    out = os.path.join("bench-results", "memory-quick")
    assert written == [out] and out in capsys.readouterr().out
    res = json.loads((tmp_path / out / "results.json").read_text())
    assert res["config"]["quick"] is True


def test_docs_prose_ranges_agree_with_committed_results():
    import os
    import re
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "benchmarks", "results", "memory", "results.json")) as f:
        rows = json.load(f)["rows"]
    with open(os.path.join(root, "docs", "benchmarks.md")) as f:
        doc = " ".join(f.read().split())

    def pct_range(mode, saving):
        vals = [saving(r) for r in rows if r["mode"] == mode]
        return round(100 * min(vals)), round(100 * max(vals))

    coshare = lambda r: r["savings"]["coshare"]  # noqa: E731
    m = re.search(r"\*\*Co-share\*\* does the heavy lifting: −(\d+)% [^,]*?to −(\d+)% in "
                  r"training, −(\d+)% [^,]*?to −(\d+)% in inference", doc)
    assert m, "co-share's ranges not found in docs/benchmarks.md"
    assert tuple(map(int, m.groups())) == (*pct_range("train", coshare),
                                           *pct_range("infer", coshare))

    def arena_below_both(r):
        internal = r["bytes"]["internal"]
        return 1 - internal["arena"] / internal["both"]

    m = re.search(r"(\d+)–(\d+)% below \*both\* in training and (\d+)–(\d+)% below it in "
                  r"inference", doc)
    assert m, "arena's ranges not found in docs/benchmarks.md"
    assert tuple(map(int, m.groups())) == (*pct_range("train", arena_below_both),
                                           *pct_range("infer", arena_below_both))
    over_lb = [r["arena_over_lower_bound"] for r in rows]
    assert f"1.00 to {max(over_lb):.2f}" in doc and min(over_lb) >= 1.0
