"""Model.loss() for logits outputs that are not C > 1 classes: the cross-entropy over one
class is always 0, so a `classify(x, 1)` over positions is a pointer (cross-entropy over
the positions, QANet's and BiDAF's start and end, Seo et al. eq. 11: -log p1(y1) -
log p2(y2)), one logit per example is the sigmoid's cross-entropy, and a model with several
logits outputs sums their losses. Checked against the formulas written out here."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import taxcompile  # noqa: E402
from taxcompile.run import load_module  # noqa: E402

from conftest import ROOT, SPECS  # noqa: E402

DT = torch.float64

HEADER = """
paper t {
    cite  = "Test"
    title = "losses"
    year  = 2024
}
"""


def nll_over_positions(scores: torch.Tensor, gold: torch.Tensor, keep: torch.Tensor):
    """-log softmax over the kept positions at the gold one, the mean over the batch."""
    s = scores.squeeze(-1).clone()
    s[~keep] = -float("inf")
    logp = s - torch.logsumexp(s, dim=1, keepdim=True)
    return -logp[torch.arange(len(gold)), gold].mean()


def test_qanet_sums_the_start_and_end_pointers_over_the_context():
    mod = load_module((ROOT / "generated" / "yu2018_qanet.py").read_text(encoding="utf-8"),
                      "_taxcompile_loss_qanet")
    torch.manual_seed(0)
    model = mod.Model(mod.Config.tiny()).to(DT).eval()
    ex = mod.example_inputs(3, seed=1, cfg=model.cfg)
    out = model(**ex)
    keep = ex["context_mask"]
    gold = {"start": torch.tensor([0, 2, 1]), "end": torch.tensor([4, 3, 1])}
    want = (nll_over_positions(out.output["start"], gold["start"], keep)
            + nll_over_positions(out.output["end"], gold["end"], keep))
    got = model.loss(out, gold, {"start": keep, "end": keep})
    assert want > 0.1 and torch.allclose(got, want, rtol=1e-10), (got, want)
    # without the mask every position of the context counts
    full = torch.ones_like(keep)
    want = (nll_over_positions(out.output["start"], gold["start"], full)
            + nll_over_positions(out.output["end"], gold["end"], full))
    assert torch.allclose(model.loss(out, gold), want, rtol=1e-10)


def test_one_score_per_position_is_a_pointer_and_one_logit_a_sigmoid():
    text = HEADER + """
model pointer {
    input x: tokens[L] (vocab = 20)
    feature h = embed(x, 8)
    attention a { query = project(h)  keys = project(h)  values = h  score = scaled_multiplicative }
    output at = classify(a, 1)
}
model binary {
    input x: tokens[L] (vocab = 20)
    feature h = embed(x, 8)
    attention a { query = learned(8)  features = h  score = additive }
    output yes = classify(a, 1)
}
"""
    torch.manual_seed(0)
    m = taxcompile.build(text, "pointer", tiny=True).to(DT)
    x = torch.randint(0, 20, (4, 6), generator=torch.Generator().manual_seed(2))
    keep = torch.arange(6) < torch.tensor([[6], [5], [3], [6]])
    out = m(x, x_mask=keep)
    gold = torch.tensor([5, 0, 2, 3])
    assert torch.allclose(m.loss(out, gold, keep), nll_over_positions(out.output, gold, keep),
                          rtol=1e-10)

    b = taxcompile.build(text, "binary", tiny=True).to(DT)
    z = b(x).output.reshape(-1)  # (B,)
    y = torch.tensor([1, 0, 1, 1])
    p = torch.sigmoid(z)
    want = -(y * p.log() + (1 - y) * (1 - p).log())
    assert torch.allclose(b.loss(b(x), y), want.mean(), rtol=1e-10)
    count = torch.tensor([True, True, False, True])
    assert torch.allclose(b.loss(b(x), y, count), want[count].mean(), rtol=1e-10)


def test_the_golden_qanet_file_has_the_pointer_loss():
    """The committed file (regenerated and diffed in CI) is the one checked above."""
    assert (SPECS / "yu2018.attn").exists()
    text = (ROOT / "generated" / "yu2018_qanet.py").read_text(encoding="utf-8")
    assert 'output_loss("positions", out.output[\'start\']' in text
