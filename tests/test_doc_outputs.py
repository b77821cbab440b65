"""Every output shown in README.md and docs/ is what the code prints now,
and every quoted table is the committed results file's (docs/shown_outputs.py)."""
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _shown():
    spec = importlib.util.spec_from_file_location(
        "shown_outputs", os.path.join(ROOT, "docs", "shown_outputs.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_doc_has_its_marked_blocks():
    shown = _shown()
    kinds = {}
    for path in shown.FILES:
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            for b in shown.blocks(path, f.read().split("\n")):
                kinds.setdefault(path, set()).add(b.kind)
    # the README's main command and docs/memory.md's reports are shown, the
    # held-out table quoted
    assert "output" in kinds["README.md"]
    assert {"output", "quote"} <= kinds["docs/memory.md"]
    with open(os.path.join(ROOT, "docs", "memory.md"), encoding="utf-8") as f:
        assert "<!-- quote: benchmarks/results/heldout/results.md" in f.read()


def test_quoted_tables_are_the_committed_results():
    assert _shown().process(check=True, only="quote") == []


def test_shown_outputs_are_what_the_commands_print():
    # every command the docs show, run as shown (about a minute on two
    # free cores: VGG-16's training step compiled, a max-batch search)
    assert _shown().process(check=True, only="output") == []


def test_a_drifted_block_is_named_and_regenerated(tmp_path, capsys):
    shown = _shown()
    results = tmp_path / "results.md"
    results.write_text("| net | MiB |\n|---|--:|\n| a | 1,024 |\n| b | 2,048 |\n")
    doc = tmp_path / "doc.md"
    doc.write_text("text\n\n<!-- output: echo 'two words' -->\n```\nold\n```\n\n"
                   f"<!-- quote: {results} -->\n| net | MiB |\n|---|--:|\n| b | 9 |\n\n"
                   f"<!-- quote: {results} -->\nWe quote 2,048 and 4,096 here.\n")
    assert shown.main(["--check", str(doc)]) == 1
    out = capsys.readouterr().out
    assert "(output: echo 'two words')" in out and "(quote: " in out
    assert "figures not in the file: 4096" in out
    assert shown.main([str(doc)]) == 0
    text = doc.read_text()
    assert "```\n$ echo 'two words'\ntwo words\n```" in text
    assert "| b | 2,048 |" in text and "| b | 9 |" not in text
    # the outputs and the table now agree; the prose figure still does not
    capsys.readouterr()
    assert shown.main(["--check", str(doc)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"drifted: {doc}:14 (quote: {results}): figures not in the file: 4096"]
