"""The attention features users of x-transformers reach for (issue 25): top-k sparse
attention (`align = topk(k = …)`, Zhao et al. 2019) and talking heads (`talking_heads =
true | pre | post`, Shazeer et al. 2020) learned memory key/values (`mem_kv = M`) and per-head value gates (`head_gates = true`). Each against a float64 reference of
its equations written here with explicit loops, masks included, and against
x-transformers' own `Attention` with its weights copied into the generated module."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from conftest import ROOT, cell_of, classify_text  # noqa: E402
from torch_support import inline_builder  # noqa: E402

DT = torch.float64
HEADER = 'paper xt {\n    cite = "Test"\n    title = "x-transformers features"\n    year = 2024\n}\n'
MASKS = {"none": None,
         "holes": torch.tensor([[True, False, True, True, False, True],
                                [False, True, True, False, False, True]])}


def spec(fields: str, heads: int = 2, d: int = 8) -> str:
    return f"""
    model m {{
        input x: sequence[L, {d}]
        attention att {{
            query = x  keys = x  values = x  score = scaled_multiplicative  heads = {heads}
            {fields}
        }}
        output out = identity(att)
    }}
    """


@pytest.fixture(scope="module")
def gen(tmp_path_factory):
    return inline_builder(tmp_path_factory.mktemp("generated"), HEADER, "_taxcompile_xt")


def inputs(n: int = 2, length: int = 6, d: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(n, length, d, generator=g, dtype=DT) for _ in range(3))


def softmax_over(scores: dict) -> dict:
    """softmax of {key: score} (eq. 25), in float64 one term at a time."""
    if not scores:
        return {}
    top = max(scores.values())
    ex = {j: math.exp(s - top) for j, s in scores.items()}
    total = sum(ex.values())
    return {j: x / total for j, x in ex.items()}


def head_scores(q, k, n, h, heads):
    """e_ij = q_i^(h) . k_j^(h) / sqrt(d / H) (eq. 38, scaled) for example n, head h."""
    dh = q.shape[-1] // heads
    sl = slice(h * dh, (h + 1) * dh)
    return [[float(q[n, i, sl] @ k[n, j, sl]) / math.sqrt(dh) for j in range(k.shape[1])]
            for i in range(q.shape[1])]


# ---- top-k sparse attention (Zhao et al. 2019) -----------------------------------------


def topk_reference(q, k, key_mask, heads, top):
    """a_ij: each query's `top` largest scores over the unmasked keys softmaxed, 0 elsewhere."""
    N, L = q.shape[0], q.shape[1]
    a = torch.zeros(N, heads, L, k.shape[1], dtype=DT)
    for n in range(N):
        for h in range(heads):
            e = head_scores(q, k, n, h, heads)
            for i in range(L):
                seen = {j: e[i][j] for j in range(k.shape[1])
                        if key_mask is None or key_mask[n, j]}
                kth = sorted(seen.values(), reverse=True)[:top][-1] if seen else None
                kept = {j: s for j, s in seen.items() if s >= kth}
                for j, w in softmax_over(kept).items():
                    a[n, h, i, j] = w
    return a


@pytest.mark.parametrize("mask", sorted(MASKS))
@pytest.mark.parametrize("top", [1, 3, 8])
def test_topk_matches_the_reference(gen, mask, top):
    mod = gen(spec(f"align = topk(k = {top})"))
    model = mod.Model(mod.Config()).double()
    q, k, v = inputs()
    c, a, _ = model.att(q, k, v, MASKS[mask])
    want = topk_reference(q, k, MASKS[mask], 2, top)
    torch.testing.assert_close(a, want, atol=1e-12, rtol=1e-10)
    assert ((a > 0).sum(-1) <= top).all()  # no ties in random scores: at most k keys kept
    # c = W_O concat_h(sum_j a_ij v_j^(h)) (eq. 4, 40)
    ctx = torch.cat([want[:, h] @ v[..., 4 * h:4 * (h + 1)] for h in range(2)], -1)
    torch.testing.assert_close(c, model.att.out(ctx))


def test_topk_gradients_reach_only_the_kept_keys(gen):
    mod = gen(spec("align = topk(k = 2)", heads=1))
    model = mod.Model(mod.Config()).double()
    q, k, v = inputs(n=1)
    v = v.clone().requires_grad_()
    c, a, _ = model.att(q, k, v)
    c[:, 0].sum().backward()
    assert (v.grad[0].abs().sum(-1) > 0).sum() == 2  # query 0 reads its two kept keys only


def xt_attention(flags: dict, heads: int = 2, dim: int = 8):
    xt = pytest.importorskip("x_transformers.x_transformers")
    torch.manual_seed(0)
    return xt.Attention(dim, heads=heads, dim_head=dim // heads, **flags).eval()


def copy_projections(att, x):
    """q, k, v as x-transformers' to_q, to_k, to_v compute them (no bias)."""
    return att.to_q(x), att.to_k(x), att.to_v(x)


@pytest.mark.parametrize("mask", sorted(MASKS))
def test_topk_matches_x_transformers(gen, mask):
    theirs = xt_attention({"sparse_topk": 3})
    mod = gen(spec("align = topk(k = 3)"))
    ours = mod.Model(mod.Config()).att.eval()
    with torch.no_grad():
        ours.out.weight.copy_(theirs.to_out.weight)
        ours.out.bias.zero_()
    x = inputs()[0].float()
    key_mask = MASKS[mask]
    with torch.no_grad():
        want = theirs(x, mask=key_mask)
        c, _, _ = ours(*copy_projections(theirs, x), key_mask)
    assert_same_rows(c, want, key_mask)


def assert_same_rows(c, want, key_mask):
    """x-transformers zeroes the outputs of masked query positions (a self-attention mask
    masks them too); ours leaves them to the caller: the kept positions compare."""
    rows = torch.ones(c.shape[:2], dtype=torch.bool) if key_mask is None else key_mask
    torch.testing.assert_close(c[rows], want[rows], atol=1e-5, rtol=1e-5)
    return (c[rows] - want[rows]).abs().max().item()


# ---- talking heads (Shazeer et al. 2020) -----------------------------------------------


def talking_reference(q, k, v, key_mask, heads, P, Q):
    """e'_h = sum_g P_hg e_g, a = softmax over the unmasked keys of e'_h, a'_h = sum_g Q_hg a_g,
    c_h = sum_j a'_hj v_j^(h): Shazeer et al.'s eq. (logits, weights), one term at a time."""
    N, L, Lk = q.shape[0], q.shape[1], k.shape[1]
    dh = v.shape[-1] // heads
    c = torch.zeros(N, L, v.shape[-1], dtype=DT)
    weights = torch.zeros(N, heads, L, Lk, dtype=DT)
    for n in range(N):
        e = [head_scores(q, k, n, g, heads) for g in range(heads)]
        a = {}
        for h in range(heads):
            for i in range(L):
                mixed = {j: sum(float(P[h, g]) * e[g][i][j] for g in range(heads))
                         for j in range(Lk) if key_mask is None or key_mask[n, j]}
                for j, w in softmax_over(mixed).items():
                    a[h, i, j] = w
        for h in range(heads):
            for i in range(L):
                for j in range(Lk):
                    w = sum(float(Q[h, g]) * a.get((g, i, j), 0.0) for g in range(heads))
                    weights[n, h, i, j] = w
                    c[n, i, h * dh:(h + 1) * dh] += w * v[n, j, h * dh:(h + 1) * dh]
    return c, weights


@pytest.mark.parametrize("mask", sorted(MASKS))
@pytest.mark.parametrize("which", ["true", "pre", "post"])
def test_talking_heads_match_the_reference(gen, mask, which):
    mod = gen(spec(f"talking_heads = {which}", heads=4))
    model = mod.Model(mod.Config()).double()
    g = torch.Generator().manual_seed(3)
    eye = torch.eye(4, dtype=DT)
    P = torch.randn(4, 4, generator=g, dtype=DT) if which != "post" else eye
    Q = torch.randn(4, 4, generator=g, dtype=DT) if which != "pre" else eye
    att = model.att
    with torch.no_grad():
        if which != "post":
            att.talk_scores.copy_(P)
        if which != "pre":
            att.talk_weights.copy_(Q)
    assert hasattr(att, "talk_scores") == (which != "post")
    assert hasattr(att, "talk_weights") == (which != "pre")
    q, k, v = inputs()
    c, a, _ = att(q, k, v, MASKS[mask])
    ctx, want = talking_reference(q, k, v, MASKS[mask], 4, P, Q)
    torch.testing.assert_close(a, want, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(c, att.out(ctx))


@pytest.mark.parametrize("mask", sorted(MASKS))
def test_talking_heads_match_x_transformers(gen, mask):
    theirs = xt_attention({"pre_talking_heads": True, "post_talking_heads": True}, heads=4)
    mod = gen(spec("talking_heads = true", heads=4))
    ours = mod.Model(mod.Config()).att.eval()
    pre = theirs.attend.pre_softmax_talking_heads.weight
    post = theirs.attend.post_softmax_talking_heads.weight
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        pre.add_(0.5 * torch.randn(pre.shape, generator=g))  # away from the identity
        post.add_(0.5 * torch.randn(post.shape, generator=g))
        # x-transformers adds its pre-softmax mix to the scores (sim + W sim): P = I + W
        ours.talk_scores.copy_(torch.eye(4) + pre[:, :, 0, 0])
        ours.talk_weights.copy_(post[:, :, 0, 0])
        ours.out.weight.copy_(theirs.to_out.weight)
        ours.out.bias.zero_()
    x = inputs()[0].float()
    with torch.no_grad():
        want = theirs(x, mask=MASKS[mask])
        c, _, _ = ours(*copy_projections(theirs, x), MASKS[mask])
    assert_same_rows(c, want, MASKS[mask])


def test_talking_heads_read_multi_head_with_the_reason():
    cell = cell_of(HEADER + spec("talking_heads = true", heads=4), "query_multiplicity")
    assert list(cell) == ["Multi-Head"]
    assert "talking heads (Shazeer et al. 2020)" in " ".join(cell["Multi-Head"])


# ---- learned memory key/values (x-transformers' num_mem_kv) ---------------------------


def memory_reference(q, k, v, key_mask, heads, mem_k, mem_v, causal):
    """Per head: keys [m_1 .. m_M, k_1 .. k_L], values likewise; a softmax over the memory
    (always seen) and the sequence's unmasked keys (j <= i when causal); c = sum a v."""
    N, L = q.shape[0], q.shape[1]
    dh = q.shape[-1] // heads
    c = torch.zeros(N, L, v.shape[-1], dtype=DT)
    weights = torch.zeros(N, heads, L, k.shape[1], dtype=DT)
    for n in range(N):
        for h in range(heads):
            sl = slice(h * dh, (h + 1) * dh)
            for i in range(L):
                scores = {("m", j): float(q[n, i, sl] @ mem_k[h, j]) / math.sqrt(dh)
                          for j in range(mem_k.shape[1])}
                scores.update({("k", j): float(q[n, i, sl] @ k[n, j, sl]) / math.sqrt(dh)
                               for j in range(k.shape[1])
                               if (key_mask is None or key_mask[n, j]) and (not causal or j <= i)})
                for (kind, j), w in softmax_over(scores).items():
                    c[n, i, sl] += w * (mem_v[h, j] if kind == "m" else v[n, j, sl])
                    if kind == "k":
                        weights[n, h, i, j] = w
    return c, weights


@pytest.mark.parametrize("mask", sorted(MASKS))
@pytest.mark.parametrize("causal", [False, True])
def test_memory_key_values_match_the_reference(gen, mask, causal):
    mod = gen(spec("mem_kv = 3" + ("  mask = causal" if causal else "")))
    model = mod.Model(mod.Config()).double()
    att = model.att
    q, k, v = inputs()
    c, a, extras = att(q, k, v, MASKS[mask])
    ctx, want = memory_reference(q, k, v, MASKS[mask], 2, att.mem_k.detach(), att.mem_v.detach(),
                                 causal)
    torch.testing.assert_close(a, want, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(c, att.out(ctx))
    torch.testing.assert_close(a.sum(-1) + extras["memory"].sum(-1),
                               torch.ones_like(a.sum(-1)))  # every query sees the memory


def test_hard_alignment_samples_among_the_memory_keys_too(gen):
    """Hard alignment (eq. 26) beside `mem_kv`: the one key sampled (training) or taken
    (eval) is among the memory's M keys and the sequence's; each row's one-hot covers both
    (it once sized the one-hot by the sequence alone and failed at run time)."""
    mod = gen(spec("align = hard  mem_kv = 3"))
    model = mod.Model(mod.Config()).double()
    att = model.att
    q, k, v = inputs()
    for training in (True, False):
        att.train(training)
        torch.manual_seed(0)
        c, a, extras = att(q, k, v, MASKS["holes"])
        mass = a.sum(-1) + extras["memory"].sum(-1)
        torch.testing.assert_close(mass, torch.ones_like(mass))  # one key per row, anywhere
        assert set(a.unique().tolist()) <= {0.0, 1.0}
        picked = torch.cat([extras["memory"], a], -1).argmax(-1)  # (N, H, Lq), memory first
        vm = torch.cat([att.mem_v.detach().expand(2, -1, -1, -1),
                        v.view(2, 6, 2, 4).transpose(1, 2)], 2)  # (N, H, M + Lk, d / H)
        ctx = vm.gather(2, picked[..., None].expand(-1, -1, -1, 4))  # the picked values
        torch.testing.assert_close(c, att.out(ctx.transpose(1, 2).reshape(2, 6, 8)))


def test_subspace_disagreement_reads_the_sequence_values_beside_memory(gen):
    """Li et al.'s eq. 5 beside `mem_kv`: V^h are the head's values of the input sequence
    (the memory's learned values are no projection of it), padded positions left out; it
    once took the memory's values too and failed at run time."""
    mod = gen(spec("mem_kv = 2  penalty = disagreement(0.5, on = subspace)"))
    model = mod.Model(mod.Config()).double()
    x, _, _ = inputs()
    keep = MASKS["holes"]
    out = model(x=x, x_mask=keep)
    v = (x * keep[..., None]).view(2, 6, 2, 4).transpose(1, 2).flatten(2)  # (N, H, L * d / H)
    v = v / v.norm(dim=-1, keepdim=True)
    want = 0.5 * (v @ v.transpose(1, 2)).mean((1, 2)).mean()  # -lam D, D of eq. 5
    torch.testing.assert_close(out.penalty, want)


@pytest.mark.parametrize("mask", sorted(MASKS))
def test_memory_key_values_match_x_transformers(gen, mask):
    theirs = xt_attention({"num_mem_kv": 3})
    mod = gen(spec("mem_kv = 3"))
    ours = mod.Model(mod.Config()).att.eval()
    with torch.no_grad():
        ours.mem_k.copy_(theirs.mem_k)
        ours.mem_v.copy_(theirs.mem_v)
        ours.out.weight.copy_(theirs.to_out.weight)
        ours.out.bias.zero_()
    x = inputs()[0].float()
    with torch.no_grad():
        want = theirs(x, mask=MASKS[mask])
        c, _, _ = ours(*copy_projections(theirs, x), MASKS[mask])
    assert_same_rows(c, want, MASKS[mask])


# ---- per-head value gates (x-transformers' gate_value_heads) ---------------------------


@pytest.mark.parametrize("mask", sorted(MASKS))
def test_head_gates_match_the_reference(gen, mask):
    mod = gen(spec("head_gates = true"))
    model = mod.Model(mod.Config()).double()
    att = model.att
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        att.head_gate.weight.copy_(torch.randn(2, 8, generator=g, dtype=DT))
        att.head_gate.bias.copy_(torch.randn(2, generator=g, dtype=DT))
    q, k, v = inputs()
    c, a, _ = att(q, k, v, MASKS[mask])
    W, b = att.head_gate.weight.detach(), att.head_gate.bias.detach()
    ctx = torch.zeros(2, 6, 8, dtype=DT)
    for n in range(2):
        for h in range(2):
            e = head_scores(q, k, n, h, 2)
            for i in range(6):
                gate = 1 / (1 + math.exp(-(float(W[h] @ q[n, i]) + float(b[h]))))
                kept = {j: e[i][j] for j in range(6) if MASKS[mask] is None or MASKS[mask][n, j]}
                for j, w in softmax_over(kept).items():
                    ctx[n, i, 4 * h:4 * (h + 1)] += gate * w * v[n, j, 4 * h:4 * (h + 1)]
    torch.testing.assert_close(c, att.out(ctx))
    # the weights are the plain softmax's: the gates scale the contexts only
    torch.testing.assert_close(a.sum(-1)[:, :, 0], torch.ones(2, 2, dtype=DT))


@pytest.mark.parametrize("mask", sorted(MASKS))
def test_head_gates_match_x_transformers(gen, mask):
    theirs = xt_attention({"gate_value_heads": True})
    mod = gen(spec("head_gates = true"))
    ours = mod.Model(mod.Config()).att.eval()
    g = torch.Generator().manual_seed(8)
    with torch.no_grad():
        theirs.to_q.weight.copy_(torch.eye(8))  # q = x: our gates read the query input
        theirs.to_v_head_gate.weight.copy_(torch.randn(2, 8, generator=g))
        theirs.to_v_head_gate.bias.copy_(torch.randn(2, generator=g))
        ours.head_gate.weight.copy_(theirs.to_v_head_gate.weight)
        ours.head_gate.bias.copy_(theirs.to_v_head_gate.bias)
        ours.out.weight.copy_(theirs.to_out.weight)
        ours.out.bias.zero_()
    x = inputs()[0].float()
    with torch.no_grad():
        want = theirs(x, mask=MASKS[mask])
        c, _, _ = ours(*copy_projections(theirs, x), MASKS[mask])
    assert_same_rows(c, want, MASKS[mask])


def test_topk_reads_sparse_with_its_reason():
    text = (ROOT / "examples" / "zhao2019_topk.attn").read_text(encoding="utf-8")
    assert classify_text(text)["alignment"] == "Sparse"
    reason = " ".join(cell_of(text, "alignment")["Sparse"])
    assert "k = 8 largest scores" in reason and "not a window" in reason


@pytest.mark.parametrize("name", ["zhao2019_topk", "shazeer2020_talking_heads",
                                  "sukhbaatar2019_persistent_memory", "xtransformers_heads"])
def test_example_runs_forward_and_backward(tmp_path, name):
    build = inline_builder(tmp_path, "", f"_taxcompile_{name}")
    mod = build((ROOT / "examples" / f"{name}.attn").read_text(encoding="utf-8"))
    torch.manual_seed(0)
    model = mod.Model(mod.Config.tiny())
    inputs_ = mod.example_inputs(cfg=model.cfg)
    out = model(**inputs_)
    tokens = inputs_["tokens"]  # next-token prediction: position t predicts token t + 1
    loss = model.loss(out, torch.roll(tokens, -1, 1), inputs_.get("tokens_mask"))
    loss.backward()
    assert torch.isfinite(loss)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g_).all() for g_ in grads)


@pytest.mark.parametrize("name", ["topk_k_zero", "talking_heads_one_head", "mem_kv_additive",
                                  "head_gates_without_query", "mem_kv_local_alignment"])
def test_misuse_is_a_located_error(name):
    from conftest import error_snapshot

    got, want = error_snapshot(name)
    assert got == want


@pytest.mark.parametrize("name", ["xtransformers_heads"])  # all four in one module
def test_cached_decoding_equals_the_full_recompute(tmp_path, name):
    """generate() with its KV cache (one new query per step, the memory keys prepended at
    every step) samples what recomputing the whole prefix samples."""
    build = inline_builder(tmp_path, "", f"_taxcompile_gen_{name}")
    mod = build((ROOT / "examples" / f"{name}.attn").read_text(encoding="utf-8"))
    torch.manual_seed(0)
    model = mod.Model(mod.Config.tiny()).eval()
    with torch.no_grad():  # away from the identity mixes and the plain initialisation
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    runs = [model.generate(max_len=10, bos=1, eos=2, batch_size=2, strategy="sample",
                           generator=torch.Generator().manual_seed(1), incremental=inc)
            for inc in (True, False)]
    assert torch.equal(*runs)
