"""The width of a `project(x)` written without one as the keys or values of a
`kv_heads = g` module (grouped-query attention, Ainslie et al. 2023): g heads of the query
heads' width, g·d_q/H (check/grouped.py accepts it), as an expression over the Config
fields the spec's `let` constants became, so `Config(d_model = …)` keeps it right."""

from __future__ import annotations

from .. import ir
from ..check.grouped import bare_project
from .names import Dim, dim_of


def inferred(n, e) -> bool:
    """Whether op ``e`` is a keys/values projection of module ``n`` whose width is g·d_q/H."""
    return isinstance(n, ir.Attention) and bool(n.kv_heads) and bare_project(e) \
        and (e is n.keys or e is n.values)


def _field(p, n: ir.Attention, key: str, value: int) -> Dim:
    sym = dict(n.sym).get(key)
    if sym:
        p.use_sym(sym)
    return dim_of(value, sym)


def kv_dim(p, n: ir.Attention) -> tuple[int, Dim]:
    """(g·d_q/H, the same over Config fields) for module ``n``: d_q from its query, a name
    or ``project(NAME[, d])`` (check/grouped.py refuses other queries here)."""
    q = n.query
    if isinstance(q, ir.Op):  # project(NAME[, d])
        qd = p.p(q, "d") if q.param("d") is not None else p.ref(q.args[0].node).dim
    else:
        qd = p.ref(q.node).dim
    size = n.kv_heads * (p.cm.attention[n.id].d_q // n.heads)
    dim = qd.floordiv(_field(p, n, "heads", n.heads)).times(_field(p, n, "kv_heads", n.kv_heads))
    return size, dim
