"""Scores and alignments of Luong et al. (2015) read from code (taxcompile/torchread/
scores.py, alignments.py): the location score, e = W_a h_t, one learned output per source
position and no key in the score, written by hand and checked against a float64 reference
of the paper's equation before it is read; the near misses that must not read as it."""
from pathlib import Path

import pytest
import torch
from torch import nn

import taxcompile

D, T, L = 8, 3, 5
ROOT = Path(__file__).parents[1]


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class LuongLocation(nn.Module):
    """a_t = softmax(W_a h_t) (Luong et al. 2015, §3.1), c_t = sum_s a_t(s) h_s."""

    def __init__(self, query_act=None):
        super().__init__()
        self.W_a = nn.Linear(D, L)
        self.proj = nn.Linear(D, D)
        self.query_act = query_act

    def forward(self, h, hs):  # h: (B, T, D) decoder states, hs: (B, L, D) source states
        q = self.query_act(self.proj(h)) if self.query_act else h
        return self.W_a(q).softmax(-1) @ hs


def reference(m, h, hs):
    h, hs = h.double(), hs.double()
    q = m.query_act(h @ m.proj.weight.double().T + m.proj.bias.double()) if m.query_act else h
    a = torch.softmax(q @ m.W_a.weight.double().T + m.W_a.bias.double(), -1)
    return a @ hs


@pytest.mark.parametrize("act", [None, torch.tanh], ids=["h_t", "tanh(W h_t)"])
def test_luong_location_score(act):
    m, h, hs = LuongLocation(act).eval(), _x(2, T, D), _x(2, L, D, seed=1)
    with torch.no_grad():
        torch.testing.assert_close(m.double()(h.double(), hs.double()), reference(m, h, hs))
    res = taxcompile.classify(m.float(), (h, hs))
    (a,) = res.recognised
    assert a.names == {"score": "location", "align": "global"}
    row = res.row()
    assert (row["scoring"], row["alignment"], row["query_type"]) == ("Location", "Global", "Basic")
    why = a.values["scoring"][1]
    assert "w_a_weight" in why and f"{L} keys" in why and "no key" in why
    assert all(n in why for n in (a.norm,)) and a.nodes[1] in why


class HeadsLocation(nn.Module):
    """e^(j) = W_a^(j) q^(j) + b^(j), each of H heads its own location score (einsum)."""

    def __init__(self, heads=2):
        super().__init__()
        self.h = heads
        self.W = nn.Parameter(_x(heads, D // heads, L, seed=4))
        self.b = nn.Parameter(_x(heads, L, seed=5))

    def forward(self, h, hs):
        B, H = h.shape[0], self.h
        q = h.view(B, -1, H, D // H).transpose(1, 2)  # (B, H, T, D / H)
        v = hs.view(B, -1, H, D // H).transpose(1, 2)  # (B, H, L, D / H)
        e = torch.einsum("nhqd,hdk->nhqk", q, self.W) + self.b[:, None, :]
        return e.softmax(-1) @ v  # (B, H, T, D / H)


def test_a_location_score_per_head():
    m, h, hs = HeadsLocation().eval(), _x(2, T, D), _x(2, L, D, seed=1)
    d = D // 2
    want = torch.stack([torch.softmax(h.double()[..., j * d:(j + 1) * d] @ m.W[j].double()
                                      + m.b[j].double(), -1) @ hs.double()[..., j * d:(j + 1) * d]
                        for j in range(2)], 1)
    with torch.no_grad():
        torch.testing.assert_close(m.double()(h.double(), hs.double()), want)
    res = taxcompile.classify(m.float(), (h, hs))
    (a,) = res.recognised
    assert a.names == {"score": "location", "align": "global"}
    assert res.row()["query_multiplicity"] == "Multi-Head"
    assert "2 heads" in a.values["query_multiplicity"][1]


def test_an_additive_score_over_the_keys_alone_is_not_location():
    """w^T tanh(W h_s): one output per key from the key itself, the key axis from the input."""
    class KeysAlone(nn.Module):
        def __init__(self):
            super().__init__()
            self.W, self.w = nn.Linear(D, D), nn.Linear(D, 1, bias=False)

        def forward(self, hs):
            a = self.w(torch.tanh(self.W(hs))).squeeze(-1).softmax(-1)  # (B, L)
            return (a.unsqueeze(-1) * hs).sum(1)

    res = taxcompile.classify(KeysAlone(), (_x(2, L, D),))
    (a,) = res.recognised
    assert a.names["score"] == "additive"


def test_a_learned_query_matrix_over_the_keys_is_not_location():
    """Lin et al.'s A = softmax(W_s2 tanh(W_s1 H^T)) with as many hops as keys: the weight is
    the left operand, the keys' axis comes from H."""
    class Lin(nn.Module):
        def __init__(self):
            super().__init__()
            self.W1 = nn.Parameter(_x(D, D, seed=2))
            self.W2 = nn.Parameter(_x(L, D, seed=3))

        def forward(self, hs):
            return (self.W2 @ torch.tanh(self.W1 @ hs.transpose(1, 2))).softmax(-1) @ hs

    res = taxcompile.classify(Lin(), (_x(2, L, D),))
    assert all(a.names.get("score") != "location" for a in res.attentions), res.text()


def test_the_generated_global_location_reads_location():
    """specs/luong2015.attn's global_location compiled, captured and read back: the row its
    spec gives."""
    from taxcompile import api

    spec = str(ROOT / "specs" / "luong2015.attn")
    mod = api.module(spec, "global_location")
    cfg = api.config(mod, tiny=True)
    inputs = {k: v for k, v in mod.example_inputs(cfg=cfg).items() if not k.endswith("_mask")}
    got = taxcompile.classify(mod.Model(cfg).eval(), inputs).row()
    want = api.classify(spec, "global_location").row()
    read = ("scoring", "alignment", "dimensionality", "query_type")
    assert {d: got[d] for d in read} == {d: want[d] for d in read}
    assert got["scoring"] == "Location"


class LuongLocalP(nn.Module):
    """Luong et al.'s local-p: p_t = S sigmoid(v_p^T tanh(W_p h_t)) (eq. 9), a general score
    h_t^T W_a h_s, a softmax over [p_t - D, p_t + D] (or every key, ``window=False``), times
    exp(-(s - p_t)^2 / 2 sigma^2) with sigma = D / 2 (eq. 10)."""

    def __init__(self, window=True, half=2, centre=None):
        super().__init__()
        self.W_p = nn.Linear(D, D, bias=False)
        self.v_p = nn.Linear(D, 1, bias=False)
        self.W_a = nn.Linear(D, D, bias=False)
        self.window, self.half = window, half
        self.centre = centre

    def forward(self, h, hs):
        S = hs.shape[1]
        p = S * torch.sigmoid(self.v_p(torch.tanh(self.W_p(h))))  # (B, T, 1)
        if self.centre is not None:
            p = self.centre(h)
        s = torch.arange(S, dtype=h.dtype)  # (S,): source positions
        e = h @ self.W_a(hs).transpose(1, 2)  # (B, T, S)
        if self.window:
            e = e.masked_fill((s - p).abs() > self.half, float("-inf"))
        a = e.softmax(-1) * torch.exp(-(s - p) ** 2 / (2 * (self.half / 2) ** 2))
        return a @ hs


def local_p_reference(m, h, hs):
    """Eq. 9-10 position by position in float64."""
    h, hs = h.double(), hs.double()
    Wp, vp, Wa = (lin.weight.double() for lin in (m.W_p, m.v_p, m.W_a))
    B, T, _ = h.shape
    S = hs.shape[1]
    out = torch.zeros(B, T, D, dtype=torch.float64)
    for b in range(B):
        for t in range(T):
            p = S * torch.sigmoid(vp @ torch.tanh(Wp @ h[b, t]))[0]
            inside = [s for s in range(S) if not m.window or abs(s - p) <= m.half]
            e = torch.stack([h[b, t] @ (Wa @ hs[b, s]) for s in inside])
            a = torch.softmax(e, 0)
            for w, s in zip(a, inside):
                g = torch.exp(-(s - p) ** 2 / (2 * (m.half / 2) ** 2))
                out[b, t] += w * g * hs[b, s]
    return out


@pytest.mark.parametrize("window", [True, False], ids=["window", "gaussian-only"])
def test_luong_local_p(window):
    m, h, hs = LuongLocalP(window).eval(), _x(2, T, D), _x(2, L, D, seed=1)
    with torch.no_grad():
        torch.testing.assert_close(m.double()(h.double(), hs.double()), local_p_reference(m, h, hs))
    res = taxcompile.classify(m.float(), (h, hs))
    (a,) = res.recognised
    assert a.names == {"score": "general", "align": "local"}
    assert res.row()["alignment"] == "Local"
    why = a.values["alignment"][1]
    assert "Gaussian" in why and "predicted from the query" in why
    assert ("banded mask" in why) == window


def test_a_gaussian_at_a_fixed_centre_is_no_predicted_centre():
    """The centre is a constant: still a window over positions, but not predicted."""
    m = LuongLocalP(window=False, centre=lambda h: torch.full((h.shape[0], T, 1), 2.0))
    res = taxcompile.classify(m.eval(), (_x(2, T, D), _x(2, L, D, seed=1)))
    (a,) = res.recognised
    assert a.names["align"] == "local"
    assert "predicted" not in a.values["alignment"][1]


def test_weights_times_a_learned_gate_stay_global():
    """A per-key gate that is no Gaussian of positions leaves the alignment global."""
    class Gated(nn.Module):
        def __init__(self):
            super().__init__()
            self.g = nn.Parameter(_x(L, seed=6))

        def forward(self, h, hs):
            return ((h @ hs.transpose(1, 2)).softmax(-1) * torch.exp(self.g)) @ hs

    res = taxcompile.classify(Gated(), (_x(2, T, D), _x(2, L, D, seed=1)))
    (a,) = res.recognised
    assert a.names["align"] == "global"
