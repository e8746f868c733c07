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

