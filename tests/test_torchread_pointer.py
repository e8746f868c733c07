"""Attention whose weights are the model's output, read from code (taxcompile/torchread/
pointer.py): Vinyals et al. 2015's pointer network, p(C_i | ...) = softmax(u^i) with
u^i_j = v^T tanh(W1 e_j + W2 d_i), written here from the paper and compiled from
examples/pointer_network.attn; classifiers whose softmax output is over a learned map's
rows are no attention."""
import torch
from torch import nn

import taxcompile
from taxcompile import api

D = 8


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class Pointer(nn.Module):
    """u_ij = v^T tanh(W1 e_j + W2 d_i); p_i = softmax_j(u_ij), the output (eq. 3)."""

    def __init__(self):
        super().__init__()
        self.W1, self.W2 = nn.Linear(D, D, bias=False), nn.Linear(D, D, bias=False)
        self.v = nn.Parameter(_x(D, seed=1))

    def forward(self, e, d):
        u = torch.tanh(self.W1(e).unsqueeze(1) + self.W2(d).unsqueeze(2)) @ self.v
        return u.softmax(-1)  # (B, T, S)


def reference(m, e, d):
    e, d = e.double(), d.double()
    W1, W2, v = m.W1.weight.double(), m.W2.weight.double(), m.v.double()
    out = torch.zeros(e.shape[0], d.shape[1], e.shape[1], dtype=torch.float64)
    for b in range(e.shape[0]):
        for i in range(d.shape[1]):
            u = torch.stack([v @ torch.tanh(W1 @ e[b, j] + W2 @ d[b, i])
                             for j in range(e.shape[1])])
            out[b, i] = torch.softmax(u, 0)
    return out


def test_module_is_the_papers_equations():
    m, e, d = Pointer(), _x(2, 6, D), _x(2, 3, D, seed=2)
    assert torch.allclose(m(e, d).double(), reference(m, e, d), atol=1e-6)


def test_pointer_weights_are_an_attention_with_its_reason():
    res = taxcompile.classify(Pointer(), (_x(2, 6, D), _x(2, 3, D, seed=2)))
    row = res.row()
    assert (row["scoring"], row["alignment"], row["dimensionality"], row["query_type"],
            row["query_multiplicity"]) == ("Additive", "Global", "Single-Dimensional", "Basic",
                                           "Singular")
    assert "the model's output" in res.recognised[0].values["dimensionality"][1]


class Classifier(nn.Module):
    """softmax(W2 tanh(W1 x)) over classes: a learned map of one stream, no keys."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(D, D), nn.Tanh(), nn.Linear(D, 5))

    def forward(self, x):
        return self.net(x).softmax(-1)


def test_a_classifier_output_is_no_pointer():
    res = taxcompile.classify(Classifier(), (_x(2, 6, D),))
    assert res.attentions == []


def test_compiled_pointer_network_round_trip():
    spec = "examples/pointer_network.attn"
    mod = api.module(spec, "ptr_net")
    cfg = api.config(mod, tiny=True)
    inputs = {k: v for k, v in mod.example_inputs(cfg=cfg).items() if not k.endswith("_mask")}
    res = api.classify(mod.Model(cfg).eval(), inputs)
    got, want = res.row(), api.classify(spec, "ptr_net").row()
    for d in ("scoring", "alignment", "dimensionality", "query_type", "query_multiplicity"):
        assert got[d] == want[d], d
    assert "a pointer network" in res.text()
