"""Attention whose weights are the model's output (Vinyals et al. 2015's pointer network:
p(C_i | ...) = softmax(u^i), u^i_j = v^T tanh(W1 e_j + W2 d_i)): no values are weighed, the
weights over the input positions are the answer.

A normalisation that reaches the graph's output through moves alone is read so only where
its score is a recognised query-key score whose query and keys both read the model's inputs
(the positions it points at are data): a classifier's softmax over a learned map of one
stream (its classes are a parameter's rows) stays no attention."""
from __future__ import annotations

from .found import Attention
from .normalise import TRANSPARENT, op, tensor_args

_DEPTH = 12


def output_of(norm):
    """The last node before the graph's output that ``norm``'s weights reach through moves
    alone, or combined over their queries (``combined``); None where they are used
    otherwise."""
    n = norm
    for _ in range(_DEPTH):
        users = list(n.users)
        if any(u.op == "output" for u in users):
            return n
        if len(users) != 1 or not (op(users[0]) in TRANSPARENT or combined(users[0], n)):
            return None
        n = users[0]
    return None


def combined(node, w) -> bool:
    """Whether ``node`` combines weights ``w`` (..., Lq, Lk) over their queries and keeps
    them weights over the keys: x @ w, a matmul whose rows of w (one per query) are summed
    with the weights x (Cui et al.'s s = alpha^T beta-bar, attention over attention)."""
    args = tensor_args(node)
    return op(node) == "matmul" and len(args) == 2 and args[1] is w and args[0] is not w


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
    mixes = [n.name for n in _path(norm, out) if op(n) == "matmul"]
    if mixes:
        what = "a distribution over them"
    how = f", combined over the queries by `{'`, `'.join(mixes)}`," if mixes else ""
    a.values["dimensionality"] = (
        "Single-Dimensional", f"the weights `{norm.name}`{how} are the model's output "
        f"`{out.name}`: one weight per input position, {what}, no values weighed")
    a.weighed = None
    return a


def _path(norm, out) -> list:
    """The nodes from ``norm`` to ``out`` (each the one user of the one before)."""
    path, n = [], norm
    while n is not out and len(n.users) == 1:
        n = next(iter(n.users))
        path.append(n)
    return path
