"""The cross product of one attention module's mechanisms.

Score × alignment × dimensionality × query type × query multiplicity (Table III's
per-module dimensions): 9 × 9 × 2 × 3 × 4 = 1944 combinations. ``spec_text`` writes
the ``.attn`` spec of one combination, ``enumerate`` yields them all. ``pairs`` adds
the mechanisms the survey's §5 proposes to combine in one model (capsules with heads
or hops, parallel co-attention with heads or multi-dimensional weights, eq. 9's shared
weights with multi-dimensional weights), each a spec of its own. Nothing here
decides which combinations are valid: that is ``taxcompile check``'s job, and
``python -m taxcompile.combinations`` runs the check on every combination and
prints the validity matrix (docs/combinations.md) from its verdicts.

No torch here: the matrix is written by the front end alone."""

from __future__ import annotations

import builtins
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from .mechanism_names import example, names, records

# The scores and alignments of the registry (taxcompile/mechanisms) but those that cannot
# stand in this matrix's one module, with where they are combined instead.
AFFINITY_ONLY = "scores over an affinity matrix: parallel co-attention's pairs (CO_SCORES)"
OUTSIDE = {
    "max_pool": AFFINITY_ONLY,
    "affinity": AFFINITY_ONLY,
    "activated_concat": "scores the edges of a graph only (`mask = adj`, GAT)",
    "lsh": "hashes the queries and the keys alike: the query must be the keys",
}
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


def pair_verdict(pr: Pair) -> list[tuple[str, str]] | None:
    """None when ``taxcompile check`` accepts the pair's spec, else its (message, hint)
    pairs, with the modules' names left out."""
    return _verdict(pair_text(pr), _generic_pair)


def _generic_pair(text: str) -> str:
    text = re.sub(r"attention `[\w.\[\]]+`(: `share = \w+`)?: ", "", text)
    text = re.sub(r"attention `[\w.\[\]]+`(: `share = \w+`)? ", "the module ", text)
    return text


# ---- the validity matrix ---------------------------------------------------------------

FILE = "combo.attn"


def verdict(c: Combo, text: str) -> list[tuple[str, str]] | None:
    """None when ``taxcompile check`` accepts the spec, else its (message, hint) pairs,
    made generic: without the module's name (`att`, `hop[2].att`) and with the
    combination's score written `SCORE`, so one rule gives one reason."""
    return _verdict(text, lambda t: _generic(t, c))


def _verdict(text: str, generic) -> list[tuple[str, str]] | None:
    """None when ``taxcompile check`` accepts ``text``, else its distinct (message, hint)
    pairs, each made generic by ``generic``."""
    from .diagnostics import SpecError
    from .pipeline import load_text

    try:
        load_text(text, FILE)
    except SpecError as e:
        out = []
        for d in e.diagnostics:
            reason = (generic(d.message), generic(d.hint))
            if reason not in out:
                out.append(reason)
        return out
    return None


def _generic(text: str, c: Combo) -> str:
    text = re.sub(r"attention `[\w.\[\]]+`: ", "", text)
    text = text.replace(f"the {c.score.replace('_', ' ')} score is not", "the `SCORE` score is not")
    return text.replace(f"`{c.score}`", "`SCORE`")


def matrix() -> dict[Combo, list[tuple[str, str]] | None]:
    return {c: verdict(c, t) for c, t in enumerate()}


def pair_matrix() -> dict[Pair, list[tuple[str, str]] | None]:
    return {pr: pair_verdict(pr) for pr in pairs()}


QT_ABBR = {"basic": "B", "specialized": "Sp", "self_attentive": "SA"}
QM_ABBR = {"singular": "1", "multi_head": "MH", "multi_hop": "hop", "capsule": "cap"}


def _reasons(refused: dict) -> tuple[list[tuple[str, str]], dict, Counter]:
    """The distinct refusal reasons in order of first appearance, their numbers (R1, R2, …)
    and how many refused entries give each."""
    reasons: list[tuple[str, str]] = []
    for r in refused.values():
        for x in r:
            if x not in reasons:
                reasons.append(x)
    number = {r: i for i, r in zip(range(1, len(reasons) + 1), reasons)}
    return reasons, number, Counter(x for r in refused.values() for x in r)


def render(results: dict[Combo, list[tuple[str, str]] | None],
           pair_results: dict[Pair, list[tuple[str, str]] | None] | None = None) -> str:
    if pair_results is None:
        pair_results = pair_matrix()
    total = len(results)
    refused = {c: r for c, r in results.items() if r is not None}
    reasons, number, count = _reasons(refused)
    one_each = all(len(r) == 1 for r in refused.values())
    out = [
        "# Combinations of one attention module",
        "",
        "<!-- generated by `python -m taxcompile.combinations > docs/combinations.md`; "
        "do not edit -->",
        "",
        "Every combination of score × alignment × dimensionality × query type × query",
        f"multiplicity for a single attention module: {len(SCORES)} × {len(ALIGNMENTS)} × "
        f"{len(DIMENSIONALITIES)} × {len(QUERY_TYPES)} × {len(MULTIPLICITIES)} = {total}.",
        "`taxcompile.combinations.spec_text` writes the spec of each; this matrix records",
        "what `taxcompile check` says about it. Every accepted combination compiles, runs",
        "forward and backward (below for topk, crf), and classifies back to its values",
        "(`tests/test_combinations.py`).",
        "",
        f"- **valid**: {total - len(refused)}",
        f"- **refused** by `taxcompile check`: {len(refused)}",
        "",
        "## How each value is built",
        "",
        "| dimension | values |",
        "| --- | --- |",
        "| score | " + ", ".join(f"`{s}`" for s in SCORES) + " |",
        "| alignment | " + ", ".join(f"`{ALIGN_TEXT[a]}`" for a in ALIGNMENTS) + " |",
        "| dimensionality | `single`, `dimensionality = multi` |",
        "| query type | Basic (B): `query = s`, an input nothing attends over; Specialized (Sp): "
        "`query = pre`, the context of `attention pre { query = learned(d)  features = y  "
        "score = additive }` over another input `y`; Self-Attentive (SA): "
        "`query = learned(d)` (eq. 34) |",
        f"| query multiplicity | Singular (1); Multi-Head (MH): `heads = {HEADS}`; Multi-Hop "
        f"(hop): `feature q = QUERY` then `repeat hop {HOPS} {{ attention att {{ query = q … }}  "
        f"update q = q + att }}` (eq. 41-42); Capsule-Based (cap): `capsules = {CAPSULES}` |",
        "",
        f"The attended input is `x: sequence[N, d] (N = {N})`, d = {D}; the output is "
        f"`classify(att, {CLASSES})` (`hop.att` for Multi-Hop).",
        "",
        "## Why combinations are refused",
        "",
        "Each reason is `taxcompile check`'s error and hint (the module's name left out,",
        "the combination's score written `SCORE`), with the number of combinations it",
        "refuses. A combination may break several rules; `check` reports the first it",
        "finds in each module"
        + (", so every refused combination has one reason here." if one_each else
           "; a combination whose modules report different reasons counts under each."),
        "",
        "| # | error | hint | combinations |",
        "| --- | --- | --- | --- |",
    ]
    for r in reasons:
        out.append(f"| R{number[r]} | {_cell(r[0])} | {_cell(r[1])} | {count[r]} |")
    out += [
        "",
        "Every combination here has a query (Self-Attentive is built with a learned query,",
        "eq. 34), so `concat` is refused throughout. Without a query (eq. 33) `concat` scores",
        "the keys alone and compiles with every alignment but local (whose window a query",
        "places), both dimensionalities (hard: single only, R2) and several heads",
        "(`tests/test_combinations.py` runs them; `tests/test_codegen_mechanisms.py` checks",
        "the score against its equation).",
        "",
        "`align = sigmoid` is Oktay et al.'s gate, a_l = sigmoid(w^T act(W1 q_l + W2 k_l + b)",
        "+ b_psi) per key position (classified Global): it needs the additive score, a query",
        "at the keys' positions or one for all (the Basic query `s` runs over its own axis T),",
        "and no capsules; its result is the gated values at the keys' positions, not one",
        "context vector, so a hop's `update q = q + att` (eq. 41, 37) finds no c^(s) of the",
        "query's shape (the `shapes differ` reason).",
        "",
        "`topk(k = 2)` (Sparse) keeps each query's 2 largest of 5 scores, `crf` (Kim et al.'s",
        "CRF marginals, Global) weighs every key: both are refused where `global` is, and run",
        "with the additive and scaled_multiplicative scores (they act on the scores e, which",
        "any score makes alike). The head mechanisms (`talking_heads`, `mem_kv`, `head_gates`,",
        "`kv_heads`, `qk_norm`), like position terms and biases, change no Table III cell: no",
        "dimension here.",
        "",
        "## The matrix",
        "",
        "Rows are score × dimensionality, columns alignments. A cell lists, per reason,",
        "the query type/multiplicity pairs it refuses, `TYPE/MULT` with types B, Sp, SA",
        "and multiplicities 1, MH, hop, cap (`*` for all of them), `all` for all 12",
        "pairs; `ok` means all 12 pairs are valid.",
        "",
        "| score | dim. | " + " | ".join(ALIGNMENTS) + " |",
        "| --- | --- | " + " | ".join("---" for _ in ALIGNMENTS) + " |",
    ]
    for s in SCORES:
        for d in DIMENSIONALITIES:
            cells = []
            for a in ALIGNMENTS:
                by_reason: dict[str, list[tuple[str, str]]] = defaultdict(list)
                for q in QUERY_TYPES:
                    for m in MULTIPLICITIES:
                        r = results[Combo(s, a, d, q, m)]
                        if r is not None:
                            by_reason[",".join(f"R{number[x]}" for x in r)].append((q, m))
                cells.append("; ".join(f"{k}: {_pairs(v)}" for k, v in
                                       sorted(by_reason.items(), key=lambda kv: _rank(kv[0])))
                             or "ok")
            out.append(f"| {s} | {d} | " + " | ".join(cells) + " |")
    out += ["", "## Refused combinations, grouped", ""]
    groups: dict[tuple, list[Combo]] = defaultdict(list)
    for c, r in refused.items():
        groups[tuple(number[x] for x in r)].append(c)
    for key in sorted(groups):
        cs = groups[key]
        out.append(f"- {'+'.join(f'R{k}' for k in key)} ({len(cs)}): " + _describe(cs))
    out += render_pairs(pair_results)
    return "\n".join(out) + "\n"


def render_pairs(results: dict[Pair, list[tuple[str, str]] | None]) -> list[str]:
    refused = {pr: r for pr, r in results.items() if r is not None}
    reasons, number, count = _reasons(refused)
    out = [
        "",
        "## Pairs of mechanisms (the survey's §5)",
        "",
        "§5 proposes combining multi-dimensional, multi-head and capsule-based attention and",
        "the survey's other mechanisms in one model. `taxcompile.combinations.pair_text`",
        f"writes one spec per pair below ({len(results)} specs): capsules (eq. 43-45) with",
        f"`heads = {HEADS}` (each capsule's query split into heads, eq. 38, joined by W_O,",
        "eq. 40, before p_c and r_c, eq. 44-45) and over hops (hop 0: `attention caps "
        "{ query = learned(d) … capsules = 3 }`;",
        "then `feature q = caps` and `repeat hop 2 { attention att { query = q … capsules = 3 }",
        "update q = q + att }`: row c of the earlier hop's capsule output is capsule c's query,",
        "eq. 41); parallel co-attention through one affinity matrix `affinity(x, y, form =",
        "bilinear, act = tanh)` (eq. 12) in both directions, each direction with heads,",
        "multi-dimensional weights or capsules, on its own or sharing W_q and W_k (`share`,",
        "eq. 14-15); alternating co-attention (eq. 7-9) whose last module uses the first's",
        "weights (`share`, eq. 9), with multi-dimensional weights and heads on either.",
        "Every valid pair compiles, runs forward and backward and matches a float64 reference",
        "of its equations (`tests/test_combinations_s5.py`).",
        "",
        f"- **valid**: {len(results) - len(refused)}",
        f"- **refused** by `taxcompile check`: {len(refused)}",
        "",
        "| # | error | hint | specs |",
        "| --- | --- | --- | --- |",
    ]
    for r in reasons:
        out.append(f"| P{number[r]} | {_cell(r[0])} | {_cell(r[1])} | {count[r]} |")
    out += ["", "| spec | combines | verdict |", "| --- | --- | --- |"]
    for pr, r in results.items():
        v = "valid" if r is None else ", ".join(f"P{number[x]}" for x in r)
        out.append(f"| `{pr.name}` | {_cell(pr.mechanisms)} | {v} |")
    return out


def _rank(key: str) -> list[int]:
    return [int(x[1:]) for x in key.split(",")]


def _pairs(pairs: list[tuple[str, str]]) -> str:
    """``B/cap, Sp/cap`` or ``*/MH`` or ``all``: refused query type/multiplicity pairs."""
    if len(pairs) == len(QUERY_TYPES) * len(MULTIPLICITIES):
        return "all"
    out = []
    for m in MULTIPLICITIES:
        qs = [q for q in QUERY_TYPES if (q, m) in pairs]
        if len(qs) == len(QUERY_TYPES):
            out.append(f"*/{QM_ABBR[m]}")
        else:
            out += [f"{QT_ABBR[q]}/{QM_ABBR[m]}" for q in qs]
    return ", ".join(out)


FIELDS = ("score", "align", "dimensionality", "query_type", "multiplicity")


def _describe(cs: list[Combo]) -> str:
    """A set of combinations as a union of cross products, e.g.
    ``{general, location} × {hard} × {multi} × {basic, specialized} × {capsule}``."""
    return "; ".join(" × ".join("{" + ", ".join(v) + "}" for v in term)
                     for term in _products(cs))


def _products(cs: list[Combo]) -> list[list[list[str]]]:
    values = [sorted({getattr(c, f) for c in cs}, key=_order(f)) for f in FIELDS]
    size = 1
    for v in values:
        size *= len(v)
    if size == len(cs):
        return [values]
    # split on the dimension that gives the fewest products; merge values whose rest agrees
    best: list[list[list[str]]] | None = None
    for i in (i for i, v in builtins.enumerate(values) if len(v) > 1):
        parts: dict[str, list[Combo]] = defaultdict(list)
        for c in cs:
            parts[getattr(c, FIELDS[i])].append(c)
        merged: dict[str, list[str]] = {}
        rest_of: dict[str, list[list[list[str]]]] = {}
        for v in values[i]:
            terms = _products(parts[v])
            key = repr([t[:i] + t[i + 1:] for t in terms])
            merged.setdefault(key, []).append(v)
            rest_of[key] = terms
        out = [t[:i] + [vs] + t[i + 1:] for key, vs in merged.items() for t in rest_of[key]]
        if best is None or len(out) < len(best):
            best = out
    assert best is not None
    return best


def _order(field: str):
    seq = {"score": SCORES, "align": ALIGNMENTS, "dimensionality": DIMENSIONALITIES,
           "query_type": QUERY_TYPES, "multiplicity": MULTIPLICITIES}[field]
    return seq.index


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def main() -> int:
    sys.stdout.write(render(matrix()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
