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


def trained(net, devices, data, label, split=False):
    mod = sg.mod.Module(net, context=[sg.cpu(i) for i in range(devices)])
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


def test_data_parallel_valid_normalization_with_multi_output():
    # the per-position count of multi_output: labels (16, 3), ignored ones uneven
    rng = np.random.default_rng(2)
    data = rng.normal(size=(16, 3, 6))
    label = np.stack([LABELS, np.roll(LABELS, 5), np.zeros(16)], axis=1)
    net = softmax_net(multi_output=True, normalization="valid", use_ignore=True)
    assert_same_params(trained(net, 1, data, label), trained(net, 4, data, label))
