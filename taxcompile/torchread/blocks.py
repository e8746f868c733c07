"""Blocked local attention (lucidrains' `local-attention`, Longformer-style chunking): the
sequence is cut into blocks and each block's queries are scored against the keys of a
window of neighbouring blocks, gathered by padding the block axis and unfolding it
(`look_around`). No mask need say so: the softmax runs over every key it is given, and
those are only the nearby ones, so the alignment is Local (eq. 29's window), not Global."""
from __future__ import annotations

from .axes import Split, follow
from .normalise import op, shape, tensor_args

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


def chunks(norm, values=None):
    """(view, blocks, size) where the weights' axis before the queries and their keys' axis,
    followed back, are the outer and inner parts of one view cutting a sequence (not the
    features) into blocks, so each block's queries see its own keys alone; with ``values``,
    their positions cut into blocks of the same size too. None otherwise."""
    s, start = shape(norm), (tensor_args(norm) or [None])[0]
    if s is None or len(s) < 4 or start is None:
        return None
    outer, inner = follow(start, len(s) - 3, operand=1), follow(start, len(s) - 1)
    if not isinstance(outer, Split) or not isinstance(inner, Split) or \
            inner.view is not outer.view or inner.axis != outer.axis or outer.of_features \
            or (outer.part, inner.part) != (0, 1):
        return None
    if values is not None:
        sv = shape(values)
        v = follow(values, len(sv) - 2) if sv is not None and len(sv) >= 2 else None
        if not isinstance(v, Split) or v.of_features or v.part != 1 or v.size != inner.size:
            return None
    return outer.view, outer.size, inner.size


def reason(keys, values, norm=None) -> str | None:
    """Why an attention whose keys and values are both gathered by a sliding unfold of padded
    blocks, or cut into blocks of the sequence that each block's queries alone see, is local
    (its keys are the nearby or its own block's alone); None where they are not."""
    if keys is None or values is None:
        return None
    if norm is not None and (ch := chunks(norm, values)) is not None:
        view, n, size = ch
        return (f"`{view.name}` cuts the keys' sequence into {n} blocks of {size} positions "
                "(the values likewise): each query is scored against its own block's keys "
                "only")
    k, v = sliding_unfold(keys), sliding_unfold(values)
    if k is None or v is None:
        return None
    pad = next(x for x in tensor_args(k) if op(x) == "constant_pad_nd")
    return (f"`{k.name}` gathers each block's keys from a window of {k.args[2]} neighbouring "
            f"blocks (`{pad.name}` pads the block axis; the values by `{v.name}`): each query "
            "is scored against nearby keys only")
