"""A drop-in layer's learned keys and values and its memory slots (``codegen/layer.py``).

Keys and values that are ``learned(K, d)`` (or a projection of one) are the layer's own
parameter, as a learned query is: forward() is given k=None (and v=None). Keys and values
``prepend(x, learned(M, d))`` (or ``prepend(x, M)``, or a projection of either) are what
forward() is given with the layer's M learned memory slots put in front, as the model puts
them: the slots are never masked, and the padding mask, a mask per query, is_causal and
``positions`` count the keys forward() is given (the slots come before key 0). Each
parameter has the model's name less the statement's prefix (``k_learned``, as ``k_proj``)
and the model's initialisation, so that the statement's weights copy across by name."""

from __future__ import annotations

import textwrap


def refusal(q, k, v) -> str:
    """Why the layer cannot take these keys and values ('' where it can): keys and values
    learned in one way and not in the other (the checker keeps their positions equal), or
    nothing that gives the batch."""
    if v.kind != "keys" and (bool(k.own), bool(k.slots)) != (bool(v.own), bool(v.slots)):
        return ("its keys and values are not both learned, or both a feature after learned "
                "memory slots, so they are not one sequence the layer can take")
    if k.own and (q.kind == "none" or q.own):
        return ("its keys and values are learned and so is its query (or it has none): no "
                "input gives the batch, and the output is the same for every example")
    return ""


def expand(r) -> str:
    """The parameter of role ``r`` over the batch, (B, K, d) (a single vector: K = 1)."""
    rows = r.own or r.slots
    return f"self.{r.param}.expand(B, {'-1' if len(rows) == 2 else '1'}, -1)"


def count(r) -> str:
    """Config's count of the learned keys (n_kv) or slots (n_slots) of role ``r``."""
    rows = r.own or r.slots
    return ("cfg.n_kv" if r.own else "cfg.n_slots") if len(rows) == 2 else "1"


def params(k, v) -> list[str]:
    """Layer.__init__'s lines that make the learned keys, values and slots."""
    lines = []
    for r in (k, v):
        if r.kind == "keys" or not (r.own or r.slots):
            continue
        rows = r.own or r.slots
        shape = f"{count(r)}, cfg.d_{r.name}" if len(rows) == 2 else f"cfg.d_{r.name}"
        what = {"k": "keys", "v": "values"}[r.name]
        lines.append(f"# the learned {what} (learned(K, d)), initialised as the model's" if r.own
                     else f"# the memory slots before the {what} (prepend), as the model's")
        lines.append(f"self.{r.param} = nn.Parameter(torch.randn({shape}) * {r.scale})")
    return lines


def prepend_lines(k, v, view) -> list[str]:
    """forward()'s lines that put the slots before the keys and values given and keep them
    in the masks (key_mask (B, Lk), pair (B | 1, Lq, Lk)); M: the count of slots."""
    if not k.slots:
        return []
    lines = [
        "# the memory slots go before the keys and values given, never masked, as in the",
        "# model; the masks and the query positions count the keys given",
        f"M = {count(k)}",
        "if key_mask is not None:",
        "    key_mask = torch.cat([key_mask.new_ones(B, M), key_mask], -1)  # (B, M + Lk)",
        "if pair is not None:",
        "    pair = torch.cat([pair.new_ones(*pair.shape[:-1], M), pair], -1)",
        f"k = torch.cat([{expand(k)}, k], -2)  # (B, M + Lk, d_k)",
    ]
    if v.kind != "keys":
        lines.append(f"v = torch.cat([{expand(v)}, v], -2)  # (B, M + Lk, d_v)")
    lines.append("Lk = M + Lk")
    if view.offset or view.start:
        lines.append("positions = None if positions is None else positions + M")
    return lines


def doc(k, v) -> list[str]:
    """The lines of Layer's docstring on the memory slots (none without)."""
    if not k.slots:
        return []
    names = ", ".join(f"`{r.param}`" for r in (k, v) if r.slots)
    many = len(k.slots) == 2
    return textwrap.wrap(
        f"The layer puts {'its Config.n_slots' if many else 'its one'} learned memory "
        f"slot{'s' if many else ''} ({names}) before the keys"
        f"{' and values' if v.slots else ''} it is given ({'M' if many else '1'} + Lk keys), "
        "never masked: mask, is_causal and positions count the keys given, the "
        f"{'slots' if many else 'slot'} before key 0.", 84)


def context(q, k, v, view) -> dict:
    """What layer.py.j2 reads of the learned keys, values and slots, and its Usage's call."""
    usage = ["None" if q.kind == "none" or q.own else "q", "None" if k.own else "k"]
    if v.kind != "keys":  # the values are the keys: v defaults to None
        usage.append("None" if v.own else "v")
    return dict(kv_params=params(k, v), kv_prepend=prepend_lines(k, v, view),
                kv_count=count(k) if k.own else "", kv_k=expand(k) if k.own else "",
                kv_v=expand(v) if v.own else "", kv_doc=doc(k, v), usage=", ".join(usage))
