"""Invariants of the planner, the registry and the passes are checked by
explicit exceptions (SymgraphErrors naming what broke), not by ``assert``,
which ``python -O`` removes. (The allocator's double release and double free
are tested in test_memory_planner.)"""
import os
import subprocess
import sys

import pytest

from symgraph.errors import GraphError, OpError, PlanError, SymgraphError
from symgraph.graph import Entry, Graph, Node
from symgraph.ops.registry import OpDef

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def op(name, **kw):
    return OpDef(name=name, lower=lambda p, ctx, *xs: xs[0],
                 infer_shape=lambda p, s: (s, [s[0]]), **kw)


def test_an_op_with_an_unknown_category_is_refused_by_name():
    with pytest.raises(OpError, match="op 'my_op': category 'fused' is not one of "
                                      "elementwise, injective, reduction, opaque"):
        op("my_op", category="fused")


def test_a_rewrite_reading_a_removed_output_is_a_graph_error():
    # prune removes the outputs nothing reads through Graph.rewrite
    x = Node(None, "x")
    old = Node(op("two", outputs=("a", "b")), "split", {}, [Entry(x, 0)])
    reader = Node(op("one"), "reader", {}, [Entry(old, 1)])
    new = Node(op("one"), "split", {}, [Entry(x, 0)])
    with pytest.raises(GraphError, match="output 1 of node 'split' is read but its rewrite "
                                         "removed it"):
        Graph([Entry(reader, 0)]).rewrite(
            lambda n, ins: [Entry(new, 0), None] if n is old else None)


def test_the_checks_stay_under_python_O():
    code = ("from symgraph.memory.allocator import BlockPool\n"
            "from symgraph.errors import PlanError\n"
            "p = BlockPool(); b = p.request(8); p.release(b)\n"
            "try:\n    p.release(b)\nexcept PlanError as e:\n    print('caught', e)\n")
    out = subprocess.run([sys.executable, "-O", "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert out.stdout.startswith("caught block 0 released twice")
    assert issubclass(PlanError, SymgraphError) and issubclass(GraphError, SymgraphError)


def test_no_assert_statement_guards_the_package():
    import ast
    found = []
    for folder, _, files in os.walk(os.path.join(ROOT, "symgraph")):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                with open(path, encoding="utf-8") as fh:
                    tree = ast.parse(fh.read())
                found += [f"{os.path.relpath(path, ROOT)}:{n.lineno}" for n in ast.walk(tree)
                          if isinstance(n, ast.Assert)]
    assert not found, f"assert (removed by python -O) at {', '.join(found)}"
