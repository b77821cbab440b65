"""Fuzz: hostile record files, index files, image headers, image folders
and im2rec arguments never escape.

Each family builds valid input and breaks it (truncates, flips bytes,
rewrites header fields, draws odd names and out-of-range numbers). The
library answers with a result or one RecordIOError/TrainError line; the
command line exits 0, or 2 with exactly one line on stderr and nothing
under the final .rec/.idx names. No warning is printed on the way.
SYMGRAPH_FUZZ_SCALE=50 runs fifty times the examples.
"""
import contextlib
import io
import os
import struct
import tempfile
import warnings
import zlib

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from PIL import Image

import symgraph as sg
from symgraph import recordio as rio
from symgraph.cli import main
from symgraph.errors import SymgraphError

SCALE = float(os.environ.get("SYMGRAPH_FUZZ_SCALE", "1"))


def fuzz(n):
    return settings(max_examples=max(1, int(n * SCALE)), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# decoding is capped in the fuzz so that a plausible medium size (8000x8000
# from 60 bytes) costs no memory; the default limit has its own family
SMALL = 1 << 16
MAGIC = struct.pack("<I", rio.MAGIC)


def _png(arr):
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "PNG")
    return buf.getvalue()


RNG = np.random.default_rng(0)
GOOD_PNG = _png(RNG.integers(0, 256, (6, 5, 3), dtype=np.uint8))
GOOD_JPEG = rio.imencode(RNG.integers(0, 256, (6, 5, 3), dtype=np.uint8))


def _saved(fmt, mode):
    buf = io.BytesIO()
    Image.fromarray(RNG.integers(0, 256, (5, 4, 3), dtype=np.uint8)).convert(mode).save(
        buf, fmt)
    return buf.getvalue()


# small real files of every format imdecode opens, to mutate
REAL = [GOOD_PNG, GOOD_JPEG] + [_saved(f, m) for f, m in [
    ("BMP", "RGB"), ("GIF", "P"), ("TIFF", "RGB"), ("WEBP", "RGB"), ("PPM", "RGB"),
    ("PNG", "LA"), ("PNG", "P"), ("PNG", "I;16"), ("TIFF", "CMYK"), ("JPEG", "L"),
    ("JPEG", "CMYK")]]


def _one_line(err: BaseException) -> None:
    assert isinstance(err, SymgraphError), repr(err)
    assert "\n" not in str(err) and str(err), repr(err)


@contextlib.contextmanager
def no_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def _decode_all(data: bytes, iscolor=1):
    """Walks a record file's bytes: offsets, records, headers, images."""
    try:
        offsets = rio.scan_offsets(data, "f.rec")
    except rio.RecordIOError as err:
        _one_line(err)
        offsets = []
    pos = 0
    while True:
        try:
            got = rio.read_record(data, pos, "f.rec")
        except rio.RecordIOError as err:
            _one_line(err)
            break
        if got is None:
            break
        assert pos in offsets or not offsets
        rec, pos = got
        try:
            header, img = rio.unpack_img(rec, iscolor, max_pixels=SMALL)
            assert img.dtype == np.uint8 and img.ndim in (2, 3)
        except rio.RecordIOError as err:
            _one_line(err)


# -- record files ---------------------------------------------------------------------

payloads = st.one_of(
    st.binary(max_size=40),
    st.lists(st.binary(max_size=8), max_size=4).map(MAGIC.join),  # split records
    st.sampled_from([GOOD_PNG, GOOD_JPEG]))
labels = st.one_of(st.floats(-1e6, 1e6, width=32),
                   st.lists(st.floats(-1e6, 1e6, width=32), min_size=1, max_size=4))


@st.composite
def record_files(draw):
    recs = draw(st.lists(st.tuples(labels, payloads), min_size=1, max_size=5))
    data = bytearray(b"".join(rio.encode(rio.pack((0, lab, i, 0), p))
                              for i, (lab, p) in enumerate(recs)))
    for _ in range(draw(st.integers(0, 4))):
        how = draw(st.sampled_from(["truncate", "flip", "lrec", "magic", "append", "flag"]))
        if how == "truncate" and data:
            del data[draw(st.integers(0, len(data) - 1)):]
        elif how == "flip" and data:
            i = draw(st.integers(0, len(data) - 1))
            data[i] = draw(st.integers(0, 255))
        elif how == "lrec" and len(data) >= 8:
            at = draw(st.integers(0, (len(data) - 8) // 4)) * 4
            data[at:at + 8] = MAGIC + struct.pack("<I", draw(st.integers(0, 2 ** 32 - 1)))
        elif how == "magic" and len(data) >= 4:
            at = draw(st.integers(0, (len(data) - 4) // 4)) * 4
            data[at:at + 4] = draw(st.binary(min_size=4, max_size=4))
        elif how == "flag" and len(data) >= 12:  # the IRHeader's label count
            data[8:12] = struct.pack("<I", draw(st.integers(0, 2 ** 32 - 1)))
        else:
            data += draw(st.binary(max_size=20))
    return bytes(data)


@fuzz(300)
@given(record_files(), st.sampled_from([-1, 0, 1]))
def test_record_files(data, iscolor):
    with no_warnings():
        _decode_all(data, iscolor)


@fuzz(40)
@given(record_files())
def test_record_files_through_the_reader_and_the_iterator(data):
    with tempfile.TemporaryDirectory() as tmp, no_warnings():
        path = os.path.join(tmp, "f.rec")
        with open(path, "wb") as f:
            f.write(data)
        try:
            with rio.MXRecordIO(path, "r") as r:
                for _ in r:
                    pass
        except rio.RecordIOError as err:
            _one_line(err)
        try:
            it = sg.io.ImageRecordIter(path, (3, 2, 2), 2, preprocess_threads=1,
                                       prefetch_buffer=1, skip_bad=True)
        except SymgraphError as err:
            _one_line(err)
            return
        try:
            for batch in it:
                assert batch.data[0].shape == (2, 3, 2, 2)
        except SymgraphError as err:
            _one_line(err)
        finally:
            it.close()


# -- index files ----------------------------------------------------------------------

keys = st.one_of(st.integers(-5, 10), st.integers(-2 ** 80, 2 ** 80).map(str),
                 st.sampled_from(["", "x", "1.5", "1e3", "0x10", "٣", "\x00", " 1 "]))
offsets = st.one_of(st.integers(-10 ** 9, 10 ** 30), st.sampled_from(
    ["-1e9", "1e30", "nan", "inf", "", "0" * 50, "9" * 5000, "0\x00", "+4", "4.0", "١٢"]))


@st.composite
def index_files(draw):
    lines = draw(st.lists(st.tuples(keys, offsets), max_size=6))
    text = "".join(f"{k}\t{o}\n" for k, o in lines)
    raw = text.encode("utf-8", "surrogatepass")
    how = draw(st.sampled_from(["as is", "latin", "garbage", "no tab", "crlf"]))
    if how == "latin":
        raw = raw + "é".encode("latin-1")
    elif how == "garbage":
        raw = draw(st.binary(max_size=40))
    elif how == "no tab":
        raw = raw.replace(b"\t", b" ")
    elif how == "crlf":
        raw = raw.replace(b"\n", b"\r\n")
    return raw


@fuzz(150)
@given(index_files(), st.booleans())
def test_index_files(raw, as_folder):
    with tempfile.TemporaryDirectory() as tmp, no_warnings():
        rec, idx = os.path.join(tmp, "a.rec"), os.path.join(tmp, "a.idx")
        w = rio.MXRecordIO(rec, "w")
        for i in range(3):
            w.write(rio.pack((0, float(i), i, 0), GOOD_PNG))
        w.close()
        if as_folder:
            os.mkdir(idx)
        else:
            with open(idx, "wb") as f:
                f.write(raw)
        try:
            r = rio.MXIndexedRecordIO(idx, rec, "r")
        except rio.RecordIOError as err:
            _one_line(err)
        else:
            for key in r.keys:
                try:
                    rio.unpack_img(r.read_idx(key), max_pixels=SMALL)
                except rio.RecordIOError as err:
                    _one_line(err)
        try:
            it = sg.io.ImageRecordIter(rec, (3, 6, 5), 2, path_imgidx=idx,
                                       preprocess_threads=1, prefetch_buffer=1)
        except SymgraphError as err:
            _one_line(err)
            return
        try:
            it.next()
        except SymgraphError as err:
            _one_line(err)
        finally:
            it.close()


# -- image headers --------------------------------------------------------------------

def _chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


dims = st.one_of(st.integers(0, 64), st.integers(0, 2 ** 32 - 1),
                 st.sampled_from([65000, 65535, 100000, 12000, 8000]))


@st.composite
def images(draw):
    kind = draw(st.sampled_from(["png", "jpeg", "bmp", "gif", "tiff", "ppm", "webp", "raw"]))
    w, h = draw(dims), draw(dims)
    tail = draw(st.binary(max_size=30))
    if kind == "png":
        ihdr = struct.pack(">II", w, h) + draw(st.binary(min_size=5, max_size=5))
        body = zlib.compress(draw(st.binary(max_size=50)))
        return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", body)
                + _chunk(b"IEND", b"") + tail)
    if kind == "jpeg":
        data = bytearray(GOOD_JPEG)
        sof = data.find(b"\xff\xc0")
        data[sof + 5:sof + 9] = struct.pack(">HH", h % 65536, w % 65536)
        cut = draw(st.integers(0, len(data)))
        return bytes(data[:cut]) + tail
    if kind == "bmp":
        return (b"BM" + struct.pack("<IHHI", 70, 0, 0, 54) + struct.pack("<IiiHH", 40, w % 2 ** 31,
                h % 2 ** 31 - 2 ** 30, 1, 24) + b"\0" * 24 + tail)
    if kind == "gif":
        return b"GIF89a" + struct.pack("<HH", w % 65536, h % 65536) + b"\x80\0\0" + tail
    if kind == "tiff":
        entries = [(256, 4, 1, w), (257, 4, 1, h), (258, 3, 1, 8), (262, 3, 1, 1),
                   (273, 4, 1, 8), (279, 4, 1, 4)]
        ifd = struct.pack("<H", len(entries)) + b"".join(
            struct.pack("<HHII", *e) for e in entries) + b"\0\0\0\0"
        return b"II*\0" + struct.pack("<I", 8) + ifd + tail
    if kind == "ppm":
        return f"P6 {w} {h} 255\n".encode() + tail
    if kind == "webp":
        return b"RIFF" + struct.pack("<I", 30) + b"WEBPVP8 " + tail
    return draw(st.binary(max_size=60))


@st.composite
def mutated_images(draw):
    data = bytearray(draw(st.sampled_from(REAL)))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(data) - 1))
        if draw(st.booleans()):
            data[i] = draw(st.integers(0, 255))
        else:
            del data[i:i + draw(st.integers(1, 16))]
    return bytes(data)


@fuzz(300)
@given(st.one_of(images(), mutated_images()), st.sampled_from([-1, 0, 1]), st.booleans())
def test_image_headers(data, iscolor, to_rgb):
    with no_warnings():
        try:
            img = rio.imdecode(data, iscolor, to_rgb, max_pixels=SMALL)
        except rio.RecordIOError as err:
            _one_line(err)
            event("refused")
        else:
            assert img.dtype == np.uint8 and img.shape[0] * img.shape[1] <= SMALL
            event("decoded")


@fuzz(60)
@given(st.sampled_from(["png", "jpeg", "bmp", "gif", "tiff", "ppm"]),
       st.integers(10001, 65535), st.integers(10001, 65535))
def test_headers_beyond_the_default_limit(kind, w, h):
    """Whatever the format, a header of more than MAX_IMAGE_PIXELS is refused
    by size, before a pixel is allocated."""
    data = {"png": b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2,
                                                                       0, 0, 0)),
            "jpeg": None, "bmp": b"BM" + struct.pack("<IHHI", 70, 0, 0, 54)
            + struct.pack("<IiiHH", 40, w, h, 1, 24) + b"\0" * 24,
            "gif": b"GIF89a" + struct.pack("<HH", w, h) + b"\0\0\0" + b"," + b"\0" * 9,
            "tiff": None, "ppm": f"P6 {w} {h} 255\n".encode()}[kind]
    if kind == "jpeg":
        data = bytearray(GOOD_JPEG)
        sof = data.find(b"\xff\xc0")
        data[sof + 5:sof + 9] = struct.pack(">HH", h, w)
        data = bytes(data)
    if kind == "tiff":
        entries = [(256, 4, 1, w), (257, 4, 1, h), (258, 3, 1, 8), (262, 3, 1, 1)]
        data = b"II*\0" + struct.pack("<I", 8) + struct.pack("<H", len(entries)) + b"".join(
            struct.pack("<HHII", *e) for e in entries) + b"\0\0\0\0"
    with no_warnings():
        try:
            rio.imdecode(data)
        except rio.ImageSizeError as err:
            _one_line(err)
            assert (err.width, err.height) == (w, h)
        except rio.RecordIOError as err:  # a header its decoder rejects first
            _one_line(err)
            assert "pixels" not in str(err)
        else:
            raise AssertionError(f"{kind} {w}x{h} decoded")


# -- im2rec: folders and arguments ---------------------------------------------------

def run_cli(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _check_exit(code, err, argv):
    assert code in (0, 2), (argv, code, err[-400:])
    if code == 2:
        assert err.startswith("symgraph: error: ") and err.count("\n") == 1, (argv, err)
    else:
        assert err == "", (argv, err)  # no bar, no warning


name_bytes = st.one_of(
    st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="/\x00"),
            min_size=1, max_size=12).map(lambda t: t.encode("utf-8")),
    st.binary(min_size=1, max_size=12).map(lambda b: b.replace(b"/", b"_").replace(b"\0", b"_")),
    st.sampled_from([b"a\nb", b"t\tb", b"c\rd", b" x", b"x ", b"\xff\xfe", b"..."]))
contents = st.one_of(st.sampled_from([GOOD_PNG, GOOD_JPEG, b"", b"\xff\xd8\xff\xe0bad",
                                      b"\x89PNG\r\n\x1a\nbad"]),
                     images(), st.binary(max_size=30))


@st.composite
def folders(draw):
    files = []
    for _ in range(draw(st.integers(0, 6))):
        depth = draw(st.integers(0, 2))
        parts = [draw(name_bytes) for _ in range(depth)]
        name = draw(name_bytes) + draw(st.sampled_from([b".png", b".jpg", b".jpeg", b".PNG"]))
        files.append((parts, name, draw(contents)))
    return files


def _build(root, files):
    os.makedirs(root, exist_ok=True)
    broot = os.fsencode(root)
    for parts, name, data in files:
        folder = os.path.join(broot, *parts) if parts else broot
        if parts in (["."], [".."]) or any(p in (b".", b"..") for p in parts):
            continue
        try:
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, name), "wb") as f:
                f.write(data)
        except (IsADirectoryError, NotADirectoryError, FileExistsError, OSError):
            pass  # a name drawn twice as file and folder, or too long


@fuzz(40)
@given(folders(), st.booleans(), st.sampled_from([[], ["--skip-bad"], ["--pass-through"],
                                                  ["--resize", "3", "--center-crop"],
                                                  ["--encoding", ".png", "--color", "-1"]]))
def test_im2rec_folders(files, recursive, options):
    with tempfile.TemporaryDirectory() as tmp:
        root, prefix = os.path.join(tmp, "img"), os.path.join(tmp, "out", "t")
        _build(root, files)
        argv = ["im2rec", "--list", *(["--recursive"] if recursive else []), prefix, root]
        code, out, err = run_cli(argv)
        _check_exit(code, err, argv)
        if code != 0:
            return
        argv = ["im2rec", "--max-pixels", str(SMALL), *options, prefix, root]
        code, out, err = run_cli(argv)
        _check_exit(code, err, argv)
        event(f"pack exit {code}")
        if code == 2:
            assert not os.path.exists(prefix + ".rec") and not os.path.exists(prefix + ".idx")
        else:
            count = int(out.split(": ")[1].split()[0])
            assert len(rio.MXIndexedRecordIO(prefix + ".idx", prefix + ".rec", "r").keys) \
                == count
        assert not [f for f in os.listdir(os.path.dirname(prefix)) if f.endswith(".tmp")]


numbers = st.one_of(st.integers(-3, 3), st.integers(-2 ** 40, 2 ** 40),
                    st.sampled_from(["abc", "", "1e3", "nan", "inf", "-inf", "0.5", "9" * 400]))
ARGS = {"--quality": numbers, "--resize": numbers, "--num-thread": numbers,
        "--max-pixels": numbers, "--color": numbers, "--chunks": numbers,
        "--train-ratio": numbers, "--test-ratio": numbers, "--seed": numbers,
        "--encoding": st.sampled_from([".jpg", ".png", ".gif", ""])}


@fuzz(60)
@given(st.dictionaries(st.sampled_from(sorted(ARGS)), st.none(), max_size=4).flatmap(
    lambda d: st.fixed_dictionaries({k: ARGS[k] for k in d})), st.booleans())
def test_im2rec_arguments(args, listing):
    with tempfile.TemporaryDirectory() as tmp:
        root, prefix = os.path.join(tmp, "img"), os.path.join(tmp, "t")
        os.makedirs(os.path.join(root, "a"))
        for i in range(3):
            with open(os.path.join(root, "a", f"{i}.png"), "wb") as f:
                f.write(GOOD_PNG)
        assert run_cli(["im2rec", "--list", "--recursive", prefix, root])[0] == 0
        argv = ["im2rec", *(["--list", "--recursive"] if listing else []), "--quiet"]
        for k, v in args.items():
            argv.append(f"{k}={v}")
        argv += [prefix, root]
        code, out, err = run_cli(argv)
        _check_exit(code, err, argv)
        event(f"{'list' if listing else 'pack'} exit {code}")
        if code == 2 and not listing:
            assert not os.path.exists(prefix + ".rec")
