"""An ImportError from inside symgraph fails loudly instead of making a
subcommand vanish; only a third-party package that is not installed is
reported as such (named, exit 2). The subcommand modules are replaced by
stand-ins so that each case is exactly the one named."""
import importlib
import types

import pytest

from symgraph import cli


def fake_command(name, calls, run=None):
    def add_arguments(parser):
        parser.add_argument("path", nargs="?")

    def default_run(args):
        calls.append((name, args.path))
        return 0
    return types.SimpleNamespace(__doc__=f"the {name} command", add_arguments=add_arguments,
                                 run=run or default_run)


@pytest.fixture
def commands(monkeypatch):
    """``commands[module] = exception or stand-in module``; every other
    subcommand imports as a stand-in that records its runs."""
    calls, table = [], {}
    real_import = importlib.import_module  # the patch below replaces importlib's own

    def import_module(module):
        found = table.get(module)
        if isinstance(found, BaseException):
            raise found
        if found is not None:
            return found
        if module in {m for m, _ in cli.SUBCOMMANDS.values()}:
            return fake_command(module, calls)
        return real_import(module)
    monkeypatch.setattr(cli.importlib, "import_module", import_module)
    table["calls"] = calls
    return table


def viz_module():
    return cli.SUBCOMMANDS["viz"][0]


@pytest.mark.parametrize("err", [
    ImportError("cannot import name 'graph_step' from 'symgraph.xla'", name="symgraph.xla"),
    ModuleNotFoundError("No module named 'symgraph.memory.gone'", name="symgraph.memory.gone"),
    ImportError("a broken import with no module name")])
def test_an_import_error_inside_symgraph_propagates(commands, err):
    commands[viz_module()] = err
    for argv in (["viz", "net.json"], ["plan", "net.json"], ["--help"]):
        with pytest.raises(ImportError) as info:
            cli.main(argv)
        assert info.value is err  # not swallowed, not turned into a one-line message
    assert commands["calls"] == []


def test_a_missing_third_party_package_is_named_and_the_rest_works(commands, capsys):
    commands[viz_module()] = ModuleNotFoundError("No module named 'graphviz'", name="graphviz")
    for argv in (["viz", "net.json"], ["viz", "--format", "svg", "net.json"], ["viz"],
                 ["viz", "--help"]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err.strip() == ("symgraph: error: this command needs the Python package "
                               "'graphviz', which is not installed: pip install graphviz")
    assert cli.main(["plan", "net.json"]) == 0  # the other commands are untouched
    assert commands["calls"] == [(cli.SUBCOMMANDS["plan"][0], "net.json")]
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "viz" in capsys.readouterr().out  # still listed, marked unavailable


@pytest.mark.parametrize("err,code", [
    (ModuleNotFoundError("No module named 'PIL'", name="PIL.Image"), 2),
    (ImportError("cannot import name 'Image' from 'symgraph.im2rec'", name="symgraph.im2rec"),
     None),
    (ImportError("cannot import name 'x' from 'PIL'", name="PIL"), None)])  # broken, not missing
def test_an_import_while_a_command_runs(commands, capsys, err, code):
    def run(args):
        raise err
    commands[viz_module()] = fake_command("viz", [], run=run)
    if code is None:
        with pytest.raises(ImportError):
            cli.main(["viz", "net.json"])
    else:
        assert cli.main(["viz", "net.json"]) == code
        # the extra of pyproject.toml that brings it, not the bare package
        assert capsys.readouterr().err.strip().endswith(
            "needs the Python package 'PIL', which is not installed: "
            "pip install 'symgraph[images]'")
