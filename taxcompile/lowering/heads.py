"""The head mechanisms' fields of an attention statement (issue 25; their records are in
mechanisms/heads.py): `talking_heads = true | pre | post`. Lowered here, with the located
errors for a misuse (one head, multi-dimensional weights, coverage's loop over queries,
graph attention);
``lowering/attention.py`` calls ``head_fields`` once per statement."""

from __future__ import annotations

from .. import ast
from .. import mechanisms as mech

FIELDS = ("talking_heads",)
TALKING = {"true": "both", "false": "", "pre": "pre", "post": "post"}


def head_fields(low, f: dict[str, ast.Field], s: ast.Attention, traits: dict, score) -> dict:
    """The ``ir.Attention`` fields of the head mechanisms the statement sets (errors are
    recorded on ``low``)."""
    out: dict = {}
    fld = f.get("talking_heads")
    if fld is None:
        return out
    name = fld.value.name if isinstance(fld.value, ast.Ref) else None
    if name not in TALKING:
        low.err(fld.value.pos, "`talking_heads` is `true`, `false`, `pre` or `post`",
                "`true` mixes the heads' scores before the alignment and their weights after "
                "it (Shazeer et al. 2020); `pre` or `post` only one of them")
        return out
    if TALKING[name] and (traits.get("heads") or 1) < 2:
        low.err(fld.pos, f"talking heads mix the heads of a module, but attention `{s.name}` "
                "has one", "set `heads = H` (H >= 2), or drop `talking_heads`")
    elif TALKING[name] and (traits.get("dimensionality") == "multi" or traits.get("coverage")
                            or score is not None and mech.score(score.fn).graph):
        what = "multi-dimensional weights" if traits.get("dimensionality") == "multi" \
            else "coverage (its scores are made one query at a time)" \
            if traits.get("coverage") else "graph attention (its own kernel over edges)"
        low.err(fld.pos, f"talking heads cannot be combined with {what}",
                "drop `talking_heads`, or use single-dimensional attention without coverage")
    out["talking_heads"] = TALKING[name]
    return out
