"""Attention whose weights are the model's output (Vinyals et al. 2015's pointer network:
p(C_i | ...) = softmax(u^i), u^i_j = v^T tanh(W1 e_j + W2 d_i)): no values are weighed, the
weights over the input positions are the answer.

A normalisation that reaches the graph's output through moves alone is read so only where
its score is a recognised query-key score whose query and keys both read the model's inputs
(the positions it points at are data): a classifier's softmax over a learned map of one
stream (its classes are a parameter's rows) stays no attention."""
from __future__ import annotations

from .found import Attention
from .normalise import TRANSPARENT, op

_DEPTH = 12


def output_of(norm):
    """The last node before the graph's output that ``norm``'s weights reach through moves
    alone; None where they are used otherwise."""
    n = norm
    for _ in range(_DEPTH):
        users = list(n.users)
        if any(u.op == "output" for u in users):
            return n
        moves = [u for u in users if op(u) in TRANSPARENT]
        if len(moves) != 1 or len(users) != 1:
            return None
        n = moves[0]
    return None


def read(r, norm, out, patterns):
    """The attention whose weights ``norm`` gives as the output ``out``, read by
    ``patterns``; None where its score is not one between data queries and keys."""
    prod, scales, _, _ = patterns.score_path(r, norm)
    found = patterns.read_score(r, prod, scales, norm)  # (pattern, (name, why, q, k, …))
    if found is None or any(x is None or not r.roots(x) for x in found[1][2:4]):
        return None
    a = Attention(norm.name, out.name)
    patterns.read(r, norm, out, None, a)
    if not a.recognised:
        return None
    what = ("a distribution that points at one (a pointer network)" if op(norm) != "sigmoid"
            else "each a gate of its own, not normalised over the positions")
    a.values["dimensionality"] = (
        "Single-Dimensional", f"the weights `{norm.name}` are the model's output `{out.name}`: "
        f"one weight per input position, {what}, no values weighed")
    a.weighed = None
    return a
