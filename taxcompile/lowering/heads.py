"""The head mechanisms' fields of an attention statement (their records are in
mechanisms/heads.py): `talking_heads = true | pre | post`, `mem_kv = M` and
`head_gates = true`, each lowered by ``Mechanisms.switch`` into an ``ir.Mech``;
``lowering/attention.py`` calls ``head_fields`` once per statement. What each needs of the
module and cannot go with is its record's ``requires`` / ``excludes``, checked on the IR
(``check/attention.py``, worded by mechanisms/needs.py); what needs another node's shape (a
shared module's heads agreeing) is checked in ``check/sharing.py`` (checks.py's package).
Errors of this kind: an unknown value of a field (`talking_heads = sideways`), a count out
of range (`mem_kv = 0`)."""

from __future__ import annotations

from .. import ast
from .. import mechanisms as mech

FIELDS = tuple(mech.HEAD_MECHANISMS)


def head_fields(low, f: dict[str, ast.Field], scope) -> dict:
    """``head_mechanisms``, the ``ir.Mech`` of each head mechanism the statement sets, in
    the registry's order (errors are recorded on ``low``)."""
    out = [m for name, rec in mech.HEAD_MECHANISMS.items() if name in f
           if (m := low.switch("trait", f[name], rec, scope))]
    return {"head_mechanisms": tuple(out)}
