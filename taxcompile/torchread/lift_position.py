"""Position terms for `lift`: rotary positions on an attention's queries and keys (both turned
by the sine and cosine of their positions after their projections) and an ALiBi bias on its
scores (a per-head slope times a distance between positions, added before the alignment).
Each is written with the registry's term for it, picked by the record's properties (the
position that turns the keys, the bias that counts past keys), not by a name of its own.
The rotary base is read from the rotation's angles and the ALiBi slopes checked against
the standard ones, both evaluated on the module's constants (``lift_constants``); where
they are not read, the registry's default is written and a comment says so."""
from __future__ import annotations

from .. import mechanisms as mech
from .normalise import TRANSPARENT, op, shape, tensor_args
from .products import ancestors

# Ops a rotation is made of between a projection and the score (and a query's scaling).
TURNS = TRANSPARENT | {"mul", "add", "sub", "neg", "cat", "stack", "div"}
# Ops between a bias term and the alignment: a mask, scalings, a padding of the heads.
BIASED = TRANSPARENT | {"where", "add", "sub", "mul", "div", "constant_pad_nd"}
MAX_REGION = 400  # nodes visited behind one operand or one alignment


def _named(table: dict, **props) -> str:
    """The one record of ``table`` with these properties: its name in the spec."""
    names = [m.name for m in table.values()
             if all(getattr(m, k) == v for k, v in props.items())]
    assert len(names) == 1, names
    return names[0]


def rotary_name() -> str:
    return _named(mech.POSITIONS, turns_keys=True)


def alibi_name() -> str:
    return _named(mech.BIASES, counts_past=True)


def turned(r, node) -> int | None:
    """The number of features of ``node`` (a query or keys operand) turned by the sine and
    cosine of positions after its projection (2 x the table's frequencies; 0 where they are
    not read), or None where the operand is not turned: a product with a cosine and one with
    a sine of a tensor that reads no input, and a minus (the rotation's -sin), all between
    the projection and the score."""
    found, freqs, _ = _rotation(r, node)
    return 2 * freqs if {"sin", "cos", "minus"} <= found else None


def _rotation(r, node) -> tuple[set, int, list]:
    """(what of a rotation is found behind ``node``: sin, cos, minus; the length of its
    frequency vector, 0 where not read; its cosines, whose inputs are the angles)."""
    seen, todo, found, cosines = set(), [node], set(), []
    freqs = 0
    while todo and len(seen) < MAX_REGION:
        n = todo.pop()
        if n in seen or n is None:
            continue
        seen.add(n)
        o, args = op(n), tensor_args(n)
        if o not in TURNS:
            continue
        if o in ("sub", "neg"):
            found.add("minus")
        if o == "mul" and len(args) == 2:
            const = [a for a in args if not r.roots(a)]
            if len(const) == 1:
                back = [const[0], *ancestors(const[0], 12)]
                for trig in ("sin", "cos"):
                    if any(op(x) == trig for x in back):
                        found.add(trig)
                cosines += [x for x in back if op(x) == "cos" and x not in cosines]
                vec = [s[0] for x in back if (s := shape(x)) and len(s) == 1
                       and isinstance(s[0], int)]
                freqs = max(freqs, vec[0] if vec else 0)
        todo.extend(a for a in args if r.roots(a))
    return found, freqs, cosines


def base_of(r, node, consts) -> float | None:
    """The rotary base of the rotation turning ``node``, read from its angles (one base for
    every cosine's angles, ``lift_constants.rotary_base``); None where not read."""
    if consts is None:
        return None
    from .lift_constants import rotary_base

    cosines = _rotation(r, node)[2]
    bases = {rotary_base(consts.value(tensor_args(c)[0])) if tensor_args(c) else None
             for c in cosines}
    return bases.pop() if len(bases) == 1 else None


def _per_head(node, heads: int) -> bool:
    s = shape(node) or ()
    big = [d for d in s if d != 1]
    return heads > 1 and big == [heads] or heads == 1 and not big


def _distance(node) -> bool:
    """A tensor of positions' distances: made from `arange`s by differences (and |.|, -),
    reading no parameter table (a learned relative bias looks one up)."""
    ops = {op(x) for x in [node, *ancestors(node, 10)]}
    return "arange" in ops and "sub" in ops and not ops & {"embedding", "linear", "matmul"}


def _alibi_term(r, node, heads: int):
    """The product of a per-head slope and a distance behind ``node`` (a term added to the
    scores, reading no input), or None."""
    for n in [node, *ancestors(node, 4)]:
        args = tensor_args(n)
        if op(n) == "mul" and len(args) == 2 and not r.roots(n):
            a, b = args
            if _per_head(a, heads) and _distance(b) or _per_head(b, heads) and _distance(a):
                return n
    return None


def biased(r, a):
    """The ALiBi term added to the scores reaching ``a``'s alignment (a per-head slope times
    a distance: ``_alibi_term``), or None."""
    norm = next((n for n in r.graph.nodes if n.name == a.norm), None)
    if norm is None:
        return None
    heads = a.heads if isinstance(a.heads, int) and a.heads > 0 else 1
    seen, todo = set(), list(tensor_args(norm))
    if op(norm) == "sdpa" and len(norm.args) > 3 and hasattr(norm.args[3], "op"):
        return _alibi_term(r, norm.args[3], heads)  # SDPA's float attn_mask is a bias
    while todo and len(seen) < MAX_REGION:
        n = todo.pop()
        if n in seen or not r.roots(n) or op(n) not in BIASED:
            continue
        seen.add(n)
        args = tensor_args(n)
        if op(n) in ("add", "sub") and len(args) == 2:
            const = [x for x in args if not r.roots(x)]
            term = _alibi_term(r, const[0], heads) if len(const) == 1 else None
            if term is not None:
                return term
        todo.extend(x for x in args if r.roots(x))
    return None


def _rotary(r, a, score: str, head_width: int | None, q: int, k: int, consts):
    """(lines, comments) of the rotary term on ``a``'s queries and keys."""
    name = rotary_name()
    rec = mech.REGISTRY[("position", name)]
    if not mech.score(score).qk or rec.pairs and head_width and head_width % 2:
        return [], ["# not lifted: rotary positions on q and k (the spec's need a q.k score "
                    "and an even width per head)"]
    lines, notes = [f"position = {name}"], []
    default = next(p.default for p in rec.params if p.name == "base")
    bases = {base_of(r, a.query, consts), base_of(r, a.keys, consts)}
    base = bases.pop() if len(bases) == 1 else None
    if base is None:
        notes.append("# not lifted: the rotation's base: the registry's default, its "
                     "frequencies not read as base^(-2i/d) for one base")
    elif base != default:
        lines = [f"position = {name}(base = {base:.9g})"]
    if head_width and 0 < max(q, k) < head_width:
        notes.append(f"# not lifted: the graph turns {max(q, k)} of each head's "
                     f"{head_width} features (the spec turns all)")
    return lines, notes


def position_lines(r, a, score: str, head_width: int | None,
                   consts=None) -> tuple[list, list]:
    """(the statement's `position`/`bias` lines, comments) for attention ``a``; ``consts``:
    the module's constants (``lift_constants.Constants``) the rotary base and the ALiBi
    slopes are read from, None where not held."""
    lines, notes = [], []
    q, k = turned(r, a.query) if a.query is not None else None, turned(r, a.keys)
    if q is not None and k is not None:
        lines, notes = _rotary(r, a, score, head_width, q, k, consts)
    elif (q is None) != (k is None) and a.query is not None:
        notes.append("# not lifted: sines and cosines of positions on the "
                     f"{'keys' if q is None else 'queries'} alone")
    term = biased(r, a)
    if term is not None:
        lines.append(f"bias = {alibi_name()}")
        if not _standard(r, term, a, consts):
            notes.append("# not lifted: the slopes, not read as 2^(-8h/H) for H heads (the "
                         "spec's)")
    return lines, notes


def _standard(r, term, a, consts) -> bool:
    """Whether the per-head factor of the ALiBi ``term`` holds the standard slopes."""
    if consts is None:
        return False
    from .lift_constants import standard_slopes

    heads = a.heads if isinstance(a.heads, int) and a.heads > 0 else 1
    return any(standard_slopes(consts.value(x), heads) for x in tensor_args(term)
               if _per_head(x, heads))
