"""Query multiplicity read from the weights' shape and the keys: heads as the weights hold
them (B, H, Lq, Lk) or folded into the batch (nn.MultiheadAttention), keys shared between
query heads (grouped / multi-query), and a difference of maps, where one normalisation
holds two maps per head that are subtracted before they weigh the values (the mechanism
that gives it is named by the caller, from its record)."""
from __future__ import annotations

import math

from .blocks import sliding_unfold
from .axes import Origin, Split, follow, sized
from .normalise import TRANSPARENT, op, shape, tensor_args

# Ops between a normalisation and one operand of a difference of its maps: moves, slices,
# a mask zeroing empty rows, a scaling by lambda.
_TO_DIFF = TRANSPARENT | {"mul", "div", "where"}


def read(norm, keys, diff=None, what: str = "", is_param=None):
    """((label, reason) of query multiplicity, (query heads, key/value heads or None where
    each query head has its own)); or (None, why) where the heads are not read: refused
    rather than guessed (``diff``, a difference of two maps before the values whose maps are
    not paired up; ``what``: the mechanism's name). ``is_param``: the reader's, to tell a
    learned map's weight."""
    h, why = _maps(norm, keys, is_param)
    if h is None:
        return None, why
    if diff is not None:
        per = _maps_per_head(norm, diff)
        if per is None or h % per:
            return None, (f"`{diff.name}` subtracts maps of `{norm.name}` ({what}), but how "
                          f"its weights of shape {list(shape(norm) or [])} divide into heads "
                          "of two maps is not read from the graph: the number of heads would "
                          "be a guess")
        if per > 1:
            h //= per
            why = (f"`{norm.name}` holds {h * per} maps (weights of shape "
                   f"{list(shape(norm) or [])}) and `{diff.name}` subtracts each head's second "
                   f"map from its first ({what}, A1 - lambda A2): {h} "
                   f"head{'s' if h > 1 else ''} of {per} maps")
        else:
            why += (f"; `{diff.name}` subtracts another normalisation's map from these "
                    f"({what}): each map is read as an attention")
    if h == 1:
        return ("Singular", why), (1, None)
    rep = _repeated(keys) if keys is not None else None
    if rep is None:
        return ("Multi-Head", why), (h, None)
    why += f"; the keys' heads are shared between query heads (`{rep.name}` repeats them)"
    return ("Multi-Head", why), (h, _kv_heads(h, rep))


def _kv_heads(h: int, rep):
    """The key/value heads that ``rep`` repeats into ``h`` query heads; None where its sizes
    do not say."""
    src, dst = _numel(tensor_args(rep)[0]) if tensor_args(rep) else None, _numel(rep)
    if not src or not dst or dst % src or h % (dst // src):
        return None
    return h // (dst // src)


def _maps(norm, keys, is_param=None) -> tuple[int, str]:
    """(the maps the normalisation holds, reason): heads before any difference."""
    s = shape(norm)
    split = _split_heads(keys) if keys is not None and s and len(s) == 3 else None
    if split:
        h, node = split
        return h, f"`{node.name}` splits the keys' features into {h} heads merged with the batch"
    split = _split_axis(norm, 0) if s and len(s) == 3 else None
    if split:  # unbatched (H, Lq, Lk): the leading axis is a split of the features, no batch
        h, node = split
        return h, (f"`{norm.name}` weighs {h} heads (weights of shape {list(s)}, no batch axis: "
                   f"`{node.name}` splits the keys' features into the heads of axis 0)")
    axis = _feature_last(norm)
    if axis is not None:  # a weight per feature last: heads before the queries' axis
        h = s[axis] if axis >= 1 and isinstance(s[axis], int) else 1
        return h, (f"`{norm.name}` {f'weighs {h} heads' if h > 1 else 'has one head'} (weights "
                   f"of shape {list(s)}: keys on axis {axis + 2}, "
                   f"{'heads on axis ' + str(axis) + ', ' if h > 1 else ''}a weight per "
                   "feature on the last)")
    if s and len(s) >= 4 and keys is not None and (u := sliding_unfold(keys)) is not None:
        return _blocked_heads(norm, u)
    if s and len(s) >= 4 and (cut := _positions_cut(norm)) is not None:
        return _chunked_heads(norm, cut)
    if not s or len(s) < 4 or s[-3] in (1, None):
        return 1, f"`{norm.name}` has one head (weights of shape {list(s or [])})"
    if (batch := _input_axis(norm, len(s) - 3, is_param)) is not None:
        return 1, batch
    return s[-3], f"`{norm.name}` weighs {s[-3]} heads (weights of shape {list(s)})"


def _input_axis(norm, axis: int, is_param) -> str | None:
    """Why the weights' ``axis`` holds no heads where it is, followed back through the keys
    and through the queries, an axis of the inputs themselves that learned maps project
    alike (documents' sentences, (B, T, L, D) inputs); None otherwise (an input of
    (B, H, L, d) used as it is may hold heads: not told apart)."""
    start = tensor_args(norm)[0]
    found = [follow(start, axis, operand=o, is_param=is_param) for o in (1, 0)]
    if not all(isinstance(f, Origin) and f.maps and not (is_param and is_param(f.node))
               for f in found):
        return None
    maps = ", ".join(f"`{m.name}`" for m in dict.fromkeys(m for f in found for m in f.maps))
    return (f"`{norm.name}` has one head (weights of shape {list(shape(norm))}: axis {axis} is "
            f"axis {found[1].axis} of the input `{found[1].node.name}`, which the learned maps "
            f"{maps} project alike: a batch of sequences, not heads)")


def _positions_cut(norm):
    """The view that cuts a sequence (not the features) into the blocks held on the weights'
    axis before the queries, followed back through the keys or else the queries; None where
    that axis comes from no such cut (heads, a batch)."""
    start, r = tensor_args(norm)[0], len(shape(norm))
    for operand in (1, 0):
        cut = follow(start, r - 3, operand=operand)
        if isinstance(cut, Split):
            return None if cut.of_features or cut.part != 0 else cut
    return None


def _chunked_heads(norm, cut) -> tuple:
    """Heads where the weights' axis before the queries holds blocks of a sequence: the axis
    before the blocks, where a view splits the features into it; else one head."""
    s = list(shape(norm))
    held = (f"weights of shape {s}: axis {len(s) - 3} holds {cut.size} blocks of positions "
            f"that `{cut.view.name}` cuts from the sequence")
    split = _split_axis(norm, len(s) - 4) if len(s) >= 5 else None
    if split is None:
        return 1, f"`{norm.name}` has one head ({held})"
    h, by = split
    return h, f"`{norm.name}` weighs {h} heads ({held}; `{by.name}` splits the features into them)"


def _blocked_heads(norm, unfold) -> tuple:
    """Blocked local attention (blocks.py): the weights' axis before the queries holds the
    windows, not heads; the heads are the axis that a view before the blocks folds into the
    batch ((B, H, L, d) -> (B * H, L, d)). (None, reason) where no such view is found."""
    s, n = list(shape(norm)), unfold
    held = f"weights of shape {s}: axis {len(s) - 3} holds {s[-3]} windows"
    for _ in range(20):
        args = tensor_args(n)
        a, b = shape(args[0]) if args else None, shape(n)
        along_batch = op(n) == "cat" and (not a or not b or a[0] != b[0])
        if not args or along_batch or (op(n) not in TRANSPARENT and op(n) not in _TO_BLOCKS):
            break
        if op(n) in ("view", "reshape", "_unsafe_view") and a and b and len(a) == 4 \
                and len(b) == 3 and all(isinstance(d, int) for d in a) \
                and b[0] == a[0] * a[1] and list(b[1:]) == list(a[2:]):
            h = a[1]
            return h, (f"`{norm.name}` weighs blocks ({held}, `{unfold.name}` gathers "
                       f"their keys); `{n.name}` "
                       f"folds {h} head{'s' if h > 1 else ''} into the batch (shape "
                       f"{list(a)} to {list(b)})")
        n = args[0]
    return None, (f"`{norm.name}` weighs blocks ({held}, `{unfold.name}` gathers their "
                  "keys), and no view folding heads "
                  "into the batch is found before them: the number of heads would be a guess")


# ops from the blocks' unfold back to the heads' fold: padding, reshapes, a concatenation
# of features (a rotary embedding over part of them), never along the batch
_TO_BLOCKS = {"constant_pad_nd", "unfold", "reshape", "_unsafe_view", "flatten", "movedim", "cat"}


def _from(node, norm, depth: int = 10) -> bool:
    """Whether ``node`` is ``norm``'s output through moves, slices, masks and scalings."""
    if node is norm:
        return True
    if depth == 0 or op(node) not in _TO_DIFF:
        return False
    return any(_from(a, norm, depth - 1) for a in tensor_args(node))


def _reaches(node, norm, depth: int = 10) -> bool:
    """Whether ``norm`` is among ``node``'s ancestors within ``depth`` steps, through any op."""
    frontier, seen = [node], set()
    for _ in range(depth + 1):
        if any(n is norm for n in frontier):
            return True
        seen.update(frontier)
        frontier = [a for n in frontier for a in tensor_args(n) if a not in seen]
    return False


def _numel(node):
    s = shape(node)
    if s is None or not all(isinstance(d, int) for d in s):
        return None
    return math.prod(s)


def _maps_per_head(norm, diff):
    """How many of the normalisation's maps one difference ``diff`` takes: 1 where the other
    operand comes from another normalisation (two softmaxes, each read alone), else the
    ratio of their sizes (2: A1 - lambda A2 from one softmax over 2H maps); None where the
    sizes do not say."""
    args = tensor_args(diff)
    if len(args) != 2 or not all(_reaches(a, norm) for a in args):
        return 1
    if not all(_from(a, norm) for a in args):
        return None  # one operand computed from the maps by more than moves and scalings
    n, d = _numel(norm), _numel(diff)
    if not n or not d or n % d:
        return None
    return n // d


# what the reader asks of a difference it found: whether one normalisation holds its maps
maps_per_head = _maps_per_head


def _split_heads(node):
    """(H, view) where a view folds H heads of the features into the batch (nn.MHA)."""
    n = node
    for _ in range(12):
        args = tensor_args(n)
        if op(n) not in TRANSPARENT or not args:
            return None
        a, b = shape(args[0]), shape(n)
        if op(n) == "view" and a and b and len(b) == len(a) and sized(a[-1], b[-1]) \
                and b[-1] and a[-1] % b[-1] == 0 and a[-1] // b[-1] > 1:
            return a[-1] // b[-1], n
        n = args[0]
    return None


def _split_axis(norm, axis: int):
    """(H, view) where the weights' ``axis``, followed back through the score's keys and
    through its queries, is the H of views splitting each one's features into (H, d); None
    where it comes from anything else (a batch axis, a sequence cut into blocks, an unknown
    op)."""
    start = (tensor_args(norm) or [None])[0]
    if start is None or axis < 0:
        return None
    keys, queries = follow(start, axis, operand=1), follow(start, axis, operand=0)
    if all(isinstance(c, Split) and c.of_features and c.part == 0 and c.size > 1
           for c in (keys, queries)) and keys.size == queries.size:
        return keys.size, keys.view  # the queries' features split into as many heads
    return None


def _repeated(node):
    n = node
    for _ in range(12):
        o, args = op(n), tensor_args(n)
        if o in ("repeat_interleave", "repeat"):
            return n
        if o == "expand" and args and len(shape(args[0]) or ()) >= 5:
            src, dst = shape(args[0]), shape(n)
            if any(a == 1 and b > 1 for a, b in zip(src, dst)):
                return n
        if not args or (o not in TRANSPARENT and o not in ("mul", "div", "add", "cat", "sub")):
            return None
        n = args[0]
    return None


def _feature_last(norm):
    """The axis that would hold heads (two before the normalised keys' axis) where the
    weights' last axis holds a weight per feature (multi-dimensional, eq. 30-32): normalised
    over an earlier axis and multiplied elementwise into values that are then summed; None
    where the weights are applied otherwise (a matmul)."""
    s = shape(norm)
    dim = norm.args[1] if len(norm.args) > 1 else None
    if not s or not isinstance(dim, int) or dim % len(s) == len(s) - 1 or (s[-1] or 1) < 2:
        return None
    frontier, seen = [norm], set()
    for _ in range(8):
        nxt = []
        for u in (u for n in frontier for u in n.users if u not in seen):
            seen.add(u)
            if op(u) == "mul" and any(op(w) == "sum" for w in u.users):
                return dim % len(s) - 2
            if op(u) in _TO_DIFF:
                nxt.append(u)
        frontier = nxt
    return None
