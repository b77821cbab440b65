"""Data iterators: NDArrayIter's last-batch handling and shuffling, the
prefetching iterator, DataDesc/DataBatch."""
import threading

import numpy as np
import pytest

import symgraph as sg
from symgraph.train import TrainError
from symgraph.train.io import DataBatch, DataDesc, DataIter, NDArrayIter, PrefetchingIter, ResizeIter


def _ids(it):
    """The sample ids (data column 0) of each batch of one epoch, and pads."""
    out = []
    for b in it:
        out.append((b.data[0].asnumpy()[:, 0].astype(int).tolist(), b.pad))
    return out


def _data(n=10):
    x = np.stack([np.arange(n), np.arange(n) * 10], axis=1).astype(np.float32)
    return x, np.arange(n).astype(np.float32)


def test_pad_fills_last_batch_from_the_start():
    x, y = _data(10)
    it = NDArrayIter(x, y, batch_size=4, last_batch_handle="pad")
    assert _ids(it) == [([0, 1, 2, 3], 0), ([4, 5, 6, 7], 0), ([8, 9, 0, 1], 2)]
    assert it.num_batches == 3
    it.reset()
    assert len(_ids(it)) == 3


def test_discard_drops_the_incomplete_batch():
    x, y = _data(10)
    it = NDArrayIter(x, y, batch_size=4, last_batch_handle="discard")
    assert _ids(it) == [([0, 1, 2, 3], 0), ([4, 5, 6, 7], 0)]
    assert it.num_batches == 2


def test_roll_over_carries_the_rest_into_the_next_epoch():
    x, y = _data(10)
    it = NDArrayIter(x, y, batch_size=4, last_batch_handle="roll_over")
    assert _ids(it) == [([0, 1, 2, 3], 0), ([4, 5, 6, 7], 0)]
    it.reset()  # 8, 9 lead the next epoch
    assert _ids(it) == [([8, 9, 0, 1], 0), ([2, 3, 4, 5], 0), ([6, 7, 8, 9], 0)]
    it.reset()  # 12 = 3 full batches: nothing left over
    assert _ids(it) == [([0, 1, 2, 3], 0), ([4, 5, 6, 7], 0)]


def test_labels_follow_the_data_and_names_and_dtypes():
    x, y = _data(6)
    it = NDArrayIter(x.astype(np.float64), y, batch_size=3, shuffle=True, seed=3)
    for b in it:
        np.testing.assert_array_equal(b.data[0][:, 0], b.label[0])
        assert b.data[0].dtype == np.float32  # MXNet's iterators give float32
    assert it.provide_data == [("data", (3, 2))]
    assert it.provide_data[0].dtype == "float32"
    assert it.provide_label == [("softmax_label", (3,))]
    multi = NDArrayIter([x, x], {"lab": y}, batch_size=2)
    assert [d.name for d in multi.provide_data] == ["_0_data", "_1_data"]
    assert [d.name for d in multi.provide_label] == ["lab"]
    keep = NDArrayIter(x.astype(np.float64), batch_size=2, dtype=None)
    assert next(keep).data[0].dtype == np.float64 and next(keep).label is None


def test_shuffle_is_a_permutation_per_epoch_repeatable_by_seed():
    x, y = _data(12)
    a = NDArrayIter(x, y, batch_size=4, shuffle=True, seed=7)
    b = NDArrayIter(x, y, batch_size=4, shuffle=True, seed=7)
    e0 = [i for ids, _ in _ids(a) for i in ids]
    assert sorted(e0) == list(range(12)) and e0 != list(range(12))
    a.reset()
    e1 = [i for ids, _ in _ids(a) for i in ids]
    assert sorted(e1) == list(range(12)) and e1 != e0
    assert [i for ids, _ in _ids(b) for i in ids] == e0
    # set_epoch gives what an uninterrupted iterator sees at that epoch
    c = NDArrayIter(x, y, batch_size=4, shuffle=True, seed=7)
    c.set_epoch(1)
    assert [i for ids, _ in _ids(c) for i in ids] == e1


def test_bad_arguments_raise_clear_errors():
    x, y = _data(10)
    with pytest.raises(TrainError, match="last_batch_handle"):
        NDArrayIter(x, y, batch_size=4, last_batch_handle="wrap")
    with pytest.raises(TrainError, match="number of samples"):
        NDArrayIter(x, y[:5], batch_size=4)
    with pytest.raises(TrainError, match="batch_size"):
        NDArrayIter(x, y, batch_size=0)
    with pytest.raises(TrainError, match="no full batch"):
        NDArrayIter(x, y, batch_size=20, last_batch_handle="discard")
    with pytest.raises(TrainError, match="list of arrays"):
        DataBatch(np.zeros(3))


def test_data_desc_and_batch():
    d = DataDesc("data", (4, 3, 8, 8), "float16", "NCHW")
    name, shape = d  # still a (name, shape) pair
    assert (name, shape, d.dtype, d.layout) == ("data", (4, 3, 8, 8), "float16", "NCHW")
    assert DataDesc.get_batch_axis("TNC") == 1
    assert DataDesc.get_list([("a", (2, 3))], [("a", "int32")])[0].dtype == "int32"
    b = DataBatch([np.zeros((2, 3))], [np.zeros(2)], pad=1)
    assert "pad: 1" in repr(b)


def test_prefetching_gives_the_same_batches_and_resets():
    x, y = _data(10)
    base = NDArrayIter(x, y, batch_size=4, shuffle=True, seed=1)
    ref = NDArrayIter(x, y, batch_size=4, shuffle=True, seed=1)
    pre = PrefetchingIter(base, depth=2)
    assert _ids(pre) == _ids(ref)
    pre.reset()
    ref.reset()
    first = next(pre)
    np.testing.assert_array_equal(first.data[0], next(ref).data[0])
    pre.reset()  # mid-epoch: the thread stops, the base resets, reading goes on
    ref.reset()
    assert _ids(pre) == _ids(ref)
    assert pre.provide_data == base.provide_data
    pre.close()


def test_prefetching_runs_ahead_on_a_thread_and_transforms_there():
    produced = threading.Event()
    threads = []

    class Counting(DataIter):
        def __init__(self):
            super().__init__(1)
            self.i = 0

        def next(self):
            self.i += 1
            if self.i == 2:
                produced.set()  # batch 2 made without the consumer asking
            if self.i > 3:
                raise StopIteration
            return DataBatch([np.full((1, 1), self.i)])

        @property
        def provide_data(self):
            return [("data", (1, 1))]

    def transform(b):
        threads.append(threading.current_thread().name)
        return b

    pre = PrefetchingIter(Counting(), depth=2, transform=transform)
    assert next(pre).data[0][0, 0] == 1
    assert produced.wait(timeout=30)
    assert [b.data[0][0, 0] for b in pre] == [2, 3]
    assert set(threads) == {"symgraph-prefetch"}
    with pytest.raises(StopIteration):
        next(pre)


def test_prefetching_raises_the_producers_error_in_the_consumer():
    class Broken(DataIter):
        def next(self):
            raise ValueError("disk on fire")

        @property
        def provide_data(self):
            return []

    pre = PrefetchingIter(Broken())
    with pytest.raises(ValueError, match="disk on fire"):
        next(pre)


def test_resize_iter_makes_epochs_of_a_fixed_length():
    x, y = _data(10)
    it = ResizeIter(NDArrayIter(x, y, batch_size=4, last_batch_handle="discard"), 5)
    assert len(_ids(it)) == 5
    it.reset()
    assert len(_ids(it)) == 5


def test_lazy_public_names():
    assert sg.io.NDArrayIter is NDArrayIter
    assert sg.io.DataBatch is DataBatch
