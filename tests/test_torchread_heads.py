"""Query multiplicity read from code (taxcompile/torchread/heads.py) where the weights' shape
alone misleads: differential attention (Ye et al. 2024), written as its authors do, one
softmax over 2H maps whose pairs are subtracted before they weigh the values. Each module
is first checked against a float64 reference of the paper's equation, head by head."""
import math

import pytest
import torch
from torch import nn

import taxcompile

L = 5


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class DiffAttn(nn.Module):
    """Ye et al. 2024, eq. 1-2, as multihead_diffattn.py lays it out: q and k in 2H maps of
    width d, one softmax over all of them, each head's pair (2h, 2h + 1) subtracted,
    A = softmax(Q1 K1^T / sqrt d) - lambda softmax(Q2 K2^T / sqrt d), times V (width 2d)."""

    def __init__(self, d_model=32, heads=4, lambda_init=0.8, second=None):
        super().__init__()
        self.h, self.dh = heads, d_model // heads // 2
        self.q = nn.Linear(d_model, d_model, bias=False)
        self.k = nn.Linear(d_model, d_model, bias=False)
        self.v = nn.Linear(d_model, d_model, bias=False)
        self.lq1, self.lk1, self.lq2, self.lk2 = (
            nn.Parameter(_x(self.dh, seed=s) * 0.1) for s in range(4))
        self.lambda_init = lambda_init
        self.second = second or (lambda a: a[:, :, 1])  # each head's second map

    def lam(self):
        return (torch.exp((self.lq1 * self.lk1).sum()) - torch.exp((self.lq2 * self.lk2).sum())
                + self.lambda_init)

    def forward(self, x):
        B, n, _ = x.shape
        q = self.q(x).view(B, n, 2 * self.h, self.dh).transpose(1, 2)  # (B, 2H, L, d)
        k = self.k(x).view(B, n, 2 * self.h, self.dh).transpose(1, 2)
        v = self.v(x).view(B, n, self.h, 2 * self.dh).transpose(1, 2)  # (B, H, L, 2d)
        a = (q @ k.transpose(-1, -2) / math.sqrt(self.dh)).softmax(-1)  # (B, 2H, L, L)
        a = a.view(B, self.h, 2, n, n)
        a = a[:, :, 0] - self.lam() * self.second(a)  # (B, H, L, L)
        return (a @ v).transpose(1, 2).reshape(B, n, -1)


def reference(m, x):
    """Eq. 1-2 head by head in float64: [Q1; Q2] and [K1; K2] are the halves of head h's
    slice of width 2d, V its value slice."""
    x = x.double()
    q, k, v = (lin.weight.double() @ x.transpose(1, 2) for lin in (m.q, m.k, m.v))
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    lam = m.lam().double()
    d, out = m.dh, []
    for h in range(m.h):
        s = slice(2 * d * h, 2 * d * (h + 1))
        (q1, q2), (k1, k2) = q[..., s].split(d, -1), k[..., s].split(d, -1)
        a1 = torch.softmax(q1 @ k1.transpose(1, 2) / math.sqrt(d), -1)
        a2 = torch.softmax(q2 @ k2.transpose(1, 2) / math.sqrt(d), -1)
        out.append((a1 - lam * a2) @ v[..., s])
    return torch.cat(out, -1)


@pytest.mark.parametrize("heads, label", [(4, "Multi-Head"), (1, "Singular")])
def test_differential_attention_counts_its_heads_not_its_maps(heads, label):
    m, x = DiffAttn(heads=heads).eval(), _x(2, L, 32, seed=5)
    with torch.no_grad():
        torch.testing.assert_close(m.double()(x.double()), reference(m, x))
    res = taxcompile.classify(m.float(), (x,))
    (a,) = res.recognised
    got, why = a.values["query_multiplicity"]
    assert got == label == res.row()["query_multiplicity"], why
    assert f"{2 * heads} maps" in why and f"{heads} head{'s' if heads > 1 else ''} of 2" in why
    # the difference of one softmax's maps names the record that emits it
    assert a.names == {"score": "scaled_multiplicative", "align": "global",
                       "trait": "differential"}


def test_an_unreadable_difference_of_maps_is_refused_not_counted():
    """The second operand averages the head's two maps: which maps pair up is not read from
    the graph, so the attention is not recognised rather than given a head count."""
    m = DiffAttn(heads=2, second=lambda a: a.mean(2)).eval()
    res = taxcompile.classify(m, (_x(2, L, 32),))
    (a,) = res.attentions
    assert not a.recognised and res.row() == {}
    assert "differential attention" in a.why_not and "would be a guess" in a.why_not
    assert "attention not recognised" in res.text()


def test_the_generated_differential_lm_reads_4_heads_not_8():
    """examples/ye2024_differential.attn (heads = 4) compiled, captured and read back."""
    from pathlib import Path

    from taxcompile import api

    spec = str(Path(__file__).parents[1] / "examples" / "ye2024_differential.attn")
    mod = api.module(spec, "diff_lm")
    cfg = api.config(mod, tiny=True)
    inputs = {k: v for k, v in mod.example_inputs(cfg=cfg).items() if not k.endswith("_mask")}
    res = taxcompile.classify(mod.Model(cfg).eval(), inputs)
    assert res.recognised
    for a in res.recognised:
        why = a.values["query_multiplicity"][1]
        assert "8 maps" in why and "4 heads of 2" in why, why
