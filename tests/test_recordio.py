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


# -- hostile images and records ----------------------------------------------------

def _png_header(w, h):
    """A 65-byte PNG: signature, an IHDR claiming w x h RGB pixels, an empty
    IDAT and IEND (the chunks laid out by hand from the PNG spec)."""
    import zlib

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + \
            struct.pack(">I", zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b""))


def _jpeg_claiming(w, h):
    """A small real JPEG whose SOF0 marker is rewritten to claim w x h."""
    import io

    from PIL import Image
    buf = io.BytesIO()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(buf, "JPEG")
    data = bytearray(buf.getvalue())
    sof = data.find(b"\xff\xc0")
    data[sof + 5:sof + 9] = struct.pack(">HH", h, w)
    return bytes(data)


@pytest.mark.parametrize("make, what, size", [
    (lambda: _png_header(100000, 100000), "PNG", "100000x100000"),
    (lambda: _jpeg_claiming(65000, 65000), "JPEG", "65000x65000"),
    (lambda: _png_header(12000, 12000), "PNG", "12000x12000"),
])
def test_image_beyond_the_limit_is_refused_before_decoding(make, what, size):
    import tracemalloc
    import warnings
    data = make()
    tracemalloc.start()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # Pillow's DecompressionBombWarning would raise
            with pytest.raises(rio.ImageSizeError, match=f"cannot decode {what} .*{size} "
                                                         f"pixels") as info:
                rio.imdecode(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 10 * 2 ** 20, peak  # nothing of the claimed size was allocated
    assert "\n" not in str(info.value) and "MAX_IMAGE_PIXELS" in str(info.value)
    assert info.value.limit == rio.MAX_IMAGE_PIXELS
    # and through a record
    with pytest.raises(rio.RecordIOError, match=size):
        rio.unpack_img(rio.pack((0, 1.0, 0, 0), data))


def test_max_pixels_per_call_and_module_wide(monkeypatch):
    img = np.arange(6 * 7 * 3, dtype=np.uint8).reshape(6, 7, 3)
    png = rio.imencode(img, ".png")
    with pytest.raises(rio.ImageSizeError, match="7x6 pixels"):
        rio.imdecode(png, max_pixels=41)
    np.testing.assert_array_equal(rio.imdecode(png, to_rgb=False, max_pixels=42), img)
    monkeypatch.setattr(rio, "MAX_IMAGE_PIXELS", 41)  # read at each call
    with pytest.raises(rio.ImageSizeError):
        rio.imdecode(png)
    with pytest.raises(rio.ImageSizeError):
        rio.imdecode(rio.imencode(img, ".jpg"))


def test_pillow_bomb_warning_never_printed(monkeypatch):
    """Within our limit, Pillow's own (lower) warning threshold stays quiet:
    a 40x40 BMP against a Pillow threshold of 1000 pixels."""
    import io
    import warnings

    from PIL import Image
    buf = io.BytesIO()
    Image.fromarray(np.full((40, 40, 3), 7, np.uint8)).save(buf, "BMP")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # warns over 1000, raises over 2000
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert rio.imdecode(buf.getvalue()).shape == (40, 40, 3)
    with pytest.raises(rio.ImageSizeError, match="40x40"):
        rio.imdecode(buf.getvalue(), max_pixels=1599)


def test_corrupt_images_are_one_clean_line():
    cases = {b"\x89PNG\r\n\x1a\n" + b"junk" * 4: "cannot decode",
             b"\xff\xd8\xff\xe0 corrupt": "cannot decode JPEG",
             b"GIF89a" + b"\0" * 20: "cannot decode",
             b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n": "not an image of a known",
             b"": "not an image of a known"}
    for data, words in cases.items():
        with pytest.raises(rio.RecordIOError, match=words) as info:
            rio.imdecode(data)
        msg = str(info.value)
        assert "\n" not in msg and "BytesIO" not in msg and "()" not in msg, msg


def test_labels_beyond_float32_are_refused():
    for label in (1e300, [1.0, -1e39], np.float64(1e300)):
        with pytest.raises(rio.RecordIOError, match="beyond float32's range"):
            rio.pack((0, label, 0, 0), b"")
    with pytest.raises(rio.RecordIOError, match="not a number"):
        rio.pack((0, "x", 0, 0), b"")
    with pytest.raises(rio.RecordIOError, match="cannot pack header"):
        rio.pack((0, 1.0, -1, 0), b"")  # id is uint64
    assert rio.unpack(rio.pack((0, 3.0e38, 0, 0), b""))[0].label == np.float32(3.0e38)


def test_offsets_outside_the_file(tmp_path):
    data = _record(0, b"abcd")
    with pytest.raises(rio.RecordIOError, match="byte offset -1000000000 is negative"):
        rio.read_record(data, -10 ** 9, "x.rec")
    assert rio.read_record(data, 10 ** 30, "x.rec") is None
    path = tmp_path / "x.rec"
    path.write_bytes(data)
    for pos in (-10 ** 9, 10 ** 30):
        with pytest.raises(rio.RecordIOError, match="outside the file"):
            rio.MXRecordIO(path, "r").seek(pos)
    for text, words in [("0\t-1000000000\n", "is negative"), ("0\t1e30\n", "expected 'key"),
                        ("0\t" + "1" * 31 + "\n", "past the end"), ("0\t" + "9" * 5000, "key")]:
        (tmp_path / "x.idx").write_text(text)
        with pytest.raises(rio.RecordIOError, match=words) as info:
            rio.MXIndexedRecordIO(tmp_path / "x.idx", path, "r")
        assert len(str(info.value)) < 300
    (tmp_path / "x.idx").write_bytes(b"\xff\xfe0\t0\n")
    with pytest.raises(rio.RecordIOError, match="not an index file"):
        rio.MXIndexedRecordIO(tmp_path / "x.idx", path, "r")
    (tmp_path / "d.idx").mkdir()
    with pytest.raises(rio.RecordIOError, match="Is a directory"):
        rio.MXIndexedRecordIO(tmp_path / "d.idx", path, "r")


def test_jpeg_wider_than_its_format_allows():
    with pytest.raises(rio.RecordIOError, match="cannot encode a 65536x1 image as JPEG"):
        rio.imencode(np.zeros((1, 65536, 3), np.uint8))
