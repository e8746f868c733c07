"""A keyword is a whole word: one glued to the next word (`outputs = …`, `modelm { }`) is
a name, not the keyword and a name, and is refused with the usual located error.

lark's contextual lexer tries only the terminals that fit the parser's state; where only
keywords fit it once took a keyword's prefix of a longer word (`outputs` read as
`output s`), and ``fmt`` rewrote the line in that reading. Every keyword of the grammar
(read from the grammar, not listed here) is glued to its statement's name at every place
a statement can stand; the parser (building the AST as it parses, and reading into
a tree) and ``fmt`` must all refuse it."""

from __future__ import annotations

import pytest

from taxcompile import fmt, parser
from taxcompile.diagnostics import SpecError


def _grammar_keywords() -> set[str]:
    return set(parser._keywords().values())


# keyword -> its statement after the keyword and one space: `NAME …`
STATEMENT = {
    "paper": "p { ref = 1 }",
    "let": "d = 3",
    "model": "m { }",
    "input": "x: tokens[S]",
    "feature": "x = a",
    "query": "x = a",
    "output": "x = classify(a, 3)",
    "update": "x = a",
    "affinity": "x = a",
    "attention": "a { }",
    "repeat": "r 2 { }",
}
TOP = {"paper", "let", "model"}
BODY = {"input", "feature", "query", "output", "update", "affinity", "attention", "repeat",
        "let"}

# Places a statement can stand: (text before it, text after it, its kind of place).
PLACES = [
    ("", "", TOP),
    ('paper p { cite = "X" }\n', "", TOP),
    ("let d = 3\n", "", TOP),
    ("let d = f(a)\n", "", TOP),
    ("model m { }\n", "", TOP),
    ("model m : n { feature x = a }\n", "", TOP),
    ("model m {\n    ", "\n}\n", BODY),
    ("model m {\n    feature x = a\n    ", "\n}\n", BODY),
    ("model m {\n    feature x = a.b[2]\n    ", "\n}\n", BODY),
    ("model m {\n    feature x = f(a, k = 2)\n    ", "\n}\n", BODY),
    ("model m {\n    feature x = (a + 2.5)\n    ", "\n}\n", BODY),
    ("model m {\n    let d = 3\n    ", "\n}\n", BODY),
    ("model m {\n    input s: tokens[S]\n    ", "\n}\n", BODY),
    ("model m {\n    input s: tokens[S] (vocab = 3)\n    ", "\n}\n", BODY),
    ("model m {\n    attention b { query = q }\n    ", "\n}\n", BODY),
    ("model m {\n    repeat r 2 { }\n    ", "\n}\n", BODY),
    ("model m {\n    repeat r 2 {\n        ", "\n    }\n}\n", BODY),
    ("model m {\n    repeat r 2 shared {\n        ", "\n    }\n}\n", BODY),
    ("model m {\n    repeat r 2 { feature y = b }\n    ", "\n}\n", BODY),
]


def test_the_statement_table_covers_every_keyword_of_the_grammar():
    assert set(STATEMENT) == _grammar_keywords()
    assert TOP | BODY == _grammar_keywords()


@pytest.mark.parametrize("before,after,valid", PLACES)
def test_each_place_takes_its_keywords_apart(before, after, valid):
    """The places are right: each keyword that may stand there parses, spaced."""
    for word in sorted(valid):
        text = before + f"{word} {STATEMENT[word]}" + after
        assert parser.lark_parse(text, "t.attn") is not None, text
        assert parser._build(text) is not None, text


def _glued_cases():
    for word in sorted(_grammar_keywords()):
        for before, after, _ in PLACES:
            yield pytest.param(word, before, after, id=f"{word}@{len(before)}:{before[:24]!r}")


@pytest.mark.parametrize("word,before,after", list(_glued_cases()))
def test_a_glued_keyword_is_refused_where_it_stands(word, before, after):
    glued = word + STATEMENT[word]  # `outputx = …`, `modelm { }`, `repeatr 2 { }`
    text = before + glued + after
    line = before.count("\n") + 1
    column = len(before) - (before.rfind("\n") + 1) + 1
    found = "found `" + glued.split()[0].rstrip(":") + "`"
    assert parser._build(text) is None, text
    for read in (parser.parse_text, fmt.format_text):
        with pytest.raises(SpecError) as info:
            read(text, "t.attn")
        first = info.value.diagnostics[0]
        assert (first.loc.line, first.loc.column) == (line, column), (text, info.value.render())
        assert found in first.message, (text, info.value.render())
        assert first.message.startswith("expected"), (text, info.value.render())


@pytest.mark.parametrize("text,message", [
    ("model m {\n    outputs = classify(a, 3)\n}\n",
     "expected a statement (`input`, `feature`, `query`, `output`, `update`, `attention`, "
     "`affinity`, `repeat` or `let`); found `outputs`"),
    ("modelm { }\n", "expected `paper`, `let` or `model` at the top level; found `modelm`"),
])
def test_the_message_is_the_usual_one(text, message):
    with pytest.raises(SpecError) as info:
        parser.parse_text(text, "t.attn")
    assert info.value.diagnostics[0].message == message


@pytest.mark.parametrize("label", sorted(parser._EXAMPLES))
def test_each_syntax_example_is_told_by_its_own_label(label):
    """The examples that teach the syntax-error classes are each recognised as their own
    class (an example at the wrong place, such as an `attention` block at the top level,
    once taught the top-level state the field-name message)."""
    from lark import UnexpectedInput

    for example in parser._EXAMPLES[label][1]:
        with pytest.raises(UnexpectedInput) as info:
            parser._parser().parse(example)
        assert parser._match(info.value) == label, example
