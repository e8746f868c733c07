"""The formatter pass over a finished generated file: every line too long is wrapped by
``pretty.wrap``, once, after the whole file is rendered (no fragment is wrapped before)."""

from __future__ import annotations

import io
import tokenize

from .pretty import wrap


def layout(source: str, width: int = 100, keep: int = 0) -> str:
    """A whole file with every one-line statement or comment line longer than ``width``
    wrapped (``wrap``): the formatter pass over a finished generated file. Lines inside a
    multi-line string and statements already spanning several lines are left as they are;
    a file that does not tokenize is returned unchanged. The first ``keep`` lines stay as
    they are (a generated file's ``@generated`` header is one line, however long)."""
    lines = source.split("\n")
    if all(len(line) <= width for line in lines[keep:]):
        return source
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return source
    fixed = set(range(1, keep + 1))  # 1-based rows left as they are: those, and the rows
    # of a multi-line token or statement
    start = None  # the first row of the logical line being read
    for t in toks:
        if t.type in (tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER) or \
                start is None and t.type in (tokenize.NL, tokenize.COMMENT):
            continue
        start = t.start[0] if start is None else start
        if t.end[0] > t.start[0]:
            fixed.update(range(t.start[0], t.end[0] + 1))
        if t.type == tokenize.NEWLINE:
            if t.start[0] > start:
                fixed.update(range(start, t.start[0] + 1))
            start = None
    out: list[str] = []
    for row, line in enumerate(lines, 1):
        out.extend([line] if len(line) <= width or row in fixed else wrap(line, 0, width))
    return "\n".join(out)
