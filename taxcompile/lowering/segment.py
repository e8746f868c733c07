"""`mem_len = M` of an attention statement: Transformer-XL's segment memory (Dai et al.
2019, §3.2). Lowered here into ``ir.SegmentMemory`` (M a whole number or a `let`
constant); whether the module can carry one (a query sequence over the keys' axis, keys
and values read from one feature) needs shapes and is checked in checks.py
(``check/segment.py``). Errors here: M not a whole number of at least 1."""

from __future__ import annotations

from .. import ast, ir


def segment_memory(low, fld: ast.Field | None, scope) -> ir.SegmentMemory | None:
    """The statement's segment memory, or None (without one, or after a recorded error)."""
    if fld is None:
        return None
    n = low.as_int(fld.value, scope, "`mem_len`", 1, 1 << 20)
    if n is None:
        return None
    sym = low.sym(fld.value, scope)
    return ir.SegmentMemory(length=n, sym=(("length", sym),) if sym else (),
                            loc=low.loc(fld.value.pos))
