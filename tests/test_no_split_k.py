"""The no_split_k memory measure (symgraph.measures): XLA:GPU's gemms
reduce their whole contraction in one pass, so a deviceless compile's
default gemm configuration writes no split-K partial sums beside the plan's
tensors. Compile only, on the h100 description."""
import jax
import jax.numpy as jnp

import symgraph as sg
from symgraph import measures as M
from symgraph import xla
from symgraph.graph import Graph

N, D, H = 2048, 256, 1024  # fc2's reduction (H) is long, its output (N x D) few tiles


def mlp():
    x = sg.sym.Activation(sg.sym.FullyConnected(sg.sym.Variable("data"), num_hidden=H,
                                                name="fc1"), act_type="relu", name="r")
    return sg.sym.FullyConnected(x, num_hidden=D, name="fc2")


def test_no_split_k_gemms_hold_only_the_hidden_layer():
    """Counted by hand: the hidden layer, [N, H] float32 (8 MiB), is all an
    inference of the two layers needs besides its arguments and output --
    the ReLU runs in place. A gemm split in k writes k partial [N, D]
    sums: without the measure the deviceless compile holds more."""
    hidden = N * H * 4
    p = sg.plan(mlp(), {"data": (N, D)})
    unsplit = xla.plan_memory(p, measures=("no_split_k",), target="h100")
    plain = xla.plan_memory(p, measures="none", target="h100")
    assert hidden <= unsplit["temp"] <= hidden + 64 * 1024
    assert plain["temp"] >= hidden + 2 * N * D * 4  # partial sums of two or more
    # the plain-JAX net with the same option: the same figure
    t = sg.targets.get("h100")
    args = [jax.ShapeDtypeStruct(s, jnp.float32) for s in ((N, D), (H, D), (D, H))]
    step = xla.Step(lambda x, w1, w2: jnp.maximum(x @ w1.T, 0) @ w2.T, tuple(args),
                    compiler_options=M.compiler_options(("no_split_k",), "gpu"), target=t)
    assert xla.memory(step)["temp"] == unsplit["temp"]


def test_the_gpu_rule_unsplits_gemms_in_inference():
    g = Graph(mlp().outputs)
    assert "no_split_k" in M.default_measures(g, False, "gpu")
    assert "no_split_k" not in M.default_measures(g, True, "gpu")
    conv = Graph(sg.sym.Convolution(sg.sym.Variable("data"), kernel=(3, 3), num_filter=4,
                                    name="c").outputs)
    assert "no_split_k" not in M.default_measures(conv, False, "gpu")
    # a GPU compiler option: none on the CPU
    assert M.compiler_options(("no_split_k",), "gpu") == M.NO_SPLIT_K_OPTIONS
    assert M.compiler_options(("no_split_k",), "cpu") == {}
