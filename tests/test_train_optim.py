"""Optimizers, learning-rate schedules and initializers against hand-written
NumPy references of MXNet's documented rules, step for step."""
import math

import jax.numpy as jnp
import numpy as np
import pytest

import symgraph as sg
from symgraph.train import TrainError
from symgraph.train import initializer as I
from symgraph.train import lr_scheduler as L
from symgraph.train import optimizer as O


# --------------------------------------------------------------------------
# NumPy references (written from MXNet's docs, independently of the code)
# --------------------------------------------------------------------------
def _clip(g, c):
    return g if c is None else np.clip(g, -c, c)


def ref_step(name, hp, w, g, state, lr, wd, t):
    rs, c = hp.get("rescale_grad", 1.0), hp.get("clip_gradient")
    if name == "sgd":
        m = hp.get("momentum", 0.0)
        gg = _clip(rs * g, c)
        if m == 0:
            return w - lr * (gg + wd * w), state
        mom = m * state[0] - lr * (gg + wd * w)
        return w + mom, [mom]
    if name == "nag":
        m = hp["momentum"]
        gg = _clip(rs * g, c) + wd * w          # MXNet's nag_mom_update (1.6 to 2.x)
        mom = m * state[0] - lr * gg
        return w + m * mom - lr * gg, [mom]
    if name in ("adam", "adamw"):
        b1, b2, eps = hp.get("beta1", 0.9), hp.get("beta2", 0.999), hp.get("epsilon", 1e-8)
        gg = _clip(rs * g + wd * w, c) if name == "adam" else _clip(rs * g, c)
        m = b1 * state[0] + (1 - b1) * gg
        v = b2 * state[1] + (1 - b2) * gg * gg
        if name == "adam":
            lr_t = lr * math.sqrt(1 - b2 ** t) / (1 - b1 ** t)
            return w - lr_t * m / (np.sqrt(v) + eps), [m, v]
        mh, vh = m / (1 - b1 ** t), v / (1 - b2 ** t)
        return w - lr * (mh / (np.sqrt(vh) + eps) + wd * w), [m, v]
    if name == "rmsprop":
        g1, g2, eps = hp.get("gamma1", 0.9), hp.get("gamma2", 0.9), hp.get("epsilon", 1e-8)
        gg = _clip(rs * g + wd * w, c)
        n = (1 - g1) * gg * gg + g1 * state[0]
        if not hp.get("centered"):
            return w - lr * gg / np.sqrt(n + eps), [n]
        gm = (1 - g1) * gg + g1 * state[1]
        delta = g2 * state[2] - lr * gg / np.sqrt(n - gm * gm + eps)
        return w + delta, [n, gm, delta]
    raise AssertionError(name)


def ref_state(name, hp, w):
    k = {"sgd": 1 if hp.get("momentum") else 0, "nag": 1, "adam": 2, "adamw": 2,
         "rmsprop": 3 if hp.get("centered") else 1}[name]
    return [np.zeros_like(w) for _ in range(k)]


CASES = [
    ("sgd", {}),
    ("sgd", {"momentum": 0.9, "rescale_grad": 0.5, "clip_gradient": 0.3}),
    ("nag", {"momentum": 0.8, "clip_gradient": 0.5}),
    ("adam", {"rescale_grad": 0.5, "clip_gradient": 0.4}),
    ("adam", {"beta1": 0.8, "beta2": 0.99, "epsilon": 1e-6}),
    ("adamw", {"clip_gradient": 0.4}),
    ("rmsprop", {"clip_gradient": 0.5}),
    ("rmsprop", {"centered": True, "gamma2": 0.8}),
]
IDS = [f"{n}-{i}" for i, (n, _) in enumerate(CASES)]


@pytest.mark.parametrize("name,hp", CASES, ids=IDS)
def test_updater_matches_reference_step_for_step(name, hp):
    rng = np.random.default_rng(0)
    w0 = rng.normal(size=(3, 4))
    opt = O.create(name, learning_rate=0.05, wd=0.1, **hp)
    upd = O.get_updater(opt)
    weight = sg.nd.NDArray(jnp.asarray(w0))  # float64: a tight comparison
    w, state = w0.copy(), ref_state(name, hp, w0)
    for t in range(1, 6):
        g = rng.normal(size=w0.shape)
        upd("fc_weight", sg.nd.NDArray(jnp.asarray(g)), weight)  # '_weight': weight decay applies
        w, state = ref_step(name, hp, w, g, state, 0.05, 0.1, t)
        np.testing.assert_allclose(weight.asnumpy(), w, rtol=1e-6, atol=1e-9)


def _linreg_module(opt, hp, lr_scheduler=None, steps=4, devices=1):
    """A linear regression (fc weight with lr_mult 0.5, bias) trained by the
    Module's one-program step; returns the module and the data."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(8, 3))
    lab = rng.normal(size=(8, 1))
    data = sg.sym.Variable("data")
    w = sg.sym.Variable("fc_weight", lr_mult=0.5)
    net = sg.sym.FullyConnected(data, weight=w, num_hidden=1, name="fc")
    net = sg.sym.LinearRegressionOutput(net, name="lro")
    mod = sg.mod.Module(net, label_names=["lro_label"],
                        context=[sg.cpu(i) for i in range(devices)])
    it = sg.io.NDArrayIter(x, lab, batch_size=8, label_name="lro_label", dtype=None)
    mod.bind(it.provide_data, it.provide_label)
    w0, b0 = rng.normal(size=(1, 3)), rng.normal(size=(1,))
    mod.init_params(arg_params={"fc_weight": w0, "fc_bias": b0})
    params = dict(learning_rate=0.1, wd=0.2, **hp)
    if lr_scheduler is not None:
        params["lr_scheduler"] = lr_scheduler
    mod.init_optimizer(optimizer=opt, optimizer_params=params)
    batch = next(it)
    for _ in range(steps):
        mod.train_step(batch)
    return mod, x, lab, w0, b0


@pytest.mark.parametrize("name,hp", CASES, ids=IDS)
def test_module_step_matches_reference_with_lr_and_wd_mults(name, hp):
    """The compiled step, with rescale_grad = 1/batch, lr_mult 0.5 on the
    weight (a Variable hint) and no weight decay on the bias (MXNet's rule)."""
    hp = {k: v for k, v in hp.items() if k != "rescale_grad"}
    mod, x, lab, w, b = _linreg_module(name, hp)
    sw, sb = ref_state(name, hp, w), ref_state(name, hp, b)
    full = dict(hp, rescale_grad=1 / 8)
    for t in range(1, 5):
        err = x @ w.T + b - lab                 # LinearRegressionOutput's gradient
        gw, gb = err.T @ x, err.sum(0)
        w, sw = ref_step(name, full, w, gw, sw, 0.1 * 0.5, 0.2, t)
        b, sb = ref_step(name, full, b, gb, sb, 0.1, 0.0, t)
    arg, _ = mod.get_params()
    np.testing.assert_allclose(arg["fc_weight"].asnumpy(), w, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(arg["fc_bias"].asnumpy(), b, rtol=1e-6, atol=1e-9)
    assert mod.optimizer.num_update == 4


def test_module_step_follows_the_lr_schedule():
    sched = L.FactorScheduler(step=2, factor=0.5)
    mod, x, lab, w, b = _linreg_module("sgd", {}, lr_scheduler=sched, steps=5)
    for t in range(1, 6):
        lr = 0.1 * 0.5 ** (math.ceil(t / 2) - 1)
        err = x @ w.T + b - lab
        w = w - lr * 0.5 * ((err.T @ x) / 8 + 0.2 * w)
        b = b - lr * err.sum(0) / 8
    np.testing.assert_allclose(mod.get_params()[0]["fc_weight"].asnumpy(), w, rtol=1e-6)


@pytest.mark.parametrize("name,hp", CASES, ids=IDS)
def test_module_step_on_two_devices_follows_a_warmup_cosine_schedule(name, hp):
    """Every optimizer inside the compiled step, data parallel over two
    devices, with a warmup + cosine schedule (a traced learning rate that
    changes every step), lr_mult 0.5 on the weight and no decay on the bias."""
    hp = {k: v for k, v in hp.items() if k != "rescale_grad"}
    sched = L.CosineScheduler(max_update=6, base_lr=0.1, final_lr=0.01, warmup_steps=2)
    mod, x, lab, w, b = _linreg_module(name, hp, lr_scheduler=sched, steps=5, devices=2)
    lr_of = mx_poly(6, 0.1, 1, 0.01, warm=2, cosine=True)
    sw, sb = ref_state(name, hp, w), ref_state(name, hp, b)
    full = dict(hp, rescale_grad=1 / 8)
    for t in range(1, 6):
        err = x @ w.T + b - lab
        gw, gb = err.T @ x, err.sum(0)
        w, sw = ref_step(name, full, w, gw, sw, lr_of(t) * 0.5, 0.2, t)
        b, sb = ref_step(name, full, b, gb, sb, lr_of(t), 0.0, t)
    arg, _ = mod.get_params()
    np.testing.assert_allclose(arg["fc_weight"].asnumpy(), w, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(arg["fc_bias"].asnumpy(), b, rtol=1e-6, atol=1e-9)
    assert len({lr_of(t) for t in range(1, 6)}) == 5  # the rate changed at every step


def test_wd_and_lr_mult_sources():
    data = sg.sym.Variable("data")
    net = sg.sym.FullyConnected(data, weight=sg.sym.Variable("a_weight", wd_mult=0.3),
                                num_hidden=2, name="fc")
    opt = O.SGD(sym=net, param_idx2name={0: "a_weight", 1: "fc_bias", 2: "bn_gamma"})
    assert opt._get_wd(0) == 0 and opt._get_wd(1) == 0  # wd=0
    opt = O.SGD(wd=1.0, sym=net, param_idx2name={0: "a_weight", 1: "fc_bias", 2: "bn_gamma"})
    assert (opt._get_wd(0), opt._get_wd(1), opt._get_wd(2)) == (0.3, 0.0, 1.0)
    opt.set_lr_mult({"fc_bias": 2.0})
    assert opt._get_lr(1) == pytest.approx(0.02)


def test_optimizer_errors():
    with pytest.raises(TrainError, match="unknown optimizer 'sgdd'"):
        O.create("sgdd")
    with pytest.raises(TrainError, match="momentun"):
        O.create("sgd", momentun=0.9)
    opt = O.SGD(lr_scheduler=L.FactorScheduler(5))
    with pytest.raises(TrainError, match="lr_scheduler"):
        opt.set_learning_rate(0.1)


def test_updater_states_round_trip():
    opt = O.Adam()
    upd = O.get_updater(opt)
    w = sg.nd.array(np.ones((2, 2)))
    upd(0, sg.nd.array(np.ones((2, 2))), w)
    other = O.get_updater(O.Adam())
    other.set_states(upd.get_states())
    np.testing.assert_array_equal(np.asarray(other.states[0][0]), np.asarray(upd.states[0][0]))


# --------------------------------------------------------------------------
# learning-rate schedules: MXNet's stateful logic, re-written here
# --------------------------------------------------------------------------
def mx_factor(step, factor, base, stop=1e-8, warm=0, wbegin=0.0, mode="linear"):
    count, lr = 0, base

    def f(n):
        nonlocal count, lr
        if n < warm:
            return wbegin + (base - wbegin) * n / warm if mode == "linear" else wbegin
        while n > count + step:
            count += step
            lr = max(lr * factor, stop)
        return lr
    return f


def mx_multifactor(steps, factor, base):
    idx, lr = 0, base

    def f(n):
        nonlocal idx, lr
        while idx < len(steps) and n > steps[idx]:
            idx += 1
            lr *= factor
        return lr
    return f


def mx_poly(max_update, base, pwr, final, warm=0, wbegin=0.0, cosine=False):
    lr = base

    def f(n):
        nonlocal lr
        if n < warm:
            return wbegin + (base - wbegin) * n / warm
        if n <= max_update:
            frac = (n - warm) / (max_update - warm)
            shape = (1 + math.cos(math.pi * frac)) / 2 if cosine else (1 - frac) ** pwr
            lr = final + (base - final) * shape
        return lr
    return f


SCHEDULES = [
    (L.FactorScheduler(step=3, factor=0.5, base_lr=0.1), mx_factor(3, 0.5, 0.1)),
    (L.FactorScheduler(step=2, factor=0.1, stop_factor_lr=1e-4, base_lr=1.0),
     mx_factor(2, 0.1, 1.0, stop=1e-4)),
    (L.FactorScheduler(step=4, factor=0.5, base_lr=0.2, warmup_steps=5, warmup_begin_lr=0.01),
     mx_factor(4, 0.5, 0.2, warm=5, wbegin=0.01)),
    (L.FactorScheduler(step=4, factor=0.5, base_lr=0.2, warmup_steps=3, warmup_begin_lr=0.05,
                       warmup_mode="constant"),
     mx_factor(4, 0.5, 0.2, warm=3, wbegin=0.05, mode="constant")),
    (L.MultiFactorScheduler(step=[3, 7, 20], factor=0.3, base_lr=0.5),
     mx_multifactor([3, 7, 20], 0.3, 0.5)),
    (L.PolyScheduler(max_update=20, base_lr=0.3, pwr=2, final_lr=0.01),
     mx_poly(20, 0.3, 2, 0.01)),
    (L.CosineScheduler(max_update=20, base_lr=0.3, final_lr=0.01, warmup_steps=4),
     mx_poly(20, 0.3, 1, 0.01, warm=4, cosine=True)),
]


@pytest.mark.parametrize("sched,ref", SCHEDULES, ids=[type(s).__name__ + str(i)
                                                      for i, (s, _) in enumerate(SCHEDULES)])
def test_schedules_match_mxnet(sched, ref):
    for n in range(1, 31):
        assert sched(n) == pytest.approx(ref(n), rel=1e-12), n
    assert sched(25) == sched(25)  # pure: asking again changes nothing


def test_warmup_wrapper_and_optimizer_base_lr():
    inner = L.CosineScheduler(max_update=10, base_lr=1.0)
    sched = L.WarmupScheduler(inner, warmup_steps=4, warmup_begin_lr=0.0)
    assert [sched(n) for n in range(4)] == pytest.approx([0, 0.25, 0.5, 0.75])
    assert sched(7) == inner(7)
    opt = O.SGD(learning_rate=0.5, lr_scheduler=sched)  # learning_rate sets base_lr
    assert inner.base_lr == 0.5


def test_schedule_argument_errors():
    with pytest.raises(TrainError, match="increasing"):
        L.MultiFactorScheduler(step=[5, 3])
    with pytest.raises(TrainError, match="factor"):
        L.FactorScheduler(step=2, factor=2.0)
    with pytest.raises(TrainError, match="warmup_mode"):
        L.FactorScheduler(step=2, warmup_mode="cubic")


# --------------------------------------------------------------------------
# initializers
# --------------------------------------------------------------------------
def _draw(init, name, shape, seed=0):
    arr = np.zeros(shape)
    init(name, arr, rng=np.random.default_rng(seed))
    return arr


@pytest.mark.parametrize("rnd,factor,mag", [("uniform", "avg", 3), ("uniform", "in", 2),
                                            ("gaussian", "out", 3), ("gaussian", "avg", 1.5)])
def test_xavier_formula(rnd, factor, mag):
    shape = (16, 8, 3, 3)
    fan_in, fan_out = 8 * 9, 16 * 9
    f = {"avg": (fan_in + fan_out) / 2, "in": fan_in, "out": fan_out}[factor]
    scale = math.sqrt(mag / f)
    got = _draw(I.Xavier(rnd, factor, mag), "conv_weight", shape, seed=3)
    rng = np.random.default_rng(3)
    want = rng.uniform(-scale, scale, shape) if rnd == "uniform" else \
        rng.normal(0, scale, shape)
    np.testing.assert_allclose(got, want)


def test_xavier_statistics_on_a_large_weight():
    got = _draw(I.Xavier(), "fc_weight", (400, 300))
    scale = math.sqrt(3 / 350)
    assert np.abs(got).max() <= scale and np.abs(got).max() > 0.99 * scale
    assert got.std() == pytest.approx(scale / math.sqrt(3), rel=0.02)


def test_uniform_normal_and_msra_draw_exactly_mxnets_distributions():
    shape = (6, 4, 3, 3)
    want = np.random.default_rng(7).uniform(-0.2, 0.2, shape)
    np.testing.assert_array_equal(_draw(I.Uniform(0.2), "c_weight", shape, seed=7), want)
    want = np.random.default_rng(7).normal(0.0, 0.5, shape)
    np.testing.assert_array_equal(_draw(I.Normal(0.5), "c_weight", shape, seed=7), want)
    # MSRAPrelu: N(0, sqrt(magnitude / factor)) with magnitude = 2 / (1 + slope^2)
    fan_in, fan_out = 4 * 9, 6 * 9
    for factor_type, slope in (("avg", 0.25), ("in", 0.0), ("out", 0.1)):
        factor = {"avg": (fan_in + fan_out) / 2, "in": fan_in, "out": fan_out}[factor_type]
        sigma = math.sqrt(2.0 / (1 + slope ** 2) / factor)
        want = np.random.default_rng(7).normal(0.0, sigma, shape)
        got = _draw(I.MSRAPrelu(factor_type, slope), "c_weight", shape, seed=7)
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_module_initializes_batchnorm_by_mxnets_convention():
    """Through a Module: BatchNorm's gamma 1, beta 0, moving mean 0, moving
    variance 1; convolution and FC weights Xavier within their bounds;
    biases 0."""
    x = sg.sym.Convolution(sg.sym.Variable("data"), kernel=(3, 3), num_filter=4, name="c")
    x = sg.sym.BatchNorm(x, fix_gamma=False, name="bn")
    x = sg.sym.FullyConnected(sg.sym.Flatten(x), num_hidden=3, name="fc")
    mod = sg.mod.Module(sg.sym.SoftmaxOutput(x, name="softmax"))
    mod.bind([("data", (2, 2, 5, 5))], [("softmax_label", (2,))])
    mod.init_params(I.Xavier(magnitude=2.0), seed=0)
    arg, aux = mod.get_params()
    arg = {k: v.asnumpy() for k, v in arg.items()}
    aux = {k: v.asnumpy() for k, v in aux.items()}
    assert (arg["bn_gamma"] == 1).all() and (arg["bn_beta"] == 0).all()
    assert (aux["bn_moving_mean"] == 0).all() and (aux["bn_moving_var"] == 1).all()
    assert (arg["c_bias"] == 0).all() and (arg["fc_bias"] == 0).all()
    for name, (fan_in, fan_out) in {"c_weight": (2 * 9, 4 * 9), "fc_weight": (36, 3)}.items():
        bound = math.sqrt(2.0 / ((fan_in + fan_out) / 2))
        assert 0.5 * bound < np.abs(arg[name]).max() <= bound, name


def test_msra_prelu_is_he_init():
    got = _draw(I.MSRAPrelu(factor_type="in", slope=0.0), "c_weight", (256, 64, 3, 3))
    assert got.std() == pytest.approx(math.sqrt(2 / (64 * 9)), rel=0.02)
    got = _draw(I.MSRAPrelu(), "c_weight", (256, 64, 3, 3))
    assert got.std() == pytest.approx(math.sqrt(2 / 1.0625 / ((64 * 9 + 256 * 9) / 2)), rel=0.02)


def test_simple_initializers_and_suffix_rules():
    assert np.abs(_draw(I.Uniform(0.2), "w_weight", (500,))).max() <= 0.2
    assert _draw(I.Normal(0.5), "w_weight", (100, 100)).std() == pytest.approx(0.5, rel=0.02)
    assert (_draw(I.Constant(3.0), "w_weight", (2, 2)) == 3).all()
    init = I.Xavier()
    assert (_draw(init, "fc_bias", (4,)) == 0).all()
    assert (_draw(init, "bn_gamma", (4,)) == 1).all()
    assert (_draw(init, "bn_beta", (4,)) == 0).all()
    assert (_draw(init, "bn_moving_mean", (4,)) == 0).all()
    assert (_draw(init, "bn_moving_var", (4,)) == 1).all()
    with pytest.raises(TrainError, match="no initialization rule for parameter 'mystery'"):
        _draw(init, "mystery", (4,))
    with pytest.raises(TrainError, match="at least 2 dimensions"):
        I.Xavier()._init_weight("v_weight", np.zeros(3))


def test_init_hint_and_dumps_round_trip():
    c = I.create(I.Xavier(rnd_type="gaussian", magnitude=2).dumps())
    assert isinstance(c, I.Xavier) and c.rnd_type == "gaussian" and c.magnitude == 2
    desc = I.InitDesc("scale_weight", {"__init__": I.Constant(7.0).dumps()})
    assert (_draw(I.Xavier(), desc, (2, 3)) == 7).all()
    # through a Module: the Variable's init= wins over the global initializer
    data = sg.sym.Variable("data")
    w = sg.sym.Variable("fc_weight", init=I.Constant(0.25))
    net = sg.sym.FullyConnected(data, weight=w, num_hidden=3, name="fc")
    mod = sg.mod.Module(net, label_names=None)
    mod.bind([("data", (2, 4))], for_training=False)
    mod.init_params(I.Uniform(1.0), seed=0)
    arg, _ = mod.get_params()
    assert (arg["fc_weight"].asnumpy() == 0.25).all() and (arg["fc_bias"].asnumpy() == 0).all()
    with pytest.raises(TrainError, match="unknown initializer"):
        I.create("glorot")


def test_mixed_and_load():
    m = I.Mixed(["fc1.*", ".*"], [I.Constant(1.0), I.Constant(2.0)])
    assert (_draw(m, "fc1_weight", (2, 2)) == 1).all() and (_draw(m, "fc2_weight", (2,)) == 2).all()
    ld = I.Load({"arg:fc_weight": np.full((2, 2), 5.0)}, default_init=I.Zero())
    assert (_draw(ld, "fc_weight", (2, 2)) == 5).all() and (_draw(ld, "x_weight", (2,)) == 0).all()
