"""Location weights (issue 25): `location(x, kind = …, hop = k, aspect = A)`, the fixed
weights of Tang et al. 2016's location attention (seed 002 §2.1.2, eq. 10-11) and of
Sukhbaatar et al. 2015's position encoding, checked against float64 references written
here; eq. 12-13 written with `positions(x, kind = learned)`; the example
examples/tang2016_location_memory.attn (MemNet) against a float64 reference of its hops.

T is each example's real length (Tang et al.: "n is the sentence length"; Sukhbaatar et
al.: "J the number of words in the sentence"), so padding changes no real position's
weight, and a padded position weighs 0."""

from __future__ import annotations

import pytest

from conftest import ROOT, error_snapshot
from taxcompile import codegen, pipeline

torch = pytest.importorskip("torch")

from taxcompile.run import load_module  # noqa: E402
from torch_support import build_model, one_thread  # noqa: E402, F401

DT = torch.float64
HEADER = 'paper t { cite = "T" }\n'
EXAMPLE = ROOT / "examples" / "tang2016_location_memory.attn"


def build(text: str, name: str, model: int = 0):
    return build_model(HEADER + text, name, model)


def ref_location(L: int, d: int, n: int, aspect=None, hop=None, encoding=False):
    """The weights of one example, (L, d) or (L, 1), written from the papers: position j
    (1-based) or the distance to the nearest aspect position, n real positions, 0 after."""
    width = d if encoding and hop is None else 1
    out = torch.zeros(L, width, dtype=DT)
    for j in range(L):
        if j >= n:
            continue
        Lj = (j + 1) if aspect is None else min(abs(j - a) for a in aspect)
        r = Lj / n
        for k in range(width):
            if not encoding:
                out[j, k] = 1 - r  # Tang et al.'s Model 2 (eq. 11)
            else:  # eq. 10: k the hop (Tang et al.'s Model 1) or the feature (Sukhbaatar)
                kk = hop if hop is not None else k + 1
                out[j, k] = (1 - r) - (kk / d) * (1 - 2 * r)
    return out


WEIGHTS = """model m {
    input x:   sequence[L, 6]
    input asp: pointers[A] (into = L)
    attention a { query = x  keys = x  score = multiplicative }
    output o = concat(x * location(x), x * location(x, kind = encoding),
                      x * location(x, kind = encoding, hop = 2), x * location(x, aspect = asp),
                      x * location(x, kind = encoding, aspect = asp), a)
}
"""


def test_location_weights_match_the_papers_with_padding():
    mod = build(WEIGHTS, "loc_weights")
    model = mod.Model(mod.Config()).to(DT)
    torch.manual_seed(0)
    B, L, d = 3, 7, 6
    x = torch.randn(B, L, d, dtype=DT)
    lengths = [7, 4, 5]
    x_mask = torch.arange(L)[None, :] < torch.tensor(lengths)[:, None]
    asp = torch.tensor([[2, 3], [0, 0], [4, 1]])
    asp_mask = torch.tensor([[True, True], [True, False], [True, False]])  # padded aspects
    out = model(x, asp, x_mask=x_mask, asp_mask=asp_mask).output
    assert out.shape == (B, L, 6 * d)
    out = out[..., : 5 * d]  # the context of `a` last
    for b, n in enumerate(lengths):
        a = [int(p) for p, k in zip(asp[b], asp_mask[b]) if k]
        want = torch.cat([x[b] * ref_location(L, d, n),
                          x[b] * ref_location(L, d, n, encoding=True),
                          x[b] * ref_location(L, d, n, encoding=True, hop=2),
                          x[b] * ref_location(L, d, n, aspect=a),
                          x[b] * ref_location(L, d, n, aspect=a, encoding=True)], -1)
        torch.testing.assert_close(out[b], want, atol=1e-12, rtol=0)  # in the model's float64
    # T is the real length: a padded copy of example 1 weighs its real words as unpadded
    short = model(x[1:2, :4], asp[1:2, :1]).output[..., : 5 * d]
    torch.testing.assert_close(short[0], out[1, :4], atol=1e-12, rtol=0)


def test_the_encoding_is_sukhbaatar_et_al_s_table():
    """l_kj = (1 - j/J) - (k/d)(1 - 2j/J) at a few entries, by hand: J = 4, d = 6."""
    w = ref_location(4, 6, 4, encoding=True)
    assert float(w[0, 0]) == pytest.approx((1 - 1 / 4) - (1 / 6) * (1 - 2 / 4))
    assert float(w[3, 5]) == pytest.approx(0 - 1 * (1 - 2))  # j = J, k = d: 1


EQ12_13 = """model m {
    input x: sequence[L, 6] (L = 5)
    attention a { query = x  keys = x  score = multiplicative }
    output o = concat(x + positions(x, kind = learned), x * sigmoid(positions(x, kind = learned)),
                      a)
}
"""


def test_learned_locations_of_eq_12_and_13_are_writable():
    mod = build(EQ12_13, "loc_learned")
    model = mod.Model(mod.Config()).to(DT)
    x = torch.randn(2, 5, 6, dtype=DT)
    out = model(x).output[..., :12]
    tables = [m.weight for m in model.modules() if isinstance(m, torch.nn.Embedding)]
    assert len(tables) == 2 and all(t.shape == (5, 6) for t in tables)
    want = torch.cat([x + tables[0], x * torch.sigmoid(tables[1])], -1)  # eq. 12, eq. 13
    torch.testing.assert_close(out, want, atol=1e-12, rtol=0)


def memnet_reference(parts, d, hops, sent, aspect, pos, sent_mask, aspect_mask, pos_mask,
                     location):
    """Tang et al.'s MemNet in float64, from the paper: v = mean of the aspect's word
    vectors; hop k: m_j = e_j ⊙ l_j^k, g_j = tanh(W_att [m_j; v] + b_att) (the additive
    score with d_w = 1, times its scalar w), α = softmax(g) over the real words,
    v <- W v + Σ_j α_j m_j. ``parts``: the embedding, attention, W and output layer."""
    E, att, lin, head = parts
    logits = []
    for b in range(sent.shape[0]):
        n = int(sent_mask[b].sum())
        a_words = [int(t) for t, k in zip(aspect[b], aspect_mask[b]) if k]
        a_pos = [int(p) for p, k in zip(pos[b], pos_mask[b]) if k]
        e = E.weight[sent[b, :n]]  # (n, d)
        v = E.weight[a_words].mean(0)
        for k in range(1, hops + 1):
            m = e * location(sent.shape[1], d, n, a_pos, k)[:n]
            g = att.w[0, 0] * torch.tanh(m @ att.W2[0, :, 0] + v @ att.W1[0, :, 0] + att.b[0, 0])
            alpha = torch.softmax(g, 0)
            v = lin.weight @ v + alpha @ m
        logits.append(head(v))
    return torch.stack(logits)


def check_memnet(mod, cfg, parts, hops, location):
    model = parts[0]
    inputs = mod.example_inputs(3, seed=1, cfg=cfg)
    out = model(**inputs).output
    want = memnet_reference(parts[1:], cfg.d, hops, **inputs, location=location)
    torch.testing.assert_close(out, want, atol=1e-12, rtol=1e-12)
    out.sum().backward()
    assert parts[1].weight.grad.abs().sum() > 0 and parts[2].W2.grad.abs().sum() > 0


@pytest.mark.parametrize("variant, location", [
    ("location2", lambda L, d, n, a, k: ref_location(L, d, n, aspect=a)),
    ("location1", lambda L, d, n, a, k: ref_location(L, d, n, aspect=a, encoding=True)),
])
def test_memnet_example_matches_its_reference(variant, location):
    cs = pipeline.load(EXAMPLE)
    cm = next(c for c in cs.models if c.model.name == variant)
    mod = load_module(codegen.generate(cs, cm, str(EXAMPLE)), f"tang_{variant}")
    torch.manual_seed(0)
    cfg = mod.Config(d=8, vocab=40)
    model = mod.Model(cfg).to(DT)
    parts = (model, model.e_embed, model.hop.att, model.hop.v_1_linear, model.polarity_head)
    check_memnet(mod, cfg, parts, cfg.hops, location)


# Tang et al.'s Model 1 as their text reads eq. 10 (k the hop): one memory per hop, so the
# hops are written out, the second using the first's weights (`share`).
MODEL1_HOPS = """let d = 8
model m {
    input sent:   tokens[S] (vocab = 40)
    input aspect: tokens[A] (vocab = 40)
    input pos:    pointers[A] (into = S)
    feature e = embed(sent, d)
    query v0 = mean(embed(aspect, d, share = e))
    feature m1 = e * location(e, kind = encoding, hop = 1, aspect = pos)
    feature m2 = e * location(e, kind = encoding, hop = 2, aspect = pos)
    attention h1 { query = v0  features = m1  score = additive(d_w = 1) }
    feature v1 = linear(v0, d, bias = false) + h1
    attention h2 { query = v1  features = m2  score = additive(d_w = 1)  share = h1 }
    feature v2 = linear(v1, d, bias = false, share = v1) + h2
    output polarity = classify(v2, 3)
}
"""


def test_model_1_with_the_hop_number_matches_its_reference():
    mod = build(MODEL1_HOPS, "tang_model1_hops")
    torch.manual_seed(0)
    cfg = mod.Config()
    model = mod.Model(cfg).to(DT)
    parts = (model, model.e_embed, model.h1, model.v1_linear, model.polarity_head)
    check_memnet(mod, cfg, parts, 2,
                 lambda L, d, n, a, k: ref_location(L, d, n, aspect=a, encoding=True, hop=k))


@pytest.mark.parametrize("variant", ["location3", "location4"])
def test_learned_location_variants_run_forward_and_backward(variant):
    """Models 3 and 4 (eq. 12-13): the learned table gets a gradient and changes the output."""
    cs = pipeline.load(EXAMPLE)
    cm = next(c for c in cs.models if c.model.name == variant)
    mod = load_module(codegen.generate(cs, cm, str(EXAMPLE)), f"tang_{variant}")
    cfg = mod.Config(d=8, vocab=40, max_len=16)
    model = mod.Model(cfg).to(DT)
    inputs = mod.example_inputs(2, seed=0, cfg=cfg)
    out = model(**inputs).output
    out.sum().backward()
    table = next(m for n, m in model.named_modules() if n.endswith("pos"))
    assert table.weight.grad.abs().sum() > 0
    with torch.no_grad():
        table.weight.add_(1.0)
    assert not torch.allclose(model(**inputs).output, out)


@pytest.mark.parametrize("name", ["location_hop_linear", "location_aspect_not_pointers",
                                  "location_aspect_axis"])
def test_error_snapshot(name):
    got, want = error_snapshot(name)
    assert got == want
