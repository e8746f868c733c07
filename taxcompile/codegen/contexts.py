"""What an attention statement's call site, its class and the model's docstring share of its
output: the context's width as a Config expression (``context_dim``) and the one-line
description of the module (``describe``). Both the attention planner and the graph
attention planner read them, and the first imports the second."""

from __future__ import annotations

from .. import ir
from .. import mechanisms as mech
from .names import Dim


def context_dim(p, n: ir.Attention, d_v: Dim) -> Dim:
    """The context's width as a Config expression (checks.context_dim): d_v, or with
    ``heads_out = concat`` / ``mean`` the heads side by side / averaged."""
    heads = p.size(n, "heads", n.heads) if n.heads > 1 else None
    if n.kv_heads:  # g key/value heads, each read by H / g query heads: H heads' width
        d_v = d_v.floordiv(p.size(n, "kv_heads", n.kv_heads)).times(heads)
    if n.heads < 2 or mech.HEADS_OUT[n.heads_out].full_width:  # W_O or routing: d_v
        return d_v
    split = n.query is not None
    if (n.heads_out == "concat") == split:  # H slices of d_v / H side by side; or all of v
        return d_v
    return d_v.times(heads) if n.heads_out == "concat" else d_v.floordiv(heads)


def describe(n: ir.Attention, info) -> str:
    bits = [n.score.fn.replace("_", " ") + " score", n.align.fn + " alignment", *n.traits()]
    if info.groups:
        bits.append("one per " + " x ".join(info.groups))
    return ", ".join(bits)
