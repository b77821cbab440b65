"""`symgraph im2rec` and sg.io.ImageRecordIter: MXNet's lists and packed
bytes (tests/data/recordio, written by MXNet 1.9.1), MXNet's iterator
pixels, augmentation checked with NumPy, sharding, resume mid-epoch, bad
input, and a digits CNN trained from packed files."""
import os
import shutil

import numpy as np
import pytest

import symgraph as sg
from helpers import ROOT, load_script
from symgraph import recordio as rio
from symgraph.cli import main as cli
from symgraph.train import TrainError

DATA = os.path.join(ROOT, "tests", "data", "recordio")


def _images(tmp_path):
    root = tmp_path / "images"
    shutil.copytree(os.path.join(DATA, "images"), root)
    return root


def _pack_digits_like(tmp_path, n=20, size=(36, 40), fmt=".png"):
    """n random images (h, w) with labels i % 3, packed by hand; returns the
    path and the RGB images."""
    rng = np.random.default_rng(1)
    imgs = rng.integers(0, 256, (n, *size, 3), dtype=np.uint8)
    w = rio.MXIndexedRecordIO(tmp_path / "r.idx", tmp_path / "r.rec", "w")
    for i, img in enumerate(imgs):
        w.write_idx(i, rio.pack_img((0, i % 3, i, 0), img[:, :, ::-1], img_fmt=fmt))
    w.close()
    return str(tmp_path / "r.rec"), imgs


# -- im2rec ----------------------------------------------------------------------

def test_im2rec_list_and_pass_through_match_mxnet(tmp_path, capsys):
    root = _images(tmp_path)
    prefix = str(tmp_path / "imgs")
    assert cli(["im2rec", "--list", "--recursive", prefix, str(root)]) == 0
    with open(os.path.join(DATA, "imgs.lst")) as f:
        assert open(prefix + ".lst").read() == f.read()
    assert cli(["im2rec", "--pass-through", "--quiet", prefix, str(root)]) == 0
    for ext in (".rec", ".idx"):
        with open(os.path.join(DATA, "imgs_pass" + ext), "rb") as f:
            assert open(prefix + ext, "rb").read() == f.read(), ext
    assert "6 images" in capsys.readouterr().out


def test_im2rec_packs_decodable_images(tmp_path):
    root = _images(tmp_path)
    prefix = str(tmp_path / "imgs")
    cli(["im2rec", "--list", "--recursive", prefix, str(root)])
    assert cli(["im2rec", "--num-thread", "2", "--quiet", prefix, str(root)]) == 0
    mx = rio.MXIndexedRecordIO(os.path.join(DATA, "imgs.idx"), os.path.join(DATA, "imgs.rec"),
                               "r")
    ours = rio.MXIndexedRecordIO(prefix + ".idx", prefix + ".rec", "r")
    assert ours.keys == mx.keys
    for key in mx.keys:  # both quality 95 re-encodings of the same sources
        (h1, a), (h2, b) = rio.unpack_img(ours.read_idx(key)), rio.unpack_img(mx.read_idx(key))
        assert (h1.label, h1.id) == (h2.label, h2.id)
        assert np.abs(a.astype(int) - b).mean() < 2.5


def test_im2rec_chunks_ratios_resize(tmp_path):
    root = _images(tmp_path)
    prefix = str(tmp_path / "d")
    cli(["im2rec", "--list", "--recursive", "--chunks", "2", "--train-ratio", "0.67", prefix,
         str(root)])
    names = sorted(os.listdir(tmp_path))
    assert names == ["d_0_train.lst", "d_0_val.lst", "d_1_train.lst", "d_1_val.lst", "images"]
    cli(["im2rec", "--resize", "14", "--center-crop", "--encoding", ".png", "--quiet",
         prefix, str(root)])
    seen = []
    for part in ("d_0_train", "d_0_val", "d_1_train", "d_1_val"):
        r = rio.MXIndexedRecordIO(tmp_path / f"{part}.idx", tmp_path / f"{part}.rec", "r")
        for key in r.keys:
            _, img = rio.unpack_img(r.read_idx(key))
            assert img.shape == (14, 14, 3)  # centre square, then short side 14
            seen.append(key)
    assert sorted(seen) == list(range(6))


def test_im2rec_bad_input(tmp_path, capsys):
    root = _images(tmp_path)
    prefix = str(tmp_path / "x")
    assert cli(["im2rec", prefix, str(root)]) == 2
    assert "no list" in capsys.readouterr().err
    assert cli(["im2rec", "--list", prefix, str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (root / "cat" / "cat1.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    cli(["im2rec", "--list", "--recursive", prefix, str(root)])
    assert cli(["im2rec", "--quiet", prefix, str(root)]) == 2
    err = capsys.readouterr().err
    assert "cat1.jpg" in err and err.count("\n") == 1
    assert cli(["im2rec", "--quiet", "--skip-bad", prefix, str(root)]) == 0
    out = capsys.readouterr().out
    assert "5 images, skipped 1" in out and "cat1.jpg" in out


# -- ImageRecordIter --------------------------------------------------------------

def test_iter_equals_mxnet_iterator():
    want = np.load(os.path.join(DATA, "iter_expected.npz"))
    for idx in (os.path.join(DATA, "imgs.idx"), None):  # with and without an index
        it = sg.io.ImageRecordIter(path_imgrec=os.path.join(DATA, "imgs.rec"), path_imgidx=idx,
                                   data_shape=(3, 24, 24), batch_size=6)
        batch = it.next()
        assert batch.data[0].dtype == np.float32 and batch.pad == 0
        assert np.abs(batch.data[0].asnumpy() - want["data"]).max() <= 1
        np.testing.assert_array_equal(batch.label[0], want["label"])
        with pytest.raises(StopIteration):
            it.next()


def test_resize_equals_mxnet_iterator():
    """resize= is OpenCV's bilinear, as MXNet's: the same pixels as MXNet
    1.9.1's iterator (Pillow's filtering resize differed by up to 7)."""
    want = np.load(os.path.join(DATA, "iter_resize_expected.npz"))["data"]
    it = sg.io.ImageRecordIter(path_imgrec=os.path.join(DATA, "imgs.rec"),
                               path_imgidx=os.path.join(DATA, "imgs.idx"),
                               data_shape=(3, 16, 16), batch_size=6, resize=20, dtype="uint8")
    np.testing.assert_array_equal(it.next().data[0], want)


def test_normalise_crop_and_mirror_against_numpy(tmp_path):
    path, imgs = _pack_digits_like(tmp_path)  # PNG: lossless, so exact pixels
    mean, std, scale = (120.0, 110.0, 100.0), (60.0, 50.0, 40.0), 0.5
    it = sg.io.ImageRecordIter(path, (3, 30, 32), 20, mean_r=mean[0], mean_g=mean[1],
                               mean_b=mean[2], std_r=std[0], std_g=std[1], std_b=std[2],
                               scale=scale)
    got = it.next().data[0].asnumpy()
    crop = imgs[:, 3:33, 4:36].transpose(0, 3, 1, 2).astype(np.float64)
    want = (crop - np.reshape(mean, (3, 1, 1))) * scale / np.reshape(std, (3, 1, 1))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    it = sg.io.ImageRecordIter(path, (3, 30, 32), 20, rand_crop=True, rand_mirror=True,
                               dtype="uint8", seed=5)
    got = it.next().data[0].asnumpy()
    flips = 0
    for img, out in zip(imgs, got):
        hits = [(y, x, f) for y in range(7) for x in range(9) for f in (0, 1)
                if np.array_equal(out, (img[y:y + 30, x:x + 32, :][:, ::-1] if f else
                                        img[y:y + 30, x:x + 32, :]).transpose(2, 0, 1))]
        assert len(hits) == 1  # every output is one crop of its image, maybe mirrored
        flips += hits[0][2]
    assert 3 <= flips <= 17


def test_random_resized_crop_and_resize(tmp_path):
    path, _ = _pack_digits_like(tmp_path, size=(60, 80))
    it = sg.io.ImageRecordIter(path, (3, 16, 16), 8, random_resized_crop=True,
                               min_random_area=0.3, shuffle=True, seed=2, dtype="uint8")
    a = [b.data[0].copy() for b in it]
    assert a[0].shape == (8, 3, 16, 16) and len(a) == 3
    it.set_epoch(0)
    b = [b.data[0].copy() for b in it]
    assert all(np.array_equal(x, y) for x, y in zip(a, b))  # deterministic for a seed
    it = sg.io.ImageRecordIter(path, (3, 20, 20), 4, resize=20)
    assert it.next().data[0].shape == (4, 3, 20, 20)  # 60x80 -> 20x26, centre 20x20


def test_threads_do_not_change_batches(tmp_path):
    path, _ = _pack_digits_like(tmp_path, fmt=".jpg")
    kw = dict(data_shape=(3, 24, 24), batch_size=6, shuffle=True, rand_crop=True,
              rand_mirror=True, seed=9)
    one = [b.data[0] for b in sg.io.ImageRecordIter(path, preprocess_threads=1, **kw)]
    three = [b.data[0] for b in sg.io.ImageRecordIter(path, preprocess_threads=3,
                                                      prefetch_buffer=2, **kw)]
    assert len(one) == 4 and all(np.array_equal(x, y) for x, y in zip(one, three))


def test_round_batch_pads_and_index(tmp_path):
    path, _ = _pack_digits_like(tmp_path)
    it = sg.io.ImageRecordIter(path, (3, 36, 40), 8, dtype="uint8")
    batches = list(it)
    assert [b.pad for b in batches] == [0, 0, 4]
    last = batches[-1]
    np.testing.assert_array_equal(last.index, [16, 17, 18, 19, 0, 1, 2, 3])
    np.testing.assert_array_equal(last.data[0][4:], batches[0].data[0][:4])
    np.testing.assert_array_equal(last.label[0], [i % 3 for i in last.index])
    it = sg.io.ImageRecordIter(path, (3, 36, 40), 8, round_batch=False, dtype="uint8")
    last = list(it)[-1]
    assert last.pad == 4 and not last.data[0].asnumpy()[4:].any()


def test_num_parts_see_every_record_once(tmp_path):
    path, _ = _pack_digits_like(tmp_path)
    seen = []
    for part in range(3):
        it = sg.io.ImageRecordIter(path, (3, 36, 40), 4, part_index=part, num_parts=3,
                                   shuffle=True, seed=1, dtype="uint8")
        for b in it:
            seen += [int(v) for v in b.data[0].asnumpy()[:len(b.data[0]) - b.pad, 0, 0, 0]]
    _, imgs = _pack_digits_like(tmp_path)
    assert sorted(seen) == sorted(int(v) for v in imgs[:, 0, 0, 0])


def test_resume_mid_epoch_equals_uninterrupted(tmp_path):
    path, _ = _pack_digits_like(tmp_path, fmt=".jpg")
    kw = dict(data_shape=(3, 28, 28), batch_size=4, shuffle=True, rand_crop=True,
              rand_mirror=True, seed=4)
    it = sg.io.ImageRecordIter(path, **kw)
    it.reset()  # epoch 1
    full = [b.data[0].copy() for b in it]
    it2 = sg.io.ImageRecordIter(path, **kw)
    it2.reset()
    it2.next(), it2.next()
    state = it2.get_state()
    it3 = sg.io.ImageRecordIter(path, **kw)
    it3.set_state(state)
    rest = [b.data[0] for b in it3]
    assert state["batch"] == 2 and len(rest) == len(full) - 2
    assert all(np.array_equal(x, y) for x, y in zip(full[2:], rest))


def test_iter_bad_input(tmp_path):
    with pytest.raises(sg.SymgraphError, match="no-such.rec: no such file"):
        sg.io.ImageRecordIter(str(tmp_path / "no-such.rec"), (3, 8, 8), 2)
    path, _ = _pack_digits_like(tmp_path)
    with pytest.raises(TrainError, match=r"image 36x40 is smaller than data_shape 64x64"):
        sg.io.ImageRecordIter(path, (3, 64, 64), 4).next()
    with pytest.raises(TrainError, match="data_shape"):
        sg.io.ImageRecordIter(path, (4, 8, 8), 4)
    with pytest.raises(TrainError, match="part_index 3"):
        sg.io.ImageRecordIter(path, (3, 8, 8), 4, part_index=3, num_parts=3)
    with pytest.raises(TrainError, match="unknown argument"):
        sg.io.ImageRecordIter(path, (3, 8, 8), 4, mean_q=3)
    # a corrupt JPEG in record 1: named, or skipped and counted
    w = rio.MXRecordIO(tmp_path / "c.rec", "w")
    good = rio.pack_img((0, 1, 0, 0), np.zeros((8, 8, 3), np.uint8))
    w.write(good)
    w.write(rio.pack((0, 2, 1, 0), b"\xff\xd8\xff\xe0broken"))
    w.write(good)
    w.close()
    bad_at = len(rio.encode(good))
    with pytest.raises(TrainError, match=f"c.rec: record at byte offset {bad_at}: cannot "
                                         f"decode JPEG"):
        sg.io.ImageRecordIter(str(tmp_path / "c.rec"), (3, 8, 8), 3).next()
    it = sg.io.ImageRecordIter(str(tmp_path / "c.rec"), (3, 8, 8), 3, skip_bad=True)
    assert list(it.next().label[0]) == [1, 1, 1] and it.num_skipped == 1
    (tmp_path / "t.rec").write_bytes((tmp_path / "c.rec").read_bytes()[:-6])
    with pytest.raises(sg.SymgraphError, match="t.rec: truncated record at byte offset"):
        sg.io.ImageRecordIter(str(tmp_path / "t.rec"), (3, 8, 8), 3)


def test_digits_cnn_trains_from_packed_files(tmp_path):
    ex = load_script("examples", "train_digits.py")
    xtr, ytr, xte, yte = ex.load_data(0, image=True)
    for split, xs, ys in (("train", xtr, ytr), ("test", xte, yte)):
        for i, (x, y) in enumerate(zip(xs, ys)):
            d = tmp_path / "img" / split / f"{int(y)}"
            d.mkdir(parents=True, exist_ok=True)
            png = rio.imencode(np.round(x[0] * 255).astype(np.uint8), ".png", 1)
            (d / f"{i:04d}.png").write_bytes(png)
        prefix = str(tmp_path / split)
        assert cli(["im2rec", "--list", "--recursive", prefix, str(tmp_path / "img" / split)]) == 0
        assert cli(["im2rec", "--color", "0", "--encoding", ".png", "--quiet", "--num-thread",
                    "2", prefix, str(tmp_path / "img" / split)]) == 0
    # labels come from the folders, numbered in sorted order: '0'..'9'
    kw = dict(data_shape=(1, 8, 8), batch_size=64, scale=1 / 255, preprocess_threads=2)
    train = sg.io.ImageRecordIter(str(tmp_path / "train.rec"), shuffle=True, seed=0, **kw)
    test = sg.io.ImageRecordIter(str(tmp_path / "test.rec"), **kw)
    mod = sg.mod.Module(ex.get_net("cnn"), context=[sg.cpu(0)])
    mod.fit(train, eval_data=test, optimizer="sgd", num_epoch=6, seed=0,
            optimizer_params={"learning_rate": 0.1, "momentum": 0.9},
            initializer=sg.init.Xavier())
    (_, acc), = mod.score(test, "acc")
    assert acc >= 0.93


def test_bench_io_quick_writes_under_the_current_folder(tmp_path, monkeypatch):
    """`symgraph bench io` runs from any folder and writes its results there
    (never into the committed benchmarks/results)."""
    import json

    from symgraph.cli import main
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "io", "--quick", "--images", "32", "--threads", "1",
                 "--train-batches", "1"]) == 0
    res = json.loads((tmp_path / "bench-results" / "io-quick" / "results.json").read_text())
    assert [r["records"] for r in res["rows"]] == ["full", "short256"]
    assert all(r["symgraph_1"] > 0 and r["pillow_1_thread"] > 0 for r in res["rows"])
    assert 0 <= res["train"]["wait_share"] < 1 and res["train"]["batches"] == 1
    assert "| full |" in (tmp_path / "bench-results" / "io-quick" / "results.md").read_text()


def test_hostile_index_files_are_one_line(tmp_path):
    """An .idx that is not text, a folder, a negative offset or one past the
    end of the record file: one RecordIOError/TrainError line each, never
    a UnicodeDecodeError, IsADirectoryError, struct.error or OverflowError."""
    import io as _io

    from PIL import Image

    from symgraph.errors import SymgraphError
    rec, idx = str(tmp_path / "a.rec"), str(tmp_path / "a.idx")
    png = _io.BytesIO()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(png, format="PNG")
    w = rio.MXIndexedRecordIO(idx, rec, "w")
    for i in range(3):
        w.write_idx(i, rio.pack((0, float(i), i, 0), png.getvalue()))
    w.close()
    (tmp_path / "folder.idx").mkdir()
    cases = {"binary.idx": b"\xff\xfe\x00bad\n", "negative.idx": b"0\t-1000000000\n",
             "huge.idx": b"0\t" + b"1" * 30 + b"\n"}
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
    for name, words in [("binary.idx", "not an index file"), ("folder.idx", "Is a directory"),
                        ("negative.idx", "is negative"), ("huge.idx", "past the end")]:
        with pytest.raises(SymgraphError, match=words) as info:
            sg.io.ImageRecordIter(rec, (3, 8, 8), 1, path_imgidx=str(tmp_path / name))
        assert "\n" not in str(info.value)
