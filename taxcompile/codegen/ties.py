"""Sizes tied to an axis length (``check/ties.py`` finds them): a size the spec writes as a
number or a constant (``learned(16)`` beside ``(N = 16)``, inside ``stack``, ``context``,
``+ - *`` feature by feature, a dot-product score's query, an input's feature size) that
must equal a fixed axis's length is written as that axis's Config field
(``torch.randn(cfg.N)``), so ``Config(N = …)`` and ``Config.tiny()`` change both, and sizes
that must stay equal are one field. (A constant written there, ``learned(d)`` with
``let d = 16``, is read as N there too; ``d`` keeps its field for its other uses.)"""

from __future__ import annotations

from ..check.ties import tie_groups
from .expr import BinOp, CfgField, Const, Expr, Paren
from .names import Dim


def literal_ties(p) -> dict[tuple[int, str], Expr]:
    """(id of an operation, its size parameter) -> the axis length it must equal, over the
    Config's fields; fills ``p.tie_ops`` and ``p.input_ties`` (input -> that length)."""
    ties = tie_groups(p.m, p.cm)
    p.tie_ops.update(ties.ops)
    p.input_ties = {i: _length(p, a) for i, a in ties.inputs.items()}
    return {k: _length(p, a) for k, a in ties.params.items()}


def axis_dim(p, axis: str) -> Dim:
    """The axis's length as Config code, ``N+1`` (after ``prepend``) included."""
    base, plus, n = axis.rpartition("+")
    if plus and n.isdigit() and not any(axis in i.axes for i in p.m.inputs):
        return Dim(0, (BinOp("+", axis_dim(p, base).expr(), Const(int(n))),))
    return p.axis_size(axis)


def _length(p, axis: str) -> Expr:
    """The axis's length as one term: a lone field, else parenthesised."""
    e = axis_dim(p, axis).expr()
    return e if isinstance(e, CfgField) else Paren(e)
