"""Evaluation metrics, MXNet style: ``update(labels, preds)`` with lists of
arrays, ``get() -> (name, value)``, ``reset()``.

    m = sg.metric.create(['acc', sg.metric.TopKAccuracy(top_k=3), 'ce'])
    m.update([label], [probabilities])
    m.get_name_value()     # [('accuracy', 0.96), ('top_k_accuracy_3', 1.0), ...]

Arrays may be NumPy arrays, NDArrays or jax arrays; the math runs in NumPy
on the host. As MXNet's, ``MSE``/``RMSE``/``MAE`` average per batch.
``MApMetric``/``VOC07MApMetric`` (``'map'``, ``'voc07_map'``) score
detections (docs/detection.md).
"""
from __future__ import annotations

from typing import Callable

import numpy as _numpy

from . import TrainError


def _host(x) -> _numpy.ndarray:
    if hasattr(x, "asnumpy"):
        return x.asnumpy()
    return _numpy.asarray(x)


def check_label_shapes(labels, preds, shape: bool = False) -> None:
    """Raises TrainError when the two lists (or, with ``shape``, arrays)
    differ in length."""
    a, b = (labels.shape, preds.shape) if shape else (len(labels), len(preds))
    if a != b:
        what = "shape" if shape else "number of arrays"
        raise TrainError(f"labels and predictions differ in {what}: {a} vs {b}")


_REGISTRY: dict[str, type] = {}


def register(klass: type, *aliases: str) -> type:
    for n in (klass.__name__.lower(), *aliases):
        _REGISTRY[n] = klass
    return klass


def alias(*names: str):
    def deco(klass):
        return register(klass, *names)
    return deco


class EvalMetric:
    """Base class: accumulates ``sum_metric`` over ``num_inst``."""

    def __init__(self, name: str, output_names=None, label_names=None, **kwargs):
        self.name = str(name)
        self.output_names = output_names
        self.label_names = label_names
        self._kwargs = kwargs
        self.reset()

    def __str__(self):
        return f"EvalMetric: {dict(self.get_name_value())}"

    def get_config(self) -> dict:
        config = dict(self._kwargs)
        config.update({"metric": type(self).__name__, "name": self.name,
                       "output_names": self.output_names, "label_names": self.label_names})
        return config

    def update_dict(self, label: dict, pred: dict) -> None:
        """Update from ``{name: array}`` dicts, picking ``output_names``/
        ``label_names`` when set (all, in order, otherwise)."""
        preds = [pred[n] for n in self.output_names] if self.output_names is not None \
            else list(pred.values())
        labels = [label[n] for n in self.label_names] if self.label_names is not None \
            else list(label.values())
        self.update(labels, preds)

    def update(self, labels, preds) -> None:
        raise NotImplementedError

    def reset(self) -> None:
        """Forgets everything (local and global)."""
        self.num_inst = 0
        self.sum_metric = 0.0
        self.global_num_inst = 0
        self.global_sum_metric = 0.0

    def reset_local(self) -> None:
        """Starts a new local window; the global value keeps counting (what
        Speedometer's ``auto_reset`` uses, as in MXNet)."""
        self.global_num_inst += self.num_inst
        self.global_sum_metric += self.sum_metric
        self.num_inst = 0
        self.sum_metric = 0.0

    def get(self):
        """``(name, value)`` since the last ``reset_local``; NaN before the
        first update."""
        if self.num_inst == 0:
            return self.name, float("nan")
        return self.name, float(self.sum_metric) / self.num_inst

    def get_global(self):
        """``(name, value)`` since the last ``reset``."""
        num = self.global_num_inst + self.num_inst
        if num == 0:
            return self.name, float("nan")
        return self.name, float(self.global_sum_metric + self.sum_metric) / num

    def get_name_value(self) -> list:
        return _name_value(self.get())

    def get_global_name_value(self) -> list:
        return _name_value(self.get_global())


def _name_value(pair) -> list:
    name, value = pair
    if not isinstance(name, list):
        name, value = [name], [value]
    return list(zip(name, value))


class CompositeEvalMetric(EvalMetric):
    """Several metrics updated together; ``get`` returns lists."""

    def __init__(self, metrics=None, name: str = "composite", output_names=None,
                 label_names=None):
        self.metrics = [create(m) for m in (metrics or [])]
        super().__init__(name, output_names, label_names)

    def add(self, metric) -> None:
        self.metrics.append(create(metric))

    def get_metric(self, index: int) -> EvalMetric:
        return self.metrics[index]

    def update_dict(self, labels, preds):
        for m in self.metrics:
            m.update_dict(labels, preds)

    def update(self, labels, preds):
        for m in self.metrics:
            m.update(labels, preds)

    def reset(self):
        for m in getattr(self, "metrics", []):
            m.reset()

    def reset_local(self):
        for m in self.metrics:
            m.reset_local()

    def _collect(self, which):
        names, values = [], []
        for m in self.metrics:
            n, v = getattr(m, which)()
            names += n if isinstance(n, list) else [n]
            values += v if isinstance(v, list) else [v]
        return names, values

    def get(self):
        return self._collect("get")

    def get_global(self):
        return self._collect("get_global")


@alias("acc")
class Accuracy(EvalMetric):
    """Fraction of samples whose arg-max along ``axis`` equals the label
    (predictions already of the label's shape are used as class ids)."""

    def __init__(self, axis: int = 1, name: str = "accuracy", output_names=None,
                 label_names=None):
        super().__init__(name, output_names, label_names, axis=axis)
        self.axis = axis

    def update(self, labels, preds):
        check_label_shapes(labels, preds)
        for label, pred in zip(labels, preds):
            label, pred = _host(label), _host(pred)
            if pred.shape != label.shape:
                pred = _numpy.argmax(pred, axis=self.axis)
            pred = pred.astype(_numpy.int64).ravel()
            label = label.astype(_numpy.int64).ravel()
            check_label_shapes(label, pred, shape=True)
            self.sum_metric += int((pred == label).sum())
            self.num_inst += len(pred)


@alias("top_k_accuracy", "top_k_acc")
class TopKAccuracy(EvalMetric):
    """Fraction of samples whose label is among the ``top_k`` scores."""

    def __init__(self, top_k: int = 1, name: str = "top_k_accuracy", output_names=None,
                 label_names=None):
        if top_k < 1:
            raise TrainError(f"TopKAccuracy: top_k must be at least 1, got {top_k}")
        super().__init__(f"{name}_{top_k}", output_names, label_names, top_k=top_k)
        self.top_k = int(top_k)

    def update(self, labels, preds):
        check_label_shapes(labels, preds)
        for label, pred in zip(labels, preds):
            label, pred = _host(label).astype(_numpy.int64).ravel(), _host(pred)
            if pred.ndim != 2:
                raise TrainError(f"TopKAccuracy needs (batch, classes) scores, got shape "
                                 f"{pred.shape}")
            k = min(self.top_k, pred.shape[1])
            top = _numpy.argpartition(-pred, k - 1, axis=1)[:, :k]
            self.sum_metric += int((top == label[:, None]).any(axis=1).sum())
            self.num_inst += len(label)


@alias("ce", "cross-entropy", "cross_entropy")
class CrossEntropy(EvalMetric):
    """Mean of ``-log(p[label] + eps)`` over samples (``p`` probabilities)."""

    def __init__(self, eps: float = 1e-12, name: str = "cross-entropy", output_names=None,
                 label_names=None):
        super().__init__(name, output_names, label_names, eps=eps)
        self.eps = float(eps)

    def update(self, labels, preds):
        check_label_shapes(labels, preds)
        for label, pred in zip(labels, preds):
            label, pred = _host(label).astype(_numpy.int64).ravel(), _host(pred)
            pred = pred.reshape(len(label), -1)
            prob = pred[_numpy.arange(len(label)), label]
            self.sum_metric += float((-_numpy.log(prob.astype(_numpy.float64) + self.eps)).sum())
            self.num_inst += len(label)


class _Regression(EvalMetric):
    def _pairs(self, labels, preds):
        check_label_shapes(labels, preds)
        for label, pred in zip(labels, preds):
            label, pred = _host(label).astype(_numpy.float64), _host(pred).astype(_numpy.float64)
            if label.ndim == 1:
                label = label.reshape(label.shape[0], 1)
            if pred.ndim == 1:
                pred = pred.reshape(pred.shape[0], 1)
            yield label.reshape(pred.shape) if label.size == pred.size else label, pred


@alias()
class MSE(_Regression):
    """Mean squared error, averaged per batch."""

    def __init__(self, name: str = "mse", output_names=None, label_names=None):
        super().__init__(name, output_names, label_names)

    def update(self, labels, preds):
        for label, pred in self._pairs(labels, preds):
            self.sum_metric += float(((label - pred) ** 2).mean())
            self.num_inst += 1


@alias()
class RMSE(_Regression):
    """Root mean squared error, averaged per batch."""

    def __init__(self, name: str = "rmse", output_names=None, label_names=None):
        super().__init__(name, output_names, label_names)

    def update(self, labels, preds):
        for label, pred in self._pairs(labels, preds):
            self.sum_metric += float(_numpy.sqrt(((label - pred) ** 2).mean()))
            self.num_inst += 1


@alias()
class MAE(_Regression):
    """Mean absolute error, averaged per batch."""

    def __init__(self, name: str = "mae", output_names=None, label_names=None):
        super().__init__(name, output_names, label_names)

    def update(self, labels, preds):
        for label, pred in self._pairs(labels, preds):
            self.sum_metric += float(_numpy.abs(label - pred).mean())
            self.num_inst += 1


@alias()
class Loss(EvalMetric):
    """Mean of the output values themselves (for nets that output a loss)."""

    def __init__(self, name: str = "loss", output_names=None, label_names=None):
        super().__init__(name, output_names, label_names)

    def update(self, _, preds):
        for pred in preds:
            pred = _host(pred)
            self.sum_metric += float(pred.astype(_numpy.float64).sum())
            self.num_inst += pred.size


class CustomMetric(EvalMetric):
    """A metric from ``feval(label, pred) -> value`` (or ``(sum, count)``)
    on NumPy arrays, one call per output."""

    def __init__(self, feval: Callable, name: str | None = None,
                 allow_extra_outputs: bool = False, output_names=None, label_names=None):
        name = name or getattr(feval, "__name__", "custom")
        if name.startswith("<"):
            name = "custom"
        super().__init__(name, output_names, label_names)
        self._feval = feval
        self._allow_extra_outputs = allow_extra_outputs

    def update(self, labels, preds):
        if not self._allow_extra_outputs:
            check_label_shapes(labels, preds)
        for label, pred in zip(labels, preds):
            reval = self._feval(_host(label), _host(pred))
            if isinstance(reval, tuple):
                s, n = reval
                self.sum_metric += s
                self.num_inst += n
            else:
                self.sum_metric += reval
                self.num_inst += 1


# -- detection --------------------------------------------------------------------
# Mean average precision as MXNet's example/ssd/evaluate/eval_metric.py computes
# it (docs/detection.md). Labels (batch, objects, 5|6) rows [cls, xmin, ymin,
# xmax, ymax(, difficult)], detections MultiBoxDetection's (batch, anchors, 6)
# rows [cls, score, xmin, ymin, xmax, ymax]; a negative class is padding.

def _box_iou(box, boxes) -> _numpy.ndarray:
    ix0 = _numpy.maximum(boxes[:, 0], box[0])
    iy0 = _numpy.maximum(boxes[:, 1], box[1])
    ix1 = _numpy.minimum(boxes[:, 2], box[2])
    iy1 = _numpy.minimum(boxes[:, 3], box[3])
    inter = _numpy.maximum(ix1 - ix0, 0.0) * _numpy.maximum(iy1 - iy0, 0.0)
    union = (box[2] - box[0]) * (box[3] - box[1]) \
        + (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]) - inter
    return _numpy.where(union < 1e-12, 0.0, inter / _numpy.where(union < 1e-12, 1.0, union))


@alias("map", "voc_map")
class MApMetric(EvalMetric):
    """VOC mean average precision (area under the precision envelope).

    ``ovp_thresh``: the IoU a match must exceed; ``use_difficult``: count
    difficult boxes as ordinary ones; ``class_names``: also report each
    class's AP (``get`` then gives lists, the names and ``'mAP'`` last);
    ``pred_idx``: which output holds the detections. Detections are kept
    until ``get`` (AP is not a sum over batches); ``reset_local`` starts a
    new local window, ``get_global`` covers everything since ``reset``.
    """

    def __init__(self, ovp_thresh: float = 0.5, use_difficult: bool = False,
                 class_names=None, pred_idx: int = 0, name: str = "mAP",
                 output_names=None, label_names=None):
        if class_names is not None:
            if not isinstance(class_names, (list, tuple)) or \
                    not all(isinstance(c, str) for c in class_names):
                raise TrainError(f"{type(self).__name__}: class_names must be a list of "
                                 f"strings, got {class_names!r}")
            class_names = list(class_names)
        if not 0 <= ovp_thresh <= 1:
            raise TrainError(f"{type(self).__name__}: ovp_thresh must lie in [0, 1], "
                             f"got {ovp_thresh}")
        self.ovp_thresh = float(ovp_thresh)
        self.use_difficult = bool(use_difficult)
        self.class_names = class_names
        self.pred_idx = int(pred_idx)
        super().__init__(name, output_names, label_names, ovp_thresh=ovp_thresh,
                         use_difficult=use_difficult, class_names=class_names,
                         pred_idx=pred_idx)

    # records: {class: [list of (score, flag) arrays]}, counts: {class: positives}
    def reset(self) -> None:
        super().reset()
        self._local = ({}, {})
        self._global = ({}, {})

    def reset_local(self) -> None:
        _merge(self._global, self._local)
        self._local = ({}, {})

    def update(self, labels, preds) -> None:
        if not labels or len(preds) <= self.pred_idx:
            raise TrainError(f"{type(self).__name__}: needs one label array and the "
                             f"detections at output {self.pred_idx}; got {len(labels)} "
                             f"label(s) and {len(preds)} output(s)")
        label = _host(labels[0]).astype(_numpy.float64)
        pred = _host(preds[self.pred_idx]).astype(_numpy.float64)
        if label.ndim != 3 or label.shape[2] not in (5, 6):
            raise TrainError(f"{type(self).__name__}: labels must be (batch, objects, 5 or 6) "
                             f"[cls, xmin, ymin, xmax, ymax(, difficult)], got shape "
                             f"{label.shape}")
        if pred.ndim != 3 or pred.shape[2] != 6:
            raise TrainError(f"{type(self).__name__}: detections must be (batch, anchors, 6) "
                             f"[cls, score, xmin, ymin, xmax, ymax], got shape {pred.shape}")
        if pred.shape[0] != label.shape[0]:
            raise TrainError(f"{type(self).__name__}: {label.shape[0]} label rows but "
                             f"{pred.shape[0]} detection rows")
        records, counts = self._local
        for lab, det in zip(label, pred):
            lab = lab[lab[:, 0] >= 0]
            if len(lab) == 0:
                continue  # MXNet skips an image without ground truth
            det = det[det[:, 0] >= 0]
            classes = _numpy.unique(_numpy.concatenate([lab[:, 0], det[:, 0]]).astype(_numpy.int64))
            for cid in classes:
                gts = lab[lab[:, 0].astype(_numpy.int64) == cid]
                dets = det[det[:, 0].astype(_numpy.int64) == cid]
                difficult = gts[:, 5] > 0 if (gts.shape[1] >= 6 and not self.use_difficult) \
                    else _numpy.zeros(len(gts), bool)
                counts[cid] = counts.get(cid, 0) + int((~difficult).sum())
                if len(dets) == 0:
                    records.setdefault(cid, [])
                    continue
                dets = dets[_numpy.argsort(-dets[:, 1], kind="stable")]
                flags = _numpy.full(len(dets), 2, _numpy.int8)  # 1 tp, 2 fp, 0 ignored
                if len(gts):
                    found = _numpy.zeros(len(gts), bool)
                    for j, d in enumerate(dets):
                        ious = _box_iou(d[2:6], gts[:, 1:5])
                        best = int(_numpy.argmax(ious))
                        if ious[best] > self.ovp_thresh:
                            if difficult[best]:
                                flags[j] = 0
                            elif not found[best]:
                                flags[j], found[best] = 1, True
                records.setdefault(cid, []).append(
                    _numpy.stack([dets[:, 1], flags], axis=1)[flags > 0])

    def _aps(self, which):
        records, counts = which
        aps = {}
        for cid in sorted(set(records) | set(counts)):
            recs = records.get(cid, [])
            rec = _numpy.concatenate(recs) if recs else _numpy.zeros((0, 2))
            rec = rec[_numpy.argsort(-rec[:, 0], kind="stable")]
            tp = _numpy.cumsum(rec[:, 1] == 1)
            fp = _numpy.cumsum(rec[:, 1] == 2)
            count = counts.get(cid, 0)
            recall = tp / float(count) if count > 0 else tp * 0.0
            prec = tp / _numpy.maximum(tp + fp, 1)
            aps[cid] = self._average_precision(recall, prec)
        return aps

    @staticmethod
    def _average_precision(recall, prec) -> float:
        """Area under the precision envelope (VOC 2010+)."""
        mrec = _numpy.concatenate(([0.0], recall, [1.0]))
        mpre = _numpy.concatenate(([0.0], prec, [0.0]))
        mpre = _numpy.maximum.accumulate(mpre[::-1])[::-1]
        i = _numpy.nonzero(mrec[1:] != mrec[:-1])[0]
        return float(_numpy.sum((mrec[i + 1] - mrec[i]) * mpre[i + 1]))

    def _result(self, which):
        aps = self._aps(which)
        mean = float(_numpy.mean(list(aps.values()))) if aps else float("nan")
        if self.class_names is None:
            return self.name, mean
        names = self.class_names + [self.name]
        values = [aps.get(k, float("nan")) for k in range(len(self.class_names))] + [mean]
        return names, values

    def get(self):
        """``('mAP', value)``, or with ``class_names`` ``(names, values)``
        with each class's AP and the mean last; NaN before any ground
        truth."""
        return self._result(self._local)

    def get_global(self):
        both = ({}, {})
        _merge(both, self._global)
        _merge(both, self._local)
        return self._result(both)


def _merge(into, other) -> None:
    for cid, recs in other[0].items():
        into[0].setdefault(cid, []).extend(recs)
    for cid, n in other[1].items():
        into[1][cid] = into[1].get(cid, 0) + n


@alias("voc07_map", "voc07map")
class VOC07MApMetric(MApMetric):
    """VOC 2007's 11-point mean average precision: per class the mean over
    ``t = 0, 0.1, ..., 1`` of the best precision at recall ``>= t`` (0 when
    the recall never reaches ``t``)."""

    @staticmethod
    def _average_precision(recall, prec) -> float:
        ap = 0.0
        for t in _numpy.arange(0.0, 1.1, 0.1):  # MXNet's and VOC's thresholds, bit for bit
            ap += (float(_numpy.max(prec[recall >= t])) if _numpy.any(recall >= t) else 0.0) / 11.0
        return ap


def np(numpy_feval: Callable, name: str | None = None, allow_extra_outputs: bool = False):
    """MXNet's ``mx.metric.np``: a CustomMetric from a NumPy function."""
    return CustomMetric(numpy_feval, name, allow_extra_outputs)


def create(metric, *args, **kwargs) -> EvalMetric:
    """A metric from an instance, a name (``'acc'``, ``'top_k_accuracy'``,
    ``'ce'``, ``'mse'``, ``'rmse'``, ``'mae'``, ``'loss'``, ``'map'``,
    ``'voc07_map'``), a function
    ``feval(label, pred)``, or a list of any of these (a composite)."""
    if isinstance(metric, EvalMetric):
        return metric
    if callable(metric):
        return CustomMetric(metric, *args, **kwargs)
    if isinstance(metric, (list, tuple)):
        return CompositeEvalMetric([create(m) for m in metric])
    klass = _REGISTRY.get(str(metric).lower())
    if klass is None:
        raise TrainError(f"unknown metric '{metric}'; known: {', '.join(sorted(_REGISTRY))}")
    return klass(*args, **kwargs)


register(CompositeEvalMetric, "composite")
