"""Grouped-query and multi-query attention (issue 25): `kv_heads = g` on a multi-head
statement. The generated class against a float64 reference written here (an explicit loop
over query heads, head j reading key/value head j // (H / g)), with padding and the causal
mask, on the explicit and the SDPA paths; against x-transformers' `Attention(kv_heads=g)`
with its weights copied in; the example's KV cache holds g heads; misuse is a located
error."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from conftest import classify_text
from taxcompile import pipeline

torch = pytest.importorskip("torch")

from taxcompile.run import load_module  # noqa: E402
from torch_support import inline_fixture, one_thread  # noqa: E402, F401

ROOT = Path(__file__).resolve().parent.parent
DT = torch.float64
HEADER = 'paper g {\n    cite  = "Test"\n    title = "GQA tests"\n    year  = 2024\n}\n'
SPEC = """
model m {{
    input x: sequence[L, 16]
    attention att {{ query = project(x)  keys = project(x, {dkv})  values = project(x, {dkv})
                    score = scaled_multiplicative  heads = 4  kv_heads = {g}  mask = {mask} }}
    output o = identity(att)
}}
"""


gen = inline_fixture("gqa", HEADER)


def attention_class(gen, g: int, mask: str = "none"):
    m = gen(SPEC.format(dkv=4 * g, g=g, mask=mask))
    names = [n for n, c in vars(m).items() if isinstance(c, type) and n.endswith("Attention")]
    assert names == ["MultiHeadGroupedQueryScaledMultiplicativeAttention"], names
    return getattr(m, names[0])


def reference(q, k, v, key_mask, H, G, mask, W, b):
    """c = W_O concat_j softmax(q^(j) K^(j // (H/G))^T / sqrt(d_h)) V^(j // (H/G)) + b_O."""
    N, L, d = q.shape
    dh = d // H
    out = torch.zeros(N, L, d, dtype=q.dtype)
    for n in range(N):
        heads = []
        for j in range(H):
            kv = j // (H // G)
            qj, kj, vj = (t[n, :, i * dh:(i + 1) * dh] for t, i in ((q, j), (k, kv), (v, kv)))
            e = qj @ kj.T / math.sqrt(dh)
            keep = key_mask[n][None, :].expand(L, L).clone()
            if mask == "causal":
                keep &= torch.ones(L, L, dtype=torch.bool).tril()
            a = torch.softmax(e.masked_fill(~keep, float("-inf")), -1)
            heads.append(a @ vj)
        out[n] = torch.cat(heads, -1) @ W.T + b
    return out


@pytest.mark.parametrize("g", [1, 2, 4])
@pytest.mark.parametrize("mask", ["none", "causal"])
def test_grouped_heads_match_the_reference(gen, g, mask):
    cls = attention_class(gen, g, mask)
    att = cls(d_q=16, d_k=4 * g, d_v=4 * g, heads=4, mask=mask, kv_heads=g).to(DT)
    gen_ = torch.Generator().manual_seed(g)
    q = torch.randn(2, 7, 16, generator=gen_, dtype=DT)
    k, v = (torch.randn(2, 7, 4 * g, generator=gen_, dtype=DT) for _ in range(2))
    key_mask = torch.ones(2, 7, dtype=torch.bool)
    key_mask[1, 5:] = False
    ref = reference(q, k, v, key_mask, 4, g, mask, att.out.weight, att.out.bias)
    c, a, _ = att(q, k, v, key_mask)
    assert a.shape == (2, 4, 7, 7)
    assert (c - ref).abs().max() < 1e-10
    fast, _, _ = att(q, k, v, key_mask, need_weights=False)  # SDPA, enable_gqa=True
    assert (fast - ref).abs().max() < 1e-10
    if mask == "causal":
        fast, _, _ = att(q, k, v, None, need_weights=False)  # is_causal=True
        ref = reference(q, k, v, torch.ones(2, 7, dtype=torch.bool), 4, g, mask,
                        att.out.weight, att.out.bias)
        assert (fast - ref).abs().max() < 1e-10


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-10)])
@pytest.mark.parametrize("g", [1, 2])
def test_matches_x_transformers(gen, g, dtype, tol):
    xt = pytest.importorskip("x_transformers.x_transformers")
    torch.manual_seed(0)
    theirs = xt.Attention(16, heads=4, dim_head=4, kv_heads=g, causal=True).to(dtype).eval()
    if dtype == torch.float64:  # its softmax runs in float32 whatever the input's dtype
        theirs.attend.attn_fn = lambda sim: sim.softmax(-1)
    cls = attention_class(gen, g, "causal")
    ours = cls(d_q=16, d_k=4 * g, d_v=4 * g, heads=4, mask="causal", kv_heads=g).to(dtype)
    # x-transformers tiles the kv heads (query head i reads kv head i mod g), we interleave
    # (query head j reads kv head j // (H / g), as SDPA's enable_gqa and Ainslie et al.):
    # our head j is their head (j mod r) g + j // r, r = H / g.
    r = 4 // g
    perm = torch.tensor([(j % r) * g + j // r for j in range(4)])
    rows = (perm[:, None] * 4 + torch.arange(4)).reshape(-1)
    Wq = theirs.to_q.weight[rows]
    with torch.no_grad():
        ours.out.weight.copy_(theirs.to_out.weight[:, rows])
        ours.out.bias.zero_()
    x = torch.randn(2, 6, 16, dtype=dtype)
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, 4:] = False
    want = theirs(x, mask=mask)
    k, v = x @ theirs.to_k.weight.T, x @ theirs.to_v.weight.T
    got, _, _ = ours(x @ Wq.T, k, v, mask)
    assert (got - want)[0].abs().max() < tol
    assert (got - want)[1, :4].abs().max() < tol  # (padded queries are not compared)
    fast, _, _ = ours(x @ Wq.T, k, v, mask, need_weights=False)  # SDPA, enable_gqa=True
    assert (fast - want)[0].abs().max() < tol


def test_example_kv_cache_holds_the_kv_heads():
    src = pipeline.load_text((ROOT / "examples/gqa.attn").read_text(encoding="utf-8"),
                             "gqa.attn")
    from taxcompile import codegen

    mod = load_module(codegen.generate(src, src.models[0], "gqa.attn"), "_taxcompile_gqa_ex")
    cfg = mod.Config.tiny()
    torch.manual_seed(0)
    m = mod.Model(cfg)
    ex = mod.example_inputs(2, cfg=cfg)
    out = m(**ex)
    m.loss(out, ex["tokens"]).backward()
    assert all(p.grad is not None for p in m.parameters())
    caches = []
    layer = m.decoder[0].self_attn
    hook = layer.register_forward_hook(
        lambda mod_, args, res: caches.append((args[0].shape[1], *args[1].shape)))
    y = m.eval().generate(5, bos=1, eos=2, batch_size=2)
    hook.remove()
    assert y.shape[0] == 2
    # each step reads the cache: keys of kv_heads heads of d_model / heads
    assert caches and all(s[-1] == cfg.kv_heads * cfg.d_model // cfg.heads for s in caches)
    assert cfg.kv_heads < cfg.heads
    # after the prefix, one new query per step against the cached keys
    lq, _, lk, _ = caches[-1]
    assert lq == 1 and lk > 1
    row = classify_text((ROOT / "examples/gqa.attn").read_text(encoding="utf-8"))
    assert row["query_multiplicity"] == "Multi-Head"


@pytest.mark.parametrize("name", ["gqa_not_dividing", "gqa_one_head", "gqa_additive",
                                  "gqa_widths"])
def test_misuse_is_a_located_error(name):
    from conftest import error_snapshot

    got, want = error_snapshot(name)
    assert got == want


def grouped_memory_reference(q, k, v, key_mask, H, G, Mk, Mv, P, Q, W, b):
    """Grouped heads with memory key/values and talking heads, causal, written out: key/value
    head g is [Mk_g; K_g] and [Mv_g; V_g] (the memory first, never masked), query head j reads
    head j // (H / G); e'_h = sum_i P_hi e_i before the softmax, a'_h = sum_i Q_hi a_i after
    it; the weights returned are a' over the sequence's keys."""
    N, L, d = q.shape
    dh, M = d // H, Mk.shape[1]
    out, weights = torch.zeros(N, L, d, dtype=q.dtype), torch.zeros(N, H, L, L, dtype=q.dtype)
    for n in range(N):
        keep = torch.cat([torch.ones(L, M, dtype=torch.bool),
                          key_mask[n][None, :].expand(L, L) & torch.ones(L, L).tril().bool()], 1)
        e = []
        for j in range(H):
            g = j // (H // G)
            kj = torch.cat([Mk[g], k[n, :, g * dh:(g + 1) * dh]])
            e.append(q[n, :, j * dh:(j + 1) * dh] @ kj.T / math.sqrt(dh))
        e = torch.stack(e)
        e = torch.einsum("hi,ilk->hlk", P, e)
        a = torch.softmax(e.masked_fill(~keep, float("-inf")), -1)
        a = torch.einsum("hi,ilk->hlk", Q, a)
        heads = []
        for j in range(H):
            g = j // (H // G)
            heads.append(a[j] @ torch.cat([Mv[g], v[n, :, g * dh:(g + 1) * dh]]))
        out[n] = torch.cat(heads, -1) @ W.T + b
        weights[n] = a[:, :, M:]
    return out, weights


@pytest.mark.parametrize("g", [1, 2])
def test_grouped_heads_with_memory_and_talking_heads(gen, g):
    """`kv_heads` beside `mem_kv` and `talking_heads` (x-transformers allows both): the memory
    holds the G key/value heads and is shared by their query heads like the keys; the talking
    heads mix the H query heads. Against the float64 reference above, with padding."""
    m = gen(SPEC.format(dkv=4 * g, g=g, mask="causal").replace(
        "mask = causal", "mask = causal  mem_kv = 3  talking_heads = true"))
    (cls,) = [c for n, c in vars(m).items() if isinstance(c, type) and n.endswith("Attention")]
    att = cls(d_q=16, d_k=4 * g, d_v=4 * g, heads=4, mask="causal", mem_kv=3,
              kv_heads=g).to(DT)
    assert att.mem_k.shape == (g, 3, 4)  # the memory has the G key/value heads
    gen_ = torch.Generator().manual_seed(g)
    with torch.no_grad():  # mixes away from the identity, so that a wrong head would show
        att.talk_scores.add_(0.3 * torch.randn(4, 4, generator=gen_, dtype=DT))
        att.talk_weights.add_(0.3 * torch.randn(4, 4, generator=gen_, dtype=DT))
    q = torch.randn(2, 7, 16, generator=gen_, dtype=DT)
    k, v = (torch.randn(2, 7, 4 * g, generator=gen_, dtype=DT) for _ in range(2))
    key_mask = torch.ones(2, 7, dtype=torch.bool)
    key_mask[1, 5:] = False
    ref, ref_a = grouped_memory_reference(q, k, v, key_mask, 4, g, att.mem_k, att.mem_v,
                                          att.talk_scores, att.talk_weights, att.out.weight,
                                          att.out.bias)
    c, a, extras = att(q, k, v, key_mask)
    assert (c - ref).abs().max() < 1e-10
    assert (a - ref_a).abs().max() < 1e-10
    assert extras["memory"].shape == (2, 4, 7, 3)
    c.sum().backward()
    assert att.mem_k.grad.abs().sum() > 0 and att.talk_scores.grad.abs().sum() > 0


def test_example_with_grouped_memory_generates():
    """The GQA example with memory key/values and talking heads trains and decodes from its
    KV cache; the cache still holds the kv_heads heads (the memory is not cached)."""
    from taxcompile import codegen

    text = (ROOT / "examples" / "gqa.attn").read_text(encoding="utf-8").replace(
        "kv_heads = kv_heads\n", "kv_heads = kv_heads\n            mem_kv = 2\n"
        "            talking_heads = true\n")
    src = pipeline.load_text(text, "gqa.attn")
    mod = load_module(codegen.generate(src, src.models[0], "gqa.attn"), "_taxcompile_gqa_mem")
    cfg = mod.Config.tiny()
    torch.manual_seed(0)
    m = mod.Model(cfg)
    ex = mod.example_inputs(2, cfg=cfg)
    m.loss(m(**ex), ex["tokens"]).backward()
    assert all(p.grad is not None for p in m.parameters())
    m.eval()
    # the cached decoding (one new token per step against the cache) gives the tokens of
    # re-running the whole prefix at every step
    prompt = ex["tokens"][:, :3]
    cached = m.generate(6, bos=1, eos=2, batch_size=2, prompt=prompt)
    rerun = m.generate(6, bos=1, eos=2, batch_size=2, prompt=prompt, incremental=False)
    assert torch.equal(cached, rerun)
    caches = []
    hook = m.decoder[0].self_attn.register_forward_hook(
        lambda mod_, args, res: caches.append(args[1].shape[-1]))
    m.generate(3, bos=1, eos=2, batch_size=2)
    hook.remove()
    assert caches and set(caches) == {cfg.kv_heads * cfg.d_model // cfg.heads}
