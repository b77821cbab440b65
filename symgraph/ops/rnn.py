"""MXNet 1.9.1's fused recurrent layer ``RNN`` (src/operator/rnn-inl.h,
rnn.cc, rnn_impl.h) and ``_rnn_param_concat`` (src/operator/nn/concat.cc),
the concat Gluon's recurrent layers build their flat parameter vector with.

``RNN`` runs ``num_layers`` stacked layers of one cell over data of layout
TNC (seq_len, batch, input_size), forward in time and, with
``bidirectional``, backward in time too (the two directions' outputs joined
on the last axis, forward first). The cells, with ``W`` the i2h weight,
``R`` the h2h weight and ``b``/``c`` their biases:

- ``rnn_tanh`` / ``rnn_relu``: ``h' = act(W x + b + R h + c)``
- ``lstm``, gates in the order i, f, g, o: ``i, f, o = sigmoid(.)``,
  ``g = tanh(.)`` of ``W x + b + R h + c``; ``c' = f c + i g``,
  ``h' = o tanh(c')``
- ``gru``, gates in the order r, z, n: ``r, z = sigmoid(W x + b + R h + c)``,
  ``n = tanh(W_n x + b_n + r (R_n h + c_n))``, ``h' = (1 - z) n + z h``

The flat ``parameters`` vector holds every weight first (for each layer,
for each direction: the i2h weight (gates*H, in) then the h2h weight
(gates*H, H); ``in`` is input_size for layer 0 and directions*H after),
then every bias in the same order (i2h bias, h2h bias, gates*H each). Its
length is inferred from the data and the attributes, as MXNet does;
``state`` (and ``state_cell`` for lstm) is (num_layers*directions, batch,
H), indexed layer * directions + direction.

Outputs: ``output`` (seq_len, batch, directions*H); with ``state_outputs``
also the last hidden state and, for lstm, the last cell state, shaped as
``state``. ``p`` drops the outputs of every layer but the last in
training (identity in inference), with a mask drawn as Dropout draws its
own; the mask is a hidden output (``dropout_mask``, present when p > 0 and
num_layers > 1) that the backward reads, so the gradient sees the units the
forward dropped.

``use_sequence_length`` takes one length per sequence (cuDNN's semantics;
MXNet 1.9.1 has it on GPU only): steps at or past a sequence's length
output zeros and leave the state unchanged, so the last states are those
at each sequence's end and the backward direction starts there.
``lstm_state_clip_min``/``max`` clip the lstm cell state after every step
(cuDNN's clipping, MXNet 1.9.1 has it on GPU only; NaN propagates).
``projection_size`` (LSTMP) is refused, and so is ``lstm_state_clip_nan=True``
with a clip (MXNet ignores it without one).

Each layer and direction is one ``jax.lax.scan`` over time (the reverse
direction a reverse scan), after one product of the i2h weight with every
step's input.

What the backward needs is a node output, so the plan counts it (MXNet's
fused RNN keeps it in its reserve space, which its planner never sees): in
training the hidden output ``reserve``, (slabs, seq_len, batch, H), stacks
the output of every layer but the last (before dropout; the next layer's
input is it times the mask) and, for lstm, the cell state after every step
of every layer (``_reserve_slabs``); the last layer's outputs are the
visible ``output``, not kept twice. One layer of rnn_relu, rnn_tanh or gru
has nothing to keep and no reserve. In inference the reserve is zeros that
nothing reads (XLA drops them; the plan counts them at the op's step, as it
does Dropout's mask).

The backward (``_backward_RNN``, rnn_backward.py) reads the output
gradients, the inputs, the output, the dropout mask and the reserve (never
the last states) and runs one reverse scan per layer and direction,
recomputing one step's gates at a time.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from ..errors import ShapeError
from .activation import probability_attr
from .backward import register_backward
from .indexing import bounded_index
from .registry import (Attr, OpDef, Sample, bool_attr, choice_attr, count_attr, float_attr,
                       int_attr, positive_int_attr, register, same_type)
from .tensor import _concat_backward, _concat_infer

MODES = ("rnn_relu", "rnn_tanh", "lstm", "gru")
GATES = {"rnn_relu": 1, "rnn_tanh": 1, "lstm": 4, "gru": 3}


def _no_projection(v):
    s = "None" if v is None else str(v).strip()
    if s in ("", "None", "none"):
        return None
    int_attr(v)  # a bad value is refused as a bad value
    raise ValueError("projection_size (LSTM with a projection, LSTMP) is not supported; "
                     "leave it out or give None")


_no_projection.choices = ("None",)


def optional_float_attr(v):
    s = "None" if v is None else str(v).strip()
    if s in ("", "None", "none"):
        return None
    return float_attr(v)


# --------------------------------------------------------------------------
# geometry
# --------------------------------------------------------------------------
def _dirs(p):
    return 2 if p.bidirectional else 1


def _arguments(p):
    names = ["data", "parameters", "state"]
    if p.mode == "lstm":
        names.append("state_cell")
    if p.use_sequence_length:
        names.append("sequence_length")
    return names


def _has_mask(p):
    return p.p > 0 and p.num_layers > 1


def _visible(p):
    if not p.state_outputs:
        return ["output"]
    return ["output", "state_output"] + (["statecell_output"] if p.mode == "lstm" else [])


def _outputs(p):
    return (_visible(p) + (["dropout_mask"] if _has_mask(p) else [])
            + (["reserve"] if _reserve_slabs(p) else []))


def _reserve_slabs(p):
    """What the hidden ``reserve`` output stacks, one (seq_len, batch, H)
    slab each: ("h", layer, direction), the output of every layer but the
    last (before dropout; the last layer's is the visible ``output``), then
    for lstm ("c", layer, direction), the cell state after every step of
    every layer. One layer of rnn_relu, rnn_tanh or gru keeps nothing: no
    reserve output."""
    d = _dirs(p)
    hs = [("h", layer, k) for layer in range(p.num_layers - 1) for k in range(d)]
    cs = [("c", layer, k) for layer in range(p.num_layers) for k in range(d)]
    return hs + (cs if p.mode == "lstm" else [])


def _reserve_index(p):
    return [len(_outputs(p)) - 1] if _reserve_slabs(p) else []


def param_size(p, input_size: int) -> int:
    """Length of the flat parameter vector (MXNet's GetRnnParamSize)."""
    g, h, d = GATES[p.mode], p.state_size, _dirs(p)
    first = (input_size + h + 2) * g * h * d
    other = (d * h + h + 2) * g * h * d
    return first + (p.num_layers - 1) * other


def _check_attrs(p):
    lo, hi = p.lstm_state_clip_min, p.lstm_state_clip_max
    if lo is None and hi is None:
        return
    if p.mode != "lstm":
        raise ShapeError(f"lstm_state_clip_min/max clip the lstm cell state; mode={p.mode} "
                         f"has none (as MXNet: state clipping is only supported for LSTM)")
    if lo is None or hi is None:
        raise ShapeError("lstm_state_clip_min and lstm_state_clip_max must be given together")
    if hi < lo:
        raise ShapeError(f"lstm_state_clip_max={hi} must be >= lstm_state_clip_min={lo}")
    if p.lstm_state_clip_nan:
        raise ShapeError("lstm_state_clip_nan=True (cuDNN's clipping of NaN) is not "
                         "supported: NaN propagates through the clip; leave it False")


def _describe(p):
    return (f"mode={p.mode}, num_layers={p.num_layers}, state_size={p.state_size}"
            + (", bidirectional" if p.bidirectional else ""))


def _infer_shape(p, s):
    _check_attrs(p)
    s = list(s)
    names = _arguments(p)
    if len(s) != len(names):
        raise ShapeError(f"RNN with mode={p.mode} takes {len(names)} inputs "
                         f"({', '.join(names)}), got {len(s)}")
    data = s[0]
    n_vis = len(_visible(p))
    if data is None:
        return s, [None] * len(_outputs(p))
    data = tuple(data)
    if len(data) != 3:
        raise ShapeError(f"data {data} must have rank 3: (seq_len, batch, input_size), "
                         f"layout TNC")
    t, n, i = data
    d, h, layers = _dirs(p), p.state_size, p.num_layers
    state = (layers * d, n, h)
    for k, what in ((2, "state"), (3, "state_cell")):
        if what not in names:
            continue
        if s[k] is not None and tuple(s[k]) != state:
            raise ShapeError(f"{what} {tuple(s[k])} must be {state}: (num_layers * "
                             f"directions, batch, state_size) for {_describe(p)} and data "
                             f"{data}")
        s[k] = state
    want = param_size(p, i)
    if s[1] is not None and tuple(s[1]) != (want,):
        got = tuple(s[1])
        size = f"{got[0]} elements" if len(got) == 1 else f"shape {got}"
        raise ShapeError(f"parameters has {size}, but {_describe(p)} with input_size {i} "
                         f"needs a vector of {want}: each layer's i2h and h2h weights, then "
                         f"their biases")
    s[1] = (want,)
    if p.use_sequence_length:
        k = names.index("sequence_length")
        if s[k] is not None and tuple(s[k]) != (n,):
            raise ShapeError(f"sequence_length {tuple(s[k])} must be ({n},): one length per "
                             f"sequence of data {data}")
        s[k] = (n,)
    outs = [(t, n, d * h)] + [state] * (n_vis - 1)
    if _has_mask(p):
        outs.append((layers - 1, t, n, d * h))
    if _reserve_slabs(p):
        outs.append((len(_reserve_slabs(p)), t, n, h))
    return s, outs


def _infer_type(p, in_types, n_out):
    names = _arguments(p)
    free = (names.index("sequence_length"),) if p.use_sequence_length else ()
    # the lengths keep their own dtype (any integer or float) and never lend it
    ins, outs = same_type(p, [None if k in free else t for k, t in enumerate(in_types)],
                          n_out)
    for k in free:
        ins[k] = in_types[k]
    return ins, outs


# --------------------------------------------------------------------------
# the lowering
# --------------------------------------------------------------------------
def layout(p, input_size):
    """Where each piece lies in the flat vector: [layer][direction] -> four
    (offset, shape) for the i2h weight, h2h weight, i2h bias and h2h bias,
    MXNet's layout (every weight first, then every bias)."""
    g, h, d = GATES[p.mode], p.state_size, _dirs(p)
    pieces, off = [], 0
    for layer in range(p.num_layers):
        n_in = input_size if layer == 0 else d * h
        row = []
        for _ in range(d):
            row.append([(off, (g * h, n_in)), (off + g * h * n_in, (g * h, h))])
            off += g * h * (n_in + h)
        pieces.append(row)
    for layer in range(p.num_layers):
        for k in range(d):
            pieces[layer][k] += [(off, (g * h,)), (off + g * h, (g * h,))]
            off += 2 * g * h
    return pieces


def _piece(w, at):
    off, shape = at
    n = 1
    for s in shape:
        n *= s
    return w[off:off + n].reshape(shape)


def unpack(p, w, input_size):
    """The flat vector as [layer][direction] -> (i2h weight, h2h weight,
    i2h bias, h2h bias), MXNet's layout."""
    return [[[_piece(w, at) for at in cell] for cell in row] for row in layout(p, input_size)]


def _cell(p):
    """step(h, c, xw, wh, bh) -> (h', c') for the mode; xw holds W x + b."""
    mode = p.mode
    lo, hi = p.lstm_state_clip_min, p.lstm_state_clip_max

    def step(h, c, xw, wh, bh):
        hw = h @ wh.T + bh
        if mode == "rnn_tanh":
            return jnp.tanh(xw + hw), c
        if mode == "rnn_relu":
            return jax.nn.relu(xw + hw), c
        if mode == "lstm":
            gi, gf, gg, go = jnp.split(xw + hw, 4, axis=-1)
            c2 = jax.nn.sigmoid(gf) * c + jax.nn.sigmoid(gi) * jnp.tanh(gg)
            if lo is not None:
                c2 = jnp.clip(c2, lo, hi)
            return jax.nn.sigmoid(go) * jnp.tanh(c2), c2
        xr, xz, xn = jnp.split(xw, 3, axis=-1)
        hr, hz, hn = jnp.split(hw, 3, axis=-1)
        r = jax.nn.sigmoid(xr + hr)
        z = jax.nn.sigmoid(xz + hz)
        n = jnp.tanh(xn + r * hn)
        return (1 - z) * n + z * h, c
    return step


def _direction(p, x, h0, c0, wx, wh, bx, bh, valid, reverse, keep_c=False):
    """One layer in one direction: (ys (T, N, H), last h, last c, the cell
    state after every step (T, N, H) with ``keep_c``, else None)."""
    step = _cell(p)
    xw = jnp.einsum("tni,gi->tng", x, wx) + bx  # every step's i2h product at once

    def body(carry, inp):
        h, c = carry
        if valid is None:
            h2, c2 = step(h, c, inp, wh, bh)
            y = h2
        else:
            xw_t, ok = inp
            h2, c2 = step(h, c, xw_t, wh, bh)
            h2 = jnp.where(ok, h2, h)
            c2 = jnp.where(ok, c2, c)
            y = jnp.where(ok, h2, jnp.zeros((), h2.dtype))
        return (h2, c2), ((y, c2) if keep_c else y)

    xs = xw if valid is None else (xw, valid)
    (h, c), ys = jax.lax.scan(body, (h0, c0), xs, reverse=reverse)
    if keep_c:
        return ys[0], h, c, ys[1]
    return ys, h, c, None


def _valid_steps(x, lens):
    """(T, N, 1) booleans: step < the sequence's length (clamped to [0, T])."""
    t = x.shape[0]
    n = bounded_index(lens, t + 1)
    return (jnp.arange(t, dtype=jnp.int32)[:, None] < n[None, :])[..., None]


def rnn_forward(p, x, w, hx, cx=None, lens=None, mask=None, reserve=False):
    """(output, hy, cy, slabs) of the stacked layers; ``mask`` (L - 1, T, N,
    D*H) multiplies the output of every layer but the last (dropout). With
    ``reserve``, ``slabs`` holds the reserve's slabs in ``_reserve_slabs``'s
    order (else None)."""
    d = _dirs(p)
    weights = unpack(p, w, x.shape[2])
    valid = None if lens is None else _valid_steps(x, lens)
    keep_c = reserve and p.mode == "lstm"
    if cx is None:
        cx = jnp.zeros_like(hx)
    hs, cs, h_slabs, c_slabs = [], [], [], []
    for layer in range(p.num_layers):
        ys = []
        for k in range(d):
            wx, wh, bx, bh = weights[layer][k]
            j = layer * d + k
            y, h, c, c_all = _direction(p, x, hx[j], cx[j], wx, wh, bx, bh, valid,
                                        reverse=k == 1, keep_c=keep_c)
            ys.append(y)
            hs.append(h)
            cs.append(c)
            c_slabs.append(c_all)
        if reserve and layer < p.num_layers - 1:
            h_slabs += ys
        x = ys[0] if d == 1 else jnp.concatenate(ys, axis=-1)
        if mask is not None and layer < p.num_layers - 1:
            x = x * mask[layer]
    slabs = (h_slabs + (c_slabs if keep_c else [])) if reserve else None
    return x, jnp.stack(hs), jnp.stack(cs), slabs


def _split_inputs(p, xs):
    names = _arguments(p)
    got = dict(zip(names, xs))
    return (got["data"], got["parameters"], got["state"], got.get("state_cell"),
            got.get("sequence_length"))


def _visible_values(p, out, hy, cy):
    if not p.state_outputs:
        return (out,)
    return (out, hy, cy) if p.mode == "lstm" else (out, hy)


def _lower(p, ctx, *xs):
    _check_attrs(p)
    x, w, hx, cx, lens = _split_inputs(p, xs)
    mask = None
    if _has_mask(p):
        shape = (p.num_layers - 1,) + x.shape[:2] + (_dirs(p) * p.state_size,)
        if ctx.is_train:
            keep = jax.random.bernoulli(ctx.rng(), 1.0 - p.p, shape)
            mask = keep.astype(x.dtype) * jnp.asarray(1.0 / (1.0 - p.p), x.dtype)
        else:
            mask = jnp.ones(shape, x.dtype)
    out, hy, cy, slabs = rnn_forward(p, x, w, hx, cx, lens, mask if ctx.is_train else None,
                                     reserve=ctx.is_train)
    res = _visible_values(p, out, hy, cy) + ((mask,) if mask is not None else ())
    if not _reserve_slabs(p):
        return res
    if slabs:
        return res + (jnp.stack(slabs),)
    # inference: nothing reads it (XLA drops it), but the output exists
    shape = (len(_reserve_slabs(p)),) + x.shape[:2] + (p.state_size,)
    return res + (jnp.zeros(shape, x.dtype),)


def _flops(p, in_shapes, out_shapes):
    t, n, i = in_shapes[0]
    g, h, d = GATES[p.mode], p.state_size, _dirs(p)
    total = 0
    for layer in range(p.num_layers):
        n_in = i if layer == 0 else d * h
        # the two products, then about ten elementwise operations a gate unit
        total += d * t * n * g * h * (2 * (n_in + h) + 10)
    return total


_rnn = register(OpDef(
    name="RNN",
    attrs={"state_size": Attr(positive_int_attr, doc="H: the size of each layer's state"),
           "num_layers": Attr(positive_int_attr, doc="number of stacked layers"),
           "mode": Attr(choice_attr(*MODES), doc="the cell: rnn_relu, rnn_tanh, lstm or gru"),
           "bidirectional": Attr(bool_attr, False, "run each layer backward in time too"),
           "state_outputs": Attr(bool_attr, False,
                                 "output the last hidden (and lstm cell) states too"),
           "p": Attr(probability_attr, 0.0,
                     "dropout on the outputs of each layer but the last, in training"),
           "use_sequence_length": Attr(bool_attr, False,
                                       "take an input sequence_length of shape (batch,)"),
           "projection_size": Attr(_no_projection, None, "LSTMP projection: not supported"),
           "lstm_state_clip_min": Attr(optional_float_attr, None,
                                       "clip the lstm cell state below (with the max)"),
           "lstm_state_clip_max": Attr(optional_float_attr, None,
                                       "clip the lstm cell state above (with the min)"),
           "lstm_state_clip_nan": Attr(bool_attr, False,
                                       "True is refused with a clip (ignored without one)")},
    arguments=_arguments, outputs=_outputs, visible_outputs=lambda p: len(_visible(p)),
    infer_shape=_infer_shape, infer_type=_infer_type, lower=_lower, needs_rng=True,
    category="opaque", family="matmul", flops=_flops, per_sample=False,
    samples=[Sample({"mode": "lstm", "state_size": 3, "num_layers": 1}, [(3, 2, 4)]),
             Sample({"mode": "gru", "state_size": 2, "num_layers": 2, "bidirectional": True,
                     "state_outputs": True}, [(3, 2, 3)]),
             Sample({"mode": "rnn_tanh", "state_size": 3, "num_layers": 2,
                     "state_outputs": True}, [(2, 3, 2)]),
             Sample({"mode": "rnn_relu", "state_size": 2, "num_layers": 1,
                     "bidirectional": True}, [(3, 2, 2)]),
             Sample({"mode": "lstm", "state_size": 2, "num_layers": 1, "bidirectional": True,
                     "state_outputs": True, "use_sequence_length": True},
                    [(4, 3, 2), None, None, None, (3,)], ints={4: 5})],
    doc="MXNet's fused recurrent layers (rnn_relu, rnn_tanh, lstm, gru) over data "
        "(seq_len, batch, input_size), one flat parameters vector in MXNet's layout; "
        "outputs (seq_len, batch, directions*state_size) and, with state_outputs, the "
        "last states. One lax.scan per layer and direction. In training the hidden "
        "output reserve (MXNet's reserve space) keeps every layer's outputs but the "
        "last's and the lstm cell states; the backward reads it and the output and "
        "runs one reverse scan per layer and direction, recomputing one step's gates "
        "at a time."))


# --------------------------------------------------------------------------
# _rnn_param_concat
# --------------------------------------------------------------------------
_param_concat = register(OpDef(
    name="_rnn_param_concat",
    attrs={"num_args": Attr(count_attr, doc="number of inputs"),
           "dim": Attr(int_attr, 1, "the axis to join along")},
    arguments=lambda p: [f"arg{i}" for i in range(p.num_args)],
    lower=lambda p, ctx, *xs: jnp.concatenate(xs, axis=p.dim), infer_shape=_concat_infer,
    category="injective", flops=lambda p, ins, outs: 0, aliases=("_npi_rnn_param_concat",),
    samples=[Sample({"num_args": 3, "dim": 0}, [(6,), (4,), (2,)]),
             Sample({"num_args": 2}, [(2, 1), (2, 3)])],
    doc="Concat as Gluon's recurrent layers join their flattened weights and biases into "
        "RNN's parameters vector (dim 0). MXNet also infers one or two unknown inputs "
        "from the output's length; symgraph infers shapes from the inputs only, so "
        "every input's shape must be known (Gluon's exports give each weight's "
        "__shape__)."))

register_backward(_param_concat, inputs_for_shape_only=True, lower=_concat_backward)
