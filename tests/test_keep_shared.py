"""The keep_shared memory measure (symgraph.measures): a value an
elementwise op makes and two or more nodes read passes through one
optimization barrier. Values pass bit for bit; on a GPU description XLA
then holds what the plan holds; the CPU drops it; the GPU rule uses it in
inference only."""
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


def _bits(a):
    a = np.asarray(a)
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def _barriers(fn, *args) -> int:
    return str(jax.make_jaxpr(fn)(*args)).count("optimization_barrier")


def test_shared_entries_are_elementwise_values_with_two_readers():
    g = _residual_mlp(units=2).graph()
    names = {n.name for n in g.nodes if g.entry_id(Entry(n, 0)) in shared_entries(g)}
    # sum0 (read by m1, c1 and sum1) only: the stem's output is a
    # FullyConnected's, sum1 is the graph's output, every other value has one reader
    assert names == {"sum0"}
    sum0 = next(n for n in g.nodes if n.name == "sum0")
    assert {u.name for u in g.users(Entry(sum0, 0))} == {"m1", "c1", "sum1"}


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
    kept_fn = lower(g, train, keep_shared=True)
    kept = jax.jit(kept_fn)(feeds)[0]
    assert len(kept) == len(plain) == len(g.outputs)
    for name, a, b in zip(g.list_outputs(), plain, kept):
        assert a.dtype == b.dtype == np.float64
        np.testing.assert_array_equal(_bits(b), _bits(a), err_msg=name)
    assert np.isnan(np.asarray(plain[0])).any()  # the NaN went through
    shared = {n.name for n in g.nodes if g.entry_id(Entry(n, 0)) in shared_entries(g)}
    # sum2 is an output; in training the backward reads more forward values
    assert shared == {"sum0", "sum1"} if not train else {"sum0", "sum1"} < shared
    assert _barriers(kept_fn, feeds) == len(shared)
    assert _barriers(lower(g, train), feeds) == 0


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


def test_cpu_drops_the_measure():
    """On the CPU the measure is dropped, named or not (GPU_ONLY), and the
    lowering options never ask for it there."""
    g = _residual_mlp().graph()
    assert M.resolve(("keep_shared",), g, False, backend="cpu") == ()
    assert M.resolve(("keep_shared", "scheduler"), g, False, backend="cpu") == ("scheduler",)
    assert M.resolve(("keep_shared",), g, False, backend="gpu") == ("keep_shared",)
    assert M.lower_options(("keep_shared",), "cpu")["keep_shared"] is False
    assert M.lower_options(("keep_shared",), "gpu")["keep_shared"] is True
    assert M.lower_options((), "gpu")["keep_shared"] is False
    assert M.compiler_options(("keep_shared",), "gpu") == {}
    assert M.parse("keep_shared+anchor") == ("keep_shared", "anchor")
    # an Executor on this (CPU) machine, the measure named: dropped, same outputs
    if jax.default_backend() == "cpu":
        ex = _residual_mlp().simple_bind(sg.cpu(), memory_measures="keep_shared",
                                         data=(4, 8))
        assert ex.measures(False) == () and ex.measures(True) == ()


def test_gpu_rule_uses_it_in_inference_where_values_are_shared():
    shared = _residual_mlp().graph()
    x = S.Variable("data")
    conv = S.Convolution(x, kernel=(3, 3), num_filter=4, name="conv")
    plain = Graph(S.FullyConnected(S.Activation(conv, act_type="relu", name="r"),
                                   num_hidden=3, name="fc").outputs)
    assert not shared_entries(plain)
    assert M.default_measures(shared, False, "gpu") == M.GPU_INFER == ("keep_shared",)
    assert M.default_measures(plain, False, "gpu") == ()
    # training: never (it held more there); the anchor for conv nets as before
    assert M.default_measures(shared, True, "gpu") == ()
    assert M.default_measures(plain, True, "gpu") == M.GPU_TRAIN
    # and never on the CPU
    for train in (False, True):
        assert "keep_shared" not in M.default_measures(shared, train, "cpu")
        assert "keep_shared" not in M.resolve(None, shared, train, backend="cpu")
