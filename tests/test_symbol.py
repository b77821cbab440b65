"""The Symbol API (MXNet 1.x style) and the executors it binds, checked
against jax.grad of the lowered forward graph; a VGG-style and an
Inception-style net end to end (shapes, JSON, forward and backward)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import symgraph as sg
from symgraph.lower import lower
from symgraph.symbol import NameManager

from helpers import small_mlp

S = sg.sym


# --------------------------------------------------------------------------
# construction: names, hints, implicit parameters
# --------------------------------------------------------------------------
def test_variable_hints_are_stored_as_attributes():
    v = S.Variable("w", shape=(3, 4), dtype="float16", lr_mult=0.1, wd_mult=0, init="zeros",
                   attr={"group": "a"})
    assert v.list_attr() == {"__shape__": "(3, 4)", "__dtype__": "float16",
                             "__lr_mult__": "0.1", "__wd_mult__": "0", "__init__": "zeros",
                             "group": "a"}
    assert v.attr("lr_mult") == "0.1" and v.attr("shape") == "(3, 4)"
    assert v.name == "w" and v.list_arguments() == ["w"] and v.list_outputs() == ["w"]
    # the hints are used: shape and dtype need not be given again
    assert v.infer_shape() == ([(3, 4)], [(3, 4)], [])
    assert v.infer_type() == ([np.float16], [np.float16], [])


def test_automatic_and_explicit_names_and_implicit_parameters():
    with NameManager():
        data = S.Variable("data")
        c0 = S.Convolution(data, kernel=(3, 3), num_filter=2)
        c1 = S.Convolution(c0, kernel=(1, 1), num_filter=2, no_bias=True)
        a0 = S.Activation(c1, act_type="relu")
        fc = S.FullyConnected(a0, num_hidden=3, name="fc1")
        bn = S.BatchNorm(fc, name="bn")
    assert [c0.name, c1.name, a0.name, fc.name] == ["convolution0", "convolution1",
                                                    "activation0", "fc1"]
    assert bn.list_arguments() == ["data", "convolution0_weight", "convolution0_bias",
                                   "convolution1_weight", "fc1_weight", "fc1_bias",
                                   "bn_gamma", "bn_beta"]
    assert bn.list_auxiliary_states() == ["bn_moving_mean", "bn_moving_var"]
    assert bn.list_outputs() == ["bn_output"]
    with NameManager():  # a fresh manager counts from zero again
        assert S.Convolution(data, kernel=(3, 3), num_filter=2).name == "convolution0"


def test_explicit_inputs_by_name_replace_implicit_parameters():
    data, w = S.Variable("data"), S.Variable("shared_weight")
    fc = S.FullyConnected(data=data, weight=w, num_hidden=4, name="fc")
    assert fc.list_arguments() == ["data", "shared_weight", "fc_bias"]
    fc2 = S.FullyConnected(fc, weight=w, no_bias=True, num_hidden=4, name="fc2")
    assert fc2.list_arguments() == ["data", "shared_weight", "fc_bias"]  # shared once


def test_group_internals_and_indexing():
    data = S.Variable("data")
    fc = S.FullyConnected(data, num_hidden=4, name="fc")
    act = S.Activation(fc, act_type="tanh", name="act")
    parts = S.SliceChannel(act, num_outputs=2, axis=1, name="split")
    assert len(parts) == 2 and parts.list_outputs() == ["split_output0", "split_output1"]
    assert parts[1].list_outputs() == ["split_output1"]
    assert parts[-1].list_outputs() == ["split_output1"]
    assert parts["split_output0"].list_outputs() == ["split_output0"]
    assert [p.list_outputs()[0] for p in parts] == ["split_output0", "split_output1"]
    with pytest.raises(IndexError):
        parts[2]
    g = S.Group([act, parts[1], fc])
    assert g.list_outputs() == ["act_output", "split_output1", "fc_output"]
    assert g[1:].list_outputs() == ["split_output1", "fc_output"]
    internals = act.get_internals()
    assert internals.list_outputs() == ["data", "fc_weight", "fc_bias", "fc_output",
                                        "act_output"]
    inner = internals["fc_output"]
    assert inner.list_arguments() == ["data", "fc_weight", "fc_bias"]
    assert inner.infer_shape(data=(2, 3))[1] == [(2, 4)]
    assert act.get_children().list_outputs() == ["fc_output"]


def test_arithmetic_with_symbols_and_scalars_computes_the_right_values():
    a, b = S.Variable("a"), S.Variable("b")
    exprs = {"a+b": a + b, "a-b": a - b, "a*b": a * b, "a/b": a / b, "a+2": a + 2,
             "2+a": 2 + a, "a-2": a - 2, "3-a": 3 - a, "a*3": a * 3, "3*a": 3 * a,
             "a/4": a / 4, "4/a": 4 / a, "a**2": a ** 2, "-a": -a,
             "mix": (a + 1) * (b - 0.5) / 2}
    x, y = np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[0.5, -1.0], [2.0, 0.25]])
    want = {"a+b": x + y, "a-b": x - y, "a*b": x * y, "a/b": x / y, "a+2": x + 2,
            "2+a": 2 + x, "a-2": x - 2, "3-a": 3 - x, "a*3": x * 3, "3*a": 3 * x,
            "a/4": x / 4, "4/a": 4 / x, "a**2": x ** 2, "-a": -x,
            "mix": (x + 1) * (y - 0.5) / 2}
    net = S.Group(list(exprs.values()))
    outs = net.eval(a=sg.nd.array(x, dtype="float64"), b=sg.nd.array(y, dtype="float64"))
    for (k, w), o in zip(want.items(), outs):
        np.testing.assert_allclose(o.asnumpy(), w, rtol=1e-12, err_msg=k)
    ops = {n.op.name for n in (a + b).graph().nodes if n.op}
    assert ops == {"elemwise_add"}
    assert {n.op.name for n in (3 - a).graph().nodes if n.op} == {"_rminus_scalar"}


# --------------------------------------------------------------------------
# inference
# --------------------------------------------------------------------------
def test_infer_shape_full_positional_and_partial():
    net = small_mlp()
    args, outs, aux = net.infer_shape(data=(4, 7))
    assert dict(zip(net.list_arguments(), args)) == {
        "data": (4, 7), "fc1_weight": (5, 7), "fc1_bias": (5,), "fc2_weight": (3, 5),
        "fc2_bias": (3,), "softmax_label": (4,)}
    assert outs == [(4, 3)] and aux == []
    assert net.infer_shape((4, 7)) == (args, outs, aux)
    partial = net.infer_shape_partial(fc2_weight=(3, 5))
    assert partial[0][:4] == [(), (), (), (3, 5)] and partial[1] == [()]  # MXNet's unknown
    with pytest.warns(UserWarning, match="cannot infer the shape of data"):
        assert net.infer_shape(fc2_weight=(3, 5)) == (None, None, None)  # data is missing
    # the shape of a later input tells an earlier one what it must be
    data = S.Variable("data")
    both = S.elemwise_add(S.FullyConnected(data, num_hidden=2, name="fc"), S.Variable("b"))
    assert both.infer_shape_partial(b=(6, 2))[1] == [(6, 2)]


def test_infer_type():
    net = small_mlp()
    args, outs, aux = net.infer_type(data="float16")
    assert set(args) == {np.float16} and outs == [np.float16]  # NumPy types, as MXNet's
    args, outs, _ = net.infer_type(np.float64)
    assert set(args) == {np.float64}


# --------------------------------------------------------------------------
# binding and running, against jax.grad of the lowered forward
# --------------------------------------------------------------------------
def _random_args(ex, rng, skip=()):
    for name, arr in ex.arg_dict.items():
        if name not in skip:
            arr[:] = rng.normal(size=arr.shape)


def _lowered_vjp(net, ex, wrt, out_grads):
    """Gradients of sum(outputs * out_grads) wrt ``wrt`` by jax.grad of the
    lowered training forward (BatchNorm on batch statistics)."""
    fn = lower(net.graph(), is_train=True)
    feeds = {k: v.data for k, v in ex.arg_dict.items()}
    feeds.update({k: v.data for k, v in ex.aux_dict.items()})

    def scalar(params):
        outs, _ = fn({**feeds, **params}, jax.random.key(0))
        return sum(jnp.sum(o * g) for o, g in zip(outs, out_grads))

    return jax.jit(jax.grad(scalar))({k: feeds[k] for k in wrt})


def _tanh_net():
    data = S.Variable("data")
    fc = S.FullyConnected(data, num_hidden=4, name="fc")
    t = S.Activation(fc, act_type="tanh", name="t")
    return S.Group([t * t, S.sum(fc, axis=(1,), name="s")])


def test_forward_backward_with_and_without_out_grads_match_jax_grad():
    net = _tanh_net()
    ex = net.simple_bind(sg.cpu(), type_dict={"data": "float64"}, data=(3, 5))
    assert set(ex.arg_dict) == {"data", "fc_weight", "fc_bias"}
    assert set(ex.grad_dict) == {"data", "fc_weight", "fc_bias"}
    rng = np.random.default_rng(0)
    _random_args(ex, rng)
    outs = ex.forward(is_train=True)
    assert [o.shape for o in outs] == [(3, 4), (3,)]
    wrt = ["data", "fc_weight", "fc_bias"]
    og = [rng.normal(size=(3, 4)), rng.normal(size=(3,))]
    ex.backward([sg.nd.array(og[0], dtype="float64"), og[1]])
    want = _lowered_vjp(net, ex, wrt, og)
    for k in wrt:
        np.testing.assert_allclose(ex.grad_dict[k].asnumpy(), want[k], rtol=1e-10, err_msg=k)
    ex.forward(is_train=True)
    ex.backward()  # no out_grads: ones, as MXNet
    want = _lowered_vjp(net, ex, wrt, [np.ones((3, 4)), np.ones(3)])
    for k in wrt:
        np.testing.assert_allclose(ex.grad_dict[k].asnumpy(), want[k], rtol=1e-10, err_msg=k)
    # the inference program gives the training forward's values here
    np.testing.assert_allclose(ex.forward()[0].asnumpy(), outs[0].asnumpy(), rtol=1e-12)


def test_grad_req_write_add_null():
    net = _tanh_net()
    reqs = {"data": "null", "fc_weight": "add", "fc_bias": "write"}
    ex = net.simple_bind(sg.cpu(), grad_req=reqs, type_dict={"data": "float64"}, data=(2, 3))
    assert set(ex.grad_dict) == {"fc_weight", "fc_bias"}
    assert ex.grad_arrays[0] is None
    _random_args(ex, np.random.default_rng(1))
    for _ in range(2):
        ex.forward(is_train=True)
        ex.backward()
    once = _lowered_vjp(net, ex, ["fc_weight", "fc_bias"], [np.ones((2, 4)), np.ones(2)])
    np.testing.assert_allclose(ex.grad_dict["fc_weight"].asnumpy(), 2 * once["fc_weight"],
                               rtol=1e-10)  # accumulated twice
    np.testing.assert_allclose(ex.grad_dict["fc_bias"].asnumpy(), once["fc_bias"], rtol=1e-10)
    ex_null = net.simple_bind(sg.cpu(), grad_req="null", data=(2, 3))
    assert ex_null.grad_dict == {}
    ex_null.forward(is_train=True)
    ex_null.backward()  # nothing asked, nothing computed


def test_an_output_grouped_twice_gets_both_head_gradients():
    # the second head of fc is named fc_output_head_grad1 by the gradient
    # pass; the executor must feed it by output index, not by name suffix
    data = S.Variable("data")
    y = S.FullyConnected(data, num_hidden=3, name="fc")
    net = S.Group([y, y, S.SoftmaxOutput(y, name="sm")])
    ex = net.simple_bind(sg.cpu(), type_dict={"data": "float64"}, data=(2, 4))
    rng = np.random.default_rng(5)
    _random_args(ex, rng, skip=("sm_label",))
    ex.forward(is_train=True)
    wrt = ["data", "fc_weight", "fc_bias"]
    og = [rng.normal(size=(2, 3)), rng.normal(size=(2, 3))]
    ex.backward([og[0], og[1], None])  # the loss head takes none
    ex2 = S.Group([y, y]).simple_bind(sg.cpu(), type_dict={"data": "float64"}, data=(2, 4))
    for k in ex2.arg_dict:
        ex2.arg_dict[k][:] = ex.arg_dict[k]
    ex2.forward(is_train=True)
    want = _lowered_vjp(S.Group([y, y]), ex2, wrt, og)
    loss = ex.outputs[2].asnumpy() - np.eye(3)[ex.arg_dict["sm_label"].asnumpy().astype(int)]
    want_bias = want["fc_bias"] + loss.sum(0)
    np.testing.assert_allclose(ex.grad_dict["fc_bias"].asnumpy(), want_bias, rtol=1e-10)
    # without out_grads every non-loss head is ones
    ex2.backward()
    want = _lowered_vjp(S.Group([y, y]), ex2, wrt, [np.ones((2, 3))] * 2)
    for k in wrt:
        np.testing.assert_allclose(ex2.grad_dict[k].asnumpy(), want[k], rtol=1e-10, err_msg=k)
    with pytest.raises(sg.BindError, match="no head gradient for output 1"):
        ex2.backward([og[0]])


def test_bind_uses_the_callers_arrays():
    net = small_mlp()
    rng = np.random.default_rng(2)
    args, _, _ = net.infer_shape(data=(4, 6))
    names = net.list_arguments()
    arrays = {n: sg.nd.array(rng.normal(size=s), dtype="float64") for n, s in zip(names, args)}
    arrays["softmax_label"] = sg.nd.array([0, 1, 2, 1], dtype="float64")
    grads = {n: sg.nd.zeros(s, dtype="float64") for n, s in zip(names, args)
             if n not in ("data", "softmax_label")}
    req = {n: ("write" if n in grads else "null") for n in names}
    ex = net.bind(sg.cpu(), args=arrays, args_grad=grads, grad_req=req)
    assert ex.arg_dict["fc1_weight"] is arrays["fc1_weight"]
    ex.forward(is_train=True)
    ex.backward()
    assert ex.grad_dict["fc1_weight"] is grads["fc1_weight"]
    assert np.abs(grads["fc1_weight"].asnumpy()).sum() > 0
    # positional lists, in list_arguments order, work too
    ex2 = net.bind(sg.cpu(), args=[arrays[n] for n in names], grad_req="null")
    np.testing.assert_allclose(ex2.forward()[0].asnumpy(), ex.outputs[0].asnumpy(),
                               rtol=1e-12)
    assert list(ex2.output_dict) == ["softmax_output"]


def test_batchnorm_aux_states_update_only_in_training():
    data = S.Variable("data")
    net = S.BatchNorm(data, fix_gamma=False, momentum=0.9, name="bn")
    ex = net.simple_bind(sg.cpu(), type_dict={"data": "float64"}, data=(4, 3))
    assert set(ex.aux_dict) == {"bn_moving_mean", "bn_moving_var"}
    ex.aux_dict["bn_moving_var"][:] = 1.0
    x = np.random.default_rng(3).normal(size=(4, 3)) + 2.0
    ex.arg_dict["bn_gamma"][:] = 1.0
    ex.forward(is_train=False, data=x)
    assert ex.aux_dict["bn_moving_mean"].asnumpy().tolist() == [0, 0, 0]
    ex.forward(is_train=True, data=x)
    np.testing.assert_allclose(ex.aux_dict["bn_moving_mean"].asnumpy(),
                               0.1 * x.mean(axis=0), rtol=1e-10)
    out = ex.outputs[0].asnumpy()
    np.testing.assert_allclose(out.mean(axis=0), 0, atol=1e-10)  # batch statistics


# --------------------------------------------------------------------------
# a VGG-style and an Inception-style net, end to end
# --------------------------------------------------------------------------
def vgg_style():
    x = S.Variable("data")
    for b, (convs, filters) in enumerate([(2, 4), (1, 8)], start=1):
        for c in range(1, convs + 1):
            x = S.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=filters,
                              name=f"conv{b}_{c}")
            x = S.Activation(x, act_type="relu", name=f"relu{b}_{c}")
        x = S.Pooling(x, pool_type="max", kernel=(2, 2), stride=(2, 2), name=f"pool{b}")
    x = S.Flatten(x, name="flatten")
    x = S.Activation(S.FullyConnected(x, num_hidden=16, name="fc6"), act_type="relu",
                     name="relu6")
    x = S.FullyConnected(x, num_hidden=5, name="fc8")
    return S.SoftmaxOutput(x, name="softmax")


VGG_ARGS = {"data": (2, 3, 8, 8), "conv1_1_weight": (4, 3, 3, 3), "conv1_1_bias": (4,),
            "conv1_2_weight": (4, 4, 3, 3), "conv1_2_bias": (4,),
            "conv2_1_weight": (8, 4, 3, 3), "conv2_1_bias": (8,),
            "fc6_weight": (16, 32), "fc6_bias": (16,), "fc8_weight": (5, 16),
            "fc8_bias": (5,), "softmax_label": (2,)}


def inception_style():
    data = S.Variable("data")
    stem = S.Convolution(data, kernel=(3, 3), pad=(1, 1), num_filter=6, name="stem_conv")
    stem = S.BatchNorm(stem, fix_gamma=False, name="stem_bn")
    stem = S.Activation(stem, act_type="relu", name="stem_relu")
    b1 = S.Convolution(stem, kernel=(1, 1), num_filter=4, name="b1_conv")
    b2 = S.Convolution(stem, kernel=(1, 1), num_filter=3, name="b2_reduce")
    b2 = S.Convolution(S.Activation(b2, act_type="relu", name="b2_relu"), kernel=(3, 3),
                       pad=(1, 1), num_filter=4, name="b2_conv")
    b3 = S.Pooling(stem, pool_type="avg", kernel=(3, 3), stride=(1, 1), pad=(1, 1),
                   name="b3_pool")
    b3 = S.Convolution(b3, kernel=(1, 1), num_filter=2, name="b3_proj")
    b4 = S.Pooling(stem, pool_type="max", kernel=(3, 3), stride=(1, 1), pad=(1, 1),
                   name="b4_pool")
    b4 = S.Convolution(b4, kernel=(1, 1), num_filter=2, name="b4_proj")
    mixed = S.Concat(b1, b2, b3, b4, dim=1, name="mixed")
    pool = S.Pooling(mixed, pool_type="avg", global_pool=True, kernel=(1, 1), name="gpool")
    return S.FullyConnected(S.Flatten(pool, name="flatten"), num_hidden=5, name="fc")


INCEPTION_ARGS = {"data": (2, 3, 6, 6), "stem_conv_weight": (6, 3, 3, 3),
                  "stem_conv_bias": (6,), "stem_bn_gamma": (6,), "stem_bn_beta": (6,),
                  "b1_conv_weight": (4, 6, 1, 1), "b1_conv_bias": (4,),
                  "b2_reduce_weight": (3, 6, 1, 1), "b2_reduce_bias": (3,),
                  "b2_conv_weight": (4, 3, 3, 3), "b2_conv_bias": (4,),
                  "b3_proj_weight": (2, 6, 1, 1), "b3_proj_bias": (2,),
                  "b4_proj_weight": (2, 6, 1, 1), "b4_proj_bias": (2,),
                  "fc_weight": (5, 12), "fc_bias": (5,)}


@pytest.mark.parametrize("make,want_args,want_out", [
    (vgg_style, VGG_ARGS, (2, 5)), (inception_style, INCEPTION_ARGS, (2, 5))],
    ids=["vgg", "inception"])
def test_classic_style_nets_infer_shapes_and_round_trip(make, want_args, want_out):
    net = make()
    args, outs, aux = net.infer_shape(data=want_args["data"])
    assert dict(zip(net.list_arguments(), args)) == want_args
    assert outs == [want_out]
    if make is inception_style:
        assert dict(zip(net.list_auxiliary_states(), aux)) == {
            "stem_bn_moving_mean": (6,), "stem_bn_moving_var": (6,)}
        internals = net.get_internals()
        assert internals["mixed_output"].infer_shape(data=(2, 3, 6, 6))[1] == [(2, 12, 6, 6)]
    text = net.tojson()
    again = S.load_json(text)
    assert again.graph().text() == net.graph().text()
    assert again.tojson() == text
    assert again.infer_shape(data=want_args["data"]) == (args, outs, aux)


def test_vgg_style_training_step_matches_jax_grad_of_cross_entropy():
    net = vgg_style()
    ex = net.simple_bind(sg.cpu(), type_dict={"data": "float64"}, data=(2, 3, 8, 8))
    rng = np.random.default_rng(4)
    _random_args(ex, rng, skip=("softmax_label",))
    ex.arg_dict["softmax_label"][:] = [3, 1]
    probs = ex.forward(is_train=True)[0].asnumpy()
    ex.backward()
    # SoftmaxOutput's gradient is that of the summed cross-entropy of its input
    logits = net.get_internals()["fc8_output"]
    fn = lower(logits.graph(), is_train=True)
    params = [n for n in net.list_arguments() if n not in ("data", "softmax_label")]
    feeds = {k: v.data for k, v in ex.arg_dict.items()}

    def cross_entropy(p):
        (z,), _ = fn({**feeds, **p}, None)
        logp = jax.nn.log_softmax(z, axis=-1)
        return -jnp.sum(logp[jnp.arange(2), jnp.array([3, 1])])

    want = jax.jit(jax.grad(cross_entropy))({k: feeds[k] for k in params + ["data"]})
    (z,), _ = jax.jit(fn)(feeds, None)
    np.testing.assert_allclose(probs, jax.nn.softmax(z, axis=-1), rtol=1e-12)
    for k in params + ["data"]:
        np.testing.assert_allclose(ex.grad_dict[k].asnumpy(), want[k], rtol=1e-8,
                                   atol=1e-12, err_msg=k)
    assert "softmax_label" in ex.grad_dict  # asked for by 'write', and zero
    assert not np.any(ex.grad_dict["softmax_label"].asnumpy())


def test_inception_style_training_step_matches_jax_grad():
    net = inception_style()
    ex = net.simple_bind(sg.cpu(), type_dict={"data": "float64"}, data=(2, 3, 6, 6))
    rng = np.random.default_rng(5)
    _random_args(ex, rng)
    ex.aux_dict["stem_bn_moving_var"][:] = 1.0
    out = ex.forward(is_train=True)[0]
    assert out.shape == (2, 5)
    og = rng.normal(size=(2, 5))
    ex.backward(og)
    wrt = list(ex.grad_dict)
    want = _lowered_vjp(net, ex, wrt, [og])
    for k in wrt:
        np.testing.assert_allclose(ex.grad_dict[k].asnumpy(), want[k], rtol=1e-8,
                                   atol=1e-12, err_msg=k)
    assert np.any(ex.aux_dict["stem_bn_moving_mean"].asnumpy() != 0)
