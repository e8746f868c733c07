"""`heads_out = NAME(…)`: a way of joining heads that has parameters (routing by agreement,
`routing(capsules = N, iters = r)`: Li et al. 2019, after Sabour et al. 2017), lowered as
every mechanism is (``lowering/mechanisms.py``: its parameters checked against its record
in ``mechanisms.HEADS_OUT``) into ``ir.Attention.join``. Errors of this kind: an unknown,
missing or out-of-range parameter (located at the call). One head is refused where every
`heads_out` is (``lowering/attention.py``); what it cannot go with is its record's
``excludes``, and a part count that does not divide the context's width needs the values'
shape: both are checked in checks.py (``check/needs.py``, ``check/attention.py``)."""

from __future__ import annotations

from .. import ast
from .. import mechanisms as mech


def calls() -> dict[str, mech.Mechanism]:
    """The ways of joining heads that take parameters, by every spelling."""
    return {k: m for k, m in mech.spellings(mech.HEADS_OUT).items() if m.params}


def routed(e: ast.Expr) -> bool:
    """Whether a `heads_out` value names a way with parameters (a call, or the bare name)."""
    return isinstance(e, ast.Call) and e.fn in calls() or \
        isinstance(e, ast.Ref) and len(e.parts) == 1 and e.name in calls()


def routing_field(low, f: dict[str, ast.Field], traits: dict) -> dict:
    """The ``ir.Attention`` fields of `heads_out = NAME(…)` ({} when the way the statement
    joins its heads has no parameters, or on an error, which is recorded on ``low``)."""
    fld = f.get("heads_out")
    if fld is None or not routed(fld.value):
        return {}
    m = low.mechanism("heads_out", fld, calls(), "way of joining heads")
    if m is None or (traits.get("heads") or 1) < 2:  # one head: reported by the caller
        return {}
    return {"heads_out": m.fn, "join": m}
