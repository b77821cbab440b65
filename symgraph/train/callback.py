"""Callbacks for ``Module.fit``, MXNet style.

Batch-end callbacks take one ``BatchEndParam(epoch, nbatch, eval_metric,
locals)``; epoch-end callbacks take ``(epoch, symbol, arg_params,
aux_params)``.

    mod.fit(it, num_epoch=10,
            batch_end_callback=[sg.callback.Speedometer(64, frequent=50),
                                sg.callback.ProgressBar()],
            epoch_end_callback=sg.callback.do_checkpoint('digits'))
"""
from __future__ import annotations

import time
from collections import namedtuple

from ..log import get_logger
from .checkpoint import save_checkpoint

BatchEndParam = namedtuple("BatchEndParams", ["epoch", "nbatch", "eval_metric", "locals"])


def do_checkpoint(prefix: str, period: int = 1):
    """Epoch-end callback: ``prefix-symbol.json`` and
    ``prefix-%04d.params`` every ``period`` epochs (numbered from 1, so
    ``begin_epoch=k`` resumes after checkpoint k). Writes are atomic."""
    period = int(max(1, period))

    def _callback(iter_no, sym, arg, aux):
        if (iter_no + 1) % period == 0:
            save_checkpoint(prefix, iter_no + 1, sym, arg, aux)
    return _callback


def module_checkpoint(mod, prefix: str, period: int = 1, save_optimizer_states: bool = False):
    """Epoch-end callback: ``mod.save_checkpoint`` every ``period`` epochs,
    with the optimizer state if asked (what an exact resume needs)."""
    period = int(max(1, period))

    def _callback(iter_no, sym=None, arg=None, aux=None):
        if (iter_no + 1) % period == 0:
            mod.save_checkpoint(prefix, iter_no + 1, save_optimizer_states)
    return _callback


def log_train_metric(period: int, auto_reset: bool = False):
    """Batch-end callback: logs the training metric every ``period`` batches."""
    def _callback(param):
        if param.nbatch % period == 0 and param.eval_metric is not None:
            for name, value in param.eval_metric.get_name_value():
                get_logger().info("Iter[%d] Batch[%d] Train-%s=%f", param.epoch, param.nbatch,
                             name, value)
            if auto_reset:
                param.eval_metric.reset_local()
    return _callback


class Speedometer:
    """Batch-end callback: logs samples per second (and the metric) every
    ``frequent`` batches. With ``auto_reset`` the metric shown covers the
    batches since the last line (the epoch's total is kept)."""

    def __init__(self, batch_size: int, frequent: int = 50, auto_reset: bool = True,
                 logger=None):
        self.batch_size = int(batch_size)
        self.frequent = int(frequent)
        self.auto_reset = auto_reset
        self.logger = logger or get_logger()
        self.init = False
        self.tic = 0.0
        self.last_count = 0
        self.last_speed = None

    def __call__(self, param) -> None:
        count = param.nbatch
        if self.last_count > count:
            self.init = False
        self.last_count = count
        if not self.init:
            self.init = True
            self.tic = time.time()
            return
        if count % self.frequent:
            return
        elapsed = time.time() - self.tic
        speed = self.frequent * self.batch_size / elapsed if elapsed > 0 else float("inf")
        self.last_speed = speed
        if param.eval_metric is not None:
            name_value = param.eval_metric.get_name_value()
            if self.auto_reset:
                param.eval_metric.reset_local()
            msg = "Epoch[%d] Batch [%d-%d]\tSpeed: %.2f samples/sec" + "\t%s=%f" * len(name_value)
            self.logger.info(msg, param.epoch, count - self.frequent, count, speed,
                             *sum(name_value, ()))
        else:
            self.logger.info("Iter[%d] Batch [%d]\tSpeed: %.2f samples/sec", param.epoch, count,
                             speed)
        self.tic = time.time()


class ProgressBar:
    """Batch-end callback drawing tqdm progress bars: one over the epochs of
    the ``fit`` run and one over the batches of the current epoch, with the
    training metric beside it. The totals are read from ``fit`` (its
    ``num_epoch`` and the iterator's ``num_batches``) unless given."""

    def __init__(self, total: int | None = None, num_epoch: int | None = None,
                 leave: bool = False, file=None, disable: bool | None = False,
                 mininterval: float = 0.1):
        self.mininterval = mininterval
        self.total = total
        self.num_epoch = num_epoch
        self.leave = leave
        self.file = file
        self.disable = disable
        self._epoch_bar = None
        self._batch_bar = None
        self._epoch = None

    def _open(self, param):
        from tqdm.auto import tqdm
        loc = param.locals or {}
        if self._epoch_bar is None:
            num_epoch = self.num_epoch or loc.get("num_epoch")
            begin = loc.get("begin_epoch", 0) or 0
            self._epoch_bar = tqdm(total=(num_epoch - begin) if num_epoch else None,
                                   desc="epochs", position=0, leave=self.leave,
                                   file=self.file, disable=self.disable,
                                   mininterval=self.mininterval)
        total = self.total
        if total is None:
            data = loc.get("train_data") or loc.get("eval_data")
            total = getattr(data, "num_batches", None)
        self._batch_bar = tqdm(total=total, desc=f"epoch {param.epoch}", position=1,
                               leave=False, file=self.file, disable=self.disable,
                               mininterval=self.mininterval)
        self._epoch = param.epoch

    def __call__(self, param) -> None:
        if self._batch_bar is not None and (param.epoch != self._epoch or param.nbatch == 0):
            self._finish_epoch()
        if self._batch_bar is None:
            self._open(param)
        self._batch_bar.update(1)
        if param.eval_metric is not None:
            self._batch_bar.set_postfix({n: f"{v:.4f}" for n, v in
                                         param.eval_metric.get_global_name_value()},
                                        refresh=False)
        if self._batch_bar.total is not None and self._batch_bar.n >= self._batch_bar.total:
            self._finish_epoch()

    def _finish_epoch(self):
        if self._batch_bar is not None:
            self._batch_bar.close()
            self._batch_bar = None
            if self._epoch_bar is not None:
                self._epoch_bar.update(1)
                total = self._epoch_bar.total
                if total is not None and self._epoch_bar.n >= total:
                    self.close()

    def close(self) -> None:
        """Closes the bars (done by itself after the last epoch)."""
        if self._batch_bar is not None:
            self._batch_bar.close()
            self._batch_bar = None
        if self._epoch_bar is not None:
            self._epoch_bar.close()
            self._epoch_bar = None


class LogValidationMetricsCallback:
    """Eval-end callback: logs each validation metric."""

    def __call__(self, param) -> None:
        if not param.eval_metric:
            return
        for name, value in param.eval_metric.get_global_name_value():
            get_logger().info("Epoch[%d] Validation-%s=%f", param.epoch, name, value)
