"""Graph.rewrite and Graph.users (issue 29): the one way passes rebuild a
graph, on tiny graphs; each pass's rule through it, the input graph left
as it was; and no pass building a Graph by hand."""
import ast
import pathlib

import jax
import numpy as np
import pytest

import symgraph as sg
from symgraph.errors import GraphError
from symgraph.graph import Entry, Graph, Node
from symgraph.lower import lower
from symgraph.ops import get_op
from symgraph.passes.batch_split import split_batch
from symgraph.passes.gradient import TrainingSplit, build_gradient
from symgraph.passes.infer import infer_shapes
from symgraph.passes.layout import to_channels_last
from symgraph.passes.place import COPY_OP, GROUP_KEY, place, with_groups
from symgraph.passes.prune import prune
from symgraph.passes.recompute import RECOMPUTE_ATTR, rewrite
from symgraph.passes.stages import stage_graphs
from symgraph.train.step import scale_loss_heads

S = sg.sym
ROOT = pathlib.Path(__file__).resolve().parent.parent


def _mlp():
    """data -> fc1 -> relu -> fc2 -> loss, as a Graph."""
    h = S.FullyConnected(S.Variable("data"), num_hidden=4, name="fc1")
    h = S.Activation(h, act_type="relu", name="relu")
    h = S.FullyConnected(h, num_hidden=3, name="fc2")
    return S.LinearRegressionOutput(h, name="loss").graph()


def _users_by_scan(g: Graph) -> dict:
    out = {}
    for n in g.nodes:
        for e in n.inputs:
            out.setdefault(g.entry_id(e), [])
            if n not in out[g.entry_id(e)]:
                out[g.entry_id(e)].append(n)
    return out


def _check_users(g: Graph) -> None:
    want = _users_by_scan(g)
    for n in g.nodes:
        for i in range(n.num_outputs):
            e = Entry(n, i)
            assert list(g.users(e)) == want.get(g.entry_id(e), []), e


# -- the helper ----------------------------------------------------------------
def test_identity_rewrite_gives_the_graph():
    g = _mlp()
    seen = []
    assert g.rewrite(lambda n, ins: seen.append(n)) is g
    assert seen == g.nodes  # each node once, inputs first
    same = g.rewrite(outputs=g.outputs)
    assert same is not g and same.text() == g.text()
    assert all(a is b for a, b in zip(same.nodes, g.nodes))


def test_replacing_one_node_rebuilds_its_readers_only():
    g = _mlp()
    before = g.text()
    relu = next(n for n in g.nodes if n.name == "relu")

    def tanh(n, ins):
        return Node(n.op, n.name, {**n.attrs, "act_type": "tanh"}, ins) if n is relu else None
    g2 = g.rewrite(tanh)
    assert g.text() == before  # pure
    changed = [a.text().splitlines() for a in (g, g2)]
    diff = [(x, y) for x, y in zip(*changed) if x != y]
    assert diff == [("%relu = Activation[act_type=relu](%fc1)",
                     "%relu = Activation[act_type=tanh](%fc1)")]
    old, new = {n.name: n for n in g.nodes}, {n.name: n for n in g2.nodes}
    assert new["fc1"] is old["fc1"] and new["data"] is old["data"]  # upstream shared
    assert new["fc2"] is not old["fc2"] and new["fc2"].inputs[0].node is new["relu"]
    assert new["fc2"].params is old["fc2"].params  # rebuilt, not parsed again
    _check_users(g2)


def test_bypassing_a_node_removes_it():
    g = _mlp()
    g2 = g.rewrite(lambda n, ins: [ins[0]] if n.name == "relu" else None)
    assert "relu" not in {n.name for n in g2.nodes} and "relu" in {n.name for n in g.nodes}
    fc2 = next(n for n in g2.nodes if n.name == "fc2")
    assert fc2.inputs[0].node.name == "fc1"
    fc1 = next(n for n in g2.nodes if n.name == "fc1")
    assert g2.users(Entry(fc1, 0)) == (fc2,)
    _check_users(g2)


def test_multiple_outputs_map_index_for_index():
    x = S.Variable("x")
    parts = S.SliceChannel(x, num_outputs=3, axis=1, name="sl")
    net = S.Group([S.elemwise_add(parts[2], parts[0], name="a"), parts[1]])
    g = net.graph()
    sl = next(n for n in g.nodes if n.name == "sl")
    _check_users(g)
    assert [u.name for u in g.users(Entry(sl, 0))] == ["a"]
    assert g.users(Entry(sl, 1)) == ()  # a graph output, read by no node

    # outputs reversed: the new node's output 2 - k stands for output k
    def rev(n, ins):
        if n is not sl:
            return None
        new = Node(n.op, "sl2", n.attrs, ins)
        return [Entry(new, 2 - k) for k in range(3)]
    g2 = g.rewrite(rev)
    a = next(n for n in g2.nodes if n.name == "a")
    assert [(e.node.name, e.index) for e in a.inputs] == [("sl2", 0), ("sl2", 2)]
    assert (g2.outputs[1].node.name, g2.outputs[1].index) == ("sl2", 1)
    _check_users(g2)
    vals = {"x": np.arange(12.0).reshape(2, 6)}
    want, _ = lower(g)(vals)
    got, _ = lower(g2)(vals)
    for a, b in zip(want, got):  # the same sums, the same middle part
        np.testing.assert_array_equal(np.asarray(b), np.asarray(a))


def test_rewrite_refuses_a_removed_output_that_is_read_and_a_wrong_arity():
    x = S.Variable("x")
    parts = S.SliceChannel(x, num_outputs=2, axis=1, name="sl")
    g = S.elemwise_add(parts[0], parts[1], name="a").graph()
    with pytest.raises(GraphError, match="output 1 of node 'sl' is read"):
        g.rewrite(lambda n, ins: [Entry(n, 0), None] if n.name == "sl" else None)
    with pytest.raises(GraphError, match="has 2 outputs"):
        g.rewrite(lambda n, ins: [Entry(n, 0)] if n.name == "sl" else None)
    relu = Node(get_op("relu"), "r", {}, [Entry(x.graph().nodes[0])])
    with pytest.raises(GraphError, match="1 outputs in place of 'sl'"):
        g.rewrite(lambda n, ins: relu if n.name == "sl" else None)
    with pytest.raises(GraphError, match="not an entry of this graph"):
        g.rewrite(outputs=[Entry(relu, 0)])


def test_outputs_select_a_subgraph_and_unread_new_nodes_are_dropped():
    g = _mlp()
    relu = next(n for n in g.nodes if n.name == "relu")
    sub = g.rewrite(outputs=[Entry(relu, 0)])
    assert [n.name for n in sub.nodes] == ["data", "fc1_weight", "fc1_bias", "fc1", "relu"]
    made = []

    def orphan(n, ins):  # a node nobody reads is not in the result
        if n is relu:
            made.append(Node(get_op("relu"), "orphan", {}, [ins[0]]))
        return None
    assert g.rewrite(orphan) is g and made
    _check_users(sub)


def test_users_are_each_reader_once():
    x = S.Variable("x")
    g = S.elemwise_add(x, x, name="twice").graph()
    assert [u.name for u in g.users(Entry(g.nodes[0], 0))] == ["twice"]
    with pytest.raises(GraphError, match="not an entry"):
        g.users(Entry(Node(None, "y"), 0))


# -- each pass's rule, the input graph untouched -------------------------------------
def _unchanged(g):
    """A check that ``g`` (text and node objects) is as it was."""
    text, nodes = g.text(), list(g.nodes)
    return lambda: g.text() == text and all(a is b for a, b in zip(g.nodes, nodes))


def test_prune_clears_the_need_bit_of_an_unread_gradient():
    g = _mlp()
    full = build_gradient(g, ["data", "fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias"])
    same = _unchanged(full)
    # keep fc1's weight gradient only: fc1's backward computes no data gradient
    p = prune(full, [0, 2])
    assert same()
    bwd = next(n for n in p.nodes if n.name == "fc1_backward")
    assert tuple(bwd.params.need) == (0, 1, 0) and bwd.num_outputs == 1
    assert p.outputs[1] == Entry(bwd, 0)


def test_place_inserts_one_copy_per_value_and_device():
    h = S.FullyConnected(S.Variable("data"), num_hidden=4, name="fc1")
    a = S.Activation(h, act_type="relu", name="a")
    b = S.Activation(h, act_type="tanh", name="b")
    g = S.Group([a, b]).graph()
    grouped = with_groups(g, {"fc1": "s1", "a": "s2", "b": "s2"})
    assert grouped.nodes[-1].attrs[GROUP_KEY] == "s2" and GROUP_KEY not in g.nodes[-1].attrs
    assert grouped.nodes[0] is g.nodes[0]  # the data: no group, shared
    same = _unchanged(grouped)
    p = place(grouped, {"s1": "dev0", "s2": "dev1"}, "dev0")
    assert same()
    copies = [n for n in p.graph.nodes if n.op is not None and n.op.name == COPY_OP]
    assert [c.name for c in copies] == p.copies == ["fc1_copy_to_dev1"]
    assert {u.name for u in p.graph.users(Entry(copies[0], 0))} == {"a", "b"}


def test_batch_split_slices_the_prefix_and_joins_once():
    h = S.Convolution(S.Variable("data"), kernel=(3, 3), num_filter=2, name="c")
    h = S.Activation(h, act_type="relu", name="r")
    g = S.FullyConnected(h, num_hidden=3, name="fc").graph()
    same = _unchanged(g)
    out = split_batch(g, 2, [1, 3], ["data"])
    assert same()
    assert out.slices == ["data_slice0", "data_slice1"] and out.concats == ["r_concat"]
    assert out.part == {"data_slice0": 0, "data_slice1": 1, "c": 0, "c_part1": 1,
                        "r": 0, "r_part1": 1}
    fc = next(n for n in out.graph.nodes if n.name == "fc")
    assert fc.inputs[0].node.name == "r_concat"
    inf = infer_shapes(g, {"data": (4, 1, 5, 5)})
    rng = np.random.default_rng(0)
    vals = {n.name: rng.normal(size=inf.shapes[g.entry_id_of_node(n)]) for n in g.variables}
    want, _ = lower(g)(vals)
    got, _ = lower(out.graph)(vals)
    np.testing.assert_allclose(np.asarray(got[0]), np.asarray(want[0]), rtol=1e-12)


def test_recompute_backward_reads_the_clone_forward_the_original():
    g = _mlp()
    split = TrainingSplit(g, ["fc1_weight", "fc2_weight"])
    same = _unchanged(split.full)
    r = rewrite(split.full, 1, ["relu"])
    assert same()
    clone = next(n for n in r.nodes if n.attrs.get(RECOMPUTE_ATTR) == "relu")
    relu = next(n for n in r.nodes if n.name == "relu")
    readers = {u.name for u in r.users(Entry(clone, 0))}
    assert readers and all("backward" in x for x in readers)
    assert {u.name for u in r.users(Entry(relu, 0))} == {"fc2"}
    assert clone.inputs[0].node.name == "fc1"  # from the kept tensor


def test_stage_graphs_are_subgraphs_of_the_full_graph():
    g = _mlp()
    split = TrainingSplit(g, ["fc1_weight", "fc2_weight"])
    same = _unchanged(split.full)
    stages = stage_graphs(split, lambda n: 1, 2)
    assert same()
    ids = {id(n) for n in split.full.nodes}
    assert len(stages) > 1
    for st in stages:
        assert all(id(n) in ids for n in st.graph.nodes)  # nodes shared, none rebuilt


def _conv_pool_net():
    h = S.Convolution(S.Variable("data"), kernel=(3, 3), num_filter=4, pad=(1, 1), name="c")
    h = S.Pooling(h, kernel=(3, 3), pad=(1, 1), pool_type="avg", name="p")
    h = S.Convolution(h, kernel=(1, 1), num_filter=2, name="c2")
    h = S.Pooling(h, kernel=(5, 5), pool_type="avg", name="gp")
    h = S.FullyConnected(S.Flatten(h, name="fl"), num_hidden=3, name="fc")
    return S.LinearRegressionOutput(h, name="loss").graph()


LAYOUT_SHAPES = {"data": (2, 1, 5, 5), "loss_label": (2, 3)}


def _check_backward_layouts(split, graph, new_name=None):
    """Each Convolution's and Pooling's backward node in the channels-last
    rewrite of ``graph`` runs NHWC as its forward node does; the rewrite
    computes what ``graph`` does."""
    new_name = new_name or {n.name: n.name for n in graph.nodes}
    same = _unchanged(graph)
    out = {n.name: n for n in to_channels_last(graph, LAYOUT_SHAPES).nodes}
    assert same()
    checked = 0
    for bwd, fwd in split.origin.items():
        b, f = out.get(new_name.get(bwd)), out[new_name[fwd]]
        if b is None or b.op.forward is None or f.op.name not in ("Convolution", "Pooling"):
            continue
        assert b.params.layout == f.params.layout == "NHWC", (bwd, fwd)
        checked += 1
    assert checked == 4  # c, p, c2 and gp's backward
    inf = infer_shapes(graph, LAYOUT_SHAPES)
    rng = np.random.default_rng(1)
    feeds = {n.name: rng.normal(size=inf.shapes[graph.entry_id_of_node(n)])
             for n in graph.variables}
    want, _ = jax.jit(lower(graph, True))(feeds)
    got, _ = jax.jit(lower(to_channels_last(graph, LAYOUT_SHAPES), True))(feeds)
    for a, b in zip(want, got):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-10, atol=1e-12)


def test_layout_backward_follows_its_forward_by_structure_not_names():
    """The training graph's nodes renamed (n0, n1, ...): each backward node
    still runs in its forward node's layout, an average pooling's (which
    reads only its gradient) included."""
    split = TrainingSplit(_conv_pool_net(), ["c_weight", "c2_weight", "fc_weight"])
    k = iter(range(10 ** 6))
    renamed = split.full.rewrite(
        lambda n, ins: None if n.op is None else Node(n.op, f"n{next(k)}", n.attrs, ins))
    _check_backward_layouts(split, renamed,
                            {a.name: b.name for a, b in zip(split.full.nodes, renamed.nodes)})


def test_layout_backward_reading_recompute_clones_follows_its_forward():
    """c2's backward reads p's clone, p's backward gp's: a clone stands for
    the node it repeats."""
    split = TrainingSplit(_conv_pool_net(), ["c_weight", "c2_weight", "fc_weight"],
                          recompute=["p", "gp"])
    assert {n.name for n in split.full.nodes} >= {"p_recompute", "gp_recompute"}
    _check_backward_layouts(split, split.full)


def test_scale_loss_heads_rebuilds_the_loss_only():
    g = _mlp()
    same = _unchanged(g)
    g2 = scale_loss_heads(g, lambda n: 4.0)
    assert same()
    loss = next(n for n in g2.nodes if n.name == "loss")
    assert float(loss.params.grad_scale) == 4.0
    assert [a is b for a, b in zip(g.nodes, g2.nodes)] == [True] * (len(g.nodes) - 1) + [False]
    assert scale_loss_heads(g, lambda n: 1.0) is g


# -- no pass builds a graph by hand ------------------------------------------------
# the gradient pass builds the training graph from the backward nodes it
# makes: a graph of new outputs, not a rewrite of one
BUILDERS = {("symgraph/passes/gradient.py", "build_gradient_with_heads")}


def test_no_pass_builds_a_graph_by_hand():
    files = sorted((ROOT / "symgraph" / "passes").glob("*.py")) + \
        [ROOT / "symgraph" / "train" / "step.py"]
    found = []
    for path in files:
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text())
        allowed = {id(node) for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef)
                   and (rel, fn.name) in BUILDERS for node in ast.walk(fn)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and id(node) not in allowed:
                f = node.func
                name = f.id if isinstance(f, ast.Name) else \
                    f.attr if isinstance(f, ast.Attribute) else None
                if name == "Graph":
                    found.append(f"{rel}:{node.lineno}")
    assert not found, f"Graph(...) built by hand (use Graph.rewrite): {found}"
    assert len(files) >= 8
