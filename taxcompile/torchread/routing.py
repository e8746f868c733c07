"""Routing by agreement (Sabour et al. 2017; Li et al. 2019's aggregation of heads): a softmax
over coupling logits b that start at zero and grow by the agreement of the votes with the
output the previous coupling made, b <- b + u^T squash(sum softmax(b) u). Its weights combine
the heads' votes: no query meets a key, so it is no attention of Table III, and its matrices
must not be read as a score (the agreement u^T o looks like a product of two streams)."""
from __future__ import annotations

from .alignments import between
from .normalise import TRANSPARENT, norms_reading, op, strip, tensor_args

_NORMS = {"softmax", "log_softmax"}


def _logits(norm):
    args = tensor_args(norm)
    return strip(args[0]) if args else None


def _norms_of(logits, other) -> list:
    """The normalisations other than ``other`` whose input is ``logits`` through moves."""
    return norms_reading(logits, other, _NORMS, TRANSPARENT)


def _reads_plainly(r, m, g) -> bool:
    """Whether ``g`` reads the weights ``m`` through no learned parameter: the agreement
    with the output they made, not a later layer's learned maps (a residual attention's
    next score, RealFormer's, reads the previous weights through projections)."""
    path = between(m, g)
    if not path and m not in tensor_args(g):
        return False
    return not any(r.is_param(strip(a)) for n in [*path, g] for a in tensor_args(n))


def _update(r, add):
    """(earlier, agreement) where ``add`` is b + u^T o: a term that is the logits of another
    normalisation ``earlier``, the other reading its weights plainly; None otherwise."""
    terms = tensor_args(add)
    if op(add) != "add" or len(terms) != 2:
        return None
    for prev, g in (terms, terms[::-1]):
        for m in _norms_of(strip(prev), None):
            if _reads_plainly(r, m, g):
                return m, g
    return None


def step(r, norm) -> str | None:
    """Why ``norm`` is a step of routing by agreement, or None where it is not."""
    b = _logits(norm)
    if b is None:
        return None
    got = _update(r, b)
    if got is not None and got[0] is not norm:
        return _why(norm, got[0], b, got[1])
    for add in [u for x in [b, *_moves_from(b)] for u in x.users if op(u) == "add"]:
        got = _update(r, add)
        if got is not None and got[0] is norm and _norms_of(add, norm):
            return _why(_norms_of(add, norm)[0], norm, add, got[1])
    return None


def _moves_from(node) -> list:
    out, frontier = [], [node]
    while frontier and len(out) < 20:
        frontier = [u for n in frontier for u in n.users if op(u) in TRANSPARENT]
        out.extend(frontier)
    return out


def _why(later, earlier, add, agreement) -> str:
    return (f"routing by agreement, not an attention: `{add.name}` adds to the logits of "
            f"`{earlier.name}` the agreement `{agreement.name}` with the output its weights "
            f"made, and `{later.name}` normalises the sum (coupling coefficients over output "
            "capsules; no query meets a key)")
