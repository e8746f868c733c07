"""A Pygments lexer for the ``.attn`` spec language (see docs/language.md).

Registered as the ``attn`` lexer through the ``pygments.lexers`` entry point in
pyproject.toml, so ``pygmentize -l attn spec.attn`` and ``get_lexer_for_filename``
find it once the package is installed. Its words come from ``vocabulary.py``, which the
VS Code extension's TextMate grammar is generated from too: the keywords from the grammar,
the feature models from the operators' registry (``ops.CALLS``), the mechanisms and their
options from ``taxcompile/mechanisms``, so a new one is highlighted unedited.
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

from .vocabulary import vocabulary

__all__ = ["AttnLexer"]

#: An identifier, as the grammar's NAME terminal (ASCII only).
NAME = r"[A-Za-z_][A-Za-z0-9_]*"
#: The end of a word: no identifier character follows.
_END = r"(?![A-Za-z0-9_])"

# The word lists, shared with the VS Code extension's TextMate grammar (vocabulary.py).
_V = vocabulary()
#: Statement keywords whose next word is a declared name.
_DECLS = _V.declaring
#: All block/statement keywords (the grammar's).
_KEYWORDS = _V.keywords
#: Feature models of the library (docs/language.md, "Feature models"): the operator registry.
FEATURE_MODELS = _V.feature_models
#: Score functions (Table II) and alignment functions, as the mechanism registry spells them.
SCORES = _V.scores
ALIGNMENTS = _V.alignments
#: The other mechanisms a field names (`position = rotary`, `bias = alibi`, `mask = causal`,
#: `heads_out = project`, `penalty = coverage(…)`).
MECHANISMS = _V.mechanisms
#: Input kinds (``input x: KIND[...]``).
INPUT_KINDS = _V.input_kinds
#: Option words used as values of keyword arguments and fields.
OPTIONS = _V.options
#: Fields and keyword arguments whose value is a library word (a score, an alignment,
#: an option): the word after ``=`` is highlighted as a builtin there only, so that a
#: user's name such as ``hard`` or ``max`` elsewhere stays a plain name.
_OPTION_FIELDS = _V.option_fields

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
            (words(_V.constants, suffix=_END), Keyword.Constant),
            (words(_V.modifiers, suffix=_END), Keyword.Pseudo),
            # `tokens[S]`, `grid[H, W, C]` outside an input statement's usual layout.
            (_word_list(INPUT_KINDS) + r"(?=\s*\[)", Keyword.Type),
            (NAME, Name),
            ("[" + re.escape(_V.operators) + "]", Operator),
            ("[" + re.escape(_V.punctuation) + "]", Punctuation),
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
