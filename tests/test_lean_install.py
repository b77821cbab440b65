"""A plain ``pip install symgraph`` plans, draws and sizes nets; the image
pipeline, plots and the examples' data come with extras, and a command
that lacks one names the extra (``symgraph/extras.py``).

The commands run in a child whose imports of the extras' packages fail,
as on a machine that installed none of them. (.ci/run also installs the
planning-only package in a clean venv and plans VGG-16.)"""
from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
import tomllib

import numpy as np
import pytest

from symgraph.extras import EXTRA_OF, install_hint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPTIONAL = sorted(set(EXTRA_OF) - {"jax_cuda12_plugin"})

# a child that runs ``symgraph ARGS`` with the optional packages missing
CHILD = f"""
import importlib.abc, sys
class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in {set(OPTIONAL)!r}:
            raise ModuleNotFoundError(f"No module named '{{name}}'", name=name)
sys.meta_path.insert(0, Missing())
from symgraph.cli import main
sys.exit(main(sys.argv[1:]))
"""


def pyproject() -> dict:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def requirement_names(reqs) -> set:
    return {re.split(r"[<>=\[ ;]", r, maxsplit=1)[0].lower() for r in reqs}


def run_bare(args, cwd):
    env = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, "-c", CHILD, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_each_optional_package_comes_with_the_extra_that_names_it():
    project = pyproject()
    core = requirement_names(project["dependencies"])
    extras = project["optional-dependencies"]
    dists = importlib.metadata.packages_distributions()
    for module, extra in EXTRA_OF.items():
        names = {d.lower() for d in dists.get(module, ())}
        assert names, f"{module} is not installed here: the test environment lacks an extra"
        assert names & requirement_names(extras[extra]), (module, extra)
        assert not names & core, f"{module} is a core dependency, not the '{extra}' extra's"
        assert install_hint(module) == f"pip install 'symgraph[{extra}]'"
    # the test extra brings every extra the test suite imports
    assert any(r.startswith("symgraph[") and "images" in r and "plots" in r
               for r in extras["test"])


def test_plan_viz_and_max_batch_need_no_extra(tmp_path):
    steps = [["zoo", "mlp", "-o", "mlp.json"],
             ["plan", "mlp.json", "--shape", "data=8,784", "--train"],
             ["viz", "mlp.json", "--shape", "data=8,784", "-o", "mlp.svg"],
             ["max-batch", "mlp.json", "--shape", "data=1,784", "--train",
              "--budget", "64MiB"]]
    for args in steps:
        r = run_bare(args, tmp_path)
        assert r.returncode == 0, (args, r.stderr)
    assert (tmp_path / "mlp.svg").stat().st_size > 0
    assert "footprint of the program" in run_bare(steps[1], tmp_path).stdout


def test_a_command_without_its_extra_names_the_extra(tmp_path):
    from PIL import Image  # this process has the extra; the child has not
    folder = tmp_path / "imgs" / "cat"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(2):
        Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    r = run_bare(["im2rec", "--list", "--recursive", "data", "imgs"], tmp_path)
    assert r.returncode == 0, r.stderr  # a list needs no image package
    r = run_bare(["im2rec", "data", "imgs"], tmp_path)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("symgraph: error: ")
    assert lines[0].endswith("pip install 'symgraph[images]'")
    assert not (tmp_path / "data.rec").exists()  # nothing half-written under the final name


@pytest.mark.parametrize("module", sorted(EXTRA_OF))
def test_the_hint_is_one_pip_command(module):
    assert re.fullmatch(r"pip install 'symgraph\[[a-z0-9-]+\]'", install_hint(module))
