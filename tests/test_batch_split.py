"""Batch split (issue 13, "Scale out"): the first ops of a net run on slices
of the batch, one per device, the rest placed layer-wise; outputs,
gradients and parameters equal one device's (float64)."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import symgraph as sg
from symgraph.errors import GraphError
from symgraph.graph import Node
from symgraph.lower import LowerCtx
from symgraph.memory.split import split
from symgraph.ops import all_opdefs
from symgraph.passes.batch_split import batch_prefix, split_batch
from symgraph.passes.infer import infer_shapes

from test_ops import _inputs, _single_op_graph

BATCH = 8
SHAPES = {"data": (BATCH, 2, 8, 8), "softmax_label": (BATCH,)}


def _net(bn=False, dropout=False):
    """A VGG in small: two wide convolutions at full resolution (their
    activations dominate), pooling, a fully-connected head."""
    x = sg.sym.Variable("data")
    x = sg.sym.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=32, name="conv1")
    if bn:
        x = sg.sym.BatchNorm(x, name="bn1")
    x = sg.sym.Activation(x, act_type="relu", name="relu1")
    x = sg.sym.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=32, name="conv2")
    x = sg.sym.Activation(x, act_type="relu", name="relu2")
    x = sg.sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool1")
    x = sg.sym.Flatten(x, name="flatten")
    if dropout:
        x = sg.sym.Dropout(x, p=0.5, name="drop")
    x = sg.sym.FullyConnected(x, num_hidden=16, name="fc1")
    x = sg.sym.Activation(x, act_type="relu", name="relu3")
    x = sg.sym.FullyConnected(x, num_hidden=5, name="fc2")
    return sg.sym.SoftmaxOutput(x, name="softmax")


def _ops(g):
    return [n.name for n in g.nodes if n.op is not None]


def test_prefix_stops_where_samples_meet():
    g = _net().graph()
    k, why = batch_prefix(g, ["data", "softmax_label"])
    assert _ops(g)[k] == "softmax" and "output of the graph" in why
    g = _net(bn=True).graph()
    k, why = batch_prefix(g, ["data", "softmax_label"])
    assert k == 1 and "BatchNorm does not treat samples apart" in why
    with pytest.raises(GraphError, match="over 1 at most .*'bn1': BatchNorm"):
        split_batch(g, 3, [3, 5], ["data"])
    g = _net(dropout=True).graph()
    k, why = batch_prefix(g, ["data"])
    assert _ops(g)[k] == "drop" and "Dropout" in why
    # the search never splits past it either
    sp = split(_net(bn=True), SHAPES, 2)[1]
    assert sp.batch is None or sp.batch["ops"] <= 1
    assert not any(name.startswith("bn1_part") for name in sp.groups)
    with pytest.raises(GraphError, match="needs a sample"):
        split_batch(_net().graph(), 2, [8, 0], ["data"])


def test_rewrite_slices_copies_and_joins():
    g = _net().graph()
    bs = split_batch(g, 5, [3, 5], ["data"])  # conv1 .. pool1
    assert bs.slices == ["data_slice0", "data_slice1"] and bs.concats == ["pool1_concat"]
    ops = _ops(bs.graph)
    assert ops.count("conv1") == 1 and "conv1_part1" in ops and "flatten" in ops
    # the copies read the same weights; the rest reads the join
    nodes = {n.name: n for n in bs.graph.nodes}
    assert nodes["conv1"].inputs[1].node is nodes["conv1_part1"].inputs[1].node
    assert nodes["flatten"].inputs[0].node.name == "pool1_concat"
    inf = infer_shapes(bs.graph, SHAPES)
    assert inf.shape(nodes["relu2_part1"].inputs[0]) == (5, 32, 8, 8)
    assert inf.shape(nodes["flatten"].inputs[0]) == (8, 32, 4, 4)
    assert set(bs.graph.list_arguments()) == set(g.list_arguments())
    # the input graph is unchanged; no prefix: the same graph
    assert "conv1_part1" not in _ops(g)
    assert split_batch(g, 0, [3, 5], ["data"]).graph is g


def test_a_larger_batch_still_computes_every_sample():
    """The shares are fixed in the graph; the last slice runs to the end (a
    batch the other slices leave nothing of is refused)."""
    bs = split_batch(_net().graph(), 5, [3, 5], ["data"], SHAPES)
    shapes = {"data": (12, 2, 8, 8), "softmax_label": (12,)}
    rng = np.random.default_rng(0)
    outs = []
    for net in (_net(), sg.sym.Symbol(bs.graph.outputs)):
        ex = net.simple_bind(sg.cpu(0), type_dict={k: "float64" for k in shapes}, **shapes)
        rng = np.random.default_rng(0)
        for k in sorted(ex.arg_dict):
            ex.arg_dict[k][:] = rng.standard_normal(ex.arg_dict[k].shape)
        outs.append(ex.forward(is_train=False)[0].asnumpy())
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-12)
    with pytest.raises(sg.SymgraphError, match="empty or out of range"):
        sg.plan(bs.graph, {"data": (3, 2, 8, 8), "softmax_label": (3,)})


def test_a_later_reader_of_the_data_reads_it_whole():
    x = sg.sym.Variable("data")
    c = sg.sym.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=2, name="c")
    y = sg.sym.Concat(c, x, dim=1, name="cat")  # the data again, after the prefix
    net = sg.sym.SoftmaxOutput(sg.sym.FullyConnected(y, num_hidden=3, name="fc"),
                               name="softmax")
    bs = split_batch(net.graph(), 1, [1, 3], ["data"])
    nodes = {n.name: n for n in bs.graph.nodes}
    assert [e.node.name for e in nodes["cat"].inputs] == ["c_concat", "data"]
    assert bs.concats == ["c_concat"]


def test_split_proposes_a_batch_split_that_trains_like_one_device():
    one_plan, sp = split(_net(), SHAPES, 2)
    assert sp.batch is not None and sp.batch["last"] == "pool1"
    assert sum(sp.batch["shares"]) == BATCH
    assert sp.one_device == one_plan.total
    layer_wise = split(_net(), SHAPES, 2, batch_split=False)[1]
    assert layer_wise.batch is None and sp.devices.peak < layer_wise.devices.peak
    for d in sp.devices.plans:
        assert d.verified
    net = sg.sym.Symbol(sp.graph().outputs)  # what -o writes
    g2c = {k: sg.cpu(v.device_id + 1) for k, v in sp.group2ctx.items()}

    def module(symbol, group2ctxs=None):
        mod = sg.mod.Module(symbol, context=sg.cpu(0), group2ctxs=group2ctxs)
        mod.bind([sg.io.DataDesc("data", SHAPES["data"], "float64")],
                 [sg.io.DataDesc("softmax_label", SHAPES["softmax_label"], "float64")])
        mod.init_params(sg.init.Xavier(), seed=3)
        mod.init_optimizer(optimizer="sgd", optimizer_params={"learning_rate": 0.1,
                                                              "momentum": 0.9, "wd": 1e-3})
        return mod

    one, two = module(_net()), module(net, g2c)
    for k, v in one.get_params()[0].items():  # the same initial parameters
        np.testing.assert_array_equal(two.get_params()[0][k].asnumpy(), v.asnumpy())
    rng = np.random.default_rng(5)
    batches = [sg.io.DataBatch([rng.standard_normal(SHAPES["data"])],
                               [rng.integers(0, 5, BATCH).astype(np.float64)])
               for _ in range(2)]
    for b in batches:  # forward, backward, update: two steps
        for m in (one, two):
            m.forward(b, is_train=True)
            m.backward()
        np.testing.assert_allclose(two.get_outputs()[0].asnumpy(),
                                   one.get_outputs()[0].asnumpy(), rtol=1e-10)
        for k, g in one.get_grads().items():
            np.testing.assert_allclose(two.get_grads()[k].asnumpy(), g.asnumpy(), rtol=1e-10,
                                       atol=1e-13, err_msg=k)
        one.update()
        two.update()
        for k, a in one.get_params()[0].items():
            assert two.get_params()[0][k].dtype == np.float64
            np.testing.assert_allclose(two.get_params()[0][k].asnumpy(), a.asnumpy(),
                                       rtol=1e-10, atol=1e-13, err_msg=k)
    # each weight lives on one device; the slices' copies ran on both
    stage = sp.groups
    assert two._params["conv1_weight"].devices() == {g2c[stage["conv1_weight"]].jax_device}
    assert stage["conv1"] != stage["conv1_part1"]


def test_per_device_plans_of_a_batch_split_add_up():
    one, sp = split(_net(), SHAPES, 2)
    rewritten = sg.plan(sp.graph(), SHAPES, train=True)  # the net -o writes, on one device
    devs = sp.devices
    for k in ("arguments", "gradients", "aux"):
        assert sum(d.buckets[k] for d in devs.plans) == rewritten.buckets[k] == one.buckets[k]
    copies = sum(d.copies["in_bytes"] for d in devs.plans)
    assert copies == sum(d.copies["out_bytes"] for d in devs.plans) > 0
    assert sum(d.internal["naive"] for d in devs.plans) == devs.whole.internal["naive"]
    for d in devs.plans:
        assert d.verified
        assert d.internal["lower_bound"] <= d.internal["arena"] <= d.internal["naive"]
    # the slices and the join cost little (on one device the slices' backwards
    # even take turns: this small net's plan is smaller)
    assert rewritten.total < 1.1 * one.total
    p = sg.plan(sp.graph(), SHAPES, train=True, group2ctx=sp.group2ctx)
    assert [d.total for d in p.devices.plans] == [d.total for d in devs.plans]
    for d in devs.plans:  # each device's tensors at their offsets: the outputs hold
        d.check_arena("arena")


def test_cli_split_reports_the_batch_split(tmp_path, capsys):
    from symgraph.cli import main
    path = tmp_path / "net.json"
    path.write_text(_net().tojson())
    out_file = tmp_path / "split.json"
    code = main(["plan", str(path), "--shape", "data=8,2,8,8", "--train", "--split", "2",
                 "-o", str(out_file)])
    out = capsys.readouterr().out
    assert code == 0 and "batch split: the first 5 ops (conv1 .. pool1)" in out
    # the file written plans with its groups as the split did
    code = main(["plan", str(out_file), "--shape", "data=8,2,8,8", "--train", "--no-xla",
                 "--group2ctx", "stage1=cpu:0,stage2=cpu:1", "--json"])
    doc = json.loads(capsys.readouterr().out)
    sp = split(_net(), {"data": (8, 2, 8, 8)}, 2)[1]
    assert [d["total"] for d in doc["devices"]] == [d.total for d in sp.devices.plans]
    code = main(["plan", str(path), "--shape", "data=8,2,8,8", "--train", "--split", "2",
                 "--layer-wise", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["split"]["batch_split"] is None
    assert doc["split"]["peak"] > sp.devices.peak
    code = main(["plan", str(path), "--shape", "data=8,2,8,8", "--train", "--layer-wise"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and "--layer-wise chooses how --split cuts" in err


# -- OpDef.per_sample, checked for every op that claims it -------------------------------
_BATCH_ARGS = ("data", "lhs", "rhs")


def _per_sample_cases():
    out = []
    for op in all_opdefs():
        if op.name.startswith("_backward"):
            continue
        for i, s in enumerate(op.samples):
            p = Node(op, "op", s.attrs, []).params
            if op.per_sample(p) and s.shapes and len(s.shapes[0]) and s.shapes[0][0] >= 2 \
                    and not _broadcasts_batch(op.arg_names(p), s.shapes):
                out.append((op, i, s))
    return out


def _broadcasts_batch(names, shapes) -> bool:
    """Whether the data inputs of the highest rank differ on axis 0 (the
    sample broadcasts along the batch axis: no batch to slice)."""
    data = [tuple(sh) for nm, sh in zip(names, shapes)
            if sh is not None and (nm in _BATCH_ARGS or nm.startswith("arg"))]
    if not data:
        return False
    rank = max(len(sh) for sh in data)
    return len({sh[0] for sh in data if len(sh) == rank and rank}) > 1


@pytest.mark.parametrize("op,i,sample", _per_sample_cases(),
                         ids=[f"{op.name}-{i}" for op, i, _ in _per_sample_cases()])
def test_per_sample_ops_run_on_slices(op, i, sample):
    """An op that says it treats samples apart gives, on two slices of the
    batch, the two slices of its output on the whole batch."""
    g, node, variables, known = _single_op_graph(op, sample)
    inf = infer_shapes(g, known, dtypes={v.name: "float64" for v in variables})
    vals = _inputs(sample, g, inf, variables, np.random.default_rng(i))
    names = op.arg_names(node.params)
    # the batch: the data inputs of the highest rank (broadcasting aligns from the right)
    data = [k for k, nm in enumerate(names) if nm in _BATCH_ARGS or nm.startswith("arg")]
    rank = max(vals[f"in_{names[k]}"].ndim for k in data)
    sliced = [k for k in data if vals[f"in_{names[k]}"].ndim == rank]
    batch = vals[f"in_{names[sliced[0]]}"].shape[0]
    assert all(vals[f"in_{names[k]}"].shape[0] == batch for k in sliced), \
        "a sample broadcasting along axis 0 is left out by _per_sample_cases"
    ctx = LowerCtx(True, jax.random.key(0), "op")
    args = [jnp.asarray(vals[v.name]) for v in variables]

    def run(lo, hi):
        res = op.lower(node.params, ctx, *[a[lo:hi] if k in sliced else a
                                           for k, a in enumerate(args)])
        return res if isinstance(res, (tuple, list)) else (res,)
    whole, parts = run(0, batch), [run(0, 1), run(1, batch)]
    for k, w in enumerate(whole[:node.num_visible_outputs]):
        np.testing.assert_allclose(np.concatenate([p[k] for p in parts]), np.asarray(w),
                                   rtol=1e-12, atol=1e-14)


def test_per_sample_facts():
    ops = {op.name: op for op in all_opdefs()}

    def fact(name, **attrs):
        return ops[name].per_sample(Node(ops[name], "x", attrs, []).params)
    assert fact("Convolution", kernel=(3, 3), num_filter=2) and fact("relu")
    assert not fact("BatchNorm") and not fact("Dropout") and not fact("SoftmaxOutput")
    assert fact("Concat", num_args=2, dim=1) and not fact("Concat", num_args=2, dim=0)
    assert fact("Reshape", shape=(0, -1)) and not fact("Reshape", shape=(-1, 4))
    assert fact("sum", axis=(1, 2)) and not fact("sum") and not fact("sum", axis=0)
