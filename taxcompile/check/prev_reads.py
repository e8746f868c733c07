"""``prev(x)`` read outside a decoder's step. Inside the step (Bahdanau's ``query = prev(s)``)
it is x at step t - 1; a node computed after the loop (an output over all steps) reads the
same values, one per step: x_0 (x's initial value), x_1, …, x_(T-1), the decoder loop
collecting them (codegen/decoder.py). So ``output y = f(prev(s))`` is the
``feature s_prev = prev(s)`` the step computes, read by ``y``."""

from __future__ import annotations

from .. import ir
from .core import links


def outside_reads(m: ir.Model, steps: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(x, node) for each ``prev(x)`` that a node outside x's decoder step reads: the node
    runs after the loop (an ordering edge x -> node)."""
    out = []
    for n in m.nodes:
        for x, how in links(n):
            if how != "prev":
                continue
            home = next((s for s in steps.values() if x in s), None)
            if home is not None and n.id not in home:
                out.append((x, n.id))
    return out


def in_other_step(steps: dict[str, set[str]], x: str, node_id: str) -> str | None:
    """The decoder whose step computes ``node_id`` when it is not ``x``'s: there only one
    step of x's decoder exists (None when none)."""
    return next((d for d, s in steps.items() if node_id in s and x not in s), None)
