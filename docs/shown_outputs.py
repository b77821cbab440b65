"""Regenerate, or check, every output and quoted figure shown in the docs.

A shown output is a fenced block right after a marker line::

    <!-- output: symgraph plan vgg16.json --shape data=64,3,224,224 --train -->
    <!-- output bare head=20: symgraph zoo vgg16 -o vgg16.json && symgraph plan ... -->

The command runs under bash in a scratch folder (``NAME.json`` of a zoo net
is written there first, as ``symgraph zoo NAME -o NAME.json``) with
``JAX_PLATFORMS=cpu``; the block becomes ``$ COMMAND`` and what it printed
(stdout, then stderr). ``bare`` leaves the ``$`` line out (the command is
shown just above); ``head=N`` keeps the first N lines and adds ``...``.

A quoted table is a markdown table right after::

    <!-- quote: benchmarks/results/heldout/results.md key=3 -->

Each of its rows is the row of that committed file whose first ``key``
cells (default 1) are the same, and its header is the header of the file's
table holding that row: regenerating copies them, checking compares. A
marker before a paragraph instead of a table quotes prose: every figure in
the paragraph must occur in the file (checked; it cannot be regenerated).

    python docs/shown_outputs.py            # rewrite every block
    python docs/shown_outputs.py --check    # exit 1 naming each drifted block
    python docs/shown_outputs.py --check --only quote   # the cheap part
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = ("README.md", "docs/memory.md", "docs/benchmarks.md", "docs/guide.md",
         "docs/design.md")
MARK = re.compile(r"^<!-- (output|quote)((?: [a-z]+(?:=\S+)?)*?)?: (.+?) -->$")
FIGURE = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?")


class Block:
    """One marked block: where it is, what it asks for, what it shows."""

    def __init__(self, path, line, kind, opts, arg, start, end):
        self.path, self.line, self.kind, self.arg = path, line, kind, arg
        self.opts = dict(o.split("=", 1) if "=" in o else (o, True) for o in opts.split())
        self.start, self.end = start, end  # the shown lines: [start, end)

    @property
    def name(self):
        return f"{self.path}:{self.line} ({self.kind}: {self.arg})"


def blocks(path, lines):
    """The marked blocks of one file, in order."""
    out = []
    for i, text in enumerate(lines):
        m = MARK.match(text.strip())
        if not m:
            continue
        kind, opts, arg = m.group(1), (m.group(2) or ""), m.group(3)
        if kind == "quote":  # quote: PATH [key=N]
            arg, _, more = arg.partition(" ")
            opts += " " + more
        j = i + 1
        if j < len(lines) and lines[j].startswith("```"):
            k = j + 1
            while k < len(lines) and not lines[k].startswith("```"):
                k += 1
            if k == len(lines):
                raise SystemExit(f"{path}:{i + 1}: the block after the marker never closes")
            out.append(Block(path, i + 1, kind, opts, arg, j + 1, k))
        elif kind == "quote":
            k = j
            while k < len(lines) and lines[k].strip():
                k += 1
            out.append(Block(path, i + 1, kind, opts, arg, j, k))
        else:
            raise SystemExit(f"{path}:{i + 1}: an output marker must precede a ``` block")
    return out


def _zoo_names():
    from symgraph.models import list_models
    return set(list_models())


def run_output(block, scratch, cache):
    """The lines a shown command prints, as the block shows them (a command
    shown twice runs once)."""
    cmd = block.arg
    if cmd not in cache:
        cache[cmd] = _run(cmd, scratch)
    shown = list(cache[cmd])
    if "head" in block.opts:
        n = int(block.opts["head"])
        if len(shown) > n:
            shown = shown[:n] + ["  ..."]
    return ([] if "bare" in block.opts else [f"$ {cmd}"]) + shown


def _run(cmd, scratch):
    zoo = _zoo_names()
    # `python` and `symgraph` in a shown command are this interpreter and
    # this checkout's code, installed or not
    shims = os.path.join(scratch, ".bin")
    if not os.path.isdir(shims):
        os.makedirs(shims)
        for name, body in (("python", f'exec "{sys.executable}" "$@"'),
                           ("symgraph", f'exec "{sys.executable}" -m symgraph.cli "$@"')):
            with open(os.path.join(shims, name), "w") as f:
                f.write(f"#!/bin/sh\n{body}\n")
            os.chmod(os.path.join(shims, name), 0o755)
    env = dict(os.environ, JAX_PLATFORMS="cpu", COLUMNS="120")
    env["PATH"] = shims + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    for word in shlex.split(cmd.replace("&&", " ")):
        stem = word[:-5] if word.endswith(".json") else None
        if stem in zoo and not os.path.exists(os.path.join(scratch, word)):
            subprocess.run([sys.executable, "-m", "symgraph.cli", "zoo", stem, "-o", word],
                           cwd=scratch, env=env, check=True, capture_output=True)
    r = subprocess.run(["bash", "-c", f"set -o pipefail; {cmd}"], cwd=scratch, env=env,
                       capture_output=True, text=True, timeout=900)
    text = r.stdout + r.stderr
    return [ln.rstrip() for ln in text.rstrip("\n").splitlines()]


def _cells(row):
    return [c.strip() for c in row.strip().strip("|").split("|")]


def _tables(path):
    """Every markdown table of a file: (header, separator, rows)."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        lines = f.read().splitlines()
    found, i = [], 0
    while i < len(lines):
        if (lines[i].startswith("|") and i + 1 < len(lines)
                and re.match(r"^\|[\s:|-]+\|$", lines[i + 1])):
            rows, k = [], i + 2
            while k < len(lines) and lines[k].startswith("|"):
                rows.append(lines[k])
                k += 1
            found.append((lines[i], lines[i + 1], rows))
            i = k
        else:
            i += 1
    return found


def quote_table(block, shown):
    """The quoted table as the committed file has it now."""
    path, key = block.arg, int(block.opts.get("key", 1))
    tables = _tables(path)
    out, header = [], None
    for row in shown[2:]:
        want = _cells(row)[:key]
        hit = [(t, r) for t in tables for r in t[2] if _cells(r)[:key] == want]
        if not hit:
            raise LookupError(f"no row {' | '.join(want)} in {path}")
        (h, sep, _), r = hit[0]
        header = header or (h, sep)
        out.append(r)
    return list(header or shown[:2]) + out


def figures(text):
    """The figures of a text, commas dropped; versions (1.9.1) and small
    counts (under 100) are no figures."""
    text = re.sub(r"\d+\.\d+\.\d+|`[^`]*`", " ", text)
    return [f.replace(",", "") for f in FIGURE.findall(text)
            if len(f.replace(",", "").lstrip("-")) >= 3]


def check_prose(block, shown):
    """Figures of a quoted paragraph the committed file does not hold."""
    with open(os.path.join(ROOT, block.arg), encoding="utf-8") as f:
        have = set(figures(f.read()))
    return [f for f in figures(" ".join(shown)) if f.lstrip("-") not in have and f not in have]


def process(check, only=None, files=FILES):
    """Regenerate (or, with check, compare) every block; the drifted names."""
    drifted, cache = [], {}
    with tempfile.TemporaryDirectory(prefix="shown-outputs-") as scratch:
        for path in files:
            full = os.path.join(ROOT, path)
            with open(full, encoding="utf-8") as f:
                lines = f.read().split("\n")
            new = list(lines)
            for b in reversed(blocks(path, lines)):
                if only and b.kind != only:
                    continue
                shown = lines[b.start:b.end]
                if b.kind == "output":
                    want = run_output(b, scratch, cache)
                elif shown and shown[0].startswith("|"):
                    try:
                        want = quote_table(b, shown)
                    except LookupError as e:
                        drifted.append(f"{b.name}: {e}")
                        continue
                else:
                    missing = check_prose(b, shown)
                    if missing:
                        drifted.append(f"{b.name}: figures not in the file: {', '.join(missing)}")
                    continue
                if want != shown:
                    drifted.append(b.name)
                    new[b.start:b.end] = want
            if not check and new != lines:
                from symgraph.util import atomic_write_text
                atomic_write_text(full, "\n".join(new))
    return drifted


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="change nothing; exit 1 naming each block that drifted")
    ap.add_argument("--only", choices=("output", "quote"), help="one kind of block")
    ap.add_argument("files", nargs="*", help=f"files (default: {', '.join(FILES)})")
    args = ap.parse_args(argv)
    drifted = process(args.check, args.only, tuple(args.files) or FILES)
    for name in drifted:
        print(("drifted: " if args.check else "rewritten or unfixable: ") + name)
    return 1 if (args.check and drifted) else 0


if __name__ == "__main__":
    sys.exit(main())
