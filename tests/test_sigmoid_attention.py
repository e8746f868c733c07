"""Sigmoid attention (Ramapuram et al. 2024, "Theory, Analysis, and Best Practices for
Sigmoid Self-Attention"): `align = sigmoid_attn(bias = b)`, each weight sigmoid(e_ij + b) on
its own, not normalised over the keys, b = -log n (n keys) unless the spec sets it. The
generated class is checked against the paper's equation written here in float64 (Apple's
reference, ml-sigmoid-attention: sigmoid(q k^T * scale + b), b = -log n), with padded keys,
ALiBi (the paper's position term), a signed b from the spec, and gradients."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from conftest import cell_of, error_snapshot  # noqa: E402
from test_codegen_mechanisms import (  # noqa: E402
    D, close, gen, gradcheck_module, make, qkv_inputs, qkv_spec)

__all__ = ["gen"]  # the fixture, imported for the tests below

DT = torch.float64


def spec(align: str = "sigmoid_attn", heads: int = 2, extra: str = "") -> str:
    """query y (T, 8), keys x (L, 8), values z (L, 6), `heads` heads."""
    return qkv_spec("scaled_multiplicative", dq=8, align=align, dv=6,
                    extra=f"heads  = {heads}\n            {extra}")


def reference(q, k, v, key_mask, heads: int, b: float | None, W_O, b_O, slopes=None):
    """eq. 1 of the paper per head: a_ij = sigmoid(q_i^T k_j / sqrt(d) + b) (+ ALiBi's
    -m_h |i - j|, the last Lq of Lk positions), zero at padded keys; c = W_O concat(a v) + b_O."""
    q, k, v = (t.to(DT) for t in (q, k, v))
    N, Lq, dq = q.shape
    Lk = k.shape[1]
    b = -math.log(Lk) if b is None else b
    dh, dvh = dq // heads, v.shape[-1] // heads
    A = torch.zeros(N, heads, Lq, Lk, dtype=DT)
    ctx = torch.zeros(N, Lq, heads * dvh, dtype=DT)
    for n in range(N):
        for h in range(heads):
            for i in range(Lq):
                for j in range(Lk):
                    if key_mask is not None and not key_mask[n, j]:
                        continue
                    e = q[n, i, h * dh:(h + 1) * dh] @ k[n, j, h * dh:(h + 1) * dh] / math.sqrt(dh)
                    if slopes is not None:
                        e = e - slopes[h] * abs(i + Lk - Lq - j)
                    A[n, h, i, j] = 1 / (1 + math.exp(-(float(e) + b)))
                ctx[n, i, h * dvh:(h + 1) * dvh] = A[n, h, i] @ v[n, :, h * dvh:(h + 1) * dvh]
    return ctx @ W_O.T + b_O, A


@pytest.mark.parametrize("bias,b", [("", None), ("(bias = -2.5)", -2.5), ("(bias = 0.75)", 0.75)],
                         ids=["minus_log_n", "negative", "positive"])
def test_sigmoid_attention_matches_the_paper(gen, bias, b):
    _, model = make(gen, spec("sigmoid_attn" + bias))
    q, k, v, mask = qkv_inputs(dq=8, dk=8, dv=6, Lq=3, Lk=6)
    c, a, _ = model.att(q, k, v, mask)
    out = model.att.out
    want_c, want_a = reference(q, k, v, mask, 2, b, D(out.weight), D(out.bias))
    close(a, want_a)
    close(c, want_c)
    # not normalised over the keys: the rows do not sum to 1
    assert (D(a).sum(-1) - 1).abs().max() > 0.05


def test_sigmoid_attention_with_alibi(gen):
    """The paper's models add ALiBi to the scores before the sigmoid (§3.3), in
    self-attention: q = k = v = x here."""
    _, model = make(gen, """
    model m {
        input x: sequence[L, 8]
        attention att {
            query = x  keys = x  values = x
            score = scaled_multiplicative  align = sigmoid_attn  heads = 2  bias = alibi
        }
        output out = identity(att)
    }
    """)
    x, _, _, mask = qkv_inputs(dq=8, dk=8, dv=8, Lq=5, Lk=5)
    c, a, _ = model.att(x, x, x, mask)
    slopes = [2 ** (-8 * (h + 1) / 2) for h in range(2)]
    out = model.att.out
    want_c, want_a = reference(x, x, x, mask, 2, None, D(out.weight), D(out.bias), slopes)
    close(a, want_a)
    close(c, want_c)


def test_sigmoid_attention_gradients(gen):
    _, model = make(gen, spec("sigmoid_attn(bias = -1.0)"))
    q, k, v, mask = qkv_inputs(dq=8, dk=8, dv=6, Lq=2, Lk=4)
    gradcheck_module(model.att, q, k, v, mask)
    c, _, _ = model.att(q.requires_grad_(), k, v, mask)
    c.sum().backward()
    assert torch.isfinite(q.grad).all() and q.grad.abs().max() > 0


def test_sigmoid_attention_reads_global_and_is_not_oktays_gate():
    text = 'paper t { cite = "T" }\nmodel m {\n input x: sequence[L, 8]\n' \
           ' attention a { query = project(x)  keys = x  values = x  ' \
           'score = scaled_multiplicative  align = sigmoid_attn(bias = -3) }\n}\n'
    cell = cell_of(text, "alignment")
    assert list(cell) == ["Global"]
    assert "b = -3" in cell["Global"][0] and "not normalised" in cell["Global"][0]


@pytest.mark.parametrize("name", ["sigmoid_attn_bias_not_a_number"])
def test_error_snapshot(name):
    got, want = error_snapshot(name)
    assert got == want
