"""`crf(x, tags)`: a linear-chain CRF output layer (Lafferty et al.; Winata et al.'s
tagger). The generated Model.loss (the negative log-likelihood by the forward algorithm)
against a brute-force sum over all K^n tag paths in float64, Model.decode (Viterbi)
against the argmax path, both with padding that is not a prefix; the gradient; the
example; the located errors."""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")

from conftest import ROOT, classify_text  # noqa: E402
from torch_support import inline_builder  # noqa: E402

from taxcompile.diagnostics import SpecError  # noqa: E402
from taxcompile import pipeline  # noqa: E402

DT = torch.float64
HEADER = 'paper crf {\n    cite = "Test"\n    title = "CRF tests"\n    year = 2024\n}\n'
TAGGER = """
model m {
    input x: sequence[L, 4]
    attention a { query = project(x)  keys = x  score = scaled_multiplicative }
    output tags = crf(linear(x + a, 6, act = tanh), 3)
}
"""


@pytest.fixture(scope="module")
def model():
    import tempfile
    from pathlib import Path

    build = inline_builder(Path(tempfile.mkdtemp()), HEADER, "_taxcompile_crf_tagger")
    mod = build(TAGGER)
    torch.manual_seed(0)
    m = mod.Model(mod.Config()).double()
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():  # transitions, start and end well away from 0: they must count
        for p in m.tags_crf.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=DT))
    return m


def path_scores(em, ys, idx, crf) -> torch.Tensor:
    """s(y) of each path y (rows of ys, tags at the kept positions idx): start, emissions,
    transitions, end."""
    s = crf.start[ys[:, 0]] + crf.end[ys[:, -1]]
    s = s + em[idx][torch.arange(len(idx)), ys].sum(-1)
    return s + crf.transitions[ys[:, :-1], ys[:, 1:]].sum(-1)


def brute(em, tags, keep, crf):
    """(-log p(tags | x), the argmax path) by enumerating every tag path over the kept
    positions of one sequence."""
    idx = [i for i in range(em.shape[0]) if keep[i]]
    if not idx:
        return torch.zeros((), dtype=DT), [-1] * em.shape[0]
    ys = torch.tensor(list(itertools.product(range(em.shape[1]), repeat=len(idx))))
    scores = path_scores(em, ys, idx, crf)
    gold = path_scores(em, tags[idx][None], idx, crf)[0]
    out = [-1] * em.shape[0]
    for i, t in zip(idx, ys[int(scores.argmax())].tolist()):
        out[i] = t
    return torch.logsumexp(scores, 0) - gold, out


MASKS = [torch.tensor([[True] * 5, [True] * 3 + [False] * 2, [True, False, True, True, False]])]


@pytest.mark.parametrize("masked", [False, True])
def test_nll_and_viterbi_match_brute_force(model, masked):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(3, 5, 4, generator=g, dtype=DT)
    tags = torch.randint(0, 3, (3, 5), generator=g)
    mask = MASKS[0] if masked else None
    out = model(x, x_mask=None)
    em = out.output.detach()
    keep = torch.ones(3, 5, dtype=torch.bool) if mask is None else mask
    want = [brute(em[b], tags[b], keep[b], model.tags_crf) for b in range(3)]
    torch.testing.assert_close(model.loss(out, tags, mask),
                               torch.stack([w[0] for w in want]).mean(), rtol=1e-10, atol=1e-10)
    assert model.decode(out, mask).tolist() == [w[1] for w in want]
    # ignore_index is the same as a mask
    if masked:
        hidden = tags.masked_fill(~mask, -100)
        torch.testing.assert_close(model.loss(out, hidden), model.loss(out, tags, mask))


def test_nll_is_not_the_per_token_cross_entropy(model):
    """The transitions count: the CRF's NLL differs from the tokens' independent softmax
    (so a tagger that ignored them would fail the check above)."""
    x = torch.randn(2, 4, 4, dtype=DT, generator=torch.Generator().manual_seed(7))
    tags = torch.tensor([[0, 1, 2, 0], [2, 2, 1, 0]])
    out = model(x)
    ce = torch.nn.functional.cross_entropy(out.output.reshape(-1, 3), tags.reshape(-1),
                                           reduction="sum") / 2
    assert not torch.isclose(model.loss(out, tags), ce)


def test_gradient_flows_to_every_parameter(model):
    x = torch.randn(2, 5, 4, dtype=DT, generator=torch.Generator().manual_seed(9))
    tags = torch.randint(0, 3, (2, 5), generator=torch.Generator().manual_seed(9))
    model.zero_grad()
    model.loss(model(x), tags, MASKS[0][1:]).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert model.tags_crf.transitions.grad.abs().sum() > 0


def test_example_runs_and_keeps_its_row(tmp_path):
    text = (ROOT / "examples" / "crf_tagger.attn").read_text(encoding="utf-8")
    build = inline_builder(tmp_path, "", "_taxcompile_crf_example")
    mod = build(text)
    torch.manual_seed(0)
    m = mod.Model(mod.Config.tiny())
    inputs = mod.example_inputs(cfg=m.cfg)
    out = m(**inputs)
    tags = torch.randint(0, m.cfg.tags, inputs["words"].shape)
    loss = m.loss(out, tags, inputs["words_mask"])
    loss.backward()
    assert torch.isfinite(loss) and loss > 0
    path = m.decode(out, inputs["words_mask"])
    assert path.shape == inputs["words"].shape
    assert ((path == -1) == ~inputs["words_mask"]).all()
    # the output layer is no attention: the row is that of the same model with classify
    assert classify_text(text) == classify_text(text.replace("crf(x, tags)", "classify(x, tags)"))


@pytest.mark.parametrize("body,msg", [
    ("feature t = crf(a, 3)\n    output y = classify(t, 2)", "`crf` is an output layer"),
    ("output y = crf(mean(a), 3)", "tags each position of a sequence"),
])
def test_misplaced_crf_is_a_located_error(body, msg):
    text = HEADER + ("model m {\n    input x: sequence[L, 4]\n    attention a { query = "
                     f"project(x)  keys = x  score = multiplicative }}\n    {body}\n}}\n")
    with pytest.raises(SpecError) as info:
        pipeline.load_text(text, "t.attn")
    assert msg in info.value.diagnostics[0].message
    assert info.value.diagnostics[0].loc.line == 9


def test_crf_as_a_feature_snapshot():
    from conftest import error_snapshot

    got, want = error_snapshot("crf_as_feature")
    assert got == want
