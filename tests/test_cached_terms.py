"""generate()'s cached step with a relative position term computes the new query's row only.

1. Transformer-XL (Dai et al. 2019, §3.3): a step projects W_R R_r for its new distances
   alone; the rows of the earlier distances are kept in the cache (before, every step
   rebuilt the sinusoids and W_R over the whole prefix: O(L d^2) per step and layer);
2. a cached step's logits equal a float64 reference of the equations written here, for
   Transformer-XL's terms (a)-(d) and for Shaw et al.'s relative keys and values, at the
   step's position after the cached keys;
3. beam search reorders the KV cache by hypothesis, not the per-distance rows (which are
   the same for every row): the beams of the cached and the re-run generate() agree.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch_support import LM, inline_fixture, one_thread, peaked  # noqa: E402, F401

DT = torch.float64
HEADER = """\
paper p {
    cite  = "Test"
    title = "Cached position terms"
    year  = 2024
}
"""


TERMS = {"transformer_xl": "position = transformer_xl",
         "relative": "position = relative(k = 2, values = true)"}

gen = inline_fixture("cached_terms", HEADER)


def lm(gen, term):
    return peaked(gen(LM.format(mods=TERMS[term])))


# ---- the reference: the equations, float64, query i at position i --------------------------


def sinusoids(r, d):
    """Transformer-XL's R_r: sin(r f) in the first d/2 features, cos(r f) in the second,
    f = 10000^(-2m/d) (its PositionalEmbedding)."""
    f = 10000.0 ** (-torch.arange(0, d, 2, dtype=DT) / d)
    return torch.cat([(r[..., None] * f).sin(), (r[..., None] * f).cos()], -1)


def attention(att, term, q, k, v):
    """One causal self-attention's context over L positions, heads (N, H, L, d)."""
    H, L, d = q.shape[1], q.shape[2], q.shape[3]
    i, j = torch.arange(L, dtype=DT)[:, None], torch.arange(L, dtype=DT)
    if term == "transformer_xl":
        # A_ij = q_i^T k_j (a) + q_i^T W_R R_(i-j) (b) + u^T k_j (c) + v^T W_R R_(i-j) (d)
        WR = sinusoids(i - j, H * d) @ att.r_proj.weight.T  # (L, L, H d): W_R R_(i-j)
        WR = WR.view(L, L, H, d).permute(2, 0, 1, 3)  # (H, L, L, d)
        u, vb = att.u_bias[None], att.v_bias[None]  # (1, H, 1, d)
        e = (q @ k.transpose(-1, -2)  # (a)
             + torch.einsum("nhid,hijd->nhij", q, WR)  # (b)
             + u @ k.transpose(-1, -2)  # (c)
             + torch.einsum("nhid,hijd->nhij", vb.expand_as(q), WR))  # (d)
    else:  # Shaw et al. eq. 4-5: e_ij = q_i (k_j + a^K_ij)^T, a_ij = w_clip(j - i, -k, k)
        r = ((j - i).clamp(-att.clip, att.clip) + att.clip).long()
        e = q @ k.transpose(-1, -2) + torch.einsum("nhid,ijd->nhij", q, att.rel_k.weight[r])
    e = (e / d ** 0.5).masked_fill(j > i, float("-inf"))
    a = e.softmax(-1)
    c = a @ v
    if term == "relative":  # z_i = sum_j a_ij (v_j + a^V_ij) (Shaw et al. eq. 3)
        c = c + torch.einsum("nhij,ijd->nhid", a, att.rel_v.weight[r])
    N = c.shape[0]
    return c.transpose(1, 2).reshape(N, L, H * d) @ att.out.weight.T + att.out.bias


def reference(m, term, tokens):
    """The model's logits, every position, from its parameters and the equations."""
    x = m.x_embed.weight[tokens]  # (N, L, 16)
    N, L, _ = x.shape
    for layer in m.decoder:
        att = layer.self_attn
        q, k, v = (x @ layer.self_qkv_proj.weight.T).chunk(3, -1)
        q, k, v = (t.view(N, L, att.heads, -1).transpose(1, 2) for t in (q, k, v))
        y = x + attention(att, term, q, k, v)
        norm = layer.x_1_norm
        x = (y - y.mean(-1, keepdim=True)) / (y.var(-1, unbiased=False, keepdim=True)
                                              + norm.eps).sqrt() * norm.weight + norm.bias
    return x @ m.logits_head.weight.T + m.logits_head.bias


TOKENS = torch.tensor([[1, 5, 9, 2, 7, 3, 8], [4, 4, 11, 6, 0, 13, 2]])


# ---- 1. Transformer-XL's step projects its new distances only --------------------------------


def test_transformer_xl_step_projects_only_the_new_distances(gen):
    """A prompt of 3 tokens projects the distances 0..2 once; each later step projects one
    row of W_R R_r (its new distance), not the whole prefix's."""
    m = lm(gen, "transformer_xl")
    rows = []
    hooks = [layer.self_attn.r_proj.register_forward_hook(
        lambda mod, args, out: rows.append(args[0].shape[0])) for layer in m.decoder]
    try:
        cache = {}
        with torch.no_grad():
            m(tokens=TOKENS[:, :3], cache=cache)
            assert rows == [3, 3]  # the prompt: distances 0, 1, 2 in each layer
            for t in range(3, TOKENS.shape[1]):
                del rows[:]
                m(tokens=TOKENS[:, t:t + 1], cache=cache)
                assert rows == [1, 1], (t, rows)  # before: t + 1 rows in each layer
    finally:
        for h in hooks:
            h.remove()


# ---- 2. the cached step's values ---------------------------------------------------------------


@pytest.mark.parametrize("term", sorted(TERMS))
def test_cached_step_equals_the_equations(gen, term):
    """Each cached step's logits (one new token after the cache) are the reference's at its
    position; the full run's are too."""
    m = lm(gen, term)
    want = reference(m, term, TOKENS)
    cache = {}
    with torch.no_grad():
        torch.testing.assert_close(m(tokens=TOKENS).output, want, atol=1e-10, rtol=1e-9)
        first = m(tokens=TOKENS[:, :2], cache=cache).output
        torch.testing.assert_close(first, want[:, :2], atol=1e-10, rtol=1e-9)
        for t in range(2, TOKENS.shape[1]):
            step = m(tokens=TOKENS[:, t:t + 1], cache=cache).output[:, -1]
            torch.testing.assert_close(step, want[:, t], atol=1e-10, rtol=1e-9)


def test_the_reference_tells_the_terms_apart(gen):
    """Without the position terms' (b) and (d) (W_R zeroed) the reference moves: the test
    above reads them."""
    m = lm(gen, "transformer_xl")
    want = reference(m, "transformer_xl", TOKENS)
    with torch.no_grad():
        for layer in m.decoder:
            layer.self_attn.r_proj.weight.zero_()
    assert (reference(m, "transformer_xl", TOKENS) - want).abs().max() > 1e-2


# ---- 3. beam search ------------------------------------------------------------------------------


@pytest.mark.parametrize("term", sorted(TERMS))
def test_beam_search_with_the_cache_equals_the_reruns(gen, term):
    m = lm(gen, term)
    kw = dict(batch_size=3, max_len=6, bos=1, eos=29, strategy="beam", beams=3)
    assert torch.equal(m.generate(**kw), m.generate(**kw, incremental=False))


# ---- 4. LSH attention has no cached step -----------------------------------------------------


def test_lsh_refuses_a_cached_step_with_its_reason():
    """Reformer's LSH attention sorts all the target's positions by bucket into chunks: a
    new token shifts the later buckets' positions, so the keys an earlier position sees
    (and its output, which the next layer's cached keys would hold) change as the target
    grows; no cached step can equal the re-run. incremental=True is refused saying so,
    with where the spec asks for LSH; the default re-runs the prefix."""
    from conftest import ROOT

    import taxcompile

    path = ROOT / "examples" / "kitaev2020_reformer.attn"
    m = taxcompile.build(path, d_model=32, d_ff=64, heads=2, buckets=4, chunk=4).to(DT).eval()
    tokens = torch.randint(0, 256, (4, 21), generator=torch.Generator().manual_seed(20))
    with torch.no_grad():  # one token more moves the earlier positions' outputs
        moved = m(tokens=tokens[:, :20]).output - m(tokens=tokens).output[:, :20]
    assert moved.abs().max() > 1e-2
    line = next(i for i, s in enumerate(path.read_text().splitlines(), 1) if "lsh(" in s)
    with pytest.raises(ValueError, match=r"attention `decoder\[1\]\.self` hashes the whole "
                       r"target's positions.*\(kitaev2020_reformer\.attn:%d:\d+\)" % line):
        m.generate(batch_size=2, max_len=3, bos=1, eos=2, incremental=True)
    assert m.generate(batch_size=2, max_len=3, bos=1, eos=2).shape == (2, 3)


SEQ2SEQ_COVERAGE = """
model s2s {
    input src: tokens[S] (vocab = 20)
    input tgt: tokens[T] (vocab = 20, autoregressive)
    feature x = embed(src, 8)
    feature y = embed(tgt, 8)
    repeat decoder 2 {
        attention self { query = project(y)  keys = project(y)  values = project(y)
                         score = scaled_multiplicative  mask = causal }
        update y = norm(y + self)
        attention cross { query = y  features = x  score = additive  coverage = true }
        update y = norm(y + cross)
    }
    output logits = classify(y, 20)
}
"""


def test_coverage_in_a_repeat_keeps_each_layers_own_in_the_cache(gen):
    """See et al.'s coverage c^t in each decoder layer of a `repeat`: generate()'s cache
    holds one c per layer. Its key was the literal text "{at}cross" for every layer, so the
    second layer read the first's coverage and a cached step's logits differed from the
    full run's (by 1e-3 here)."""
    mod = gen(SEQ2SEQ_COVERAGE)
    torch.manual_seed(0)
    m = mod.Model(mod.Config()).to(DT).eval()
    src = torch.randint(0, 20, (2, 6), generator=torch.Generator().manual_seed(2))
    tgt = torch.randint(0, 20, (2, 5), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full = m(src=src, tgt=tgt).output
        cache = {}
        m(src=src, tgt=tgt[:, :4], cache=cache)
        step = m(src=src, tgt=tgt[:, 4:], cache=cache).output
    assert sorted(k for k in cache if k.startswith("coverage:")) == \
        ["coverage:decoder[1].cross", "coverage:decoder[2].cross"]
    torch.testing.assert_close(step[:, 0], full[:, 4], atol=1e-10, rtol=0)
