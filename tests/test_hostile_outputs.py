"""Hostile strings into the outputs (issue 23): a CSV a spreadsheet opens as text, control
characters that never reach a terminal raw nor make an SVG or a GraphML ill-formed XML."""

from __future__ import annotations

import csv
import io
import shutil
import xml.dom.minidom

import pytest

from taxcompile import cli, table
from taxcompile.diagnostics import visible

SPEC = ('paper p {{ cite = "{cite}"  title = "T" }}\n'
        "model m {{\n"
        "    input src: tokens[S] (vocab = 100)\n"
        "    feature x = embed(src, 8)\n"
        "    attention a {{ query = project(x)  keys = x  score = multiplicative }}\n"
        "}}\n")
RAW = ("\x1b", "\x07", "\x9b", "\r")  # ESC, BEL, one-byte CSI, CR


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def row(cite: str) -> table.Row:
    cells = {c: "Global" for c in table.COLUMNS} | {"paper": cite, "ref": ""}
    return table.Row(cells, None, "x.attn")


@pytest.mark.parametrize("cite", ["=HYPERLINK(\"http://x\")", "+1", "-2+3", "@SUM(A1)",
                                  "\tcmd", "\r=1"])
def test_csv_cells_that_a_spreadsheet_reads_as_formulas_get_a_quote(cite):
    (header, cells), = [list(csv.reader(io.StringIO(table.render_csv([row(cite)]))))[:2]]
    assert cells[0] == "'" + cite  # OWASP: prefixed, else as it was


def test_csv_quotes_a_carriage_return_so_that_the_row_stays_one_row():
    text = table.render_csv([row("a\rb"), row('say "x", y')])
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert [r[0] for r in rows[1:]] == ["a\rb", 'say "x", y']
    assert len(rows) == 3


@pytest.mark.parametrize("ch", RAW)
def test_a_control_character_in_a_cite_is_a_located_error_shown_escaped(tmp_path, capsys, ch):
    spec = tmp_path / "p.attn"
    spec.write_text(SPEC.format(cite=f"Evil{ch}[31m et al."), encoding="utf-8", newline="")
    for cmd in (["check"], ["table", "--format", "csv"], ["table", "--format", "latex"],
                ["table"], ["classify"]):
        code, out, err = run(capsys, *cmd, str(spec))
        assert code == 1, (cmd, out, err)
        assert f"p.attn:1:23: error: file contains the control character U+{ord(ch):04X}" \
            in err
        assert not any(c in out + err for c in RAW)
        assert visible(ch) in err  # the source line shows it escaped, the caret under it
        line, caret = err.splitlines()[1:3]
        assert line[caret.index("^")] == "\\"


def test_a_file_name_with_an_escape_reaches_no_terminal_and_no_xml_raw(tmp_path, capsys):
    spec = tmp_path / "e\x1b[2Jx.attn"
    spec.write_text(SPEC.format(cite="Ok"), encoding="utf-8")
    code, out, err = run(capsys, "graph", str(spec), "--format", "graphml")
    assert code == 0, err
    xml.dom.minidom.parseString(out)  # well-formed
    assert "\x1b" not in out and "e\\x1b[2Jx.attn" in out
    bad = tmp_path / "bad\x07.attn"
    bad.write_text("paper p {\n", encoding="utf-8")
    code, out, err = run(capsys, "check", str(spec), str(bad))
    assert code == 1 and "\x1b" not in out and "\x07" not in err and "bad\\x07.attn:" in err
    if shutil.which("dot"):
        svg = tmp_path / "d.svg"
        code, out, err = run(capsys, "diagram", str(spec), "-o", str(svg))
        assert code == 0, err
        xml.dom.minidom.parse(str(svg))
        code, out, err = run(capsys, "diagram", str(spec), "-o", str(tmp_path / "é\x1b.svg"))
        assert code == 0 and "\x1b" not in out and "\\x1b.svg" in out


def test_visible_keeps_text_and_escapes_controls():
    assert visible("Vaswani et al.\tété\n") == "Vaswani et al.\tété\n"
    assert visible("a\x1b[31mb\x07\r\x7f\u202e") == "a\\x1b[31mb\\x07\\x0d\\x7f\\u202e"


def test_markdown_and_latex_cells_read_as_their_text():
    cite = "<img src=x onerror=alert(1)> a|b *c* `d` \\input{/etc/passwd} $x$ 50%"
    md = table.render_md([row(cite)]).splitlines()[2]
    assert "<img" not in md and "&lt;img src=x onerror=alert(1)&gt;" in md
    assert "a\\|b \\*c\\* \\`d\\`" in md and md.count(" | ") == len(table.COLUMNS) - 2
    tex = table.render_latex([row(cite)])
    assert "\\input" not in tex and "\\textbackslash{}input\\{/etc/passwd\\}" in tex
    assert "\\$x\\$ 50\\%" in tex
