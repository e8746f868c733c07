"""`heads_out = routing(capsules = N, iters = r)` (issue 25): the heads joined by routing by
agreement (Li et al. 2019, after Sabour et al. 2017). The generated module against a
float64 reference of the equations written here with explicit loops over the positions,
heads, output capsules and iterations, fed the module's own vote transforms W_hn:

    u_hn = W_hn c_h,  b_hn = 0;  r times:  C_hn = softmax_n(b_hn),  s_n = sum_h C_hn u_hn,
    o_n = |s_n|^2 / (1 + |s_n|^2) * s_n / |s_n|,  b_hn += u_hn . o_n;   output = [o_1; ...; o_N]

and against three wrong variants (softmax over the heads, no squash, no agreement update),
which must each be far from it: the reference test cannot pass with any of them."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from conftest import ROOT, cell_of, classify_text, error_snapshot  # noqa: E402
from torch_support import inline_builder  # noqa: E402

DT = torch.float64
HEADER = 'paper li { cite = "Li et al." title = "Routing" year = 2019 }\n'
HOLES = torch.tensor([[True, False, True, True, False, True],
                      [False, True, True, False, False, True]])


def spec(heads: int = 4, capsules: int = 3, iters: int = 3, d: int = 12, kv: int = 0) -> str:
    kv_fields = f"kv_heads = {kv}" if kv else ""
    return f"""
    model m {{
        input x: sequence[L, {d}]
        input y: sequence[L, {d * kv // heads if kv else d}]
        attention att {{
            query = x  keys = y  values = y  score = scaled_multiplicative  heads = {heads}
            heads_out = routing(capsules = {capsules}, iters = {iters})  {kv_fields}
        }}
        output out = identity(att)
    }}
    """


@pytest.fixture(scope="module")
def gen(tmp_path_factory):
    return inline_builder(tmp_path_factory.mktemp("generated"), HEADER, "_taxcompile_routing")


def head_contexts(q, k, v, key_mask, heads, kv_heads):
    """c[n][i][h]: head h's context at query i (eq. 38, 4), one softmax term at a time;
    head h reads key/value head h // (H / G)."""
    N, L, d = q.shape
    dh, share = d // heads, heads // kv_heads
    out = []
    for n in range(N):
        rows = []
        for i in range(L):
            per_head = []
            for h in range(heads):
                g = h // share
                qh = q[n, i, h * dh:(h + 1) * dh]
                seen = [j for j in range(k.shape[1]) if key_mask is None or key_mask[n, j]]
                e = {j: float(qh @ k[n, j, g * dh:(g + 1) * dh]) / math.sqrt(dh) for j in seen}
                top = max(e.values()) if e else 0.0
                z = sum(math.exp(x - top) for x in e.values())
                ctx = torch.zeros(v.shape[-1] // kv_heads, dtype=DT)
                for j, x in e.items():
                    ctx += math.exp(x - top) / z * v[n, j, g * dh:(g + 1) * dh]
                per_head.append(ctx)
            rows.append(per_head)
        out.append(rows)
    return out


def route(caps, W, iters, variant=""):
    """Routing by agreement of one position's input capsules ``caps`` (one per head) with
    vote transforms W[h, n] (d_in, d_out), in loops; ``variant`` breaks one step."""
    H, C = W.shape[0], W.shape[1]
    u = [[caps[h] @ W[h, n] for n in range(C)] for h in range(H)]
    b = [[0.0] * C for _ in range(H)]
    for r in range(iters):
        if variant == "softmax over heads":  # wrong axis: each capsule over the heads
            cols = [[math.exp(b[h][n]) for h in range(H)] for n in range(C)]
            coup = [[cols[n][h] / sum(cols[n]) for n in range(C)] for h in range(H)]
        else:  # C_h. = softmax over the output capsules, per input capsule h
            coup = []
            for h in range(H):
                ex = [math.exp(x - max(b[h])) for x in b[h]]
                coup.append([x / sum(ex) for x in ex])
        outs = []
        for n in range(C):
            s = sum(coup[h][n] * u[h][n] for h in range(H))
            sq = float(s @ s)
            outs.append(s if variant == "no squash" else
                        sq / (1 + sq) * s / math.sqrt(sq) if sq > 0 else s * 0)
        if variant != "no agreement":
            for h in range(H):
                for n in range(C):
                    b[h][n] += float(u[h][n] @ outs[n])
    return torch.cat(outs)


def reference(att, q, k, v, key_mask, heads, kv_heads, iters, variant=""):
    W = att.votes.detach().to(DT)
    ctx = head_contexts(q, k, v, key_mask, heads, kv_heads)
    return torch.stack([torch.stack([route(pos, W, iters, variant) for pos in ex])
                        for ex in ctx])


def inputs(d=12, dkv=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 6, d, generator=g, dtype=DT)
    return q, *(2 * torch.randn(2, 6, dkv, generator=g, dtype=DT) for _ in range(2))


@pytest.mark.parametrize("iters", [1, 3])
@pytest.mark.parametrize("mask", [None, HOLES])
def test_routing_matches_the_reference(gen, iters, mask):
    mod = gen(spec(iters=iters))
    att = mod.Model(mod.Config()).double().att
    with torch.no_grad():  # votes large enough that the agreement moves the couplings
        att.votes.mul_(3.0)
    q, k, v = inputs()
    c, a, _ = att(q, k, v, mask)
    assert c.shape == (2, 6, 12) and a.shape == (2, 4, 6, 6)
    want = reference(att, q, k, v, mask, 4, 4, iters)
    torch.testing.assert_close(c, want, atol=1e-10, rtol=1e-8)
    # each wrong step is far from what the module computes (with one iteration the
    # couplings stay uniform: only the squash matters)
    wrong = ["no squash"] + (["softmax over heads", "no agreement"] if iters > 1 else [])
    for variant in wrong:
        bad = reference(att, q, k, v, mask, 4, 4, iters, variant)
        assert (bad - c).abs().max() > 1e-2, variant


def test_output_capsules_are_squashed(gen):
    """Each output capsule's length is |s|^2 / (1 + |s|^2) < 1."""
    mod = gen(spec())
    att = mod.Model(mod.Config()).double().att
    c, _, _ = att(*inputs())
    lengths = c.view(2, 6, 3, 4).norm(dim=-1)
    assert (lengths < 1).all() and (lengths > 0).all()


def test_routing_with_grouped_query_heads(gen):
    """kv_heads = 2 under 4 query heads: head h reads key/value head h // 2, then routing."""
    mod = gen(spec(kv=2))
    att = mod.Model(mod.Config()).double().att
    q, k, v = inputs(dkv=6)
    c, _, _ = att(q, k, v, HOLES)
    torch.testing.assert_close(c, reference(att, q, k, v, HOLES, 4, 2, 3), atol=1e-10,
                               rtol=1e-8)


def test_backward_matches_finite_differences(gen):
    mod = gen(spec(heads=2, capsules=2, d=4))
    att = mod.Model(mod.Config()).double().att
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 3, 4, generator=g, dtype=DT, requires_grad=True)
               for _ in range(3))
    assert torch.autograd.gradcheck(lambda q, k, v: att(q, k, v)[0], (q, k, v), fast_mode=True)
    # a padded example (no key to read) routes zero contexts: finite, zero gradients
    mask = torch.tensor([[False, False, False]])
    c, _, _ = att(q, k, v, mask)
    c.sum().backward()
    assert (c == 0).all() and torch.isfinite(att.votes.grad).all()


def test_routing_reads_multi_head_with_the_reason():
    cell = cell_of(HEADER + spec(), "query_multiplicity")
    assert list(cell) == ["Multi-Head"]
    reason = " ".join(cell["Multi-Head"])
    assert "routing by agreement (Li et al. 2019) aggregates its 4 heads" in reason


def test_the_example_trains_a_step(tmp_path):
    text = (ROOT / "examples" / "li2019_routing.attn").read_text(encoding="utf-8")
    assert classify_text(text)["query_multiplicity"] == "Multi-Head"
    mod = inline_builder(tmp_path, "", "_taxcompile_li2019_routing")(text)
    torch.manual_seed(0)
    model = mod.Model(mod.Config.tiny())
    inputs_ = mod.example_inputs(cfg=model.cfg)
    out = model(**inputs_)
    loss = model.loss(out, inputs_["src"], inputs_.get("src_mask"))
    loss.backward()
    assert torch.isfinite(loss)
    votes = [p.grad for name, p in model.named_parameters() if name.endswith("votes")]
    assert len(votes) == mod.Config.tiny().layers
    assert all(g_ is not None and torch.isfinite(g_).all() and g_.abs().sum() > 0
               for g_ in votes)


@pytest.mark.parametrize("name", ["routing_capsule_attention", "routing_needs_capsules",
                                  "routing_uneven_capsules"])
def test_misuse_is_a_located_error(name):
    got, want = error_snapshot(name)
    assert got == want


def test_cached_decoding_equals_the_full_recompute(tmp_path):
    """Routing is per position: generate() with its KV cache (the new token's heads routed
    at each step) samples what recomputing the whole prefix samples."""
    build = inline_builder(tmp_path, HEADER, "_taxcompile_routing_gen")
    mod = build("""
    let d = 16
    model lm {
        input tokens: tokens[T] (vocab = 50, autoregressive)
        feature x = embed(tokens, d)
        attention self {
            query = project(x)  keys = project(x)  values = project(x)
            score = scaled_multiplicative  heads = 4  mask = causal
            heads_out = routing(capsules = 4, iters = 3)
        }
        update x = norm(x + self)
        output logits = classify(x, 50)
    }
    """)
    torch.manual_seed(0)
    model = mod.Model(mod.Config()).eval()
    runs = [model.generate(max_len=8, bos=1, eos=2, batch_size=2, strategy="sample",
                           generator=torch.Generator().manual_seed(1), incremental=inc)
            for inc in (True, False)]
    assert torch.equal(*runs)


@pytest.mark.parametrize("query", ["query = x", ""])
def test_routing_reads_each_heads_output(gen, query):
    """The disagreement penalty's extras["heads"] are the heads' outputs O^h before they
    are joined (Li et al. 2018 eq. 7): routing them in the reference gives the module's c,
    with a query (d_v / H per head) and without one (H rows over all of v)."""
    mod = gen(f"""
    model m {{
        input x: sequence[L, 12]
        attention att {{
            {query}  features = x  score = additive(d_w = 6)  heads = 4
            penalty = disagreement(1.0, on = output)  heads_out = routing(capsules = 3)
        }}
        output out = identity(att)
    }}
    """)
    att = mod.Model(mod.Config()).double().att
    with torch.no_grad():
        att.votes.mul_(3.0)
    x = inputs()[1]
    c, _, extras = att(x if query else None, x, x, HOLES)
    heads = extras["heads"].detach()  # (N, H, Lq, d_h)
    W = att.votes.detach()
    want = torch.stack([torch.stack([route([heads[n, h, i] for h in range(4)], W, 3)
                                     for i in range(heads.shape[2])])
                        for n in range(2)])
    torch.testing.assert_close(c, want, atol=1e-10, rtol=1e-8)
