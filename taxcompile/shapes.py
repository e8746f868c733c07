"""What the checker infers of a value, ``Shape``, and how its messages name an expression
(``expr_name``): the leaf the checker, codegen and the operator families
(``taxcompile/operators/``) all read, so that none of them imports another for it."""

from __future__ import annotations

from . import ir
from .frozen import Positional


class Shape(Positional):
    """Named axes (positions, groups) and the feature size (None: token ids). A frozen
    record (frozen.py), built as ``Shape(axes, dim)``: defining it runs no code generation."""

    axes: tuple[str, ...]
    dim: int | None

    def __str__(self) -> str:
        return "(" + ", ".join(self.axes + ((str(self.dim),) if self.dim is not None else ())) + ")"


def expr_name(e: ir.Expr | None) -> str:
    """An expression as an error message names it: a node, ``att.weights``, ``fn(…)``."""
    if e is None:
        return "?"
    if isinstance(e, ir.Ref):
        return e.node
    if e.fn == "weights":
        return f"{expr_name(e.args[0])}.weights"
    return f"{e.fn}(…)"


def learned_axis(node, e: ir.Op) -> str:
    """The axis of ``learned(K, d)``'s K vectors in statement ``node``: ``NODE.K``, the
    statement without hop indexes and K as the spec writes it (a `let` name or a number),
    for the checker's shape rule and the planner's alike. An axis of its own, so no input's
    axis (nor its mask) is taken for it."""
    hop = getattr(node, "hop", None)
    return f"{hop.template if hop else node.id}.{dict(e.sym).get('n') or e.param('n')}"
