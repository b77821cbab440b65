"""Detection data: MXNet's detection .lst -> `symgraph im2rec --pack-label`
-> sg.io.ImageDetRecordIter round trips, a record built byte by byte from
the format, boxes that follow the pixels through every augmentation, label
padding, the synthetic set and the VOC folder reader, and bad input."""
import io
import os
import struct

import numpy as np
import pytest
from PIL import Image

import symgraph as sg
from symgraph import recordio as rio
from symgraph.cli import main as cli
from symgraph.im2rec import Im2RecError, pack_list
from symgraph.train import TrainError
from symgraph.train import detection_data as dd

MAGIC = 0xCED7230A


def _png(img) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    return buf.getvalue()


def _record(data: bytes) -> bytes:
    """One record as dmlc-core's recordio.h lays it out (no magic word inside)."""
    assert struct.pack("<I", MAGIC) not in data
    return struct.pack("<II", MAGIC, len(data)) + data + b"\0" * (-len(data) % 4)


def _write_rec(path, labels, images):
    """Records packed by hand: IRHeader with flag = label count, the floats, a PNG."""
    with open(path, "wb") as f:
        for i, (lab, img) in enumerate(zip(labels, images)):
            lab = np.asarray(lab, np.float32)
            f.write(_record(struct.pack("<IfQQ", lab.size, 0.0, i, 0) + lab.tobytes()
                            + _png(img)))


def _iter(rec, **kw):
    kw.setdefault("preprocess_threads", 1)
    return sg.io.ImageDetRecordIter(path_imgrec=str(rec), **kw)


# -- round trips ---------------------------------------------------------------------

def _list_case(tmp_path):
    """Three PNG images and a detection list in MXNet's layout (object width 6)."""
    root = tmp_path / "imgs"
    root.mkdir()
    rng = np.random.default_rng(0)
    objects = [
        [[1, 0.1, 0.2, 0.5, 0.6, 0], [0, 0.55, 0.05, 0.95, 0.45, 1]],
        [[2, 0.0, 0.0, 1.0, 1.0, 0]],
        [[0, 0.25, 0.25, 0.75, 0.5, 0], [1, 0.1, 0.6, 0.3, 0.9, 0], [2, 0.6, 0.6, 0.9, 0.95, 1]],
    ]
    lines = []
    for i, objs in enumerate(objects):
        name = f"im{i}.png"
        Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(root / name)
        fields = [str(i), "2", "6"] + ["%.4f" % x for o in objs for x in o] + [name]
        lines.append("\t".join(fields) + "\n")
    prefix = tmp_path / "det"
    (tmp_path / "det.lst").write_text("".join(lines))
    return prefix, root, objects


def test_lst_im2rec_iter_round_trip(tmp_path, capsys):
    prefix, root, objects = _list_case(tmp_path)
    assert cli(["im2rec", "--pack-label", "--encoding", ".png", "--quiet", str(prefix),
                str(root)]) == 0
    assert "3 images" in capsys.readouterr().out
    # the record header holds the whole label: flag = its length
    r = rio.MXIndexedRecordIO(str(prefix) + ".idx", str(prefix) + ".rec", "r")
    header, _ = rio.unpack(r.read_idx(2))
    assert header.flag == 2 + 3 * 6 and header.id == 2
    np.testing.assert_array_equal(header.label, np.float32([2, 6] + sum(objects[2], [])))
    it = _iter(str(prefix) + ".rec", path_imgidx=str(prefix) + ".idx", data_shape=(3, 40, 48),
               batch_size=3, dtype="uint8")
    assert it.provide_label[0].shape == (3, 3, 6) and it.max_objects == 3
    batch = it.next()
    label = batch.label[0].asnumpy()
    for i, objs in enumerate(objects):
        np.testing.assert_array_equal(label[i, :len(objs)], np.float32(objs))
        assert (label[i, len(objs):] == -1).all()
    # the images come back as they were (PNG, no resize: data_shape is their size)
    for i in range(3):
        img = np.asarray(Image.open(root / f"im{i}.png"))
        np.testing.assert_array_equal(batch.data[0].asnumpy()[i].transpose(1, 2, 0), img)
    # the Python packer with detection=True writes the same records
    os.makedirs(tmp_path / "py")
    os.link(tmp_path / "det.lst", tmp_path / "py" / "det.lst")
    count, _ = pack_list(str(tmp_path / "py" / "det.lst"), str(root), progress=False,
                         detection=True, encoding=".png")
    assert count == 3
    assert open(tmp_path / "py" / "det.rec", "rb").read() == \
        open(str(prefix) + ".rec", "rb").read()
    # read_det_list parses the same list
    items = dd.read_det_list(str(tmp_path / "det.lst"))
    assert [x[1] for x in items] == ["im0.png", "im1.png", "im2.png"]
    np.testing.assert_array_equal(items[2][2], np.float32(objects[2]))


def test_record_written_byte_by_byte(tmp_path):
    img = np.zeros((20, 30, 3), np.uint8)
    img[5:10, 6:12] = (200, 10, 20)
    labels = [[2, 5, 3, 0.2, 0.25, 0.4, 0.5, 1, 0.5, 0.5, 0.9, 0.95],
              [2, 5]]  # an image without objects: padding only (see docs/detection.md)
    _write_rec(tmp_path / "h.rec", labels, [img, img[:, ::-1]])
    # the same bytes rio.pack writes
    packed = rio.pack(rio.IRHeader(0, labels[0], 0, 0), _png(img))
    with open(tmp_path / "h.rec", "rb") as f:
        assert f.read(8 + len(packed))[8:] == packed
    it = _iter(tmp_path / "h.rec", data_shape=(3, 20, 30), batch_size=2, dtype="uint8")
    batch = it.next()
    label = batch.label[0].asnumpy()
    assert label.shape == (2, 2, 5)
    np.testing.assert_array_equal(label[0], np.float32(labels[0][2:]).reshape(2, 5))
    assert (label[1] == -1).all()
    np.testing.assert_array_equal(batch.data[0].asnumpy()[0].transpose(1, 2, 0), img)
    # MXNet's raw layout: [channels, height, width, label length, label..., -1 padding]
    raw = _iter(tmp_path / "h.rec", data_shape=(3, 20, 30), batch_size=2,
                label_layout="mxnet", label_pad_width=16).next().label[0].asnumpy()
    assert raw.shape == (2, 4 + 16)
    np.testing.assert_array_equal(raw[0], np.float32([3, 20, 30, 12] + labels[0] + [-1] * 4))
    np.testing.assert_array_equal(raw[1], np.float32([3, 20, 30, 2, 2, 5] + [-1] * 14))


def test_wider_header_and_a_split_record(tmp_path):
    """A 3-float header whose extra float is the magic word's bytes: the writer
    splits the record there and the iterator still reads the whole label."""
    magic_float = struct.unpack("<f", struct.pack("<I", MAGIC))[0]
    label = [3, 5, magic_float, 1, 0.1, 0.2, 0.6, 0.7]
    img = np.full((12, 16, 3), 40, np.uint8)
    with rio.MXRecordIO(str(tmp_path / "s.rec"), "w") as w:
        w.write(rio.pack(rio.IRHeader(0, label, 0, 0), _png(img)))
    raw = (tmp_path / "s.rec").read_bytes()
    assert (struct.unpack_from("<I", raw, 4)[0] >> 29) == 1  # split: a first part
    it = _iter(tmp_path / "s.rec", data_shape=(3, 12, 16), batch_size=1, label_layout="mxnet")
    np.testing.assert_array_equal(it.next().label[0].asnumpy()[0],
                                  np.float32([3, 12, 16, 8] + label))
    objects = _iter(tmp_path / "s.rec", data_shape=(3, 12, 16), batch_size=1).next()
    np.testing.assert_array_equal(objects.label[0].asnumpy()[0], np.float32([label[3:]]))


# -- augmentation keeps boxes on their pixels ----------------------------------------

BOX = (0.3, 0.25, 0.7, 0.6)  # xmin, ymin, xmax, ymax of the red rectangle


def _rect_rec(tmp_path, h=60, w=80):
    img = np.zeros((h, w, 3), np.uint8)
    x0, y0, x1, y1 = int(BOX[0] * w), int(BOX[1] * h), int(BOX[2] * w), int(BOX[3] * h)
    img[y0:y1, x0:x1] = (255, 0, 0)
    _write_rec(tmp_path / "rect.rec", [[2, 5, 0, *BOX]] * 4, [img] * 4)
    return tmp_path / "rect.rec", img


def _red_bounds(chw):
    red = (chw[0] >= 128) & (chw[1] < 100)
    ys, xs = np.nonzero(red)
    return np.array([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], float)


def test_mirror_maps_x_to_one_minus_x(tmp_path):
    rec, img = _rect_rec(tmp_path)
    batch = _iter(rec, data_shape=(3, 60, 80), batch_size=4, dtype="uint8",
                  rand_mirror_prob=1.0).next()
    label = batch.label[0].asnumpy()[:, 0]
    np.testing.assert_array_equal(label[:, 1], np.float32(1) - np.float32(BOX[2]))
    np.testing.assert_array_equal(label[:, 3], np.float32(1) - np.float32(BOX[0]))
    np.testing.assert_array_equal(label[:, [2, 4]], np.float32([[BOX[1], BOX[3]]] * 4))
    np.testing.assert_array_equal(batch.data[0].asnumpy()[0].transpose(1, 2, 0), img[:, ::-1])


@pytest.mark.parametrize("aug", [
    dict(rand_pad_prob=1.0, max_pad_scale=3.0, fill_value=0),
    dict(rand_crop_prob=1.0, num_crop_sampler=3, min_crop_scales=0.3,
         min_crop_overlaps=(0.1, 0.5, 0.7), min_crop_aspect_ratios=0.5,
         max_crop_aspect_ratios=2.0),
    dict(rand_mirror_prob=0.5, rand_pad_prob=0.7, max_pad_scale=2.5, fill_value=0,
         rand_crop_prob=0.9, min_crop_scales=0.3, min_crop_aspect_ratios=0.5,
         max_crop_aspect_ratios=2.0, crop_emit_mode="overlap", emit_overlap_thresh=0.2),
])
def test_boxes_bound_their_pixels_after_augmentation(tmp_path, aug):
    rec, _ = _rect_rec(tmp_path)
    it = _iter(rec, data_shape=(3, 48, 64), batch_size=4, dtype="uint8", shuffle=True,
               seed=3, **aug)
    changed = 0
    for epoch in range(4):
        for batch in it:
            data, label = batch.data[0].asnumpy(), batch.label[0].asnumpy()
            for chw, lab in zip(data, label):
                box = lab[0]
                assert box[0] == 0 and (lab[1:] == -1).all()
                px = box[1:] * np.array([64, 48, 64, 48])
                np.testing.assert_allclose(_red_bounds(chw), px, atol=1.0)
                changed += not np.allclose(box[1:], BOX, atol=1e-6)
        it.reset()
    assert changed >= 8  # the augmentation did move the boxes


def test_crop_center_emit_drops_and_clips(tmp_path):
    """A crop of the left half (by hand, through _try_crop) keeps the object
    whose centre is inside, clipped, and drops the other."""
    rec, _ = _rect_rec(tmp_path)
    it = _iter(rec, data_shape=(3, 60, 80), batch_size=1)
    s = it._samplers[0]
    objects = np.float32([[0, 0.1, 0.1, 0.6, 0.3], [1, 0.45, 0.5, 0.9, 0.9]])
    kept = it._try_crop(np.array([0.0, 0.0, 0.5, 1.0]), objects, s)
    np.testing.assert_allclose(kept, [[0, 0.2, 0.1, 1.0, 0.3]], atol=1e-6)
    assert it._try_crop(np.array([0.95, 0.0, 1.0, 0.1]), objects, s) is None


# -- padding and widths ------------------------------------------------------------------

def test_label_pad_width_and_max_objects(tmp_path):
    img = np.zeros((16, 16, 3), np.uint8)
    labels = [[2, 5] + [0, 0.1, 0.1, 0.5, 0.5] * k for k in (1, 3, 2)]
    _write_rec(tmp_path / "p.rec", labels, [img] * 3)
    auto = _iter(tmp_path / "p.rec", data_shape=(3, 16, 16), batch_size=3)
    assert auto.label_pad_width == 17 and auto.provide_label[0].shape == (3, 3, 5)
    for kw in (dict(label_pad_width=2 + 6 * 5), dict(max_objects=6)):
        it = _iter(tmp_path / "p.rec", data_shape=(3, 16, 16), batch_size=3, **kw)
        label = it.next().label[0].asnumpy()
        assert label.shape == (3, 6, 5)
        assert [(row[:, 0] >= 0).sum() for row in label] == [1, 3, 2]
        assert (label[1, 3:] == -1).all()
    with pytest.raises(TrainError, match="label_pad_width 12 is smaller than the longest"):
        _iter(tmp_path / "p.rec", data_shape=(3, 16, 16), batch_size=3, label_pad_width=12)
    with pytest.raises(TrainError, match="disagree"):
        _iter(tmp_path / "p.rec", data_shape=(3, 16, 16), batch_size=3, label_pad_width=17,
              max_objects=4)


# -- bad input ------------------------------------------------------------------------------

@pytest.mark.parametrize("label, match", [
    ([2, 5, 0, 0.1, 0.1, 0.5], "not a whole number of 5-float objects"),
    ([2, 4, 0, 0.1, 0.1, 0.5], "object_width 4 must be"),
    ([2, 5, 0, 0.6, 0.1, 0.5, 0.5], r"xmax < xmin"),
    ([1, 5, 0, 0.1, 0.1, 0.5, 0.5], "header_width 1"),
])
def test_bad_labels_name_the_record(tmp_path, label, match):
    img = np.zeros((8, 8, 3), np.uint8)
    _write_rec(tmp_path / "b.rec", [[2, 5, 0, 0.1, 0.1, 0.5, 0.5], label], [img, img])
    with pytest.raises(TrainError, match=match) as err:
        _iter(tmp_path / "b.rec", data_shape=(3, 8, 8), batch_size=1)
    assert "b.rec: record at byte offset" in str(err.value)


def test_bad_lists_and_arguments(tmp_path):
    prefix, root, _ = _list_case(tmp_path)
    lines = (tmp_path / "det.lst").read_text().splitlines()
    fields = lines[1].split("\t")
    lines[1] = "\t".join(fields[:5] + fields[6:])  # one number of the object missing
    (tmp_path / "det.lst").write_text("\n".join(lines) + "\n")
    with pytest.raises(TrainError, match=r"det.lst:2: 5 float\(s\) after the 2-float header"):
        dd.read_det_list(str(tmp_path / "det.lst"))
    with pytest.raises(Im2RecError, match=r"det.lst: image 1 \(im1.png\)"):
        pack_list(str(tmp_path / "det.lst"), str(root), progress=False, detection=True)
    assert not os.path.exists(tmp_path / "det.rec")  # nothing written
    (tmp_path / "x.lst").write_text("0\t2\t5\tim0.png\n0\tim0.png\n")
    with pytest.raises(TrainError, match="x.lst:2: expected 'index<TAB>header_width"):
        dd.read_det_list(str(tmp_path / "x.lst"))
    # not text, or not there: one line each, no traceback
    (tmp_path / "bin.lst").write_bytes(b"\xff\xfe\x00\x81\n")
    with pytest.raises(TrainError, match="bin.lst is not a detection list"):
        dd.read_det_list(str(tmp_path / "bin.lst"))
    with pytest.raises(TrainError, match="cannot read detection list .*missing.lst"):
        dd.read_det_list(str(tmp_path / "missing.lst"))
    # a classification record is not a detection record
    w = rio.MXIndexedRecordIO(str(tmp_path / "c.idx"), str(tmp_path / "c.rec"), "w")
    w.write_idx(0, rio.pack(rio.IRHeader(0, 3.0, 0, 0), _png(np.zeros((8, 8, 3), np.uint8))))
    w.close()
    with pytest.raises(TrainError, match="--pack-label"):
        _iter(tmp_path / "c.rec", data_shape=(3, 8, 8), batch_size=1)
    ok = tmp_path / "ok.rec"
    _write_rec(ok, [[2, 5, 0, 0.1, 0.1, 0.5, 0.5]], [np.zeros((8, 8, 3), np.uint8)])
    for kw, match in [(dict(rand_crop=True), "ImageRecordIter's"),
                      (dict(resize_mode="fit"), "resize_mode"),
                      (dict(min_crop_overlaps=(0.1, 0.3)), "num_crop_sampler is 1"),
                      (dict(rand_mirror_prob=2), "rand_mirror_prob"),
                      (dict(label_layout="flat"), "label_layout"),
                      (dict(nonsense=1), "ImageDetRecordIter: unknown argument")]:
        with pytest.raises(TrainError, match=match):
            _iter(ok, data_shape=(3, 8, 8), batch_size=1, **kw)


# -- the synthetic set -------------------------------------------------------------------------

def test_synthetic_set_is_deterministic_and_reads_back(tmp_path):
    a = dd.synthetic_detection_set(str(tmp_path / "a"), num_train=6, num_val=3, size=(48, 64),
                                   seed=7)
    b = dd.synthetic_detection_set(str(tmp_path / "b"), num_train=6, num_val=3, size=(48, 64),
                                   seed=7)
    c = dd.synthetic_detection_set(str(tmp_path / "c"), num_train=6, num_val=3, size=(48, 64),
                                   seed=8)
    for split in ("train", "val"):
        assert open(a[split], "rb").read() == open(b[split], "rb").read()
        assert open(a[split], "rb").read() != open(c[split], "rb").read()
    assert a["classes"] == ["circle", "square", "triangle"]
    it = _iter(a["val"], data_shape=(3, 48, 64), batch_size=3)
    label = it.next().label[0].asnumpy()
    counts = (label[:, :, 0] >= 0).sum(1)
    assert ((counts >= 1) & (counts <= 4)).all()
    boxes = label[label[:, :, 0] >= 0]
    assert set(boxes[:, 0].astype(int)) <= {0, 1, 2}
    assert (boxes[:, 1:] >= 0).all() and (boxes[:, 1:] <= 1).all()
    assert (boxes[:, 3] > boxes[:, 1]).all() and (boxes[:, 4] > boxes[:, 2]).all()
    # a box bounds the pixels its shape was drawn on (the last shape drawn is whole)
    img, objects = dd.synthetic_detection_image(np.random.default_rng([7, 0]), (48, 64), 4)
    colour = img[int(objects[-1, 2] * 48 + objects[-1, 4] * 48) // 2,
                 int(objects[-1, 1] * 64 + objects[-1, 3] * 64) // 2]
    ys, xs = np.nonzero((img == colour).all(-1))
    x0, y0, x1, y1 = objects[-1, 1:] * [64, 48, 64, 48]
    assert xs.min() >= x0 - 0.5 and xs.max() + 1 <= x1 + 0.5
    assert ys.min() >= y0 - 0.5 and ys.max() + 1 <= y1 + 0.5


def test_synthetic_list_packs_with_im2rec(tmp_path, capsys):
    out = dd.synthetic_detection_set(str(tmp_path / "s"), num_train=4, num_val=2,
                                     size=(32, 32), seed=1, fmt="lst")
    items = dd.read_det_list(out["train"])
    assert len(items) == 4 and os.path.isfile(os.path.join(out["root"], items[0][1]))
    assert cli(["im2rec", "--pack-label", "--encoding", ".png", "--quiet",
                str(tmp_path / "s_train"), out["root"]]) == 0
    it = _iter(str(tmp_path / "s_train.rec"), data_shape=(3, 32, 32), batch_size=4)
    label = it.next().label[0].asnumpy()
    for row, (_, _, objects) in zip(label, items):
        np.testing.assert_allclose(row[:len(objects)], objects, atol=1e-6)


# -- VOC folders ---------------------------------------------------------------------------------

def _voc_xml(w, h, objects):
    parts = [f"<annotation><size><width>{w}</width><height>{h}</height><depth>3</depth></size>"]
    for name, box, diff in objects:
        parts.append(f"<object><name>{name}</name><difficult>{diff}</difficult><bndbox>"
                     f"<xmin>{box[0]}</xmin><ymin>{box[1]}</ymin><xmax>{box[2]}</xmax>"
                     f"<ymax>{box[3]}</ymax></bndbox></object>")
    return "".join(parts) + "</annotation>"


def test_voc_folder_reader(tmp_path):
    root = tmp_path / "VOC2007"
    for d in ("JPEGImages", "Annotations", "ImageSets/Main"):
        os.makedirs(root / d)
    anns = {"000005": (50, 40, [("dog", (5, 4, 25, 20), 0), ("person", (30, 10, 50, 40), 1),
                                ("unicorn", (1, 1, 5, 5), 0)]),
            "000007": (60, 30, [("car", (6, 3, 54, 27), 0)])}
    for name, (w, h, objs) in anns.items():
        Image.fromarray(np.full((h, w, 3), 90, np.uint8)).save(root / "JPEGImages" /
                                                               f"{name}.jpg")
        (root / "Annotations" / f"{name}.xml").write_text(_voc_xml(w, h, objs))
    (root / "ImageSets/Main/trainval.txt").write_text("000005\n000007\n")
    (root / "ImageSets/Main/test.txt").write_text("000007\n")
    items = dd.read_voc(str(root), "trainval")
    assert [p for p, _ in items] == ["JPEGImages/000005.jpg", "JPEGImages/000007.jpg"]
    dog, person, car = (dd.VOC_CLASSES.index(c) for c in ("dog", "person", "car"))
    np.testing.assert_allclose(items[0][1], [[dog, 0.1, 0.1, 0.5, 0.5, 0],
                                             [person, 0.6, 0.25, 1.0, 1.0, 1]], atol=1e-6)
    np.testing.assert_allclose(items[1][1], [[car, 0.1, 0.1, 0.9, 0.9, 0]], atol=1e-6)
    assert len(dd.read_voc(str(root), "test")) == 1
    # a class list of one's own; difficult ones left out on request
    mine = dd.read_voc(str(root), "trainval", classes=["person", "dog"], keep_difficult=False)
    np.testing.assert_allclose(mine[0][1], [[1, 0.1, 0.1, 0.5, 0.5, 0]], atol=1e-6)
    assert mine[1][1].shape == (0, 6)
    # through a list, im2rec and the iterator
    dd.write_det_list(str(tmp_path / "voc.lst"), items)
    assert cli(["im2rec", "--pack-label", "--quiet", str(tmp_path / "voc"), str(root)]) == 0
    it = _iter(tmp_path / "voc.rec", data_shape=(3, 30, 30), batch_size=2)
    label = it.next().label[0].asnumpy()
    assert label.shape == (2, 2, 6)
    np.testing.assert_allclose(label[0], items[0][1], atol=1e-6)
    np.testing.assert_allclose(label[1, :1], items[1][1], atol=1e-6)
    # bad folders
    (root / "ImageSets/Main/bad.txt").write_text("000009\n")
    with pytest.raises(TrainError, match="000009 .* has no annotation"):
        dd.read_voc(str(root), "bad")
    with pytest.raises(TrainError, match="cannot read VOC image set"):
        dd.read_voc(str(root), "missing")
    (root / "Annotations" / "000007.xml").write_text(
        _voc_xml(60, 30, [("car", (40, 3, 20, 27), 0)]))
    with pytest.raises(TrainError, match="xmax < xmin"):
        dd.read_voc(str(root), "test")


def test_threads_and_resume_give_the_same_batches(tmp_path):
    out = dd.synthetic_detection_set(str(tmp_path / "t"), num_train=10, num_val=0,
                                     size=(40, 40), seed=2)
    aug = dict(data_shape=(3, 32, 32), batch_size=4, shuffle=True, seed=5, dtype="uint8",
               rand_mirror_prob=0.5, rand_pad_prob=0.5, max_pad_scale=2.0,
               rand_crop_prob=0.8, min_crop_scales=0.4)

    def epoch(it):
        return [(b.data[0].asnumpy(), b.label[0].asnumpy()) for b in it]

    one = epoch(_iter(out["train"], **aug))
    two = sg.io.ImageDetRecordIter(path_imgrec=out["train"], preprocess_threads=2, **aug)
    for (d1, l1), (d2, l2) in zip(one, epoch(two)):
        np.testing.assert_array_equal(d1, d2)
        np.testing.assert_array_equal(l1, l2)
    resumed = _iter(out["train"], **aug)
    resumed.set_state({"epoch": 0, "batch": 2})
    np.testing.assert_array_equal(resumed.next().label[0].asnumpy(), one[2][1])
