"""Scores beside patterns.py's matmul and additive ones: Luong et al.'s location score
(e = W_a q, one learned output per key position and no key in the score), co-attention's
affinity matrix read by two attentions (its rows and columns, or its rows' maxima), and an
activation of a general score (act(k^T W q + b))."""
from __future__ import annotations

from .alignments import between as _between
from .normalise import TRANSPARENT, norms_reading, op, shape, strip, tensor_args


def _weight_of(r, prod):
    """(weight, data) where ``prod`` is a learned map whose output features come from a
    parameter: linear(x, W, b), addmm(b, x, W^T) or x @ W (W on the right); else None."""
    args = tensor_args(prod)
    if op(prod) == "linear":
        ws = [a for a in args if r.is_param(strip(a)) and len(shape(a) or ()) == 2]
    elif op(prod) == "matmul" and len(args) == 2:
        ws = [args[1]] if r.is_param(strip(args[1])) else []
    else:
        return None
    data = [a for a in args if r.roots(a)]
    if len(ws) != 1 or len(data) != 1:
        return None
    return strip(ws[0]), data[0]


# Moves that can bring another axis than the map's outputs to the normalised place.
_AXIS_MOVES = {"permute", "transpose", "t", "movedim"}


def _moves_last(node) -> bool:
    """Whether a permute or transpose brings another axis than its input's last one (of more
    than one element) to the last place of more than one element: moves of other axes and of
    singletons (einsum's per-head batch) keep the map's outputs last."""
    o, s = op(node), shape(node)
    if o not in _AXIS_MOVES:
        return False
    rank = len(s or ())
    order = list(range(rank))
    if o == "permute" and len(node.args) > 1:
        order = [d % rank for d in node.args[1]]
    elif o == "transpose" and len(node.args) > 2:
        i, j = node.args[1] % rank, node.args[2] % rank
        order[i], order[j] = j, i
    elif rank:
        order = order[::-1]  # t: a 2-d transpose
    src = shape(tensor_args(node)[0]) if tensor_args(node) else None
    if not s or not src or len(src) != rank:
        return True

    def last(shp, idx):
        return next((i for i in reversed(idx) if shp[i] != 1), None)

    out_last = last(s, range(rank))
    return out_last is None or order[out_last] != last(src, range(rank))


def location(r, prod, norm):
    """(registry name, reason, query, None) where the score ``prod`` is W_a q: a learned map
    of the query whose outputs, one per key, are what ``norm`` normalises; None otherwise.
    The keys' axis must come from the weight, and reach the normalised (last) axis by no
    transpose: a learned vector applied at every key position (an additive score's last
    step, w^T act(W k)) gives one output, and a learned matrix over the keys' rows (Lin et
    al.'s W_s2 tanh(W_s1 H^T)) puts the input's axis there: neither is a location score."""
    got = _weight_of(r, prod)
    s, sn = shape(prod), shape(norm)
    if got is None or not s or not sn or len(norm.args) < 2 or not isinstance(norm.args[1], int):
        return None
    dim = norm.args[1] % len(sn)
    n = sn[dim]
    if dim != len(sn) - 1 or s[-1] != n or not isinstance(n, int) or n < 2:
        return None
    if any(_moves_last(x) for x in _between(prod, norm)):
        return None  # the normalised axis may be the input's rows (W_s2 tanh(W_s1 H^T))
    w, q = got
    return ("location", f"`{prod.name}` maps the query `{strip(q).name}` alone by the learned "
            f"`{w.name}` to one score per key position ({n} keys), and `{norm.name}` "
            "normalises them: no key enters the score (W_a q, Luong et al.)", q, None)


# Ops from an affinity matrix to the normalisations that read it: moves, masks, a max over
# its rows or columns (max_pool), scalings.
_TO_NORM = TRANSPARENT | {"max", "amax", "where", "add", "sub", "mul", "div"}
_NORMS = {"softmax", "log_softmax", "sigmoid"}
# The matmul scores an affinity matrix can be (its `form`, as the registry names it).
_FORMS = {"multiplicative": "dot", "scaled_multiplicative": "scaled_dot", "general": "bilinear",
          "trilinear": "trilinear"}


def _other_norms(a, norm, depth: int = 8) -> list:
    """The normalisations other than ``norm`` that read the matrix ``a``."""
    return norms_reading(a, norm, _NORMS, _TO_NORM, depth)


def _terms(x) -> list:
    """The terms of a sum (a tree of adds, through moves and scalings)."""
    out, stack = [], [x]
    while stack and len(out) < 8:
        n = strip(stack.pop())
        if op(n) == "add" and len(tensor_args(n)) == 2:
            stack.extend(tensor_args(n))
        else:
            out.append(n)
    return out


def _learned_vector(r, t) -> bool:
    """w^T x: a sum of a product with a parameter, or a matmul or linear with one."""
    if op(t) == "sum" and tensor_args(t):
        t = strip(tensor_args(t)[0])
        return op(t) == "mul" and any(r.is_param(strip(a)) for a in tensor_args(t))
    return op(t) in ("matmul", "linear") and any(r.is_param(strip(a)) for a in tensor_args(t))


def _trilinear(r, x):
    """("trilinear", reason, k, q) where ``x`` is w1^T k_i + w2^T q_j + (k_i * w3)^T q_j, the
    trilinear affinity w^T [k_i; q_j; k_i * q_j] (Seo et al.'s BiDAF, eq. 13); None
    otherwise."""
    terms = _terms(x) if op(x) == "add" else []
    pair = [t for t in terms if op(t) == "matmul" and len(tensor_args(t)) >= 2
            and all(r.roots(a) for a in tensor_args(t)[:2])]
    if len(terms) != 3 or len(pair) != 1:
        return None
    a, b = tensor_args(pair[0])[:2]
    scaled = [s for s in (strip(a), strip(b)) if op(s) == "mul"
              and any(r.is_param(strip(y)) for y in tensor_args(s))]
    if len(scaled) != 1 or not all(_learned_vector(r, t) for t in terms if t is not pair[0]):
        return None
    return ("trilinear", f"`{x.name}` sums a learned vector on each input and `{pair[0].name}`, "
            f"the product of one input scaled by a learned vector (`{scaled[0].name}`) with the "
            "other: w^T [k_i; q_j; k_i * q_j] (eq. 13)", a, b)


def _reduces_last(node) -> bool:
    dims, rank = node.args[1] if len(node.args) > 1 else -1, len(shape(tensor_args(node)[0]) or ())
    dims = dims if isinstance(dims, (list, tuple)) else [dims]
    return bool(rank) and any(isinstance(d, int) and d % rank == rank - 1 for d in dims)


def affinity(r, prod, scales, norm):
    """(registry name, reason, query, key, reading) where the scores are read off an affinity
    matrix (co-attention, eq. 12-16): one matrix of the two inputs' pairs (q^T k, q^T k /
    sqrt(d), q^T W k, optionally activated) whose rows are this attention's scores while
    another normalisation reads its columns (or the maximum of each row: max_pool); None
    otherwise (a matrix that only this attention reads is a plain score)."""
    from .. import mechanisms
    from .products import ACTS, matmul_score

    x, pooled, act, inner_scales = prod, None, None, list(scales)
    if op(x) in ("max", "amax") and tensor_args(x):
        pooled, x = x, strip(tensor_args(x)[0], inner_scales)
    if op(x) in ACTS and tensor_args(x):
        act, x = x, strip(tensor_args(x)[0], inner_scales)
    got = matmul_score(r, x, inner_scales) if op(x) == "matmul" else _trilinear(r, x)
    if got is None or got[0] not in _FORMS:
        return None
    a = act or x
    others = _other_norms(a, norm)
    if not others:
        return None
    form = _FORMS[got[0]]
    reading = mechanisms.scores.affinity_reading(None, form=form,
                                                 act=op(act) if act is not None else "none")
    name = "max_pool" if pooled is not None else "affinity"
    how = (f"the maximum of each of its rows (`{pooled.name}`)" if pooled is not None
           else "its rows")
    turned = any(_moves_last(n) for n in _between(a, norm))
    if pooled is not None and _reduces_last(pooled):
        turned = not turned  # the rows' maxima: the weights run over the first operand's axis
    if turned and pooled is None:
        how = "its columns (transposed)"
    why = (f"`{norm.name}` reads {how} of the {form} affinity matrix `{a.name}`"
           + (f" (`{act.name}` of it)" if act is not None else "")
           + f", which `{others[0].name}` reads too (co-attention, eq. 12-16): {got[1]}")
    q, k = (got[3], got[2]) if turned else (got[2], got[3])
    return name, why, q, k, reading


def activated(r, prod, scales):
    """(registry name, reason, query, key) where the score is act(k^T W q [+ b]): an
    activation of a general score, with a learned bias or none (Table II's activated
    general; Ma et al.'s interactive attention); None otherwise (an activation of q^T k
    is no score of the registry)."""
    from .products import ACTS, matmul_score

    if op(prod) not in ACTS or not tensor_args(prod):
        return None
    inner_scales = list(scales)
    x = strip(tensor_args(prod)[0], inner_scales)
    bias = None
    if op(x) == "add" and len(tensor_args(x)) == 2:
        a, b = tensor_args(x)
        if not r.roots(b) and r.roots(a):
            bias, x = b, strip(a, inner_scales)
        elif not r.roots(a) and r.roots(b):
            bias, x = a, strip(b, inner_scales)
        else:
            return None
    got = matmul_score(r, x, inner_scales) if op(x) == "matmul" else None
    if got is None or got[0] not in ("general", "biased_general"):
        return None
    plus = f" plus the learned bias `{bias.name}`" if bias is not None else ""
    return ("activated_general", f"`{prod.name}` is {op(prod)} of a general score{plus} "
            f"(act(k^T W q + b)): {got[1]}", got[2], got[3])
