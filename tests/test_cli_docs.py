"""docs/cli.md matches the commands: every option it names for a command is
in that command's --help, every option in --help is documented, and the
pictures it shows exist and are what examples/viz_examples.py draws."""
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from helpers import ROOT, load_script
DOC = os.path.join(ROOT, "docs", "cli.md")
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[a-zA-Z])\b")
HEADING = re.compile(r"^#{2,3} `symgraph ([a-z0-9 -]+)`\s*$", re.M)


COMMANDS = ("plan", "max-batch", "viz", "zoo", "bench memory", "bench train", "bench planner",
            "bench io", "bench recompute", "bench cifar", "im2rec", "launch")
COMMAND_LINE = re.compile(r"^\$? ?symgraph (bench [a-z]+|[a-z0-9-]+)\b(.*)$")


def documented_options():
    """``{command: options}`` from docs/cli.md: a command's section names
    its options, except that an example line (``$ symgraph zoo ... -o x``)
    names options of the command it runs. ``None`` collects the options
    named outside every section."""
    with open(DOC) as f:
        lines = f.read().splitlines()
    out = {c: set() for c in COMMANDS}
    out["bench"] = set()
    out[None] = set()
    current = None
    for line in lines:
        head = HEADING.match(line)
        if head:
            current = head.group(1).strip()
            continue
        cmd = COMMAND_LINE.match(line.strip())
        if cmd and cmd.group(1) in out:
            out[cmd.group(1)] |= set(OPTION.findall(cmd.group(2)))
        else:
            out[current] |= set(OPTION.findall(line))
    return out


def help_text(command):
    run = subprocess.run([sys.executable, "-m", "symgraph.cli", *command.split(), "--help"],
                         capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_every_command_has_a_section():
    with open(DOC) as f:
        headed = {m.group(1).strip() for m in HEADING.finditer(f.read())}
    assert headed == set(COMMANDS) | {"bench"}


@pytest.mark.parametrize("command", ["plan", "max-batch", "viz", "zoo", "bench memory", "bench train",
                                     "bench io", "bench recompute", "bench cifar", "im2rec",
                                     "launch"])
def test_documented_options_exist_and_every_option_is_documented(command):
    documented = documented_options()[command]
    helped = help_text(command)
    usage = helped.split("\n\n")[0]  # the options a command takes are in its usage lines
    in_help = set(OPTION.findall(helped))
    assert documented, f"no options documented for symgraph {command}"
    missing = sorted(documented - in_help)
    assert not missing, f"docs/cli.md names options `symgraph {command}` lacks: {missing}"
    undocumented = sorted(o for o in set(OPTION.findall(usage)) - {"-h"} if o not in documented)
    assert not undocumented, f"`symgraph {command}` options missing from docs/cli.md: " \
                             f"{undocumented}"


def test_options_outside_the_sections_exist():
    named = documented_options()
    everywhere = "".join(help_text(c) for c in ("plan", "viz", "zoo"))
    assert named[None] and named[None] <= set(OPTION.findall(everywhere))
    # the planner benchmark passes its arguments through: none are named here
    assert named["bench planner"] <= {"--help"} and not named["bench"]


def test_plan_documents_plot():
    with open(DOC) as f:
        assert "| `--plot OUT.png` | memory timeline picture" in f.read()


def test_subcommand_help_keeps_line_breaks():
    # the description is the module docstring; its usage lines stay lines
    helped = help_text("viz")
    assert "\n    symgraph viz NET.json [-o OUT.svg|.png|.pdf|.dot]" in helped


def _viz_examples():
    return load_script("examples", "viz_examples.py")


@pytest.mark.skipif(shutil.which("dot") is None,
                    reason="Graphviz's dot is not installed (.ci/run installs it)")
def test_example_pictures_are_drawn_and_committed(tmp_path):
    written = _viz_examples().main(str(tmp_path))
    names = sorted(os.path.basename(p) for p in written)
    assert names == sorted(os.listdir(tmp_path))
    with open(DOC) as f:
        shown = set(re.findall(r"!\[[^]]*\]\(images/([\w.-]+)\)", f.read()))
    # the docs show every picture the script draws, and nothing else
    assert shown == set(names)
    for name in names:
        path = tmp_path / name
        size = path.stat().st_size
        assert 1000 < size < 150 * 1024, (name, size)
        committed = os.path.join(ROOT, "docs", "images", name)
        assert os.path.exists(committed), f"run python examples/viz_examples.py ({name})"
        assert os.path.getsize(committed) < 150 * 1024
        if name.endswith(".svg"):
            root = ET.parse(path).getroot()
            nodes = [g for g in root.iter("{http://www.w3.org/2000/svg}g")
                     if g.get("class") == "node"]
            assert len(nodes) >= 5, name
        else:
            assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
