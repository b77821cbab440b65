"""The normalization and resampling ops of MXNet 1.9.1 (symgraph/ops/
normalize.py) beyond the registry-driven checks of test_ops.py: the forward
against NumPy references written from the math (tests/op_reference_normalize
.py) in float64 on edge cases and on MXNet's documented examples, the
gradients against NumPy formulas and central finite differences, what each
backward node reads (the memory facts), one clear error per bad input, an
MXNet symbol-JSON using several of them that loads and runs, and a net of
all of them whose training plan is verified by running it in its arena."""
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

from grad_check import finite_differences, symgraph_gradients
from op_reference_normalize import GRAD_REFERENCE_NORMALIZE, REFERENCE_NORMALIZE

F64 = "float64"


def _params(opname, attrs, n_inputs=1):
    """Parsed attributes; num_args, where the op has it, as many as the inputs
    (what sg.sym and sg.nd set when it is left out)."""
    if "num_args" in get_op(opname).attrs and "num_args" not in attrs:
        attrs = {**attrs, "num_args": n_inputs}
    return Node(get_op(opname), "op", attrs, []).params


def run(opname, attrs, *xs):
    """The op's visible outputs, eagerly through sg.nd, in float64."""
    out = getattr(sg.nd, opname)(*[sg.nd.array(x, dtype=F64) for x in xs], **attrs)
    out = out if isinstance(out, list) else [out]
    return [o.asnumpy() for o in out]


def reference(opname, attrs, *xs):
    want = REFERENCE_NORMALIZE[opname](_params(opname, attrs, len(xs)), *xs)
    return list(want) if isinstance(want, tuple) else [want]


def check_forward(opname, attrs, *xs, rtol=1e-12, atol=1e-13):
    got = run(opname, attrs, *xs)
    want = reference(opname, attrs, *xs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == np.float64
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return got


def hidden_outputs(opname, attrs, *xs):
    """Every output, hidden ones included, of the op's lowering."""
    ctx = sg.lower.LowerCtx(False, None, "op")
    return [np.asarray(o) for o in get_op(opname).lower(
        _params(opname, attrs, len(xs)), ctx, *[np.asarray(x, np.float64) for x in xs])]


# --------------------------------------------------------------------------
# forward: normalisations
# --------------------------------------------------------------------------
@pytest.mark.parametrize("attrs,shape", [
    ({}, (2, 3, 4)), ({"axis": 0}, (3, 4)), ({"axis": 1, "eps": 1e-2}, (2, 3, 2, 2)),
    ({"axis": -3}, (2, 3, 2, 2)), ({}, (6,)), ({"output_mean_var": True}, (2, 5)),
    ({"output_mean_var": True, "axis": 1}, (2, 3, 4)),
])
def test_layer_norm_matches_numpy(attrs, shape):
    rng = np.random.default_rng(0)
    x, axis = rng.normal(size=shape) * 3 + 1, attrs.get("axis", -1)
    c = shape[axis]
    g, b = rng.normal(size=c), rng.normal(size=c)
    out = check_forward("LayerNorm", attrs, x, g, b)
    # from the formula, numpy's own mean/var: eps 1e-5 by default
    eps = attrs.get("eps", 1e-5)
    m, v = x.mean(axis=axis, keepdims=True), x.var(axis=axis, keepdims=True)
    view = [1] * len(shape)
    view[axis] = c
    np.testing.assert_allclose(out[0], (x - m) / np.sqrt(v + eps) * g.reshape(view)
                               + b.reshape(view), rtol=1e-12, atol=1e-12)
    if attrs.get("output_mean_var"):  # MXNet's mean and std: the axis kept as 1
        assert out[1].shape == out[2].shape == m.shape
        np.testing.assert_allclose(out[1], m, rtol=1e-12)
        np.testing.assert_allclose(out[2], np.sqrt(v + eps), rtol=1e-12)


def test_layer_norm_of_a_constant_is_beta_and_eps_matters():
    x = np.full((2, 4), 3.0)
    g, b = np.arange(1.0, 5.0), np.arange(4.0)
    (y,) = check_forward("LayerNorm", {}, x, g, b)
    np.testing.assert_array_equal(y, np.broadcast_to(b, (2, 4)))
    x = np.array([[0.0, 2e-3]])  # variance 1e-6: eps=1e-5 shrinks the output
    (y,) = run("LayerNorm", {}, x, np.ones(2), np.zeros(2))
    np.testing.assert_allclose(y, [[-1e-3, 1e-3]] / np.sqrt(1e-6 + 1e-5), rtol=1e-12)


@pytest.mark.parametrize("attrs,shape", [
    ({}, (2, 3, 4)), ({"eps": 1e-5}, (2, 2, 3, 3)), ({}, (1, 2, 2, 3, 2)), ({}, (3, 1, 1)),
])
def test_instance_norm_matches_numpy(attrs, shape):
    rng = np.random.default_rng(1)
    x = rng.normal(size=shape) * 2 - 1
    g, b = rng.normal(size=shape[1]), rng.normal(size=shape[1])
    (y,) = check_forward("InstanceNorm", attrs, x, g, b)
    # hidden outputs: mean and the biased variance (not the std), (N, C)
    _, mean, var = hidden_outputs("InstanceNorm", attrs, x, g, b)
    flat = x.reshape(shape[:2] + (-1,))
    np.testing.assert_allclose(mean, flat.mean(-1), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(var, flat.var(-1), rtol=1e-12, atol=1e-14)
    if shape[2:] == (1, 1):  # one value per slice: the output is beta
        np.testing.assert_allclose(y, np.broadcast_to(b.reshape(1, -1, 1, 1), shape))


def test_instance_norm_mxnet_doc_example():
    # MXNet's documented example, eps 1e-3 (printed in float32)
    x = np.array([[[1.1, 2.2]], [[3.3, 4.4]]])
    (y,) = run("InstanceNorm", {}, x, np.array([1.5]), np.array([0.5]))
    np.testing.assert_allclose(y, [[[-0.997527, 1.99752665]], [[-0.99752653, 1.99752724]]],
                               rtol=1e-6)


@pytest.mark.parametrize("attrs,shape", [
    ({"num_groups": 2}, (2, 4, 3)), ({"num_groups": 3, "output_mean_var": True}, (2, 6, 2, 2)),
    ({}, (3, 2, 2, 2)), ({"num_groups": 4, "eps": 1e-3}, (2, 4, 5)),
])
def test_group_norm_matches_numpy(attrs, shape):
    rng = np.random.default_rng(2)
    x = rng.normal(size=shape) + 2
    groups = attrs.get("num_groups", 1)
    g, b = rng.normal(size=groups), rng.normal(size=groups)  # MXNet 1.9.1: per group
    out = check_forward("GroupNorm", attrs, x, g, b)
    if attrs.get("output_mean_var"):
        assert out[1].shape == out[2].shape == (shape[0], groups)


def test_group_norm_special_cases_are_layer_and_instance_norm():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 3, 4))
    # one group: every sample normalised as a whole (LayerNorm of the flattened sample)
    (y,) = run("GroupNorm", {"num_groups": 1}, x, np.ones(1), np.zeros(1))
    (want,) = run("LayerNorm", {}, x.reshape(2, -1), np.ones(12), np.zeros(12))
    np.testing.assert_allclose(y, want.reshape(x.shape), rtol=1e-12, atol=1e-13)
    # a group per channel: InstanceNorm with its eps
    g, b = rng.normal(size=3), rng.normal(size=3)
    (y,) = run("GroupNorm", {"num_groups": 3, "eps": 1e-3}, x, g, b)
    (want,) = run("InstanceNorm", {}, x, g, b)
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-13)


MXNET_L2_X = np.array([[[1, 2], [3, 4]], [[2, 2], [5, 6]]], dtype=np.float64)
MXNET_L2_DOC = {  # MXNet's documented outputs (printed in float32)
    "instance": [[[0.18257418, 0.36514837], [0.54772252, 0.73029673]],
                 [[0.24077171, 0.24077171], [0.60192931, 0.72231513]]],
    "channel": [[[0.31622776, 0.44721359], [0.94868326, 0.89442718]],
                [[0.37139067, 0.31622776], [0.92847669, 0.94868326]]],
    "spatial": [[[0.44721359, 0.89442718], [0.60000002, 0.80000001]],
                [[0.70710677, 0.70710677], [0.6401844, 0.76822126]]],
}


@pytest.mark.parametrize("mode", ["instance", "channel", "spatial"])
def test_l2_normalization_mxnet_doc_example_and_norm_shapes(mode):
    (y,) = check_forward("L2Normalization", {"mode": mode}, MXNET_L2_X)
    np.testing.assert_allclose(y, MXNET_L2_DOC[mode], rtol=1e-6)
    x = np.random.default_rng(4).normal(size=(2, 3, 2, 2))
    check_forward("L2Normalization", {"mode": mode, "eps": 1e-3}, x)
    _, norm = hidden_outputs("L2Normalization", {"mode": mode}, x)
    assert norm.shape == {"instance": (2,), "channel": (2, 1, 2, 2), "spatial": (2, 3)}[mode]


def test_l2_normalization_of_zeros_and_of_a_vector():
    (y,) = run("L2Normalization", {}, np.zeros((2, 3)))
    np.testing.assert_array_equal(y, 0)  # norm sqrt(eps): no NaN
    # rank 1 in instance mode: as MXNet's kernel, each element is its own instance
    x = np.array([3.0, -4.0, 0.5])
    (y,) = check_forward("L2Normalization", {"eps": 1e-4}, x)
    np.testing.assert_allclose(y, x / np.sqrt(x * x + 1e-4), rtol=1e-12)


# --------------------------------------------------------------------------
# forward: upsampling, resizing, pooling, padding, cropping, block moves
# --------------------------------------------------------------------------
def test_upsampling_mxnet_doc_examples():
    ones = np.ones((1, 1, 3, 3))
    (y,) = check_forward("UpSampling", {"scale": 2, "sample_type": "nearest"}, ones)
    np.testing.assert_array_equal(y, np.ones((1, 1, 6, 6)))
    # bilinear is MXNet's deconvolution: kernel 4, stride 2, pad 1 for scale 2
    (y,) = check_forward("UpSampling", {"scale": 2, "sample_type": "bilinear",
                                        "num_filter": 1}, ones, np.ones((1, 1, 4, 4)))
    edge = [1, 2, 2, 2, 2, 1]
    np.testing.assert_array_equal(y[0, 0], np.outer(edge, edge))


def test_upsampling_nearest_values_and_several_inputs():
    rng = np.random.default_rng(5)
    a, b = rng.normal(size=(2, 2, 2, 3)), rng.normal(size=(2, 1, 4, 6))
    (y,) = check_forward("UpSampling", {"scale": 2, "sample_type": "nearest"}, a)
    np.testing.assert_array_equal(y, a.repeat(2, axis=2).repeat(2, axis=3))
    # concat: a doubled, b already at the output size (its own factor 1)
    (y,) = check_forward("UpSampling", {"scale": 2, "sample_type": "nearest"}, a, b)
    np.testing.assert_array_equal(y, np.concatenate([a.repeat(2, 2).repeat(2, 3), b], 1))
    c = rng.normal(size=(2, 2, 1, 1))  # the 4 x 6 output is no one factor of 1 x 1
    with pytest.raises(ShapeError, match="one integer factor"):
        run("UpSampling", {"scale": 2, "sample_type": "nearest"}, a, c)
    d = rng.normal(size=(2, 2, 4, 6))
    (y,) = check_forward("UpSampling", {"scale": 2, "sample_type": "nearest",
                                        "multi_input_mode": "sum"}, a, d)
    np.testing.assert_allclose(y, a.repeat(2, 2).repeat(2, 3) + d, rtol=1e-15)


@pytest.mark.parametrize("scale,shape", [(2, (2, 3, 3, 3)), (3, (1, 2, 2, 3)),
                                         (1, (1, 2, 2, 2)), (4, (1, 1, 2, 2))])
def test_upsampling_bilinear_matches_the_scatter(scale, shape):
    rng = np.random.default_rng(6)
    k = 2 * scale - scale % 2
    x, w = rng.normal(size=shape), rng.normal(size=(shape[1], 1, k, k))
    (y,) = check_forward("UpSampling", {"scale": scale, "sample_type": "bilinear",
                                        "num_filter": shape[1]}, x, w)
    assert y.shape == shape[:2] + (shape[2] * scale, shape[3] * scale)
    # the same as MXNet's Deconvolution it stands for
    pad = -(-(scale - 1) // 2)
    (d,) = run("Deconvolution", {"kernel": (k, k), "stride": (scale, scale), "pad": (pad, pad),
                                 "num_filter": shape[1], "num_group": shape[1]}, x, w)
    np.testing.assert_allclose(y, d, rtol=1e-12, atol=1e-13)


def test_upsampling_bilinear_weight_is_inferred_and_named_as_mxnet():
    up = sg.sym.UpSampling(sg.sym.Variable("data"), scale=2, sample_type="bilinear",
                           num_filter=3, name="up")
    assert up.list_arguments() == ["data", "up_weight"]
    args, outs, _ = up.infer_shape(data=(2, 3, 5, 4))
    assert args == [(2, 3, 5, 4), (3, 1, 4, 4)] and outs == [(2, 3, 10, 8)]
    near = sg.sym.UpSampling(sg.sym.Variable("a"), sg.sym.Variable("b"), scale=2,
                             sample_type="nearest", name="n")
    assert near.list_arguments() == ["a", "b"]


def test_upsampling_bilinear_with_the_bilinear_kernel_interpolates():
    # the weight MXNet's Bilinear initializer gives: a constant stays constant
    # away from the border, and a ramp is interpolated halfway between pixels
    from symgraph.train.initializer import InitDesc, Uniform
    w = np.zeros((1, 1, 4, 4))
    Uniform()(InitDesc("up_weight", attrs={"__init__": "bilinear"}), w)
    attrs = {"scale": 2, "sample_type": "bilinear", "num_filter": 1}
    (y,) = run("UpSampling", attrs, np.ones((1, 1, 4, 4)), w)
    np.testing.assert_allclose(y[0, 0, 1:-1, 1:-1], 1, rtol=1e-15)
    (y,) = run("UpSampling", attrs, np.arange(4.0).reshape(1, 1, 1, 4).repeat(4, 2), w)
    np.testing.assert_allclose(y[0, 0, 2, 1:-1], [0.25, 0.75, 1.25, 1.75, 2.25, 2.75],
                               rtol=1e-15)


def _ramp(h, w):
    return np.add.outer(np.arange(h) * 10.0, np.arange(w)).reshape(1, 1, h, w)


@pytest.mark.parametrize("attrs,shape,out", [
    ({"height": 5, "width": 7}, (2, 2, 3, 4), (5, 7)),
    ({"height": 2, "width": 3}, (1, 2, 5, 7), (2, 3)),
    ({"height": 2, "width": 3, "align_corners": False}, (1, 2, 5, 7), (2, 3)),
    ({"height": 7, "width": 9, "align_corners": False}, (1, 1, 3, 4), (7, 9)),
    ({"height": 1, "width": 1}, (1, 1, 3, 3), (1, 1)),
    ({"height": 1, "width": 4, "align_corners": False}, (1, 1, 3, 2), (1, 4)),
    ({"scale_height": 1.5, "scale_width": 0.5}, (1, 2, 4, 6), (6, 3)),
    ({"mode": "odd_scale", "scale_height": 2.0, "scale_width": 0.5}, (1, 1, 3, 4), (5, 2)),
    ({"mode": "to_even_down"}, (1, 1, 3, 4), (2, 4)),
    ({"mode": "to_even_up"}, (1, 1, 3, 4), (4, 4)),
    ({"mode": "to_odd_down"}, (1, 1, 3, 4), (3, 3)),
    ({"mode": "to_odd_up", "align_corners": False}, (1, 1, 3, 4), (3, 5)),
    ({"height": 4, "width": 5}, (1, 2, 4, 5), (4, 5)),
])
def test_bilinear_resize_matches_numpy(attrs, shape, out):
    x = np.random.default_rng(7).normal(size=shape)
    (y,) = check_forward("_contrib_BilinearResize2D", attrs, x)
    assert y.shape == shape[:2] + out
    if shape[2:] == out:  # the same size: a copy
        np.testing.assert_array_equal(y, x)


def test_bilinear_resize_source_index_as_mxnet():
    # a ramp is resampled exactly where it interpolates; align_corners=True
    # (MXNet 1.9.1's default) maps the corners onto each other
    (y,) = run("_contrib_BilinearResize2D", {"height": 5, "width": 7}, _ramp(3, 4))
    np.testing.assert_allclose(y[0, 0], np.add.outer(np.arange(5) * 0.5 * 10,
                                                     np.arange(7) * 0.5), rtol=1e-14)
    # align_corners=False: src = (dst + 0.5) in / out - 0.5, clamped to the input
    (y,) = run("_contrib_BilinearResize2D", {"height": 6, "width": 8, "align_corners": False},
               _ramp(3, 4))
    rows = np.clip((np.arange(6) + 0.5) * 0.5 - 0.5, 0, 2) * 10
    cols = np.clip((np.arange(8) + 0.5) * 0.5 - 0.5, 0, 3)
    np.testing.assert_allclose(y[0, 0], np.add.outer(rows, cols), rtol=1e-14)


def test_bilinear_resize_like_and_float32_scale_arithmetic():
    x, like = np.ones((1, 2, 3, 3)), np.zeros((5, 7, 4, 6))
    (y,) = check_forward("_contrib_BilinearResize2D", {"mode": "like"}, x, like)
    assert y.shape == (1, 2, 4, 6)
    # MXNet multiplies in float32: 0.29f * 100 rounds to 29, float64 gives 28.999...
    assert int(0.29 * 100) == 28
    net = getattr(sg.sym, "_contrib_BilinearResize2D")
    s = net(sg.sym.Variable("data"), scale_height=0.29, scale_width=0.5)
    assert s.infer_shape(data=(1, 1, 100, 10))[1] == [(1, 1, 29, 5)]
    # as MXNet 1.9.1: scale_width is read only when scale_height is given
    s = net(sg.sym.Variable("data"), scale_width=2.0, height=3, width=4)
    assert s.infer_shape(data=(1, 1, 5, 5))[1] == [(1, 1, 3, 4)]


@pytest.mark.parametrize("attrs,shape", [
    ({"output_size": (2, 3)}, (2, 2, 4, 6)), ({"output_size": 3}, (1, 2, 5, 7)),
    ({}, (2, 3, 3, 2)), ({"output_size": (4, 5)}, (1, 1, 3, 3)),
    ({"output_size": (3, 3)}, (1, 2, 3, 3)), ({"output_size": (1, 4)}, (1, 1, 2, 7)),
])
def test_adaptive_avg_pooling_matches_numpy(attrs, shape):
    x = np.random.default_rng(8).normal(size=shape)
    (y,) = check_forward("_contrib_AdaptiveAvgPooling2D", attrs, x)
    if not attrs:  # global average
        np.testing.assert_allclose(y, x.mean(axis=(2, 3), keepdims=True), rtol=1e-12)
    if shape[2:] == y.shape[2:]:
        np.testing.assert_allclose(y, x, rtol=1e-15)


def test_adaptive_avg_pooling_windows_overlap_as_mxnet():
    # 5 -> 3: rows [0, 2), [1, 4), [3, 5)
    x = np.arange(5.0).reshape(1, 1, 5, 1)
    (y,) = run("_contrib_AdaptiveAvgPooling2D", {"output_size": (3, 1)}, x)
    np.testing.assert_allclose(y.ravel(), [0.5, 2.0, 3.5], rtol=1e-15)


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect"])
@pytest.mark.parametrize("pad_width,shape", [
    ((0, 0, 0, 0, 1, 2, 2, 1), (2, 2, 3, 3)), ((0, 0, 0, 0, 0, 0, 2, 0), (1, 1, 3, 4)),
    ((0, 0, 0, 0, 1, 1, 2, 0, 0, 1), (1, 2, 2, 3, 2)), ((0,) * 8, (1, 1, 2, 2)),
])
def test_pad_matches_numpy(mode, pad_width, shape):
    x = np.random.default_rng(9).normal(size=shape)
    attrs = {"mode": mode, "pad_width": pad_width}
    if mode == "constant":
        attrs["constant_value"] = -1.5
    (y,) = check_forward("Pad", attrs, x)
    pairs = list(zip(pad_width[::2], pad_width[1::2]))
    want = np.pad(x, pairs, mode=mode, **({"constant_values": -1.5} if mode == "constant"
                                          else {}))
    np.testing.assert_array_equal(y, want)
    (z,) = run("pad", attrs, x)  # MXNet's alias
    np.testing.assert_array_equal(z, y)


def test_pad_mxnet_doc_example():
    x = np.array([[[[1, 2, 3], [4, 5, 6]], [[7, 8, 9], [10, 11, 12]]],
                  [[[11, 12, 13], [14, 15, 16]], [[17, 18, 19], [20, 21, 22]]]], np.float64)
    (y,) = run("Pad", {"mode": "edge", "pad_width": (0, 0, 0, 0, 1, 1, 1, 1)}, x)
    np.testing.assert_array_equal(y[0, 0], [[1, 1, 2, 3, 3], [1, 1, 2, 3, 3],
                                            [4, 4, 5, 6, 6], [4, 4, 5, 6, 6]])
    (y,) = run("Pad", {"mode": "constant", "pad_width": (0, 0, 0, 0, 1, 1, 1, 1)}, x)
    np.testing.assert_array_equal(y[1, 1], [[0, 0, 0, 0, 0], [0, 17, 18, 19, 0],
                                            [0, 20, 21, 22, 0], [0, 0, 0, 0, 0]])


@pytest.mark.parametrize("attrs,shapes,window", [
    ({"num_args": 1, "h_w": (2, 3), "offset": (1, 1)}, [(2, 2, 4, 5)], (1, 1, 2, 3)),
    ({"num_args": 1, "h_w": (2, 2), "center_crop": True}, [(1, 2, 5, 5)], (1, 1, 2, 2)),
    ({"num_args": 1, "h_w": (3, 2), "center_crop": True, "offset": (9, 9)}, [(1, 1, 4, 5)],
     (0, 1, 3, 2)),
    ({"num_args": 2}, [(2, 2, 5, 6), (7, 3, 3, 4)], (0, 0, 3, 4)),
    ({"num_args": 2, "offset": (2, 2)}, [(2, 2, 5, 6), (2, 3, 3, 4)], (2, 2, 3, 4)),
    ({"num_args": 1, "h_w": (4, 5)}, [(1, 1, 4, 5)], (0, 0, 4, 5)),
])
def test_crop_matches_numpy(attrs, shapes, window):
    rng = np.random.default_rng(10)
    xs = [rng.normal(size=s) for s in shapes]
    (y,) = check_forward("Crop", attrs, *xs)
    oy, ox, h, w = window
    np.testing.assert_array_equal(y, xs[0][:, :, oy:oy + h, ox:ox + w])


@pytest.mark.parametrize("block,shape", [(2, (2, 8, 2, 3)), (3, (1, 9, 2, 2)), (1, (1, 2, 2, 2)),
                                         (2, (1, 4, 1, 1))])
def test_depth_to_space_and_back(block, shape):
    x = np.random.default_rng(11).normal(size=shape)
    (y,) = check_forward("depth_to_space", {"block_size": block}, x)
    n, c, h, w = shape
    assert y.shape == (n, c // block ** 2, h * block, w * block)
    (back,) = check_forward("space_to_depth", {"block_size": block}, y)
    np.testing.assert_array_equal(back, x)


def test_depth_to_space_is_dcr_as_mxnet_doc():
    # MXNet's documented example: (1, 4, 2, 3) with block 2
    x = np.arange(24.0).reshape(1, 4, 2, 3)
    (y,) = run("depth_to_space", {"block_size": 2}, x)
    np.testing.assert_array_equal(y[0, 0], [[0, 6, 1, 7, 2, 8], [12, 18, 13, 19, 14, 20],
                                            [3, 9, 4, 10, 5, 11], [15, 21, 16, 22, 17, 23]])
    (z,) = run("space_to_depth", {"block_size": 2}, y)
    np.testing.assert_array_equal(z, x)


# --------------------------------------------------------------------------
# gradients (float64): NumPy formulas and finite differences
# --------------------------------------------------------------------------
GRAD_CASES = [
    ("LayerNorm", {}, (2, 3, 4)),
    ("LayerNorm", {"axis": 0, "eps": 1e-3}, (3, 2)),
    ("LayerNorm", {"axis": 1, "output_mean_var": True}, (2, 3, 2)),
    ("InstanceNorm", {}, (2, 3, 4)),
    ("InstanceNorm", {"eps": 1e-5}, (1, 2, 2, 2, 2)),
    ("GroupNorm", {"num_groups": 2}, (2, 4, 3)),
    ("GroupNorm", {"num_groups": 3, "output_mean_var": True}, (2, 3, 2, 2)),
    ("L2Normalization", {}, (3, 4)),
    ("L2Normalization", {"mode": "channel"}, (2, 3, 2, 2)),
    ("L2Normalization", {"mode": "spatial", "eps": 1e-2}, (2, 2, 3)),
    ("UpSampling", {"scale": 2, "sample_type": "nearest", "num_args": 1},
     {"arg0": (2, 2, 2, 3)}),
    ("UpSampling", {"scale": 2, "sample_type": "nearest", "num_args": 2},
     {"arg0": (1, 2, 2, 2), "arg1": (1, 1, 4, 4)}),
    ("UpSampling", {"scale": 3, "sample_type": "nearest", "num_args": 2,
                    "multi_input_mode": "sum"}, {"arg0": (1, 2, 1, 2), "arg1": (1, 2, 3, 6)}),
    ("UpSampling", {"scale": 2, "sample_type": "bilinear", "num_filter": 2, "num_args": 2},
     (1, 2, 2, 3)),
    ("UpSampling", {"scale": 3, "sample_type": "bilinear", "num_filter": 1, "num_args": 2},
     (2, 1, 2, 2)),
    ("_contrib_BilinearResize2D", {"height": 5, "width": 3}, (1, 2, 3, 4)),
    ("_contrib_BilinearResize2D", {"height": 2, "width": 7, "align_corners": False},
     (2, 1, 5, 3)),
    ("_contrib_BilinearResize2D", {"mode": "like"}, {"data": (1, 1, 3, 3),
                                                     "like": (1, 2, 4, 5)}),
    ("_contrib_AdaptiveAvgPooling2D", {"output_size": (2, 3)}, (1, 2, 4, 6)),
    ("_contrib_AdaptiveAvgPooling2D", {"output_size": 3}, (2, 1, 5, 4)),
    ("Pad", {"mode": "constant", "pad_width": (0, 0, 0, 0, 1, 2, 0, 1),
             "constant_value": 2.0}, (1, 2, 3, 3)),
    ("Pad", {"mode": "edge", "pad_width": (0, 0, 0, 0, 2, 1, 1, 3)}, (1, 2, 2, 3)),
    ("Pad", {"mode": "reflect", "pad_width": (0, 0, 0, 0, 2, 1, 1, 2)}, (1, 1, 3, 4)),
    ("Pad", {"mode": "reflect", "pad_width": (0, 0, 0, 0, 1, 0, 1, 1, 0, 2)}, (1, 1, 2, 3, 3)),
    ("Crop", {"num_args": 1, "h_w": (2, 3), "offset": (1, 0)}, {"arg0": (2, 2, 4, 4)}),
    ("Crop", {"num_args": 2, "center_crop": True}, {"arg0": (1, 2, 5, 5),
                                                    "arg1": (1, 1, 2, 3)}),
    ("depth_to_space", {"block_size": 2}, (1, 8, 2, 2)),
    ("space_to_depth", {"block_size": 2}, (1, 2, 4, 2)),
]
GRAD_IDS = [f"{op}-{i}" for i, (op, _, _) in enumerate(GRAD_CASES)]


@pytest.mark.parametrize("opname,attrs,shape", GRAD_CASES, ids=GRAD_IDS)
def test_gradients_match_numpy_andfinite_differences(opname, attrs, shape):
    p, inputs, heads, grads = symgraph_gradients(opname, attrs, shape, seed=12)
    assert len(grads) == len(inputs)
    want = GRAD_REFERENCE_NORMALIZE[opname](p, inputs, heads)
    for k, (got, w) in enumerate(zip(grads, want)):
        assert got.shape == inputs[k].shape
        if w is None:  # a shape-only input (like, crop_like): no gradient
            np.testing.assert_array_equal(got, 0)
        else:
            np.testing.assert_allclose(got, w, rtol=1e-10, atol=1e-12,
                                       err_msg=f"{opname} gradient of input {k}")
    num = finite_differences(lambda *xs: REFERENCE_NORMALIZE[opname](p, *xs), inputs,
                              heads[0])
    for k, (got, n) in enumerate(zip(grads, num)):
        np.testing.assert_allclose(got, n, rtol=1e-6, atol=1e-7,
                                   err_msg=f"{opname} gradient of input {k} (finite differences)")


def test_no_gradient_through_visible_mean_and_std():
    # heads on mean/std change nothing: MXNet's backward reads only dy
    for opname, attrs, shape in [("LayerNorm", {"output_mean_var": True}, (2, 3)),
                                 ("GroupNorm", {"output_mean_var": True, "num_groups": 2},
                                  (2, 4, 2))]:
        g, node = _one_op(opname, attrs)
        gg = build_gradient(g, ["data", "gamma", "beta"])
        rng = np.random.default_rng(13)
        inf = infer_shapes(g, {"data": shape})
        feeds = {v.name: rng.normal(size=inf.shapes[g.entry_id_of_node(v)])
                 for v in g.variables}
        heads = [e.node.output_names()[e.index] + "_head_grad" for e in g.outputs]
        feeds.update({h: rng.normal(size=inf.shape(e)) for h, e in zip(heads, g.outputs)})
        outs1, _ = lower(gg, True)(feeds)
        feeds.update({h: 100 * feeds[h] for h in heads[1:]})
        outs2, _ = lower(gg, True)(feeds)
        for a, b in zip(outs1[3:], outs2[3:]):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# --------------------------------------------------------------------------
# what each backward reads (the facts the memory planner sees)
# --------------------------------------------------------------------------
def _one_op(opname, attrs):
    op = get_op(opname)
    probe = Node(op, "op", attrs, [])
    names = op.arg_names(probe.params)
    node = Node(op, "op", attrs, [Entry(Node(None, n)) for n in names])
    return Graph([Entry(node, i) for i in range(node.num_visible_outputs)]), node


def _reads(opname, attrs, wrt=None):
    """(names of what the backward node reads, its shape-only input
    positions, its inplace pairs)."""
    g, node = _one_op(opname, attrs)
    gg = build_gradient(g, wrt or [v.name for v in g.variables])
    bwd = next(n for n in gg.nodes if n.op is not None and n.op.name == f"_backward_{opname}")
    names = [e.node.name if e.node.op is None else f"{e.node.name}:{e.index}"
             for e in bwd.inputs]
    return names, bwd.op.shape_inputs(bwd.params), bwd.op.inplace(bwd.params)


@pytest.mark.parametrize("opname,attrs,reads,shape_only,inplace", [
    # normalisations: dy, data, gamma and the two saved statistics, not the output
    ("LayerNorm", {}, ["op_output_head_grad", "data", "gamma", "op:1", "op:2"], [], []),
    ("LayerNorm", {"output_mean_var": True},
     ["op_output_head_grad", "data", "gamma", "op:1", "op:2"], [], []),
    ("GroupNorm", {}, ["op_output_head_grad", "data", "gamma", "op:1", "op:2"], [], []),
    ("InstanceNorm", {}, ["op_output_head_grad", "data", "gamma", "op:1", "op:2"], [], []),
    # the output and the norm; dx may overwrite dy
    ("L2Normalization", {}, ["op_output_head_grad", "op:0", "op:1"], [], [(0, 0)]),
    # no data read
    ("UpSampling", {"scale": 2, "sample_type": "nearest", "num_args": 1},
     ["op_output_head_grad"], [], []),
    ("UpSampling", {"scale": 2, "sample_type": "nearest", "num_args": 2},
     ["op_output_head_grad", "arg0", "arg1"], [1, 2], []),
    ("UpSampling", {"scale": 2, "sample_type": "bilinear", "num_filter": 2, "num_args": 2},
     ["op_output_head_grad", "data", "weight"], [], []),
    ("Pad", {"mode": "reflect", "pad_width": (0, 0, 0, 0, 1, 1, 1, 1)},
     ["op_output_head_grad"], [], []),
    ("_contrib_BilinearResize2D", {"height": 3, "width": 3}, ["op_output_head_grad", "data"],
     [1], []),
    ("_contrib_BilinearResize2D", {"mode": "like"}, ["op_output_head_grad", "data"], [1], []),
    ("_contrib_AdaptiveAvgPooling2D", {"output_size": 2}, ["op_output_head_grad", "data"],
     [1], []),
    ("Crop", {"num_args": 2}, ["op_output_head_grad", "arg0"], [1], []),
])
def test_backward_reads(opname, attrs, reads, shape_only, inplace):
    got_reads, got_shape_only, got_inplace = _reads(opname, attrs)
    assert got_reads == reads
    assert list(got_shape_only) == shape_only
    assert [tuple(x) for x in got_inplace] == inplace


def test_forward_memory_facts():
    ln, gn = get_op("LayerNorm"), get_op("GroupNorm")
    assert ln.inplace(_params("LayerNorm", {})) == [(0, 0)]  # as MXNet's FInplaceOption
    assert gn.inplace(_params("GroupNorm", {})) == [(0, 0)]
    for name in ("InstanceNorm", "L2Normalization", "Pad", "depth_to_space"):
        assert get_op(name).aux_names(None) == [] and not get_op(name).inplace(None)
    # like and crop_like are read for their shape only
    assert get_op("Crop").shape_inputs(_params("Crop", {"num_args": 2})) == [1]
    assert get_op("_contrib_BilinearResize2D").shape_inputs(
        _params("_contrib_BilinearResize2D", {"mode": "like"})) == [1]
    # block moves are each other's gradient: no backward op of their own
    g, _ = _one_op("depth_to_space", {"block_size": 2})
    gg = build_gradient(g, ["data"])
    assert [n.op.name for n in gg.nodes if n.op is not None] == ["depth_to_space",
                                                                  "space_to_depth"]


# --------------------------------------------------------------------------
# bad input: one clear error each
# --------------------------------------------------------------------------
BAD = [
    ("LayerNorm", {"axis": 3}, {"data": (2, 3, 4)}, ShapeError, ["axis=3", "rank 3"]),
    ("LayerNorm", {}, {"data": (2, 3, 4), "gamma": (3,)}, ShapeError, ["gamma", "(4,)"]),
    ("LayerNorm", {"eps": "tiny"}, {"data": (2, 3)}, OpError, ["eps", "number"]),
    ("InstanceNorm", {}, {"data": (2, 3)}, ShapeError, ["InstanceNorm", "rank >= 3"]),
    ("GroupNorm", {"num_groups": 3}, {"data": (2, 4, 5)}, ShapeError,
     ["num_groups=3", "channels (4)"]),
    ("GroupNorm", {"num_groups": 0}, {"data": (2, 4, 5)}, OpError, ["num_groups", "positive"]),
    ("GroupNorm", {}, {"data": (2, 4)}, ShapeError, ["GroupNorm", "rank >= 3"]),
    ("L2Normalization", {"mode": "channel"}, {"data": (2, 3)}, ShapeError,
     ["mode=channel", "rank >= 3"]),
    ("L2Normalization", {"mode": "pixel"}, {"data": (2, 3)}, OpError,
     ["instance, channel, spatial"]),
    ("UpSampling", {"scale": 2, "sample_type": "nearest", "num_args": 1},
     {"arg0": (2, 3, 4)}, ShapeError, ["rank 4", "NCHW"]),
    ("UpSampling", {"scale": 2, "num_args": 1}, {"arg0": (1, 1, 2, 2)}, OpError,
     ["missing required attribute 'sample_type'"]),
    ("UpSampling", {"scale": 0, "sample_type": "nearest", "num_args": 1},
     {"arg0": (1, 1, 2, 2)}, OpError, ["scale", "positive"]),
    ("UpSampling", {"scale": 2, "sample_type": "bilinear", "num_args": 2},
     {"data": (1, 3, 2, 2)}, ShapeError, ["num_filter", "channels", "(3)"]),
    ("UpSampling", {"scale": 2, "sample_type": "nearest", "num_args": 2},
     {"arg0": (1, 1, 2, 2), "arg1": (1, 1, 3, 3)}, ShapeError, ["arg1", "integer factor"]),
    ("UpSampling", {"scale": 2, "sample_type": "nearest", "num_args": 2,
                    "multi_input_mode": "sum"},
     {"arg0": (1, 1, 2, 2), "arg1": (1, 2, 4, 4)}, ShapeError, ["sum", "channel"]),
    ("UpSampling", {"scale": 2, "sample_type": "nearest", "num_args": 2},
     {"arg0": (1, 1, 2, 2), "arg1": (2, 1, 4, 4)}, ShapeError, ["batch"]),
    ("_contrib_BilinearResize2D", {"height": 2}, {"data": (1, 2, 3)}, ShapeError,
     ["BilinearResize2D", "rank 4"]),
    ("_contrib_BilinearResize2D", {"scale_height": 2.0}, {"data": (1, 1, 2, 2)}, ShapeError,
     ["scale_width"]),
    ("_contrib_BilinearResize2D", {"mode": "odd_scale"}, {"data": (1, 1, 2, 2)}, ShapeError,
     ["odd_scale", "scale_height"]),
    ("_contrib_BilinearResize2D", {"scale_height": 0.1, "scale_width": 1.0},
     {"data": (1, 1, 4, 4)}, ShapeError, ["empty output", "0 x 4"]),
    ("_contrib_BilinearResize2D", {"height": 0}, {"data": (1, 1, 4, 4)}, OpError,
     ["height", "positive"]),
    ("_contrib_BilinearResize2D", {"mode": "nearest"}, {"data": (1, 1, 4, 4)}, OpError,
     ["mode", "to_odd_up"]),
    ("_contrib_AdaptiveAvgPooling2D", {"output_size": 2}, {"data": (1, 2, 3)}, ShapeError,
     ["AdaptiveAvgPooling2D", "rank 4"]),
    ("_contrib_AdaptiveAvgPooling2D", {"output_size": (1, 2, 3)}, {"data": (1, 1, 4, 4)},
     ShapeError, ["output_size=(1, 2, 3)", "(height, width)"]),
    ("_contrib_AdaptiveAvgPooling2D", {"output_size": (0, 2)}, {"data": (1, 1, 4, 4)},
     ShapeError, [">= 1"]),
    ("Pad", {"mode": "constant", "pad_width": (0, 0, 1, 1, 0, 0)}, {"data": (2, 3, 4)},
     ShapeError, ["Pad", "rank 4 to 5", "spatial"]),
    ("Pad", {"mode": "constant", "pad_width": (0, 0, 1, 1, 0, 0, 0, 0)}, {"data": (1, 2, 3, 4)},
     ShapeError, ["first four entries", "batch and channel"]),
    ("Pad", {"mode": "edge", "pad_width": (0, 0, 0, 0, 1, 1)}, {"data": (1, 2, 3, 4)},
     ShapeError, ["6 entries", "needs 8"]),
    ("Pad", {"mode": "reflect", "pad_width": (0, 0, 0, 0, 3, 0, 0, 0)}, {"data": (1, 2, 3, 4)},
     ShapeError, ["reflect", "smaller than the axis", "axis 2"]),
    ("Pad", {"mode": "edge", "pad_width": (0, 0, 0, 0, -1, 0, 0, 0)}, {"data": (1, 2, 3, 4)},
     ShapeError, [">= 0"]),
    ("Pad", {"pad_width": (0, 0, 0, 0, 1, 1, 1, 1)}, {"data": (1, 2, 3, 4)}, OpError,
     ["missing required attribute 'mode'"]),
    ("Crop", {"num_args": 1}, {"arg0": (1, 2, 3, 4)}, ShapeError, ["h_w=(0, 0)", "3 x 4"]),
    ("Crop", {"num_args": 1, "h_w": (2, 5)}, {"arg0": (1, 2, 3, 4)}, ShapeError, ["h_w=(2, 5)"]),
    ("Crop", {"num_args": 1, "h_w": (2, 2), "offset": (2, 0)}, {"arg0": (1, 2, 3, 4)},
     ShapeError, ["offset=(2, 0)", "0 <= y <= 1"]),
    ("Crop", {"num_args": 2}, {"arg0": (1, 2, 3, 4), "arg1": (1, 2, 4, 4)}, ShapeError,
     ["crop_like", "larger"]),
    ("Crop", {"num_args": 3}, {"arg0": (1, 2, 3, 4)}, OpError, ["num_args=3", "1 input",
                                                                "or 2"]),
    ("_contrib_BilinearResize2D", {"scale_height": 1e30, "scale_width": 1.0},
     {"data": (1, 1, 4, 4)}, ShapeError, ["out of range"]),
    ("Crop", {"num_args": 1, "h_w": (2, 2)}, {"arg0": (2, 3, 4)}, ShapeError, ["Crop", "rank 4"]),
    ("depth_to_space", {"block_size": 2}, {"data": (1, 6, 2, 2)}, ShapeError,
     ["channels", "(6)", "block_size^2 = 4"]),
    ("space_to_depth", {"block_size": 2}, {"data": (1, 1, 3, 4)}, ShapeError,
     ["multiples of block_size=2"]),
    ("depth_to_space", {"block_size": 0}, {"data": (1, 4, 2, 2)}, OpError,
     ["block_size", "positive"]),
    ("depth_to_space", {"block_size": 2}, {"data": (4, 2, 2)}, ShapeError, ["rank 4"]),
]


@pytest.mark.parametrize("opname,attrs,shapes,err,words", BAD,
                         ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_bad_input_gives_one_clear_error(opname, attrs, shapes, err, words):
    with pytest.raises(err) as info:
        g, _ = _bad_graph(opname, attrs)
        infer_shapes(g, shapes)
    msg = str(info.value)
    assert isinstance(info.value, SymgraphError) and "\n" not in msg
    assert "'bad'" in msg and f"({opname})" in msg, msg
    for w in words:
        assert w in msg, msg


def _bad_graph(opname, attrs):
    op = get_op(opname)
    probe = Node(op, "bad", attrs, [])
    names = op.arg_names(probe.params)
    node = Node(op, "bad", attrs, [Entry(Node(None, n)) for n in names])
    return Graph([Entry(node, 0)]), node


# --------------------------------------------------------------------------
# an MXNet symbol-JSON using several of them
# --------------------------------------------------------------------------
MXNET_JSON = """{
  "nodes": [
    {"op": "null", "name": "data", "inputs": []},
    {"op": "Pad", "name": "pad", "attrs": {"mode": "reflect",
     "pad_width": "(0, 0, 0, 0, 1, 1, 1, 1)", "constant_value": "0.0"}, "inputs": [[0, 0, 0]]},
    {"op": "null", "name": "inorm_gamma", "inputs": []},
    {"op": "null", "name": "inorm_beta", "inputs": []},
    {"op": "InstanceNorm", "name": "inorm", "attrs": {"eps": "0.001"},
     "inputs": [[1, 0, 0], [2, 0, 0], [3, 0, 0]]},
    {"op": "UpSampling", "name": "up", "attrs": {"num_args": "1", "sample_type": "nearest",
     "scale": "2", "workspace": "512"}, "inputs": [[4, 0, 0]]},
    {"op": "null", "name": "ref", "inputs": []},
    {"op": "Crop", "name": "crop", "attrs": {"center_crop": "True", "num_args": "2"},
     "inputs": [[5, 0, 0], [6, 0, 0]]},
    {"op": "null", "name": "gnorm_gamma", "inputs": []},
    {"op": "null", "name": "gnorm_beta", "inputs": []},
    {"op": "GroupNorm", "name": "gnorm", "attrs": {"num_groups": "2", "eps": "1e-05"},
     "inputs": [[7, 0, 0], [8, 0, 0], [9, 0, 0]]},
    {"op": "_contrib_BilinearResize2D", "name": "resize", "attrs": {"height": "8",
     "width": "6"}, "inputs": [[10, 0, 0]]},
    {"op": "_contrib_AdaptiveAvgPooling2D", "name": "pool", "attrs": {"output_size": "(4, 3)"},
     "inputs": [[11, 0, 0]]},
    {"op": "depth_to_space", "name": "d2s", "attrs": {"block_size": "2"},
     "inputs": [[12, 0, 0]]},
    {"op": "L2Normalization", "name": "l2", "attrs": {"mode": "spatial"},
     "inputs": [[13, 0, 0]]},
    {"op": "null", "name": "ln_gamma", "inputs": []},
    {"op": "null", "name": "ln_beta", "inputs": []},
    {"op": "LayerNorm", "name": "ln", "attrs": {"axis": "-1", "eps": "1e-05",
     "output_mean_var": "False"}, "inputs": [[14, 0, 0], [15, 0, 0], [16, 0, 0]]}
  ],
  "arg_nodes": [0, 2, 3, 6, 8, 9, 15, 16],
  "node_row_ptr": [0, 1, 2, 3, 4, 7, 8, 9, 10, 11, 12, 15, 16, 17, 18, 20, 21, 22, 25],
  "heads": [[17, 0, 0]],
  "attrs": {"mxnet_version": ["int", 10901]}
}"""

JSON_SHAPES = {"data": (2, 4, 5, 5), "ref": (1, 1, 10, 10)}


def test_mxnet_json_loads_infers_and_runs():
    net = sg.sym.load_json(MXNET_JSON)
    args, outs, aux = net.infer_shape(**JSON_SHAPES)
    shapes = dict(zip(net.list_arguments(), args))
    assert shapes["inorm_gamma"] == (4,) and shapes["gnorm_gamma"] == (2,)
    assert shapes["ln_gamma"] == (6,) and outs == [(2, 1, 8, 6)] and aux == []
    again = sg.sym.load_json(net.tojson())
    assert again.tojson() == net.tojson()
    rng = np.random.default_rng(14)
    feeds = {n: rng.normal(size=s) for n, s in shapes.items()}
    got, _ = lower(again.graph(), is_train=False)(feeds)
    # the same chain through the NumPy references
    nodes = {n.name: n for n in again.graph().nodes}

    def r(name, *xs):
        return REFERENCE_NORMALIZE[nodes[name].op.name](nodes[name].params, *xs)
    y = r("pad", feeds["data"])
    y = r("inorm", y, feeds["inorm_gamma"], feeds["inorm_beta"])
    y = r("crop", r("up", y), feeds["ref"])
    y = r("gnorm", y, feeds["gnorm_gamma"], feeds["gnorm_beta"])
    y = r("l2", r("d2s", r("pool", r("resize", y))))
    y = r("ln", y, feeds["ln_gamma"], feeds["ln_beta"])
    np.testing.assert_allclose(np.asarray(got[0]), y, rtol=1e-10, atol=1e-12)


def test_mxnet_json_trains_in_a_verified_plan():
    # the training plan's arena run: every tensor at its planned offset, the
    # shape-only inputs handed over poisoned (they must not be read)
    net = sg.sym.LinearRegressionOutput(sg.sym.load_json(MXNET_JSON), name="out")
    wrt = [n for n in net.list_arguments() if n not in ("ref", "out_label")]
    plan = sg.plan(net, JSON_SHAPES, train=True, wrt=wrt, execute=True)
    assert plan.verified and plan.arena_checked
    names = {n.op.name for n in plan.graph.nodes if n.op is not None}
    assert {"_backward_LayerNorm", "_backward_GroupNorm", "_backward_InstanceNorm",
            "_backward_Pad", "_backward_Crop", "_backward_UpSampling",
            "_backward__contrib_BilinearResize2D", "_backward_L2Normalization",
            "_backward__contrib_AdaptiveAvgPooling2D", "space_to_depth"} <= names


def test_gradient_program_is_jit_compatible_and_matchesfinite_differences():
    net = sg.sym.load_json(MXNET_JSON)
    g = net.graph()
    shapes = dict(zip(net.list_arguments(), net.infer_shape(**JSON_SHAPES)[0]))
    gg = build_gradient(g, ["data", "gnorm_gamma"])
    rng = np.random.default_rng(15)
    feeds = {n: rng.normal(size=s) for n, s in shapes.items()}
    head = rng.normal(size=(2, 1, 8, 6))
    feeds["ln_output_head_grad"] = head
    outs, _ = jax.jit(lower(gg, is_train=True))(feeds, jax.random.key(0))
    fwd = jax.jit(lower(g, is_train=False))

    def loss(name, idx, eps):
        f = dict(feeds)
        v = f[name].copy()
        v[idx] += eps
        f[name] = v
        return float(np.sum(np.asarray(fwd(f, jax.random.key(0))[0][0]) * head))
    for k, name in enumerate(["data", "gnorm_gamma"]):
        grad = np.asarray(outs[1 + k])
        for idx in [(0, 0, 0, 0), (1, 3, 2, 4), (0, 2, 4, 1)] if name == "data" else [(0,), (1,)]:
            num = (loss(name, idx, 1e-6) - loss(name, idx, -1e-6)) / 2e-6
            np.testing.assert_allclose(grad[idx], num, rtol=1e-6, atol=1e-8)
