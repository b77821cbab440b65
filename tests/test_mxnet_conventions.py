"""MXNet 1.9.1's Python conventions that code written for MXNet relies on:
infer_shape's (None, None, None) and infer_shape_partial's () for what is
unknown, infer_type's NumPy types, composing a symbol with ``net(x=y)``,
``sg.model``'s checkpoints, ``sg.viz.plot_network``/``print_summary``,
``sg.nd.dot``/``argmax``/``topk`` and ``sg.nd.random`` with ``seed``, 64-bit
``.params`` arrays with 64-bit JAX off, and ``unpack_img``'s alpha channel."""
import io
import math
import os
import warnings

import numpy as np
import pytest

import symgraph as sg
from symgraph.errors import GraphError, OpError, SerializationError, ShapeError

from helpers import small_mlp

S = sg.sym


def _two_branches():
    """MXNet's infer_shape_partial docstring example."""
    data, prev = S.Variable("data"), S.Variable("prev")
    fc1 = S.FullyConnected(data, name="fc1", num_hidden=128)
    fc2 = S.FullyConnected(prev, name="fc2", num_hidden=128)
    return S.Activation(S.elemwise_add(fc1, fc2), act_type="relu")


# --------------------------------------------------------------------------
# 1-2: infer_shape_partial's () and infer_shape's (None, None, None)
# --------------------------------------------------------------------------
def test_infer_shape_partial_gives_empty_tuples_for_unknown_shapes():
    net = _two_branches()
    assert net.list_arguments() == ["data", "fc1_weight", "fc1_bias", "prev", "fc2_weight",
                                    "fc2_bias"]
    args, outs, aux = net.infer_shape_partial(data=(10, 64))
    assert args == [(10, 64), (128, 64), (128,), (), (), ()]
    assert outs == [(10, 128)] and aux == []  # the add gives the output from one side
    args, outs, _ = S.FullyConnected(S.Variable("x"), num_hidden=2).infer_shape_partial()
    assert args == [(), (), ()] and outs == [()]


def test_infer_shape_with_too_little_returns_nones_and_warns():
    net = _two_branches()
    with pytest.warns(UserWarning, match="cannot infer the shape of prev"):
        assert net.infer_shape(data=(10, 64)) == (None, None, None)
    with pytest.warns(UserWarning, match="cannot infer the shape of data"):
        assert small_mlp().infer_shape() == (None, None, None)  # no arguments at all
    # enough information: no warning, every shape
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        args, outs, _ = net.infer_shape(data=(10, 64), prev=(10, 128))
    assert args[3:] == [(10, 128), (128, 128), (128,)] and outs == [(10, 128)]


def test_infer_shape_still_raises_on_conflicts():
    net = small_mlp()
    with pytest.raises(ShapeError, match=r"node 'fc1' \(FullyConnected\)"):
        net.infer_shape(data=(4, 7), fc1_weight=(5, 6))
    with pytest.raises(ShapeError, match="elemwise_add"):
        (S.Variable("a") + S.Variable("b")).infer_shape(a=(2, 3), b=(2, 4))
    with pytest.raises(ShapeError, match="elemwise_add"):  # partial too
        (S.Variable("a") + S.Variable("b")).infer_shape_partial(a=(2, 3), b=(2, 4))
    with pytest.raises(ShapeError, match="not an input"):
        net.infer_shape(dta=(4, 7))


def test_internal_users_of_shapes_still_get_every_shape():
    # the zoo's parameter count needs every shape: a clear error, not Nones
    with pytest.raises(ShapeError, match="cannot infer the shape of data"):
        small_mlp()._infer_shape_or_raise()
    assert sg.models.count_parameters(sg.models.get_model("mlp"), (1, 28, 28)) > 0


# --------------------------------------------------------------------------
# 3: infer_type gives NumPy types
# --------------------------------------------------------------------------
def test_infer_type_returns_numpy_types():
    a, b = S.Variable("a"), S.Variable("b")
    args, outs, aux = (a + b).infer_type(a="float32")
    assert args == [np.float32, np.float32] and outs == [np.float32] and aux == []
    assert all(t is np.float32 for t in args + outs)  # the type itself, as _DTYPE_MX_TO_NP
    bn = S.BatchNorm(S.Variable("x"), name="bn")
    args, outs, aux = bn.infer_type(x=np.float16)
    assert set(args) == {np.float16} and aux == [np.float16, np.float16]
    assert S.Cast(a, dtype="int32").infer_type(a="float32")[1] == [np.int32]
    assert S.Variable("v", dtype="bfloat16").infer_type()[0][0] is np.dtype(
        sg.dtypes.np_dtype("bfloat16")).type
    assert (a + b).infer_type_partial(a="float16")[1] == [np.float16]


# --------------------------------------------------------------------------
# 4: composition
# --------------------------------------------------------------------------
def test_compose_by_name_replaces_free_variables():
    data = S.Variable("data")
    net1 = S.FullyConnected(data, name="fc1", num_hidden=10)
    net2 = S.FullyConnected(name="fc3", num_hidden=4)  # reads the variable fc3_data
    composed = net2(fc3_data=net1, name="composed")
    assert composed.name == "composed" and net2.name == "fc3"  # a new symbol
    assert composed.list_arguments() == ["data", "fc1_weight", "fc1_bias", "fc3_weight",
                                         "fc3_bias"]
    assert net2.list_arguments() == ["fc3_data", "fc3_weight", "fc3_bias"]  # unchanged
    args, outs, _ = composed.infer_shape(data=(2, 7))
    assert args[3] == (4, 10) and outs == [(2, 4)]
    # it runs: the composed graph is the net it says
    x = np.arange(14, dtype=np.float32).reshape(2, 7) / 10
    w1, b1 = np.full((10, 7), 0.1, np.float32), np.ones(10, np.float32)
    w3, b3 = np.full((4, 10), 0.2, np.float32), np.zeros(4, np.float32)
    out = composed.eval(data=sg.nd.array(x), fc1_weight=sg.nd.array(w1),
                        fc1_bias=sg.nd.array(b1), fc3_weight=sg.nd.array(w3),
                        fc3_bias=sg.nd.array(b3))[0]
    np.testing.assert_allclose(out.asnumpy(), (x @ w1.T + b1) @ w3.T + b3, rtol=1e-5)


def test_compose_positionally_in_argument_order():
    x = S.Variable("x")
    head = S.Activation(S.FullyConnected(x, num_hidden=3, name="fc"), act_type="relu",
                        name="act")
    body = S.Convolution(S.Variable("img"), kernel=(1, 1), num_filter=2, name="conv")
    flat = S.Flatten(body, name="flat")
    net = head(flat)  # replaces x, the first argument
    assert net.list_arguments() == ["img", "conv_weight", "conv_bias", "fc_weight", "fc_bias"]
    assert net.infer_shape(img=(5, 3, 4, 4))[1] == [(5, 3)]
    assert net.name == "act"


def test_compose_mistakes_are_clear_errors():
    net = small_mlp()
    other = S.Variable("z")
    with pytest.raises(GraphError, match="'dta' is not a free variable.*data, fc1_weight"):
        net(dta=other)
    with pytest.raises(GraphError, match="not both"):
        net(other, data=other)
    with pytest.raises(GraphError, match="must be replaced by a Symbol"):
        net(data=3)
    with pytest.raises(GraphError, match="7 symbols for 6 arguments"):
        net(*[other] * 7)
    with pytest.raises(GraphError, match="a variable cannot be composed"):
        other(z=net)
    with pytest.raises(GraphError, match="group of 2"):
        net(data=S.Group([other, S.Variable("w")]))


# --------------------------------------------------------------------------
# 5: sg.model checkpoints
# --------------------------------------------------------------------------
def test_model_save_and_load_checkpoint(tmp_path):
    net = S.BatchNorm(S.FullyConnected(S.Variable("data"), num_hidden=3, name="fc"), name="bn")
    arg = {"fc_weight": sg.nd.array(np.arange(6).reshape(3, 2)), "fc_bias": sg.nd.ones(3),
           "bn_gamma": sg.nd.ones(3), "bn_beta": sg.nd.zeros(3)}
    aux = {"bn_moving_mean": sg.nd.array([1, 2, 3]), "bn_moving_var": sg.nd.ones(3)}
    prefix = str(tmp_path / "net")
    sg.model.save_checkpoint(prefix, 7, net, arg, aux)
    assert sorted(os.listdir(tmp_path)) == ["net-0007.params", "net-symbol.json"]
    sym, arg2, aux2 = sg.model.load_checkpoint(prefix, 7)
    assert sym.tojson() == net.tojson()
    assert set(arg2) == set(arg) and set(aux2) == set(aux)
    assert isinstance(arg2["fc_weight"], sg.nd.NDArray)
    np.testing.assert_array_equal(arg2["fc_weight"].asnumpy(), arg["fc_weight"].asnumpy())
    np.testing.assert_array_equal(aux2["bn_moving_mean"].asnumpy(), [1, 2, 3])
    arg3, aux3 = sg.model.load_params(prefix, 7)
    assert set(arg3) == set(arg) and set(aux3) == set(aux)
    # the .params file is nd.save's format, arg:/aux: names (mx.model's)
    assert sorted(sg.nd.load(prefix + "-0007.params"))[:2] == ["arg:bn_beta", "arg:bn_gamma"]
    with pytest.raises(SerializationError, match="net-0008.params"):
        sg.model.load_checkpoint(prefix, 8)
    assert "model" in dir(sg) and sg.model is sg.model


# --------------------------------------------------------------------------
# 6: sg.viz.plot_network and print_summary
# --------------------------------------------------------------------------
def test_plot_network_returns_a_digraph():
    import graphviz
    net = small_mlp()
    dot = sg.viz.plot_network(net, title="mlp", shape={"data": (2, 7)},
                              node_attrs={"shape": "oval"})
    assert isinstance(dot, graphviz.Digraph) and dot.name == "mlp" and dot.format == "pdf"
    assert "oval" in dot.source and "fc1_weight" not in dot.source
    assert "5" in dot.source  # edges carry shapes
    shown = sg.viz.plot_network(net, hide_weights=False, save_format="svg")
    assert "fc1_weight" in shown.source and shown.format == "svg"
    with pytest.raises(sg.viz.VizError, match="takes a Symbol"):
        sg.viz.plot_network("net.json")
    with pytest.raises(sg.viz.VizError, match="save_format"):
        sg.viz.plot_network(net, save_format="bmp")


def _mxnet_style_count(net, shape):
    """MXNet's print_summary formula, written out: a Convolution has
    C_in * prod(kernel) * num_filter / num_group (+ num_filter bias), a
    FullyConnected (in + 1) * hidden, a BatchNorm 2 * C (gamma, beta)."""
    internals = net.get_internals()
    _, outs, _ = internals.infer_shape(**shape)
    shapes = dict(zip(internals.list_outputs(), outs))
    total = 0
    for node in net.graph().nodes:
        if node.op is None:
            continue
        ins = [shapes[e.node.output_names()[e.index]] for e in node.inputs]
        p = node.params
        if node.op.name == "Convolution":
            total += ins[0][1] * math.prod(p.kernel) * p.num_filter // p.num_group \
                + (0 if p.no_bias else p.num_filter)
        elif node.op.name == "FullyConnected":
            total += (math.prod(ins[0][1:]) + (0 if p.no_bias else 1)) * p.num_hidden
        elif node.op.name == "BatchNorm":
            total += 2 * ins[0][1]
    return total


def test_print_summary_prints_mxnets_table(capsys):
    net = small_mlp()
    assert sg.viz.print_summary(net, shape={"data": (4, 7)}) is None
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "_" * 120 and lines[2] == "=" * 120 and lines[-1] == "_" * 120
    header = lines[1]
    assert header.startswith("Layer (type)") and header.index("Output Shape") == 52
    assert header.index("Param #") == 76 and header.index("Previous Layer") == 88
    rows = [ln for ln in lines[3:-2] if ln.strip("_=")]
    assert rows[0].split() == ["data(null)", "7", "0"]
    assert rows[1].split() == ["fc1(FullyConnected)", "5", "40", "data"]  # 7*5 + 5
    assert rows[2].split() == ["relu1(Activation)", "5", "0", "fc1"]
    assert rows[3].split() == ["fc2(FullyConnected)", "3", "18", "relu1"]  # 5*3 + 3
    assert rows[4].split() == ["softmax(SoftmaxOutput)", "3", "0", "fc2"]
    assert lines[-3] == "=" * 120 and lines[-2] == "Total params: 58"
    # columns as characters, a shorter line
    sg.viz.print_summary(net, shape={"data": (4, 7)}, line_length=60, positions=[20, 35, 45, 60])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "_" * 60 and lines[1].index("Param #") == 35
    with pytest.raises(sg.viz.VizError, match="positions"):
        sg.viz.print_summary(net, positions=[.5, .4, .8, 1.])


@pytest.mark.parametrize("name", ["resnet-18", "vgg11-bn", "convnet"])
def test_print_summary_total_matches_the_argument_shapes(name, capsys):
    """Weights, biases, BatchNorm's gamma and beta count; moving statistics
    (aux states) do not: the total is every learnable argument's size from
    infer_shape, and MXNet's own formula gives the same on these nets."""
    net = sg.models.get_model(name)
    shape = {"data": (1, *sg.models.model_info(name).image_shape)}
    sg.viz.print_summary(net, shape=shape)
    out = capsys.readouterr().out
    total = int(out.splitlines()[-2].split(": ")[1])
    args, _, aux = net.infer_shape(**shape)
    independent = sum(math.prod(s) for n, s in zip(net.list_arguments(), args)
                      if n not in ("data", "softmax_label"))
    assert total == independent == _mxnet_style_count(net, shape)
    assert aux and all("moving" in n for n in net.list_auxiliary_states())
    assert "(BatchNorm)" in out and "(Convolution)" in out


# --------------------------------------------------------------------------
# 7: sg.nd.dot / argmax / topk, and sg.nd.random
# --------------------------------------------------------------------------
def test_nd_dot_argmax_topk():
    a = np.array([[1, 5, 3], [4, 2, 6]], np.float32)
    b = np.arange(6, dtype=np.float32).reshape(3, 2)
    np.testing.assert_allclose(sg.nd.dot(sg.nd.array(a), sg.nd.array(b)).asnumpy(), a @ b)
    np.testing.assert_allclose(sg.nd.dot(sg.nd.array(a), sg.nd.array(a),
                                         transpose_b=True).asnumpy(), a @ a.T)
    assert sg.nd.argmax(sg.nd.array(a), axis=1).asnumpy().tolist() == [1, 2]
    assert sg.nd.argmax(sg.nd.array(a), axis=0).asnumpy().tolist() == [1, 0, 1]
    # topk: MXNet's defaults (last axis, indices), values, both
    assert sg.nd.topk(sg.nd.array(a), k=2).asnumpy().tolist() == [[1, 2], [2, 0]]
    assert sg.nd.topk(sg.nd.array(a), k=2, ret_typ="value").asnumpy().tolist() == \
        [[5, 3], [6, 4]]
    vals, idx = sg.nd.topk(sg.nd.array(a), k=1, axis=0, ret_typ="both")
    assert vals.asnumpy().tolist() == [[4, 5, 6]] and idx.asnumpy().tolist() == [[1, 0, 1]]
    assert "dot" in dir(sg.nd) and "topk" in dir(sg.nd)


def test_nd_random_draws_and_seed():
    r = sg.nd.random
    sg.random.seed(42)  # mx.random.seed
    u = r.uniform(-2, 3, shape=(1000,))
    n = r.normal(1.0, 2.0, shape=(2000,))
    i = r.randint(3, 7, shape=(500,))
    sg.nd.random.seed(42)
    assert np.array_equal(r.uniform(-2, 3, shape=(1000,)).asnumpy(), u.asnumpy())
    assert np.array_equal(r.normal(1.0, 2.0, shape=(2000,)).asnumpy(), n.asnumpy())
    assert np.array_equal(r.randint(3, 7, shape=(500,)).asnumpy(), i.asnumpy())
    sg.random.seed(43)
    assert not np.array_equal(r.uniform(-2, 3, shape=(1000,)).asnumpy(), u.asnumpy())
    u, n, i = u.asnumpy(), n.asnumpy(), i.asnumpy()
    assert u.dtype == np.float32 and u.min() >= -2 and u.max() < 3 and abs(u.mean() - .5) < .2
    assert n.dtype == np.float32 and abs(n.mean() - 1) < .25 and abs(n.std() - 2) < .25
    assert i.dtype == np.int32 and set(i.tolist()) == {3, 4, 5, 6}
    assert r.uniform().shape == (1,)  # MXNet draws one number by default
    assert r.normal(shape=(2, 3), dtype="float16").dtype == np.float16
    out = sg.nd.zeros((2, 2))
    assert r.uniform(5, 6, out=out) is out and out.asnumpy().min() >= 5
    data = sg.nd.array(np.arange(12).reshape(6, 2))
    shuffled = r.shuffle(data).asnumpy()
    assert sorted(map(tuple, shuffled.tolist())) == sorted(map(tuple, data.asnumpy().tolist()))
    assert data.asnumpy()[0].tolist() == [0, 1]  # the input is left as it was


def test_nd_random_mistakes_are_clear_errors():
    r = sg.nd.random
    for fn, match in [(lambda: r.uniform(sg.nd.ones(2), 3), "low must be a number"),
                      (lambda: r.randint(0.5, 3), "low must be an int"),
                      (lambda: r.randint(3, 3), "must be below high"),
                      (lambda: r.uniform(dtype="int32"), "float type"),
                      (lambda: r.normal(scale=-1), "scale must not be negative"),
                      (lambda: r.uniform(shape=(2,), bogus=1), "unknown argument"),
                      (lambda: sg.random.seed("7"), "seed_state must be an int")]:
        with pytest.raises(OpError, match=match):
            fn()
    with pytest.raises(ShapeError):
        r.uniform(shape="big")


# --------------------------------------------------------------------------
# 8: 64-bit arrays in .params files with 64-bit JAX off
# --------------------------------------------------------------------------
@pytest.mark.x64_off
@pytest.mark.parametrize("fmt", ["mxnet", "npz"])
def test_64_bit_arrays_that_fit_are_narrowed_with_a_warning(tmp_path, fmt):
    f = str(tmp_path / "x.params")
    ints = np.array([-2 ** 31, 0, 2 ** 31 - 1], np.int64)
    floats = np.array([0.1, -1e30, 3.0], np.float64)
    sg.nd.save(f, {"i": ints, "f": floats, "w": np.ones(2, np.float32)}, format=fmt)
    with pytest.warns(UserWarning, match=r"x\.params: 64-bit JAX is off.*2 64-bit array\(s\)"
                      r".*'i' int64->int32, 'f' float64->float32"):
        got = sg.nd.load(f)
    assert got["i"].dtype == np.int32 and got["i"].asnumpy().tolist() == ints.tolist()
    assert got["f"].dtype == np.float32
    np.testing.assert_array_equal(got["f"].asnumpy(), floats.astype(np.float32))
    assert got["w"].dtype == np.float32


@pytest.mark.x64_off
def test_64_bit_arrays_narrowing_would_change_are_refused_by_name(tmp_path):
    f = str(tmp_path / "x.params")
    sg.nd.save(f, {"ok": np.zeros(2, np.int64), "big": np.array([3, -2 ** 31 - 1], np.int64)})
    with pytest.raises(SerializationError, match=r"array 'big': int64 value -2147483649 does "
                       r"not fit int32"):
        sg.nd.load(f)
    sg.nd.save(f, [np.array([1.0, 1e300])])
    with pytest.raises(SerializationError, match=r"array 0: float64 value 1e\+300 is beyond "
                       r"float32's range"):
        sg.nd.load(f)


@pytest.mark.x64_off
def test_checkpoints_narrow_64_bit_parameters_too(tmp_path):
    prefix = str(tmp_path / "net")
    net = S.FullyConnected(S.Variable("data"), num_hidden=2, name="fc")
    sg.model.save_checkpoint(prefix, 1, net, {"fc_weight": np.ones((2, 3)),
                                              "fc_bias": np.zeros(2)}, {})
    with pytest.warns(UserWarning, match="'arg:fc_weight' float64->float32"):
        _, arg, _ = sg.model.load_checkpoint(prefix, 1)
    assert arg["fc_weight"].dtype == np.float32 and arg["fc_bias"].dtype == np.float32


def test_64_bit_arrays_load_as_they_are_with_x64_on(tmp_path):
    f = str(tmp_path / "x.params")
    sg.nd.save(f, {"i": np.array([2 ** 40], np.int64)})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = sg.nd.load(f)["i"]
    assert got.dtype == np.int64 and got.asnumpy().tolist() == [2 ** 40]


# --------------------------------------------------------------------------
# 9: unpack_img keeps an alpha channel with iscolor=-1
# --------------------------------------------------------------------------
def _png(mode, array):
    from PIL import Image
    out = io.BytesIO()
    Image.fromarray(array, mode).save(out, format="PNG")
    return out.getvalue()


def test_unpack_img_keeps_alpha_as_opencv_imread_unchanged():
    rio = sg.recordio
    rgba = np.zeros((4, 5, 4), np.uint8)
    rgba[..., 0], rgba[..., 1], rgba[..., 2] = 200, 100, 50  # R, G, B
    rgba[..., 3] = np.arange(20, dtype=np.uint8).reshape(4, 5) * 10
    record = rio.pack(rio.IRHeader(0, 1.0, 3, 0), _png("RGBA", rgba))
    header, img = rio.unpack_img(record)  # iscolor=-1, MXNet's default
    assert header.id == 3 and img.shape == (4, 5, 4)
    assert img[0, 0, :3].tolist() == [50, 100, 200]  # BGRA, as OpenCV gives it
    np.testing.assert_array_equal(img[..., 3], rgba[..., 3])
    _, img = rio.unpack_img(record, iscolor=1)
    assert img.shape == (4, 5, 3) and img[0, 0].tolist() == [50, 100, 200]
    _, img = rio.unpack_img(record, iscolor=0)
    assert img.shape == (4, 5)
    # grey with alpha: four channels too (OpenCV reads it as BGRA); plain
    # grey and plain colour keep their own channels
    la = np.stack([np.full((3, 3), 90, np.uint8), np.full((3, 3), 7, np.uint8)], -1)
    _, img = rio.unpack_img(rio.pack(rio.IRHeader(0, 0, 0, 0), _png("LA", la)))
    assert img.shape == (3, 3, 4) and img[0, 0].tolist() == [90, 90, 90, 7]
    _, img = rio.unpack_img(rio.pack(rio.IRHeader(0, 0, 0, 0),
                                     _png("L", np.zeros((3, 3), np.uint8))))
    assert img.shape == (3, 3)
    _, img = rio.unpack_img(rio.pack(rio.IRHeader(0, 0, 0, 0),
                                     _png("RGB", np.zeros((3, 3, 3), np.uint8))))
    assert img.shape == (3, 3, 3)


def test_pack_img_writes_alpha_to_png_and_drops_it_from_jpeg():
    rio = sg.recordio
    bgra = np.zeros((8, 8, 4), np.uint8)
    bgra[..., 0], bgra[..., 3] = 255, 128  # blue, half transparent
    _, back = rio.unpack_img(rio.pack_img(rio.IRHeader(0, 0, 0, 0), bgra, img_fmt=".png"))
    np.testing.assert_array_equal(back, bgra)
    _, back = rio.unpack_img(rio.pack_img(rio.IRHeader(0, 0, 0, 0), bgra, img_fmt=".jpg"))
    assert back.shape == (8, 8, 3) and back[..., 0].min() > 240
