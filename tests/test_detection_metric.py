"""MApMetric / VOC07MApMetric against average precisions worked out by hand
from the precision/recall points of a small case, with difficult boxes,
duplicates, padding rows and classes without detections."""
import numpy as np
import pytest

import symgraph as sg
from symgraph.train import TrainError
from symgraph.train.metric import MApMetric, VOC07MApMetric

PAD = [-1] * 6

# class 0: three ground truths A, B, C and a difficult one D; class 1: one, never detected
LABEL = np.float32([[
    [0, 0.0, 0.0, 0.2, 0.2, 0],    # A
    [0, 0.5, 0.5, 0.7, 0.7, 0],    # B
    [0, 0.1, 0.6, 0.3, 0.8, 0],    # C (missed)
    [0, 0.4, 0.0, 0.6, 0.2, 1],    # D, difficult
    [1, 0.8, 0.8, 1.0, 1.0, 0],    # class 1
    PAD,
]])
# detections of class 0, best score first: A (TP), A again (duplicate: FP),
# D (difficult: ignored), B (TP), nothing (FP); padding rows in between
DETS = np.float32([[
    [0, 0.60, 0.80, 0.00, 0.95, 0.15],   # FP: no overlap
    PAD,
    [0, 0.90, 0.00, 0.00, 0.20, 0.20],   # TP on A
    [0, 0.80, 0.01, 0.00, 0.20, 0.20],   # FP: A is taken
    [0, 0.75, 0.40, 0.00, 0.60, 0.20],   # on D: neither
    [0, 0.70, 0.50, 0.50, 0.70, 0.71],   # TP on B (IoU 0.95)
    PAD,
]])

# By hand, class 0, in score order TP, FP, TP, FP with 3 positives (D not counted):
#   recall    1/3, 1/3, 2/3, 2/3
#   precision 1,   1/2, 2/3, 1/2
# area rule: the precision envelope is 1 up to recall 1/3, 2/3 up to 2/3, 0 after:
#   AP = 1/3 * 1 + 1/3 * 2/3 + 1/3 * 0 = 5/9
# 11 points: t = 0, .1, .2, .3 -> 1 (recall 1/3 >= t); t = .4, .5, .6 -> 2/3; t >= .7 -> 0:
#   AP = (4 * 1 + 3 * 2/3) / 11 = 6/11
# class 1: one positive, no detection -> AP 0 under both rules
AREA_AP0, VOC07_AP0 = 5 / 9, 6 / 11


@pytest.mark.parametrize("klass, ap0", [(MApMetric, AREA_AP0), (VOC07MApMetric, VOC07_AP0)])
def test_hand_computed_ap(klass, ap0):
    m = klass()
    m.update([LABEL], [DETS])
    name, value = m.get()
    assert name == "mAP"
    assert value == pytest.approx((ap0 + 0.0) / 2, abs=1e-9)
    named = klass(class_names=["a", "b"])
    named.update([sg.nd.array(LABEL)], [sg.nd.array(DETS)])  # NDArrays work too
    names, values = named.get()
    assert names == ["a", "b", "mAP"]
    assert values == pytest.approx([ap0, 0.0, ap0 / 2], abs=1e-9)


def test_difficult_counts_when_asked_and_width_five():
    # use_difficult: D is a positive and the detection on it a TP:
    #   TP FP TP TP FP of 4 -> recall 1/4 1/4 2/4 3/4 3/4, precision 1 1/2 2/3 3/4 3/5
    #   envelope 1 to 1/4, 3/4 to 3/4: AP = 1/4 + 2/4 * 3/4 = 5/8
    m = MApMetric(use_difficult=True, class_names=["a", "b"])
    m.update([LABEL], [DETS])
    assert m.get()[1][0] == pytest.approx(5 / 8)
    # labels of width 5 have no difficult flag: the same as use_difficult
    m5 = MApMetric(class_names=["a", "b"])
    m5.update([LABEL[:, :, :5]], [DETS])
    assert m5.get()[1][0] == pytest.approx(5 / 8)


def test_batches_accumulate_and_images_without_gt_are_skipped():
    m = VOC07MApMetric()
    # the same case split over two images of one batch gives the same AP as one image
    # when the detections are matched per image: here image 2 repeats image 1
    m.update([np.concatenate([LABEL, LABEL])], [np.concatenate([DETS, DETS])])
    # 2x: TP TP FP FP TP TP FP FP over 6 positives -> recall 1/6 2/6 2/6 2/6 3/6 4/6 ..
    # precision 1 1 2/3 1/2 3/5 2/3 4/7 1/2: 11-point: t<=.3 -> 1; .4..0.6 -> 2/3; .7+ -> 0
    assert m.get()[1] == pytest.approx((6 / 11) / 2)
    # an image whose labels are all padding is skipped, detections and all (as MXNet's)
    m.update([np.float32([[PAD] * 6])], [DETS])
    assert m.get()[1] == pytest.approx((6 / 11) / 2)


def test_local_global_reset_and_names():
    m = sg.metric.create("voc07_map")
    assert isinstance(m, VOC07MApMetric)
    assert isinstance(sg.metric.create("map"), MApMetric)
    assert np.isnan(m.get()[1])
    m.update([LABEL], [DETS])
    m.reset_local()
    assert np.isnan(m.get()[1])
    assert m.get_global()[1] == pytest.approx(VOC07_AP0 / 2)
    m.reset()
    assert np.isnan(m.get_global()[1])
    # a perfect detector scores 1
    perfect = LABEL.copy()[:, :5]
    dets = np.concatenate([perfect[:, :, :1], np.ones_like(perfect[:, :, :1]),
                           perfect[:, :, 1:5]], axis=2)
    p = MApMetric(use_difficult=True)
    p.update([LABEL], [dets])
    assert p.get()[1] == pytest.approx(1.0)


def test_bad_shapes():
    m = MApMetric()
    with pytest.raises(TrainError, match=r"labels must be \(batch, objects, 5 or 6\)"):
        m.update([LABEL[:, :, :4]], [DETS])
    with pytest.raises(TrainError, match=r"detections must be \(batch, anchors, 6\)"):
        m.update([LABEL], [DETS[:, :, :5]])
    with pytest.raises(TrainError, match="1 label rows but 2 detection rows"):
        m.update([LABEL], [np.concatenate([DETS, DETS])])
    with pytest.raises(TrainError, match="output 1"):
        MApMetric(pred_idx=1).update([LABEL], [DETS])
    with pytest.raises(TrainError, match="class_names"):
        MApMetric(class_names="ab")
