"""Query-key normalisation (issue 25): `qk_norm = l2(scale, groups, dim_scale)`. The
generated class against a float64 reference written here (e = s * (q/|q|)^T (k/|k|) per
head and group, or with learned gains and s = 1/sqrt(d_head)), masks included, on the
explicit and SDPA paths; against x-transformers' `Attention(qk_norm=True, …)` with its
weights copied in; the example classifies with its reason; misuse is a located error."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from conftest import classify_text
from taxcompile import pipeline

torch = pytest.importorskip("torch")

from torch_support import inline_fixture, one_thread  # noqa: E402, F401

ROOT = Path(__file__).resolve().parent.parent
DT = torch.float64
HEADER = 'paper q {\n    cite  = "Test"\n    title = "qk-norm tests"\n    year  = 2024\n}\n'
SPEC = """
model m {{
    input x: sequence[L, 32]
    attention att {{ query = project(x)  features = x  score = {score}  heads = 4
                    qk_norm = {qk}  mask = {mask} }}
    output o = identity(att)
}}
"""


gen = inline_fixture("qk", HEADER)


def attention_class(gen, qk: str, mask: str = "none", score: str = "scaled_multiplicative"):
    m = gen(SPEC.format(qk=qk, mask=mask, score=score))
    names = [n for n, c in vars(m).items() if isinstance(c, type) and n.endswith("Attention")]
    assert len(names) == 1 and "QKNorm" in names[0], names
    return getattr(m, names[0])


def reference(q, k, v, key_mask, H, groups, scale, gq, gk, mask, W, b):
    """c = W_O concat_j softmax(s (q^(j) / |.|)^T (K^(j) / |.|)) V^(j) + b_O, each head's
    features normalised in `groups` parts, times the gains gq, gk (None: none)."""
    N, L, d = q.shape
    dh, dg = d // H, d // H // groups
    out = torch.zeros(N, L, d, dtype=q.dtype)
    for n in range(N):
        heads = []
        for j in range(H):
            qj, kj, vj = (t[n, :, j * dh:(j + 1) * dh] for t in (q, k, v))
            qn, kn = qj.clone(), kj.clone()
            for g in range(groups):
                s = slice(g * dg, (g + 1) * dg)
                qn[:, s] = qj[:, s] / qj[:, s].norm(dim=-1, keepdim=True)
                kn[:, s] = kj[:, s] / kj[:, s].norm(dim=-1, keepdim=True)
            if gq is not None:
                qn, kn = qn * gq[j, 0], kn * gk[j, 0]
            e = scale * qn @ kn.T
            keep = key_mask[n][None, :].expand(L, L).clone()
            if mask == "causal":
                keep &= torch.ones(L, L, dtype=torch.bool).tril()
            heads.append(torch.softmax(e.masked_fill(~keep, float("-inf")), -1) @ vj)
        out[n] = torch.cat(heads, -1) @ W.T + b
    return out


@pytest.mark.parametrize("qk,groups,scale,dim_scale", [
    ("true", 1, 10.0, False), ("l2(scale = 4, groups = 2)", 2, 4.0, False),
    ("l2(dim_scale = true)", 1, None, True)])
@pytest.mark.parametrize("mask", ["none", "causal"])
@pytest.mark.parametrize("score", ["scaled_multiplicative", "multiplicative"])
def test_normalised_scores_match_the_reference(gen, qk, groups, scale, dim_scale, mask, score):
    cls = attention_class(gen, qk, mask, score)
    kw = dict(qk_groups=groups, qk_dim_scale=dim_scale) | ({} if scale is None
                                                          else dict(qk_scale=scale))
    att = cls(d_q=32, d_k=32, d_v=32, heads=4, mask=mask, **kw).to(DT)
    g = torch.Generator().manual_seed(3)
    if dim_scale:  # gains away from their initial value
        with torch.no_grad():
            att.q_gain.copy_(torch.rand(att.q_gain.shape, generator=g, dtype=DT) + 0.5)
            att.k_gain.copy_(torch.rand(att.k_gain.shape, generator=g, dtype=DT) + 0.5)
    q, k, v = (torch.randn(2, 7, 32, generator=g, dtype=DT) for _ in range(3))
    key_mask = torch.ones(2, 7, dtype=torch.bool)
    key_mask[1, 5:] = False
    s = 8 ** -0.5 if dim_scale else scale
    ref = reference(q, k, v, key_mask, 4, groups, s, att.q_gain, att.k_gain, mask,
                    att.out.weight, att.out.bias)
    c, _, _ = att(q, k, v, key_mask)
    assert (c - ref).abs().max() < 1e-10
    fast, _, _ = att(q, k, v, key_mask, need_weights=False)
    assert (fast - ref).abs().max() < 1e-10
    c.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in att.parameters())


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-10)])
@pytest.mark.parametrize("groups,dim_scale", [(1, False), (2, False), (1, True)])
def test_matches_x_transformers(gen, dtype, tol, groups, dim_scale):
    xt = pytest.importorskip("x_transformers.x_transformers")
    torch.manual_seed(0)
    theirs = xt.Attention(32, heads=4, dim_head=8, causal=True, qk_norm=True,
                          qk_norm_groups=groups, qk_norm_dim_scale=dim_scale).to(dtype).eval()
    qk = f"l2(groups = {groups}, dim_scale = {str(dim_scale).lower()})"
    ours = attention_class(gen, qk, "causal")(
        d_q=32, d_k=32, d_v=32, heads=4, mask="causal", qk_groups=groups,
        qk_dim_scale=dim_scale).to(dtype)
    with torch.no_grad():
        ours.out.weight.copy_(theirs.to_out.weight)
        ours.out.bias.zero_()
        if dim_scale:
            theirs.qk_norm_q_scale.uniform_(0.5, 1.5)
            theirs.qk_norm_k_scale.uniform_(0.5, 1.5)
            ours.q_gain.copy_(theirs.qk_norm_q_scale)
            ours.k_gain.copy_(theirs.qk_norm_k_scale)
    x = torch.randn(2, 6, 32, dtype=dtype)
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, 4:] = False
    want = theirs(x, mask=mask)
    q, k, v = (x @ w.weight.T for w in (theirs.to_q, theirs.to_k, theirs.to_v))
    got, _, _ = ours(q, k, v, mask)
    assert (got - want)[0].abs().max() < tol
    assert (got - want)[1, :4].abs().max() < tol  # (padded queries are not compared)


def test_example_runs_and_classifies():
    src = pipeline.load_text((ROOT / "examples/qk_norm.attn").read_text(encoding="utf-8"),
                             "qk_norm.attn")
    from taxcompile import codegen
    from taxcompile.run import load_module

    mod = load_module(codegen.generate(src, src.models[0], "qk_norm.attn"), "_taxcompile_qk_ex")
    cfg = mod.Config.tiny()
    torch.manual_seed(0)
    m = mod.Model(cfg)
    ex = mod.example_inputs(2, cfg=cfg)
    m.loss(m(**ex), ex["tokens"]).backward()
    assert all(p.grad is not None for p in m.parameters())
    assert m.eval().generate(4, bos=1, eos=2, batch_size=2).shape[0] == 2
    row = classify_text((ROOT / "examples/qk_norm.attn").read_text(encoding="utf-8"))
    assert row["scoring"] == "Similarity"  # s cos(q, k): tests/test_qk_norm_reading.py
    assert row["query_multiplicity"] == "Multi-Head"


@pytest.mark.parametrize("name", ["qk_norm_general", "qk_norm_groups"])
def test_misuse_is_a_located_error(name):
    from conftest import error_snapshot

    got, want = error_snapshot(name)
    assert got == want


def test_with_grouped_query_heads_matches_x_transformers(gen):
    """qk-norm with learned gains over 2 key/value heads (k's gains per key/value head)."""
    xt = pytest.importorskip("x_transformers.x_transformers")
    torch.manual_seed(1)
    theirs = xt.Attention(32, heads=4, dim_head=8, kv_heads=2, causal=True, qk_norm=True,
                          qk_norm_dim_scale=True).to(DT).eval()
    m = gen(SPEC.replace("features = x", "keys = project(x, 16)  values = project(x, 16)")
            .replace("heads = 4", "heads = 4  kv_heads = 2")
            .format(qk="l2(dim_scale = true)", mask="causal", score="scaled_multiplicative"))
    cls = next(c for n, c in vars(m).items() if isinstance(c, type) and n.endswith("Attention"))
    ours = cls(d_q=32, d_k=16, d_v=16, heads=4, mask="causal", kv_heads=2,
               qk_dim_scale=True).to(DT)
    perm = torch.tensor([0, 2, 1, 3])  # our head j is their head (j mod 2) 2 + j // 2
    rows = (perm[:, None] * 8 + torch.arange(8)).reshape(-1)
    with torch.no_grad():
        theirs.qk_norm_q_scale.uniform_(0.5, 1.5)
        theirs.qk_norm_k_scale.uniform_(0.5, 1.5)
        ours.q_gain.copy_(theirs.qk_norm_q_scale[perm])
        ours.k_gain.copy_(theirs.qk_norm_k_scale)
        ours.out.weight.copy_(theirs.to_out.weight[:, rows])
        ours.out.bias.zero_()
    x = torch.randn(2, 6, 32, dtype=DT)
    got, _, _ = ours(x @ theirs.to_q.weight[rows].T, x @ theirs.to_k.weight.T,
                     x @ theirs.to_v.weight.T)
    assert (got - theirs(x)).abs().max() < 1e-10


def test_rms_form_matches_the_reference(gen):
    """`qk_norm = rms` (x-transformers' `qk_rmsnorm`): q and k of each head RMS-normalised,
    sqrt(d_h) q / |q| times learned gains g + 1, then the score's own 1 / sqrt(d_h)."""
    att = attention_class(gen, "rms", "causal")(d_q=32, d_k=32, d_v=32, heads=4,
                                                 mask="causal", qk_rms=True).to(DT)
    gen_ = torch.Generator().manual_seed(3)
    with torch.no_grad():  # gains away from their start, so that a misplaced one would show
        att.q_gain.uniform_(-0.5, 0.5, generator=gen_)
        att.k_gain.uniform_(-0.5, 0.5, generator=gen_)
    q, k, v = (torch.randn(2, 6, 32, generator=gen_, dtype=DT) for _ in range(3))
    key_mask = torch.ones(2, 6, dtype=torch.bool)
    key_mask[1, 4:] = False
    root = math.sqrt(8)
    ref = reference(q, k, v, key_mask, 4, 1, 1 / root, root * (att.q_gain + 1),
                    root * (att.k_gain + 1), "causal", att.out.weight, att.out.bias)
    c, _, _ = att(q, k, v, key_mask)
    assert (c - ref).abs().max() < 1e-10
    fast, _, _ = att(q, k, v, key_mask, need_weights=False)
    assert (fast - ref).abs().max() < 1e-10
    c.sum().backward()
    assert att.q_gain.grad.abs().sum() > 0 and att.k_gain.grad.abs().sum() > 0


@pytest.mark.parametrize("kv_heads", [0, 2])
def test_rms_form_matches_x_transformers(gen, kv_heads):
    xt = pytest.importorskip("x_transformers.x_transformers")
    torch.manual_seed(1)
    theirs = xt.Attention(32, heads=4, dim_head=8, causal=True, qk_rmsnorm=True,
                          kv_heads=kv_heads or None).to(DT).eval()
    theirs.attend.attn_fn = lambda sim: sim.softmax(-1)  # theirs runs in float32 otherwise
    d_kv = 8 * (kv_heads or 4)
    if kv_heads:
        spec = SPEC.format(qk="rms", mask="causal", score="scaled_multiplicative").replace(
            "features = x", f"keys = project(x, {d_kv})  values = project(x, {d_kv})").replace(
            "heads = 4", f"heads = 4  kv_heads = {kv_heads}")
        (cls,) = [c for n, c in vars(gen(spec)).items()
                  if isinstance(c, type) and n.endswith("Attention")]
    else:
        cls = attention_class(gen, "rms", "causal")
    ours = cls(d_q=32, d_k=d_kv, d_v=d_kv, heads=4, mask="causal", qk_rms=True,
               **({"kv_heads": kv_heads} if kv_heads else {})).to(DT)
    # x-transformers tiles its kv heads (query head i reads kv head i mod g); we interleave
    g = kv_heads or 4
    r = 4 // g
    perm = torch.tensor([(j % r) * g + j // r for j in range(4)])
    rows = (perm[:, None] * 8 + torch.arange(8)).reshape(-1)
    with torch.no_grad():
        theirs.q_rmsnorm.gamma.uniform_(-0.5, 0.5)
        theirs.k_rmsnorm.gamma.uniform_(-0.5, 0.5)
        ours.q_gain.copy_(theirs.q_rmsnorm.gamma[perm])
        ours.k_gain.copy_(theirs.k_rmsnorm.gamma)
        ours.out.weight.copy_(theirs.to_out.weight[:, rows])
        ours.out.bias.zero_()
    x = torch.randn(2, 6, 32, dtype=DT)
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, 4:] = False
    want = theirs(x, mask=mask)
    q = x @ theirs.to_q.weight[rows].T
    k, v = x @ theirs.to_k.weight.T, x @ theirs.to_v.weight.T
    got, _, _ = ours(q, k, v, mask)
    assert (got - want)[0].abs().max() < 1e-10
    assert (got - want)[1, :4].abs().max() < 1e-10  # (padded queries are not compared)
