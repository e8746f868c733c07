"""Feature sizes the checker equates with an axis length. ``context(x, w)`` weighs x's N
positions with w's features, ``att.weights + learned(16)`` adds a vector to one weight per
position of N, ``stack`` and ``+ - *`` feature by feature make sizes equal (not a gate, nor
``a.weights * h``, which scales each position of h), and a dot-product score makes the
query's size the keys'. Where such a chain ends at a fixed axis, a size written in the spec
(``learned(16)`` beside ``(N = 16)``) is that axis's length, and the generated code writes it
as the axis's Config field (``codegen/ties.py``), so ``Config(N = …)`` and ``Config.tiny()``
change both. A size that cannot follow the axis (a part of a ``concat``, an RNN's width, a
class count) is refused here with a located error, before code is generated."""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import ir
from .. import mechanisms as mech
from .core import _name, operations

# operators whose output has the feature size of (each of) their arguments
SAME_SIZE = frozenset({
    "identity", "dropout", "norm", "scale", "positional", "positions", "tanh", "relu",
    "sigmoid", "gelu", "elu", "leaky_relu", "softplus", "scaled_tanh", "add", "sub", "rsub",
    "mean", "max", "sum", "first", "prev", "ffn", "flatten", "maxpool", "upsample",
    "prepend", "stack"})
# operators whose output size is a parameter (the planner reads it through ``Planner.p``)
SIZE_PARAM = {"learned": "d", "linear": "d", "cnn": "d", "embed": "d", "project": "d",
              "conv2d": "d"}


@dataclass
class Ties:
    """``params``: (id of an operation, its size parameter) -> the axis its size is;
    ``inputs``: an input whose feature size is an axis's length -> that axis; ``ops``: the
    operations by id; ``fixed``: (an operation or input whose size cannot follow an axis,
    the axis, what derives the size, the size written) for the checker's errors."""

    params: dict[tuple[int, str], str] = field(default_factory=dict)
    inputs: dict[str, str] = field(default_factory=dict)
    ops: dict[int, ir.Op] = field(default_factory=dict)
    fixed: list[tuple[object, str, object, int]] = field(default_factory=list)


class _Groups:
    """The sizes made equal, as a union-find: ``find`` halves the path it walks, ``union``
    joins each key of a list once (``a + b`` repeats the sources its sides share: a QANet
    block's lists held 40 keys for each distinct one) and each list once, with one lookup
    of its first key's group."""

    def __init__(self) -> None:
        self.parent: dict = {}
        self.joined: set[tuple] = set()

    def find(self, k):
        parent = self.parent
        while parent.setdefault(k, k) != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    def union(self, keys) -> None:
        group = tuple(dict.fromkeys(keys))
        if len(group) < 2 or group in self.joined:
            return
        self.joined.add(group)
        root = self.find(group[0])
        for k in group[1:]:
            r = self.find(k)
            if r != root:
                self.parent[r] = root


def tie_groups(m: ir.Model, cm) -> Ties:
    """Union the sizes the checker makes equal; report those that end at a fixed axis."""
    groups = _Groups()
    parent, find, union = groups.parent, groups.find, groups.union
    out = Ties()
    derived: dict[int, tuple[ir.Op, list]] = {}  # a concat (or other op) -> its own sizes
    memo: dict[str, list[tuple]] = {}  # a node's id -> what gives it its size

    def sources(e: ir.Expr, seen: frozenset = frozenset()) -> list[tuple]:
        """What gives ``e`` its feature size: ("param", op id, name), ("input", id),
        ("axis", A) for weights over A, or ("derived", op id) for a size computed from
        others (a concat's sum, an RNN's width)."""
        if isinstance(e, ir.Ref):
            if e.node in seen:
                return []
            if e.node not in memo:  # once per node: a deep stack of layers reads each
                memo[e.node] = ref_sources(e, seen | {e.node})  # node along many paths
            return memo[e.node]
        if e.fn == "weights":
            info = cm.attention.get(e.args[0].node) if isinstance(e.args[0], ir.Ref) else None
            return [("axis", info.attended)] if info is not None else []
        name = SIZE_PARAM.get(e.fn)
        if name is not None and e.param(name) is not None:
            out.ops[id(e)] = e
            return [("param", id(e), name)]
        if e.fn in SAME_SIZE or name is not None:  # project(x): x's size
            keys = list(dict.fromkeys(s for a in e.args for s in sources(a, seen)))
            if e.fn == "stack":
                union(keys)
            return keys
        if e.fn == "context":  # A V: the values' size
            return sources(e.args[0], seen)
        own = [("param", id(e), p) for p, v in e.params if isinstance(v, int)
               and not isinstance(v, bool) and not dict(e.sym).get(p)]
        if own:
            out.ops[id(e)] = e
        return derive(e, own, *e.args, seen=seen)

    def ref_sources(e: ir.Ref, seen: frozenset) -> list[tuple]:
        node = m.by_id.get(e.node)
        if isinstance(node, ir.Input):
            return [("input", node.id)] if node.dim is not None else []
        if isinstance(node, ir.Node):
            return sources(node.expr, seen)
        if isinstance(node, ir.Attention):  # its context: sized from its values
            return derive(e, [], node.values, seen=seen)
        return []

    def derive(e, own, *args, seen) -> list[tuple]:
        inner = list(dict.fromkeys(
            own + [s for a in args if isinstance(a, ir.Expr) for s in sources(a, seen)]))
        derived[id(e)] = (e, inner)
        return [("derived", id(e))]

    for n in m.nodes:
        for ex in _exprs(n):
            for op in operations(ex):
                if op.fn == "context" and isinstance(op.args[0], ir.Ref):
                    shape = cm.shapes.get(op.args[0].node)
                    if shape is not None and shape.axes:
                        union([("axis", shape.axes[-1]), *sources(op.args[1])])
                elif op.fn in ("add", "sub", "mul") and feature_by_feature(cm, op):
                    a, b = (sources(x) for x in op.args)
                    if a and b:
                        union(a + b)
                elif op.fn == "stack":  # its parts have one shape
                    sources(op)
        if isinstance(n, ir.Attention) and n.query is not None and n.keys is not None \
                and mech.SCORES[n.score.fn].equal_qk:
            union(sources(n.query) + sources(n.keys))
    axes = {find(k): k[1] for k in parent if k[0] == "axis" and tunable(m, cm, k[1])}
    for k in parent:
        axis = axes.get(find(k))
        if axis is None:
            continue
        if k[0] == "param":
            out.params[k[1], k[2]] = axis
        elif k[0] == "input":
            out.inputs[k[1]] = axis
        elif k[0] == "derived":
            op, inner = derived[k[1]]
            for s in inner:  # a written size inside it cannot follow the axis
                if s[0] == "param" and not dict(out.ops[s[1]].sym).get(s[2]):
                    out.fixed.append((out.ops[s[1]], axis, op, out.ops[s[1]].param(s[2])))
                elif s[0] == "input" and not dict(m.by_id[s[1]].sym).get("dim"):
                    out.fixed.append((m.by_id[s[1]], axis, op, m.by_id[s[1]].dim))
    del sources, ref_sources, derive  # recursive closures are cycles: they would keep the
    return out  # IR for the collector


def tunable(m: ir.Model, cm, axis: str) -> bool:
    """Whether a Config field sets the axis's length: a fixed axis of an input, or one
    derived from such axes (``H/2``, ``H*W``, ``N+1``). A stack's or capsules' axis has as
    many positions as the spec writes."""
    if any(axis in i.axes and i.sizes[i.axes.index(axis)] is not None for i in m.inputs):
        return True
    if axis in cm.scaled:
        return tunable(m, cm, cm.scaled[axis][0])
    if "*" in axis:
        return all(tunable(m, cm, a) for a in axis.split("*", 1))
    base, plus, n = axis.rpartition("+")
    return bool(plus) and n.isdigit() and tunable(m, cm, base)


def feature_by_feature(cm, op: ir.Op) -> bool:
    """Whether ``a + b``, ``a - b`` or ``a * b`` combines its sides' features one by one (so
    their sizes are one): not a gate of one feature per position, nor attention weights
    scaling each position (``a.weights * h``: h's size is its own, whatever N's length)."""
    from ..operators.broadcast import reading, weights_axis

    shapes = cm.arg_shapes.get(id(op))
    if shapes is None:
        return False
    r = reading(op.fn, shapes, [weights_axis(cm, x) for x in op.args])
    return r is not None and r.how in ("same", "tile")


def _exprs(n) -> list[ir.Expr]:
    if isinstance(n, ir.Node):
        return [n.expr]
    if isinstance(n, ir.Attention):
        return [e for e in (n.query, n.keys, n.values) if e is not None]
    return []


def check_ties(chk, m: ir.Model) -> None:
    """A located error for each size written in the spec that must equal an axis length
    but is computed into it (``concat(learned(8), learned(8))`` as weights over N)."""
    ties = tie_groups(m, chk.cm)
    for what, axis, op, written in ties.fixed:
        size = chk.cm.sizes.get(axis)
        name = f"input `{what.id}`" if isinstance(what, ir.Input) else f"`{_name(what)}`"
        via = "" if what is op else f" through `{_name(op)}`"
        chk.err(what.loc, f"{name} sets a size ({written}) that must equal the length of axis `{axis}` "
                f"({size}){via}, but `Config({axis} = …)` and `Config.tiny()` change that "
                "length and could not change this size with it",
                f"name the length with a `let` (`let n = {size}` and `({axis} = n)`) and "
                "write the sizes that add up to it from `n`")
