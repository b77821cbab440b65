"""Random networks for the planner's speed benchmark (``symgraph bench
planner``) and its property tests (tests/test_memory_*.py). Not part of the
memory library: it lives with the benchmark, which an installed symgraph
runs, and the tests import it from here.

``random_net(rnd, n)`` builds a DAG of n op nodes from ops registered in
the core: unary elementwise ops and activations, binary elementwise ops,
``ElementWiseSum`` fan-in, ``FullyConnected`` (which changes the width, so
sizes vary), ``SliceChannel`` (a multi-output node), ``Dropout`` (a hidden
output) -- with branches, joins and tensors read many times. ``rnd`` is a
``random.Random`` (hypothesis' ``st.randoms()`` in the tests, so failures
shrink). Inputs are picked among the last ``window`` tensors, which keeps
the number of live tensors bounded as real nets do; ``window=None`` picks
from every tensor made so far.

No two tensors are bound to hold the same values, which would let a plan
that overwrites one with the other pass the arena interpreter: no node
reads one value twice (``x - x`` is zero whatever x holds), no node
repeats another (same op, attributes and input values), and a value is
copied (``identity``, ``Dropout``, the identity at inference) at most once.

``chain_net(n)`` is a deep chain (FullyConnected every few layers).
"""
from __future__ import annotations

import random as _random

from .. import symbol as sym
from ..ops.registry import _REGISTRY

UNARY = [("Activation", {"act_type": "relu"}), ("Activation", {"act_type": "tanh"}),
         ("sigmoid", {}), ("tanh", {}), ("negative", {}), ("abs", {}), ("identity", {}),
         ("_mul_scalar", {"scalar": 0.5}), ("_plus_scalar", {"scalar": 0.25})]
BINARY = ["elemwise_add", "elemwise_sub", "elemwise_mul"]


def random_net(rnd: _random.Random, num_nodes: int, *, batch: int = 2,
               widths=(2, 4, 6, 8), window: int | None = 8, multi_output: bool = True,
               dropout: bool = True, loss: bool = False, extra_outputs: float = 0.1):
    """(Symbol, input shapes) of a random DAG with ``num_nodes`` op nodes
    (one more with ``loss``). Widths are even so SliceChannel can halve them."""
    has_slice = "SliceChannel" in _REGISTRY
    w0 = rnd.choice(widths)
    pool = [(sym.Variable("data"), w0)]
    outputs = []
    kinds = ["unary"] * 4 + ["binary"] * 3 + ["fc"] * 2 + ["sum"]
    if multi_output and has_slice:
        kinds.append("slice")
    if dropout:
        kinds.append("dropout")

    def pick():
        lo = 0 if window is None else max(0, len(pool) - window)
        return pool[rnd.randrange(lo, len(pool))]

    value = {id(pool[0][0]): 0}  # tensor -> its value class (copies share one)
    copied = set()                # value classes copied once already
    made = set()                  # what each node computes: no node twice

    def add(y, w, cls=None):
        value[id(y)] = len(value) if cls is None else cls
        pool.append((y, w))

    def computes(op, attrs, inputs, commutes=False):
        if op == "Activation":  # Activation(tanh) is tanh
            op, attrs = attrs["act_type"], {}
        vals = [value[id(v)] for v in inputs]
        return (op, tuple(sorted(attrs.items())), tuple(sorted(vals) if commutes else vals))

    def partners(x, w, k):
        """Up to k tensors of width w, each of another value than x and each other."""
        lo = 0 if window is None else max(0, len(pool) - window)
        cands = [p[0] for p in pool[lo:] if p[1] == w]
        rnd.shuffle(cands)
        out, seen = [], {value[id(x)]}
        for c in cands:
            if len(out) < k and value[id(c)] not in seen:
                seen.add(value[id(c)])
                out.append(c)
        return out

    producer = {}  # value class -> the unary op that made it

    def same_again(op, attrs, cls):
        """Whether op gives back its input's value: relu or abs of a relu or
        abs output, negative of a negative's input, a second copy."""
        op = attrs["act_type"] if op == "Activation" else op
        before = producer.get(cls)
        return ((op in ("relu", "abs") and before in ("relu", "abs"))
                or (op == "negative" and before == "negative")
                or (op == "identity" and cls in copied))

    def unary(x, w, name):
        cls = value[id(x)]
        choices = [(op, attrs) for op, attrs in UNARY
                   if computes(op, attrs, [x]) not in made and not same_again(op, attrs, cls)]
        if not choices:
            return  # every unary op of x exists: one node fewer
        op, attrs = rnd.choice(choices)
        sig = computes(op, attrs, [x])
        made.add(sig)
        y = getattr(sym, op)(x, name=name, **attrs)
        if op == "identity":
            copied.add(cls)
            add(y, w, cls)
        else:
            add(y, w)
            producer[value[id(y)]] = sig[0]

    for i in range(num_nodes):
        kind = rnd.choice(kinds)
        x, w = pick()
        name = f"n{i}"
        if kind in ("binary", "sum"):
            # distinct values only; a node with no partner becomes unary
            op = rnd.choice(BINARY) if kind == "binary" else "ElementWiseSum"
            parts = [x] + partners(x, w, 1 if kind == "binary" else rnd.randint(1, 3))
            sig = computes(op, {}, parts, commutes=op != "elemwise_sub")
            if len(parts) < 2 or sig in made:
                kind = "unary"
            else:
                made.add(sig)
                add(getattr(sym, op)(*parts, name=name), w)
                kind = "done"
        if kind == "unary":
            unary(x, w, name)
        elif kind == "done":
            pass
        elif kind == "fc":
            w2 = rnd.choice(widths)
            y = sym.FullyConnected(x, num_hidden=w2, no_bias=rnd.random() < 0.3, name=name)
            add(y, w2)
        elif kind == "slice":
            y = sym.SliceChannel(x, num_outputs=2, axis=1, name=name)
            if w // 2 % 2:  # keep widths even: project one half back, the other goes unread
                y0 = sym.FullyConnected(y[0], num_hidden=w, name=f"{name}_proj")
                add(y0, w)
            else:
                for k in range(2):
                    if rnd.random() < 0.85:  # now and then an output nobody reads
                        add(y[k], w // 2)
        elif value[id(x)] in copied:  # dropout of a value copied already
            unary(x, w, name)
        else:  # dropout: a hidden mask output; the identity at inference
            y = sym.Dropout(x, p=0.25, name=name)
            copied.add(value[id(x)])
            add(y, w, value[id(x)])
        if rnd.random() < extra_outputs:
            outputs.append(pool[-1][0])
    last = pool[-1][0]
    if loss:
        last = sym.LinearRegressionOutput(last, name="loss")
    outs = [o for o in outputs if o is not pool[-1][0]] + [last]
    net = outs[0] if len(outs) == 1 else sym.Group(outs)
    shapes = {"data": (batch, w0)}
    if loss:
        shapes["loss_label"] = (batch, pool[-1][1])
    return net, shapes


def chain_net(num_nodes: int, *, batch: int = 2, width: int = 8, fc_every: int = 4):
    """(Symbol, shapes): a deep chain, FullyConnected every ``fc_every``
    nodes, relu/tanh/scalar ops between, every 7th node adding a skip."""
    x = sym.Variable("data")
    skip = x
    for i in range(num_nodes):
        if i % fc_every == 0:
            x = sym.FullyConnected(x, num_hidden=width, name=f"n{i}")
        elif i % 7 == 3:
            x = sym.elemwise_add(x, skip, name=f"n{i}")
            skip = x
        else:
            op, attrs = UNARY[i % len(UNARY)]
            x = getattr(sym, op)(x, name=f"n{i}", **attrs)
    return x, {"data": (batch, width)}
