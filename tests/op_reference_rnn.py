"""NumPy references for MXNet's RNN and _rnn_param_concat, written from the
math with plain Python loops over time (and, with sequence lengths, over
each sequence on its own), apart from symgraph/ops/rnn.py's lax.scan.

rnn_reference(p, data, parameters, state, state_cell=None,
sequence_length=None, mask=None) -> (output, hy, cy); reserve_reference(...,
same arguments) -> what the hidden ``reserve`` output holds in training;
REFERENCE_RNN maps op names to ``f(p, *inputs) -> the visible outputs``
(tests/op_reference.py's convention).
"""
import numpy as np

N_GATES = {"rnn_relu": 1, "rnn_tanh": 1, "lstm": 4, "gru": 3}


def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def param_shapes(mode, num_layers, dirs, input_size, hidden):
    """Shapes of the pieces of the flat vector, in order: every (i2h weight,
    h2h weight) per layer and direction, then every (i2h bias, h2h bias)."""
    g = N_GATES[mode]
    weights, biases = [], []
    for layer in range(num_layers):
        n_in = input_size if layer == 0 else dirs * hidden
        for _ in range(dirs):
            weights += [(g * hidden, n_in), (g * hidden, hidden)]
            biases += [(g * hidden,), (g * hidden,)]
    return weights + biases


def split_params(flat, mode, num_layers, dirs, input_size, hidden):
    """The flat vector cut into [layer * dirs + direction] -> (Wx, Wh, bx, bh)."""
    shapes = param_shapes(mode, num_layers, dirs, input_size, hidden)
    sizes = [int(np.prod(s)) for s in shapes]
    assert flat.shape == (sum(sizes),), (flat.shape, sum(sizes))
    pieces = [piece.reshape(s) for piece, s in
              zip(np.split(flat, np.cumsum(sizes)[:-1]), shapes)]
    n = num_layers * dirs
    w, b = pieces[:2 * n], pieces[2 * n:]
    return [(w[2 * k], w[2 * k + 1], b[2 * k], b[2 * k + 1]) for k in range(n)]


def cell_step(mode, x, h, c, wx, wh, bx, bh, clip=None):
    """One step for one sequence: x (I,), h (H,), c (H,) -> (h', c')."""
    hidden = h.shape[0]
    a = wx @ x + bx          # the input's share, per gate
    r = wh @ h + bh          # the state's share, per gate
    if mode == "rnn_tanh":
        return np.tanh(a + r), c
    if mode == "rnn_relu":
        return np.maximum(a + r, 0.0), c
    if mode == "lstm":
        s = a + r
        i = _sigmoid(s[0:hidden])
        f = _sigmoid(s[hidden:2 * hidden])
        g = np.tanh(s[2 * hidden:3 * hidden])
        o = _sigmoid(s[3 * hidden:4 * hidden])
        c_new = f * c + i * g
        if clip is not None:
            c_new = np.minimum(np.maximum(c_new, clip[0]), clip[1])
        return o * np.tanh(c_new), c_new
    # gru: r, z from both shares; n = tanh(W_n x + b_n + r * (R_n h + c_n))
    rg = _sigmoid(a[0:hidden] + r[0:hidden])
    z = _sigmoid(a[hidden:2 * hidden] + r[hidden:2 * hidden])
    n = np.tanh(a[2 * hidden:] + rg * r[2 * hidden:])
    return (1.0 - z) * n + z * h, c


def rnn_reference(p, data, parameters, state, state_cell=None, sequence_length=None,
                  mask=None, record=None):
    """``record``: a dict that gets, per (layer, direction), ``("h", layer,
    d)`` that direction's output before dropout and ``("c", layer, d)`` the
    cell state after every step (a step past a sequence's end keeps the
    state: the last one forward in time, the initial one backward)."""
    mode, hidden, layers = p["mode"], p["state_size"], p["num_layers"]
    dirs = 2 if p.get("bidirectional") else 1
    clip = None
    if p.get("lstm_state_clip_min") is not None:
        clip = (p["lstm_state_clip_min"], p["lstm_state_clip_max"])
    steps, batch, input_size = data.shape
    cells = split_params(parameters, mode, layers, dirs, input_size, hidden)
    if state_cell is None:
        state_cell = np.zeros_like(state)
    if sequence_length is None:
        lengths = [steps] * batch
    else:
        lengths = [int(min(max(np.trunc(v), 0), steps)) for v in sequence_length]
    hy = np.zeros_like(state)
    cy = np.zeros_like(state)
    x = data
    for layer in range(layers):
        y = np.zeros((steps, batch, dirs * hidden), data.dtype)
        for d in range(dirs):
            k = layer * dirs + d
            wx, wh, bx, bh = cells[k]
            kept = np.zeros((steps, batch, hidden), data.dtype)
            for b in range(batch):
                h, c = state[k, b].copy(), state_cell[k, b].copy()
                order = range(lengths[b]) if d == 0 else reversed(range(lengths[b]))
                for t in order:
                    h, c = cell_step(mode, x[t, b], h, c, wx, wh, bx, bh, clip)
                    y[t, b, d * hidden:(d + 1) * hidden] = h
                    kept[t, b] = c
                kept[lengths[b]:, b] = c if d == 0 else state_cell[k, b]
                hy[k, b], cy[k, b] = h, c
            if record is not None:
                record["h", layer, d] = y[:, :, d * hidden:(d + 1) * hidden].copy()
                record["c", layer, d] = kept
        if mask is not None and layer < layers - 1:
            y = y * mask[layer]
        x = y
    return x, hy, cy


def reserve_reference(p, *args, **kw):
    """The reserve, (slabs, T, N, H): every layer's output but the last's
    (before dropout), then for lstm every layer's cell states, layer by
    layer, direction by direction."""
    record = {}
    rnn_reference(p, *args, record=record, **kw)
    dirs = 2 if p.get("bidirectional") else 1
    layers = range(p["num_layers"])
    keys = [("h", ly, d) for ly in layers[:-1] for d in range(dirs)]
    if p["mode"] == "lstm":
        keys += [("c", ly, d) for ly in layers for d in range(dirs)]
    return np.stack([record[k] for k in keys]) if keys else None


def visible(p, out, hy, cy):
    if not p.get("state_outputs"):
        return out
    return (out, hy, cy) if p["mode"] == "lstm" else (out, hy)


def _rnn(p, data, parameters, state, *rest):
    rest = list(rest)
    cell = rest.pop(0) if p["mode"] == "lstm" else None
    lengths = rest.pop(0) if p.get("use_sequence_length") else None
    return visible(p, *rnn_reference(p, data, parameters, state, cell, lengths))


def _param_concat(p, *xs):
    return np.concatenate(xs, axis=p["dim"])


REFERENCE_RNN = {"RNN": _rnn, "_rnn_param_concat": _param_concat}
