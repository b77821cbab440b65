"""sg.recordio against MXNet: files MXNet 1.9.1 wrote (tests/data/recordio,
made by tests/data/make_mxnet_recordio.py) read back identically, the same
records written here give the same bytes, and bytes built by hand from the
format (dmlc-core's recordio.h) read back."""
import os
import struct

import numpy as np
import pytest

from helpers import ROOT, load_script
from symgraph import recordio as rio
from symgraph.errors import SymgraphError

DATA = os.path.join(ROOT, "tests", "data", "recordio")
MAKE = load_script("tests", "data", "make_mxnet_recordio.py")
MAGIC = 0xCED7230A


def _record(cflag, data):
    """One part as recordio.h lays it out, written from the format here."""
    pad = -len(data) % 4
    return struct.pack("<II", MAGIC, cflag << 29 | len(data)) + data + b"\0" * pad


def test_reads_mxnet_plain_file():
    with rio.MXRecordIO(os.path.join(DATA, "plain.rec"), "r") as r:
        assert list(r) == MAKE.PAYLOADS
        assert r.read() is None  # stays at the end


def test_writes_mxnet_bytes(tmp_path):
    path = tmp_path / "p.rec"
    w = rio.MXRecordIO(path, "w")
    offsets = []
    for p in MAKE.PAYLOADS:
        offsets.append(w.tell())
        w.write(p)
    w.close()
    with open(os.path.join(DATA, "plain.rec"), "rb") as f:
        assert path.read_bytes() == f.read()
    # the reader walks the same offsets
    r = rio.MXRecordIO(path, "r")
    seen = []
    while True:
        seen.append(r.tell())
        if r.read() is None:
            break
    assert seen[:-1] == offsets and seen[-1] == path.stat().st_size


def test_hand_built_split_record_reads_back(tmp_path):
    m = struct.pack("<I", MAGIC)
    # magic words at offsets 4 and 12 (aligned: split there) and 21 (not)
    payload = b"abcd" + m + b"efgh" + m + b"xyz" + b"ab" + m
    expect = (_record(1, b"abcd") + _record(2, b"efgh") + _record(3, b"xyzab" + m))
    assert rio.encode(payload) == expect
    path = tmp_path / "h.rec"
    path.write_bytes(expect + _record(0, b"") + _record(0, b"q"))
    assert list(rio.MXRecordIO(path, "r")) == [payload, b"", b"q"]
    assert rio.scan_offsets(rio.open_mmap(path)) == [0, len(expect), len(expect) + 8]


@pytest.mark.parametrize("seed", range(5))
def test_round_trip_random_payloads_with_magic(tmp_path, seed):
    rng = np.random.default_rng(seed)
    m = struct.pack("<I", MAGIC)
    payloads = []
    for _ in range(20):
        pieces = [rng.bytes(int(rng.integers(0, 9))) for _ in range(int(rng.integers(0, 5)))]
        payloads.append(m.join(pieces) if rng.random() < 0.7 else b"".join(pieces))
    w = rio.MXRecordIO(tmp_path / "r.rec", "w")
    for p in payloads:
        w.write(p)
    w.close()
    assert list(rio.MXRecordIO(tmp_path / "r.rec", "r")) == payloads
    data = (tmp_path / "r.rec").read_bytes()
    assert len(data) % 4 == 0


def test_indexed_mxnet_file_and_bytes(tmp_path):
    r = rio.MXIndexedRecordIO(os.path.join(DATA, "indexed.idx"),
                              os.path.join(DATA, "indexed.rec"), "r")
    assert r.keys == list(range(len(MAKE.HEADERS)))
    for key in (2, 0, 3, 1):  # random access
        header, payload = rio.unpack(r.read_idx(key))
        (flag, label, id_, id2), want = MAKE.HEADERS[key]
        assert payload == want and header.id == id_ and header.id2 == id2
        if isinstance(label, list):
            assert header.flag == len(label)
            np.testing.assert_array_equal(header.label, np.float32(label))
        else:
            assert header.flag == 0 and header.label == label
    w = rio.MXIndexedRecordIO(tmp_path / "i.idx", tmp_path / "i.rec", "w")
    for i, (h, p) in enumerate(MAKE.HEADERS):
        w.write_idx(i, rio.pack(rio.IRHeader(*h), p))
    w.close()
    for ext in ("idx", "rec"):
        with open(os.path.join(DATA, f"indexed.{ext}"), "rb") as f:
            assert (tmp_path / f"i.{ext}").read_bytes() == f.read(), ext


def test_pack_layout_by_hand():
    s = rio.pack(rio.IRHeader(0, [1.0, 2.0], 5, 6), b"xy")
    assert s == struct.pack("<IfQQ", 2, 0.0, 5, 6) + np.float32([1, 2]).tobytes() + b"xy"
    assert rio.pack((9, 7.5, 1, 2), b"") == struct.pack("<IfQQ", 0, 7.5, 1, 2)


def test_mxnet_images_decode_as_mxnet(tmp_path):
    r = rio.MXIndexedRecordIO(os.path.join(DATA, "imgs.idx"), os.path.join(DATA, "imgs.rec"),
                              "r")
    want = np.load(os.path.join(DATA, "iter_expected.npz"))
    for j, key in enumerate(r.keys):  # ImageRecordIter read them in file order
        header, img = rio.unpack_img(r.read_idx(key))
        assert img.shape == (28, 30, 3) and img.dtype == np.uint8
        assert header.label == want["label"][j]
        # MXNet's iterator: RGB, centre crop 24x24 of the 28x30 image, NCHW
        rgb = img[2:26, 3:27, ::-1].transpose(2, 0, 1).astype(int)
        assert np.abs(rgb - want["data"][j]).max() <= 1, key  # IDCT rounding at most


def test_pack_img_round_trip():
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[:32, :40]
    img = np.stack([xx * 5, yy * 6, xx + yy], -1).astype(np.uint8)  # smooth: JPEG-friendly
    h, back = rio.unpack_img(rio.pack_img((0, 3, 1, 0), img, quality=95))
    assert h.label == 3 and back.shape == img.shape
    assert np.abs(back.astype(int) - img).mean() < 3
    noisy = rng.integers(0, 256, (9, 11, 3), dtype=np.uint8)
    h, back = rio.unpack_img(rio.pack_img((0, [1, 2], 1, 0), noisy, img_fmt=".png"))
    np.testing.assert_array_equal(back, noisy)  # PNG is lossless, BGR in and out
    np.testing.assert_array_equal(h.label, [1, 2])
    gray = noisy[:, :, 0]
    _, back = rio.unpack_img(rio.pack_img((0, 0, 0, 0), gray, img_fmt=".png"))
    np.testing.assert_array_equal(back, gray)


# -- bad input -------------------------------------------------------------------

def test_missing_file():
    with pytest.raises(rio.RecordIOError, match="no-such.rec: no such file"):
        rio.MXRecordIO("no-such.rec", "r")
    with pytest.raises(rio.RecordIOError, match="no-such.idx: no such file"):
        rio.MXIndexedRecordIO("no-such.idx", os.path.join(DATA, "plain.rec"), "r")


def test_wrong_magic_names_file_and_offset(tmp_path):
    good = _record(0, b"abcdefgh")
    path = tmp_path / "bad.rec"
    path.write_bytes(good + b"JUNKJUNK" + good)
    r = rio.MXRecordIO(path, "r")
    assert r.read() == b"abcdefgh"
    with pytest.raises(rio.RecordIOError, match=r"bad.rec: no record at byte offset 16"):
        r.read()
    with pytest.raises(rio.RecordIOError, match="byte offset 16"):
        rio.scan_offsets(rio.open_mmap(path), str(path))


@pytest.mark.parametrize("cut", [3, 10, 17])
def test_truncated_record(tmp_path, cut):
    data = _record(0, b"x" * 20)
    path = tmp_path / "t.rec"
    path.write_bytes(data + data[:cut])
    r = rio.MXRecordIO(path, "r")
    r.read()
    with pytest.raises(rio.RecordIOError, match=r"t.rec: truncated record at byte offset 28"):
        r.read()


def test_split_record_missing_its_end(tmp_path):
    path = tmp_path / "s.rec"
    path.write_bytes(_record(1, b"abcd") + _record(0, b"next"))
    with pytest.raises(rio.RecordIOError, match="corrupt record at byte offset 0"):
        rio.MXRecordIO(path, "r").read()


def test_errors_are_symgraph_errors(tmp_path):
    w = rio.MXRecordIO(tmp_path / "w.rec", "w")
    with pytest.raises(SymgraphError, match="cannot read"):
        w.read()
    with pytest.raises(SymgraphError, match="flag must be"):
        rio.MXRecordIO(tmp_path / "w.rec", "a")
    with pytest.raises(SymgraphError, match="shorter than an image record header"):
        rio.unpack(b"abc")
    with pytest.raises(SymgraphError, match="cannot decode JPEG"):
        rio.unpack_img(rio.pack((0, 1, 0, 0), b"\xff\xd8\xff\xe0garbage-bytes"))
    with pytest.raises(SymgraphError, match="no record with key 9"):
        rio.MXIndexedRecordIO(os.path.join(DATA, "indexed.idx"),
                              os.path.join(DATA, "indexed.rec"), "r").read_idx(9)
