"""Packed record files, byte-compatible with MXNet's RecordIO.

    w = sg.recordio.MXIndexedRecordIO('train.idx', 'train.rec', 'w')
    for i, (img, label) in enumerate(samples):
        header = sg.recordio.IRHeader(0, label, i, 0)
        w.write_idx(i, sg.recordio.pack_img(header, img, quality=95))
    w.close()

    r = sg.recordio.MXIndexedRecordIO('train.idx', 'train.rec', 'r')
    header, img = sg.recordio.unpack_img(r.read_idx(3))   # HxWx3 uint8, BGR

The format is dmlc-core's (recordio.h): each record is
``uint32 magic 0xced7230a | uint32 lrec | data | zero padding to 4 bytes``,
little-endian, with ``lrec = cflag << 29 | length``. A payload holding the
magic word at a 4-byte-aligned offset is written as several parts (cflag 1
start, 2 middle, 3 end) with that word left out, and joined again, word
restored, on reading -- so a reader that finds the magic at a record start
is never fooled by the payload. ``.idx`` files are text lines
``key\\toffset``. Files MXNet wrote read back identically, and what this
module writes is byte for byte what MXNet writes (``pack_img`` aside: its
JPEG bytes come from libjpeg-turbo through simplejpeg, not OpenCV).

Reads go through ``mmap``; a truncated or corrupt record raises
``RecordIOError`` naming the file and the byte offset. Images are sized
from their header before they are decoded: one of more than
``MAX_IMAGE_PIXELS`` pixels is refused, never allocated.
"""
from __future__ import annotations

import io
import mmap
import numbers
import os
import re
import struct
import threading
from collections import namedtuple

import numpy as np

from .errors import SymgraphError
from .util import short_repr

MAGIC = 0xCED7230A
_MAGIC_BYTES = struct.pack("<I", MAGIC)
_HEAD = struct.Struct("<II")
_MAX_LEN = 1 << 29  # the length field has 29 bits

# MXNet's IRHeader: struct 'IfQQ' (flag, label, id, id2); 24 bytes, no padding
_IR_FORMAT = "<IfQQ"
_IR_SIZE = struct.calcsize(_IR_FORMAT)
# the most pixels ``imdecode`` decodes (an image's header says how many it
# has): 100 megapixels, 10000x10000, 300 MB as RGB. A hostile 65-byte PNG
# or JPEG header can claim 65000x65000 (12 GiB); such images are refused
# before anything is allocated. ``max_pixels=`` or this setting raises it.
MAX_IMAGE_PIXELS = 100_000_000
# the formats Pillow may open for imdecode (JPEG goes to libjpeg-turbo): what
# OpenCV's imdecode reads, not Pillow's every plugin (EPS runs Ghostscript)
PILLOW_FORMATS = ("PNG", "JPEG", "BMP", "GIF", "TIFF", "WEBP", "PPM")
_FLOAT32_MAX = float(np.finfo(np.float32).max)

IRHeader = namedtuple("HEADER", ["flag", "label", "id", "id2"])
IRHeader.__doc__ = """Header of an image record: ``flag`` (0, or the number of
float32 labels that follow the header), ``label`` (a float, or an array
when ``flag > 0``), ``id`` and ``id2`` (uint64 each)."""


class RecordIOError(SymgraphError):
    """A record file that cannot be read (missing, truncated, corrupt) or a
    record that cannot be written."""


def _split(raw: bytes) -> list[tuple[int, bytes]]:
    """The parts ``(cflag, data)`` dmlc's WriteRecord writes for ``raw``:
    one part (cflag 0), or a split at every 4-byte-aligned magic word."""
    limit = len(raw) >> 2 << 2  # dmlc checks whole aligned words only
    cuts = []
    i = raw.find(_MAGIC_BYTES, 0, limit)
    while i != -1:
        if i % 4 == 0:
            cuts.append(i)
            i = raw.find(_MAGIC_BYTES, i + 4, limit)
        else:
            i = raw.find(_MAGIC_BYTES, i + 1, limit)
    parts, start = [], 0
    for cut in cuts:
        parts.append((1 if start == 0 else 2, raw[start:cut]))
        start = cut + 4
    parts.append((3 if cuts else 0, raw[start:]))
    return parts


def encode(buf) -> bytes:
    """The bytes dmlc-core writes for one record holding ``buf``."""
    buf = bytes(buf)
    if len(buf) >= _MAX_LEN:
        raise RecordIOError(f"a record holds less than 2**29 bytes; this one has {len(buf)}")
    out = []
    for cflag, data in _split(buf):
        out.append(_HEAD.pack(MAGIC, cflag << 29 | len(data)))
        out.append(data)
    pad = -len(buf) % 4  # only the last part can end unaligned
    if pad:
        out.append(b"\0" * pad)
    return b"".join(out)


def _part(mm, pos: int, start: int, first: bool, name: str) -> tuple[int, int, int]:
    """``(cflag, length, next offset)`` of the record part whose header is at
    ``pos`` (``start``: where its record began, for messages), checked: a
    header, the magic word, a cflag that fits, the whole payload."""
    size = len(mm)
    if pos + 8 > size:
        raise RecordIOError(f"{name}: truncated record at byte offset {start}: "
                            f"{size - pos} bytes left where an 8-byte header starts at {pos}")
    magic, lrec = _HEAD.unpack_from(mm, pos)
    if magic != MAGIC:
        raise RecordIOError(f"{name}: no record at byte offset {pos}: magic word is "
                            f"{magic:#010x}, expected {MAGIC:#010x}")
    cflag, length = lrec >> 29, lrec & (_MAX_LEN - 1)
    if cflag not in ((0, 1) if first else (2, 3)):
        what = "a continuation part" if first else "a new record inside a split record"
        raise RecordIOError(f"{name}: corrupt record at byte offset {start}: found "
                            f"{what} (cflag {cflag}) at byte offset {pos}")
    body = pos + 8
    if body + length > size:
        raise RecordIOError(f"{name}: truncated record at byte offset {start}: "
                            f"the part at {pos} holds {length} bytes, the file ends "
                            f"{size - body} bytes after its header")
    return cflag, length, min(body + ((length + 3) >> 2 << 2), size)


def read_record(mm, pos: int, name: str = "<buffer>") -> tuple[bytes, int] | None:
    """The record starting at byte ``pos`` of ``mm`` (bytes, mmap) and the
    offset of the next one; ``None`` at the end. Stateless, so threads can
    share one mmap."""
    if pos < 0:
        raise RecordIOError(f"{name}: byte offset {pos} is negative")
    if pos >= len(mm):
        return None
    chunks = []
    start, first = pos, True
    while True:
        cflag, length, end = _part(mm, pos, start, first, name)
        chunks.append(mm[pos + 8:pos + 8 + length])
        pos = end
        if cflag in (0, 3):
            break
        chunks.append(_MAGIC_BYTES)
        first = False
    return (chunks[0] if len(chunks) == 1 else b"".join(chunks)), pos


def scan_offsets(mm, name: str = "<buffer>") -> list[int]:
    """Byte offset of every record in ``mm``, walking headers only (for
    files without an ``.idx``); corrupt files raise as ``read_record``."""
    offsets = []
    pos = 0
    while pos < len(mm):
        offsets.append(pos)
        first = True
        while True:
            cflag, _, pos = _part(mm, pos, offsets[-1], first, name)
            if cflag in (0, 3):
                break
            first = False
    return offsets


def open_mmap(path):
    """A read-only mmap of ``path`` (``b''`` for an empty file, which mmap
    refuses); a missing file is a RecordIOError naming it."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                return b""
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except FileNotFoundError:
        raise RecordIOError(f"cannot read record file {path}: no such file") from None
    except IsADirectoryError:
        raise RecordIOError(f"cannot read record file {path}: it is a folder") from None
    except (OSError, ValueError) as err:  # no permission; a file mmap cannot map
        raise RecordIOError(f"cannot read record file {path}: "
                            f"{getattr(err, 'strerror', None) or err}") from None


class MXRecordIO:
    """Sequential reader (``flag='r'``) or writer (``flag='w'``) of a record
    file, as ``mx.recordio.MXRecordIO``."""

    def __init__(self, uri, flag: str):
        self.uri = os.fspath(uri)
        if flag not in ("r", "w"):
            raise RecordIOError(f"MXRecordIO: flag must be 'r' or 'w', got {flag!r}")
        self.flag = flag
        self.is_open = False
        self.open()

    def open(self) -> None:
        if self.flag == "w":
            try:
                self._file = open(self.uri, "wb")
            except OSError as err:
                raise RecordIOError(f"cannot write record file {self.uri}: "
                                    f"{err.strerror}") from None
            self.writable = True
        else:
            self._mm = open_mmap(self.uri)
            self._pos = 0
            self.writable = False
        self.is_open = True

    def close(self) -> None:
        if not self.is_open:
            return
        if self.writable:
            self._file.close()
        elif isinstance(self._mm, mmap.mmap):
            self._mm.close()
        self.is_open = False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def reset(self) -> None:
        """Back to the start (a writer truncates the file, as MXNet's)."""
        self.close()
        self.open()

    def _check(self, writing: bool) -> None:
        if not self.is_open:
            raise RecordIOError(f"{self.uri}: the record file is closed")
        if writing != self.writable:
            raise RecordIOError(f"{self.uri}: opened with flag {self.flag!r}, cannot "
                                f"{'write' if writing else 'read'}")

    def write(self, buf) -> None:
        """Appends one record (bytes-like)."""
        self._check(True)
        self._file.write(encode(bytes(buf)))

    def read(self) -> bytes | None:
        """The next record, or ``None`` at the end of the file."""
        self._check(False)
        got = read_record(self._mm, self._pos, self.uri)
        if got is None:
            return None
        data, self._pos = got
        return data

    def tell(self) -> int:
        """Byte offset of the next record read or written."""
        if not self.is_open:
            raise RecordIOError(f"{self.uri}: the record file is closed")
        return self._file.tell() if self.writable else self._pos

    def seek(self, pos: int) -> None:
        """Positions a reader at byte ``pos`` (a record start, from ``.idx``)."""
        self._check(False)
        if not 0 <= pos <= len(self._mm):
            raise RecordIOError(f"{self.uri}: offset {pos} is outside the file "
                                f"({len(self._mm)} bytes)")
        self._pos = int(pos)

    def __iter__(self):
        """Every record from the current position on."""
        while True:
            rec = self.read()
            if rec is None:
                return
            yield rec


class MXIndexedRecordIO(MXRecordIO):
    """A record file with an ``.idx`` of ``key\\toffset`` lines for random
    access, as ``mx.recordio.MXIndexedRecordIO``."""

    def __init__(self, idx_path, uri, flag: str, key_type=int):
        self.idx_path = os.fspath(idx_path)
        self.idx = {}
        self.keys = []
        self.key_type = key_type
        self.fidx = None
        super().__init__(uri, flag)

    def open(self) -> None:
        super().open()
        self.idx = {}
        self.keys = []
        if self.writable:
            try:
                self.fidx = open(self.idx_path, "w")
            except OSError as err:
                raise RecordIOError(f"cannot write index file {self.idx_path}: "
                                    f"{err.strerror}") from None
            return
        self.idx, self.keys = read_index(self.idx_path, self.key_type)
        size = len(self._mm)
        for key in self.keys:
            if not 0 <= self.idx[key] < max(size, 1):
                raise RecordIOError(f"{self.idx_path}: key {key!r} points at byte offset "
                                    f"{self.idx[key]}, past the end of {self.uri} "
                                    f"({size} bytes)")

    def close(self) -> None:
        if not self.is_open:
            return
        super().close()
        if self.fidx is not None:
            self.fidx.close()
            self.fidx = None

    def seek(self, idx) -> None:
        """Positions the reader at the record with key ``idx``."""
        self._check(False)
        try:
            pos = self.idx[idx]
        except KeyError:
            raise RecordIOError(f"{self.idx_path}: no record with key {idx!r}") from None
        super().seek(pos)

    def tell(self) -> int:
        return super().tell()

    def read_idx(self, idx) -> bytes:
        """The record with key ``idx``."""
        self.seek(idx)
        return self.read()

    def write_idx(self, idx, buf) -> None:
        """Appends a record and its ``key\\toffset`` index line."""
        key = self.key_type(idx)
        pos = self.tell()
        self.write(buf)
        self.fidx.write(f"{key}\t{pos}\n")
        self.idx[key] = pos
        self.keys.append(key)


def read_index(path, key_type=int) -> tuple[dict, list]:
    """``({key: offset}, [keys in file order])`` from an ``.idx`` file."""
    path = os.fspath(path)
    idx, keys = {}, []
    try:
        with open(path) as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                fields = line.strip().split("\t")
                try:
                    key, pos = key_type(fields[0]), int(fields[1])
                except (ValueError, IndexError):
                    raise RecordIOError(f"{path}:{lineno}: expected 'key<TAB>offset', got "
                                        f"{short_repr(line.rstrip())}") from None
                if pos < 0:
                    raise RecordIOError(f"{path}:{lineno}: offset {pos} is negative")
                if key not in idx:
                    keys.append(key)
                idx[key] = pos
    except FileNotFoundError:
        raise RecordIOError(f"cannot read index file {path}: no such file") from None
    except UnicodeDecodeError:
        raise RecordIOError(f"{path} is not an index file (not text: expected "
                            f"'key<TAB>offset' lines)") from None
    except OSError as err:  # a folder, no permission
        raise RecordIOError(f"cannot read index file {path}: {err.strerror}") from None
    return idx, keys


# -- image records -------------------------------------------------------------

def pack(header, s: bytes) -> bytes:
    """An IRHeader and a payload as one record's bytes. A scalar label goes
    in the header (``flag`` 0); an array of labels follows it as float32
    (``flag`` = their number, header label 0)."""
    header = IRHeader(*header)
    try:
        label = np.asarray(header.label, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        raise RecordIOError(f"cannot pack label {short_repr(header.label)}: not a number "
                            f"or a list of numbers") from None
    big = np.abs(label[np.isfinite(label)])
    if big.size and big.max() > _FLOAT32_MAX:
        raise RecordIOError(f"cannot pack label {big.max():g}: beyond float32's range "
                            f"(+-{_FLOAT32_MAX:.4g})")
    if isinstance(header.label, numbers.Number):
        header = header._replace(flag=0)
    else:
        label = label.astype(np.float32)
        header = header._replace(flag=label.size, label=0)
        s = label.tobytes() + bytes(s)
    try:
        return struct.pack(_IR_FORMAT, *header) + bytes(s)
    except (struct.error, OverflowError) as err:
        raise RecordIOError(f"cannot pack header {short_repr(tuple(header))}: {err}") \
            from None


def unpack(s: bytes) -> tuple[IRHeader, bytes]:
    """``(header, payload)`` of a record made by ``pack``."""
    if len(s) < _IR_SIZE:
        raise RecordIOError(f"record of {len(s)} bytes is shorter than an image record "
                            f"header ({_IR_SIZE} bytes)")
    header = IRHeader(*struct.unpack_from(_IR_FORMAT, s))
    s = s[_IR_SIZE:]
    if header.flag > 0:
        if len(s) < 4 * header.flag:
            raise RecordIOError(f"record header announces {header.flag} labels, the record "
                                f"holds {len(s)} bytes after its header")
        header = header._replace(label=np.frombuffer(s, np.float32, header.flag))
        s = s[header.flag * 4:]
    return header, s


def imdecode(buf, iscolor: int = 1, to_rgb: bool = True, max_pixels: int | None = None
             ) -> np.ndarray:
    """JPEG or PNG (or BMP, GIF...) bytes -> uint8 array: HxWx3 (RGB, or BGR with
    ``to_rgb=False``) for ``iscolor=1``, HxW for ``iscolor=0``; ``-1``
    keeps the file's channels, as OpenCV's flags (IMREAD_UNCHANGED): HxW
    for a grey image, HxWx4 (RGBA, or BGRA) for one with alpha. JPEGs decode with
    libjpeg-turbo (simplejpeg; the GIL is released), others with Pillow
    (``PILLOW_FORMATS`` only). An image whose header claims more than
    ``max_pixels`` pixels (default ``MAX_IMAGE_PIXELS``, read at each call)
    is refused before it is decoded. A corrupt image raises
    ``RecordIOError``."""
    buf = bytes(buf) if not isinstance(buf, (bytes, bytearray, memoryview)) else buf
    n = len(buf)
    limit = MAX_IMAGE_PIXELS if max_pixels is None else int(max_pixels)
    if bytes(buf[:3]) == b"\xff\xd8\xff":
        import simplejpeg
        try:
            h, w, space, _ = simplejpeg.decode_jpeg_header(buf)
            _check_size("JPEG", n, w, h, limit)
            if iscolor == 0 or (iscolor == -1 and space == "Gray"):
                return simplejpeg.decode_jpeg(buf, colorspace="GRAY")[:, :, 0]
            return simplejpeg.decode_jpeg(buf, colorspace="RGB" if to_rgb else "BGR")
        except (RecordIOError, MemoryError):
            raise
        except Exception as err:  # noqa: BLE001 -- hostile bytes: any decoder failure
            raise RecordIOError(f"cannot decode JPEG ({n} bytes): {_reason(err)}") from None
    if bytes(buf[:8]) == b"\x89PNG\r\n\x1a\n" and bytes(buf[12:16]) == b"IHDR" and n >= 24:
        w, h = struct.unpack(">II", bytes(buf[16:24]))  # before Pillow reads anything
        _check_size("PNG", n, w, h, limit)
    from PIL import UnidentifiedImageError
    try:
        im = _pil_open(buf)
    except MemoryError:
        raise
    except UnidentifiedImageError:
        raise RecordIOError(f"cannot decode image ({n} bytes): not an image of a known "
                            f"format ({', '.join(PILLOW_FORMATS)})") from None
    except Exception as err:  # noqa: BLE001
        raise RecordIOError(f"cannot decode image ({n} bytes): {_reason(err)}") from None
    with im:
        what = im.format or "image"
        _check_size(what, n, im.size[0], im.size[1], limit)
        try:
            if iscolor == 0 or (iscolor == -1 and im.mode in ("L", "I;16", "1")):
                return np.asarray(im.convert("L"))
            if iscolor == -1 and _has_alpha(im):  # OpenCV's IMREAD_UNCHANGED keeps it
                arr = np.asarray(im.convert("RGBA"))
                return arr if to_rgb else arr[:, :, [2, 1, 0, 3]].copy()
            arr = np.asarray(im.convert("RGB"))
        except MemoryError:
            raise
        except Exception as err:  # noqa: BLE001
            raise RecordIOError(f"cannot decode {what} ({n} bytes): {_reason(err)}") from None
    return arr if to_rgb else arr[:, :, ::-1].copy()


_PIL_LOCK = threading.Lock()


def _pil_open(buf):
    """Pillow's lazy open (the header only), its decompression-bomb check
    (a warning past 89M pixels, an error past 179M) off for the moment:
    our limit replaces it, checked on the size the header gives. The lock
    keeps our threads from restoring each other's setting."""
    from PIL import Image
    with _PIL_LOCK:
        saved = Image.MAX_IMAGE_PIXELS
        Image.MAX_IMAGE_PIXELS = None
        try:
            return Image.open(io.BytesIO(buf), formats=PILLOW_FORMATS)
        finally:
            Image.MAX_IMAGE_PIXELS = saved


_FUNCTION = re.compile(r"^\w+\(\):\s*")  # libjpeg-turbo's 'tjDecompress2(): '


def _reason(err: BaseException) -> str:
    """A decoder's complaint on one line, without its function's name."""
    return _FUNCTION.sub("", " ".join(str(err).split())) or type(err).__name__


class ImageSizeError(RecordIOError):
    """An image whose header claims more pixels than ``imdecode`` decodes;
    ``width``, ``height`` and ``limit`` say how many."""

    def __init__(self, message: str, width: int, height: int, limit: int):
        super().__init__(message)
        self.width, self.height, self.limit = width, height, limit


def _check_size(what: str, n: int, w: int, h: int, limit: int) -> None:
    if w * h > limit:
        raise ImageSizeError(f"cannot decode {what} ({n} bytes): its header says {w}x{h} "
                             f"pixels ({w * h:,}), more than the limit of {limit:,} "
                             f"(MAX_IMAGE_PIXELS, docs/recordio.md)", w, h, limit)


def _has_alpha(im) -> bool:
    """Whether OpenCV would read ``im`` with an alpha channel: an alpha
    band, or a colour (or palette) image with a transparent colour."""
    if im.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        return True
    return im.mode in ("RGB", "P") and "transparency" in im.info


def imencode(img: np.ndarray, img_fmt: str = ".jpg", quality: int = 95,
             bgr: bool = True) -> bytes:
    """uint8 HxWx3 (BGR by default, as OpenCV), HxWx4 (BGRA) or HxW ->
    ``.jpg`` (quality 1-100; an alpha channel is dropped, as OpenCV's JPEG
    encoder does) or ``.png`` (quality = compression level 0-9; alpha
    kept) bytes."""
    img = np.asarray(img)
    if img.dtype != np.uint8 or img.ndim not in (2, 3) or \
            (img.ndim == 3 and img.shape[2] not in (1, 3, 4)):
        raise RecordIOError(f"pack_img takes a uint8 HxW, HxWx3 or HxWx4 image, got "
                            f"{img.dtype} {img.shape}")
    fmt = img_fmt.lower()
    if fmt in (".jpg", ".jpeg"):
        import simplejpeg
        if img.ndim == 2:
            img = img[:, :, None]
        if img.shape[2] == 4:  # JPEG has no alpha: OpenCV's encoder drops it too
            img = img[:, :, :3]
        colorspace = "GRAY" if img.shape[2] == 1 else ("BGR" if bgr else "RGB")
        try:
            return simplejpeg.encode_jpeg(np.ascontiguousarray(img), quality=int(quality),
                                          colorspace=colorspace, colorsubsampling="420")
        except (ValueError, RuntimeError) as err:  # a side over 65535, a bad quality
            raise RecordIOError(f"cannot encode a {img.shape[1]}x{img.shape[0]} image as "
                                f"JPEG: {_reason(err)}") from None
    if fmt == ".png":
        from PIL import Image
        if img.ndim == 3 and img.shape[2] == 1:
            img = img[:, :, 0]
        if img.ndim == 3 and bgr:  # BGR(A) -> RGB(A)
            img = img[:, :, [2, 1, 0, 3][:img.shape[2]]]
        out = io.BytesIO()
        Image.fromarray(np.ascontiguousarray(img)).save(
            out, format="PNG", compress_level=min(max(int(quality), 0), 9))
        return out.getvalue()
    raise RecordIOError(f"pack_img: unknown image format {img_fmt!r}; use .jpg or .png")


def pack_img(header, img: np.ndarray, quality: int = 95, img_fmt: str = ".jpg") -> bytes:
    """An IRHeader and an image (HxWx3 uint8 in OpenCV's BGR order, as
    MXNet) as one record's bytes, the image encoded as ``img_fmt``."""
    return pack(header, imencode(img, img_fmt, quality))


def unpack_img(s: bytes, iscolor: int = -1, max_pixels: int | None = None
               ) -> tuple[IRHeader, np.ndarray]:
    """``(header, image)`` of a record made by ``pack_img``; the image is
    BGR, as OpenCV's ``imdecode`` gives it to MXNet. ``iscolor`` is
    OpenCV's flag: 1 colour (HxWx3), 0 grey (HxW), -1 (the default) the
    file's own channels, an alpha channel kept (HxWx4, BGRA). ``max_pixels``
    as ``imdecode``'s."""
    header, s = unpack(s)
    return header, imdecode(s, iscolor, to_rgb=False, max_pixels=max_pixels)
