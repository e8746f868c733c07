"""What the study trains (issue 26, item 2): the taxonomy slice and users' specs.

The slice: one base model per task family, written as an ``.attn`` spec, with its
attention statement swapped one factor at a time around the base: every score, every
alignment, both dimensionalities, every query type and query multiplicity
(``taxcompile.combinations``' values, so the two agree on what a value means). The spec
is written here from validated values only (the combinations' vocabulary and numbers),
then parsed and checked like any user's spec: nothing is eval'd.

Every model reads the tasks' interface (``tasks``): ``x`` tokens over ``L`` (its keys
and values: position embeddings plus a width-3 convolution, so a key's feature also sees
its neighbours, as MQAR's pairs need), ``q`` tokens over ``T`` (what its queries are
made from) and ``classify(…, V)`` over ``T``:

- query type basic: ``query = embed(q)`` — ``q`` is an auxiliary input nothing attends;
- self-attentive: ``q`` is a view of ``x`` (``of = x``: the queried tokens are x's own,
  eq. 35), or, in the keyword family, a learned query (eq. 34);
- specialized: the query is ``q`` re-read through a self-attention over ``q`` (an
  attention over another input, whose context builds the query).

``supervised=True`` adds ``input gold: alignment[T, L]`` and
``penalty = supervised(gold, λ)`` to the attention statement (docs/language.md)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from .. import combinations as C
from . import tasks as T

FAMILIES = ("recall", "keyword")

# The base every task's slice swaps around: Bahdanau's score, global, one weight per
# value, a query from another input, one query. Additive because every alignment and both
# dimensionalities accept it (the sigmoid gate and multi-dimensional weights need it).
BASE = C.Combo("additive", "global", "single", "basic", "singular")
DIMENSIONS = ("scoring", "alignment", "dimensionality", "query_type", "query_multiplicity")
VALUES = {"scoring": C.SCORES, "alignment": C.ALIGNMENTS, "dimensionality": C.DIMENSIONALITIES,
          "query_type": C.QUERY_TYPES, "query_multiplicity": C.MULTIPLICITIES}
FIELD = {"scoring": "score", "alignment": "align", "dimensionality": "dimensionality",
         "query_type": "query_type", "query_multiplicity": "multiplicity"}
# Values that exist only in one family: capsules learn one query per class (eq. 43), so
# they predict one thing per example; the concat score is linear in the query (the query
# adds one number to every key's score), so it exists only without a query (eq. 33).
ONLY = {("query_multiplicity", "capsule"): "keyword", ("scoring", "concat"): "keyword"}

LAMBDA = 1.0  # the supervised penalty's weight
HEADS, HOPS, CAPSULES = C.HEADS, C.HOPS, C.CAPSULES


@dataclass(frozen=True)
class Model:
    """One model of the slice: a combination on one task, named by what it swaps."""
    combo: C.Combo
    task: str
    dimension: str  # the swapped dimension ("base" for the family's base)
    value: str
    d: int  # width

    @property
    def name(self) -> str:
        return "study_" + ("base" if self.dimension == "base" else
                           f"{C.SHORT.get(self.value, self.value)}")

    @property
    def source(self) -> str:
        return f"slice:{self.task}:{self.dimension}={self.value}"


def slice_models(task: str, d: int, full: bool = False) -> list[Model]:
    """The base of ``task``'s family and its one-factor swaps (with ``full``, every
    combination of the five dimensions instead)."""
    family = T.TASKS[task].family
    base = BASE
    if full:
        out = []
        for c in C.combos():
            if c.multiplicity == "capsule" and family != "keyword":
                continue
            out.append(Model(c, task, "combo", c.name, d))
        return out
    out = [Model(base, task, "base", "base", d)]
    for dim in DIMENSIONS:
        for v in VALUES[dim]:
            if v == getattr(base, FIELD[dim]) or ONLY.get((dim, v), family) != family:
                continue
            out.append(Model(replace(base, **{FIELD[dim]: v}), task, dim, v, d))
    return out


def _fields(c: C.Combo, query: str | None, supervised: bool) -> list[tuple[str, str]]:
    fields = [("query", query)] if query else []
    fields += [("features", "h"), ("score", c.score)]
    if c.align != "global":
        fields.append(("align", C.ALIGN_TEXT.get(c.align, c.align)))
    if c.dimensionality == "multi":
        fields.append(("dimensionality", "multi"))
    if c.multiplicity == "multi_head":
        fields.append(("heads", str(HEADS)))
    if c.multiplicity == "capsule":
        fields.append(("capsules", str(CAPSULES)))
    if supervised:
        fields.append(("penalty", f"supervised(gold, {LAMBDA})"))
    return fields


def spec_text(m: Model, supervised: bool = False) -> str:
    """The ``.attn`` spec of model ``m`` at its task's lengths."""
    info = T.TASKS[m.task]
    c = m.combo
    # keyword family (one prediction per example): the query-less forms, no query (eq. 33)
    # for self-attentive and concat, a learned query per class for capsules (eq. 43)
    keyword = info.family == "keyword"
    learned = keyword and c.multiplicity == "capsule"
    own = learned or keyword and (c.query_type == "self_attentive" or c.score == "concat")
    lines = [
        "# A model of taxcompile's study (issue 26), written by taxcompile.study.models.",
        "paper study {",
        '    cite  = "Study"',
        f'    title = "{m.source}"',
        "}",
        "",
        f"let d = {m.d}",
        f"let V = {T.V}",
        "",
        f"model {m.name} {{",
        f"    input x: tokens[L] (vocab = V, L = {info.L})",
    ]
    # a sigmoid gate pairs each key with the query at its position: q runs over L itself
    # (the tasks whose T is L: copy, reverse, sort; ``fits`` skips the others)
    axis = "L" if c.align == "sigmoid" else "T"
    if not own:
        of = ", of = x" if c.query_type == "self_attentive" else ""
        lines.append(f"    input q: tokens[{axis}] (vocab = V{of})")
    if supervised:  # over the module's query positions and keys
        lines.append(f"    input gold: alignment[{axis}, L]")
    lines += [
        "    feature e = embed(x, d)",
        "    # keys and values: the token, its position and its neighbours (a pair's partner)",
        "    feature h = positional(e, kind = learned) + cnn(e, d, kernel = 3)",
    ]
    if own:
        query = "learned(d)" if learned else None
    else:
        lines.append("    feature u = embed(q, d, share = e)")
        query = "u"
    if c.query_type == "specialized":
        lines.append("    # the query re-reads q through an attention over q: Specialized")
        lines.append("    attention pre { query = u  features = u  score = scaled_multiplicative }")
        lines.append("    feature s = pre + u")
        query = "s"
    out = "att"
    if c.multiplicity == "multi_hop":
        lines.append(f"    feature r = {query or 'learned(d)'}")
        lines.append(f"    repeat hop {HOPS} {{")
        lines += C._block("att", _fields(c, "r", supervised), "        ")
        lines.append("        update r = r + att")
        lines.append("    }")
        out = "hop.att"
    else:
        lines += C._block("att", _fields(c, query, supervised))
    lines.append(f"    output out = classify({out}, V)")
    lines.append("}")
    return "\n".join(lines) + "\n"


def misfit(m: Model) -> str | None:
    """Why model ``m`` cannot run its task, from the tasks' shapes (None: it can)."""
    info = T.TASKS[m.task]
    if m.combo.align == "sigmoid" and info.T != info.L:
        return (f"a sigmoid gate pairs each key position with the query at the same position; "
                f"task {m.task} has {info.T} queries over {info.L} keys")
    return None
