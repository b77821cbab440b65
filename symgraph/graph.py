"""The IR: Node, Entry and Graph.

A `Node` is an op applied to input entries, or a variable (op is None).
An `Entry` is one output of a node. A `Graph` is a set of output entries
plus everything they depend on, in topological order (MXNet's DFS order:
inputs first, in input order). Nodes are never mutated once a graph is
built from them; passes build new nodes and a new graph through
``Graph.rewrite``, and what they learn (shapes, storage) lives in side
tables keyed by node or entry id.
"""
from __future__ import annotations

from typing import Iterable, NamedTuple, Sequence

from .errors import GraphError


class Node:
    """One op application, or a variable when ``op`` is None.

    ``attrs`` holds the attributes as MXNet strings (what JSON stores);
    ``params`` holds them parsed by the op's schema. Attributes whose names
    start and end with ``__`` (``__shape__``, ``__lr_mult__`` ...) are hints
    kept for the user and never parsed by an op.
    """

    __slots__ = ("op", "name", "attrs", "params", "inputs", "__weakref__")

    def __init__(self, op, name: str, attrs: dict | None = None,
                 inputs: Sequence["Entry"] = ()):
        if not isinstance(name, str) or not name:
            raise GraphError(f"a node needs a non-empty string name, got {name!r}")
        self.op = op
        self.name = name
        attrs = dict(attrs or {})
        if op is None:
            if inputs:
                raise GraphError(f"variable '{name}' cannot have inputs")
            self.attrs = {k: str(v) for k, v in attrs.items()}
            self.params = None
        else:
            self.attrs, self.params = op.parse_attrs(attrs, name)
        self.inputs = tuple(inputs)
        for e in self.inputs:
            if not isinstance(e, Entry):
                raise GraphError(f"node '{name}': input {e!r} is not an Entry")

    def with_inputs(self, inputs: Sequence["Entry"]) -> "Node":
        """This node reading ``inputs``: op, name and attributes as they are,
        the parsed ones shared rather than parsed again (passes that rebuild
        a graph copy every node)."""
        new = Node.__new__(Node)
        new.op, new.name, new.attrs, new.params = self.op, self.name, dict(self.attrs), \
            self.params
        new.inputs = tuple(inputs)
        return new

    @property
    def num_outputs(self) -> int:
        return 1 if self.op is None else self.op.num_outputs(self.params)

    @property
    def num_visible_outputs(self) -> int:
        return 1 if self.op is None else self.op.num_visible_outputs(self.params)

    @property
    def num_args(self) -> int:
        """Number of inputs that are arguments; the rest are aux states."""
        return 0 if self.op is None else len(self.op.arg_names(self.params))

    def output_names(self) -> list[str]:
        if self.op is None:
            return [self.name]
        return [f"{self.name}_{n}" for n in self.op.output_names(self.params)]

    def __repr__(self) -> str:
        if self.op is None:
            return f"Node(variable {self.name})"
        return f"Node({self.op.name} {self.name})"


class Entry(NamedTuple):
    """Output ``index`` of ``node``."""

    node: Node
    index: int = 0

    def __repr__(self) -> str:
        return f"%{self.node.name}" + (f":{self.index}" if self.index else "")


def unique_name(base: str, taken: set) -> str:
    """``base``, or ``base1``, ``base2``, ... -- the first not in ``taken``,
    which then holds it: how passes name the nodes they add."""
    name, k = base, 1
    while name in taken:
        name, k = f"{base}{k}", k + 1
    taken.add(name)
    return name


def entry_key(e: Entry) -> str:
    """How programs feed and return an inner entry by name: ``node:index``."""
    return f"{e.node.name}:{e.index}"


def topo_order(outputs: Iterable[Entry]) -> list[Node]:
    """Nodes reachable from ``outputs``, inputs before users (DFS post-order).

    Iterative, so deep nets do not hit Python's recursion limit; a cycle is
    reported with the node where it closes.
    """
    order: list[Node] = []
    state: dict[int, int] = {}  # id(node) -> 1 visiting, 2 done
    for out in outputs:
        root = out.node
        if state.get(id(root)) == 2:
            continue
        stack = [(root, 0)]
        state[id(root)] = 1
        while stack:
            node, i = stack[-1]
            if i < len(node.inputs):
                stack[-1] = (node, i + 1)
                child = node.inputs[i].node
                s = state.get(id(child))
                if s is None:
                    state[id(child)] = 1
                    stack.append((child, 0))
                elif s == 1:
                    raise GraphError(
                        f"cycle: node '{child.name}' depends on itself "
                        f"(through '{node.name}')")
            else:
                stack.pop()
                state[id(node)] = 2
                order.append(node)
    return order


class Graph:
    """Output entries plus the nodes they need, indexed.

    ``nodes[i]`` is in topological order; ``entry_id(e)`` numbers every
    output of every node (``row_ptr`` as in NNVM's IndexedGraph), which is
    what the passes and the planner index their side tables by.
    """

    def __init__(self, outputs: Sequence[Entry]):
        self.outputs = tuple(outputs)
        if not self.outputs:
            raise GraphError("a graph needs at least one output")
        self.nodes: list[Node] = topo_order(self.outputs)
        self._nid = {id(n): i for i, n in enumerate(self.nodes)}
        self.row_ptr = [0]
        for n in self.nodes:
            self.row_ptr.append(self.row_ptr[-1] + n.num_outputs)
        self._users: list | None = None  # entry id -> its readers, built when first asked
        self._validate()

    # -- indexing ---------------------------------------------------------
    def node_id(self, node: Node) -> int:
        return self._nid[id(node)]

    def entry_id(self, e: Entry) -> int:
        return self.row_ptr[self._nid[id(e.node)]] + e.index

    def entry_id_of_node(self, node: Node) -> int:
        """Entry id of a node's first output (a variable's only one)."""
        return self.row_ptr[self._nid[id(node)]]

    @property
    def num_entries(self) -> int:
        return self.row_ptr[-1]

    def __len__(self) -> int:
        return len(self.nodes)

    def users(self, e: Entry) -> tuple:
        """The nodes that read entry ``e``, each once, in topological order
        (a graph output is read by no node: see ``outputs``)."""
        if self._users is None:
            users: list = [[] for _ in range(self.num_entries)]
            for n in self.nodes:
                for eid in dict.fromkeys(self.entry_id(x) for x in n.inputs):
                    users[eid].append(n)
            self._users = [tuple(u) for u in users]
        try:
            return self._users[self.entry_id(e)]
        except KeyError:
            raise GraphError(f"{e!r} is not an entry of this graph") from None

    # -- rewriting ----------------------------------------------------------
    def rewrite(self, fn=None, outputs: Sequence[Entry] | None = None) -> "Graph":
        """The graph ``fn`` makes of this one: how every pass builds one.

        Each node the outputs need is visited once, inputs first, as
        ``fn(node, inputs)``: ``inputs`` are the new values of
        ``node.inputs`` (entries of the graph being built). It returns

        - None: the node stays (``node.with_inputs(inputs)`` where an
          input changed, the node itself otherwise);
        - a Node: it takes the node's place, output k for output k;
        - a sequence with an Entry per output of the node: their new values
          (one of ``inputs`` bypasses the node; None marks an output that
          nothing may read).

        ``outputs``: entries of this graph that the new one returns (default:
        its outputs). Nodes ``fn`` makes that nothing needed reads are not in
        the result. This graph is not changed; it is returned itself when
        nothing changed and ``outputs`` is None."""
        outs = self.outputs if outputs is None else tuple(outputs)
        order = self.nodes if outputs is None else topo_order(outs)
        if any(id(n) not in self._nid for n in order):
            raise GraphError("rewrite: an output asked for is not an entry of this graph")
        new: dict[int, list] = {}  # node id here -> new values of its outputs

        def value(e: Entry) -> Entry:
            vals = new.get(self._nid[id(e.node)])
            if vals is None:
                return e
            v = vals[e.index]
            if v is None:
                raise GraphError(f"rewrite: output {e.index} of node '{e.node.name}' is read "
                                 f"but its rewrite removed it")
            return v

        for node in order:
            ins = [value(e) for e in node.inputs]
            r = None if fn is None else fn(node, ins)
            if r is None:
                if any(a != b for a, b in zip(ins, node.inputs)):
                    r = node.with_inputs(ins)
                else:
                    continue
            if isinstance(r, Node):
                if r is node:
                    continue
                if r.num_outputs != node.num_outputs:
                    raise GraphError(f"rewrite: node '{r.name}' has {r.num_outputs} outputs "
                                     f"in place of '{node.name}', which has {node.num_outputs}")
                r = [Entry(r, i) for i in range(node.num_outputs)]
            else:
                r = list(r)
                if len(r) != node.num_outputs or \
                        any(v is not None and not isinstance(v, Entry) for v in r):
                    raise GraphError(f"rewrite: node '{node.name}' has {node.num_outputs} "
                                     f"outputs; its rewrite gave {r!r}")
                if all(v == Entry(node, i) for i, v in enumerate(r)):
                    continue
            new[self._nid[id(node)]] = r
        if not new and outputs is None:
            return self
        return Graph([value(e) for e in outs])

    # -- variables --------------------------------------------------------
    def _variable_roles(self):
        aux = set()
        for n in self.nodes:
            if n.op is not None:
                k = n.num_args
                for e in n.inputs[k:]:
                    aux.add(id(e.node))
        return aux

    @property
    def variables(self) -> list[Node]:
        return [n for n in self.nodes if n.op is None]

    @property
    def arguments(self) -> list[Node]:
        aux = self._variable_roles()
        return [n for n in self.nodes if n.op is None and id(n) not in aux]

    @property
    def aux_states(self) -> list[Node]:
        aux = self._variable_roles()
        return [n for n in self.nodes if n.op is None and id(n) in aux]

    def list_arguments(self) -> list[str]:
        return [n.name for n in self.arguments]

    def list_auxiliary_states(self) -> list[str]:
        return [n.name for n in self.aux_states]

    def list_outputs(self) -> list[str]:
        return [e.node.output_names()[e.index] for e in self.outputs]

    # -- checks and text ----------------------------------------------------
    def _validate(self) -> None:
        seen: dict[str, Node] = {}
        for n in self.nodes:
            other = seen.get(n.name)
            if other is not None:
                raise GraphError(
                    f"duplicate name '{n.name}': two different nodes "
                    f"({_kind(other)} and {_kind(n)}) share it; give one of them "
                    f"another name")
            seen[n.name] = n
            if n.op is not None:
                want = len(n.op.arg_names(n.params)) + len(n.op.aux_names(n.params))
                if len(n.inputs) != want:
                    raise GraphError(
                        f"node '{n.name}' ({n.op.name}) has {len(n.inputs)} inputs, "
                        f"expected {want}: {n.op.arg_names(n.params) + n.op.aux_names(n.params)}")
            for e in n.inputs:
                if not 0 <= e.index < e.node.num_outputs:
                    raise GraphError(
                        f"node '{n.name}' reads output {e.index} of '{e.node.name}', "
                        f"which has {e.node.num_outputs} output(s)")
        for e in self.outputs:
            if not 0 <= e.index < e.node.num_outputs:
                raise GraphError(
                    f"graph output {e.index} of '{e.node.name}' does not exist "
                    f"(it has {e.node.num_outputs} output(s))")

    def text(self) -> str:
        """Canonical text form, one line per node, used in repr and tests."""
        lines = []
        for n in self.nodes:
            if n.op is None:
                lines.append(f"%{n.name} = variable")
                continue
            attrs = ", ".join(f"{k}={v}" for k, v in sorted(n.attrs.items())
                              if not k.startswith("__"))
            args = ", ".join(repr(e) for e in n.inputs)
            lines.append(f"%{n.name} = {n.op.name}[{attrs}]({args})")
        lines.append("return " + ", ".join(repr(e) for e in self.outputs))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Graph({len(self.nodes)} nodes, outputs={list(self.outputs)})"


def _kind(n: Node) -> str:
    return "a variable" if n.op is None else f"a {n.op.name} node"

