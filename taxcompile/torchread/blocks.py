"""Blocked local attention (lucidrains' `local-attention`, Longformer-style chunking): the
sequence is cut into blocks and each block's queries are scored against the keys of a
window of neighbouring blocks, gathered by padding the block axis and unfolding it
(`look_around`). No mask need say so: the softmax runs over every key it is given, and
those are only the nearby ones, so the alignment is Local (eq. 29's window), not Global."""
from __future__ import annotations

from .normalise import op, tensor_args

DEPTH = 14  # ops between the keys at the score and the unfold (moves, rotary embeddings)


def sliding_unfold(node):
    """An `unfold` over a padded tensor, window of 2 or more with step 1, among ``node``'s
    ancestors within DEPTH ops; None if there is none."""
    seen, frontier = set(), [node]
    for _ in range(DEPTH):
        nxt = []
        for n in frontier:
            if op(n) == "unfold" and len(n.args) >= 4 and isinstance(n.args[2], int) \
                    and n.args[2] >= 2 and n.args[3] == 1 \
                    and any(op(x) == "constant_pad_nd" for x in tensor_args(n)):
                return n
            for x in tensor_args(n):
                if x not in seen:
                    seen.add(x)
                    nxt.append(x)
        frontier = nxt
    return None


def reason(keys, values) -> str | None:
    """Why an attention whose keys and values are both gathered by a sliding unfold of padded
    blocks is local (its keys are the nearby blocks' alone); None where they are not."""
    if keys is None or values is None:
        return None
    k, v = sliding_unfold(keys), sliding_unfold(values)
    if k is None or v is None:
        return None
    pad = next(x for x in tensor_args(k) if op(x) == "constant_pad_nd")
    return (f"`{k.name}` gathers each block's keys from a window of {k.args[2]} neighbouring "
            f"blocks (`{pad.name}` pads the block axis; the values by `{v.name}`): each query "
            "is scored against nearby keys only")
