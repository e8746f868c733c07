"""Graph attention over an edge list (torch_geometric's `GATConv`, Velickovic et al.): no
softmax node, but its segmented form, one softmax over each node's incoming edges:

    m = scatter_max(e, dst)         e - index_select(m, dst)       (a shift for stability)
    w = exp(.) / index_select(scatter_add(exp(.), dst) [+ eps], dst)

whose weights scale the messages `index_select(values, src)` summed into each node by a
scatter-add over the same `dst`. The edge scores `e` are read as the registry's
`activated_concat` score (e_ij = act(a_dst^T W h_i + a_src^T W h_j), GAT's eq. 1) where they
are an activation of two learned vectors applied to node streams and gathered by `dst` (the
query) and by another index (the key); any other edge score is "attention not recognised",
with its node, never a guessed row."""
from __future__ import annotations

from . import records
from .found import Attention
from .normalise import TRANSPARENT, op, shape, source_line, strip, tensor_args
from .products import ACTS

# Ops that read one row per edge.
GATHER = {"index_select", "gather", "index", "embedding"}
# The pattern's name: a softmax over each node's incoming edges (records name it)
EDGES = "edge_softmax"
_MAX = {"amax", "max"}
# Ops that pick rows by one index: index_select(x, 0, idx) and x[idx] (aten.index)
_ROWS = {"index_select", "index"}


_SAME = {"view", "expand", "unsqueeze", "squeeze", "clone", "alias", "_to_copy", "contiguous"}


def _same_index(node):
    """An index tensor up to views and expands, and a row picked from an edge list by its
    position (edge_index[0] and edge_index[1] are two indices: `strip` would merge them)."""
    while op(node) in _SAME and tensor_args(node):
        node = tensor_args(node)[0]
    if op(node) == "select" and len(node.args) >= 3:
        return (_same_index(node.args[0]), node.args[1], node.args[2])
    return node


def _index(node):
    """The index that an index_select, gather or scatter reads (see ``_same_index``)."""
    o, args = op(node), node.args
    if o == "index_select" and len(args) >= 3:
        return _same_index(args[2])
    if o == "index" and len(args) >= 2 and isinstance(args[1], (list, tuple)) \
            and len(args[1]) == 1 and hasattr(args[1][0], "op"):
        return _same_index(args[1][0])  # x[idx]: rows picked by one index
    if o in ("scatter_add", "scatter_reduce", "gather", "index_add") and len(args) >= 3:
        return _same_index(args[2])
    if o == "index_put" and len(args) >= 2 and isinstance(args[1], (list, tuple)) \
            and len(args[1]) == 1 and hasattr(args[1][0], "op"):
        return _same_index(args[1][0])  # x[idx] += v: index_add decomposed
    return None


def _segment_sum(node):
    """(summed tensor, segment index) where ``node`` sums its input per segment
    (`scatter_add`, `index_add` and its decomposition `index_put(..., accumulate=True)`,
    `scatter_reduce(..., "sum")`); None otherwise."""
    n = strip(node)
    if op(n) == "add" and len(tensor_args(n)) == 1:
        n = strip(tensor_args(n)[0])  # + 1e-16 against empty segments
    o, args = op(n), n.args
    if o == "index_put":
        ok, src = len(args) >= 4 and args[3] is True, 2
    else:
        ok = o in ("scatter_add", "index_add") or (
            o == "scatter_reduce" and len(args) >= 5 and args[4] == "sum")
        src = 3
    if not ok or len(args) <= src or not hasattr(args[src], "op"):
        return None  # a scalar source (scatter's value form) sums nothing per edge
    return strip(args[src]), _index(n)


def edge_softmax(div):
    """(exp node, edge scores, segment index, max-shift node or None) where ``div`` is
    exp(e - max) / gather(segment_sum(exp(e - max))): a softmax over each segment (a node's
    incoming edges); None otherwise."""
    args = tensor_args(div)
    if op(div) != "div" or len(args) != 2:
        return None
    num, den = strip(args[0]), strip(args[1])
    if op(num) != "exp" or op(den) not in _ROWS or _index(den) is None:
        return None
    seg = _index(den)
    summed = _segment_sum(den.args[0])
    if summed is None or summed[0] is not num or summed[1] != seg:
        return None
    x, shift = strip(tensor_args(num)[0]), None
    if op(x) == "sub" and len(tensor_args(x)) == 2:
        e, m = tensor_args(x)
        m = strip(m)
        red = strip(m.args[0]) if op(m) in _ROWS else None
        if red is not None and op(red) == "scatter_reduce" and len(red.args) >= 5 \
                and red.args[4] in _MAX and _index(m) == seg:
            x, shift = strip(e), red
    return num, x, seg, shift


def applied(div, seg):
    """(the scatter-add that sums the weighted messages into each node, the values gathered
    per edge, their source index) where the weights scale per-edge values and are summed
    over the same segments; None otherwise."""
    frontier = [div]
    for _ in range(6):
        nxt = []
        for n in frontier:
            for u in n.users:
                if op(u) in TRANSPARENT:
                    nxt.append(u)
                elif op(u) == "mul" and len(tensor_args(u)) == 2 and n in tensor_args(u):
                    g = strip(([a for a in tensor_args(u) if a is not n] or [n])[0])
                    for s in u.users:
                        got = _segment_sum(s)
                        if got and got[0] is u and got[1] == seg and op(g) in GATHER:
                            return s, g, _index(g)
        frontier = nxt
    return None


def _vector_score(r, node):
    """(stream, learned vector) where ``node`` is a^T x per node: sum(x * a, -1) or x @ a
    with a learned a; None otherwise."""
    n = strip(node)
    if op(n) == "sum" and tensor_args(n):
        m = strip(tensor_args(n)[0])
        if op(m) == "mul" and len(tensor_args(m)) == 2:
            a, b = tensor_args(m)
            if r.is_param(strip(b)) and r.roots(a):
                return a, strip(b)
            if r.is_param(strip(a)) and r.roots(b):
                return b, strip(a)
    if op(n) in ("matmul", "linear"):
        args = tensor_args(n)
        ws = [a for a in args if r.is_param(strip(a))]
        data = [a for a in args if r.roots(a)]
        if len(ws) == 1 and len(data) == 1:
            return data[0], strip(ws[0])
    return None


def edge_score(r, e, seg):
    """(reason, query node, key node) where the edge scores ``e`` are GAT's activated concat
    act(a_dst^T W h_i + a_src^T W h_j): the query term gathered by the segment index, the
    key term by another; None otherwise."""
    if op(e) not in ACTS or not tensor_args(e):
        return None
    s = strip(tensor_args(e)[0])
    if op(s) != "add" or len(tensor_args(s)) != 2:
        return None
    terms = {}
    for t in map(strip, tensor_args(s)):
        if op(t) not in _ROWS or _index(t) is None:
            return None
        got = _vector_score(r, t.args[0])
        if got is None:
            return None
        terms["q" if _index(t) == seg else "k"] = (t, *got)
    if set(terms) != {"q", "k"}:
        return None
    (qg, q, aq), (kg, k, ak) = terms["q"], terms["k"]
    return (f"`{e.name}` is `{op(e)}` of the sum of two learned vectors, `{aq.name}` on the "
            f"receiving node's features (gathered by the edges' target index at `{qg.name}`) "
            f"and `{ak.name}` on the sending node's (gathered at `{kg.name}`): "
            "e_ij = act(a^T [W h_i; W h_j]), GAT's activated concat score", q, k)


def read(r, div) -> Attention | None:
    """The attention whose weights ``div`` makes, or None where ``div`` is no softmax over
    a graph's edges that weighs values."""
    from .patterns import query_type

    sm = edge_softmax(div)
    if sm is None:
        return None
    num, e, seg, shift = sm
    app = applied(div, seg)
    if app is None:
        return None
    agg, values, src = app
    a = Attention(div.name, agg.name)
    a.nodes = [div.name, num.name, e.name, agg.name] + ([shift.name] if shift else [])
    a.source = [s for s in dict.fromkeys(source_line(x) for x in (e, num, div, agg)) if s]
    got = edge_score(r, e, seg)
    if got is None:
        a.recognised = False
        a.why_not = (f"`{div.name}` is a softmax over each node's incoming edges, but the edge "
                     f"score `{e.name}` ({op(e)}) matches no score pattern (GAT's "
                     "act(a^T [W h_i; W h_j]) is the one read)")
        return a
    why, q, k = got
    score, al = records.one("score", EDGES), records.one("align", EDGES)
    a.names = {"score": score.name, "align": al.name}
    a.query, a.keys, a.app = q, k, agg
    v = a.values
    v["scoring"] = (score.reading, why)
    v["alignment"] = (al.reading,
                      f"`{div.name}` divides `{num.name}` by its sum over each node's incoming "
                      "edges (a scatter-add by the edges' target index): a softmax over each "
                      "node's neighbours (Velickovic et al. eq. 3), every neighbour weighted")
    v["query_type"] = query_type(r, q, k)
    s = shape(div) or ()
    h = s[1] if len(s) >= 2 and isinstance(s[1], int) else 1
    v["query_multiplicity"] = (
        ("Multi-Head", f"`{div.name}` weighs {h} heads per edge (weights of shape "
                       f"[E, {h}])") if h > 1 else
        ("Singular", f"`{div.name}` weighs each edge once (one head)"))
    sv = shape(values) or ()
    per_feature = len(sv) == len(s) and len(s) >= 1 and s[-1] == sv[-1] and sv[-1] != 1
    v["dimensionality"] = (
        ("Multi-Dimensional", f"`{agg.name}` weighs every feature of each message")
        if per_feature else
        ("Single-Dimensional", f"`{agg.name}` sums the messages `{values.name}`, one weight "
                               "per message and head"))
    return a
