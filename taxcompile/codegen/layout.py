"""The formatter pass over a finished generated file: every line too long is wrapped by
``pretty.wrap``, once, after the whole file is rendered (no fragment is wrapped before)."""

from __future__ import annotations

import ast
import io
import tokenize

from .pretty import wrap

_COMPOUND_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")


def layout(source: str, width: int = 100, keep: int = 0) -> str:
    """A whole file with every one-line statement or comment line longer than ``width``
    wrapped (``wrap``): the formatter pass over a finished generated file. Lines inside a
    multi-line string and statements already spanning several lines are left as they are;
    a file that does not tokenize is returned unchanged. The first ``keep`` lines stay as
    they are (a generated file's ``@generated`` header is one line, however long)."""
    lines = source.split("\n")
    long = [row for row, line in enumerate(lines, 1) if row > keep and len(line) > width]
    if not long:
        return source
    fixed = _fixed_rows(source, lines, long)
    if fixed is None:  # it does not parse: Python's tokenizer tells the logical lines
        try:
            fixed = _token_rows(tokenize.generate_tokens(io.StringIO(source).readline))
        except (tokenize.TokenError, SyntaxError):
            return source
    out: list[str] = []
    for row, line in enumerate(lines, 1):
        out.extend([line] if len(line) <= width or row <= keep or row in fixed
                   else wrap(line, 0, width))
    return "\n".join(out)


def _token_rows(toks, offset: int = 0) -> set[int]:
    """The 1-based rows of a multi-line token or of a logical line spanning several rows."""
    fixed: set[int] = set()
    start = None  # the first row of the logical line being read
    for t in toks:
        if t.type in (tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER) or \
                start is None and t.type in (tokenize.NL, tokenize.COMMENT):
            continue
        start = t.start[0] if start is None else start
        if t.end[0] > t.start[0]:
            fixed.update(range(t.start[0] + offset, t.end[0] + offset + 1))
        if t.type == tokenize.NEWLINE:
            if t.start[0] > start:
                fixed.update(range(start + offset, t.start[0] + offset + 1))
            start = None
    return fixed


def _fixed_rows(source: str, lines: list[str], rows: list[int]) -> set[int] | None:
    """``_token_rows`` of the whole file, for ``rows`` only, from its syntax tree (a
    generated file is some 700 lines, and Python's tokenizer, written in Python, took
    half of code generation's time): a simple statement or decorator is one logical line
    from its first row to its last; a compound statement's header (up to its body) is
    tokenized alone. None where the source does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    spans: list[tuple[int, int]] = []  # simple statements and decorators spanning rows
    headers: list[tuple[int, int]] = []  # compound statements' rows before their body
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        for d in getattr(node, "decorator_list", ()):
            if d.end_lineno > d.lineno:
                spans.append((d.lineno, d.end_lineno))
        inner = [s for field in _COMPOUND_BODIES for s in getattr(node, field, ())]
        if not inner:
            if node.end_lineno > node.lineno:
                spans.append((node.lineno, node.end_lineno))
            continue
        if not all(hasattr(s, "lineno") for s in inner):  # match cases: no rows to read
            return None
        headers.append((node.lineno, min(s.lineno for s in inner) - 1))
        stack.extend(inner)
    fixed = {row for row in rows if any(a <= row <= b for a, b in spans)}
    for a, b in headers:
        if any(a <= row <= b for row in rows):
            text = "\n".join(lines[a - 1:b]) + "\n"
            try:
                fixed |= _token_rows(tokenize.generate_tokens(io.StringIO(text).readline),
                                     a - 1)
            except (tokenize.TokenError, SyntaxError):
                return None
    return fixed
