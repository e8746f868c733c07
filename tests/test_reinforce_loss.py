"""A generated model with a sampled alignment (hard attention, Xu et al. 2015 eq. 26) trains
its attention through its own ``loss()``: the sample has no gradient, so the loss adds the
REINFORCE term. Checked against the term written out here from ``out.log_probs`` and a
per-example cross-entropy computed independently, and by the gradient the score's
parameters get (none without the term)."""

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

import taxcompile  # noqa: E402

from conftest import SPECS  # noqa: E402


def _hard():
    torch.manual_seed(0)
    m = taxcompile.build(SPECS / "xu2015.attn", "hard", tiny=True).double()
    mod = taxcompile.module(SPECS / "xu2015.attn", "hard")
    x = mod.example_inputs(4, seed=1, cfg=m.cfg)
    return m, {k: v.double() if v.is_floating_point() else v for k, v in x.items()}


def _reference(out, caption, keep):
    """Teacher forcing's mean cross-entropy plus -(r - mean r) * log p(samples), r = -the
    example's mean cross-entropy over its real next tokens."""
    logits, target, keep = out.output[:, :-1], caption[:, 1:], keep[:, 1:]
    ce = F.cross_entropy(logits.transpose(1, 2), target, reduction="none")  # (B, T - 1)
    mean = (ce * keep).sum() / keep.sum()
    each = ((ce * keep).sum(1) / keep.sum(1).clamp_min(1)).detach()
    reward = -(each - each.mean())
    (lp,) = out.log_probs.values()
    return mean - (reward * lp.reshape(len(each), -1).sum(1)).mean()


def test_the_loss_adds_reinforce_in_training():
    m, x = _hard()
    m.train()
    torch.manual_seed(3)
    out = m(**x)
    got = m.loss(out, x["caption"], x["caption_mask"])
    want = _reference(out, x["caption"], x["caption_mask"].double())
    assert torch.allclose(got, want, atol=1e-10), (float(got), float(want))


def test_the_score_learns_from_the_samples():
    m, x = _hard()
    m.train()
    torch.manual_seed(3)
    m.loss(m(**x), x["caption"], x["caption_mask"]).backward()
    # the score's vector w (eq. 6) reaches the loss only through the sampled position
    assert float(m.att.w.grad.abs().sum()) > 0


def test_evaluation_reports_the_plain_loss():
    m, x = _hard()
    m.eval()
    with torch.no_grad():
        out = m(**x)
        got = m.loss(out, x["caption"], x["caption_mask"])
    logits, target, keep = out.output[:, :-1], x["caption"][:, 1:], x["caption_mask"][:, 1:]
    want = F.cross_entropy(logits[keep], target[keep])
    assert torch.allclose(got, want, atol=1e-10)


def test_a_crf_tagger_with_hard_attention_adds_reinforce(tmp_path):
    from conftest import ROOT

    text = (ROOT / "examples" / "crf_tagger.attn").read_text(encoding="utf-8")
    spec = tmp_path / "crf_hard.attn"
    spec.write_text(text.replace("        heads  = 4\n", "        align  = hard\n"),
                    encoding="utf-8")
    torch.manual_seed(0)
    m = taxcompile.build(spec, tiny=True).double()
    x = taxcompile.module(spec).example_inputs(3, seed=2, cfg=m.cfg)
    g = torch.Generator().manual_seed(5)
    tags = torch.randint(0, m.cfg.tags, x["words"].shape, generator=g)
    m.train()
    out = m(**x)
    got = m.loss(out, tags, x["words_mask"])
    nll = m.labels_crf.nll(out.output, tags, x["words_mask"].bool()).detach()
    reward = -(nll - nll.mean())
    (lp,) = out.log_probs.values()
    want = m.labels_crf.nll(out.output, tags, x["words_mask"].bool()).mean() - (
        reward * lp.reshape(3, -1).sum(1)).mean()
    assert torch.allclose(got, want, atol=1e-10)
