"""Located errors: every user mistake is reported as ``file:line:col: error: message``,
followed by the source line, a caret under the column, and a hint."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .frozen import Frozen, Positional

MAX_REPORTED = 20  # errors shown per file before "… and N more"

# Characters a terminal acts on (ESC starts a colour or a cursor move, BEL rings, CR
# returns over the line, U+009B is a one-byte CSI) and that XML 1.0 forbids: C0 but for
# tab and newline, DEL, C1, and the bidirectional overrides that reorder what is shown.
_INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """``text`` with every control character written as a visible escape (``\\x1b``):
    what reaches a terminal, an XML document or a page from a spec or a file name."""
    return _INVISIBLE.sub(lambda m: (f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                                     else f"\\u{ord(m.group()):04x}"), text)


def article(word: str) -> str:
    """"a" or "an" before ``word`` (by its first letter: "an alignment", "a score")."""
    w = word.strip("`").lower()
    return "an" if w[:1] in ("a", "e", "i", "o") or (w[:1] == "u" and not
                                                       w.startswith(("uni", "use", "usu"))) \
        else "a"


class Location(Frozen):
    """Where an IR object came from (torchgen's ``Location``)."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


class Diagnostic(Positional):
    loc: Location
    message: str
    hint: str = ""

    def __init__(self, *args, **fields) -> None:
        super().__init__(*args, **fields)
        if not self.hint:  # every error carries a hint: its kind's (hints.py)
            from .hints import FALLBACK, hint_for

            self.__dict__["hint"] = hint_for(self.message) or FALLBACK

    def render(self, source: str | None) -> str:
        out = [f"{self.loc}: error: {self.message}"]
        if source is not None and self.loc.line >= 1:
            lines = source.split("\n")  # lark counts lines by "\n" only
            if self.loc.line <= len(lines):
                text = lines[self.loc.line - 1].rstrip("\r").replace("\t", " ")
                if len(text) > 200:  # keep huge lines readable around the column
                    start = max(0, self.loc.column - 100)
                    text = text[start : start + 200]
                    col = self.loc.column - start
                else:
                    col = self.loc.column
                # a control character is shown as an escape: the caret moves with it
                col = len(visible(text[: max(col - 1, 0)])) + 1
                text = visible(text)
                out.append(f"    {text}")
                out.append("    " + " " * max(col - 1, 0) + "^")
        if self.hint:
            out.append(f"  hint: {self.hint}")
        return "\n".join(out)


@dataclass
class SpecError(Exception):
    """One or more located errors in one spec file."""

    diagnostics: list[Diagnostic]
    source: str | None = None
    extra: int = field(default=0)  # errors beyond those kept

    def __str__(self) -> str:
        return self.render()

    def render(self) -> str:
        diags = sorted(self.diagnostics, key=lambda d: (d.loc.line, d.loc.column))
        shown = diags[:MAX_REPORTED]
        parts = [d.render(self.source) for d in shown]
        more = len(diags) - len(shown) + self.extra
        if more > 0:
            parts.append(f"… and {more} more error{'s' if more != 1 else ''}")
        return "\n".join(parts)


class Collector:
    """Gathers diagnostics of a pass so all errors of a file are reported together."""

    def __init__(self, file: str, source: str | None = None):
        self.file = file
        self.source = source
        self.diagnostics: list[Diagnostic] = []
        self._seen: set[Diagnostic] = set()  # a list scan per error was quadratic
        self._locs: dict[tuple[int, int], Location] = {}

    def loc(self, line: int | None, column: int | None) -> Location:
        key = (line or 1, column or 1)
        found = self._locs.get(key)
        if found is None:  # one frozen Location per place: every node of every variant asks
            found = self._locs[key] = Location(file=self.file, line=key[0], column=key[1])
        return found

    def error(self, loc: Location, message: str, hint: str = "") -> None:
        d = Diagnostic(loc, message, hint)
        if d not in self._seen:
            self._seen.add(d)
            self.diagnostics.append(d)

    def raise_if_any(self) -> None:
        if self.diagnostics:
            raise SpecError(list(self.diagnostics), self.source)
