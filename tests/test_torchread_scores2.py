"""Scores torchread refused in the round trip of taxcompile's own models, each read here on
a module written from its paper's equation (checked first against a float64 reference of
that equation) with a near miss that must be refused: query-key RMS normalisation with
learned gains (x-transformers' qk_rmsnorm, examples/modern_lm.attn)."""
import math

import torch
import torch.nn.functional as F
from torch import nn

import taxcompile

B, L, D = 2, 5, 8


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _only(res):
    (a,) = res.recognised
    return a


# --- query-key RMS normalisation with learned gains ---

class RMSQKNorm(nn.Module):
    """softmax_j(RMS(q_i) g_q . RMS(k_j) g_k / sqrt(d)) v_j, RMS(x) = x / sqrt(mean(x^2)),
    written as x-transformers writes it (x / |x| times sqrt(d), gains g + 1). ``one_gain``:
    the near miss, a gain on the queries alone (q^T diag(g) k over normalised streams, which
    no record builds)."""

    def __init__(self, one_gain=False, d=D):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.gq = nn.Parameter(_x(d, seed=1) * 0.3)
        self.gk = None if one_gain else nn.Parameter(_x(d, seed=2) * 0.3)

    def forward(self, x):
        d = x.shape[-1]
        q = F.normalize(self.q(x), dim=-1) * math.sqrt(d) * (self.gq + 1)
        k = F.normalize(self.k(x), dim=-1) * math.sqrt(d)
        if self.gk is not None:
            k = k * (self.gk + 1)
        return (q @ k.transpose(-1, -2) / math.sqrt(d)).softmax(-1) @ self.v(x)


def _rms_reference(m, x):
    """float64 of the equation: RMS norms times the gains, scaled dot product, softmax."""
    rms = lambda t: t / t.pow(2).mean(-1, keepdim=True).sqrt()  # noqa: E731
    q = rms(m.q(x)) * (m.gq + 1)
    k = rms(m.k(x)) * (m.gk + 1)
    return (q @ k.transpose(-1, -2) / math.sqrt(D)).softmax(-1) @ m.v(x)


def test_rms_qk_norm_with_gains_reads_the_scaled_dot_product_as_written():
    """Refused before (q^T diag(g) k over normalised streams); the registry reads
    `qk_norm = rms` as the score's own cell, so the code reads Scaled Multiplicative, its
    reason naming the RMS norms (the sqrt(d) that makes x / |x| one) and the gains."""
    m, x = RMSQKNorm().double(), _x(B, L, D).double()
    assert torch.allclose(m(x), _rms_reference(m, x), atol=1e-10)
    a = _only(taxcompile.classify(m.float(), (_x(B, L, D),)))
    value, why = a.values["scoring"]
    assert value == "Scaled Multiplicative", why
    assert "RMS-normalised" in why and "times sqrt(d)" in why and "learned gain" in why
    assert "cosine" not in why.split("not a cosine")[0]


def test_torch_rms_norm_on_q_and_k_reads_as_written():
    """nn.RMSNorm on q and k (x rsqrt(mean(x^2) + eps) times its weight, as Qwen3 and OLMo2
    write qk-norm): the same reading, the norm's mean square naming it RMS."""

    class TorchRMS(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v = nn.Linear(D, D), nn.Linear(D, D), nn.Linear(D, D)
            self.qn, self.kn = nn.RMSNorm(D, eps=1e-6), nn.RMSNorm(D, eps=1e-6)
            with torch.no_grad():
                self.qn.weight.copy_(_x(D, seed=3)), self.kn.weight.copy_(_x(D, seed=4))

        def forward(self, x):
            q, k = self.qn(self.q(x)), self.kn(self.k(x))
            return (q @ k.transpose(-1, -2) / math.sqrt(D)).softmax(-1) @ self.v(x)

    m, x = TorchRMS().double(), _x(B, L, D).double()
    rms = lambda t, g: t / (t.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt() * g  # noqa: E731
    q, k = rms(m.q(x), m.qn.weight), rms(m.k(x), m.kn.weight)
    want = (q @ k.transpose(-1, -2) / math.sqrt(D)).softmax(-1) @ m.v(x)
    assert torch.allclose(m(x), want, atol=1e-10)
    a = _only(taxcompile.classify(m.float(), (_x(B, L, D),)))
    assert a.values["scoring"][0] == "Scaled Multiplicative", a.values["scoring"][1]
    assert "RMS-normalised" in a.values["scoring"][1]


def test_a_gain_on_the_normalised_queries_alone_is_refused():
    """Near miss: q^T diag(g) k with q and k normalised is no record's score (qk-norm puts
    gains on both): refused, not read as a product nor a cosine."""
    res = taxcompile.classify(RMSQKNorm(one_gain=True), (_x(B, L, D),))
    assert res.recognised == [] and res.row() == {}
    assert "attention not recognised" in res.text()


def test_gains_on_q_and_k_with_k_not_normalised_are_refused():
    """Near miss: the keys carry a gain but no norm: no qk-norm, refused."""

    class HalfNormed(RMSQKNorm):
        def forward(self, x):
            q = F.normalize(self.q(x), dim=-1) * math.sqrt(D) * (self.gq + 1)
            k = self.k(x) * (self.gk + 1)
            return (q @ k.transpose(-1, -2) / math.sqrt(D)).softmax(-1) @ self.v(x)

    res = taxcompile.classify(HalfNormed(), (_x(B, L, D),))
    assert res.recognised == [] and res.row() == {}


# --- capsules: a learned query per class scoring the keys as they are ---

class Capsules(nn.Module):
    """Wang et al. (2018) eq. 43 (the survey's capsule-based attention): one learned query
    q_c per class, e_{c,l} = q_c^T h_l over the hidden states h, a_c = softmax_l(e_c),
    v_c = sum_l a_{c,l} h_l. ``tanh``: the near miss, w_c^T tanh(W h_l) (Lin et al.'s
    W_s2 tanh(W_s1 H^T)), which is Additive."""

    def __init__(self, tanh=False, c=3, d=D):
        super().__init__()
        self.queries = nn.Parameter(_x(c, d, seed=5))
        self.w = nn.Linear(d, d, bias=False) if tanh else None

    def forward(self, h):
        k = torch.tanh(self.w(h)) if self.w is not None else h
        e = self.queries.expand(h.shape[0], -1, -1) @ k.transpose(-1, -2)  # (N, C, L)
        return e.softmax(-1) @ h  # (N, C, d): v_c


def test_capsule_queries_score_the_keys_multiplicatively():
    """Refused before (a parameter operand was taken for a learned map): q_c^T h_l with a
    learned q_c is the multiplicative score, its query learned (Self-Attentive, eq. 34)."""
    m, h = Capsules().double(), _x(B, L, D).double()
    e = torch.stack([torch.stack([m.queries[c] @ h[b, l] for l in range(L)])
                     for c in range(3) for b in range(B)]).view(3, B, L).transpose(0, 1)
    want = torch.einsum("bcl,bld->bcd", e.softmax(-1), h)
    assert torch.allclose(m(h), want, atol=1e-10)
    a = _only(taxcompile.classify(m.float(), (_x(B, L, D),)))
    assert a.values["scoring"][0] == "Multiplicative", a.values["scoring"][1]
    assert "learned queries" in a.values["scoring"][1]
    assert a.values["query_type"][0] == "Self-Attentive"
    assert "learned parameter" in a.values["query_type"][1]


def test_capsule_queries_over_an_activated_map_stay_additive():
    """Near miss: learned queries over tanh(W h) are w^T act(W k): Additive, not a product."""
    a = _only(taxcompile.classify(Capsules(tanh=True), (_x(B, L, D),)))
    assert a.values["scoring"][0] == "Additive", a.values["scoring"][1]


def test_weights_over_the_learned_rows_are_no_capsule_score():
    """Near miss: the same product normalised over the learned rows (each position's
    weights over the classes) weighs no keys: not read as q_c^T h_l."""

    class OverRows(Capsules):
        def forward(self, h):
            e = self.queries.expand(h.shape[0], -1, -1) @ h.transpose(-1, -2)  # (N, C, L)
            return e.softmax(-2).transpose(-1, -2) @ self.queries  # (N, L, d)

    res = taxcompile.classify(OverRows(), (_x(B, L, D),))
    assert all(a.values["scoring"][0] != "Multiplicative" for a in res.recognised), res.text()
