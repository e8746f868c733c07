"""Grouped-query attention (`kv_heads = g`, Ainslie et al. 2023; g = 1: multi-query,
Shazeer 2019): the keys and values hold g heads, each read by heads / g query heads. Checked
here on the IR (the lowering has checked that g divides heads and that heads > 1): the score
must be a dot product of one query head with one key head (its record's ``dot``), and the
keys' and values' widths must be g heads of the query's head width (a `project(x)` with no
width is given that width, g·d_q/H: codegen/kv_width.py). Memory key/values (`mem_kv`)
then hold g heads too, put before the keys and shared like them (x-transformers'
`num_mem_kv` beside `kv_heads`); talking heads mix the H query heads' scores and weights,
after each key/value head is repeated for its group. The module then reads
as if its keys and values were H heads wide: the rest of the checker, the context's width
and the constructor's d_k and d_v see H * d_head (the class repeats each key/value head).
Query-key normalisation (`qk_norm`, ``qk_norm_fits``) is checked here too: it also changes
how q and k meet inside the heads."""

from __future__ import annotations


from .. import ir
from .. import mechanisms as mech
from .core import Shape


def bare_project(e, any_width: bool = False) -> bool:
    """``project(NAME)`` with no width (``any_width``: or with one)."""
    return isinstance(e, ir.Op) and e.fn == "project" and isinstance(e.args[0], ir.Ref) \
        and (any_width or e.param("d") is None)


def grouped_fit(checker, f):
    """``f`` with its keys and values widened to the query heads' width, or None (an error
    is recorded)."""
    n, q, k, v, where = f.n, f.q, f.k, f.v, f.where
    g, h = n.kv_heads, n.heads
    rec = mech.SCORES[n.score.fn]
    if q is None or rec.dot is None or n.dimensionality == "multi" or n.affinity \
            or mech.ALIGNS[n.align.fn].gate:
        checker.err(n.loc, f"{where}: `kv_heads` shares a key/value head among query heads, "
                    f"which needs a dot-product score of one query head with one key head "
                    f"(q^(j)·k^(g)); the {n.score.fn.replace('_', ' ')} score"
                    + ("" if q is not None else " without a query") + " is not one",
                    "use `score = scaled_multiplicative` (or another dot product of Table II) "
                    "with a query, or drop `kv_heads`")
        return None
    if q.dim % h:
        checker.err(n.loc, f"{where}: d_q = {q.dim} is not divisible by heads = {h}",
                    "each head gets an equal slice (eq. 38)")
        return None
    d_head = q.dim // h
    bare = {"keys": bare_project(n.keys), "values": bare_project(n.values)}
    if any(bare.values()) and not (isinstance(n.query, ir.Ref) or bare_project(n.query, True)):
        what = "keys" if bare["keys"] else "values"
        checker.err((n.keys if bare["keys"] else n.values).loc, f"{where}: `{what} = project(…)` without a width takes kv_heads = "
                    f"{g} heads of the query heads' width, d_q / heads, read from the query, "
                    "which must then be a name or `project(NAME)`",
                    f"give the width, `{what} = project(x, {g * d_head})`, or name the query")
        return None
    for what, s in (("keys", k), ("values", v)):
        if bare[what]:
            continue  # project(x): g heads of d_head features (codegen/kv_width.py)
        if s.dim != g * d_head:
            checker.err(n.loc, f"{where}: the {what} hold kv_heads = {g} heads of the query "
                        f"heads' width d_q / heads = {q.dim} / {h} = {d_head}, i.e. "
                        f"{g * d_head} features, but have {s.dim}",
                        f"project them to {g * d_head}, e.g. `{what} = project(x, {g * d_head})`")
            return None
    wide = h * d_head
    return f.replace(k=Shape(k.axes, wide), v=Shape(v.axes, wide))


def qk_norm_fits(checker, f) -> bool:
    """`qk_norm`: q and k normalised per head before a dot product of the two (its score's
    record has ``dot`` and ``equal_qk``: q^T k, no W between them), each head's width split
    into `groups` equal parts, a positive scale."""
    n, q, where, qk = f.n, f.q, f.where, f.n.qk_norm
    rec = mech.SCORES[n.score.fn]
    if q is None or rec.dot is None or not rec.equal_qk or n.dimensionality == "multi" \
            or n.affinity or mech.ALIGNS[n.align.fn].gate:
        checker.err(qk.loc, f"{where}: `qk_norm` normalises q and k before their dot product "
                    f"q^T k; the {n.score.fn.replace('_', ' ')} score"
                    + ("" if q is not None else " without a query") + " is not a plain q^T k",
                    "use `score = scaled_multiplicative` or `multiplicative` with a query, or "
                    "drop `qk_norm`")
        return False
    d_head = q.dim // max(n.heads, 1)
    if d_head % qk.groups:
        checker.err(qk.loc, f"{where}: `qk_norm` normalises each head's {d_head} features in "
                    f"groups = {qk.groups} equal parts, which does not divide them",
                    f"use a divisor of {d_head}")
        return False
    if qk.scale <= 0:
        checker.err(qk.loc, f"{where}: the scale of `qk_norm` must be positive, got "
                    f"{qk.scale:g}", "e.g. `qk_norm = l2(scale = 10)` (x-transformers' default)")
        return False
    return True
