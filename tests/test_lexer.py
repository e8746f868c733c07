"""The Pygments lexer for .attn specs (taxcompile/lexer.py)."""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name, get_lexer_for_filename
from pygments.token import (
    Comment,
    Error,
    Keyword,
    Name,
    Number,
    Operator,
    Punctuation,
    String,
    Whitespace,
)

from taxcompile.lexer import AttnLexer

SPECS = Path(__file__).resolve().parent.parent / "specs"


def spec_paths():
    return sorted(SPECS.glob("*.attn"))


def lex(text: str):
    return list(AttnLexer().get_tokens(text))


def expected_text(text: str) -> str:
    """What the tokens must add up to: the input after Pygments' own preprocessing
    (a leading BOM dropped, CR LF and CR made LF, a final newline ensured)."""
    if text.startswith("\ufeff"):
        text = text[1:]
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text if text.endswith("\n") else text + "\n"


def significant(tokens):
    """(type, value) pairs without whitespace."""
    return [(t, v) for t, v in tokens if v.strip()]


def types_of(tokens, value):
    return {t for t, v in tokens if v == value}


def test_specs_exist():
    assert len(spec_paths()) > 0


@pytest.mark.parametrize("path", spec_paths(), ids=lambda p: p.name)
def test_spec_lexes_without_errors_and_round_trips(path):
    text = path.read_text(encoding="utf-8")
    tokens = lex(text)
    errors = [(t, v) for t, v in tokens if t in Error]
    assert errors == []
    assert "".join(v for _, v in tokens) == expected_text(text)


def test_spot_checks_on_vaswani():
    tokens = significant(lex((SPECS / "vaswani2017.attn").read_text(encoding="utf-8")))
    # The first token is the leading comment.
    t, v = tokens[0]
    assert t in Comment.Single and v.startswith("# Vaswani et al. 2017")
    # paper id and the string field.
    i = tokens.index((Keyword.Declaration, "paper"))
    assert tokens[i + 1] == (Name.Class, "vaswani2017")
    assert (String.Double, "Vaswani et al.") in tokens
    assert (Number.Integer, "13") in tokens
    # Field names before `=`.
    assert types_of(tokens, "cite") == {Name.Attribute}
    assert types_of(tokens, "keys") == {Name.Attribute}
    assert types_of(tokens, "mask") == {Name.Attribute}
    # `query = …` inside an attention block is a field, not the statement keyword.
    assert types_of(tokens, "query") == {Name.Attribute}
    # Keywords and declared names.
    i = tokens.index((Keyword.Declaration, "attention"))
    assert tokens[i + 1] == (Name.Function, "self")
    i = tokens.index((Keyword.Declaration, "model"))
    assert tokens[i + 1] == (Name.Class, "transformer")
    i = tokens.index((Keyword.Declaration, "repeat"))
    assert tokens[i + 1] == (Name.Function, "encoder")
    i = tokens.index((Keyword.Declaration, "let"))
    assert tokens[i + 1] == (Name.Function, "d_model")
    assert (Keyword.Declaration, "feature") in tokens
    assert (Name.Function, "x") in tokens
    # Builtin feature-model calls, constants, pseudo keywords, input kinds.
    for fn in ("positional", "embed", "project", "norm", "ffn", "classify"):
        assert types_of(tokens, fn) == {Name.Builtin}, fn
    assert types_of(tokens, "causal") == {Name.Builtin}  # after `mask =`
    assert types_of(tokens, "autoregressive") == {Keyword.Pseudo}
    assert types_of(tokens, "tokens") == {Keyword.Type}
    assert types_of(tokens, "scaled_multiplicative") == {Name.Builtin}
    assert types_of(tokens, "sinusoid") == {Name.Builtin}
    # Operators and punctuation.
    assert types_of(tokens, "=") == {Operator}
    assert types_of(tokens, "+") == {Operator}
    assert types_of(tokens, "{") == {Punctuation}
    assert types_of(tokens, ",") == {Punctuation}


def test_spot_checks_on_small_text():
    text = (
        'paper p2020 { title = "a \\"quoted\\" title"  ref = 1 }  # note\n'
        "let d = 1.5e-3 * (2 + 3) / 4\n"
        "model base {\n"
        "    input x: sequence[L, 300] (L = 50)\n"
        "    affinity C = affinity(x, x, form = bilinear, act = tanh)\n"
        "    repeat hop 3 shared {\n"
        "        attention att { features = x  score = max_pool  align = local(D = 10)\n"
        "                        affinity = C  dimensionality = multi }\n"
        "        update x = norm(x + att)\n"
        "    }\n"
        "    output y = classify(hop.att, 2)\n"
        "}\n"
        "model v : base { let hard = 1 }\n"
    )
    tokens = lex(text)
    assert [t for t, _ in tokens if t in Error] == []
    assert "".join(v for _, v in tokens) == text
    sig = significant(tokens)
    assert (Comment.Single, "# note") in sig
    assert (String.Escape, '\\"') in sig
    assert (Number.Float, "1.5e-3") in sig
    assert (Number.Integer, "300") in sig
    assert (Keyword.Type, "sequence") in sig
    assert (Name.Function, "C") in sig
    # `affinity` as statement keyword, as builtin call and as field name.
    assert types_of(sig, "affinity") == {Keyword.Declaration, Name.Builtin, Name.Attribute}
    assert (Name.Function, "hop") in sig
    assert (Keyword.Pseudo, "shared") in sig
    assert (Name.Builtin, "max_pool") in sig
    assert (Name.Builtin, "local") in sig
    assert (Name.Builtin, "multi") in sig
    assert (Name.Builtin, "bilinear") in sig
    assert (Name.Builtin, "tanh") in sig
    assert (Name.Class, "v") in sig and (Name.Class, "base") in sig
    # A user's name that is also a library word stays a name when declared.
    assert (Name.Function, "hard") in sig
    assert all(t in Whitespace for t, v in tokens if not v.strip())


def test_registered_through_entry_point():
    assert isinstance(get_lexer_by_name("attn"), AttnLexer)
    assert isinstance(get_lexer_by_name("taxcompile"), AttnLexer)
    assert isinstance(get_lexer_for_filename("x.attn"), AttnLexer)


def test_analyse_text():
    text = (SPECS / "vaswani2017.attn").read_text(encoding="utf-8")
    assert AttnLexer.analyse_text(text) > 0
    assert AttnLexer.analyse_text("paper p { }\nmodel m { }\n") > 0
    assert AttnLexer.analyse_text("def f():\n    return 1\n") == 0


def test_html_highlighting():
    text = (SPECS / "vaswani2017.attn").read_text(encoding="utf-8")
    html = highlight(text, AttnLexer(), HtmlFormatter())
    assert 'class="c1"' in html  # Comment.Single
    assert 'class="kd"' in html  # Keyword.Declaration
    assert 'class="s2"' in html  # String.Double
    assert 'class="nb"' in html  # Name.Builtin
    assert 'class="err"' not in html


_TEXT = st.one_of(
    st.text(),
    st.lists(
        st.sampled_from([
            "paper", "model", "attention", "query", "affinity", "let", "repeat", "input",
            "x", "score", "=", ":", "(", ")", "{", "}", "[", "]", ",", ".", "+", "-", "*",
            "/", '"', "\\", "#", "\n", " ", "\t", "1", "2.5", "3e", "e-", "additive",
            "max_pool", "tokens", "true", "shared", "é", "∑", "\x00", "@", "'", "\r",
            "\ufeff",
        ]),
        max_size=60,
    ).map("".join),
)


@settings(derandomize=True, database=None, max_examples=100, deadline=None)
@given(_TEXT)
def test_random_text_round_trips(text):
    tokens = lex(text)
    assert "".join(v for _, v in tokens) == expected_text(text)
