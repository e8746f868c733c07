"""The head mechanisms' fields of an attention statement (issue 25; their records are
in mechanisms/heads.py): `talking_heads = true | pre | post`, `mem_kv = M` and
`head_gates = true`. Lowered here,
with the located errors for a misuse (talking heads with one head, multi-dimensional
weights, coverage's loop over queries or graph attention; memory key/values beside a score
that is no dot product of q and k, or a position term or bias); ``lowering/attention.py``
calls ``head_fields`` once per statement. What needs another node's shape (a shared
module's heads agreeing) is checked in ``checks.py`` (``check/sharing.py``)."""

from __future__ import annotations

from .. import ast
from .. import mechanisms as mech

FIELDS = ("talking_heads", "mem_kv", "head_gates")
TALKING = {"true": "both", "false": "", "pre": "pre", "post": "post"}


def head_fields(low, f: dict[str, ast.Field], s: ast.Attention, traits: dict, score,
                scope) -> dict:
    """The ``ir.Attention`` fields of the head mechanisms the statement sets (errors are
    recorded on ``low``)."""
    out: dict = {}
    if "talking_heads" in f:
        out.update(talking(low, f["talking_heads"], s, traits, score))
    if "mem_kv" in f:
        out.update(memory(low, f, s, traits, score, scope))
    if "head_gates" in f:
        out.update(gates(low, f, s, traits, score, scope))
    return out


def gates(low, f: dict[str, ast.Field], s: ast.Attention, traits: dict, score, scope) -> dict:
    on = bool(low.flag(f, "head_gates", scope))
    blocked = "no query (the gates read it)" if "query" not in f else \
        "an affinity matrix" if "affinity" in f else "capsules" if traits.get("capsules") else \
        "a sigmoid alignment (its contexts are per key)" if "align" in f and \
        isinstance(f["align"].value, ast.Ref) and f["align"].value.name == "sigmoid" else ""
    if on and blocked:
        low.err(f["head_gates"].pos, f"head gates scale each head's context by a gate from "
                f"the query, but attention `{s.name}` has {blocked}",
                "drop `head_gates`, or give the module a query and a softmax-like alignment")
    return {"head_gates": on}


def _align_name(f: dict[str, ast.Field]) -> str | None:
    v = f["align"].value if "align" in f else None
    return v.fn if isinstance(v, ast.Call) else v.name if isinstance(v, ast.Ref) else None


def talking(low, fld: ast.Field, s: ast.Attention, traits: dict, score) -> dict:
    name = fld.value.name if isinstance(fld.value, ast.Ref) else None
    if name not in TALKING:
        low.err(fld.value.pos, "`talking_heads` is `true`, `false`, `pre` or `post`",
                "`true` mixes the heads' scores before the alignment and their weights after "
                "it (Shazeer et al. 2020); `pre` or `post` only one of them")
        return {}
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
    return {"talking_heads": TALKING[name]}


def memory(low, f: dict[str, ast.Field], s: ast.Attention, traits: dict, score,
           scope) -> dict:
    fld = f["mem_kv"]
    n = low.as_int(fld.value, scope, "`mem_kv`", 1, 4096)
    if n is None:
        return {}
    if score is not None and not mech.score(score.fn).text("dot", score):
        low.err(fld.pos, f"memory key/values join the keys of a dot-product score, but "
                f"attention `{s.name}` scores with `{score.fn}`",
                "use `score = scaled_multiplicative` (or multiplicative, general, "
                "biased_general, similarity(kind = cosine)), or drop `mem_kv`")
    elif "query" not in f or traits.get("dimensionality") == "multi" or traits.get("coverage") \
            or "affinity" in f or "position" in f or "bias" in f:
        low.err(fld.pos, "memory key/values need a query, single-dimensional weights and no "
                "coverage, affinity, position term or bias",
                "drop `mem_kv`, or the field it cannot go with")
    elif (align := _align_name(f)) in mech.ALIGNS and mech.align(align).centred:
        low.err(fld.pos, f"memory key/values have no position in the sequence, but `{align}` "
                "alignment places a window over the keys' positions",
                "drop `mem_kv`, or use an alignment over all the keys (global, sparsemax, …)")
    sym = low.sym(fld.value, scope)
    syms = dict(traits.get("sym", ())) | ({"mem_kv": sym} if sym else {})
    return {"mem_kv": n, "sym": tuple(sorted(syms.items()))}
