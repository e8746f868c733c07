"""Recognisers of alignments that are no plain softmax over scores (taxcompile/torchread/
alignments.py): each on a PyTorch module written here, with its expected row, and a near miss
that must not match."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import taxcompile

D, L = 8, 5


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def sparsemax(z):
    """Martins & Astudillo (2016), eq. 2-3: sort, threshold from the cumulative sum, clamp."""
    zs, _ = z.sort(-1, descending=True)
    k = torch.arange(1, z.shape[-1] + 1, dtype=z.dtype)
    cs = zs.cumsum(-1)
    support = (1 + k * zs > cs).sum(-1, keepdim=True)
    tau = (cs.gather(-1, support - 1) - 1) / support.to(z.dtype)
    return torch.clamp(z - tau, min=0)


class Cross(nn.Module):
    """Queries from y over keys and values x, the weights made by ``align`` from q k^T."""

    def __init__(self, align):
        super().__init__()
        self.align = align

    def forward(self, y, x):
        return self.align(y @ x.transpose(1, 2)) @ x


def _one(model, *inputs):
    res = taxcompile.classify(model, inputs)
    assert len(res.recognised) == 1, res.text()
    return res.recognised[0], res.row()


def test_sparsemax_written_by_hand():
    a, row = _one(Cross(sparsemax), _x(2, 3, D), _x(2, L, D, seed=1))
    assert a.names == {"score": "multiplicative", "align": "sparsemax"}
    assert (row["scoring"], row["alignment"], row["query_type"]) == (
        "Multiplicative", "Sparse", "Basic")
    assert "threshold" in a.values["alignment"][1]


@pytest.mark.parametrize("fn, name", [("sparsemax", "sparsemax"), ("entmax15", "entmax")])
def test_the_entmax_package(fn, name):
    entmax = pytest.importorskip("entmax", reason="the `entmax` package is not installed")
    f = getattr(entmax, fn)
    a, row = _one(Cross(lambda e: f(e, dim=-1)), _x(2, 3, D), _x(2, L, D, seed=1))
    assert a.names["align"] == name and row["alignment"] == "Sparse"


def test_a_clamp_without_sort_is_no_sparsemax():
    """relu(z - mean z) also zeroes keys, but no sort and cumulative sum sets its threshold."""
    res = taxcompile.classify(Cross(lambda e: F.relu(e - e.mean(-1, keepdim=True))),
                              (_x(2, 3, D), _x(2, L, D, seed=1)))
    assert res.attentions == [] and res.row() == {}


class Hard(nn.Module):
    """Xu et al.'s hard attention at test time: the most probable key's value alone."""

    def __init__(self, one_hot=True):
        super().__init__()
        self.w = nn.Linear(D, D, bias=False)
        self.one_hot = one_hot

    def forward(self, y, x):
        p = (self.w(y) @ x.transpose(1, 2)).softmax(-1)  # (B, T, L)
        m = p.argmax(-1)  # (B, T)
        if self.one_hot:
            return F.one_hot(m, x.shape[1]).to(x.dtype) @ x
        return x.gather(1, m.unsqueeze(-1).expand(-1, -1, D))


@pytest.mark.parametrize("one_hot", [True, False])
def test_hard_argmax(one_hot):
    a, row = _one(Hard(one_hot), _x(2, 3, D), _x(2, L, D, seed=1))
    assert a.names == {"score": "general", "align": "hard"}
    assert (row["scoring"], row["alignment"], row["query_type"]) == ("General", "Hard", "Basic")
    assert "argmax" in a.values["alignment"][1]


def test_argmax_of_an_output_layer_is_no_hard_attention():
    """A classifier's argmax selects no values: nothing to find."""
    class Classify(nn.Module):
        def __init__(self):
            super().__init__()
            self.out = nn.Linear(D, 4)

        def forward(self, x):
            return self.out(x).softmax(-1).argmax(-1)

    res = taxcompile.classify(Classify(), (_x(2, L, D),))
    assert res.attentions == []


def test_topk_then_gather():
    """Keep the k best keys' scores and values (gather), a softmax over those alone."""
    class TopK(nn.Module):
        def forward(self, y, x):
            s, i = (y @ x.transpose(1, 2) / math.sqrt(D)).topk(2, -1)  # (B, T, 2)
            vals = x.unsqueeze(1).expand(-1, y.shape[1], -1, -1).gather(
                2, i.unsqueeze(-1).expand(-1, -1, -1, D))  # (B, T, 2, D)
            return (s.softmax(-1).unsqueeze(-1) * vals).sum(2)

    a, row = _one(TopK(), _x(2, 3, D), _x(2, L, D, seed=1))
    assert a.names == {"score": "scaled_multiplicative", "align": "topk"}
    assert (row["alignment"], row["dimensionality"]) == ("Sparse", "Single-Dimensional")


class SigmoidAttention(nn.Module):
    """Ramapuram et al. (2024): sigmoid(q k^T / sqrt(d) + b), b = -log n, no normalisation."""

    def forward(self, x):
        e = x @ x.transpose(1, 2) / math.sqrt(D) - math.log(x.shape[1])
        return torch.sigmoid(e) @ x


def test_sigmoid_attention():
    a, row = _one(SigmoidAttention(), _x(2, L, D))
    assert a.names == {"score": "scaled_multiplicative", "align": "sigmoid_attn"}
    assert (row["alignment"], row["query_type"]) == ("Global", "Self-Attentive")
    assert "not normalised" in a.values["alignment"][1]


def test_a_sigmoid_gate_over_additive_scores_is_not_sigmoid_attention():
    """Oktay et al.'s attention gate: sigmoid(w^T relu(W x + b)) scales each position."""
    class Gate(nn.Module):
        def __init__(self):
            super().__init__()
            self.W = nn.Linear(D, D)
            self.w = nn.Parameter(torch.randn(D, 1))

        def forward(self, x):
            g = torch.sigmoid(torch.relu(self.W(x)) @ self.w)  # (B, L, 1)
            return (g * x).sum(1)

    a, row = _one(Gate(), _x(2, L, D))
    assert a.names == {"score": "additive", "align": "sigmoid"}


class LightConv(nn.Module):
    """Wu et al. (2019) as fairseq writes it: each head's kernel softmax-normalised over its K
    taps, then a depthwise convolution of the values (the heads share channels)."""

    def __init__(self, heads=2, k=3):
        super().__init__()
        self.heads, self.k = heads, k
        self.weight = nn.Parameter(torch.randn(heads, 1, k))

    def forward(self, x):  # (B, L, D)
        B, n, d = x.shape
        w = self.weight.softmax(-1)  # (H, 1, K)
        w = w.repeat_interleave(d // self.heads, 0)  # (D, 1, K): one kernel per channel's head
        y = F.conv1d(x.transpose(1, 2), w, padding=self.k // 2, groups=d)
        return y.transpose(1, 2)


def test_lightconv():
    a, row = _one(LightConv(), _x(2, L, D))
    assert a.names == {"score": "none", "align": "lightconv"}
    assert (row["alignment"], row["query_multiplicity"]) == ("Local", "Multi-Head")
    assert "kernel" in a.values["scoring"][1] and "band" in a.values["alignment"][1]


def test_a_softmax_over_a_mixing_parameter_is_not_lightconv():
    """ELMo's scalar mix: softmax(s) weighs whole layers, no band of positions."""
    class Mix(nn.Module):
        def __init__(self):
            super().__init__()
            self.s = nn.Parameter(torch.randn(3))

        def forward(self, x):
            layers = torch.stack([x, x.tanh(), x.relu()])  # (3, B, L, D)
            return (self.s.softmax(0)[:, None, None, None] * layers).sum(0)

    res = taxcompile.classify(Mix(), (_x(2, L, D),))
    assert all(a.names.get("align") != "lightconv" for a in res.attentions)
    assert res.row() == {}


class Differential(nn.Module):
    """Ye et al. (2024): (softmax(q1 k1^T / sqrt d) - lambda softmax(q2 k2^T / sqrt d)) v."""

    def forward(self, x):
        x1, x2 = x.chunk(2, -1)
        a1 = (x1 @ x1.transpose(1, 2) / math.sqrt(D // 2)).softmax(-1)
        a2 = (x2 @ x2.transpose(1, 2) / math.sqrt(D // 2)).softmax(-1)
        return (a1 - 0.8 * a2) @ x


def test_differential_attention_is_two_read_attentions():
    res = taxcompile.classify(Differential(), (_x(2, L, D),))
    assert len(res.recognised) == 2, res.text()
    assert all(a.names == {"score": "scaled_multiplicative", "align": "global"}
               for a in res.recognised)
    assert res.row()["scoring"] == "Scaled Multiplicative"


def test_one_minus_the_weights_is_no_difference_of_attentions():
    class Complement(nn.Module):
        def forward(self, x):
            return (1 - (x @ x.transpose(1, 2)).softmax(-1)) @ x

    assert taxcompile.classify(Complement(), (_x(2, L, D),)).attentions == []
