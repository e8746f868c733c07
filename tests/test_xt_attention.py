"""The attention features users of x-transformers reach for (issue 25): top-k sparse
attention (`align = topk(k = …)`, Zhao et al. 2019). Each against a float64 reference of
its equations written here with explicit loops, masks included, and against
x-transformers' own `Attention` with its weights copied into the generated module."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from conftest import ROOT, classify_text  # noqa: E402
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


def test_topk_reads_sparse_with_its_reason():
    text = (ROOT / "examples" / "zhao2019_topk.attn").read_text(encoding="utf-8")
    assert classify_text(text)["alignment"] == "Sparse"
    from taxcompile import classify, pipeline

    cs = pipeline.load_text(text, "zhao2019_topk.attn")
    reason = " ".join(classify.classify_model(cs.models[0]).cells["alignment"].values["Sparse"])
    assert "k = 8 largest scores" in reason and "not a window" in reason


@pytest.mark.parametrize("name", ["zhao2019_topk"])
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


@pytest.mark.parametrize("name", ["topk_k_zero"])
def test_misuse_is_a_located_error(name):
    from conftest import error_snapshot

    got, want = error_snapshot(name)
    assert got == want
