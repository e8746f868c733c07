"""Hover and completion: from the registry, the classifier and the document's analysis."""

from __future__ import annotations

import re

from lsprotocol import types as t

from ..diagnostics import SpecError
from ..lexer import _KEYWORDS, INPUT_KINDS
from ..ops import CALLS
from . import registry
from .analysis import Analysis, blank, word_at

_FIELD_VALUE = re.compile(r"\b([A-Za-z_]\w*)[ \t]*=[ \t]*([A-Za-z_]\w*)?$")
_OPERATORS = ("+", "-", "*", "/")


def _first_line(e: Exception) -> str:
    return (str(e).splitlines() or [""])[0]


def model_row(a: Analysis, model: str) -> str | None:
    """A model's Table III row with the reasons, as Markdown (None: it does not check)."""
    c = a.rows.get(model)
    if c is None:
        return None
    if isinstance(c, SpecError):
        return f"**Table III row of model `{model}`**: not classified: {_first_line(c)}"
    from ..classification import DIMENSIONS

    lines = [f"**Table III row of model `{model}`**", "", "| Dimension | Value | Reasons |",
             "|---|---|---|"]
    for d in DIMENSIONS:
        cell = c.cells[d]
        reasons = "; ".join(r for rs in cell.values.values() for r in rs)
        lines.append(f"| {d} | {cell.text(d) or '—'} | {reasons.replace('|', '/')} |")
    return "\n".join(lines)


def row_summary(a: Analysis, model: str) -> str | None:
    c = a.rows.get(model)
    if c is None:
        return None
    if isinstance(c, SpecError):
        return "Table III: not classified: " + _first_line(c)
    return "Table III: " + " · ".join(v or "—" for v in c.row().values())


def _shape(a: Analysis, model: str | None, name: str) -> str | None:
    if a.checked is None or model is None:
        return None
    for cm in a.checked.models:
        if cm.model.name == model and name in cm.shapes:
            return str(cm.shapes[name])
    return None


def hover(a: Analysis, line: int, col: int) -> t.Hover | None:
    found = word_at(a.text, line, col)
    if found is None:
        return None
    word, start, end = found
    rng = t.Range(t.Position(line, start), t.Position(line, end))
    d = a.lookup(word, line)
    code = blank(a.text.split("\n")[line])
    fn = _open_call(code[:start])
    param = registry.param_hover(fn, word) if fn else None
    text = None
    if param is not None and code[end:].lstrip(" \t").startswith("="):
        text = param
    elif d is not None and d.kind == "model" and d.line == line:
        text = model_row(a, word) or f"model `{word}` does not check yet: no Table III row"
    elif d is not None and (d.line, d.col) != (line, start) or d is not None and d.kind != "model":
        where = f"line {d.line + 1}" + (f", model `{d.model}`" if d.model else "")
        text = f"`{d.kind} {word}` — defined at {where}"
        shape = _shape(a, d.model, word)
        if shape:
            text += f"\n\nshape: `{shape}`"
        text += f"\n\n```attn\n{a.text.split(chr(10))[d.line].strip()}\n```"
    elif word in registry.spellings():
        text = "\n\n---\n\n".join(registry.mechanism_hover(m)
                                  for m in _by_field(a, line, word))
    elif word in CALLS:
        text = registry.operator_hover(word)
    if text is None:
        return None
    return t.Hover(t.MarkupContent(t.MarkupKind.Markdown, text), rng)


def _by_field(a: Analysis, line: int, word: str) -> list:
    """The records spelled ``word``, the one of the field's kind first (`mask = causal`)."""
    records = registry.spellings()[word]
    m = re.search(r"\b(\w+)[ \t]*=[ \t]*" + word + r"\b", a.text.split("\n")[line])
    kind = registry.FIELD_KINDS.get(m.group(1)) if m else None
    return sorted(records, key=lambda r: r.kind != kind)


def _open_call(prefix: str) -> str | None:
    """The function whose call's parentheses are open at the end of ``prefix``."""
    depth = 0
    for i in range(len(prefix) - 1, -1, -1):
        ch = prefix[i]
        if ch == ")":
            depth += 1
        elif ch == "(":
            if depth == 0:
                m = re.search(r"([A-Za-z_]\w*)[ \t]*$", prefix[:i])
                return m.group(1) if m else None
            depth -= 1
    return None


def _item(label: str, kind: t.CompletionItemKind, detail: str, insert: str | None = None):
    return t.CompletionItem(label=label, kind=kind, detail=detail, insert_text=insert)


def completion(a: Analysis, last: Analysis | None, line: int, col: int) -> t.CompletionList:
    lines = a.text.split("\n")
    prefix = blank(lines[line] if line < len(lines) else "")[:col]
    items: list[t.CompletionItem] = []
    m = _FIELD_VALUE.search(prefix)
    fn = _open_call(prefix)
    if m and m.group(1) in registry.FIELD_KINDS and fn is None:
        kind = registry.FIELD_KINDS[m.group(1)]
        for name in registry.mechanism_names(kind):
            items.append(_item(name, t.CompletionItemKind.EnumMember, f"{kind} mechanism"))
        return t.CompletionList(is_incomplete=False, items=items)
    if fn is None and re.fullmatch(r"[ \t]*\w*", prefix) and _in_attention(lines, line):
        return t.CompletionList(is_incomplete=False, items=_fields())
    if fn is not None:
        for p in registry.params_of(fn):
            items.append(_item(p.name, t.CompletionItemKind.Property,
                               f"parameter of {fn}", f"{p.name} = "))
    if re.search(r":[ \t]*\w*$", prefix):
        items += [_item(k, t.CompletionItemKind.TypeParameter, "input kind") for k in INPUT_KINDS]
    items += _names(a, line) + _axes(last or a)
    items += [_item(op, t.CompletionItemKind.Function, "operator") for op in CALLS]
    items += [_item(op, t.CompletionItemKind.Operator, "operator") for op in _OPERATORS]
    items += [_item(k, t.CompletionItemKind.Keyword, "keyword") for k in _KEYWORDS]
    return t.CompletionList(is_incomplete=False, items=items)


def _in_attention(lines: list[str], line: int) -> bool:
    """Whether ``line`` is inside an `attention … {` block (its `}` not reached yet)."""
    for i in range(line - 1, -1, -1):
        code = blank(lines[i]).strip()
        if code.startswith("}") or code.startswith(("model", "paper")):
            return False
        if code.startswith("attention"):
            return "}" not in code
    return False


def _fields() -> list[t.CompletionItem]:
    """The attention block's fields (the lowering's list), with the record a field names."""
    from ..lowering.attention import ATTENTION_FIELDS

    records = registry.spellings()
    out = []
    for name in ATTENTION_FIELDS:
        detail = "attention field"
        if name in registry.FIELD_KINDS:
            detail += f": a {name} mechanism"
        elif name in records:
            detail += f": {records[name][0].kind} `{name}`"
        out.append(_item(name, t.CompletionItemKind.Field, detail, f"{name} = "))
    return out


def _names(a: Analysis, line: int) -> list[t.CompletionItem]:
    model = a.model_at(line)
    return [_item(d.name, t.CompletionItemKind.Variable, f"{d.kind} (line {d.line + 1})")
            for d in a.defs if d.kind not in ("model", "paper")
            and (d.model is None or d.model == model) and d.line != line]


def _axes(a: Analysis) -> list[t.CompletionItem]:
    if a.checked is None:
        return []
    axes: dict[str, None] = {}
    for cm in a.checked.models:
        axes.update(dict.fromkeys(cm.sizes))
    return [_item(x, t.CompletionItemKind.TypeParameter, "axis") for x in axes]
