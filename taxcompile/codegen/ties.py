"""Sizes tied to an axis length. ``context(x, w)`` weighs x's N positions with w's features,
so w's size must equal N's length: a spec that writes ``(N = 16)`` and ``learned(16)`` means
one weight per position. The generated code writes the size that gives w its features as
N's Config field (``torch.randn(cfg.N)``), so ``Config(N = …)`` and ``Config.tiny()`` change
both: sizes that must stay equal are one field. (A constant written there, ``learned(d)``
with ``let d = 16``, is read as N there too; `d` keeps its field for its other uses.)"""

from __future__ import annotations

from .. import checks, ir

# operators whose output has the feature size of (each of) their arguments
SAME_SIZE = frozenset({
    "identity", "dropout", "norm", "scale", "positional", "positions", "tanh", "relu",
    "sigmoid", "gelu", "elu", "leaky_relu", "softplus", "scaled_tanh", "add", "sub", "rsub",
    "mean", "max", "sum", "first", "prev", "ffn"})
# operators whose output size is a parameter
SIZE_PARAM = {"learned": "d", "linear": "d", "cnn": "d", "embed": "d", "project": "d",
              "conv2d": "d"}


def literal_ties(p) -> dict[tuple[int, str], str]:
    """(id of an operation, its size parameter) -> the Config code of the axis length it
    must equal, for each size read as weights over an axis by ``context``."""
    out: dict[tuple[int, str], str] = {}
    for n in p.m.nodes:
        for e in _exprs(n):
            for op in checks.operations(e):
                if op.fn != "context" or not isinstance(op.args[0], ir.Ref):
                    continue
                shape = p.cm.shapes.get(op.args[0].node)
                if shape is None or not shape.axes or not p.cm.sizes.get(shape.axes[-1]):
                    continue
                code = p.axis_size_code(shape.axes[-1])
                for key in sources(p.m, op.args[1], set()):
                    out[key] = code if code.startswith("cfg.") and code[4:].isidentifier() \
                        else f"({code})"
    return out


def sources(m: ir.Model, e: ir.Expr, seen: set[str]) -> list[tuple[int, str]]:
    """The size parameters (operation id, parameter) that give ``e`` its size."""
    if isinstance(e, ir.Ref):
        node = m.by_id.get(e.node)
        if e.node in seen or not isinstance(node, ir.Node):
            return []
        seen.add(e.node)
        return sources(m, node.expr, seen)
    name = SIZE_PARAM.get(e.fn)
    if name is not None and e.param(name) is not None:
        return [(id(e), name)]
    if e.fn in SAME_SIZE or name is not None:  # project(x): x's size
        return [s for a in e.args for s in sources(m, a, seen)]
    return []


def _exprs(n) -> list[ir.Expr]:
    if isinstance(n, ir.Node):
        return [n.expr]
    if isinstance(n, ir.Attention):
        return [e for e in (n.query, n.keys, n.values) if e is not None]
    return []
