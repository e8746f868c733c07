"""The recognisers, keyed by the mechanism registry's names (taxcompile/mechanisms): each says
how to find its mechanism in a normalised graph, as the record says how to emit it. What no
recogniser covers yet is listed in NOT_RECOGNISED with the reason, so tests/test_torchread.py
can hold the two tables to the registry."""
from __future__ import annotations

from . import alignments, coverage, heads, scores, talking
from .alignments import banded, lightconv_reason
from .found import Attention
from .normalise import TRANSPARENT, _unit, op, shape, strip, tensor_args
from .products import ACTS, matmul_score, ancestors, normalised, projection, weight  # noqa: F401

COMPARE = {"le", "lt", "ge", "gt"}

# Registry names (score and align records) no recogniser reads yet, with why.
NOT_RECOGNISED = {
    ("align", "crf"): "a CRF's marginals (forward-backward) are not matched yet",
    ("align", "lsh"): "LSH buckets (hash by random rotation, sort, chunk) are not matched yet",
}


def score_path(r, norm, start=None):
    """Back from the alignment's input (or ``start``) to the score's producer, through masks,
    biases and scalings: (producer, scales, masks, biases). A `topk` on the way is kept with
    the masks: it is the alignment."""
    x = start if start is not None else tensor_args(norm)[0]
    scales, masks, biases = [], [], []
    for _ in range(40):
        o, args = op(x), tensor_args(x)
        if o in TRANSPARENT and args:
            x = args[0]
        elif (mixed := talking.before(r, x, norm)) is not None:
            x = mixed  # a learned map mixes the heads' scores (talking heads)
        elif o == "topk" and args:
            masks.append(x)
            x = args[0]
        elif o in ("add", "sub") and len(args) == 1:
            biases.append(x)  # a constant bias (sigmoid attention's b = -log n)
            x = args[0]
        elif o == "sub" and len(args) == 2 and op(strip(args[1])) in ("max", "amax"):
            x = args[0]  # z - max(z): a shift for stability, no bias
        elif o in ("mul", "div") and len(args) == 1:
            if not _unit(x):
                scales.append(x)
            x = args[0]
        elif o == "where" and len(args) >= 2:
            masks.append(args[0])
            data = [a for a in args[1:] if r.roots(a)]
            if not data:
                break
            x = data[0]
        elif o == "add" and len(args) == 2 and any(alignments.noise(a) for a in args):
            x = next((a for a in args if not alignments.noise(a)), args[0])  # Gumbel noise
        elif o in ("add", "sub", "mul", "div") and len(args) == 2:
            a, b = args
            if not r.roots(b) or (r.roots(a) and op(strip(a)) in ("matmul", "linear", "sum")):
                (masks if _is_mask(b) else biases if o in ("add", "sub") else scales).append(b)
                x = a
            elif not r.roots(a):
                (masks if _is_mask(a) else biases).append(a)
                x = b
            else:
                break
        else:
            break
    return x, scales, masks, biases


def _is_mask(node) -> bool:
    return any(op(a) == "where" for a in [node, *ancestors(node, 3)]) or any(
        "inf" in str(a) for a in getattr(node, "args", ()))


# --- scores: each returns (registry name, reason, query operand, key operand) or None ---

def _additive_score(r, prod, scales, norm=None):
    """w^T act(W1 q + W2 k [+ b]) or w^T act(W [q; k]): a learned vector over an activation."""
    o, args = op(prod), tensor_args(prod)
    if o == "sum" and args and op(strip(args[0])) == "mul":
        args = tensor_args(strip(args[0]))
    elif o in ACTS and any(weight(s, r) for s in scales):
        args = [prod, *scales]  # d_w = 1: w act(.) is a product with one learned weight
    elif o not in ("matmul", "linear"):
        return None
    acts = [strip(a) for a in args if op(strip(a)) in ACTS]
    if not acts or not any(weight(a, r) for a in args):
        return None
    act = acts[0]
    inner = strip(tensor_args(act)[0])
    while op(inner) == "add" and any(weight(a, r) or coverage.term(r, a)
                                     for a in tensor_args(inner)):
        inner = strip(next(a for a in tensor_args(inner)
                           if not weight(a, r) and not coverage.term(r, a)))
    if op(inner) == "linear" and op(strip(tensor_args(inner)[1])) == "cat":
        inner = strip(tensor_args(inner)[1])
    if op(inner) == "matmul":
        ins = [a for a in tensor_args(inner) if not weight(a, r)]
        if ins and op(strip(ins[0])) == "cat":
            inner = strip(ins[0])
    if op(inner) == "cat":
        streams = [s for s in inner.args[0] if hasattr(s, "op")]
        return ("concat", f"`{prod.name}` applies a learned vector to `{act.target}` of a "
                f"learned map of the concatenation `{inner.name}` (w^T act(W[q; k]))",
                streams[0], streams[-1])
    if op(inner) == "add" and len(tensor_args(inner)) == 2:
        q, k = tensor_args(inner)
        return ("additive", f"`{prod.name}` applies a learned vector to `{op(act)}` of the sum "
                f"`{inner.name}` of two learned maps (w^T act(W1 q + W2 k))", q, k)
    return ("additive", f"`{prod.name}` applies a learned vector to `{op(act)}` of a learned "
            "map of the keys alone (w^T act(W k))", None, inner)


MATMUL_SCORES = {"multiplicative", "scaled_multiplicative", "general", "biased_general",
                 "activated_general", "similarity"}
def _location_score(r, prod, scales, norm=None):
    return scores.location(r, prod, norm) if norm is not None else None


def _affinity_score(r, prod, scales, norm=None):
    return scores.affinity(r, prod, scales, norm) if norm is not None else None


# Location first: its learned map gives one output per key, which no other score's does;
# then an affinity matrix that two attentions read, before the matmul that makes it.
SCORE_RECOGNISERS = {
    "location": _location_score, "affinity": _affinity_score, "max_pool": _affinity_score,
    "activated_general": lambda r, prod, scales, norm=None: scores.activated(r, prod, scales),
    "multiplicative": matmul_score, "scaled_multiplicative": matmul_score,
    "general": matmul_score, "biased_general": matmul_score,
    "similarity": matmul_score,
    "additive": _additive_score, "concat": _additive_score, "activated_concat": _additive_score,
}


# Alignment registry names read, and where.
ALIGN_RECOGNISERS = {
    "global": "read_align", "sigmoid": "read_align", "sigmoid_attn": "read_align",
    "topk": "read_align", "local": "read_align",
    "sparsemax": "alignments.sparse_norm", "entmax": "alignments.sparse_norm",
    "hard": "recognise.Reader.applied (a pick)", "reinforced": "alignments.policy", "lightconv": "read (a kernel parameter)",
}


def read_score(r, prod, scales, norm=None):
    for fn in dict.fromkeys(SCORE_RECOGNISERS.values()):
        got = fn(r, prod, scales, norm)
        if got:
            return got
    return None


# --- alignments: from the normalisation and the masks on its input ---

def _cond_ops(masks) -> set:
    return {op(a) for m in masks for a in [m, *ancestors(m, 8)]}


def read_align(r, norm, masks, score="", app=None):
    """(registry name, reason)."""
    ops = _cond_ops(masks)
    names = ", ".join(f"`{m.name}`" for m in masks)
    kept = [m for m in masks if op(m) == "topk"]
    if kept:
        return "topk", (f"`{kept[0].name}` keeps the k largest scores and `{norm.name}` runs "
                        "over them alone")
    if "topk" in ops:
        return "topk", f"keeps the top-k scores: the mask {names} is built from a `topk`"
    picked = alignments.policy(r, norm, masks)
    if picked is not None:
        return "reinforced", picked[1]
    cmps = [a for m in masks for a in [m, *ancestors(m, 8)] if op(a) in COMPARE]
    # a term read from a learned table by relative position (T5's buckets) is a bias, no window
    if "arange" in ops and ("abs" in ops or len(set(cmps)) >= 2) and "embedding" not in ops:
        return "local", f"a banded mask {names} (built from position indices) keeps a window"
    base = {"softmax": "softmax", "log_softmax": "log-softmax",
            "sigmoid": "sigmoid"}[op(norm)]
    name = "sigmoid" if op(norm) == "sigmoid" else "global"
    what = f"`{norm.name}` is a {base} over every key"
    if name == "sigmoid" and score in MATMUL_SCORES and app is not None and op(app) == "matmul":
        name = "sigmoid_attn"
        what = (f"`{norm.name}` is a sigmoid of every query-key score, not normalised over the "
                f"keys, and its weights multiply the values (`{app.name}`): sigmoid attention")
    if masks:
        what += f" (the mask {names} leaves out padding or future keys)"
    return name, what


def query_type(r, q, k):
    """(label, reason): where the query comes from, against the keys."""
    kr = r.roots(k) if k is not None else frozenset()
    if q is None:
        return "Self-Attentive", "there is no query: the keys are scored alone (eq. 33)"
    qr = r.roots(q)
    if not qr and any(r.is_param(a) for a in [q, *ancestors(q, 30)]):
        return "Self-Attentive", f"the query `{q.name}` is a learned parameter (eq. 34)"
    if not qr:
        return "Basic", (f"the query `{q.name}` reads no input: a recurrent state's start, "
                         "computed apart from the keys")
    if qr <= kr:
        return "Self-Attentive", (f"the query `{q.name}` and the keys `{k.name}` come from the "
                                  f"same input ({', '.join(sorted(kr))})")
    return "Basic", (f"the query `{q.name}` reads {', '.join(sorted(qr - kr))}, "
                     f"which the keys `{k.name}` do not")


def read(r, norm, app, values, a, start=None, align=None, diff=None) -> None:
    """Fill ``a`` (a found.Attention) with its values and reasons, or say why not. ``start``:
    the score's node where it is not the normalisation's input (sparsemax); ``align``: (name,
    reason) where the alignment was read on the way (sparse, hard); ``diff``: a difference
    of two maps between the weights and the values (differential attention)."""
    from .. import mechanisms

    prod, scales, masks, biases = score_path(r, norm, start)
    a.nodes = [norm.name, prod.name, app.name, *(m.name for m in masks)]
    got = read_score(r, prod, scales, norm)
    if got is None and r.is_param(prod) and op(norm) == "softmax" and banded(app):
        why, al_why = lightconv_reason(norm, prod, app)
        got, align = ("none", why, None, None), ("lightconv", al_why)
    if got is None:
        a.recognised = False
        a.why_not = (f"the score `{prod.name}` ({op(prod)}) before `{norm.name}` matches no "
                     "score pattern")
        return
    name, why, q, k = got[:4]
    reading = got[4] if len(got) > 4 else mechanisms.SCORES[name].reading
    if name == "location":
        k = values  # the keys the scores are positions of: the values weighed
    dim = tensor_args(norm)[1:] and norm.args[1]
    rank = len(shape(norm) or ()) or 2
    if op(prod) == "matmul" and isinstance(dim, int) and dim % rank == rank - 2:
        q, k = k, q  # weights normalised over the first operand's rows: it holds the keys
    if biases:
        why += f"; a position or bias term is added ({', '.join(f'`{b.name}`' for b in biases)})"
    al, al_why = align or read_align(r, norm, masks, name, app)
    gauss = alignments.gaussian(r, norm, app) if al in ("global", "local") else None
    if gauss is not None:
        al, al_why = "local", alignments.gaussian_reason(r, gauss, al_why if al == "local" else "")
    a.names = {"score": name, "align": al}
    a.query, a.keys, a.app, a.masks, a.weighed = q, k, app, masks, values
    v = a.values
    v["scoring"] = (reading, why)
    v["alignment"] = (mechanisms.ALIGNS[al].reading, al_why)
    v["query_type"] = query_type(r, q, k)
    multi = heads.read(norm, k, diff)
    if multi is None:
        a.recognised = False
        a.why_not = heads.refusal(norm, diff)
        return
    v["query_multiplicity"] = multi
    a.heads, a.kv_heads = heads.number(norm, k, diff)
    s = shape(norm) or ()
    if name == "none" and len(s) >= 2 and (s[0] or 1) > 1 and all(d == 1 for d in s[1:-1]):
        v["query_multiplicity"] = ("Multi-Head", f"`{norm.name}` normalises {s[0]} kernels, "
                                   "one per head")
    if op(app) == "mul" and (shape(norm) or (1,))[-1] not in (1,) and rank >= 3 \
            and shape(values) and shape(norm)[-1] == shape(values)[-1]:
        v["dimensionality"] = ("Multi-Dimensional", f"`{app.name}` weighs every feature of "
                               "each value (eq. 30-32)")
    else:
        v["dimensionality"] = ("Single-Dimensional", f"`{app.name}` gives one weight per value")


def read_sdpa(r, node):
    """An undecomposed scaled_dot_product_attention (torch.fx capture): scaled dot product,
    softmax."""
    q, k = tensor_args(node)[:2]
    a = Attention(node.name, node.name, nodes=[node.name])
    a.query, a.keys, a.weighed = q, k, (tensor_args(node)[2:3] or [None])[0]
    a.names = {"score": "scaled_multiplicative", "align": "global"}
    a.values["scoring"] = ("Scaled Multiplicative", f"`{node.name}` is scaled_dot_product_"
                           "attention: q^T k / sqrt(d)")
    a.values["alignment"] = ("Global", f"`{node.name}` takes a softmax over every key")
    a.values["query_type"] = query_type(r, q, k)
    sq = shape(q) or ()
    if len(sq) == 4 and (sq[1] or 1) > 1:
        a.heads = sq[1]
        a.values["query_multiplicity"] = ("Multi-Head", f"the queries `{q.name}` of "
                                          f"`{node.name}` hold {sq[1]} heads (shape {list(sq)})")
    else:
        a.values["query_multiplicity"] = ("Singular", f"the queries `{q.name}` of "
                                          f"`{node.name}` hold one head (shape {list(sq)})")
    a.values["dimensionality"] = ("Single-Dimensional", "one weight per value")
    return a
