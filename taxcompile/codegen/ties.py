"""Sizes tied to an axis length. ``context(x, w)`` weighs x's N positions with w's features,
and ``att.weights + learned(16)`` adds a vector to one weight per position of N: in both,
a feature size must equal N's length. A spec that writes ``(N = 16)`` and ``learned(16)``
means one per position, so the generated code writes the size that gives those features
as N's Config field (``torch.randn(cfg.N)``): ``Config(N = …)`` and ``Config.tiny()``
change both, and sizes that must stay equal are one field. (A constant written there,
``learned(d)`` with ``let d = 16``, is read as N there too; `d` keeps its field for its other
uses.) The sizes are followed through size-keeping operators, element-wise sums and
products, and features (not through attention modules or recurrences)."""

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
    must equal."""
    parent: dict = {}

    def find(k):
        while parent.setdefault(k, k) != k:
            k = parent[k]
        return k

    def union(keys):
        for k in keys[1:]:
            parent[find(k)] = find(keys[0])

    for n in p.m.nodes:
        for e in _exprs(n):
            for op in checks.operations(e):
                if op.fn == "context" and isinstance(op.args[0], ir.Ref):
                    shape = p.cm.shapes.get(op.args[0].node)
                    if shape is not None and shape.axes:
                        union([("axis", shape.axes[-1]), *sources(p, op.args[1], set())])
                elif op.fn in ("add", "sub", "mul"):
                    a, b = (sources(p, x, set()) for x in op.args)
                    if a and b and (op.fn != "mul" or _size(p, a[0]) == _size(p, b[0])):
                        union(a + b)  # (a `*` by a (…, 1) gate keeps the other's size)
    out: dict[tuple[int, str], str] = {}
    axes = {find(k): k[1] for k in parent if k[0] == "axis" and p.cm.sizes.get(k[1])}
    for k in parent:
        axis = axes.get(find(k))
        if k[0] == "param" and axis is not None:
            code = p.axis_size_code(axis)
            if code.startswith("cfg."):  # (an axis of a fixed size no Config field holds: as is)
                out[k[1], k[2]] = code if code[4:].isidentifier() else f"({code})"
    return out


def sources(p, e: ir.Expr, seen: set[str]) -> list[tuple]:
    """What gives ``e`` its feature size: ("param", id of an operation, its parameter) or
    ("axis", A) for attention weights over axis A."""
    if isinstance(e, ir.Ref):
        node = p.m.by_id.get(e.node)
        if e.node in seen or not isinstance(node, ir.Node):
            return []
        seen.add(e.node)
        return sources(p, node.expr, seen)
    if e.fn == "weights":
        info = p.cm.attention.get(e.args[0].node) if isinstance(e.args[0], ir.Ref) else None
        return [("axis", info.attended)] if info is not None else []
    name = SIZE_PARAM.get(e.fn)
    if name is not None and e.param(name) is not None:
        p.tie_ops[id(e)] = e
        return [("param", id(e), name)]
    if e.fn in SAME_SIZE or name is not None:  # project(x): x's size
        return [s for a in e.args for s in sources(p, a, seen)]
    return []


def _size(p, key: tuple) -> int | None:
    if key[0] == "axis":
        return p.cm.sizes.get(key[1])
    return p.tie_ops[key[1]].param(key[2])


def _exprs(n) -> list[ir.Expr]:
    if isinstance(n, ir.Node):
        return [n.expr]
    if isinstance(n, ir.Attention):
        return [e for e in (n.query, n.keys, n.values) if e is not None]
    return []
