"""Reading attention out of PyTorch code (taxcompile/torchread): real implementations no one
here wrote, a model without attention, an attention no pattern covers, the CLI's errors, the
registry's coverage and the round trip through generated code."""
import subprocess
import sys

import pytest

import taxcompile
from taxcompile import mechanisms
from taxcompile.torchread import catalogue, patterns

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import torchread_models as tm  # noqa: E402

# name -> (scoring, alignment, query_type, query_multiplicity), and a word of each reason
REAL = {
    "mha": ("Scaled Multiplicative", "Global", "Self-Attentive", "Multi-Head", "splits"),
    "mha_cross": ("Scaled Multiplicative", "Global", "Basic", "Multi-Head", "args_0"),
    "transformer_encoder": ("Scaled Multiplicative", "Global", "Self-Attentive", "Multi-Head",
                            "4 heads"),
    "xt_encoder": ("Scaled Multiplicative", "Global", "Self-Attentive", "Multi-Head", "4 heads"),
    "xt_gqa": ("Scaled Multiplicative", "Global", "Self-Attentive", "Multi-Head", "repeats"),
    "xt_rotary": ("Scaled Multiplicative", "Global", "Self-Attentive", "Multi-Head", "4 heads"),
    "xt_alibi": ("Scaled Multiplicative", "Global", "Self-Attentive", "Multi-Head",
                 "position or bias term"),
    "xt_topk": ("Scaled Multiplicative", "Sparse", "Self-Attentive", "Multi-Head", "topk"),
    "xt_talking": ("Scaled Multiplicative", "Global", "Self-Attentive", "Multi-Head",
                   "adds to them (P = I + W)"),
}


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_implementations(name):
    res = taxcompile.classify(*getattr(tm, name)())
    assert res.method == "torch.export"
    row = res.row()
    want = REAL[name]
    assert (row["scoring"], row["alignment"], row["query_type"],
            row["query_multiplicity"]) == want[:4]
    assert want[4] in res.text()


def test_no_attention_invents_no_row():
    res = taxcompile.classify(*tm.no_attention())
    assert res.attentions == [] and res.row() == {}
    assert "no attention found" in res.text()


def test_unknown_score_is_not_recognised_with_its_nodes():
    res = taxcompile.classify(*tm.l1_attention())
    assert len(res.attentions) == 1 and not res.attentions[0].recognised
    assert res.row() == {}
    assert "attention not recognised" in res.text() and "_softmax" in res.text()


def test_every_registry_score_and_alignment_names_its_patterns_or_none():
    """The records name the graph patterns that find them (catalogue.check refuses one the
    reader does not have); the scores and alignments that name none are the ones not read:
    none since the CRF's marginals are read (forward_backward_marginals)."""
    catalogue.check()
    unread = {(m.kind, m.name) for table in (mechanisms.SCORES, mechanisms.ALIGNS)
              for m in table.values() if not m.recognised_by}
    assert unread == set()


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "taxcompile", "classify", *args],
                          capture_output=True, text=True, cwd=str(tm.__file__).rsplit("/", 2)[0])


@pytest.mark.parametrize("args, says", [
    (["--torch", "nocolon"], "MODULE:FACTORY"),
    (["--torch", "no_such_module_x:f"], "cannot import"),
    (["--torch", "tests.torchread_models:missing"], "has no 'missing'"),
    (["--torch", "tests.torchread_models:mha", "specs/luong2015.attn"], "no spec files"),
])
def test_cli_errors_are_one_line_exit_2(args, says):
    p = _cli(*args)
    assert p.returncode == 2 and says in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and p.stdout == ""


def test_cli_classifies_a_factory():
    p = _cli("--torch", "tests.torchread_models:mha_cross")
    assert p.returncode == 0, p.stderr
    assert "query_type: Basic" in p.stdout and "captured with torch.export" in p.stdout


def test_cli_writes_json_that_its_schema_validates(capsys, monkeypatch):
    """In process (the CLI's own start is tested above): --format json."""
    import json
    from pathlib import Path

    from taxcompile.torchread.cli import classify_torch
    from taxcompile.torchread.schema import TorchClassification

    monkeypatch.chdir(Path(tm.__file__).parents[1])
    assert classify_torch("tests.torchread_models:mha_cross", False, "json") == 0
    stdout = capsys.readouterr().out
    out = TorchClassification.model_validate_json(stdout)
    assert out.captured_with == "torch.export" and out.row["query_type"] == "Basic"
    (a,) = out.attentions
    assert a.registry == {"score": "scaled_multiplicative", "align": "global"}
    assert a.values["query_multiplicity"].value == "Multi-Head"
    assert json.loads(stdout)["row"]["scoring"] == "Scaled Multiplicative"
    # one cross-attention of two inputs, nothing attends over the query's: no co-attention
    assert out.features["feature_multiplicity"].value == out.row["feature_multiplicity"] \
        == "Singular" and out.features["feature_multiplicity"].because


def test_docs_show_the_rows_the_code_gives():
    from pathlib import Path

    doc = (Path(__file__).parents[1] / "docs" / "classify-code.md").read_text()
    assert tm.doc_table() in doc, "regenerate: python tests/torchread_models.py"
