"""The checker's data and the dataflow helpers every part of it reads: the shapes and
attention facts it infers (``Shape``, ``AttentionInfo``), what it hands the later stages
(``CheckedModel``, ``CheckedSpec``), the links between nodes (``links``, ``deps``,
``feeds``) and how messages name an expression. No error is reported here."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .. import ir
from .. import mechanisms as mech
from ..frozen import Positional
from ..mechanisms import align_reads
from ..shapes import Shape, expr_name as _name  # (``checks.Shape``, ``checks._name``)


class AttentionInfo(Positional):
    attended: str  # the axis the weights are normalised over
    groups: tuple[str, ...]  # keys' other axes: one attention per group
    query_mode: str  # "none" | "single" (one query per group) | "sequence" (one per position)
    #                  | "capsules" (one per class: an earlier capsule module's output)
    d_q: int | None
    d_k: int
    d_v: int


@dataclass
class CheckedModel:
    model: ir.Model
    shapes: dict[str, Shape]
    sizes: dict[str, int | None]  # axis -> length when known
    axis_origin: dict[str, str]  # axis -> input or node that created it
    attention: dict[str, AttentionInfo]
    order: list[str]  # node ids, dependencies first
    # an axis resampled by a grid operator -> (its input axis, numerator, denominator):
    # "H/2" -> ("H", 1, 2); its length is the input axis's times num / den
    scaled: dict[str, tuple[str, int, int]] = field(default_factory=dict)
    # (fed node, decoder) pairs whose `feed` reads the fed node's value of the same step:
    # it is computed before the decoder in each step (from `prev(decoder)`), e.g.
    # Bahdanau's s_i = f(s_(i-1), y_(i-1), c_i). Other `feed` edges read the previous step.
    feed_now: frozenset = frozenset()
    # decoder node -> the nodes computed in each of its steps (its strongly connected
    # component through `feed`, `state` and `prev` edges)
    steps: dict = field(default_factory=dict)
    # (RNN, attention) pairs of `lstm(…, state = ATT)`: ATT attends over the RNN's states
    # before this step (its keys edge crosses steps) and runs first in each step
    past: frozenset = frozenset()
    # id of an operation -> the shapes of its arguments (``check/ties.py`` reads how `+ - *`
    # combine them: only features combined feature by feature have one size)
    arg_shapes: dict[int, list[Shape]] = field(default_factory=dict)


@dataclass
class CheckedSpec:
    spec: ir.Spec
    models: list[CheckedModel] = field(default_factory=list)


def links(n: ir.AnyNode) -> list[tuple[str, str]]:
    """(node id, how) for everything ``n`` reads: ``read`` (in the same step), ``prev``
    (inside ``prev(…)``: the previous decoder step), ``feed`` (a decoder's fed node: the
    previous step's value when it depends on the decoder, else this step's), ``init``
    (a decoder's initial state) and ``state`` (the attention whose context replaces an
    RNN's previous state, computed first in the step)."""
    # Kept in the record's own __dict__, as functools.cached_property keeps ``Model.by_id``:
    # a record is frozen, and the checker asks some six times per node.
    memo = n.__dict__.get("_links")
    if memo is None:
        memo = n.__dict__["_links"] = tuple(_links(n))
    return list(memo)


def _links(n: ir.AnyNode) -> list[tuple[str, str]]:
    exprs: list[ir.Expr] = []
    if isinstance(n, ir.Node):
        exprs = [n.expr]
    elif isinstance(n, ir.Attention):
        exprs = [e for e in (n.query, n.keys, n.values) if e is not None]
    out = expr_links(*exprs)
    if isinstance(n, ir.Attention) and n.affinity:
        out.append((n.affinity, "read"))
    if isinstance(n, ir.Attention) and n.mask_input:
        out.append((n.mask_input, "read"))
    if isinstance(n, ir.Attention):  # what its alignment reads (reinforced's policy input)
        out += [(r, "read") for _, r in align_reads(n.align)]
    return out


def expr_links(*exprs: ir.Expr) -> list[tuple[str, str]]:
    """``links`` of expressions, breadth first."""
    out: list[tuple[str, str]] = []
    queue = [(e, "read") for e in exprs]
    i = 0
    while i < len(queue):  # (an index, not pop(0): the checker asks some 4,000 times)
        e, how = queue[i]
        i += 1
        if isinstance(e, ir.Ref):
            out.append((e.node, how))
            continue
        if e.params:  # one dict per operation, not a scan of its parameters per key
            params = dict(e.params)
            if not _LINK_PARAMS.keys().isdisjoint(params):
                out.extend((str(params[key]), how_) for key, how_ in _LINK_PARAMS.items()
                           if params.get(key))
        if e.args:
            inner = "prev" if e.fn == "prev" else how
            queue.extend((a, inner) for a in e.args)
    return out


# parameters of an operation that read a node -> how (``links``), in this order
_LINK_PARAMS = {"feed": "feed", "init": "init", "init_c": "init", "state": "state"}


def deps(n: ir.AnyNode, delayed: bool = False) -> list[str]:
    """Node ids ``n`` reads within a step (its inputs, a decoder's initial state); with
    ``delayed`` the decoder links that may cross steps: ``feed`` and ``prev(…)``."""
    kinds = ("feed", "prev") if delayed else ("read", "init", "state")
    return [r for r, how in links(n) if how in kinds]


def feeds(n: ir.AnyNode) -> list[str]:
    """The nodes ``n``'s decoder reads through ``feed =``."""
    return [r for r, how in links(n) if how == "feed"]


def ops_with(n: ir.AnyNode, param: str) -> list[ir.Op]:
    """The ops in ``n``'s expression that set ``param`` (``feed``, ``state``)."""
    memo = n.__dict__.setdefault("_ops_with", {})  # (as ``links`` keeps its own)
    if param not in memo:
        memo[param] = tuple(_ops_with(n, param))
    return list(memo[param])


def _ops_with(n: ir.AnyNode, param: str) -> list[ir.Op]:
    out, stack = [], [n.expr] if isinstance(n, ir.Node) else []
    while stack:
        e = stack.pop()
        if isinstance(e, ir.Op):
            if e.param(param):
                out.append(e)
            stack.extend(e.args)
    return out


def state_ops(n: ir.AnyNode) -> list[ir.Op]:
    """The RNNs whose previous state an attention replaces (``lstm(…, state = ATT)``)."""
    return ops_with(n, "state")


def past_pairs(m: ir.Model) -> frozenset:
    """``CheckedModel.past``: (RNN, ATT) for each ``state = ATT`` whose ATT reads the RNN."""
    out = set()
    for n in m.nodes:
        for e in state_ops(n):
            att = m.by_id.get(str(e.param("state")))
            if isinstance(att, ir.Attention) and n.id in \
                    [r for r, _ in expr_links(*(x for x in (att.keys, att.values) if x))]:
                out.add((n.id, att.id))
    return frozenset(out)


def decoder_ops(n: ir.AnyNode) -> list[ir.Op]:
    """The recurrent decoders (``lstm``/``gru`` with ``feed``) in ``n``'s expression."""
    return ops_with(n, "feed")


def penalised(n: ir.Attention) -> bool:
    """Whether attention ``n`` adds a term to the loss: Lin et al.'s penalty, Xu et al.'s
    doubly stochastic one, See et al.'s coverage loss, Li et al.'s disagreement, supervised
    attention, or another penalty of the registry."""
    return bool(mech.penalties(n))



def context_dim(n: ir.Attention, d_v: int) -> int:
    """The width of a module's context: d_v, or with several heads and no W_O (eq. 40) the
    heads' contexts side by side (``concat``) or averaged (``mean``). With a query each
    head reads a d_v/H slice of the values (eq. 38); without one, all of them."""
    if n.heads < 2 or mech.HEADS_OUT[n.heads_out].full_width:  # W_O or routing: d_v
        return d_v
    head = d_v // n.heads if n.query is not None else d_v
    return head * n.heads if n.heads_out == "concat" else head


def rescaled(scaled: dict[str, tuple[str, int, int]], axis: str, up: int,
             down: int) -> tuple[str, str, int, int]:
    """The name of ``axis`` resampled by up / down, its input axis and its scale num / den
    (in lowest terms) relative to that axis: ``H`` by 1/2 is ``H/2``, ``H/4`` by 2 is
    ``H/2``, ``H/2`` by 2 is ``H`` again, ``H`` by 2 is ``2H``."""
    base, num, den = scaled.get(axis, (axis, 1, 1))
    num, den = num * up, den * down
    g = math.gcd(num, den)
    num, den = num // g, den // g
    return f"{num if num > 1 else ''}{base}{f'/{den}' if den > 1 else ''}", base, num, den



def learned_capsules(n: ir.Attention) -> bool:
    """Capsules with their own learned queries, q_c (eq. 43): the module's `query =
    learned(d)` stands for one learned vector per class. Otherwise a capsule module's query
    is an earlier capsule module's output, one row per class (eq. 41-43)."""
    return bool(n.capsules) and learned_set(n.query) == 0



def learned_set(e: ir.Expr | None) -> int | None:
    """K when ``e`` is ``learned(K, d)``, 0 when it is ``learned(d)`` (one vector), else None."""
    if isinstance(e, ir.Op) and e.fn == "learned":
        return int(e.param("n") or 0)
    return None


def operations(e: ir.Expr | None):
    """Every operation in ``e``, outermost first."""
    stack = [e] if e is not None else []
    while stack:
        x = stack.pop(0)
        if isinstance(x, ir.Op):
            yield x
            stack.extend(x.args)


def _hop_place(n: ir.AnyNode) -> tuple | None:
    h = getattr(n, "hop", None)
    return None if h is None else (h.block, h.index, h.outer)


def _vocab(m: ir.Model, e: ir.Op) -> int | None:
    while isinstance(e, ir.Op):
        e = e.args[0]
    n = m.by_id.get(e.node)
    return n.vocab if isinstance(n, ir.Input) else None


def _short(node_id: str) -> str:
    """A node as the spec names it: ``x@3`` (a later version of x) reads ``x``."""
    return node_id.split("@")[0]


def _show(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return "none" if v is None else str(v)


def _base_ref(e: ir.Expr) -> str | None:
    while isinstance(e, ir.Op) and e.args:
        e = e.args[0]
    return e.node if isinstance(e, ir.Ref) else None


def weights_read(m: ir.Model) -> set[str]:
    """Attention modules whose weights a feature reads (``att.weights``)."""
    out: set[str] = set()
    stack = [n.expr for n in m.nodes if isinstance(n, ir.Node)]
    stack += [e for n in m.attentions for e in (n.query, n.keys, n.values) if e is not None]
    while stack:
        e = stack.pop()
        if isinstance(e, ir.Op):
            if e.fn == "weights":
                out.add(e.args[0].node)
            stack.extend(e.args)
    return out
