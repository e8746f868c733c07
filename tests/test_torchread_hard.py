"""Hard and reinforced alignments read from code (taxcompile/torchread/alignments.py, and
capture.py for torch.distributions): each written by hand after the survey's equation and
checked against a float64 reference before it is read; the near misses that must not read
as them."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Categorical

import taxcompile

D, T, L = 8, 3, 5


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class HardSample(nn.Module):
    """Eq. 26: a general score, p = softmax(e), one key m ~ p, c = v_m (its one-hot times V)."""

    def __init__(self, how):
        super().__init__()
        self.W = nn.Linear(D, D, bias=False)
        self.how = how

    def forward(self, y, x):
        e = self.W(y) @ x.transpose(1, 2)  # (B, T, L)
        B, n, k = e.shape
        if self.how == "gumbel":  # straight-through: one-hot forward, softmax's gradient
            return F.gumbel_softmax(e, tau=1.0, hard=True) @ x
        if self.how == "multinomial":
            m = torch.multinomial(e.softmax(-1).reshape(-1, k), 1).view(B, n)
        elif self.how == "categorical_probs":
            m = Categorical(probs=e.softmax(-1)).sample()
        else:
            m = Categorical(logits=e).sample()
        return F.one_hot(m, k).to(x.dtype) @ x


@pytest.mark.parametrize("how", ["multinomial", "categorical_probs", "categorical_logits",
                                 "gumbel"])
def test_hard_by_sampling(how):
    m, y, x = HardSample(how).eval(), _x(2, T, D), _x(2, L, D, seed=1)
    # the reference: p in float64; each output is one key's value, drawn about as often as p
    p = torch.softmax(y.double() @ m.W.weight.double().T @ x.double().transpose(1, 2), -1)
    torch.manual_seed(0)
    with torch.no_grad():
        outs = torch.stack([m(y, x) for _ in range(2000)])  # (N, B, T, D)
    hit = (outs.unsqueeze(3) == x[:, None, :, :].unsqueeze(0)).all(-1)  # (N, B, T, L)
    assert (hit.sum(-1) >= 1).all()
    freq = hit.double().mean(0) / hit.double().mean(0).sum(-1, keepdim=True)
    torch.testing.assert_close(freq, p, atol=0.05, rtol=0)
    res = taxcompile.classify(m, (y, x))
    (a,) = res.recognised
    assert a.names == {"score": "general", "align": "hard"}
    assert (res.row()["alignment"], res.row()["scoring"]) == ("Hard", "General")
    assert ("Gumbel" if how == "gumbel" else "multinomial") in a.values["alignment"][1]


class Reinforced(nn.Module):
    """A policy pi_l = sigmoid(w^T k_l + b) picks a subset of the keys (a Bernoulli draw while
    training, pi_l > 0.5 greedily), and a softmax runs over the picked keys alone (Shen et
    al. 2018; Wang et al. 2019)."""

    def __init__(self, sample):
        super().__init__()
        self.policy = nn.Linear(D, 1)
        self.W = nn.Linear(D, D, bias=False)
        self.sample = sample

    def forward(self, y, x):
        pi = torch.sigmoid(self.policy(x)).squeeze(-1)  # (B, L)
        pick = torch.bernoulli(pi).bool() if self.sample else pi > 0.5
        e = self.W(y) @ x.transpose(1, 2)  # (B, T, L)
        e = e.masked_fill(~pick[:, None, :], float("-inf"))
        return e.softmax(-1) @ x


def reinforced_reference(m, y, x):
    """The greedy subset key by key in float64, a softmax over it."""
    y, x = y.double(), x.double()
    w, b, W = m.policy.weight.double()[0], m.policy.bias.double()[0], m.W.weight.double()
    out = torch.zeros(*y.shape, dtype=torch.float64)
    for i in range(y.shape[0]):
        keep = [l for l in range(x.shape[1]) if torch.sigmoid(w @ x[i, l] + b) > 0.5]
        assert keep, "the example needs a key the policy keeps"
        for t in range(y.shape[1]):
            a = torch.softmax(torch.stack([(W @ y[i, t]) @ x[i, l] for l in keep]), 0)
            out[i, t] = sum(al * x[i, l] for al, l in zip(a, keep))
    return out


@pytest.mark.parametrize("sample", [False, True], ids=["greedy", "bernoulli"])
def test_reinforced(sample):
    m, y, x = Reinforced(sample).eval(), _x(2, T, D), _x(2, L, D, seed=1)
    if not sample:
        with torch.no_grad():
            torch.testing.assert_close(m.double()(y.double(), x.double()),
                                       reinforced_reference(m, y, x))
    res = taxcompile.classify(m.float(), (y, x))
    (a,) = res.recognised
    assert a.names == {"score": "general", "align": "reinforced"}
    assert res.row()["alignment"] == "Reinforced"
    why = a.values["alignment"][1]
    assert ("samples which keys" in why) == sample and "subset" in why


def test_a_threshold_of_the_scores_is_no_policy():
    """Keeping the keys whose own score passes a threshold: one value per query and key, no
    policy over the keys."""
    class ScoreCut(nn.Module):
        def __init__(self):
            super().__init__()
            self.W = nn.Linear(D, D, bias=False)

        def forward(self, y, x):
            e = self.W(y) @ x.transpose(1, 2)
            keep = (torch.sigmoid(e) > 0.5) | (e == e.amax(-1, keepdim=True))
            return e.masked_fill(~keep, float("-inf")).softmax(-1) @ x

    res = taxcompile.classify(ScoreCut(), (_x(2, T, D), _x(2, L, D, seed=1)))
    (a,) = res.recognised
    assert a.names["align"] != "reinforced"


def test_random_key_dropout_is_no_policy():
    """Dropping keys at random with a constant rate: noise, no agent's choice."""
    class KeyDrop(nn.Module):
        def forward(self, y, x):
            keep = torch.rand(x.shape[:2]) < 0.9
            keep[:, 0] = True
            e = (y @ x.transpose(1, 2)).masked_fill(~keep[:, None, :], float("-inf"))
            return e.softmax(-1) @ x

    res = taxcompile.classify(KeyDrop(), (_x(2, T, D), _x(2, L, D, seed=1)))
    (a,) = res.recognised
    assert a.names["align"] == "global", res.text()


def test_the_largest_weight_read_but_not_used_to_pick_is_no_hard_attention():
    """A softmax's values weigh the values; its max only reports a confidence."""
    class Confidence(nn.Module):
        def forward(self, y, x):
            p = (y @ x.transpose(1, 2)).softmax(-1)
            return p @ x, p.max(-1).values

    res = taxcompile.classify(Confidence(), (_x(2, T, D), _x(2, L, D, seed=1)))
    (a,) = res.recognised
    assert a.names["align"] == "global"
