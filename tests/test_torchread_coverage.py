"""Coverage inside an additive score, read from code (taxcompile/torchread/coverage.py): See
et al. 2017's e_i^t = v^T tanh(W_h h_i + W_s s_t + w_c c_i^t), c^t the sum of the earlier
steps' weights, in a module written here from the paper and compiled from
examples/see2017_coverage.attn; a term of the same form over a feature of the input is no
coverage."""
import torch
from torch import nn

import taxcompile
from taxcompile import api

D, S, T = 8, 6, 3


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class Coverage(nn.Module):
    """Eq. 11 over T decoder states: a^t = softmax(e^t), h*_t = sum_i a_i^t h_i, c += a^t.
    ``from_input``: the term reads the keys' input instead of the earlier weights."""

    def __init__(self, from_input=False):
        super().__init__()
        self.Wh, self.Ws = nn.Linear(D, D, bias=False), nn.Linear(D, D)
        self.wc, self.v = nn.Parameter(_x(D, seed=1)), nn.Parameter(_x(D, seed=2))
        self.from_input = from_input

    def forward(self, h, s):
        c = h.new_zeros(h.shape[:2])
        out = []
        for t in range(s.shape[1]):
            f = h.sum(-1) if self.from_input else c
            e = torch.tanh(self.Wh(h) + self.Ws(s[:, t]).unsqueeze(1)
                           + f.unsqueeze(-1) * self.wc) @ self.v
            a = e.softmax(-1)
            out.append((a.unsqueeze(1) @ h).squeeze(1))
            c = c + a
        return torch.stack(out, 1)


def reference(m, h, s):
    h, s = h.double(), s.double()
    Wh, Ws, bs = m.Wh.weight.double(), m.Ws.weight.double(), m.Ws.bias.double()
    wc, v = m.wc.double(), m.v.double()
    out = torch.zeros(h.shape[0], s.shape[1], D, dtype=torch.float64)
    for b in range(h.shape[0]):
        c = torch.zeros(h.shape[1], dtype=torch.float64)
        for t in range(s.shape[1]):
            e = torch.stack([v @ torch.tanh(Wh @ h[b, i] + Ws @ s[b, t] + bs + wc * c[i])
                             for i in range(h.shape[1])])
            a = torch.softmax(e, 0)
            out[b, t] = a @ h[b]
            c = c + a
    return out


def _inputs():
    return _x(2, S, D), _x(2, T, D, seed=3)


def test_module_is_the_papers_equations():
    m = Coverage()
    assert torch.allclose(m(*_inputs()).double(), reference(m, *_inputs()), atol=1e-5)


def test_coverage_term_is_looked_past_and_named():
    res = taxcompile.classify(Coverage(), _inputs())
    row = res.row()
    assert (row["scoring"], row["alignment"], row["query_type"]) == ("Additive", "Global",
                                                                     "Basic")
    last = res.recognised[-1].values["scoring"][1]
    assert "a coverage term is added inside it" in last and "wc" in last


def test_a_term_over_the_input_is_no_coverage():
    res = taxcompile.classify(Coverage(from_input=True), _inputs())
    assert "coverage term" not in res.text()


def test_compiled_coverage_round_trip():
    spec = "examples/see2017_coverage.attn"
    mod = api.module(spec, "coverage")
    cfg = api.config(mod, tiny=True)
    inputs = {k: v for k, v in mod.example_inputs(cfg=cfg).items() if not k.endswith("_mask")}
    res = api.classify(mod.Model(cfg).eval(), inputs)
    got, want = res.row(), api.classify(spec, "coverage").row()
    for d in ("scoring", "alignment", "dimensionality", "query_type", "query_multiplicity"):
        assert got[d] == want[d], d
    assert "w_c" in res.text()
