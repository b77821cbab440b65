"""Each piece of bad input a fuzz once got past symgraph (issue: "bad input
never escapes") is a SymgraphError naming what was wrong -- one line, exit
2 on the command line -- and the command line's rough edges a new user hit.
tests/test_fuzz_inputs.py looks for new ones."""
import json
import os
import shutil
import subprocess
import time

import numpy as np
import pytest

import symgraph as sg
from symgraph import viz
from symgraph.cli import build_parser, main
from symgraph.errors import OpError, SerializationError, ShapeError, SymgraphError

from helpers import ROOT

needs_dot = pytest.mark.skipif(shutil.which("dot") is None,
                               reason="Graphviz's dot is not installed (.ci/run installs it)")
MLP_FILE = os.path.join(ROOT, "tests", "data", "mlp-symbol.json")


@pytest.fixture(scope="module")
def mlp():
    return sg.sym.load(MLP_FILE)


def one_line(capsys, *argv):
    """(exit status, the one stderr line) of ``symgraph ARGV``."""
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert err.startswith("symgraph: error: ") and err.count("symgraph:") == 1, err
    return code, err.rstrip("\n")


# --------------------------------------------------------------------------
# symbol files and attributes
# --------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["[" * 100000, '{"nodes": ' + "[" * 100000,
                                  '{"a": ' * 100000])
def test_deep_nesting_is_a_serialization_error(text):
    with pytest.raises(SerializationError, match="nested too deeply"):
        sg.sym.load_json(text)


def test_a_5000_digit_number_is_a_serialization_error():
    with pytest.raises(SerializationError, match="4300 digits"):
        sg.sym.load_json("1" * 5000)


def test_deeply_nested_attribute_value_is_a_serialization_error():
    doc = json.load(open(MLP_FILE))
    doc["nodes"][3]["attrs"] = {"num_hidden": json.loads("[" * 900 + "]" * 900)}
    with pytest.raises(SymgraphError):
        sg.sym.load_json(json.dumps(doc))


def test_a_lone_surrogate_in_a_name_saves_and_loads(tmp_path):
    # JSON may hold "\ud800", which has no UTF-8 form: saving raised
    # UnicodeEncodeError
    doc = json.load(open(MLP_FILE))
    doc["nodes"][0]["name"] = "\ud800data"
    net = sg.sym.load_json(json.dumps(doc))
    net.save(tmp_path / "s.json")
    again = sg.sym.load(tmp_path / "s.json")
    assert again.list_arguments()[0] == "\ud800data" and again.tojson() == net.tojson()


@pytest.mark.parametrize("value", [-1, 0, "-1", "0"])
def test_num_hidden_must_be_positive(value):
    with pytest.raises(OpError, match=r"num_hidden.*positive integer"):
        sg.sym.FullyConnected(sg.sym.var("x"), num_hidden=value)


@pytest.mark.parametrize("op, attr", [("Convolution", "num_filter"),
                                      ("Embedding", "output_dim")])
def test_sizes_of_other_layers_must_be_positive(op, attr):
    kw = {"Convolution": {"kernel": (3, 3), "num_filter": 4},
          "Embedding": {"input_dim": 10, "output_dim": 4}}[op]
    with pytest.raises(OpError, match=rf"{attr}.*positive integer"):
        getattr(sg.sym, op)(sg.sym.var("x"), **{**kw, attr: 0})


@pytest.mark.parametrize("op, attr", [("SliceChannel", "num_outputs"), ("Concat", "num_args"),
                                      ("ElementWiseSum", "num_args")])
def test_a_count_of_2_to_the_40_is_refused_not_built(op, attr):
    """A file asking for 2**40 outputs or inputs would hang while the
    node's names are made: it is one OpError at once."""
    doc = {"nodes": [{"op": "null", "name": "x", "inputs": []},
                     {"op": op, "name": "big", "attrs": {attr: str(2 ** 40)},
                      "inputs": [[0, 0, 0]]}],
           "arg_nodes": [0], "heads": [[1, 0, 0]]}
    with pytest.raises(OpError, match=rf"node 'big'.*{attr}.*count up to 65536"):
        sg.sym.load_json(json.dumps(doc))


def test_num_hidden_minus_one_in_a_file_names_the_node(tmp_path, capsys):
    doc = json.load(open(MLP_FILE))
    fc = next(n for n in doc["nodes"] if n["op"] == "FullyConnected")
    fc["attrs"]["num_hidden"] = "-1"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    code, line = one_line(capsys, "plan", path, "--shape", "data=4,6", "--no-xla")
    assert code == 2 and f"node '{fc['name']}'" in line and "num_hidden='-1'" in line


@pytest.mark.parametrize("value", ["9" * 400, "1e999", "-" * 2000 + "1", "~" * 2000 + "1"])
def test_extreme_float_attributes_are_op_errors(value):
    with pytest.raises(OpError, match="slope") as err:
        sg.sym.LeakyReLU(sg.sym.var("x"), slope=value)
    assert len(str(err.value)) < 300  # the value is shown cut short


def test_non_finite_floats_load_as_mxnet_writes_them():
    # only a finite literal too large for a float is refused: inf written
    # by MXNet (str(float('inf')) == 'inf') loads, and saves back the same
    net = sg.sym.var("x") * float("-inf")
    again = sg.sym.load_json(net.tojson())
    assert again.tojson() == net.tojson() and '"scalar": "-inf"' in net.tojson()


@pytest.mark.parametrize("value", ["(1e308, 2)", "3f", "f4,i4", "(2, 3)f"])
def test_dtype_attributes_take_plain_names(value):
    with pytest.raises(OpError, match="dtype name"):
        sg.sym.Cast(sg.sym.var("x"), dtype=value)
    with pytest.raises(ShapeError, match="unknown dtype"):
        sg.sym.var("x", dtype=value)
    doc = json.load(open(MLP_FILE))  # a file's hint on a variable: refused where read
    doc["nodes"][0]["attrs"] = {"__dtype__": value}
    with pytest.raises(ShapeError, match="__dtype__"):
        sg.sym.load_json(json.dumps(doc)).infer_type()


def test_unknown_op_of_any_type_is_an_op_error():
    for name in (None, 3, ["relu"], "x" * 20000):
        with pytest.raises(OpError, match="op") as err:
            sg.ops.get_op(name)
        assert len(str(err.value)) < 300


# --------------------------------------------------------------------------
# shapes: checked once, where they enter
# --------------------------------------------------------------------------
BAD_SHAPES = [1, (None,), "ab", "23", (2.7, 784), (True, 784), (0, 784), (-1, 784),
              [[2], [3]], (np.float32(2), 784), (2, 2 ** 62)]


@pytest.mark.parametrize("shape", BAD_SHAPES, ids=repr)
def test_bad_shapes_are_shape_errors_naming_the_input(mlp, shape):
    # no silent coercion: '23' is not (2, 3), 2.7 not 2, True not 1
    with pytest.raises(ShapeError, match="shape of 'data'"):
        mlp.infer_shape(data=shape)
    with pytest.raises(ShapeError, match="shape of 'data'"):
        sg.plan(mlp, {"data": shape})


def test_numpy_and_list_dimensions_are_shapes(mlp):
    want = mlp.infer_shape(data=(4, 6))
    assert mlp.infer_shape(data=[4, 6]) == want
    assert mlp.infer_shape(data=(np.int64(4), np.int32(6))) == want
    plan = sg.plan(mlp, {"data": np.array([4, 6])})
    assert plan.shapes["data"] == (4, 6) and all(type(d) is int for d in plan.shapes["data"])
    json.dumps(plan.to_json())  # NumPy integers would not serialize


def test_shapes_must_be_a_dict(mlp):
    with pytest.raises(ShapeError, match="dict of input shapes"):
        sg.plan(mlp, [("data", (4, 6))])


def test_op_rule_given_a_rank_it_cannot_take_is_a_shape_error(mlp):
    # FullyConnected on a scalar: its rule indexed a dimension that is not there
    with pytest.raises(ShapeError, match=r"node 'fc1' \(FullyConnected\).*inputs: data=\(\)"):
        mlp.infer_shape(data=())


def test_unknown_input_lists_data_and_labels_not_weights(mlp):
    with pytest.raises(ShapeError) as err:
        mlp.infer_shape(input=(4, 6))
    msg = str(err.value)
    assert "its inputs are data, softmax_label" in msg and "fc1_weight" not in msg
    assert "4 parameters" in msg
    with pytest.warns(UserWarning) as record:  # MXNet's convention: a warning, Nones
        assert mlp.infer_shape() == (None, None, None)
    msg = str(record[0].message)
    assert "cannot infer the shape of data, softmax_label" in msg and "weight" not in msg


def test_elementwise_sum_of_thousands_of_inputs_infers_in_linear_time():
    def calls_and_time(n):
        xs = [sg.sym.var(f"x{i}") for i in range(n)]
        s = sg.sym.ElementWiseSum(*xs, num_args=n)
        op = sg.ops.get_op("ElementWiseSum")
        counted = []
        original = op.arguments
        op.arguments = lambda p: counted.append(1) or original(p)
        try:
            t = time.perf_counter()
            assert s.infer_shape(x0=(2, 3))[1] == [(2, 3)]
            return len(counted), time.perf_counter() - t
        finally:
            op.arguments = original
    small, _ = calls_and_time(10)
    big, seconds = calls_and_time(4552)
    # the argument names (a list as long as the inputs) are built a fixed
    # number of times, not once per input: 13,659 times before, 11 s
    assert big == small
    assert seconds < 5


# --------------------------------------------------------------------------
# the command line
# --------------------------------------------------------------------------
def test_no_arguments_prints_usage_and_one_error_line(capsys):
    code = main([])
    out, err = capsys.readouterr()
    assert code == 2 and out.startswith("usage: symgraph")
    # every command, in the order --help lists them (commands are added over time)
    from symgraph.cli import SUBCOMMANDS
    assert list(SUBCOMMANDS)[:5] == ["plan", "max-batch", "viz", "zoo", "bench"]
    assert err == (f"symgraph: error: no command given; choose one of "
                   f"{', '.join(SUBCOMMANDS)} (symgraph --help says more)\n")


def test_argparse_errors_have_one_prefix(capsys):
    code, line = one_line(capsys, "plan")
    assert code == 2
    assert line == "symgraph: error: plan: the following arguments are required: NET.json"


def test_mistyped_options_and_commands_get_a_suggestion(capsys):
    _, line = one_line(capsys, "plan", MLP_FILE, "--shape", "data=4,6", "--stratgy", "both")
    assert line.endswith("unrecognized arguments: --stratgy both; did you mean --strategy?")
    _, line = one_line(capsys, "viz", MLP_FILE, "--rankdri", "LR")
    assert line.startswith("symgraph: error: viz: ") and "did you mean --rankdir?" in line
    _, line = one_line(capsys, "paln", MLP_FILE)
    assert line.endswith("did you mean 'plan'?")
    _, line = one_line(capsys, "plan", MLP_FILE, "--shape", "data=4,6", "--schedule", "mem")
    assert "did you mean 'memory'?" in line


def test_a_newline_in_a_path_keeps_the_error_on_one_line(capsys):
    code, line = one_line(capsys, "plan", "a\nb.json", "--shape", "data=4,6")
    assert code == 2 and "a\\nb.json" in line


def test_shape_for_an_unknown_input_lists_data_and_label_only(capsys):
    _, line = one_line(capsys, "plan", MLP_FILE, "--shape", "input=4,6", "--no-xla")
    assert "its inputs are data, softmax_label" in line and "weight" not in line


def test_plan_output_is_now_head(capsys):
    code, line = one_line(capsys, "plan", MLP_FILE, "--shape", "data=4,6", "--no-xla",
                          "--output", "report.txt")
    assert code == 2 and "--output is now --head" in line and "> report.txt" in line
    assert not os.path.exists("report.txt")
    code = main(["plan", MLP_FILE, "--shape", "data=4,6", "--no-xla", "--head", "fc1_output"])
    assert code == 0 and "fc1" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["viz", MLP_FILE, "-o"], ["zoo", "mlp", "-o"],
                                  ["plan", MLP_FILE, "--shape", "data=4,6", "--no-xla",
                                   "--plot"]])
def test_writing_into_a_missing_folder_is_an_error(tmp_path, capsys, argv):
    out = tmp_path / "missing" / "dir" / ("x.png" if "--plot" in argv else "x.svg")
    code, line = one_line(capsys, *argv, out)
    assert code == 2 and "folder" in line and "does not exist" in line
    assert not (tmp_path / "missing").exists()


def test_viz_plan_default_strategy_is_plans(tmp_path, capsys):
    parser = build_parser()
    subs = next(a for a in parser._actions if a.dest == "command").choices
    assert subs["viz"].get_default("strategy") == subs["plan"].get_default("strategy") == "arena"
    out = tmp_path / "p.dot"
    assert main(["viz", MLP_FILE, "--shape", "data=4,6", "--plan", "-o", str(out)]) == 0
    assert "memory plan: arena" in out.read_text()
    plan = sg.plan(sg.sym.load(MLP_FILE), {"data": (4, 6)})
    assert plan.strategy == "arena"
    assert "memory plan: arena" in viz.plot(sg.sym.load(MLP_FILE), {"data": (4, 6)},
                                            plan=True).source


# --------------------------------------------------------------------------
# names in pictures
# --------------------------------------------------------------------------
NAMES = ["<b>x</b>", "a\tb", "a\nb", "x" * 20000, 'q"uote', "back\\slash", "a\\", "\\N",
         "a:b", "node", "\x00z", "\x1b[31m", "\ud800", "__legend__", "é漢"]


def _net_named(name):
    x = sg.sym.Activation(sg.sym.var("data"), act_type="relu", name=name)
    return sg.sym.FullyConnected(x, num_hidden=3, name=name + "_fc")


@needs_dot
@pytest.mark.parametrize("name", NAMES, ids=lambda n: repr(n[:12]))
def test_any_name_draws(tmp_path, name):
    net = _net_named(name)
    dot_file = viz.render(viz.plot(net, {"data": (2, 3)}, plan=True), tmp_path / "n.dot")
    # the DOT text written is one Graphviz reads (it refused <b>x</b> and tabs)
    run = subprocess.run(["dot", "-Tsvg", dot_file], capture_output=True)
    assert run.returncode == 0, run.stderr[-300:]
    svg = run.stdout.decode()
    assert "<title>data</title>" in svg
    if name in ("node", "é漢"):
        assert f"<title>{name}</title>" in svg  # a plain name is the node's id
    if name == "__legend__":  # not merged into the plan's legend
        assert svg.count("<title>__legend__</title>") == 1 and "__legend__#" in svg


@needs_dot
def test_long_name_to_svg_exits_0(tmp_path, capsys):
    # dot refused the 20,000-character name and quit: exit 141, no message
    path = tmp_path / "long.json"
    path.write_text(_net_named("x" * 20000).tojson())
    assert main(["viz", str(path), "-o", str(tmp_path / "long.svg")]) == 0
    assert (tmp_path / "long.svg").read_text().startswith("<?xml")


def test_dot_quitting_early_is_one_line(tmp_path, capsys, monkeypatch):
    # dot reading only part of the graph shows as a broken pipe in our write:
    # it is dot's failure, not a closed stdout of ours (exit 141, silent)
    import graphviz

    def quits(self, *args, **kwargs):
        raise BrokenPipeError(32, "Broken pipe")
    monkeypatch.setattr(graphviz.Digraph, "pipe", quits)
    code, line = one_line(capsys, "viz", MLP_FILE, "-o", tmp_path / "x.svg")
    assert code == 2 and "dot failed" in line and "stopped reading" in line
    assert not (tmp_path / "x.svg").exists()
