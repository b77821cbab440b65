"""The ``symgraph`` command line.

Each subcommand lives with the code it drives and exposes two functions:
``add_arguments(parser)`` and ``run(args) -> int``. Bad input raises a
SymgraphError (or OSError/ValueError from reading files); ``main`` prints
it as one line on stderr and exits 2 -- never a traceback.
"""
from __future__ import annotations

import argparse
import difflib
import importlib
import json
import os
import re
import sys

from .errors import SymgraphError

# name -> (module, one-line help)
SUBCOMMANDS = {
    "plan": ("symgraph.memory.cli", "memory plan report of a network"),
    "max-batch": ("symgraph.memory.maxbatch_cli", "the largest batch that fits a memory budget"),
    "viz": ("symgraph.viz", "draw a network (and its memory plan) with graphviz"),
    "zoo": ("symgraph.models.cli", "write a model-zoo network as symbol JSON"),
    "bench": ("symgraph.bench", "run a benchmark: memory, planner, train, io, recompute, "
              "cifar"),
    "im2rec": ("symgraph.im2rec", "make image lists and pack them into record files"),
    "launch": ("symgraph.parallel.launch", "start N local processes of a command for "
               "multi-process training"),
}


# commands that choose JAX's devices themselves (simulated CPU devices, child
# processes): the command line must not start JAX's backends before them
OWN_DEVICES = ("symgraph.parallel.launch", "symgraph.bench")


class UsageError(SymgraphError):
    """Bad command-line arguments."""


class MissingDependency(SymgraphError):
    """A third-party package a command needs is not installed."""


def _missing_dependency(err: ImportError) -> MissingDependency | None:
    """The error to report for ``err`` if it says a third-party package is
    not installed; None for anything else -- an ImportError from inside
    symgraph is a bug and must propagate, not make a command vanish."""
    name = getattr(err, "name", None)
    if not isinstance(err, ModuleNotFoundError) or not name:
        return None
    top = name.split(".")[0]
    if top == "symgraph":
        return None
    from .extras import install_hint
    return MissingDependency(f"this command needs the Python package '{top}', which is not "
                             f"installed: {install_hint(top)}")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, like every other bad input
        # main prints the one "symgraph: error:"; a subcommand names itself
        where = self.prog.partition(" ")[2]
        raise UsageError(f"{where}: {_suggest_choice(message)}" if where
                         else _suggest_choice(message))

    def parse_args(self, args=None, namespace=None):
        args, extras = self.parse_known_args(args, namespace)
        if extras:
            # reported by the (sub)command whose options were mistyped
            parser = _chosen_parser(self, args)
            parser.error(f"unrecognized arguments: {' '.join(extras)}"
                         + _suggest_options(parser, extras))
        return args


def _chosen_parser(parser, args):
    """The innermost (sub)parser that ``args`` went through (``bench memory``)."""
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        chosen = subs and getattr(args, subs[0].dest, None)
        if not chosen or chosen not in subs[0].choices:
            return parser
        parser = subs[0].choices[chosen]


def _suggest_options(parser, extras) -> str:
    """"; did you mean --shape?" for the mistyped options among ``extras``."""
    known = [o for a in parser._actions for o in a.option_strings
             if a.help is not argparse.SUPPRESS]
    hints = []
    for word in extras:
        if not word.startswith("-") or re.fullmatch(r"-\d.*", word):
            continue  # a value, or a negative number
        near = difflib.get_close_matches(word.partition("=")[0], known, n=1, cutoff=0.6)
        if near and near[0] not in hints and near[0] != word:
            hints.append(near[0])
    return f"; did you mean {' or '.join(hints)}?" if hints else ""


def _suggest_choice(message: str) -> str:
    """argparse's "invalid choice: 'paln' (choose from ...)" with "did you
    mean 'plan'?" added when one choice is near."""
    m = re.search(r"invalid choice: '(.*)' \(choose from (.*)\)$", message, re.S)
    if not m:
        return message
    choices = re.findall(r"'([^']*)'", m.group(2))
    near = difflib.get_close_matches(m.group(1), choices, n=1, cutoff=0.6)
    return message + (f"; did you mean '{near[0]}'?" if near else "")


def _one_line(message) -> str:
    """An error message as one line of stderr: the line breaks a path or a
    name may hold are shown escaped (\\n), and a message that names the
    program itself does not say "symgraph:" twice."""
    text = str(message)
    text = re.sub(r"^symgraph(?::| (?=[a-z]+:))\s*", "", text)
    return "".join(repr(c)[1:-1] if c in _BREAKS else c for c in text)


# what str.splitlines breaks at, and the other control characters a
# terminal acts on (tabs are kept)
_BREAKS = frozenset("\x85\u2028\u2029\x7f") | {chr(i) for i in range(32)} - {"\t"}


def parse_shapes(items) -> dict:
    """``['data=64,3,224,224', 'label=64']`` -> ``{'data': (64, 3, 224, 224), ...}``;
    dimensions are separated by commas or ``x`` (``data=64x3x224x224``)."""
    from .util import parse_dims
    shapes = {}
    for item in items or []:
        name, sep, dims = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"bad --shape {item!r}: expected NAME=D1,D2,... such as "
                             f"data=64,3,224,224")
        if name.strip() in shapes:
            raise UsageError(f"bad --shape {item!r}: {name.strip()!r} is given twice")
        try:
            shapes[name.strip()] = parse_dims(dims)
        except ValueError as err:
            raise UsageError(f"bad --shape {item!r}: {err}; expected NAME=D1,D2,... such "
                             f"as data=64,3,224,224") from None
    return shapes


def check_output_folder(path) -> None:
    """A one-line error, before any work, when the folder ``path`` would be
    written into does not exist: a mistyped folder is not silently made."""
    path = os.fspath(path)
    folder = os.path.dirname(path)
    if folder and not os.path.isdir(folder):
        if os.path.exists(folder):
            raise UsageError(f"cannot write {path}: part of {folder} is a file, not a folder")
        raise UsageError(f"cannot write {path}: the folder {folder} does not exist")


def check_net_file(path) -> str:
    """``path`` as a string if it names a file to read; a one-line
    SymgraphError if it is missing or a folder."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise SymgraphError(f"cannot read {path}: no such file")
    if os.path.isdir(path):
        raise SymgraphError(f"cannot read {path}: it is a folder, not a symbol JSON file")
    return path


def load_net(path):
    """The Symbol in an MXNet symbol-JSON file, for the commands that take
    one: one-line errors for a path that cannot be read, serialize's errors
    for a bad file."""
    path = check_net_file(path)
    from .symbol import load
    try:
        return load(path)
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as err:
        # json.JSONDecodeError is a ValueError; serialize names most problems itself
        raise SymgraphError(f"cannot load {path}: {type(err).__name__}: {err}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="symgraph", description=(
        "symgraph: a memory-planning graph compiler for deep learning. "
        "Networks are MXNet symbol-JSON files."))
    from . import __version__
    parser.add_argument("--version", action="version", version=f"symgraph {__version__}")
    subs = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    parser.unavailable = {}  # command -> MissingDependency, raised when it is run
    for name, (module, help_) in SUBCOMMANDS.items():
        try:
            mod = importlib.import_module(module)
        except ImportError as err:
            missing = _missing_dependency(err)
            if missing is None:
                raise
            # the command stays listed and says what to install when run
            subs.add_parser(name, help=f"{help_} (unavailable: {missing})")
            parser.unavailable[name] = missing
            continue
        # the module docstring is the description: keep its line breaks
        sub = subs.add_parser(name, help=help_, description=(mod.__doc__ or help_).strip(),
                              formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(sub)
        sub.set_defaults(_run=mod.run)
    return parser


def main(argv=None) -> int:
    try:
        parser = build_parser()
        argv = sys.argv[1:] if argv is None else list(argv)
        # the global options take no value: the first other word is the command
        command = next((a for a in argv if not a.startswith("-")), None)
        if command in parser.unavailable:
            raise parser.unavailable[command]
        args = parser.parse_args(argv)
        if not getattr(args, "_run", None):
            parser.print_usage(sys.stdout)
            raise UsageError(f"no command given; choose one of {', '.join(SUBCOMMANDS)} "
                             f"(symgraph --help says more)")
        if not args._run.__module__.startswith(OWN_DEVICES):
            from .targets import start_quietly
            start_quietly()
        code = int(args._run(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not at exit past this handler
        return code
    except BrokenPipeError:
        # the reader went away (`symgraph zoo vgg16 | head`): nothing to say.
        # Python's recipe: point stdout at devnull so the flush at exit
        # cannot fail again. Exit 141 (128 + SIGPIPE) as cat or yes do when
        # their reader quits: under `set -o pipefail` a cut-off output is
        # not a success.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass  # stdout is no real file (a test's capture): nothing to flush
        return 141
    except SymgraphError as err:
        print(f"symgraph: error: {_one_line(err)}", file=sys.stderr)
        return 2
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as err:
        print(f"symgraph: error: {_one_line(err)}", file=sys.stderr)
        return 2
    except ImportError as err:
        # a package imported when a command runs (graphviz, Pillow ...)
        missing = _missing_dependency(err)
        if missing is None:
            raise
        print(f"symgraph: error: {missing}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("symgraph: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
