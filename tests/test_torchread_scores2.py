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


# --- LSH attention, its weights computed whole: shared QK and a hash bucket mask ---

class LSHAttention(nn.Module):
    """Kitaev et al. (2020) section 2, one hash round, the weights over the whole sequence:
    shared QK (k_j = q_j / |q_j|), h(x) = argmax([xR; -xR]) with a random rotation R,
    a_ij = softmax of q_i^T k_j / sqrt(d) over the j with h(k_j) = h(k_i). ``fixed``: the
    near miss, the keys of bucket 0 kept for every query (no comparison of two buckets)."""

    def __init__(self, fixed=False, d=D, buckets=4):
        super().__init__()
        self.fixed, self.qk, self.v = fixed, nn.Linear(d, d), nn.Linear(d, d)
        self.register_buffer("rot", _x(d, buckets // 2, seed=6))

    def buckets(self, k):
        xr = k @ self.rot
        return torch.cat([xr, -xr], -1).argmax(-1)  # (N, L)

    def forward(self, x):
        q = self.qk(x)
        k = F.normalize(q, dim=-1)
        h = self.buckets(k)
        keep = (h.unsqueeze(-1) == h.unsqueeze(-2)) if not self.fixed \
            else (h == 0).unsqueeze(-2).expand(-1, x.shape[1], -1)
        e = q @ k.transpose(-1, -2) / math.sqrt(x.shape[-1])
        e = e.masked_fill(~keep, torch.finfo(e.dtype).min)
        return e.softmax(-1) @ self.v(x)


def _lsh_reference(m, x):
    """float64, position by position: the softmax over the keys of the query's bucket."""
    q = m.qk(x)
    k = q / q.norm(dim=-1, keepdim=True)
    h = m.buckets(k)
    out = torch.zeros_like(x)
    for b in range(x.shape[0]):
        for i in range(x.shape[1]):
            js = [j for j in range(x.shape[1]) if h[b, j] == h[b, i]]
            a = torch.stack([q[b, i] @ k[b, j] / math.sqrt(D) for j in js]).softmax(0)
            out[b, i] = sum(w * m.v(x)[b, j] for w, j in zip(a, js))
    return out


def test_lsh_weights_read_as_sparse_with_a_shared_qk_scaled_dot_product():
    """Read as General (the keys, the queries' projection over its norm, taken for no map)
    and Global (the bucket mask taken for padding) before: the spec's row is Scaled
    Multiplicative and Sparse (the registry's `lsh`)."""
    x = _x(B, 7, D, seed=7).double()
    m = LSHAttention().double()
    assert len(set(m.buckets(F.normalize(m.qk(x), dim=-1)).flatten().tolist())) > 1
    assert torch.allclose(m(x), _lsh_reference(m, x), atol=1e-10)
    a = _only(taxcompile.classify(LSHAttention(), (_x(B, 7, D, seed=7),)))
    assert a.values["scoring"][0] == "Scaled Multiplicative", a.values["scoring"][1]
    assert a.values["alignment"][0] == "Sparse", a.values["alignment"][1]
    assert "hash bucket" in a.values["alignment"][1] and "_rot`" in a.values["alignment"][1]
    assert a.names["align"] == "lsh"


def test_one_bucket_kept_for_every_query_is_no_lsh():
    """Near miss: a mask keeping the keys of one fixed bucket compares no query's bucket
    with a key's: not LSH attention (the mask is read as one that leaves keys out)."""
    a = _only(taxcompile.classify(LSHAttention(fixed=True), (_x(B, 7, D, seed=7),)))
    assert a.values["alignment"][0] != "Sparse", a.values["alignment"][1]


def test_keys_normalised_but_not_projected_keep_the_general_score():
    """Near miss of shared QK: q = W x + b against k = x / |x|, the keys no map: Biased General."""

    class RawKeys(LSHAttention):
        def forward(self, x):
            q, k = self.qk(x), F.normalize(x, dim=-1)
            return (q @ k.transpose(-1, -2) / math.sqrt(D)).softmax(-1) @ self.v(x)

    a = _only(taxcompile.classify(RawKeys(), (_x(B, 7, D, seed=7),)))
    assert a.values["scoring"][0] == "Biased General", a.values["scoring"][1]


# --- constant factors that cancel ---

class CancelledScale(nn.Module):
    """q times sqrt(d) before SDPA's default 1/sqrt(d): softmax(q^T k) v, no scaling in all
    (taxcompile's own qk-norm in parts with scale 1 writes it so); ``by``: the near miss, a
    factor that does not cancel."""

    def __init__(self, by=None, d=D):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.by = math.sqrt(d) if by is None else by

    def forward(self, x):
        q = self.q(x).unsqueeze(1) * self.by  # (B, 1, L, D)
        k, v = self.k(x).unsqueeze(1), self.v(x).unsqueeze(1)
        return F.scaled_dot_product_attention(q, k, v).squeeze(1)


def test_constant_factors_that_multiply_to_one_scale_nothing():
    m, x = CancelledScale().double(), _x(B, L, D).double()
    ref = (m.q(x) @ m.k(x).transpose(-1, -2)).softmax(-1) @ m.v(x)
    torch.testing.assert_close(m(x), ref)
    res = taxcompile.classify(m.float().eval(), (_x(B, L, D),))
    assert res.row()["scoring"] == "Multiplicative", res.text()
    assert "multiply to 1" in res.text()


def test_constant_factors_that_do_not_cancel_are_a_scaling():
    res = taxcompile.classify(CancelledScale(by=2.0).eval(), (_x(B, L, D),))
    assert res.row()["scoring"] == "Scaled Multiplicative", res.text()
