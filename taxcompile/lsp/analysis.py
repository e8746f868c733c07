"""One document's analysis: the checker's diagnostics (or the checked spec), the
classification of its models, and a lexical index of the names it defines and uses
(the AST keeps only statement positions, and a half-typed document has no AST)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..diagnostics import Diagnostic, SpecError

# A statement that defines a name: `let n`, `input n:`, `feature n =`, `attention n {`, …
DEF = re.compile(r"^[ \t]*(let|input|feature|query|output|update|affinity|attention|repeat"
                 r"|model|paper)[ \t]+([A-Za-z_][A-Za-z0-9_]*)", re.M)
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# what a spec writes that is not a name: comments and strings
_SKIP = re.compile(r'#[^\n]*|"(?:[^"\\\n]|\\.)*"?')
TOP = ("model", "paper", "let")


@dataclass
class Name:
    name: str
    kind: str  # the defining keyword
    line: int  # 0-based
    col: int
    model: str | None  # the model whose body defines it; None at the top level


@dataclass
class Analysis:
    text: str
    diagnostics: list[Diagnostic]
    checked: object | None = None  # CheckedSpec when the spec checks
    defs: list[Name] = field(default_factory=list)
    blocks: list[tuple[str, str, int, int]] = field(default_factory=list)  # kind, name, first, last

    _rows: dict | None = None

    @property
    def rows(self) -> dict:
        """Model name -> its Classification (or the SpecError that refused one), computed on
        first use (a hover or a lens asks; diagnostics do not wait for it)."""
        if self._rows is None:
            from ..classification import classify_model

            self._rows = {}
            for cm in getattr(self.checked, "models", ()):
                try:
                    self._rows[cm.model.name] = classify_model(cm)
                except SpecError as e:  # said on its lens, never a silent gap
                    self._rows[cm.model.name] = e
        return self._rows

    def model_at(self, line: int) -> str | None:
        for kind, name, first, last in self.blocks:
            if kind == "model" and first <= line <= last:
                return name
        return None

    def lookup(self, name: str, line: int) -> Name | None:
        """The definition of ``name`` seen from ``line``: its model's, else the top level's."""
        model = self.model_at(line)
        inner = [d for d in self.defs if d.name == name and d.model == model and model]
        outer = [d for d in self.defs if d.name == name and d.model is None]
        found = inner or outer
        return found[0] if found else None

    def occurrences(self, target: Name) -> list[tuple[int, int, int]]:
        """(line, start, end) of each use of ``target``'s name where it names ``target``."""
        out = []
        for i, line in enumerate(self.text.split("\n")):
            code = blank(line)
            for m in IDENT.finditer(code):
                if m.group() != target.name or _is_key(code, m.end()) and (
                        (i, m.start()) != (target.line, target.col)):
                    continue  # a keyword argument's or a field's name: `d_w = d_w`
                if self.lookup(target.name, i) is target:
                    out.append((i, m.start(), m.end()))
        return out


def _is_key(code: str, end: int) -> bool:
    """Whether the word ending at ``end`` is followed by `=` (not `==`): a key, not a use."""
    rest = code[end:].lstrip(" \t")
    return rest.startswith("=") and not rest.startswith("==")


def blank(line: str) -> str:
    """``line`` with comments and strings blanked out (columns kept)."""
    return _SKIP.sub(lambda m: " " * len(m.group()), line)


def word_at(text: str, line: int, col: int) -> tuple[str, int, int] | None:
    lines = text.split("\n")
    if line >= len(lines):
        return None
    for m in IDENT.finditer(blank(lines[line])):
        if m.start() <= col <= m.end():
            return m.group(), m.start(), m.end()
    return None


def _index(text: str) -> tuple[list[Name], list[tuple[str, str, int, int]]]:
    lines = text.split("\n")
    starts = [(i, m.group(1), m.group(2)) for i, line in enumerate(lines)
              if (m := DEF.match(blank(line)))]
    blocks = []
    tops = [(i, k, n) for i, k, n in starts if k in TOP and not lines[i][:1].isspace()]
    for j, (i, kind, name) in enumerate(tops):
        last = tops[j + 1][0] - 1 if j + 1 < len(tops) else len(lines) - 1
        blocks.append((kind, name, i, last))
    defs = []
    for i, kind, name in starts:
        col = blank(lines[i]).index(name, len(lines[i]) - len(lines[i].lstrip()) + len(kind))
        model = next((n for k, n, a, b in blocks if k == "model" and a < i <= b), None)
        if kind in ("model", "paper"):
            model = None
        defs.append(Name(name, kind, i, col, model))
    return defs, blocks


def analyse(text: str, file: str = "<editor>") -> Analysis:
    """Check ``text`` as ``taxcompile check`` does and index its names."""
    from .. import pipeline

    defs, blocks = _index(text)
    try:
        cs = pipeline.load_text(text, file)
    except SpecError as e:
        return Analysis(text, list(e.diagnostics), None, defs, blocks)
    return Analysis(text, [], cs, defs, blocks)
