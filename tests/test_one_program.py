"""One training program: the Module, the Executor and the XLA reports share
the split (heads by output index), the default memory measures keep every
result, and the plan is made in the dtype the Module computes in."""
import numpy as np
import pytest

import symgraph as sg
from symgraph.graph import Graph
from symgraph.train.io import DataBatch, DataDesc


def _convnet():
    x = sg.sym.Variable("data")
    x = sg.sym.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=4, name="conv")
    x = sg.sym.BatchNorm(x, name="bn")
    x = sg.sym.Activation(x, act_type="relu", name="relu")
    x = sg.sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool")
    x = sg.sym.Flatten(x, name="flat")
    return sg.sym.FullyConnected(x, num_hidden=3, name="fc")


def test_group_of_one_output_twice_trains_through_module():
    """Group([y, y]) gives y two head gradients; the Module matches them by
    output index (it failed with 'no value given for ..._head_grad1'), and
    the gradient is the sum of both heads, as the Executor computes it."""
    y = _convnet()
    net = sg.sym.Group([y, y])
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    mod = sg.mod.Module(net, label_names=())
    mod.bind([DataDesc("data", x.shape)], None, for_training=True)
    mod.init_params(sg.init.Xavier())
    arg, aux = mod.get_params()
    heads = [rng.standard_normal((2, 3)).astype(np.float32),
             rng.standard_normal((2, 3)).astype(np.float32)]
    mod.forward(DataBatch([x], []), is_train=True)
    mod.backward(heads)
    got = {k: v.asnumpy() for k, v in mod.get_grads().items()}
    ex = net.bind(sg.cpu(), args={"data": x, **{k: v.asnumpy() for k, v in arg.items()}},
                  aux_states={k: v.asnumpy() for k, v in aux.items()})
    ex.forward(is_train=True)
    ex.backward(heads)
    for k, g in got.items():
        np.testing.assert_allclose(g, ex.grad_dict[k].asnumpy(), rtol=1e-5, atol=1e-6)
    # one head alone gives another gradient: both heads were used
    ex.backward([heads[0], np.zeros((2, 3), np.float32)])
    assert not np.allclose(got["fc_weight"], ex.grad_dict["fc_weight"].asnumpy())
    mod.init_optimizer()
    mod.train_step(DataBatch([x], []))  # the fused step feeds both heads too


@pytest.mark.parametrize("measures", ["auto", ("channels_last", "split_wgrad", "anchor"),
                                      ("anchor_weights", "scheduler")])
def test_executor_measures_keep_outputs_and_gradients(measures):
    """The Executor's forward and backward under memory measures equal the
    plain lowering ('none'), and say which measures they use."""
    net = _convnet()
    shapes = {"data": (4, 3, 8, 8)}
    head = np.random.default_rng(1).standard_normal((4, 3))
    results = {}
    for ms in ("none", measures):
        ex = net.simple_bind(sg.cpu(), memory_measures=ms, **shapes)
        for k, a in ex.arg_dict.items():
            a[:] = np.random.default_rng(hash(k) % 2**32).standard_normal(a.shape)
        ex.aux_dict["bn_moving_var"][:] = np.ones(4)
        out = ex.forward(is_train=True)[0].asnumpy()
        ex.backward(head)
        results[str(ms)] = (out, {k: v.asnumpy() for k, v in ex.grad_dict.items()})
        if ms == "none":
            assert ex.measures(True) == ()
        else:
            assert ex.measures(True) == sg.measures.resolve(ms, Graph(net.outputs), True)
    ref, got = results["none"], results[str(measures)]
    # float32: the layouts' convolutions sum in other orders
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-4, atol=1e-5)
    for k in ref[1]:
        np.testing.assert_allclose(got[1][k], ref[1][k], rtol=1e-4, atol=1e-4)


def test_default_measures_rule():
    conv = Graph(_convnet().outputs)
    x = sg.sym.Variable("data")
    mlp = Graph(sg.sym.FullyConnected(x, num_hidden=3, name="fc").outputs)
    assert sg.measures.default_measures(conv, True, "cpu") == sg.measures.CPU_TRAIN
    assert sg.measures.default_measures(conv, False, "cpu") == sg.measures.CPU_INFER
    assert sg.measures.default_measures(mlp, True, "cpu") == ()
    assert sg.measures.default_measures(conv, True, "gpu") == sg.measures.GPU_TRAIN
    # its FullyConnected's gemm unsplit in inference
    assert sg.measures.default_measures(conv, False, "gpu") == ("no_split_k",)
    assert sg.measures.default_measures(mlp, True, "gpu") == ()
    # a residual shortcut (activations added): the scheduler only
    y = _convnet().get_internals()["relu_output"]
    res = Graph((y + sg.sym.Convolution(y, kernel=(1, 1), num_filter=4, name="c2")).outputs)
    assert sg.measures.default_measures(res, True, "cpu") == sg.measures.CPU_RESIDUAL
    # a deep one trains with the anchor; inference and recompute as any residual net
    for i in range(sg.measures.DEEP_RESIDUAL_ADDS + 1):
        y = y + sg.sym.Convolution(y, kernel=(1, 1), num_filter=4, name=f"u{i}")
    deep = Graph(y.outputs)
    assert sg.measures.default_measures(deep, True, "cpu") == \
        sg.measures.CPU_DEEP_RESIDUAL_TRAIN
    # each sum is read by a convolution and by the next sum: kept in inference
    assert sg.measures.default_measures(deep, False, "cpu") == \
        sg.measures.CPU_POST_ACTIVATION_INFER
    assert sg.measures.compiler_options(sg.measures.CPU_RESIDUAL_INFER, "cpu") == \
        {**sg.measures.SCHEDULER_OPTIONS, **sg.measures.SINGLE_OP_FUSIONS}
    assert sg.measures.recompute_measures(sg.measures.default_measures(deep, True, "cpu"),
                                          "cpu") == sg.measures.RECOMPUTE_RESIDUAL
    # other conv nets that recompute take the weight gradient first
    assert sg.measures.recompute_measures(sg.measures.CPU_TRAIN, "cpu") == \
        sg.measures.CPU_TRAIN + ("wgrad_first",)
    assert sg.measures.resolve(("wgrad_first", "anchor"), conv, False) == ("anchor",)
    assert sg.measures.parse("none") == () and sg.measures.parse("auto") is None
    assert sg.measures.parse("channels_last+anchor") == ("channels_last", "anchor")
    assert sg.measures.resolve(("split_wgrad",), conv, False) == ()
    for bad, msg in [("remat", "unknown memory measure"), (3, "memory_measures=3"),
                     (("anchor", "anchor_weights"), "one of the measures")]:
        with pytest.raises(sg.measures.MeasureError, match=msg):
            sg.measures.parse(bad)
    with pytest.raises(sg.measures.MeasureError, match="unknown memory measure"):
        sg.mod.Module(_convnet(), memory_measures="donate")


def test_shortcuts_are_found_by_structure_not_by_op_names():
    """A shortcut is an add of two activations that meet a convolution
    away: a bias added by broadcast_add (a parameter), LayerNorm's
    broadcast ops, a token-mixing residual (no convolution between the
    two sides) and an LSTM's gate sums are not; residual units, also
    written with broadcast_add or ElementWiseSum, are."""
    S, rule = sg.sym, sg.measures.default_measures
    x = S.Variable("data")
    # a plain conv net whose biases are separate broadcast_add nodes
    h = x
    for i in range(3):
        h = S.Convolution(h, kernel=(3, 3), pad=(1, 1), num_filter=4, no_bias=True,
                          name=f"c{i}")
        h = S.Activation(S.broadcast_add(h, S.Variable(f"b{i}", shape=(1, 4, 1, 1))),
                         act_type="relu")
    biased = Graph(h.outputs)
    assert sg.measures.shortcuts(biased) == 0
    assert rule(biased, True, "cpu") == sg.measures.CPU_TRAIN
    assert rule(biased, False, "cpu") == sg.measures.CPU_INFER
    # a stack of LayerNorms and residual MLPs after a patch convolution
    t = S.reshape(S.Convolution(x, kernel=(4, 4), stride=(4, 4), num_filter=8, name="patch"),
                  shape=(0, 0, -1))
    for i in range(30):
        mu = S.mean(t, axis=-1, keepdims=True)
        d = S.broadcast_sub(t, mu)
        n = S.broadcast_div(d, S.sqrt(S.mean(S.square(d), axis=-1, keepdims=True) + 1e-5))
        n = S.broadcast_add(S.broadcast_mul(n, S.Variable(f"g{i}", shape=(16,))),
                            S.Variable(f"be{i}", shape=(16,)))
        t = t + S.FullyConnected(n, num_hidden=16, flatten=False, name=f"fc{i}")
    norms = Graph(t.outputs)
    assert sg.measures.shortcuts(norms) == 0
    assert rule(norms, True, "cpu") == sg.measures.CPU_TRAIN
    # an LSTM-like gate sum of two FullyConnected layers: no convolution at all
    gates = Graph((S.FullyConnected(x, num_hidden=8, name="i2h") +
                   S.FullyConnected(S.Variable("h"), num_hidden=8, name="h2h")).outputs)
    assert sg.measures.shortcuts(gates) == 0 and rule(gates, True, "cpu") == ()
    # residual units, however the sum is written
    y = S.Activation(S.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=4, name="c"),
                     act_type="relu")
    for i, add in enumerate((S.broadcast_add, S.elemwise_add, S.ElementWiseSum)):
        y = add(y, S.Convolution(y, kernel=(1, 1), num_filter=4, name=f"u{i}"))
    units = Graph(y.outputs)
    assert sg.measures.shortcuts(units) == 3
    assert rule(units, True, "cpu") == sg.measures.CPU_RESIDUAL
    # each sum is read by the next unit's convolution and its sum: kept
    assert rule(units, False, "cpu") == sg.measures.CPU_POST_ACTIVATION_INFER


@pytest.mark.parametrize("dtype,size", [("bfloat16", 2), ("float16", 2), ("float32", 4)])
def test_plan_memory_in_the_compute_dtype(dtype, size):
    """Module.plan_memory() plans the activations in the compute dtype, and
    in a low one the copies of the float inputs it casts down."""
    net = sg.sym.SoftmaxOutput(_convnet(), name="softmax")
    mod = sg.mod.Module(net, compute_dtype=dtype)
    mod.bind([DataDesc("data", (4, 3, 8, 8))], [DataDesc("softmax_label", (4,))])
    p = mod.plan_memory()
    g, inf = p.graph, p.inferred
    conv = next(n for n in g.nodes if n.name == "conv")
    assert np.dtype(inf.dtypes[g.entry_id_of_node(conv)]).itemsize == size
    label = next(n for n in g.variables if n.name == "softmax_label")
    assert np.dtype(inf.dtypes[g.entry_id_of_node(label)]).itemsize == 4
    ref = sg.mod.Module(net)
    ref.bind([DataDesc("data", (4, 3, 8, 8))], [DataDesc("softmax_label", (4,))])
    full = ref.plan_memory().internal["arena"]
    # data 4x3x8x8; conv 4x3x3x3 + 4, bn gamma, beta and two aux of 4, fc 3x64 + 3
    copies = 0 if size == 4 else size * (4 * 3 * 8 * 8 + 4 * 27 + 4 + 4 * 4 + 3 * 64 + 3)
    assert p.internal["arena"] * 4 <= full * size + 4 * copies + 64
    assert p.internal["arena"] <= full
