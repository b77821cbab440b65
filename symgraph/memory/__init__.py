"""Memory planning: which storage every tensor gets, and how much in all.

    import symgraph as sg
    p = sg.plan(net, {'data': (64, 3, 224, 224)}, train=True)
    print(p.report())
    p.internal        # bytes of the internal bucket under every strategy
    p.to_json()       # the `symgraph plan --json` dictionary

Stages (one module each): ``liveness`` (what is planned, when it lives),
``allocator`` (graph-free pools), ``planner`` (naive, inplace, coshare,
both, lower bound), ``arena`` (byte offsets in one buffer), ``budget``
(recompute to a memory budget), ``verify``
(static overlap check and the arena interpreter), ``report``; ``pipeline``
runs them all. XLA's figures for the same net are ``symgraph.xla``'s (xla
imports memory, never the other way round). See docs/memory.md.
"""
from .allocator import BlockPool, OffsetHeap
from .budget import ALGORITHMS, BudgetError, optimizer_bytes, parse_budget
from .liveness import Liveness, analyze
from .pipeline import Plan, as_graph, build_graph, default_wrt, plan, plan_graph
from .planner import PLACED, STRATEGIES, Assignment
from .verify import (ArenaInterpreter, StaticCheck, check_arena, check_placement, check_slots,
                     random_feeds)

__all__ = ["ALGORITHMS", "ArenaInterpreter", "Assignment", "BlockPool", "BudgetError",
           "Liveness", "OffsetHeap", "PLACED", "optimizer_bytes", "parse_budget",
           "Plan", "STRATEGIES", "analyze", "as_graph", "build_graph", "check_arena",
           "check_placement", "check_slots", "default_wrt", "StaticCheck", "plan", "plan_graph",
           "random_feeds"]
