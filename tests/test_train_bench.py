"""The training-throughput benchmark runs in --quick mode and writes its
report (timings are printed, never asserted)."""
import importlib.util
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_quick_benchmark_writes_json_markdown_and_chart(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "train_throughput", os.path.join(ROOT, "benchmarks", "train_throughput.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "train"
    assert bench.main(["--quick", "--nets", "vgg", "--devices", "2,64", "--out", str(out)]) == 0
    result = json.loads((out / "results.json").read_text())
    (row,) = result["rows"]
    assert (row["net"], row["devices"], row["batch"]) == ("vgg", 2, 8)
    assert row["symgraph_samples_per_s"] > 0 and row["plain_samples_per_s"] > 0
    assert row["ratio"] == row["symgraph_samples_per_s"] / row["plain_samples_per_s"]
    # both sides start from the same weights and compute the same step
    assert row["rel_update_diff_after_step1"] < 1e-4
    assert "64" in result["skipped"]
    md = (out / "results.md").read_text()
    assert "| vgg | 2 | 8 |" in md and "ratio" in md
    assert (out / "throughput.png").read_bytes()[:4] == b"\x89PNG"
    assert not [f for f in os.listdir(out) if f.startswith(".")]  # no temp files left


def test_bad_arguments_are_one_line_errors(capsys):
    from symgraph import cli
    assert cli.main(["bench", "train", "--nets", "alexnet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "unknown net(s) ['alexnet']" in err
    assert cli.main(["bench", "train", "--steps", "0"]) == 2
    assert "--steps" in capsys.readouterr().err
