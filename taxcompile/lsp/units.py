"""Columns as the client counts them. The checker's columns are characters (code points);
an LSP position's `character` counts the code units of the encoding agreed at
initialisation, UTF-16 unless the client offers another: a character beyond the Basic
Multilingual Plane (an emoji, a rare CJK ideograph) is two UTF-16 units. Positions are
turned into characters where a request comes in and every position of an answer into the
client's units where it goes out, against the document's lines split at "\\n" as the
checker splits them."""

from __future__ import annotations

import attrs
from lsprotocol import types as t


def _width(ch: str, encoding: str) -> int:
    if encoding == t.PositionEncodingKind.Utf32:
        return 1
    if encoding == t.PositionEncodingKind.Utf8:
        return len(ch.encode("utf-8", "surrogatepass"))
    return 2 if ord(ch) > 0xFFFF else 1


def to_chars(line: str, units: int, encoding: str) -> int:
    """The character index of code unit ``units`` of ``line`` (past its end: its length)."""
    seen = 0
    for i, ch in enumerate(line):
        if seen >= units:
            return i
        seen += _width(ch, encoding)
    return len(line)


def to_units(line: str, chars: int, encoding: str) -> int:
    """The code units of the first ``chars`` characters of ``line`` (past its end: added as
    one unit each, so a position just after the line stays just after it)."""
    head = line[:chars]
    return sum(_width(ch, encoding) for ch in head) + max(chars - len(line), 0)


def outgoing(obj, lines: list[str], encoding: str):
    """``obj`` (an answer: lsprotocol objects, lists, dicts) with every position's character
    turned from characters into the client's units, in place; returns ``obj``."""
    if encoding == t.PositionEncodingKind.Utf32 or obj is None:
        return obj

    def conv(p: t.Position) -> t.Position:
        line = lines[p.line] if 0 <= p.line < len(lines) else ""
        return t.Position(p.line, to_units(line, p.character, encoding))

    seen: set[int] = set()  # an object reached twice (one Range in two items) turns once

    def walk(x):
        if id(x) in seen:
            return x
        seen.add(id(x))
        if isinstance(x, list):
            for i, v in enumerate(x):
                x[i] = conv(v) if isinstance(v, t.Position) else walk(v)
        elif isinstance(x, dict):
            for k, v in x.items():
                x[k] = conv(v) if isinstance(v, t.Position) else walk(v)
        elif attrs.has(type(x)):
            for f in attrs.fields(type(x)):
                v = getattr(x, f.name)
                if isinstance(v, t.Position):
                    setattr(x, f.name, conv(v))
                elif isinstance(v, (list, dict)) or attrs.has(type(v)):
                    walk(v)
        return x

    return conv(obj) if isinstance(obj, t.Position) else walk(obj)
