"""`symgraph plan`: the report, the --json contract, --plot, and bad input."""
import json
import os
import subprocess
import sys

import pytest

import symgraph as sg
from symgraph.cli import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def net_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("plan") / "mlp.json"
    path.write_text(sg.models.get_model("mlp").tojson())
    return str(path)


def run(capsys, *argv):
    code = main(["plan", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_report_names_buckets_strategies_and_peak(capsys, net_file):
    code, out, err = run(capsys, net_file, "--shape", "data=8,784", "--train", "--no-xla")
    assert code == 0 and err == ""
    for word in ("arguments", "gradients", "aux", "internal (arena)", "naive", "inplace",
                 "coshare", "both", "lower_bound", "vs naive", "peak (lower bound) at step",
                 "tensor live there", "verified"):
        assert word in out
    p = sg.plan(sg.models.get_model("mlp"), {"data": (8, 784)}, train=True)
    assert f"{p.internal['both']:,}" in out


def test_json_has_exactly_the_contract_keys(capsys, net_file):
    code, out, err = run(capsys, net_file, "--shape", "data=8,784", "--train", "--json")
    assert code == 0 and err == ""
    j = json.loads(out)
    assert set(j) == {"net", "train", "shapes", "bytes", "xla", "verified", "total", "budget",
                      "recompute", "extra_flops", "step_flops", "algorithm"}
    assert set(j["bytes"]) == {"arguments", "gradients", "aux", "optimizer", "internal"}
    assert set(j["bytes"]["internal"]) == {"naive", "inplace", "coshare", "both", "arena",
                                           "lower_bound"}
    assert set(j["xla"]) == {"temp", "argument", "output", "alias", "program"}
    # the figures are the program Module.fit runs, and the JSON says which
    assert j["xla"]["program"]["program"] == "Module.fit step"
    assert j["xla"]["program"]["devices"] == 1 and "momentum=0.9" in j["xla"]["program"]["optimizer"]
    assert j["net"] == "mlp" and j["train"] is True and j["verified"] is True
    assert j["shapes"] == {"data": [8, 784]}
    assert all(type(v) is int for v in j["bytes"]["internal"].values())
    p = sg.plan(sg.models.get_model("mlp"), {"data": (8, 784)}, train=True)
    assert j["bytes"]["internal"] == p.internal
    assert j["bytes"]["gradients"] == p.buckets["gradients"] > 0


def test_json_without_xla_is_null(capsys, net_file):
    code, out, _ = run(capsys, net_file, "--shape", "data=8,784", "--json", "--no-xla",
                       "--strategy", "both", "--schedule", "memory", "--no-fuse",
                       "--match-range", "4")
    assert code == 0
    j = json.loads(out)
    assert j["xla"] is None and j["train"] is False


def test_head_option_plans_an_internal_output(capsys, net_file):
    code, out, _ = run(capsys, net_file, "--shape", "data=8,784", "--no-xla", "--json",
                       "--head", "relu1_output")
    full = run(capsys, net_file, "--shape", "data=8,784", "--no-xla", "--json")[1]
    assert code == 0
    part, whole = json.loads(out), json.loads(full)
    assert part["bytes"]["internal"]["naive"] < whole["bytes"]["internal"]["naive"]
    # fc2/fc3 parameters are not arguments of the pruned plan
    assert part["bytes"]["arguments"] < whole["bytes"]["arguments"]


def test_execute_runs_the_arena_interpreter(capsys, net_file):
    code, out, _ = run(capsys, net_file, "--shape", "data=2,784", "--train", "--no-xla",
                       "--execute")
    assert code == 0
    assert "arena interpreter: naive, inplace, coshare, both, arena" in out


def test_plot_writes_a_png(capsys, net_file, tmp_path):
    png = tmp_path / "timeline.png"
    code, out, err = run(capsys, net_file, "--shape", "data=8,784", "--train", "--no-xla",
                         "--plot", str(png))
    assert code == 0, err
    assert png.read_bytes()[:8] == PNG_MAGIC
    # written atomically: no temporary file left beside it
    assert os.listdir(tmp_path) == ["timeline.png"]


def one_line_error(capsys, *argv, match):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert match in lines[0], lines[0]


def test_bad_plot_extension(capsys, net_file, tmp_path):
    one_line_error(capsys, net_file, "--shape", "data=8,784", "--no-xla", "--plot",
                   str(tmp_path / "t.gif"), match="unknown picture format 'gif'")
    assert not os.listdir(tmp_path)


def test_missing_shape(capsys, net_file):
    one_line_error(capsys, net_file, match="--shape is required")


@pytest.mark.parametrize("shape", ["data", "data=", "data=3,a", "data=3;4", "=3,4", "data=0,3",
                                   "data=3,-1"])
def test_malformed_shape(capsys, net_file, shape):
    one_line_error(capsys, net_file, "--shape", shape, match="bad --shape")


@pytest.mark.parametrize("shape,bad", [
    ("data=8,784,x", "an empty dimension"),  # a stray x once vanished: (8, 784)
    ("data=8,,784", "an empty dimension"),
    ("data=8,784,", "an empty dimension"),
    ("data=8,78a", "'78a' is not a positive whole number"),
])
def test_malformed_shape_names_the_bad_part(capsys, net_file, shape, bad):
    one_line_error(capsys, net_file, "--shape", shape, match=f"bad --shape '{shape}': {bad}")


def test_shape_dims_by_comma_or_x(capsys, net_file):
    from symgraph.cli import parse_shapes
    assert parse_shapes(["data=64,3,224,224", "label=64"]) == {
        "data": (64, 3, 224, 224), "label": (64,)}
    assert parse_shapes(["data=64x3x224x224"]) == {"data": (64, 3, 224, 224)}
    code, out, _ = run(capsys, net_file, "--shape", "data=8x784", "--no-xla", "--json")
    assert code == 0 and json.loads(out)["shapes"] == {"data": [8, 784]}


def test_unknown_strategy(capsys, net_file):
    one_line_error(capsys, net_file, "--shape", "data=8,784", "--strategy", "greedy",
                   match="invalid choice: 'greedy'")


def test_shape_of_an_unknown_input(capsys, net_file):
    one_line_error(capsys, net_file, "--shape", "pixels=8,784", "--no-xla",
                   match="pixels")


def test_bad_json(capsys, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    one_line_error(capsys, str(bad), "--shape", "data=8,784", match="not valid JSON")
    bad.write_text(json.dumps({"nodes": "x"}))
    one_line_error(capsys, str(bad), "--shape", "data=8,784", match=str(bad))


def test_missing_file(capsys, tmp_path):
    one_line_error(capsys, str(tmp_path / "nope.json"), "--shape", "data=8,784",
                   match="no such file")


def test_a_folder_or_an_empty_file_is_named_as_such(capsys, tmp_path):
    one_line_error(capsys, str(tmp_path), "--shape", "data=8,784", match="it is a folder")
    empty = tmp_path / "empty.json"
    empty.write_text("")
    one_line_error(capsys, str(empty), "--shape", "data=8,784", match="empty; expected MXNet")


def test_a_shape_given_twice(capsys, net_file):
    one_line_error(capsys, net_file, "--shape", "data=8,784", "--shape", "data=4,784",
                   match="'data' is given twice")


def test_negative_match_range(capsys, net_file):
    one_line_error(capsys, net_file, "--shape", "data=8,784", "--match-range", "-1",
                   match="--match-range must be >= 0")


def test_a_real_process_exits_2_with_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    r = subprocess.run([sys.executable, "-m", "symgraph.cli", "plan", str(bad), "--shape",
                        "data=1,2"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("symgraph: error:")


def test_planner_speed_benchmark_runs_small(tmp_path, capsys):
    code = main(["bench", "planner", "--sizes", "40,80", "--repeat", "1", "--no-resnet",
                 "--out", str(tmp_path)])
    out, _ = capsys.readouterr()
    assert code == 0
    j = json.loads((tmp_path / "results.json").read_text())
    assert [r["case"] for r in j["rows"]] == ["random-40", "chain-40", "random-80", "chain-80"]
    for r in j["rows"]:
        assert r["nodes"] > 0 and r["seconds"] > 0
        assert r["us_per_node"] == pytest.approx(r["seconds"] / r["nodes"] * 1e6)
        assert r["arena_over_bound"] >= 1.0
    assert "| chain-80 |" in (tmp_path / "results.md").read_text()
    assert "chain-80" in out


def test_planner_speed_benchmark_bad_sizes(capsys):
    code = main(["bench", "planner", "--sizes", "ten"])
    _, err = capsys.readouterr()
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--sizes" in err


def test_measures_and_breakdown(capsys, net_file):
    """--measures changes the program XLA's figures are for and says so;
    --breakdown shows what XLA's temp holds (text and JSON)."""
    assert main(["plan", net_file, "--shape", "data=8,784", "--train",
                 "--measures", "anchor,scheduler", "--breakdown"]) == 0
    out = capsys.readouterr().out
    assert "xla memory_analysis of Module.fit step, 1 device" in out
    assert "measures anchor+scheduler" in out
    assert "XLA temp" in out and "live at its busiest step" in out
    assert main(["plan", net_file, "--shape", "data=8,784", "--json", "--breakdown",
                 "--measures", "scheduler"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["xla"]["program"]["measures"] == ["scheduler"]
    assert doc["xla"]["program"]["program"] == "Module.predict"  # no --train
    assert doc["xla_breakdown"]["temp"] == doc["xla"]["temp"] > 0


def test_bad_measures(capsys, net_file):
    one_line_error(capsys, net_file, "--shape", "data=8,784", "--measures", "remat",
                   match="unknown memory measure(s) 'remat'")
    one_line_error(capsys, net_file, "--shape", "data=8,784", "--measures", "donate",
                   match="unknown memory measure(s) 'donate'")
    one_line_error(capsys, net_file, "--shape", "data=8,784", "--breakdown", "--no-xla",
                   match="drop --no-xla")


def test_plan_budget_no_program_holds_exits_2_unless_allowed(capsys, net_file):
    """A budget just above the arguments every program holds: no plan fits,
    the programs XLA compiles (the step without recompute, the smallest
    plan's) hold more, so plan --budget exits 2 with one line naming the
    smallest footprint; --allow-over-budget reports that program instead."""
    from symgraph.memory.budget import held_by_every_program
    p = sg.plan(sg.models.get_model("mlp"), {"data": (8, 784)}, train=True)
    budget = str(held_by_every_program(p) + 1)
    argv = (net_file, "--shape", "data=8,784", "--train", "--budget", budget)
    code, out, err = run(capsys, *argv)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "no program holds it" in err and "--allow-over-budget" in err
    code, out, err = run(capsys, *argv, "--allow-over-budget", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["xla"]["budget_holds"] is False
    held = doc["xla"]["argument"] + doc["xla"]["output"] - doc["xla"]["alias"] + \
        doc["xla"]["temp"]
    assert held > int(budget)
