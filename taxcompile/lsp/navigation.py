"""Definition, references, rename and document symbols, over the document's name index."""

from __future__ import annotations

from lsprotocol import types as t

from .analysis import Analysis, _is_key, blank, word_at

_SYMBOL = {"paper": t.SymbolKind.Namespace, "model": t.SymbolKind.Class,
           "let": t.SymbolKind.Constant, "attention": t.SymbolKind.Function,
           "input": t.SymbolKind.Variable}


def _range(line: int, start: int, end: int) -> t.Range:
    return t.Range(t.Position(line, start), t.Position(line, end))


def target(a: Analysis, line: int, col: int):
    found = word_at(a.text, line, col)
    if found is None:
        return None
    d = a.lookup(found[0], line)
    code = blank(a.text.split("\n")[line])
    if d is not None and _is_key(code, found[2]) and (d.line, d.col) != (line, found[1]):
        return None  # `d_w = …` inside a call names the parameter, not the let
    return d


def definition(a: Analysis, uri: str, line: int, col: int) -> t.Location | None:
    d = target(a, line, col)
    return None if d is None else t.Location(uri, _range(d.line, d.col, d.col + len(d.name)))


def references(a: Analysis, uri: str, line: int, col: int) -> list[t.Location]:
    d = target(a, line, col)
    if d is None:
        return []
    return [t.Location(uri, _range(*occ)) for occ in a.occurrences(d)]


def rename(a: Analysis, uri: str, line: int, col: int, new: str) -> t.WorkspaceEdit | None:
    d = target(a, line, col)
    if d is None:
        return None
    edits = [t.TextEdit(_range(*occ), new) for occ in a.occurrences(d)]
    return t.WorkspaceEdit(changes={uri: edits})


def symbols(a: Analysis) -> list[t.DocumentSymbol]:
    """Papers, lets and models at the top; each model's statements inside it."""
    lines = a.text.split("\n")
    out: list[t.DocumentSymbol] = []
    for kind, name, first, last in a.blocks:
        d = next(x for x in a.defs if x.line == first and x.name == name)
        sel = _range(first, d.col, d.col + len(name))
        children = [
            t.DocumentSymbol(name=x.name, kind=_SYMBOL.get(x.kind, t.SymbolKind.Field),
                             detail=x.kind, range=_range(x.line, 0, len(lines[x.line])),
                             selection_range=_range(x.line, x.col, x.col + len(x.name)))
            for x in a.defs if kind == "model" and x.model == name]
        end = len(lines[last]) if last < len(lines) else 0
        out.append(t.DocumentSymbol(name=name, kind=_SYMBOL.get(kind, t.SymbolKind.Object),
                                    detail=kind, range=_range(first, 0, end)
                                    if last > first else _range(first, 0, len(lines[first])),
                                    selection_range=sel, children=children))
    return out
