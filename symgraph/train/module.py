"""``sg.mod.Module``: MXNet's Module API over compiled XLA programs.

    mod = sg.mod.Module(net, data_names=['data'], label_names=['softmax_label'],
                        context=[sg.cpu(0), sg.cpu(1)])
    mod.fit(train_iter, eval_data=val_iter, optimizer='sgd',
            optimizer_params={'learning_rate': 0.1, 'momentum': 0.9},
            initializer=sg.init.Xavier(), eval_metric='acc', num_epoch=10,
            batch_end_callback=sg.callback.Speedometer(64, 50),
            epoch_end_callback=sg.callback.module_checkpoint(mod, 'digits'))
    mod.score(val_iter, 'acc')
    mod.save_checkpoint('digits', 10, save_optimizer_states=True)
    mod = sg.mod.Module.load('digits', 10, load_optimizer_states=True)
    mod.fit(train_iter, ..., begin_epoch=10, num_epoch=20)   # continues exactly

Each ``fit`` batch runs one XLA program: forward, the explicit backward
graph, the gradient sum over devices and the optimizer update, with the
parameters, optimizer state and BatchNorm statistics donated so they are
updated in place (``train.step``). ``forward``/``backward``/``update`` run
the same computation in three programs, for code that drives the steps
itself. Several contexts split every batch evenly over their devices
(``parallel.data_parallel``); the result equals one device on the whole
batch, up to float rounding, for nets without batch statistics.

The loops over iterators (``fit``, ``score``, ``predict``) are in
``train/loops.py``, which ``Module`` inherits; this module holds the state
(binding, placement, parameters, optimizer state, checkpoints).

Differences from MXNet worth knowing: metrics and predictions leave out
the padding of a padded last batch; ``fit`` positions an iterator that has
``set_epoch`` (``NDArrayIter`` does) at ``begin_epoch``, so a resumed run
sees the data order of an uninterrupted one; a net's non-loss outputs get a
head gradient of ones.
"""
from __future__ import annotations

import os

import jax
import numpy as np

from .. import measures as measures_mod
from ..context import Context
from ..dtypes import require_storable
from ..errors import BindError
from ..executor import GRAD_REQS
from ..log import get_logger
from ..ndarray import NDArray
from ..parallel.data_parallel import DeviceSet
from ..passes.infer import infer_shapes
from . import TrainError
from . import initializer as init_mod
from . import optimizer as opt_mod
from .checkpoint import (load_checkpoint, load_params_file, params_path,
                         save_checkpoint, save_params_file, split_arg_aux)
from .ema import WeightEMA, ema_path
from .io import DataBatch, DataDesc, as_descs
from .loops import Loops, _as_list, _refuse_given
from .step import LOSS_SCALE_STATE, DynamicLossScale, TrainPrograms, batch_signature, \
    loss_scaling

def states_path(prefix: str, epoch: int) -> str:
    return f"{prefix}-{int(epoch):04d}.states"


def _host(x) -> np.ndarray:
    if isinstance(x, NDArray):
        return x.asnumpy()
    return np.asarray(x)


class Module(Loops):
    """A symbol bound to devices, with parameters, an optimizer and
    ``fit``/``score``/``predict`` (MXNet's ``mx.mod.Module``).

    ``context``: a Context or a list (data parallel over them).
    ``fixed_param_names``: arguments kept fixed during training.
    ``compute_dtype``: 'float32', or 'bfloat16'/'float16' to compute in low
    precision with float32 master weights; ``loss_scale`` for float16: a
    number (static), or 'dynamic' / ``DynamicLossScale(...)`` (the scale
    lives in the optimizer state; see ``loss_scale`` the property).
    ``seed``: the random key of ops such as Dropout (per update count, so a
    resumed run draws the same numbers). ``memory_measures``: how every
    program is lowered so that XLA keeps the memory plan -- 'auto' (the
    rule of ``symgraph.measures.default_measures``), 'none', or measure
    names (``symgraph.measures.MEASURES``).
    ``memory_budget``: bytes, or text such as '6GiB' or '512MiB': what each
    device may hold in training (parameters, gradients, aux and optimizer
    state, and the arena). ``bind`` and ``init_optimizer`` plan the step to
    it (``sg.plan(..., budget=)``, the optimizer's state counted once it is
    known) and the programs recompute in the backward the forward nodes the
    plan names, the step one program or a program per segment of it
    (``TrainPrograms.staged``), whichever XLA's figures say holds less.
    The budget bounds that program (``memory.budget.fit_program``):
    ``init_optimizer`` compiles it (``fit`` reuses it). The step without
    recompute is compiled first and runs, nothing recomputed, where XLA's
    figure says it fits (XLA recomputes cheap ops of its own accord, so it
    can hold less than its plan), unless ``recompute`` names nodes; where
    XLA's footprint is over the budget it plans again to the plan's total
    less the excess (at most ``PROGRAM_FIT_ROUNDS`` times). Where no
    program holds the budget, ``BudgetError`` names the smallest footprint
    compiled and the budget, unless ``allow_over_budget``: then the
    smallest runs, with a warning. Results are those of the unbudgeted
    step. ``recompute``: the recompute
    set or algorithm ('mirror', 'sqrt', 'solver', or forward node names),
    with or without a budget (``sg.plan``'s ``recompute``).
    ``ema_decay``/``ema_every``: keep a moving average of the trained
    parameters and aux states, blended every ``ema_every`` updates
    (``train/ema.py``); inference (``score``, ``predict``, ``forward`` not
    in training) then uses it, ``use_ema=False`` the weights themselves.
    """

    def __init__(self, symbol, data_names=("data",), label_names=("softmax_label",),
                 logger=None, context=None, work_load_list=None, fixed_param_names=None,
                 state_names=None, group2ctxs=None, compression_params=None,
                 compute_dtype: str = "float32", loss_scale=1.0, seed: int = 0,
                 memory_measures="auto", memory_budget=None, recompute=None,
                 allow_over_budget: bool = False, ema_decay=None, ema_every: int = 1):
        self.symbol = symbol
        # symgraph's logger (log.py): fit's lines show without configuring logging
        self.logger = logger if logger is not None else get_logger()
        args = symbol.list_arguments()
        data_names = list(data_names or [])
        label_names = list(label_names or [])
        missing = [n for n in data_names if n not in args]
        if missing:
            raise BindError(f"data name(s) {', '.join(missing)} are not arguments of the "
                            f"symbol; its arguments are {', '.join(args)}")
        dropped = [n for n in label_names if n not in args]
        if dropped:
            self.logger.warning("label name(s) %s are not arguments of the symbol; ignored",
                                ", ".join(dropped))
        self._data_names = data_names
        self._label_names = [n for n in label_names if n in args]
        fixed = list(fixed_param_names or [])
        inputs = set(self._data_names) | set(self._label_names)
        self._param_names = [n for n in args if n not in inputs]
        bad = [n for n in fixed if n not in self._param_names]
        if bad:
            raise BindError(f"fixed_param_names {bad} are not parameters of the symbol")
        self._fixed_param_names = fixed
        self._aux_names = symbol.list_auxiliary_states()
        self._output_names = symbol.list_outputs()
        _refuse_given("state_names", state_names,
                      "Module has no states set by set_states(); feed such arrays with the "
                      "batch (data_names) or keep them as fixed_param_names")
        _refuse_given("compression_params", compression_params,
                      "gradients are summed over the devices inside the compiled step, "
                      "uncompressed")
        if work_load_list is not None and len(set(work_load_list)) > 1:
            raise BindError("uneven work_load_list is not supported: data parallel splits "
                            "every batch evenly over the devices")
        if group2ctxs is not None:  # model parallel (parallel/model_parallel.py)
            from ..parallel.model_parallel import PlacedDevices
            self._devices = PlacedDevices(symbol, group2ctxs, context)
        else:
            self._devices = DeviceSet(context)
        self._context = self._devices.contexts
        if work_load_list is not None and len(work_load_list) != len(self._context):
            raise BindError(f"work_load_list has {len(work_load_list)} entries for "
                            f"{len(self._context)} contexts")
        self._compute_dtype = compute_dtype
        loss_scaling(loss_scale)  # a bad value fails here, not at bind
        self._loss_scale = loss_scale
        self._key = jax.random.key(int(seed))
        measures_mod.parse(memory_measures)  # a bad name fails here, not at bind
        self._memory_measures = memory_measures
        if memory_budget is not None:  # a malformed budget fails here, not at bind
            from ..memory.budget import parse_budget
            memory_budget = parse_budget(memory_budget)
        self._memory_budget = memory_budget
        self._allow_over_budget = bool(allow_over_budget)
        self._recompute_spec = recompute
        self._budget_plan = None
        self.binded = False
        self.for_training = False
        self.inputs_need_grad = False
        self.params_initialized = False
        self.optimizer_initialized = False
        self._data_shapes: list[DataDesc] = []
        self._label_shapes: list[DataDesc] = []
        self._programs: TrainPrograms | None = None
        # parameters before bind (host) and after (device arrays)
        self._pending: tuple[dict, dict] | None = None
        self._params: dict = {}
        self._fixed: dict = {}
        self._aux: dict = {}
        self._param_info: dict = {}
        self._grads: dict = {}
        self._input_grads: dict = {}
        self._optimizer = None
        self._opt_states: dict = {}
        self._kvstore = None
        self._preload_opt_states: str | None = None
        self._outputs: list = []
        self._saved = None
        self._last_pad = 0
        self._infer_count = 0
        # a moving average of the weights (train/ema.py); None without ema_decay
        self._ema = None if ema_decay is None else WeightEMA(ema_decay, ema_every)
        self._use_ema = True  # inference reads the average (score/predict: use_ema=)

    # -- names and shapes -----------------------------------------------------------
    @property
    def data_names(self):
        return list(self._data_names)

    @property
    def label_names(self):
        return list(self._label_names)

    @property
    def output_names(self):
        return list(self._output_names)

    @property
    def data_shapes(self):
        return list(self._data_shapes)

    @property
    def label_shapes(self):
        return list(self._label_shapes)

    @property
    def output_shapes(self):
        self._check_bound("output_shapes")
        shapes = {d.name: d.shape for d in self._data_shapes + self._label_shapes}
        _, outs, _ = self.symbol.infer_shape(**shapes)
        return list(zip(self._output_names, outs))

    @property
    def context(self) -> list[Context]:
        return list(self._context)

    @property
    def _trainable(self) -> list[str]:
        if not self.for_training:
            return []
        return [n for n in self._param_names if self._grad_req.get(n, "write") != "null"]

    def _check_bound(self, what):
        if not self.binded:
            raise TrainError(f"{what}: call bind() first (or fit(), which binds)")

    def _check_params(self, what):
        self._check_bound(what)
        if not self.params_initialized:
            raise TrainError(f"{what}: call init_params() first")

    # -- bind -------------------------------------------------------------------------
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
        data = as_descs(data_shapes)
        labels = as_descs(label_shapes)
        names = [d.name for d in data]
        if sorted(names) != sorted(self._data_names):
            raise BindError(f"data_shapes name {names}, but the module's data_names are "
                            f"{self._data_names}")
        lnames = [d.name for d in labels]
        extra = [n for n in lnames if n not in self._label_names]
        if extra:
            raise BindError(f"label_shapes name {extra}, which are not among the module's "
                            f"label_names {self._label_names}")
        if for_training and len(labels) < len(self._label_names):
            raise BindError(f"training needs the shapes of the labels {self._label_names}; "
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
        if for_training:
            self._devices.check_batch_size(batch)
        if isinstance(grad_req, str):
            if grad_req not in GRAD_REQS:
                raise BindError(f"grad_req={grad_req!r}; use one of {', '.join(GRAD_REQS)}")
            req = {n: grad_req for n in self._param_names}
        else:
            req = dict(grad_req)
            bad = {k: v for k, v in req.items() if v not in GRAD_REQS}
            if bad:
                raise BindError(f"grad_req {bad}: use one of {', '.join(GRAD_REQS)}")
        for n in self._fixed_param_names:
            req[n] = "null"
        self._grad_req = req
        # shapes and dtypes of every parameter from the input shapes
        g = self.symbol.graph()
        shapes = {d.name: d.shape for d in data + labels}
        dtypes = {d.name: d.dtype for d in data + labels if d.dtype is not None}
        inf = infer_shapes(g, shapes, dtypes=dtypes)
        self._param_info = {n.name: (tuple(inf.shapes[g.entry_id_of_node(n)]),
                                     inf.dtypes[g.entry_id_of_node(n)])
                            for n in g.variables}
        # a float64 asked for must not quietly become float32 (as simple_bind)
        for n, (_, dtype) in self._param_info.items():
            require_storable(dtype, f"bind: '{n}'", BindError)
        for name, e in zip(self._output_names, g.outputs):
            require_storable(inf.dtype(e), f"bind: output '{name}'", BindError)
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
        self.binded = True
        self._plan_recompute()
        if self.params_initialized and was_bound:
            self._pending = self._host_params()
        if self.params_initialized and self._pending is not None:
            arg, aux = self._pending
            self._place_params(arg, aux)
            self._pending = None
        if was_bound and self.optimizer_initialized and \
                sorted(set(self._opt_states) - {LOSS_SCALE_STATE}) != sorted(trainable):
            self.optimizer_initialized = False  # other parameters train now
        if self.optimizer_initialized:  # a rebind: the step is compiled anew
            self._fit_budget_if_any()

    def reshape(self, data_shapes, label_shapes=None):
        """New input shapes (same parameters); programs recompile as needed."""
        self._check_bound("reshape")
        self.bind(data_shapes, label_shapes, self.for_training, self.inputs_need_grad,
                  force_rebind=True, grad_req=self._grad_req)

    # -- parameters ----------------------------------------------------------------------
    def _place_params(self, arg: dict, aux: dict) -> None:
        put = self._devices.put_replicated
        params, fixed = {}, {}
        trainable = set(self._trainable)
        for n in self._param_names:
            shape, dtype = self._param_info[n]
            v = np.asarray(arg[n], dtype=dtype)
            (params if n in trainable else fixed)[n] = v
        auxv = {n: np.asarray(aux[n], dtype=self._param_info[n][1]) for n in self._aux_names}
        self._params, self._fixed, self._aux = put(params), put(fixed), put(auxv)
        self._grads = {}
        self.params_initialized = True

    def _host_params(self) -> tuple[dict, dict]:
        if self._pending is not None and not self._params:
            return self._pending
        arg = {k: np.asarray(v) for k, v in {**self._params, **self._fixed}.items()}
        aux = {k: np.asarray(v) for k, v in self._aux.items()}
        return arg, aux

    def init_params(self, initializer=None, arg_params=None, aux_params=None,
                    allow_missing: bool = False, force_init: bool = False,
                    allow_extra: bool = False, seed: int | None = None):
        """Values for every parameter and aux state: from ``arg_params``/
        ``aux_params`` where given, from ``initializer`` (default
        ``Uniform(0.01)``, MXNet's) elsewhere. ``seed`` seeds the random
        draws (NumPy's global generator picks one when None)."""
        if self.params_initialized and not force_init:
            self.logger.warning("Parameters already initialized and force_init=False. "
                                "init_params call ignored.")
            return
        self._check_bound("init_params")
        if initializer is None:
            initializer = init_mod.Uniform(0.01)
        initializer = init_mod.create(initializer) if not callable(initializer) else initializer
        if seed is None:
            seed = int(np.random.randint(0, 2 ** 31 - 1))
        rng = np.random.default_rng(seed)
        attrs = self.symbol.attr_dict()
        have_arg = {k: _host(v) for k, v in (arg_params or {}).items()}
        have_aux = {k: _host(v) for k, v in (aux_params or {}).items()}
        if not allow_extra:
            extra = [k for k in have_arg if k not in self._param_names] + \
                [k for k in have_aux if k not in self._aux_names]
            if extra:
                raise TrainError(f"init_params: {', '.join(extra)} are not parameters of the "
                                 f"symbol (pass allow_extra=True to ignore them)")

        def fill(names, have, given):
            out = {}
            for n in names:
                shape, dtype = self._param_info[n]
                if n in have:
                    v = have[n]
                    if tuple(v.shape) != shape:
                        raise TrainError(f"init_params: '{n}' has shape {tuple(v.shape)}, the "
                                         f"bound symbol needs {shape}")
                    out[n] = v
                    continue
                if given is not None and not allow_missing:
                    raise TrainError(f"init_params: no value for '{n}' in the given params "
                                     f"(pass allow_missing=True to initialize it)")
                arr = np.zeros(shape, np.float64 if dtype == "float64" else np.float32)
                initializer(init_mod.InitDesc(n, attrs.get(n, {})), arr, rng=rng)
                out[n] = arr
            return out

        arg = fill(self._param_names, have_arg, arg_params)
        aux = fill(self._aux_names, have_aux, aux_params)
        self._place_params(arg, aux)
        if self._ema is not None:  # new weights: the average starts from them
            self._ema.reset()

    def set_params(self, arg_params, aux_params=None, allow_missing: bool = False,
                   force_init: bool = True, allow_extra: bool = False):
        """Sets the parameters (copied); before ``bind`` they wait for it."""
        if not self.binded:
            self._pending = ({k: _host(v) for k, v in arg_params.items()},
                             {k: _host(v) for k, v in (aux_params or {}).items()})
            self.params_initialized = True
            return
        self.init_params(None, arg_params, aux_params or {}, allow_missing, force_init,
                         allow_extra)

    def get_params(self) -> tuple[dict, dict]:
        """``(arg_params, aux_params)``: copies of the current values as
        NDArrays (the device buffers are updated in place by training)."""
        if not self.binded and self._pending is not None:
            arg, aux = self._pending
        else:
            self._check_params("get_params")
            arg, aux = self._host_params()
        return ({k: NDArray(np.array(v)) for k, v in arg.items()},
                {k: NDArray(np.array(v)) for k, v in aux.items()})

    def _infer_weights(self) -> tuple[dict, dict]:
        """The trained parameters and aux states inference reads: the moving
        average with ``ema_decay`` (unless ``use_ema=False``), else the
        weights themselves (also before the first update)."""
        if self._ema is not None and self._use_ema:
            avg = self._ema.current(self._params, self._aux, self._devices)
            if avg is not None:
                return avg
        return self._params, self._aux

    def get_ema_params(self) -> tuple[dict, dict]:
        """``(arg_params, aux_params)`` as ``get_params`` but with the moving
        average of the trained parameters and aux states (fixed parameters
        as they are); the weights themselves before the first update."""
        if self._ema is None:
            raise TrainError("get_ema_params: the module keeps no average; create it with "
                             "Module(..., ema_decay=0.99)")
        self._check_params("get_ema_params")
        avg = self._ema.current(self._params, self._aux, self._devices)
        arg, aux = avg if avg is not None else (self._params, self._aux)
        arg = {**{k: np.asarray(v) for k, v in self._fixed.items()},
               **{k: np.asarray(v) for k, v in arg.items()}}
        return ({k: NDArray(np.array(arg[k])) for k in self._param_names},
                {k: NDArray(np.array(v)) for k, v in aux.items()})

    # -- optimizer ---------------------------------------------------------------------------
    def init_optimizer(self, kvstore="local", optimizer="sgd",
                       optimizer_params=(("learning_rate", 0.01),), force_init: bool = False):
        """Creates the optimizer (``rescale_grad`` defaults to 1/batch size,
        as in MXNet) and its state; ``kvstore`` picks the gradient store
        ('local', 'device', a KVStore, or None)."""
        if self.optimizer_initialized and not force_init:
            self.logger.warning("optimizer already initialized, ignoring...")
            return
        self._check_params("init_optimizer")
        from ..parallel import kvstore as kvs
        self._kvstore = kvs.create(kvstore) if kvstore is not None else None
        if self._kvstore is not None and self._kvstore.is_distributed and \
                self._devices.processes == 1 and jax.process_count() > 1:
            if hasattr(self._devices, "train_programs"):  # placed: PlacedDevices
                raise TrainError(f"kvstore='{self._kvstore.type}' with group2ctxs is not "
                                 f"supported: a placed net trains within one process (worker "
                                 f"groups: Module(context=[...], group2ctxs=[{{...}}, ...]))")
            # one step over every process's devices: rebind there (the
            # parameters move along, process 0's values)
            self._devices = DeviceSet(self._context, processes=True)
            self.bind(self._data_shapes, self._label_shapes, self.for_training,
                      self.inputs_need_grad, force_rebind=True, grad_req=self._grad_req)
        # the batch is every process's (MXNet: batch_size *= num_workers)
        batch_size = self._data_shapes[0].shape[0] * self._devices.processes
        idx2name = dict(enumerate(self._param_names))
        if isinstance(optimizer, str):
            params = dict(optimizer_params or {})
            params.setdefault("rescale_grad", 1.0 / batch_size)
            optimizer = opt_mod.create(optimizer, sym=self.symbol, param_idx2name=idx2name,
                                       **params)
        elif isinstance(optimizer, opt_mod.Optimizer):
            if optimizer.rescale_grad != 1.0 / batch_size:
                self.logger.warning(
                    "Optimizer created manually outside Module but rescale_grad is not "
                    "normalized to 1.0/batch_size (%s vs. %s). Is this intended?",
                    optimizer.rescale_grad, 1.0 / batch_size)
            if not optimizer.idx2name:
                optimizer.idx2name = idx2name
                optimizer.set_wd_mult(optimizer.wd_mult)
        else:
            raise TrainError(f"optimizer must be a name or an Optimizer, got "
                             f"{type(optimizer).__name__}")
        low = [n for n in self._trainable if self._param_info[n][1] in ("float16", "bfloat16")]
        if optimizer.multi_precision and low:
            raise TrainError(f"multi_precision=True is not supported ('{low[0]}' is "
                             f"{self._param_info[low[0]][1]}): bind float32 inputs and use "
                             f"Module(compute_dtype='float16'), which keeps float32 master "
                             f"weights")
        self._optimizer = optimizer
        self._plan_recompute()  # the budget counts the optimizer's state now
        if self._kvstore is not None:
            self._kvstore.set_optimizer(optimizer)
            self._programs.set_reducer(self._kvstore.step_reducer(self._devices))
        else:
            self._programs.set_reducer(self._devices.sum_over_devices)
        states = {n: tuple(optimizer.create_state(n, self._params[n])) for n in self._trainable}
        if self._programs.dynamic is not None:
            states[LOSS_SCALE_STATE] = self._programs.dynamic.initial_state()
        self._opt_states = self._devices.put_replicated(states)
        self.optimizer_initialized = True
        if self._preload_opt_states is not None:
            self.load_optimizer_states(self._preload_opt_states)
            self._preload_opt_states = None
        self._fit_budget_if_any()

    @property
    def optimizer(self):
        return self._optimizer

    @property
    def loss_scale(self) -> float:
        """The loss scale the next step uses: the static one, or the current
        dynamic one (read from the devices, so this waits for the step)."""
        state = self._opt_states.get(LOSS_SCALE_STATE)
        if state is not None:
            return float(np.asarray(state[0])[0])
        static, dynamic = loss_scaling(self._loss_scale)
        return dynamic.init_scale if dynamic is not None else static

    def save_optimizer_states(self, fname: str) -> None:
        """The optimizer's state arrays and update count, atomically."""
        if not self.optimizer_initialized:
            raise TrainError("save_optimizer_states: call init_optimizer() first")
        save = {f"state:{n}:{i}": s for n, st in self._opt_states.items()
                for i, s in enumerate(st)}
        save["meta:num_update"] = np.array([self._optimizer.num_update], np.int64)
        from ..parallel import distributed
        if distributed.is_writer():  # of several processes, process 0 writes
            save_params_file(fname, save)
        distributed.barrier("symgraph_optimizer_states")

    def load_optimizer_states(self, fname: str) -> None:
        if not self.optimizer_initialized:
            raise TrainError("load_optimizer_states: call init_optimizer() first")
        loaded = load_params_file(fname)
        states = {}
        for n, st in self._opt_states.items():
            if n == LOSS_SCALE_STATE and f"state:{n}:0" not in loaded:
                states[n] = st  # saved without dynamic scaling: the scale starts afresh
                continue
            new = []
            for i, s in enumerate(st):
                v = loaded.get(f"state:{n}:{i}")
                if v is None or tuple(v.shape) != tuple(s.shape):
                    raise TrainError(f"{fname}: no state {i} of shape {tuple(s.shape)} for "
                                     f"'{n}'; was it saved by this optimizer and net?")
                new.append(v.astype(s.dtype))
            states[n] = tuple(new)
        self._opt_states = self._devices.put_replicated(states)
        if "meta:num_update" in loaded:
            self._optimizer.num_update = int(loaded["meta:num_update"][0])

    # -- batches ------------------------------------------------------------------------------
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
            x = _host(x)
            return x[:keep] if keep is not None and x.ndim else x
        label_dict = dict(zip(self._label_names, [cut(x) for x in labels]))
        pred_dict = dict(zip(self._output_names, [cut(o) for o in outs]))
        eval_metric.update_dict(label_dict, pred_dict)


    # -- checkpoints ---------------------------------------------------------------------------
    def save_checkpoint(self, prefix: str, epoch: int, save_optimizer_states: bool = False,
                        remove_amp_cast: bool = True) -> None:
        """``prefix-symbol.json``, ``prefix-%04d.params`` and, optionally,
        ``prefix-%04d.states``; each written atomically. ``remove_amp_cast``
        changes nothing: symgraph's symbols hold no amp_cast nodes (the
        compute dtype is cast inside the compiled program)."""
        arg, aux = self._host_params() if self.binded else self._pending
        save_checkpoint(prefix, epoch, self.symbol, arg, aux)
        if self._ema is not None:  # the average beside: prefix-%04d.ema.params
            self._ema.save(prefix, epoch)
        if save_optimizer_states:
            self.save_optimizer_states(states_path(prefix, epoch))

    @staticmethod
    def load(prefix: str, epoch: int, load_optimizer_states: bool = False, **kwargs):
        """A Module from a checkpoint; ``kwargs`` go to ``Module(...)``. With
        ``load_optimizer_states`` the state is restored at init_optimizer."""
        net, arg, aux = load_checkpoint(prefix, epoch)
        mod = Module(symbol=net, **kwargs)
        mod.set_params(arg, aux)
        if mod._ema is not None and os.path.exists(ema_path(prefix, epoch)):
            mod._ema.load(ema_path(prefix, epoch))  # Module(ema_decay=): the saved average
        if load_optimizer_states:
            path = states_path(prefix, epoch)
            if not os.path.exists(path):
                raise TrainError(f"no optimizer states at {path}; save the checkpoint with "
                                 f"save_optimizer_states=True")
            mod._preload_opt_states = path
        return mod

    # -- memory -----------------------------------------------------------------------------
    def plan_memory(self, **kwargs):
        """The memory planner's ``Plan`` of what each device runs: the
        training graph (or the inference graph, for a module not bound for
        training) at the per-device batch, in the compute dtype (2-byte
        activations with ``compute_dtype='bfloat16'``/``'float16'``). ``kwargs`` go to ``sg.plan``."""
        self._check_bound("plan_memory")
        from ..memory import plan
        n = self._devices.n_local
        shapes = {d.name: (d.shape[0] // n,) + tuple(d.shape[1:]) if self.for_training
                  else tuple(d.shape) for d in self._data_shapes + self._label_shapes}
        dtypes = {d.name: d.dtype for d in self._data_shapes + self._label_shapes if d.dtype}
        low = self._programs.compute_dtype
        if low is not None:  # the program casts float weights, aux and data down inside
            for name, (_, dtype) in self._param_info.items():
                if name not in self._label_names and np.issubdtype(np.dtype(dtype),
                                                                   np.floating):
                    dtypes[name] = low
        return plan(self.symbol, shapes, train=self.for_training and bool(self._trainable),
                    dtypes=dtypes, wrt=self._trainable or None,
                    data_names=self._data_names, label_names=self._label_names, **kwargs)

    def _plan_recompute(self) -> None:
        """With ``memory_budget`` or ``recompute``: plans the training step
        (``plan_memory``) and has the programs recompute what the plan
        recomputes. Where no plan fits the budget, the step without recompute
        (``memory.budget.first_plan``: its program may hold less)."""
        if self._memory_budget is None and self._recompute_spec is None:
            return
        if not (self.for_training and self._trainable):
            self._budget_plan = None
            return
        if not hasattr(self._programs, "set_recompute"):
            raise TrainError("memory_budget/recompute: not supported with these programs "
                             "(group2ctxs)")
        from ..memory.budget import first_plan
        opt = self._budget_optimizer()
        if self._memory_budget is None:
            p = self.plan_memory(optimizer=opt, recompute=self._recompute_spec)
        else:
            p = first_plan(self._memory_budget, lambda b: self._plan_to(b, opt),
                           keep_recompute=self._keeps_recompute())
        self._follow(p)

    def _follow(self, p) -> None:
        """Has the training programs recompute what plan ``p`` recomputes."""
        self._budget_plan = p
        self._programs.set_recompute([r["name"] for r in p.recompute])
        # one program, or one per segment where XLA holds less so (train/staged.py);
        # compiled once for both compiled_memory and fit
        self._programs.segments = "auto"

    def _fit_budget_if_any(self) -> None:
        """``_fit_program_to_budget`` once the step is complete (bound, the
        optimizer known and its reducer set), under a budget."""
        if self._memory_budget is not None and self._budget_plan is not None:
            self._fit_program_to_budget()

    def _fit_program_to_budget(self) -> None:
        """The budget bounds the program that runs, not only the plan
        (``memory.budget.fit_program``: the step without recompute where
        XLA's figure says it fits, else plans again to the excess). The step
        that fits is the last compiled, so ``fit`` reuses it. Where none
        fits, BudgetError, or with ``allow_over_budget`` the smallest runs,
        with a warning."""
        from .. import xla
        from ..memory.budget import fit_program, fmt_bytes, over_budget
        opt = self._budget_optimizer()

        def footprint_of(p):
            self._follow(p)
            return xla.footprint(self.compiled_memory())

        fit = fit_program(self._budget_plan, self._memory_budget,
                          lambda b: self._plan_to(b, opt), footprint_of,
                          keep_recompute=self._keeps_recompute())
        self._follow(fit.plan)
        if not fit.fits and not self._allow_over_budget:
            raise over_budget(fit, self._memory_budget, "Module(allow_over_budget=True)")
        if not fit.fits:
            self.logger.warning("memory_budget %s: the smallest step XLA compiled holds %s "
                                "(its plan %s)", fmt_bytes(self._memory_budget),
                                fmt_bytes(fit.footprint), fmt_bytes(fit.plan.total))

    def _plan_to(self, budget, optimizer):
        """``plan_memory`` to ``budget`` with this Module's recompute set or
        algorithm; ``budget`` None: the plan with nothing recomputed."""
        if budget is None:
            return self.plan_memory(optimizer=optimizer)
        return self.plan_memory(budget=budget, optimizer=optimizer,
                                recompute=self._recompute_spec)

    def _keeps_recompute(self) -> bool:
        """An algorithm says how to recompute, the budget whether: only named
        nodes are recomputed whatever the budget."""
        return self._recompute_spec is not None and not isinstance(self._recompute_spec, str)

    def _budget_optimizer(self):
        """The optimizer as ``sg.plan(optimizer=)`` counts its state: by the
        number of arrays it keeps per parameter (SGD 0, momentum 1, Adam 2);
        None before ``init_optimizer``."""
        opt = self._optimizer
        if opt is None or not self._trainable:
            return None
        name = self._trainable[0]
        shape, dtype = self._param_info[name]
        k = len(jax.eval_shape(lambda w: tuple(opt.create_state(name, w)),
                               jax.ShapeDtypeStruct(shape, dtype)))
        return {0: "sgd", 1: "momentum"}.get(k, "adam")

    @property
    def budget_plan(self):
        """The ``Plan`` the training programs follow under ``memory_budget``
        or ``recompute`` (None otherwise): ``budget_plan.recompute`` lists
        the forward nodes recomputed, ``budget_plan.total`` the bytes."""
        return self._budget_plan

    def compiled_memory(self, target=None) -> dict:
        """XLA's own figures (bytes) for the training step ``fit`` runs at
        the bound shapes (on every device, with this Module's optimizer and
        memory measures): temp, argument, output and alias sizes, and
        ``program``, which says what was compiled.

        ``target``: compile instead the step ``fit`` would run on one device
        of that target (``symgraph.targets.get``: 'h100', 'a100', 'l4', a
        description file, 'gpu', 'cpu'), with the measure rule of its
        backend; ``program['target']`` names it and ``fit`` says whether it
        fits the device (``xla.fit_on``)."""
        if not self.optimizer_initialized:
            raise TrainError("compiled_memory: call init_optimizer() first")
        from .. import xla
        if target is not None:
            return self._compiled_memory_for(target)
        shapes = {d.name: jax.ShapeDtypeStruct(self._devices.global_shape(d.shape),
                                               d.dtype or "float32",
                                               sharding=self._devices.batch_sharded())
                  for d in self._data_shapes + self._label_shapes}
        sig = batch_signature(shapes)
        prog = self._programs.step(sig, self._optimizer)
        lowered = prog.lower(self._params, self._opt_states, self._aux, self._fixed, shapes,
                             self._scalar(0.1), self._scalar(1), self._key)
        out = xla.analysis_dict(lowered.compile())
        out.pop("generated_code", None)
        out["program"] = self.program_info()
        return out

    def _compiled_memory_for(self, target) -> dict:
        """``compiled_memory(target=)``: the one-device step for ``target``."""
        from .. import targets, xla
        from ..parallel.data_parallel import DeviceSet
        t = targets.get(target)
        progs = TrainPrograms(self.symbol, self._data_names, self._label_names,
                              self._programs.trainable, self._programs.fixed, self._aux_names,
                              DeviceSet(None), self._compute_dtype, self._loss_scale,
                              self._memory_measures, recompute=self._programs.recompute,
                              segments=self._programs.segments, backend=t.backend)
        per_device = self._devices.n
        shapes = {}
        for d in self._data_shapes + self._label_shapes:
            shape = tuple(self._devices.global_shape(d.shape))
            shape = (shape[0] // per_device,) + shape[1:] if shape else shape
            shapes[d.name] = jax.ShapeDtypeStruct(shape, d.dtype or "float32")
        structs = jax.tree.map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype),
                               (self._params, self._opt_states, self._aux, self._fixed))
        prog = progs.step(batch_signature(shapes), self._optimizer)
        scalar = jax.ShapeDtypeStruct((), "float32")
        step = xla.Step(prog, (*structs, shapes, scalar, scalar,
                               jax.ShapeDtypeStruct((), self._key.dtype)),
                        info={**self.program_info(), "devices": 1, "backend": t.backend,
                              "target": t.to_json(),
                              "measures": list(progs.measures(self.for_training))},
                        jitted=True, target=t)
        out = xla.memory(step)
        out.pop("generated_code", None)
        out["program"] = step.info
        return xla.with_fit(out, t, self.symbol.graph())

    def program_info(self) -> dict:
        """What the training step ``fit`` compiles: devices, optimizer,
        compute dtype and memory measures."""
        self._check_bound("program_info")
        opt = self._optimizer
        return {"program": "Module.fit step", "devices": self._devices.n,
                "backend": jax.default_backend(),
                "optimizer": None if opt is None else opt.describe(),
                "compute_dtype": self._compute_dtype,
                "measures": list(self._programs.measures(self.for_training)),
                "recompute": len(getattr(self._programs, "recompute", ()))}


def save_params(fname: str, arg_params: dict, aux_params: dict | None = None) -> None:
    """``arg:``/``aux:`` arrays in MXNet's ``.params`` format, atomically."""
    save = {f"arg:{k}": v for k, v in arg_params.items()}
    save.update({f"aux:{k}": v for k, v in (aux_params or {}).items()})
    save_params_file(fname, save)


def load_params(fname: str) -> tuple[dict, dict]:
    """``(arg_params, aux_params)`` NDArrays from a ``.params`` file."""
    arg, aux = split_arg_aux(load_params_file(fname))
    return ({k: NDArray(v) for k, v in arg.items()}, {k: NDArray(v) for k, v in aux.items()})


__all__ = ["Module", "DynamicLossScale", "load_checkpoint", "save_checkpoint", "save_params",
           "load_params", "params_path", "states_path"]
