"""The model zoo: structure, parameter counts, JSON round trip, `symgraph zoo`.

Parameter counts follow the usual convention (see symgraph.models): every
learnable argument -- weights, biases, BatchNorm gamma and beta -- but not
the BatchNorm moving statistics. Shape inference only; nothing executes.
"""
import json

import pytest

import symgraph as sg
from symgraph.cli import main
from symgraph.models import (ModelError, count_parameters, data_shapes, get_model, list_models,
                             model_info, parameter_shapes)
from symgraph.symbol import load_json

# name -> (parameters, image shape); 1000 classes unless the model's default
# differs. Published figures: VGG and ResNet v1 as torchvision and the
# papers count them; GoogLeNet and Inception-v3 without auxiliary heads;
# AlexNet single tower (62,378,344 is the figure at 227x227, where the last
# pooling layer gives 6x6; 224x224 gives 5x5).
PUBLISHED = {
    "alexnet": (50_844_008, (3, 224, 224)),
    "vgg11": (132_863_336, None), "vgg13": (133_047_848, None),
    "vgg16": (138_357_544, None), "vgg19": (143_667_240, None),
    "vgg11-bn": (132_868_840, None), "vgg13-bn": (133_053_736, None),
    "vgg16-bn": (138_365_992, None), "vgg19-bn": (143_678_248, None),
    "googlenet": (6_998_552, None),
    "inception-bn": (11_295_240, None),  # MXNet's Inception-BN, as its checkpoints
    "inception-v3": (23_834_568, None),
    "resnet-v1-18": (11_689_512, None), "resnet-v1-34": (21_797_672, None),
    "resnet-v1-50": (25_557_032, None), "resnet-v1-101": (44_549_160, None),
    "resnet-v1-152": (60_192_808, None),
    "mlp": (109_386, None),  # 784*128+128 + 128*64+64 + 64*10+10
    # convolutions 3*64*9 + 64*128*9 + 2*128*128*9 + 128*256*9 + 256*512*9 +
    # 2*512*512*9 = 6,563,520; BN gamma/beta 2*(64+3*128+256+3*512) = 4,480;
    # fc 512*10 (no bias) = 5,120 -- the recipe's 6.57M
    "resnet9-dawn": (6_573_120, None),
}

# ResNet v2 moves BatchNorm: per unit one BN over the unit's input (instead of
# one after the last convolution and one on the projection), plus bn1 over
# the last stage and bn_data (3 channels). v2 - v1 in BN channels, times 2:
#   basic (18/34): first units' inputs 64+128+256 minus their widths 128+256+512,
#     minus projection BNs 128+256+512, plus 512 + 3  -> -829 channels
#   bottleneck: inputs 64+256+512+1024 minus widths 256+512+1024+2048, minus
#     projection BNs of the same widths, plus 2048 + 3 -> -3773 channels
# basic blocks (18/34) also get MXNet's stage-1 projection, a 64x64 1x1
# convolution without bias: +4,096
RESNET_V2 = {18: 11_689_512 - 2 * 829 + 4_096, 34: 21_797_672 - 2 * 829 + 4_096,
             50: 25_557_032 - 2 * 3773, 101: 44_549_160 - 2 * 3773,
             152: 60_192_808 - 2 * 3773}
for _d, _n in RESNET_V2.items():
    PUBLISHED[f"resnet-{_d}"] = (_n, None)
# CIFAR ResNet-20 v1: the paper's 269,722 (identity shortcuts that pad with
# zeros) plus the two 1x1 projections MXNet's files use, 16*32+2*32 and
# 32*64+2*64 -> +2,752
PUBLISHED["resnet-v1-cifar-20"] = (269_722 + 2_752, None)

REQUIRED = ["alexnet", "vgg11", "vgg13", "vgg16", "vgg19", "vgg16-bn", "googlenet",
            "inception-bn", "inception-v3", "resnet-18", "resnet-34", "resnet-50", "resnet-101",
            "resnet-152", "resnet-v1-50", "resnet-cifar-20", "mlp"]


def test_zoo_lists_the_classic_nets():
    names = list_models()
    for name in REQUIRED:
        assert name in names
    assert len(names) == len(set(names))


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_count_matches_published(name):
    count, shape = PUBLISHED[name]
    info = model_info(name)
    shape = shape or info.image_shape
    net = get_model(name, image_shape=shape)
    assert count_parameters(net, shape) == count


def test_alexnet_at_227_has_the_usually_published_count():
    net = get_model("alexnet", image_shape="3,227,227")
    assert count_parameters(net, (3, 227, 227)) == 62_378_344


@pytest.mark.parametrize("name,size,classes", [
    ("alexnet", 224, 1000), ("vgg16", 224, 1000), ("vgg11-bn", 224, 1000),
    ("googlenet", 224, 1000), ("inception-bn", 224, 1000), ("inception-v3", 299, 1000),
    ("resnet-50", 224, 1000), ("resnet-v1-18", 224, 1000), ("resnet-cifar-20", 32, 10),
    ("mlp", 28, 10), ("resnet9-dawn", 32, 10)])
def test_shapes_infer_at_the_classic_size(name, size, classes):
    net = get_model(name)
    shapes = data_shapes(name, 2)
    assert shapes["data"][-1] == size
    args, outs, aux = net.infer_shape(**shapes)
    assert outs == [(2, classes)]
    assert all(s is not None for s in args + aux)
    assert net.list_outputs() == ["softmax_output"]
    assert net.list_arguments()[0] == "data" and net.list_arguments()[-1] == "softmax_label"


@pytest.mark.parametrize("name", ["alexnet", "vgg16-bn", "googlenet", "inception-bn",
                                  "inception-v3", "resnet-18", "resnet-v1-50", "mlp",
                                  "resnet9-dawn"])
def test_json_round_trip(name):
    net = get_model(name)
    text = net.tojson()
    doc = json.loads(text)
    assert {"nodes", "arg_nodes", "node_row_ptr", "heads"} <= set(doc)
    back = load_json(text)
    assert back.list_arguments() == net.list_arguments()
    assert back.list_auxiliary_states() == net.list_auxiliary_states()
    assert back.list_outputs() == net.list_outputs()
    shapes = data_shapes(name, 1)
    assert back.infer_shape(**shapes) == net.infer_shape(**shapes)
    assert back.tojson() == text  # a loaded file writes back unchanged


def test_names_follow_mxnet_example_symbols():
    # spot checks of parameter names MXNet's checkpoints use
    expect = {
        "alexnet": ["convolution0_weight", "fullyconnected2_bias"],
        "vgg16": ["conv1_1_weight", "conv5_3_bias", "fc6_weight", "fc8_bias"],
        "vgg16-bn": ["bn1_1_gamma", "bn5_3_beta"],
        "googlenet": ["conv_conv1_weight", "conv_in3a_3x3_reduce_weight",
                      "conv_in5b_proj_bias", "fullyconnected0_weight"],
        "inception-bn": ["conv_1_weight", "bn_3a_double_3x3_1_gamma", "conv_4e_3x3_weight",
                         "fullyconnected0_weight"],
        "inception-v3": ["conv_conv2d_weight", "mixed_10_tower_1_mixed_conv_1_conv2d_weight",
                         "fc1_weight"],
        "resnet-50": ["bn_data_gamma", "conv0_weight", "stage1_unit1_sc_weight",
                      "stage4_unit3_conv3_weight", "bn1_beta", "fc1_weight"],
        "resnet-v1-50": ["stage1_unit1_conv1sc_weight", "stage1_unit1_sc_gamma"],
    }
    for name, params in expect.items():
        args = get_model(name).list_arguments()
        for p in params:
            assert p in args, (name, p)
    aux = get_model("resnet-50").list_auxiliary_states()
    assert aux[0] == "bn_data_moving_mean" and "bn1_moving_var" in aux


def test_resnet9_dawn_layers_scale_and_label_smoothing():
    """The DAWNBench ResNet-9: conv-BN-ReLU blocks with learned gamma, max
    pools, residual adds after layers 1 and 3, a global max pool, a
    bias-free classifier scaled by 0.125 and smooth_alpha 0.2 by default --
    all of it in the MXNet symbol JSON."""
    net = get_model("resnet9-dawn")
    nodes = {n["name"]: n for n in json.loads(net.tojson())["nodes"]}
    assert nodes["fc_scale"]["op"] == "_mul_scalar"
    assert float(nodes["fc_scale"]["attrs"]["scalar"]) == 0.125
    assert nodes["fc"]["attrs"]["no_bias"] == "True"
    assert float(nodes["softmax"]["attrs"]["smooth_alpha"]) == 0.2
    assert nodes["pool"]["attrs"]["global_pool"] == "True"
    assert nodes["pool"]["attrs"]["pool_type"] == "max"
    assert nodes["layer1_add"]["op"] == nodes["layer3_add"]["op"] == "elemwise_add"
    assert "layer2_add" not in nodes
    assert all(nodes[f"{b}_bn"]["attrs"]["fix_gamma"] == "False"
               for b in ("prep", "layer1", "layer1_res1", "layer2", "layer3_res2"))
    shapes = parameter_shapes(net, (3, 32, 32))
    assert shapes["prep_conv_weight"] == (64, 3, 3, 3)
    assert shapes["layer1_res2_conv_weight"] == (128, 128, 3, 3)
    assert shapes["layer3_conv_weight"] == (512, 256, 3, 3)
    assert shapes["fc_weight"] == (10, 512) and "fc_bias" not in shapes
    # the residual input is the pooled value: 16x16 after layer 1, 4x4 after layer 3
    internals = net.get_internals()
    _, outs, _ = internals.infer_shape(data=(2, 3, 32, 32))
    by_name = dict(zip(internals.list_outputs(), outs))
    assert by_name["layer1_add_output"] == (2, 128, 16, 16)
    assert by_name["layer3_add_output"] == (2, 512, 4, 4)
    assert by_name["pool_output"] == (2, 512, 1, 1)
    # an option of the builder, and a refused option elsewhere
    plain = get_model("resnet9-dawn", smooth_alpha=0.0, num_classes=100)
    node = {n["name"]: n for n in json.loads(plain.tojson())["nodes"]}["softmax"]
    assert float(node["attrs"]["smooth_alpha"]) == 0.0
    assert plain.infer_shape(data=(1, 3, 32, 32))[1] == [(1, 100)]
    with pytest.raises(ModelError, match="takes no options"):
        get_model("mlp", smooth_alpha=0.1)
    with pytest.raises(ModelError, match="bad option"):
        get_model("resnet9-dawn", smoothing=0.1)


def test_resnet_shortcuts_v1_as_the_papers_v2_as_mxnet():
    """v1 projects only where shapes change (the papers' counts); v2 projects
    in every stage's first unit, as MXNet's resnet.py, so its checkpoints'
    parameter names match."""
    v1 = get_model("resnet-v1-18").list_arguments()
    assert "stage1_unit1_conv1sc_weight" not in v1  # 64 -> 64, stride 1: identity
    assert "stage2_unit1_conv1sc_weight" in v1
    v2 = parameter_shapes(get_model("resnet-18"), (3, 224, 224))
    assert v2["stage1_unit1_sc_weight"] == (64, 64, 1, 1)
    assert "stage2_unit1_sc_weight" in v2
    shapes = parameter_shapes(get_model("resnet-50"), (3, 224, 224))
    assert shapes["stage1_unit1_sc_weight"] == (256, 64, 1, 1)
    assert shapes["stage4_unit1_conv2_weight"] == (512, 512, 3, 3)


def test_any_depth_and_custom_classes():
    net = get_model("resnet-cifar-32", num_classes=100)  # not registered: 6n+2
    assert net.infer_shape(**data_shapes("resnet-cifar-32", 3))[1] == [(3, 100)]
    assert "stage3_unit5_conv2_weight" in net.list_arguments()
    assert "stage3_unit6_conv2_weight" not in net.list_arguments()
    small = get_model("inception-bn", num_classes=10, image_shape=(3, 28, 28))
    assert "conv_in3a_1x1_weight" in small.list_arguments()  # the small variant
    assert small.infer_shape(data=(2, 3, 28, 28))[1] == [(2, 10)]


def test_automatic_names_restart_for_every_model():
    a, b = get_model("alexnet"), get_model("alexnet")
    assert a.list_arguments() == b.list_arguments()
    assert a.list_arguments()[1] == "convolution0_weight"


@pytest.mark.parametrize("call,msg", [
    (lambda: get_model("vgg17"), "unknown model 'vgg17'; did you mean"),
    (lambda: get_model("resnet-51"), "no ImageNet ResNet has 51 layers"),
    (lambda: get_model("resnet-cifar-33"), "no CIFAR ResNet has 33 layers"),
    (lambda: get_model("vgg16", image_shape="3,224"), "bad image shape"),
    (lambda: get_model("mlp", num_classes=0), "num_classes must be positive"),
])
def test_bad_requests_raise_symgraph_errors(call, msg):
    with pytest.raises(sg.SymgraphError, match=msg):
        call()
    assert issubclass(ModelError, sg.SymgraphError)


def test_cli_lists_writes_and_prints(tmp_path, capsys):
    assert main(["zoo"]) == 0
    listing = capsys.readouterr().out
    assert "vgg16 " in listing and "inception-v3" in listing and "3,299,299" in listing
    out = tmp_path / "sub" / "net.json"
    out.parent.mkdir()  # a missing folder is an error (test_bad_input), not made
    assert main(["zoo", "resnet-cifar-20", "-o", str(out), "--classes", "100"]) == 0
    assert capsys.readouterr().out == f"wrote {out}\n"
    net = sg.sym.load(str(out))
    assert net.infer_shape(data=(2, 3, 32, 32))[1] == [(2, 100)]
    assert not [p for p in out.parent.iterdir() if p.name != "net.json"]  # no temp left
    assert main(["zoo", "mlp", "--image-shape", "1,8,8"]) == 0
    printed = capsys.readouterr().out
    assert load_json(printed).infer_shape(data=(4, 1, 8, 8))[1] == [(4, 10)]


@pytest.mark.parametrize("argv,msg", [
    (["zoo", "nonet"], "unknown model 'nonet'"),
    (["zoo", "vgg16", "--image-shape", "3,x,224"], "bad image shape"),
    (["zoo", "--classes", "10"], "give a model name"),
    # a trailing stray x once vanished: 3,224,224,x became (3, 224, 224)
    (["zoo", "vgg16", "--image-shape", "3,224,224,x"], "'3,224,224,x': an empty dimension"),
    (["zoo", "vgg16", "--image-shape", "3x224x"], "'3x224x': an empty dimension"),
    (["zoo", "vgg16", "--image-shape", "3,224,22a"], "'22a' is not a positive whole number"),
])
def test_cli_bad_input_exits_2_with_one_line(argv, msg, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1


def test_image_shape_by_comma_or_x():
    from symgraph.models import parse_image_shape
    assert parse_image_shape("3,224,224") == parse_image_shape("3x224x224") == (3, 224, 224)
    assert parse_image_shape((1, 28, 28)) == (1, 28, 28)


def test_cli_unwritable_output_is_one_line(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("x")
    out = tmp_path / "notes.txt" / "mlp.json"
    assert main(["zoo", "mlp", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"symgraph: error: cannot write {out}: ") and err.count("\n") == 1


def test_cli_quiet_when_the_reader_goes_away():
    # `symgraph zoo vgg16 | head`: the reader is gone before the JSON is written
    import subprocess
    import sys
    p = subprocess.Popen([sys.executable, "-m", "symgraph.cli", "zoo", "vgg16"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=120) == 141 and err == b""  # 128 + SIGPIPE, as cat exits
