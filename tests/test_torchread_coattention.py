"""Co-attention's affinity scores read from code (taxcompile/torchread/scores.py): one
matrix of the pairs of two inputs whose rows one attention normalises while another reads
its columns or the maximum of each row (eq. 12-16), written by hand and checked against a
float64 reference before it is read; a matrix only one attention reads stays a plain
score."""
import pytest
import torch
from torch import nn

import taxcompile

D, T, L = 8, 3, 5


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class CoAttention(nn.Module):
    """A = act(C W Q^T) (B, L, T); context-to-query: softmax over A's rows (each context word
    over the question); query-to-context: softmax over its columns (``pool=False``) or over
    the maximum of each row, max_j A_ij (``pool=True``, BiDAF's q2c, eq. 16)."""

    def __init__(self, act=None, pool=False, shared=True):
        super().__init__()
        self.W = nn.Linear(D, D, bias=False)
        self.act, self.pool, self.shared = act, pool, shared

    def forward(self, c, q):  # c: (B, L, D), q: (B, T, D)
        A = self.W(c) @ q.transpose(1, 2)
        if self.act is not None:
            A = self.act(A)
        c2q = A.softmax(-1) @ q  # (B, L, D)
        if not self.shared:
            return c2q
        if self.pool:
            q2c = (A.amax(-1).softmax(-1).unsqueeze(-1) * c).sum(1)  # (B, D)
        else:
            q2c = A.transpose(1, 2).softmax(-1) @ c  # (B, T, D)
        return c2q, q2c


def reference(m, c, q):
    """Eq. 12-16 pair by pair in float64."""
    c, q, W = c.double(), q.double(), m.W.weight.double()
    B = c.shape[0]
    A = torch.tensor([[[float((W @ c[b, i]) @ q[b, j]) for j in range(T)] for i in range(L)]
                      for b in range(B)], dtype=torch.float64)
    if m.act is not None:
        A = m.act(A)
    c2q = torch.stack([torch.stack([torch.softmax(A[b, i], 0) @ q[b] for i in range(L)])
                       for b in range(B)])
    if m.pool:
        q2c = torch.stack([torch.softmax(A[b].max(1).values, 0) @ c[b] for b in range(B)])
    else:
        q2c = torch.stack([torch.stack([torch.softmax(A[b, :, j], 0) @ c[b] for j in range(T)])
                           for b in range(B)])
    return c2q, q2c


@pytest.mark.parametrize("act, pool, reading, second", [
    (None, False, "General", "affinity"),
    (torch.tanh, False, "Activated General", "affinity"),
    (None, True, "General", "max_pool"),
], ids=["bilinear", "tanh", "max-pool"])
def test_an_affinity_matrix_read_by_two_attentions(act, pool, reading, second):
    m, c, q = CoAttention(act, pool).eval(), _x(2, L, D), _x(2, T, D, seed=1)
    with torch.no_grad():
        for got, want in zip(m.double()(c.double(), q.double()), reference(m, c, q)):
            torch.testing.assert_close(got, want)
    res = taxcompile.classify(m.float(), (c, q))
    first, other = res.recognised
    assert first.names == {"score": "affinity", "align": "global"}
    assert other.names == {"score": second, "align": "global"}
    assert res.row()["scoring"] == reading
    why = first.values["scoring"][1]
    assert "affinity matrix" in why and other.norm in why
    if not pool:  # the columns' reader's query is the question, its keys the context
        assert "columns" in other.values["scoring"][1]
        assert other.query is not None and other.query.name != first.query.name


def test_a_matrix_one_attention_reads_is_a_plain_score():
    res = taxcompile.classify(CoAttention(shared=False).eval(), (_x(2, L, D), _x(2, T, D, seed=1)))
    (a,) = res.recognised
    assert a.names["score"] == "general"


class Interactive(nn.Module):
    """Ma et al. (2017)'s interactive attention: each side's keys scored against the other
    side's average, e_l = tanh(k_l^T W q_avg + b), softmax, weighted sum (``bias=False``:
    tanh(k_l^T W q_avg))."""

    def __init__(self, bias=True):
        super().__init__()
        self.W = nn.Linear(D, D, bias=False)
        self.b = nn.Parameter(_x(1, seed=3)) if bias else None

    def forward(self, c, t):  # context (B, L, D), target (B, T, D)
        q = t.mean(1, keepdim=True)  # (B, 1, D)
        e = c @ self.W(q).transpose(1, 2)  # (B, L, 1)
        if self.b is not None:
            e = e + self.b
        return (torch.tanh(e).transpose(1, 2).softmax(-1) @ c).squeeze(1)  # (B, D)


@pytest.mark.parametrize("bias", [True, False])
def test_activated_general(bias):
    m, c, t = Interactive(bias).eval(), _x(2, L, D), _x(2, T, D, seed=1)
    c64, q64, W = c.double(), t.double().mean(1), m.W.weight.double()
    b = m.b.double()[0] if bias else 0.0
    want = torch.stack([torch.softmax(torch.stack([torch.tanh(c64[i, l] @ (W @ q64[i]) + b)
                                                   for l in range(L)]), 0) @ c64[i]
                        for i in range(2)])
    with torch.no_grad():
        torch.testing.assert_close(m.double()(c.double(), t.double()), want)
    res = taxcompile.classify(m.float(), (c, t))
    (a,) = res.recognised
    assert a.names["score"] == "activated_general"
    assert res.row()["scoring"] == "Activated General"
    why = a.values["scoring"][1]
    assert "tanh of a general score" in why and ("learned bias" in why) == bias


def test_an_activation_of_a_plain_dot_product_is_not_recognised():
    """tanh(q^T k) is no score of the registry: not recognised, with its node, not guessed."""
    class TanhDot(nn.Module):
        def forward(self, y, x):
            return torch.tanh(y @ x.transpose(1, 2)).softmax(-1) @ x

    res = taxcompile.classify(TanhDot(), (_x(2, T, D), _x(2, L, D, seed=1)))
    (a,) = res.attentions
    assert not a.recognised and "tanh" in a.why_not and res.row() == {}


class BiDAF(nn.Module):
    """Seo et al. (2017): S_ij = w^T [c_i; q_j; c_i * q_j], written as BiDAF's code does,
    w1^T c_i + w2^T q_j + (c_i * w3)^T q_j; context-to-query over S's rows, query-to-context
    over the maxima of its rows, softmax_i(max_j S_ij)."""

    def __init__(self):
        super().__init__()
        self.w1, self.w2, self.w3 = (nn.Parameter(_x(D, seed=s)) for s in (7, 8, 9))

    def forward(self, c, q):  # c: (B, L, D), q: (B, T, D)
        S = ((c * self.w1).sum(-1).unsqueeze(-1) + (q * self.w2).sum(-1).unsqueeze(1)
             + (c * self.w3) @ q.transpose(1, 2))  # (B, L, T)
        c2q = S.softmax(-1) @ q
        q2c = (S.max(-1).values.softmax(-1).unsqueeze(-1) * c).sum(1)
        return c2q, q2c


def test_bidaf_trilinear_affinity():
    m, c, q = BiDAF().eval(), _x(2, L, D), _x(2, T, D, seed=1)
    c64, q64 = c.double(), q.double()
    w = torch.cat([m.w1, m.w2, m.w3]).double()
    S = torch.tensor([[[float(w @ torch.cat([c64[b, i], q64[b, j], c64[b, i] * q64[b, j]]))
                        for j in range(T)] for i in range(L)] for b in range(2)],
                     dtype=torch.float64)
    want = (S.softmax(-1) @ q64, (S.max(-1).values.softmax(-1).unsqueeze(-1) * c64).sum(1))
    with torch.no_grad():
        for got, ref in zip(m.double()(c64, q64), want):
            torch.testing.assert_close(got, ref)
    res = taxcompile.classify(m.float(), (c, q))
    rows, pooled = res.recognised
    assert (rows.names["score"], pooled.names["score"]) == ("affinity", "max_pool")
    assert res.row()["scoring"] == "Multiplicative"  # the trilinear form's reading (Table II)
    assert "trilinear" in rows.values["scoring"][1]


def test_a_sum_of_learned_vectors_without_the_pair_product_is_no_affinity():
    """w1^T c_i + w2^T q_j alone: no pair product, no affinity; not recognised."""
    class Halves(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1, self.w2 = nn.Parameter(_x(D, seed=7)), nn.Parameter(_x(D, seed=8))

        def forward(self, c, q):
            S = (c * self.w1).sum(-1).unsqueeze(-1) + (q * self.w2).sum(-1).unsqueeze(1)
            return S.softmax(-1) @ q, S.transpose(1, 2).softmax(-1) @ c

    res = taxcompile.classify(Halves(), (_x(2, L, D), _x(2, T, D, seed=1)))
    assert res.attentions and not res.recognised
