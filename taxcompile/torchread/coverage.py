"""Coverage in a score (See et al. 2017, eq. 11): e_i^t = v^T tanh(W_h h_i + W_s s_t + w_c c_i^t
+ b), where c^t = sum_{t' < t} a^{t'} sums the weights of the attention's earlier steps (zero
at the first). The term w_c c is no query nor key: the additive score's reader looks past it
to the query and key maps."""
from __future__ import annotations

from .normalise import TRANSPARENT, op, strip, tensor_args
from .products import ancestors

NORMS = {"softmax", "log_softmax", "sigmoid"}
# What a running sum of earlier weights is built from: zeros, sums, pads, slices, moves.
_SUMS = TRANSPARENT | {"add", "cat", "constant_pad_nd", "full", "zeros", "full_like",
                       "zeros_like", "scalar_tensor"}
_DEPTH = 40


def term(r, node) -> bool:
    """Whether ``node`` is w_c * c with a learned w_c and c a sum of earlier normalisations'
    weights (or their zero start)."""
    n = strip(node)
    args = tensor_args(n)
    if op(n) != "mul" or len(args) != 2:
        return False
    for w, c in (args, args[::-1]):
        if r.is_param(strip(w)) and _running_sum(c):
            r.covered.setdefault(n, strip(w))
            return True
    return False


def note(r, score, a) -> None:
    """Name the coverage terms added inside the score ``score`` of the attention ``a``."""
    if not a.recognised or "scoring" not in a.values:
        return
    near = set(ancestors(score, 12))
    terms = [(n, w) for n, w in r.covered.items() if n in near]
    if terms:
        label, why = a.values["scoring"]
        said = ", ".join(f"`{n.name}` (`{w.name}` times the sum of earlier weights)"
                         for n, w in terms)
        a.values["scoring"] = (label, f"{why}; a coverage term is added inside it, {said}: "
                               "w_c c_i, c = the earlier steps' weights summed (See et al. "
                               "eq. 11), no query nor key")


def _running_sum(node) -> bool:
    frontier, seen = [node], set()
    for _ in range(_DEPTH):
        nxt = []
        for n in frontier:
            if n in seen or op(n) in NORMS:
                continue
            seen.add(n)
            if op(n) not in _SUMS:
                return False
            nxt.extend(tensor_args(n))
        if not nxt:
            return True
        frontier = nxt
    return False
