"""Convergence on real data shipped with scikit-learn (load_digits), on one
device and on eight, through examples/train_digits.py (so the example is
exercised too)."""
import os

import numpy as np
import pytest

from helpers import load_script


def _example():
    return load_script("examples", "train_digits.py")


@pytest.mark.parametrize("net,devices,epochs", [("mlp", 1, 8), ("mlp", 8, 8),
                                                ("cnn", 1, 6), ("cnn", 8, 6)])
def test_digits_reach_95_percent(net, devices, epochs, capsys):
    acc = _example().main(["--net", net, "--devices", str(devices), "--epochs", str(epochs)])
    assert acc >= 0.95
    assert f"test accuracy: {acc:.4f} ({net}, {devices} device(s)" in capsys.readouterr().out


def test_example_in_bfloat16_with_checkpoints(tmp_path):
    prefix = str(tmp_path / "digits")
    acc = _example().main(["--epochs", "6", "--dtype", "bfloat16", "--checkpoint", prefix,
                           "--progress"])
    assert acc >= 0.9
    assert os.path.exists(prefix + "-0006.params") and os.path.exists(prefix + "-symbol.json")
    import symgraph as sg
    mod = sg.mod.Module.load(prefix, 6, load_optimizer_states=True)
    ex = _example()
    _, _, xte, yte = ex.load_data(0)
    mod.bind([("data", (64, 64))], for_training=False)
    pred = mod.predict(sg.io.NDArrayIter(xte, batch_size=64)).asnumpy()
    assert np.mean(pred.argmax(1) == yte) >= 0.9
