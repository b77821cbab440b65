"""Dynamic loss scaling: a step with non-finite gradients is skipped and
halves the scale, finite steps grow it after the interval, the scaled
gradients divide back exactly, the scale survives a checkpoint, and float16
training with it reaches the float32 accuracy on load_digits."""

import numpy as np
import pytest

import symgraph as sg
from symgraph.train import TrainError
from symgraph.train.step import LOSS_SCALE_STATE

from helpers import load_script, train_mean_loss

S = sg.sym


def mlp():
    x = S.FullyConnected(S.Variable("data"), num_hidden=8, name="fc1")
    x = S.Activation(x, act_type="relu", name="relu1")
    x = S.FullyConnected(x, num_hidden=5, name="fc2")
    return S.SoftmaxOutput(x, name="softmax")


def batch(seed=0, n=16, poison=None):
    """A batch; ``poison`` (inf or nan) replaces the first sample's data,
    which makes every gradient non-finite."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 6)).astype(np.float32)
    if poison is not None:
        x[0] = poison
    return sg.io.DataBatch([x], [rng.integers(0, 5, n).astype(np.float32)])


def module(loss_scale="dynamic", devices=1, compute_dtype="float16", dtype="float32"):
    mod = sg.mod.Module(mlp(), context=[sg.cpu(i) for i in range(devices)],
                        compute_dtype=compute_dtype, loss_scale=loss_scale)
    mod.bind([sg.io.DataDesc("data", (16, 6), dtype)],
             [sg.io.DataDesc("softmax_label", (16,), dtype)])
    mod.init_params(sg.init.Xavier(), seed=0)
    mod.init_optimizer(optimizer_params={"learning_rate": 0.1, "momentum": 0.9})
    return mod


def snapshot(mod):
    """Host copies of the parameters and the optimizer state (not the scale)."""
    arg, _ = mod.get_params()
    states = {k: [np.array(s) for s in v] for k, v in mod._opt_states.items()
              if k != LOSS_SCALE_STATE}
    return {k: v.asnumpy() for k, v in arg.items()}, states


def assert_same(a, b):
    (pa, sa), (pb, sb) = a, b
    for k in pa:
        np.testing.assert_array_equal(pa[k], pb[k], err_msg=k)
    for k in sa:
        for x, y in zip(sa[k], sb[k]):
            np.testing.assert_array_equal(x, y, err_msg=k)


@pytest.mark.parametrize("poison", [np.inf, np.nan])
@pytest.mark.parametrize("devices", [1, 2])
def test_a_step_with_non_finite_gradients_is_skipped_and_halves_the_scale(poison, devices):
    mod = module(sg.mod.DynamicLossScale(init_scale=1024.0), devices=devices)
    mod.train_step(batch(1))  # momentum is not zero any more
    assert mod.loss_scale == 1024.0
    before = snapshot(mod)
    # one poisoned sample: on two devices only the first device's slice
    # holds it, and both must still skip (the check is on the summed gradient)
    mod.train_step(batch(2, poison=poison))
    assert mod.loss_scale == 512.0
    assert_same(before, snapshot(mod))
    # forward/backward/update skips the same way
    mod.forward(batch(3, poison=poison), is_train=True)
    mod.backward()
    mod.update()
    assert mod.loss_scale == 256.0
    assert_same(before, snapshot(mod))
    mod.train_step(batch(4))  # a finite step updates again
    assert not np.array_equal(before[0]["fc1_weight"], snapshot(mod)[0]["fc1_weight"])
    assert mod.loss_scale == 256.0


def test_finite_steps_grow_the_scale_after_the_interval():
    mod = module(sg.mod.DynamicLossScale(init_scale=4.0, growth_interval=3))
    seen = []
    for i in range(7):
        mod.train_step(batch(i))
        seen.append(mod.loss_scale)
    assert seen == [4, 4, 8, 8, 8, 16, 16]
    # a skipped step restarts the count of finite steps
    mod.train_step(batch(9, poison=np.inf))
    assert mod.loss_scale == 8
    for i in range(2):
        mod.train_step(batch(10 + i))
    assert mod.loss_scale == 8
    mod.train_step(batch(12))
    assert mod.loss_scale == 16


def test_the_scale_never_drops_below_one():
    mod = module(sg.mod.DynamicLossScale(init_scale=2.0))
    for _ in range(3):
        mod.train_step(batch(0, poison=np.nan))
    assert mod.loss_scale == 1.0


def test_dynamic_scaling_divides_back_exactly():
    """In float64 (no overflow) a power-of-two dynamic scale changes no bit
    of the update against no scaling: fused step and three-call API."""
    plain = module(1.0, compute_dtype="float32", dtype="float64")
    dyn = module(sg.mod.DynamicLossScale(init_scale=2.0 ** 20, growth_interval=2),
                 compute_dtype="float32", dtype="float64")
    for i in range(4):
        b = batch(i)
        plain.train_step(b)
        if i % 2:
            dyn.train_step(b)
        else:
            dyn.forward(b, is_train=True)
            dyn.backward()
            dyn.update()
    assert dyn.loss_scale == 2.0 ** 22  # grew twice: no step was skipped
    assert_same(snapshot(plain), snapshot(dyn))


def test_scale_of_a_non_loss_output_divides_back():
    # a mean loss (no loss head): the head gradient carries the scale
    params = [snapshot(train_mean_loss([sg.cpu(0), sg.cpu(1)], loss_scale=scale))
              for scale in (1.0, sg.mod.DynamicLossScale(init_scale=2.0 ** 10))]
    assert_same(*params)


def test_the_scale_is_saved_with_the_optimizer_state(tmp_path):
    prefix = str(tmp_path / "run")
    mod = module(sg.mod.DynamicLossScale(init_scale=64.0))
    mod.train_step(batch(0, poison=np.inf))
    mod.save_checkpoint(prefix, 1, save_optimizer_states=True)
    back = sg.mod.Module.load(prefix, 1, load_optimizer_states=True, compute_dtype="float16",
                              loss_scale=sg.mod.DynamicLossScale(init_scale=64.0))
    back.bind([("data", (16, 6))], [("softmax_label", (16,))])
    back.init_optimizer(optimizer_params={"learning_rate": 0.1, "momentum": 0.9})
    assert back.loss_scale == 32.0
    # a static-scale module reads the same file (the scale entries are extra) ...
    static = sg.mod.Module.load(prefix, 1, load_optimizer_states=True,
                                compute_dtype="float16", loss_scale=128.0)
    static.bind([("data", (16, 6))], [("softmax_label", (16,))])
    static.init_optimizer(optimizer_params={"learning_rate": 0.1, "momentum": 0.9})
    assert static.loss_scale == 128.0
    # ... and a dynamic module starts its scale afresh from a file without one
    static.save_checkpoint(prefix, 2, save_optimizer_states=True)
    fresh = sg.mod.Module.load(prefix, 2, load_optimizer_states=True, loss_scale="dynamic")
    fresh.bind([("data", (16, 6))], [("softmax_label", (16,))])
    fresh.init_optimizer(optimizer_params={"learning_rate": 0.1, "momentum": 0.9})
    assert fresh.loss_scale == 2.0 ** 15


def test_bad_loss_scales_are_clear_errors():
    with pytest.raises(TrainError, match="'dynamic'"):
        sg.mod.Module(mlp(), loss_scale="auto")
    with pytest.raises(TrainError, match="positive"):
        sg.mod.Module(mlp(), loss_scale=0.0)
    with pytest.raises(TrainError, match="factor > 1"):
        sg.mod.DynamicLossScale(factor=1.0)


def _digits():
    return load_script("examples", "train_digits.py")


def test_float16_with_dynamic_scaling_learns_digits():
    ex = _digits()
    xtr, ytr, xte, yte = ex.load_data(0)
    train = sg.io.NDArrayIter(xtr, ytr, batch_size=64, shuffle=True, seed=0)
    test = sg.io.NDArrayIter(xte, yte, batch_size=64)
    mod = sg.mod.Module(ex.get_net("mlp"), compute_dtype="float16", loss_scale="dynamic")
    mod.fit(train, optimizer="sgd", optimizer_params={"learning_rate": 0.1, "momentum": 0.9},
            initializer=sg.init.Xavier(), num_epoch=8, seed=0)
    (_, acc), = mod.score(test, "acc")
    assert acc >= 0.95
    # the start at 2**15 overflows float16, so steps were skipped and the
    # scale came down to one that does not
    assert 1.0 <= mod.loss_scale < 2.0 ** 15
    assert all(np.isfinite(v.asnumpy()).all() for v in mod.get_params()[0].values())
