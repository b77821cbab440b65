"""examples/cifar10_fast.py: the DAWNBench recipe trains the digits stand-in
(scikit-learn's digits at 32x32) past a stated accuracy at a small size,
reads the CIFAR-10 folder and record files it is given, and answers bad
input with one line and exit status 2."""
import numpy as np
import pytest

from helpers import load_script


def _example():
    return load_script("examples", "cifar10_fast.py")


def _one_line_exit(capsys, argv):
    with pytest.raises(SystemExit) as info:
        _example().main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_digits_at_a_small_size_pass_90_percent(capsys):
    # --quick: widths 16,32,64,128, batch 64, the first 1,024 training images
    # (16 batches an epoch); 5 epochs. Seeds 0, 1, 2 reached 0.967, 0.933 and
    # 0.936 when the threshold was chosen (docs/training.md, "The script")
    res = _example().main(["--digits", "--quick", "--epochs", "5", "--seed", "0"])
    rows = res["epochs"]
    assert [r["epoch"] for r in rows] == [1, 2, 3, 4, 5]
    assert rows[-1]["test_acc"] >= 0.90
    assert rows[-1]["train_loss"] < rows[0]["train_loss"]
    assert all(r["seconds"] > 0 and r["images_per_s"] > 0 for r in rows)
    out = capsys.readouterr().out
    assert "resnet9-dawn widths 16,32,64,128" in out and "wd 0.0005" in out
    assert "time to 94%:" in out


def test_record_file_trains_and_the_python_version_loads(tmp_path, capsys):
    from symgraph.train import cifar
    data = cifar.synthetic_cifar10(144, 16, seed=0)
    prefix = str(tmp_path / "train")
    rec, _ = cifar.write_record(prefix, data.x_train, data.y_train)
    res = _example().main(["--record", rec, "--quick", "--epochs", "1", "--batch", "32"])
    assert len(res["epochs"]) == 1 and 0 <= res["epochs"][0]["test_acc"] <= 1
    assert "130 train / 14 test images" in capsys.readouterr().out  # the last tenth tests
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    for i in range(1, 6):
        cifar.write_batch(str(folder / f"data_batch_{i}"), data.x_train[:8], data.y_train[:8])
    cifar.write_batch(str(folder / "test_batch"), data.x_test, data.y_test)
    ex = _example()
    got = ex.load(ex.parse_args(["--data", str(tmp_path), "--batch", "8"]))
    assert got.x_train.shape == (40, 3, 32, 32) and got.x_test.shape == (16, 3, 32, 32)
    np.testing.assert_array_equal(got.x_train[:8], data.x_train[:8])


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    line = _one_line_exit(capsys, ["--data", str(empty)])
    assert line.startswith("cifar10_fast.py: error:") and "data_batch_1" in line
    line = _one_line_exit(capsys, ["--data", str(tmp_path / "nowhere")])
    assert "nowhere" in line
    # a truncated batch
    from symgraph.train import cifar
    data = cifar.synthetic_cifar10(16, 8, seed=0)
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        cifar.write_batch(str(broken / name), data.x_train, data.y_train)
    raw = (broken / "data_batch_3").read_bytes()
    (broken / "data_batch_3").write_bytes(raw[: len(raw) // 2])
    assert "data_batch_3" in _one_line_exit(capsys, ["--data", str(broken)])
    # record files: missing, and one of 16x16 images
    assert "missing.rec" in _one_line_exit(capsys, ["--record", str(tmp_path / "missing.rec")])
    small = np.zeros((4, 3, 16, 16), np.uint8)
    rec, _ = cifar.write_record(str(tmp_path / "small"), small, np.zeros(4, np.uint8))
    assert "small.rec" in _one_line_exit(capsys, ["--record", rec])
    # fewer training images than one batch
    assert "fewer than one batch of 4096" in _one_line_exit(capsys, ["--digits", "--batch",
                                                                     "4096"])


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as info:
        _example().main(["--digits", "--widths", "1,2"])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        _example().main([])  # no data source
    assert info.value.code == 2
