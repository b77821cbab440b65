"""MXNet symbol JSON: files MXNet wrote load unchanged and are written back
as MXNet writes them; symgraph's own symbols round-trip to identical graphs.

tests/data holds files written by MXNet 1.9.1 and hand-written pre-0.9 files
together with MXNet 1.9.1's own upgrade of them (make_mxnet_files.py there
says how they were made)."""
import json
import os

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import symgraph as sg
from symgraph import serialize
from symgraph.symbol import NameManager

DATA = os.path.join(os.path.dirname(__file__), "data")


def path(name):
    return os.path.join(DATA, name)


def read(name):
    with open(path(name), encoding="utf-8") as f:
        return f.read()


def without_versions(doc):
    """Drops what a reader ignores: node_row_ptr and entry versions."""
    doc = json.loads(json.dumps(doc))
    doc.pop("node_row_ptr", None)
    for n in doc["nodes"]:
        n["inputs"] = [e[:2] for e in n["inputs"]]
    doc["heads"] = [e[:2] for e in doc["heads"]]
    return doc


# infer_shape figures as MXNet 1.9.1 printed them for these files
MXNET_SHAPES = {
    "mlp": ({"data": (4, 6), "fc1_weight": (8, 6), "fc1_bias": (8,), "fc2_weight": (3, 8),
             "fc2_bias": (3,), "softmax_label": (4,)}, [(4, 3)], {}),
    "convnet": ({"data": (2, 3, 8, 8), "conv1_weight": (4, 3, 3, 3), "conv1_bias": (4,),
                 "bn1_gamma": (4,), "bn1_beta": (4,), "fc1_weight": (5, 64), "fc1_bias": (5,),
                 "softmax_label": (2,)}, [(2, 5)],
                {"bn1_moving_mean": (4,), "bn1_moving_var": (4,)}),
}
DATA_SHAPE = {"mlp": (4, 6), "convnet": (2, 3, 8, 8)}
FILES = [f"{stem}{kind}-symbol.json" for stem in ("mlp", "convnet")
         for kind in ("", "-legacy", "-legacy-upgraded")]


# --------------------------------------------------------------------------
# files MXNet wrote
# --------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["mlp-symbol.json", "mlp-legacy-upgraded-symbol.json"])
def test_mxnet_file_is_written_back_byte_for_byte(name):
    assert serialize.to_json(sg.sym.load(path(name))) == read(name)


def test_mxnet_convnet_is_written_back_with_the_same_nodes_and_versions():
    text = read("convnet-symbol.json")
    ours = serialize.to_dict(sg.sym.load(path("convnet-symbol.json")))
    theirs = json.loads(text)
    assert ours["nodes"] == theirs["nodes"]  # aux inputs carry version 1, as MXNet's
    assert ours["arg_nodes"] == theirs["arg_nodes"]
    assert ours["heads"] == theirs["heads"] and ours["attrs"] == theirs["attrs"]
    # MXNet's oneDNN build gives Pooling a workspace output (2 outputs): the
    # rows differ from there on, which is why readers never use node_row_ptr
    assert theirs["node_row_ptr"][:10] == ours["node_row_ptr"][:10]


@pytest.mark.parametrize("name", FILES)
def test_file_infers_the_shapes_mxnet_inferred(name):
    stem = name.split("-")[0]
    net = sg.sym.load(path(name))
    args, outs, aux = net.infer_shape(data=DATA_SHAPE[stem])
    want_args, want_outs, want_aux = MXNET_SHAPES[stem]
    assert dict(zip(net.list_arguments(), args)) == want_args
    assert outs == want_outs
    assert dict(zip(net.list_auxiliary_states(), aux)) == want_aux


@pytest.mark.parametrize("stem", ["mlp", "convnet"])
def test_legacy_file_loads_as_mxnet_upgrades_it(stem):
    ours = serialize.to_dict(sg.sym.load(path(f"{stem}-legacy-symbol.json")))
    theirs = json.loads(read(f"{stem}-legacy-upgraded-symbol.json"))
    for n in theirs["nodes"]:
        # MXNet's BatchNorm also sets an initializer hint on the aux states
        # it adds; that is op-specific and symgraph leaves it out
        if n["name"].endswith(("moving_mean", "moving_var")):
            del n["attrs"]["__init__"]
    assert without_versions(ours) == without_versions(theirs)


def test_legacy_user_attributes_become_hints_where_mxnet_puts_them():
    net = sg.sym.load(path("mlp-legacy-symbol.json"))
    nodes = {n.name: n for n in net.graph().nodes}
    assert nodes["fc1_weight"].attrs == {"__lr_mult__": "0.5"}       # attr lr_mult
    assert nodes["fc1_bias"].attrs == {"__wd_mult__": "0"}           # fc1's bias_wd_mult
    assert nodes["fc1"].attrs["__ctx_group__"] == "stage1"
    assert "ctx_group" not in nodes["fc1"].attrs and "bias_wd_mult" not in nodes["fc1"].attrs
    assert net.get_internals()["fc1_weight"].attr("lr_mult") == "0.5"


def test_pre_0_9_file_gets_its_aux_states_added():
    net = sg.sym.load(path("convnet-legacy-symbol.json"))
    assert net.list_auxiliary_states() == ["bn1_moving_mean", "bn1_moving_var"]
    bn = next(n for n in net.graph().nodes if n.name == "bn1")
    assert [e.node.name for e in bn.inputs][3:] == ["bn1_moving_mean", "bn1_moving_var"]


def _run(net, params, train):
    ex = net.simple_bind(sg.cpu(), type_dict={"data": "float64"}, data=(2, 3, 8, 8))
    ex.copy_params_from({k: v for k, v in params.items() if k in ex.arg_dict},
                        {k: v for k, v in params.items() if k in ex.aux_dict})
    out = ex.forward(is_train=train)[0].asnumpy()
    if train:
        ex.backward()
    return ex, out


def test_legacy_and_modern_convnet_files_run_the_same_net():
    """The legacy file (param/attr, no aux inputs) loads and runs, and
    computes what the MXNet 1.9.1 file of the same net computes."""
    modern = sg.sym.load(path("convnet-symbol.json"))
    legacy = sg.sym.load(path("convnet-legacy-symbol.json"))
    rng = np.random.default_rng(0)
    args, _, aux = modern.infer_shape(data=(2, 3, 8, 8))
    params = {n: rng.normal(size=s) for n, s in zip(modern.list_arguments(), args)}
    params["softmax_label"] = np.array([1.0, 4.0])
    params.update({n: np.abs(rng.normal(size=s)) + 0.5
                   for n, s in zip(modern.list_auxiliary_states(), aux)})
    for train in (False, True):
        ex_m, out_m = _run(modern, params, train)
        ex_l, out_l = _run(legacy, params, train)
        np.testing.assert_allclose(out_m.sum(axis=1), 1.0, rtol=1e-12)  # softmax rows
        np.testing.assert_allclose(out_l, out_m, rtol=1e-12)
    for k in ex_m.grad_dict:
        np.testing.assert_allclose(ex_l.grad_dict[k].asnumpy(), ex_m.grad_dict[k].asnumpy(),
                                   rtol=1e-10, err_msg=k)
    assert np.abs(ex_m.grad_dict["conv1_weight"].asnumpy()).sum() > 0


# --------------------------------------------------------------------------
# what symgraph writes
# --------------------------------------------------------------------------
def _bn_net():
    with NameManager():
        data = sg.sym.Variable("data", shape=(2, 3, 4, 4), lr_mult=0.5)
        conv = sg.sym.Convolution(data, kernel=(3, 3), num_filter=4, pad=(1, 1), name="conv1")
        bn = sg.sym.BatchNorm(conv, fix_gamma=False, name="bn1")
        parts = sg.sym.SliceChannel(bn, num_outputs=2, axis=1, name="split")
        act = sg.sym.Activation(parts[1], act_type="relu")
        return sg.sym.Group([act * 2.0 + parts[0], parts[1]])


def test_written_schema_is_mxnets():
    net = _bn_net()
    doc = json.loads(net.tojson())
    assert list(doc) == ["nodes", "arg_nodes", "node_row_ptr", "heads", "attrs"]
    assert doc["attrs"] == {"mxnet_version": ["int", 10901]}
    g = net.graph()
    assert [n["name"] for n in doc["nodes"]] == [n.name for n in g.nodes]
    variables = [i for i, n in enumerate(doc["nodes"]) if n["op"] == "null"]
    assert doc["arg_nodes"] == variables  # aux states included, as MXNet does
    names = [doc["nodes"][i]["name"] for i in variables]
    assert "bn1_moving_mean" in names and "bn1_moving_var" in names
    rows = [0]
    for n in g.nodes:
        rows.append(rows[-1] + n.num_outputs)
    assert doc["node_row_ptr"] == rows
    bn_id = next(i for i, n in enumerate(doc["nodes"]) if n["name"] == "bn1")
    assert doc["node_row_ptr"][bn_id + 1] - doc["node_row_ptr"][bn_id] == 3  # out, mean, var
    split_id = next(i for i, n in enumerate(doc["nodes"]) if n["name"] == "split")
    assert doc["heads"][1] == [split_id, 1, 0]
    for n in doc["nodes"]:
        assert list(n) in (["op", "name", "inputs"], ["op", "name", "attrs", "inputs"])
        assert all(isinstance(v, str) for v in n.get("attrs", {}).values())
        assert all(len(e) == 3 for e in n["inputs"])
    assert doc["nodes"][0]["attrs"] == {"__lr_mult__": "0.5", "__shape__": "(2, 3, 4, 4)"}
    conv = next(n for n in doc["nodes"] if n["name"] == "conv1")
    assert conv["attrs"] == {"kernel": "(3, 3)", "num_filter": "4", "pad": "(1, 1)"}
    assert [e[2] for e in doc["nodes"][bn_id]["inputs"]] == [0, 0, 0, 1, 1]


def test_round_trip_gives_an_identical_graph(tmp_path):
    net = _bn_net()
    text = net.tojson()
    again = sg.sym.load_json(text)
    assert again.graph().text() == net.graph().text()
    assert again.tojson() == text
    assert again.list_outputs() == net.list_outputs()
    assert again.list_auxiliary_states() == net.list_auxiliary_states()
    f = tmp_path / "net-symbol.json"
    net.save(str(f))
    assert os.listdir(tmp_path) == ["net-symbol.json"]  # no temporary left behind
    assert f.read_text() == text
    assert sg.sym.load(str(f)).tojson() == text
    assert again.infer_shape()[1] == net.infer_shape()[1]  # the __shape__ hint survived


def test_nodes_listed_out_of_order_still_load():
    doc = json.loads(read("mlp-symbol.json"))
    order = [0, 9, 1, 2, 3, 4, 5, 6, 7, 8]  # the head first: a forward reference
    new_id = {old: new for new, old in enumerate(order)}
    nodes = [doc["nodes"][i] for i in order]
    for n in nodes:
        n["inputs"] = [[new_id[e[0]], e[1], e[2]] for e in n["inputs"]]
    doc.update(nodes=nodes, heads=[[new_id[9], 0, 0]],
               arg_nodes=sorted(new_id[i] for i in doc["arg_nodes"]))
    net = sg.sym.load_json(json.dumps(doc))
    assert net.tojson() == read("mlp-symbol.json")


def test_hand_written_values_and_unhidden_keys_are_accepted():
    doc = {"nodes": [{"op": "null", "name": "x", "inputs": [], "attrs": {"lr_mult": "2"}},
                     {"op": "FullyConnected", "name": "fc", "inputs": [[0, 0]],
                      "attrs": {"num_hidden": 3, "no_bias": True, "ctx_group": "g"},
                      "control_deps": []}],
           "arg_nodes": [0], "heads": [[1, 0]]}
    net = sg.sym.load_json(json.dumps(doc))
    fc = net.graph().nodes[-1]
    assert fc.params.num_hidden == 3 and fc.params.no_bias is True
    assert fc.attrs == {"num_hidden": "3", "no_bias": "True", "__ctx_group__": "g"}
    assert net.graph().nodes[0].attrs == {"__lr_mult__": "2"}
    assert net.infer_shape(x=(2, 5))[0] == [(2, 5), (3, 5)]


# --------------------------------------------------------------------------
# property: random graphs of registered ops round-trip
# --------------------------------------------------------------------------
UNARY = [("relu", {}), ("tanh", {}), ("_plus_scalar", {"scalar": 1.5}),
         ("Activation", {"act_type": "sigmoid"}), ("clip", {"a_min": -1, "a_max": 0.5}),
         ("sum", {"axis": (1,), "keepdims": True})]
BINARY = ["elemwise_add", "elemwise_mul", "broadcast_sub"]


@st.composite
def random_graph(draw):
    with NameManager():
        pool = [sg.sym.Variable(f"v{i}") for i in range(draw(st.integers(1, 3)))]
        for _ in range(draw(st.integers(1, 8))):
            if draw(st.booleans()) and len(pool) > 1:
                a, b = draw(st.sampled_from(pool)), draw(st.sampled_from(pool))
                pool.append(getattr(sg.sym, draw(st.sampled_from(BINARY)))(a, b))
            else:
                op, attrs = draw(st.sampled_from(UNARY))
                pool.append(getattr(sg.sym, op)(draw(st.sampled_from(pool)), **attrs))
        k = draw(st.integers(1, min(3, len(pool))))
        return sg.sym.Group(pool[-k:])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_graph())
def test_random_graphs_round_trip(net):
    text = net.tojson()
    again = sg.sym.load_json(text)
    assert again.graph().text() == net.graph().text()
    assert again.tojson() == text
    shapes = {n: (2, 3) for n in net.list_arguments()}
    assert _infer(again, shapes) == _infer(net, shapes)


def _infer(net, shapes):
    """The inferred shapes, or the error (an elementwise op may meet a
    reduced (2, 1) input): both graphs must behave the same."""
    try:
        return net.infer_shape(**shapes)
    except sg.ShapeError as err:
        return str(err)
