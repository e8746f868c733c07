"""Document-wide word weights (issue 25; examples/document_word_weights.attn): a HAN's word
weight α_sw rescaled by its sentence's weight β_s, a_sw = β_s α_sw, written
`word.weights * sentence.weights`, checked against a float64 reference of the survey's
additive score and softmax (eq. 6, 25) computed here from the keys each module reads:
one distribution over the document's words (Σ_s Σ_w a_sw = 1), 0 at padding, and
Σ_s Σ_w a_sw h_sw read as values."""

from __future__ import annotations

import pytest

from conftest import ROOT
from taxcompile import codegen, pipeline

torch = pytest.importorskip("torch")

from taxcompile.run import load_module  # noqa: E402
from torch_support import fast_cpu  # noqa: E402

DT = torch.float64
EXAMPLE = ROOT / "examples" / "document_word_weights.attn"


@pytest.fixture(scope="module")
def han():
    with fast_cpu():
        cs = pipeline.load(EXAMPLE)
        mod = load_module(codegen.generate(cs, cs.models[0], str(EXAMPLE)), "doc_word_weights")
        yield mod


def additive_softmax(att, q, keys, keep):
    """a = softmax_l(w^T tanh(W1 q + W2 k_l + b)) over the kept keys (eq. 6, 25), in
    float64; all zero when no key is kept."""
    W1, W2, b, w = (p[0].detach().to(DT) for p in (att.W1, att.W2, att.b, att.w))
    e = torch.tanh(q @ W1 + keys @ W2 + b) @ w  # (L,)
    if not keep.any():
        return torch.zeros_like(e)
    return torch.softmax(e.masked_fill(~keep, float("-inf")), 0)


def test_document_wide_word_weights_match_the_reference(han):
    mod = han
    torch.manual_seed(0)
    cfg = mod.Config(vocab=50, d_emb=8, hidden=4, d_w=6, S=4, W=5)
    model = mod.Model(cfg).to(DT)
    seen = {}
    for name in ("word", "sentence"):  # the keys each module reads
        getattr(model, name).register_forward_hook(
            lambda m, args, out, name=name: seen.__setitem__(name, args[1].detach()))
    inputs = mod.example_inputs(3, seed=2, cfg=cfg)
    keep = inputs["doc_mask"].clone()
    keep[1, 2:] = False  # example 1: two whole sentences padded
    keep[2, 1, 1:] = False  # example 2: a one-word sentence
    inputs["doc_mask"] = keep
    out = model(**inputs).output
    a = out["words"].detach()
    assert a.shape == (3, 4, 5)
    h = seen["word"].view(3, 4, 5, -1)  # (B, S, W, 2 hidden): the words' annotations
    hs = seen["sentence"]  # (B, S, 2 hidden): the sentence annotations
    for b in range(3):
        real_s = keep[b].any(-1)
        beta = additive_softmax(model.sentence, model.sentence_q.detach().to(DT), hs[b], real_s)
        for s in range(4):
            alpha = additive_softmax(model.word, model.word_q.detach().to(DT), h[b, s], keep[b, s])
            torch.testing.assert_close(a[b, s], beta[s] * alpha, atol=1e-12, rtol=0)
        assert float(a[b].sum()) == pytest.approx(1.0, abs=1e-12)  # one distribution
        assert float(a[b][~keep[b]].abs().sum()) == 0.0  # padded words weigh nothing
        want = (a[b].unsqueeze(-1) * h[b]).sum((0, 1))  # Σ_s Σ_w a_sw h_sw
        torch.testing.assert_close(out["summary"][b].detach(), want, atol=1e-12, rtol=0)
    # the weights train: a loss on them reaches both modules' scores
    (out["words"][:, 0, 0].sum() + out["label"].sum()).backward()
    assert model.word.W2.grad.abs().sum() > 0 and model.sentence.W2.grad.abs().sum() > 0
