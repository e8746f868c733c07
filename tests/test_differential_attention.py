"""Differential attention (Ye et al. 2024, "Differential Transformer"): `differential =
true | lambda_init`, each head's q and k split in two halves Q1, Q2 and K1, K2 of width d,
A = softmax(Q1 K1^T / sqrt(d)) - lambda softmax(Q2 K2^T / sqrt(d)) with lambda =
exp(lq1 . lk1) - exp(lq2 . lk2) + lambda_init, each head's context A V RMS-normalised and
scaled by (1 - lambda_init), then W_O. The generated class is checked against those
equations written here in float64, with padded keys and the causal mask, and gradients."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from conftest import cell_of, error_snapshot  # noqa: E402
from test_codegen_mechanisms import (  # noqa: E402
    D, close, gen, gradcheck_module, make, qkv_inputs, qkv_spec)

__all__ = ["gen"]  # the fixture, imported for the tests below

DT = torch.float64


def spec(extra: str = "differential = true", heads: int = 2, score: str = "scaled_multiplicative",
         align: str = "global") -> str:
    """query y (T, 8), keys x (L, 8), values z (L, 6), `heads` heads."""
    return qkv_spec(score, dq=8, align=align, dv=6, extra=f"heads  = {heads}\n            {extra}")


def softmax_rows(e, keep):
    """Softmax over the kept keys of each row (eq. 25); a row with none gives zeros."""
    out = torch.zeros_like(e)
    for i in range(e.shape[0]):
        kept = keep[i]
        if kept.any():
            out[i, kept] = torch.exp(e[i, kept] - e[i, kept].max())
            out[i, kept] /= out[i, kept].sum()
    return out


def reference(att, q, k, v, keep, heads: int, lambda_init: float):
    """Ye et al. eq. 1-3 per head, from the module's parameters (lambda's four vectors, the
    norm's gain, W_O), in float64."""
    P = {n: D(p) for n, p in att.named_parameters()}
    q, k, v = (t.to(DT) for t in (q, k, v))
    N, Lq, dq = q.shape
    dh, dvh = dq // heads, v.shape[-1] // heads
    d = dh // 2
    lam = math.exp(float(P["lambda_q1"] @ P["lambda_k1"])) \
        - math.exp(float(P["lambda_q2"] @ P["lambda_k2"])) + lambda_init
    A = torch.zeros(N, heads, Lq, k.shape[1], dtype=DT)
    out = torch.zeros(N, Lq, heads * dvh, dtype=DT)
    for n in range(N):
        for h in range(heads):
            Q1, Q2 = q[n, :, h * dh:h * dh + d], q[n, :, h * dh + d:(h + 1) * dh]
            K1, K2 = k[n, :, h * dh:h * dh + d], k[n, :, h * dh + d:(h + 1) * dh]
            A1 = softmax_rows(Q1 @ K1.T / math.sqrt(d), keep[n])
            A2 = softmax_rows(Q2 @ K2.T / math.sqrt(d), keep[n])
            A[n, h] = A1 - lam * A2
            O = A[n, h] @ v[n, :, h * dvh:(h + 1) * dvh]
            O = O / torch.sqrt((O ** 2).mean(-1, keepdim=True) + 1e-5) * P["head_norm"]
            out[n, :, h * dvh:(h + 1) * dvh] = O * (1 - lambda_init)
    return out @ P["out.weight"].T + P["out.bias"], A


@pytest.mark.parametrize("extra,lambda_init", [("differential = true", 0.8),
                                               ("differential = 0.2", 0.2)],
                         ids=["default", "layer_1"])
def test_differential_attention_matches_the_paper(gen, extra, lambda_init):
    _, model = make(gen, spec(extra))
    q, k, v, mask = qkv_inputs(dq=8, dk=8, dv=6, Lq=3, Lk=6)
    c, a, _ = model.att(q, k, v, mask)
    keep = mask[:, None, :].expand(-1, 3, -1)
    want_c, want_a = reference(model.att, q, k, v, keep, 2, lambda_init)
    close(a, want_a)
    close(c, want_c)
    # both maps are distributions over the kept keys: a row of A1 - lambda A2 sums to 1 - lambda
    P = {n: D(p) for n, p in model.att.named_parameters()}
    lam = math.exp(float(P["lambda_q1"] @ P["lambda_k1"])) \
        - math.exp(float(P["lambda_q2"] @ P["lambda_k2"])) + lambda_init
    torch.testing.assert_close(D(a).sum(-1), torch.full((2, 2, 3), 1 - lam, dtype=DT))


def test_differential_attention_causal_self_attention(gen):
    _, model = make(gen, """
    model m {
        input x: sequence[L, 8]
        attention att {
            query = x  keys = x  values = x
            score = scaled_multiplicative  heads = 2  mask = causal  differential = 0.5
        }
        output out = identity(att)
    }
    """)
    x, _, _, mask = qkv_inputs(dq=8, dk=8, dv=8, Lq=5, Lk=5)
    c, a, _ = model.att(x, x, x, mask)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    keep = mask[:, None, :] & causal[None]
    want_c, want_a = reference(model.att, x, x, x, keep, 2, 0.5)
    close(a, want_a)
    close(c, want_c)


def test_differential_attention_gradients(gen):
    _, model = make(gen, spec())
    q, k, v, mask = qkv_inputs(dq=8, dk=8, dv=6, Lq=2, Lk=4)
    gradcheck_module(model.att, q, k, v, mask)
    c, _, _ = model.att(q, k, v, mask)
    c.sum().backward()
    grads = {n: p.grad for n, p in model.att.named_parameters()}
    assert all(g is not None and torch.isfinite(g).all() for g in grads.values())
    assert grads["lambda_q1"].abs().max() > 0 and grads["head_norm"].abs().max() > 0


def test_an_odd_head_width_is_refused_when_built(gen):
    mod = gen(spec())
    with pytest.raises(ValueError, match="must be even"):
        mod.MultiHeadDifferentialScaledMultiplicativeAttention(d_q=6, d_k=6, d_v=6, heads=2)


def test_differential_attention_stays_multi_head():
    text = 'paper t { cite = "T" }\nmodel m {\n input x: sequence[L, 8]\n' \
           ' attention a { query = project(x)  keys = x  values = x  ' \
           'score = scaled_multiplicative  heads = 2  differential = true }\n}\n'
    cell = cell_of(text, "query_multiplicity")
    assert list(cell) == ["Multi-Head"]
    assert "differential attention (Ye et al. 2024)" in cell["Multi-Head"][0]
    assert list(cell_of(text, "alignment")) == ["Global"]


@pytest.mark.parametrize("name", ["differential_lambda_init_out_of_range",
                                  "differential_without_a_dot_product"])
def test_error_snapshot(name):
    got, want = error_snapshot(name)
    assert got == want
