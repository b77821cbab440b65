"""Random networks for the planner's property tests and speed benchmark.

``random_net(rnd, n)`` builds a DAG of n op nodes from ops registered in
the core: unary elementwise ops and activations, binary elementwise ops,
``ElementWiseSum`` fan-in, ``FullyConnected`` (which changes the width, so
sizes vary), ``SliceChannel`` (a multi-output node), ``Dropout`` (a hidden
output) -- with branches, joins and tensors read many times. ``rnd`` is a
``random.Random`` (hypothesis' ``st.randoms()`` in the tests, so failures
shrink). Inputs are picked among the last ``window`` tensors, which keeps
the number of live tensors bounded as real nets do; ``window=None`` picks
from every tensor made so far.

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

    def same_width(w):
        lo = 0 if window is None else max(0, len(pool) - window)
        cands = [p for p in pool[lo:] if p[1] == w]
        return rnd.choice(cands)

    for i in range(num_nodes):
        kind = rnd.choice(kinds)
        x, w = pick()
        name = f"n{i}"
        if kind == "unary":
            op, attrs = rnd.choice(UNARY)
            y = getattr(sym, op)(x, name=name, **attrs)
            pool.append((y, w))
        elif kind == "binary":
            x2, _ = same_width(w)
            y = getattr(sym, rnd.choice(BINARY))(x, x2, name=name)
            pool.append((y, w))
        elif kind == "sum":
            k = rnd.randint(2, 4)
            parts = [x] + [same_width(w)[0] for _ in range(k - 1)]
            y = sym.ElementWiseSum(*parts, name=name)
            pool.append((y, w))
        elif kind == "fc":
            w2 = rnd.choice(widths)
            y = sym.FullyConnected(x, num_hidden=w2, no_bias=rnd.random() < 0.3, name=name)
            pool.append((y, w2))
        elif kind == "slice":
            y = sym.SliceChannel(x, num_outputs=2, axis=1, name=name)
            if w // 2 % 2:  # keep widths even: project one half back, the other goes unread
                y0 = sym.FullyConnected(y[0], num_hidden=w, name=f"{name}_proj")
                pool.append((y0, w))
            else:
                for k in range(2):
                    if rnd.random() < 0.85:  # now and then an output nobody reads
                        pool.append((y[k], w // 2))
        else:  # dropout: a hidden mask output
            y = sym.Dropout(x, p=0.25, name=name)
            pool.append((y, w))
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
