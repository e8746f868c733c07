"""taxcompile/fastparse.py reads what lark reads, into the same AST, or gives up.

For every spec of the repository and many mutations of them (a token dropped, doubled,
swapped or replaced), the fast reader's AST must equal lark's (``parser.lark_parse``),
positions included, and it must give up wherever lark refuses the text: lark stays the
definition of the language. Its terminals are the grammar's own."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from taxcompile import fastparse, parser
from taxcompile.diagnostics import SpecError

ROOT = Path(__file__).resolve().parent.parent
FILES = sorted([*ROOT.glob("specs/*.attn"), *ROOT.glob("examples/*.attn"),
                *ROOT.glob("tests/data/**/*.attn"), *ROOT.glob("benchmarks/specs/*.attn")])


def _both(text: str):
    """(fast AST or None, lark's AST or its error message)."""
    fast = fastparse.parse(text, parser.MAX_EXPR_DEPTH, parser.MAX_NUMBER_CHARS)
    try:
        slow = parser.lark_parse(text, "t.attn")
    except SpecError as e:
        slow = e.render()
    built = parser._build(text)
    if isinstance(slow, str):
        assert built is None, text
    else:
        assert built is not None and built == slow, text
        assert len(text) > 900 or repr(built) == repr(slow), text
    if fast is not None:
        assert built is not None
    return fast, slow


def _agree(text: str) -> bool:
    """Whether the fast reader agrees with lark on ``text``; True when it read it."""
    fast, slow = _both(text)
    if fast is None:
        return False
    assert not isinstance(slow, str), f"fast path read what lark refuses ({slow}):\n{text}"
    assert fast == slow and repr(fast) == repr(slow), text
    return True


def _screened(path: Path) -> str | None:
    try:
        return parser.read_source(path)
    except SpecError:
        return None


def test_every_spec_reads_as_lark_reads_it():
    read = 0
    for path in FILES:
        text = _screened(path)
        if text is not None:
            read += _agree(text)
    # the specs and examples that parse all take the fast path
    for path in [*ROOT.glob("specs/*.attn"), *ROOT.glob("examples/*.attn")]:
        assert fastparse.parse(path.read_text(encoding="utf-8"), parser.MAX_EXPR_DEPTH,
                               parser.MAX_NUMBER_CHARS) is not None, path
    assert read > 40


_TOKEN = re.compile(r'"[^"\n]*"|[A-Za-z_]\w*|[0-9.eE]+|\S')
REPLACEMENTS = ["model", "feature", "repeat", "shared", "paper", "input", "query", "let", "x",
                "3", "2.5", "1e3", "007", '"s"', "(", ")", "[", "]", "{", "}", "=", ",", ":",
                ".", "+", "-", "*", "/", "#", "'", "attention", "a[1]", "f(x)", "k = 2"]


def _mutations(text: str, rng: random.Random, n: int):
    spans = [m.span() for m in _TOKEN.finditer(text)]
    for _ in range(n):
        i = rng.randrange(len(spans))
        a, b = spans[i]
        kind = rng.randrange(4)
        if kind == 0:  # drop a token
            yield text[:a] + text[b:]
        elif kind == 1:  # double it
            yield text[:b] + " " + text[a:b] + text[b:]
        elif kind == 2 and i + 1 < len(spans):  # swap it with the next one
            c, d = spans[i + 1]
            yield text[:a] + text[c:d] + text[b:c] + text[a:b] + text[d:]
        else:  # replace it
            yield text[:a] + rng.choice(REPLACEMENTS) + text[b:]


def test_mutated_specs_read_as_lark_reads_them_or_are_left_to_it():
    rng = random.Random(27)
    read = left = 0
    for path in sorted(ROOT.glob("specs/*.attn")):
        for text in _mutations(path.read_text(encoding="utf-8"), rng, 8):
            if _agree(text):
                read += 1
            else:
                left += 1
    assert read > 25 and left > 25  # both outcomes were exercised


@pytest.mark.parametrize("expr", [
    "a + b * c", "(a + b) * c", "((a)) * b", "-a + b", "- - a", "-(a + b) / 2",
    "f(x, k = (1 + 2)) - e[2].g", "a.b[1].c * (d - -e)", "1e3 + 2.5 - 007", '"s\\"t" + x',
    "f()", "f((a) * b, g(h(1)))", "(((1)))", "a - (b - (c - d))", "2 * -x * 3"])
def test_expression_positions_are_lark_propagated_ones(expr):
    """A binary operation sits where its left operand's text starts (an opening
    parenthesis included), a negation at its `-`: as lark's propagate_positions has it."""
    for text in (f"let v = {expr}\n", f"model m {{\n  feature  x =\n    {expr}  # c\n}}",
                 f"model m {{ input s: seq[T, {expr}] (dim = {expr}) repeat r {expr} shared "
                 f"{{ attention a {{ query = {expr} }} }} }}"):
        assert _agree(text), text


@pytest.mark.parametrize("text", [
    "model m { repeat r 2 let { } }", "model m { repeat r n model { } }",
    "model m { repeat r f(x) repeat { } }", "model m { repeat r (2) input { } }",
    "model m { repeat r 2 sharedx { } }", "model m { feature model = model }",
    "model m { input let: model[T] (feature = 1) }", "paper p { model = 1 query = (2) }",
    "model m: let { attention a { let = x.model } }", "let a = 1ex = 2", "let a = f(a = b = 1)"])
def test_keywords_where_names_stand(text):
    """A word spelled as a keyword where a name may stand: lark's contextual lexer reads it
    as the keyword where its parser state accepts one; the fast reader agrees or gives up."""
    _agree(text)


def test_every_keyword_in_place_of_a_name():
    """Each keyword in place of names of a few specs (lark may read it as the keyword or as
    a name, by the lookahead of its parser state): the fast reader agrees or gives up."""
    rng = random.Random(25)
    for path in sorted(ROOT.glob("specs/*.attn"))[::6]:
        text = path.read_text(encoding="utf-8")
        spans = [m.span() for m in re.finditer(r'(?<![\w."#])[A-Za-z_]\w*', text)]
        for a, b in rng.sample(spans, 3):
            for word in sorted(fastparse.KEYWORDS):
                _agree(text[:a] + word + text[b:])


def test_deep_expressions_and_long_numbers_are_left_to_lark():
    deep = "let d = " + " + ".join(["1"] * (parser.MAX_EXPR_DEPTH + 2))
    assert _both(deep)[0] is None and "nested more than" in _both(deep)[1]
    ok = "let d = " + " + ".join(["1"] * parser.MAX_EXPR_DEPTH)  # the deepest allowed
    fast, slow = _both(ok)
    assert fast is not None and not isinstance(slow, str)
    long = "let d = " + "1" * (parser.MAX_NUMBER_CHARS + 1)
    assert _both(long)[0] is None and "number literal" in _both(long)[1]
    negs = "let d = " + "-" * 5000 + "1"  # no recursion in the fast reader
    assert _both(negs)[0] is None


def test_terminals_are_the_grammars():
    lark = parser._parser()
    regex = {t.name: t.pattern.value for t in lark.terminals if t.pattern.type == "re"}
    assert {k: regex[k] for k in ("NAME", "NUMBER", "ESCAPED_STRING", "WS", "COMMENT")} == {
        "NAME": fastparse.NAME, "NUMBER": fastparse.NUMBER,
        "ESCAPED_STRING": fastparse.ESCAPED_STRING, "WS": fastparse.WS,
        "COMMENT": fastparse.COMMENT}
    words = {t.pattern.value for t in lark.terminals if t.pattern.type == "str"}
    assert {w for w in words if w.isidentifier()} == fastparse.KEYWORDS
    assert {w for w in words if not w.isidentifier()} == fastparse.PUNCTUATION
    assert set(lark.lexer_conf.ignore) == {"WS", "COMMENT"}  # what fastparse skips
