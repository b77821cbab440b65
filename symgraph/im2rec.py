"""Make an image list from a folder, or pack a list into record files --
the useful subset of MXNet's tools/im2rec.py, with the same files.

    symgraph im2rec --list --recursive PREFIX ROOT    # ROOT/<class>/*.jpg -> PREFIX.lst
    symgraph im2rec --resize 256 --num-thread 2 PREFIX ROOT
                                                      # PREFIX*.lst -> .rec + .idx

A list has MXNet's layout, one image a line: ``index<TAB>label(s)<TAB>path``
(the path relative to ROOT). ``--list`` shuffles with ``--seed`` (100, as
MXNet, gives MXNet's list); ``--chunks`` and ``--train-ratio``/``--test-ratio``
split it into PREFIX_0.lst, PREFIX_train.lst, ... Packing reads every
PREFIX*.lst and writes a .rec and an .idx beside each, in list order,
under temporary names renamed into place when the list is packed: a
failed or killed pack leaves the previous files (docs/recordio.md).
"""
from __future__ import annotations

import numbers
import os
import random
import sys
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from . import recordio
from .errors import SymgraphError
from .recordio import _FLOAT32_MAX
from .util import atomic_open, short_repr, tab_lines


class Im2RecError(SymgraphError):
    """A list or an image that cannot be read or packed."""


# --resize up to JPEG's largest side; the packed image must also stay within
# --max-pixels (recordio.MAX_IMAGE_PIXELS by default)
MAX_RESIZE = 65535
QUALITY = {".jpg": (1, 100, 95), ".png": (0, 9, 9)}  # (lowest, highest, default)
MAX_THREADS = 256
# a name holding one of these (or bytes that are not UTF-8) cannot be a
# line of a .lst: the reader would split it or strip it
_UNLISTABLE = ("\t", "\n", "\r")


def _show(path: str) -> str:
    """``path`` for a message: as it is, or quoted with escapes when it holds
    a character a terminal would not print (a name made of odd bytes)."""
    return path if path.isprintable() else short_repr(path, 200)


def _listable(rel: str) -> bool:
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:  # undecodable bytes of the file name
        return False
    return rel == rel.strip() and not any(c in rel for c in _UNLISTABLE)


# -- lists ---------------------------------------------------------------------

def list_images(root: str, recursive: bool, exts) -> tuple[list[tuple], list[str]]:
    """``([(index, relative path, label)], [names left out])`` in MXNet's
    order: sorted names; with ``recursive`` each folder that holds images
    is one class, numbered in the order they are walked. Names a list line
    cannot hold (a tab, a line break, a space at either end, bytes that are
    not UTF-8) are left out."""
    if not os.path.isdir(root):
        raise Im2RecError(f"image folder {_show(root)} does not exist")
    exts = {e.lower() if e.startswith(".") else "." + e.lower() for e in exts}
    out, skipped = [], []

    def add(fpath, label):
        rel = os.path.relpath(fpath, root)
        if _listable(rel):
            out.append((len(out), rel, label))
        else:
            skipped.append(rel)

    if recursive:
        cat, seen = {}, set()
        for path, dirs, files in os.walk(root, followlinks=True):
            real = os.path.realpath(path)
            if real in seen:  # a link back up the tree: walked already
                dirs[:] = []
                continue
            seen.add(real)
            dirs.sort()
            for fname in sorted(files):
                fpath = os.path.join(path, fname)
                if os.path.splitext(fname)[1].lower() in exts and os.path.isfile(fpath):
                    add(fpath, cat.setdefault(path, len(cat)))
    else:
        for fname in sorted(os.listdir(root)):
            fpath = os.path.join(root, fname)
            if os.path.splitext(fname)[1].lower() in exts and os.path.isfile(fpath):
                add(fpath, 0)
    return [(i, rel, label) for i, (_, rel, label) in enumerate(out)], skipped


def write_list(path: str, items) -> None:
    """``index\\tlabel\\t...\\tpath`` lines, labels as ``%f`` (MXNet's);
    written whole or not at all."""
    with atomic_open(path, "w", encoding="utf-8") as f:
        for item in items:
            f.write("%d\t" % item[0] + "".join("%f\t" % x for x in item[2:]) + item[1] + "\n")


def read_list(path: str) -> list[tuple]:
    """``[(index, path, label, ...)]`` from a ``.lst`` file: indexes whole
    numbers in [0, 2**64) and each once, labels finite float32 numbers."""
    out, first = [], {}
    try:
        for where, line, fields in tab_lines(path):
            try:
                if len(fields) < 3:
                    raise ValueError
                index = int(fields[0])
                labels = [float(x) for x in fields[1:-1]]
            except ValueError:
                raise Im2RecError(f"{where}: expected 'index<TAB>label(s)<TAB>path', "
                                  f"got {short_repr(line.rstrip())}") from None
            if not 0 <= index < 2 ** 64:
                raise Im2RecError(f"{where}: index {index} is not in [0, 2**64) (the "
                                  f"record header's id)")
            bad = [x for x in labels if not abs(x) <= _FLOAT32_MAX]
            if bad:
                raise Im2RecError(f"{where}: label {bad[0]!r} is not a finite float32 number")
            if index in first:
                raise Im2RecError(f"{where}: index {index} is already the index of line "
                                  f"{first[index]}; each image needs its own index")
            first[index] = where.rsplit(":", 1)[1]
            out.append((index, fields[-1], *labels))
    except UnicodeDecodeError:
        raise Im2RecError(f"{_show(path)} is not a list (not UTF-8 text)") from None
    except OSError as err:
        raise Im2RecError(f"cannot read list {_show(path)}: {err.strerror or err}") from None
    return out


def make_lists(prefix: str, root: str, recursive=False, exts=(".jpeg", ".jpg", ".png"),
               chunks=1, train_ratio=1.0, test_ratio=0.0, shuffle=True,
               seed=100) -> tuple[list[str], list[str]]:
    """Writes the ``.lst`` files of ``root`` as MXNet's ``im2rec --list``;
    returns their paths and the names left out (``list_images``)."""
    if chunks < 1:
        raise Im2RecError(f"--chunks must be at least 1, got {chunks}")
    if not (0 <= train_ratio <= 1 and 0 <= test_ratio <= 1 and train_ratio + test_ratio <= 1):
        raise Im2RecError(f"--train-ratio {train_ratio} and --test-ratio {test_ratio} must "
                          f"lie in [0, 1] and sum to at most 1")
    items, skipped = list_images(root, recursive, exts)
    if not items:
        raise Im2RecError(f"no images ({', '.join(sorted(exts))}) in {_show(root)}"
                          + (f" ({len(skipped)} left out: their names cannot be listed)"
                             if skipped else ""))
    if chunks > len(items):
        raise Im2RecError(f"--chunks {chunks} is more than the {len(items)} images")
    if shuffle:
        random.Random(seed).shuffle(items)  # random.seed(100); random.shuffle: MXNet's
    n = len(items)
    size = (n + chunks - 1) // chunks
    written = []
    for i in range(chunks):
        chunk = items[i * size:(i + 1) * size]
        tag = f"_{i}" if chunks > 1 else ""
        sep, sep_test = int(size * train_ratio), int(size * test_ratio)
        parts = []
        if train_ratio == 1.0:
            parts.append(("", chunk))
        else:
            if test_ratio:
                parts.append(("_test", chunk[:sep_test]))
            if train_ratio + test_ratio < 1.0:
                parts.append(("_val", chunk[sep_test + sep:]))
            parts.append(("_train", chunk[sep_test:sep_test + sep]))
        for suffix, part in parts:
            path = f"{prefix}{tag}{suffix}.lst"
            write_list(path, part)
            written.append(path)
    return written, skipped


# -- packing -------------------------------------------------------------------

def check_options(resize=0, quality=None, encoding=".jpg", color=1, num_thread=1,
                  max_pixels=None, **_) -> int:
    """Refuses packing options out of their ranges (docs/cli.md); returns
    the quality to use (``None``: 95 for JPEG, 9 for PNG, as MXNet's 95
    clamped by OpenCV)."""
    if encoding not in QUALITY:
        raise Im2RecError(f"--encoding must be .jpg or .png, got {short_repr(encoding)}")
    lo, hi, default = QUALITY[encoding]
    if quality is not None and not (isinstance(quality, numbers.Integral)
                                    and lo <= quality <= hi):
        what = "JPEG quality" if encoding == ".jpg" else "PNG compression level"
        raise Im2RecError(f"--quality for {encoding} is the {what}, {lo} to {hi}; got "
                          f"{short_repr(quality)}")
    if not (isinstance(resize, numbers.Integral) and 0 <= resize <= MAX_RESIZE):
        raise Im2RecError(f"--resize must be 0 (keep the size) or a short side of 1 to "
                          f"{MAX_RESIZE} pixels, got {short_repr(resize)}")
    if color not in (-1, 0, 1):
        raise Im2RecError(f"--color must be -1, 0 or 1, got {short_repr(color)}")
    if not (isinstance(num_thread, numbers.Integral) and 1 <= num_thread <= MAX_THREADS):
        raise Im2RecError(f"--num-thread must be between 1 and {MAX_THREADS}, got "
                          f"{short_repr(num_thread)}")
    if max_pixels is not None and not (isinstance(max_pixels, numbers.Integral)
                                       and max_pixels >= 1):
        raise Im2RecError(f"--max-pixels must be a positive whole number, got "
                          f"{short_repr(max_pixels)}")
    return default if quality is None else int(quality)


def encode_image(path: str, item, resize=0, center_crop=False, quality=None, color=1,
                 encoding=".jpg", pack_label=False, pass_through=False,
                 max_pixels=None) -> bytes:
    """One list item as a record: its image read, cropped to a square,
    its short side resized, and encoded (or its bytes as they are). An
    image (as read, or resized) of more than ``max_pixels`` pixels
    (``recordio.MAX_IMAGE_PIXELS`` by default) is refused."""
    label = list(item[2:]) if len(item) > 3 and pack_label else item[2]
    if quality is None:
        quality = QUALITY.get(encoding, (0, 0, 95))[2]
    try:
        header = recordio.IRHeader(0, label, item[0], 0)
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError as err:
            raise Im2RecError(f"cannot read image {_show(path)}: {err.strerror or err}") \
                from None
        if pass_through:
            return recordio.pack(header, raw)
        img = recordio.imdecode(raw, iscolor=color, to_rgb=False,  # BGR, as cv2.imread
                                max_pixels=max_pixels)
        h, w = img.shape[:2]
        if center_crop:
            if h > w:
                m = (h - w) // 2
                img = img[m:m + w]
            else:
                m = (w - h) // 2
                img = img[:, m:m + h]
            h, w = img.shape[:2]
        if resize:
            size = (resize, h * resize // w) if h > w else (w * resize // h, resize)  # (w, h)
            limit = recordio.MAX_IMAGE_PIXELS if max_pixels is None else max_pixels
            if size[0] * size[1] > limit or (encoding == ".jpg" and max(size) > MAX_RESIZE):
                raise Im2RecError(f"{_show(path)}: --resize {resize} makes this {w}x{h} "
                                  f"image {size[0]}x{size[1]}, more than the limit of "
                                  f"{limit:,} pixels (--max-pixels) or {MAX_RESIZE} a side")
            img = resize_image(img, size)
        return recordio.pack_img(header, img, quality=quality, img_fmt=encoding)
    except recordio.ImageSizeError as err:
        raise Im2RecError(f"{_show(path)}: {err.width}x{err.height} pixels, more than the "
                          f"limit of {err.limit:,} (--max-pixels)") from None
    except recordio.RecordIOError as err:
        raise Im2RecError(f"{_show(path)}: {err}") from None


def resize_image(img: np.ndarray, size) -> np.ndarray:
    """``img`` (HxW or HxWxC uint8) resized to ``size = (width, height)``,
    bilinear (Pillow's, which also filters when shrinking)."""
    from PIL import Image
    if (img.shape[1], img.shape[0]) == tuple(size):
        return img
    return np.asarray(Image.fromarray(np.ascontiguousarray(img)).resize(
        tuple(int(s) for s in size), Image.BILINEAR))


def _in_order(pool, fn, items, window: int):
    """``(item, fn(item))`` in list order, at most ``window`` items handed
    to ``pool`` ahead: a failure stops the pack without encoding the rest
    of a long list first."""
    pending = deque()
    try:
        for item in items:
            pending.append((item, pool.submit(fn, item)))
            if len(pending) >= window:
                done, fut = pending.popleft()
                yield done, fut.result()
        while pending:
            done, fut = pending.popleft()
            yield done, fut.result()
    finally:
        for _, fut in pending:
            fut.cancel()


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def pack_list(lst: str, root: str, num_thread=1, progress=True, skip_bad=False,
              detection=False, **options) -> tuple[int, list[str]]:
    """Packs the images of ``lst`` into ``.rec`` + ``.idx`` beside it, in
    list order; returns ``(records written, [skipped image: reason])``.
    Both files are written under temporary names and renamed into place
    when the pack is done: a failure (or a kill) leaves the previous pair,
    or for a moment the previous ``.rec`` alone, never a part of a pack.
    ``detection=True`` checks that every line holds a detection label
    (``header_width, object_width, objects...``: docs/detection.md) before
    anything is written, and packs it whole (``pack_label``). The progress
    bar shows only on a terminal."""
    options["quality"] = check_options(num_thread=num_thread, **options)
    items = read_list(lst)
    if detection:
        from .train.detection_data import parse_det_label
        for item in items:
            parse_det_label(item[2:], f"{lst}: image {item[0]} ({item[1]})", Im2RecError)
        options["pack_label"] = True
    base = os.path.splitext(lst)[0]
    skipped = []

    def encode(item):
        path = os.path.join(root, item[1])
        try:
            return encode_image(path, item, **options)
        except Im2RecError as err:
            if not skip_bad:
                raise
            return err

    from tqdm import tqdm
    count = 0
    threads = max(1, int(num_thread))
    with atomic_open(base + ".idx", "w", encoding="utf-8") as fidx, \
            atomic_open(base + ".rec", "wb") as frec, \
            ThreadPoolExecutor(threads) as pool, \
            tqdm(total=len(items), desc=os.path.basename(base + ".rec"), unit="img",
                 disable=not (progress and _isatty(sys.stderr)), file=sys.stderr) as bar:
        # decode and encode release the GIL; records are written in list order
        for item, rec in _in_order(pool, encode, items, 4 * threads):
            if isinstance(rec, Im2RecError):
                skipped.append(str(rec))
            else:
                fidx.write(f"{int(item[0])}\t{frec.tell()}\n")
                frec.write(recordio.encode(rec))
                count += 1
            bar.update(1)
        # the .rec is renamed first, the .idx after it: drop the old .idx
        # now, so that no moment pairs a new .rec with the old .idx
        try:
            os.unlink(base + ".idx")
        except FileNotFoundError:
            pass
        except OSError as err:
            raise Im2RecError(f"cannot replace {_show(base)}.idx: {err.strerror}") from None
    return count, skipped


def add_arguments(p) -> None:
    p.add_argument("prefix", help="prefix of the .lst/.rec/.idx files (a folder and a "
                                  "name start)")
    p.add_argument("root", help="folder of the images (paths in the lists are relative "
                                "to it)")
    g = p.add_argument_group("making lists")
    g.add_argument("--list", action="store_true",
                   help="write PREFIX.lst from the images under ROOT instead of packing")
    g.add_argument("--exts", nargs="+", default=[".jpeg", ".jpg", ".png"],
                   help="image file extensions (default: .jpeg .jpg .png)")
    g.add_argument("--chunks", type=int, default=1, help="split into this many lists")
    g.add_argument("--train-ratio", type=float, default=1.0,
                   help="share of the images in PREFIX_train.lst (default 1: one list)")
    g.add_argument("--test-ratio", type=float, default=0.0,
                   help="share of the images in PREFIX_test.lst")
    g.add_argument("--recursive", action="store_true",
                   help="walk subfolders, one label per folder (else ROOT only, label 0)")
    g.add_argument("--no-shuffle", dest="shuffle", action="store_false",
                   help="keep the sorted order")
    g.add_argument("--seed", type=int, default=100,
                   help="shuffle seed (default 100: MXNet's order)")
    g = p.add_argument_group("packing")
    g.add_argument("--pass-through", action="store_true",
                   help="pack the image files' bytes as they are")
    g.add_argument("--resize", type=int, default=0,
                   help=f"resize the short side to this many pixels, 1-{MAX_RESIZE} "
                        f"(default 0: keep)")
    g.add_argument("--center-crop", action="store_true",
                   help="crop the centre square first")
    g.add_argument("--quality", type=int, default=None,
                   help="JPEG quality 1-100 (default 95), or PNG compression 0-9 "
                        "(default 9)")
    g.add_argument("--num-thread", type=int, default=1,
                   help=f"threads that decode and encode, 1-{MAX_THREADS} (order is "
                        f"kept)")
    g.add_argument("--color", type=int, default=1, choices=[-1, 0, 1],
                   help="1 colour, 0 grayscale, -1 as stored (default 1)")
    g.add_argument("--encoding", default=".jpg", choices=[".jpg", ".png"],
                   help="format of the packed images (default .jpg)")
    g.add_argument("--pack-label", action="store_true",
                   help="pack every label of a multi-label list (else the first)")
    g.add_argument("--skip-bad", action="store_true",
                   help="skip and count images that cannot be read (else stop there)")
    g.add_argument("--max-pixels", type=int, default=None,
                   help=f"refuse images of more pixels than this, read or resized "
                        f"(default {recordio.MAX_IMAGE_PIXELS:,})")
    g.add_argument("--quiet", action="store_true",
                   help="no progress bar (there is none unless stderr is a terminal)")


def run(args) -> int:
    prefix, root = os.path.abspath(args.prefix), os.path.abspath(args.root)
    if args.list:
        written, skipped = make_lists(prefix, root, args.recursive, args.exts, args.chunks,
                                      args.train_ratio, args.test_ratio, args.shuffle,
                                      args.seed)
        for path in written:
            print(f"wrote {_show(path)}")
        if skipped:
            print(f"left out {len(skipped)} file(s) whose names a list cannot hold (a tab, "
                  f"a line break, a space at either end, or bytes that are not UTF-8); "
                  f"first: {short_repr(skipped[0], 200)}")
        return 0
    options = dict(resize=args.resize, center_crop=args.center_crop, quality=args.quality,
                   color=args.color, encoding=args.encoding, pack_label=args.pack_label,
                   pass_through=args.pass_through, max_pixels=args.max_pixels)
    check_options(num_thread=args.num_thread, **options)
    if not os.path.isdir(root):
        raise Im2RecError(f"image folder {_show(root)} does not exist")
    folder = prefix if os.path.isdir(prefix) else os.path.dirname(prefix)
    if os.path.isdir(prefix):
        prefix = prefix.rstrip(os.sep) + os.sep
    try:
        names = os.listdir(folder)
    except OSError:
        names = []
    lists = sorted(os.path.join(folder, f) for f in names
                   if f.endswith(".lst") and os.path.join(folder, f).startswith(prefix)
                   and os.path.isfile(os.path.join(folder, f)))
    if not lists:
        raise Im2RecError(f"no list {_show(prefix)}*.lst to pack; make one with --list")
    for lst in lists:
        count, skipped = pack_list(lst, root, num_thread=args.num_thread,
                                   progress=not args.quiet, skip_bad=args.skip_bad, **options)
        base = _show(os.path.splitext(lst)[0])
        print(f"wrote {base}.rec and {base}.idx: {count} images"
              + (f", skipped {len(skipped)} (first: {skipped[0]})" if skipped else ""))
    return 0
