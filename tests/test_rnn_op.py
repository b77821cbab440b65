"""MXNet 1.9.1's RNN and _rnn_param_concat: the forward of every mode
(rnn_relu, rnn_tanh, lstm, gru), one and two layers, one and two
directions, with and without the state outputs, against the NumPy loops
of op_reference_rnn.py (float64 to 1e-10, float32 to 1e-5); the gradients
of every input against central finite differences of that reference in
float64; sequence lengths, dropout between layers and the lstm state clip;
shape inference and its one-line errors; the hidden ``reserve`` output (what
the forward keeps for the backward) against the reference, what the backward
node reads, the training plan counting the reserve and XLA's temp near the
plan; the lax.scan lowering; a Symbol bound by the executor; and a
Gluon-style JSON whose _rnn_param_concat feeds RNN."""
import json

import jax
import numpy as np
import pytest

import symgraph as sg
from symgraph.errors import OpError, ShapeError, SymgraphError
from symgraph.graph import Entry, Graph, Node
from symgraph.lower import lower
from symgraph.ops import get_op
from symgraph.passes.gradient import build_gradient
from symgraph.passes.infer import infer_shapes

from grad_check import finite_differences
from op_reference_rnn import REFERENCE_RNN, param_shapes, reserve_reference, rnn_reference

MODES = ["rnn_relu", "rnn_tanh", "lstm", "gru"]


def _graph(attrs, hidden_outputs=False):
    """One RNN node over variables named after its inputs; the graph's
    outputs are the visible ones (and the hidden mask when asked)."""
    op = get_op("RNN")
    probe = Node(op, "rnn", attrs, [])
    names = op.arg_names(probe.params)
    node = Node(op, "rnn", attrs, [Entry(Node(None, n)) for n in names])
    n = node.num_outputs if hidden_outputs else node.num_visible_outputs
    return Graph([Entry(node, i) for i in range(n)]), node, names


def _inputs(node, names, shapes, rng, dtype="float64", scale=0.5):
    vals = {}
    for n in names:
        s = shapes[n]
        if n == "sequence_length":
            vals[n] = np.ones(s, dtype)  # callers give the lengths they test
        else:
            vals[n] = (rng.normal(size=s) * scale).astype(dtype)
    return vals


def _shapes(g, names, data_shape, dtype="float64"):
    inf = infer_shapes(g, {"data": data_shape}, dtypes={n: dtype for n in names
                                                        if n != "sequence_length"})
    return {n.name: inf.shapes[g.entry_id_of_node(n)] for n in g.variables}, inf


_JITTED = {}


def _forward(g, vals, is_train=False, key=0):
    fn = _JITTED.get((id(g), is_train))
    if fn is None:  # one program per graph: the probes below reuse it
        fn = _JITTED[id(g), is_train] = (g, jax.jit(lower(g, is_train)))
    outs, _ = fn[1](vals, jax.random.key(key))
    return [np.asarray(o) for o in outs]


def _grads(g, names, vals, heads, wrt, key=0):
    """symgraph's gradients of ``wrt`` for head gradients ``heads`` (one per
    graph output), through the explicit backward graph, in training."""
    gg = build_gradient(g, wrt)
    head_names = [e.node.output_names()[e.index] + "_head_grad" for e in g.outputs]
    used = {n.name for n in gg.variables}
    feeds = {**vals, **{k: h for k, h in zip(head_names, heads) if k in used}}
    outs, _ = jax.jit(lower(gg, True))(feeds, jax.random.key(key))
    return [np.asarray(o) for o in outs[:len(g.outputs)]], \
        dict(zip(wrt, [np.asarray(o) for o in outs[len(g.outputs):]]))


def _ref(p, vals, names, mask=None):
    out, hy, cy = rnn_reference(p, vals["data"], vals["parameters"], vals["state"],
                                vals.get("state_cell"), vals.get("sequence_length"), mask)
    if not p["state_outputs"]:
        return (out,)
    return (out, hy, cy) if p["mode"] == "lstm" else (out, hy)


# --------------------------------------------------------------------------
# forward against the NumPy loops
# --------------------------------------------------------------------------
FORWARD = [(m, layers, bi, so) for m in MODES for layers in (1, 2) for bi in (False, True)
           for so in ((True, False) if layers == 1 and not bi else (bi,))]


@pytest.mark.parametrize("mode,layers,bi,so", FORWARD,
                         ids=[f"{m}-L{ly}-{'bi' if b else 'uni'}-{'states' if s else 'out'}"
                              for m, ly, b, s in FORWARD])
def test_forward_matches_numpy_float64(mode, layers, bi, so):
    attrs = {"mode": mode, "state_size": 3, "num_layers": layers, "bidirectional": bi,
             "state_outputs": so}
    g, node, names = _graph(attrs)
    shapes, inf = _shapes(g, names, (4, 2, 5))
    dirs = 2 if bi else 1
    assert shapes["state"] == (layers * dirs, 2, 3)
    assert shapes["parameters"] == (sum(int(np.prod(s)) for s in param_shapes(
        mode, layers, dirs, 5, 3)),)
    assert ("state_cell" in names) == (mode == "lstm")
    n_out = 1 + (2 if mode == "lstm" else 1) * so
    assert len(g.outputs) == n_out
    assert inf.shape(g.outputs[0]) == (4, 2, dirs * 3)
    vals = _inputs(node, names, shapes, np.random.default_rng(0))
    got = _forward(g, vals)
    want = _ref(node.params, vals, names)
    assert len(got) == len(want) == n_out
    for o, w, e in zip(got, want, g.outputs):
        assert o.dtype == np.float64 and o.shape == inf.shape(e)
        np.testing.assert_allclose(o, w, rtol=1e-10, atol=1e-10)
    # the registry's reference (what test_ops.py reads) agrees
    reg = REFERENCE_RNN["RNN"](node.params, *[vals[n] for n in names])
    reg = reg if isinstance(reg, tuple) else (reg,)
    for o, w in zip(got, reg):
        np.testing.assert_allclose(o, w, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("mode", MODES)
def test_forward_float32(mode):
    attrs = {"mode": mode, "state_size": 4, "num_layers": 2, "bidirectional": True,
             "state_outputs": True}
    g, node, names = _graph(attrs)
    shapes, inf = _shapes(g, names, (3, 2, 3), "float32")
    vals = _inputs(node, names, shapes, np.random.default_rng(1), "float32")
    got = _forward(g, vals)
    want = _ref(node.params, {k: v.astype(np.float64) for k, v in vals.items()}, names)
    for o, w in zip(got, want):
        assert o.dtype == np.float32
        np.testing.assert_allclose(o, w, rtol=1e-5, atol=1e-5)


def test_flat_layout_is_weights_then_biases():
    # one-hot probes of the flat vector: a bias moves the output without the
    # data, a weight only with it; the first weight is l0's i2h (gates*H, I)
    attrs = {"mode": "rnn_tanh", "state_size": 2, "num_layers": 1, "state_outputs": False}
    g, node, names = _graph(attrs)
    shapes, _ = _shapes(g, names, (1, 1, 3))
    n = shapes["parameters"][0]
    assert n == 2 * 3 + 2 * 2 + 2 + 2
    zero = {"data": np.zeros((1, 1, 3)), "state": np.zeros((1, 1, 2))}
    for k in range(n):
        w = np.zeros(n)
        w[k] = 1.0
        out = _forward(g, {**zero, "parameters": w})[0]
        if k >= 10:   # i2h bias (10, 11), then h2h bias (12, 13): unit k % 2
            assert np.allclose(out[0, 0], np.tanh(np.eye(2)[k % 2]))
        else:         # weights: no effect on zero data and a zero state
            assert np.allclose(out, 0)
    x = np.zeros((1, 1, 3))
    x[0, 0, 2] = 0.5
    w = np.zeros(n)
    w[1 * 3 + 2] = 1.0  # W_i2h[1, 2]
    out = _forward(g, {**zero, "data": x, "parameters": w})[0]
    np.testing.assert_allclose(out[0, 0], [0, np.tanh(0.5)], atol=1e-15)


# --------------------------------------------------------------------------
# gradients against finite differences of the reference (float64)
# --------------------------------------------------------------------------
GRAD = [("rnn_relu", 1, True, True, (3, 2, 3)), ("rnn_tanh", 2, True, True, (3, 2, 3)),
        ("lstm", 2, True, True, (3, 2, 2)), ("gru", 2, True, True, (3, 2, 2)),
        ("lstm", 1, False, False, (4, 2, 3)), ("gru", 1, False, False, (4, 1, 2))]


def _fd_check(attrs, data_shape, seed, mask=None, lengths=None, hidden=2, wrt=None):
    g, node, names = _graph(attrs)
    shapes, inf = _shapes(g, names, data_shape)
    rng = np.random.default_rng(seed)
    vals = _inputs(node, names, shapes, rng)
    if lengths is not None:
        vals["sequence_length"] = np.asarray(lengths, np.float64)
    wrt = wrt or [n for n in names if n != "sequence_length"]
    heads = [rng.normal(size=inf.shape(e)) for e in g.outputs]
    outs, got = _grads(g, names, vals, heads, wrt)
    p = node.params
    want_out = _ref(p, vals, names, mask)
    for o, w in zip(outs, want_out):
        np.testing.assert_allclose(o, w, rtol=1e-10, atol=1e-10)

    def f(*xs):
        v = {**vals, **dict(zip(wrt, xs))}
        return tuple(_ref(p, v, names, mask))

    want = finite_differences(f, [vals[n] for n in wrt], heads)
    for n, w in zip(wrt, want):
        assert got[n].shape == vals[n].shape
        np.testing.assert_allclose(got[n], w, rtol=1e-6, atol=1e-8,
                                   err_msg=f"gradient of {n}")
    return got


@pytest.mark.parametrize("mode,layers,bi,so,shape", GRAD,
                         ids=[f"{m}-L{ly}-{'bi' if b else 'uni'}-{'states' if s else 'out'}"
                              for m, ly, b, s, _ in GRAD])
def test_gradients_match_finite_differences(mode, layers, bi, so, shape):
    _fd_check({"mode": mode, "state_size": 2, "num_layers": layers, "bidirectional": bi,
               "state_outputs": so}, shape, seed=hash(mode) % 1000)


# --------------------------------------------------------------------------
# sequence lengths (cuDNN's semantics)
# --------------------------------------------------------------------------
def test_sequence_length_forward():
    attrs = {"mode": "gru", "state_size": 2, "num_layers": 2, "bidirectional": True,
             "state_outputs": True, "use_sequence_length": True}
    g, node, names = _graph(attrs)
    assert names[-1] == "sequence_length"
    shapes, inf = _shapes(g, names, (4, 4, 2))
    assert shapes["sequence_length"] == (4,)
    vals = _inputs(node, names, shapes, np.random.default_rng(5))
    # lengths clamp to [0, seq_len]; 9 is the whole sequence, -1 none of it
    vals["sequence_length"] = np.array([9.0, 2.0, 1.0, -1.0])
    out = _forward(g, vals)
    # past each end the output is zero; the last state is the one at the end
    assert np.all(out[0][2:, 1] == 0) and np.all(out[0][1:, 2] == 0)
    assert np.all(out[0][:, 3] == 0)
    np.testing.assert_allclose(out[1][:, 3], vals["state"][:, 3], rtol=0)  # no step: h0
    want = _ref(node.params, {**vals, "sequence_length": np.array([4, 2, 1, 0])}, names)
    for o, w in zip(out, want):
        np.testing.assert_allclose(o, w, rtol=1e-10, atol=1e-12)
    # integer lengths keep their dtype and do not lend it to the outputs
    inf = infer_shapes(g, {"data": (4, 3, 2)}, dtypes={"sequence_length": "int32"})
    assert inf.dtype(g.outputs[0]) == "float32"
    assert inf.dtype(Entry(g.variables[-1])) == "int32"


def test_sequence_length_gradient():
    attrs = {"mode": "lstm", "state_size": 2, "num_layers": 2, "bidirectional": True,
             "state_outputs": True, "use_sequence_length": True}
    _fd_check(attrs, (4, 3, 2), seed=6, lengths=[4, 2, 1])


# --------------------------------------------------------------------------
# dropout between layers
# --------------------------------------------------------------------------
def test_dropout_training_mask_and_inference_identity():
    attrs = {"mode": "gru", "state_size": 2, "num_layers": 3, "p": 0.4,
             "state_outputs": True}
    g, node, names = _graph(attrs, hidden_outputs=True)
    assert node.op.output_names(node.params)[2:] == ["dropout_mask", "reserve"]
    assert node.num_visible_outputs == 2 and node.num_outputs == 4
    shapes, inf = _shapes(g, names, (5, 4, 2))
    assert inf.shape(g.outputs[2]) == (2, 5, 4, 2)
    vals = _inputs(node, names, shapes, np.random.default_rng(7))
    out, hy, mask, _ = _forward(g, vals, is_train=True, key=3)
    assert set(np.unique(mask)) <= {0.0, 1 / 0.6} and 0 < np.mean(mask == 0) < 0.8
    want = _ref(node.params, vals, names, mask)
    np.testing.assert_allclose(out, want[0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(hy, want[1], rtol=1e-10, atol=1e-12)
    # inference: no dropout, the mask all ones
    out_i, hy_i, mask_i, _ = _forward(g, vals, is_train=False)
    assert np.all(mask_i == 1)
    want = _ref(node.params, vals, names)
    np.testing.assert_allclose(out_i, want[0], rtol=1e-10, atol=1e-12)
    # without p (or with one layer) there is no mask output
    assert get_op("RNN").output_names(Node(get_op("RNN"), "r", {**attrs, "p": 0}, []).params) \
        == ["output", "state_output", "reserve"]


def test_dropout_gradient_uses_the_forward_mask():
    attrs = {"mode": "lstm", "state_size": 2, "num_layers": 2, "p": 0.5,
             "state_outputs": True}
    g, node, names = _graph(attrs, hidden_outputs=True)
    shapes, inf = _shapes(g, names, (3, 2, 2))
    vals = _inputs(node, names, shapes, np.random.default_rng(8))
    mask = _forward(g, vals, is_train=True, key=0)[node.num_visible_outputs]
    assert np.any(mask == 0)
    # same key and node name: the backward graph's forward draws the same mask
    _fd_check(attrs, (3, 2, 2), seed=8, mask=mask)


@pytest.mark.parametrize("attrs,shape,lengths", [
    ({"mode": "gru", "num_layers": 3, "bidirectional": True, "p": 0.4,
      "use_sequence_length": True}, (3, 3, 2), [3, 1, 0]),
    ({"mode": "lstm", "num_layers": 2, "bidirectional": True, "p": 0.5,
      "use_sequence_length": True, "lstm_state_clip_min": -0.3,
      "lstm_state_clip_max": 0.35}, (4, 2, 2), [4, 2]),
    ({"mode": "rnn_relu", "num_layers": 3, "p": 0.3}, (3, 2, 2), None),
], ids=["gru-L3-bi-dropout-lengths", "lstm-L2-bi-dropout-lengths-clip", "relu-L3-dropout"])
def test_gradients_with_dropout_lengths_and_clip(attrs, shape, lengths):
    """The backward's reverse scans read the reserve: every layer below the
    last, both directions, steps past a sequence's end, the dropout mask."""
    attrs = {"state_size": 2, "state_outputs": True, **attrs}
    g, node, names = _graph(attrs, hidden_outputs=True)
    shapes, _ = _shapes(g, names, shape)
    vals = _inputs(node, names, shapes, np.random.default_rng(21))
    if lengths is not None:
        vals["sequence_length"] = np.asarray(lengths, np.float64)
    mask = _forward(g, vals, is_train=True, key=0)[node.num_visible_outputs]
    assert np.any(mask == 0)
    _fd_check(attrs, shape, seed=21, mask=mask, lengths=lengths)


def test_gradient_of_the_parameters_alone():
    # data needs no gradient: the first layer's scan leaves its input alone
    attrs = {"mode": "lstm", "state_size": 2, "num_layers": 2, "state_outputs": True}
    got = _fd_check(attrs, (3, 2, 3), seed=22, wrt=["parameters"])
    assert list(got) == ["parameters"]


# --------------------------------------------------------------------------
# lstm state clipping
# --------------------------------------------------------------------------
def test_lstm_state_clip():
    attrs = {"mode": "lstm", "state_size": 3, "num_layers": 2, "state_outputs": True,
             "lstm_state_clip_min": -0.2, "lstm_state_clip_max": 0.25}
    g, node, names = _graph(attrs)
    shapes, _ = _shapes(g, names, (4, 2, 3))
    vals = _inputs(node, names, shapes, np.random.default_rng(9), scale=1.5)
    out, hy, cy = _forward(g, vals)
    assert cy.min() >= -0.2 and cy.max() <= 0.25
    want = _ref(node.params, vals, names)
    for o, w in zip((out, hy, cy), want):
        np.testing.assert_allclose(o, w, rtol=1e-10, atol=1e-12)
    unclipped = _ref({**node.params, "lstm_state_clip_min": None}, vals, names)
    assert not np.allclose(unclipped[2], cy)


# --------------------------------------------------------------------------
# shape inference and its errors
# --------------------------------------------------------------------------
def _infer(attrs, **shapes):
    g, node, names = _graph(attrs)
    return infer_shapes(g, shapes, partial=True), g


def test_parameters_length_inferred_from_data():
    # MXNet's GetRnnParamSize: (I + H + 2) * G*H*D + (L-1) * (D*H + H + 2) * G*H*D
    for mode, g in (("rnn_tanh", 1), ("lstm", 4), ("gru", 3)):
        inf, gr = _infer({"mode": mode, "state_size": 5, "num_layers": 3,
                          "bidirectional": True}, data=(7, 2, 4))
        want = (4 + 5 + 2) * g * 5 * 2 + 2 * (10 + 5 + 2) * g * 5 * 2
        assert inf.shapes[gr.entry_id_of_node(gr.variables[1])] == (want,)


@pytest.mark.parametrize("attrs,shapes,err,msg", [
    ({"mode": "lstm", "state_size": 3, "num_layers": 1},
     {"data": (2, 4, 5), "state": (1, 2, 3)}, ShapeError, "state (1, 2, 3) must be (1, 4, 3)"),
    ({"mode": "gru", "state_size": 3, "num_layers": 2, "bidirectional": True},
     {"data": (2, 4, 5), "state": (2, 4, 3)}, ShapeError, "must be (4, 4, 3)"),
    ({"mode": "lstm", "state_size": 3, "num_layers": 1},
     {"data": (2, 4, 5), "state_cell": (1, 4, 2)}, ShapeError, "state_cell (1, 4, 2)"),
    ({"mode": "rnn_tanh", "state_size": 3, "num_layers": 1},
     {"data": (2, 4, 5), "parameters": (40,)}, ShapeError,
     "parameters has 40 elements, but mode=rnn_tanh"),
    ({"mode": "rnn_tanh", "state_size": 3, "num_layers": 1},
     {"data": (2, 4, 5), "parameters": (6, 5)}, ShapeError, "parameters has shape (6, 5)"),
    ({"mode": "rnn_tanh", "state_size": 3, "num_layers": 1},
     {"data": (2, 5)}, ShapeError, "must have rank 3"),
    ({"mode": "lstm", "state_size": 3, "num_layers": 1, "use_sequence_length": True},
     {"data": (2, 4, 5), "sequence_length": (2,)}, ShapeError, "sequence_length (2,)"),
    ({"mode": "gru", "state_size": 3, "num_layers": 1, "lstm_state_clip_min": 0,
      "lstm_state_clip_max": 1}, {"data": (2, 4, 5)}, ShapeError, "only supported for LSTM"),
    ({"mode": "lstm", "state_size": 3, "num_layers": 1, "lstm_state_clip_min": 0},
     {"data": (2, 4, 5)}, ShapeError, "must be given together"),
    ({"mode": "lstm", "state_size": 3, "num_layers": 1, "lstm_state_clip_min": 1,
      "lstm_state_clip_max": 0}, {"data": (2, 4, 5)}, ShapeError, "must be >="),
    ({"mode": "lstm", "state_size": 3, "num_layers": 1, "lstm_state_clip_min": 0,
      "lstm_state_clip_max": 1, "lstm_state_clip_nan": True}, {"data": (2, 4, 5)},
     ShapeError, "lstm_state_clip_nan=True"),
])
def test_shape_errors_are_one_line(attrs, shapes, err, msg):
    with pytest.raises(err) as info:
        _infer(attrs, **shapes)
    text = str(info.value)
    assert msg in text and "\n" not in text and "'rnn' (RNN)" in text


@pytest.mark.parametrize("attrs,msg", [
    ({"mode": "lstmp", "state_size": 3, "num_layers": 1}, "expected one of rnn_relu"),
    ({"mode": "lstm", "state_size": 3, "num_layers": 1, "projection_size": 2},
     "projection_size (LSTM with a projection, LSTMP) is not supported"),
    ({"mode": "lstm", "state_size": 0, "num_layers": 1}, "positive integer"),
    ({"mode": "lstm", "state_size": 3}, "missing required attribute 'num_layers'"),
    ({"mode": "gru", "state_size": 3, "num_layers": 1, "p": 1.0}, "probability"),
])
def test_attribute_errors_are_one_line(attrs, msg):
    with pytest.raises(OpError) as info:
        sg.sym.RNN(sg.sym.Variable("x"), name="rnn", **attrs)
    text = str(info.value)
    assert msg in text and "\n" not in text and "'rnn' (RNN)" in text


def test_mxnet_strings_and_defaults():
    rnn = sg.sym.RNN(sg.sym.Variable("x"), mode="lstm", state_size="4", num_layers="2",
                     bidirectional="True", state_outputs="False", p="0.0",
                     projection_size="None", lstm_state_clip_min="None",
                     lstm_state_clip_max="None", lstm_state_clip_nan="False",
                     use_sequence_length="False", name="r")
    assert rnn.list_arguments() == ["x", "r_parameters", "r_state", "r_state_cell"]
    assert rnn.list_outputs() == ["r_output"]
    arg, out, _ = rnn.infer_shape(x=(3, 2, 5))
    assert out == [(3, 2, 8)] and arg[2] == (4, 2, 4)


# --------------------------------------------------------------------------
# memory facts and the lowering
# --------------------------------------------------------------------------
def test_backward_reads_inputs_output_mask_and_reserve():
    # (attrs, the hidden outputs, what the backward reads of the outputs)
    for attrs, hidden, reads in (
            ({"mode": "lstm", "state_size": 2, "num_layers": 1, "state_outputs": True},
             ["reserve"], [0, 3]),
            ({"mode": "gru", "state_size": 2, "num_layers": 2, "p": 0.3},
             ["dropout_mask", "reserve"], [0, 1, 2]),
            ({"mode": "rnn_tanh", "state_size": 2, "num_layers": 1, "bidirectional": True},
             [], [0])):
        g, node, names = _graph(attrs)
        assert node.op.output_names(node.params)[node.num_visible_outputs:] == hidden
        gg = build_gradient(g, names)
        bwd = [n for n in gg.nodes if n.op is not None and n.op.name == "_backward_RNN"]
        assert len(bwd) == 1
        og, ins, outs, grads = bwd[0].op.backward_io(bwd[0].params)
        assert og == list(range(node.num_visible_outputs))
        assert ins == list(range(len(names))) and grads == list(range(len(names)))
        # the output (the last layer's states), the mask and the reserve;
        # never the last states
        assert outs == reads
        assert not get_op("RNN").inplace(node.params)


RESERVE = [({"mode": "lstm", "num_layers": 2}, 2 + 1),
           ({"mode": "lstm", "num_layers": 1, "bidirectional": True}, 2),
           ({"mode": "gru", "num_layers": 3, "bidirectional": True, "p": 0.3}, 4),
           ({"mode": "rnn_relu", "num_layers": 2}, 1),
           ({"mode": "lstm", "num_layers": 2, "bidirectional": True,
             "use_sequence_length": True, "lstm_state_clip_min": -0.3,
             "lstm_state_clip_max": 0.3}, 4 + 2)]


@pytest.mark.parametrize("attrs,slabs", RESERVE, ids=[
    f"{a['mode']}-L{a['num_layers']}" + ("-bi" if a.get("bidirectional") else "")
    + ("-lengths" if a.get("use_sequence_length") else "") for a, _ in RESERVE])
def test_reserve_holds_the_layer_outputs_and_cell_states(attrs, slabs):
    """In training the reserve holds, as (slabs, T, N, H), every layer's
    output but the last's (before dropout) and, for lstm, the cell state
    after every step; shape inference gives its shape exactly. In inference
    nothing is computed into it (zeros)."""
    attrs = {"state_size": 3, "state_outputs": True, **attrs}
    g, node, names = _graph(attrs, hidden_outputs=True)
    assert node.op.output_names(node.params)[-1] == "reserve"
    shapes, inf = _shapes(g, names, (4, 3, 2))
    assert inf.shape(g.outputs[-1]) == (slabs, 4, 3, 3)
    vals = _inputs(node, names, shapes, np.random.default_rng(13), scale=1.0)
    if attrs.get("use_sequence_length"):
        vals["sequence_length"] = np.array([4.0, 2.0, 0.0])
    got = _forward(g, vals, is_train=True, key=5)
    mask = got[node.num_visible_outputs] if attrs.get("p") else None
    p = node.params
    args = [vals[n] for n in ("data", "parameters", "state")]
    want = reserve_reference(p, *args, vals.get("state_cell"), vals.get("sequence_length"),
                             mask)
    assert got[-1].shape == want.shape == (slabs, 4, 3, 3)
    np.testing.assert_allclose(got[-1], want, rtol=1e-10, atol=1e-12)
    assert not np.any(_forward(g, vals, is_train=False)[-1])
    # one layer of a cell without a cell state keeps nothing: no reserve
    one = _graph({"mode": "gru", "state_size": 3, "num_layers": 1})[1]
    assert one.op.output_names(one.params) == ["output"]


def _lstm_net(hidden=64, layers=2):
    """An LSTM over (T, N, 64) data, its zero begin states as a hybridized
    Gluon export gives them, a classifier on every step."""
    S = sg.sym
    rnn = S.RNN(S.Variable("data"), S.Variable("lstm_parameters"),
                S._zeros(shape=(layers, 0, hidden), name="h0"),
                S._zeros(shape=(layers, 0, hidden), name="c0"), mode="lstm",
                state_size=hidden, num_layers=layers, name="lstm")
    fc = S.FullyConnected(S.reshape(rnn, shape=(-1, hidden)), num_hidden=10, name="fc")
    return S.SoftmaxOutput(fc, S.reshape(S.Variable("softmax_label"), shape=(-1,)),
                           name="softmax")


def test_training_plan_counts_the_reserve():
    steps, batch, hidden = 20, 8, 64
    plan = sg.plan(_lstm_net(hidden), {"data": (steps, batch, 64),
                                       "softmax_label": (steps, batch)}, train=True)
    live = plan.live
    names = {live.tensor_name(t): t for t in range(len(live.entry))}
    assert "lstm_reserve" in names, sorted(names)
    t = names["lstm_reserve"]
    # layer 0's outputs, then both layers' cell states: 3 slabs of (T, N, H) float32
    assert live.nbytes[t] == 3 * steps * batch * hidden * 4
    assert plan.inferred.shapes[live.entry[t]] == (3, steps, batch, hidden)
    # written by the forward, read by the backward
    ops = [plan.graph.nodes[live.steps[s][-1]].op.name for s in (live.first[t], live.last[t])]
    assert ops == ["RNN", "_backward_RNN"]
    # the begin states a consumer gives the batch of are planned like any input
    assert plan.verified


def test_training_plan_runs_in_the_arena():
    """The arena interpreter runs the training step with every tensor at
    its planned offset, poisoned after its last planned read: the backward
    reads no more than it declares (the output, the mask, the reserve)."""
    S = sg.sym
    rnn = S.RNN(S.Variable("data"), S.Variable("rnn_parameters"), S.Variable("h0"),
                S.Variable("c0"), S.Variable("lengths"), mode="lstm", state_size=3,
                num_layers=2, p=0.5, use_sequence_length=True, name="rnn")
    fc = S.FullyConnected(S.reshape(rnn, shape=(-1, 3)), num_hidden=4, name="fc")
    net = S.SoftmaxOutput(fc, S.reshape(S.Variable("softmax_label"), shape=(-1,)),
                          name="softmax")
    shapes = {"data": (3, 2, 4), "softmax_label": (3, 2), "h0": (2, 2, 3), "c0": (2, 2, 3),
              "lengths": (2,)}
    plan = sg.plan(net, shapes, train=True, data_names=["data", "h0", "c0", "lengths"])
    assert "rnn_reserve" in {plan.live.tensor_name(t) for t in range(len(plan.live.entry))}
    plan.check_arena("arena")
    assert plan.arena_checked == ["arena"]


def test_xla_temp_of_the_training_step_is_near_the_plan():
    """Before the reserve, the backward was jax.vjp of the whole forward:
    XLA ran the forward scans again and kept each step's gates, 16 times the
    plan's arena on this net (2.3 MB against 0.14 MB), 5.6 times arena and
    gradients. Now XLA's temp is the plan's tensors (the arena, 0.27 MB with
    the reserve), the weight gradient (the plan's gradients bucket) and one
    layer's weights cut out of the flat vector with their gradient sums:
    0.85 MB, 3.2 times the arena, 1.6 times arena and gradients."""
    from symgraph import xla
    plan = sg.plan(_lstm_net(), {"data": (20, 8, 64), "softmax_label": (20, 8)},
                   train=True)
    temp = xla.plan_memory(plan)["temp"]
    arena, grads = plan.internal["arena"], plan.buckets["gradients"]
    assert temp < 2 * (arena + grads), (temp, arena, grads)
    assert temp < 4.5 * arena, (temp, arena)


def test_one_scan_per_layer_and_direction():
    attrs = {"mode": "lstm", "state_size": 2, "num_layers": 2, "bidirectional": True}
    g, node, names = _graph(attrs)
    shapes, _ = _shapes(g, names, (5, 2, 3))
    vals = _inputs(node, names, shapes, np.random.default_rng(0))
    jaxpr = str(jax.make_jaxpr(lambda v: lower(g, False)(v, jax.random.key(0)))(vals))
    assert jaxpr.count("scan[") == 4 and "reverse=True" in jaxpr
    assert get_op("RNN").flops(node.params, [(5, 2, 3)], []) > 0
    # training: the backward adds one scan per layer and direction (it once
    # ran the forward's four again, then their four transposes)
    gg = build_gradient(g, names)
    heads = {e.node.output_names()[e.index] + "_head_grad": np.ones((5, 2, 4))
             for e in g.outputs}
    feeds = {**vals, **{k: v for k, v in heads.items()
                        if k in {n.name for n in gg.variables}}}
    jaxpr = str(jax.make_jaxpr(lambda v: lower(gg, True)(v, jax.random.key(0)))(feeds))
    assert jaxpr.count("scan[") == 8


def test_symbol_binds_runs_forward_and_backward():
    data = sg.sym.Variable("data")
    rnn = sg.sym.RNN(data, mode="gru", state_size=3, num_layers=2, bidirectional=True,
                     state_outputs=True, name="rnn")
    out = sg.sym.sum(rnn[0]) + sg.sym.sum(rnn[1])
    loss = sg.sym.MakeLoss(out)
    ex = loss.simple_bind(data=(4, 2, 3), type_dict={"data": "float64"})
    rng = np.random.default_rng(3)
    vals = {k: rng.normal(size=v.shape) * 0.5 for k, v in ex.arg_dict.items()}
    for k, v in vals.items():
        ex.arg_dict[k][:] = v
    ex.forward(is_train=True)
    ex.backward()
    p = {"mode": "gru", "state_size": 3, "num_layers": 2, "bidirectional": True,
         "state_outputs": True}
    args = [vals["data"], vals["rnn_parameters"], vals["rnn_state"]]
    o, hy, _ = rnn_reference(p, *args)
    np.testing.assert_allclose(ex.outputs[0].asnumpy(), o.sum() + hy.sum(), rtol=1e-10)

    def f(*xs):
        o, hy, _ = rnn_reference(p, *xs)
        return np.asarray(o.sum() + hy.sum())

    want = finite_differences(f, args, np.ones(()), wrt=[0, 2])
    np.testing.assert_allclose(ex.grad_dict["data"].asnumpy(), want[0], rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(ex.grad_dict["rnn_state"].asnumpy(), want[1], rtol=1e-6,
                               atol=1e-8)
    assert ex.grad_dict["rnn_parameters"].shape == vals["rnn_parameters"].shape


# --------------------------------------------------------------------------
# _rnn_param_concat and a Gluon-style JSON
# --------------------------------------------------------------------------
def test_rnn_param_concat_shapes_and_errors():
    xs = [sg.sym.Variable(f"w{i}") for i in range(3)]
    c = sg.sym._rnn_param_concat(*xs, dim=0, name="cat")
    _, out, _ = c.infer_shape(w0=(6,), w1=(4,), w2=(2,))
    assert out == [(12,)]
    _, out, _ = c.infer_shape_partial(w0=(6,), w1=(4,))
    assert not out[0]  # unknown until every input is known
    with pytest.raises(ShapeError, match="all dimensions except dim=0 must match"):
        sg.sym._rnn_param_concat(*xs[:2], dim=0).infer_shape(w0=(2, 3), w1=(2, 4))
    np.testing.assert_array_equal(
        REFERENCE_RNN["_rnn_param_concat"]({"dim": 0}, np.ones(2), np.zeros(1)), [1, 1, 0])


def _gluon_lstm_json(hidden, layers, input_size):
    """What Gluon 1.9.1 exports for rnn.LSTM(hidden, layers, input_size=...)
    called with explicit states: each weight and bias reshaped to (-1,),
    joined by _rnn_param_concat (dim 0) in MXNet's order, fed to RNN."""
    nodes = [{"op": "null", "name": "data", "inputs": []}]
    g = 4
    order = [(t, l, "l", gate) for t in ("weight", "bias") for l in range(layers)
             for gate in ("i2h", "h2h")]
    flat = []
    for t, l, d, gate in order:
        n_in = input_size if l == 0 else hidden
        shape = ((g * hidden, n_in if gate == "i2h" else hidden) if t == "weight"
                 else (g * hidden,))
        name = f"lstm0_{d}{l}_{gate}_{t}"
        nodes.append({"op": "null", "name": name,
                      "attrs": {"__dtype__": "0", "__lr_mult__": "1.0",
                                "__shape__": str(shape).replace(",)", ",)"),
                                "__storage_type__": "0", "__wd_mult__": "1.0"},
                      "inputs": []})
        nodes.append({"op": "Reshape", "name": f"lstm0_reshape{len(flat)}",
                      "attrs": {"shape": "(-1,)"}, "inputs": [[len(nodes) - 1, 0, 0]]})
        flat.append(len(nodes) - 1)
    nodes.append({"op": "_rnn_param_concat", "name": "lstm0_rnn_param_concat0",
                  "attrs": {"dim": "0", "num_args": str(len(flat))},
                  "inputs": [[i, 0, 0] for i in flat]})
    concat = len(nodes) - 1
    nodes.append({"op": "null", "name": "h0", "inputs": []})
    nodes.append({"op": "null", "name": "c0", "inputs": []})
    nodes.append({"op": "RNN", "name": "lstm0_rnn0",
                  "attrs": {"bidirectional": "False", "lstm_state_clip_max": "None",
                            "lstm_state_clip_min": "None", "lstm_state_clip_nan": "False",
                            "mode": "lstm", "num_layers": str(layers), "p": "0.0",
                            "projection_size": "None", "state_outputs": "True",
                            "state_size": str(hidden), "use_sequence_length": "False"},
                  "inputs": [[0, 0, 0], [concat, 0, 0], [concat + 1, 0, 0],
                             [concat + 2, 0, 0]]})
    rnn = len(nodes) - 1
    arg_nodes = [i for i, n in enumerate(nodes) if n["op"] == "null"]
    return json.dumps({"nodes": nodes, "arg_nodes": arg_nodes,
                       "node_row_ptr": list(range(len(nodes) + 3)),
                       "heads": [[rnn, 0, 0], [rnn, 1, 0], [rnn, 2, 0]],
                       "attrs": {"mxnet_version": ["int", 10901]}}), order


def test_gluon_json_with_rnn_param_concat_loads_and_runs():
    hidden, layers, n_in = 3, 2, 4
    text, order = _gluon_lstm_json(hidden, layers, n_in)
    sym = sg.sym.load_json(text)
    assert sym.list_outputs() == ["lstm0_rnn0_output", "lstm0_rnn0_state_output",
                                  "lstm0_rnn0_statecell_output"]
    arg, out, _ = sym.infer_shape(data=(5, 2, n_in), h0=(layers, 2, hidden),
                                  c0=(layers, 2, hidden))
    assert out == [(5, 2, hidden), (layers, 2, hidden), (layers, 2, hidden)]
    rng = np.random.default_rng(11)
    shapes = dict(zip(sym.list_arguments(), arg))
    vals = {k: rng.normal(size=s) * 0.5 for k, s in shapes.items()}
    ex = sym.simple_bind(data=(5, 2, n_in), h0=(layers, 2, hidden), c0=(layers, 2, hidden),
                         type_dict={k: "float64" for k in shapes})
    for k, v in vals.items():
        ex.arg_dict[k][:] = v
    got = [o.asnumpy() for o in ex.forward()]
    flat = np.concatenate([vals[f"lstm0_{d}{l}_{gate}_{t}"].reshape(-1)
                           for t, l, d, gate in order])
    want = rnn_reference({"mode": "lstm", "state_size": hidden, "num_layers": layers},
                         vals["data"], flat, vals["h0"], vals["c0"])
    for o, w in zip(got, want):
        np.testing.assert_allclose(o, w, rtol=1e-10, atol=1e-12)
    # the per-weight gradients reach each Gluon parameter through the concat
    ex.forward(is_train=True)
    ex.backward([np.ones(s) for s in out])
    assert ex.grad_dict["lstm0_l1_h2h_bias"].shape == (4 * hidden,)
    assert np.abs(ex.grad_dict["lstm0_l0_i2h_weight"].asnumpy()).sum() > 0


def test_nd_rnn_inference():
    rng = np.random.default_rng(12)
    p = {"mode": "rnn_relu", "state_size": 2, "num_layers": 1}
    x, h = rng.normal(size=(3, 2, 2)), rng.normal(size=(1, 2, 2))
    w = rng.normal(size=(2 * 2 + 2 * 2 + 4,))
    got = sg.nd.RNN(sg.nd.array(x, dtype="float64"), sg.nd.array(w, dtype="float64"),
                    sg.nd.array(h, dtype="float64"), **p)
    got = got[0] if isinstance(got, (list, tuple)) else got
    np.testing.assert_allclose(got.asnumpy(), rnn_reference(p, x, w, h)[0], rtol=1e-12)
    with pytest.raises(SymgraphError):
        sg.nd.RNN(sg.nd.array(x), sg.nd.array(w[:-1]), sg.nd.array(h), **p)


def test_an_inf_output_gradient_spreads_only_where_the_math_sends_it():
    # the backward's ties read the output gradient's first element; they
    # select on it, so an inf there reaches only the inputs it depends on:
    # a unidirectional lstm's step-0 output gradient never reaches dx[1:]
    T, N, I, H = 3, 2, 4, 5
    r = sg.sym.RNN(data=sg.sym.Variable("data"), parameters=sg.sym.Variable("w"),
                   state=sg.sym.Variable("h0"), state_cell=sg.sym.Variable("c0"),
                   mode="lstm", state_size=H, num_layers=1, name="r")
    ex = r.simple_bind(sg.cpu(), data=(T, N, I), h0=(1, N, H), c0=(1, N, H))
    rng = np.random.default_rng(0)
    for a in ex.arg_dict.values():
        a[:] = (rng.standard_normal(a.shape) * 0.3).astype(np.float32)
    ex.forward(is_train=True)
    og = np.ones((T, N, H), np.float32)
    og[0, 0, 0] = np.inf
    ex.backward(sg.nd.array(og))
    dx = ex.grad_dict["data"].asnumpy()
    assert np.isfinite(dx[1:]).all()
    assert not np.isfinite(dx[0, 0]).all()  # where it does reach
