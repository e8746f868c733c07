"""Where the survey's text and its Table III disagree, `classify` says which reading it
took: a stack of self-attention layers is multi-hop in §3.3.2 (the Transformer) but not in
Table III (QANet, Winata et al.). `--reading text` gives the other reading."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from taxcompile import classification, cli, pipeline

ROOT = Path(__file__).resolve().parent.parent


def rows(reading: str) -> dict[str, dict[str, str]]:
    out = {}
    for path in sorted((ROOT / "specs").glob("*.attn")):
        row = pipeline.classify_spec(pipeline.load(path), reading)
        out[path.stem] = row.row()
    return out


def test_table_reading_is_table_iii_and_the_text_reading_counts_stacks():
    table, text = rows("table"), rows("text")
    differ = {k for k in table if table[k] != text[k]}
    assert differ == {"yu2018", "winata2019"}
    for k in differ:
        assert table[k]["query_multiplicity"] == "Multi-Head"
        assert text[k]["query_multiplicity"] == "Multi-Head + Multi-Hop"
    # the Transformer is multi-hop under both readings (its decoder re-reads the encoder)
    assert table["vaswani2017"]["query_multiplicity"] == "Multi-Head + Multi-Hop"


def test_the_cell_says_which_reading_it_took():
    cm = pipeline.load(ROOT / "specs" / "yu2018.attn").models[0]
    cell = classification.classify_model(cm).cells["query_multiplicity"]
    assert "Multi-Hop" not in cell.values
    assert len(cell.notes) == 1 and cell.notes[0].startswith("reading: table.")
    assert "§3.3.2" in cell.notes[0] and "--reading text" in cell.notes[0]
    cell = classification.classify_model(cm, "text").cells["query_multiplicity"]
    assert any("reading: text" in r for r in cell.values["Multi-Hop"])
    assert cell.notes[0].startswith("reading: text.")


def test_a_multi_hop_memory_network_needs_no_reading():
    """Hops that re-read the same features with a refined query (eq. 41-42) are multi-hop
    under both readings, with no note."""
    cm = pipeline.load(ROOT / "examples" / "memory_network.attn").models[0]
    for reading in classification.READINGS:
        cell = classification.classify_model(cm, reading).cells["query_multiplicity"]
        assert "Multi-Hop" in cell.values and not cell.notes


def test_cli_reading_flag(capsys):
    assert cli.main(["classify", str(ROOT / "specs" / "winata2019.attn"), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)[0]
    notes = doc["variants"][0]["notes"]["query_multiplicity"]
    assert notes[0].startswith("reading: table.")
    assert cli.main(["table", str(ROOT / "specs" / "winata2019.attn"), "--format", "csv",
                     "--reading", "text"]) == 0
    row = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))[0]
    assert row["query_multiplicity"] == "Multi-Head + Multi-Hop"
    assert cli.main(["classify", str(ROOT / "specs" / "winata2019.attn")]) == 0
    assert "note, reading: table." in capsys.readouterr().out
