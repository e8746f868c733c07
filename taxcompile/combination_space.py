"""The space of one attention module's mechanisms, and the survey's §5 pairs.

Score × alignment × dimensionality × query type × query multiplicity (Table III's
per-module dimensions): every score and alignment of the registry (docs/combinations.md
gives the count). ``spec_text`` writes
the ``.attn`` spec of one combination, ``enumerate`` yields them all. ``pairs`` adds
the mechanisms the survey's §5 proposes to combine in one model (capsules with heads
or hops, parallel co-attention with heads or multi-dimensional weights, eq. 9's shared
weights with multi-dimensional weights), each a spec of its own. ``combinations``
checks them and writes the validity matrix; it re-exports these names.

No torch here."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from .mechanism_names import example, names, records
from .mechanisms.scores import AFFINITY_ONLY

# The scores and alignments of the registry (taxcompile/mechanisms) but those that cannot
# stand in this matrix's one module, with where they are combined instead (each record's
# ``outside_matrix``).
OUTSIDE = {m.name: m.outside_matrix for kind in ("score", "align") for m in records(kind)
           if m.outside_matrix}
SCORES = tuple(s for s in names("score", aliases=False) if s not in OUTSIDE)
ALIGNMENTS = tuple(a for a in names("align", aliases=False) if a not in OUTSIDE)
DEFAULT_ALIGN = ALIGNMENTS[0]  # what a spec that leaves out `align = …` gets (eq. 25)
DIMENSIONALITIES = ("single", "multi")
QUERY_TYPES = ("basic", "specialized", "self_attentive")
MULTIPLICITIES = ("singular", "multi_head", "multi_hop", "capsule")

# How each value is written in a spec: an alignment as its shortest call (the registry's
# example) unless written here.
_ALIGN_CALLS = {"local": "local(D = 2, position = predictive)"}
ALIGN_TEXT = {m.name: _ALIGN_CALLS.get(m.name) or example(m) or m.name
              for m in records("align") if m.name in ALIGNMENTS}
QUERY_TEXT = {"basic": "s", "specialized": "pre", "self_attentive": "learned(d)"}


# The Table III label each value should classify as (classification.py's vocabulary): the
# records' readings.
def _readings(kind: str, values: tuple[str, ...]) -> dict[str, str]:
    by_name = {m.name: m for m in records(kind)}
    return {v: by_name[v].text("reading") for v in values}


LABELS = {
    "scoring": _readings("score", SCORES),
    "alignment": _readings("align", ALIGNMENTS),
    "dimensionality": {"single": "Single-Dimensional", "multi": "Multi-Dimensional"},
    "query_type": {"basic": "Basic", "specialized": "Specialized",
                   "self_attentive": "Self-Attentive"},
    "query_multiplicity": {"singular": "Singular", "multi_head": "Multi-Head",
                           "multi_hop": "Multi-Hop", "capsule": "Capsule-Based"},
}

SHORT = {"scaled_multiplicative": "scaled_mult", "activated_general": "activated_gen",
         "self_attentive": "self", "specialized": "special", "multi_head": "heads",
         "multi_hop": "hops"}

D = 8  # feature size: every model runs in milliseconds
N = 5  # the attended axis has a fixed length (the location score needs one)
HEADS = 2
HOPS = 2
CAPSULES = 3
CLASSES = 3


@dataclass(frozen=True)
class Combo:
    score: str
    align: str
    dimensionality: str
    query_type: str
    multiplicity: str

    @property
    def name(self) -> str:
        """The model's name, e.g. ``additive_global_single_basic_singular``."""
        return "_".join((self.score, self.align, self.dimensionality, self.query_type,
                         self.multiplicity))

    @property
    def model(self) -> str:
        """The spec's model name (identifiers are at most 64 characters)."""
        return "_".join((SHORT.get(self.score, self.score), self.align, self.dimensionality,
                         SHORT.get(self.query_type, self.query_type),
                         SHORT.get(self.multiplicity, self.multiplicity)))

    @property
    def module(self) -> str:
        """The combination's attention module as a spec refers to it (the last hop)."""
        return "hop.att" if self.multiplicity == "multi_hop" else "att"

    def labels(self) -> dict[str, str]:
        """Table III dimension -> the label this combination was built to have."""
        values = (self.score, self.align, self.dimensionality, self.query_type,
                  self.multiplicity)
        return {dim: LABELS[dim][v] for dim, v in zip(LABELS, values)}


def combos() -> list[Combo]:
    return [Combo(s, a, d, q, m) for s in SCORES for a in ALIGNMENTS for d in DIMENSIONALITIES
            for q in QUERY_TYPES for m in MULTIPLICITIES]


def spec_text(c: Combo) -> str:
    """The ``.attn`` spec of one combination: an attention module `att` over `x`."""
    query = QUERY_TEXT[c.query_type]
    hop = c.multiplicity == "multi_hop"
    lines = [
        "# One combination of score x alignment x dimensionality x query type x query",
        "# multiplicity, written by taxcompile.combinations (docs/combinations.md).",
        "paper combo {",
        '    cite  = "Combination"',
        f'    title = "{c.name}"',
        "}",
        "",
        f"let d = {D}",
        "",
        f"model {c.model} {{",
        f"    input x: sequence[N, d] (N = {N})",
    ]
    if c.query_type == "basic":
        lines += ["    # the query is an auxiliary input that nothing attends over",
                  "    input s: sequence[T, d]"]
    if c.query_type == "specialized":
        lines += [
            "    input y: sequence[M, d]",
            "    # the query is the context of another module, over another input",
            "    attention pre { query = learned(d)  features = y  score = additive }",
        ]
    fields = [("query", "q" if hop else query), ("features", "x"), ("score", c.score)]
    if c.align != DEFAULT_ALIGN:
        fields.append(("align", ALIGN_TEXT[c.align]))
    if c.dimensionality == "multi":
        fields.append(("dimensionality", "multi"))
    if c.multiplicity == "multi_head":
        fields.append(("heads", str(HEADS)))
    if c.multiplicity == "capsule":
        fields.append(("capsules", str(CAPSULES)))
    width = max(len(k) for k, _ in fields)
    body = ["    attention att {"] + [f"        {k:<{width}} = {v}" for k, v in fields] + ["    }"]
    if hop:
        lines.append("    # the query stream: each hop's context refines it (eq. 41-42)")
        lines.append(f"    feature q = {query}")
        lines.append(f"    repeat hop {HOPS} {{")
        lines += ["    " + b for b in body]
        lines.append("        update q = q + att")
        lines.append("    }")
    else:
        lines += body
    lines.append(f"    output out = classify({c.module}, {CLASSES})")
    lines.append("}")
    return "\n".join(lines) + "\n"


def enumerate() -> Iterator[tuple[Combo, str]]:  # noqa: A001 (the issue's name)
    """(combination, spec text) for every combination, in a fixed order."""
    for c in combos():
        yield c, spec_text(c)


# ---- pairs of mechanisms (the survey's §5) -----------------------------------------------

# §5 proposes combining multi-dimensional, multi-head and capsule-based attention and the
# other mechanisms of the survey in one model. Three families of specs do so:
#   capsules (eq. 43-45) with heads (eq. 38-40), over hops (eq. 41-42), or both;
#   parallel co-attention through one affinity matrix (eq. 12-16) with heads,
#     multi-dimensional weights (eq. 30-32) or capsules, each direction on its own or
#     sharing W_q and W_k with the other (eq. 14-15);
#   alternating co-attention (eq. 6-9) whose last module uses the weights of the first
#     (eq. 9, `share`), with multi-dimensional weights and heads on either.
CAPSULE_EXTRAS = ("heads", "hop", "heads_hop")
HEADS_OUTS = ("concat", "mean")  # with heads, besides `project` (W_O, eq. 40)
CO_SCORES = ("additive", *(s for s, why in OUTSIDE.items() if why == AFFINITY_ONLY))
CO_EXTRAS = ("heads", "multi", "heads_multi", "capsules")
ALT_DIMS = (("single", "single"), ("single", "multi"), ("multi", "single"), ("multi", "multi"))


@dataclass(frozen=True)
class Pair:
    family: str  # "capsule" | "parallel" | "alternating"
    score: str
    extra: str
    share: bool = False
    heads_out: str = "project"
    dims: tuple[str, str] = ("single", "single")  # alternating: the first and last module's
    heads: int = 1  # alternating: heads of the first and last module

    @property
    def name(self) -> str:
        parts = [self.family, SHORT.get(self.score, self.score), self.extra]
        if self.heads_out != "project":
            parts.append(self.heads_out)
        if self.share:
            parts.append("shared")
        return "_".join(p for p in parts if p)

    @property
    def mechanisms(self) -> str:
        """What the spec combines, in words for the docs."""
        if self.family == "capsule":
            what = {"heads": f"capsules + {HEADS} heads", "hop": f"capsules over {HOPS} hops",
                    "heads_hop": f"capsules + {HEADS} heads over {HOPS} hops"}[self.extra]
            return what + ("" if self.heads_out == "project" else f", heads_out = {self.heads_out}")
        if self.family == "parallel":
            what = {"heads": f"{HEADS} heads", "multi": "multi-dimensional",
                    "heads_multi": f"{HEADS} heads + multi-dimensional",
                    "capsules": f"{CAPSULES} capsules"}[self.extra]
            return f"parallel co-attention + {what}" + (", W_q/W_k shared" if self.share else "")
        return (f"alternating co-attention, eq. 9 sharing eq. 7's weights; first module "
                f"{self.dims[0]}, last {self.dims[1]}" + (f", {self.heads} heads each"
                                                        if self.heads > 1 else ""))


def pairs() -> list[Pair]:
    out = [Pair("capsule", s, e) for e in CAPSULE_EXTRAS for s in SCORES]
    out += [Pair("capsule", "scaled_multiplicative", "heads", heads_out=h) for h in HEADS_OUTS]
    out += [Pair("parallel", s, e, share) for s in CO_SCORES for e in CO_EXTRAS
            for share in (False, True)]
    out += [Pair("alternating", "additive", f"{a}_{b}" + (f"_h{h}" if h > 1 else ""), True,
                 dims=(a, b), heads=h) for h in (1, HEADS) for a, b in ALT_DIMS]
    return out


def _pair_header(pr: Pair) -> list[str]:
    return [
        "# One pair of mechanisms the survey's §5 proposes to combine, written by",
        "# taxcompile.combinations (docs/combinations.md).",
        "paper combo {",
        '    cite  = "Combination"',
        f'    title = "{pr.name}"',
        "}",
        "",
        f"let d = {D}",
        "",
        f"model {pr.name} {{",
    ]


def _block(name: str, fields: list[tuple[str, str]], indent: str = "    ") -> list[str]:
    width = max(len(k) for k, _ in fields)
    return ([f"{indent}attention {name} {{"] + [f"{indent}    {k:<{width}} = {v}"
                                                for k, v in fields] + [f"{indent}}}"])


def pair_text(pr: Pair) -> str:
    """The ``.attn`` spec of one pair."""
    lines = _pair_header(pr)
    if pr.family == "capsule":
        lines.append(f"    input x: sequence[N, d] (N = {N})")
        heads = [("heads", str(HEADS))] if "heads" in pr.extra else []
        if pr.heads_out != "project":
            heads.append(("heads_out", pr.heads_out))
        if "hop" in pr.extra:
            lines.append("    # hop 0: one learned query per class (eq. 43)")
            lines += _block("caps", [("query", "learned(d)"), ("features", "x"),
                                     ("score", pr.score), ("capsules", str(CAPSULES))])
            lines.append("    # the query of each hop: the earlier hop's capsule outputs, one "
                         "per class (eq. 41)")
            lines.append("    feature q = caps")
            lines.append(f"    repeat hop {HOPS} {{")
            lines += _block("att", [("query", "q"), ("features", "x"), ("score", pr.score)]
                            + heads + [("capsules", str(CAPSULES))], "        ")
            lines.append("        update q = q + att")
            lines.append("    }")
            lines.append(f"    output out = classify(hop.att, {CLASSES})")
        else:
            lines += _block("att", [("query", "learned(d)"), ("features", "x"),
                                    ("score", pr.score)] + heads
                            + [("capsules", str(CAPSULES))])
            lines.append(f"    output out = classify(att, {CLASSES})")
    elif pr.family == "parallel":
        lines += [f"    input x: sequence[N, d] (N = {N})", "    input y: sequence[M, d]",
                  "    # A = tanh(K1^T W_A K2) (eq. 12)",
                  "    affinity C = affinity(x, y, form = bilinear, act = tanh)"]
        extra = {"heads": [("heads", str(HEADS))], "multi": [("dimensionality", "multi")],
                 "heads_multi": [("heads", str(HEADS)), ("dimensionality", "multi")],
                 "capsules": [("capsules", str(CAPSULES))]}[pr.extra]
        for name, q, k in (("ax", "y", "x"), ("ay", "x", "y")):
            fields = [("query", q), ("keys", k), ("affinity", "C"), ("score", pr.score)] + extra
            if pr.share and name == "ay":
                fields.append(("share", "ax"))
            lines += _block(name, fields)
        both = "concat(mean(ax), mean(ay))" if pr.score == "affinity" else "concat(ax, ay)"
        lines.append(f"    output out = classify({both}, {CLASSES})")
    else:
        lines += [f"    input x: sequence[N, d] (N = {N})", "    input y: sequence[M, d]"]
        heads = [("heads", str(pr.heads))] if pr.heads > 1 else []

        def dim(x: str) -> list[tuple[str, str]]:
            return [("dimensionality", "multi")] if x == "multi" else []

        lines.append("    # eq. 7: the first input with no query")
        lines += _block("a0", [("features", "x"), ("score", "additive")] + dim(pr.dims[0])
                        + heads)
        lines.append("    # eq. 8: its context queries the second input")
        lines += _block("a2", [("query", "a0"), ("features", "y"), ("score", "additive")])
        lines.append("    # eq. 9: that context queries the first input, with eq. 7's weights")
        lines += _block("a1", [("query", "a2"), ("features", "x"), ("score", "additive")]
                        + dim(pr.dims[1]) + heads + [("share", "a0")])
        lines.append(f"    output out = classify(concat(a1, a2), {CLASSES})")
    lines.append("}")
    return "\n".join(lines) + "\n"
