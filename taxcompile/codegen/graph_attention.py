"""Plan rules of graph attention (GAT, Velickovic et al. 2018): an attention module whose
mask is a ``graph`` input. Its class (``graph_attention.py.j2``) scores the edges with the
activated concat score, normalises over each node's neighbours and aggregates the messages,
per edge for an edge list (never N x N) or masked dense for a (B, N, N) adjacency."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .. import ir
from .acts import act_call
from .contexts import context_dim, describe
from .expr import ATOM, unread
from .frame import Var
from .plan import AttentionClass


@dataclass(frozen=True)
class GraphAttentionView:
    """What ``graph_attention.py.j2`` reads."""

    cls: str
    heads_out: str  # concat | mean | single (one head)
    dropout: bool
    act: Callable[[str], str]
    act_doc: str
    c_width: str
    bias: bool = True  # GATConv's output bias (`bias = false` drops it)


def is_graph(p, n: ir.Attention) -> bool:
    return n.mask_input is not None and p.m.node(n.mask_input).kind == "graph"


def graph_class(p, n: ir.Attention) -> str:
    """The class of a graph attention module: one per heads join, activation, dropout and
    output bias."""
    heads_out = n.heads_out if n.heads > 1 else "single"
    bias = n.out_bias is not False
    dropout = any(a.dropout is not None for a in p.m.attentions if is_graph(p, a)
                  and a.heads_out == n.heads_out and a.score.act == n.score.act
                  and (a.out_bias is not False) == bias)
    key = repr(("graph", heads_out, n.score.act, dropout) + (() if bias else ("no bias",)))
    if key in p.class_key:
        return p.class_key[key]
    name = {"concat": "MultiHeadGraphAttention", "mean": "MeanHeadGraphAttention",
            "single": "GraphAttention"}[heads_out]
    taken = set(p.classes) | {"Model", "Config", "Output"} | {b.name for b in p.blocks}
    base, i = name, 2
    while name in taken:
        name, i = f"{base}{i}", i + 1
    p.helpers.update(("masked_softmax", "edge_sum"))
    view = GraphAttentionView(
        cls=name, heads_out=heads_out, dropout=dropout,
        act=lambda x, prec=ATOM, act=n.score.act: act_call(act, x, prec), act_doc=str(n.score.act),
        c_width="d_v / H" if heads_out == "mean" else "d_v", bias=bias)
    p.classes[name] = AttentionClass(name, view, "graph_attention.py.j2")
    p.class_key[key] = name
    return name


def plan_graph_attention(p, n: ir.Attention) -> None:
    """``layer, layer_a, layer_ex = self.layer(q, k, v, adj, key_mask)`` and its records."""
    info = p.cm.attention[n.id]
    k = p.expr(n.keys, n)
    v = p.expr(n.values, n) if n.values != n.keys else k
    q = p.expr(n.query, n) if n.query != n.keys else k
    if n.heads > 1:
        p.divides.extend((d.dim, p.size(n, "heads", n.heads)) for d in (q, k, v))
    with unread():  # the class's own code
        cls = graph_class(p, n)

    def ctor() -> str:
        args = [f"d_q={q.dim}", f"d_k={k.dim}", f"d_v={v.dim}",
                f"heads={p.sym(n, 'heads', n.heads)}"]
        if n.self_loops:
            args.append("self_loops=True")
        if n.dropout is not None:
            args.append(f"dropout={p.sym(n, 'dropout', n.dropout)}")
        return f"{cls}({', '.join(args)})"

    mod = p.module(n, "", ctor)
    name = p.want(n)
    p.frame.note(f"attention `{n.name}`: {describe(n, info)}")
    k = p.named(k, f"{name}_k")
    v = k if v is k else p.named(v, f"{name}_v")
    q = k if q is k else p.named(q, f"{name}_q")
    graph = p.frame.use(n.mask_input)
    mk = p.mask_of(k)
    kmask = p.mask_arg(k) if mk is not None else "None"
    locs = p.frame.locals
    c, a = locs.new(name), locs.new(f"{name}_a")
    cdim = context_dim(p, n, v.dim)
    shape = p.cm.shapes[n.id]
    p.frame.emit(f"{c}, {a}, _ = {mod}({q.name}, {k.name}, {v.name}, {graph}, {kmask})",
                 p.shape(shape, dim=cdim), (c, a, "_"))
    p.frame.vars[n.id] = Var(c, shape, k.mask, cdim, k.mask_code)
    p.frame.records.add("attn")
    p.frame.emit(f"if {p.frame.flag('return_attention')}:")
    p.frame.indent += 1
    p.frame.emit(f"attn[{p.key_code(n)}] = {a}",
                 "(E', H) per edge (edge list, self loops included) or (B, H, N, N)")
    p.frame.indent -= 1
