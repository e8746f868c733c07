"""The scoring cell of a q.k score with query-key normalisation is read from what it
computes: q and k l2-normalised whole make each score s * cos(q, k), Table II's
Similarity (the cell a `similarity` score with a temperature gets, and the one the reader
of PyTorch code gives x-transformers' attn_qk_norm); in parts, with learned gains or RMS
norms it is no cosine, and the score keeps its own cell. The values the layer computes
(s * cos(q, k) before the softmax) are checked against a float64 reference in
tests/test_qk_norm.py."""
from pathlib import Path

import pytest

from taxcompile import api

ROOT = Path(__file__).parents[1]
SPEC = (ROOT / "examples" / "qk_norm.attn").read_text(encoding="utf-8")
LINE = "qk_norm  = l2(scale = 10)"


def _scoring(tmp_path, qk: str, score: str = "scaled_multiplicative") -> str:
    assert LINE in SPEC
    text = SPEC.replace(LINE, f"qk_norm  = {qk}").replace(
        "score    = scaled_multiplicative", f"score    = {score}")
    path = tmp_path / "qk.attn"
    path.write_text(text, encoding="utf-8")
    return api.classify(str(path), "qk_norm").row()["scoring"]


@pytest.mark.parametrize("qk, score", [("l2(scale = 10)", "scaled_multiplicative"),
                                       ("true", "scaled_multiplicative"),
                                       ("l2(scale = 3)", "multiplicative")])
def test_a_whole_l2_norm_makes_the_score_a_cosine(tmp_path, qk, score):
    assert _scoring(tmp_path, qk, score) == "Similarity"


@pytest.mark.parametrize("qk, score", [("l2(groups = 2)", "Scaled Multiplicative"),
                                       ("l2(dim_scale = true)", "Scaled Multiplicative"),
                                       ("rms", "Scaled Multiplicative")])
def test_norms_that_are_no_cosine_keep_the_scores_cell(tmp_path, qk, score):
    assert _scoring(tmp_path, qk) == score



@pytest.mark.parametrize("qk, score, cell", [
    # the scale 1/sqrt(d_head) (learned gains) or s (in parts) replaces the score's own:
    # a plain q.k written is computed scaled, and the cell says what is computed
    ("l2(dim_scale = true)", "multiplicative", "Scaled Multiplicative"),
    ("l2(groups = 2)", "multiplicative", "Scaled Multiplicative"),
    ("l2(groups = 2, scale = 1)", "scaled_multiplicative", "Multiplicative"),
    # RMS norms keep the score's own scale
    ("rms", "multiplicative", "Multiplicative")])
def test_an_l2_norm_in_parts_or_with_gains_sets_the_scale_of_the_score(tmp_path, qk, score,
                                                                        cell):
    assert _scoring(tmp_path, qk, score) == cell


def _read_from_code(tmp_path, qk: str, score: str = "scaled_multiplicative"):
    """(the PyTorch reader's result for the compiled module, the spec's path)."""
    torch = pytest.importorskip("torch")
    path = tmp_path / "qk.attn"
    path.write_text(SPEC.replace(LINE, f"qk_norm  = {qk}").replace(
        "score    = scaled_multiplicative", f"score    = {score}"), encoding="utf-8")
    mod = api.module(path, "qk_norm")
    cfg = api.config(mod, tiny=True)
    inputs = {k: v for k, v in mod.example_inputs(cfg=cfg).items() if not k.endswith("_mask")}
    with torch.no_grad():
        return api.classify(mod.Model(cfg).eval(), inputs), path


def test_the_cell_is_what_the_generated_code_reads_as(tmp_path):
    """The PyTorch reader, an independent reading of the compiled module's graph, gives the
    same cell as the spec for a plain q.k normalised with learned gains."""
    res, path = _read_from_code(tmp_path, "l2(dim_scale = true)", "multiplicative")
    assert res.row()["scoring"] == api.classify(str(path), "qk_norm").row()["scoring"] == \
        "Scaled Multiplicative", res.text()


def test_a_norm_in_parts_is_no_cosine_in_the_code_either(tmp_path):
    """q and k normalised in two parts of each head (the reader sees the norm's axis: half
    the features the product sums over) read as the scaled product, not a cosine."""
    res, _ = _read_from_code(tmp_path, "l2(groups = 2)")
    assert res.row()["scoring"] == "Scaled Multiplicative", res.text()
    assert "norms of parts of their features" in res.text()


def test_a_scale_of_one_in_parts_is_no_scaling_in_the_code_either(tmp_path):
    """s = 1 in parts: the layer multiplies q by sqrt(d_head) and SDPA divides by it again,
    so the product is q.k unscaled, as the spec's cell says."""
    res, path = _read_from_code(tmp_path, "l2(groups = 2, scale = 1)")
    assert res.row()["scoring"] == api.classify(str(path), "qk_norm").row()["scoring"] == \
        "Multiplicative", res.text()
