"""Passes over every attention of a model once each was read alone (taxonomy §3.3):

- the steps of one unrolled loop (the same source lines over the same keys: a decoder over
  time) read their query type from the loop's last step, not from its start (a first query
  computed from the keys' input, or keys that read no input yet);
- a query built from another attention's context, or from another input the model attends
  over with a query from elsewhere, is Specialized (a residual sum over a context is no such
  query: Transformers add one to every layer; an input's own self-attention, causal or not,
  does not make it attended over);
- a query refined by the previous application of the same attention, over the same keys and
  reading no new input, is Multi-Hop (eq. 41-42)."""
from __future__ import annotations

from .normalise import TRANSPARENT, op, tensor_args

LINEAR = {"linear", "matmul", "add", "mul"}
MAX_WALK = 50_000


def refine(r, atts) -> None:
    atts = [a for a in atts if a.recognised and a.app is not None]
    by_line: dict = {}  # one piece of code (a module class, a loop's body)
    loops: dict = {}  # one piece of code over the same keys: a loop's steps, hops
    for a in atts:
        line = tuple(a.source) or id(a)
        by_line.setdefault(line, []).append(a)
        loops.setdefault((line, key_source(r, a.keys)), []).append(a)
    _loop_steps(r, loops.values(), by_line.values())
    _specialized(r, atts, loops.values())
    _hops(r, loops.values())


def key_source(r, k):
    """The keys' features before their learned projection (one node for every step of a
    decoder that projects the same encoder states again)."""
    from .normalise import strip
    from .products import projection

    if k is None:
        return None
    n = strip(k)
    for _ in range(3):
        if not projection(n, r):
            return n
        data = [a for a in tensor_args(n) if r.roots(a)]
        if len(data) != 1:
            return n
        n = strip(data[0])
    return n


def _loop_steps(r, loops, by_line) -> None:
    """A decoder's first steps, whose state reads only the keys' input yet, and a first step
    whose keys read no input yet (LSTMN's memory), take the query type of the loop's last
    step."""
    for g in loops:
        for a in g[:-1]:
            label, why = a.values["query_type"]
            if (label, g[-1].values["query_type"][0]) == ("Self-Attentive", "Basic") \
                    and not why.endswith("(eq. 34)"):
                _as_last(a, g[-1])
    for g in by_line:
        for a in g[:-1]:
            if a.keys is None or not r.roots(a.keys):
                _as_last(a, g[-1])


def _as_last(a, last) -> None:
    label, why = last.values["query_type"]
    if a.values["query_type"][0] != label:
        a.values["query_type"] = (label, f"{why} (read at `{last.norm}`, the last step of "
                                  f"this loop: `{a.norm}` is its start)")


def _is_causal(a) -> bool:
    """A mask from triu/tril or from one comparison of positions (j - i <= 0, j <= i), also
    among a relative-position bucket's comparisons with constants; a window compares twice."""
    from .patterns import ancestors

    nodes = {x for m in a.masks for x in [m, *ancestors(m, 10)]}
    ops = [op(x) for x in nodes]
    if {"triu", "tril"} & set(ops) or ("arange" in ops and sum(
            o in ("le", "lt", "ge", "gt") for o in ops) == 1):
        return True
    pairs = {x for x in nodes if op(x) in ("le", "lt", "ge", "gt") and len(tensor_args(x)) == 2
             and all(any(op(y) == "arange" for y in [t, *ancestors(t, 4)])
                     for t in tensor_args(x))}
    return len(pairs) == 1


def _is_context(r, node, apps, maps: int = 0) -> bool:
    """Whether ``node`` is an attention's context through moves and at most four maps (an
    output projection, a bias); a concatenation is one where each part is (Lite
    Transformer's two branches)."""
    n = node
    for _ in range(40):
        if n in apps:
            return True
        o, args = op(n), tensor_args(n)
        if o in TRANSPARENT and args:
            n = args[0]
            continue
        maps += 1
        data = [x for x in args if r.roots(x)]
        if maps > 4 or not data:
            return False
        if o == "cat":
            return all(_is_context(r, x, apps, maps) for x in data)
        if o not in LINEAR or len(data) != 1:
            return False
        n = data[0]
    return False


def _walk(r, q, apps, own: set):
    """(inputs read, other attentions whose context is read) back from the query ``q``;
    contexts added by a residual sum are passed by, the attention's own earlier steps end
    the walk."""
    roots, ctxs, seen, stack = set(), [], set(), [q]
    while stack and len(seen) < MAX_WALK:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n in apps:
            if apps[n] not in own and apps[n] not in ctxs:
                ctxs.append(apps[n])
            continue
        if n.op == "placeholder":
            roots |= r.roots(n)
            continue
        args = tensor_args(n)
        if op(n) == "where" and n.args and hasattr(n.args[0], "op"):
            args = [a for a in n.args[1:] if hasattr(a, "op")]
        if op(n) in ("add", "sub") and len(args) == 2:
            kept = [x for x in args if not _is_context(r, x, apps)]
            args = kept or args
        stack.extend(x for x in args if r.roots(x))
    return roots, ctxs


def _scoring_weights(r, a, nodes) -> frozenset:
    """The parameters (by name) that ``a``'s scores read within a few steps of its
    normalisation: the same module's weights, whichever step of a loop computes them."""
    from .normalise import ancestors

    norm = nodes.get(a.norm)
    if norm is None:
        return frozenset()
    return frozenset(r.params.get(x.target if x.op == "get_attr" else x.name, x.name)
                     for x in ancestors(norm, 8) if r.is_param(x))


def _specialized(r, atts, loops) -> None:
    apps = {a.app: a for a in atts}
    nodes = {n.name: n for n in r.graph.nodes}
    weights = {a: _scoring_weights(r, a, nodes) for a in atts}
    # an attention whose query comes from its own keys' input (or a learned query) is that
    # input's own self-attention, like a causal one: it does not make the input a memory
    # that another query reads (an unmasked decoder's self-attention over the target)
    own_input = {b for b in atts if b.values["query_type"][0] == "Self-Attentive"}
    for a in atts:
        if a.query is None or a.values["query_type"][1].endswith("(eq. 34)"):
            continue
        kr = r.roots(a.keys) if a.keys is not None else frozenset()
        # its own earlier steps: the same code with the same weights (where it has any near
        # its scores) over keys from the same inputs (LSTMN); the same class applied with
        # other weights is another attention
        # (Oktay et al.'s gates, one per level, the finer gated by the coarser's output)
        own = {b for b in atts if b.source and b.source == a.source
               and (b.keys is None or r.roots(b.keys) <= kr)
               and (weights[b] & weights[a] or not weights[b] | weights[a])}
        roots, ctxs = _walk(r, a.query, apps, own)
        loop = next(g for g in loops if a in g)
        others = [b for b in atts if b not in loop and b.keys is not None
                  and b not in own_input and not _is_causal(b)]
        attended = set().union(*(r.roots(b.keys) for b in others)) if others else set()
        fresh = roots - kr
        if not ctxs and not (fresh and fresh <= attended):
            continue
        if ctxs:
            why = (f"the query `{a.query.name}` is built from the context of another attention "
                   f"(`{ctxs[0].norm}` weighing values at `{ctxs[0].applied_by}`)")
        else:
            why = (f"the query `{a.query.name}` reads {', '.join(sorted(fresh))}, another "
                   "input that the model attends over")
        label = "Specialized"
        if fresh - attended:
            label += " + Basic"
            why += f"; it also reads {', '.join(sorted(fresh - attended))}, which no attention " \
                   "attends over"
        a.values["query_type"] = (label, why)


def _ancestry(node) -> set:
    seen, stack = set(), [node]
    while stack:
        n = stack.pop()
        for x in tensor_args(n):
            if x not in seen:
                seen.add(x)
                stack.append(x)
    return seen


def _hops(r, groups) -> None:
    for g in groups:
        for prev, nxt in zip(g, g[1:]):
            if prev.query is None or nxt.query is None:
                continue
            if key_source(r, prev.keys) is not key_source(r, nxt.keys):
                continue
            up = _ancestry(nxt.query)
            if prev.app not in up:
                continue
            if _reads_new_input(r, nxt.query, prev, up):
                continue  # a decoder's next step: it reads the next target token
            hop = (f"the query `{nxt.query.name}` is refined by the context of the same "
                   f"attention's previous application (`{prev.applied_by}`) over the same keys "
                   "(eq. 41-42)")
            for a in (prev, nxt):
                lab, w = a.values["query_multiplicity"]
                if "Multi-Hop" not in lab:
                    a.values["query_multiplicity"] = (
                        "Multi-Hop" if lab == "Singular" else f"{lab} + Multi-Hop",
                        hop if lab == "Singular" else f"{w}; {hop}")


def _reads_new_input(r, q, prev, up) -> bool:
    """Whether ``q`` reads data that neither the previous step's query nor its context had:
    a node with inputs that is no ancestor of theirs and is not computed from them."""
    before = {prev.query, prev.app} | _ancestry(prev.query) | _ancestry(prev.app)
    after: dict = {}

    def downstream(n) -> bool:
        stack = [n]
        while stack:
            x = stack[-1]
            if x in after:
                stack.pop()
                continue
            if x in (prev.query, prev.app):
                after[x] = True
                stack.pop()
                continue
            todo = [a for a in tensor_args(x) if a not in before and a not in after]
            if todo:
                stack.extend(todo)
                continue
            after[x] = any(after.get(a, False) or a in (prev.query, prev.app)
                           for a in tensor_args(x))
            stack.pop()
        return after[n]

    return any(n not in before and r.roots(n) and not downstream(n) for n in up)
