"""The Module's computation on batches: a batch's arrays by input name,
``forward``/``backward``/``update`` (three programs), ``train_step`` (one,
what ``fit`` runs), inference padded to split evenly over the devices, and
the outputs, gradients and metric updates they leave. ``Module`` inherits
``Steps``; the programs are ``train/step.py``'s."""
from __future__ import annotations

import jax
import numpy as np

from ..ndarray import NDArray
from ..params import _host as host
from . import TrainError
from .io import DataBatch
from .loops import _as_list, _refuse_given
from .step import LOSS_SCALE_STATE, batch_signature


class Steps:
    """Batches and steps over the Module's state (``Module`` is the one)."""

    def _batch_arrays(self, data_batch, need_labels: bool) -> dict:
        """Host or device arrays of a batch by input name, in bound dtypes."""
        if isinstance(data_batch, dict):
            arrays = dict(data_batch)
        else:
            data = _as_list(data_batch.data)
            pd = data_batch.provide_data
            dnames = [d[0] for d in pd] if pd else self._data_names
            if len(data) != len(self._data_names):
                raise TrainError(f"the batch has {len(data)} data arrays, the module takes "
                                 f"{len(self._data_names)} ({self._data_names})")
            arrays = dict(zip(dnames, data))
            labels = _as_list(data_batch.label)
            if labels:
                pl = data_batch.provide_label
                lnames = [d[0] for d in pl] if pl else self._label_names
                arrays.update(zip(lnames, labels))
        dtypes = {d.name: d.dtype for d in self._data_shapes + self._label_shapes}
        out = {}
        for n in self._data_names:
            if n not in arrays:
                raise TrainError(f"the batch has no array for input '{n}'")
            out[n] = self._convert(arrays[n], dtypes.get(n) or self._param_info[n][1])
        batch = next(iter(out.values())).shape[0]
        for n in self._label_names:
            if n in arrays:
                out[n] = self._convert(arrays[n], dtypes.get(n) or self._param_info[n][1])
            elif need_labels:
                raise TrainError(f"training needs the label '{n}', the batch has none")
            else:  # inference reads no label; feed zeros of its shape
                shapes = {k: tuple(v.shape) for k, v in out.items()}
                args, _, _ = self.symbol.infer_shape_partial(**shapes)
                shape = dict(zip(self.symbol.list_arguments(), args)).get(n) or (batch,)
                out[n] = np.zeros(shape, np.float32)
        return out

    @staticmethod
    def _convert(x, dtype):
        if isinstance(x, NDArray):
            x = x.data
        if isinstance(x, jax.Array):
            return x if x.dtype == dtype else x.astype(dtype)
        return np.asarray(x, dtype=dtype)

    def _place_batch(self, data_batch, need_labels: bool) -> dict:
        return self._devices.put_batch(self._batch_arrays(data_batch, need_labels))

    def prepare_batch(self, data_batch: DataBatch, need_labels: bool = True) -> DataBatch:
        """The batch with its arrays already on this module's devices (what
        the prefetching iterator runs ahead on its thread)."""
        arrays = self._place_batch(data_batch, need_labels=need_labels)
        batch = DataBatch([NDArray(arrays[n]) for n in self._data_names],
                          [NDArray(arrays[n]) for n in self._label_names], data_batch.pad,
                          data_batch.index, data_batch.bucket_key,
                          provide_data=[(n, arrays[n].shape) for n in self._data_names],
                          provide_label=[(n, arrays[n].shape) for n in self._label_names])
        batch.original_label = data_batch.label
        return batch

    # -- computation ---------------------------------------------------------------------------
    def _scalar(self, v):
        """A traced scalar (learning rate, update count) in the weights'
        precision: float64 weights get a float64 rate."""
        wide = any(v.dtype == np.float64 for v in self._params.values())
        return np.asarray(v, np.float64 if wide else np.float32)

    def _count(self):
        if self._optimizer is not None:
            return self._scalar(self._optimizer.num_update + 1)
        self._infer_count += 1
        return self._scalar(self._infer_count)

    def forward(self, data_batch, is_train: bool | None = None) -> None:
        """Runs the forward pass (training mode saves what backward reads
        and updates aux states such as BatchNorm's moving statistics)."""
        self._check_params("forward")
        if is_train is None:
            is_train = self.for_training
        if is_train and not self.for_training:
            raise TrainError("forward(is_train=True) on a module bound with "
                             "for_training=False")
        self._last_pad = getattr(data_batch, "pad", 0) or 0
        if is_train:
            batch = self._place_batch(data_batch, need_labels=True)
            sig = batch_signature(batch)
            wrt = self._trainable + (self._data_names if self.inputs_need_grad else [])
            t = self._count()
            prog = self._programs.forward_train(sig, wrt)
            if self._ema is not None and self.optimizer_initialized:  # before aux changes
                self._ema.begin(self._params, self._aux, self._devices)
            outs, saved, self._aux = prog(self._params, self._aux, self._fixed, batch, t,
                                          self._key)
            self._saved = (sig, wrt, batch, saved, t)
        else:
            outs = self._run_infer(data_batch)
            self._saved = None
        self._outputs = [self._devices.local_value(o) for o in outs]

    def _run_infer(self, data_batch):
        arrays = self._batch_arrays(data_batch, need_labels=False)
        batch = next(iter(arrays.values())).shape[0]
        n = self._devices.n_local
        extra = (-batch) % n
        if extra:  # inference may take any batch size: pad to split evenly (where v lies)
            arrays = {k: (jax.numpy if isinstance(v, jax.Array) else np).concatenate(
                [v, (jax.numpy if isinstance(v, jax.Array) else np).repeat(v[-1:], extra, 0)])
                for k, v in arrays.items()}
        placed = self._devices.put_batch(arrays)
        sig = batch_signature(placed)
        prog = self._programs.infer(sig)
        self._infer_count += 1
        params, aux = self._infer_weights()
        outs = prog(params, aux, self._fixed, placed, self._scalar(self._infer_count),
                    self._key)
        outs = [self._devices.local_value(o) for o in outs]
        if extra:
            info = self._programs._outputs_info(sig)
            outs = [o[:batch] if batched else o for o, (_, batched) in zip(outs, info)]
        return outs

    def backward(self, out_grads=None) -> None:
        """Gradients of the trained parameters (summed over devices) from
        the last ``forward(is_train=True)``; ``out_grads`` are head gradients
        of outputs that are not losses (ones when None)."""
        if self._saved is None:
            raise TrainError("backward() needs a forward(is_train=True) first")
        sig, wrt, batch, saved, t = self._saved
        heads = [None] * len(self._output_names)
        if out_grads is not None:
            for i, og in enumerate(_as_list(out_grads)):
                if og is not None:
                    heads[i] = self._convert(og, "float32")
            info = self._programs._outputs_info(sig)
            heads = [self._devices.put_batch(h) if h is not None and info[i][1] else
                     (self._devices.put_replicated(h) if h is not None else None)
                     for i, h in enumerate(heads)]
        prog = self._programs.backward(sig, wrt)
        scale = self._opt_states.get(LOSS_SCALE_STATE)
        if scale is None and self._programs.dynamic is not None:  # no optimizer yet
            scale = self._devices.put_replicated(self._programs.dynamic.initial_state())
        pgrads, igrads = prog(self._params, self._aux, self._fixed, batch, saved, heads, t,
                              self._key, None if scale is None else scale[0])
        for k, gr in pgrads.items():
            if self._grad_req.get(k) == "add" and k in self._grads:
                self._grads[k] = self._grads[k] + gr
            else:
                self._grads[k] = gr
        self._input_grads = {k: self._devices.local_value(v) for k, v in igrads.items()}

    def forward_backward(self, data_batch) -> None:
        self.forward(data_batch, is_train=True)
        self.backward()

    def update(self) -> None:
        """One optimizer step with the gradients of the last ``backward``."""
        if not self.optimizer_initialized:
            raise TrainError("update() needs init_optimizer() first")
        if not self._grads:
            raise TrainError("update() needs backward() first")
        lr, t = self._optimizer.begin_update()
        prog = self._programs.update(self._optimizer)
        if self._ema is not None:
            self._ema.begin(self._params, self._aux, self._devices)
        self._params, self._opt_states = prog(self._params, self._grads, self._opt_states,
                                              self._scalar(lr), self._scalar(t))
        if self._ema is not None:
            self._ema.after(t, self._params, self._aux)
        if self._devices.processes > 1:  # as train_step: wait for each step across processes
            jax.block_until_ready(self._params)
        if any(self._grad_req.get(k) == "add" for k in self._grads):
            self._grads = {k: v for k, v in self._grads.items()
                           if self._grad_req.get(k) == "add"}
        else:
            self._grads = {}

    def train_step(self, data_batch) -> None:
        """forward + backward + update as one compiled program (what ``fit``
        runs per batch); the outputs are then ``get_outputs()``."""
        if not self.optimizer_initialized:
            raise TrainError("train_step() needs init_optimizer() first")
        batch = self._place_batch(data_batch, need_labels=True)
        sig = batch_signature(batch)
        self._last_pad = getattr(data_batch, "pad", 0) or 0
        lr, t = self._optimizer.begin_update()
        prog = self._programs.step(sig, self._optimizer)
        if self._ema is not None:
            self._ema.begin(self._params, self._aux, self._devices)
        self._params, self._opt_states, self._aux, outs = prog(
            self._params, self._opt_states, self._aux, self._fixed, batch, self._scalar(lr),
            self._scalar(t), self._key)
        if self._ema is not None:
            self._ema.after(t, self._params, self._aux)
        if self._devices.processes > 1:
            # a multi-process loop on CPU deadlocked unless each step was waited for
            jax.block_until_ready(self._params)
        self._outputs = [self._devices.local_value(o) for o in outs]
        self._saved = None

    def get_outputs(self, merge_multi_context: bool = True) -> list[NDArray]:
        """The outputs of the last forward (whole batch, padding included)."""
        if not merge_multi_context:
            raise TrainError("merge_multi_context=False is not supported: outputs are "
                             "always the whole batch, merged over the devices")
        return [NDArray(o) for o in self._outputs]

    def get_input_grads(self, merge_multi_context: bool = True) -> list[NDArray]:
        if not merge_multi_context:
            raise TrainError("merge_multi_context=False is not supported: input gradients are "
                             "always the whole batch, merged over the devices")
        if not self.inputs_need_grad:
            raise TrainError("get_input_grads: bind with inputs_need_grad=True")
        return [NDArray(self._input_grads[n]) for n in self._data_names]

    def get_grads(self) -> dict:
        """The gradients of the last ``backward``, by parameter name."""
        return {k: NDArray(v) for k, v in self._grads.items()}

    def update_metric(self, eval_metric, labels, pre_sliced: bool = False) -> None:
        """Updates ``eval_metric`` with the last outputs, leaving out the
        padding of the last batch."""
        _refuse_given("pre_sliced", pre_sliced, "labels are the whole batch (the Module "
                      "splits it over the devices itself)")
        labels = _as_list(labels)
        keep = None
        outs = [np.asarray(o) for o in self._outputs]
        if self._last_pad:
            batch = next((o.shape[0] for o in outs if o.ndim), 0)
            keep = batch - self._last_pad
        def cut(x):
            x = host(x)
            return x[:keep] if keep is not None and x.ndim else x
        label_dict = dict(zip(self._label_names, [cut(x) for x in labels]))
        pred_dict = dict(zip(self._output_names, [cut(o) for o in outs]))
        eval_metric.update_dict(label_dict, pred_dict)
