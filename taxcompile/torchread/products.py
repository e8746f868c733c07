"""Learned maps and products of two streams in a normalised graph: what the score and
alignment readers (patterns, scores, alignments, queries) all ask of a node."""
from __future__ import annotations

from . import qknorm, tables
from .normalise import (NORM_OPS, TRANSPARENT, ancestors, normalised,  # noqa: F401
                        op, shape, strip, tensor_args)

ACTS = {"tanh", "relu", "gelu", "sigmoid", "elu", "leaky_relu", "silu"}


def weight(node, r) -> bool:
    n = strip(node)
    return r.is_param(n)


def projection(node, r):
    """(kind, node) where ``node`` is a learned projection: 'plain' x W, 'biased' x W + b,
    'activated' act(x W [+ b]); None where it is not."""
    n = strip(node)
    o, args = op(n), tensor_args(n)
    if o in ACTS and args:
        inner = projection(args[0], r)
        return ("activated", n) if inner else None
    if o == "linear":  # addmm(bias, x, W^T) / linear(x, W, b)
        return ("biased", n)
    if o == "matmul" and len(args) >= 2 and (weight(args[1], r) or weight(args[0], r)):
        return ("plain", n)
    if o == "add" and len(args) == 2:
        for a, b in (args, args[::-1]):
            if weight(b, r) and projection(a, r) and projection(a, r)[0] == "plain":
                return ("biased", n)
    return None


def paired(cat) -> bool:
    """Whether a concatenation pairs two streams over two axes ([q_i; k_j], a part broadcast
    by ``expand``), rather than joining two features of the same positions (DiSAN's
    [u_fw; u_bw], which a score of the keys alone reads)."""
    for part in tensor_args(cat):
        n = part
        for _ in range(8):
            if op(n) == "expand":
                return True
            args = tensor_args(n)
            if op(n) not in TRANSPARENT or not args:
                break
            n = args[0]
    return False


def memory(node, r):
    """(the data part, the learned parts) where ``node`` concatenates learned vectors to one
    stream of data (persistent memory: keys or values that are parameters, appended to the
    input's); None where it does not."""
    n = strip(node)
    if op(n) != "cat":
        return None
    parts = tensor_args(n)
    learned = [p for p in parts if weight(p, r)]
    data = [p for p in parts if not weight(p, r)]
    return (data[0], learned) if learned and len(data) == 1 else None


def _through_memory(node, r, scales, why: list):
    """``node`` stripped; a concatenation of learned memory slots to it is followed to the
    data, and said in ``why``."""
    s = strip(node, scales)
    mem = memory(s, r)
    if mem is None:
        return s
    data, learned = mem
    why.append(f"`{s.name}` appends learned slots ({', '.join(f'`{p.name}`' for p in learned)}"
               f") to `{data.name}`: persistent memory, scored as the keys are")
    return strip(data, scales)


def matmul_score(r, prod, scales, norm=None):
    args = tensor_args(prod)
    if op(prod) != "matmul" or len(args) < 2:
        return None
    if weight(args[1], r) or weight(args[0], r):
        return _learned_queries(r, prod, scales, args, norm)
    mem: list = []
    got = _matmul_score(r, prod, scales, args, mem)
    return got if not mem or not got else (got[0], f"{got[1]}; {mem[0]}", *got[2:])


def _learned_queries(r, prod, scales, args, norm):
    """("multiplicative" or "scaled_multiplicative", reason, queries, keys) where ``prod``
    multiplies a parameter, one learned query per row (a capsule's q_c, eq. 34 and 43), by
    keys read from the input as they are, and ``norm`` normalises over the keys'
    positions: e_{c,l} = q_c^T k_l. None otherwise: keys that are a learned map or an
    activation (w^T tanh(W k) is Additive, Lin et al.'s W_s2 tanh(W_s1 H^T)), or weights
    over the parameter's rows (one output of a learned map per key: a location score)."""
    if norm is None or len(tensor_args(norm)) != 1 or len(norm.args) < 2 \
            or not isinstance(norm.args[1], int):
        return None
    side = [i for i in (0, 1) if weight(args[i], r)]
    rank = len(shape(prod) or ())
    if len(side) != 1 or rank < 2:
        return None
    keys = 1 - side[0]
    if norm.args[1] % rank != (rank - 1 if keys == 1 else rank - 2):
        return None  # the normalised axis is the parameter's rows, not the keys' positions
    scales = list(scales)  # the next pattern tried gets the caller's list as it was
    k = strip(args[keys], scales)
    if not r.roots(k) or op(k) in ACTS or projection(k, r) or normalised(k) is not None:
        return None
    q = strip(args[side[0]])
    how = (f"`{prod.name}` multiplies the learned queries `{q.name}` (a parameter, one query "
           f"per row: q_c, eq. 34) by the keys `{k.name}` as they are (q_c^T k_l)")
    if scales:
        vals = ", ".join(f"`{x.name}`" for x in scales)
        return "scaled_multiplicative", f"{how}, scaled by a constant ({vals})", q, args[keys]
    return "multiplicative", how, q, args[keys]


def _moved(node):
    """``node`` back through moves and slices (no scaling)."""
    while op(node) in TRANSPARENT and tensor_args(node):
        node = tensor_args(node)[0]
    return node


def _turned_by(node, r, trig: str):
    """(the stream, True) where ``node`` is a stream times factors that read no data, one
    of them made from a ``trig`` (cos, sin) of positions, or (the stream, the table's node)
    where that factor is read from a table (a buffer: its values are checked by the caller);
    (node, False) otherwise."""
    n, hit = _moved(node), False  # a scaling of this term alone is no scaling of X
    inputs = {p.name: p for p in r.graph.nodes if p.op == "placeholder"}
    while op(n) == "mul" and len(tensor_args(n)) == 2:
        const = [a for a in tensor_args(n) if _fixed(a, r, trig, inputs)]
        data = [a for a in tensor_args(n) if a not in const]
        if len(const) != 1 or len(data) != 1:
            break
        turns = any(op(x) == trig for x in [const[0], *ancestors(const[0], 12)]) \
            or tables.table(const[0], trig)
        if not turns and any(d != 1 for d in shape(const[0]) or (2,)):
            break  # a learned gain per feature (RMS qk-norm's) is the stream's, not the turn's
        hit = hit or turns
        n = _moved(data[0])
    return n, hit


def _fixed(a, r, trig: str, inputs) -> bool:
    """Whether a factor reads no data: no input, only integer positions (a table's rows
    picked by `position_ids`), or a table given as an input (checked by the caller)."""
    return not r.roots(a) or all(tables.positions(inputs[x]) for x in r.roots(a)) \
        or tables.table(a, trig) is not None


def rotated(node, r):
    """X where ``node`` is a rotary embedding of X: X cos + rot(X) sin, with rot(X) =
    [-x2, x1] (a concatenation of X's halves, or a stack of its pairs, one negated), the
    cos and sin reading no data (`_fixed`). Both terms carry X whole, so a constant scaling of
    X is a scaling of the rotation; None where ``node`` is no such sum of one X."""
    n = _moved(node)
    if op(n) == "cat":
        return _halves_turned(n, r)
    if op(n) != "add" or len(tensor_args(n)) != 2:
        return None
    for a, b in (tensor_args(n), tensor_args(n)[::-1]):
        (x, cos), (y, sin) = _turned_by(a, r, "cos"), _turned_by(b, r, "sin")
        y = _moved(y)
        if not (cos and sin) or op(y) not in ("cat", "stack") or len(tensor_args(y)) != 2:
            continue
        neg, pos = (_moved(t) for t in tensor_args(y))
        if op(neg) == "neg" and tensor_args(neg) and _trig(cos, sin, _rot_form(y)):
            if _moved(tensor_args(neg)[0]) is _moved(x) and _moved(pos) is _moved(x):
                return x
    return None


def _rot_form(y) -> str:
    """How rot(X) pairs the features: "pairs" for a stack of them (ATen writes a stack as a
    concatenation of unsqueezed parts), "halves" for a concatenation of the halves."""
    parts = tensor_args(y)
    return "pairs" if op(y) == "stack" or all(op(p) == "unsqueeze" for p in parts) else "halves"


def _trig(cos, sin, pairing: str | None) -> bool:
    """Whether the factors found are sines and cosines: both from ops, or both tables whose
    values are those of a rotation pairing features as rot(X) does (``pairing``; None: the
    caller's halves are the pairs)."""
    if cos is True and sin is True:
        return True
    return cos is not True and sin is not True and tables.rotation(cos, sin, pairing)


def _halves_turned(n, r):
    """X where ``n`` is [x1 cos - x2 sin; x1 sin + x2 cos], x1 and x2 parts of one X (the
    rotation of the halves' pairs written out, as taxcompile's own rotary code does);
    None otherwise."""
    parts = [_moved(t) for t in tensor_args(n)]
    if len(parts) != 2 or [op(p) for p in parts] != ["sub", "add"]:
        return None
    turned = []
    for part in parts:
        got, hits = {}, {}
        for term in tensor_args(part)[:2]:
            for trig in ("cos", "sin"):
                x, hit = _turned_by(term, r, trig)
                if hit:
                    got[trig], hits[trig] = x, hit
                    break
        if set(got) != {"cos", "sin"} or not _trig(hits["cos"], hits["sin"], None):
            return None
        turned += got.values()
    return turned[0] if all(x is turned[0] for x in turned) else None


# ops of blocked local attention's gathering of keys (blocks.py): a padding of the block
# axis, the unfold of its neighbours and the moves that merge them
_GATHER = TRANSPARENT | {"unfold", "constant_pad_nd", "movedim", "flatten"}


def _looked_through(s, r, scales, turns: list):
    """A stream back through a rotary embedding (its stream's own scaling collected) and
    through the blocks' gathering of neighbours' keys, to what they turn or gather; the
    rotations said in ``turns``."""
    for _ in range(2):
        x = rotated(s, r)
        if x is not None:
            turns.append(f"; `{s.name}` turns `{x.name}` by the sines and cosines of positions "
                         "(a rotation, no learned map)")
            s = strip(x, scales)
        n, gathered = s, False
        while op(n) in _GATHER and tensor_args(n):
            gathered = gathered or op(n) == "unfold"
            n = tensor_args(n)[0]
        if gathered:
            s = strip(n, scales)
    return s


def _temperature(node, r):
    """(the stream, the scaling, the scalar) where ``node`` is a stream divided by its norm,
    times a scalar that reads no input (a learned temperature, NTM's key strength beta);
    False where the factor is a learned vector (a weight per feature); None otherwise."""
    args = tensor_args(node)
    if op(node) not in ("mul", "div") or len(args) != 2:
        return None
    for s, t in (args, args[::-1]):
        if r.roots(t) or normalised(strip(s)) is None:
            continue
        if shape(t) is not None and all(d == 1 for d in shape(t)):
            return strip(s), node, t
        return False  # a learned weight per feature: q^T diag(w) k, neither cosine nor plain
    return None


def _gained(r, prod, scales, args, qs, ks, turn):
    """The score as written where q and k are both normalised and times learned gains per
    feature (qk-norm with gains, which the registry reads as its score, not a cosine);
    None (a refusal, neither cosine nor plain product) for any other weight per feature."""
    got = qknorm.read(qs, ks, r)
    if got is None:
        return None
    why, more = got
    scales = [*scales, *more]
    vals = ", ".join(f"`{s.name}`" for s in scales)
    if scales:
        return ("scaled_multiplicative", f"`{prod.name}` multiplies queries and keys, scaled "
                f"by a constant ({vals}){why}{turn}", args[0], args[1])
    return ("multiplicative", f"`{prod.name}` multiplies queries and keys (q^T k){why}{turn}",
            args[0], args[1])


def _in_parts(q, nq, nk) -> str:
    """Where q and k are normalised in parts of the features the product sums over (a
    norm over groups of a head's width, then the groups viewed back), the words saying so;
    '' where either is not normalised or both are normalised whole."""
    width = (shape(q) or (None,))[-1]
    if nq is None or nk is None or width is None:
        return ""
    sizes = [_reduced(n) for n in (nq, nk)]
    if all(w == width for w in sizes):
        return ""
    return (f"; q and k are each divided by the norms of parts of their features (`{nq.name}`"
            f", `{nk.name}`: {sizes[0]} of the {width} the product sums over): no cosine of "
            "the whole vectors")


def _reduced(div):
    """How many features the norm dividing ``div`` sums over (its ``dim``, or the last)."""
    d = tensor_args(div)[1]
    for a in [d, *ancestors(d, 5)]:
        if op(a) in NORM_OPS and tensor_args(a):
            x = shape(tensor_args(a)[0]) or ()
            dim = a.kwargs.get("dim", a.args[2] if len(a.args) > 2 else -1)
            dim = dim[0] if isinstance(dim, (list, tuple)) and len(dim) == 1 else dim
            return x[dim] if isinstance(dim, int) and x else None
    return None


def _mapped(node, r):
    """projection(node), or that of the learned map a normalised stream divides (Reformer's
    shared QK: the keys are the queries' projection over its norm, no map of their own)."""
    got = projection(node, r)
    n = normalised(node) if got is None else None
    return projection(tensor_args(n)[0], r) if n is not None else got


def _net(scales) -> float | None:
    """The product of constant scalings given as numbers (a div by c counts 1/c), None
    where one is a tensor (its value is not read here)."""
    out = 1.0
    for s in scales:
        nums = [a for a in s.args if isinstance(a, (int, float)) and not isinstance(a, bool)]
        if len(nums) != 1 or op(s) not in ("mul", "div") or nums[0] == 0:
            return None
        out *= nums[0] if op(s) == "mul" else 1 / nums[0]
    return out


def _matmul_score(r, prod, scales, args, mem):
    qs, ks = (_through_memory(a, r, scales, mem) for a in args[:2])
    turns: list = []
    qs, ks = (_looked_through(s, r, scales, turns) for s in (qs, ks))
    turn = "".join(turns)
    net = _net(scales)
    if scales and net is not None and abs(net - 1) < 1e-9:
        names = ", ".join(f"`{s.name}`" for s in scales)
        turn += f"; its constant factors ({names}) multiply to 1: no scaling"
        scales = []
    temps = [t for t in (_temperature(qs, r), _temperature(ks, r)) if t is not None]
    if False in temps:  # a learned weight per feature on a normalised stream
        return _gained(r, prod, scales, args, qs, ks, turn)
    for stream, t, _ in temps:
        qs, ks = (stream if x is t else x for x in (qs, ks))
    nq, nk = normalised(qs), normalised(ks)
    parts = _in_parts(args[0], nq, nk)
    if parts:  # q.k over streams normalised in parts: no cosine of the whole vectors
        turn += parts
    elif nq is not None and nk is not None:
        temp = "".join(f"; `{t.name}` scales it by `{b.name}`, a scalar read from no input "
                       "(a learned temperature)" for _, t, b in temps)
        times = "".join(f"; scaled by a constant ({', '.join(f'`{s.name}`' for s in scales)})"
                        for _ in scales[:1])
        return ("similarity", f"`{prod.name}` multiplies two streams each divided by its norm "
                f"(`{nq.name}`, `{nk.name}`): cosine similarity{temp}{times}{turn}",
                args[0], args[1])
    pq, pk = _mapped(qs, r), _mapped(ks, r)
    if (pq is None) != (pk is None):
        kind, p = pq or pk
        name = {"plain": "general", "biased": "biased_general",
                "activated": "activated_general"}[kind]
        vals = ", ".join(f"`{s.name}`" for s in scales)
        scaled = f"; scaled by a constant ({vals}), which General has no value for" \
            if scales else ""
        return (name, f"`{prod.name}` multiplies one stream by a learned map of the other "
                f"(`{p.name}`: q^T W k){scaled}{turn}", args[0], args[1])
    if scales:
        vals = ", ".join(f"`{s.name}`" for s in scales)
        return ("scaled_multiplicative", f"`{prod.name}` multiplies queries and keys, scaled "
                f"by a constant ({vals}){turn}", args[0], args[1])
    return ("multiplicative", f"`{prod.name}` multiplies queries and keys (q^T k){turn}",
            args[0], args[1])
