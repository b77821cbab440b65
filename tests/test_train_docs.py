"""docs/training.md stays true to the code: every ``sg.`` name it uses
exists, every Module call in its table exists with the keyword arguments
shown, and its throughput table is the committed benchmark result."""
import ast
import inspect
import json
import os
import re

import symgraph as sg
from symgraph.train.module import Module

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = open(os.path.join(ROOT, "docs", "training.md")).read()
RESULTS = os.path.join(ROOT, "benchmarks", "results", "train")


def _resolve(dotted: str):
    obj = sg
    for part in dotted.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


def test_every_sg_name_in_the_guide_exists():
    names = set(re.findall(r"\bsg(?:\.[A-Za-z_][A-Za-z0-9_]*)+", DOC))
    assert len(names) > 20
    missing = []
    for name in sorted(names):
        try:
            _resolve(name)
        except AttributeError:
            missing.append(name)
    assert not missing


def test_module_table_calls_exist_with_their_keywords():
    table = DOC.split("## The Module", 1)[1].split("\n\n", 2)[1]
    first_cells = " ".join(line.split(" | ")[0] for line in table.splitlines()
                           if line.startswith("| `"))
    calls = re.findall(r"`(\w+(?:\.\w+)?)\(([^`]*)\)`", first_cells)
    assert len(calls) > 15
    for call, args in calls:
        name = call.split(".")[-1]
        fn = Module if name == "Module" else getattr(Module, name)
        params = inspect.signature(fn).parameters
        shown = ast.parse(f"f({args.replace(', ...', '')})", mode="eval").body  # as Python
        words = [a.id for a in shown.args if isinstance(a, ast.Name)] + \
            [k.arg for k in shown.keywords if k.arg is not None]
        assert words or shown.keywords or not args, call
        for word in words:
            assert word in params, f"{call}: {word}"


def test_guide_names_its_optimizers_schedules_initializers_and_stores():
    for opt in ("sgd", "nag", "nesterov", "adam", "adamw", "rmsprop"):
        assert f"`{opt}`" in DOC
        sg.optimizer.create(opt)
    for sched in re.findall(r"`(\w+Scheduler)\(", DOC):
        assert hasattr(sg.lr_scheduler, sched)
    for kind in ("local", "device"):
        assert sg.kv.create(kind).type == kind


def test_guide_throughput_table_is_the_committed_result():
    result = json.load(open(os.path.join(RESULTS, "results.json")))
    assert not result["config"]["quick"]
    assert {r["net"] for r in result["rows"]} == {"resnet", "vgg"}
    assert {r["devices"] for r in result["rows"]} == {1, 2, 4, 8}
    assert {r["batch"] for r in result["rows"]} == {32, 64, 128}
    md = open(os.path.join(RESULTS, "results.md")).read()
    table = [line for line in md.splitlines() if line.startswith("| ")]
    assert len(table) == len(result["rows"]) + 1
    for line in table:
        assert line in DOC, line
    for r in result["rows"]:
        assert f"| {r['net']} | {r['devices']} | {r['batch']} | " \
               f"{r['symgraph_samples_per_s']:,.0f} | {r['plain_samples_per_s']:,.0f} | " \
               f"{r['ratio']:.2f} |" in md


def test_the_guides_first_example_runs_and_reaches_its_accuracy(capsys):
    code = re.search(r"```python\n(.*?)```", DOC, re.S).group(1)
    scope: dict = {}
    exec(compile(code, "docs/training.md", "exec"), scope)
    (name, acc), = scope["mod"].score(scope["test"], "acc")
    assert name == "accuracy" and acc >= 0.95
    assert "[('accuracy', 0.9" in capsys.readouterr().out
