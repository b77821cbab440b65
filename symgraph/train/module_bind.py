"""``Module.bind`` and ``reshape``: the input shapes checked, every
parameter's shape and dtype inferred from them, and the training programs
made for the devices (``train/step.py``). ``Module`` inherits ``Binding``;
the parameters placed at bind are ``train/module_params.py``'s."""
from __future__ import annotations

from ..dtypes import require_storable
from ..errors import BindError
from ..executor import GRAD_REQS
from ..passes.infer import infer_shapes
from .io import DataDesc, as_descs
from .step import LOSS_SCALE_STATE, TrainPrograms


def check_inputs(data_shapes, label_shapes, data_names: list, label_names: list,
                 for_training: bool) -> tuple[list, list, int]:
    """``(data, labels, batch size)`` as ``DataDesc`` lists, or BindError
    naming what does not match the module's inputs."""
    data = as_descs(data_shapes)
    labels = as_descs(label_shapes)
    names = [d.name for d in data]
    if sorted(names) != sorted(data_names):
        raise BindError(f"data_shapes name {names}, but the module's data_names are "
                        f"{data_names}")
    extra = [d.name for d in labels if d.name not in label_names]
    if extra:
        raise BindError(f"label_shapes name {extra}, which are not among the module's "
                        f"label_names {label_names}")
    if for_training and len(labels) < len(label_names):
        raise BindError(f"training needs the shapes of the labels {label_names}; "
                        f"pass label_shapes (e.g. train_iter.provide_label)")
    batch = data[0].shape[0]
    for d in data + labels:
        if not d.shape or d.shape[0] != batch:
            raise BindError(f"input '{d.name}' has shape {d.shape}; every input needs the "
                            f"batch size {batch} first")
        layout = getattr(d, "layout", None)
        if DataDesc.get_batch_axis(layout) != 0:
            raise BindError(f"input '{d.name}' has layout {layout!r}, batch axis "
                            f"{DataDesc.get_batch_axis(layout)}; the Module takes the "
                            f"batch on axis 0")
    return data, labels, batch


def grad_reqs(grad_req, param_names: list, fixed_names: list) -> dict:
    """Parameter name -> 'write', 'add' or 'null' from bind's ``grad_req``
    (one for all, or by name); fixed parameters get 'null'."""
    if isinstance(grad_req, str):
        if grad_req not in GRAD_REQS:
            raise BindError(f"grad_req={grad_req!r}; use one of {', '.join(GRAD_REQS)}")
        req = {n: grad_req for n in param_names}
    else:
        req = dict(grad_req)
        bad = {k: v for k, v in req.items() if v not in GRAD_REQS}
        if bad:
            raise BindError(f"grad_req {bad}: use one of {', '.join(GRAD_REQS)}")
    for n in fixed_names:
        req[n] = "null"
    return req


def variable_info(symbol, inputs: list, output_names: list) -> dict:
    """Variable name -> (shape, dtype) inferred from the input descs; a
    dtype this JAX cannot store (float64 with x64 off) is refused, never
    quietly narrowed (as ``simple_bind``)."""
    g = symbol.graph()
    shapes = {d.name: d.shape for d in inputs}
    dtypes = {d.name: d.dtype for d in inputs if d.dtype is not None}
    inf = infer_shapes(g, shapes, dtypes=dtypes)
    info = {n.name: (tuple(inf.shapes[g.entry_id_of_node(n)]), inf.dtypes[g.entry_id_of_node(n)])
            for n in g.variables}
    for n, (_, dtype) in info.items():
        require_storable(dtype, f"bind: '{n}'", BindError)
    for name, e in zip(output_names, g.outputs):
        require_storable(inf.dtype(e), f"bind: output '{name}'", BindError)
    return info


class Binding:
    """``bind``/``reshape`` over the Module's state (``Module`` is the one)."""

    def bind(self, data_shapes, label_shapes=None, for_training: bool = True,
             inputs_need_grad: bool = False, force_rebind: bool = False, shared_module=None,
             grad_req="write"):
        """Fixes the input shapes (``DataDesc``s or ``(name, shape)``) and
        infers every parameter's shape and dtype from them."""
        if self.binded and not force_rebind:
            self.logger.warning("Already bound, ignoring bind(); use force_rebind=True")
            return
        if shared_module is not None:
            raise BindError("shared_module is not supported; bind a new Module")
        data, labels, batch = check_inputs(data_shapes, label_shapes, self._data_names,
                                           self._label_names, for_training)
        if for_training:
            self._devices.check_batch_size(batch)
        self._grad_req = grad_reqs(grad_req, self._param_names, self._fixed_param_names)
        self._param_info = variable_info(self.symbol, data + labels, self._output_names)
        self._data_shapes, self._label_shapes = data, labels
        self.for_training = bool(for_training)
        self.inputs_need_grad = bool(inputs_need_grad)
        trainable = self._trainable
        fixed = [n for n in self._param_names if n not in trainable]
        programs = getattr(self._devices, "train_programs", TrainPrograms)
        self._programs = programs(self.symbol, self._data_names, self._label_names,
                                  trainable, fixed, self._aux_names, self._devices,
                                  self._compute_dtype, self._loss_scale,
                                  self._memory_measures)
        was_bound = self.binded
        self._stage = self._stage.bind()
        self._plan_recompute()
        if self.params_initialized and was_bound:  # the values move to the new programs
            self._pending = self._host_params()
        if self.params_initialized and self._pending is not None:
            arg, aux = self._pending
            self._place_params(arg, aux)
            self._pending = None
        if was_bound and self.optimizer_initialized and \
                sorted(set(self._opt_states) - {LOSS_SCALE_STATE}) != sorted(trainable):
            self._stage = self._stage.without_optimizer()  # other parameters train now
        if self.optimizer_initialized:  # a rebind: the step is compiled anew
            self._fit_budget_if_any()

    def reshape(self, data_shapes, label_shapes=None):
        """New input shapes (same parameters); programs recompile as needed."""
        self._check_bound("reshape")
        self.bind(data_shapes, label_shapes, self.for_training, self.inputs_need_grad,
                  force_rebind=True, grad_req=self._grad_req)
