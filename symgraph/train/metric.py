"""Evaluation metrics, MXNet style: ``update(labels, preds)`` with lists of
arrays, ``get() -> (name, value)``, ``reset()``.

    m = sg.metric.create(['acc', sg.metric.TopKAccuracy(top_k=3), 'ce'])
    m.update([label], [probabilities])
    m.get_name_value()     # [('accuracy', 0.96), ('top_k_accuracy_3', 1.0), ...]

Arrays may be NumPy arrays, NDArrays or jax arrays; the math runs in NumPy
on the host. As MXNet's, ``MSE``/``RMSE``/``MAE`` average per batch.
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


def np(numpy_feval: Callable, name: str | None = None, allow_extra_outputs: bool = False):
    """MXNet's ``mx.metric.np``: a CustomMetric from a NumPy function."""
    return CustomMetric(numpy_feval, name, allow_extra_outputs)


def create(metric, *args, **kwargs) -> EvalMetric:
    """A metric from an instance, a name (``'acc'``, ``'top_k_accuracy'``,
    ``'ce'``, ``'mse'``, ``'rmse'``, ``'mae'``, ``'loss'``), a function
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
