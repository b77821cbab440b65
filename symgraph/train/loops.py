"""The Module's loops over iterators -- ``fit``, ``score``,
``iter_predict``, ``predict`` -- written against the Module's state and
step methods (``bind``, ``init_params``, ``init_optimizer``,
``train_step``, ``forward``, ``update_metric``, ``get_params``, ...).
``Module`` inherits them, beside the parts that keep and change its state
(``train/module.py`` and the ``train/module_*.py`` it is made of).
"""
from __future__ import annotations

import time

import jax
import numpy as np

from ..ndarray import NDArray
from . import TrainError
from . import callback as cb
from . import initializer as init_mod
from . import metric as metric_mod
from .io import PrefetchingIter


def _as_list(x):
    if x is None:
        return []
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _refuse_given(what: str, value, why: str) -> None:
    """TrainError for an MXNet argument given a value (not None, False or
    empty) that symgraph does not implement: refused, never ignored."""
    empty = value is None or value is False or (isinstance(value, (list, tuple, dict, str))
                                                 and not value)
    if not empty:
        raise TrainError(f"{what}={value!r} is not supported: {why}")


def _flipped(batch, data_names):
    """A copy of ``batch`` whose 4-D data arrays (NCHW images) are mirrored
    left-right; other arrays and the labels unchanged."""
    from .io import DataBatch

    def flip(x):
        if isinstance(x, NDArray):
            x = x.data
        return x[..., ::-1] if np.ndim(x) == 4 else x

    if isinstance(batch, dict):  # arrays by input name
        return {k: flip(v) if k in data_names else v for k, v in batch.items()}
    data = [flip(x) for x in _as_list(batch.data)]
    return DataBatch(data, batch.label, batch.pad, batch.index, batch.bucket_key,
                     provide_data=batch.provide_data, provide_label=batch.provide_label)


class Loops:
    """``fit``/``score``/``iter_predict``/``predict`` for a class with the
    Module's state and step methods (``Module`` is the one)."""

    # -- fit / score / predict -------------------------------------------------------------------
    def fit(self, train_data, eval_data=None, eval_metric="acc", epoch_end_callback=None,
            batch_end_callback=None, kvstore="local", optimizer="sgd",
            optimizer_params=(("learning_rate", 0.01),), eval_end_callback=None,
            eval_batch_end_callback=None, initializer=None, arg_params=None, aux_params=None,
            allow_missing: bool = False, force_rebind: bool = False, force_init: bool = False,
            begin_epoch: int = 0, num_epoch: int | None = None, validation_metric=None,
            monitor=None, sparse_row_id_fn=None, prefetch: int = 2, seed: int | None = None):
        """Trains for ``num_epoch`` epochs from ``begin_epoch`` (MXNet's
        arguments). ``prefetch`` batches are prepared and copied to the
        devices on a background thread (0 turns that off); ``seed`` seeds the
        initializer."""
        _refuse_given("monitor", monitor, "a step is one compiled program that keeps no "
                      "intermediate values; group the ones to watch as outputs "
                      "(symbol.get_internals()) and read them with get_outputs()")
        _refuse_given("sparse_row_id_fn", sparse_row_id_fn, "symgraph has no sparse arrays")
        if num_epoch is None:
            raise TrainError("fit: please specify num_epoch")
        if initializer is None:
            initializer = init_mod.Uniform(0.01)
        self.bind(data_shapes=train_data.provide_data, label_shapes=train_data.provide_label,
                  for_training=True, force_rebind=force_rebind)
        if not self.params_initialized or force_init or arg_params is not None or \
                aux_params is not None:
            # a loaded module (Module.load, set_params) trains on from its own
            # parameters; init_params would only log that it ignored the call
            self.init_params(initializer=initializer, arg_params=arg_params,
                             aux_params=aux_params, allow_missing=allow_missing,
                             force_init=force_init, seed=seed)
        self.init_optimizer(kvstore=kvstore, optimizer=optimizer,
                            optimizer_params=optimizer_params)
        if self._devices.processes > 1:  # fewer steps in one would hang the others
            from ..parallel import distributed
            distributed.check_same_everywhere(getattr(train_data, "num_batches", -1),
                                              "batches per epoch")
            if eval_data is not None:
                distributed.check_same_everywhere(getattr(eval_data, "num_batches", -1),
                                                  "evaluation batches")
        if begin_epoch and self._optimizer.num_update == self._optimizer.begin_num_update:
            # no optimizer state was loaded: at least resume the lr schedule
            per_epoch = getattr(train_data, "num_batches", None)
            if per_epoch:
                self._optimizer.num_update += begin_epoch * int(per_epoch)
        if validation_metric is None:
            validation_metric = eval_metric
        eval_metric = metric_mod.create(eval_metric)
        validation_metric = metric_mod.create(validation_metric)
        if begin_epoch and hasattr(train_data, "set_epoch"):
            train_data.set_epoch(begin_epoch)
        source = train_data
        if prefetch:
            source = PrefetchingIter(train_data, depth=prefetch, transform=self.prepare_batch)
        try:
            for epoch in range(begin_epoch, num_epoch):
                tic = time.time()
                eval_metric.reset()
                nbatch = 0
                for data_batch in source:
                    self.train_step(data_batch)
                    self.update_metric(eval_metric, getattr(data_batch, "original_label",
                                                            data_batch.label))
                    if batch_end_callback is not None:
                        params = cb.BatchEndParam(epoch=epoch, nbatch=nbatch,
                                                  eval_metric=eval_metric, locals=locals())
                        for callback in _as_list(batch_end_callback):
                            callback(params)
                    nbatch += 1
                for name, val in eval_metric.get_global_name_value():
                    self.logger.info("Epoch[%d] Train-%s=%f", epoch, name, val)
                self.logger.info("Epoch[%d] Time cost=%.3f", epoch, time.time() - tic)
                if epoch_end_callback is not None:
                    arg, aux = self.get_params()
                    for callback in _as_list(epoch_end_callback):
                        callback(epoch, self.symbol, arg, aux)
                if eval_data is not None:
                    res = self.score(eval_data, validation_metric,
                                     score_end_callback=eval_end_callback,
                                     batch_end_callback=eval_batch_end_callback, epoch=epoch)
                    for name, val in res:
                        self.logger.info("Epoch[%d] Validation-%s=%f", epoch, name, val)
                source.reset()
        finally:
            if source is not train_data:
                source.close()

    def score(self, eval_data, eval_metric, num_batch=None, batch_end_callback=None,
              score_end_callback=None, reset: bool = True, epoch: int = 0,
              sparse_row_id_fn=None, tta_flip: bool = False, use_ema=None):
        """Runs inference over ``eval_data``; returns the metric's
        ``[(name, value)]``. ``tta_flip``: the outputs are the mean of the
        net's outputs on the images and on their horizontal flips;
        ``use_ema``: with ``Module(ema_decay=)``, False evaluates the
        weights themselves instead of their moving average."""
        _refuse_given("sparse_row_id_fn", sparse_row_id_fn, "symgraph has no sparse arrays")
        self._check_params("score")
        if reset:
            eval_data.reset()
        eval_metric = metric_mod.create(eval_metric)
        eval_metric.reset()
        nbatch = 0
        for nbatch, batch in enumerate(eval_data):
            if num_batch is not None and nbatch == num_batch:
                break
            self._infer_forward(batch, tta_flip, use_ema)
            self.update_metric(eval_metric, batch.label)
            if batch_end_callback is not None:
                params = cb.BatchEndParam(epoch=epoch, nbatch=nbatch, eval_metric=eval_metric,
                                          locals=locals())
                for callback in _as_list(batch_end_callback):
                    callback(params)
        if score_end_callback is not None:
            params = cb.BatchEndParam(epoch=epoch, nbatch=nbatch, eval_metric=eval_metric,
                                      locals=locals())
            for callback in _as_list(score_end_callback):
                callback(params)
        return eval_metric.get_global_name_value()

    def _infer_forward(self, batch, tta_flip: bool = False, use_ema=None) -> None:
        """``forward(batch, is_train=False)``; with ``tta_flip`` the outputs
        become the mean of the outputs on the batch and on its images
        flipped left-right (the last axis of every 4-D data array: W of
        NCHW); ``use_ema`` False reads the weights, not their average."""
        before = getattr(self, "_use_ema", True)
        if use_ema is not None:
            if use_ema and getattr(self, "_ema", None) is None:
                raise TrainError("use_ema=True: the module keeps no average of the weights "
                                 "(Module(..., ema_decay=0.99))")
            self._use_ema = bool(use_ema)
        try:
            self.forward(batch, is_train=False)
            if tta_flip:
                plain = list(self._outputs)
                self.forward(_flipped(batch, self._data_names), is_train=False)
                self._outputs = [(a + b) / 2 for a, b in zip(plain, self._outputs)]
        finally:
            self._use_ema = before

    def iter_predict(self, eval_data, num_batch=None, reset: bool = True,
                     tta_flip: bool = False, use_ema=None):
        """Yields ``(outputs without padding, batch index, batch)``
        (``tta_flip``, ``use_ema``: as ``score``)."""
        self._check_params("iter_predict")
        if reset:
            eval_data.reset()
        for nbatch, batch in enumerate(eval_data):
            if num_batch is not None and nbatch == num_batch:
                break
            self._infer_forward(batch, tta_flip, use_ema)
            pad = batch.pad or 0
            outs = [NDArray(o[: o.shape[0] - pad] if o.ndim else o) for o in self._outputs]
            yield outs, nbatch, batch

    def predict(self, eval_data, num_batch=None, merge_batches: bool = True,
                reset: bool = True, always_output_list: bool = False,
                tta_flip: bool = False, use_ema=None):
        """The outputs over ``eval_data``, concatenated across batches
        (padding removed); one NDArray for a one-output net. ``tta_flip``:
        each output the mean of the net's outputs on the images and their
        horizontal flips (for a softmax, the mean of the probabilities);
        ``use_ema``: as ``score``."""
        if isinstance(eval_data, (np.ndarray, NDArray, jax.Array)):
            from .io import NDArrayIter
            eval_data = NDArrayIter(eval_data, batch_size=self._data_shapes[0].shape[0]
                                    if self._data_shapes else 1)
        outputs = [outs for outs, _, _ in self.iter_predict(eval_data, num_batch, reset,
                                                            tta_flip, use_ema)]
        if not outputs:
            return []
        if not merge_batches:
            return outputs
        merged = [NDArray(np.concatenate([b[i].asnumpy() for b in outputs]))
                  for i in range(len(outputs[0]))]
        if len(merged) == 1 and not always_output_list:
            return merged[0]
        return merged
