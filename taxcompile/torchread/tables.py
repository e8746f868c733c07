"""Sines and cosines held as tables: a rotary embedding whose cos and sin were computed once
and registered as buffers (Hugging Face's older Llama and GPT-NeoX, `cos_cached`), so the
graph has no `cos` or `sin` op, or given as inputs (Hugging Face's `position_embeddings`).
Capture marks each buffer's, constant's and input's node with its value (TABLE: for an
input, the example's); a rotation is read from two such tables only where their values are
cos(p f) and sin(p f) of positions p = 0, 1, ... times one frequency f per turned pair."""
from __future__ import annotations

import torch

from .normalise import TRANSPARENT, op, tensor_args

TABLE = "taxcompile_table"  # node.meta key: a held or given value (never a parameter's)
_ATOL = 2e-3  # float32 tables of a few thousand positions round p f to about 1e-4


def mark(node, value) -> None:
    """Record ``value`` on ``node`` where it is a floating table of rank 1 at least."""
    if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dim() >= 1:
        node.meta[TABLE] = value.detach()


def mark_inputs(placeholders, example) -> None:
    """Mark the model's input placeholders with the example tensors they were given (a table
    of sines and cosines handed to an attention layer, as Hugging Face's layers take
    `position_embeddings`), where each lines up with one by shape and dtype."""
    given = [t for t in torch.utils._pytree.tree_leaves(example) if isinstance(t, torch.Tensor)]
    vals = [n.meta.get("val") for n in placeholders]
    if len(given) != len(vals) or any(
            getattr(v, "shape", None) != t.shape or getattr(v, "dtype", None) != t.dtype
            for v, t in zip(vals, given)):
        return
    for node, t in zip(placeholders, given):
        mark(node, t)


def positions(node) -> bool:
    """Whether ``node`` is an input of integers (positions, as `position_ids`), which rows
    of a table a rotation's factor picks by and is still no data. Token ids are integers
    too, and data: an input that an embedding looks up is none."""
    v = node.meta.get("val")
    if not isinstance(v, torch.Tensor) or v.is_floating_point() or v.dtype == torch.bool:
        return False
    frontier = [node]
    for _ in range(8):  # through moves (a view, a cast, an expand) to what reads it
        nxt = []
        for n in frontier:
            for u in n.users:
                if op(u) == "embedding":
                    return False
                if op(u) in TRANSPARENT:
                    nxt.append(u)
        frontier = nxt
    return True


def table(node, trig: str):
    """The marked node ``node`` reads its values from, back through moves, slices and rows
    picked by positions (the index reads no input: the caller's factor reads none), where
    its first row is what a ``trig`` (cos, sin) of position 0 gives; None otherwise."""
    for _ in range(16):
        if TABLE in node.meta:
            rows = _rows(node.meta[TABLE])
            at0 = 1.0 if trig == "cos" else 0.0
            ok = rows is not None and _close(rows[0], torch.full_like(rows[0], at0))
            return node if ok else None
        if op(node) not in TRANSPARENT | {"index", "index_select"} or not tensor_args(node):
            return None
        node = tensor_args(node)[0]
    return None


def _rows(t):
    """A table as (positions, features): leading axes dropped where each entry along them
    holds the same table (size one, or a batch of copies); None where they differ."""
    while t.dim() > 2 and (t.shape[0] == 1 or bool((t == t[:1]).all())):
        t = t[0]
    return t.double() if t.dim() == 2 else None


def rotation(cos_node, sin_node, pairing: str | None) -> bool:
    """Whether the tables of ``cos_node`` and ``sin_node`` are cos(p f) and sin(p f), p the
    row (0, 1, ...), f one frequency per feature, equal on each turned pair: the feature's
    partner half ("halves", rotate_half), its neighbour ("pairs", interleaved), or, where
    each table turns one half already, none (None)."""
    c, s = _rows(cos_node.meta[TABLE]), _rows(sin_node.meta[TABLE])
    if c is None or s is None or c.shape != s.shape or c.shape[0] < 2:
        return False
    d = c.shape[1]
    if pairing is not None:
        if d % 2:
            return False
        h = d // 2
        a, b = (slice(0, h), slice(h, d)) if pairing == "halves" else \
            (slice(0, d, 2), slice(1, d, 2))
        if not (_close(c[:, a], c[:, b]) and _close(s[:, a], s[:, b])):
            return False
    f = torch.atan2(s[1], c[1])  # the frequency, up to whole turns: p is a whole number
    p = torch.arange(c.shape[0], dtype=torch.float64)[:, None]
    return _close(c, torch.cos(p * f)) and _close(s, torch.sin(p * f))


def _close(a, b) -> bool:
    return bool(torch.allclose(a, b, rtol=0.0, atol=_ATOL))
