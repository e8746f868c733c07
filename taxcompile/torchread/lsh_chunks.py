"""LSH attention's sorted chunks (Kitaev et al. 2020, Reformer, §2), the way its code runs it
without the (L, L) scores: each position hashed by a random rotation, h(x) = argmax([xR; -xR])
(``lsh.hashed``), the positions sorted by a key computed from their buckets alone, the
queries, keys and values gathered in that order (cut into chunks, each beside the chunk
before), the scores of a chunk's queries against its keys normalised (a softmax, or
exp(e - logsumexp e), ``lse``), and the chunks' contexts put back in the positions' order (a
gather by the inverse order, or a scatter by the order). Which keys a query meets follows
the hashed content of the positions: the registry's `lsh` (Sparse), as its explicit path's
bucket mask (``lsh``) reads.

Read strictly: the scores' queries and keys, and the values, must be gathered by one sort
whose key is computed (through integer ops alone) from such a hash; the keys kept must
follow the hash (a mask comparing hashed codes, or chunks shorter than the sequence); and
the contexts must go back to the positions. Sorting by position (fixed blocks), chunks
without a hash, or a hash that no sort uses, are no LSH. The rounds' contexts, weighted by
a softmax of their normalisers (``rounds_of``), are part of the one attention."""
from __future__ import annotations

from . import lse, lsh
from .alignments import GATHERS
from .normalise import TRANSPARENT, ancestors, normalised, op, shape, tensor_args

PATTERN = "hash_sorted_chunks"
SORTS = {"sort", "argsort"}
# a scatter puts rows back where an index says (the contexts, by the sorted order)
SCATTERS = {"scatter", "scatter_add", "index_put", "index_copy"}
_MOVES = TRANSPARENT | {"constant_pad_nd"}


def _integer(node) -> bool:
    v = node.meta.get("val") if hasattr(node, "meta") else None
    if isinstance(v, (tuple, list)):  # sort's (values, indices): read through getitem
        return True
    return v is not None and hasattr(v, "dtype") and not v.dtype.is_floating_point


def _sorted_values(node) -> bool:
    """Whether ``node`` is a sort's sorted values (its first output), not its indices."""
    return op(node) == "getitem" and len(node.args) > 1 and node.args[1] == 0 \
        and bool(tensor_args(node)) and op(tensor_args(node)[0]) in SORTS


def _int_ancestors(node, depth: int = 16, values: bool = False) -> list:
    """``node``'s ancestors through integer-valued nodes alone (indices, buckets, codes),
    breadth first, not through a sort (its indices are positions), but where ``values``
    through a sort's sorted values to what it sorted (sorted codes are codes)."""
    seen, frontier = [], [node]
    for _ in range(depth):
        nxt = []
        for n in frontier:
            if op(n) in SORTS and n is not node:
                continue
            for a in tensor_args(n):
                if values and _sorted_values(n):
                    a = tensor_args(a)[0] if tensor_args(a) else a  # past the sort
                if a not in seen and _integer(a):
                    seen.append(a)
                    nxt.append(a)
        frontier = nxt
    return seen


def _sort_of(index):
    """The nearest sort an integer index is computed from, or None."""
    return next((a for a in [index, *_int_ancestors(index)] if op(a) in SORTS), None)


def _hash_of(r, node):
    """The hash argmax([xR; -xR]) that the integer ``node`` is computed from, or None."""
    return next((a for a in [node, *_int_ancestors(node)] if lsh.hashed(r, a) is not None),
                None)


def _sorted_source(r, node, depth: int = 24):
    """(gather, sort, look-back) where ``node`` is rows gathered in a sorted order, through
    moves, chunking, padding, a normalisation per row and the look-back's concatenation of
    each chunk with the one before (a roll: a gather by fixed positions); None otherwise."""
    n, back = node, None
    for _ in range(depth):
        o, args = op(n), tensor_args(n)
        if o == "cat" and len(args) > 1:
            got = [_sorted_source(r, a, depth - 1) for a in args]
            if None in got or len({(g, s) for g, s, _ in got}) != 1:
                return None
            return got[0][0], got[0][1], n
        if o in GATHERS and len(args) >= 2:
            sort = _sort_of(args[1]) if _integer(args[1]) else None
            if sort is not None:
                return n, sort, back
            if r.roots(args[1]) or not all(_integer(a) for a in args[1:]):
                return None  # rows picked by data, not by a fixed shift
            back, n = back or n, args[0]  # a roll of the chunks: fixed positions
        elif o in _MOVES and args:
            n = args[0]
        elif o in ("div", "mul") and normalised(n) is not None:
            n = args[0]  # unit-length keys (Reformer's shared QK), after sorting
        else:
            return None
    return None


def _producer(r, x):
    """The scores' matmul back from a normalisation's input, through moves, masks, scalings
    and the rounds' count (``counted``); None where something else computes them."""
    for _ in range(40):
        o, args = op(x), tensor_args(x)
        if o == "matmul" and len(args) >= 2:
            return x
        if o in _MOVES and args:
            x = args[0]
        elif o == "where" and len(args) >= 2:
            data = [a for a in args[1:] if r.roots(a)]
            if len(data) != 1:
                return None
            x = data[0]
        elif o in ("mul", "div") and len(args) == 1:
            x = args[0]
        elif o == "sub" and len(args) == 2 and counted(r, args[1]):
            x = args[0]
        else:
            return None
    return None


def counted(r, node) -> bool:
    """Whether ``node`` is log n, n counting the rounds whose hashes put a key beside a query
    (Reformer's e - log n: a key met in n rounds counted once over them): a log of a count
    of comparisons of hashed codes."""
    n = node
    while op(n) in _MOVES | {"clamp", "clamp_min"} and tensor_args(n):
        n = tensor_args(n)[0]
    if op(n) != "log" or not tensor_args(n):
        return False
    n = tensor_args(n)[0]
    while op(n) in _MOVES | {"clamp", "clamp_min"} and tensor_args(n):
        n = tensor_args(n)[0]
    return op(n) == "sum" and bool(tensor_args(n)) and _integer(tensor_args(n)[0]) \
        and _hash_of(r, tensor_args(n)[0]) is not None


def scores_input(norm):
    """The scores a normalisation normalises: a softmax's input, or the e of
    exp(e - logsumexp e)."""
    got = lse.softmax_of(norm)
    if got is not None:
        return got[0]
    args = tensor_args(norm)
    return args[0] if op(norm) in ("softmax", "log_softmax") and args else None


def _gathered_scores(r, norm):
    """(scores, q's (gather, sort, look-back), k's) where ``norm``'s scores multiply queries
    and keys both gathered by one sort; None otherwise."""
    e = scores_input(norm)
    prod = _producer(r, e) if e is not None else None
    if prod is None:
        return None
    q, k = (_sorted_source(r, a) for a in tensor_args(prod)[:2])
    if q is None or k is None or q[1] is not k[1]:
        return None
    return prod, q, k


def unread(r, norm):
    """Why ``norm``'s alignment is not read, where its queries and keys are gathered by one
    sort and cut into chunks shorter than the sorted sequence, but no hash keys that sort
    (or the rest of LSH's sorted chunks is missing): which keys a query meets follows the
    sort, and a guess (every key, or the chunks taken for heads) would misread it. None
    where the scores are no such chunks."""
    got = _gathered_scores(r, norm)
    if got is None:
        return None
    prod, (gq, sort, _), _ = got
    s, n = shape(prod) or (), (shape(tensor_args(sort)[0]) if tensor_args(sort) else None) or ()
    if not (s and n and isinstance(s[-1], int) and isinstance(n[-1], int) and s[-1] < n[-1]):
        return None
    hashed = _hash_of(r, tensor_args(sort)[0]) if tensor_args(sort) else None
    what = ("no hash argmax([xR; -xR]) keys that sort" if hashed is None else
            "the rest of LSH's sorted chunks (the values in that order, the contexts put back) "
            "is not found")
    return (f"`{gq.name}` gathers the queries and keys in the order of `{sort.name}` and the "
            f"scores `{prod.name}` meet {s[-1]} of its {n[-1]} sorted positions, but {what}: "
            "which keys a query meets follows that order, not read here")


def sorted_scores(r, norm):
    """(scores, the q and k gathers, sort, hash, look-back) where ``norm`` normalises scores
    of queries and keys gathered in one order sorted by a hash key; None otherwise."""
    got = _gathered_scores(r, norm)
    if got is None:
        return None
    prod, q, k = got
    sort = q[1]
    h = _hash_of(r, tensor_args(sort)[0]) if tensor_args(sort) else None
    if h is None:
        return None
    return prod, (q[0], k[0]), sort, h, k[2] or q[2]


def _put_back(app, sort):
    """The node that puts the contexts ``app`` back in the positions' order: a gather by an
    order sorted from ``sort``'s (its inverse), or a scatter by ``sort``'s; None otherwise."""
    seen, frontier = set(), [app]
    for _ in range(12):
        nxt = []
        for n in frontier:
            for u in n.users:
                if u in seen:
                    continue
                seen.add(u)
                args = tensor_args(u)
                idx = [a for a in args[1:] if _integer(a)]
                if op(u) in GATHERS and args and args[0] is n and idx:
                    inv = _sort_of(idx[0])
                    if inv is not None and inv is not sort and sort in _int_ancestors(inv):
                        return u
                if op(u) in SCATTERS and n in args[1:] and idx and _sort_of(idx[0]) is sort:
                    return u
                if op(u) in _MOVES:
                    nxt.append(u)
        frontier = nxt
    return None


def _bucket_compare(r, masks, h):
    """A comparison of two codes both computed from the hash ``h`` in a mask: the keys kept
    in the query's bucket; None where no mask compares hashed codes."""
    for m in masks:
        for a in [m, *ancestors(m, 12)]:
            args = tensor_args(a)
            if op(a) in ("eq", "ne") and len(args) == 2 and all(
                    h in [x, *_int_ancestors(x, 20, values=True)] for x in args if _integer(x)) \
                    and all(_integer(x) for x in args):
                return a
    return None


def read(r, norm, masks, app):
    """The reason ``norm`` is LSH attention's sorted chunks, or None."""
    got = sorted_scores(r, norm)
    if got is None or app is None or op(app) != "matmul" or len(tensor_args(app)) < 2:
        return None
    prod, (gq, gk), sort, h, back = got
    vals = _sorted_source(r, tensor_args(app)[1])
    if vals is None or vals[1] is not sort:
        return None
    put = _put_back(app, sort)
    if put is None:
        return None
    eq = _bucket_compare(r, masks, h)
    s, hs = shape(prod) or (), shape(h) or ()
    chunked = bool(s and hs) and isinstance(s[-1], int) and isinstance(hs[-1], int) \
        and s[-1] < hs[-1]
    if eq is None and not chunked:
        return None  # one chunk of every key, no bucket compared: a softmax over all
    rot = lsh.hashed(r, h)
    how = "exp(e - logsumexp e)" if lse.softmax_of(norm) is not None else "a softmax"
    parts = [f"`{h.name}` hashes each position, argmax([xR; -xR]) with `{rot[0].name}` "
             f"turning it by `{lsh._moved(rot[1]).name}` (read from no input, a random rotation)",
             f"`{sort.name}` sorts the positions by bucket and "
             + ", ".join(f"`{g.name}`" for g in dict.fromkeys((gq, gk, vals[0])))
             + " gather the queries, keys and values in that order"]
    if chunked:
        parts.append(f"the scores `{prod.name}` meet {s[-1]} of the {hs[-1]} sorted keys "
                     "(chunks" + (f", each beside the one before, `{back.name}`)" if back
                                  else ")"))
    if eq is not None:
        parts.append(f"`{eq.name}` compares the hashed codes (the query's bucket)")
    parts.append(f"`{norm.name}` normalises them by {how} and `{put.name}` puts the contexts "
                 "back in the positions' order")
    return "; ".join(parts) + " (LSH attention's sorted chunks, Kitaev et al. 2020)"


def rounds_of(r, norm):
    """The LSH normalisation whose logsumexp ``norm`` (a softmax, or exp(e - logsumexp e),
    over the rounds) normalises: Reformer weighs each round's context by exp(lse_r -
    logsumexp lse), part of that one attention, no attention of its own. None otherwise."""
    x = scores_input(norm)
    for _ in range(16):
        if x is None:
            return None
        got = lse.of(x)
        if got is not None:
            e = got[0]
            users = [w for u in e.users if op(u) == "sub" for w in u.users]
            return next((w for w in users if lse.softmax_of(w) is not None
                         and lse.softmax_of(w)[0] is e and sorted_scores(r, w) is not None),
                        None)
        args = tensor_args(x)
        if op(x) == "where" and len(args) >= 2:
            data = [a for a in args[1:] if r.roots(a)]
            x = data[0] if len(data) == 1 else None
        elif (op(x) in _MOVES or op(x) in GATHERS) and args:
            x = args[0]
        elif op(x) in SCATTERS and len(args) >= 2:
            data = [a for a in args[1:] if not _integer(a)]  # the rows written back
            x = data[0] if len(data) == 1 else None
        else:
            return None
    return None


def heads(r, keys):
    """(H, reason) read from the keys before they are sorted: (N, H, L, d) gathered along
    L, or (N H, L, d) with a view folding H heads into the batch; (None, reason) where
    neither says."""
    got = _sorted_source(r, keys) if keys is not None else None
    if got is None:
        return None, "the keys are not read in a sorted order: the heads would be a guess"
    g = got[0]
    src, dim = tensor_args(g)[0], g.args[1] if len(g.args) > 1 else None
    s = shape(src) or ()
    if not isinstance(dim, int) or not s:
        return None, (f"`{g.name}` gathers the keys along no axis read here: the heads would "
                      "be a guess")
    dim %= len(s)
    if len(s) == 4 and dim == 2 and isinstance(s[1], int):
        return s[1], (f"the keys `{src.name}` that `{g.name}` sorts hold {s[1]} "
                      f"head{'s' if s[1] > 1 else ''} (shape {list(s)}, positions on axis 2)")
    if len(s) == 3 and dim == 1:
        n = src
        for _ in range(12):
            a = tensor_args(n)
            if not a or op(n) not in TRANSPARENT:
                break
            x, y = shape(a[0]), shape(n)
            if op(n) == "view" and x and y and len(x) == 4 and len(y) == 3 \
                    and all(isinstance(d, int) for d in x) and y[0] == x[0] * x[1]:
                return x[1], (f"`{n.name}` folds {x[1]} heads of the keys into the batch "
                              f"(shape {list(x)} to {list(y)}) before `{g.name}` sorts them")
            n = a[0]
        return 1, f"the keys `{src.name}` that `{g.name}` sorts hold one head (shape {list(s)})"
    return None, (f"`{g.name}` sorts keys of shape {list(s)} along axis {dim}: how they hold "
                  "heads is not read, the heads would be a guess")
