"""The training-throughput benchmark runs in --quick mode and writes its
report (timings are printed, never asserted)."""
import json
import os
import subprocess
import sys

import jax


def _bench():
    from symgraph.bench import train
    return train


def test_quick_benchmark_writes_json_markdown_and_chart(tmp_path):
    bench = _bench()
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
    assert "SMOKE RUN (--quick)" in md  # a quick run's ratios say nothing of real sizes
    assert (out / "throughput.png").read_bytes()[:4] == b"\x89PNG"
    assert not [f for f in os.listdir(out) if f.startswith(".")]  # no temp files left


def test_bad_arguments_are_one_line_errors(capsys):
    from symgraph import cli
    assert cli.main(["bench", "train", "--nets", "alexnet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "unknown net(s) ['alexnet']" in err
    assert cli.main(["bench", "train", "--steps", "0"]) == 2
    assert "--steps" in capsys.readouterr().err


def test_cli_gets_simulated_devices_although_it_imported_jax_first(tmp_path):
    # the `symgraph` console script's code in a fresh process, without the
    # XLA_FLAGS this test session sets: the CLI imports JAX before it loads
    # the script, so the script must ask for devices in a way that works then
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    out = tmp_path / "train"
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from symgraph.cli import main; sys.exit(main())",
         "bench", "train", "--quick", "--nets", "vgg",
         "--devices", "2,8", "--out", str(out)],
        env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((out / "results.json").read_text())
    assert [r["devices"] for r in result["rows"]] == [2, 8]
    assert result["skipped"] is None and result["device_kind"].startswith("8 x ")


def test_a_run_with_every_row_skipped_exits_with_one_line(tmp_path, capsys):
    from symgraph import cli
    out = tmp_path / "train"
    assert cli.main(["bench", "train", "--quick", "--nets", "vgg", "--devices", "16",
                     "--out", str(out)]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed.count("\n") == 0 and printed.startswith("nothing to run:")
    assert "[16]" in printed
    assert not out.exists()  # earlier results are not replaced by an empty report
    assert _bench().chart({"rows": []}, str(tmp_path / "x.png")) is False


def test_device_request_after_jax_started_is_a_one_line_note(monkeypatch):
    jax.devices()  # the backend is up
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    note = _bench().request_cpu_devices(8)
    assert note.startswith("note: JAX was already started") and "\n" not in note
