"""Module(ema_decay=, ema_every=): the moving average of the weights against
a hand computation, its use in score/predict, checkpoints; and flip
test-time augmentation (predict/score(tta_flip=True)) against two plain
predictions."""
import os

import numpy as np
import pytest

import symgraph as sg
from symgraph.train import TrainError


def _net():
    x = sg.sym.Variable("data")
    x = sg.sym.FullyConnected(x, num_hidden=6, name="fc1")
    x = sg.sym.BatchNorm(x, fix_gamma=False, name="bn1")
    x = sg.sym.Activation(x, act_type="relu", name="relu1")
    x = sg.sym.FullyConnected(x, num_hidden=3, name="fc2")
    return sg.sym.SoftmaxOutput(x, name="softmax")


def _data(seed=0, n=32):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 5)), rng.integers(0, 3, size=n).astype(np.float64)


def _module(context=None, **kw):
    x, y = _data()
    it = sg.io.NDArrayIter(x, y, batch_size=8, dtype=None)
    mod = sg.mod.Module(_net(), context=context, **kw)
    mod.bind(it.provide_data, it.provide_label)
    mod.init_params(sg.init.Xavier(), seed=0)
    mod.init_optimizer(optimizer="sgd", optimizer_params={"learning_rate": 0.5,
                                                          "momentum": 0.9, "wd": 0.01})
    return mod, it


def _snapshot(mod):
    arg, aux = mod.get_params()
    return {**{k: v.asnumpy() for k, v in arg.items()},
            **{f"aux:{k}": v.asnumpy() for k, v in aux.items()}}


def _ema_snapshot(mod):
    arg, aux = mod.get_ema_params()
    return {**{k: v.asnumpy() for k, v in arg.items()},
            **{f"aux:{k}": v.asnumpy() for k, v in aux.items()}}


def _batches(it, steps):
    out = []
    while len(out) < steps:
        it.reset()
        out.extend(it)
    return out[:steps]


@pytest.mark.parametrize("devices,fused", [(1, True), (1, False), (2, True)])
def test_ema_equals_a_hand_computation(devices, fused):
    """e0 = the weights before the first update; after update t with t % 2
    == 0: e = 0.75 e + 0.25 w_t -- for every trained parameter and the
    BatchNorm moving statistics."""
    ctx = [sg.cpu(i) for i in range(devices)]
    mod, it = _module(ctx, ema_decay=0.75, ema_every=2)
    ema = _snapshot(mod)
    for t, batch in enumerate(_batches(it, 5), start=1):
        if fused:
            mod.train_step(batch)
        else:
            mod.forward_backward(batch)
            mod.update()
        w = _snapshot(mod)
        if t % 2 == 0:
            ema = {k: 0.75 * ema[k] + 0.25 * w[k] for k in ema}
        got = _ema_snapshot(mod)
        assert sorted(got) == sorted(ema)
        for k in ema:
            np.testing.assert_allclose(got[k], ema[k], rtol=1e-12, atol=1e-14, err_msg=k)
    # the aux states are averaged too, and the average is not the weights
    assert not np.allclose(ema["aux:bn1_moving_mean"], w["aux:bn1_moving_mean"])
    assert not np.allclose(ema["fc1_weight"], w["fc1_weight"])


def test_score_and_predict_use_the_average_unless_told_not_to():
    mod, it = _module(ema_decay=0.5)
    for batch in _batches(it, 3):
        mod.train_step(batch)
    x, y = _data(seed=1, n=16)
    test = sg.io.NDArrayIter(x, y, batch_size=8, dtype=None)
    got_ema = mod.predict(test).asnumpy()
    got_raw = mod.predict(test, use_ema=False).asnumpy()
    # a plain module holding the averaged (or the trained) weights predicts the same
    for (arg, aux), got in ((mod.get_ema_params(), got_ema), (mod.get_params(), got_raw)):
        plain = sg.mod.Module(_net())
        plain.bind(test.provide_data, test.provide_label, for_training=False)
        plain.set_params(arg, aux)
        np.testing.assert_allclose(plain.predict(test).asnumpy(), got, rtol=1e-12)
    assert not np.allclose(got_ema, got_raw)
    acc = dict(mod.score(test, "acc"))["accuracy"]
    want = float((got_ema.argmax(1) == y).mean())
    assert acc == pytest.approx(want)
    acc_raw = dict(mod.score(test, "acc", use_ema=False))["accuracy"]
    assert acc_raw == pytest.approx(float((got_raw.argmax(1) == y).mean()))
    # get_params keeps the trained weights; new weights restart the average
    mod.init_params(sg.init.Xavier(), seed=3, force_init=True)
    np.testing.assert_allclose(mod.get_ema_params()[0]["fc1_weight"].asnumpy(),
                               mod.get_params()[0]["fc1_weight"].asnumpy())


def test_ema_travels_with_checkpoints(tmp_path):
    """Two updates, a checkpoint, two more after loading: the average equals
    four updates without the interruption."""
    prefix = str(tmp_path / "run")
    whole, it = _module(ema_decay=0.6)
    batches = _batches(it, 4)
    for b in batches:
        whole.train_step(b)
    half, _ = _module(ema_decay=0.6)
    for b in batches[:2]:
        half.train_step(b)
    half.save_checkpoint(prefix, 2, save_optimizer_states=True)
    assert os.path.exists(f"{prefix}-0002.ema.params")
    arg, aux = sg.mod.load_params(f"{prefix}-0002.ema.params")
    np.testing.assert_allclose(arg["fc2_weight"].asnumpy(),
                               half.get_ema_params()[0]["fc2_weight"].asnumpy())
    assert "bn1_moving_var" in aux
    back = sg.mod.Module.load(prefix, 2, load_optimizer_states=True, ema_decay=0.6)
    back.bind(it.provide_data, it.provide_label)
    back.init_optimizer(optimizer="sgd", optimizer_params={"learning_rate": 0.5,
                                                           "momentum": 0.9, "wd": 0.01})
    np.testing.assert_allclose(back.get_ema_params()[0]["fc1_weight"].asnumpy(),
                               half.get_ema_params()[0]["fc1_weight"].asnumpy())
    for b in batches[2:]:
        back.train_step(b)
    want, got = _ema_snapshot(whole), _ema_snapshot(back)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-12, atol=1e-14, err_msg=k)


def test_ema_arguments_and_misuse():
    for bad in (0.0, 1.0, 1.5, "x"):
        with pytest.raises(TrainError, match="ema_decay"):
            sg.mod.Module(_net(), ema_decay=bad)
    for bad in (0, -1, 1.5):
        with pytest.raises(TrainError, match="ema_every"):
            sg.mod.Module(_net(), ema_decay=0.9, ema_every=bad)
    mod, it = _module()
    with pytest.raises(TrainError, match="keeps no average"):
        mod.get_ema_params()
    with pytest.raises(TrainError, match="use_ema=True"):
        mod.score(it, "acc", use_ema=True)
    # before the first update the average is the weights
    mod, _ = _module(ema_decay=0.9)
    np.testing.assert_array_equal(mod.get_ema_params()[0]["fc1_weight"].asnumpy(),
                                  mod.get_params()[0]["fc1_weight"].asnumpy())


# --------------------------------------------------------------------------
# flip test-time augmentation
# --------------------------------------------------------------------------
def _conv_module(n=6):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 2, 5, 7))
    y = rng.integers(0, 4, size=n).astype(np.float64)
    net = sg.sym.Variable("data")
    net = sg.sym.Convolution(net, num_filter=3, kernel=(3, 3), name="conv")
    net = sg.sym.Activation(net, act_type="relu", name="relu")
    net = sg.sym.FullyConnected(sg.sym.Flatten(net), num_hidden=4, name="fc")
    net = sg.sym.SoftmaxOutput(net, name="softmax")
    mod = sg.mod.Module(net)
    it = sg.io.NDArrayIter(x, y, batch_size=4, dtype=None)  # 6 of 4: the last batch pads
    mod.bind(it.provide_data, it.provide_label, for_training=False)
    mod.init_params(sg.init.Xavier(magnitude=6), seed=1)
    return mod, x, y


def test_tta_flip_averages_the_outputs_of_the_images_and_their_mirrors():
    mod, x, y = _conv_module()
    plain = mod.predict(sg.io.NDArrayIter(x, y, batch_size=4, dtype=None)).asnumpy()
    mirrored = mod.predict(sg.io.NDArrayIter(x[..., ::-1].copy(), y, batch_size=4,
                                             dtype=None)).asnumpy()
    tta = mod.predict(sg.io.NDArrayIter(x, y, batch_size=4, dtype=None),
                      tta_flip=True).asnumpy()
    assert tta.shape == (6, 4)
    np.testing.assert_allclose(tta, (plain + mirrored) / 2, rtol=1e-12)
    assert not np.allclose(plain, mirrored)  # the net is not mirror-symmetric
    np.testing.assert_allclose(tta.sum(1), 1.0)  # the mean of probabilities
    # score averages the same way: its accuracy is that of the mean
    it = sg.io.NDArrayIter(x, y, batch_size=4, dtype=None)
    got = dict(mod.score(it, "acc", tta_flip=True))["accuracy"]
    assert got == pytest.approx(float((tta.argmax(1) == y).mean()))
    ce = dict(mod.score(it, "ce", tta_flip=True))["cross-entropy"]
    want = -np.mean(np.log(tta[np.arange(6), y.astype(int)]))
    assert ce == pytest.approx(want, rel=1e-9)
    # a mirrored input under TTA gives the same mean
    again = mod.predict(sg.io.NDArrayIter(x[..., ::-1].copy(), y, batch_size=4, dtype=None),
                        tta_flip=True).asnumpy()
    np.testing.assert_allclose(again, tta, rtol=1e-12)


def test_tta_flip_with_the_average_on_a_trained_module():
    mod, it = _module(ema_decay=0.5)
    for b in _batches(it, 2):
        mod.train_step(b)
    # 2-D data has no image axis to mirror: TTA leaves the outputs as they are
    x, y = _data(seed=2, n=8)
    a = mod.predict(sg.io.NDArrayIter(x, y, batch_size=8, dtype=None), tta_flip=True)
    b = mod.predict(sg.io.NDArrayIter(x, y, batch_size=8, dtype=None))
    np.testing.assert_allclose(a.asnumpy(), b.asnumpy(), rtol=1e-12)
