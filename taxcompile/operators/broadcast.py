"""Element-wise `a + b`, `a - b` and `a * b` between features of different shapes: the
broadcast rule (``reading``), read by the shape rule and the plan rule alike, so that what
``check`` accepts is what the code computes (with torch's broadcasting).

Four readings, tried in this order (``reading``):

- ``same``: equal shapes, feature by feature.
- ``gate`` (``*`` only): equal axes, one side has one feature per position, which scales
  every feature of its position (Xu et al.'s β, a fusion gate).
- ``weigh`` (``*`` only): one side is an attention module's weights ``att.weights`` over axis
  L (one feature per position of L, through shape-keeping operators such as ``dropout`` or
  ``1 - w``) and the other side runs over the weights' axes then L: each position is scaled
  by its own weight, x_l a_l (input attention, Wang et al. 2016; word weights in a
  hierarchy). Only ``.weights`` reads so: another feature whose size equals a length is
  still a feature vector, so a spec's meaning never depends on two sizes being equal.
- ``tile``: equal feature sizes, and the axes of one side are a leading part of the other's
  (``()`` of ``(C,)``, ``(S,)`` of ``(S, W)``): the narrow side is the same at every
  position of the wide side's extra, inner axes (BiDAF's h ∘ h̃ with h̃ tiled over the
  context). Axes are matched from the outermost in, as ``concat`` tiles, not from the
  innermost as numpy does: a spec's axes nest outer to inner (sentences, then words), and
  a sentence's vector belongs to each of its words; numpy's trailing match would pair
  (S, d) with the words of (S, W, d).

Anything else is a located error."""

from __future__ import annotations

from typing import NamedTuple

from .. import ir
from ..shapes import Shape, expr_name as _name
from .record import node, op

VERB = {"add": "add", "sub": "subtract", "mul": "multiply"}
OP = {"add": "+", "sub": "-", "mul": "*"}
# Operators after which a feature still has one value per position of the same axis.
KEEPS_POSITIONS = ("identity", "dropout", "rsub", "scale", "tanh", "relu", "sigmoid", "gelu",
                   "elu", "leaky_relu", "softplus", "scaled_tanh")


class Reading(NamedTuple):
    how: str  # same | gate | weigh | tile
    wide: int  # the argument whose shape (and padding mask) the result has
    extra: tuple[str, ...] = ()  # tile: the wide side's axes the narrow side is repeated over


def weights_axis(cm, e: ir.Expr) -> str | None:
    """The axis whose positions ``e``'s features are, when ``e`` is an attention module's
    weights (``att.weights``, possibly through ``KEEPS_POSITIONS`` operators); else None."""
    for _ in range(64):  # a chain of named features; cycles are refused before shapes
        if isinstance(e, ir.Ref):
            n = cm.model.by_id.get(e.node)
            if not (isinstance(n, ir.Node) and n.kind_ != "affinity"):
                return None
            e = n.expr
        elif e.fn == "weights":
            info = cm.attention.get(e.args[0].node)
            return info.attended if info is not None else None
        elif e.fn in KEEPS_POSITIONS:
            e = e.args[0]
        else:
            return None
    return None


def reading(fn: str, shapes: list[Shape], over: list[str | None]) -> Reading | None:
    """How ``a <fn> b`` combines features of ``shapes``; ``over``: each side's
    ``weights_axis``. None: the shapes do not combine."""
    a, b = shapes
    if a == b:
        return Reading("same", 0)
    if fn == "mul" and a.axes == b.axes and 1 in (a.dim, b.dim):
        return Reading("gate", 0 if a.dim != 1 else 1)
    if fn == "mul":
        for w in (0, 1):
            if over[w] is not None and shapes[1 - w].axes == shapes[w].axes + (over[w],):
                return Reading("weigh", 1 - w)
    if a.dim == b.dim:
        for wide in (0, 1):
            big, small = shapes[wide].axes, shapes[1 - wide].axes
            if len(small) < len(big) and big[: len(small)] == small:
                return Reading("tile", wide, big[len(small):])
    return None


def hint(fn: str, names: list[str], shapes: list[Shape], over: list[str | None]) -> str:
    a, b = shapes
    if fn == "mul":
        rule = ("`*` takes equal shapes, a gate of one feature per position "
                "(`sigmoid(linear(h, 1)) * h`), a vector over fewer leading axes with the same "
                "features (`h * q`), or attention weights over h's last axis "
                "(`h * att.weights`)")
    else:
        rule = (("a residual sum (eq. 37)" if fn == "add" else "`-`") + " takes equal shapes, "
                f"or a vector over fewer leading axes with the same features (`h {OP[fn]} q`); "
                "project one side with `linear`")
    if a.dim == b.dim and a.axes and b.axes and a.axes[0] != b.axes[0]:
        return (f"`{names[0]}` and `{names[1]}` run over different positions ({a.axes[0]}, "
                f"{b.axes[0]}): attend from one to the other first; {rule}")
    for w in (0, 1):
        if over[w] is not None:
            return (f"`{names[w]}` is attention weights over `{over[w]}`: it scales each "
                    f"position of a feature over ({', '.join(shapes[w].axes + (over[w],))}, d)"
                    f"; {rule}")
    return rule


def shape_elementwise(self, e, a, nid):
    what = VERB[e.fn]
    if a[0].dim is None or a[1].dim is None:
        self.err(e.loc, f"cannot {what} token ids", "embed them first: `embed(x, d)`")
        return None
    over = [weights_axis(self.cm, x) for x in e.args]
    r = reading(e.fn, a, over)
    if r is None:
        self.err(e.loc, f"cannot {what} `{_name(e.args[0])}` {a[0]} and "
                 f"`{_name(e.args[1])}` {a[1]}: shapes differ",
                 hint(e.fn, [_name(x) for x in e.args], a, over))
        return None
    if r.how == "tile" and _tiles_updated(self, e.args[1 - r.wide], nid):
        self.err(e.loc, f"cannot {what} `{_name(e.args[0])}` {a[0]} and "
                 f"`{_name(e.args[1])}` {a[1]}: shapes differ",
                 f"an `update` keeps the shape of the feature it updates (eq. 37: q + c), "
                 f"and this would repeat `{_name(e.args[1 - r.wide])}` over "
                 f"{', '.join(r.extra)}; pool the other side first (`mean(…)`), or name a new "
                 "feature")
        return None
    return a[r.wide]


def _tiles_updated(self, narrow: ir.Expr, nid: str) -> bool:
    """Whether ``narrow`` is the earlier version of the feature that the ``update`` ``nid``
    rebinds: tiling it would change the updated stream's shape (a hop's query would become
    one per position)."""
    node = self.cm.model.by_id.get(nid)
    return isinstance(node, ir.Node) and "@" in nid and isinstance(narrow, ir.Ref) \
        and narrow.node.split("@")[0] == nid.split("@")[0]


def plan_elementwise(p, e, a, n):
    k = p.kit
    x, y = a
    r = reading(e.fn, [v.shape for v in a], [weights_axis(p.cm, arg) for arg in e.args])
    assert r is not None, "checks refuses shapes that do not combine"
    if r.how in ("same", "tile"):
        p.equal.append((x.dim, y.dim))
    if r.how in ("same", "gate"):
        out = a[r.wide]
        if e.fn == "add":
            return k.Var(f"{x.name} + {y.name}", x.shape, x.mask or y.mask, x.dim, x.mask_code,
                         prec=k.SUM)
        left = k.atom(x) if e.fn == "mul" else x.name
        return k.Var(f"{left} {OP[e.fn]} {k.atom(y)}", out.shape, x.mask or y.mask,
                     out.dim, out.mask_code, prec=k.PRODUCT if e.fn == "mul" else k.SUM)
    wide, narrow = a[r.wide], a[1 - r.wide]
    if r.how == "weigh":
        code = p.tmp(f"{k.atom(narrow)}.unsqueeze(-1)", "weight",
                     f"{p.shape(Shape(wide.shape.axes, 1))}: one weight per position "
                     f"of {wide.shape.axes[-1]}")
    else:
        ones = Shape(narrow.shape.axes + ("1",) * len(r.extra), narrow.shape.dim)
        code = p.tmp(k.atom(narrow) + ".unsqueeze(-2)" * len(r.extra), "tiled",
                     f"{p.shape(ones, dim=narrow.dim)}: the same at every position of "
                     f"{', '.join(r.extra)}")
    # code is a local name; the wide side is parenthesised where it is an operand that needs
    # it (left of *, right of - and *)
    if r.wide == 0:
        left, right = (k.atom(wide) if e.fn == "mul" else wide.name), code
    else:
        left, right = code, (wide.name if e.fn == "add" else k.atom(wide))
    return k.Var(f"{left} {OP[e.fn]} {right}", wide.shape, wide.mask, wide.dim, wide.mask_code,
                 prec=k.PRODUCT if e.fn == "mul" else k.SUM)


OPS = {o.name: o for o in (
    op("add", node("a"), node("b"), label="+", infix=True,
       shape=shape_elementwise, plan=plan_elementwise),
    # element-wise: a gate times a feature (a (…, 1) gate scales every feature of its
    # position: Xu's beta), a difference (c - x, the 1 - g of a fusion gate, is `rsub`)
    op("mul", node("a"), node("b"), label="*", infix=True,
       shape=shape_elementwise, plan=plan_elementwise),
    op("sub", node("a"), node("b"), label="-", infix=True,
       shape=shape_elementwise, plan=plan_elementwise),
)}
