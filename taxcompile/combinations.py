"""The cross product of one attention module's mechanisms.

Score × alignment × dimensionality × query type × query multiplicity (Table III's
per-module dimensions): 9 × 6 × 2 × 3 × 4 = 1296 combinations. ``spec_text`` writes
the ``.attn`` spec of one combination, ``enumerate`` yields them all. Nothing here
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

SCORES = ("additive", "concat", "multiplicative", "scaled_multiplicative", "general",
          "biased_general", "activated_general", "similarity", "location")
ALIGNMENTS = ("global", "hard", "local", "reinforced", "sparsemax", "entmax")
DIMENSIONALITIES = ("single", "multi")
QUERY_TYPES = ("basic", "specialized", "self_attentive")
MULTIPLICITIES = ("singular", "multi_head", "multi_hop", "capsule")

# How each value is written in a spec.
ALIGN_TEXT = {"local": "local(D = 2, position = predictive)"}
QUERY_TEXT = {"basic": "s", "specialized": "pre", "self_attentive": "learned(d)"}

# The Table III label each value should classify as (classify.py's vocabulary).
LABELS = {
    "scoring": {"additive": "Additive", "concat": "Additive", "multiplicative": "Multiplicative",
                "scaled_multiplicative": "Scaled Multiplicative", "general": "General",
                "biased_general": "Biased General", "activated_general": "Activated General",
                "similarity": "Similarity", "location": "Location"},
    "alignment": {"global": "Global", "hard": "Hard", "local": "Local", "reinforced": "Reinforced",
                  "sparsemax": "Sparse", "entmax": "Sparse"},
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
    if c.align != "global":
        fields.append(("align", ALIGN_TEXT.get(c.align, c.align)))
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


# ---- the validity matrix ---------------------------------------------------------------

FILE = "combo.attn"


def verdict(c: Combo, text: str) -> list[tuple[str, str]] | None:
    """None when ``taxcompile check`` accepts the spec, else its (message, hint) pairs,
    made generic: without the module's name (`att`, `hop[2].att`) and with the
    combination's score written `SCORE`, so one rule gives one reason."""
    from .diagnostics import SpecError
    from .pipeline import load_text

    try:
        load_text(text, FILE)
    except SpecError as e:
        out = []
        for d in e.diagnostics:
            reason = (_generic(d.message, c), _generic(d.hint, c))
            if reason not in out:
                out.append(reason)
        return out
    return None


def _generic(text: str, c: Combo) -> str:
    text = re.sub(r"attention `[\w.\[\]]+`: ", "", text)
    return text.replace(f"`{c.score}`", "`SCORE`")


def matrix() -> dict[Combo, list[tuple[str, str]] | None]:
    return {c: verdict(c, t) for c, t in enumerate()}


QT_ABBR = {"basic": "B", "specialized": "Sp", "self_attentive": "SA"}
QM_ABBR = {"singular": "1", "multi_head": "MH", "multi_hop": "hop", "capsule": "cap"}


def render(results: dict[Combo, list[tuple[str, str]] | None]) -> str:
    total = len(results)
    refused = {c: r for c, r in results.items() if r is not None}
    reasons: list[tuple[str, str]] = []
    for r in refused.values():
        for x in r:
            if x not in reasons:
                reasons.append(x)
    number = {r: i for i, r in zip(range(1, len(reasons) + 1), reasons)}
    count = Counter(x for r in refused.values() for x in r)
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
        "forward and backward, and classifies back to the values it was built from",
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
        "| alignment | " + ", ".join(f"`{ALIGN_TEXT.get(a, a)}`" for a in ALIGNMENTS) + " |",
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
    return "\n".join(out) + "\n"


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
