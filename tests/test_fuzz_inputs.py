"""Fuzz: bad input never escapes.

Malformed symbol files (structure mutations of the real MXNet files in
tests/data, wrong types, unknown ops, garbage and extreme attribute values,
deep nesting, huge inputs), shapes and command lines. Whatever symgraph is
given, it answers with a result or a SymgraphError -- never another
exception -- and the command line exits 0, or 2 with exactly one line on
stderr.
"""
import contextlib
import copy
import io
import json
import os
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import symgraph as sg
from symgraph import viz
from symgraph.cli import main
from symgraph.errors import SymgraphError
from symgraph.ops.registry import get_op, list_ops

from helpers import ROOT

DATA = os.path.join(ROOT, "tests", "data")
# the real MXNet files and the data shape each was written for
FILES = {"mlp-symbol.json": (4, 6), "mlp-legacy-symbol.json": (4, 6),
         "convnet-symbol.json": (2, 3, 8, 8), "convnet-legacy-symbol.json": (2, 3, 8, 8)}
BASES = {name: json.load(open(os.path.join(DATA, name))) for name in FILES}

# SYMGRAPH_FUZZ_SCALE=50 runs fifty times the examples (a deeper hunt than CI's)
SCALE = float(os.environ.get("SYMGRAPH_FUZZ_SCALE", "1"))
FUZZ = settings(max_examples=int(250 * SCALE), deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])

# --------------------------------------------------------------------------
# values a careless or hostile file may hold
# --------------------------------------------------------------------------
EXTREME_TEXT = [
    "", " ", "-1", "0", "-0", "1e999", "-1e999", "nan", "inf", "None", "True", "False",
    "9" * 400, "1" * 5000, "-" * 2000 + "1", "~" * 2000 + "1", "(" * 300, "[" * 300 + "]" * 300,
    "(0, 0)", "(3, -3)", "(-1,)", "(1, 2, 3, 4, 5, 6, 7)", "(2**64, 1)", "(1e308, 2)",
    "(3, 3", "((3, 3), (3, 3))", "[True, 1]", "'relu'", "\"max\"", "0x7fffffffffffffff",
    "<b>x</b>", "a\tb\nc", "\x00", "\ud800", "é漢", "x" * 20000, "avg", "max", "relu",
]
PLAUSIBLE = ["1", "2", "3", "7", "(1, 1)", "(2, 2)", "(3, 3)", "(0, 0)", "(1,)", "(2, 2, 2)",
             "(1, 2)", "True", "False", "0.5", "-0.5", "relu", "max", "avg", "sum", "valid",
             "full", "null", "batch", "float16", "int32", "NHWC", "NCHW", "-1", "0"]
LONG_NAME = "n" * 20000  # messages may repeat a name; values they cut short
NAMES = ["<b>x</b>", "a\tb", "a\nb", LONG_NAME, "", " ", "q\"uote", "back\\slash", "a:b",
         "node", "a\\", "\ud800", "\x1b[31m", "__legend__", "fc1_weight", "data"]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70),
                    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(EXTREME_TEXT),
                    st.text(max_size=20))
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12)
OPS = list_ops()


@st.composite
def entries(draw, n_nodes):
    """An input or head entry, usually plausible, sometimes not."""
    good = [draw(st.integers(0, max(n_nodes - 1, 0))), draw(st.integers(0, 2)), 0]
    return draw(st.one_of(
        st.just(good), st.just(good[:2]), json_values,
        st.lists(st.one_of(st.integers(-3, n_nodes + 3), st.booleans(), st.floats(),
                           st.text(max_size=3)), max_size=4)))


@st.composite
def mutate(draw, doc):
    """``doc`` (a symbol file as Python data) with one structural change."""
    nodes = doc.get("nodes") if isinstance(doc.get("nodes"), list) else None
    kinds = ["top_key", "node_key", "op", "name", "input", "order", "head", "arg_nodes",
             "duplicate"] + ["attr"] * 5  # attributes reach furthest: inference, plans
    kind = draw(st.sampled_from(kinds if nodes else kinds[:1]))
    if kind == "top_key":
        key = draw(st.sampled_from(["nodes", "arg_nodes", "heads", "attrs",
                                    "node_row_ptr", "extra"]))
        if draw(st.booleans()):
            doc.pop(key, None)
        else:
            doc[key] = draw(json_values)
        return doc
    i = draw(st.integers(0, len(nodes) - 1))
    node = nodes[i]
    if not isinstance(node, dict):
        nodes[i] = draw(json_values)
        return doc
    if kind == "node_key":
        key = draw(st.sampled_from(["op", "name", "inputs", "attrs", "attr", "param",
                                    "control_deps", "subgraphs", "backward_source_id",
                                    "unknown"]))
        if draw(st.booleans()):
            node.pop(key, None)
        else:
            node[key] = draw(json_values)
    elif kind == "attr":
        field = next((f for f in ("attrs", "param", "attr") if isinstance(node.get(f), dict)),
                     "attrs")
        attrs = node.setdefault(field, {}) if isinstance(node.get(field, {}), dict) else {}
        keys = sorted(attrs) + ["kernel", "num_hidden", "num_filter", "pad", "stride",
                                "act_type", "pool_type", "slope", "eps", "momentum",
                                "no_bias", "__shape__", "__dtype__", "__lr_mult__", "bogus",
                                "weight_lr_mult", "lr_mult"]
        try:  # mostly the attributes the op takes, so that more files load
            own = sorted(get_op(node.get("op")).attrs)
        except (SymgraphError, TypeError):
            own = []
        key = draw(st.sampled_from(own) if own and draw(st.booleans()) else st.sampled_from(keys))
        attrs[key] = draw(st.one_of(st.sampled_from(PLAUSIBLE), st.sampled_from(EXTREME_TEXT),
                                    json_values))
        node[field] = attrs
    elif kind == "op":
        node["op"] = draw(st.one_of(st.sampled_from(OPS + ["null", "Convolutoin", "_backward_FullyConnected"]),
                                    st.text(max_size=10)))
    elif kind == "name":
        node["name"] = draw(st.one_of(st.sampled_from(NAMES), st.text(max_size=12)))
    elif kind == "input":
        ins = node.get("inputs") if isinstance(node.get("inputs"), list) else []
        entry = draw(entries(len(nodes)))
        if ins and draw(st.booleans()):
            ins[draw(st.integers(0, len(ins) - 1))] = entry
        elif ins and draw(st.booleans()):
            ins.pop()
        else:
            ins.append(entry)
        node["inputs"] = ins
    elif kind == "order":
        j = draw(st.integers(0, len(nodes) - 1))
        nodes[i], nodes[j] = nodes[j], nodes[i]
        if draw(st.booleans()):
            del nodes[draw(st.integers(1, len(nodes))):]
    elif kind == "head":
        doc["heads"] = [draw(entries(len(nodes)))] if draw(st.booleans()) else \
            draw(st.lists(entries(len(nodes)), max_size=3))
    elif kind == "arg_nodes":
        doc["arg_nodes"] = draw(st.lists(st.one_of(st.integers(-2, len(nodes) + 2),
                                                   json_values), max_size=4))
    elif kind == "duplicate":
        nodes.insert(draw(st.integers(0, len(nodes))), copy.deepcopy(node))
    return doc


@st.composite
def symbol_texts(draw):
    """The text of a malformed symbol file."""
    name = draw(st.sampled_from(sorted(BASES)))
    doc = copy.deepcopy(BASES[name])
    for _ in range(draw(st.integers(1, 3))):
        doc = draw(mutate(doc))
    text = json.dumps(doc, ensure_ascii=draw(st.booleans()))
    how = draw(st.sampled_from(["as is"] * 8 + ["truncate", "splice", "deep", "huge"]))
    if how == "truncate":
        text = text[:draw(st.integers(0, len(text)))]
    elif how == "splice":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(EXTREME_TEXT)) + text[at:]
    elif how == "deep":  # nesting beyond Python's recursion limit, where a value goes
        depth = draw(st.sampled_from([500, 5000, 100000]))
        text = text.replace('"inputs": []', '"inputs": ' + "[" * depth + "]" * depth, 1)
    elif how == "huge":  # one long chain of nodes on top of the net
        n = len(doc["nodes"]) if isinstance(doc.get("nodes"), list) else 0
        if n and isinstance(doc.get("heads"), list) and doc["heads"]:
            extra = [{"op": "relu", "name": f"chain{k}", "inputs": [[n - 1 + k, 0, 0]]}
                     for k in range(1000)]
            doc["nodes"] = doc["nodes"] + extra
            doc["heads"] = [[n - 1 + len(extra), 0, 0]]
            text = json.dumps(doc)
    return name, text


QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')


def no_escape(fn, *args, **kwargs):
    """fn's result, or None where it raised a SymgraphError; any other
    exception fails the test (it escaped)."""
    try:
        return fn(*args, **kwargs)
    except SymgraphError as err:
        msg = str(err).replace(LONG_NAME, "<long name>")
        assert msg and len(msg) < 2000, msg[:300]  # names what was wrong, briefly
        return None


# --------------------------------------------------------------------------
# symbol files
# --------------------------------------------------------------------------
@FUZZ
@given(symbol_texts(), st.booleans())
def test_malformed_symbol_files_never_escape(case, train):
    name, text = case
    sym = no_escape(sg.sym.load_json, text)
    event("loaded" if sym is not None else "refused")
    if sym is None:
        return
    shape = {"data": FILES[name]}
    no_escape(sym.infer_shape_partial, **shape)
    no_escape(sym.infer_shape, **shape)
    plan = no_escape(sg.plan, sym, shape, train=train)
    event("planned" if plan is not None else "not planned")
    dot = no_escape(viz.plot, sym, shape=shape, plan=plan or None)
    if dot is not None:
        # every name, whatever it holds, is escaped: the DOT text holds no
        # control characters and no string dot's scanner refuses (16,384)
        assert not any(c in dot.source for c in "\x00\x1b")
        assert all(len(q) < 16384 for q in QUOTED.findall(dot.source))
    # what loaded saves (as UTF-8) and loads again, to the same file
    sym.tojson().encode("utf-8")
    again = no_escape(sg.sym.load_json, sym.tojson())
    assert again is not None and again.tojson() == sym.tojson()


@pytest.mark.parametrize("name", sorted(FILES))
def test_the_real_files_load_plan_and_draw(name):
    # the fuzz starts from files that work: a mutation is what breaks them
    sym = sg.sym.load(os.path.join(DATA, name))
    plan = sg.plan(sym, {"data": FILES[name]}, train=True)
    assert plan.internal["arena"] > 0
    assert "digraph" in viz.plot(sym, shape={"data": FILES[name]}, plan=plan).source


# --------------------------------------------------------------------------
# shapes
# --------------------------------------------------------------------------
MLP = sg.sym.load(os.path.join(DATA, "mlp-symbol.json"))
dims = st.one_of(st.integers(-3, 2 ** 65), st.booleans(), st.none(), st.floats(),
                 st.text(max_size=3), st.sampled_from([np.int64(3), np.int32(-1), np.float32(2),
                                                       np.bool_(True), np.uint8(7)]))
shapes = st.one_of(dims, st.text(max_size=6), st.lists(dims, max_size=5),
                   st.lists(dims, max_size=5).map(tuple), st.sampled_from(
                       ["23", b"23", (2.7, 784), (True, 784), (None,), [[2], [3]], {"a": 1},
                        np.array([2, 784]), np.zeros((2, 2), int), range(1, 3), "ab"]))


def _plain_positive(shape) -> bool:
    if isinstance(shape, np.ndarray) and shape.ndim == 1:
        shape = shape.tolist()  # a NumPy vector of ints is a shape too
    return (isinstance(shape, (tuple, list))
            and all(isinstance(d, (int, np.integer)) and not isinstance(d, (bool, np.bool_))
                    and d > 0 for d in shape)
            and int(np.prod([int(d) for d in shape], dtype=object)) < 2 ** 63)


@FUZZ
@given(shapes)
def test_shapes_are_positive_ints_or_a_shape_error(shape):
    got = no_escape(MLP.infer_shape, data=shape)
    plan = no_escape(sg.plan, MLP, {"data": shape})
    # accepted exactly when it is a tuple or list of positive ints: no
    # string, float or bool is coerced into a dimension
    if shape is None:  # unknown, as MXNet: infer_shape says it cannot tell, plan refuses
        assert got == (None, None, None) and plan is None
    elif not _plain_positive(shape):
        assert got is None and plan is None, shape
    elif len(shape) >= 1:  # FullyConnected flattens: (N, ...) -> (N, 3)
        assert got[1][0] == (int(shape[0]), 3), shape
        assert plan is not None and all(type(d) is int for d in plan.shapes["data"])


@FUZZ
@given(st.one_of(st.none(), st.lists(st.tuples(st.text(max_size=5), shapes), max_size=3),
                 shapes, st.dictionaries(st.one_of(st.integers(), st.text(max_size=5)),
                                         st.just((4, 6)), max_size=2)))
def test_shape_dicts_of_any_kind(shape_dict):
    no_escape(sg.plan, MLP, shape_dict)


# --------------------------------------------------------------------------
# command lines (in-process: main(argv), as the `symgraph` script runs it)
# --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzzcli")
    good = root / "mlp.json"
    good.write_text(json.dumps(BASES["mlp-symbol.json"]))
    bad = root / "bad.json"
    bad.write_text("[" * 100000)
    weird = root / "weird.json"
    doc = copy.deepcopy(BASES["mlp-symbol.json"])
    doc["nodes"][1]["name"], doc["nodes"][3]["name"] = "<b>x</b>\t", "x" * 20000
    weird.write_text(json.dumps(doc))
    params = root / "x.params"
    params.write_bytes(open(os.path.join(DATA, "mxnet-dict.params"), "rb").read())
    (root / "folder").mkdir()
    return root


OPTIONS = {
    "plan": ["--shape", "--train", "--strategy", "--json", "--measures", "--breakdown",
             "--schedule", "--no-fuse", "--match-range", "--head", "--output", "--plot",
             "--stratgy", "--shap", "-x", "--help"],
    "viz": ["-o", "--output", "--shape", "--plan", "--train", "--strategy", "--rankdir",
            "--show-params", "--hide-params", "--range", "--collapse", "--title", "--plna"],
    "zoo": ["-o", "--classes", "--image-shape", "--clases"],
}
# values that fit an option, mostly; any option may get any of VALUES too
FITTING = {
    "--shape": ["data=4,6", "data=2,3", "data=4x6", "softmax_label=4", "data=0,6", "data=",
                "=4", "data=1" + "0" * 30, "input=4,6", "data=a,b", "data=4,6,", "data=-4,6"],
    "--strategy": ["arena", "both", "naive", "inplace", "coshare", "lower_bound", "bogus"],
    "--rankdir": ["TB", "LR", "XY"], "--schedule": ["dfs", "memory", "bfs"],
    "--head": ["fc1_output", "relu1_output", "softmax_output", "nope", "0", "-1"],
    "--range": ["fc1:fc2", ":", "fc1:", ":fc2", "nope:fc1", "a:b:c"],
    "--collapse": ["fc\\d", "(", "relu", ".*"], "--classes": ["10", "0", "-1", "x"],
    "--image-shape": ["1,28,28", "3,32,32", "0,1,1", "x"], "--match-range": ["0", "4", "-1", "x"],
    "--measures": ["auto", "none", "anchor", "bogus"],
}
VALUES = ["4", "-1", "nope", "(", "[", "mlp", "a\nb", "\x00", "é", "-", "--", "x" * 300]


OFTEN = st.sampled_from([True] * 4 + [False])  # uniform: integers() favours its bounds


@st.composite
def command_lines(draw, root):
    cmd = draw(st.sampled_from(["plan"] * 4 + ["viz"] * 4 + ["zoo"] * 2
                               + ["paln", "", "--version", "-h"]))
    paths = [root / "mlp.json"] * 6 + [
        root / "bad.json", root / "weird.json", root / "weird.json", root / "x.params",
        root / "folder", root / "missing.json", "a\nb.json", ""]
    outs = [root / f"out.{ext}" for ext in ("dot", "dot", "svg", "txt", "png", "")] + \
        [root / "nodir" / "o.dot", root / "x.params" / "o.dot", root / "folder"]
    argv = [cmd] if cmd else []
    if cmd in ("plan", "viz"):
        argv.append(str(draw(st.sampled_from(paths))))
        if draw(OFTEN):
            argv += ["--shape", "data=4,6"]
    elif cmd == "zoo" and draw(OFTEN):
        argv.append(draw(st.sampled_from(["mlp", "mlp", "lenet", "nope", "-o"])))
    for _ in range(draw(st.integers(0, 3))):
        opt = draw(st.sampled_from(OPTIONS.get(cmd, ["--help", "-x"])))
        argv.append(opt)
        if opt in ("-o", "--output", "--plot"):
            argv.append(str(draw(st.sampled_from(outs))))
        elif opt in FITTING and draw(OFTEN):
            argv.append(draw(st.sampled_from(FITTING[opt])))
        elif not draw(OFTEN):
            argv.append(draw(st.sampled_from(VALUES)))
    if cmd == "viz" and "-o" not in argv and "--output" not in argv:
        argv += ["-o", str(root / "out.dot")]  # not beside the net file: drawn with dot
    if cmd == "plan":
        argv.append("--no-xla")  # compiling for XLA's figures takes seconds a run
    return argv


def run_cli(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit_:  # --help, --version
            code = exit_.code
    return code, out.getvalue(), err.getvalue()


@settings(max_examples=int(250 * SCALE), deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_command_lines_exit_0_or_2_with_one_line(files, data):
    argv = data.draw(command_lines(files))
    code, out, err = run_cli(argv)
    event(f"{argv[0] if argv else '(none)'} exit {code}")
    assert code in (0, 2), (argv, code, err[-500:])
    assert "Traceback" not in err
    if code == 2:
        lines = err.split("\n")
        assert len(lines) == 2 and lines[1] == "", (argv, err[:500])
        assert lines[0].startswith("symgraph: error: ") and lines[0].count("symgraph:") == 1, \
            (argv, lines[0][:300])
    assert not (files / "nodir").exists()  # a missing folder is never made
