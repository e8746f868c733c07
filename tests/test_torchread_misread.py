"""Values the round trip (tests/test_torchread_roundtrip.py) once read wrong from a graph:
each on the compiled model of its spec, on a module written here from the paper's equation,
and on a near miss that must keep another value or stay unrecognised."""
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import taxcompile
from taxcompile import api

ROOT = Path(__file__).parents[1]
D, L = 8, 6


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _compiled(spec, model):
    """The compiled model of ``spec`` (tiny sizes), classified from its graph."""
    mod = api.module(str(ROOT / spec), model)
    cfg = api.config(mod, tiny=True)
    inputs = {k: v for k, v in mod.example_inputs(cfg=cfg).items() if not k.endswith("_mask")}
    return taxcompile.classify(mod.Model(cfg).eval(), inputs)


# --- LightConv applied to sliding windows (Lite Transformer's fast path) ---

class WindowedLightConv(nn.Module):
    """Wu et al. (2019) eq. 2-3: LightConv(X, W, i, c) = sum_j softmax(W_h)_j X_(i+j-P, c),
    each head's kernel normalised over its k taps, applied to the values' windows cut by
    ``unfold`` (as a convolution written as a product)."""

    def __init__(self, heads=2, k=3):
        super().__init__()
        self.heads, self.k = heads, k
        self.weight = nn.Parameter(torch.randn(heads, k))

    def forward(self, x):  # (B, L, D)
        B, n, d = x.shape
        v = x.view(B, n, self.heads, -1).transpose(1, 2)  # (B, H, L, D / H)
        P = (self.k - 1) // 2
        win = F.pad(v, (0, 0, P, self.k - 1 - P)).unfold(2, self.k, 1)  # (B, H, L, D/H, k)
        w = self.weight.softmax(-1)  # (H, k)
        c = torch.einsum("bhldt,ht->bhld", win, w)
        return c.transpose(1, 2).reshape(B, n, d)


def test_lightconv_over_unfolded_windows():
    res = taxcompile.classify(WindowedLightConv(), (_x(2, L, D),))
    (a,) = res.recognised
    assert a.names["score"] == "none" and a.values["alignment"][0] == "Local"
    assert "unfold" in a.values["alignment"][1]
    assert a.values["query_multiplicity"][0] == "Multi-Head"


def test_lite_transformer_reads_both_branches():
    """The LSRA block: multi-head self-attention on one half, LightConv on the other."""
    res = _compiled("examples/wu2020_lite_transformer.attn", "lsra_encoder")
    aligns = [a.values["alignment"][0] for a in res.recognised]
    assert sorted(set(aligns)) == ["Global", "Local"] and len(aligns) == 4
    assert res.row()["alignment"] == "Global + Local"
    assert res.row()["scoring"] == "Scaled Multiplicative"


class WindowAttention(nn.Module):
    """Local self-attention over each query's window of k keys cut by ``unfold``:
    softmax_j(q_i^T x_(i+j-P) / sqrt(d)), the keys outside the window never scored."""

    def __init__(self, k=3):
        super().__init__()
        self.k, self.q = k, nn.Linear(D, D)

    def forward(self, x):
        P = self.k // 2
        win = F.pad(x, (0, 0, P, P)).unfold(1, self.k, 1)  # (B, L, D, k)
        a = (torch.einsum("bld,bldt->blt", self.q(x), win) / D ** 0.5).softmax(-1)
        return torch.einsum("blt,bldt->bld", a, win)


def test_attention_over_unfolded_windows_is_local():
    (a,) = taxcompile.classify(WindowAttention(), (_x(2, L, D),)).recognised
    assert a.values["alignment"][0] == "Local" and "unfold" in a.values["alignment"][1]


def test_a_softmax_over_a_parameter_mixing_channels_is_no_lightconv():
    """softmax(W) mixing k channels of each position (no windows of the sequence): no
    attention over positions, so none is reported."""
    class Mix(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(2, 3))

        def forward(self, x):  # (B, L, 3)
            return x @ self.weight.softmax(-1).t()

    res = taxcompile.classify(Mix(), (_x(2, L, 3),))
    assert res.recognised == [] and res.row() == {}


# --- persistent memory: learned key/value slots concatenated to the keys and values ---

class PersistentMemory(nn.Module):
    """Sukhbaatar et al. (2019) eq. 5-6: K = [W_k x; M_k], V = [W_v x; M_v], then
    softmax(q^T K / sqrt(d)) V with q = W_q x; M_k, M_v learned vectors. ``project_keys``
    False is the near miss: the keys are the input itself, a learned map on the query side
    alone (q^T W k, General)."""

    def __init__(self, slots=4, project_keys=True):
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(D, D, bias=False) for _ in range(3))
        self.mk, self.mv = nn.Parameter(torch.randn(slots, D)), nn.Parameter(torch.randn(slots, D))
        self.project_keys = project_keys

    def forward(self, x):
        B = x.shape[0]
        k = self.k(x) if self.project_keys else x
        k = torch.cat([k, self.mk.expand(B, -1, -1)], 1)
        v = torch.cat([self.v(x), self.mv.expand(B, -1, -1)], 1)
        return (self.q(x) @ k.transpose(1, 2) / D ** 0.5).softmax(-1) @ v


def test_persistent_memory_is_scaled_multiplicative():
    (a,) = taxcompile.classify(PersistentMemory(), (_x(2, L, D),)).recognised
    assert a.values["scoring"][0] == "Scaled Multiplicative"
    assert "persistent memory" in a.values["scoring"][1]


def test_memory_on_unprojected_keys_stays_general():
    (a,) = taxcompile.classify(PersistentMemory(project_keys=False), (_x(2, L, D),)).recognised
    assert a.values["scoring"][0] == "General"


def test_persistent_memory_compiled():
    res = _compiled("examples/sukhbaatar2019_persistent_memory.attn",
                    "sukhbaatar2019_persistent_memory")
    assert res.row()["scoring"] == "Scaled Multiplicative"
    assert all("persistent memory" in a.values["scoring"][1] for a in res.recognised)


def test_x_transformers_memory_key_values():
    pytest.importorskip("x_transformers")
    sys.path.insert(0, str(ROOT / "tests"))
    import torchread_models as tm

    res = taxcompile.classify(*tm.xt_mem_kv())
    (a,) = res.recognised
    assert res.row()["scoring"] == "Scaled Multiplicative"
    assert "persistent memory" in a.values["scoring"][1]


# --- cosine similarity with a learned temperature ---

class CosineTemperature(nn.Module):
    """Graves et al. (2014) eq. 5-6 with a learned key strength: softmax_j(beta K(q, x_j)),
    K the cosine similarity, beta = exp(log_beta) a learned scalar. ``per_feature`` is the
    near miss: a learned vector w scales each feature of the normalised query, q^T diag(w) k,
    a learned map and no similarity."""

    def __init__(self, per_feature=False):
        super().__init__()
        self.log_beta = nn.Parameter(torch.zeros(D if per_feature else ()))

    def forward(self, y, x):
        q = y / y.norm(dim=-1, keepdim=True) * self.log_beta.exp()
        k = x / x.norm(dim=-1, keepdim=True)
        return (q @ k.transpose(1, 2)).softmax(-1) @ x


def test_cosine_with_a_learned_temperature_is_similarity():
    (a,) = taxcompile.classify(CosineTemperature(), (_x(2, 3, D), _x(2, L, D, seed=1))).recognised
    assert a.values["scoring"][0] == "Similarity" and "temperature" in a.values["scoring"][1]


def test_cosine_with_a_learned_vector_per_feature_is_no_similarity():
    """Nor Multiplicative: the score is refused rather than given a wrong value."""
    res = taxcompile.classify(CosineTemperature(per_feature=True),
                              (_x(2, 3, D), _x(2, L, D, seed=1)))
    assert res.recognised == [] and res.row() == {}
    assert "attention not recognised" in res.text()


def test_cosine_temperature_compiled():
    res = _compiled("examples/cosine_temperature.attn", "cosine_temperature")
    assert [a.values["scoring"][0] for a in res.recognised] == ["Similarity"] * 2
    assert "temperature" in res.recognised[0].values["scoring"][1]


# --- routing by agreement: coupling coefficients are no attention ---

class HeadRouting(nn.Module):
    """Li et al. (2019) eq. 6-10 (Sabour et al.'s dynamic routing) after a two-head
    self-attention: votes u_hn = W_hn c_h; b_hn = 0; each iteration C = softmax_n(b),
    s_n = sum_h C_hn u_hn, o_n = squash(s_n), b_hn += u_hn^T o_n."""

    def __init__(self, heads=2, caps=2, iters=3):
        super().__init__()
        self.heads, self.iters = heads, iters
        self.q, self.k, self.v = (nn.Linear(D, D) for _ in range(3))
        self.votes = nn.Parameter(torch.randn(heads, caps, D // heads, D // caps))

    def forward(self, x):
        B, n, _ = x.shape
        q, k, v = (f(x).view(B, n, self.heads, -1).transpose(1, 2)
                   for f in (self.q, self.k, self.v))
        c = (q @ k.transpose(-1, -2) / (D // self.heads) ** 0.5).softmax(-1) @ v  # (B, H, n, d)
        u = torch.einsum("bhld,hcde->blhce", c, self.votes)
        b = torch.zeros(u.shape[:-1])
        for i in range(self.iters):
            s = torch.einsum("blhc,blhce->blce", b.softmax(-1), u)
            norm = s.norm(dim=-1, keepdim=True)
            o = s * (norm / (1 + norm ** 2))
            b = b + torch.einsum("blhce,blce->blhc", u, o)
        return o.reshape(B, n, -1)


def test_routing_by_agreement_is_refused_as_attention():
    res = taxcompile.classify(HeadRouting(), (_x(2, L, D),))
    (a,) = res.recognised
    assert a.values["scoring"][0] == "Scaled Multiplicative"
    refused = [x for x in res.attentions if not x.recognised]
    assert len(refused) == 3 and all("routing by agreement" in x.why_not for x in refused)
    assert res.row()["scoring"] == "Scaled Multiplicative"


class ResidualScores(nn.Module):
    """The near miss, RealFormer (He et al. 2021): each layer's scores add the previous
    layer's, S_l = S_(l-1) + Q_l K_l^T / sqrt(d); the new term reads the previous weights
    through learned maps, so both softmaxes are attentions."""

    def __init__(self):
        super().__init__()
        self.maps = nn.ModuleList(nn.Linear(D, D) for _ in range(6))

    def forward(self, x):
        prev = 0
        for q, k in (self.maps[:2], self.maps[2:4]):
            prev = prev + q(x) @ k(x).transpose(1, 2) / D ** 0.5
            x = x + prev.softmax(-1) @ x
        return x


def test_residual_scores_are_no_routing():
    res = taxcompile.classify(ResidualScores(), (_x(2, L, D),))
    assert not any("routing" in a.why_not for a in res.attentions)
    assert res.recognised and res.recognised[0].values["scoring"][0] == "Scaled Multiplicative"


def test_routing_compiled():
    res = _compiled("examples/li2019_routing.attn", "encoder")
    assert res.row()["scoring"] == "Scaled Multiplicative"
    assert len(res.recognised) == 2  # one self-attention per layer; routing refused


# --- a query that picks its keys: the index of a gather is no data of the keys ---

class LocalP(nn.Module):
    """Luong et al. (2015) eq. 28-29 reading only the window's keys: p_t = S sigmoid(v_p^T
    tanh(W_p h_t)), the keys l = round(p_t) - w ... round(p_t) + w gathered from the source,
    a_t(l) = softmax(h_t^T h_l) exp(-(l - p_t)^2 / 2 sigma^2). The query h_t comes from the
    target, the keys from the source: Basic, though the gather's index reads the query."""

    def __init__(self, w=1):
        super().__init__()
        self.w, self.W_p, self.v_p = w, nn.Linear(D, D), nn.Linear(D, 1)

    def forward(self, y, x):  # y: (B, T, D) target states, x: (B, S, D) source states
        B, T, _ = y.shape
        S = x.shape[1]
        p = S * torch.sigmoid(self.v_p(torch.tanh(self.W_p(y)))).squeeze(-1)  # (B, T)
        offs = torch.arange(-self.w, self.w + 1)
        pos = (p.round().long().unsqueeze(-1) + offs).clamp(0, S - 1)  # (B, T, 2w + 1)
        kg = x.gather(1, pos.view(B, -1, 1).expand(-1, -1, D)).view(B, T, -1, D)
        a = torch.einsum("btd,btjd->btj", y, kg).softmax(-1)
        a = a * torch.exp(-(pos - p.unsqueeze(-1)) ** 2 / (2 * (self.w / 2) ** 2))
        return torch.einsum("btj,btjd->btd", a, kg)


def test_keys_gathered_by_the_query_position_are_still_the_source():
    (a,) = taxcompile.classify(LocalP(), (_x(2, 3, D), _x(2, L, D, seed=1))).recognised
    assert a.values["query_type"][0] == "Basic"
    assert "args_0" in a.values["query_type"][1]


class TableLookup(nn.Module):
    """The near miss: rows of a learned table picked by token ids (W[ids]): there the index
    is the data. Query from the target's ids, keys from the source's: Basic, reading tgt."""

    def __init__(self):
        super().__init__()
        self.Eq, self.Ek = nn.Parameter(torch.randn(20, D)), nn.Parameter(torch.randn(20, D))

    def forward(self, tgt, src):
        q, k = self.Eq[tgt], self.Ek[src]
        return (q @ k.transpose(1, 2)).softmax(-1) @ k


def test_rows_of_a_learned_table_read_their_index():
    ids = torch.randint(0, 20, (2, 3), generator=torch.Generator().manual_seed(0))
    src = torch.randint(0, 20, (2, L), generator=torch.Generator().manual_seed(1))
    (a,) = taxcompile.classify(TableLookup(), (ids, src)).recognised
    assert a.values["query_type"][0] == "Basic"
    assert "args_0" in a.values["query_type"][1]


def test_local_p_compiled():
    res = _compiled("specs/luong2015.attn", "local_p")
    assert res.row()["query_type"] == "Basic"
    assert all("reads tgt" in a.values["query_type"][1] for a in res.recognised)


# --- multi-dimensional weights: the last axis holds features, not keys ---

class Token2Token(nn.Module):
    """Shen et al. (2018) eq. 31-32 (multi-dimensional token2token, no head axis):
    f(x_i, x_j) = W^T tanh(W1 x_i + W2 x_j + b) per feature, softmax over j for each
    feature, s_i = sum_j P_ij * x_j. ``heads`` > 1 is the near miss: the same per head
    (weights (B, H, L, L, D / H)), which is Multi-Head."""

    def __init__(self, heads=1):
        super().__init__()
        self.h = heads
        self.W1, self.W2, self.W = nn.Linear(D, D), nn.Linear(D, D, bias=False), nn.Linear(D, D)

    def forward(self, x):
        B, n, _ = x.shape
        f = self.W(torch.tanh(self.W1(x)[:, :, None] + self.W2(x)[:, None]))  # (B, L, L, D)
        if self.h == 1:
            return (f.softmax(2) * x[:, None]).sum(2)
        f = f.view(B, n, n, self.h, -1).permute(0, 3, 1, 2, 4)  # (B, H, L, L, D / H)
        v = x.view(B, n, self.h, -1).transpose(1, 2)[:, :, None]  # (B, H, 1, L, D / H)
        return (f.softmax(3) * v).sum(3)


@pytest.mark.parametrize("heads, want", [(1, "Singular"), (2, "Multi-Head")])
def test_per_feature_weights_are_no_heads(heads, want):
    (a,) = taxcompile.classify(Token2Token(heads), (_x(2, L, D),)).recognised
    assert a.values["dimensionality"][0] == "Multi-Dimensional"
    assert a.values["query_multiplicity"][0] == want
    assert "a weight per feature" in a.values["query_multiplicity"][1]


class Source2Token(nn.Module):
    """Shen et al. (2018) eq. 33 over a concatenation of two features of each token, u =
    [u_fw; u_bw]: f(u_i) = W^T elu(W1 u_i + b1) + b, no query. ``paired`` is the near miss:
    Bahdanau's w^T tanh(W [q_t; k_j]) over pairs (the query broadcast over the keys)."""

    def __init__(self, paired=False):
        super().__init__()
        self.paired = paired
        self.W1, self.W = nn.Linear(2 * D, D), nn.Linear(D, D)

    def forward(self, a, b):
        if self.paired:  # a: (B, T, D) queries, b: (B, L, D) keys
            T, n = a.shape[1], b.shape[1]
            u = torch.cat([a[:, :, None].expand(-1, -1, n, -1),
                           b[:, None].expand(-1, T, -1, -1)], -1)  # (B, T, L, 2D)
            e = self.W(torch.tanh(self.W1(u)))[..., :1]  # (B, T, L, 1)
            return e.squeeze(-1).softmax(-1) @ b
        u = torch.cat([a, b], -1)  # (B, L, 2D)
        p = self.W(F.elu(self.W1(u))).softmax(1)  # (B, L, D)
        return (p * a).sum(1)


def test_a_concatenation_of_features_is_no_query():
    (a,) = taxcompile.classify(Source2Token(), (_x(2, L, D), _x(2, L, D, seed=1))).recognised
    assert a.values["query_type"] == ("Self-Attentive", "there is no query: the keys are "
                                      "scored alone (eq. 33)")
    assert a.values["query_multiplicity"][0] == "Singular"


def test_a_concatenation_of_pairs_keeps_its_query():
    (a,) = taxcompile.classify(Source2Token(paired=True),
                               (_x(2, 3, D), _x(2, L, D, seed=1))).recognised
    assert a.names["score"] == "concat" and a.values["query_type"][0] == "Basic"


def test_disan_compiled():
    row = _compiled("specs/shen2018.attn", "disan").row()
    assert (row["query_multiplicity"], row["query_type"]) == ("Singular", "Self-Attentive")
