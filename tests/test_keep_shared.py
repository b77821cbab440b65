"""The keep_shared memory measure (symgraph.measures): a value an
elementwise op makes and two or more nodes read is computed once -- through
one optimization barrier off the CPU, as a conditional's branch on the CPU
(values a convolution and an elementwise op read). Values pass bit for bit;
on a GPU description and on the CPU XLA then holds less; the rules use it
in inference only."""
import jax
import numpy as np
import pytest

import symgraph as sg
from symgraph import measures as M
from symgraph import xla
from symgraph.graph import Entry, Graph
from symgraph.lower import lower, shared_entries
from symgraph.passes.gradient import build_gradient

S = sg.sym


def _residual_mlp(units=2, hidden=256, stem=True):
    """A stem FullyConnected, then residual units ``x + fc(x - mean(x))``:
    each sum is read by the next unit's centring and by the next sum (a
    transformer's LayerNorm and shortcut, in small)."""
    x = S.Variable("data")
    if stem:
        x = S.FullyConnected(x, num_hidden=hidden, name="stem")
    for i in range(units):
        c = S.broadcast_sub(x, S.mean(x, axis=1, keepdims=True, name=f"m{i}"), name=f"c{i}")
        b = S.FullyConnected(S.Activation(c, act_type="relu", name=f"r{i}"),
                             num_hidden=hidden, name=f"fc{i}")
        x = S.elemwise_add(x, b, name=f"sum{i}")
    return x


def _post_activation(units=2, filters=8):
    """Post-activation residual units: relu(conv(conv(x)) + x), each unit's
    output read by the next unit's first convolution and by its sum."""
    x = S.Activation(S.Convolution(S.Variable("data"), kernel=(3, 3), pad=(1, 1),
                                   num_filter=filters, name="stem"), act_type="relu", name="r")
    for i in range(units):
        y = S.Activation(S.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=filters,
                                       name=f"a{i}"), act_type="relu", name=f"ra{i}")
        y = S.Convolution(y, kernel=(3, 3), pad=(1, 1), num_filter=filters, name=f"b{i}")
        x = S.Activation(S.elemwise_add(y, x, name=f"sum{i}"), act_type="relu",
                         name=f"out{i}")
    return x


def _bits(a):
    a = np.asarray(a)
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def _kept_count(fn, tie, *args) -> int:
    text = str(jax.make_jaxpr(fn)(*args))
    return text.count("optimization_barrier") if tie == "barrier" else text.count("cond[")


def test_shared_entries_are_elementwise_values_with_two_readers():
    g = _residual_mlp(units=2).graph()
    names = {n.name for n in g.nodes if g.entry_id(Entry(n, 0)) in shared_entries(g)}
    # sum0 (read by m1, c1 and sum1) only: the stem's output is a
    # FullyConnected's, sum1 is the graph's output, every other value has one reader
    assert names == {"sum0"}
    sum0 = next(n for n in g.nodes if n.name == "sum0")
    assert {u.name for u in g.users(Entry(sum0, 0))} == {"m1", "c1", "sum1"}


def test_the_cpu_keeps_what_a_convolution_and_a_sum_read():
    g = _post_activation(units=2).graph()
    names = {n.name for n in g.nodes if g.entry_id(Entry(n, 0)) in shared_entries(g, "branch")}
    # r (read by a0 and sum0) and out0 (by a1 and sum1); out1 is the output
    assert names == {"r", "out0"}
    # without a convolution among the readers, nothing
    assert not shared_entries(_residual_mlp().graph(), "branch")
    with pytest.raises(sg.errors.SymgraphError, match="keep_shared='copy'"):
        shared_entries(g, "copy")


@pytest.mark.parametrize("train", [False, True])
def test_values_pass_bit_for_bit(train):
    """float64 on the CPU lowering, the measure forced: every output (and
    every gradient of the training graph) equals the plain lowering's bit
    for bit, NaN and inf in the data included, and each shared value went
    through one barrier."""
    g = _residual_mlp(units=3, hidden=16).graph()
    if train:
        g = build_gradient(g, ["data", "stem_weight", "fc1_weight"])
    rng = np.random.default_rng(0)
    feeds = {}
    for n in g.variables:
        if n.name == "data":
            feeds[n.name] = rng.normal(size=(6, 8))
        elif n.name.endswith("_bias"):
            feeds[n.name] = rng.normal(size=16)
        elif n.name.endswith("_head_grad"):
            feeds[n.name] = rng.normal(size=(6, 16))
        else:
            fan_in = 8 if n.name == "stem_weight" else 16
            feeds[n.name] = rng.normal(size=(16, fan_in))
    feeds["data"][0, :2] = [np.inf, np.nan]
    feeds["data"][1, 0] = -0.0
    plain = jax.jit(lower(g, train))(feeds)[0]
    kept_fn = lower(g, train, keep_shared="barrier")
    kept = jax.jit(kept_fn)(feeds)[0]
    assert len(kept) == len(plain) == len(g.outputs)
    for name, a, b in zip(g.list_outputs(), plain, kept):
        assert a.dtype == b.dtype == np.float64
        np.testing.assert_array_equal(_bits(b), _bits(a), err_msg=name)
    assert np.isnan(np.asarray(plain[0])).any()  # the NaN went through
    shared = {n.name for n in g.nodes if g.entry_id(Entry(n, 0)) in shared_entries(g)}
    # sum2 is an output; in training the backward reads more forward values
    assert shared == {"sum0", "sum1"} if not train else {"sum0", "sum1"} < shared
    assert _kept_count(kept_fn, "barrier", feeds) == len(shared)
    assert _kept_count(lower(g, train), "barrier", feeds) == 0


def test_values_kept_by_a_branch_pass_bit_for_bit():
    """The CPU's form: float64, NaN, inf and -0.0 in the data; one
    conditional per kept value."""
    g = _post_activation(units=2, filters=4).graph()
    rng = np.random.default_rng(1)
    feeds = {n.name: rng.normal(size=(4, 4, 3, 3)) for n in g.variables
             if n.name.endswith("_weight")}
    feeds.update({n.name: rng.normal(size=4) for n in g.variables
                  if n.name.endswith("_bias")})
    feeds["data"] = rng.normal(size=(2, 4, 5, 5))
    feeds["data"][0, 0, 0, :3] = [np.inf, np.nan, -0.0]
    feeds["stem_weight"] = rng.normal(size=(4, 4, 3, 3))
    plain = jax.jit(lower(g))(feeds)[0]
    kept_fn = lower(g, keep_shared="branch")
    kept = jax.jit(kept_fn)(feeds)[0]
    for a, b in zip(plain, kept):
        assert a.dtype == b.dtype == np.float64
        np.testing.assert_array_equal(_bits(b), _bits(a))
    assert np.isnan(np.asarray(plain[0])).any()
    assert _kept_count(kept_fn, "branch", feeds) == 2


def test_measure_holds_less_on_the_h100_than_without():
    """On the h100 description (compile only), the stem and two residual
    units at 1024 x 256 float32 (T = 1 MiB a tensor). Counted by hand, with
    the measure: each sum is computed once, in place, into the buffer the
    program's output takes (no temp), so what each FullyConnected needs
    besides is its input (the centred sum) and its output: 2 T, plus the
    (1024, 1) means. Without it XLA fuses sum0 into its two readers (the
    centring and the last sum), so fc0's output, a summand, stays alive
    beside fc1's input and output: 3 T."""
    n, d = 1024, 256
    t = n * d * 4
    p = sg.plan(_residual_mlp(units=2, hidden=d), {"data": (n, d)}, train=False)
    temps = {}
    for ms in ("none", ("keep_shared",)):
        m = xla.plan_memory(p, measures=ms, target="h100")
        assert m["program"]["measures"] == ([] if ms == "none" else ["keep_shared"])
        temps[ms] = m["temp"]
    kept, plain = temps[("keep_shared",)], temps["none"]
    assert kept <= 2 * t + 2 * n * 4, (kept, plain)
    assert kept < plain, (kept, plain)
    # the rule picks it here: auto is the measured program
    assert xla.plan_memory(p, target="h100")["temp"] == kept


def test_each_backend_keeps_values_its_own_way():
    """Named, the measure holds on every backend: a conditional's branch on
    the CPU (which drops optimization barriers), a barrier elsewhere."""
    g = _residual_mlp().graph()
    for backend in ("cpu", "gpu"):
        assert M.resolve(("keep_shared",), g, False, backend=backend) == ("keep_shared",)
    assert M.lower_options(("keep_shared",), "cpu")["keep_shared"] == "branch"
    assert M.lower_options(("keep_shared",), "gpu")["keep_shared"] == "barrier"
    assert M.lower_options((), "gpu")["keep_shared"] is None
    assert M.compiler_options(("keep_shared",), "gpu") == {}
    assert M.parse("keep_shared+anchor") == ("keep_shared", "anchor")


def test_the_cpu_holds_less_with_the_post_activation_outputs_kept():
    """CPU, inference, post-activation units of 32 channels at 16x16, batch
    8 (T = 256 KiB a tensor): without the measure XLA computes each unit's
    output again inside the next sum and keeps the unit's convolution output
    and its input alive until then (3 T at least); kept, two tensors at a
    time (the convolution's input and output) and a weight in the
    convolution's layout (36 KiB)."""
    p = sg.plan(_post_activation(units=3, filters=32), {"data": (8, 32, 16, 16)})
    kept = xla.plan_memory(p, measures=("scheduler", "single_op", "keep_shared"),
                           target="cpu")["temp"]
    plain = xla.plan_memory(p, measures=("scheduler", "single_op"), target="cpu")["temp"]
    t = 8 * 32 * 16 * 16 * 4
    assert kept <= 2 * t + 64 * 1024 < 3 * t <= plain, (kept, plain)


def test_gpu_rule_uses_it_in_inference_where_values_are_shared():
    shared = _residual_mlp().graph()
    x = S.Variable("data")
    conv = S.Convolution(x, kernel=(3, 3), num_filter=4, name="conv")
    plain = Graph(S.FullyConnected(S.Activation(conv, act_type="relu", name="r"),
                                   num_hidden=3, name="fc").outputs)
    assert not shared_entries(plain)
    # (their FullyConnected layers' gemms unsplit besides: tests/test_no_split_k.py)
    assert M.default_measures(shared, False, "gpu") == ("keep_shared", "no_split_k")
    assert M.default_measures(plain, False, "gpu") == ("no_split_k",)
    # training: never (it held more there); the anchor for conv nets as before
    assert M.default_measures(shared, True, "gpu") == ()
    assert M.default_measures(plain, True, "gpu") == M.GPU_TRAIN
    # on the CPU: post-activation units' inference only
    for train in (False, True):
        assert "keep_shared" not in M.default_measures(shared, train, "cpu")
    post = _post_activation().graph()
    assert M.default_measures(post, False, "cpu") == M.CPU_POST_ACTIVATION_INFER
    assert M.default_measures(post, True, "cpu") == M.CPU_RESIDUAL
    # a pre-activation unit: its sum is read by a BatchNorm and the next sum
    x = S.Convolution(S.Variable("data"), kernel=(3, 3), pad=(1, 1), num_filter=4, name="c0")
    for i in range(2):
        y = S.Convolution(S.Activation(S.BatchNorm(x, name=f"bn{i}"), act_type="relu",
                                       name=f"r{i}"),
                          kernel=(3, 3), pad=(1, 1), num_filter=4, name=f"c{i + 1}")
        x = S.elemwise_add(x, y, name=f"s{i}")
    assert M.default_measures(Graph(x.outputs), False, "cpu") == M.CPU_RESIDUAL_INFER
