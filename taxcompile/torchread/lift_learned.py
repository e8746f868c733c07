"""Learned queries for `lift`: a parameter of the model used as the queries of an attention
(the Perceiver's latent array, a Set Transformer's seeds). Such a parameter is an (N, D)
table broadcast over the batch (an `expand` or `repeat` of it, a few reshapes apart) behind
a query that reads no input; it is written `feature NAME = learned(N, D)`, and operands
computed from it are projections of that feature. A parameter added to an input (a position
embedding) leaves the query reading the input, so it is never taken for one."""
from __future__ import annotations

from .lift_recurrent import walk
from .lift_repeat import _stream as stream
from .normalise import TRANSPARENT, op, shape, tensor_args

BROADCAST = {"expand", "repeat", "expand_as"}  # a table made a batch of tables
RESHAPES = 3  # reshapes between the parameter and its broadcast
# A weight broadcast for a batched product is transposed first: not a reshape of a table.
TURNS = {"permute", "transpose", "t"}
MAX_BACK = 2_000  # nodes visited behind one query


def _table(p) -> tuple[int, int] | None:
    """(N, D) where the parameter ``p`` is an (N, D) (or (1, N, D)) table broadcast over
    the batch (reshaped, never transposed: a projection's weight is)."""
    dims = list(shape(p) or ())
    if len(dims) == 3 and dims[0] == 1:
        dims = dims[1:]
    if len(dims) != 2 or not all(isinstance(d, int) and d > 0 for d in dims):
        return None
    frontier = [p]
    for _ in range(RESHAPES):
        if any(op(u) in BROADCAST for n in frontier for u in n.users):
            return dims[0], dims[1]
        frontier = [u for n in frontier for u in n.users if op(u) in TRANSPARENT - TURNS]
    return None


def learned_queries(r, atts) -> dict:
    """Parameter node -> (N, D) for each table the queries of ``atts`` are computed from
    with no input behind them."""
    out = {}
    for a in atts:
        if a.query is None or r.roots(a.query):
            continue
        for n in sorted(walk(a.query, tensor_args, MAX_BACK), key=lambda n: n.name):
            if n.op in ("placeholder", "get_attr") and r.is_param(n) and n not in out:
                dims = _table(n)
                if dims:
                    out[n] = dims
    return out


def reach(tables) -> set:
    """The nodes computed from the learned tables (``nearest`` walks through them as it walks
    through the nodes that read an input)."""
    return set().union(*(walk(p, lambda n: list(n.users), 1 << 30) for p in tables))


def update(g, e, widths: dict, learned: set) -> list:
    """[`update T = T + NAME`] where the entry ``e`` (``lift_repeat.Entry``) queries with a
    projection of the learned table T and the graph ``g`` (``lift_repeat._Graph``) adds its
    context, as wide as T, back to what its query was computed from (the latents a
    Perceiver's block refines, a Set Transformer's inducing points): later operands written
    as projections of T read the context, as in the graph; [] otherwise."""
    t = stream(e)
    if t not in learned or e.width is None or e.width != widths.get(t) or not g.residual(e):
        return []
    return [f"update {t} = {t} + {e.name}"]
