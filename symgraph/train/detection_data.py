"""Detection data: MXNet's detection label format, a synthetic detection
set and a reader for VOC-layout folders.

A detection label is one float vector (MXNet's ``ImageDetRecordIter`` and
``example/ssd``)::

    [header_width, object_width, (more header...),
     cls, xmin, ymin, xmax, ymax, (difficult, more...),  # one object
     ...]

``header_width`` (at least 2) counts the header floats, ``object_width``
(at least 5) the floats per object; coordinates are shares of the image's
width and height in [0, 1]. In a ``.lst`` file the vector sits between the
index and the path, one float a field, and ``symgraph im2rec --pack-label``
packs it into the record header (``flag`` = its length).

    from symgraph.train import detection_data as dd
    dd.synthetic_detection_set('data/shapes', num_train=200, num_val=50, seed=0)
    # -> data/shapes_train.rec/.idx, data/shapes_val.rec/.idx
    items = dd.read_voc('VOCdevkit/VOC2007', 'trainval')   # [(path, objects)]
    dd.write_det_list('voc_trainval.lst', items)

Only NumPy (and Pillow/OpenCV for images) is imported here, so ``im2rec``
can check labels without loading the training stack.
"""
from __future__ import annotations

import os
import xml.etree.ElementTree as ET

import numpy as np

from ..util import tab_lines
from . import TrainError

VOC_CLASSES = ("aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair",
               "cow", "diningtable", "dog", "horse", "motorbike", "person", "pottedplant",
               "sheep", "sofa", "train", "tvmonitor")

SHAPE_CLASSES = ("circle", "square", "triangle")


# -- the label format -------------------------------------------------------------

def parse_det_label(label, where: str = "label", error: type = TrainError):
    """``(header, objects)`` of a flat detection label: ``header`` the
    ``header_width`` leading floats, ``objects`` an ``(n, object_width)``
    float32 array (``n`` may be 0: an image without objects). Raises
    ``error`` naming ``where`` for a label that is not one: a header width
    under 2, an object width under 5, a length that is not the header plus
    whole objects, or a box with ``xmax < xmin`` or ``ymax < ymin``."""
    lab = np.asarray(label, np.float32).ravel()
    if lab.size < 2:
        raise error(f"{where}: a detection label starts with header_width and object_width, "
                    f"got {lab.size} float(s)")
    hw, ow = lab[0], lab[1]
    if hw != int(hw) or hw < 2 or hw > lab.size:
        raise error(f"{where}: header_width {lab[0]:g} must be a whole number, at least 2 and "
                    f"at most the label's length {lab.size}")
    if ow != int(ow) or ow < 5:
        raise error(f"{where}: object_width {lab[1]:g} must be a whole number of at least 5 "
                    f"(cls, xmin, ymin, xmax, ymax, ...)")
    hw, ow = int(hw), int(ow)
    body = lab.size - hw
    if body % ow:
        raise error(f"{where}: {body} float(s) after the {hw}-float header is not a whole "
                    f"number of {ow}-float objects (a missing or extra field?)")
    objects = lab[hw:].reshape(-1, ow)
    bad = np.nonzero((objects[:, 3] < objects[:, 1]) | (objects[:, 4] < objects[:, 2]))[0]
    if len(bad):
        o = objects[bad[0]]
        raise error(f"{where}: object {int(bad[0])} has xmax < xmin or ymax < ymin: box "
                    f"({o[1]:g}, {o[2]:g}, {o[3]:g}, {o[4]:g})")
    return lab[:hw], objects


def make_det_label(objects, object_width: int | None = None, header=None) -> np.ndarray:
    """The flat label of ``objects`` (rows ``[cls, xmin, ymin, xmax, ymax,
    (difficult)]``, normalised), header ``[2, object_width]`` unless
    ``header`` (its first two entries are then set to the widths)."""
    objects = np.asarray(objects, np.float32)
    if objects.size == 0:
        objects = objects.reshape(0, object_width or 5)
    if objects.ndim != 2:
        raise TrainError(f"objects must be (n, object_width), got shape {objects.shape}")
    ow = object_width or objects.shape[1]
    if objects.shape[1] != ow:
        raise TrainError(f"objects have {objects.shape[1]} columns, object_width is {ow}")
    head = np.asarray(header if header is not None else [0, 0], np.float32).ravel().copy()
    head[0], head[1] = head.size, ow
    lab = np.concatenate([head, objects.ravel()])
    parse_det_label(lab)  # checks widths and boxes
    return lab


def write_det_list(path: str, items, start: int = 0) -> None:
    """Writes MXNet's detection ``.lst``: ``index \\t header... \\t
    objects... \\t path`` per item ``(path, objects)`` or ``(path, objects,
    index)``; the header as whole numbers, the objects' numbers with six
    decimals (MXNet's ``imdb.py`` writes four)."""
    with open(path, "w") as f:
        for i, item in enumerate(items):
            rel, objects = item[0], item[1]
            index = item[2] if len(item) > 2 else start + i
            lab = make_det_label(objects)
            hw = int(lab[0])
            f.write("\t".join(["%d" % index] + ["%d" % x for x in lab[:hw]]
                              + ["%.6f" % x for x in lab[hw:]] + [rel]) + "\n")


def read_det_list(path: str) -> list[tuple]:
    """``[(index, path, objects)]`` from a detection ``.lst``; a line that
    is not ``index<TAB>label<TAB>path`` with a valid detection label is a
    TrainError naming the file and line."""
    out = []
    try:
        for where, line, fields in tab_lines(path):
            try:
                if len(fields) < 4:
                    raise ValueError
                index, label = int(fields[0]), [float(x) for x in fields[1:-1]]
            except ValueError:
                raise TrainError(f"{where}: expected 'index<TAB>header_width<TAB>object_width"
                                 f"<TAB>objects...<TAB>path', got {line.rstrip()!r}") from None
            out.append((index, fields[-1], parse_det_label(label, where)[1]))
    except UnicodeDecodeError:
        raise TrainError(f"{path} is not a detection list (not UTF-8 text)") from None
    except OSError as err:
        raise TrainError(f"cannot read detection list {path}: {err.strerror or err}") from None
    return out


# -- a synthetic set ----------------------------------------------------------------

def _background(rng, h: int, w: int) -> np.ndarray:
    """A textured background: a colour gradient, stripes and noise."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    c0, c1 = rng.uniform(40, 215, 3), rng.uniform(40, 215, 3)
    t = (xx / max(w - 1, 1) * rng.uniform(0.2, 1) + yy / max(h - 1, 1) * rng.uniform(0, 0.8))
    t = np.clip(t / t.max() if t.max() > 0 else t, 0, 1)[..., None]
    img = c0 * (1 - t) + c1 * t
    period, angle = rng.uniform(4, 16), rng.uniform(0, np.pi)
    stripes = np.sin((xx * np.cos(angle) + yy * np.sin(angle)) * 2 * np.pi / period)
    img += (stripes * rng.uniform(5, 20))[..., None]
    img += rng.normal(0, 6, (h, w, 3))
    return img


def _shape_mask(kind: str, h: int, w: int, box) -> np.ndarray:
    """Pixels (centres) of a filled ``kind`` inside ``box = (x0, y0, x1, y1)``
    in pixels; the shape touches all four sides of the box."""
    x0, y0, x1, y1 = box
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32) + 0.5
    inside = (xx >= x0) & (xx < x1) & (yy >= y0) & (yy < y1)
    if kind == "square":
        return inside
    cx, cy, rx, ry = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) / 2, (y1 - y0) / 2
    if kind == "circle":
        return ((xx - cx) / rx) ** 2 + ((yy - cy) / ry) ** 2 <= 1.0
    # triangle: apex at the top centre, base on the bottom edge
    half = (yy - y0) / max(y1 - y0, 1e-6) * rx
    return inside & (np.abs(xx - cx) <= half)


def synthetic_detection_image(rng, size=(96, 96), max_objects: int = 4,
                              classes=SHAPE_CLASSES, min_size: float = 0.15,
                              max_size: float = 0.45):
    """One image ``(HxWx3 uint8 RGB, objects)``: a textured background and
    1..``max_objects`` filled shapes (circle, square, triangle: the class is
    the index in ``classes``) of random colours; ``objects`` rows are
    ``[cls, xmin, ymin, xmax, ymax]``, normalised, the box bounding the
    shape's pixels. Shapes may overlap; a later one covers an earlier."""
    h, w = int(size[0]), int(size[1])
    img = _background(rng, h, w)
    n = int(rng.integers(1, max_objects + 1))
    objects = []
    for _ in range(n):
        cls = int(rng.integers(0, len(classes)))
        bw = int(round(rng.uniform(min_size, max_size) * w))
        bh = int(round(rng.uniform(min_size, max_size) * h)) if classes[cls] != "square" \
            else min(bw, h)
        if classes[cls] == "circle":
            bh = bw = min(bw, bh)
        bw, bh = max(bw, 4), max(bh, 4)
        x0, y0 = int(rng.integers(0, w - bw + 1)), int(rng.integers(0, h - bh + 1))
        mask = _shape_mask(classes[cls], h, w, (x0, y0, x0 + bw, y0 + bh))
        img[mask] = rng.uniform(0, 255, 3)
        ys, xs = np.nonzero(mask)
        objects.append([cls, xs.min() / w, ys.min() / h, (xs.max() + 1) / w,
                        (ys.max() + 1) / h])
    return np.clip(img, 0, 255).astype(np.uint8), np.asarray(objects, np.float32)


def synthetic_detection_set(prefix: str, num_train: int = 200, num_val: int = 50,
                            size=(96, 96), max_objects: int = 4, seed: int = 0,
                            fmt: str = "rec", quality: int = 95) -> dict:
    """Writes a synthetic detection set of shapes (``SHAPE_CLASSES``) and
    returns ``{'train': path, 'val': path, 'classes': [...]}``.

    ``fmt='rec'``: ``PREFIX_train.rec/.idx`` and ``PREFIX_val.rec/.idx``
    (records as ``im2rec --pack-label`` packs them, JPEG ``quality``);
    ``fmt='lst'``: PNG images under ``PREFIX_images/`` and
    ``PREFIX_train.lst``/``PREFIX_val.lst`` in MXNet's detection list
    format (paths relative to that folder), for ``symgraph im2rec
    --pack-label``. The same ``seed`` writes the same images and labels;
    image ``i`` depends only on ``(seed, i)``."""
    from .. import recordio
    if fmt not in ("rec", "lst"):
        raise TrainError(f"synthetic_detection_set: fmt must be 'rec' or 'lst', got {fmt!r}")
    if num_train < 0 or num_val < 0 or num_train + num_val == 0:
        raise TrainError("synthetic_detection_set: need num_train + num_val > 0")
    folder = os.path.dirname(os.path.abspath(prefix))
    if not os.path.isdir(folder):
        raise TrainError(f"synthetic_detection_set: folder {folder} does not exist")
    out = {"classes": list(SHAPE_CLASSES)}
    splits = (("train", 0, num_train), ("val", num_train, num_train + num_val))
    if fmt == "lst":
        image_dir = prefix + "_images"
        os.makedirs(image_dir, exist_ok=True)
        out["root"] = image_dir
    for name, lo, hi in splits:
        if hi == lo:
            continue
        items = []
        writer = recordio.MXIndexedRecordIO(f"{prefix}_{name}.idx", f"{prefix}_{name}.rec",
                                            "w") if fmt == "rec" else None
        try:
            for i in range(lo, hi):
                img, objects = synthetic_detection_image(np.random.default_rng([seed, i]),
                                                         size, max_objects)
                if writer is not None:
                    header = recordio.IRHeader(0, make_det_label(objects), i, 0)
                    writer.write_idx(i, recordio.pack_img(header, img[:, :, ::-1],
                                                          quality=quality))
                else:
                    rel = f"{i:06d}.png"
                    from PIL import Image
                    Image.fromarray(img).save(os.path.join(image_dir, rel))
                    items.append((rel, objects, i))
        finally:
            if writer is not None:
                writer.close()
        if fmt == "lst":
            write_det_list(f"{prefix}_{name}.lst", items)
            out[name] = f"{prefix}_{name}.lst"
        else:
            out[name] = f"{prefix}_{name}.rec"
    return out


# -- VOC folders -------------------------------------------------------------------

def read_voc_annotation(path: str, classes=VOC_CLASSES, keep_difficult: bool = True,
                        size=None) -> np.ndarray:
    """The objects of one VOC annotation XML: rows ``[cls, xmin, ymin,
    xmax, ymax, difficult]``, coordinates normalised by the image size in
    the file (or ``size = (width, height)``): ``xmin / width`` and so on,
    as MXNet's ``example/ssd/dataset/pascal_voc.py`` computes them. An
    object whose name is not in ``classes`` is skipped."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as err:
        raise TrainError(f"cannot read VOC annotation {path}: {err}") from None
    if size is None:
        s = root.find("size")
        try:
            size = (float(s.find("width").text), float(s.find("height").text))
        except (AttributeError, TypeError, ValueError):
            raise TrainError(f"{path}: no <size><width>/<height>") from None
    width, height = size
    if width <= 0 or height <= 0:
        raise TrainError(f"{path}: image size {width}x{height} is not positive")
    index = {c: i for i, c in enumerate(classes)}
    rows = []
    for obj in root.iter("object"):
        name = (obj.findtext("name") or "").strip()
        if name not in index:
            continue
        difficult = int((obj.findtext("difficult") or "0").strip() or 0)
        if difficult and not keep_difficult:
            continue
        box = obj.find("bndbox")
        try:
            x0, y0, x1, y1 = (float(box.find(k).text) for k in ("xmin", "ymin", "xmax", "ymax"))
        except (AttributeError, TypeError, ValueError):
            raise TrainError(f"{path}: object {name!r} has no complete <bndbox>") from None
        if x1 < x0 or y1 < y0:
            raise TrainError(f"{path}: object {name!r} has xmax < xmin or ymax < ymin: "
                             f"({x0:g}, {y0:g}, {x1:g}, {y1:g})")
        rows.append([index[name], x0 / width, y0 / height, x1 / width, y1 / height,
                     difficult])
    return np.asarray(rows, np.float32).reshape(-1, 6)


def read_voc(root: str, image_set: str = "trainval", classes=VOC_CLASSES,
             keep_difficult: bool = True) -> list[tuple]:
    """``[(relative image path, objects)]`` of a VOC-layout folder ``root``
    (``JPEGImages/``, ``Annotations/*.xml``, ``ImageSets/Main/<image_set>.txt``),
    in the order of the image set; ``objects`` as
    ``read_voc_annotation``. Paths are relative to ``root``, for
    ``write_det_list`` and ``symgraph im2rec --pack-label LIST root``."""
    listing = os.path.join(root, "ImageSets", "Main", image_set + ".txt")
    try:
        with open(listing) as f:
            ids = [line.split()[0] for line in f if line.strip()]
    except OSError as err:
        raise TrainError(f"cannot read VOC image set {listing}: {err.strerror}") from None
    out = []
    for name in ids:
        ann = os.path.join(root, "Annotations", name + ".xml")
        if not os.path.isfile(ann):
            raise TrainError(f"VOC image {name} of {listing} has no annotation {ann}")
        out.append((os.path.join("JPEGImages", name + ".jpg"),
                    read_voc_annotation(ann, classes, keep_difficult)))
    return out


__all__ = ["VOC_CLASSES", "SHAPE_CLASSES", "parse_det_label", "make_det_label",
           "write_det_list", "read_det_list", "synthetic_detection_image",
           "synthetic_detection_set", "read_voc_annotation", "read_voc"]
