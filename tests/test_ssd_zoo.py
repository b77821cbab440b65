"""The SSD zoo nets (symgraph/models/ssd.py), built as MXNet's example/ssd.

Shape inference at the nominal sizes with anchor counts computed here from
the feature-map sizes; the training and deploy symbols' outputs; `symgraph
zoo` and the JSON round trip; one training step of a narrow SSD-300.
"""
import json

import numpy as np
import pytest

import symgraph as sg
from symgraph.cli import main
from symgraph.models import ModelError, data_shapes, get_model, list_models, model_info
from symgraph.models.ssd import CONFIGS
from symgraph.symbol import load_json

SSD = ["ssd-300-vgg16", "ssd-512-vgg16", "ssd-300-resnet50"]


def _out(size, kernel, stride, pad, ceil=False):
    span = size + 2 * pad - kernel
    return (-(-span // stride) if ceil else span // stride) + 1


def feature_sizes(name, size):
    """The feature maps' side, worked out by hand from the base nets."""
    cfg = CONFIGS[name]
    if cfg.base == "vgg16_reduced":
        s = _out(_out(size, 2, 2, 0), 2, 2, 0)     # pool1, pool2
        s = _out(s, 2, 2, 0, ceil=True)            # pool3, pooling_convention='full'
        sides = [s, _out(s, 2, 2, 0)]              # relu4_3; pool4, then pool5 3x3/1/1 keeps it
    else:  # ResNet-50: 7x7/2 stem, 3x3/2 pooling, stages 2-4 stride 2
        s = _out(_out(size, 7, 2, 3), 3, 2, 1)
        s3 = _out(_out(s, 3, 2, 1), 3, 2, 1)
        sides = [s3, _out(s3, 3, 2, 1)]
    for stride, pad in zip(cfg.strides[2:], cfg.pads[2:]):
        sides.append(_out(sides[-1], 3, stride, pad))
    return sides


def expected_anchors(name, size):
    cfg = CONFIGS[name]
    sides = feature_sizes(name, size)
    return sum(side * side * (len(s) + len(r) - 1)
               for side, s, r in zip(sides, cfg.sizes, cfg.ratios))


def test_anchor_counts_are_mxnets():
    # the published SSD300 figure; SSD-512 as MXNet's config builds it (its
    # last map is 2x2, a stride-1 padded 3x3, not the paper's 1x1)
    assert feature_sizes("ssd-300-vgg16", 300) == [38, 19, 10, 5, 3, 1]
    assert expected_anchors("ssd-300-vgg16", 300) == 8732
    assert feature_sizes("ssd-512-vgg16", 512) == [64, 32, 16, 8, 4, 2, 2]
    assert expected_anchors("ssd-512-vgg16", 512) == 24576
    assert feature_sizes("ssd-300-resnet50", 300) == [19, 10, 5, 3, 2, 1]
    assert expected_anchors("ssd-300-resnet50", 300) == 2268


def test_the_ssd_nets_are_in_the_zoo():
    names = list_models()
    for name in SSD:
        assert name in names
        info = model_info(name)
        assert info.num_classes == 20
        assert info.image_shape == (3, CONFIGS[name].nominal, CONFIGS[name].nominal)


@pytest.mark.parametrize("name", SSD)
@pytest.mark.parametrize("classes", [20, 3])
def test_training_symbol_infers(name, classes):
    size = CONFIGS[name].nominal
    net = get_model(name, num_classes=None if classes == 20 else classes)
    anchors = expected_anchors(name, size)
    assert net.list_outputs() == ["cls_prob_output", "loc_loss_output", "cls_label_output",
                                  "det_out_output"]
    args = net.list_arguments()
    assert "data" in args and "label" in args  # (relu4_3_scale comes first, as in MXNet)
    arg_shapes, outs, aux = net.infer_shape(data=(2, 3, size, size), label=(2, 4, 5))
    assert outs == [(2, classes + 1, anchors), (2, 4 * anchors), (2, anchors), (2, anchors, 6)]
    assert all(s is not None for s in arg_shapes + aux)
    shapes = dict(zip(args, arg_shapes))
    if CONFIGS[name].base == "vgg16_reduced":
        assert shapes["relu4_3_scale"] == (1, 512, 1, 1)
        assert shapes["fc6_weight"] == (1024, 512, 3, 3)
        assert shapes["fc7_weight"] == (1024, 1024, 1, 1)
        assert shapes["relu4_3_cls_pred_conv_weight"] == (4 * (classes + 1), 512, 3, 3)
        assert shapes["relu7_loc_pred_conv_weight"] == (6 * 4, 1024, 3, 3)
    else:
        assert shapes["_plus12_cls_pred_conv_weight"] == (4 * (classes + 1), 1024, 3, 3)
        assert shapes["_plus15_loc_pred_conv_weight"] == (6 * 4, 2048, 3, 3)
        assert "bn_data_gamma" in shapes and not any("scale" in a for a in args)


@pytest.mark.parametrize("name", SSD)
def test_deploy_symbol_infers(name):
    size = CONFIGS[name].nominal
    net = get_model(name, mode="deploy")
    assert net.list_outputs() == ["detection_output"]
    assert "label" not in net.list_arguments()
    _, outs, _ = net.infer_shape(data=(1, 3, size, size))
    assert outs == [(1, expected_anchors(name, size), 6)]


def test_mxnet_details():
    net = get_model("ssd-300-vgg16")
    doc = json.loads(net.tojson())
    nodes = {n["name"]: n for n in doc["nodes"]}
    scale = nodes["relu4_3_scale"]["attrs"]
    assert json.loads(scale["__init__"]) == ["constant", {"value": 20}]
    assert scale["__shape__"] == "(1, 512, 1, 1)" and scale["__wd_mult__"] == "0.1"
    assert nodes["relu4_3_norm"]["op"] == "L2Normalization"
    assert nodes["relu4_3_norm"]["attrs"]["mode"] == "channel"
    assert nodes["pool5"]["attrs"]["stride"] == "(1, 1)"
    assert nodes["fc6"]["attrs"]["dilate"] == "(6, 6)"
    assert nodes["pool3"]["attrs"]["pooling_convention"] == "full"
    assert nodes["relu7_cls_pred_conv_bias"]["attrs"]["__lr_mult__"] == "2.0"
    # MXNet's fixed steps at 300 (8/300 ... 300/300)
    assert nodes["relu4_3_anchors"]["attrs"]["steps"].startswith("(0.0266")
    assert nodes["relu4_3_anchors"]["attrs"]["sizes"] == "(0.1,0.141)"
    cls_prob = nodes["cls_prob"]["attrs"]
    assert cls_prob["multi_output"] == "True" and cls_prob["use_ignore"] == "True"
    assert cls_prob["normalization"] == "valid" and cls_prob["ignore_label"] == "-1"
    assert nodes["loc_loss"]["attrs"]["normalization"] == "valid"
    assert nodes["cls_label"]["attrs"]["grad_scale"] == "0"
    assert nodes["multibox_target"]["attrs"]["negative_mining_ratio"] == "3"
    # at another size the steps follow the feature maps, as MXNet's factory
    other = json.loads(get_model("ssd-300-vgg16", image_shape=(3, 320, 320)).tojson())
    anchors = [n for n in other["nodes"] if n["name"] == "relu4_3_anchors"][0]
    assert anchors["attrs"]["steps"] == "(-1.0,-1.0)"


def test_bad_options():
    with pytest.raises(ModelError, match="bad option"):
        get_model("ssd-300-vgg16", colour="red")
    with pytest.raises(sg.SymgraphError, match="mode must be"):
        get_model("ssd-300-vgg16", mode="test")


@pytest.mark.parametrize("name,mode", [("ssd-300-vgg16", "train"),
                                       ("ssd-300-resnet50", "deploy")])
def test_zoo_cli_and_json_round_trip(name, mode, tmp_path):
    out = tmp_path / "ssd.json"
    if mode == "train":
        assert main(["zoo", name, "-o", str(out)]) == 0
        text = out.read_text()
        net = get_model(name)
        assert text == net.tojson()
    else:
        net = get_model(name, mode=mode)
        text = net.tojson()
    back = sg.sym.load_json(text) if hasattr(sg.sym, "load_json") else load_json(text)
    assert back.list_arguments() == net.list_arguments()
    assert back.list_auxiliary_states() == net.list_auxiliary_states()
    assert back.list_outputs() == net.list_outputs()
    shapes = {"data": (1, 3, 300, 300)}
    if mode == "train":
        shapes["label"] = (1, 2, 5)
        back = sg.sym.load(str(out))
    assert back.infer_shape(**shapes) == net.infer_shape(**shapes)
    assert back.tojson() == text


def _boxes(rng, batch, classes):
    """Square boxes about the centre, one near each feature map's smallest
    anchor size, so that every map gets a matched anchor; later images get
    fewer boxes, padded with rows of class -1."""
    sides = [0.1, 0.2, 0.37, 0.54, 0.71, 0.88]
    label = np.full((batch, len(sides), 5), -1.0, np.float32)
    for b in range(batch):
        for k, side in enumerate(sides[:len(sides) - 2 * b]):
            cx, cy = 0.5 + rng.uniform(-0.02, 0.02, 2)
            label[b, k] = (rng.integers(0, classes), cx - side / 2, cy - side / 2,
                           cx + side / 2, cy + side / 2)
    return label


def test_a_narrow_ssd_trains_one_step():
    classes, batch = 3, 2
    net = get_model("ssd-300-vgg16", num_classes=classes, width=1 / 16)
    rng = np.random.default_rng(0)
    data = rng.normal(size=(batch, 3, 300, 300)).astype(np.float32)
    label = _boxes(rng, batch, classes)
    mod = sg.mod.Module(net, data_names=("data",), label_names=("label",))
    mod.bind(data_shapes=[("data", data.shape)], label_shapes=[("label", label.shape)])
    mod.init_params(initializer=sg.init.Xavier())
    mod.init_optimizer(optimizer="sgd", optimizer_params={"learning_rate": 0.01})
    before, _ = mod.get_params()
    before = {k: v.asnumpy().copy() for k, v in before.items()}
    assert np.all(before["relu4_3_scale"] == 20.0)  # the __init__ hint
    assert before["relu4_3_scale"].shape == (1, 32, 1, 1)
    mod.forward_backward(sg.io.DataBatch([data], [label]))
    cls_prob, loc_loss, cls_label, det = (o.asnumpy() for o in mod.get_outputs())
    anchors = 8732
    assert cls_prob.shape == (batch, classes + 1, anchors)
    assert np.all(np.isfinite(cls_prob)) and np.allclose(cls_prob.sum(axis=1), 1.0, atol=1e-4)
    assert loc_loss.shape == (batch, 4 * anchors)
    assert np.all(np.isfinite(loc_loss)) and loc_loss.sum() > 0  # some anchors matched
    # targets: positives carry a class 1..classes, mined negatives 0, the rest -1
    assert set(np.unique(cls_label)) <= {-1.0, 0.0, 1.0, 2.0, 3.0}
    assert (cls_label > 0).any() and (cls_label == 0).any() and (cls_label == -1).any()
    assert det.shape == (batch, anchors, 6) and np.all(np.isfinite(det))
    # every map has a matched anchor, so every parameter gets a gradient
    grads = {k: v.asnumpy() for k, v in mod.get_grads().items()}
    assert set(grads) == set(before)
    assert all(np.all(np.isfinite(g)) for g in grads.values())
    assert [k for k, g in grads.items() if not np.any(g != 0)] == []
    mod.update()
    after, _ = mod.get_params()
    for name in ("conv1_1_weight", "relu4_3_scale", "relu4_3_loc_pred_conv_bias",
                 "multi_feat_5_conv_3x3_relu_cls_pred_conv_bias"):
        assert not np.array_equal(after[name].asnumpy(), before[name]), name
    assert all(np.all(np.isfinite(v.asnumpy())) for v in after.values())


def test_the_deploy_net_runs():
    net = get_model("ssd-300-vgg16", mode="deploy", num_classes=2, width=1 / 16)
    ex = net.simple_bind(sg.cpu(), grad_req="null", data=(1, 3, 300, 300))
    rng = np.random.default_rng(1)
    for name, arr in ex.arg_dict.items():
        if name != "data":
            arr[:] = rng.normal(scale=0.05, size=arr.shape).astype(np.float32)
    ex.arg_dict["data"][:] = rng.normal(size=(1, 3, 300, 300)).astype(np.float32)
    det = ex.forward()[0].asnumpy()
    assert det.shape == (1, 8732, 6)
    kept = det[0][det[0, :, 0] >= 0]
    assert set(np.unique(kept[:, 0])) <= {0.0, 1.0}
    assert np.all((kept[:, 1] >= 0) & (kept[:, 1] <= 1))


@pytest.mark.parametrize("mode", ["train", "deploy"])
def test_zoo_cli_mode_writes_the_symbol_and_says_so(mode, tmp_path, capsys):
    out = tmp_path / f"ssd-{mode}.json"
    assert main(["zoo", "ssd-300-vgg16", "--mode", mode, "--classes", "3", "-o", str(out)]) == 0
    assert capsys.readouterr().out == f"wrote {out}\n"
    net = sg.sym.load(str(out))
    want = get_model("ssd-300-vgg16", num_classes=3, mode=mode)
    assert net.list_outputs() == want.list_outputs()
    assert net.list_outputs()[-1] == ("det_out_output" if mode == "train" else
                                      "detection_output")
    assert ("label" in net.list_arguments()) == (mode == "train")


def test_zoo_cli_mode_needs_a_detector(capsys):
    assert main(["zoo", "vgg16", "--mode", "deploy"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("symgraph: error: ") and "--mode is for the SSD" in err
    assert main(["zoo", "--mode", "train"]) == 2
    assert main(["zoo", "ssd-300-vgg16", "--mode", "test"]) == 2


def test_data_shapes_of_a_detector_name_its_label():
    shapes = data_shapes("ssd-300-vgg16", 4)
    assert shapes == {"data": (4, 3, 300, 300), "label": (4, 16, 5)}
    shapes = data_shapes("ssd-300-resnet50", 2, "3,320,320", max_objects=8, object_width=6)
    assert shapes == {"data": (2, 3, 320, 320), "label": (2, 8, 6)}
    # the shapes are the ones the training symbol reads: it infers with them
    net = get_model("ssd-96-resnet18", num_classes=3, width=0.25)
    _, outs, _ = net.infer_shape(**data_shapes("ssd-96-resnet18", 2))
    assert outs[0][0] == 2 and outs[3][2] == 6
    assert data_shapes("ssd-300-vgg16", 1, mode="deploy") == {"data": (1, 3, 300, 300)}
    assert data_shapes("resnet-cifar-20", 3) == {"data": (3, 3, 32, 32), "softmax_label": (3,)}
    with pytest.raises(ModelError, match="object_width"):
        data_shapes("ssd-300-vgg16", 1, object_width=4)
    with pytest.raises(ModelError, match="mode must be"):
        data_shapes("ssd-300-vgg16", 1, mode="test")


def test_the_small_ssd_maps():
    # ResNet-18 v2 at 96: 7x7/2 stem and 3x3/2 pooling (48, 24: stage 1),
    # stages 2-4 stride 2 (12, 6, 3), then the extras 3x3/2 pad 1 (2, 1)
    cfg = CONFIGS["ssd-96-resnet18"]
    sides = [24, 12, 6, 3, 2, 1]
    anchors = sum(side * side * (len(s) + len(r) - 1)
                  for side, s, r in zip(sides, cfg.sizes, cfg.ratios))
    net = get_model("ssd-96-resnet18", num_classes=3, width=0.25)
    arg_shapes, outs, _ = net.infer_shape(data=(2, 3, 96, 96), label=(2, 4, 5))
    assert outs == [(2, 4, anchors), (2, 4 * anchors), (2, anchors), (2, anchors, 6)]
    args = dict(zip(net.list_arguments(), arg_shapes))
    # stage 1 of ResNet-18 is 64 wide, a quarter of it 16; 4 anchors a position there
    assert args["_plus1_cls_pred_conv_weight"] == (4 * 4, 16, 3, 3)
    assert args["_plus7_loc_pred_conv_weight"] == (6 * 4, 128, 3, 3)
    assert model_info("ssd-96-resnet18").image_shape == (3, 96, 96)
