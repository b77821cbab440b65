"""Fuzz: hostile budgets, placements, max-batch and plan arguments never escape.

Budgets (``--budget``, ``Module(memory_budget=)``, ``sg.plan(budget=)``),
placements (``--group2ctx``, ``group2ctx=`` dicts), ``sg.max_batch``'s
arguments, ``sg.plan``'s (shape dict values, wrt, outputs, dtypes) and
``symgraph launch``'s counts. Each case succeeds or raises a SymgraphError
that says what was wrong in one short message; the command line exits 0,
or 2 with one line. Small nets and shapes, calls in this process; set
SYMGRAPH_FUZZ_SCALE (as tests/test_fuzz_inputs.py) for a deeper hunt.
"""
import contextlib
import io
import json
import math
import os
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import symgraph as sg
from symgraph.cli import main
from symgraph.errors import SymgraphError
from symgraph.memory.budget import parse_budget
from symgraph.parallel.placement import parse_group2ctx_arg

from helpers import ROOT

SCALE = float(os.environ.get("SYMGRAPH_FUZZ_SCALE", "1"))
HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
          HealthCheck.function_scoped_fixture]


def fuzz(n: int):
    return settings(max_examples=max(1, int(n * SCALE)), deadline=None,
                    suppress_health_check=HEALTH)


DATA = os.path.join(ROOT, "tests", "data")
MLP_TEXT = open(os.path.join(DATA, "mlp-symbol.json")).read()
MLP = sg.sym.load_json(MLP_TEXT)  # data (N, 6) -> fc1 -> relu -> fc2 (3) -> softmax
MLP_SHAPES = {"data": (4, 6)}
# the MLP with its two layers in two ctx_groups
_doc = json.loads(MLP_TEXT)
for _node in _doc["nodes"]:
    if _node["name"] != "data" and _node["name"] != "softmax_label":
        _node.setdefault("attrs", {})["__ctx_group__"] = (
            "stage1" if _node["name"].startswith(("fc1", "relu1")) else "stage2")
GROUPED = sg.sym.load_json(json.dumps(_doc))

LONG = "9" * 5000


def no_escape(fn, *args, **kwargs):
    """fn's result, or None where it raised a SymgraphError (one short,
    non-empty message); any other exception escapes and fails the test."""
    try:
        return fn(*args, **kwargs)
    except SymgraphError as err:
        msg = str(err)
        assert msg.strip() and len(msg) < 2000 and "\n" not in msg.strip(), msg[:300]
        return None


def run_cli(argv):
    # text streams over bytes: launch forwards its processes' lines as bytes
    out, err = (io.TextIOWrapper(io.BytesIO(), encoding="utf-8") for _ in range(2))
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exit_:
            code = exit_.code
    texts = []
    for stream in (out, err):
        stream.flush()
        texts.append(stream.buffer.getvalue().decode("utf-8", "replace"))
    return code, texts[0], texts[1]


def assert_clean_exit(argv, code, err):
    assert code in (0, 2), (argv, code, err[-500:])
    assert "Traceback" not in err, err[-500:]
    if code == 2:
        lines = err.split("\n")
        assert len(lines) == 2 and lines[1] == "", (argv, err[:500])
        assert lines[0].startswith("symgraph: error: ") and len(lines[0]) < 2000, \
            (argv, lines[0][:300])


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostileplan")
    (root / "mlp.json").write_text(MLP_TEXT)
    (root / "grouped.json").write_text(GROUPED.tojson())
    return root


# --------------------------------------------------------------------------
# budgets
# --------------------------------------------------------------------------
BUDGET_TEXT = [
    "6GiB", "512MiB", "1.5 GiB", "6GB", "123", "1KiB", "1e300TiB", "1e308GiB", "1e309",
    "1e-300", "0", "-1", "-0", "0.5", "1.0000000001", "nan", "inf", "-inf", "NaN GiB",
    "1" + "0" * 400, LONG, "9" * 5000 + "GiB", "6 XB", "6iB", "6 G iB", "6GiBs", "GiB", "",
    " ", "1_000", "0x10", "1e", ".", "+.5e3kb", "5e-1KiB", "\x00", "²", "½GiB",
    "\u0661\u0662\u0663", "６GiB", "6\u00a0GiB", "6\nGiB", "1e99999999999", "4e-10TiB",
    "2**30", "None", "True", "[6]"]
budgets = st.one_of(
    st.sampled_from(BUDGET_TEXT), st.text(max_size=12),
    st.integers(-2 ** 80, 2 ** 80), st.floats(allow_nan=True, allow_infinity=True),
    st.from_regex(r"\A[+-]?[0-9.]{0,6}([eE][+-]?[0-9]{1,4})?\s?[kKmMgGtTiIbB]{0,3}\Z"),
    st.sampled_from([None, True, False, b"6GiB", 10 ** 400, 10 ** 5000, -10 ** 5000,
                     Decimal("1e400"), Decimal("NaN"), Fraction(10 ** 400, 3), Fraction(1, 3),
                     np.float64("nan"), np.int64(2 ** 62), np.uint64(2 ** 64 - 1),
                     np.float32(1e38), np.bool_(True), complex(1e6, 0), [1 << 20],
                     {"bytes": 1}, object()]))


def _parse_or_none(value):
    try:
        return parse_budget(value)
    except SymgraphError:
        return None


@fuzz(200)
@given(budgets)
def test_budget_values_parse_or_refuse(value):
    got = no_escape(parse_budget, value)
    event("read" if got is not None else "refused")
    if got is not None:
        assert type(got) is int and got >= 1


@fuzz(40)
@given(budgets)
def test_budgets_to_plan_and_module(value):
    expected = _parse_or_none(value)
    p = no_escape(sg.plan, MLP, MLP_SHAPES, train=True, budget=value)
    if expected is None and value is not None:
        assert p is None, value  # a budget parse_budget refuses, plan refuses too
    if p is not None and value is not None:
        assert p.total <= p.budget == expected
        json.dumps(p.to_json())
    m = no_escape(sg.mod.Module, MLP, context=sg.cpu(0), memory_budget=value)
    assert (m is None) == (expected is None and value is not None), value


@fuzz(25)
@given(data=st.data())
def test_budget_command_lines(files, data):
    budget = data.draw(st.one_of(st.sampled_from(BUDGET_TEXT), st.text(max_size=10)))
    if data.draw(st.booleans()):
        argv = ["plan", files / "mlp.json", "--shape", "data=4,6", "--train", "--no-xla",
                "--budget", budget]
    else:
        argv = ["max-batch", files / "mlp.json", "--shape", "data=1,6", "--no-xla",
                "--budget", budget] + (["--train"] if data.draw(st.booleans()) else [])
    code, out, err = run_cli(argv)
    event(f"{argv[0]} exit {code}")
    assert_clean_exit(argv, code, err)
    if _parse_or_none(budget) is None:
        assert code == 2 and "budget" in err, (argv, err)


# --------------------------------------------------------------------------
# placements
# --------------------------------------------------------------------------
DEVICES = ["cpu:0", "cpu:1", "cpu(2)", "gpu0", "gpu:1", "cpu", "cpu:", "cpu:²", "cpu:-1",
           "cpu:+1", "cpu:1.0", "cpu:99999999999999999999", "cpu:\u0661", "tpu:0", "", " ",
           "CPU:1", "cpu :1", "cpu::1", "cpu(1", "(1)", "1", "=", "cpu:1=cpu:2", "x" * 3000]
GROUPS = ["stage1", "stage2", "stage3", "", " ", "stage1 ", "STAGE1", "a,b", "=", "x" * 3000]
device_values = st.one_of(
    st.sampled_from(DEVICES[:5]), st.sampled_from(DEVICES), st.text(max_size=6),
    st.sampled_from([sg.cpu(0), sg.cpu(1), sg.gpu(0), None, 1, 1.5, True, b"cpu:1", [],
                     ["cpu:1"], ["cpu:1", "cpu:2"], ("cpu:2",), {"cpu": 1}]))
group_keys = st.one_of(st.sampled_from(GROUPS[:2]), st.sampled_from(GROUPS), st.text(max_size=6),
                       st.sampled_from([1, None, True, ("stage1",), 2.5]))


@st.composite
def group2ctx_texts(draw):
    parts = []
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["good"] * 6 + ["pair"] * 3 + ["bare", "junk"]))
        if kind == "good":  # mostly what works, so that plans are made too
            parts.append(f"{draw(st.sampled_from(GROUPS[:3]))}="
                         f"{draw(st.sampled_from(DEVICES[:5]))}")
        elif kind == "pair":
            parts.append(f"{draw(st.sampled_from(GROUPS))}={draw(st.sampled_from(DEVICES))}")
        elif kind == "bare":
            parts.append(draw(st.sampled_from(GROUPS + DEVICES)))
        else:
            parts.append(draw(st.text(max_size=8)))
    return draw(st.sampled_from([",", ", ", ",,", ";"])).join(parts)


@fuzz(150)
@given(group2ctx_texts())
def test_group2ctx_text_parses_or_refuses(text):
    got = no_escape(parse_group2ctx_arg, text)
    event("read" if got is not None else "refused")
    if got is not None:
        assert got and all(isinstance(k, str) and k for k in got)
        names = [p.partition("=")[0].strip() for p in text.split(",") if p.strip()]
        assert len(names) == len(set(names)) == len(got)  # a group given twice is refused
        assert all(c.device_type in ("cpu", "gpu") and c.device_id >= 0 for c in got.values())


# both groups mapped to a device, sometimes a group more (refused)
good_group2ctx = st.fixed_dictionaries(
    {"stage1": st.sampled_from(DEVICES[:5] + [sg.cpu(1), ["cpu:1"]]),
     "stage2": st.sampled_from(DEVICES[:5] + [sg.cpu(2)])},
    optional={"stage3": device_values})


@fuzz(60)
@given(st.one_of(good_group2ctx, st.dictionaries(group_keys, device_values, max_size=4),
                 st.sampled_from([[], "stage1=cpu:1", 5, [("stage1", "cpu:1")], {}])))
def test_group2ctx_dicts_to_plan(group2ctx):
    p = no_escape(sg.plan, GROUPED, MLP_SHAPES, train=True, group2ctx=group2ctx)
    event("planned" if p is not None else "refused")
    if p is not None:
        json.dumps(p.to_json())
        p.report()


@fuzz(25)
@given(st.one_of(good_group2ctx, st.dictionaries(group_keys, device_values, max_size=3)))
def test_group2ctx_dicts_to_module(group2ctx):
    no_escape(sg.mod.Module, GROUPED, context=sg.cpu(0), group2ctxs=group2ctx)


@fuzz(20)
@given(group2ctx_texts())
def test_group2ctx_command_lines(files, text):
    argv = ["plan", files / "grouped.json", "--shape", "data=4,6", "--train", "--no-xla",
            "--group2ctx", text]
    code, out, err = run_cli(argv)
    event(f"exit {code}")
    assert_clean_exit(argv, code, err)


# --------------------------------------------------------------------------
# max_batch
# --------------------------------------------------------------------------
AXES = [0, 1, -1, -2, 2, 5, -99, "0", 0.0, True, None, np.int64(0), 2 ** 70, [0]]
LIMITS = [1, 2, 3, 16, 64, 0, -1, 2 ** 70, 1.5, "8", True, None, np.int32(4)]
OPTIMIZERS = [None, "sgd", "SGD", "momentum", "adam", "rmsprop", "nope", "", 3, ["adam"],
              b"adam"]
MB_SHAPES = [{"data": (1, 6)}, {"data": (3, 6)}, {"data": (1, 6), "softmax_label": (1,)},
             {"data": (1, 6), "softmax_label": (2,)}, {"data": (1, 6), "softmax_label": None},
             {"data": (6,)}, {"data": ()}, {"data": (0, 6)}, {"data": None}, {}, None,
             {"data": "1,6"}, {"nope": (1, 6)}, [("data", (1, 6))], "data=1,6",
             {"data": (1, 6, 1)}, {"data": (2 ** 40, 6)}]


@fuzz(40)
@given(st.one_of(st.just(MB_SHAPES[0]), st.sampled_from(MB_SHAPES)),
       st.one_of(st.integers(2000, 10 ** 5), st.sampled_from(BUDGET_TEXT[:12]),
                 st.integers(-10, 10 ** 7)),
       st.one_of(st.just(0), st.sampled_from(AXES)),
       st.one_of(st.sampled_from([16, 64]), st.sampled_from(LIMITS)),
       st.one_of(st.sampled_from([None, "sgd", "adam"]), st.sampled_from(OPTIMIZERS)),
       st.booleans(), st.booleans())
def test_max_batch_arguments(shapes, budget, axis, limit, optimizer, train, recompute):
    r = no_escape(sg.max_batch, MLP, shapes, budget=budget, batch_axis=axis, limit=limit,
                  optimizer=optimizer, train=train, recompute=recompute, xla=False,
                  progress=False)
    event("found" if r is not None else "refused")
    if r is not None:
        assert 1 <= r.batch <= limit and r.total <= r.budget
        json.dumps(r.to_json())


def test_max_batch_batch_axis_must_be_an_int():
    with pytest.raises(SymgraphError, match="batch_axis must be an int axis, got '0'"):
        sg.max_batch(MLP, {"data": (1, 6)}, budget="1MiB", batch_axis="0", xla=False,
                     progress=False)


# --------------------------------------------------------------------------
# sg.plan's arguments
# --------------------------------------------------------------------------
SHAPE_VALUES = [(4, 6), [4, 6], (4,), (), None, (0, 6), (4, 6, 1), (-4, 6), "4,6", (4.0, 6),
                (True, 6), np.array([4, 6]), (2 ** 62, 6), {"n": 4}]
EXTRA_SHAPES = [{}, {"softmax_label": None}, {"softmax_label": (4,)}, {"softmax_label": (5,)},
                {"softmax_label": ()}, {"nope": (1,)}, {"fc1_weight": (128, 6)},
                {"fc1_weight": (2, 2)}, {"fc1_bias": None}, {"": (1,)}, {None: (1,)},
                {3: (4,)}]
DTYPES = [None, {}, {"data": "float16"}, {"data": "float32"}, {"data": np.float64},
          {"data": "bogus"}, {"data": None}, {"data": 3}, {"nope": "float32"},
          {"softmax_label": "int32"}, "float32", ["float32"], {"fc1_weight": "bfloat16"}]
OUTPUTS = [None, [0], ["softmax_output"], ["fc1_output"], ["relu1_output"], [5], [-1], [],
           "fc1_output", 0, [None], [True], ["nope"], ["fc1_output", "fc1_output"], [1.0],
           ["data"], ("fc2_output", 0)]
WRT = [None, [], ["fc1_weight"], ["nope"], "fc1_weight", [1], ["data"], ["softmax_label"],
       ["fc1_weight", "fc1_weight"], ("fc2_bias",), {"fc1_weight"}, {"fc1_weight": 1}, 3,
       [None], [b"fc1_weight"], ["fc1_weight", "nope"], {"fc2_weight": 1}.keys()]


def mostly(values, good=1):
    """One of ``values``, most often one of the first ``good`` (which work),
    so that plans are made and reported too."""
    return st.sampled_from(list(values[:good]) * (len(values) // good) + list(values))


@fuzz(120)
@given(mostly(SHAPE_VALUES, 2), mostly(EXTRA_SHAPES, 3), mostly(DTYPES, 4),
       mostly(OUTPUTS, 5), mostly(WRT, 3), st.booleans(),
       mostly([None, "mirror", "sqrt", "none", "bogus", ["relu1_output"], ["relu1"], [3]]),
       mostly([None, "adam", "bogus", 5]))
def test_plan_arguments(shape, extra, dtypes, outputs, wrt, train, recompute, optimizer):
    shapes = {"data": shape, **extra}
    p = no_escape(sg.plan, MLP, shapes, train=train, dtypes=dtypes, outputs=outputs,
                  wrt=wrt,
                  recompute=recompute, optimizer=optimizer)
    event("planned" if p is not None else "refused")
    if p is None:
        return
    # a plan made is a plan that reports: every figure a number, the shapes tuples
    doc = p.to_json()
    json.dumps(doc)
    p.report()
    assert all(isinstance(v, int) for v in p.buckets.values())
    assert all(s is not None for s in p.inferred.shapes)
    if train and wrt is not None and not isinstance(wrt, (str, int, dict)):
        assert p.buckets["gradients"] > 0


def test_plan_wrt_names_what_is_wrong():
    args = "data, fc1_weight, fc1_bias, fc2_weight, fc2_bias, softmax_label"
    with pytest.raises(SymgraphError, match=f"'nope': it is not an argument of the graph "
                                            f"\\({args}\\)"):
        sg.plan(MLP, MLP_SHAPES, train=True, wrt=["fc1_weight", "nope"])
    with pytest.raises(SymgraphError, match="wrt must be a list of argument names"):
        sg.plan(MLP, MLP_SHAPES, train=True, wrt="fc1_weight")
    with pytest.raises(SymgraphError, match="wrt names 'fc1_weight' twice"):
        sg.plan(MLP, MLP_SHAPES, train=True, wrt=["fc1_weight", "fc1_weight"])
    one = sg.plan(MLP, MLP_SHAPES, train=True, wrt=["fc1_weight"])
    args, shapes, _ = MLP.infer_shape(**MLP_SHAPES)
    weight = dict(zip(MLP.list_arguments(), args))["fc1_weight"]
    assert one.buckets["gradients"] == 4 * int(np.prod(weight))  # float32, counted once


def test_a_none_shape_is_unknown_and_the_plan_reports():
    # softmax_label: None is "unknown" (as MXNet): inferred from the net,
    # reported as given
    p = sg.plan(MLP, {"data": (4, 6), "softmax_label": None}, train=True)
    label = next(n for n in p.graph.variables if n.name == "softmax_label")
    assert p.inferred.shapes[p.graph.entry_id_of_node(label)] == (4,)
    doc = json.loads(json.dumps(p.to_json()))
    assert doc["shapes"] == {"data": [4, 6], "softmax_label": None}
    assert "softmax_label" in p.report()
    # max_batch leaves it unknown at every batch: inferred, not scaled
    r = sg.max_batch(MLP, {"data": (1, 6), "softmax_label": None}, budget=10 ** 6,
                     xla=False, progress=False, limit=8)
    assert r.batch == 8 and r.plan.shapes == {"data": (8, 6)}


def test_the_issue_escapes_are_one_line(files):
    cases = [
        (["plan", files / "mlp.json", "--shape", "data=4,6", "--train", "--no-xla",
          "--budget", "1e300TiB"], "1e300TiB"),
        (["max-batch", files / "mlp.json", "--shape", "data=1,6", "--no-xla",
          "--budget", "1e308GiB"], "1e308GiB"),
        (["plan", files / "grouped.json", "--shape", "data=4,6", "--no-xla",
          "--group2ctx", "stage1=cpu:\u00b2"], "cpu:\u00b2"),
        (["plan", files / "grouped.json", "--shape", "data=4,6", "--no-xla",
          "--group2ctx", "stage1=cpu:1,stage2=cpu:2,stage1=cpu:3"], "'stage1' is given twice"),
        (["launch", "-n", "99999999999999999999", "--", "true"], "-n is at most"),
    ]
    for argv, named in cases:
        code, out, err = run_cli(argv)
        assert_clean_exit(argv, code, err)
        assert code == 2 and named in err, (argv, err)
    with pytest.raises(SymgraphError, match="'cpu:\u00b2' is not a device"):
        sg.plan(GROUPED, MLP_SHAPES, group2ctx={"stage1": "cpu:\u00b2", "stage2": "cpu:1"})


# --------------------------------------------------------------------------
# launch's counts (refused before anything starts)
# --------------------------------------------------------------------------
COUNTS = ["0", "-1", "257", "99999999999999999999", "1e3", "x", "", "2.0", "٣", "²"]


@fuzz(25)
@given(st.sampled_from(["-n", "--devices-per-process", "--timeout", "--port"]),
       st.one_of(st.sampled_from(COUNTS + ["nan", "inf", "-inf", "0x10", "70000"]),
                 st.text(max_size=5)))
def test_launch_hostile_counts(option, value):
    argv = ["launch", "-n", "1", option, value, "--", "true"]
    if option == "-n":
        argv = ["launch", "-n", value, "--", "true"]
    code, out, err = run_cli(argv)
    event(f"exit {code}")
    assert_clean_exit(argv, code, err)


def test_budget_overflow_is_one_line():
    for text in ("1e300TiB", "1e308GiB"):
        with pytest.raises(SymgraphError, match="is above 9,223,372,036,854,775,807 bytes"):
            parse_budget(text)
        with pytest.raises(SymgraphError, match="budget"):
            sg.mod.Module(MLP, context=sg.cpu(0), memory_budget=text)
    assert not math.isinf(parse_budget("1e6TiB"))
