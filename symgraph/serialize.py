"""MXNet 1.x symbol JSON: load and save.

This module reads and writes ``Graph``s; ``symbol.load``/``load_json`` and
``Symbol.save``/``tojson`` wrap it (the Symbol API is built on it, never
the other way round).

The schema is the one MXNet's NNVM ``SaveJSON`` pass writes::

    {
      "nodes": [{"op": "null" | OpName, "name": str,
                 "attrs": {str: str},              # omitted when empty
                 "inputs": [[node_id, output_index, version], ...]}, ...],
                                                   # version: see to_dict
      "arg_nodes": [ids of the variable nodes, aux states included],
      "node_row_ptr": [prefix sums of each node's output count],
      "heads": [[node_id, output_index, version], ...],
      "attrs": {"mxnet_version": ["int", 10901]}
    }

Nodes come in topological (DFS) order; a variable is a node whose op is
``"null"``. symgraph writes exactly this, laid out the way MXNet's JSON
writer lays it out, so a file MXNet wrote and loaded here is written back
unchanged (``node_row_ptr`` aside where an MXNet build gives an op extra
outputs, as oneDNN builds do to Pooling).

Reading also accepts what older MXNet versions wrote, as MXNet's own
upgrader does:

- ``param`` (op parameters) and ``attr`` (user attributes) instead of
  ``attrs``; ``backward_source_id``; inputs as ``[node_id, index]`` pairs;
  no ``node_row_ptr`` (it is never read: symgraph derives it).
- Files before 0.9 (no ``mxnet_version``) omit aux-state inputs such as
  BatchNorm's moving statistics; they are added as variables named
  ``<node>_<input>`` that carry the node's attributes.
- User attributes MXNet hides: a key in ``HIDDEN_KEYS`` becomes
  ``__key__``; ``<input>_<key>`` on an op node (``weight_lr_mult``) moves to
  that input's variable as ``__key__``.

Unknown keys on op nodes, the choice made here: a key an op does not accept
is an error (``OpError`` with the nearest names) when it comes from
``attrs`` or ``param``, because those hold op parameters and a typo must
not pass silently. Keys in a legacy ``attr`` dict were user attributes in
MXNet before 0.9, so those an op does not accept are kept as ``__key__``
hints, as are ``<input>_<key>`` keys whose input is not a variable. Hints
(``__shape__``, ``__lr_mult__``, ``__init__`` ...) are never parsed by ops
and are written back as they were read. ``control_deps`` (ordering only,
no data) are dropped; ``subgraphs`` (control-flow ops) are refused.
"""
from __future__ import annotations

import json
import os

from .errors import GraphError, OpError, SerializationError, SymgraphError
from .graph import Entry, Graph, Node
from .ops.registry import MXNET_KERNEL_HINTS, format_attr, get_op
from .util import atomic_write_text, short_repr

MXNET_VERSION = 10901  # the MXNet release whose files symgraph writes (1.9.1)
LEGACY_AUX_VERSION = 900  # before 0.9.0 files left aux-state inputs out
HIDDEN_KEYS = ("ctx_group", "lr_mult", "wd_mult", "force_mirroring", "mirror_stage",
               "profiler_scope")
_NODE_KEYS = ("op", "name", "inputs", "attrs", "attr", "param", "control_deps",
              "subgraphs", "backward_source_id")


# --------------------------------------------------------------------------
# writing
# --------------------------------------------------------------------------
def _graph_of(sym) -> Graph:
    if isinstance(sym, Graph):
        return sym
    graph = getattr(sym, "graph", None)
    if graph is None:
        raise TypeError(f"expected a Symbol or a Graph, got {type(sym).__name__}")
    return graph()


def to_dict(sym) -> dict:
    """The MXNet symbol-JSON object of a Symbol (or Graph), as Python data."""
    g = _graph_of(sym)

    def entry(e: Entry, version: int = 0) -> list:
        return [g.node_id(e.node), e.index, version]

    # An entry's third number is its variable's version, as NNVM counts it:
    # each op that mutates a variable (an aux state) bumps it, and every read
    # of a variable records the current count. Readers ignore it.
    versions: dict[int, int] = {}
    nodes = []
    for n in g.nodes:
        d = {"op": "null" if n.op is None else n.op.name, "name": n.name}
        if n.attrs:
            d["attrs"] = dict(sorted(n.attrs.items()))
        ins = []
        for k, e in enumerate(n.inputs):
            v = 0
            if e.node.op is None:
                v = versions.get(id(e.node), 0) + (1 if k >= n.num_args else 0)
                versions[id(e.node)] = v
            ins.append(entry(e, v))
        d["inputs"] = ins
        nodes.append(d)
    return {
        "nodes": nodes,
        "arg_nodes": [i for i, n in enumerate(g.nodes) if n.op is None],
        "node_row_ptr": list(g.row_ptr),
        "heads": [entry(e) for e in g.outputs],
        "attrs": {"mxnet_version": ["int", MXNET_VERSION]},
    }


def _layout(doc: dict) -> str:
    """JSON laid out as MXNet's (dmlc) writer does: objects of more than one
    key and arrays of more than ten numbers one item a line, ``", "`` between
    items, entries ``[n, i, v]`` on one line, no final newline."""
    def s(x):
        text = json.dumps(x, ensure_ascii=False)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            # a lone surrogate (JSON may hold "\ud800") has no UTF-8 form:
            # such a string keeps JSON's \u escapes, so the file can be written
            return json.dumps(x)
        return text

    def block(items, level, open_, close):
        if not items:
            return open_ + close
        pad = "\n" + "  " * (level + 1)
        return open_ + ", ".join(pad + it for it in items) + "\n" + "  " * level + close

    def flat(items, open_, close):
        return open_ + ", ".join(items) + close

    def ints(xs, level):
        items = [str(x) for x in xs]
        return block(items, level, "[", "]") if len(items) > 10 else flat(items, "[", "]")

    def entries(es):
        return flat([flat([str(x) for x in e], "[", "]") for e in es], "[", "]")

    def str_map(m, level):
        items = [f"{s(k)}: {s(v)}" for k, v in m.items()]
        return block(items, level, "{", "}") if len(items) > 1 else flat(items, "{", "}")

    def node(n, level):
        items = [f'"op": {s(n["op"])}', f'"name": {s(n["name"])}']
        if "attrs" in n:
            items.append(f'"attrs": {str_map(n["attrs"], level + 1)}')
        items.append(f'"inputs": {entries(n["inputs"])}')
        return block(items, level, "{", "}")

    version = doc["attrs"]["mxnet_version"]
    top = [
        '"nodes": ' + block([node(n, 2) for n in doc["nodes"]], 1, "[", "]"),
        '"arg_nodes": ' + ints(doc["arg_nodes"], 1),
        '"node_row_ptr": ' + ints(doc["node_row_ptr"], 1),
        '"heads": ' + entries(doc["heads"]),
        '"attrs": {"mxnet_version": ' + flat([s(v) for v in version], "[", "]") + "}",
    ]
    return block(top, 0, "{", "}")


def to_json(sym) -> str:
    """MXNet 1.x symbol JSON text of a Symbol (or Graph)."""
    return _layout(to_dict(sym))


def save(sym, fname) -> None:
    """Writes ``to_json(sym)`` to ``fname`` atomically (never half a file)."""
    atomic_write_text(fname, to_json(sym))


# --------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------
def load(fname) -> Graph:
    """The graph stored in an MXNet symbol-JSON file (any MXNet version)."""
    where = os.fspath(fname)
    try:
        with open(fname, encoding="utf-8-sig") as f:
            text = f.read()
    except OSError as err:
        raise SerializationError(f"cannot read symbol file '{where}': "
                                 f"{err.strerror or err}") from None
    except UnicodeDecodeError:
        raise SerializationError(f"'{where}' is not a text (UTF-8) JSON file; is it a "
                                 f"binary .params file?") from None
    return from_json(text, source=where)


def from_json(text: str, source: str = "symbol JSON") -> Graph:
    """The graph described by MXNet symbol-JSON ``text``.

    Every error is a SymgraphError whose message starts with ``source``
    (the file name when called by ``load``) and names the node at fault.
    """
    if not isinstance(text, str):
        raise TypeError(f"from_json takes a str, got {type(text).__name__}")
    if not text.strip():
        raise SerializationError(f"{source}: empty; expected MXNet symbol JSON")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise SerializationError(f"{source}: not valid JSON, line {err.lineno} column "
                                 f"{err.colno}: {err.msg}") from None
    except RecursionError:  # '[' * 100000: Python's parser recurses per level
        raise SerializationError(f"{source}: JSON nested too deeply; an MXNet symbol file "
                                 f"is a few levels deep") from None
    except ValueError as err:  # a number of more than 4300 digits (int_max_str_digits)
        raise SerializationError(f"{source}: not valid JSON: {err}") from None
    return from_dict(doc, source)


def from_dict(doc, source: str = "symbol JSON") -> Graph:
    """The graph of an already parsed MXNet symbol-JSON object."""
    try:
        return _Reader(doc).graph()
    except SymgraphError as err:
        raise type(err)(f"{source}: {err}") from None
    except RecursionError:  # attribute values of lists in lists in lists ...
        raise SerializationError(f"{source}: nested too deeply; an MXNet symbol file is "
                                 f"a few levels deep") from None


class _RawNode:
    """One JSON node before it becomes a Node: op, name, string attrs."""

    __slots__ = ("op", "name", "attrs", "user", "inputs")

    def __init__(self, op, name, attrs, user, inputs):
        self.op, self.name = op, name
        self.attrs = attrs      # str -> str, to be parsed (or hints)
        self.user = user        # keys that came from a legacy "attr" dict
        self.inputs = inputs    # [(node id, output index)]

    def what(self) -> str:
        return f"node '{self.name}' ({'variable' if self.op is None else self.op.name})"


def _attr_value(label, key, v) -> str:
    """An attribute value as the string MXNet stores (hand-written files may
    hold numbers, booleans or lists)."""
    if isinstance(v, dict):
        raise SerializationError(f"{label}: attribute '{key}' is an object; attribute "
                                 f"values are strings such as \"(3, 3)\"")
    return format_attr(v)


class _Reader:
    def __init__(self, doc):
        if not isinstance(doc, dict):
            raise SerializationError(
                f"expected a JSON object with nodes, arg_nodes and heads (an MXNet "
                f"symbol file), got a JSON {type(doc).__name__}")
        for key in ("nodes", "arg_nodes", "heads"):
            if key not in doc:
                raise SerializationError(f"missing key '{key}'; an MXNet symbol file has "
                                         f"nodes, arg_nodes and heads")
        self.doc = doc
        self.version = self._version(doc.get("attrs"))
        nodes = doc["nodes"]
        if not isinstance(nodes, list) or not nodes:
            raise SerializationError("'nodes' must be a non-empty list")
        self.raw = [self._read_node(i, n) for i, n in enumerate(nodes)]

    # -- the file's pieces ------------------------------------------------
    @staticmethod
    def _version(attrs) -> int:
        if attrs is None:
            return 800  # MXNet's rule: a file without a version is 0.8
        v = attrs.get("mxnet_version") if isinstance(attrs, dict) else None
        if v is None:
            if not isinstance(attrs, dict):
                raise SerializationError(f"graph 'attrs' must be an object, got "
                                         f"{short_repr(attrs)}")
            return 800
        if (not isinstance(v, list) or len(v) != 2 or v[0] != "int"
                or not isinstance(v[1], int) or isinstance(v[1], bool)):
            raise SerializationError(f"mxnet_version must be [\"int\", N], got "
                                     f"{short_repr(v)}")
        return v[1]

    def _entry(self, e, what: str) -> tuple:
        n = len(self.doc["nodes"])
        if (not isinstance(e, list) or len(e) not in (2, 3)
                or not all(isinstance(x, int) and not isinstance(x, bool) for x in e)):
            raise SerializationError(f"{what} must be [node_id, output_index, version], "
                                     f"got {short_repr(e)}")
        if not 0 <= e[0] < n:
            raise SerializationError(f"{what} refers to node {e[0]}, but the file has "
                                     f"{n} nodes (ids 0..{n - 1}): a dangling input")
        if e[1] < 0:
            raise SerializationError(f"{what} reads output {e[1]}")
        return e[0], e[1]

    def _read_node(self, i: int, n) -> _RawNode:
        if not isinstance(n, dict):
            raise SerializationError(f"nodes[{i}] must be an object, got {short_repr(n)}")
        for key in ("op", "name", "inputs"):
            if key not in n:
                label = f"node '{n['name']}'" if isinstance(n.get("name"), str) else \
                    f"nodes[{i}]"
                raise SerializationError(f"{label}: missing key '{key}'")
        name, opname = n["name"], n["op"]
        if not isinstance(name, str) or not name:
            raise SerializationError(f"nodes[{i}]: name must be a non-empty string, "
                                     f"got {short_repr(name)}")
        if not isinstance(opname, str):
            raise SerializationError(f"node '{name}': op must be a string (\"null\" for a "
                                     f"variable), got {short_repr(opname)}")
        extra = sorted(set(n) - set(_NODE_KEYS))
        if extra:
            raise SerializationError(f"node '{name}': unknown key(s) {', '.join(extra)}; "
                                     f"a node has {', '.join(_NODE_KEYS[:4])}")
        if n.get("subgraphs"):
            raise SerializationError(f"node '{name}' ({opname}) has subgraphs (a control-"
                                     f"flow op); symgraph does not support them")
        if not isinstance(n.get("backward_source_id", -1), int):
            raise SerializationError(f"node '{name}': backward_source_id must be an int")
        op = None
        if opname != "null":
            try:
                op = get_op(opname)
            except OpError as err:
                raise OpError(f"node '{name}': {err}") from None
        label = f"node '{name}' ({opname if op else 'variable'})"
        attrs: dict[str, str] = {}
        user: set[str] = set()
        # MXNet reads param last without overwriting, so it ranks lowest
        for field in ("param", "attr", "attrs"):
            d = n.get(field)
            if d is None:
                continue
            if not isinstance(d, dict):
                raise SerializationError(f"{label}: '{field}' must be an object, got "
                                         f"{short_repr(d)}")
            for k, v in d.items():
                attrs[k] = _attr_value(label, k, v)
                if field == "attr":
                    user.add(k)
                elif field == "attrs":
                    user.discard(k)
        ins = n["inputs"]
        if not isinstance(ins, list):
            raise SerializationError(f"{label}: inputs must be a list, got {short_repr(ins)}")
        if op is None and ins:
            raise SerializationError(f"{label}: a variable (op \"null\") has no inputs, "
                                     f"this one has {len(ins)}")
        inputs = [self._entry(e, f"{label} input {k}") for k, e in enumerate(ins)]
        return _RawNode(op, name, attrs, user, inputs)

    # -- attributes: hide user keys as MXNet does -------------------------------
    def _hide_user_keys(self) -> None:
        for r in self.raw:
            moves = []
            for k in list(r.attrs):
                if k.startswith("__"):
                    continue
                if k in HIDDEN_KEYS:
                    r.attrs[f"__{k}__"] = r.attrs.pop(k)
                    continue
                if r.op is None:
                    continue
                suffix = next((h for h in HIDDEN_KEYS if k.endswith("_" + h)
                               and len(k) > len(h) + 1), None)
                if suffix is not None and k not in r.op.attrs:
                    moves.append((k, k[: -len(suffix) - 1], suffix))
                elif (k in r.user and k not in r.op.attrs
                      and k not in MXNET_KERNEL_HINTS):
                    r.attrs[f"__{k}__"] = r.attrs.pop(k)
            if not moves:
                continue
            values = {k: r.attrs.pop(k) for k, _, _ in moves}
            _, params = r.op.parse_attrs(r.attrs, r.name)
            arg_names = r.op.arg_names(params)
            for k, arg, key in moves:
                target = None
                if arg in arg_names and arg_names.index(arg) < len(r.inputs):
                    target = self.raw[r.inputs[arg_names.index(arg)][0]]
                if target is not None and target.op is None:
                    target.attrs[f"__{key}__"] = values[k]
                else:  # no variable to carry it: keep it on the node as a hint
                    r.attrs[f"__{k}__"] = values[k]

    # -- building ---------------------------------------------------------------
    def _build(self, r: _RawNode, built: dict) -> Node:
        inputs = [Entry(built[nid], idx) for nid, idx in r.inputs]
        if r.op is None:
            return Node(None, r.name, r.attrs)
        _, params = r.op.parse_attrs(r.attrs, r.name)  # OpError names the node
        want = r.op.arg_names(params) + r.op.aux_names(params)
        if self.version < LEGACY_AUX_VERSION and len(inputs) < len(want):
            # pre-0.9 files leave the aux states out; MXNet's upgrader adds them
            for slot in want[len(inputs):]:
                inputs.append(Entry(Node(None, f"{r.name}_{slot}", dict(r.attrs)), 0))
        if len(inputs) != len(want):
            raise GraphError(f"{r.what()} has {len(inputs)} inputs, expected "
                             f"{len(want)}: {', '.join(want)}")
        return Node(r.op, r.name, r.attrs, inputs)

    def _build_all(self) -> dict:
        """Nodes in dependency order (files may list them in any order), with
        cycles reported by name."""
        built: dict[int, Node] = {}
        state: dict[int, int] = {}  # 1 visiting, 2 done
        for root in range(len(self.raw)):
            if root in state:
                continue
            stack = [(root, 0)]
            state[root] = 1
            while stack:
                nid, k = stack[-1]
                r = self.raw[nid]
                if k < len(r.inputs):
                    stack[-1] = (nid, k + 1)
                    child = r.inputs[k][0]
                    s = state.get(child)
                    if s is None:
                        state[child] = 1
                        stack.append((child, 0))
                    elif s == 1:
                        raise GraphError(f"cycle: node '{self.raw[child].name}' depends on "
                                         f"itself (through '{r.name}'); an input must "
                                         f"refer to an earlier node")
                else:
                    stack.pop()
                    state[nid] = 2
                    built[nid] = self._build(r, built)
        return built

    def graph(self) -> Graph:
        heads = self.doc["heads"]
        if not isinstance(heads, list) or not heads:
            raise SerializationError("'heads' must be a non-empty list of "
                                     "[node_id, output_index, version]")
        head_entries = [self._entry(h, f"heads[{k}]") for k, h in enumerate(heads)]
        args = self.doc["arg_nodes"]
        if not isinstance(args, list):
            raise SerializationError(f"'arg_nodes' must be a list, got {short_repr(args)}")
        for a in args:
            if not isinstance(a, int) or not 0 <= a < len(self.raw):
                raise SerializationError(f"arg_nodes lists {short_repr(a)}, which is not a "
                                         f"node id (0..{len(self.raw) - 1})")
            if self.raw[a].op is not None:
                raise SerializationError(f"arg_nodes lists node {a} ('{self.raw[a].name}'), "
                                         f"which is a {self.raw[a].op.name} node, not a "
                                         f"variable")
        self._hide_user_keys()
        built = self._build_all()
        outs = []
        for k, (nid, idx) in enumerate(head_entries):
            node = built[nid]
            if idx >= node.num_outputs:
                raise GraphError(f"heads[{k}] reads output {idx} of {self.raw[nid].what()}, "
                                 f"which has {node.num_outputs} output(s)")
            outs.append(Entry(node, idx))
        return Graph(outs)  # validates: duplicate names, input counts
