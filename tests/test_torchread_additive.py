"""An additive score with one attention feature (d_w = 1), read from code: Tang et al. 2016's
g_i = tanh(W_att [m_i; v_aspect] + b_att) has no sum over features, so the learned vector is
a product with one weight before the softmax (examples/tang2016_location_memory.attn); an
activation of a plain product scaled by a constant is no additive score."""
import torch
from torch import nn

import taxcompile
from taxcompile import api

D, S = 8, 6


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class OneFeature(nn.Module):
    """e_i = w tanh(W1 m_i + W2 q) with W1, W2 of one output (d_w = 1); c = sum_i a_i m_i."""

    def __init__(self, learned=True):
        super().__init__()
        self.W1, self.W2 = nn.Linear(D, 1), nn.Linear(D, 1, bias=False)
        self.w = nn.Parameter(_x(1, seed=1)) if learned else None

    def forward(self, m, q):
        g = torch.tanh(self.W1(m) + self.W2(q).unsqueeze(1)).squeeze(-1)  # (B, S)
        e = g * self.w if self.w is not None else g * 2.0
        return (e.softmax(-1).unsqueeze(1) @ m).squeeze(1)


def reference(mod, m, q):
    m, q = m.double(), q.double()
    W1, b1, W2 = mod.W1.weight.double()[0], mod.W1.bias.double()[0], mod.W2.weight.double()[0]
    out = []
    for b in range(m.shape[0]):
        e = torch.stack([mod.w.double()[0] * torch.tanh(W1 @ m[b, i] + b1 + W2 @ q[b])
                         for i in range(m.shape[1])])
        out.append(torch.softmax(e, 0) @ m[b])
    return torch.stack(out)


def _inputs():
    return _x(2, S, D), _x(2, D, seed=2)


def test_module_is_the_papers_equations():
    mod = OneFeature()
    assert torch.allclose(mod(*_inputs()).double(), reference(mod, *_inputs()), atol=1e-6)


def test_one_feature_additive_score_is_read():
    res = taxcompile.classify(OneFeature(), _inputs())
    row = res.row()
    assert (row["scoring"], row["alignment"], row["query_type"]) == ("Additive", "Global",
                                                                     "Basic")


def test_a_constant_scaling_is_no_learned_vector():
    res = taxcompile.classify(OneFeature(learned=False), _inputs())
    assert res.row().get("scoring") != "Additive"


def test_compiled_location_memory_round_trip():
    spec = "examples/tang2016_location_memory.attn"
    mod = api.module(spec, "location2")
    cfg = api.config(mod, tiny=True)
    inputs = {k: v for k, v in mod.example_inputs(cfg=cfg).items() if not k.endswith("_mask")}
    got, want = api.classify(mod.Model(cfg).eval(), inputs).row(), api.classify(
        spec, "location2").row()
    for d in ("scoring", "alignment", "dimensionality", "query_type"):
        assert got[d] == want[d], d
