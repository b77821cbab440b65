"""The fast CIFAR-10 parts (docs/training.md, "Fast CIFAR-10"): the reader
(python-version pickles, record files, the synthetic and digits stand-ins,
bad input), the device augmentation, the piecewise-linear schedule and
NAG's update against a hand computation."""
import os
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import symgraph as sg
from symgraph import recordio
from symgraph.recordio import RecordIOError
from symgraph.train import TrainError
from symgraph.train import augment as A
from symgraph.train import cifar
from symgraph.train import lr_scheduler as L
from symgraph.train import optimizer as O


# --------------------------------------------------------------------------
# the python version, written here in its exact format
# --------------------------------------------------------------------------
def _write_cifar_pickle(path, images, labels, name):
    """A batch as CIFAR-10's python version holds it: a dict with bytes
    keys, b'data' uint8 [N, 3072] (1024 red, 1024 green, 1024 blue values
    per row, rows of 32 pixels), b'labels' a list of ints, pickle protocol 2."""
    d = {b"batch_label": name.encode(), b"labels": [int(v) for v in labels],
         b"data": np.ascontiguousarray(images.reshape(len(images), 3072)),
         b"filenames": [f"img_{i}.png".encode() for i in range(len(images))]}
    with open(path, "wb") as f:
        pickle.dump(d, f, protocol=2)


def _fake_folder(folder, n=6, seed=0):
    rng = np.random.default_rng(seed)
    os.makedirs(folder, exist_ok=True)
    truth = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        x = rng.integers(0, 256, size=(n, 3, 32, 32), dtype=np.uint8)
        y = rng.integers(0, 10, size=n)
        _write_cifar_pickle(os.path.join(folder, name), x, y, name)
        truth[name] = (x, y)
    names = [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog", b"frog",
             b"horse", b"ship", b"truck"]
    with open(os.path.join(folder, "batches.meta"), "wb") as f:
        pickle.dump({b"label_names": names, b"num_cases_per_batch": n, b"num_vis": 3072},
                    f, protocol=2)
    return truth


def test_reader_round_trip_of_the_python_version(tmp_path):
    folder = str(tmp_path / "cifar-10-batches-py")
    truth = _fake_folder(folder)
    data = cifar.load_cifar10(folder)
    assert data.x_train.shape == (30, 3, 32, 32) and data.x_train.dtype == np.uint8
    assert data.y_train.dtype == np.uint8 and data.y_train.shape == (30,)
    want_x = np.concatenate([truth[f"data_batch_{i}"][0] for i in range(1, 6)])
    want_y = np.concatenate([truth[f"data_batch_{i}"][1] for i in range(1, 6)])
    np.testing.assert_array_equal(data.x_train, want_x)
    np.testing.assert_array_equal(data.y_train, want_y)
    np.testing.assert_array_equal(data.x_test, truth["test_batch"][0])
    np.testing.assert_array_equal(data.y_test, truth["test_batch"][1])
    assert data.classes[0] == "airplane" and data.classes[9] == "truck"
    # channel-major rows: pixel (c, y, x) is row[c*1024 + y*32 + x]
    with open(os.path.join(folder, "test_batch"), "rb") as f:
        row = pickle.load(f, encoding="bytes")[b"data"][2]
    assert data.x_test[2, 1, 5, 7] == row[1 * 1024 + 5 * 32 + 7]
    assert data.x_test[2, 2, 31, 0] == row[2 * 1024 + 31 * 32]
    # the folder holding cifar-10-batches-py works too, and a split can be skipped
    again = cifar.load_cifar10(str(tmp_path), train=False)
    np.testing.assert_array_equal(again.x_test, data.x_test)
    assert again.x_train.shape == (0, 3, 32, 32)
    # write_batch writes the same format
    cifar.write_batch(tmp_path / "mine", data.x_test, data.y_test)
    x, y = cifar.read_batch(tmp_path / "mine")
    np.testing.assert_array_equal(x, data.x_test)
    np.testing.assert_array_equal(y, data.y_test)


def test_bad_folders_and_pickles_are_one_train_error_each(tmp_path):
    with pytest.raises(TrainError, match="lacks data_batch_1, .*test_batch"):
        cifar.load_cifar10(tmp_path)
    with pytest.raises(TrainError, match="is not a folder"):
        cifar.load_cifar10(tmp_path / "nowhere")
    folder = tmp_path / "c"
    _fake_folder(str(folder), n=3)
    os.remove(folder / "data_batch_4")
    with pytest.raises(TrainError, match="lacks data_batch_4 "):
        cifar.load_cifar10(folder)
    _fake_folder(str(folder), n=3)
    path = folder / "data_batch_2"
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])  # truncated
    with pytest.raises(TrainError, match="data_batch_2 is not a readable CIFAR pickle"):
        cifar.load_cifar10(folder)
    # a pickle that would run code on loading is refused, not run
    path.write_bytes(pickle.dumps(os.system))
    with pytest.raises(TrainError, match="refusing to load"):
        cifar.load_cifar10(folder)
    # wrong shape, missing entries, labels out of range
    with open(path, "wb") as f:
        pickle.dump({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]}, f, protocol=2)
    with pytest.raises(TrainError, match=r"expected uint8 \[N, 3072\]"):
        cifar.load_cifar10(folder)
    with open(path, "wb") as f:
        pickle.dump({b"fine_labels": [0]}, f, protocol=2)
    with pytest.raises(TrainError, match="no 'data' and 'labels'"):
        cifar.load_cifar10(folder)
    _write_cifar_pickle(path, np.zeros((2, 3, 32, 32), np.uint8), [0, 10], "x")
    with pytest.raises(TrainError, match="labels run from 0 to 10"):
        cifar.load_cifar10(folder)


# --------------------------------------------------------------------------
# record files
# --------------------------------------------------------------------------
def test_record_file_round_trip(tmp_path):
    data = cifar.synthetic_cifar10(12, 0, seed=3)
    rec, idx = cifar.write_record(tmp_path / "train", data.x_train, data.y_train)
    x, y = cifar.load_cifar10_record(rec)
    np.testing.assert_array_equal(x, data.x_train)  # PNG: exact
    np.testing.assert_array_equal(y, data.y_train)
    assert x.dtype == y.dtype == np.uint8
    x2, y2 = cifar.load_cifar10_record(rec, idx)
    np.testing.assert_array_equal(x2, x)
    np.testing.assert_array_equal(y2, y)
    # ImageRecordIter reads the same pixels from the same file
    it = sg.io.ImageRecordIter(path_imgrec=rec, data_shape=(3, 32, 32), batch_size=12,
                               dtype="uint8", preprocess_threads=1)
    batch = next(iter(it))
    it.close()
    got = batch.data[0]
    got = got.asnumpy() if hasattr(got, "asnumpy") else np.asarray(got)
    np.testing.assert_array_equal(got, data.x_train)


def test_record_file_of_the_wrong_size_or_label_is_one_error(tmp_path):
    rec = str(tmp_path / "big.rec")
    w = recordio.MXRecordIO(rec, "w")
    w.write(recordio.pack_img(recordio.IRHeader(0, 1.0, 0, 0),
                              np.zeros((32, 32, 3), np.uint8), img_fmt=".png"))
    w.write(recordio.pack_img(recordio.IRHeader(0, 2.0, 1, 0),
                              np.zeros((28, 30, 3), np.uint8), img_fmt=".png"))
    w.close()
    with pytest.raises(RecordIOError, match=r"record at byte offset \d+ is a 28x30 image, "
                                            r"expected 32x32"):
        cifar.load_cifar10_record(rec)
    w = recordio.MXRecordIO(rec, "w")
    w.write(recordio.pack_img(recordio.IRHeader(0, 1.5, 0, 0),
                              np.zeros((32, 32, 3), np.uint8), img_fmt=".png"))
    w.close()
    with pytest.raises(TrainError, match="expected an integer class"):
        cifar.load_cifar10_record(rec)
    w = recordio.MXRecordIO(rec, "w")
    w.write(recordio.pack(recordio.IRHeader(0, 1.0, 0, 0), b"not an image"))
    w.close()
    with pytest.raises(RecordIOError, match="record at byte offset 0: cannot decode"):
        cifar.load_cifar10_record(rec)
    with pytest.raises(RecordIOError, match="no such file"):
        cifar.load_cifar10_record(tmp_path / "missing.rec")


# --------------------------------------------------------------------------
# stand-ins
# --------------------------------------------------------------------------
def _nearest_mean_accuracy(d):
    xs = d.x_train.reshape(len(d.x_train), -1).astype(np.float32)
    means = np.stack([xs[d.y_train == c].mean(0) for c in range(10)])
    xt = d.x_test.reshape(len(d.x_test), -1).astype(np.float32)
    dist = ((xt[:, None, :] - means[None]) ** 2).sum(-1)
    return float((dist.argmin(1) == d.y_test).mean())


def test_synthetic_set_is_cifar_shaped_balanced_repeatable_and_learnable():
    d = cifar.synthetic_cifar10(200, 100, seed=1)
    assert d.x_train.shape == (200, 3, 32, 32) and d.x_test.shape == (100, 3, 32, 32)
    assert d.x_train.dtype == np.uint8 and d.y_train.dtype == np.uint8
    assert np.bincount(d.y_train, minlength=10).tolist() == [20] * 10
    again = cifar.synthetic_cifar10(200, 100, seed=1)
    np.testing.assert_array_equal(again.x_train, d.x_train)
    assert not np.array_equal(cifar.synthetic_cifar10(200, 100, seed=2).x_train, d.x_train)
    assert d.x_train.std() > 20  # not a flat image
    assert _nearest_mean_accuracy(d) > 0.5  # learnable: far above chance (0.1)


def test_digits_stand_in():
    pytest.importorskip("sklearn")
    d = cifar.digits_cifar(seed=0)
    assert d.x_train.shape == (1437, 3, 32, 32) and d.x_test.shape == (360, 3, 32, 32)
    assert d.x_train.dtype == np.uint8 and set(np.unique(d.y_train)) == set(range(10))
    np.testing.assert_array_equal(cifar.digits_cifar(seed=0).x_test, d.x_test)
    # 4x4 pixel blocks of the 8x8 digits
    img = d.x_train[0]
    np.testing.assert_array_equal(img[:, ::4, ::4].repeat(4, 1).repeat(4, 2), img)
    with pytest.raises(TrainError, match="test_fraction"):
        cifar.digits_cifar(test_fraction=1.5)


# --------------------------------------------------------------------------
# augmentation
# --------------------------------------------------------------------------
def _batch(n=16, seed=0):
    return np.random.default_rng(seed).integers(0, 256, size=(n, 3, 32, 32), dtype=np.uint8)


def _normalized(x):
    m = np.asarray(A.CIFAR_MEAN, np.float32).reshape(1, 3, 1, 1)
    s = np.asarray(A.CIFAR_STD, np.float32).reshape(1, 3, 1, 1)
    return (x.astype(np.float32) - m) / s


@pytest.mark.parametrize("padding", ["reflect", "zeros"])
def test_crop_is_a_window_of_the_padded_image(padding):
    x = _batch()
    out = np.asarray(A.augment(jax.random.key(1), x, pad=4, flip=False, cutout=0,
                               padding=padding))
    assert out.shape == (16, 3, 32, 32) and out.dtype == np.float32
    mode = "reflect" if padding == "reflect" else "constant"
    padded = np.pad(_normalized(x), ((0, 0), (0, 0), (4, 4), (4, 4)), mode=mode)
    offsets = set()
    for i in range(len(x)):
        found = [(dy, dx) for dy in range(9) for dx in range(9)
                 if np.allclose(out[i], padded[i, :, dy:dy + 32, dx:dx + 32], atol=1e-5)]
        assert found, f"image {i} is no window of the padded image"
        offsets.add(found[0])
    assert len(offsets) > 4  # offsets differ between images


def test_flip_is_its_own_inverse_and_per_image():
    x = _batch(64)
    key = jax.random.key(2)
    kw = dict(pad=0, crop=32, flip=True, cutout=0)
    out = np.asarray(A.augment(key, x, **kw))
    base = _normalized(x)
    same = np.array([np.allclose(out[i], base[i], atol=1e-6) for i in range(64)])
    mirrored = np.array([np.allclose(out[i], base[i][..., ::-1], atol=1e-6)
                         for i in range(64)])
    assert np.all(same | mirrored)
    assert 10 < mirrored.sum() < 54  # p = 0.5 per image
    # the same draws on mirrored input give the mirrored output: flipping twice is identity
    back = np.asarray(A.augment(key, x[..., ::-1].copy(), **kw))
    np.testing.assert_allclose(back[..., ::-1], out, atol=1e-6)


def test_cutout_zeroes_exactly_one_window_inside_the_image():
    x = _batch(32)
    out = np.asarray(A.augment(jax.random.key(3), x, pad=4, crop=32, flip=True, cutout=8))
    # normalised pixels are never exactly 0 (the means are not whole numbers)
    assert not np.any(_normalized(x) == 0)
    corners = set()
    for i in range(len(x)):
        zero = out[i] == 0
        assert np.array_equal(zero[0], zero[1]) and np.array_equal(zero[0], zero[2])
        ys, xs = np.nonzero(zero[0])
        assert zero[0].sum() == 64
        y0, x0 = ys.min(), xs.min()
        assert ys.max() - y0 == 7 and xs.max() - x0 == 7  # one 8x8 window, not clipped
        assert zero[0, y0:y0 + 8, x0:x0 + 8].all()
        corners.add((y0, x0))
    assert len(corners) > 10


def test_augment_is_determined_by_its_key():
    x = _batch(8)
    a = np.asarray(A.augment(jax.random.key(5), x))
    b = np.asarray(A.augment(jax.random.key(5), jnp.asarray(x)))
    np.testing.assert_array_equal(a, b)
    c = np.asarray(A.augment(jax.random.key(6), x))
    assert not np.array_equal(a, c)
    np.testing.assert_array_equal(np.asarray(A.augment(5, x)), a)  # an int seed is a key
    # no augmentation: normalisation only
    plain = np.asarray(A.augment(0, x, pad=0, flip=False, cutout=0))
    np.testing.assert_allclose(plain, _normalized(x), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(A.normalize(x)), _normalized(x), rtol=1e-6)
    assert A.augment(0, x, dtype="bfloat16").dtype == jnp.bfloat16


def test_augment_refuses_bad_arguments():
    x = _batch(2)
    with pytest.raises(TrainError, match="uint8"):
        A.augment(0, x.astype(np.float32))
    with pytest.raises(TrainError, match="crop 48"):
        A.augment(0, x, crop=48)
    with pytest.raises(TrainError, match="cutout of 40"):
        A.augment(0, x, cutout=40, crop=32)
    with pytest.raises(TrainError, match="padding="):
        A.augment(0, x, padding="edge")
    with pytest.raises(TrainError, match="mean and std"):
        A.augment(0, x, mean=(0.0,))


def test_device_augment_iter_moves_uint8_and_draws_per_step():
    d = cifar.synthetic_cifar10(16, 8, seed=0)
    base = sg.io.NDArrayIter(d.x_train, d.y_train, batch_size=8, dtype=None)
    it = A.DeviceAugmentIter(base, seed=4)
    assert it.provide_data[0].dtype == "float32" and it.provide_data[0].shape == (8, 3, 32, 32)
    assert it.provide_label[0].dtype == "float32"
    first = [b.data[0].asnumpy() for b in it]
    assert len(first) == 2 and not np.array_equal(first[0], first[1])
    it.reset()
    second = [b.data[0].asnumpy() for b in it]
    assert not np.array_equal(first[0], second[0])  # a new epoch draws afresh
    it.set_epoch(0)
    again = [b.data[0].asnumpy() for b in it]
    np.testing.assert_array_equal(again[0], first[0])  # and repeats by (seed, epoch, batch)
    ev = A.DeviceAugmentIter(sg.io.NDArrayIter(d.x_test, d.y_test, batch_size=8, dtype=None),
                             train=False)
    batch = next(iter(ev))
    np.testing.assert_allclose(batch.data[0].asnumpy(), _normalized(d.x_test), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(batch.label[0]), d.y_test.astype(np.float32))


# --------------------------------------------------------------------------
# schedule and NAG
# --------------------------------------------------------------------------
def test_piecewise_linear_schedule_at_and_between_knots():
    s = L.PiecewiseLinearScheduler([0, 200, 1000], [0.0, 0.4, 0.0])
    assert s(0) == 0.0 and s(200) == pytest.approx(0.4) and s(1000) == 0.0
    assert s(1) == pytest.approx(0.002)
    assert s(100) == pytest.approx(0.2)
    assert s(600) == pytest.approx(0.2)
    assert s(900) == pytest.approx(0.05)
    assert s(1500) == 0.0  # the last rate after the last knot
    t = L.PiecewiseLinearScheduler.triangle(1000, 0.4)
    assert [t(n) for n in (0, 1, 100, 200, 600, 1000)] == \
        [pytest.approx(s(n)) for n in (0, 1, 100, 200, 600, 1000)]
    flat = L.PiecewiseLinearScheduler([10, 20], [0.3, 0.1])
    assert flat(1) == 0.3 and flat(15) == pytest.approx(0.2) and flat(25) == 0.1
    # the optimizer's learning_rate rescales the knots to that peak
    opt = O.create("sgd", learning_rate=0.8, lr_scheduler=L.PiecewiseLinearScheduler(
        [0, 200, 1000], [0.0, 0.4, 0.0]))
    opt.num_update = 100
    assert opt.learning_rate == pytest.approx(0.4)
    opt = O.create("sgd", lr_scheduler=L.PiecewiseLinearScheduler([0, 10], [0.0, 0.4]))
    opt.num_update = 5
    assert opt.learning_rate == pytest.approx(0.2)
    for bad in (([0, 0], [1, 1]), ([0, 1], [1]), ([5, 1], [1, 1]), ([0, 1], [0, 0]),
                ([0, 1], [-1, 1])):
        with pytest.raises(TrainError, match="PiecewiseLinearScheduler"):
            L.PiecewiseLinearScheduler(*bad)


def test_nag_weight_decay_and_changing_rate_as_mxnet_by_hand():
    """MXNet's nag_mom_update (1.6 to 2.x): g' = g + wd*w; mom = m*mom - lr*g';
    w += m*mom - lr*g'. Two updates of one weight, worked out by hand:
    w0 = 1, m = 0.9, wd = 0.1, lr 0.1 then 0.2, gradients 0.5 then -0.25.
      1: g' = 0.5 + 0.1 = 0.6; mom = -0.06; w = 1 - 0.054 - 0.06 = 0.886
      2: g' = -0.25 + 0.0886 = -0.1614; mom = -0.054 + 0.03228 = -0.02172;
         w = 0.886 - 0.019548 + 0.03228 = 0.898732"""
    sched = L.PiecewiseLinearScheduler([1, 2], [0.1, 0.2])
    opt = O.create("nag", momentum=0.9, wd=0.1, lr_scheduler=sched)
    upd = O.get_updater(opt)
    w = sg.nd.NDArray(jnp.asarray(np.array([1.0])))
    upd("fc_weight", sg.nd.NDArray(jnp.asarray(np.array([0.5]))), w)
    assert w.asnumpy()[0] == pytest.approx(0.886, abs=1e-12)
    assert np.asarray(upd.states["fc_weight"][0])[0] == pytest.approx(-0.06, abs=1e-12)
    upd("fc_weight", sg.nd.NDArray(jnp.asarray(np.array([-0.25]))), w)
    assert np.asarray(upd.states["fc_weight"][0])[0] == pytest.approx(-0.02172, abs=1e-12)
    assert w.asnumpy()[0] == pytest.approx(0.898732, abs=1e-12)


# --------------------------------------------------------------------------
# the parts together (docs/training.md's snippet, small)
# --------------------------------------------------------------------------
def test_the_parts_fit_together_on_a_narrow_resnet9():
    from symgraph.models import resnet9
    d = cifar.synthetic_cifar10(96, 32, seed=0)
    train = A.DeviceAugmentIter(sg.io.NDArrayIter(d.x_train, d.y_train, 32, shuffle=True,
                                                  seed=0, last_batch_handle="discard",
                                                  dtype=None), seed=0)
    test = A.DeviceAugmentIter(sg.io.NDArrayIter(d.x_test, d.y_test, 32, dtype=None),
                               train=False)
    sched = L.PiecewiseLinearScheduler.triangle(2 * train.num_batches, 0.4)
    mod = sg.mod.Module(resnet9.get_symbol(widths=(4, 8, 8, 8)), ema_decay=0.5, ema_every=2)
    mod.fit(train, num_epoch=2, optimizer="nag", initializer=sg.init.Xavier(), seed=0,
            optimizer_params={"momentum": 0.9, "wd": 5e-4, "lr_scheduler": sched})
    assert mod.optimizer.num_update == 6
    for kw in ({}, {"tta_flip": True}, {"use_ema": False}):
        (name, acc), = mod.score(test, "acc", **kw)
        assert name == "accuracy" and 0.0 <= acc <= 1.0
    probs = mod.predict(test, tta_flip=True).asnumpy()
    assert probs.shape == (32, 10) and np.allclose(probs.sum(1), 1.0, atol=1e-5)
