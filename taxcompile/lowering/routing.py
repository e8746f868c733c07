"""`heads_out = routing(capsules = N, iters = r)`: the heads joined by routing by agreement
(Li et al. 2019, "Information Aggregation for Multi-Head Attention with Routing-by-
Agreement"; Sabour et al. 2017's dynamic routing), its record in mechanisms/others.py.
Lowered here, with the located errors of a misuse that the statement shows on its own:
capsule-based attention (its own capsules, one learned query per class, eq. 43-45) and
graph attention (GAT joins its heads by concat or mean in its own kernel). One head is
refused where every `heads_out` is (``lowering/attention.py``); N not dividing the
context's width needs the values' shape and is checked in checks.py (``check/attention.py``)."""

from __future__ import annotations

from .. import ast, ir
from .. import mechanisms as mech

RECORD = mech.HEADS_OUT["routing"]


def routed(e: ast.Expr) -> bool:
    """Whether a `heads_out` value names routing (a call, or the bare name)."""
    return isinstance(e, ast.Call) and e.fn == RECORD.name or \
        isinstance(e, ast.Ref) and len(e.parts) == 1 and e.name == RECORD.name


def routing_field(low, f: dict[str, ast.Field], s: ast.Attention, traits: dict,
                  score) -> dict:
    """The ``ir.Attention`` fields of `heads_out = routing(…)` ({} when the statement does
    not route its heads, or on an error, which is recorded on ``low``)."""
    fld = f.get("heads_out")
    if fld is None or not routed(fld.value):
        return {}
    name, p, syms = low._mechanism(fld, {RECORD.name: RECORD.params}, "way of joining heads")
    if not name or (traits.get("heads") or 1) < 2:  # one head: reported by the caller
        return {}
    blocked = "capsule-based attention (`capsules`, one learned query per class, eq. 43-45)" \
        if traits.get("capsules") else "graph attention (GAT joins its heads by concatenation " \
        "or their mean, eq. 5-6)" if score is not None and mech.score(score.fn).graph else ""
    if blocked:
        low.err(fld.value.pos, f"routing by agreement cannot join the heads of {blocked}",
                "drop `heads_out = routing(…)`, or the field it cannot go with")
        return {}
    return {"heads_out": RECORD.name, "routing": ir.Routing(
        capsules=int(p["capsules"]), iters=int(p["iters"]), sym=tuple(sorted(syms.items())),
        loc=low.loc(fld.value.pos))}
