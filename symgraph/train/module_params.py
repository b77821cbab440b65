"""The Module's parameters and optimizer: ``init_params``, ``set_params``,
``get_params`` (and the moving average's), ``init_optimizer`` and the
optimizer state's files. ``Module`` inherits ``Parameters``. Values set
before ``bind`` wait on the host (``_pending``) until it places them
(replicated over the devices)."""
from __future__ import annotations

import jax
import numpy as np

from ..ndarray import NDArray
from ..parallel.data_parallel import DeviceSet
from ..params import _host as host  # an NDArray, device or NumPy array on the host
from . import TrainError
from . import initializer as init_mod
from . import optimizer as opt_mod
from .checkpoint import load_params_file, save_params_file
from .step import LOSS_SCALE_STATE, loss_scaling


def make_optimizer(optimizer, optimizer_params, batch_size: int, symbol, idx2name: dict,
                   logger):
    """``init_optimizer``'s optimizer: by name (``rescale_grad`` 1/batch size
    unless given, as MXNet), or an ``Optimizer`` given (warned about when its
    ``rescale_grad`` is not 1/batch size)."""
    if isinstance(optimizer, str):
        params = dict(optimizer_params or {})
        params.setdefault("rescale_grad", 1.0 / batch_size)
        return opt_mod.create(optimizer, sym=symbol, param_idx2name=idx2name, **params)
    if not isinstance(optimizer, opt_mod.Optimizer):
        raise TrainError(f"optimizer must be a name or an Optimizer, got "
                         f"{type(optimizer).__name__}")
    if optimizer.rescale_grad != 1.0 / batch_size:
        logger.warning("Optimizer created manually outside Module but rescale_grad is not "
                       "normalized to 1.0/batch_size (%s vs. %s). Is this intended?",
                       optimizer.rescale_grad, 1.0 / batch_size)
    if not optimizer.idx2name:
        optimizer.idx2name = idx2name
        optimizer.set_wd_mult(optimizer.wd_mult)
    return optimizer


class Parameters:
    """Parameters and optimizer state over the Module's state (``Module``
    is the one)."""

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
        self._stage = self._stage.with_params()

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
        have_arg = {k: host(v) for k, v in (arg_params or {}).items()}
        have_aux = {k: host(v) for k, v in (aux_params or {}).items()}
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
            self._pending = ({k: host(v) for k, v in arg_params.items()},
                             {k: host(v) for k, v in (aux_params or {}).items()})
            self._stage = self._stage.with_params()
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
            self._spread_over_processes()
        # the batch is every process's (MXNet: batch_size *= num_workers)
        batch_size = self._data_shapes[0].shape[0] * self._devices.processes
        optimizer = make_optimizer(optimizer, optimizer_params, batch_size, self.symbol,
                                   dict(enumerate(self._param_names)), self.logger)
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
        self._stage = self._stage.with_optimizer()
        if self._preload_opt_states is not None:
            self.load_optimizer_states(self._preload_opt_states)
            self._preload_opt_states = None
        self._fit_budget_if_any()

    def _spread_over_processes(self) -> None:
        """A distributed kvstore over several processes: one step over every
        process's devices, so the module binds there anew (the parameters
        move along, process 0's values)."""
        if hasattr(self._devices, "train_programs"):  # placed: PlacedDevices
            raise TrainError(f"kvstore='{self._kvstore.type}' with group2ctxs is not "
                             f"supported: a placed net trains within one process (worker "
                             f"groups: Module(context=[...], group2ctxs=[{{...}}, ...]))")
        self._devices = DeviceSet(self._context, processes=True)
        self.bind(self._data_shapes, self._label_shapes, self.for_training,
                  self.inputs_need_grad, force_rebind=True, grad_req=self._grad_req)

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
        self._check_optimizer("save_optimizer_states")
        save = {f"state:{n}:{i}": s for n, st in self._opt_states.items()
                for i, s in enumerate(st)}
        save["meta:num_update"] = np.array([self._optimizer.num_update], np.int64)
        from ..parallel import distributed
        if distributed.is_writer():  # of several processes, process 0 writes
            save_params_file(fname, save)
        distributed.barrier("symgraph_optimizer_states")

    def load_optimizer_states(self, fname: str) -> None:
        self._check_optimizer("load_optimizer_states")
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

