"""MXNet's ONNX exporter's op set, held against symgraph's registry.

The set is every op name the exporter of MXNet 1.9 registers a translation
for: the distinct names of the ``@mx_op.register("...")`` and
``@mx_op.register('...')`` decorators (some with an opset argument) in
``python/mxnet/onnx/mx2onnx/_op_translations/_op_translations_opset12.py``
and ``_op_translations_opset13.py`` of apache/mxnet, branch ``v1.9.x``
(commit 76d73dbd778c9ab4a4584dbc857c8c0694faa162; tag 1.9.1 registers the
same 149). Counting only the double-quoted decorators gives 126 and misses
Convolution, Pooling, Concat and 20 more. ``master`` (MXNet 2.0) registers
209: these plus the ``_npi_*``/``_npx_*`` ops of MXNet 2's NumPy interface,
which MXNet 1.x symbol files do not hold. ``null`` is the op of a variable
node in symbol JSON.

What the set needs of symgraph: a symbol-JSON node of each op name loads,
and each op has shape inference, at least one ``Sample`` and a NumPy
reference, so the registry-driven tests (tests/test_ops.py: forward against
the reference, inferred shapes, gradients) cover it.
"""
import json

import numpy as np
import pytest

from symgraph.graph import Node
from symgraph.ops import get_op, list_ops
from symgraph.ops.registry import format_attr
from symgraph.passes.infer import infer_shapes
from symgraph.serialize import from_json

from op_reference import REFERENCE

# apache/mxnet v1.9.x, python/mxnet/onnx/mx2onnx/_op_translations/*.py: the
# distinct names registered with @mx_op.register (149)
MXNET_ONNX_OPS = (
    "Activation", "BatchNorm", "BlockGrad", "Cast", "Concat", "Convolution", "Crop",
    "Deconvolution", "Dropout", "Embedding", "Flatten", "FullyConnected", "InstanceNorm",
    "L2Normalization", "LRN", "LayerNorm", "LeakyReLU", "LogisticRegressionOutput", "MakeLoss",
    "Pad", "Pooling", "RNN", "ROIPooling", "Reshape", "SequenceMask", "SequenceReverse",
    "SliceChannel", "SoftmaxOutput", "SwapAxis", "UpSampling", "_arange",
    "_contrib_AdaptiveAvgPooling2D", "_contrib_BilinearResize2D", "_contrib_ROIAlign",
    "_contrib_arange_like", "_contrib_box_decode", "_contrib_box_nms", "_contrib_div_sqrt_dim",
    "_contrib_interleaved_matmul_selfatt_qk", "_contrib_interleaved_matmul_selfatt_valatt",
    "_copy", "_div_scalar", "_equal_scalar", "_greater_scalar", "_lesser_scalar",
    "_linalg_gemm2", "_maximum", "_maximum_scalar", "_minimum", "_minimum_scalar",
    "_minus_scalar", "_mul_scalar", "_ones", "_plus_scalar", "_power", "_power_scalar",
    "_random_normal", "_random_uniform", "_random_uniform_like", "_rdiv_scalar",
    "_rminus_scalar", "_rnn_param_concat", "_sample_multinomial", "_split_v2", "_zeros", "abs",
    "add_n", "arccos", "arcsin", "arctan", "argmax", "argmin", "argsort", "batch_dot",
    "broadcast_add", "broadcast_axis", "broadcast_div", "broadcast_equal", "broadcast_greater",
    "broadcast_greater_equal", "broadcast_lesser", "broadcast_lesser_equal", "broadcast_like",
    "broadcast_logical_and", "broadcast_logical_or", "broadcast_logical_xor",
    "broadcast_minimum", "broadcast_mod", "broadcast_mul", "broadcast_not_equal",
    "broadcast_power", "broadcast_sub", "broadcast_to", "ceil", "clip", "cos", "depth_to_space",
    "dot", "elemwise_add", "elemwise_div", "elemwise_mul", "elemwise_sub", "exp", "expand_dims",
    "floor", "gather_nd", "hard_sigmoid", "identity", "log", "log2", "log_softmax",
    "logical_not", "max", "mean", "min", "negative", "norm", "null", "one_hot", "ones_like",
    "prod", "reciprocal", "relu", "repeat", "reshape_like", "reverse", "shape_array", "sigmoid",
    "sin", "size_array", "slice", "slice_axis", "slice_like", "softmax", "space_to_depth",
    "sqrt", "square", "squeeze", "stack", "sum", "sum_axis", "take", "tan", "tanh", "tile",
    "topk", "transpose", "where", "zeros_like",
)
VARIABLE_OP = "null"  # a variable node, not an op
OPS = tuple(sorted(set(MXNET_ONNX_OPS + ("RNN",)) - {VARIABLE_OP}))


def test_the_set_is_sorted_distinct_and_whole():
    assert list(MXNET_ONNX_OPS) == sorted(set(MXNET_ONNX_OPS))
    assert len(MXNET_ONNX_OPS) == 149
    assert "RNN" in MXNET_ONNX_OPS and VARIABLE_OP in MXNET_ONNX_OPS


def test_every_op_of_the_set_is_registered():
    registered = set(list_ops())
    missing = [name for name in OPS if name not in registered]
    assert not missing, f"ops of MXNet's ONNX set symgraph lacks: {missing}"


@pytest.mark.parametrize("name", OPS)
def test_op_has_shape_inference_samples_and_a_reference(name):
    op = get_op(name)
    assert callable(op.infer_shape), name
    assert op.samples, f"{name} has no Sample, so the registry-driven tests skip it"
    has_reference = op.name in REFERENCE
    assert has_reference, f"{name} ({op.name}) has no NumPy reference"
    assert op.gradient is not None, f"{name} has no gradient rule"


def _one_node_json(name, sample):
    """Symbol JSON of one node of op ``name`` (as MXNet names it) over
    variables for its inputs, with the sample's attributes as MXNet's
    strings."""
    op = get_op(name)
    params = Node(op, "probe", sample.attrs, []).params
    inputs = op.arg_names(params) + op.aux_names(params)
    nodes = [{"op": VARIABLE_OP, "name": f"in_{n}", "inputs": []} for n in inputs]
    node = {"op": name, "name": "op", "inputs": [[i, 0, 0] for i in range(len(inputs))]}
    if sample.attrs:
        node["attrs"] = {k: format_attr(v) for k, v in sample.attrs.items()}
    nodes.append(node)
    n_out = op.num_visible_outputs(params)
    doc = {"nodes": nodes, "arg_nodes": list(range(len(inputs))),
           "node_row_ptr": list(range(len(nodes) + n_out)),
           "heads": [[len(inputs), k, 0] for k in range(n_out)],
           "attrs": {"mxnet_version": ["int", 10901]}}
    return json.dumps(doc), {f"in_{n}": s for n, s in zip(inputs, sample.shapes)}


@pytest.mark.parametrize("name", OPS)
def test_a_symbol_json_node_of_the_op_loads_and_infers(name):
    """The name as MXNet writes it (an alias included) loads from symbol
    JSON, and its shapes infer from the op's first sample."""
    sample = get_op(name).samples[0]
    text, shapes = _one_node_json(name, sample)
    g = from_json(text, f"{name} node")
    inf = infer_shapes(g, shapes)
    assert all(inf.shape(e) is not None and all(d > 0 for d in inf.shape(e))
               for e in g.outputs)


def test_a_variable_node_loads_as_a_variable():
    text = json.dumps({"nodes": [{"op": VARIABLE_OP, "name": "x", "inputs": []}],
                       "arg_nodes": [0], "heads": [[0, 0, 0]]})
    g = from_json(text)
    assert [n.name for n in g.variables] == ["x"] and g.outputs[0].node.op is None
    assert np.asarray(infer_shapes(g, {"x": (2, 3)}).shape(g.outputs[0])).tolist() == [2, 3]
