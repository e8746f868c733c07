"""The graph patterns that give an attention's score and alignment, by name, and the
reading of one attention with them. A pattern is named after a graph shape ("matmul_product",
"sigmoid_over_scores_times_values"), not after a mechanism: each record of the registry
(taxcompile/mechanisms) names the patterns that find it (``recognised_by``), as it names the
template that emits it, and the reader goes from a matched pattern to the record that names
it (``records``). A record that names no pattern is not recognised; ``catalogue`` lists
every pattern, and tests/test_recognisers_records.py compiles each record's own generated
code and reads that record back."""
from __future__ import annotations

from .. import mechanisms
from . import (alignments, coverage, heads, inplace, lse, lsh, lsh_chunks, records, routing,
               scores, talking)
from .alignments import banded, kernel_reason
from .found import Attention
from .axes import follow
from .normalise import TRANSPARENT, _unit, op, shape, strip, tensor_args
from .products import ACTS, matmul_score, ancestors, normalised, paired, projection, weight  # noqa: F401

COMPARE = {"le", "lt", "ge", "gt"}
# Patterns found outside the score and alignment tables below: the fused call, a softmax
# over a learned kernel spread over positions (its weights are its own: the pattern gives
# both the score's record and the alignment's), a pick of one key, a Gaussian of the key
# positions multiplying the weights, a difference of two softmax maps before the values.
FUSED, KERNEL, PICK = "fused_sdpa", "softmaxed_kernel_spread", "pick_of_weights"
GAUSSIAN, DIFFERENCE = "gaussian_of_key_positions", "difference_of_softmax_maps"


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
            biases.append(x)  # a constant bias (b = -log n before a sigmoid)
            x = args[0]
        elif o in ("clamp", "clamp_min") and len(args) == 1 and start is not None:
            x = args[0]  # scores clamped below a bound before a threshold (sparsemax's)
        elif o == "sub" and len(args) == 2 and op(_unclamped(args[1])) in ("max", "amax"):
            x = args[0]  # z - max(z): a shift for stability, no bias
        elif o == "sub" and len(args) == 2 and lsh_chunks.counted(r, args[1]):
            x = args[0]  # e - log n: LSH's key met in n rounds, counted once over them
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


def _unclamped(node):
    """``node`` before a clamp to a constant bound (max(z) kept finite) and moves."""
    n = strip(node)
    while op(n) in ("clamp", "clamp_min") and len(tensor_args(n)) == 1:
        n = strip(tensor_args(n)[0])
    return n


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
    if op(inner) == "cat" and paired(inner):
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


def _location_score(r, prod, scales, norm=None):
    return scores.location(r, prod, norm) if norm is not None else None


def _affinity_score(r, prod, scales, norm=None):
    return scores.affinity(r, prod, scales, norm) if norm is not None else None


def _activated_score(r, prod, scales, norm=None):
    return scores.activated(r, prod, scales)


# Score patterns, tried in this order: a learned map with one output per key first (no
# other score's has one), then an affinity matrix that two attentions read, before the
# matmul that makes it. Each returns (registry name, reason, query, keys[, reading]): one
# pattern tells apart the forms of the records that name it (a matmul's: scaled, through a
# learned map, of normalised operands), and gives only those.
SCORE_PATTERNS = {
    "per_key_map": _location_score, "affinity_matrix": _affinity_score,
    "activated_product": _activated_score, "matmul_product": matmul_score,
    "learned_vector_over_activation": _additive_score,
}
# The score patterns of a product of queries and keys (what a sigmoid over scores needs to
# weigh the values as attention rather than gate them)
PRODUCTS = ("matmul_product", "activated_product")


def read_score(r, prod, scales, norm=None):
    """(pattern, (registry name, reason, q, k[, reading])) of the first score pattern that
    matches and gives a record that names it; None where none does."""
    wanted = records.named()
    for pattern, fn in SCORE_PATTERNS.items():
        got = fn(r, prod, scales, norm) if pattern in wanted else None
        if got and records.gives("score", got[0], pattern):
            return pattern, got
    return None


# --- alignments: from the normalisation and the masks on its input ---

def _cond_ops(masks) -> set:
    return {op(a) for m in masks for a in [m, *ancestors(m, 8)]}


def _topk(r, norm, masks, scored, app):
    kept = [m for m in masks if op(m) == "topk"]
    if kept:
        return (f"`{kept[0].name}` keeps the k largest scores and `{norm.name}` runs over "
                "them alone")
    if "topk" in _cond_ops(masks):
        return f"keeps the top-k scores: the mask {_names(masks)} is built from a `topk`"
    return None


def _hashed(r, norm, masks, scored, app):
    got = lsh.bucket_mask(r, masks)
    return lsh.reason(r, got) if got is not None else None


def _hash_sorted(r, norm, masks, scored, app):
    return lsh_chunks.read(r, norm, masks, app)


def _policy(r, norm, masks, scored, app):
    picked = alignments.policy(r, norm, masks)
    return picked[1] if picked is not None else None


def _band(r, norm, masks, scored, app):
    ops = _cond_ops(masks)
    cmps = [a for m in masks for a in [m, *ancestors(m, 8)] if op(a) in COMPARE]
    # a term read from a learned table by relative position (T5's buckets) is a bias, no window
    if "arange" in ops and ("abs" in ops or len(set(cmps)) >= 2) and "embedding" not in ops:
        return f"a banded mask {_names(masks)} (built from position indices) keeps a window"
    return None


def _over_every_key(what: str, masks) -> str:
    if masks:
        what += f" (the mask {_names(masks)} leaves out padding or future keys)"
    return what


def _sigmoid_weights(r, norm, masks, scored, app):
    if op(norm) != "sigmoid" or scored not in PRODUCTS or app is None or op(app) != "matmul":
        return None
    rec = records.one("align", "sigmoid_over_scores_times_values")
    return _over_every_key(f"`{norm.name}` is a sigmoid of every query-key score, not "
                           "normalised over the keys, and its weights multiply the values "
                           f"(`{app.name}`): {records.title(rec)}", masks)


def _sigmoid_gate(r, norm, masks, scored, app):
    if op(norm) != "sigmoid":
        return None
    return _over_every_key(f"`{norm.name}` is a sigmoid over every key", masks)


def _softmax(r, norm, masks, scored, app):
    base = {"softmax": "softmax", "log_softmax": "log-softmax"}.get(op(norm))
    if base is None and lse.softmax_of(norm) is not None:
        base = "softmax, exp(e - logsumexp e),"
    return _over_every_key(f"`{norm.name}` is a {base} over every key", masks) if base else None


# Alignment patterns over a normalisation of scores and the masks on its input, tried in
# this order; each returns the reason, or None where it does not match.
ALIGN_PATTERNS = {
    "topk_of_scores": _topk, lsh_chunks.PATTERN: _hash_sorted, lsh.PATTERN: _hashed,
    "policy_mask": _policy,
    "banded_position_mask": _band,
    "sigmoid_over_scores_times_values": _sigmoid_weights, "sigmoid_per_key": _sigmoid_gate,
    "softmax_over_scores": _softmax,
}


def _names(masks) -> str:
    return ", ".join(f"`{m.name}`" for m in masks)


def read_align(r, norm, masks, scored="", app=None):
    """(pattern, reason) of the first alignment pattern that matches and that a record
    names; None where none does. ``scored``: the score's pattern."""
    wanted = records.named()
    for pattern, fn in ALIGN_PATTERNS.items():
        why = fn(r, norm, masks, scored, app) if pattern in wanted else None
        if why:
            return pattern, why
    return None


def _keys_first(norm, prod, q, k) -> bool:
    """Whether a score reader's query is in fact the keys: the axis the weights are normalised
    over, followed back to the product (through transposes after it), is a row axis of the
    operand the query was read from and not of the one the keys were. A reader that oriented
    its streams itself (an affinity's columns) passes: its keys are that operand's already."""
    dim = norm.args[1] if len(norm.args) > 1 and isinstance(norm.args[1], int) else None
    args, sp, sn = tensor_args(prod), shape(prod) or (), shape(norm) or ()
    if op(prod) != "matmul" or dim is None or q is None or k is None or len(args) < 2 \
            or not sn:
        return False
    at = follow(tensor_args(norm)[0], dim % len(sn), target=prod)
    if at is None and len(sp) == len(sn):
        at = dim % len(sn)  # not followed (a reshape on the way): where it is in the weights
    side = {len(sp) - 2: args[0], len(sp) - 1: args[1]}.get(at)
    if side is None:
        return False
    up = [side, *ancestors(side, 40)]
    return any(x is q for x in up) and not any(x is k for x in up)


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
    the score's node where it is not the normalisation's input (sparsemax); ``align``:
    (pattern, reason) where the alignment was read on the way (sparse, a pick); ``diff``: a
    difference of two maps between the weights and the values (DIFFERENCE)."""
    prod, scales, masks, biases = score_path(r, norm, start)
    a.nodes = [norm.name, prod.name, app.name, *(m.name for m in masks)]
    if (why := routing.step(r, norm)) is not None:
        a.recognised, a.why_not = False, why
        return
    found = read_score(r, prod, scales, norm)
    kernel = records.one("align", KERNEL), records.one("score", KERNEL)
    if found is None and all(kernel) and r.is_param(prod) and op(norm) == "softmax" \
            and banded(app):
        why, al_why = kernel_reason(norm, prod, app, records.title(kernel[0]),
                                    kernel[0].reading)
        found, align = (KERNEL, (kernel[1].name, why, None, None)), (KERNEL, al_why)
    if found is None:
        a.recognised = False
        a.why_not = (f"the score `{prod.name}` ({op(prod)}) before `{norm.name}` matches no "
                     "score pattern")
        return
    scored, got = found
    name, why, q, k = got[:4]
    score = mechanisms.REGISTRY[("score", name)]
    reading = got[4] if len(got) > 4 else score.reading
    if score.per_key:
        k = values  # the keys the scores are positions of: the values weighed
    if _keys_first(norm, prod, q, k):
        q, k = k, q  # the weights run over the rows of the operand the query came from
    if inplace.swapped(r, app, values, q, k):
        q, k = k, q  # weights applied in place to the first stream's input: it holds the keys
    if biases:
        why += f"; a position or bias term is added ({', '.join(f'`{b.name}`' for b in biases)})"
    pattern, al_why = align or read_align(r, norm, masks, scored, app) or (None, "")
    if pattern != lsh_chunks.PATTERN and (unread := lsh_chunks.unread(r, norm)) is not None:
        a.recognised, a.why_not = False, unread  # chunks of a sorted order that is no LSH's
        return
    pattern, al_why = alignments.windowed(pattern, al_why, norm, k, values)
    gauss = alignments.gaussian(r, norm, app) \
        if pattern in ("softmax_over_scores", "banded_position_mask", alignments.WINDOWS) \
        else None
    if gauss is not None and records.one("align", GAUSSIAN) is not None:
        window = al_why if pattern != "softmax_over_scores" else ""
        pattern, al_why = GAUSSIAN, alignments.gaussian_reason(r, gauss, window)
    al = records.one("align", pattern) if pattern else None
    if al is None:
        a.recognised = False
        a.why_not = f"the weights `{norm.name}` ({op(norm)}) match no alignment pattern"
        return
    a.names = {"score": name, "align": al.name}
    a.query, a.keys, a.app, a.masks, a.weighed = q, k, app, masks, values
    v = a.values
    v["scoring"] = (reading, why)
    v["alignment"] = (al.reading, al_why)
    v["query_type"] = query_type(r, q, k)
    if pattern == lsh_chunks.PATTERN:
        _sorted_heads(r, k, a)  # the weights hold rounds and chunks: heads read from the keys
    else:
        _heads(norm, k, diff, a, r.is_param)
    if not a.recognised:
        return
    s = shape(norm) or ()
    if "no_score" in score.caps and len(s) >= 2 and (s[0] or 1) > 1 \
            and all(d == 1 for d in s[1:-1]):
        v["query_multiplicity"] = ("Multi-Head", f"`{norm.name}` normalises {s[0]} kernels, "
                                   "one per head")
    if op(app) == "mul" and (shape(norm) or (1,))[-1] not in (1,) and len(s) >= 3 \
            and shape(values) and shape(norm)[-1] == shape(values)[-1]:
        v["dimensionality"] = ("Multi-Dimensional", f"`{app.name}` weighs every feature of "
                               "each value (eq. 30-32)")
    else:
        v["dimensionality"] = ("Single-Dimensional", f"`{app.name}` gives one weight per value")


def _heads(norm, k, diff, a, is_param=None) -> None:
    """Query multiplicity and the heads, with the record a difference of two maps of one
    normalisation gives (its name under the record's kind in ``a.names``; two
    normalisations subtracted are each read as an attention), or why the heads are not
    read."""
    rec = records.one("trait", DIFFERENCE) if diff is not None else None
    if diff is not None and rec is None:
        a.recognised = False
        a.why_not = f"`{diff.name}` subtracts maps of `{norm.name}`, which no pattern reads"
        return
    what = records.title(rec) if rec is not None else ""
    multi, counted = heads.read(norm, k, diff, what, is_param)
    if multi is None:
        a.recognised, a.why_not = False, counted
        return
    if rec is not None and (heads.maps_per_head(norm, diff) or 1) > 1:
        a.names[rec.kind] = rec.name  # two maps of one normalisation; apart, each is read
    a.values["query_multiplicity"] = multi
    a.heads, a.kv_heads = counted


def _sorted_heads(r, k, a) -> None:
    h, why = lsh_chunks.heads(r, k)
    if h is None:
        a.recognised, a.why_not = False, why
        return
    a.values["query_multiplicity"] = ("Multi-Head" if h > 1 else "Singular", why)
    a.heads, a.kv_heads = h, None


def read_sdpa(r, node):
    """An undecomposed scaled_dot_product_attention (torch.fx capture): scaled dot product,
    softmax."""
    q, k = tensor_args(node)[:2]
    a = Attention(node.name, node.name, nodes=[node.name])
    a.query, a.keys, a.weighed = q, k, (tensor_args(node)[2:3] or [None])[0]
    score, al = records.one("score", FUSED), records.one("align", FUSED)
    if score is None or al is None:
        a.recognised = False
        a.why_not = f"`{node.name}` is scaled_dot_product_attention, which no pattern reads"
        return a
    a.names = {"score": score.name, "align": al.name}
    a.values["scoring"] = (score.reading, f"`{node.name}` is scaled_dot_product_attention: "
                           "q^T k / sqrt(d)")
    a.values["alignment"] = (al.reading, f"`{node.name}` takes a softmax over every key")
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
