"""Model parallel: ctx_group placement, one program per device segment, and
the memory plan per device (issue 13, items 2 and 3)."""
import json

import numpy as np
import pytest

import symgraph as sg
from symgraph.errors import ContextError, SymgraphError
from symgraph.train import TrainError
from symgraph.passes.gradient import TrainingSplit
from symgraph.passes.place import COPY_OP, PlacementError, contiguous_groups, place, with_groups

# an MXNet 1.x symbol file (strings for every attribute, arg_nodes, heads):
# conv -> BatchNorm -> relu on stage1, fully connected -> softmax on stage2;
# 'data' and 'softmax_label' carry no group (placement follows their readers)
MXNET_JSON = {
    "nodes": [
        {"op": "null", "name": "data", "inputs": []},
        {"op": "null", "name": "conv1_weight", "attrs": {"__ctx_group__": "stage1"},
         "inputs": []},
        {"op": "null", "name": "conv1_bias", "attrs": {"__ctx_group__": "stage1"},
         "inputs": []},
        {"op": "Convolution", "name": "conv1",
         "attrs": {"__ctx_group__": "stage1", "kernel": "(3, 3)", "num_filter": "4",
                   "pad": "(1, 1)"},
         "inputs": [[0, 0, 0], [1, 0, 0], [2, 0, 0]]},
        {"op": "null", "name": "bn1_gamma", "attrs": {"__ctx_group__": "stage1"},
         "inputs": []},
        {"op": "null", "name": "bn1_beta", "attrs": {"__ctx_group__": "stage1"},
         "inputs": []},
        {"op": "null", "name": "bn1_moving_mean", "attrs": {"__ctx_group__": "stage1"},
         "inputs": []},
        {"op": "null", "name": "bn1_moving_var", "attrs": {"__ctx_group__": "stage1"},
         "inputs": []},
        {"op": "BatchNorm", "name": "bn1", "attrs": {"__ctx_group__": "stage1",
                                                       "fix_gamma": "False"},
         "inputs": [[3, 0, 0], [4, 0, 0], [5, 0, 0], [6, 0, 1], [7, 0, 1]]},
        {"op": "Activation", "name": "relu1",
         "attrs": {"__ctx_group__": "stage1", "act_type": "relu"}, "inputs": [[8, 0, 0]]},
        {"op": "null", "name": "fc_weight", "attrs": {"__ctx_group__": "stage2"},
         "inputs": []},
        {"op": "null", "name": "fc_bias", "attrs": {"__ctx_group__": "stage2"},
         "inputs": []},
        {"op": "FullyConnected", "name": "fc",
         "attrs": {"__ctx_group__": "stage2", "num_hidden": "5"},
         "inputs": [[9, 0, 0], [10, 0, 0], [11, 0, 0]]},
        {"op": "null", "name": "softmax_label", "inputs": []},
        {"op": "SoftmaxOutput", "name": "softmax", "attrs": {"__ctx_group__": "stage2"},
         "inputs": [[12, 0, 0], [13, 0, 0]]},
    ],
    "arg_nodes": [0, 1, 2, 4, 5, 6, 7, 10, 11, 13],
    "node_row_ptr": list(range(17)),
    "heads": [[14, 0, 0]],
    "attrs": {"mxnet_version": ["int", 10901]},
}
SHAPES = {"data": (4, 2, 5, 5), "softmax_label": (4,)}
G2C = {"stage1": sg.cpu(1), "stage2": sg.cpu(2)}


def _net():
    return sg.sym.load_json(json.dumps(MXNET_JSON))


def _bind(net, group2ctx=None):
    ex = net.simple_bind(sg.cpu(0), type_dict={k: "float64" for k in SHAPES},
                         group2ctx=group2ctx, **SHAPES)
    rng = np.random.default_rng(0)
    for k, v in ex.arg_dict.items():
        v[:] = (rng.integers(0, 5, v.shape) if k == "softmax_label"
                else rng.standard_normal(v.shape))
    for k, v in ex.aux_dict.items():
        v[:] = rng.uniform(0.5, 1.5, v.shape)
    return ex


def test_mxnet_file_keeps_ctx_group():
    net = _net()
    attrs = net.attr_dict()
    assert attrs["conv1"]["__ctx_group__"] == "stage1"
    assert attrs["fc_weight"]["__ctx_group__"] == "stage2"
    again = json.loads(net.tojson())
    assert {n["name"]: n.get("attrs", {}).get("__ctx_group__") for n in again["nodes"]} == \
        {n["name"]: n.get("attrs", {}).get("__ctx_group__") for n in MXNET_JSON["nodes"]}


def test_place_inserts_one_copy_per_crossing_and_places_backward_with_forward():
    g = _net().graph()
    split = TrainingSplit(g, [n for n in g.list_arguments() if n not in SHAPES])
    pl = place(split.full, {"stage1": "d1", "stage2": "d2"}, "d0", split.origin)
    dev = {n.name: pl.device_of(n) for n in pl.graph.nodes}
    copies = [n for n in pl.graph.nodes if n.op is not None and n.op.name == COPY_OP]
    # forward relu1 -> fc, and the backward fc -> relu1: nothing else crosses
    assert sorted(n.name for n in copies) == sorted(pl.copies) and len(copies) == 2
    assert {dev[c.name] for c in copies} == {"d1", "d2"}
    assert dev["data"] == dev["conv1_backward"] == dev["relu1_backward"] == "d1"
    assert dev["softmax_label"] == dev["fc_backward"] == "d2"
    for n in pl.graph.nodes:  # every edge joins two nodes on one device, but at a copy
        for e in n.inputs:
            if n.op.name != COPY_OP:
                assert dev[e.node.name] == dev[n.name], (e.node.name, n.name)
    # the input graph is unchanged (passes are pure)
    assert not any(n.op is not None and n.op.name == COPY_OP for n in split.full.nodes)


def test_with_groups_and_contiguous_groups():
    g = _net().graph()
    grp = contiguous_groups(g, [2])
    ops = [n.name for n in g.nodes if n.op is not None]
    assert [grp[n] for n in ops] == ["stage1", "stage1", "stage2", "stage2", "stage2"]
    assert grp["data"] == "stage1" and grp["softmax_label"] == "stage2"
    g2 = with_groups(g, grp)
    assert {n.name: n.attrs.get("__ctx_group__") for n in g2.nodes} == grp
    with pytest.raises(PlacementError, match="not ascending"):
        contiguous_groups(g, [4, 2])


@pytest.mark.parametrize("bind", ["simple_bind", "bind"])
def test_bind_group2ctx_equals_one_device(bind):
    net = _net()
    one = _bind(net)
    if bind == "simple_bind":
        two = _bind(net, G2C)
    else:
        two = net.bind(sg.cpu(0), args={k: v.asnumpy() for k, v in one.arg_dict.items()},
                       aux_states={k: v.asnumpy() for k, v in one.aux_dict.items()},
                       group2ctx={"stage1": "cpu:1", "stage2": "cpu(2)"})
    # arrays live on their group's device; data and label follow their readers
    want = {"data": 1, "conv1_weight": 1, "bn1_gamma": 1, "fc_weight": 2, "fc_bias": 2,
            "softmax_label": 2}
    for k, d in want.items():
        assert two.arg_dict[k].context == sg.cpu(d), k
    for k in ("bn1_moving_mean", "bn1_moving_var"):
        assert two.aux_dict[k].context == sg.cpu(1)
    for step in range(2):  # twice: the moving statistics move on
        o1 = one.forward(is_train=True)[0].asnumpy()
        o2 = two.forward(is_train=True)
        assert o2[0].context == sg.cpu(2)
        np.testing.assert_allclose(o2[0].asnumpy(), o1, rtol=1e-12, atol=1e-14)
        one.backward()
        two.backward()
        for k, g1 in one.grad_dict.items():
            g2 = two.grad_dict[k]
            assert g2.dtype == np.float64
            np.testing.assert_allclose(g2.asnumpy(), g1.asnumpy(), rtol=1e-12, atol=1e-14,
                                       err_msg=k)
            if k in want:
                assert g2.context == sg.cpu(want[k]), k
        for k, a1 in one.aux_dict.items():
            np.testing.assert_allclose(two.aux_dict[k].asnumpy(), a1.asnumpy(), rtol=1e-12)
            assert two.aux_dict[k].context == sg.cpu(1)
    # the training programs: one per device segment, copies between
    fwd, bwd = two._programs["train"][:2]
    assert [s[:2] for s in fwd.steps] == [("seg", 1), ("copy", 2), ("seg", 2)]
    assert fwd.num_programs == 2 and bwd.num_programs >= 2
    np.testing.assert_allclose(two.forward()[0].asnumpy(), one.forward()[0].asnumpy(),
                               rtol=1e-12)


def test_bad_group2ctx():
    net = _net()
    with pytest.raises(PlacementError, match="group 'stage3', which no node"):
        net.simple_bind(sg.cpu(0), group2ctx={**G2C, "stage3": sg.cpu(3)}, **SHAPES)
    with pytest.raises(PlacementError, match="ctx_group 'stage2', which group2ctx does not map"):
        net.simple_bind(sg.cpu(0), group2ctx={"stage1": sg.cpu(1)}, **SHAPES)
    with pytest.raises(ContextError, match=r"group2ctx\['stage2'\]: cpu\(99\) does not exist"):
        net.simple_bind(sg.cpu(0), group2ctx={"stage1": sg.cpu(1), "stage2": sg.cpu(99)},
                        **SHAPES)
    with pytest.raises(PlacementError, match="is not a device"):
        net.simple_bind(sg.cpu(0), group2ctx={"stage1": "tpu:1", "stage2": "cpu:2"}, **SHAPES)
    for err in (PlacementError, ContextError):
        assert issubclass(err, SymgraphError)


# -- the plan per device ---------------------------------------------------------------
@pytest.mark.parametrize("fuse", [False, True])
def test_per_device_plan_sums_to_the_whole_plan_plus_the_copies(fuse):
    net = _net()
    whole = sg.plan(net, SHAPES, train=True, fuse=fuse)
    p = sg.plan(net, SHAPES, train=True, fuse=fuse, group2ctx={"stage1": "cpu:1",
                                                               "stage2": sg.cpu(2)})
    devs = p.devices
    assert [d.device for d in devs.plans] == ["cpu(1)", "cpu(2)"]
    assert [d.groups for d in devs.plans] == [["stage1"], ["stage2"]]
    for k in ("arguments", "gradients", "aux"):
        assert sum(d.buckets[k] for d in devs.plans) == whole.buckets[k] == p.buckets[k]
    # every planned tensor lives on one device; the copies are the only new ones
    copies = sum(d.copies["in_bytes"] for d in devs.plans)
    assert copies == sum(d.copies["out_bytes"] for d in devs.plans) > 0
    assert sum(d.copies["in_count"] for d in devs.plans) == 2  # forward and its gradient
    naive = sum(d.internal["naive"] for d in devs.plans)
    assert naive == devs.whole.internal["naive"]
    if not fuse:  # fusion can differ at a cut; without it the identity is exact
        assert naive == whole.internal["naive"] + copies
    for d in devs.plans:
        assert d.verified
        assert d.internal["lower_bound"] <= d.internal["arena"] <= d.internal["both"] \
            <= d.internal["naive"]
        assert d.total == sum(d.buckets.values()) + d.internal["arena"]
    # a device holds less than the whole (the copies notwithstanding)
    assert max(d.total for d in devs.plans) < whole.total
    doc = p.to_json()
    assert [x["device"] for x in doc["devices"]] == ["cpu(1)", "cpu(2)"]
    for x in doc["devices"]:
        assert set(x["bytes"]) == set(doc["bytes"])
        assert set(x["bytes"]["internal"]) == set(doc["bytes"]["internal"])
        assert x["verified"] is True


def test_per_device_plan_checks_each_device_statically():
    from symgraph.errors import PlanError
    from symgraph.memory.verify import StaticCheck
    p = sg.plan(_net(), SHAPES, train=True, group2ctx=G2C)
    d = p.devices.plans[0]
    a = d.assignments["arena"]
    bad = list(a.offset)
    big = max(range(len(bad)), key=d.live.nbytes.__getitem__)
    other = next(t for t in range(len(bad)) if t != big and
                 d.live.first[t] <= d.live.last[big] and d.live.first[big] <= d.live.last[t])
    bad[other] = bad[big]  # two live tensors at one offset
    with pytest.raises(PlanError, match="verify"):
        StaticCheck(d.live).check_offsets(bad)
    from symgraph.memory.verify import check_arena
    with pytest.raises(PlanError, match="arena run"):
        check_arena(d.live, bad, a.total, True)


def test_per_device_plan_runs_in_the_arena_interpreter():
    p = sg.plan(_net(), SHAPES, train=True, group2ctx=G2C, execute=True)
    from symgraph.memory.planner import PLACED
    for d in p.devices.plans:
        assert d.arena_checked == list(PLACED)
    assert "arena interpreter" in p.devices.text("arena")


def _cli(capsys, *argv):
    from symgraph.cli import main
    code = main(["plan", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def net_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("place") / "two_stage.json"
    path.write_text(json.dumps(MXNET_JSON))
    return str(path)


def test_cli_group2ctx(capsys, net_file):
    code, out, err = _cli(capsys, net_file, "--shape", "data=4,2,5,5", "--train", "--no-xla",
                          "--group2ctx", "stage1=cpu:1,stage2=cpu:2", "--json")
    assert code == 0 and err == ""
    doc = json.loads(out)
    p = sg.plan(_net(), SHAPES, train=True, group2ctx=G2C)
    assert doc["devices"] == p.to_json()["devices"]
    code, out, err = _cli(capsys, net_file, "--shape", "data=4,2,5,5", "--train", "--no-xla",
                          "--group2ctx", "stage1=cpu:1,stage2=cpu:2")
    assert code == 0 and "per device" in out and "cpu(2)" in out


def test_cli_split_writes_groups_that_bind(capsys, net_file, tmp_path):
    out_file = str(tmp_path / "split.json")
    code, out, err = _cli(capsys, net_file, "--shape", "data=4,2,5,5", "--train", "--split",
                          "2", "-o", out_file, "--json")
    assert code == 0 and err == ""
    doc = json.loads(out)
    assert doc["split"]["devices"] == 2 and len(doc["devices"]) == 2
    assert doc["split"]["peak"] == max(d["total"] for d in doc["devices"])
    assert doc["split"]["one_device"] == sg.plan(_net(), SHAPES, train=True).total
    net = sg.sym.load(out_file)
    groups = {n.attrs.get("__ctx_group__") for n in net.graph().nodes}
    assert groups == {"stage1", "stage2"}
    g2c = {k: sg.cpu(int(v[-2])) for k, v in doc["split"]["group2ctx"].items()}
    one, two = _bind(net), _bind(net, g2c)
    np.testing.assert_allclose(two.forward(is_train=True)[0].asnumpy(),
                               one.forward(is_train=True)[0].asnumpy(), rtol=1e-12)


@pytest.mark.parametrize("argv,message", [
    (["--group2ctx", "stage1=cpu:1,stage9=cpu:2"], "group 'stage9', which no node"),
    (["--group2ctx", "stage1=cpu:1"], "does not map"),
    (["--group2ctx", "stage1=npu:1,stage2=cpu:2"], "is not a device"),
    (["--group2ctx", "stage1"], "is not GROUP=DEVICE"),
    (["-o", "x.json"], "add --split"),
    (["--split", "0"], ">= 1"),
    (["--split", "2", "--group2ctx", "stage1=cpu:1"], "drop --group2ctx"),
])
def test_cli_bad_devices_options(capsys, net_file, argv, message):
    code, out, err = _cli(capsys, net_file, "--shape", "data=4,2,5,5", "--train", "--no-xla",
                          *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err


# -- Module(group2ctxs=...) ---------------------------------------------------------------
def _module(group2ctxs=None, context=None, **kw):
    mod = sg.mod.Module(_net(), context=context or sg.cpu(0), group2ctxs=group2ctxs, **kw)
    mod.bind([sg.io.DataDesc("data", SHAPES["data"], "float64")],
             [sg.io.DataDesc("softmax_label", SHAPES["softmax_label"], "float64")])
    mod.init_params(sg.init.Xavier(), seed=3)
    mod.init_optimizer(optimizer="sgd", optimizer_params={"learning_rate": 0.1,
                                                          "momentum": 0.9, "wd": 1e-3})
    return mod


def _batches(n=3):
    rng = np.random.default_rng(5)
    return [sg.io.DataBatch([rng.standard_normal(SHAPES["data"])],
                            [rng.integers(0, 5, SHAPES["softmax_label"]).astype(np.float64)])
            for _ in range(n)]


def test_module_group2ctxs_equals_one_device():
    one, two = _module(), _module({"stage1": sg.cpu(1), "stage2": sg.cpu(2)})
    for b in _batches():  # the fused step (what fit runs) ...
        one.train_step(b)
        two.train_step(b)
        np.testing.assert_allclose(two.get_outputs()[0].asnumpy(),
                                   one.get_outputs()[0].asnumpy(), rtol=1e-10)
    for b in _batches(2):  # ... and forward / backward / update apart
        for m in (one, two):
            m.forward(b, is_train=True)
            m.backward()
        for k, g in one.get_grads().items():
            np.testing.assert_allclose(two.get_grads()[k].asnumpy(), g.asnumpy(), rtol=1e-10,
                                       atol=1e-13, err_msg=k)
        one.update()
        two.update()
    (a1, x1), (a2, x2) = one.get_params(), two.get_params()
    for k in a1:
        assert a2[k].dtype == np.float64
        np.testing.assert_allclose(a2[k].asnumpy(), a1[k].asnumpy(), rtol=1e-10, atol=1e-13,
                                   err_msg=k)
    for k in x1:  # moving statistics
        np.testing.assert_allclose(x2[k].asnumpy(), x1[k].asnumpy(), rtol=1e-10, err_msg=k)
    # parameters, optimizer states and aux states on their group's device
    dev = {"conv1_weight": 1, "bn1_gamma": 1, "fc_weight": 2, "fc_bias": 2}
    for k, d in dev.items():
        assert two._params[k].devices() == {sg.cpu(d).jax_device}
        for s in two._opt_states[k]:
            assert s.devices() == {sg.cpu(d).jax_device}
    assert two._aux["bn1_moving_var"].devices() == {sg.cpu(1).jax_device}
    with pytest.raises(TrainError, match="one XLA program per device segment"):
        two.compiled_memory()
    with pytest.raises(TrainError, match="not built for model parallel"):
        two._programs.set_recompute(["relu1"])
    b = _batches(1)[0]
    one.forward(b, is_train=False)
    two.forward(b, is_train=False)
    np.testing.assert_allclose(two.get_outputs()[0].asnumpy(), one.get_outputs()[0].asnumpy(),
                               rtol=1e-10)


def test_module_group2ctxs_bad_input():
    net = sg.sym.SoftmaxOutput(sg.sym.FullyConnected(sg.sym.Variable("data"), num_hidden=3,
                                                     name="fc"), name="softmax")
    with pytest.raises(PlacementError, match="which no node .* attributes: none"):
        sg.mod.Module(net, group2ctxs={"dev1": [sg.cpu(1)]})
    with pytest.raises(PlacementError, match="group 'stage7', which no node"):
        sg.mod.Module(_net(), group2ctxs={"stage1": sg.cpu(1), "stage7": sg.cpu(2)})
    with pytest.raises(ContextError, match="cpu\\(42\\) does not exist"):
        sg.mod.Module(_net(), group2ctxs={"stage1": sg.cpu(1), "stage2": sg.cpu(42)})
    with pytest.raises(ContextError, match="one mapping per context"):
        sg.mod.Module(_net(), context=[sg.cpu(0), sg.cpu(3)], group2ctxs=G2C)
    with pytest.raises(ContextError, match="plays the same part in two replicas"):
        sg.mod.Module(_net(), context=[sg.cpu(0), sg.cpu(3)],
                      group2ctxs=[G2C, {"stage1": sg.cpu(1), "stage2": sg.cpu(5)}])
    with pytest.raises(ContextError, match="same layout"):
        sg.mod.Module(_net(), context=[sg.cpu(0), sg.cpu(3)],
                      group2ctxs=[G2C, {"stage1": sg.cpu(4), "stage2": sg.cpu(4)}])


def test_worker_groups_equal_data_parallel():
    """Mariana's worker groups: two replicas, each split over two devices,
    data parallel across them: the data-parallel Module on two devices
    (same ghost-batch BatchNorm, same keys), in float64."""
    groups = [{"stage1": sg.cpu(1), "stage2": sg.cpu(2)},
              {"stage1": sg.cpu(4), "stage2": sg.cpu(5)}]
    dp = _module(context=[sg.cpu(0), sg.cpu(3)])
    wg = _module(groups, context=[sg.cpu(0), sg.cpu(3)])
    for b in _batches():
        dp.train_step(b)
        wg.train_step(b)
        np.testing.assert_allclose(wg.get_outputs()[0].asnumpy(), dp.get_outputs()[0].asnumpy(),
                                   rtol=1e-10)
    b = _batches(1)[0]
    for m in (dp, wg):
        m.forward(b, is_train=True)
        m.backward()
    for k, g in dp.get_grads().items():
        np.testing.assert_allclose(wg.get_grads()[k].asnumpy(), g.asnumpy(), rtol=1e-10,
                                   atol=1e-13, err_msg=k)
    dp.update()
    wg.update()
    (a1, x1), (a2, x2) = dp.get_params(), wg.get_params()
    for k in {**a1, **x1}:
        np.testing.assert_allclose({**a2, **x2}[k].asnumpy(), {**a1, **x1}[k].asnumpy(),
                                   rtol=1e-10, atol=1e-13, err_msg=k)
    cpu = [sg.cpu(i).jax_device for i in range(6)]
    assert wg._params["conv1_weight"].devices() == {cpu[1], cpu[4]}
    assert wg._params["fc_weight"].devices() == {cpu[2], cpu[5]}
    assert wg._aux["bn1_moving_mean"].devices() == {cpu[1], cpu[4]}


def test_example_trains_placed_like_one_device(capsys):
    from helpers import load_script
    ex = load_script("examples", "model_parallel.py")
    assert ex.main(["--steps", "2", "--batch-size", "8"]) == 0
    out = capsys.readouterr().out
    diff = float(out.split("two devices vs one: ")[1].split()[0])
    assert diff < 1e-5  # float32 rounding: the stages' programs are not the one program
    assert "conv0_weight       on [1]" in out and "fc2_weight         on [2]" in out


def test_viz_draws_the_copies(tmp_path, net_file, capsys):
    pytest.importorskip("graphviz")
    dot = sg.viz.plot(_net(), SHAPES, train=True, group2ctx=G2C).source
    # the forward copy into stage2 and its gradient's copy back into stage1
    assert dot.count("_CrossDeviceCopy") == 2
    assert "relu1_copy_to_dev" in dot and "fc_backward_copy_to_dev" in dot
    plan_dot = sg.viz.plot(_net(), SHAPES, plan=True, train=True, group2ctx=G2C).source
    assert plan_dot.count("_CrossDeviceCopy") == 2
    from symgraph.cli import main
    out = str(tmp_path / "placed.dot")
    assert main(["viz", net_file, "--train", "--group2ctx", "stage1=cpu:1,stage2=cpu:2",
                 "-o", out]) == 0
    assert open(out).read().count("_CrossDeviceCopy") == 2


def test_bench_train_stage_rows():
    from symgraph.bench import train
    row = train.measure_stages("vgg", 8, 2, image=8, steps=1, rounds=1)
    assert (row["net"], row["stages"], row["batch"]) == ("vgg", 2, 8)
    assert row["group2ctx"] == {"stage1": "cpu(1)", "stage2": "cpu(2)"}
    assert row["samples_per_s"] > 0 and row["one_device_samples_per_s"] > 0
    assert row["max_rel_param_diff"] < 1e-4  # the same training, placed
    assert 0 < row["peak_vs_one_device"] < 1
    md = "\n".join(train.stage_markdown([row]))
    assert "## Model parallel" in md and "| vgg | 2 | 8 |" in md
    assert train.parse_args(["--quick"]).stages == 0 and train.parse_args([]).stages == 2


def test_residual_and_shared_weight_across_devices():
    """A skip connection crossing devices, a weight read on two devices, a
    node with no group between them: the copies of variables and of a
    tensor read twice, gradients summed back across devices."""
    S = sg.sym
    x = S.Variable("data")
    w = S.Variable("shared_weight")
    with sg.AttrScope(ctx_group="a"):
        h = S.FullyConnected(x, weight=w, num_hidden=6, no_bias=True, name="fc_a")
        h = S.Activation(h, act_type="tanh", name="act_a")
    mid = S.Activation(h, act_type="relu", name="mid")  # no group: follows its input
    with sg.AttrScope(ctx_group="b"):
        y = S.FullyConnected(mid, weight=w, num_hidden=6, no_bias=True, name="fc_b")
        y = S.elemwise_add(y, h, name="skip")  # h is read on both devices
        y = S.LinearRegressionOutput(S.sum(y, axis=1, keepdims=True, name="s"), name="out")
    shapes = {"data": (3, 6), "out_label": (3, 1)}
    rng = np.random.default_rng(2)
    vals = {"data": rng.standard_normal((3, 6)), "shared_weight": rng.standard_normal((6, 6)),
            "out_label": rng.standard_normal((3, 1))}
    exs = []
    for g2c in (None, {"a": sg.cpu(3), "b": sg.cpu(4)}):
        ex = y.simple_bind(sg.cpu(0), type_dict={k: "float64" for k in shapes},
                           group2ctx=g2c, **shapes)
        for k, v in vals.items():
            ex.arg_dict[k][:] = v
        ex.forward(is_train=True)
        ex.backward()
        exs.append(ex)
    one, two = exs
    np.testing.assert_allclose(two.outputs[0].asnumpy(), one.outputs[0].asnumpy(), rtol=1e-13)
    for k in ("data", "shared_weight"):
        np.testing.assert_allclose(two.grad_dict[k].asnumpy(), one.grad_dict[k].asnumpy(),
                                   rtol=1e-12, err_msg=k)
    pl = two._programs["train"][0].placement
    dev = {n.name: pl.device_of(n) for n in pl.graph.nodes}
    # a variable without a group lives with its last reader (fc_b), copied to the other
    assert dev["mid"] == sg.cpu(3) and dev["shared_weight"] == sg.cpu(4)
    copied = {n.inputs[0].node.name for n in pl.graph.nodes
              if n.op is not None and n.op.name == COPY_OP}
    assert {"shared_weight", "mid", "act_a"} <= copied


@pytest.mark.parametrize("replicas", [1, 2])
def test_pipelined_microbatches_equal_data_parallel(replicas):
    """GPipe: every microbatch's forward through the stages, then every
    backward; the data-parallel Module over replicas x microbatches devices
    (the same slices of the batch, ghost-batch BatchNorm, keys), float64."""
    from symgraph.parallel.model_parallel import Pipelined
    maps = [Pipelined({"stage1": sg.cpu(1), "stage2": sg.cpu(2)}, microbatches=2),
            Pipelined({"stage1": sg.cpu(4), "stage2": sg.cpu(5)}, microbatches=2)][:replicas]
    ctx = [sg.cpu(0), sg.cpu(3)][:replicas]
    dp = _module(context=[sg.cpu(6), sg.cpu(7), sg.cpu(0), sg.cpu(3)][:2 * replicas])
    gp = _module(maps, context=ctx)
    for b in _batches(2):
        dp.train_step(b)
        gp.train_step(b)
        np.testing.assert_allclose(gp.get_outputs()[0].asnumpy(), dp.get_outputs()[0].asnumpy(),
                                   rtol=1e-10)
    b = _batches(1)[0]
    for m in (dp, gp):
        m.forward(b, is_train=True)
        m.backward()
        m.update()
    (a1, x1), (a2, x2) = dp.get_params(), gp.get_params()
    for k in {**a1, **x1}:
        np.testing.assert_allclose({**a2, **x2}[k].asnumpy(), {**a1, **x1}[k].asnumpy(),
                                   rtol=1e-10, atol=1e-13, err_msg=k)
    for m in (dp, gp):
        m.forward(b, is_train=False)
    np.testing.assert_allclose(gp.get_outputs()[0].asnumpy(), dp.get_outputs()[0].asnumpy(),
                               rtol=1e-10)
    with pytest.raises(ContextError, match="positive integer"):
        Pipelined(G2C, microbatches=0)


def test_group2ctx_text_and_devices_refuse_hostile_input():
    from symgraph.parallel.placement import parse_context, parse_group2ctx_arg
    assert parse_group2ctx_arg("stage1=cpu:1, stage2 = cpu(2)") == G2C
    assert parse_context("gpu3") == sg.gpu(3) and parse_context(["cpu:1"]) == sg.cpu(1)
    # str.isdigit() takes a superscript two or an Arabic-Indic one; int() then fails
    for dev in ("cpu:\u00b2", "cpu:\u0661", "cpu:-1", "cpu:+1", "cpu:1.0", "tpu:0", "cpu",
                "", None, 1, ["cpu:1", "cpu:2"]):
        with pytest.raises(PlacementError, match="is not a device"):
            parse_context(dev)
    with pytest.raises(PlacementError, match="'cpu:\u00b2' is not a device"):
        parse_group2ctx_arg("stage1=cpu:\u00b2")
    # a group given twice is refused, never the last one silently kept
    with pytest.raises(PlacementError, match="group 'stage1' is given twice"):
        parse_group2ctx_arg("stage1=cpu:1,stage2=cpu:2,stage1=cpu:3")
    for text in ("", " , ", "stage1", "=cpu:1", "stage1=cpu:1,,stage2"):
        with pytest.raises(PlacementError, match="--group2ctx"):
            parse_group2ctx_arg(text)
