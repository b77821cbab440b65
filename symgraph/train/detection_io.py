"""``ImageDetRecordIter``: batches of images and their boxes from record
files packed with detection labels (MXNet's ``ImageDetRecordIter``).

    it = sg.io.ImageDetRecordIter(
        path_imgrec='train.rec', data_shape=(3, 300, 300), batch_size=32,
        shuffle=True, rand_mirror_prob=0.5, rand_pad_prob=0.5, max_pad_scale=4,
        rand_crop_prob=0.8, num_crop_sampler=5, min_crop_scales=0.3,
        min_crop_overlaps=(0.1, 0.3, 0.5, 0.7, 0.9),
        mean_r=123.68, mean_g=116.78, mean_b=103.94)
    batch = it.next()     # data (32, 3, 300, 300); label (32, max_objects, 5 or 6)

It is ``ImageRecordIter``'s pipeline (threads, order, sharding, resume,
``skip_bad``; the same decode and resize code) with MXNet's detection
augmenter in place of the classification one. The label layout and the
augmentation are described in docs/detection.md.
"""
from __future__ import annotations

import numpy as np

from .. import recordio
from . import TrainError
from .detection_data import parse_det_label
from .image import ImageRecordIter, _resize
from .io import DataDesc, aligned_zeros

_CROP_PARAMS = ("min_crop_scales", "max_crop_scales", "min_crop_aspect_ratios",
                "max_crop_aspect_ratios", "min_crop_overlaps", "max_crop_overlaps",
                "min_crop_sample_coverages", "max_crop_sample_coverages",
                "min_crop_object_coverages", "max_crop_object_coverages", "max_crop_trials")


def _per_sampler(name, value, n):
    vals = list(value) if isinstance(value, (list, tuple, np.ndarray)) else [value]
    if len(vals) == 1:
        vals = vals * n
    if len(vals) != n:
        raise TrainError(f"ImageDetRecordIter: {name} has {len(vals)} values, "
                         f"num_crop_sampler is {n} (give one value or one per sampler)")
    return [float(v) for v in vals]


def _iou(box, boxes):
    """IoU of one ``(x0, y0, x1, y1)`` box with each row of ``boxes``."""
    iw = np.clip(np.minimum(boxes[:, 2], box[2]) - np.maximum(boxes[:, 0], box[0]), 0, None)
    ih = np.clip(np.minimum(boxes[:, 3], box[3]) - np.maximum(boxes[:, 1], box[1]), 0, None)
    inter = iw * ih
    union = (box[2] - box[0]) * (box[3] - box[1]) \
        + (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]) - inter
    return inter, np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0)


class ImageDetRecordIter(ImageRecordIter):
    """MXNet's ``ImageDetRecordIter`` over ``path_imgrec`` (records whose
    header holds a detection label: ``[header_width, object_width,
    (header...), objects...]``, see ``detection_data``).

    Labels: ``label_pad_width`` is MXNet's, the number of label floats
    (header included) every record is padded to with ``label_pad_value``
    (-1); 0 or -1 take the longest label of the file. ``max_objects``
    (ours) says the same in objects. ``label_layout='objects'`` (default)
    gives ``(batch, max_objects, object_width)``, the header dropped, as
    MXNet's ``example/ssd`` ``DetRecordIter`` reshapes it;
    ``label_layout='mxnet'`` gives the raw ``(batch, 4 + label_pad_width)``
    rows MXNet's C++ iterator returns: ``[channels, height, width,
    label_length, header..., objects..., -1...]``.

    Augmentation, in MXNet's order: ``resize`` (short side); a horizontal
    flip with ``rand_mirror_prob``; a random expansion with
    ``rand_pad_prob`` (canvas up to ``max_pad_scale`` times the image,
    filled with ``fill_value``); a random crop with ``rand_crop_prob`` from
    ``num_crop_sampler`` samplers (each with its ``min/max_crop_scales``,
    ``min/max_crop_aspect_ratios``, ``min/max_crop_overlaps`` (IoU with
    some object), ``min/max_crop_sample_coverages``,
    ``min/max_crop_object_coverages`` and ``max_crop_trials``; the first
    sampler, in random order, to find a crop within its trials wins, else
    no crop); objects whose centre leaves the crop are dropped
    (``crop_emit_mode='center'``) or those covering at most
    ``emit_overlap_thresh`` of their area (``'overlap'``), the rest
    clipped; then the image is resized to ``data_shape`` (``resize_mode
    ='force'``). Boxes follow the pixels exactly: pads and crops are
    whole pixels and the boxes are moved by those very pixels.
    """

    def __init__(self, path_imgrec, data_shape, batch_size: int, path_imgidx=None,
                 label_width: int = -1, label_pad_width: int = 0,
                 label_pad_value: float = -1.0, max_objects: int | None = None,
                 label_layout: str = "objects", shuffle: bool = False, seed: int = 0,
                 resize: int = -1, rand_mirror_prob: float = 0.0,
                 rand_pad_prob: float = 0.0, max_pad_scale: float = 1.0,
                 fill_value: int = 127, rand_crop_prob: float = 0.0,
                 num_crop_sampler: int = 1, min_crop_scales=0.0, max_crop_scales=1.0,
                 min_crop_aspect_ratios=1.0, max_crop_aspect_ratios=1.0,
                 min_crop_overlaps=0.0, max_crop_overlaps=1.0,
                 min_crop_sample_coverages=0.0, max_crop_sample_coverages=1.0,
                 min_crop_object_coverages=0.0, max_crop_object_coverages=1.0,
                 max_crop_trials=25, crop_emit_mode: str = "center",
                 emit_overlap_thresh: float = 0.3, resize_mode: str = "force",
                 inter_method: int = 1, label_name: str = "label", **kwargs):
        for bad in ("rand_crop", "rand_mirror", "random_resized_crop", "max_random_scale",
                    "min_random_scale"):
            if bad in kwargs:
                raise TrainError(f"ImageDetRecordIter: {bad} is ImageRecordIter's; use "
                                 f"rand_crop_prob / rand_mirror_prob / rand_pad_prob")
        if resize_mode != "force":
            raise TrainError(f"ImageDetRecordIter: resize_mode {resize_mode!r} is not "
                             f"supported; only 'force' (resize to data_shape)")
        if int(inter_method) != 1:
            raise TrainError(f"ImageDetRecordIter: inter_method {inter_method} is not "
                             f"supported; only 1 (bilinear)")
        if crop_emit_mode not in ("center", "overlap"):
            raise TrainError(f"ImageDetRecordIter: crop_emit_mode must be 'center' or "
                             f"'overlap', got {crop_emit_mode!r}")
        if label_layout not in ("objects", "mxnet"):
            raise TrainError(f"ImageDetRecordIter: label_layout must be 'objects' or "
                             f"'mxnet', got {label_layout!r}")
        for name, p in (("rand_mirror_prob", rand_mirror_prob), ("rand_pad_prob",
                        rand_pad_prob), ("rand_crop_prob", rand_crop_prob)):
            if not 0 <= p <= 1:
                raise TrainError(f"ImageDetRecordIter: {name} must lie in [0, 1], got {p}")
        if max_pad_scale < 1:
            raise TrainError(f"ImageDetRecordIter: max_pad_scale must be at least 1, "
                             f"got {max_pad_scale}")
        if int(num_crop_sampler) < 0:
            raise TrainError("ImageDetRecordIter: num_crop_sampler must be >= 0")
        try:
            super().__init__(path_imgrec, data_shape, batch_size, path_imgidx=path_imgidx,
                             label_width=1, shuffle=shuffle, seed=seed, resize=resize,
                             label_name=label_name, **kwargs)
        except TrainError as err:
            msg = str(err)
            if msg.startswith("ImageRecordIter:"):
                msg = "ImageDetRecordIter:" + msg[len("ImageRecordIter:"):]
            raise TrainError(msg) from None
        n = int(num_crop_sampler)
        given = dict(zip(_CROP_PARAMS, (min_crop_scales, max_crop_scales,
                                        min_crop_aspect_ratios, max_crop_aspect_ratios,
                                        min_crop_overlaps, max_crop_overlaps,
                                        min_crop_sample_coverages, max_crop_sample_coverages,
                                        min_crop_object_coverages, max_crop_object_coverages,
                                        max_crop_trials)))
        self._samplers = [dict(zip(_CROP_PARAMS, vals)) for vals in
                          zip(*(_per_sampler(k, v, n) for k, v in given.items()))] if n else []
        for s in self._samplers:
            if not (0 <= s["min_crop_scales"] < s["max_crop_scales"] <= 1):
                raise TrainError("ImageDetRecordIter: need 0 <= min_crop_scales < "
                                 "max_crop_scales <= 1")
            if not 0 <= s["min_crop_aspect_ratios"] <= s["max_crop_aspect_ratios"]:
                raise TrainError("ImageDetRecordIter: need 0 <= min_crop_aspect_ratios <= "
                                 "max_crop_aspect_ratios")
            for lo, hi in (("min_crop_overlaps", "max_crop_overlaps"),
                           ("min_crop_sample_coverages", "max_crop_sample_coverages"),
                           ("min_crop_object_coverages", "max_crop_object_coverages")):
                if s[lo] > s[hi]:
                    raise TrainError(f"ImageDetRecordIter: {lo} > {hi}")
        self.rand_mirror_prob, self.rand_pad_prob = float(rand_mirror_prob), float(rand_pad_prob)
        self.max_pad_scale, self.fill_value = float(max_pad_scale), int(fill_value)
        self.rand_crop_prob = float(rand_crop_prob)
        self.crop_emit_mode, self.emit_overlap_thresh = crop_emit_mode, float(emit_overlap_thresh)
        self.label_pad_value = float(label_pad_value)
        self.label_layout = label_layout

        # the labels' widths, from every record's header (MXNet scans the file too)
        widths, self._header_width, self._object_width = [], None, None
        for rec in range(self.num_data):
            header, objects = self._read_label(rec)
            if self._header_width is None:
                self._header_width, self._object_width = header.size, objects.shape[1]
            elif (header.size, objects.shape[1]) != (self._header_width, self._object_width):
                raise TrainError(f"{self.path_imgrec}: record at byte offset "
                                 f"{self._offsets[rec]} has header/object widths "
                                 f"{header.size}/{objects.shape[1]}, the first record "
                                 f"{self._header_width}/{self._object_width}")
            widths.append(header.size + objects.size)
        if int(label_width) > 0 and any(w != int(label_width) for w in widths):
            raise TrainError(f"{self.path_imgrec}: label_width is {label_width}, a record "
                             f"has a label of {next(w for w in widths if w != label_width)}")
        longest = max(widths)
        pad = int(label_pad_width)
        if max_objects is not None:
            from_objects = self._header_width + int(max_objects) * self._object_width
            if pad > 0 and pad != from_objects:
                raise TrainError(f"ImageDetRecordIter: label_pad_width {pad} and max_objects "
                                 f"{max_objects} disagree (header {self._header_width}, "
                                 f"object width {self._object_width})")
            pad = from_objects
        if pad > 0 and pad < longest:
            raise TrainError(f"ImageDetRecordIter: label_pad_width {pad} is smaller than the "
                             f"longest label of {self.path_imgrec} ({longest} floats, "
                             f"{(longest - self._header_width) // self._object_width} objects)")
        self.label_pad_width = max(pad, longest)
        self.max_objects = (self.label_pad_width - self._header_width) // self._object_width

    # -- labels ---------------------------------------------------------------------
    def _read_label(self, rec: int):
        """The record's label, read from its header only when the record is
        in one part (the common case: the image bytes are not copied)."""
        offset = int(self._offsets[rec])
        try:
            cflag, length, _ = recordio._part(self._mm, offset, offset, True, self.path_imgrec)
            if cflag == 0:
                body = self._mm[offset + 8:offset + 8 + min(length, 24)]
                flag = int.from_bytes(body[:4], "little") if len(body) == 24 else 0
                raw = self._mm[offset + 8:offset + 8 + min(length, 24 + 4 * flag)]
            else:
                got = recordio.read_record(self._mm, offset, self.path_imgrec)
                raw = got[0] if got is not None else b""
            header, _ = recordio.unpack(raw)
        except recordio.RecordIOError as err:
            msg = str(err)
            if not msg.startswith(self.path_imgrec):
                msg = f"{self.path_imgrec}: record at byte offset {offset}: {msg}"
            raise TrainError(msg) from None
        if header.flag <= 0:
            raise TrainError(f"{self.path_imgrec}: record at byte offset {offset} holds one "
                             f"label ({header.label:g}), not a detection label; pack the "
                             f"list with `symgraph im2rec --pack-label`")
        return parse_det_label(header.label, f"{self.path_imgrec}: record at byte offset "
                                             f"{offset}")

    def _label_shape(self):
        if self.label_layout == "mxnet":
            return (self.batch_size, 4 + self.label_pad_width)
        return (self.batch_size, self.max_objects, self._object_width)

    # -- the pipeline: ImageRecordIter's, with a detection label --------------------
    def _submit(self, b: int) -> None:
        """Hands batch ``b`` to the pool (ImageRecordIter's, with a label
        array of the detection shape, filled with ``label_pad_value``)."""
        bs, n = self.batch_size, self.num_data
        pos = np.arange(b * bs, (b + 1) * bs)
        pad = int(max(0, pos[-1] + 1 - n))
        if self.round_batch:
            pos = pos % n
        data = aligned_zeros((bs,) + self.data_shape, self.dtype)
        label = aligned_zeros(self._label_shape(), np.float32)
        label[...] = self.label_pad_value
        chunks = np.array_split(np.nonzero(pos < n)[0], self.preprocess_threads)
        futures = [self._pool.submit(self._load_many, [int(s) for s in chunk],
                                     [int(pos[s]) for s in chunk], data, label)
                   for chunk in chunks if len(chunk)]
        self._inflight[b] = (data, label, futures, pad, pos)

    def _load(self, slot: int, p: int, data, label) -> None:
        rec, img, lab = self._decode_at(p)
        where = f"{self.path_imgrec}: record at byte offset {self._offsets[rec]}"
        header, objects = parse_det_label(lab, where)
        rng = np.random.default_rng([self.seed, self.epoch, rec, 1])
        out, objects = self.augment(img, objects, rng)
        self._store(out, data, slot)
        if self.label_layout == "mxnet":
            flat = np.concatenate([header, objects.ravel()])
            label[slot, :4] = (out.shape[2], out.shape[0], out.shape[1], flat.size)
            label[slot, 4:4 + flat.size] = flat
        else:
            label[slot, :len(objects)] = objects

    # -- augmentation -----------------------------------------------------------------
    def augment(self, img: np.ndarray, objects: np.ndarray, rng):
        """``(image, objects)`` after the augmentation (see the class): an
        HxWxC uint8 image and ``(n, object_width)`` normalised objects in,
        the ``data_shape`` image and the objects that remain out.
        Zero-area boxes are dropped first, as MXNet's parser drops them."""
        objects = objects[(objects[:, 3] > objects[:, 1]) & (objects[:, 4] > objects[:, 2])]
        objects = objects.astype(np.float32, copy=True)
        h, w = img.shape[:2]
        if self.resize > 0:
            r = self.resize
            img = _resize(img, (r, h * r // w) if h > w else (w * r // h, r))
        if self.rand_mirror_prob > 0 and rng.random() < self.rand_mirror_prob:
            img = img[:, ::-1]
            x0 = objects[:, 1].copy()
            objects[:, 1] = 1 - objects[:, 3]
            objects[:, 3] = 1 - x0
        if self.rand_pad_prob > 0 and self.max_pad_scale > 1 \
                and rng.random() < self.rand_pad_prob:
            img, objects = self._pad(img, objects, rng)
        if self.rand_crop_prob > 0 and self._samplers and rng.random() < self.rand_crop_prob:
            img, objects = self._crop(img, objects, rng)
        c, th, tw = self.data_shape
        img = _resize(img, (tw, th))
        return img, objects

    def _pad(self, img, objects, rng):
        """MXNet's random expansion: a canvas ``s`` times the image (``s``
        uniform in [1, max_pad_scale], none under 1.05), the image at a
        random place in it."""
        s = rng.uniform(1.0, self.max_pad_scale)
        if s < 1.05:
            return img, objects
        h, w, c = img.shape
        x0, y0 = rng.uniform(0, s - 1), rng.uniform(0, s - 1)
        left, top = int(x0 * w), int(y0 * h)
        right, bottom = int((s - x0 - 1) * w), int((s - y0 - 1) * h)
        nw, nh = w + left + right, h + top + bottom
        out = np.empty((nh, nw, c), np.uint8)
        out[...] = np.uint8(np.clip(self.fill_value, 0, 255))
        out[top:top + h, left:left + w] = img
        objects = objects.copy()
        objects[:, [1, 3]] = (objects[:, [1, 3]] * w + left) / nw
        objects[:, [2, 4]] = (objects[:, [2, 4]] * h + top) / nh
        return out, objects

    def _crop(self, img, objects, rng):
        h, w = img.shape[:2]
        for idx in rng.permutation(len(self._samplers)):
            s = self._samplers[int(idx)]
            for _ in range(int(s["max_crop_trials"])):
                box = self._crop_box(s, rng, w / h)
                # whole pixels, and the box those pixels are
                left, top = int(box[0] * w), int(box[1] * h)
                cw, ch = max(1, int(box[2] * w)), max(1, int(box[3] * h))
                cw, ch = min(cw, w - left), min(ch, h - top)
                if cw < 1 or ch < 1:
                    continue
                crop = np.array([left / w, top / h, (left + cw) / w, (top + ch) / h])
                kept = self._try_crop(crop, objects, s)
                if kept is not None:
                    return img[top:top + ch, left:left + cw], kept
        return img, objects

    @staticmethod
    def _crop_box(s, rng, img_aspect):
        """MXNet's crop sampler: a scale, then an aspect ratio within the
        sampler's range that keeps the crop inside the image; ``(x0, y0,
        width, height)`` as shares of the image."""
        scale = rng.uniform(s["min_crop_scales"], s["max_crop_scales"]) + 1e-12
        lo = max(s["min_crop_aspect_ratios"] / img_aspect, scale * scale)
        hi = min(s["max_crop_aspect_ratios"] / img_aspect, 1.0 / (scale * scale))
        ratio = np.sqrt(rng.uniform(lo, hi) if hi > lo else min(lo, hi))
        bw, bh = min(1.0, scale * ratio), min(1.0, scale / ratio)
        return rng.uniform(0, 1 - bw), rng.uniform(0, 1 - bh), bw, bh

    def _try_crop(self, crop, objects, s):
        """The objects projected into ``crop`` (x0, y0, x1, y1), or None when
        the crop fails the sampler's constraints or keeps no object."""
        if len(objects) == 0:
            return objects
        boxes = objects[:, 1:5].astype(np.float64)
        inter, iou = _iou(crop, boxes)
        crop_area = (crop[2] - crop[0]) * (crop[3] - crop[1])
        gt_area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
        ok = np.ones(len(objects), bool)
        if s["min_crop_overlaps"] > 0 or s["max_crop_overlaps"] < 1:
            ok &= (iou >= s["min_crop_overlaps"]) & (iou <= s["max_crop_overlaps"])
        if s["min_crop_sample_coverages"] > 0 or s["max_crop_sample_coverages"] < 1:
            c = inter / crop_area
            ok &= (c >= s["min_crop_sample_coverages"]) & (c <= s["max_crop_sample_coverages"])
        if s["min_crop_object_coverages"] > 0 or s["max_crop_object_coverages"] < 1:
            c = inter / gt_area
            ok &= (c >= s["min_crop_object_coverages"]) & (c <= s["max_crop_object_coverages"])
        if not ok.any():
            return None
        if self.crop_emit_mode == "center":
            cx, cy = (boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2
            keep = (cx >= crop[0]) & (cx < crop[2]) & (cy >= crop[1]) & (cy < crop[3])
        else:
            keep = inter / gt_area > self.emit_overlap_thresh
        if not keep.any():
            return None
        out = objects[keep].copy()
        cw, ch = crop[2] - crop[0], crop[3] - crop[1]
        out[:, [1, 3]] = np.clip((out[:, [1, 3]] - crop[0]) / cw, 0, 1)
        out[:, [2, 4]] = np.clip((out[:, [2, 4]] - crop[1]) / ch, 0, 1)
        return out

    # -- DataIter -------------------------------------------------------------------
    @property
    def provide_label(self) -> list[DataDesc]:
        return [DataDesc(self.label_name, self._label_shape(), "float32")]
