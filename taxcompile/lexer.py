"""A Pygments lexer for the ``.attn`` spec language (see docs/language.md).

Registered as the ``attn`` lexer through the ``pygments.lexers`` entry point in
pyproject.toml, so ``pygmentize -l attn spec.attn`` and ``get_lexer_for_filename``
find it once the package is installed. Its words come from the registries: the feature
models from the operators' (``ops.CALLS``), the mechanisms and their options from
``taxcompile/mechanisms`` (``mechanism_names``), so a new one is highlighted unedited.
"""

from __future__ import annotations

import re

from pygments.lexer import RegexLexer, bygroups, default, words
from pygments.token import (
    Comment,
    Keyword,
    Name,
    Number,
    Operator,
    Punctuation,
    String,
    Whitespace,
)

from .mechanism_names import names, param_choices
from .ops import ACTIVATIONS, CALLS

__all__ = ["AttnLexer"]

#: An identifier, as the grammar's NAME terminal (ASCII only).
NAME = r"[A-Za-z_][A-Za-z0-9_]*"
#: The end of a word: no identifier character follows.
_END = r"(?![A-Za-z0-9_])"

#: Statement keywords whose next word is a declared name.
_DECLS = ("feature", "query", "output", "update", "affinity", "attention", "repeat", "let")
#: All block/statement keywords.
_KEYWORDS = ("paper", "model", "input") + _DECLS

#: Feature models of the library (docs/language.md, "Feature models"): the operator registry.
FEATURE_MODELS = tuple(CALLS)
#: Score functions (Table II) and alignment functions, as the mechanism registry spells them.
SCORES = names("score")
ALIGNMENTS = names("align")
#: The other mechanisms a field names (`position = rotary`, `bias = alibi`, `mask = causal`,
#: `heads_out = project`, `penalty = coverage(…)`).
MECHANISMS = tuple(n for kind in ("position", "bias", "mask", "heads_out", "penalty")
                   for n in names(kind))
#: Input kinds (``input x: KIND[...]``).
INPUT_KINDS = ("tokens", "sequence", "grid", "set", "vector", "alignment", "pointers",
               "mask", "graph")
#: Option words used as values of keyword arguments and fields: the mechanisms above, the
#: choices of the mechanisms' and operators' parameters, the activations, and the values
#: of the fields no record lists (`dimensionality`, `talking_heads`).
OPTIONS = tuple(dict.fromkeys(
    MECHANISMS + param_choices() + tuple(ACTIVATIONS)
    + tuple(c for params in CALLS.values() for p in params for c in p.choices or ())
    + ("single", "multi", "pre", "post")))
#: Fields and keyword arguments whose value is a library word (a score, an alignment,
#: an option): the word after ``=`` is highlighted as a builtin there only, so that a
#: user's name such as ``hard`` or ``max`` elsewhere stays a plain name.
_OPTION_FIELDS = ("score", "align", "dimensionality", "act", "kind", "position", "form", "mode",
                  "mask", "heads_out", "talking_heads", "bias", "penalty", "on", "loss")

_BUILTIN_VALUES = tuple(sorted(set(SCORES + ALIGNMENTS + OPTIONS)))
_CALLABLES = tuple(sorted(set(FEATURE_MODELS + SCORES + ALIGNMENTS)))


def _word_list(items):
    # Longest first so that `max_pool` wins over `max`; the lookahead ends the word.
    return "(?:" + "|".join(sorted(map(re.escape, items), key=len, reverse=True)) + ")"


class AttnLexer(RegexLexer):
    """Lexer for taxcompile's ``.attn`` attention-model specs."""

    name = "attn"
    aliases = ["attn", "taxcompile"]
    filenames = ["*.attn"]
    mimetypes = ["text/x-attn"]
    flags = re.MULTILINE

    def __init__(self, **options):
        # Keep leading and trailing blank lines, so that the tokens' values add up to
        # the input (Pygments still normalises newlines and drops a leading BOM).
        options.setdefault("stripnl", False)
        super().__init__(**options)

    tokens = {
        "root": [
            (r"\s+", Whitespace),
            (r"#[^\n]*", Comment.Single),
            (r'"', String.Double, "string"),
            # Numbers: the grammar's NUMBER (ints, decimals, exponents).
            (r"[0-9]+(?:\.[0-9]+(?:[eE][+-]?[0-9]+)?|[eE][+-]?[0-9]+)", Number.Float),
            (r"[0-9]+", Number.Integer),
            # paper ID / model NAME [: BASE]
            (r"(paper)(\s+)(" + NAME + ")" + _END,
             bygroups(Keyword.Declaration, Whitespace, Name.Class)),
            (r"(model)(\s+)(" + NAME + r")(\s*)(:)(\s*)(" + NAME + ")" + _END,
             bygroups(Keyword.Declaration, Whitespace, Name.Class, Whitespace,
                      Operator, Whitespace, Name.Class)),
            (r"(model)(\s+)(" + NAME + ")" + _END,
             bygroups(Keyword.Declaration, Whitespace, Name.Class)),
            # input NAME : KIND [ ... ]
            (r"(input)(\s+)(" + NAME + r")(\s*)(:)(\s*)(" + NAME + ")" + _END,
             bygroups(Keyword.Declaration, Whitespace, Name.Function, Whitespace,
                      Operator, Whitespace, Keyword.Type)),
            (r"(input)(\s+)(" + NAME + ")" + _END,
             bygroups(Keyword.Declaration, Whitespace, Name.Function)),
            # feature/query/output/update/affinity/attention/repeat/let NAME
            (r"(" + _word_list(_DECLS) + r")(\s+)(" + NAME + ")" + _END,
             bygroups(Keyword.Declaration, Whitespace, Name.Function)),
            # A field or keyword argument whose value is a library word.
            (r"(" + _word_list(_OPTION_FIELDS) + r")(\s*)(=)(\s*)",
             bygroups(Name.Attribute, Whitespace, Operator, Whitespace), "option-value"),
            # Any other field (`keys = h`, `query = s`) or keyword argument (`d_w = 1000`);
            # statement keywords may be field names, so this comes before the keywords.
            (r"(" + NAME + r")(\s*)(=)", bygroups(Name.Attribute, Whitespace, Operator)),
            # Library calls: feature models, scores, alignments followed by `(`
            # (before the keywords: `affinity(A, B)` is a call).
            (_word_list(_CALLABLES) + r"(?=\s*\()", Name.Builtin),
            (_word_list(_KEYWORDS) + _END, Keyword.Declaration),
            (words(("true", "false"), suffix=_END), Keyword.Constant),
            (words(("shared", "autoregressive"), suffix=_END), Keyword.Pseudo),
            # `tokens[S]`, `grid[H, W, C]` outside an input statement's usual layout.
            (_word_list(INPUT_KINDS) + r"(?=\s*\[)", Keyword.Type),
            (NAME, Name),
            (r"[+\-*/=:]", Operator),
            (r"[{}()\[\],.]", Punctuation),
        ],
        "option-value": [
            (_word_list(_BUILTIN_VALUES) + _END, Name.Builtin, "#pop"),
            default("#pop"),
        ],
        "string": [
            (r'[^"\\\n]+', String.Double),
            (r"\\(?:.|\n)", String.Escape),
            (r'"', String.Double, "#pop"),
            # An unterminated string ends at the line's end (error recovery).
            (r"\n", Whitespace, "#pop"),
        ],
    }

    def analyse_text(text):
        """Spec files open with a `paper ID {` block and have `model NAME {` blocks."""
        paper = re.search(r"^\s*paper\s+" + NAME + r"\s*\{", text, re.MULTILINE)
        model = re.search(r"^\s*model\s+" + NAME + r"\s*(?::\s*" + NAME + r"\s*)?\{",
                          text, re.MULTILINE)
        if paper and model:
            return 0.9
        if paper or model:
            return 0.1
        return 0.0
