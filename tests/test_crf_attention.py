"""Structured attention (Kim et al. 2017; seed 000): `align = crf`, the marginals
p(z_l = 1 | e) of a linear-chain CRF over the keys, against a brute-force enumeration of
all 2^n selections in float64, with padding and masks that are not a prefix; its
gradient, its normalised variant, its classification and its example."""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")

from conftest import ROOT, cell_of, classify_text  # noqa: E402
from torch_support import inline_builder  # noqa: E402

DT = torch.float64
HEADER = 'paper crf {\n    cite = "Test"\n    title = "CRF tests"\n    year = 2024\n}\n'


def spec(align: str = "crf", heads: int = 1, score: str = "multiplicative") -> str:
    return f"""
    model m {{
        input x: sequence[L, 4]
        input y: sequence[T, 4]
        attention att {{ query = y  features = x  score = {score}  align = {align}  heads = {heads} }}
        output out = identity(att)
    }}
    """


@pytest.fixture(scope="module")
def gen(tmp_path_factory):
    return inline_builder(tmp_path_factory.mktemp("generated"), HEADER, "_taxcompile_crf")


def brute_marginals(e: torch.Tensor, keep: torch.Tensor, trans: torch.Tensor) -> torch.Tensor:
    """p(z_l = 1) for one row of scores e (L,) over the kept positions: the sum over every
    selection z in {0, 1}^n of exp(sum_l z_l e_l + sum_l trans[z_l, z_l+1]) (neighbours
    among the kept positions), each position's share of the selections that pick it."""
    idx = [i for i in range(len(e)) if keep[i]]
    out = torch.zeros(len(e), dtype=DT)
    if not idx:
        return out
    total = torch.zeros((), dtype=DT)
    for z in itertools.product((0, 1), repeat=len(idx)):
        s = sum(e[i] * zi for i, zi in zip(idx, z)) + sum(trans[z[j], z[j + 1]]
                                                         for j in range(len(z) - 1))
        w = torch.exp(torch.as_tensor(s, dtype=DT))
        total = total + w
        for i, zi in zip(idx, z):
            if zi:
                out[i] += w
    return out / total


def run(mod, heads: int, trans: torch.Tensor, key_mask=None, seed: int = 0):
    torch.manual_seed(seed)
    model = mod.Model(mod.Config()).double()
    with torch.no_grad():
        model.att.transitions.copy_(trans)
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 3, 4, generator=g, dtype=DT)
    k = torch.randn(2, 6, 4, generator=g, dtype=DT) * 1.5
    v = torch.randn(2, 6, 4, generator=g, dtype=DT)
    c, a, _ = model.att(q, k, v, key_mask)
    return q, k, v, c, a


MASKS = {"none": None,
         "padding": torch.tensor([[True] * 6, [True] * 4 + [False] * 2]),
         "holes": torch.tensor([[True, False, True, True, False, True],
                                [False, True, True, False, False, False]])}


@pytest.mark.parametrize("mask", sorted(MASKS))
@pytest.mark.parametrize("heads", [1, 2])
def test_marginals_match_brute_force(gen, mask, heads):
    mod = gen(spec(heads=heads, score="scaled_multiplicative" if heads > 1 else "multiplicative"))
    trans = torch.randn(heads, 2, 2, generator=torch.Generator().manual_seed(1), dtype=DT)
    key_mask = MASKS[mask]
    q, k, v, c, a = run(mod, heads, trans, key_mask)
    Hd = 4 // heads
    for n in range(2):
        keep = torch.ones(6, dtype=torch.bool) if key_mask is None else key_mask[n]
        for h in range(heads):
            qs, ks = q[n, :, h * Hd:(h + 1) * Hd], k[n, :, h * Hd:(h + 1) * Hd]
            e = qs @ ks.T / (Hd ** 0.5 if heads > 1 else 1.0)  # (Lq, Lk)
            for i in range(3):
                want = brute_marginals(e[i], keep, trans[h])
                torch.testing.assert_close(a[n, h, i], want, atol=1e-10, rtol=1e-9)
        if heads == 1:  # c = sum_l a_l v_l (eq. 4); several heads are joined by W_O
            ctx = torch.stack([brute_marginals(e[i], keep, trans[0]) for i in range(3)])
            torch.testing.assert_close(c[n], ctx @ v[n])


def test_zero_transitions_give_independent_sigmoids(gen):
    """With trans = 0 the chain factorises: p(z_l = 1) = sigmoid(e_l) (Kim et al. Fig. 1b)."""
    mod = gen(spec())
    q, k, v, c, a = run(mod, 1, torch.zeros(1, 2, 2, dtype=DT))
    torch.testing.assert_close(a[:, 0], torch.sigmoid(q @ k.transpose(1, 2)))


def test_transitions_couple_neighbours(gen):
    """A strong reward for (1, 1) raises a weak position's weight next to strong ones: the
    check above could pass with transitions that are ignored; this one cannot."""
    mod = gen(spec())
    coupled = torch.tensor([[[0.0, 0.0], [0.0, 4.0]]], dtype=DT)
    _, _, _, _, a0 = run(mod, 1, torch.zeros(1, 2, 2, dtype=DT))
    _, _, _, _, a1 = run(mod, 1, coupled)
    assert not torch.allclose(a0, a1)


def test_normalised_marginals_sum_to_one_and_gradients_flow(gen):
    mod = gen(spec("crf(normalize = true)"))
    trans = torch.randn(1, 2, 2, generator=torch.Generator().manual_seed(2), dtype=DT)
    key_mask = MASKS["holes"]
    q, k, v, c, a = run(mod, 1, trans, key_mask)
    torch.testing.assert_close(a.sum(-1), torch.ones_like(a.sum(-1)))
    assert (a[..., ~key_mask[1]][1] == 0).all()
    # gradcheck through forward-backward, w.r.t. the scores' inputs and the transitions
    model = mod.Model(mod.Config()).double()
    qq = q[:1, :1].clone().requires_grad_()
    kk = k[:1].clone().requires_grad_()
    trans = model.att.transitions

    def f(qq, kk, tr):
        with torch.no_grad():
            trans.copy_(tr)
        return model.att(qq, kk, v[:1], key_mask[:1])[1]

    tr = torch.randn(1, 2, 2, dtype=DT, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a_, b_: f(a_, b_, tr.detach()), (qq, kk))
    out = model.att(qq, kk, v[:1], key_mask[:1])[0]
    out.square().sum().backward()
    assert torch.isfinite(trans.grad).all() and trans.grad.abs().sum() > 0


def test_classified_as_global_with_the_reason():
    text = (ROOT / "examples" / "kim2017_structured.attn").read_text(encoding="utf-8")
    assert classify_text(text)["alignment"] == "Global"
    reason = " ".join(cell_of(text, "alignment")["Global"])
    assert "linear-chain CRF" in reason and "none is sampled" in reason


def test_example_runs_forward_and_backward(tmp_path):
    build = inline_builder(tmp_path, "", "_taxcompile_kim")
    mod = build((ROOT / "examples" / "kim2017_structured.attn").read_text(encoding="utf-8"))
    torch.manual_seed(0)
    model = mod.Model(mod.Config.tiny())
    inputs = mod.example_inputs(cfg=model.cfg)
    out = model(**inputs, return_attention=True)
    loss = model.loss(out, inputs["tgt"], inputs["tgt_mask"])
    loss.backward()
    assert torch.isfinite(loss)
    assert model.att.transitions.grad is not None and torch.isfinite(model.att.transitions.grad).all()
    w = out.attention["att"]  # normalised marginals: each row sums to 1 over the source
    torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)))


@pytest.mark.parametrize("normalize", [False, True])
def test_raw_marginals_are_no_distribution(normalize):
    """`.weights` reads a distribution over the keys: refused for the raw marginals, taken
    for the normalised ones (where another check, the free axis, is the first to speak)."""
    from taxcompile import pipeline
    from taxcompile.diagnostics import SpecError

    align = "crf(normalize = true)" if normalize else "crf"
    text = HEADER + f"""model m {{
    input x: sequence[L, 8]
    input y: sequence[T, 8]
    attention a {{ query = y  features = x  score = multiplicative  align = {align} }}
    output p = a.weights
}}
"""
    with pytest.raises(SpecError) as info:
        pipeline.load_text(text, "t.attn")
    said = "a CRF's marginals p(z_l = 1) are not normalised" in info.value.diagnostics[0].message
    assert said is not normalize


def test_multi_dimensional_layout_matches_brute_force(gen):
    """Multi-dimensional weights (eq. 30-32): one chain per feature, the keys on axis 3 and
    the features after them, (N, H, Lq, Lk, d); the helper of the generated file."""
    mod = gen(spec())
    g = torch.Generator().manual_seed(4)
    e = torch.randn(2, 2, 1, 5, 3, generator=g, dtype=DT)
    trans = torch.randn(2, 1, 1, 2, 2, generator=g, dtype=DT)  # per head
    keep = torch.tensor([[True, True, False, True, True], [True, True, True, False, False]])
    a = mod.crf_marginals(e, keep[:, None, None, :, None], trans, dim=3)
    for n, h, f in itertools.product(range(2), range(2), range(3)):
        want = brute_marginals(e[n, h, 0, :, f], keep[n], trans[h, 0, 0])
        torch.testing.assert_close(a[n, h, 0, :, f], want, atol=1e-10, rtol=1e-9)
