"""The front end end to end: file -> AST -> IR -> checks -> graph -> classification.

Nothing here imports torch: ``taxcompile table`` must start fast. The stages are
imported where they are used, so that ``expand`` (and a table of cached rows) needs none
of them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from . import checks, classification, ir


@dataclass
class PaperRow:
    """A paper's Table III row: its variants' classifications merged."""

    spec: ir.Spec
    variants: list[classification.Classification]

    @property
    def paper(self) -> ir.Paper:
        return self.spec.paper

    def cell(self, dim: str) -> str:
        texts: list[str] = []
        for v in self.variants:
            t = v.cells[dim].text(dim)
            if t not in texts:
                texts.append(t)
        text = ", ".join(texts)
        if dim == "alignment" and any("Hard" in v.cells[dim].values for v in self.variants):
            # The survey writes "Soft" for softmax only beside hard attention (eq. 25-26).
            text = ", ".join(" + ".join("Soft" if x == "Global" else x for x in t.split(" + "))
                             for t in text.split(", "))
        return text

    def _repr_markdown_(self) -> str:  # Jupyter: the row with its reasons
        from .table import classification_md

        ref = f" [{self.paper.ref}]" if self.paper.ref is not None else ""
        return classification_md(self.variants, f"{self.paper.cite}{ref}")

    def row(self) -> dict[str, str]:
        from . import classification

        out = {"paper": self.paper.cite, "ref": str(self.paper.ref or "")}
        out.update({d: self.cell(d) for d in classification.DIMENSIONS})
        return out


def parse_file(path: str | Path) -> tuple[str, str]:
    from . import parser

    text = parser.read_source(path)
    return str(path), text


def load_text(text: str, file: str = "<string>") -> checks.CheckedSpec:
    """Parse, lower and check spec text; raise ``SpecError`` with every error found."""
    from . import checks, lower, parser
    from .diagnostics import SpecError

    module = parser.parse_text(text, file)
    try:
        spec = lower.lower(module, file, text)
        return checks.check(spec, text)
    except SpecError as e:
        e.source = text
        raise


def load(path: str | Path) -> checks.CheckedSpec:
    file, text = parse_file(path)
    return load_text(text, file)


def load_bytes(data: bytes, path: str | Path) -> checks.CheckedSpec:
    """``load`` of a file's bytes, read already (at most ``parser.MAX_BYTES``)."""
    from . import parser

    return load_text(parser._screen(data, str(path), len(data)), str(path))


def classify_spec(cs: checks.CheckedSpec, reading: str = "table") -> PaperRow:
    from . import classification

    return PaperRow(cs.spec, [classification.classify_model(cm, reading) for cm in cs.models])


def expand(paths: list[str]) -> list[tuple[Path, bool]]:
    """Spec files named by ``paths``: (file, given explicitly). Directories give their
    ``*.attn`` files in name order."""
    out: list[tuple[Path, bool]] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            out.extend((f, False) for f in sorted(path.glob("*.attn")))
        else:
            out.append((path, True))
    return out
