"""``taxcompile lsp`` over its stdio: every capability, spoken to the real server process
by a JSON-RPC client (tests/lsp_client.py), checked against the compiler's own answers
(``load_text``'s errors, the classifier's row, ``fmt``'s output, the registry)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pygls")

from lsp_client import Client  # noqa: E402

from taxcompile import mechanism_names, mechanisms  # noqa: E402
from taxcompile.classification import classify_model  # noqa: E402
from taxcompile.diagnostics import SpecError  # noqa: E402
from taxcompile.fmt import format_text  # noqa: E402
from taxcompile.pipeline import load_text  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BAHDANAU = (ROOT / "specs" / "bahdanau2015.attn").read_text(encoding="utf-8")
URI = "file:///work/bahdanau2015.attn"
LINES = BAHDANAU.split("\n")


def line_of(text: str) -> int:
    return next(i for i, line in enumerate(LINES) if text in line)


def col_of(line: int, word: str) -> int:
    return LINES[line].index(word) + 1


@pytest.fixture(scope="module")
def client():
    c = Client()
    yield c
    assert c.alive(), "the server exited"
    c.close()


@pytest.fixture
def doc(client):
    client.open(URI, BAHDANAU)
    yield URI
    client.notify("textDocument/didClose", {"textDocument": {"uri": URI}})


def check_errors(text: str, file: str) -> list[tuple[int, int, str]]:
    """(0-based line, 0-based column, message + hint) of each error `check` reports."""
    try:
        load_text(text, file)
    except SpecError as e:
        return sorted((d.loc.line - 1, d.loc.column - 1, f"{d.message}\nhint: {d.hint}")
                      for d in e.diagnostics)
    return []


def served(diags: list[dict]) -> list[tuple[int, int, str]]:
    return sorted((d["range"]["start"]["line"], d["range"]["start"]["character"],
                   d["message"]) for d in diags)


SPEC_FILES = sorted((ROOT / "specs").glob("*.attn")) + sorted((ROOT / "examples").glob("*.attn"))
ERROR_FILES = sorted((ROOT / "tests" / "data" / "errors").glob("*.attn"))


def test_diagnostics_equal_check_on_specs_examples_and_error_snapshots(client):
    for path in SPEC_FILES + ERROR_FILES:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # a snapshot of bytes that are not UTF-8: no editor text
            continue
        uri = f"file:///work/{path.name}"
        got = served(client.open(uri, text))
        assert got == check_errors(text, path.name), path.name
        if path in SPEC_FILES:
            assert got == [], path.name
    assert any(check_errors(p.read_text(encoding="utf-8"), p.name) for p in ERROR_FILES)


def test_a_change_is_diagnosed_and_its_did_you_mean_is_a_quick_fix(client, doc):
    broken = BAHDANAU.replace("additive(", "additiv(")
    diags = client.change(doc, broken)
    assert served(diags) == check_errors(broken, "b.attn")
    line = line_of("score    = additive")
    (d,) = diags
    assert d["range"] == {"start": {"line": line, "character": col_of(line, "additive") - 1},
                          "end": {"line": line, "character": col_of(line, "additive") + 6}}
    actions = client.request("textDocument/codeAction", {
        "textDocument": {"uri": doc}, "range": d["range"], "context": {"diagnostics": diags}})
    assert [a["edit"]["changes"][doc][0]["newText"] for a in actions] == ["additive"]
    assert client.change(doc, BAHDANAU) == []


def test_hover_on_a_mechanism_gives_its_record(client, doc):
    line = line_of("score    = additive")
    h = client.at("textDocument/hover", doc, line, col_of(line, "additive"))
    text = h["contents"]["value"]
    assert "**additive** — score mechanism" in text
    assert "Table III reading: Additive" in text and "Survey equations: 6" in text
    assert "`act = tanh`" in text and "`d_w` (int, optional)" in text


def test_hover_on_a_keyword_argument_gives_the_parameter(client, doc):
    line = line_of("additive(d_w = d_w")
    h = client.at("textDocument/hover", doc, line, LINES[line].index("act") + 1)
    assert h["contents"]["value"] == "parameter of `additive`: `act = tanh`"


def test_hover_on_a_name_gives_its_shape_and_definition(client, doc):
    line = line_of("query    = s_prev")
    text = client.at("textDocument/hover", doc, line, col_of(line, "s_prev"))["contents"]["value"]
    assert f"defined at line {line_of('feature s_prev') + 1}, model `rnnsearch`" in text
    assert "shape: `(T, 1000)`" in text  # prev(s): s is a GRU of 1000 units over T


def test_hover_and_lens_on_a_model_give_its_table_row_live(client, doc):
    cm = load_text(BAHDANAU, "b.attn").models[0]
    row = classify_model(cm)
    line = line_of("model rnnsearch")
    text = client.at("textDocument/hover", doc, line, col_of(line, "rnnsearch"))["contents"]["value"]
    for dim, cell in row.cells.items():
        assert f"| {dim} | {cell.text(dim)} |" in text
        for reasons in cell.values.values():
            assert reasons[0].replace("|", "/") in text
    (lens,) = client.request("textDocument/codeLens", {"textDocument": {"uri": doc}})
    assert lens["range"]["start"]["line"] == line
    assert lens["command"]["title"] == "Table III: " + " · ".join(row.row().values())
    # a general score: the lens follows the edit
    edited = BAHDANAU.replace("additive(d_w = d_w, act = tanh)", "general")
    assert client.change(doc, edited) == []
    (lens,) = client.request("textDocument/codeLens", {"textDocument": {"uri": doc}})
    assert "General" in lens["command"]["title"]
    assert "Additive" not in lens["command"]["title"]


def labels(result) -> list[str]:
    return [i["label"] for i in result["items"]]


def test_completion_of_mechanisms_parameters_names_and_axes(client, doc):
    line = line_of("score    = additive")
    start = LINES[line].index("additive")
    text = BAHDANAU.replace(LINES[line], LINES[line][:start])
    client.change(text and doc, text)
    assert labels(client.at("textDocument/completion", doc, line, start)) == list(
        mechanism_names.names("score"))
    client.change(doc, BAHDANAU)
    inside = LINES[line].index("d_w")
    got = labels(client.at("textDocument/completion", doc, line, inside))
    assert got[:3] == ["d_w", "act", "bias"]  # additive's parameters, from its record
    assert {"vocab", "hidden", "h", "s_prev"} <= set(got)  # names in scope
    assert {"S", "T"} <= set(got)  # the model's axes
    assert {"bigru", "linear", "+", "*"} <= set(got)  # operators


def test_every_registry_mechanism_has_hover_text_and_a_completion_entry(client, doc):
    """A record added to the registry must reach the editor: its name completes after its
    field (or is the field's name, for traits), and a hover on it shows its record."""
    line = line_of("score    = additive")
    indent = LINES[line][:LINES[line].index("score")]
    fields = set()
    for (kind, name), m in mechanisms.REGISTRY.items():
        if kind in ("score", "align", "position", "bias", "mask", "heads_out", "qk_norm",
                    "penalty"):
            prefix = f"{indent}{kind} = "
            text = BAHDANAU.replace(LINES[line], prefix + name)
            client.change(doc, text)
            assert name in labels(client.at("textDocument/completion", doc, line, len(prefix))), name
            h = client.at("textDocument/hover", doc, line, len(prefix) + 1)
        else:  # a trait or a query kind: hover on the field that names it, where one does
            text = BAHDANAU.replace(LINES[line], f"{indent}{name} = 1")
            client.change(doc, text)
            h = client.at("textDocument/hover", doc, line, len(indent) + 1)
            got = labels(client.at("textDocument/completion", doc, line, len(indent)))
            fields.update(got)
        assert h is not None and f"**{name}** — {kind} mechanism" in h["contents"]["value"], name
    traits = {n for (k, n) in mechanisms.REGISTRY if k == "trait"}
    assert {"heads", "capsules", "coverage", "dropout", "kv_heads",
            "talking_heads", "mem_kv", "head_gates"} <= traits & fields
    assert "qk_norm" in fields  # a field naming its forms (`qk_norm = l2(…)` | `rms`)
    client.change(doc, BAHDANAU)


def test_definition_references_and_rename_of_a_let(client, doc):
    use = line_of("additive(d_w = d_w")
    col = LINES[use].rindex("d_w") + 1
    loc = client.at("textDocument/definition", doc, use, col)
    let = line_of("let d_w")
    assert loc["range"]["start"] == {"line": let, "character": 4}
    refs = client.at("textDocument/references", doc, use, col, context={"includeDeclaration": True})
    assert sorted(r["range"]["start"]["line"] for r in refs) == [let, use]  # not the key `d_w =`
    edit = client.at("textDocument/rename", doc, use, col, newName="width")
    changes = edit["changes"][doc]
    assert len(changes) == 2
    renamed = apply(BAHDANAU, changes)
    assert "let width    = 1000" in renamed and "additive(d_w = width," in renamed
    assert check_errors(renamed, "b.attn") == []
    # the key itself names additive's parameter, not the let
    assert client.at("textDocument/definition", doc, use, LINES[use].index("d_w") + 1) is None


def apply(text: str, edits: list[dict]) -> str:
    lines = text.split("\n")
    for e in sorted(edits, key=lambda e: (e["range"]["start"]["line"],
                                          e["range"]["start"]["character"]), reverse=True):
        s, t = e["range"]["start"], e["range"]["end"]
        assert s["line"] == t["line"]
        row = lines[s["line"]]
        lines[s["line"]] = row[:s["character"]] + e["newText"] + row[t["character"]:]
    return "\n".join(lines)


def test_document_symbols(client, doc):
    syms = client.request("textDocument/documentSymbol", {"textDocument": {"uri": doc}})
    assert [(s["name"], s["detail"]) for s in syms] == [
        ("bahdanau2015", "paper"), ("vocab", "let"), ("d_emb", "let"), ("hidden", "let"),
        ("d_w", "let"), ("maxout", "let"), ("rnnsearch", "model")]
    children = [(c["name"], c["detail"]) for c in syms[-1]["children"]]
    assert children == [("src", "input"), ("tgt", "input"), ("h", "feature"), ("s0", "feature"),
                        ("e", "feature"), ("s", "query"), ("s_prev", "feature"),
                        ("att", "attention"), ("logits", "output")]


def test_formatting_is_fmt(client, doc):
    messy = BAHDANAU.replace("let d_w    = 1000", "let   d_w=1000").replace(
        "    feature h = bigru", "  feature h=bigru")
    assert format_text(messy) != messy
    client.change(doc, messy)
    edits = client.request("textDocument/formatting", {
        "textDocument": {"uri": doc}, "options": {"tabSize": 4, "insertSpaces": True}})
    (e,) = edits
    assert e["range"]["start"] == {"line": 0, "character": 0}
    assert e["newText"] == format_text(messy)
    client.change(doc, "model {")  # does not parse: no edit, no crash
    assert client.request("textDocument/formatting", {
        "textDocument": {"uri": doc}, "options": {"tabSize": 4, "insertSpaces": True}}) == []


def test_an_internal_error_is_logged_not_raised(monkeypatch):
    from taxcompile.lsp import server

    logged = []
    monkeypatch.setattr(server, "_log", logged.append)

    @server.guarded
    def broken(ls, params):
        raise KeyError("boom")

    assert broken(None, None) is None
    assert "KeyError: 'boom'" in logged[0]


def test_the_server_does_not_import_torch():
    code = ("import sys, taxcompile.lsp.server; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_edits_in_a_burst_are_checked_once_after_the_last(client, doc):
    import queue

    for i in range(5):  # typing `additiv`, one letter at a time, then the fix
        client.change(doc, BAHDANAU.replace("additive(", "additive"[:3 + i] + "("), wait=False)
    client.change(doc, BAHDANAU, wait=False)
    published = [client.wait_diagnostics(doc)]
    while True:
        try:
            published.append(client.diagnostics.get(timeout=0.5)["diagnostics"])
        except queue.Empty:
            break
    assert published[-1] == []  # the last version's
    assert len(published) < 6  # the burst was coalesced (one, unless the machine stalls)


def test_a_model_the_classifier_refuses_says_so_on_its_lens():
    """A classification that raises a located error is shown, not left out of the lens."""
    from taxcompile.diagnostics import Diagnostic, Location
    from taxcompile.lsp.analysis import Analysis
    from taxcompile.lsp.features import model_row, row_summary

    a = Analysis("model m {\n}\n", [])
    a._rows = {"m": SpecError([Diagnostic(Location(file="t.attn", line=1, column=1),
                                          "no attention to classify")])}
    assert row_summary(a, "m").startswith("Table III: not classified: ")
    assert "no attention to classify" in row_summary(a, "m")
    assert "not classified" in model_row(a, "m")


ASTRAL = '''paper t { cite = "😀😀" title = nowhere }
model m {
    input x: sequence[L, 8]
    input s: sequence[T, 8]
    attention att { query = s  features = x  score = additive }  # 😀 ok
    output y = classify(att, 3)
}
'''


def test_columns_are_utf16_code_units_after_an_astral_character(client):
    """An LSP client counts a position's `character` in UTF-16 code units: each 😀 is two.
    The error after two of them starts two units after its character index; requests are
    turned back into characters the same way (`units.to_chars`)."""
    from taxcompile.lsp import units

    uri = "file:///astral.attn"
    diags = client.open(uri, ASTRAL)
    first = next(d for d in diags if "`title`" in d["message"])
    line = ASTRAL.split("\n")[0]
    start = line.index("nowhere")
    assert first["range"]["start"] == {"line": 0, "character": start + 2}
    assert first["range"]["end"] == {"line": 0, "character": start + 2 + len("nowhere")}
    assert units.to_chars(line, start + 2, "utf-16") == start
    assert units.to_units(line, start, "utf-8") == start + 6  # 4 bytes each
    client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})


def test_a_range_shared_by_two_answers_is_turned_into_units_once():
    from lsprotocol import types as t

    from taxcompile.lsp import units

    line = '"😀😀" x'
    rng = t.Range(t.Position(0, 5), t.Position(0, 6))  # the character `x`
    edits = [t.TextEdit(rng, "y"), t.TextEdit(rng, "z")]
    units.outgoing(edits, [line], "utf-16")
    assert [(e.range.start.character, e.range.end.character) for e in edits] == [(7, 8)] * 2
