"""Metrics against direct NumPy computations, and the fit callbacks."""
import io
import logging
import os

import numpy as np
import pytest

import symgraph as sg
from symgraph.train import TrainError
from symgraph.train import callback as cb
from symgraph.train import metric as M

RNG = np.random.default_rng(0)
PROB = RNG.dirichlet(np.ones(5), size=20)
LABEL = RNG.integers(0, 5, 20).astype(np.float32)


def test_accuracy_and_top_k():
    m = M.create("acc")
    m.update([LABEL[:12]], [PROB[:12]])
    m.update([LABEL[12:]], [sg.nd.array(PROB[12:])])  # NDArrays too
    assert m.get() == ("accuracy", pytest.approx(np.mean(PROB.argmax(1) == LABEL)))
    top = M.create("top_k_accuracy", top_k=3)
    top.update([LABEL], [PROB])
    want = np.mean([LABEL[i] in np.argsort(-PROB[i])[:3] for i in range(20)])
    assert top.get() == ("top_k_accuracy_3", pytest.approx(want))
    ids = M.Accuracy()
    ids.update([np.array([1, 2, 3])], [np.array([1, 0, 3])])  # class ids as predictions
    assert ids.get()[1] == pytest.approx(2 / 3)


def test_cross_entropy_mse_rmse_mae_loss():
    ce = M.create("ce")
    ce.update([LABEL], [PROB])
    assert ce.get()[1] == pytest.approx(-np.mean(np.log(PROB[np.arange(20), LABEL.astype(int)]
                                                        + 1e-12)))
    pred = RNG.normal(size=(10, 1))
    lab = RNG.normal(size=(10,))
    mse, rmse, mae = M.create("mse"), M.create("rmse"), M.create("mae")
    for m in (mse, rmse, mae):
        m.update([lab[:5]], [pred[:5]])
        m.update([lab[5:]], [pred[5:]])
    d = [(lab[:5] - pred[:5, 0]), (lab[5:] - pred[5:, 0])]  # averaged per batch, as MXNet
    assert mse.get()[1] == pytest.approx(np.mean([np.mean(x ** 2) for x in d]))
    assert rmse.get()[1] == pytest.approx(np.mean([np.sqrt(np.mean(x ** 2)) for x in d]))
    assert mae.get()[1] == pytest.approx(np.mean([np.mean(np.abs(x)) for x in d]))
    loss = M.Loss()
    loss.update(None, [np.array([1.0, 2.0, 3.0])])
    assert loss.get() == ("loss", 2.0)


def test_composite_local_global_and_custom():
    comp = M.create(["acc", "ce", lambda label, pred: float(np.sum(pred))])
    comp.update([LABEL[:10]], [PROB[:10]])
    comp.reset_local()
    comp.update([LABEL[10:]], [PROB[10:]])
    names, local = comp.get()
    _, total = comp.get_global()
    assert names == ["accuracy", "cross-entropy", "custom"]
    assert local[0] == pytest.approx(np.mean(PROB[10:].argmax(1) == LABEL[10:]))
    assert total[0] == pytest.approx(np.mean(PROB.argmax(1) == LABEL))
    assert total[2] == pytest.approx(10.0)  # each call: the sum of one batch's rows (5 each)
    comp.reset()
    assert np.isnan(comp.get()[1][0])


def test_metric_errors():
    with pytest.raises(TrainError, match="unknown metric 'accuracyy'"):
        M.create("accuracyy")
    with pytest.raises(TrainError, match="number of arrays"):
        M.Accuracy().update([LABEL, LABEL], [PROB])
    with pytest.raises(TrainError, match="top_k"):
        M.TopKAccuracy(top_k=0)


def _param(epoch, nbatch, metric=None, **loc):
    return cb.BatchEndParam(epoch=epoch, nbatch=nbatch, eval_metric=metric, locals=loc)


def test_speedometer_logs_speed_and_resets_the_local_metric(caplog):
    m = M.create("acc")
    spd = cb.Speedometer(batch_size=4, frequent=2)
    with caplog.at_level(logging.INFO):
        for n in range(5):
            m.update([LABEL[:4]], [PROB[:4]])
            spd(_param(0, n, m))
    lines = [r.getMessage() for r in caplog.records if "Speed" in r.getMessage()]
    assert len(lines) == 2 and lines[0].startswith("Epoch[0] Batch [0-2]")
    assert "samples/sec" in lines[0] and "accuracy=" in lines[0]
    assert spd.last_speed > 0
    assert m.num_inst == 0 and m.global_num_inst == 20  # the window restarted, the total kept
    assert m.get_global()[1] == pytest.approx(np.mean(PROB[:4].argmax(1) == LABEL[:4]))


def test_do_checkpoint_writes_every_period(tmp_path):
    net = sg.sym.FullyConnected(sg.sym.Variable("data"), num_hidden=2, name="fc")
    arg = {"fc_weight": sg.nd.array(np.ones((2, 3))), "fc_bias": sg.nd.array(np.zeros(2))}
    save = cb.do_checkpoint(str(tmp_path / "p"), period=2)
    for epoch in range(4):
        save(epoch, net, arg, {})
    assert sorted(os.listdir(tmp_path)) == ["p-0002.params", "p-0004.params", "p-symbol.json"]
    _, got, _ = sg.mod.load_checkpoint(str(tmp_path / "p"), 4)
    np.testing.assert_array_equal(got["fc_weight"].asnumpy(), 1.0)


def test_progress_bar_draws_epochs_and_batches():
    out = io.StringIO()

    class It:
        num_batches = 3

    bar = cb.ProgressBar(file=out, leave=True, mininterval=0)
    m = M.create("acc")
    m.update([LABEL], [PROB])
    for epoch in range(2):
        for n in range(3):
            bar(_param(epoch, n, m, num_epoch=2, begin_epoch=0, train_data=It()))
    text = out.getvalue()
    assert "epoch 0" in text and "epoch 1" in text and "3/3" in text
    assert "epochs" in text and "2/2" in text
    assert "accuracy" in text
    assert bar._epoch_bar is None and bar._batch_bar is None  # closed after the last epoch
