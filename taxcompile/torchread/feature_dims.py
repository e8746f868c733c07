"""The three feature dimensions of Table III, read over every recognised attention of a
captured graph as the spec classifier reads them over a spec's modules
(``taxcompile/feature_dimensions.py``), from where each attention's query, keys and
contexts come from:

- feature multiplicity: an attention whose query reads another input that the model attends
  over (a Specialized query) relates two inputs: co-attention, Parallel where its queries
  are that input's every position (a sequence, or an affinity matrix's rows), Alternating
  where its one query is the context of another co-attention over that input, Interactive
  where it is a summary computed beside it; Multi-Grained where both kinds are there,
  Rotatory where one input queries two others whose contexts query it in turn;
- feature levels: Hierarchical where the contexts of one attention, one per group of its
  input (per sentence), are the keys another attends over (a layer stack's contexts, one per
  position, are no level above: they are the same level re-encoded);
- feature representations: Multi-Representational where an attention's keys are several
  representations of one input stacked along their key axis (Kiela et al.'s embeddings).

Where nothing says otherwise: Singular, Single-Level, Single-Representational, each with
the reason it read. Each returns ``{dimension: (label, reason)}``."""
from __future__ import annotations

from .normalise import TRANSPARENT, op, shape, tensor_args

MAX_WALK = 20_000
# The registry's scores read off an affinity matrix of two inputs' positions (eq. 12-16)
AFFINITY = ("affinity", "max_pool")
# Ops that combine contexts after an attention (a residual or level sum, a map, a join)
COMBINE = TRANSPARENT | {"add", "linear", "matmul", "tanh", "relu", "cat", "mul"}


def read(r, atts, nodes) -> dict[str, tuple[str, str]]:
    atts = [a for a in atts if a.recognised and a.app is not None]
    if not atts:
        return {}
    return {"feature_multiplicity": multiplicity(r, atts, nodes),
            "feature_levels": levels(r, atts, nodes),
            "feature_representations": representations(r, atts)}


def ancestry(node, stop=frozenset()) -> set:
    """Every node ``node`` reads, not past the nodes in ``stop``."""
    seen, stack = set(), [node]
    while stack and len(seen) < MAX_WALK:
        for x in tensor_args(stack.pop()):
            if x not in seen:
                seen.add(x)
                if x not in stop:
                    stack.append(x)
    return seen


def axes(a, nodes) -> tuple[int, int, int] | None:
    """(attention calls N, queries Lq, keys Lk) of ``a``'s weights: (N, [H,] Lq, Lk[, d])."""
    norm = nodes.get(a.norm)
    s = shape(norm) if norm is not None else None
    if not s or not all(isinstance(x, int) for x in s):
        return None
    dim = norm.args[1] if op(norm) in ("softmax", "log_softmax") and len(norm.args) > 1 \
        and isinstance(norm.args[1], int) else -1
    k = dim % len(s)
    lq = s[k - 1] if k >= 2 else 1
    return s[0], lq, s[k]


def _others(a, atts):
    return [b for b in atts if b is not a]


def multiplicity(r, atts, nodes) -> tuple[str, str]:
    cross = {}  # attention -> (own inputs, partner inputs, its weights' axes)
    for a in atts:
        if a.query is None or "Specialized" not in a.values["query_type"][0]:
            continue
        own = set(r.roots(a.keys)) if a.keys is not None else set()
        attended = set().union(*(r.roots(b.keys) for b in _others(a, atts)
                                 if b.keys is not None))
        partners = (set(r.roots(a.query)) - own) & attended
        if partners:
            cross[a] = (own, partners, axes(a, nodes))
    if not cross:
        return "Singular", "no query reads another input that the model attends over"
    inputs = sorted({t for own, partners, _ in cross.values() for t in own | partners})
    for t in inputs:  # Rotatory (eq. 17-20): t queries two others, whose contexts query t
        outward = {p for own, partners, _ in cross.values() if t in partners
                   for p in own if p != t}
        inward = {p for own, partners, _ in cross.values() if t in own
                  for p in partners if p != t}
        if len(outward & inward) >= 2:
            return "Rotatory", (f"{t} queries {', '.join(sorted(outward & inward))}, whose "
                                f"contexts query {t} in turn (eq. 17-20)")
    apps = {b.app: b for b in cross}
    # in turn: the one query is the context of another co-attention over the partner
    turn = [a for a, v in cross.items() if not (v[2] is not None and v[2][1] > 1) and any(
        b is not a and cross[b][0] & v[1]
        for b in (apps[x] for x in ancestry(a.query) if x in apps))]
    # fine-grained: every position of the partner a query (Lq > 1), or queries that pair the
    # partner's positions with the keys' own (an affinity matrix's aggregate, eq. 14-15);
    # coarse: one query, a summary of the partner or another co-attention's context
    fine = [a for a, v in cross.items() if a not in turn and (
        v[2] is not None and v[2][1] > 1 or v[0] & set(r.roots(a.query))
        or a.names.get("score") in AFFINITY)]
    coarse = [a for a in cross if a not in fine]
    if fine and coarse:
        return "Multi-Grained Co-attention", (
            f"fine-grained co-attention at {_names(fine)} (a query per position) and "
            f"coarse-grained at {_names(coarse)} (one query) in one model")
    if fine:
        a = fine[0]
        how = (f"every position of it a query ({cross[a][2][1]} a call)"
               if cross[a][2] is not None and cross[a][2][1] > 1 else
               "its positions paired with the keys' own in the query (an affinity matrix)")
        return "Parallel Co-attention", (
            f"`{a.norm}` relates {', '.join(sorted(cross[a][1]))} to its keys, {how}")
    if turn:
        return "Alternating Co-attention", (
            f"the query of `{turn[0].norm}` is built from the context of another "
            "co-attention over its partner input: the inputs are attended in turn (eq. 6-9)")
    return "Interactive Co-attention", (
        f"`{coarse[0].norm}` is queried by a summary of "
        f"{', '.join(sorted(cross[coarse[0]][1]))}, computed beside it (eq. 10-11)")


def _names(atts) -> str:
    return ", ".join(f"`{a.norm}`" for a in atts)


def levels(r, atts, nodes) -> tuple[str, str]:
    calls = {a: axes(a, nodes) for a in atts}
    apps = {a.app: a for a in atts}
    for u in atts:
        cu = calls[u]
        if u.keys is None or cu is None or cu[2] < 2:
            continue
        for x in ancestry(u.keys):
            w = apps.get(x)
            cw = calls.get(w) if w is not None else None
            if w is None or w is u or cw is None or _stacked(r, w.keys) is not None:
                continue  # (an axis of stacked representations is no level, eq. 21)
            # one context of w per key of u, from more calls of w than of u: w attends
            # within each group (each sentence), u over the groups
            if cw[0] * cw[1] == cu[0] * cu[2] and cw[0] > cu[0]:
                return "Hierarchical", (
                    f"the contexts of `{w.norm}` ({cw[0]} calls of {cw[1]} query, one per "
                    f"group) are the keys `{u.norm}` attends over ({cu[2]} per example)")
    from .queries import key_source

    bases = {a: _base(r, key_source(r, a.keys)) for a in atts}
    ups: dict = {}  # attention -> what its keys' base reads (walked once, not once a pair)
    for u in atts:
        for w in atts:
            if w is not u and _built_up(r, w, u, bases, ups):
                return "Hierarchical", (
                    f"`{u.norm}` attends over features built from those `{w.norm}` attends "
                    f"over, and its context is combined with `{w.norm}`'s (levels of one "
                    "input, bottom-up)")
    return "Single-Level", ("no attention's keys are the contexts of another attention, one "
                            "per group, nor built from another's keys with the contexts joined")


def _built_up(r, w, u, bases: dict, ups: dict) -> bool:
    """Attention at two levels of one input, combined bottom-up (Lu et al.'s words and
    phrases): u's keys are built from w's keys (not from w's context: a stack re-encodes
    its contexts) and a node soon after u's context also reads w's context. ``bases``: each
    attention's keys before their learned maps; ``ups``: memo of what those read."""
    kw, ku = bases[w], bases[u]
    if kw is None or ku is None or kw is ku or not r.roots(kw) & r.roots(ku):
        return False
    if u not in ups:
        ups[u] = ancestry(ku) | {ku}
    if kw not in ups[u] or w.app in ups[u]:
        return False
    frontier, seen = [u.app], set()
    for _ in range(8):  # the contexts' combination: adds, maps, activations, moves
        nxt = []
        for n in frontier:
            for x in n.users:
                if x in seen or op(x) not in COMBINE:
                    continue
                seen.add(x)
                if len(tensor_args(x)) > 1 and w.app in ancestry(x, stop={u.app}):
                    return True
                nxt.append(x)
        frontier = nxt
    return False


def representations(r, atts) -> tuple[str, str]:
    for a in atts:
        got = _stacked(r, a.keys)
        if got is not None:
            node, parts = got
            return "Multi-Representational", (
                f"`{a.norm}` weighs {len(parts)} representations of "
                f"{', '.join(sorted(r.roots(parts[0])))} stacked by `{node.name}` (eq. 21-22)")
    return "Single-Representational", "no attention weighs several representations of one input"


def _stacked(r, keys):
    """(the stack, its parts) where ``keys`` are, through moves and learned maps, several
    tensors of one input's data stacked along a new axis; None otherwise."""
    n, steps = keys, 0
    while n is not None and steps < 40:
        steps += 1
        o, args = op(n), tensor_args(n)
        if o == "stack" or (o == "cat" and len(args) > 1 and all(
                op(x) == "unsqueeze" for x in args)) or _split_cat(n) or (
                o == "cat" and any(_split_cat(u) for u in n.users)):
            parts = args if o != "view" else tensor_args(args[0])
            roots = [r.roots(p) for p in parts]
            if len(parts) > 1 and roots[0] and all(x == roots[0] for x in roots):
                return n, parts
            return None
        data = [x for x in args if r.roots(x)]
        if o not in TRANSPARENT | {"linear", "matmul", "add", "mul", "tanh", "relu"} \
                or len(data) != 1:
            return None
        n = data[0]
    return None


def _split_cat(n) -> bool:
    """Whether ``n`` views a concatenation of k parts along their features, (..., k d), as
    (..., k, d): the parts stacked on an axis of their own (how taxcompile writes `stack`)."""
    args = tensor_args(n)
    if op(n) != "view" or not args or op(args[0]) != "cat":
        return False
    parts, s = tensor_args(args[0]), shape(n)
    sizes = {(shape(p) or (None,))[-1] for p in parts}
    return len(parts) > 1 and bool(s) and len(s) >= 2 and s[-2] == len(parts) \
        and sizes == {s[-1]}


def _base(r, n):
    """``n`` back through moves and elementwise maps by parameters or constants (a learned
    weight per feature, a bias): the features they were computed from."""
    for _ in range(20):
        if n is None:
            return None
        args = tensor_args(n)
        data = [x for x in args if r.roots(x)]
        if op(n) in TRANSPARENT and args:
            n = args[0]
        elif op(n) in ("mul", "add", "sub", "div") and len(data) == 1 and len(args) <= 2:
            n = data[0]
        else:
            return n
    return n
