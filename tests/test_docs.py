"""The committed docs that are generated from code match the code."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_op_reference_is_up_to_date():
    out = subprocess.run([sys.executable, "-m", "symgraph.ops.doc"], capture_output=True,
                         text=True, check=True, cwd=ROOT).stdout
    with open(os.path.join(ROOT, "docs", "ops.md")) as f:
        assert f.read() == out, "docs/ops.md is stale: python -m symgraph.ops.doc > docs/ops.md"


def test_readme_links_point_at_existing_docs():
    import re
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    named = set(re.findall(r"`(docs/[\w.-]+\.md)`", readme))
    assert {"docs/guide.md", "docs/memory.md", "docs/cli.md"} <= named
    missing = [p for p in sorted(named) if not os.path.exists(os.path.join(ROOT, p))]
    assert not missing, f"README names docs that do not exist: {missing}"
