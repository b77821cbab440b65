"""Make an image list from a folder, or pack a list into record files --
the useful subset of MXNet's tools/im2rec.py, with the same files.

    symgraph im2rec --list --recursive PREFIX ROOT    # ROOT/<class>/*.jpg -> PREFIX.lst
    symgraph im2rec --resize 256 --num-thread 2 PREFIX ROOT
                                                      # PREFIX*.lst -> .rec + .idx

A list has MXNet's layout, one image a line: ``index<TAB>label(s)<TAB>path``
(the path relative to ROOT). ``--list`` shuffles with ``--seed`` (100, as
MXNet, gives MXNet's list); ``--chunks`` and ``--train-ratio``/``--test-ratio``
split it into PREFIX_0.lst, PREFIX_train.lst, ... Packing reads every
PREFIX*.lst and writes a .rec and an .idx beside each, in list order.
"""
from __future__ import annotations

import os
import random
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from . import recordio
from .errors import SymgraphError
from .util import tab_lines


class Im2RecError(SymgraphError):
    """A list or an image that cannot be read or packed."""


# -- lists ---------------------------------------------------------------------

def list_images(root: str, recursive: bool, exts) -> list[tuple]:
    """``[(index, relative path, label)]`` in MXNet's order: sorted names;
    with ``recursive`` each folder that holds images is one class, numbered
    in the order they are walked."""
    if not os.path.isdir(root):
        raise Im2RecError(f"image folder {root} does not exist")
    exts = {e.lower() if e.startswith(".") else "." + e.lower() for e in exts}
    out = []
    if recursive:
        cat = {}
        for path, dirs, files in os.walk(root, followlinks=True):
            dirs.sort()
            for fname in sorted(files):
                fpath = os.path.join(path, fname)
                if os.path.splitext(fname)[1].lower() in exts and os.path.isfile(fpath):
                    cat.setdefault(path, len(cat))
                    out.append((len(out), os.path.relpath(fpath, root), cat[path]))
    else:
        for fname in sorted(os.listdir(root)):
            fpath = os.path.join(root, fname)
            if os.path.splitext(fname)[1].lower() in exts and os.path.isfile(fpath):
                out.append((len(out), os.path.relpath(fpath, root), 0))
    return out


def write_list(path: str, items) -> None:
    """``index\\tlabel\\t...\\tpath`` lines, labels as ``%f`` (MXNet's)."""
    with open(path, "w") as f:
        for item in items:
            f.write("%d\t" % item[0] + "".join("%f\t" % x for x in item[2:]) + item[1] + "\n")


def read_list(path: str) -> list[tuple]:
    """``[(index, path, label, ...)]`` from a ``.lst`` file."""
    out = []
    for where, line, fields in tab_lines(path):
        try:
            if len(fields) < 3:
                raise ValueError
            out.append((int(fields[0]), fields[-1], *(float(x) for x in fields[1:-1])))
        except ValueError:
            raise Im2RecError(f"{where}: expected 'index<TAB>label(s)<TAB>path', "
                              f"got {line.rstrip()!r}") from None
    return out


def make_lists(prefix: str, root: str, recursive=False, exts=(".jpeg", ".jpg", ".png"),
               chunks=1, train_ratio=1.0, test_ratio=0.0, shuffle=True,
               seed=100) -> list[str]:
    """Writes the ``.lst`` files of ``root`` as MXNet's ``im2rec --list``;
    returns their paths."""
    if chunks < 1:
        raise Im2RecError(f"--chunks must be at least 1, got {chunks}")
    if not (0 <= train_ratio <= 1 and 0 <= test_ratio <= 1 and train_ratio + test_ratio <= 1):
        raise Im2RecError(f"--train-ratio {train_ratio} and --test-ratio {test_ratio} must "
                          f"lie in [0, 1] and sum to at most 1")
    items = list_images(root, recursive, exts)
    if not items:
        raise Im2RecError(f"no images ({', '.join(sorted(exts))}) in {root}")
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
    return written


# -- packing -------------------------------------------------------------------

def encode_image(path: str, item, resize=0, center_crop=False, quality=95, color=1,
                 encoding=".jpg", pack_label=False, pass_through=False) -> bytes:
    """One list item as a record: its image read, cropped to a square,
    its short side resized, and encoded (or its bytes as they are)."""
    label = list(item[2:]) if len(item) > 3 and pack_label else item[2]
    header = recordio.IRHeader(0, label, item[0], 0)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as err:
        raise Im2RecError(f"cannot read image {path}: {err.strerror}") from None
    if pass_through:
        return recordio.pack(header, raw)
    try:
        img = recordio.imdecode(raw, iscolor=color, to_rgb=False)  # BGR, as cv2.imread
    except recordio.RecordIOError as err:
        raise Im2RecError(f"cannot decode image {path}: {err}") from None
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
        img = resize_image(img, size)
    return recordio.pack_img(header, img, quality=quality, img_fmt=encoding)


def resize_image(img: np.ndarray, size) -> np.ndarray:
    """``img`` (HxW or HxWxC uint8) resized to ``size = (width, height)``,
    bilinear (Pillow's, which also filters when shrinking)."""
    from PIL import Image
    if (img.shape[1], img.shape[0]) == tuple(size):
        return img
    return np.asarray(Image.fromarray(np.ascontiguousarray(img)).resize(
        tuple(int(s) for s in size), Image.BILINEAR))


def pack_list(lst: str, root: str, num_thread=1, progress=True, skip_bad=False,
              detection=False, **options) -> tuple[int, list[str]]:
    """Packs the images of ``lst`` into ``.rec`` + ``.idx`` beside it, in
    list order; returns ``(records written, [skipped image: reason])``.
    ``detection=True`` checks that every line holds a detection label
    (``header_width, object_width, objects...``: docs/detection.md) before
    anything is written, and packs it whole (``pack_label``)."""
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
    writer = recordio.MXIndexedRecordIO(base + ".idx", base + ".rec", "w")
    count = 0
    try:
        with ThreadPoolExecutor(max(1, int(num_thread))) as pool, \
                tqdm(total=len(items), desc=os.path.basename(base + ".rec"), unit="img",
                     disable=not progress, file=sys.stderr) as bar:
            # map keeps list order; decode and encode release the GIL
            for item, rec in zip(items, pool.map(encode, items)):
                if isinstance(rec, Im2RecError):
                    skipped.append(str(rec))
                else:
                    writer.write_idx(item[0], rec)
                    count += 1
                bar.update(1)
    finally:
        writer.close()
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
                   help="resize the short side to this many pixels (default: keep)")
    g.add_argument("--center-crop", action="store_true",
                   help="crop the centre square first")
    g.add_argument("--quality", type=int, default=95,
                   help="JPEG quality 1-100, or PNG compression 0-9 (default 95)")
    g.add_argument("--num-thread", type=int, default=1,
                   help="threads that decode and encode (order is kept)")
    g.add_argument("--color", type=int, default=1, choices=[-1, 0, 1],
                   help="1 colour, 0 grayscale, -1 as stored (default 1)")
    g.add_argument("--encoding", default=".jpg", choices=[".jpg", ".png"],
                   help="format of the packed images (default .jpg)")
    g.add_argument("--pack-label", action="store_true",
                   help="pack every label of a multi-label list (else the first)")
    g.add_argument("--skip-bad", action="store_true",
                   help="skip and count images that cannot be read (else stop there)")
    g.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args) -> int:
    prefix, root = os.path.abspath(args.prefix), os.path.abspath(args.root)
    if args.list:
        for path in make_lists(prefix, root, args.recursive, args.exts, args.chunks,
                               args.train_ratio, args.test_ratio, args.shuffle, args.seed):
            print(f"wrote {path}")
        return 0
    if not os.path.isdir(root):
        raise Im2RecError(f"image folder {root} does not exist")
    if not 0 < args.num_thread <= 256:
        raise Im2RecError(f"--num-thread must be between 1 and 256, got {args.num_thread}")
    folder = prefix if os.path.isdir(prefix) else os.path.dirname(prefix)
    if os.path.isdir(prefix):
        prefix = prefix.rstrip(os.sep) + os.sep
    lists = sorted(os.path.join(folder, f) for f in os.listdir(folder)
                   if f.endswith(".lst") and os.path.join(folder, f).startswith(prefix))
    if not lists:
        raise Im2RecError(f"no list {prefix}*.lst to pack; make one with --list")
    for lst in lists:
        count, skipped = pack_list(
            lst, root, num_thread=args.num_thread, progress=not args.quiet,
            skip_bad=args.skip_bad, resize=args.resize, center_crop=args.center_crop,
            quality=args.quality, color=args.color, encoding=args.encoding,
            pack_label=args.pack_label, pass_through=args.pass_through)
        base = os.path.splitext(lst)[0]
        print(f"wrote {base}.rec and {base}.idx: {count} images"
              + (f", skipped {len(skipped)} (first: {skipped[0]})" if skipped else ""))
    return 0
