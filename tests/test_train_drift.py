"""Where the Module drifted from one-device semantics or from the Executor:
data parallel with every SoftmaxOutput normalization, float64 without x64,
arguments that were accepted and ignored."""
import jax
import numpy as np
import pytest

import symgraph as sg
from symgraph.errors import BindError, SymgraphError
from symgraph.train import TrainError

S = sg.sym
IGNORE = 4
# 16 labels over 4 devices, 4 each; the ignored label falls unevenly:
# 3, 0, 1 and 2 per device (valid counts 1, 4, 3, 2 of 10)
LABELS = np.array([4, 4, 4, 0, 1, 2, 3, 0, 4, 1, 2, 3, 4, 4, 0, 1], np.float64)


def softmax_net(multi_output=False, **softmax):
    x = S.FullyConnected(S.Variable("data"), num_hidden=8, name="fc1", flatten=False)
    x = S.Activation(x, act_type="tanh", name="act")
    x = S.FullyConnected(x, num_hidden=5, name="fc2", flatten=not multi_output)
    if multi_output:  # (n, 3, 5) -> classes on axis 1: (n, 5, 3), labels (n, 3)
        x = S.transpose(x, axes=(0, 2, 1), name="tr")
    return S.SoftmaxOutput(x, name="softmax", ignore_label=IGNORE, multi_output=multi_output,
                           **softmax)


def trained(net, devices, data, label, split=False, **kw):
    mod = sg.mod.Module(net, context=[sg.cpu(i) for i in range(devices)], **kw)
    mod.bind([sg.io.DataDesc("data", data.shape, "float64")],
             [sg.io.DataDesc("softmax_label", label.shape, "float64")])
    mod.init_params(sg.init.Xavier(), seed=0)
    mod.init_optimizer(optimizer_params={"learning_rate": 0.5, "momentum": 0.9})
    batch = sg.io.DataBatch([data], [label])
    for _ in range(2):
        if split:
            mod.forward(batch, is_train=True)
            mod.backward()
            mod.update()
        else:
            mod.train_step(batch)
    arg, aux = mod.get_params()
    return {k: v.asnumpy() for k, v in {**arg, **aux}.items()}


def assert_same_params(a, b):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(b[k], a[k], rtol=1e-10, atol=1e-12, err_msg=k)


@pytest.mark.parametrize("use_ignore", [False, True])
@pytest.mark.parametrize("normalization", ["null", "batch", "valid"])
def test_data_parallel_equals_one_device_for_every_softmax_normalization(normalization,
                                                                         use_ignore):
    rng = np.random.default_rng(1)
    data = rng.normal(size=(16, 6))
    net = softmax_net(normalization=normalization, use_ignore=use_ignore)
    one = trained(net, 1, data, LABELS)
    assert_same_params(one, trained(net, 4, data, LABELS))
    if normalization == "valid":  # the split programs build the same gradient graph
        assert_same_params(one, trained(net, 4, data, LABELS, split=True))


def test_data_parallel_valid_normalization_with_dynamic_loss_scale():
    # the loss-scale rewrite of the gradient goes on top of the device sum
    rng = np.random.default_rng(3)
    data = rng.normal(size=(16, 6))
    net = softmax_net(normalization="valid", use_ignore=True)
    assert_same_params(trained(net, 1, data, LABELS, loss_scale="dynamic"),
                       trained(net, 4, data, LABELS, loss_scale="dynamic"))


def test_data_parallel_valid_normalization_with_multi_output():
    # the per-position count of multi_output: labels (16, 3), ignored ones uneven
    rng = np.random.default_rng(2)
    data = rng.normal(size=(16, 3, 6))
    label = np.stack([LABELS, np.roll(LABELS, 5), np.zeros(16)], axis=1)
    net = softmax_net(multi_output=True, normalization="valid", use_ignore=True)
    assert_same_params(trained(net, 1, data, label), trained(net, 4, data, label))


def fails(fn, kind, *fragments):
    with pytest.raises(kind) as info:
        fn()
    assert isinstance(info.value, SymgraphError)
    for frag in fragments:
        assert frag in str(info.value), f"{frag!r} not in {str(info.value)!r}"


def test_module_refuses_float64_without_x64_as_the_executor_does():
    net = softmax_net()
    x = np.random.default_rng(0).normal(size=(8, 6))  # float64 NumPy data
    y = LABELS[:8] % 4
    with jax.enable_x64(False):
        mod = sg.mod.Module(net)
        fails(lambda: mod.bind([sg.io.DataDesc("data", (8, 6), "float64")],
                               [sg.io.DataDesc("softmax_label", (8,), "float32")]),
              BindError, "'data'", "float64 needs 64-bit JAX",
              "jax.config.update('jax_enable_x64', True)")
        assert not mod.binded
        # an iterator that keeps the data's float64 (dtype=None) names it too
        it = sg.io.NDArrayIter(x, y, batch_size=4, dtype=None)
        fails(lambda: sg.mod.Module(net).fit(it, num_epoch=1), BindError,
              "float64 needs 64-bit JAX")
        # a float64 computed inside the net (Cast) is refused at its output
        cast = S.Cast(S.FullyConnected(S.Variable("data"), num_hidden=2, name="fc"),
                      dtype="float64", name="wide")
        fails(lambda: sg.mod.Module(cast, label_names=()).bind(
            [sg.io.DataDesc("data", (8, 6), "float32")], for_training=False),
              BindError, "output 'wide_output'", "float64")
        # float32 asked for (MXNet's default) converts float64 batches, as before
        mod = sg.mod.Module(net)
        mod.fit(sg.io.NDArrayIter(x, y, batch_size=4), num_epoch=1)
        assert mod.get_params()[0]["fc1_weight"].dtype == "float32"


def bound(net=None, devices=1, **kw):
    mod = sg.mod.Module(net or softmax_net(), context=[sg.cpu(i) for i in range(devices)], **kw)
    mod.bind([sg.io.DataDesc("data", (4, 6), "float32")],
             [sg.io.DataDesc("softmax_label", (4,), "float32")])
    mod.init_params(sg.init.Xavier(), seed=0)
    return mod


def test_mxnet_arguments_symgraph_does_not_implement_are_refused_by_name():
    net = softmax_net()
    for kw, fragment in [({"state_names": ["h0"]}, "set_states"),
                         ({"compression_params": {"type": "2bit"}}, "uncompressed")]:
        (name, value), = kw.items()
        fails(lambda: sg.mod.Module(net, **kw), TrainError, f"{name}={value!r}",
              "not supported", fragment)
        sg.mod.Module(net, **{name: None})  # the default (and MXNet's) is fine
    fails(lambda: sg.mod.Module(net, context=[sg.cpu(0), sg.cpu(1)], work_load_list=[1]),
          BindError, "work_load_list has 1 entries for 2 contexts")
    fails(lambda: sg.mod.Module(net, work_load_list=[1, 2]), BindError, "work_load_list")
    sg.mod.Module(net, context=[sg.cpu(0), sg.cpu(1)], work_load_list=[1, 1])  # even: fine

    it = sg.io.NDArrayIter(np.zeros((4, 6)), np.zeros(4), batch_size=4)
    fails(lambda: sg.mod.Module(net).fit(it, num_epoch=1, monitor=object()), TrainError,
          "monitor=", "get_internals")
    fails(lambda: sg.mod.Module(net).fit(it, num_epoch=1, sparse_row_id_fn=lambda b: {}),
          TrainError, "sparse_row_id_fn=", "no sparse arrays")
    mod = bound(net)
    fails(lambda: mod.score(it, "acc", sparse_row_id_fn=lambda b: {}), TrainError,
          "sparse_row_id_fn=")
    mod.forward(next(iter(it)), is_train=False)
    fails(lambda: mod.get_outputs(merge_multi_context=False), TrainError,
          "merge_multi_context=False is not supported", "whole batch")
    fails(lambda: mod.get_input_grads(merge_multi_context=False), TrainError,
          "merge_multi_context")
    fails(lambda: mod.update_metric(sg.metric.create("acc"), [np.zeros(4)], pre_sliced=True),
          TrainError, "pre_sliced=True is not supported")
    # a layout whose batch axis is not 0 would be split along the wrong axis
    fails(lambda: sg.mod.Module(net).bind([sg.io.DataDesc("data", (4, 6), layout="TN")],
                                          [sg.io.DataDesc("softmax_label", (4,))]),
          BindError, "layout 'TN', batch axis 1")


def test_multi_precision_is_refused_for_low_precision_weights_only():
    mod = sg.mod.Module(softmax_net())
    mod.bind([sg.io.DataDesc("data", (4, 6), "float16")],
             [sg.io.DataDesc("softmax_label", (4,), "float32")])
    mod.init_params(sg.init.Xavier(), seed=0)
    fails(lambda: mod.init_optimizer(optimizer_params={"multi_precision": True}), TrainError,
          "multi_precision=True is not supported", "float16", "compute_dtype='float16'")
    mod.init_optimizer(optimizer_params={"multi_precision": False})  # updates in float16
    # float32 weights: MXNet's multi_precision changes nothing, nor does symgraph's
    a, b = bound(), bound()
    a.init_optimizer(optimizer_params={"learning_rate": 0.1, "multi_precision": True})
    b.init_optimizer(optimizer_params={"learning_rate": 0.1})
    batch = sg.io.DataBatch([np.random.default_rng(0).normal(size=(4, 6))], [LABELS[4:8]])
    for m in (a, b):
        m.train_step(batch)
    for k, v in a.get_params()[0].items():
        np.testing.assert_array_equal(v.asnumpy(), b.get_params()[0][k].asnumpy())
