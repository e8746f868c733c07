"""Sizes tied to an axis length (``check/ties.py`` finds them): a size the spec writes as a
number or a constant (``learned(16)`` beside ``(N = 16)``, inside ``stack``, ``context``,
``+ - *`` feature by feature, a dot-product score's query, an input's feature size) that
must equal a fixed axis's length is written as that axis's Config field
(``torch.randn(cfg.N)``), so ``Config(N = …)`` and ``Config.tiny()`` change both, and sizes
that must stay equal are one field. (A constant written there, ``learned(d)`` with
``let d = 16``, is read as N there too; ``d`` keeps its field for its other uses.)"""

from __future__ import annotations

from ..check.ties import tie_groups
from .names import Dim, Size


def literal_ties(p) -> dict[tuple[int, str], str]:
    """(id of an operation, its size parameter) -> the Config code of the axis length it
    must equal; fills ``p.tie_ops`` and ``p.input_ties`` (input -> that code)."""
    ties = tie_groups(p.m, p.cm)
    p.tie_ops.update(ties.ops)
    p.input_ties = {i: _code(p, a) for i, a in ties.inputs.items()}
    return {k: _code(p, a) for k, a in ties.params.items()}


def axis_dim(p, axis: str) -> Dim:
    """The axis's length as Config code, ``N+1`` (after ``prepend``) included."""
    base, plus, n = axis.rpartition("+")
    if plus and n.isdigit() and not any(axis in i.axes for i in p.m.inputs):
        return Dim(0, (Size.of(axis_dim(p, base), f" + {n}"),))
    return p.axis_size(axis)


def _code(p, axis: str) -> str:
    code = axis_dim(p, axis).render("cfg")
    return code if code[4:].isidentifier() else f"({code})"
