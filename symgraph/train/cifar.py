"""CIFAR-10 in memory, as uint8: the files, a record file, two stand-ins.

    from symgraph.train import cifar
    data = cifar.load_cifar10('cifar-10-batches-py')   # the "python version"
    data.x_train.shape, data.x_train.dtype            # (50000, 3, 32, 32) uint8
    data.y_train[:5]                                  # uint8 labels 0..9
    data = cifar.load_cifar10_record('train.rec')      # (x, y) of an im2rec file
    data = cifar.synthetic_cifar10(5000, 1000)         # learnable, CIFAR-shaped
    data = cifar.digits_cifar()                        # load_digits at 32x32, in colour

Everything stays uint8 (150 MiB for the 60,000 images): the host hands
uint8 batches to the devices and ``symgraph.train.augment`` crops, flips,
cuts out and normalises them there.

The "python version" of CIFAR-10 (``cifar-10-batches-py``) is six pickled
dicts, ``data_batch_1`` .. ``data_batch_5`` and ``test_batch``, each with
``b"data"`` (uint8 ``[10000, 3072]``: a row is an image's 1024 red, then
1024 green, then 1024 blue pixels, rows of 32) and ``b"labels"`` (10,000
ints), and ``batches.meta`` (``b"label_names"``). The pickles are read
with an unpickler that builds NumPy arrays and plain containers only, so a
file that is not a CIFAR batch cannot run code on loading. A missing batch,
a truncated or foreign pickle or a batch of the wrong shape is one
``TrainError`` naming the file; a record file of images of another size one
``RecordIOError`` naming the record.
"""
from __future__ import annotations

import os
import pickle
from typing import NamedTuple

import numpy as np

from ..recordio import RecordIOError
from . import TrainError

TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILE = "test_batch"
META_FILE = "batches.meta"
CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
           "truck")
SHAPE = (3, 32, 32)


class Cifar(NamedTuple):
    """A split data set in memory: uint8 NCHW images and uint8 labels."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: tuple


# -- the python version -------------------------------------------------------------------
class _ArrayUnpickler(pickle.Unpickler):
    """Builds what CIFAR's pickles hold (dicts, lists, bytes, NumPy arrays)
    and nothing else: any other global is refused."""

    _ALLOWED = {("numpy.core.multiarray", "_reconstruct"),
                ("numpy._core.multiarray", "_reconstruct"),
                ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
                ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")}

    def find_class(self, module, name):
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}")
        return super().find_class(module, name)


def _unpickle(path: str) -> dict:
    try:
        with open(path, "rb") as f:
            obj = _ArrayUnpickler(f, encoding="bytes").load()
    except FileNotFoundError:
        raise TrainError(f"CIFAR-10: {path} is missing") from None
    except IsADirectoryError:
        raise TrainError(f"CIFAR-10: {path} is a folder, not a pickled batch") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
            IndexError, KeyError, OverflowError, MemoryError, UnicodeDecodeError) as err:
        raise TrainError(f"CIFAR-10: {path} is not a readable CIFAR pickle (truncated or "
                         f"corrupt?): {type(err).__name__}: {err}") from None
    if not isinstance(obj, dict):
        raise TrainError(f"CIFAR-10: {path} holds a {type(obj).__name__}, not a CIFAR "
                         f"batch's dict")
    return {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in obj.items()}


def read_batch(path) -> tuple[np.ndarray, np.ndarray]:
    """One pickled batch -> ``(uint8 [N, 3, 32, 32], uint8 [N])``."""
    path = os.fspath(path)
    d = _unpickle(path)
    if "data" not in d or "labels" not in d:
        raise TrainError(f"CIFAR-10: {path} has no 'data' and 'labels' entries (keys: "
                         f"{', '.join(sorted(map(str, d)))}); is it a CIFAR-100 file?")
    data = np.asarray(d["data"])
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or data.dtype != np.uint8:
        raise TrainError(f"CIFAR-10: {path}: 'data' is {data.dtype} {data.shape}, expected "
                         f"uint8 [N, 3072] (3x32x32 channel-major rows)")
    try:
        labels = np.asarray(d["labels"], dtype=np.int64).ravel()
    except (TypeError, ValueError) as err:
        raise TrainError(f"CIFAR-10: {path}: 'labels' are not integers: {err}") from None
    if labels.shape[0] != data.shape[0]:
        raise TrainError(f"CIFAR-10: {path} holds {data.shape[0]} images and "
                         f"{labels.shape[0]} labels")
    if labels.size and (labels.min() < 0 or labels.max() > 9):
        raise TrainError(f"CIFAR-10: {path}: labels run from {labels.min()} to "
                         f"{labels.max()}, expected 0..9")
    return data.reshape(-1, *SHAPE), labels.astype(np.uint8)


def _folder(folder: str) -> str:
    """``folder`` itself, or its ``cifar-10-batches-py`` (the archive's folder)."""
    if not os.path.isdir(folder):
        raise TrainError(f"CIFAR-10: {folder} is not a folder (give the folder that holds "
                         f"data_batch_1..5 and test_batch: cifar-10-batches-py)")
    inner = os.path.join(folder, "cifar-10-batches-py")
    if not os.path.exists(os.path.join(folder, TEST_FILE)) and os.path.isdir(inner):
        return inner
    return folder


def load_cifar10(folder, train: bool = True, test: bool = True) -> Cifar:
    """CIFAR-10's python version from ``folder`` (``cifar-10-batches-py``,
    or the folder holding it): ``Cifar(x_train, y_train, x_test, y_test,
    classes)``, images uint8 ``[N, 3, 32, 32]`` (RGB), labels uint8.
    ``train``/``test`` False skip that split (its arrays then empty).
    ``batches.meta`` gives the class names where present. A folder without
    every batch is a ``TrainError`` naming the missing files."""
    folder = _folder(os.fspath(folder))
    wanted = (TRAIN_FILES if train else ()) + ((TEST_FILE,) if test else ())
    missing = [f for f in wanted if not os.path.isfile(os.path.join(folder, f))]
    if missing:
        raise TrainError(f"CIFAR-10: {folder} lacks {', '.join(missing)} (the python "
                         f"version's batches: data_batch_1..5 and test_batch)")
    empty = (np.zeros((0, *SHAPE), np.uint8), np.zeros((0,), np.uint8))
    xs_tr, ys_tr = empty
    if train:
        parts = [read_batch(os.path.join(folder, f)) for f in TRAIN_FILES]
        xs_tr = np.concatenate([p[0] for p in parts])
        ys_tr = np.concatenate([p[1] for p in parts])
    x_te, y_te = read_batch(os.path.join(folder, TEST_FILE)) if test else empty
    classes = CLASSES
    meta = os.path.join(folder, META_FILE)
    if os.path.isfile(meta):
        names = _unpickle(meta).get("label_names")
        if not isinstance(names, (list, tuple)) or len(names) != 10:
            raise TrainError(f"CIFAR-10: {meta} has no list of 10 'label_names'")
        classes = tuple(n.decode("latin1") if isinstance(n, bytes) else str(n) for n in names)
    return Cifar(xs_tr, ys_tr, x_te, y_te, classes)


def write_batch(path, images, labels, batch_label: str = "batch") -> None:
    """Writes ``images`` (uint8 [N, 3, 32, 32]) and ``labels`` as a batch of
    the python version (the same dict, keys as bytes, pickle protocol 2)."""
    images = np.asarray(images, np.uint8)
    d = {b"batch_label": batch_label.encode(), b"labels": [int(v) for v in labels],
         b"data": images.reshape(len(images), -1),
         b"filenames": [f"{i:05d}.png".encode() for i in range(len(images))]}
    with open(os.fspath(path), "wb") as f:
        pickle.dump(d, f, protocol=2)


# -- record files ---------------------------------------------------------------------------
def load_cifar10_record(path_imgrec, path_imgidx=None, shape=SHAPE) -> tuple:
    """``(images uint8 [N, C, H, W], labels uint8 [N])`` of a record file
    (``symgraph im2rec`` or MXNet's im2rec; PNG keeps the pixels exact,
    JPEG does not), read with ``symgraph.recordio``'s readers in file order
    (the ``.idx``'s records when given). Every image must be exactly
    ``shape`` (3x32x32 by default): another size is a ``RecordIOError``
    naming the record's byte offset, as is a record that does not decode;
    a label that is not an integer 0..255 is a ``TrainError``."""
    from .. import recordio
    path = os.fspath(path_imgrec)
    c, h, w = (int(v) for v in shape)
    mm = recordio.open_mmap(path)
    if path_imgidx is not None:
        idx, keys = recordio.read_index(path_imgidx)
        offsets = sorted(set(idx[k] for k in keys))
    else:
        offsets = recordio.scan_offsets(mm, path)
    if not offsets:
        raise RecordIOError(f"{path} holds no records")
    images = np.empty((len(offsets), c, h, w), np.uint8)
    labels = np.empty((len(offsets),), np.uint8)
    for i, off in enumerate(offsets):
        got = recordio.read_record(mm, int(off), path)
        if got is None:
            raise RecordIOError(f"{path}: no record at byte offset {off} (past the end)")
        try:
            header, payload = recordio.unpack(got[0])
            img = recordio.imdecode(payload, iscolor=1 if c == 3 else 0)
        except RecordIOError as err:
            raise RecordIOError(f"{path}: record at byte offset {off}: {err}") from None
        if img.ndim == 2:
            img = img[:, :, None]
        if img.shape != (h, w, c):
            raise RecordIOError(f"{path}: record at byte offset {off} is a {img.shape[0]}x"
                                f"{img.shape[1]} image, expected {h}x{w} (CIFAR-sized; "
                                f"pack with im2rec --resize {w} or without resizing)")
        images[i] = img.transpose(2, 0, 1)
        lab = np.asarray(header.label, np.float64).ravel()
        if lab.size < 1 or lab[0] != int(lab[0]) or not 0 <= lab[0] <= 255:
            raise TrainError(f"{path}: record at byte offset {off} has label "
                             f"{header.label!r}, expected an integer class 0..255")
        labels[i] = int(lab[0])
    return images, labels


def write_record(prefix, images, labels, img_fmt: str = ".png") -> tuple[str, str]:
    """Writes ``prefix.rec`` and ``prefix.idx`` (MXNet's layout, as im2rec
    packs) of uint8 [N, 3, H, W] RGB ``images``, PNG by default (lossless);
    returns the two paths."""
    from .. import recordio
    prefix = os.fspath(prefix)
    rec, idx = prefix + ".rec", prefix + ".idx"
    writer = recordio.MXIndexedRecordIO(idx, rec, "w")
    try:
        for i, (img, lab) in enumerate(zip(np.asarray(images, np.uint8), labels)):
            bgr = np.ascontiguousarray(img.transpose(1, 2, 0)[:, :, ::-1])  # OpenCV's order
            writer.write_idx(i, recordio.pack_img(recordio.IRHeader(0, float(lab), i, 0), bgr,
                                                  img_fmt=img_fmt))
    finally:
        writer.close()
    return rec, idx


# -- stand-ins ---------------------------------------------------------------------------------
def synthetic_cifar10(n_train: int = 5000, n_test: int = 1000, seed: int = 0) -> Cifar:
    """A learnable CIFAR-shaped set (uint8 [N, 3, 32, 32], 10 classes,
    balanced): each class is a smooth random colour pattern (4x4 blocks of
    colour, bilinearly upsampled), each image that pattern shifted by up to
    3 pixels, brightened or darkened, with pixel noise. Small nets learn it
    well above chance in an epoch or two; crops and flips keep it
    learnable. The same ``seed`` gives the same set."""
    if n_train < 0 or n_test < 0:
        raise TrainError(f"synthetic_cifar10: sizes must not be negative, got {n_train}, "
                         f"{n_test}")
    rng = np.random.default_rng([int(seed), 10])
    coarse = rng.uniform(30, 225, size=(10, 3, 4, 4))
    # bilinear upsampling of each 4x4 pattern to 40x40 (room for shifts)
    grid = (np.arange(40) + 0.5) / 10 - 0.5
    i0 = np.clip(np.floor(grid).astype(int), 0, 3)
    i1 = np.clip(i0 + 1, 0, 3)
    f = np.clip(grid - i0, 0, 1)
    rows = coarse[:, :, i0, :] * (1 - f)[None, None, :, None] + \
        coarse[:, :, i1, :] * f[None, None, :, None]
    templates = rows[:, :, :, i0] * (1 - f) + rows[:, :, :, i1] * f   # [10, 3, 40, 40]

    def make(n, salt):
        r = np.random.default_rng([int(seed), salt])
        labels = r.permutation(np.arange(n) % 10).astype(np.uint8)
        dy, dx = r.integers(0, 8, size=n), r.integers(0, 8, size=n)
        out = np.empty((n, 3, 32, 32), np.float32)
        for i in range(n):
            out[i] = templates[labels[i], :, dy[i]:dy[i] + 32, dx[i]:dx[i] + 32]
        out *= r.uniform(0.7, 1.3, size=(n, 1, 1, 1))
        out += r.normal(0, 25, size=out.shape)
        return np.clip(np.rint(out), 0, 255).astype(np.uint8), labels

    x_tr, y_tr = make(int(n_train), 1)
    x_te, y_te = make(int(n_test), 2)
    return Cifar(x_tr, y_tr, x_te, y_te, tuple(f"class{i}" for i in range(10)))


def digits_cifar(seed: int = 0, test_fraction: float = 0.2) -> Cifar:
    """scikit-learn's ``load_digits`` (1,797 8x8 images, bundled with
    scikit-learn, no download) as a CIFAR-shaped set: each digit upsampled
    4x to 32x32 (pixel blocks) and coloured -- a random background and
    foreground colour per image, blended by the digit's intensity -- then
    split at random, ``test_fraction`` for the test set (360 images at
    0.2). An accuracy stand-in for CIFAR-10 where the real files are not
    at hand (small nets pass 90% test accuracy)."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise TrainError("digits_cifar needs scikit-learn: pip install '.[examples]'") from None
    if not 0 < test_fraction < 1:
        raise TrainError(f"digits_cifar: test_fraction must be in (0, 1), got {test_fraction}")
    d = load_digits()
    rng = np.random.default_rng([int(seed), 11])
    n = len(d.target)
    alpha = (d.images / 16.0).astype(np.float32)                       # [n, 8, 8] in 0..1
    alpha = np.kron(alpha, np.ones((4, 4), np.float32))                 # [n, 32, 32]
    bg = rng.uniform(0, 110, size=(n, 3, 1, 1))
    fg = rng.uniform(145, 255, size=(n, 3, 1, 1))
    img = bg * (1 - alpha[:, None]) + fg * alpha[:, None]
    img = np.clip(np.rint(img), 0, 255).astype(np.uint8)
    labels = d.target.astype(np.uint8)
    order = rng.permutation(n)
    n_train = int(n * (1 - test_fraction))   # 1,437 and 360 at 0.2, as docs/training.md
    tr, te = order[:n_train], order[n_train:]
    return Cifar(img[tr], labels[tr], img[te], labels[te], tuple(str(i) for i in range(10)))


__all__ = ["Cifar", "CLASSES", "load_cifar10", "read_batch", "write_batch",
           "load_cifar10_record", "write_record", "synthetic_cifar10", "digits_cifar"]
