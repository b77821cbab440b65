"""The backward of MXNet's fused ``RNN`` (``_backward_RNN``; the forward,
its attributes and the reserve it keeps are in rnn.py).

It reads the output gradients, the inputs, the output, the dropout mask
and the reserve (never the last states) and runs, from the last layer
down, one scan per layer and direction against the forward's order. Each
step is ``jax.vjp`` of that one step's cell at (x_t, h_{t-1}, c_{t-1}, the
weights): only that step's gates are recomputed, the state before it is
the previous step's output (or the initial state), the weight gradients
are summed in the carry, and the input gradients are the output gradients
of the layer below. XLA keeps no per-step gates.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from .backward import never, register_backward
from .rnn import (_arguments, _cell, _dirs, _flops, _has_mask, _piece, _reserve_index,
                  _reserve_slabs, _rnn, _split_inputs, _valid_steps, _visible, layout)


def _direction_backward(p, x_at, h0, c0, weights, where, ys, cs, dys, dh, dc, dw, valid,
                        reverse, want_dx):
    """The gradient of one layer in one direction: a scan against the
    forward's order, each step ``jax.vjp`` of that one step at the states
    the forward kept (``ys`` its outputs, ``cs`` its lstm cell states; the
    state before a step is the output of the step before, or the initial
    state where there is none or it was past the sequence's end).
    ``x_at(t)`` is step t's input, ``dys`` the output gradients, ``dh``/``dc``
    those of the last states. ``weights`` are (Wx, Wh, bx, bh), ``where``
    their places in the flat vector: the carry sums their gradients over the
    steps, then they are added into the flat gradient ``dw`` (written in
    place, so only one layer's sums exist at a time). Returns (dxs (T, N, I)
    or None, dh0, dc0, dw)."""
    step = _cell(p)
    steps = dys.shape[0]
    lstm = cs is not None

    def cell(x_t, h, c, wx, wh, bx, bh, ok):
        h2, c2 = step(h, c, x_t @ wx.T + bx, wh, bh)
        if ok is None:
            return h2, c2, h2
        h2 = jnp.where(ok, h2, h)
        c2 = jnp.where(ok, c2, c)
        return h2, c2, jnp.where(ok, h2, jnp.zeros((), h2.dtype))

    def body(carry, t):
        dh, dc, acc = carry
        prev = t + 1 if reverse else t - 1
        inside = (prev >= 0) & (prev < steps)
        prev = jnp.clip(prev, 0, steps - 1)
        ok = None if valid is None else valid[t]
        if valid is not None:
            inside = inside & valid[prev]
        h = jnp.where(inside, ys[prev], h0)
        c = jnp.where(inside, cs[prev], c0) if lstm else c0
        x_t = x_at(t)
        cot = (dh, dc, dys[t])
        if want_dx:
            _, vjp = jax.vjp(lambda x_t, *a: cell(x_t, *a, ok), x_t, h, c, *weights)
            dx, dh, dc, *g = vjp(cot)
        else:
            _, vjp = jax.vjp(lambda *a: cell(x_t, *a, ok), h, c, *weights)
            dx, (dh, dc, *g) = None, vjp(cot)
        acc = tuple(a + gi for a, gi in zip(acc, g))
        return (dh, dc, acc), dx

    # the sums start at zeros tied to the output gradient, or XLA makes them
    # in the forward and keeps them until here (see _rnn_backward)
    late = never(dys)
    zeros = tuple(jnp.where(late, jnp.ones_like(v), jnp.zeros_like(v)) for v in weights)
    (dh0, dc0, sums), dxs = jax.lax.scan(body, (dh, dc, zeros),
                                         jnp.arange(steps, dtype=jnp.int32),
                                         reverse=not reverse)
    # (added each step into the flat dw instead, XLA on CPU copies all of it
    # every step: five times slower)
    for g, (off, _) in zip(sums, where):
        dw = jax.lax.dynamic_update_slice(dw, dw[off:off + g.size] + g.reshape(-1), (off,))
    return dxs, dh0, dc0, dw


def _rnn_backward(p, ctx, og, ins, outs):
    """Reads the output gradients, the inputs, the output, the dropout mask
    and the reserve; layer by layer from the last, the gradient of each
    layer's input is the output gradient of the layer below."""
    x, w, hx, cx, lens = _split_inputs(p, ins)
    out, reserve = outs[0], (outs[-1] if _reserve_slabs(p) else None)
    mask = outs[1] if _has_mask(p) else None
    lstm, d, hid, layers = p.mode == "lstm", _dirs(p), p.state_size, p.num_layers
    dt = x.dtype
    places = layout(p, x.shape[2])
    valid = None if lens is None else _valid_steps(x, lens)
    if cx is None:
        cx = jnp.zeros_like(hx)
    slab = {key: i for i, key in enumerate(_reserve_slabs(p))}

    def ograd(i, like):
        g = og[i] if i < len(og) else None
        return jnp.zeros_like(like) if g is None else g.astype(dt)

    n_vis = len(_visible(p))
    dout = ograd(0, out)
    dhy = ograd(1, hx) if n_vis > 1 else jnp.zeros_like(hx)
    dcy = ograd(2, cx) if n_vis > 2 else jnp.zeros_like(cx)

    def outputs_of(layer, k):  # one direction's outputs (before dropout)
        if layer == layers - 1:
            return out[..., k * hid:(k + 1) * hid]
        return reserve[slab["h", layer, k]]

    need = list(p.need) if p.need else [1] * len(_arguments(p))
    # the weight gradient each scan's sums are added into, tied like the
    # slices below so that XLA does not make it in the forward and keep it
    dw = jnp.where(never(dout), jnp.ones_like(w), jnp.zeros_like(w))
    dh0, dc0 = [None] * (layers * d), [None] * (layers * d)
    dy = dout  # the gradient of this layer's output (T, N, D*H)
    dx = None
    for layer in reversed(range(layers)):
        # this layer's weight slices are tied to its output gradient (a
        # select on never(dy), which XLA cannot fold; lower.tie_to_first's device):
        # they are sliced when the layer's turn comes, not all at once, nor
        # merged with the forward's slices that XLA would keep alive until here
        late = never(dy)
        if layer == 0:
            def x_at(t):
                return x[t]
        else:
            below = [outputs_of(layer - 1, k) for k in range(d)]
            m = None if mask is None else mask[layer - 1]

            def x_at(t, below=below, m=m):
                v = below[0][t] if d == 1 else jnp.concatenate([b[t] for b in below], -1)
                return v if m is None else v * m[t]
        want_dx = layer > 0 or bool(need[0])
        dxs = []
        for k in range(d):
            j = layer * d + k
            where = places[layer][k]
            cs = reserve[slab["c", layer, k]] if lstm else None
            g, dh0[j], dc0[j], dw = _direction_backward(
                p, x_at, hx[j], cx[j], [jnp.where(late, 0, _piece(w, at)) for at in where],
                where,
                outputs_of(layer, k), cs, dy[..., k * hid:(k + 1) * hid], dhy[j], dcy[j],
                dw, valid, k == 1, want_dx)
            dxs.append(g)
        if want_dx:
            dx = dxs[0] if d == 1 else dxs[0] + dxs[1]
        if layer > 0:
            dy = dx if mask is None else dx * mask[layer - 1]
    if dx is None:
        dx = jnp.zeros_like(x)
    grads = [dx, dw, jnp.stack(dh0)]
    if lstm:
        grads.append(jnp.stack(dc0))
    if p.use_sequence_length:
        grads.append(jnp.zeros_like(lens))  # lengths are integers: no gradient
    return grads


def _backward_type(p, in_types, n_out):
    # the gradients take the dtypes of the forward inputs they are of
    # (sequence_length's own, which may be an integer type)
    n_og = len(_visible(p))
    names = _arguments(p)
    fwd = in_types[n_og:n_og + len(names)]
    need = list(p.need) if p.need else [1] * len(names)
    return in_types, [t for t, m in zip(fwd, need) if m]


register_backward(
    _rnn, reads_outputs=lambda p: [0] + ([len(_visible(p))] if _has_mask(p) else [])
    + _reserve_index(p),
    lower=_rnn_backward, infer_type=_backward_type, category="opaque",
    # each step's gates again, then their transpose: about twice more
    flops=lambda p, ins, outs: 3 * _flops(p, [ins[len(_visible(p))]], []))

