"""Transformer-XL's segment memory (`mem_len = M`, Dai et al. 2019, §3.2), checked on the
IR once the module's shapes are known: the keys and values are computed from [SG(m); h],
so they must read one feature h, over the axis the queries are positions of (attention of
a sequence over itself); the memory's positions are extra keys, so what fixes the keys'
number or pairs each query with each key from the data (a mask input, a graph), and
coverage's per-query loop, capsules and an affinity matrix are refused, and so are a
decoder loop's step, and position terms and alignments that place query i at its index in
the segment rather than after the memory (a position term without ``counts_past``: the
Gaussian bias)."""

from __future__ import annotations

from .. import mechanisms as mech
from .core import expr_links


def segment_fits(checker, f) -> bool:
    """Whether statement ``f.n``'s segment memory fits it (else an error is recorded)."""
    n, mem, where = f.n, f.n.memory, f.where
    if f.mode != "sequence" or f.groups or f.ctx_axes[-1] != f.attended or n.affinity:
        checker.err(mem.loc, f"{where}: `mem_len` keeps the previous segment's last positions "
                    "of the sequence the module attends over, but its query is no sequence "
                    "over its keys' axis",
                    "a segment memory is for attention of a sequence over itself "
                    "(`query = project(x)`, `keys = project(x)`, `values = project(x)`)")
        return False
    keys = dict.fromkeys(x for x, _ in expr_links(n.keys))
    values = dict.fromkeys(x for x, _ in expr_links(n.values))
    if len(keys) != 1 or keys != values:
        read = ", ".join(f"`{x.split('@')[0]}`" for x in dict.fromkeys([*keys, *values]))
        checker.err(mem.loc, f"{where}: with `mem_len` the keys and values are computed from "
                    "[SG(m); h], the memory m of one feature h before this segment's h "
                    f"(Dai et al. §3.2), but they read {read}",
                    "compute the keys and values from one feature, e.g. `keys = project(x)` "
                    "and `values = project(x)`")
        return False
    other = "a mask input" if n.mask_input is not None else "coverage" if n.coverage \
        else "capsules" if n.capsules else ""
    if other:
        checker.err(mem.loc, f"{where}: `mem_len` adds the memory's positions to the keys, "
                    f"which {other} cannot follow (it fixes the keys each query sees)",
                    f"drop `mem_len` or {other}")
        return False
    if any(n.id in region for region in checker.cm.steps.values()):
        checker.err(mem.loc, f"{where}: `mem_len` keeps a segment's positions for the next "
                    "segment, and this module runs one step of a decoder loop at a time",
                    "a segment memory is for a module over whole segments; drop `mem_len`")
        return False
    align = mech.ALIGNS[n.align.fn]
    if align.centred or align.gate:
        checker.err(mem.loc, f"{where}: with `mem_len` query i sits after the memory's "
                    f"positions, which `{n.align.fn}` alignment does not count (it places "
                    "the query at its index in the segment)",
                    "use `align = global` (or sparsemax, entmax, topk)")
        return False
    for rec, m in mech.modifiers(n):
        if not rec.counts_past:
            checker.err(m.loc, f"{where}: with `mem_len` query i sits after the memory's "
                        f"positions, which `{rec.name}` does not place (its centre and "
                        "window scale with the whole length of the keys)", "use a position "
                        "term whose distances count the memory: `position = transformer_xl` "
                        "(Dai et al. §3.3), `rotary`, `relative(…)` or `bias = alibi`")
            return False
    return True

