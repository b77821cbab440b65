"""Iterator batches hold NDArrays, as MXNet's: ``batch.data[0].asnumpy()``,
``.as_in_context(ctx)``, ``.shape``, ``.dtype``, ``.context`` on batches
of NDArrayIter, ImageRecordIter and the wrappers, with the values of the
source data; the image batch shares the buffer the threads wrote (no
copy); Module.fit and score still train and read such batches."""
import jax
import numpy as np
import pytest

import symgraph as sg
from symgraph import recordio as rio
from symgraph.train import TrainError
from symgraph.train.io import (DataBatch, DataIter, NDArrayIter, PrefetchingIter, ResizeIter,
                               aligned_zeros, batch_ndarrays)


def _check_nd(a, want, dtype):
    """``a`` is an NDArray on cpu(0) holding ``want`` in ``dtype``."""
    assert isinstance(a, sg.nd.NDArray)
    assert a.shape == want.shape and a.dtype == np.dtype(dtype)
    assert a.context == sg.cpu(0)
    assert a.as_in_context(sg.cpu(0)) is a  # already there: no copy
    host = a.asnumpy()
    assert isinstance(host, np.ndarray)
    np.testing.assert_array_equal(host, want.astype(dtype))
    np.testing.assert_array_equal(a.copyto(sg.cpu(0)).asnumpy(), host)
    np.testing.assert_array_equal(a[1:].asnumpy(), host[1:])


def test_ndarrayiter_batches_are_ndarrays_with_the_source_values():
    x = np.arange(30, dtype=np.float64).reshape(10, 3)
    y = np.arange(10) % 4
    it = NDArrayIter(x, y, batch_size=4, shuffle=True, seed=5, last_batch_handle="pad")
    batches = list(it)
    assert [b.pad for b in batches] == [0, 0, 2]
    for b in batches:
        _check_nd(b.data[0], x[b.index], "float32")
        _check_nd(b.label[0], y[b.index], "float32")
        assert b.data[0].astype("int32").dtype == np.int32
    # every sample once, padding from the start of the epoch's order
    seen = np.concatenate([b.data[0].asnumpy()[:4 - b.pad, 0] for b in batches])
    assert sorted(seen.tolist()) == sorted(x[:, 0].tolist())
    # getdata/getlabel give NDArrays too (MXNet's API)
    it.reset()
    assert it.iter_next()
    assert isinstance(it.getdata()[0], sg.nd.NDArray)
    np.testing.assert_array_equal(it.getlabel()[0].asnumpy(), y[it.getindex()])


def test_ndarrayiter_sources_dtypes_and_names():
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    # NDArray and jax array sources; dtype=None keeps int32
    for src in (sg.nd.array(x), jax.numpy.asarray(x)):
        b = next(NDArrayIter(src, batch_size=3))
        _check_nd(b.data[0], x[:3], "float32")
    ints = np.arange(6, dtype=np.int32)
    b = next(NDArrayIter({"a": ints, "b": x}, {"l": ints}, batch_size=2, dtype=None))
    assert [a.dtype for a in b.data] == [np.int32, np.float32]
    _check_nd(b.label[0], ints[:2], "int32")
    # num_parts: each part's rows, NDArrays
    parts = [next(NDArrayIter(x, batch_size=2, num_parts=3, part_index=i)) for i in range(3)]
    np.testing.assert_array_equal(np.concatenate([p.data[0].asnumpy() for p in parts]), x)


def test_wrappers_and_custom_iterators_give_ndarrays():
    x = np.arange(20, dtype=np.float32).reshape(10, 2)
    for it, rows in ((PrefetchingIter(NDArrayIter(x, x[:, 0], batch_size=5)), 10),
                     (ResizeIter(NDArrayIter(x, x[:, 0], batch_size=5), 3), 15)):
        got = [b.data[0] for b in it]
        assert all(isinstance(g, sg.nd.NDArray) for g in got)
        assert np.concatenate([g.asnumpy() for g in got]).shape == (rows, 2)
        if hasattr(it, "close"):
            it.close()

    class Host(DataIter):  # MXNet's getdata protocol with NumPy arrays
        def __init__(self):
            super().__init__(2)
            self.done = False

        def iter_next(self):
            was, self.done = self.done, True
            return not was

        def getdata(self):
            return [x[:2]]

        def getlabel(self):
            return [x[:2, 0]]

        @property
        def provide_data(self):
            return [("data", (2, 2))]

    b = next(Host())
    _check_nd(b.data[0], x[:2], "float32")
    _check_nd(b.label[0], x[:2, 0], "float32")


def test_batch_ndarrays_shares_an_aligned_buffer():
    host = aligned_zeros((4, 3, 8, 8), np.float32)
    assert host.ctypes.data % 64 == 0 and not host.any()
    host[:] = np.arange(host.size, dtype=np.float32).reshape(host.shape)
    lab = aligned_zeros((4,), np.float32)
    nd, ndl = batch_ndarrays([host, lab])
    _check_nd(nd, host, "float32")
    assert nd.data.unsafe_buffer_pointer() == host.ctypes.data  # zero-copy
    kept = sg.nd.array([1.0])
    assert batch_ndarrays([kept])[0] is kept and batch_ndarrays(None) is None


def test_64_bit_batches_need_x64():
    x = np.arange(8.0).reshape(4, 2)  # float64
    with jax.enable_x64(True):
        b = next(NDArrayIter(x, batch_size=2, dtype="float64"))
        _check_nd(b.data[0], x[:2], "float64")
    with jax.enable_x64(False):
        with pytest.raises(TrainError, match="float64 needs 64-bit JAX"):
            NDArrayIter(x, batch_size=2, dtype="float64")
        it = NDArrayIter(x, np.arange(4), batch_size=2, dtype=None)
        assert it.provide_data[0].dtype == "float64"  # what bind refuses
        with pytest.raises(TrainError, match="'data': float64 needs 64-bit JAX"):
            next(it)
        # the default converts, as MXNet's iterators do
        _check_nd(next(NDArrayIter(x, batch_size=2)).data[0], x[:2], "float32")


def _pack(tmp_path, n=10, size=(12, 14)):
    rng = np.random.default_rng(3)
    imgs = rng.integers(0, 256, (n, *size, 3), dtype=np.uint8)
    w = rio.MXIndexedRecordIO(tmp_path / "r.idx", tmp_path / "r.rec", "w")
    for i, img in enumerate(imgs):  # PNG: lossless, exact pixels; BGR as OpenCV
        w.write_idx(i, rio.pack_img((0, float(i), i, 0), img[:, :, ::-1], img_fmt=".png"))
    w.close()
    return str(tmp_path / "r.rec"), imgs


@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_imagerecorditer_batches_are_ndarrays_with_the_source_pixels(tmp_path, dtype):
    path, imgs = _pack(tmp_path)
    it = sg.io.ImageRecordIter(path, (3, 12, 14), 4, path_imgidx=str(tmp_path / "r.idx"),
                               dtype=dtype, preprocess_threads=2)
    batches = list(it)
    assert [b.pad for b in batches] == [0, 0, 2]
    for b in batches:
        want = imgs[b.index].transpose(0, 3, 1, 2)
        _check_nd(b.data[0], want, dtype)
        _check_nd(b.label[0], b.index.astype(np.float32), "float32")
    # the NDArray shares the buffer the threads decoded into: no copy
    assert batches[0].data[0].data.unsafe_buffer_pointer() % 64 == 0
    it.close()


def test_module_fit_and_score_on_ndarray_batches():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.float32)
    net = sg.sym.SoftmaxOutput(sg.sym.FullyConnected(sg.sym.Variable("data"), num_hidden=2,
                                                     name="fc"), name="softmax")
    it = NDArrayIter(x, y, batch_size=16, shuffle=True, seed=0)
    assert isinstance(next(it).data[0], sg.nd.NDArray)
    it.reset()
    mod = sg.mod.Module(net, context=sg.cpu(0))
    seen = []
    mod.fit(it, num_epoch=15, optimizer="sgd", optimizer_params={"learning_rate": 0.5},
            initializer=sg.init.Xavier(), seed=0,
            batch_end_callback=lambda p: seen.append(p.locals["data_batch"].data[0]))
    assert all(isinstance(d, sg.nd.NDArray) and d.shape == (16, 4) for d in seen)
    (acc,) = [v for _, v in mod.score(it, "acc")]
    assert acc >= 0.9
    # forward on a batch taken by hand, as MXNet loops do; predict pads where it must
    it.reset()
    batch = next(it)
    mod.forward(DataBatch([batch.data[0].as_in_context(sg.cpu(0))], batch.label),
                is_train=False)
    out = mod.get_outputs()[0].asnumpy()
    assert out.shape == (16, 2)
    np.testing.assert_allclose(out.sum(1), 1, rtol=1e-5)
    assert mod.predict(NDArrayIter(x[:10], batch_size=16)).shape == (10, 2)
