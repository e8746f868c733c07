"""Talking heads read from code (taxcompile/torchread/talking.py): a learned H x H map mixing
the heads' scores before the softmax and their weights after it (Shazeer et al. 2020, eq.
in sec. 4), in a module written here from the paper, in the compiled example and in
x-transformers (tests/test_torchread.py); near misses whose learned map mixes the keys, not
the heads, are not read as talking heads. Each module is first checked against a float64
reference of the paper's equations, head by head."""
import math

import pytest
import torch
from torch import nn

import taxcompile
from taxcompile import api

H, L, D = 4, 4, 16  # as many keys as heads: only the axis tells a head mix from a key mix


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class TalkingHeads(nn.Module):
    """e_h = q_h k_h^T / sqrt(d); e'_h = sum_g P_hg e_g; a = softmax(e'); a'_h = sum_g Q_hg a_g;
    c_h = a'_h v_h. ``over`` = "keys" mixes the keys' axis with an L x L map instead (no head
    mix); ``pre``/``post`` leave out one of the mixes."""

    def __init__(self, over="heads", pre=True, post=True):
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(D, D, bias=False) for _ in range(3))
        self.P = nn.Parameter(torch.eye(H) + 0.1 * _x(H, H, seed=1))
        self.Q = nn.Parameter(torch.eye(H) + 0.1 * _x(H, H, seed=2))
        self.over, self.pre, self.post = over, pre, post

    def _mix(self, m, x):
        if self.over == "heads":
            return torch.einsum("hg,nglk->nhlk", m, x)
        return torch.einsum("nhlk,km->nhlm", x, m)  # a learned map over the keys

    def forward(self, x):
        B, n, _ = x.shape
        q, k, v = (f(x).view(B, n, H, D // H).transpose(1, 2) for f in (self.q, self.k, self.v))
        e = q @ k.transpose(-1, -2) / math.sqrt(D // H)
        a = (self._mix(self.P, e) if self.pre else e).softmax(-1)
        a = self._mix(self.Q, a) if self.post else a
        return (a @ v).transpose(1, 2).reshape(B, n, D)


def reference(m, x):
    """The paper's equations in float64, one head and one query at a time."""
    x = x.double()
    q, k, v = (x @ f.weight.double().T for f in (m.q, m.k, m.v))
    d = D // H
    P, Q = m.P.double(), m.Q.double()
    out = torch.zeros(x.shape[0], x.shape[1], D, dtype=torch.float64)
    for b in range(x.shape[0]):
        e = torch.stack([q[b, :, h * d:(h + 1) * d] @ k[b, :, h * d:(h + 1) * d].T / math.sqrt(d)
                         for h in range(H)])
        e = torch.stack([sum(P[h, g] * e[g] for g in range(H)) for h in range(H)])
        a = torch.softmax(e, -1)
        a = torch.stack([sum(Q[h, g] * a[g] for g in range(H)) for h in range(H)])
        for h in range(H):
            out[b, :, h * d:(h + 1) * d] = a[h] @ v[b, :, h * d:(h + 1) * d]
    return out


def test_module_is_the_papers_equations():
    m, x = TalkingHeads(), _x(2, L, D)
    assert torch.allclose(m(x).double(), reference(m, x), atol=1e-5)


def test_talking_heads_are_read_with_both_mixes_named():
    res = taxcompile.classify(TalkingHeads(), (_x(2, L, D),))
    row = res.row()
    assert (row["scoring"], row["alignment"], row["query_multiplicity"]) == (
        "Scaled Multiplicative", "Global", "Multi-Head")
    why = res.recognised[0].values["query_multiplicity"][1]
    assert "heads' scores before" in why and "heads' weights after" in why
    assert "talking heads" in why and "4 x 4 map" in why


@pytest.mark.parametrize("pre, post, says", [(True, False, "scores before the alignment"),
                                             (False, True, "weights after it")])
def test_one_mix_alone_is_named_alone(pre, post, says):
    res = taxcompile.classify(TalkingHeads(pre=pre, post=post), (_x(2, L, D),))
    why = res.recognised[0].values["query_multiplicity"][1]
    assert res.row()["query_multiplicity"] == "Multi-Head"
    assert f"mix the heads' {says} with" in why


def test_a_map_over_the_keys_is_no_head_mix():
    """The same shapes (H = L), the learned maps over the keys' axis: no talking heads."""
    res = taxcompile.classify(TalkingHeads(over="keys", post=False), (_x(2, L, D),))
    assert "talking heads" not in res.text() and "mixes the" not in res.text()
    res = taxcompile.classify(TalkingHeads(over="keys", pre=False), (_x(2, L, D),))
    assert "talking heads" not in res.text()


class MixedNotApplied(nn.Module):
    """Softmax weights of H heads mixed by a learned H x H map, then summed, weighing nothing."""

    def __init__(self):
        super().__init__()
        self.Q = nn.Parameter(torch.eye(H))

    def forward(self, e):
        return torch.einsum("hg,nglk->nhlk", self.Q, e.softmax(-1)).sum((-1, -2))


def test_mixed_weights_that_weigh_no_values_are_no_attention():
    res = taxcompile.classify(MixedNotApplied(), (_x(2, H, L, L),))
    assert res.attentions == []


def test_compiled_talking_heads_round_trip():
    spec = "examples/shazeer2020_talking_heads.attn"
    mod = api.module(spec, "shazeer2020_talking_heads")
    cfg = api.config(mod, tiny=True)
    inputs = {k: v for k, v in mod.example_inputs(cfg=cfg).items() if not k.endswith("_mask")}
    res = api.classify(mod.Model(cfg).eval(), inputs)
    want = api.classify(spec, "shazeer2020_talking_heads").row()
    got = res.row()
    for d in ("scoring", "alignment", "dimensionality", "query_type", "query_multiplicity"):
        assert got[d] == want[d], d
    why = res.recognised[0].values["query_multiplicity"][1]
    assert "talk_scores" in why and "talk_weights" in why  # the learned maps, by node
