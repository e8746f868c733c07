"""Alignments that are not a softmax over scores, found by their graph: sparsemax and 1.5-entmax
(sort the scores, find a threshold by a cumulative sum, clamp), hard (argmax or sampling, then a
one-hot or a gather of the values), a softmax over a kernel parameter spread over a band
of positions (a learned convolution's taps), Luong's local window (a Gaussian of the key positions around a
centre multiplying the weights) and reinforced (a policy's subset of keys masking the
scores)."""
from __future__ import annotations

import math

from . import blocks
from .normalise import TRANSPARENT, op, shape, strip, tensor_args, through_moves

CLAMPS = {"clamp", "clamp_min", "relu"}
# A pick of one key by its weights or scores: hard attention (eq. 26).
PICKS = {"argmax", "multinomial"}
# Ops between a pick and the values it selects: a one-hot built against positions, and the
# straight-through estimator's y_hard - detach(y_soft) + y_soft.
AFTER_PICK = {"eq", "one_hot", "scatter", "arange", "sub", "add"}
# Reads of rows of data by an index: the index says which rows, the rows are the data.
GATHERS = {"gather", "index_select", "index", "take_along_dim"}
_NOISE = {"exponential", "rand", "rand_like", "uniform", "randn", "randn_like"}


def _ancestor_ops(node, depth: int) -> set:
    seen, frontier = set(), [node]
    for _ in range(depth):
        frontier = [a for n in frontier for a in tensor_args(n) if a not in seen]
        seen.update(frontier)
    return {op(a) for a in seen}


# A threshold found by sorting the scores and a cumulative sum, the scores clamped at it
# (sparsemax), or their half clamped and squared (1.5-entmax): the patterns' names.
CLAMPED, SQUARED = "clamped_threshold", "squared_clamped_threshold"
WINDOWS = "unfolded_key_windows"  # keys cut into each query's window by `unfold`


def sparse_norm(node):
    """(pattern, score input) where ``node`` is sparsemax's output, clamp(z - tau, 0)
    (CLAMPED), or 1.5-entmax's, clamp(z / 2 - tau, 0)^2 (SQUARED), with tau found by sorting
    z and a cumulative sum (Martins & Astudillo 2016; Peters et al. 2019); None otherwise."""
    n, name = node, CLAMPED
    if op(n) == "pow" and len(n.args) > 1 and n.args[1] == 2 and tensor_args(n):
        n, name = tensor_args(n)[0], SQUARED
    elif any(op(u) == "pow" for u in n.users):
        return None  # the clamp inside 1.5-entmax: the pow after it is the output
    args = tensor_args(n)
    if op(n) not in CLAMPS or not args:
        return None
    if op(n) != "relu" and not (len(n.args) > 1 and n.args[1] == 0):
        return None
    d = args[0]
    if op(d) != "sub" or len(tensor_args(d)) != 2:
        return None
    z, tau = tensor_args(d)
    if not {"sort", "cumsum"} <= _ancestor_ops(tau, 12):
        return None
    return name, z


def sparse_reason(pattern: str, node) -> str:
    what = {CLAMPED: "sparsemax: the sorted scores' cumulative sum sets a threshold, "
                     "clamp(z - tau, 0)",
            SQUARED: "1.5-entmax: the sorted scores' cumulative sums set a threshold, "
                     "clamp(z / 2 - tau, 0)^2"}[pattern]
    return f"`{node.name}` is {what}; keys below it weigh exactly zero"


def is_pick(node) -> bool:
    """argmax, a sample, or a max whose indices are used (F.gumbel_softmax(hard=True))."""
    return op(node) in PICKS or (op(node) == "max" and len(node.args) > 1 and any(
        op(u) == "getitem" and u.args[1] == 1 for u in node.users))


def noise(node) -> bool:
    """Whether ``node`` is random noise computed apart from the data (Gumbel's -log(-log u))."""
    return bool(_NOISE & (_ancestor_ops(node, 6) | {op(node)}))


def picked_by_norm(node, norms) -> bool:
    """A pick whose input is a normalisation's output: that normalisation is the attention."""
    args = tensor_args(node)
    return bool(args) and op(strip(args[0])) in norms


def banded(app) -> bool:
    """Weights applied as a convolution's kernel, to windows of the values (``unfold``), or
    spread over positions by an index."""
    return op(app) == "convolution" or bool({"index", "unfold"} & _ancestor_ops(app, 8))


def windows(node) -> bool:
    """Whether ``node`` is sliding windows of a sequence (``unfold``) through moves: the
    operand a kernel's taps multiply in a convolution written as a product."""
    return through_moves(node, lambda n: op(n) == "unfold")


def kernel_reason(norm, prod, app, title: str, reading: str) -> tuple[str, str]:
    """(score reason, alignment reason) of a softmax over a learned kernel, spread over a
    band of positions: ``title``, the mechanism's name, reads as ``reading``."""
    return (f"`{norm.name}` normalises the learned kernel `{prod.name}`: the weights are its "
            "own, no query meets a key",
            f"the kernel's weights are spread over a band of positions around each query "
            f"(`{app.name}` applies them{_to_windows(app)}): {title}, {reading.lower()} by "
            "construction")


def _to_windows(app) -> str:
    cut = [a for a in tensor_args(app) if windows(a)]
    return f" to the windows `{cut[0].name}` cut by `unfold`" if cut else ""


def windowed(pattern: str | None, why: str, norm, keys, values) -> tuple[str | None, str]:
    """A softmax over each query's window of keys cut by ``unfold`` (local self-attention
    written with sliding windows) is WINDOWS however its mask reads: the keys outside the
    window are never scored."""
    if pattern != "softmax_over_scores":
        return pattern, why
    if (blocked := blocks.reason(keys, values, norm)) is not None:
        return WINDOWS, blocked
    if keys is None or not windows(keys):  # windows of the values alone score every key
        return pattern, why
    return WINDOWS, (f"`{norm.name}` runs over a window of keys `{keys.name}` cut from the "
                     "sequence by `unfold` around each query: the keys outside it are not scored")


def between(src, dst, depth: int = 40) -> list:
    """The nodes on the paths from ``src`` to ``dst`` (both left out), in graph order."""
    up, frontier = set(), [dst]
    for _ in range(depth):
        frontier = [a for n in frontier for a in tensor_args(n) if a not in up]
        up.update(frontier)
    out, frontier = {}, [src]
    while frontier:
        frontier = [u for n in frontier for u in n.users if u in up and u not in out]
        out.update(dict.fromkeys(frontier))
    return list(out)


def _centre(g):
    """The centre p of a Gaussian exp(-(s - p)^2 / 2 sigma^2) over key positions s: the
    other operand of a subtraction that has an `arange` on one side; None where there is
    none."""
    for n in [g, *_ancestor_list(g, 10)]:
        args = tensor_args(n)
        if op(n) != "sub" or len(args) != 2:
            continue
        for s, p in (args, args[::-1]):
            if "arange" in {op(x) for x in [s, *_ancestor_list(s, 3)]}:
                while op(p) in TRANSPARENT and tensor_args(p):
                    p = tensor_args(p)[0]  # moves only: S sigmoid(...) keeps its S
                return p
    return None


def _ancestor_list(node, depth: int) -> list:
    seen, frontier = [], [node]
    for _ in range(depth):
        frontier = [a for n in frontier for a in tensor_args(n) if a not in seen]
        seen.extend(frontier)
    return seen


def gaussian(r, norm, app):
    """(the product, the Gaussian, its centre) where the weights are multiplied, on their way
    to the values, by exp(-(s - p)^2 / 2 sigma^2) of the key positions s (Luong et al.'s
    local alignment, eq. 29); None otherwise."""
    for m in between(norm, app, 20):
        args = tensor_args(m)
        if op(m) != "mul" or len(args) != 2:
            continue
        g = next((a for a in args if norm not in _ancestor_list(a, 12) and a is not norm),
                 None)
        if g is None or not {"exp", "arange"} <= _ancestor_ops(g, 10) | {op(g)}:
            continue
        p = _centre(g)
        if p is not None:
            return m, g, p
    return None


def gaussian_reason(r, found, window: str) -> str:
    """Why a Gaussian over positions makes the alignment local, and how its centre is set."""
    m, g, p = found
    ops = _ancestor_ops(p, 8) | {op(p)}
    if r.roots(p) and "sigmoid" in ops:
        where = (f"a centre `{p.name}` predicted from the query, S sigmoid(v^T tanh(W h_t)) "
                 "(eq. 28)")
    elif not r.roots(p) and "arange" in ops:
        where = f"a centre `{p.name}` at the query's own position (p_t = t, eq. 27)"
    else:
        where = f"a centre `{p.name}`"
    out = (f"`{m.name}` multiplies the weights by a Gaussian `{g.name}` of the key positions "
           f"around {where}, exp(-(s - p_t)^2 / 2 sigma^2) (eq. 29)")
    return f"{window}; {out}" if window else out


# A Bernoulli draw as ATen writes it: uniform noise compared with the probabilities.
_UNIFORM = {"rand", "rand_like", "uniform"}


def _drawn(r, n) -> bool:
    """uniform noise < p with p read from the data (a policy), not a constant (key dropout)."""
    args = tensor_args(n)
    return op(n) in ("lt", "gt") and len(args) == 2 and any(
        op(a) in _UNIFORM and r.roots(b) for a, b in (args, args[::-1]))


def _fewer(a, b) -> bool:
    sa, sb = shape(a), shape(b)
    if not sa or not sb or not all(isinstance(d, int) for d in (*sa, *sb)):
        return False
    return math.prod(sa) < math.prod(sb)


def policy(r, norm, masks):
    """(node, reason) where a mask on the scores is a subset of keys picked by a policy: a
    `bernoulli` sample (the agent's action while training), or a threshold of a sigmoid of a
    learned map of the keys (its greedy action at test time, pi_l > 0.5) with fewer values
    than the weights (one per key, not one per query and key: a threshold of the scores
    themselves is no policy); None otherwise."""
    from .products import projection

    for m in masks:
        nodes = [m, *_ancestor_list(m, 8)]
        drawn = next((n for n in nodes if op(n) == "bernoulli" or _drawn(r, n)), None)
        if drawn is not None:
            return drawn, (f"`{drawn.name}` samples which keys to keep (a Bernoulli draw of a "
                           f"policy over the keys, `bernoulli` or uniform noise below it) and the mask `{m.name}` keeps them alone: "
                           "soft alignment over a subset an agent selects")
        for c in nodes:
            if op(c) not in ("gt", "ge") or not tensor_args(c):
                continue
            pi = strip(tensor_args(c)[0])
            inner = tensor_args(pi)[:1]
            if op(pi) == "sigmoid" and r.roots(pi) and inner and _fewer(pi, norm) and any(
                    projection(x, r) for x in [inner[0], *_ancestor_list(inner[0], 4)]):
                return c, (f"`{c.name}` keeps the keys whose policy `{pi.name}` (a sigmoid of a "
                           f"learned map of each key) passes {c.args[1]} and the mask "
                           f"`{m.name}` keeps them alone: soft alignment over a subset an agent "
                           "selects (its greedy choice; a Bernoulli draw while training)")
    return None
