"""LSH attention's buckets (Kitaev et al. 2020, Reformer): a mask on the scores that keeps
the keys sharing the query's hash bucket, h(x) = argmax([xR; -xR]) with R a rotation read
from no input, buckets compared for equality. The kept subset follows the hashed content of
the keys, so the alignment is the registry's `lsh` (Sparse), not a padding mask (Global)."""
from __future__ import annotations

from .normalise import TRANSPARENT, ancestors, op, tensor_args

PATTERN = "hashed_bucket_mask"


def _moved(node):
    while op(node) in TRANSPARENT and tensor_args(node):
        node = tensor_args(node)[0]
    return node


def hashed(r, node):
    """(the product xR, R) where ``node`` is argmax([xR; -xR]): x read from the input, R
    from none (a random rotation); None otherwise."""
    if op(node) != "argmax" or not tensor_args(node):
        return None
    cat = _moved(tensor_args(node)[0])
    parts = [_moved(p) for p in tensor_args(cat)] if op(cat) == "cat" else []
    if len(parts) != 2:
        return None
    for p, n in (parts, parts[::-1]):
        if op(n) == "neg" and tensor_args(n) and _moved(tensor_args(n)[0]) is p \
                and op(p) == "matmul":
            data = [a for a in tensor_args(p) if r.roots(a)]
            rot = [a for a in tensor_args(p) if not r.roots(a)]
            if len(data) == 1 and len(rot) == 1:
                return p, rot[0]
    return None


def _from_hash(node, hashes) -> bool:
    return any(h in (node, *ancestors(node, 4)) for h in hashes)


def bucket_mask(r, masks):
    """(mask, argmax, comparison) where a mask keeps the pairs whose hash buckets are equal
    (both sides of the comparison hashed: a fixed bucket kept for every query is no LSH);
    None otherwise."""
    for m in masks:
        seen = [m, *ancestors(m, 16)]
        hashes = [a for a in seen if hashed(r, a) is not None]
        if not hashes:
            continue
        compared = [a for a in seen if op(a) == "eq" and len(tensor_args(a)) == 2
                    and all(_from_hash(x, hashes) for x in tensor_args(a))]
        if compared:
            return m, hashes[0], compared[0]
    return None


def reason(r, got) -> str:
    mask, h, eq = got
    prod, rot = hashed(r, h)
    return (f"the mask `{mask.name}` keeps the keys in the query's hash bucket: `{h.name}` "
            f"hashes each position, argmax([xR; -xR]) with `{prod.name}` turning it by "
            f"`{_moved(rot).name}` (read from no input, a random rotation), and `{eq.name}` "
            "compares the buckets (LSH attention, Kitaev et al. 2020)")
