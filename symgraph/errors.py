"""The error hierarchy. Every user-facing failure is a SymgraphError.

Messages name the node, the op and what was expected, so that the CLI can
print one line and the user knows what to fix.
"""


import re

# a word longer than this in a message is user input (a 20,000-character
# name, a huge list of keys): cut it so the message stays one short line
LONG_WORD = 120
_LONG = re.compile(r"\S{%d,}" % (LONG_WORD + 1))


class SymgraphError(Exception):
    """Base class of every error symgraph raises on bad input."""

    def __init__(self, *args):
        if len(args) == 1 and isinstance(args[0], str):
            args = (_LONG.sub(lambda m: m.group()[:LONG_WORD - 3] + "...", args[0]),)
        super().__init__(*args)


class GraphError(SymgraphError):
    """The graph is malformed: a cycle, a dangling input, a duplicate name."""


class OpError(SymgraphError):
    """An unknown op, or an attribute an op does not accept."""


class UnknownOpError(OpError, AttributeError):
    """An unknown op asked for as an attribute (``sg.sym.Convolutoin``,
    ``sg.nd.relu_``, ``x.no_such_op()``). It is an OpError like every unknown
    op, and an AttributeError so that ``hasattr`` and ``getattr(m, name,
    default)`` keep working on ``sg.sym``, ``sg.nd`` and NDArrays."""


class ShapeError(SymgraphError):
    """Shapes or dtypes that do not fit an op, or that cannot be inferred."""


class SerializationError(SymgraphError):
    """A JSON file that is malformed or not in MXNet's symbol schema."""


class BindError(SymgraphError):
    """Binding or running an executor with missing or wrong arrays."""


class ContextError(SymgraphError):
    """A device context that does not exist on this machine."""


class PlanError(SymgraphError):
    """A memory plan that cannot be made or that failed verification."""
