"""`symgraph viz` and `sg.viz`: pictures checked by parsing what Graphviz's
real `dot` program drew (SVG), against figures computed here from the graph
and the plan, not read back from viz."""
import re
import shutil
import xml.etree.ElementTree as ET

import pytest

import symgraph as sg
from symgraph import cli, viz
from symgraph.graph import Graph

needs_dot = pytest.mark.skipif(shutil.which("dot") is None,
                               reason="Graphviz's dot is not installed (.ci/run installs it)")

SVG = "{http://www.w3.org/2000/svg}"
XLINK = "{http://www.w3.org/1999/xlink}"
DEFAULT_EDGE = "#555555"
SHAPES = (SVG + "polygon", SVG + "path", SVG + "ellipse")


# --------------------------------------------------------------------------
# reading an SVG that dot wrote
# --------------------------------------------------------------------------
def parse_svg(path):
    """``(nodes, edges)``: nodes ``{title: {'fill', 'dashed', 'text'}}``;
    edges a list of ``{'tail', 'head', 'tensor', 'color', 'dashed', 'label'}``."""
    root = ET.parse(path).getroot()
    nodes, edges = {}, []
    for g in root.iter(SVG + "g"):
        cls = g.get("class")
        if cls == "node":
            title = g.find(SVG + "title").text
            shape = next(el for el in g.iter() if el.tag in SHAPES)
            nodes[title] = {"fill": shape.get("fill"),
                            "stroke": shape.get("stroke"),
                            "dashed": shape.get("stroke-dasharray") is not None,
                            "text": [t.text for t in g.iter(SVG + "text")]}
        elif cls == "edge":
            tail, head = g.find(SVG + "title").text.split("->")
            link = g.find(f".//{SVG}a")
            tip = link.get(XLINK + "title") if link is not None else ""
            path = g.find(f".//{SVG}path")
            labels = [t.text for t in g.findall(SVG + "text")]
            edges.append({"tail": tail, "head": head,
                          "tensor": re.sub(r" slot \d+$", "", tip),
                          "color": path.get("stroke"),
                          "dashed": path.get("stroke-dasharray") is not None,
                          "label": labels[0] if labels else None})
    return nodes, edges


def drawn_names(graph, show_params=False):
    """What the picture should hold: every op node, and the variables that
    are data or labels (weights, biases and BatchNorm states are hidden)."""
    param = re.compile(r"_(weight|bias|gamma|beta|moving_mean|moving_var)$")
    return {n.name for n in graph.nodes
            if n.op is not None or show_params or not param.search(n.name)}


def tensor_ids(graph):
    """tensor (output) name -> entry id, from the graph."""
    out = {}
    for i, n in enumerate(graph.nodes):
        for k, name in enumerate(n.output_names()):
            out[name] = graph.row_ptr[i] + k
    return out


def viz_cli(capsys, *argv):
    rc = cli.main(["viz", *map(str, argv)])
    return rc, capsys.readouterr()


def save(net, path):
    path.write_text(net.tojson())
    return path


# --------------------------------------------------------------------------
# fixtures: nets and pictures shared by several tests
# --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def vgg():
    return sg.models.get_model("vgg16")


@pytest.fixture(scope="module")
def googlenet():
    return sg.models.get_model("googlenet")


@pytest.fixture(scope="module")
def vgg_svg(vgg, tmp_path_factory):
    path = tmp_path_factory.mktemp("vgg") / "vgg16.svg"
    viz.render(viz.plot(vgg, shape={"data": (2, 3, 32, 32)}), path)
    return path


# --------------------------------------------------------------------------
# the graph
# --------------------------------------------------------------------------
@needs_dot
def test_vgg16_nodes_are_the_ops_and_inputs(vgg, vgg_svg):
    graph = Graph(vgg.outputs)
    nodes, edges = parse_svg(vgg_svg)
    expected = drawn_names(graph)
    assert set(nodes) == expected
    assert len(nodes) == sum(n.op is not None for n in graph.nodes) + 2  # data, label
    # one edge per tensor read, parameters hidden
    reads = sum(1 for n in graph.nodes for e in n.inputs if e.node.name in expected)
    assert len(edges) == reads


@needs_dot
def test_vgg16_edges_carry_shapes(vgg_svg):
    _, edges = parse_svg(vgg_svg)
    label = {(e["tail"], e["head"]): e["label"] for e in edges}
    # 3x3 convolutions with pad 1 keep 32x32; each 2x2 pooling halves it
    assert label["data", "conv1_1"] == "2x3x32x32"
    assert label["conv1_1", "relu1_1"] == "2x64x32x32"
    assert label["conv3_1", "relu3_1"] == "2x256x8x8"
    assert label["pool5", "flatten"] == "2x512x1x1"
    assert label["fc8", "softmax"] == "2x1000"
    assert all(e["label"] for e in edges), "every tensor's shape is known"


@needs_dot
def test_nodes_coloured_by_op_family_with_key_attributes(vgg_svg):
    nodes, _ = parse_svg(vgg_svg)
    conv = {nodes[f"conv{i}_1"]["fill"] for i in range(1, 6)}
    pool = {nodes[f"pool{i}"]["fill"] for i in range(1, 6)}
    relu = {nodes[f"relu{i}_1"]["fill"] for i in range(1, 6)}
    assert len(conv) == len(pool) == len(relu) == 1
    assert len(conv | pool | relu | {nodes["data"]["fill"]}) == 4
    assert "3x3/1x1, 64" in nodes["conv1_1"]["text"]  # kernel/stride, filters
    assert "4096" in nodes["fc6"]["text"]
    assert "relu" in nodes["relu1_1"]["text"]


@needs_dot
def test_no_shapes_no_edge_labels(vgg, tmp_path):
    path = viz.render(viz.plot(vgg), tmp_path / "v.svg")
    nodes, edges = parse_svg(path)
    assert set(nodes) == drawn_names(Graph(vgg.outputs))
    assert not any(e["label"] for e in edges)


@needs_dot
def test_show_params_draws_weights(vgg, tmp_path):
    graph = Graph(vgg.outputs)
    shown, _ = parse_svg(viz.render(viz.plot(vgg, hide_params=False), tmp_path / "p.svg"))
    assert set(shown) == {n.name for n in graph.nodes}
    assert {"conv1_1_weight", "conv1_1_bias", "fc8_weight"} <= set(shown)
    hidden, _ = parse_svg(viz.render(viz.plot(vgg, hide_params=True), tmp_path / "h.svg"))
    assert not any(name.endswith(("_weight", "_bias")) for name in hidden)


@needs_dot
def test_range_draws_the_nodes_between(vgg, tmp_path, capsys):
    graph = Graph(vgg.outputs)
    # on a path from conv3_1 to conv4_1: descendants of one, ancestors of the other
    index = {n.name: i for i, n in enumerate(graph.nodes)}
    below = {index["conv3_1"]}
    for i, n in enumerate(graph.nodes):
        if any(index[e.node.name] in below for e in n.inputs):
            below.add(i)
    above, todo = set(), [index["conv4_1"]]
    while todo:
        i = todo.pop()
        if i not in above:
            above.add(i)
            todo += [index[e.node.name] for e in graph.nodes[i].inputs]
    expected = {graph.nodes[i].name for i in below & above}
    net = save(vgg, tmp_path / "vgg16.json")
    rc, _ = viz_cli(capsys, net, "--range", "conv3_1:conv4_1", "-o", tmp_path / "r.svg")
    assert rc == 0
    nodes, _ = parse_svg(tmp_path / "r.svg")
    real = {t for t in nodes if not t.endswith("(outside)")}
    assert real == expected and "pool3" in real and "conv2_2" not in real
    assert len(nodes) - len(real) == 1  # pool2's output, drawn as a stub
    rc, err = viz_cli(capsys, net, "--range", "conv3_1:nope", "-o", tmp_path / "x.svg")
    assert rc == 2 and "no node named 'nope'" in err.err


@needs_dot
def test_collapse_draws_one_block_per_unit(tmp_path):
    net = sg.models.get_model("resnet-cifar-20")
    graph = Graph(net.outputs)
    pattern = r"stage\d+_unit\d+"
    units = {re.search(pattern, n.name).group(0) for n in graph.nodes
             if n.op is not None and re.search(pattern, n.name)}
    in_units = {n.name for n in graph.nodes if n.op is not None and re.search(pattern, n.name)}
    rest = drawn_names(graph) - in_units
    nodes, _ = parse_svg(viz.render(viz.plot(net, shape={"data": (2, 3, 32, 32)},
                                             collapse=pattern), tmp_path / "c.svg"))
    blocks = {t for t in nodes if t.startswith("block ")}
    assert len(units) == 9 and len(blocks) == len(units)
    assert set(nodes) - blocks == rest


@needs_dot
def test_inception_nodes_and_concat_shapes(googlenet, tmp_path):
    graph = Graph(googlenet.outputs)
    path = viz.render(viz.plot(googlenet, shape={"data": (2, 3, 224, 224)}), tmp_path / "g.svg")
    nodes, edges = parse_svg(path)
    assert set(nodes) == drawn_names(graph)
    concats = [n for n in graph.nodes if n.op is not None and n.op.name == "Concat"]
    assert len(concats) == 9  # one per inception module
    into = {}
    for e in edges:
        into.setdefault(e["head"], []).append(e)
    for c in concats:
        assert len(into[c.name]) == len(c.inputs) == 4  # the four branches
        # channels of the branches add up to the concat's output
        out = [e["label"] for e in edges if e["tail"] == c.name]
        channels = sum(int(e["label"].split("x")[1]) for e in into[c.name])
        assert out and all(int(lbl.split("x")[1]) == channels for lbl in out)


# --------------------------------------------------------------------------
# the memory plan
# --------------------------------------------------------------------------
def check_plan_colours(path, plan, strategy):
    """Tensors in one storage slot share a colour; different slots, different
    colours; tensors without storage keep the default colour."""
    nodes, edges = parse_svg(path)
    ids = tensor_ids(plan.graph)
    a = plan.assignments[strategy]
    slot_of = {eid: a.slot[t] for t, eid in enumerate(plan.live.entry)}
    colour_of_slot, slot_of_colour = {}, {}
    planned = 0
    for e in edges:
        if e["tail"].endswith("(outside)"):
            continue
        slot = slot_of.get(ids[e["tensor"]])
        if slot is None:
            assert e["color"] == DEFAULT_EDGE, e
            continue
        planned += 1
        assert colour_of_slot.setdefault(slot, e["color"]) == e["color"], e
        assert slot_of_colour.setdefault(e["color"], slot) == slot, e
    assert DEFAULT_EDGE not in slot_of_colour
    return planned, colour_of_slot, nodes


@needs_dot
def test_vgg16_plan_colours_follow_storage(vgg, tmp_path, capsys):
    net = save(vgg, tmp_path / "vgg16.json")
    rc, out = viz_cli(capsys, net, "--shape", "data=2,3,32,32", "--plan", "--strategy",
                      "both", "-o", tmp_path / "p.svg")
    assert rc == 0 and out.err == ""
    plan = sg.plan(vgg, {"data": (2, 3, 32, 32)}, strategy="both")
    planned, colours, nodes = check_plan_colours(tmp_path / "p.svg", plan, "both")
    assert planned >= 10 and len(colours) >= 2
    # some slot holds several tensors: the picture shows the reuse
    a = plan.assignments["both"]
    assert len(set(a.slot)) < len(a.slot)
    # a fused group is a cluster; the legend gives the totals
    svg = (tmp_path / "p.svg").read_text()
    assert plan.fused_groups and "cluster_fused0" in svg
    legend = " ".join(t for t in nodes["__legend__"]["text"] if t)
    assert "internal both" in legend and viz.format_bytes(plan.internal["both"]) in legend


@needs_dot
@pytest.mark.parametrize("strategy", ["both", "naive"])
def test_inception_plan_colours_follow_storage(googlenet, tmp_path, strategy):
    shape = {"data": (2, 3, 224, 224)}
    path = viz.render(viz.plot(googlenet, shape=shape, plan=True, strategy=strategy),
                      tmp_path / "p.svg")
    plan = sg.plan(googlenet, shape, strategy="both")
    planned, colours, _ = check_plan_colours(path, plan, strategy)
    assert planned >= 50
    if strategy == "naive":  # no reuse: a colour per tensor
        a = plan.assignments["naive"]
        assert len(set(a.slot)) == len(a.slot)


@needs_dot
def test_train_plan_draws_backward_dashed(vgg, tmp_path):
    shape = {"data": (2, 3, 32, 32)}
    path = viz.render(viz.plot(vgg, shape=shape, plan=True, train=True, strategy="both"),
                      tmp_path / "t.svg")
    plan = sg.plan(vgg, shape, train=True, strategy="both")
    check_plan_colours(path, plan, "both")
    nodes, edges = parse_svg(path)
    forward = drawn_names(Graph(vgg.outputs))
    backward = set(nodes) - forward - {"__legend__"}
    ops_bwd = [n for n in plan.graph.nodes if n.op is not None and n.name not in forward]
    assert backward == {n.name for n in ops_bwd} and len(backward) >= 20
    assert all(nodes[n]["dashed"] for n in backward)
    assert not any(nodes[n]["dashed"] for n in forward)
    # paler: a backward node's fill is lighter than its forward op's
    def brightness(c):
        return sum(int(c[i:i + 2], 16) for i in (1, 3, 5))
    fwd_conv = nodes["conv2_1"]["fill"]
    bwd_conv = [nodes[n.name]["fill"] for n in ops_bwd if n.op.name == "_backward_Convolution"]
    assert bwd_conv and all(brightness(c) > brightness(fwd_conv) for c in bwd_conv)
    assert all(e["dashed"] for e in edges if e["head"] in backward and e["tail"] in backward)
    assert not any(e["dashed"] for e in edges if e["head"] in forward and e["tail"] in forward)


@needs_dot
def test_given_plan_is_drawn_with_its_strategy(vgg, tmp_path):
    plan = sg.plan(vgg, {"data": (2, 3, 32, 32)}, strategy="inplace")
    dot = viz.plot(vgg, plan=plan)
    assert dot.__class__.__name__ == "Digraph"
    check_plan_colours(viz.render(dot, tmp_path / "g.svg"), plan, "inplace")


def test_node_allocations_sum_to_the_plan(googlenet):
    plan = sg.plan(googlenet, {"data": (2, 3, 224, 224)}, train=True, strategy="both")
    for s in ("naive", "both", "arena"):
        assert sum(viz.node_allocations(plan, s).values()) == plan.internal[s]


# --------------------------------------------------------------------------
# the memory timeline
# --------------------------------------------------------------------------
def test_timeline_peak_is_the_lower_bound(vgg, tmp_path):
    plan = sg.plan(vgg, {"data": (2, 3, 32, 32)}, train=True, strategy="both")
    data = viz.timeline(plan)
    live = data["live"]
    assert len(live) == len(plan.steps)
    assert live[plan.peak_step] == max(live) == plan.lower_bound
    # bytes of the tensors live at each step, counted here: the bound's
    # profile never exceeds them (inplace can only save)
    lv = plan.live
    raw = [sum(lv.nbytes[t] for t in range(lv.num_tensors) if lv.first[t] <= s <= lv.last[t])
           for s in range(lv.num_steps)]
    assert all(p <= r for p, r in zip(live, raw)) and max(raw) > 0
    for s in viz.TIMELINE_STRATEGIES:
        assert max(data[s]) == plan.internal[s] >= plan.lower_bound
        assert all(f >= p for f, p in zip(data[s], live)), s

    fig = viz.plot_timeline(plan, tmp_path / "t.png")
    with open(tmp_path / "t.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    ax = fig.axes[0]
    # the picture numbers the peak step as the report does: from 1, "k/n"
    step = re.search(r"peak \(lower bound\) at step (\d+)/(\d+) ", plan.report())
    k, n = int(step.group(1)), int(step.group(2))
    assert (k, n) == (plan.peak_step + 1, len(plan.steps))
    assert any(t.get_text().startswith(f"peak: step {k}/{n} ") for t in ax.texts)
    marks = [ln for ln in ax.lines if ln.get_marker() == "v"]
    assert len(marks) == 1 and list(marks[0].get_xdata()) == [k]
    assert ax.lines[0].get_xdata()[0] == 1 and ax.lines[0].get_xdata()[-1] == n
    with pytest.raises(viz.VizError, match="unknown picture format"):
        viz.plot_timeline(plan, tmp_path / "t.jpg")


# --------------------------------------------------------------------------
# files and formats
# --------------------------------------------------------------------------
MAGIC = {".svg": b"<?xml", ".png": b"\x89PNG", ".pdf": b"%PDF", ".dot": b"digraph"}


@pytest.fixture
def mlp_json(tmp_path):
    return save(sg.models.get_model("mlp"), tmp_path / "mlp.json")


@pytest.mark.parametrize("ext", sorted(MAGIC))
def test_output_format_from_extension(mlp_json, tmp_path, capsys, ext):
    if ext != ".dot" and shutil.which("dot") is None:
        pytest.skip("Graphviz's dot is not installed (.ci/run installs it)")
    out = tmp_path / f"pic{ext}"
    rc, io = viz_cli(capsys, mlp_json, "--shape", "data=2,1,28,28", "-o", out)
    assert rc == 0 and io.err == "" and str(out) in io.out
    assert out.read_bytes().startswith(MAGIC[ext])
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("pic")] == [out.name]


@needs_dot
def test_default_output_is_svg_beside_the_input(mlp_json, capsys):
    rc, _ = viz_cli(capsys, mlp_json)
    out = mlp_json.with_suffix(".svg")
    assert rc == 0 and out.exists()
    nodes, _ = parse_svg(out)
    assert set(nodes) == drawn_names(Graph(sg.models.get_model("mlp").outputs))


def one_line_error(capsys, *argv):
    rc, io = viz_cli(capsys, *argv)
    assert rc == 2, io
    lines = io.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("symgraph: error: "), io.err
    assert "Traceback" not in io.err
    return lines[0]


def test_bad_input_is_one_line_exit_2(mlp_json, tmp_path, capsys):
    assert "no such file" in one_line_error(capsys, tmp_path / "missing.json")
    assert "no such file" in one_line_error(capsys, tmp_path / "missing.json", "-o", "x.jpg")
    assert "folder" in one_line_error(capsys, tmp_path)
    not_symbol = tmp_path / "list.json"
    not_symbol.write_text("[]")
    assert "MXNet symbol" in one_line_error(capsys, not_symbol)
    bad = tmp_path / "bad.json"
    bad.write_text('{"nodes": [')
    one_line_error(capsys, bad, "-o", tmp_path / "bad.svg")
    line = one_line_error(capsys, mlp_json, "-o", tmp_path / "x.jpg")
    assert "unknown format 'jpg'" in line and ".svg" in line
    assert "--shape" in one_line_error(capsys, mlp_json, "--plan")
    assert "bad --shape" in one_line_error(capsys, mlp_json, "--shape", "data=2,a")
    assert not list(tmp_path.glob("bad.svg")) and not list(tmp_path.glob("x.*"))


def test_unwritable_output_is_one_line(mlp_json, tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("x")
    out = tmp_path / "notes.txt" / "mlp.dot"
    line = one_line_error(capsys, mlp_json, "-o", out)
    assert line.startswith(f"symgraph: error: cannot write {out}: "), line


def test_shape_must_be_a_dict():
    net = sg.models.get_model("mlp")
    # a bare tuple was taken for input names: "'2' is not an input"
    with pytest.raises(viz.VizError, match=r"shape must be a dict of input shapes such as "
                                           r"\{'data': \(2, 1, 28, 28\)\}"):
        viz.plot(net, shape=(2, 1, 28, 28))
    assert "2x1x28x28" in viz.plot(net, shape={"data": (2, 1, 28, 28)}).source


def test_rankdir_lr(mlp_json, tmp_path, capsys):
    out = tmp_path / "mlp.dot"
    rc, _ = viz_cli(capsys, mlp_json, "--rankdir", "LR", "-o", out)
    assert rc == 0 and re.search(r"\brankdir=LR\b", out.read_text())
    rc, _ = viz_cli(capsys, mlp_json, "-o", out)
    assert rc == 0 and re.search(r"\brankdir=TB\b", out.read_text())
    assert "invalid choice: 'UP'" in one_line_error(capsys, mlp_json, "--rankdir", "UP")


def test_missing_dot_is_one_line_but_dot_text_still_works(mlp_json, tmp_path, capsys,
                                                          monkeypatch):
    empty = tmp_path / "no-graphviz"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    line = one_line_error(capsys, mlp_json, "-o", tmp_path / "m.png")
    assert "install Graphviz" in line and not (tmp_path / "m.png").exists()
    rc, _ = viz_cli(capsys, mlp_json, "-o", tmp_path / "m.dot")
    assert rc == 0 and (tmp_path / "m.dot").read_text().startswith("digraph")
