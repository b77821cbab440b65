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

``Module`` is put together from parts it inherits, each over the same
state: ``module_state.py`` (where it is in bind -> init_params ->
init_optimizer, one ``Stage``), ``module_bind.py`` (``bind``),
``module_params.py`` (parameters and optimizer state), ``module_steps.py``
(forward, backward, update, the one-program step), ``module_memory.py``
(plans, budgets, XLA's figures) and ``loops.py`` (``fit``, ``score``,
``predict``). This module holds the state itself, its names and shapes,
and the checkpoints.

Differences from MXNet worth knowing: metrics and predictions leave out
the padding of a padded last batch; ``fit`` positions an iterator that has
``set_epoch`` (``NDArrayIter`` does) at ``begin_epoch``, so a resumed run
sees the data order of an uninterrupted one; a net's non-loss outputs get a
head gradient of ones.
"""
from __future__ import annotations

import os

import jax

from .. import measures as measures_mod
from ..context import Context
from ..errors import BindError
from ..log import get_logger
from ..ndarray import NDArray
from ..parallel.data_parallel import DeviceSet
from . import TrainError
from .checkpoint import (load_checkpoint, load_params_file, params_path,
                         save_checkpoint, save_params_file, split_arg_aux)
from .ema import WeightEMA, ema_path
from .io import DataDesc
from .loops import Loops, _refuse_given
from .module_bind import Binding
from .module_memory import MemoryFit
from .module_params import Parameters
from .module_state import Lifecycle, Stage
from .module_steps import Steps
from .step import DynamicLossScale, TrainPrograms, loss_scaling


def states_path(prefix: str, epoch: int) -> str:
    return f"{prefix}-{int(epoch):04d}.states"


def input_names(symbol, data_names, label_names, fixed_param_names, logger):
    """``(data, labels, parameters, fixed parameters)`` names of the
    symbol's arguments; BindError for a data or fixed name that is not one,
    a warning for a label name that is not (it is dropped, as MXNet)."""
    args = symbol.list_arguments()
    data_names = list(data_names or [])
    label_names = list(label_names or [])
    missing = [n for n in data_names if n not in args]
    if missing:
        raise BindError(f"data name(s) {', '.join(missing)} are not arguments of the "
                        f"symbol; its arguments are {', '.join(args)}")
    dropped = [n for n in label_names if n not in args]
    if dropped:
        logger.warning("label name(s) %s are not arguments of the symbol; ignored",
                       ", ".join(dropped))
    label_names = [n for n in label_names if n in args]
    inputs = set(data_names) | set(label_names)
    param_names = [n for n in args if n not in inputs]
    fixed = list(fixed_param_names or [])
    bad = [n for n in fixed if n not in param_names]
    if bad:
        raise BindError(f"fixed_param_names {bad} are not parameters of the symbol")
    return data_names, label_names, param_names, fixed


def device_set(symbol, context, group2ctxs, work_load_list):
    """The devices a Module runs on: data parallel over ``context``, or
    placed by ``group2ctxs`` (model parallel)."""
    if work_load_list is not None and len(set(work_load_list)) > 1:
        raise BindError("uneven work_load_list is not supported: data parallel splits "
                        "every batch evenly over the devices")
    if group2ctxs is not None:  # model parallel (parallel/model_parallel.py)
        from ..parallel.model_parallel import PlacedDevices
        devices = PlacedDevices(symbol, group2ctxs, context)
    else:
        devices = DeviceSet(context)
    if work_load_list is not None and len(work_load_list) != len(devices.contexts):
        raise BindError(f"work_load_list has {len(work_load_list)} entries for "
                        f"{len(devices.contexts)} contexts")
    return devices


class Module(Lifecycle, Binding, Parameters, Steps, MemoryFit, Loops):
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
        (self._data_names, self._label_names, self._param_names,
         self._fixed_param_names) = input_names(symbol, data_names, label_names,
                                                fixed_param_names, self.logger)
        self._aux_names = symbol.list_auxiliary_states()
        self._output_names = symbol.list_outputs()
        _refuse_given("state_names", state_names,
                      "Module has no states set by set_states(); feed such arrays with the "
                      "batch (data_names) or keep them as fixed_param_names")
        _refuse_given("compression_params", compression_params,
                      "gradients are summed over the devices inside the compiled step, "
                      "uncompressed")
        self._devices = device_set(symbol, context, group2ctxs, work_load_list)
        self._context = self._devices.contexts
        # how it computes: a bad value fails here, not at bind
        self._compute_dtype = compute_dtype
        loss_scaling(loss_scale)
        self._loss_scale = loss_scale
        self._key = jax.random.key(int(seed))
        measures_mod.parse(memory_measures)
        self._memory_measures = memory_measures
        if memory_budget is not None:
            from ..memory.budget import parse_budget
            memory_budget = parse_budget(memory_budget)
        self._memory_budget = memory_budget
        self._allow_over_budget = bool(allow_over_budget)
        self._recompute_spec = recompute
        self._budget_plan = None
        # where it is in bind -> init_params -> init_optimizer (module_state.py)
        self._stage = Stage.NEW
        self.for_training = False
        self.inputs_need_grad = False
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

    # -- checkpoints ---------------------------------------------------------------------------
    def save_checkpoint(self, prefix: str, epoch: int, save_optimizer_states: bool = False,
                        remove_amp_cast: bool = True) -> None:
        """``prefix-symbol.json``, ``prefix-%04d.params`` and, optionally,
        ``prefix-%04d.states``; each written atomically. ``remove_amp_cast``
        changes nothing: symgraph's symbols hold no amp_cast nodes (the
        compute dtype is cast inside the compiled program)."""
        if not self.params_initialized:
            raise TrainError("save_checkpoint: no parameters yet; call init_params() (or "
                             "fit(), or set_params()) first")
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
