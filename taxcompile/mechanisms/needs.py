"""What a module has, as tags that records name: a record's ``caps`` (what it gives the
module), ``requires`` (tags the module must have) and ``excludes`` (tags it cannot have)
are read by one checker rule (``taxcompile/check/needs.py``), which words its refusal from
``TAGS`` below and from the record's ``conflict`` (who cannot go with it, and why).
A new mechanism states its needs in its record; nothing here or in the checker names it."""

from __future__ import annotations

from typing import NamedTuple

from . import SCORES, modifiers


class Tag(NamedTuple):
    """How a refusal words one tag: the module has ``present`` / has ``absent``; ``fix``
    gives it (for a required tag); ``field`` is what the spec writes to set it."""

    present: str
    absent: str = ""
    fix: str = ""
    field: str = ""


# The statement's own traits, in the order a refusal looks for them; a record's ``caps``
# tag is worded by this table too ({fn}: the mechanism's name).
TAGS: dict[str, Tag] = {
    "query": Tag("a query", "no query", "give the module a query", "query"),
    "heads": Tag("several heads", "one head", "set `heads = H` (H >= 2)", "heads"),
    "dot": Tag("a dot-product score", "the `{fn}` score, no dot product of q and k",
               "use `score = scaled_multiplicative` (or multiplicative, general, "
               "biased_general, similarity(kind = cosine))", "score"),
    "multi_dimensional": Tag("multi-dimensional weights (`dimensionality = multi`)",
                             field="dimensionality"),
    "affinity": Tag("an affinity matrix (`affinity`)", field="affinity"),
    "capsules": Tag("capsules (`capsules`)", field="capsules"),
    "pair_mask": Tag("a mask input (`mask = {fn}`)", field="mask"),
    "coverage": Tag("coverage (`coverage`), whose scores are made one query at a time",
                    field="coverage"),
    "position": Tag("a position term (`position`)", field="position"),
    "bias": Tag("a score bias (`bias`)", field="bias"),
    "qk_norm": Tag("query-key normalisation (`qk_norm`)", field="qk_norm"),
    "kv_heads": Tag("grouped key/value heads (`kv_heads`)", field="kv_heads"),
    # capabilities, given by records' ``caps``
    "edges": Tag("graph attention (its own kernel over edges)", field="mask"),
    "per_key": Tag("`{fn}` alignment, whose contexts are per key", field="align"),
    "window": Tag("`{fn}` alignment, a window over the keys' positions", field="align"),
    "adds_keys": Tag("memory key/values (`{fn}`)", field="{fn}"),
    "mixes_heads": Tag("talking heads (`{fn}`)", field="{fn}"),
    "no_score": Tag("no score (`score = none`)", "the `{fn}` score", "set `score = none`",
                    "score"),
    "own_weights": Tag("`{fn}` alignment, which makes its weights without scores",
                       "the `{fn}` alignment, which weighs the keys by their scores",
                       "use an alignment whose weights are its own", "align"),
    "score_terms": Tag("`{fn}` alignment, which takes terms added to its scores",
                       "the `{fn}` alignment, whose weights take no terms added to its scores",
                       "use `align = global` (or sparsemax, entmax, topk)", "align"),
}


def tags(n) -> dict[str, tuple[str, str]]:
    """The tags statement ``n`` (an ``ir.Attention``) has: tag -> (its phrase, the field
    that sets it), in ``TAGS``' order."""
    on: dict[str, str] = {}  # tag -> the name its phrase reads as {fn}
    score = SCORES[n.score.fn]
    if n.query is not None:
        on["query"] = ""
    if n.heads > 1:
        on["heads"] = ""
    if score.text("dot", n.score):
        on["dot"] = ""
    for tag, yes in (("multi_dimensional", n.dimensionality == "multi"),
                     ("affinity", n.affinity is not None), ("capsules", bool(n.capsules)),
                     ("coverage", n.coverage), ("qk_norm", n.qk_norm is not None),
                     ("kv_heads", bool(n.kv_heads))):
        if yes:
            on[tag] = ""
    if n.mask_input is not None:
        on["pair_mask"] = n.mask_input
    for rec, _ in modifiers(n):
        on[rec.kind] = rec.name
    for rec, name in ((score, n.score.fn), (n.align.record, n.align.fn),
                      *((m.record, m.fn) for m in n.head_mechanisms)):
        on.update((tag, name) for tag in rec.caps)
    return {t: (TAGS[t].present.format(fn=on[t]), TAGS[t].field.format(fn=on[t]))
            for t in TAGS if t in on}


def refusal(n) -> tuple[object, str, str] | None:
    """(the mechanism's IR record, message, hint) of the first mechanism of ``n`` whose
    record requires a tag ``n`` lacks or excludes one it has; None if every one fits."""
    has = tags(n)
    where = f"attention `{n.name}`"
    join = (n.join,) if n.join is not None else ()
    for m in (*join, *n.head_mechanisms, n.align, n.score):
        rec = m.record
        if not (rec.requires or rec.excludes):
            continue
        subject, why = rec.conflict
        own = m.fn if m.kind == "trait" else f"{m.kind} = {m.fn}"
        for t in rec.requires:
            if t not in has:
                tag = TAGS[t]
                # {fn}: the mechanism of the field that would give the tag (dot: the score)
                fn = n.align.fn if tag.field == "align" else n.score.fn
                return (m, f"{where} has {tag.absent.format(fn=fn)}, which {subject} "
                        f"cannot go with: {why}", f"{tag.fix}, or drop `{own}`")
        for t in rec.excludes:
            if t in has:
                phrase, field = has[t]
                return (m, f"{where} has {phrase}, which {subject} cannot go with: {why}",
                        f"drop `{field}` or `{own}`")
    return None
