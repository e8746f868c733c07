"""Combinations of one attention module's fields that the generated code has no
computation for, refused with a located error (the spec generator found `check`
accepting them and the model failing at run time). Decided from the statement alone, but
reported by ``check.attention`` once the statement's inputs have shapes (the rule of what
is checked where: ``taxcompile/check/__init__.py``)."""

from __future__ import annotations

from . import ir
from .diagnostics import Location
from . import mechanisms as mech
from .mechanisms import SCORES

# The scores that read an affinity matrix (eq. 12-16): codegen has no other
AFFINITY_SCORES = tuple(name for name, m in SCORES.items() if m.affinity)


def refusal(n: ir.Attention) -> tuple[Location, str, str] | None:
    """(location, message, hint) of the first combination ``n`` has that no equation
    defines, or None."""
    where = f"attention `{n.name}`"
    if n.affinity is not None and n.score.fn not in AFFINITY_SCORES:
        return (n.score.loc, f"{where} reads affinity `{n.affinity}`, which only the "
                "`additive` (eq. 14-15), `max_pool` (eq. 16) and `affinity` (eq. 12-13) "
                f"scores use; the `{n.score.fn}` score would ignore it",
                "use one of those scores, or drop `affinity` to score the query and the "
                "keys directly")
    single = [rec.single for rec, _ in mech.penalties(n) if rec.single]
    if single and n.dimensionality == "multi":
        return (n.loc, f"{where}: {single[0]}", "use `dimensionality = single`")
    return None
