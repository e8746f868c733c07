"""examples/lee2019_set_transformer.attn (ISAB with learned inducing points, PMA with learned
seeds: `learned(K, d)`) against a float64 Set Transformer written here from the paper's
equations; padding leaves its output unchanged (a set has no padded members); it learns
the maximum of a set of digits with taxcompile.fit."""

import math
import time

import pytest

torch = pytest.importorskip("torch")

import taxcompile  # noqa: E402

from conftest import ROOT, cell_of, classify_text  # noqa: E402
from torch_support import moved, one_thread  # noqa: E402, F401

SPEC = ROOT / "examples" / "lee2019_set_transformer.attn"
SMALL = dict(d=32, heads=4, d_ff=32, inducing=8)


def _ln(x, p, name):
    """LayerNorm (Ba et al.), torch's eps."""
    mu, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
    return (x - mu) / torch.sqrt(var + 1e-5) * p[f"{name}.weight"] + p[f"{name}.bias"]


def _rff(x, p, name):
    """A row-wise feed-forward layer: W2 relu(W1 x + b1) + b2."""
    h = torch.relu(x @ p[f"{name}.0.weight"].T + p[f"{name}.0.bias"])
    return h @ p[f"{name}.2.weight"].T + p[f"{name}.2.bias"]


def _multihead(X, Y, p, att, heads):
    """Multihead(X, Y, Y) (eq. 5-6): Q = X W_Q, K = Y W_K, V = Y W_V split into h heads,
    softmax(Q_j K_j^T / sqrt(d / h)) V_j side by side, times W_O."""
    if f"{att}_qkv_proj.weight" in p:
        Wq, Wk, Wv = p[f"{att}_qkv_proj.weight"].chunk(3, 0)
    else:
        Wq, (Wk, Wv) = p[f"{att}_q_proj.weight"], p[f"{att}_kv_proj.weight"].chunk(2, 0)
    B, n, d = X.shape[0], X.shape[1], Wq.shape[0]
    split = lambda t: t.view(B, t.shape[1], heads, d // heads).transpose(1, 2)  # noqa: E731
    q, k, v = split(X @ Wq.T), split(Y @ Wk.T), split(Y @ Wv.T)
    a = (q @ k.transpose(-1, -2) / math.sqrt(d // heads)).softmax(-1)
    o = (a @ v).transpose(1, 2).reshape(B, n, d)
    return o @ p[f"{att}.out.weight"].T + p[f"{att}.out.bias"]


def _mab(X, Y, p, att, norm1, ffn, norm2, heads):
    """MAB(X, Y) = LayerNorm(H + rFF(H)), H = LayerNorm(X + Multihead(X, Y, Y)) (eq. 6-7)."""
    H = _ln(X + _multihead(X, Y, p, att, heads), p, norm1)
    return _ln(H + _rff(H, p, ffn), p, norm2)


def _reference_logits(m, x):
    """Encoder ISAB(ISAB(X)), decoder rFF(SAB(PMA_1(Z))) (eq. 9-12), m's weights by name."""
    p, heads = dict(m.named_parameters()), m.cfg.heads
    B = x.shape[0]
    X = p["h_embed.weight"][x]
    for i in range(2):  # ISAB_m(X) = MAB(X, MAB(I, X)) (eq. 9-10)
        w = {k[len(f"isab.{i}."):]: v for k, v in p.items() if k.startswith(f"isab.{i}.")}
        I = w["ind_learned"].expand(B, -1, -1)  # noqa: E741  (the paper's I)
        H = _mab(I, X, w, "induce", "u_norm", "s_ffn", "s_norm", heads)
        X = _mab(X, H, w, "back", "h_1_norm", "h_2_ffn", "h_2_norm", heads)
    S = p["seed_learned"].expand(B, -1, -1)
    P = _mab(S, _rff(X, p, "z_ffn"), p, "pool", "p_norm", "p_2_ffn", "p_2_norm", heads)  # PMA_k
    P = _mab(P, P, p, "mix", "p_3_norm", "p_4_ffn", "p_4_norm", heads)  # SAB
    return P[:, 0] @ p["y_head.weight"].T + p["y_head.bias"]


def _model(**sizes):
    torch.manual_seed(0)
    return taxcompile.build(SPEC, **{**SMALL, **sizes})


def test_forward_matches_the_papers_equations_in_float64():
    m = moved(_model().double().eval())
    x = torch.randint(0, 10, (3, 11))
    with torch.no_grad():
        torch.testing.assert_close(m(x).output, _reference_logits(m, x), atol=1e-10, rtol=0)
    assert m.isab[0].ind_learned.shape == (8, 32) and m.seed_learned.shape == (1, 32)


def test_the_learned_sets_are_parameters_of_the_config_sizes():
    m = _model(inducing=5, seeds=3)
    assert m.isab[1].ind_learned.shape == (5, 32) and m.seed_learned.shape == (3, 32)
    assert m.isab[0].ind_learned.data_ptr() != m.isab[1].ind_learned.data_ptr()
    # initialised as one learned query is (eq. 34): N(0, 1) / sqrt(d)
    big = _model(inducing=4096).isab[0].ind_learned
    assert abs(float(big.detach().std()) - 32 ** -0.5) < 0.01


def test_padded_members_change_nothing_and_the_order_of_members_neither():
    m = _model().double().eval()
    x = torch.randint(0, 10, (2, 7))
    padded = torch.cat([x, torch.randint(0, 10, (2, 4))], 1)
    keep = torch.arange(11) < 7
    with torch.no_grad():
        want = m(x).output
        torch.testing.assert_close(m(padded, x_mask=keep.expand(2, -1)).output, want,
                                   atol=1e-12, rtol=0)
        perm = torch.randperm(7)
        torch.testing.assert_close(m(x[:, perm]).output, want, atol=1e-12, rtol=0)


def test_it_reads_as_self_attention_through_learned_inducing_points():
    """The set attends over H = MAB(I, X), a summary of itself: its own features (Singular,
    Self-Attentive), not a second input (co-attention) nor a query from another input."""
    text = SPEC.read_text(encoding="utf-8")
    row = classify_text(text)
    assert (row["feature_multiplicity"], row["query_type"]) == ("Singular", "Self-Attentive")
    reasons = cell_of(text, "query_type")["Self-Attentive"]
    assert "the query of `isab.induce` is a learned query set of 32 vectors (eq. 34)" in reasons
    assert "the query of `pool` is a learned query set of 1 vector (eq. 34)" in reasons


def _max_batches(n: int, size: int, seed: int) -> list:
    """(inputs, target): sets of 2 to 10 digits (padded to 10), the target their maximum."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        x = torch.randint(0, 10, (size, 10), generator=g)
        lengths = torch.randint(2, 11, (size, 1), generator=g)
        keep = torch.arange(10) < lengths
        target = x.masked_fill(~keep, -1).max(-1).values
        out.append(({"x": x, "x_mask": keep}, target))
    return out


def test_it_learns_the_maximum_of_a_set():
    """Trained with taxcompile.fit for 250 steps on one thread (about 7 s on a loaded
    2-core machine; it reached 0.998), the maximum of held-out sets of 2 to 10 digits is
    right for at least 97% of them."""
    m, steps = _model(), 250
    start = time.perf_counter()
    h = taxcompile.fit(m, _max_batches(steps, 64, seed=1), steps=steps, lr=3e-3,
                       eval_data=_max_batches(8, 64, seed=99), progress=False, threads=1,
                       seed=0)
    took = time.perf_counter() - start
    acc = h.evals[-1]["accuracy"]
    print(f"max of a set: {acc:.3f} after {steps} steps in {took:.1f} s")
    assert acc >= 0.97, (acc, took)
