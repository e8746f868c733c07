"""The formatter pass over a generated file (codegen/layout.py) finds the statements that
span several rows from the syntax tree, tokenizing only the headers of compound statements
that hold a long line: the same rows as Python's tokenizer over the whole file, at a
fraction of its cost."""

from __future__ import annotations

import io
import tokenize
import types
from pathlib import Path

import pytest

from taxcompile.codegen import layout as layout_module
from taxcompile.codegen.layout import layout
from taxcompile.codegen.pretty import wrap

ROOT = Path(__file__).resolve().parent.parent
FILES = sorted((ROOT / "generated").glob("*.py"))


def reference(source: str, width: int, keep: int) -> str:
    """The pass as Python's tokenizer reads the whole file: a row is left as it is when a
    token or a logical line spans it and another row."""
    lines = source.split("\n")
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return source
    spanned = set(range(1, keep + 1))
    first = None
    for t in toks:
        if t.type in (tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER) or \
                first is None and t.type in (tokenize.NL, tokenize.COMMENT):
            continue
        first = t.start[0] if first is None else first
        spanned.update(range(t.start[0], t.end[0] + 1) if t.end[0] > t.start[0] else ())
        if t.type == tokenize.NEWLINE:
            spanned.update(range(first, t.start[0] + 1) if t.start[0] > first else ())
            first = None
    out = []
    for row, line in enumerate(lines, 1):
        out.extend([line] if len(line) <= width or row in spanned else wrap(line, 0, width))
    return "\n".join(out)


COMPOUND = '''class A:
    @decorate(a,
              b)
    def f(self, x,
          y) -> int:  # a comment on a header row that is long enough to pass the width
        if (x and
                y):  # another long comment on a header row, long enough to be wrapped
            return [x, y, x, y, x, y, x, y, x, y, x, y, x, y, x, y, x, y, x, y, x, y, x]
        elif x:
            s = """a string
of two rows, the second one long enough to pass the width of sixty columns surely"""
        try:
            pass
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
            raise
        # a comment line between statements, long enough to pass the width of the file
        return x; y = (1,
                       2)
'''


@pytest.mark.parametrize("width", [100, 60, 40])
def test_the_rows_left_alone_are_those_the_tokenizer_finds(width):
    texts = [p.read_text(encoding="utf-8") for p in FILES[:8]] + [COMPOUND]
    texts += [t[: len(t) // 2] for t in texts]  # cut inside a statement: no syntax tree
    for text in texts:
        for keep in (0, 1):
            assert layout(text, width, keep) == reference(text, width, keep)


def test_only_headers_holding_a_long_line_are_tokenized(monkeypatch):
    tokenized = []
    real = tokenize.generate_tokens

    def counting(readline):
        text = "".join(iter(readline, ""))
        tokenized.append(text.count("\n"))
        return real(io.StringIO(text).readline)

    # the pass's own tokenizer (pretty.wrap, which wraps a line, has its own)
    monkeypatch.setattr(layout_module, "tokenize",
                        types.SimpleNamespace(**{**vars(tokenize), "generate_tokens": counting}))
    for path in FILES:
        text = path.read_text(encoding="utf-8")
        tokenized.clear()
        assert layout(text, 80, 1) == reference(text, 80, 1)
        assert sum(tokenized) < text.count("\n") / 10, (path.name, tokenized)
