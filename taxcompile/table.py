"""Stage 7: Table III as Markdown, CSV or LaTeX.

Imports nothing of the front end: a table of cached rows (``cache.py``) renders without
parsing or classifying anything."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import TYPE_CHECKING

from .frozen import Positional

if TYPE_CHECKING:
    from .pipeline import PaperRow

# classification.DIMENSIONS, written out so that this module does not import the classifier
# (tests/test_table.py checks that they agree)
DIMENSIONS = ("feature_multiplicity", "feature_levels", "feature_representations", "scoring",
              "alignment", "dimensionality", "query_type", "query_multiplicity")


class Row(Positional):
    """What the renderers read of a ``PaperRow``: its cells, its survey row and file."""

    cells: dict
    survey_row: int | None
    file: str

    def row(self) -> dict[str, str]:
        return self.cells

    @property
    def paper(self):
        return SimpleNamespace(row=self.survey_row, cite=self.cells["paper"])

    @property
    def spec(self):
        return SimpleNamespace(file=self.file)


COLUMNS = ("paper", "ref") + DIMENSIONS
TITLES = {
    "paper": "Paper", "ref": "Ref", "feature_multiplicity": "Feature multiplicity",
    "feature_levels": "Feature levels", "feature_representations": "Feature representations",
    "scoring": "Scoring", "alignment": "Alignment", "dimensionality": "Dimensionality",
    "query_type": "Query type", "query_multiplicity": "Query multiplicity",
}


def order(rows: list[PaperRow]) -> list[PaperRow]:
    """Papers in the survey's Table III order first, then the rest by citation."""
    return sorted(rows, key=lambda r: (r.paper.row is None, r.paper.row or 0, r.paper.cite,
                                       r.spec.file))


def _cell(text: str) -> str:
    """A CSV cell a spreadsheet shows as text: one that starts with ``= + - @``, a tab or a
    carriage return would be read as a formula (OWASP's CSV injection rule: prefix it with
    a quote)."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _csv_row(cells) -> str:
    """One CSV line (RFC 4180): a cell with a comma, a quote or a line break ("\\r" too,
    which the ``csv`` module leaves bare when its line terminator is "\\n") is quoted."""
    return ",".join(f'"{c.replace(chr(34), chr(34) * 2)}"' if any(x in c for x in ',"\r\n')
                    else c for c in cells) + "\n"


def render_csv(rows: list[PaperRow]) -> str:
    return _csv_row(COLUMNS) + "".join(_csv_row(_cell(r.row()[c]) for c in COLUMNS)
                                       for r in rows)


def _md(text: str) -> str:
    """A Markdown table cell that reads as the text it holds: a `|` would end the cell, and
    HTML (`<img onerror=…>`, `&lt;`) and emphasis or code marks would be rendered."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return re.sub(r"([\\`*_|])", r"\\\1", text)


def render_md(rows: list[PaperRow]) -> str:
    lines = ["| " + " | ".join(TITLES[c] for c in COLUMNS) + " |",
             "|" + "|".join("---" for _ in COLUMNS) + "|"]
    for r in rows:
        d = r.row()
        lines.append("| " + " | ".join(
            _md(f"{d['paper']} [{d['ref']}]" if c == "paper" and d["ref"] else d[c])
            for c in COLUMNS if c != "ref") + " |")
    lines[0] = "| " + " | ".join(TITLES[c] for c in COLUMNS if c != "ref") + " |"
    lines[1] = "|" + "|".join("---" for c in COLUMNS if c != "ref") + "|"
    return "\n".join(lines) + "\n"


_LATEX_ESCAPES = {"&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
                  "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                  "\\": r"\textbackslash{}"}


def _tex(s: str) -> str:
    return "".join(_LATEX_ESCAPES.get(ch, ch) for ch in s)


def render_latex(rows: list[PaperRow]) -> str:
    cols = [c for c in COLUMNS if c != "ref"]
    out = [r"\begin{table*}[t]", r"\centering", r"\footnotesize",
           r"\caption{Attention models analysed with the taxonomy of Brauwers and Frasincar. "
           r"A plus ($+$) joins mechanisms combined in one model; a comma joins mechanisms "
           r"tested in different models of the same paper.}",
           r"\begin{tabular}{" + "l" * len(cols) + "}", r"\toprule",
           " & ".join(_tex(TITLES[c]) for c in cols) + r" \\", r"\midrule"]
    for r in rows:
        d = r.row()
        cite = _tex(d["paper"]) + (f" \\cite{{ref{d['ref']}}}" if d["ref"] else "")
        out.append(" & ".join([cite] + [_tex(d[c]) for c in cols[1:]]) + r" \\")
    out += [r"\bottomrule", r"\end{tabular}", r"\end{table*}"]
    return "\n".join(out) + "\n"


RENDER = {"csv": render_csv, "md": render_md, "latex": render_latex}


def _md_reason(text: str) -> str:
    """A reason in a Markdown cell: HTML and `|` escaped (a cite may hold them), its
    `code` marks kept (they name the spec's nodes)."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("|", "\\|").replace("\n", " ")


def classification_md(variants: list, title: str = "") -> str:
    """One model's (or a paper's variants') classification as a Markdown table: each
    dimension's value and the reasons for it (Jupyter's ``_repr_markdown_``)."""
    lines = ([f"**{_md(title)}**", ""] if title else []) + [
        "| Dimension | Value | Reasons |", "|---|---|---|"]
    for d in DIMENSIONS:
        values, reasons = [], []
        for v in variants:
            cell = v.cells[d]
            text = cell.text(d)
            if text not in values:
                values.append(text)
            tag = f"`{v.model}`: " if len(variants) > 1 else ""
            reasons += [f"{tag}{val}: {why}" for val in cell.labels(d)
                        for why in cell.values[val]]
            reasons += [f"{tag}note: {n}" for n in cell.notes]
        lines.append(f"| {TITLES[d]} | {_md(', '.join(values))} | "
                     + "<br>".join(_md_reason(r) for r in reasons) + " |")
    return "\n".join(lines) + "\n"
