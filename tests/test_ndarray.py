"""The imperative NDArray API: creation, arithmetic, devices, save/load, and
every registered op run eagerly as ``nd.<Op>`` against its reference."""
import os

import numpy as np
import pytest

import symgraph as sg
from symgraph.graph import Entry, Graph, Node
from symgraph.ops import all_opdefs
from symgraph.passes.infer import infer_shapes

from op_reference import REFERENCE

nd = sg.nd
DATA = os.path.join(os.path.dirname(__file__), "data")


# --------------------------------------------------------------------------
# creation
# --------------------------------------------------------------------------
def test_array_defaults_to_float32_like_mxnet():
    assert nd.array([[1, 2], [3, 4]]).dtype == np.float32
    assert nd.array(np.arange(3, dtype=np.int64)).dtype == np.float32
    assert nd.array(np.ones(2), dtype="float64").dtype == np.float64
    a = nd.array([1, 2], dtype="int32")
    assert nd.array(a).dtype == np.int32  # an NDArray source keeps its dtype
    assert nd.array(a, dtype="float16").dtype == np.float16
    np.testing.assert_array_equal(nd.array([[1, 2], [3, 4]]).asnumpy(), [[1, 2], [3, 4]])


def test_array_properties():
    a = nd.array(np.arange(6).reshape(2, 3))
    assert a.shape == (2, 3) and a.size == 6 and a.ndim == 2 and len(a) == 2
    assert a.context == sg.cpu(0)
    assert isinstance(a.asnumpy(), np.ndarray)
    assert [r.asnumpy().tolist() for r in a] == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(IndexError):
        a[2]
    assert a.T.shape == (3, 2)
    np.testing.assert_array_equal(a.T.asnumpy(), np.arange(6).reshape(2, 3).T)
    assert a.wait_to_read() is a
    nd.waitall()
    assert float(nd.array([2.5])) == 2.5 and nd.array([[7]]).asscalar() == 7


def test_creation_functions():
    assert nd.zeros((2, 3)).asnumpy().tolist() == [[0] * 3] * 2
    assert nd.ones(3, dtype="int32").dtype == np.int32
    assert nd.ones(3).asnumpy().tolist() == [1, 1, 1]
    assert nd.empty((2, 2)).shape == (2, 2)
    assert nd.full((2,), 7.5).asnumpy().tolist() == [7.5, 7.5]
    assert nd.arange(4).asnumpy().tolist() == [0, 1, 2, 3]
    assert nd.arange(4).dtype == np.float32
    assert nd.arange(1, 2, 0.25).asnumpy().tolist() == [1, 1.25, 1.5, 1.75]
    assert nd.arange(0, 3, repeat=2).asnumpy().tolist() == [0, 0, 1, 1, 2, 2]
    assert nd.arange(5, 0, -2, dtype="int32").asnumpy().tolist() == [5, 3, 1]


# --------------------------------------------------------------------------
# arithmetic
# --------------------------------------------------------------------------
def test_arithmetic_with_arrays_and_scalars():
    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    y = np.array([0.5, -1.0])
    a, b = nd.array(x), nd.array(y)
    cases = [(a + b, x + y), (a - b, x - y), (a * b, x * y), (a / b, x / y),
             (a ** 2, x ** 2), (2 ** a, 2 ** x), (-a, -x), (3 - a, 3 - x), (1 / a, 1 / x),
             (a + 1, x + 1), (2 * a, 2 * x), (a % 3, x % 3), (abs(-a), x)]
    for got, want in cases:
        assert got.dtype == np.float32  # scalars keep the array's dtype
        np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-6)
    assert (a * np.float64(2)).dtype == np.float32


def test_comparisons_give_zero_one_in_the_arrays_dtype():
    a = nd.array([1, 2, 3])
    for got, want in [(a > 2, [0, 0, 1]), (a >= 2, [0, 1, 1]), (a < 2, [1, 0, 0]),
                      (a <= 2, [1, 1, 0]), (a == 2, [0, 1, 0]), (a != 2, [1, 0, 1]),
                      (a == nd.array([1, 0, 3]), [1, 0, 1])]:
        assert got.dtype == np.float32
        assert got.asnumpy().tolist() == want
    assert {a: 1}[a] == 1  # still hashable as a handle


def test_inplace_operators_replace_the_held_array():
    a = nd.array([1, 2, 3])
    alias = a
    a += 1
    a *= nd.array([2, 2, 2])
    a -= 1
    a /= 2
    a **= 2
    assert a is alias
    assert alias.asnumpy().tolist() == [2.25, 6.25, 12.25]  # ((x + 1) * 2 - 1) / 2, squared
    i = nd.array([1, 2], dtype="int32")
    i += 1.7  # the array keeps its dtype, as MXNet's
    assert i.dtype == np.int32


def test_setitem_copy_and_assignment():
    a = nd.zeros((2, 3))
    b = a.copy()
    a[:] = 5
    a[1] = nd.array([1, 2, 3])
    a[0, 0] = -1
    assert a.asnumpy().tolist() == [[-1, 5, 5], [1, 2, 3]]
    assert b.asnumpy().tolist() == [[0, 0, 0], [0, 0, 0]]
    a[:] = nd.array([7, 8, 9])  # broadcast
    assert a.asnumpy().tolist() == [[7, 8, 9], [7, 8, 9]]


def test_astype_reshape():
    a = nd.array(np.arange(6))
    assert a.astype("int32").dtype == np.int32
    assert a.astype("float32", copy=False) is a
    assert a.reshape(2, 3).shape == (2, 3)
    assert a.reshape((3, -1)).shape == (3, 2)
    assert a.reshape(shape=(2, 3)).reshape(0, -1, 1).shape == (2, 3, 1)  # MXNet codes
    assert a.reshape(-4, 2, -1).shape == (2, 3)
    np.testing.assert_array_equal(a.reshape(2, 3).asnumpy(), np.arange(6).reshape(2, 3))


# --------------------------------------------------------------------------
# devices (conftest gives 8 CPU devices)
# --------------------------------------------------------------------------
def test_arrays_live_on_their_context():
    a = nd.array([1, 2, 3], ctx=sg.cpu(1))
    assert a.context == sg.cpu(1)
    assert (a + 1).context == sg.cpu(1)
    assert nd.relu(a).context == sg.cpu(1)
    b = a.copyto(sg.cpu(2))
    assert b.context == sg.cpu(2) and b.asnumpy().tolist() == [1, 2, 3]
    assert a.as_in_context(sg.cpu(1)) is a
    c = a.as_in_context(sg.cpu(0))
    assert c.context == sg.cpu(0)
    target = nd.zeros(3, ctx=sg.cpu(3), dtype="int32")
    assert a.copyto(target) is target
    assert target.context == sg.cpu(3) and target.dtype == np.int32
    assert target.asnumpy().tolist() == [1, 2, 3]
    assert nd.zeros((2,), ctx=sg.cpu(4)).context == sg.cpu(4)


# --------------------------------------------------------------------------
# save / load
# --------------------------------------------------------------------------
def test_save_load_dict_and_list(tmp_path):
    f = str(tmp_path / "arrays.npz")
    arrays = {"arg:w": nd.array(np.arange(6).reshape(2, 3)), "b": nd.ones(2, dtype="int32"),
              "h": nd.array([1.5, -2], dtype="bfloat16")}
    nd.save(f, arrays)
    assert os.listdir(tmp_path) == ["arrays.npz"]
    back = nd.load(f)
    assert list(back) == list(arrays)
    for k in arrays:
        assert back[k].dtype == arrays[k].dtype and back[k].shape == arrays[k].shape
        np.testing.assert_array_equal(back[k].asnumpy().astype(float),
                                      arrays[k].asnumpy().astype(float))
    nd.save(f, [nd.zeros((1, 2)), nd.arange(3)])
    back = nd.load(f, ctx=sg.cpu(1))
    assert isinstance(back, list) and [b.shape for b in back] == [(1, 2), (3,)]
    assert back[1].context == sg.cpu(1)
    nd.save(f, nd.ones(2))
    assert nd.load(f)[0].asnumpy().tolist() == [1, 1]


def test_save_writes_mxnets_format_by_default(tmp_path):
    """nd.save writes the file mx.nd.save writes: MXNet's own files, loaded
    and saved again, come back byte for byte (dict and list)."""
    for name in ("mxnet-dict.params", "mxnet-list.params"):
        src = os.path.join(DATA, name)
        out = str(tmp_path / name)
        nd.save(out, nd.load(src))
        assert open(out, "rb").read() == open(src, "rb").read()


def test_save_npz_only_when_asked(tmp_path):
    f = str(tmp_path / "a.bin")
    nd.save(f, {"s": nd.array(np.float32(2.5).reshape(()))}, format="npz")
    assert open(f, "rb").read(2) == b"PK"  # a zip archive
    back = nd.load(f)
    assert back["s"].shape == () and back["s"].asscalar() == 2.5
    # MXNet's format has no 0-d arrays and no uint16: refused before writing
    for bad in ({"s": np.float32(1).reshape(())}, [np.zeros(2, np.uint16)]):
        with pytest.raises(sg.SerializationError):
            nd.save(str(tmp_path / "b.params"), bad)
    assert sorted(os.listdir(tmp_path)) == ["a.bin"]
    with pytest.raises(sg.SerializationError, match="format is 'mxnet' or 'npz'"):
        nd.save(f, [nd.ones(2)], format="params")


@pytest.mark.x64_off
@pytest.mark.parametrize("fmt", ["mxnet", "npz"])
def test_load_refuses_narrowing_64_bit_arrays_that_would_change(tmp_path, fmt):
    """With 64-bit JAX off an int64 array whose values do not all fit int32
    is refused by name, not wrapped without a word (one that fits is
    narrowed with a warning: tests/test_mxnet_conventions.py); 32-bit
    arrays load."""
    f = str(tmp_path / "x.params")
    # NumPy arrays: written as they are, whatever JAX's mode
    nd.save(f, {"i": np.array([1, 2 ** 40], dtype=np.int64), "w": np.ones(2, np.float32)},
            format=fmt)
    with pytest.raises(sg.SerializationError, match=r"x\.params: array 'i': int64 value "
                       r"1099511627776 does not fit int32"):
        nd.load(f)
    nd.save(f, {"w": np.ones(2, np.float32)}, format=fmt)
    assert nd.load(f)["w"].dtype == np.float32


def test_load_reads_mxnet_params_files():
    d = nd.load(os.path.join(DATA, "mxnet-dict.params"))
    assert list(d) == ["arg:w", "aux:m"]
    assert d["arg:w"].asnumpy().tolist() == [[1, 2, 3], [4, 5, 6]]
    assert d["aux:m"].dtype == np.float64 and d["aux:m"].asnumpy().tolist() == [0.5, -1]
    lst = nd.load(os.path.join(DATA, "mxnet-list.params"))
    assert [a.dtype for a in lst] == [np.int32, np.float16]
    assert lst[0].asnumpy().tolist() == [0, 1, 2, 3]


# --------------------------------------------------------------------------
# nd.<Op>: every registered op, eagerly, against its reference
# --------------------------------------------------------------------------
FORWARD = [op for op in all_opdefs() if not op.name.startswith("_backward")
           and not op.needs_rng]
CASES = [(op, i, s) for op in FORWARD for i, s in enumerate(op.samples)]


def _sample_inputs(op, sample, seed):
    probe = Node(op, "op", sample.attrs, [])
    names = op.arg_names(probe.params) + op.aux_names(probe.params)
    variables = [Node(None, n) for n in names]
    node = Node(op, "op", sample.attrs, [Entry(v) for v in variables])
    g = Graph([Entry(node, 0)])
    inf = infer_shapes(g, dict(zip(names, sample.shapes)))
    rng = np.random.default_rng(seed)
    values = []
    for k, v in enumerate(variables):
        shape = inf.shapes[g.entry_id_of_node(v)]
        if k in sample.ints:
            values.append(rng.integers(0, sample.ints[k], size=shape).astype("float64"))
        else:
            values.append(rng.uniform(sample.low, sample.high, size=shape))
    return node, values


@pytest.mark.parametrize("op,i,sample", CASES, ids=[f"{op.name}-{i}" for op, i, _ in CASES])
def test_every_op_runs_eagerly(op, i, sample):
    node, values = _sample_inputs(op, sample, i)
    fn = getattr(nd, op.name)
    got = fn(*[nd.array(v, dtype="float64") for v in values], **sample.attrs)
    got = got if isinstance(got, list) else [got]
    assert len(got) == node.num_visible_outputs
    want = REFERENCE[op.name](node.params, *values)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want):
        assert isinstance(g, nd.NDArray)
        np.testing.assert_allclose(g.asnumpy(), w, rtol=1e-6, atol=1e-8)


def test_ops_take_inputs_by_name_and_mxnet_string_attributes():
    rng = np.random.default_rng(0)
    x, w, b = rng.normal(size=(2, 3, 5, 5)), rng.normal(size=(4, 3, 3, 3)), rng.normal(size=4)
    by_pos = nd.Convolution(nd.array(x), nd.array(w), nd.array(b), kernel=(3, 3), num_filter=4)
    by_name = nd.Convolution(data=nd.array(x), weight=nd.array(w), bias=nd.array(b),
                             kernel="(3, 3)", num_filter="4", name="ignored")
    assert by_pos.shape == (2, 4, 3, 3)
    np.testing.assert_allclose(by_name.asnumpy(), by_pos.asnumpy(), rtol=1e-6)
    pixel = sum((x[0, c, 1:4, 1:4] * w[2, c]).sum() for c in range(3)) + b[2]  # by hand
    np.testing.assert_allclose(by_pos.asnumpy()[0, 2, 1, 1], pixel, rtol=1e-5)


def test_multi_output_aux_and_variadic_ops():
    parts = nd.split(nd.arange(12).reshape(3, 4), num_outputs=2, axis=1)
    assert isinstance(parts, list) and [p.shape for p in parts] == [(3, 2), (3, 2)]
    assert parts[1].asnumpy()[0].tolist() == [2, 3]
    a, b = nd.ones((2, 2)), nd.zeros((2, 2))
    assert nd.concat([a, b], dim=1).shape == (2, 4)
    assert nd.Concat(a, b, a, dim=0).shape == (6, 2)
    assert nd.add_n(a, a, a).asnumpy().tolist() == [[3, 3], [3, 3]]
    x = np.random.default_rng(1).normal(size=(2, 3, 2, 2))
    mean, var = np.array([0.1, 0.2, 0.3]), np.array([1.0, 2.0, 4.0])
    y = nd.BatchNorm(nd.array(x), nd.ones(3), nd.zeros(3), nd.array(mean), nd.array(var),
                     fix_gamma=False, eps=1e-5)
    want = (x - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-5)
    np.testing.assert_allclose(y.asnumpy(), want, rtol=1e-5)
    z = nd.Dropout(nd.array(x), p=0.5)  # inference mode: the identity
    np.testing.assert_allclose(z.asnumpy(), x.astype(np.float32), rtol=1e-6)


def test_ops_as_methods_and_out():
    a = nd.array([[1, 2], [3, 4]])
    assert a.sum(axis=1).asnumpy().tolist() == [3, 7]
    np.testing.assert_allclose(a.exp().asnumpy(), np.exp([[1, 2], [3, 4]]), rtol=1e-6)
    out = nd.zeros((2, 2))
    assert nd.relu(a - 2, out=out) is out
    assert out.asnumpy().tolist() == [[0, 0], [1, 2]]
    with pytest.raises(AttributeError):  # an OpError too, naming the nearest ops
        a.no_such_method
    with pytest.raises(sg.OpError, match="nearest known ops: relu"):
        a.reLU
