"""Talking heads (Shazeer et al. 2020) in a captured graph: a learned H x H map mixes the heads'
scores before the normalisation (e'_h = sum_g P_hg e_g) and their weights after it
(a'_h = sum_g Q_hg a_g), as a matmul with the map (a generated module) or a 1 x 1
convolution whose channels are the heads (x-transformers' `pre/post_talking_heads`, whose
pre-softmax mix is added to the scores: e + W e).

A node is read as such a mix only where the axis it contracts carries the heads of the
weights: the moves between the weights (B, H, Lq, Lk) and the mix's operand are replayed on a
tensor holding each element's head index, so a learned map over the keys, the queries or the
features, or over a folded batch, is no mix of heads. The heads stay the heads: the reading
is Multi-Head with the mix named in the reason."""
from __future__ import annotations

import torch

from ..mechanisms.heads import TALKING_REASON
from .normalise import TRANSPARENT, op, shape, tensor_args

_PASS = TRANSPARENT | {"where"}  # moves and masks between the weights and a mix
_DEPTH = 16


def heads(norm) -> int:
    """The heads the normalisation's weights hold on their axis -3 (B, H, Lq, Lk); 0 where
    they hold none apart."""
    s = shape(norm) or ()
    return s[-3] if len(s) >= 4 and isinstance(s[-3], int) and s[-3] > 1 else 0


def _path(src, node, depth: int = _DEPTH):
    """The nodes from ``src`` (excluded) to ``node`` (included) through moves and masks, or
    None where ``node`` is not ``src``'s data through them alone."""
    if node is src:
        return []
    if depth == 0 or op(node) not in _PASS:
        return None
    args = tensor_args(node)
    if op(node) == "where":
        args = [a for a in node.args[1:] if hasattr(a, "op")]  # the condition is no data
    for a in args:
        got = _path(src, a, depth - 1)
        if got is not None:
            return [*got, node]
    return None


def _replay(x, src, path):
    """``x`` (a tensor shaped as ``src``) taken through the moves of ``path``; None where one
    cannot be replayed."""
    prev = src
    try:
        for n in path:
            if op(n) == "where" or op(n) in ("dropout", "native_dropout", "alias", "detach"):
                x = x.expand(shape(n)) if op(n) == "where" else x
            else:
                args = [x if a is prev else a for a in n.args]
                x = n.target(*args, **n.kwargs)
            prev = n
    except Exception:  # an op whose arguments are no plain values: no mix read
        return None
    return x if isinstance(x, torch.Tensor) and tuple(x.shape) == tuple(shape(prev)) else None


def _on_axis(src, path, h: int, axis: int) -> bool:
    """Whether the moves ``path`` from ``src`` (heads on its axis -3) leave the heads, alone
    and in order, on ``axis`` of their result."""
    s = shape(src) or ()
    if len(s) < 3 or s[-3] != h:
        return False
    idx = torch.arange(h, dtype=torch.float64).view(h, 1, 1).expand(s)
    got = _replay(idx, src, path)
    if got is None or got.dim() == 0 or got.shape[axis] != h:
        return False
    want = [1] * got.dim()
    want[axis] = h
    return torch.equal(got, torch.arange(h, dtype=got.dtype).view(want).expand(got.shape))


def _learned(r, node, h: int, conv: bool):
    """The parameter where ``node`` is a learned H x H map (a 1 x 1 kernel for a
    convolution); None otherwise."""
    s = tuple(shape(node) or ())
    if r.roots(node) or (s != (h, h, 1, 1) if conv else s[-2:] != (h, h)):
        return None
    frontier = [node]
    for _ in range(_DEPTH):
        got = [n for n in frontier if r.is_param(n)]
        if got:
            return got[0]
        frontier = [a for n in frontier for a in tensor_args(n)]
    return None


def mixed(r, node, src, h: int):
    """(the operand, the learned map) where ``node`` mixes the heads of ``src``'s data (heads on
    axis -3) with a learned H x H map; None otherwise."""
    args = tensor_args(node)
    if op(node) == "convolution" and len(args) >= 2 and len(node.args) >= 9 \
            and node.args[8] == 1 and (w := _learned(r, args[1], h, True)) is not None:
        path = _path(src, args[0])
        if path is not None and _on_axis(src, path, h, 1):
            return args[0], w
    if op(node) == "matmul" and len(args) == 2:
        for data, m, axis in ((args[1], args[0], -2), (args[0], args[1], -1)):
            path = _path(src, data)
            w = _learned(r, m, h, False) if path is not None else None
            if w is not None and _on_axis(src, path, h, axis):
                return data, w
    return None


def after(r, node, norm) -> bool:
    """Whether ``node`` mixes the heads of ``norm``'s weights (a post-softmax mix); the mix is
    kept on the reader for the reason."""
    h = heads(norm)
    got = mixed(r, node, norm, h) if h and op(node) in ("matmul", "convolution") else None
    if got is not None:
        r.mixes.setdefault(norm, []).append(("post", node, got[1], None))
    return got is not None


def before(r, node, norm):
    """The scores before a mix of their heads where ``node`` is one (a pre-softmax mix, or
    e + mix(e)): the score path goes on there; None otherwise."""
    h = heads(norm)
    if not h or op(node) not in ("matmul", "convolution", "add"):
        return None
    if op(node) == "add" and len(tensor_args(node)) == 2:
        for e, m in (tensor_args(node), tensor_args(node)[::-1]):
            got = before(r, m, norm) if op(m) in ("matmul", "convolution") else None
            if got is not None and _path(e, got) is not None:
                _, mix, w, _ = r.mixes[norm].pop()
                r.mixes[norm].append(("pre", mix, w, node))
                return e  # e + W e: P = I + W
        return None
    for data in tensor_args(node):
        src = _scores(data, norm)
        got = mixed(r, node, src, h) if src is not None else None
        if got is not None:
            r.mixes.setdefault(norm, []).append(("pre", node, got[1], None))
            return got[0]
    return None


def _scores(node, norm):
    """The first node back from ``node`` through moves shaped as ``norm``'s weights."""
    n = node
    for _ in range(_DEPTH):
        if shape(n) == shape(norm):
            return n
        if op(n) not in TRANSPARENT or not tensor_args(n):
            return None
        n = tensor_args(n)[0]
    return None


def note(r, norm, a) -> None:
    """Name the mixes of ``norm``'s heads in the recognised attention ``a``."""
    mixes = r.mixes.get(norm)
    if not mixes or not a.recognised or "query_multiplicity" not in a.values:
        return
    h = heads(norm)
    said = []
    for when, node, w, add in sorted(dict.fromkeys(mixes), key=lambda m: m[0] == "post"):
        what = "scores before" if when == "pre" else "weights after"
        said.append(f"`{node.name}` mixes the {h} heads' {what} `{norm.name}` with the learned "
                    f"{h} x {h} map `{w.name}`" + (f", which `{add.name}` adds to them "
                                                    "(P = I + W)" if add is not None else ""))
        a.nodes.extend(x.name for x in (node, add) if x is not None)
    whens = {m[0] for m in mixes}
    which = {"pre": "scores before the alignment", "post": "weights after it"}
    label, why = a.values["query_multiplicity"]
    a.values["query_multiplicity"] = (label, f"{why}; {'; '.join(said)}: " + TALKING_REASON.format(
        which=which[next(iter(whens))] if len(whens) == 1 else
        "scores before the alignment and their weights after it"))
