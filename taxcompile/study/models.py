"""What the study trains: the taxonomy slice and users' specs.

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
  eq. 35), or, in the keyword family, a learned query (eq. 34, as combinations writes it);
- specialized: the query is ``q`` re-read through a self-attention over ``q`` (an
  attention over another input, whose context builds the query).

In the keyword family (one prediction per example) the concat score is written without a
query (eq. 33: it is linear in one), and capsules with a learned query per class (eq. 43).
The self-attentive variant of the other tasks computes what the base computes (q's
tokens are declared a view of x): its effect should be null, a control of the study.

The feature dimensions are swapped on the tasks whose inputs give them something to do:
alternating, interactive and parallel co-attention on ``pair_recall`` (two inputs),
hierarchical levels on ``segments`` (a segmented input), multi-representational keys
(two embeddings weighed per position, Kiela et al.) on ``keyword``.

``supervised=True`` adds ``input gold: alignment[T, L]`` and
``penalty = supervised(gold, λ)`` to the attention statement (docs/language.md)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from .. import combinations as C
from ..combination_space import _block as block
from ..mechanisms import ALIGNS, SCORES
from . import tasks as T

FAMILIES = ("recall", "keyword", "pair", "segmented")

# The base every task's slice swaps around: Bahdanau's score, global, one weight per
# value, a query from another input, one query. Additive because every alignment and both
# dimensionalities accept it (the sigmoid gate and multi-dimensional weights need it).
BASE = C.Combo("additive", C.DEFAULT_ALIGN, "single", "basic", "singular")
DIMENSIONS = ("scoring", "alignment", "dimensionality", "query_type", "query_multiplicity")
VALUES = {"scoring": C.SCORES, "alignment": C.ALIGNMENTS, "dimensionality": C.DIMENSIONALITIES,
          "query_type": C.QUERY_TYPES, "query_multiplicity": C.MULTIPLICITIES}
FIELD = {"scoring": "score", "alignment": "align", "dimensionality": "dimensionality",
         "query_type": "query_type", "query_multiplicity": "multiplicity"}
# Values that exist only in one family: capsules learn one query per class (eq. 43), so
# they predict one thing per example; the concat score is linear in the query (the query
# adds one number to every key's score), so it exists only without a query (eq. 33).
ONLY = {("query_multiplicity", "capsule"): "keyword", ("scoring", "concat"): "keyword"}

# The three feature dimensions, each on the task whose inputs give it something to do:
# co-attention needs two inputs, levels a segmented one, representations two embeddings.
FEATURE_SWAPS = {
    "pair": [("feature_multiplicity", v) for v in ("alternating", "interactive", "parallel")],
    "segmented": [("feature_levels", "hierarchical")],
    "keyword": [("feature_representations", "multi")],
}

LAMBDA = 1.0  # the supervised penalty's weight
# The cosine score with a learned temperature (NTM's key strength): Table II's plain cosine
# (β = 1) gives one key of 32 at most 0.19 of the weight, a handicap of the scale, not of
# scoring by cosine (docs/language.md, the similarity score's `scale`).
SCORE_TEXT = {"similarity": "similarity(scale = learned)"}
# pair_recall's co-attention models are trained with the additive score and again with
# this one: an additive base needs 2,600-4,100 steps there, a scaled dot product 600
DOT = "scaled_multiplicative"
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
        if self.dimension == "feature_representations":
            return "study_multi_rep"
        if self.dimension == "combo":  # combinations' own name (at most 64 characters)
            return self.combo.model
        name = "study_" + ("base" if self.dimension == "base" else
                           f"{C.SHORT.get(self.value, self.value)}")
        return name + ("_dot" if self.dot else "")

    @property
    def dot(self) -> bool:
        """A co-attention model (or its base) with the scaled dot-product score instead of
        the additive one: the same comparison without the additive score's confound."""
        return self.combo.score == DOT and self.dimension in ("base", "feature_multiplicity")

    @property
    def source(self) -> str:
        return f"slice:{self.task}:{self.dimension}={self.value}" + \
            (f"+scoring={DOT}" if self.dot else "")


def slice_models(task: str, d: int, full: bool = False) -> list[Model]:
    """The base of ``task``'s family and its one-factor swaps (with ``full``, every
    combination of the five dimensions instead)."""
    family = T.TASKS[task].family
    base = BASE
    out = [Model(base, task, "base", "base", d)]
    out += [Model(base, task, dim, v, d) for dim, v in FEATURE_SWAPS.get(family, [])]
    if family == "pair":  # each co-attention also with the dot-product score, and its base
        dot = replace(base, score=DOT)
        out += [Model(dot, task, "base", "base", d)]
        out += [Model(dot, task, dim, v, d) for dim, v in FEATURE_SWAPS[family]]
    if family in ("pair", "segmented"):  # their base reads the five dimensions' base
        return out
    if full:
        out += [Model(c, task, "combo", c.name, d) for c in C.combos()
                if c != base and all(ONLY.get((dim, getattr(c, FIELD[dim])), family) == family
                                     for dim in DIMENSIONS)]
        return out
    for dim in DIMENSIONS:
        for v in VALUES[dim]:
            if v == getattr(base, FIELD[dim]) or ONLY.get((dim, v), family) != family:
                continue
            out.append(Model(replace(base, **{FIELD[dim]: v}), task, dim, v, d))
    return out


def _fields(c: C.Combo, query: str | None, supervised: bool) -> list[tuple[str, str]]:
    fields = [("query", query)] if query else []
    fields += [("features", "h"), ("score", SCORE_TEXT.get(c.score, c.score))]
    if c.align != C.DEFAULT_ALIGN:
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


def spec_head(comment: tuple[str, ...], source: str, d: int, vocab: int,
              name: str) -> list[str]:
    """The first lines of a spec the study writes: its comment, its paper block (titled by
    the run's source), `d` and `V`, and the model's opening line."""
    return [*comment, "paper study {", '    cite  = "Study"', f'    title = "{source}"', "}",
            "", f"let d = {d}", f"let V = {vocab}", "", f"model {name} {{"]


def _header(m: Model) -> list[str]:
    return spec_head(("# A model of taxcompile's study (issue 26), written by "
                      "taxcompile.study.models.",), m.source, m.d, T.V, m.name)


KEYS = ["    # keys and values: the token, its position and its neighbours (a pair's partner)",
        "    feature h = positional(e, kind = learned) + cnn(e, d, kernel = 3)"]


def _pair_text(m: Model) -> str:
    """pair_recall: x (L) and z (M); the shared key's value, one per example."""
    info = T.TASKS[m.task]
    lines = _header(m) + [f"    input x: tokens[L] (vocab = V, L = {info.L})",
                          "    input z: tokens[M] (vocab = V)",
                          "    feature e = embed(x, d)"] + KEYS + [
                          "    feature hz = embed(z, d, share = e)"]
    add = f"score = {m.combo.score}"
    if m.value == "base":  # one attention over x, queried by z pooled: Singular
        lines += [f"    attention att {{ query = mean(hz)  features = h  {add} }}",
                  "    output out = classify(att, V)"]
    elif m.value == "alternating":  # eq. 6-9: z summarised, x read with it, z re-read
        # no query: a summary of z (eq. 6); a dot product needs one, a learned one (eq. 34)
        own = "" if "no_query" in dict(SCORES[m.combo.score].docs) else "query = learned(d)  "
        lines += [f"    attention c0 {{ {own}features = hz  {add} }}",
                  f"    attention c2 {{ query = c0  features = h  {add} }}",
                  # c0's parameters re-read z (eq. 9); a learned query cannot be shared
                  f"    attention c1 {{ query = c2  features = hz  {add}"
                  f"{'  share = c0' if not own else ''} }}",
                  "    output out = classify(concat(c1, c2), V)"]
    elif m.value == "interactive":  # IAN: each input read with the other's mean
        lines += [f"    attention ax {{ query = mean(hz)  features = h  {add} }}",
                  f"    attention az {{ query = mean(h)  features = hz  {add} }}",
                  "    output out = classify(concat(ax, az), V)"]
    else:  # parallel: one affinity matrix read both ways (eq. 12-16)
        # with the dot product: the affinity h_i^T hz_j / sqrt(d), max-pooled (eq. 16)
        form, add = ("bilinear, act = tanh", add) if not SCORES[m.combo.score].qk \
            else ("scaled_dot", "score = max_pool")
        lines += [f"    affinity C = affinity(h, hz, form = {form})",
                  f"    attention ax {{ query = hz  keys = h  affinity = C  {add} }}",
                  f"    attention az {{ query = h  keys = hz  affinity = C  {add} }}",
                  "    output out = classify(concat(ax, az), V)"]
    return "\n".join(lines + ["}"]) + "\n"


def _segments_text(m: Model) -> str:
    """segments: x (S, W); the keyword, one per example. Both read an attention over the
    S segments; the hierarchical one builds each segment by an attention over its words."""
    info = T.TASKS[m.task]
    lines = _header(m) + [
        f"    input x: tokens[S, W] (vocab = V, S = {info.L}, W = {T.W_SEG})",
        "    feature e = embed(x, d)"]
    if m.value == "base":
        lines.append("    feature hs = mean(e)  # a segment is its words' mean: Single-Level")
    else:
        lines += ["    attention word { query = learned(d)  features = e  score = additive }",
                  "    feature hs = word  # a segment is an attention over its words"]
    lines += ["    attention att { query = learned(d)  features = hs  score = additive }",
              "    output out = classify(att, V)", "}"]
    return "\n".join(lines) + "\n"


def spec_text(m: Model, supervised: bool = False) -> str:
    """The ``.attn`` spec of model ``m`` at its task's lengths."""
    info = T.TASKS[m.task]
    if supervised and unsupervisable(m):
        raise ValueError(unsupervisable(m))
    if info.family == "pair":
        return _pair_text(m)
    if info.family == "segmented":
        return _segments_text(m)
    c = m.combo
    # keyword family (one prediction per example): self-attentive is a learned query (eq.
    # 34), as in taxcompile.combinations; the slice's capsule swap learns its queries too
    # (capsules must, eq. 43), and its concat swap has none (eq. 33: concat is linear in a
    # query). In the full product a combination keeps its own query type, and where that
    # cannot be, the checker says why.
    keyword = info.family == "keyword"
    concat = keyword and c.score == "concat" and m.dimension == "scoring"
    learned = keyword and not concat and (c.query_type == "self_attentive" or (
        c.multiplicity == "capsule" and m.dimension == "query_multiplicity"))
    own = learned or concat
    lines = _header(m) + [f"    input x: tokens[L] (vocab = V, L = {info.L})"]
    # a sigmoid gate pairs each key with the query at its position: q runs over L itself
    # (the tasks whose T is L: copy, reverse, sort; ``fits`` skips the others)
    axis = "L" if ALIGNS[c.align].gate else "T"
    if not own:
        of = ", of = x" if c.query_type == "self_attentive" else ""
        lines.append(f"    input q: tokens[{axis}] (vocab = V{of})")
    if supervised:  # over the module's query positions and keys
        lines.append(f"    input gold: alignment[{axis}, L]")
    if m.dimension == "feature_representations":  # DME (Kiela et al.): two embeddings
        lines += ["    feature e1 = embed(x, d)",
                  "    feature e2 = embed(x, d)",
                  "    feature reps = stack(e1, e2)",
                  "    attention meta { query = learned(d)  features = reps  score = additive }",
                  "    feature e = meta  # the tokens' embeddings, mixed per position"]
    else:
        lines.append("    feature e = embed(x, d)")
    lines += KEYS
    if own:
        query = "learned(d)" if learned else None
    else:
        emb = "e1" if m.dimension == "feature_representations" else "e"
        lines.append(f"    feature u = embed(q, d, share = {emb})")
        query = "u"
    if ALIGNS[c.align].centred and not own:
        # the window's centre is predicted from the query (eq. 28), which in Luong's local-p
        # is a decoder state that has read the source: here the query first reads x once
        lines.append("    # the query reads x before it predicts the window's centre (eq. 28)")
        lines.append(f"    attention seen {{ query = {query}  features = h  "
                     "score = additive }")
        lines.append(f"    feature u_x = {query} + seen")
        query = "u_x"
    if c.query_type == "specialized":
        lines.append("    # the query re-reads q through an attention over q: Specialized")
        lines.append("    attention pre { query = u  features = u  score = scaled_multiplicative }")
        lines.append("    feature s = pre + u")
        query = "s"
    out = "att"
    if c.multiplicity == "multi_hop":
        lines.append(f"    feature r = {query or 'learned(d)'}")
        lines.append(f"    repeat hop {HOPS} {{")
        lines += block("att", _fields(c, "r", supervised), "        ")
        lines.append("        update r = r + att")
        lines.append("    }")
        out = "hop.att"
    else:
        lines += block("att", _fields(c, query, supervised))
    lines.append(f"    output out = classify({out}, V)")
    lines.append("}")
    return "\n".join(lines) + "\n"


def unsupervisable(m: Model) -> str | None:
    """Why ``m`` has no supervised twin (None: it has one)."""
    if T.TASKS[m.task].family in ("pair", "segmented"):
        return ("its attention has one query per example (pooled or learned): "
                "`supervised(gold, λ)` compares rows of query positions (alignment[T, S])")
    return None


def misfit(m: Model) -> str | None:
    """Why model ``m`` cannot run its task, from the tasks' shapes (None: it can)."""
    info = T.TASKS[m.task]
    if ALIGNS[m.combo.align].gate and info.T != info.L:
        return (f"a sigmoid gate pairs each key position with the query at the same position; "
                f"task {m.task} has {info.T} queries over {info.L} keys")
    return None
