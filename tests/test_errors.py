"""Bad input as a new user would try it: each mistake gives one SymgraphError
whose message names the node or input at fault and what was expected."""
import json
import os

import numpy as np
import pytest

import symgraph as sg
from symgraph import serialize
from symgraph.errors import (BindError, ContextError, GraphError, OpError, SerializationError,
                             ShapeError, SymgraphError)

S = sg.sym
DATA = os.path.join(os.path.dirname(__file__), "data")
with open(os.path.join(DATA, "mlp-symbol.json"), encoding="utf-8") as _f:
    MLP = _f.read()


def mlp_doc():
    """The MXNet-written MLP; nodes: 0 data, 1-2 fc1 params, 3 fc1, 4 relu1,
    5-6 fc2 params, 7 fc2, 8 softmax_label, 9 softmax."""
    return json.loads(MLP)


def loading(doc):
    return lambda: serialize.from_dict(doc, source="net-symbol.json")


def fails(fn, kind, *fragments):
    """``fn()`` raises ``kind`` (a SymgraphError) whose message holds every fragment."""
    with pytest.raises(kind) as info:
        fn()
    assert isinstance(info.value, SymgraphError)
    msg = str(info.value)
    for frag in fragments:
        assert frag in msg, f"{frag!r} not in {msg!r}"
    return msg


# --------------------------------------------------------------------------
# JSON files
# --------------------------------------------------------------------------
def test_malformed_json_gives_the_parsers_line_and_column():
    broken = MLP.replace('"inputs": [[0, 0, 0], [1, 0, 0], [2, 0, 0]]',
                         '"inputs": [[0, 0, 0], [1, 0, 0], [2, 0, 0]', 1)
    line = MLP[: MLP.index('"inputs": [[0, 0, 0], [1')].count("\n") + 1
    fails(lambda: S.load_json(broken), SerializationError, "not valid JSON",
          f"line {line + 1} column")


def test_malformed_file_names_the_file(tmp_path):
    f = tmp_path / "net-symbol.json"
    f.write_text('{"nodes": [}')
    fails(lambda: S.load(str(f)), SerializationError, str(f), "not valid JSON, line 1 column 12")
    fails(lambda: S.load(str(tmp_path / "missing.json")), SerializationError,
          "cannot read symbol file", "missing.json")
    f.write_text("")
    fails(lambda: S.load(str(f)), SerializationError, "empty")


def test_not_a_symbol_file():
    fails(lambda: S.load_json("[1, 2]"), SerializationError, "expected a JSON object",
          "nodes, arg_nodes and heads")
    doc = mlp_doc()
    del doc["heads"]
    fails(loading(doc), SerializationError, "net-symbol.json", "missing key 'heads'")
    doc = mlp_doc()
    del doc["nodes"][3]["inputs"]
    fails(loading(doc), SerializationError, "node 'fc1'", "missing key 'inputs'")
    doc = mlp_doc()
    doc["nodes"][3]["input"] = []
    fails(loading(doc), SerializationError, "node 'fc1'", "unknown key(s) input")


def test_unknown_op_lists_the_nearest_names():
    fails(lambda: S.load_json(MLP.replace('"op": "FullyConnected"', '"op": "FullyConected"', 1)),
          OpError, "node 'fc1'", "unknown op 'FullyConected'", "nearest known ops",
          "FullyConnected")
    fails(lambda: S.load_json(MLP.replace('"Activation"', '"activation"')), OpError,
          "node 'relu1'", "Activation")


def test_wrong_attribute_name_and_value_in_a_file_name_the_node():
    doc = mlp_doc()
    doc["nodes"][7]["attrs"] = {"num_hiden": "3"}
    fails(loading(doc), OpError, "node 'fc2' (FullyConnected)", "unknown attribute 'num_hiden'",
          "did you mean num_hidden")
    doc["nodes"][7]["attrs"] = {"num_hidden": "three"}
    fails(loading(doc), OpError, "node 'fc2' (FullyConnected)", "num_hidden='three'",
          "expected an integer")
    doc["nodes"][4]["attrs"] = {"act_type": "rellu"}
    doc["nodes"][7]["attrs"] = {"num_hidden": "3"}
    fails(loading(doc), OpError, "node 'relu1' (Activation)", "expected one of relu")
    doc = mlp_doc()
    del doc["nodes"][7]["attrs"]
    fails(loading(doc), OpError, "node 'fc2'", "missing required attribute 'num_hidden'")


def test_cycle_in_a_file():
    doc = mlp_doc()
    doc["nodes"][3]["inputs"][0] = [4, 0, 0]  # fc1 reads relu1, which reads fc1
    fails(loading(doc), GraphError, "cycle", "'fc1'", "'relu1'")
    doc = mlp_doc()
    doc["nodes"][4]["inputs"][0] = [4, 0, 0]  # reads itself
    fails(loading(doc), GraphError, "cycle", "'relu1'")


def test_dangling_input_and_heads_out_of_range():
    doc = mlp_doc()
    doc["nodes"][3]["inputs"][1] = [42, 0, 0]
    fails(loading(doc), SerializationError, "node 'fc1' (FullyConnected) input 1",
          "refers to node 42", "10 nodes", "dangling")
    doc = mlp_doc()
    doc["heads"] = [[10, 0, 0]]
    fails(loading(doc), SerializationError, "heads[0] refers to node 10")
    doc["heads"] = [[9, 2, 0]]
    fails(loading(doc), GraphError, "heads[0] reads output 2", "'softmax'", "1 output")
    doc = mlp_doc()
    doc["nodes"][7]["inputs"][0] = [4, 3, 0]
    fails(loading(doc), GraphError, "'fc2' reads output 3 of 'relu1'")
    doc = mlp_doc()
    doc["nodes"][3]["inputs"] = doc["nodes"][3]["inputs"][:2]
    fails(loading(doc), GraphError, "node 'fc1' (FullyConnected) has 2 inputs, expected 3",
          "bias")
    doc = mlp_doc()
    doc["arg_nodes"] = [0, 3]
    fails(loading(doc), SerializationError, "arg_nodes lists node 3 ('fc1')", "not a variable")


def test_duplicate_names_in_a_file():
    doc = mlp_doc()
    doc["nodes"][2]["name"] = "fc1_weight"
    fails(loading(doc), GraphError, "duplicate name 'fc1_weight'", "another name")


def test_bad_version_and_variable_with_inputs():
    doc = mlp_doc()
    doc["attrs"] = {"mxnet_version": 10901}
    fails(loading(doc), SerializationError, "mxnet_version must be [\"int\", N]")
    doc = mlp_doc()
    doc["nodes"][1]["inputs"] = [[0, 0, 0]]
    fails(loading(doc), SerializationError, "node 'fc1_weight' (variable)", "no inputs")


# --------------------------------------------------------------------------
# the Symbol API
# --------------------------------------------------------------------------
def test_wrong_attribute_in_python():
    data = S.Variable("data")
    fails(lambda: S.Convolution(data, kernel=(3, 3), num_filters=8, name="conv1"), OpError,
          "node 'conv1' (Convolution)", "unknown attribute 'num_filters'",
          "did you mean num_filter")
    fails(lambda: S.Convolution(data, kernel=(3, 3), name="conv1"), OpError,
          "node 'conv1'", "missing required attribute 'num_filter'")
    fails(lambda: S.Convolution(data, kernel="3x3", num_filter=8, name="conv1"), OpError,
          "kernel='3x3'", "expected a tuple of ints such as (3, 3)")
    fails(lambda: S.Pooling(data, kernel=(2, 2), pool_type="maximum", name="pool1"), OpError,
          "node 'pool1' (Pooling)", "expected one of max, avg, sum")
    fails(lambda: S.FullyConnected(data, num_hidden=4, no_bias="maybe", name="fc"), OpError,
          "no_bias='maybe'", "expected True or False")
    fails(lambda: S.FullyConnected(data, data, data, data, num_hidden=4, name="fc"), OpError,
          "node 'fc'", "4 positional inputs", "data, weight, bias")
    fails(lambda: S.FullyConnected(data, num_hidden=4, wieght=data, name="fc"), OpError,
          "no input named 'wieght'")
    # MXNet's out_grad=True needs a head gradient our loss heads never take:
    # refused rather than ignored (False, as MXNet's files write it, loads)
    fails(lambda: S.SoftmaxOutput(data, out_grad=True, name="sm"), OpError,
          "node 'sm' (SoftmaxOutput)", "out_grad=True", "not supported")
    assert S.SoftmaxOutput(data, out_grad="False", name="sm").list_attr()["out_grad"] == "False"


def test_unknown_op_in_python_suggests_names():
    # an OpError like every unknown op, and an AttributeError for hasattr()
    for unknown in (lambda: S.FullyConected, lambda: sg.nd.FullyConected,
                    lambda: sg.nd.ones(2).FullyConected):
        fails(unknown, OpError, "nearest known ops", "FullyConnected")
        with pytest.raises(AttributeError):
            unknown()
    fails(lambda: sg.nd.Convolutoin, OpError, "'Convolutoin'", "Convolution")
    assert not hasattr(S, "Convolutoin") and not hasattr(sg.nd, "Convolutoin")
    assert getattr(sg.nd.ones(2), "no_such_op", None) is None
    assert hasattr(S, "Convolution") and hasattr(sg.nd, "Convolution")


def test_duplicate_names_in_python():
    data = S.Variable("data")
    a = S.FullyConnected(data, num_hidden=2, name="fc")
    b = S.FullyConnected(data, num_hidden=3, name="fc")
    fails(lambda: (a + b).infer_shape(data=(1, 4)), GraphError, "duplicate name 'fc",
          "another name")


def test_inputs_of_different_dtypes_name_the_node_and_both():
    a, b = S.Variable("a"), S.Variable("b")
    fails(lambda: (a + b).infer_type(a="float32", b="int32"), ShapeError,
          "node 'elemwise_add", "(elemwise_add)", "one dtype", "float32", "int32")
    fc = S.FullyConnected(a, num_hidden=2, name="fc")
    fails(lambda: fc.infer_type(a="float16", fc_weight="float32"), ShapeError,
          "node 'fc' (FullyConnected)", "float16", "float32")
    fails(lambda: S.Concat(a, b, dim=0, name="cat").simple_bind(
        sg.cpu(), type_dict={"a": "float32", "b": "float16"}, a=(2,), b=(2,)),
        ShapeError, "node 'cat' (Concat)", "float32, float16")
    # inputs that may differ: labels, integer indices, shape-only inputs, casts
    assert S.SoftmaxOutput(a, b).infer_type(a="float32", b="int32")[1] == [np.float32]
    assert S.Embedding(a, input_dim=4, output_dim=2).infer_type(a="int32")[1] == [np.float32]
    assert S.reshape_like(a, b).infer_type(a="float16", b="int32")[1] == [np.float16]
    assert S.Cast(a, dtype="int32").infer_type(a="float32")[1] == [np.int32]
    assert (S.Cast(a, dtype="float32") + b).infer_type(a="int32", b="float32")[1] == \
        [np.float32]


def test_misspelled_dtypes_in_the_symbol_api():
    a = S.Variable("a")
    fails(lambda: S.Variable("x", dtype="flot32"), ShapeError, "unknown dtype 'flot32'",
          "float32")
    fails(lambda: a.infer_type(a="floatt32"), ShapeError, "unknown dtype 'floatt32'")
    fails(lambda: a.simple_bind(sg.cpu(), type_dict={"a": "flaot32"}, a=(2,)), ShapeError,
          "unknown dtype 'flaot32'")
    # the pass the Symbol API sits on, called as it is (it raised NumPy's TypeError)
    from symgraph.passes.infer import infer_shapes
    fails(lambda: infer_shapes(a.graph(), {"a": (2,)}, {"a": "float31"}), ShapeError,
          "unknown dtype 'float31'")


def test_64_bit_dtypes_without_x64_are_refused_not_truncated():
    import jax
    a = S.Variable("a")
    with jax.enable_x64(False):
        for fn, kind in [
                (lambda: a.simple_bind(sg.cpu(), type_dict={"a": "float64"}, a=(2,)), BindError),
                (lambda: S.Variable("a", dtype="int64").simple_bind(sg.cpu(), a=(2,)),
                 BindError),
                (lambda: S.Cast(a, dtype="float64").simple_bind(sg.cpu(), a=(2,)), BindError),
                (lambda: sg.nd.array([1.0], dtype="float64"), ShapeError),
                (lambda: sg.nd.zeros((2,), dtype="int64"), ShapeError),
                (lambda: sg.nd.ones(2).astype("float64"), ShapeError)]:
            fails(fn, kind, "needs 64-bit JAX", "jax.config.update('jax_enable_x64', True)")
        # what was not asked for stays MXNet's float32 default, as before
        assert sg.nd.array([[1.0, 2.0]]).dtype == "float32"
        assert a.simple_bind(sg.cpu(), a=(2,)).arg_dict["a"].dtype == "float32"
    ex = a.simple_bind(sg.cpu(), type_dict={"a": "float64"}, a=(2,))  # x64 on: fine
    assert ex.arg_dict["a"].dtype == "float64"


def _net():
    data = S.Variable("data")
    fc = S.FullyConnected(data, num_hidden=3, name="fc1")
    return S.SoftmaxOutput(fc, name="softmax")


def test_shape_mismatch_names_the_node_and_both_shapes():
    data = S.Variable("data")
    a = S.FullyConnected(data, num_hidden=3, name="fa")
    b = S.FullyConnected(data, num_hidden=4, name="fb")
    fails(lambda: (a + b).infer_shape(data=(2, 5)), ShapeError, "(elemwise_add)", "(2, 3)",
          "(2, 4)")
    fails(lambda: _net().infer_shape(data=(2, 3), fc1_weight=(4, 3)), ShapeError,
          "node 'fc1' (FullyConnected)", "'weight' is (4, 3)", "needs (3, 3)")
    conv = S.Convolution(data, kernel=(5, 5), num_filter=2, name="conv")
    fails(lambda: conv.infer_shape(data=(1, 3, 4, 4)), ShapeError, "node 'conv' (Convolution)")


def test_missing_argument_shape():
    # infer_shape, as MXNet's: (None, None, None) and a warning naming what to give
    with pytest.warns(UserWarning, match=r"cannot infer the shape of data.*"
                      r"infer_shape\(data=\(\.\.\.\)\)"):
        assert _net().infer_shape() == (None, None, None)
    fails(lambda: _net().infer_shape(dat=(2, 3)), ShapeError, "'dat' is not an input",
          "data")
    fails(lambda: _net().simple_bind(sg.cpu(), softmax_label=(2,)), ShapeError,
          "cannot infer the shape of data")


def test_binding_mistakes():
    net = _net()
    names = net.list_arguments()
    good = {"data": sg.nd.zeros((2, 3)), "fc1_weight": sg.nd.zeros((3, 3)),
            "fc1_bias": sg.nd.zeros(3), "softmax_label": sg.nd.zeros(2)}
    fails(lambda: net.bind(sg.cpu(), args=[good[n] for n in names[:3]]), BindError,
          "3 arrays given for 4 names", "softmax_label")
    fails(lambda: net.bind(sg.cpu(), args={"data": good["data"]}), BindError,
          "no array bound for argument(s) fc1_weight, fc1_bias, softmax_label")
    fails(lambda: net.bind(sg.cpu(), args={**good, "extra": sg.nd.zeros(1)}), BindError,
          "extra not in the symbol's arguments")
    fails(lambda: net.bind(sg.cpu(), args={**good, "fc1_weight": sg.nd.zeros((4, 3))}),
          ShapeError, "node 'fc1' (FullyConnected)", "(4, 3)")
    fails(lambda: net.simple_bind(sg.cpu(), grad_req="writ", data=(2, 3)), BindError,
          "grad_req for 'data' is 'writ'", "write, add, null")
    fails(lambda: net.simple_bind(sg.cpu(), grad_req={"fc1_weight": "ad"}, data=(2, 3)),
          BindError, "'fc1_weight' is 'ad'")
    ex = net.simple_bind(sg.cpu(), data=(2, 3))
    fails(ex.backward, BindError, "forward(is_train=True) first")
    fails(lambda: ex.forward(dat=1), BindError, "'dat' is not an argument")
    fails(lambda: ex.forward(data=sg.nd.zeros((5, 7))), ShapeError, "(5, 7)", "(2, 3)")


def test_nonexistent_devices():
    fails(lambda: _net().simple_bind(sg.gpu(0), data=(2, 3)), ContextError,
          "gpu(0) does not exist", "no gpu device")
    fails(lambda: _net().simple_bind(sg.cpu(64), data=(2, 3)), ContextError,
          "cpu(64) does not exist", "8 cpu device(s)")
    fails(lambda: sg.nd.zeros((2,), ctx=sg.gpu(3)), ContextError, "gpu(3) does not exist")
    fails(lambda: sg.nd.array([1.0]).copyto(sg.gpu(0)), ContextError, "gpu(0)")
    fails(lambda: sg.Context("tpu", 0), ContextError, "unknown device type 'tpu'")


# --------------------------------------------------------------------------
# the NDArray API
# --------------------------------------------------------------------------
def test_ndarray_mistakes():
    nd = sg.nd
    fails(lambda: nd.FullyConnected(nd.ones((2, 3)), num_hidden=2), OpError,
          "nd.FullyConnected: missing input(s) weight, bias")
    fails(lambda: nd.FullyConnected(nd.ones((2, 3)), nd.ones((2, 4)), nd.ones(2), num_hidden=2),
          ShapeError, "nd.FullyConnected", "'weight' is (2, 4)", "needs (2, 3)")
    fails(lambda: nd.clip(nd.ones(2), 0, 1), OpError, "positional argument 1", "by name")
    fails(lambda: nd.relu(nd.ones(2), nd.ones(2)), OpError, "2 arrays given", "takes 1")
    fails(lambda: nd.Activation(nd.ones(2), act_type="gelu"), OpError, "expected one of relu")
    fails(lambda: nd.ones(2) + nd.ones(2, ctx=sg.cpu(1)), ContextError, "cpu(0)", "cpu(1)",
          "as_in_context")
    fails(lambda: nd.elemwise_add(nd.ones(2), nd.ones(2, ctx=sg.cpu(1))), ContextError,
          "different devices")
    fails(lambda: nd.zeros((2,), dtype="floatt32"), ShapeError, "unknown dtype 'floatt32'")
    fails(lambda: nd.array([[1, 2], [3]]), ShapeError, "nd.array cannot make an array")
    fails(lambda: nd.zeros((2, -1)), ShapeError, "negative dimension")
    fails(lambda: nd.ones(3).copyto(nd.zeros(4)), ShapeError, "(3,)", "(4,)")
    fails(lambda: bool(nd.ones(3)), ShapeError, "ambiguous")
    fails(lambda: nd.ones((2, 2)).asscalar(), ShapeError, "one element")
    fails(lambda: nd.load(os.path.join(DATA, "mlp-symbol.json")), SerializationError,
          "neither an array file written by nd.save nor an MXNet .params file")
    fails(lambda: nd.load(os.path.join(DATA, "no-such.params")), SerializationError,
          "cannot read")
