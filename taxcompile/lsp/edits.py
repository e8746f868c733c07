"""Diagnostics, formatting, code actions and the Table III lens."""

from __future__ import annotations

import re

from lsprotocol import types as t

from ..diagnostics import SpecError
from .analysis import IDENT, Analysis
from .features import row_summary

SOURCE = "taxcompile"
_DID_YOU_MEAN = re.compile(r"did you mean `([^`]+)`\?")


def diagnostics(a: Analysis) -> list[t.Diagnostic]:
    """The checker's errors, each from its line and column to the end of the word there."""
    lines = a.text.split("\n")
    out = []
    for d in sorted(a.diagnostics, key=lambda d: (d.loc.line, d.loc.column)):
        line, col = max(d.loc.line - 1, 0), max(d.loc.column - 1, 0)
        text = lines[line] if line < len(lines) else ""
        m = IDENT.match(text, col)
        end = m.end() if m else min(col + 1, len(text)) if col < len(text) else col
        out.append(t.Diagnostic(
            range=t.Range(t.Position(line, col), t.Position(line, end)),
            message=d.message + (f"\nhint: {d.hint}" if d.hint else ""),
            severity=t.DiagnosticSeverity.Error, source=SOURCE,
            data={"hint": d.hint}))
    return out


def formatting(text: str) -> list[t.TextEdit]:
    """``taxcompile fmt``'s output as one edit of the whole document (none: it does not parse)."""
    from ..fmt import format_text

    try:
        new = format_text(text)
    except SpecError:
        return []
    if new == text:
        return []
    lines = text.split("\n")
    whole = t.Range(t.Position(0, 0), t.Position(len(lines), 0))
    return [t.TextEdit(whole, new)]


def code_actions(uri: str, diags: list[t.Diagnostic]) -> list[t.CodeAction]:
    """A quick fix per diagnostic whose hint suggests a spelling ("did you mean `x`?")."""
    out = []
    for d in diags:
        hint = (d.data or {}).get("hint", "") if isinstance(d.data, dict) else ""
        m = _DID_YOU_MEAN.search(hint or d.message)
        if m is None or d.range.start == d.range.end:
            continue
        out.append(t.CodeAction(
            title=f"Change to `{m.group(1)}`", kind=t.CodeActionKind.QuickFix,
            diagnostics=[d], is_preferred=True,
            edit=t.WorkspaceEdit(changes={uri: [t.TextEdit(d.range, m.group(1))]})))
    return out


def lenses(a: Analysis) -> list[t.CodeLens]:
    """On each model line, its Table III row (or why there is none yet)."""
    out = []
    for kind, name, first, _ in a.blocks:
        if kind != "model":
            continue
        title = row_summary(a, name) or "Table III: the spec does not check"
        out.append(t.CodeLens(range=t.Range(t.Position(first, 0), t.Position(first, 5)),
                              command=t.Command(title=title, command="")))
    return out
