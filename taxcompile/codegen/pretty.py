"""Line-wrapping pretty printer for generated Python code (standard library only).

``wrap(line, indent, width)`` turns one logical line of Python into physical lines of at most
``width`` columns (counting the caller's ``indent``), in the style of black / nanoGPT:

    self.proj = nn.ModuleList(
        nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False) for _ in range(cfg.layers)
    )

Design
------
* The line is tokenized with :mod:`tokenize` (an f-string is one atom on every Python version:
  on 3.12+ everything from ``FSTRING_START`` to its ``FSTRING_END`` is merged), brackets are
  matched, and every piece of output is a *span* of the original tokens, printed with its
  original spacing.  Line breaks are only ever inserted *inside* brackets, between tokens, so
  the result has exactly the input's tokens and therefore the same AST.
* ``_Layout.render`` lays out one span at one indentation: if it fits it stays on one line;
  otherwise each candidate split is laid out recursively and the one with the least overflow
  (then fewest lines, then preference) wins, so whenever a layout that fits exists among the
  candidates, one is found.  Candidates, in order of preference: inside brackets, a
  *delimiter split* (before the weakest-binding top-level delimiter: ``for``/``if`` of a
  comprehension, ``if``/``else``, ``and``/``or``, between implicitly concatenated strings,
  comparisons, then binary operators); then a *bracket split* at each top-level bracket pair
  (calls and displays before subscripts, longest contents first, rightmost first on ties):
  ``head(`` / the items between top-level commas, indented 4 more and packed greedily /
  ``)`` plus the rest.  A comprehension is one item and so is a lambda (its parameters'
  commas do not separate items); no trailing comma is ever added (one in the source is kept).
  A pair with under 10 characters inside (``[j]``, ``(-1)``) is split only when that makes
  everything fit.
* Results are memoized per (span, indent, suffix) and at most 6 bracket pairs are tried per
  span, so the search stays fast on long call chains; the output is deterministic.  As a last
  guard the output's token stream is compared with the input's; on any mismatch (or input
  that does not tokenize) the line is returned unchanged.

Limits (the output may then exceed ``width``): a statement without brackets (``x = a + b``,
``assert x, "msg"``, a long docstring) is never broken, and neither is statement-level text
between brackets (``a, b, c = self.f[j](``): no parentheses are added, no backslashes; an
atom (a long string, a long dotted name) is never broken, nor is ``kw=`` separated from its
value; a comment is word-wrapped but a single word longer than the width stays whole.
Because nothing is parenthesized, a statement-level expression is sometimes split at an odd
place when that is the only way to fit (``assert x.shape[`` / ``-1`` / ``] == d, "..."``).
A trailing pragma comment (``# noqa``, ``# type: ignore``) moved above its code loses its
effect.
"""

from __future__ import annotations

import io
import keyword
import textwrap
import tokenize
from typing import NamedTuple

__all__ = ["wrap", "wrap_comment"]

_FSTRING_STARTS = {t for t in (getattr(tokenize, "FSTRING_START", None),
                               getattr(tokenize, "TSTRING_START", None)) if t is not None}
_FSTRING_ENDS = {t for t in (getattr(tokenize, "FSTRING_END", None),
                             getattr(tokenize, "TSTRING_END", None)) if t is not None}
_SKIP = {tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT}
_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = {")", "]", "}"}

# Break priorities of the delimiter split (higher = split there first), after black.
_COMPREHENSION, _TERNARY, _LOGIC, _STRING, _COMPARATOR = 20, 16, 14, 12, 10
_BINARY = {"|": 8, "^": 7, "&": 6, "<<": 5, ">>": 5, "+": 4, "-": 4,
           "*": 3, "/": 3, "//": 3, "%": 3, "@": 3}
_COMPARISONS = {"<", ">", "==", "!=", "<=", ">="}
_MAX_CANDIDATES = 6  # bracket pairs tried per span (bounds the search on long call chains)
_TRIVIAL = 10  # a bracket pair with shorter contents is split only if that makes all fit


class _Tok(NamedTuple):
    type: int
    string: str
    start: int  # column of the first character
    end: int  # column after the last character


def wrap_comment(text: str, indent: int = 0, width: int = 100) -> list[str]:
    """A comment's text (without '# ') -> '# ...' lines, word-wrapped to fit.

    A word longer than the available width is kept whole (that line then exceeds ``width``).
    """
    text = text.rstrip()
    if not text.strip():
        return ["#"]
    if indent + 2 + len(text) <= width:
        return ["# " + text]
    chunks = textwrap.wrap(text, width=max(width - indent - 2, 1), break_long_words=False,
                           break_on_hyphens=False)
    return ["# " + c for c in chunks]


def wrap(line: str, indent: int = 0, width: int = 100) -> list[str]:
    """One logical line of Python (a statement without its leading indentation, possibly with a
    trailing `  # comment`) -> the physical lines, each WITHOUT the leading `indent` spaces
    (the caller adds them) but measured as if indented by `indent`; continuation lines carry
    their extra indentation. The result is valid Python with the same AST as the input.

    A line that fits is returned unchanged.  A trailing comment of a line that does not fit
    moves above the code (word-wrapped).  Code is broken only inside brackets; a statement
    without brackets, or an unbreakable atom longer than the width, is left too long.
    Input that does not tokenize (unbalanced brackets, several physical lines) is returned
    unchanged.
    """
    if indent + len(line) <= width or "\n" in line or "\r" in line:
        return [line]
    stripped = line.lstrip(" \t")
    if stripped != line:  # tolerate leading indentation: keep it on every line
        lead = line[: len(line) - len(stripped)]
        return [lead + out for out in wrap(stripped, indent + len(lead), width)]
    toks = _tokenize(line)
    if toks is None:
        return [line]
    comment = next((t for t in toks if t.type == tokenize.COMMENT), None)
    if comment is None:
        return _wrap_code(line, toks, indent, width)
    text = comment.string[1:]
    if text.startswith(" "):
        text = text[1:]
    code = line[: comment.start].rstrip()
    above = wrap_comment(text, indent, width)
    if not code:
        return above
    if indent + len(code) <= width:
        return above + [code]
    code_toks = _tokenize(code)
    if code_toks is None:
        return above + [code]
    return above + _wrap_code(code, code_toks, indent, width)


def _tokenize(src: str) -> list[_Tok] | None:
    """Significant tokens of a one-line source (f-strings merged into one STRING atom), or
    None when it does not tokenize cleanly."""
    try:
        raw = list(tokenize.generate_tokens(io.StringIO(src).readline))
    except (tokenize.TokenError, SyntaxError):
        return None
    out: list[_Tok] = []
    depth = 0  # nesting of f-strings (3.12+ tokenizes their insides)
    start = 0
    for t in raw:
        if t.type == tokenize.ERRORTOKEN or t.start[0] != 1 and t.type not in _SKIP:
            return None
        if t.type in _FSTRING_STARTS:
            if depth == 0:
                start = t.start[1]
            depth += 1
        elif t.type in _FSTRING_ENDS:
            depth -= 1
            if depth == 0:
                out.append(_Tok(tokenize.STRING, src[start:t.end[1]], start, t.end[1]))
        elif depth == 0 and t.type not in _SKIP:
            out.append(_Tok(t.type, t.string, t.start[1], t.end[1]))
    return None if depth else out


def _signature(src: str) -> list[tuple[int, str]] | None:
    """The raw token stream of (possibly multi-line) source, for the final sameness check:
    NL and COMMENT are dropped, a NEWLINE or INDENT in the middle is kept (and will differ)."""
    try:
        raw = list(tokenize.generate_tokens(io.StringIO(src).readline))
    except (tokenize.TokenError, SyntaxError):
        return None
    sig = [(t.type, t.string) for t in raw
           if t.type not in (tokenize.NL, tokenize.COMMENT, tokenize.ENDMARKER, tokenize.DEDENT)]
    while sig and sig[-1][0] == tokenize.NEWLINE:
        sig.pop()
    return sig


def _wrap_code(code: str, toks: list[_Tok], indent: int, width: int) -> list[str]:
    """Wrap code without a comment; falls back to ``[code]`` if anything looks wrong."""
    if not toks or indent + len(code) <= width:
        return [code]
    layout = _Layout(code, toks, width - indent)
    if layout.match is None:
        return [code]
    lines = list(layout.render(0, len(toks), 0, "", False))
    if lines == [code]:
        return lines
    if _signature("\n".join(lines)) != _signature(code):  # pragma: no cover - safety net
        return [code]
    return lines


def _operand_end(t: _Tok) -> bool:
    """Can ``t`` end an operand (so that a following ``-``/``*`` is binary)?"""
    if t.type in (tokenize.NUMBER, tokenize.STRING):
        return True
    if t.type == tokenize.NAME:
        return not keyword.iskeyword(t.string) or t.string in ("None", "True", "False")
    return t.type == tokenize.OP and (t.string in _CLOSE or t.string == "...")


class _Layout:
    """Layout search over the spans of one tokenized line."""

    def __init__(self, src: str, toks: list[_Tok], avail: int):
        self.src, self.toks, self.avail = src, toks, avail
        self.memo: dict[tuple, tuple[str, ...]] = {}
        self.match: dict[int, int] | None = {}
        stack: list[int] = []
        for k, t in enumerate(toks):
            if t.type != tokenize.OP:
                continue
            if t.string in _OPEN:
                stack.append(k)
            elif t.string in _CLOSE:
                if not stack or _OPEN[toks[stack[-1]].string] != t.string:
                    self.match = None
                    return
                self.match[stack.pop()] = k
        if stack:
            self.match = None

    # -- helpers ---------------------------------------------------------------------------
    def text(self, i: int, j: int) -> str:
        """Source text of tokens [i, j) with their original spacing."""
        return self.src[self.toks[i].start: self.toks[j - 1].end]

    def is_open(self, k: int) -> bool:
        t = self.toks[k]
        return t.type == tokenize.OP and t.string in _OPEN

    def cost(self, lines: tuple[str, ...]) -> int:
        return sum(max(0, len(s) - self.avail) for s in lines)

    def groups(self, i: int, j: int) -> list[tuple[int, int]]:
        """Top-level bracket pairs (open, close) lying wholly in [i, j), non-empty."""
        out, k = [], i
        while k < j:
            if self.is_open(k) and self.match[k] < j:
                if self.match[k] > k + 1:
                    out.append((k, self.match[k]))
                k = self.match[k] + 1
            else:
                k += 1
        return out

    # -- the search ------------------------------------------------------------------------
    def render(self, i: int, j: int, ind: int, suffix: str, inside: bool) -> tuple[str, ...]:
        """Lines for tokens [i, j) starting a line at relative indent ``ind``, with ``suffix``
        appended to the last line; ``inside``: the span is inside brackets (may break
        anywhere between tokens)."""
        key = (i, j, ind, suffix, inside)
        if key in self.memo:
            return self.memo[key]
        one = (" " * ind + self.text(i, j) + suffix,)
        if len(one[0]) <= self.avail or j - i < 2:
            self.memo[key] = one
            return one
        candidates = [one]
        if inside:
            cuts = self.delimiters(i, j)
            if cuts:
                candidates.append(self.delimiter_split(i, j, ind, suffix, cuts))
        for o, c in sorted(self.groups(i, j), key=self.preference)[:_MAX_CANDIDATES]:
            lines = self.bracket_split(i, j, o, c, ind, suffix, inside)
            # splitting `[j]` or `(-1)` off only to overflow a little less is not worth it
            if self.cost(lines) == 0 or self.toks[c].start - self.toks[o].end >= _TRIVIAL:
                candidates.append(lines)
        best = min(range(len(candidates)),
                   key=lambda n: (self.cost(candidates[n]), len(candidates[n]), n))
        self.memo[key] = candidates[best]
        return candidates[best]

    def preference(self, group: tuple[int, int]) -> tuple:
        """Sort key of the bracket pairs to split: calls and displays before subscripts, then
        longest contents first, then rightmost first."""
        o, c = group
        subscript = self.toks[o].string == "[" and o > 0 and _operand_end(self.toks[o - 1])
        return subscript, -(self.toks[c].start - self.toks[o].end), -o

    def bracket_split(self, i, j, o, c, ind, suffix, inside) -> tuple[str, ...]:
        """``head(`` / contents one level deeper / ``)`` + rest."""
        head = self.render(i, o + 1, ind, "", inside)
        body = self.pack(*self.items(o, c), ind + 4)
        tail = self.render(c, j, ind, suffix, inside)
        return head + body + tail

    def items(self, o: int, c: int) -> tuple[list[tuple[int, int]], bool]:
        """The comma-separated items inside the bracket pair (o, c), and whether a trailing
        comma follows the last one.  Commas of lambda parameters do not separate items; a
        comprehension is a single item."""
        toks, bounds, start, k, lambdas = self.toks, [], o + 1, o + 1, 0
        while k < c:
            t = toks[k]
            if self.is_open(k):
                k = self.match[k] + 1
                continue
            if t.type == tokenize.NAME and t.string == "lambda":
                lambdas += 1
            elif t.type == tokenize.NAME and t.string == "for":
                return [(o + 1, c)], False
            elif t.type == tokenize.OP and t.string == ":" and lambdas:
                lambdas -= 1
            elif t.type == tokenize.OP and t.string == "," and not lambdas:
                bounds.append((start, k))
                start = k + 1
            k += 1
        trailing = start == c and bool(bounds)
        if not trailing:
            bounds.append((start, c))
        return bounds, trailing

    def pack(self, items, trailing: bool, ind: int) -> tuple[str, ...]:
        """Items packed greedily, several per line while they fit, ``,`` after each but the
        last (and after the last one too if the source had a trailing comma)."""
        lines: list[str] = []
        cur: str | None = None
        for n, (a, b) in enumerate(items):
            sep = "," if n < len(items) - 1 or trailing else ""
            t = self.text(a, b)
            if cur is not None and len(cur) + 1 + len(t) + len(sep) <= self.avail:
                cur += " " + t + sep
                continue
            if cur is not None:
                lines.append(cur)
                cur = None
            if ind + len(t) + len(sep) <= self.avail:
                cur = " " * ind + t + sep
            else:
                lines.extend(self.render(a, b, ind, sep, True))
        if cur is not None:
            lines.append(cur)
        return tuple(lines)

    def delimiters(self, i: int, j: int) -> list[int]:
        """Token indices in (i, j) before which the span breaks at its weakest-binding
        top-level delimiter (empty if none)."""
        toks, found = self.toks, []
        seen_for = for_pending = False
        prev: _Tok | None = None
        k = i
        while k < j:
            t = toks[k]
            if self.is_open(k) and self.match[k] < j:
                prev = toks[self.match[k]]
                k = self.match[k] + 1
                continue
            nxt = toks[k + 1].string if k + 1 < j else None
            pri = 0
            s = t.string
            if t.type == tokenize.NAME:
                if s == "for":
                    seen_for = for_pending = True
                    pri = 0 if prev is not None and prev.string == "async" else _COMPREHENSION
                elif s == "async" and nxt == "for":
                    pri = _COMPREHENSION
                elif s == "if":
                    pri = _COMPREHENSION if seen_for else _TERNARY
                elif s == "else":
                    pri = _TERNARY
                elif s in ("and", "or"):
                    pri = _LOGIC
                elif s == "is" or s == "not" and nxt == "in":
                    pri = _COMPARATOR
                elif s == "in":
                    if for_pending:
                        for_pending = False
                    elif prev is None or prev.string != "not":
                        pri = _COMPARATOR
            elif prev is not None and t.type == tokenize.STRING:
                pri = _STRING if prev.type == tokenize.STRING else 0
            elif prev is not None and t.type == tokenize.OP and _operand_end(prev):
                pri = _COMPARATOR if s in _COMPARISONS else _BINARY.get(s, 0)
            if pri and k > i:
                found.append((pri, k))
            prev = t
            k += 1
        if not found:
            return []
        top = max(p for p, _ in found)
        return [k for p, k in found if p == top]

    def delimiter_split(self, i, j, ind, suffix, cuts) -> tuple[str, ...]:
        """Segments starting at the cut tokens, all at ``ind``, packed greedily."""
        bounds = [i, *cuts, j]
        lines: list[str] = []
        cur: tuple[int, int] | None = None
        pad = " " * ind
        for a, b in zip(bounds, bounds[1:]):
            sep = suffix if b == j else ""
            if cur is not None and ind + len(self.text(cur[0], b)) + len(sep) <= self.avail:
                cur = (cur[0], b)
                continue
            if cur is not None:
                lines.append(pad + self.text(*cur))
                cur = None
            if ind + len(self.text(a, b)) + len(sep) <= self.avail:
                cur = (a, b)
            else:
                lines.extend(self.render(a, b, ind, sep, True))
        if cur is not None:
            lines.append(pad + self.text(*cur) + (suffix if cur[1] == j else ""))
        return tuple(lines)
