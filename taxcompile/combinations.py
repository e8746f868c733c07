"""The cross product of one attention module's mechanisms.

Score × alignment × dimensionality × query type × query multiplicity (Table III's
per-module dimensions): every score and alignment of the registry (docs/combinations.md
gives the count). ``spec_text`` writes
the ``.attn`` spec of one combination, ``enumerate`` yields them all (both in
``combination_space.py``, re-exported here). ``pairs`` adds
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

from .combination_space import (  # noqa: F401  (this module's names for its importers)
    AFFINITY_ONLY, ALIGN_TEXT, ALIGNMENTS, ALT_DIMS, CAPSULE_EXTRAS, CAPSULES, CLASSES,
    CO_EXTRAS, CO_SCORES, DEFAULT_ALIGN, DIMENSIONALITIES, HEADS, HEADS_OUTS, HOPS, LABELS,
    MULTIPLICITIES, OUTSIDE, QUERY_TEXT, QUERY_TYPES, SCORES, SHORT, Combo, D, N, Pair,
    combos, enumerate, pair_text, pairs, spec_text)


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
    """docs/combinations.md: the counts, the refusal reasons, the matrix, the refused
    combinations grouped, and the §5 pairs."""
    if pair_results is None:
        pair_results = pair_matrix()
    refused = {c: r for c, r in results.items() if r is not None}
    reasons, number, count = _reasons(refused)
    out = _intro(len(results), refused)
    for r in reasons:
        out.append(f"| R{number[r]} | {_cell(r[0])} | {_cell(r[1])} | {count[r]} |")
    out += _NOTES + _matrix(results, number) + _grouped(refused, number)
    out += render_pairs(pair_results)
    return "\n".join(out) + "\n"


def _intro(total: int, refused: dict) -> list[str]:
    """The title, the counts, how each value is built, and the reasons table's head."""
    one_each = all(len(r) == 1 for r in refused.values())
    return [
        "# Combinations of one attention module",
        "",
        "<!-- generated by `python -m taxcompile.combinations > docs/combinations.md`; "
        "do not edit -->",
        "",
        "Every combination of score × alignment × dimensionality × query type × query",
        f"multiplicity for a single attention module: {len(SCORES)} × {len(ALIGNMENTS)} × "
        f"{len(DIMENSIONALITIES)} × {len(QUERY_TYPES)} × {len(MULTIPLICITIES)} = {total}.",
        "`taxcompile.combinations.spec_text` writes the spec of each; this matrix records",
        "what `taxcompile check` says about it. Every accepted combination classifies back",
        "to its values, and compiles and runs forward and backward (the alignments added",
        "after it first ran with two scores; `make fuzz` runs them all, the test suite a",
        "fixed third) (`tests/test_combinations.py`).",
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


# after the reasons: what the matrix cannot show, then its head
_NOTES = [
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
    "`kv_heads`), like position terms and biases, change no Table III cell: no dimension",
    "here. `qk_norm = l2` (one group, no gains) makes a q·k score a cosine times a scale,",
    "read as Similarity: the same cell as the `similarity` row.",
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


def _matrix(results: dict, number: dict) -> list[str]:
    """A row per score and dimensionality, a cell per alignment."""
    out = []
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
    return out


def _grouped(refused: dict, number: dict) -> list[str]:
    """The refused combinations by their reasons, each set a union of cross products."""
    out = ["", "## Refused combinations, grouped", ""]
    groups: dict[tuple, list[Combo]] = defaultdict(list)
    for c, r in refused.items():
        groups[tuple(number[x] for x in r)].append(c)
    for key in sorted(groups):
        cs = groups[key]
        out.append(f"- {'+'.join(f'R{k}' for k in key)} ({len(cs)}): " + _describe(cs))
    return out


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
