"""Models built on the meta device (no weights allocated) classify like any other: Hugging
Face's BERT-base and a 1B-parameter Llama configuration, at their real widths and head
counts but two layers deep (the benchmark, benchmarks/classify_meta.py, times the full
depths), give the rows tests/test_torchread_hf.py gives at toy sizes."""
import pytest
import torch

import taxcompile

pytest.importorskip("transformers", reason="Hugging Face `transformers` is not installed")

from benchmarks.classify_meta import bert_base, llama_1b  # noqa: E402

ROW = ("torch.export", "Scaled Multiplicative", "Global", "Single-Dimensional",
       "Self-Attentive", "Multi-Head")


def _row(res):
    r = res.row()
    return (res.method, r["scoring"], r["alignment"], r["dimensionality"], r["query_type"],
            r["query_multiplicity"])


@pytest.mark.parametrize("make, heads, grouped", [(bert_base, 12, False), (llama_1b, 32, True)],
                         ids=["bert_base", "llama_1b"])
def test_meta_models_classify_with_their_rows(make, heads, grouped):
    model, inputs = make(2)
    res = taxcompile.classify(model, inputs)
    assert _row(res) == ROW, res.text()
    assert len(res.recognised) == len(res.attentions) == 2  # one a layer
    text = res.text()
    assert f"weighs {heads} heads" in text and "(input_ids)" in text
    assert ("shared between query heads" in text) == grouped
    # nothing was allocated: the parameters are still on the meta device
    assert {p.device.type for p in model.parameters()} == {"meta"}
    assert next(model.parameters()).dtype == torch.float32
