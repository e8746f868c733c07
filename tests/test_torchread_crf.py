"""Structured attention read from code (taxcompile/torchread/crf.py): the marginals of a
linear-chain CRF over the keys (Kim et al. 2017), computed here by hand by forward-backward
in log space and in probability space (checked against brute force over every assignment), read as the `crf`
alignment with and without Kim et al.'s division by their sum; and near misses that must not
read as one: a softmax written as exp(e - logsumexp e), a forward recursion alone, a sigmoid
of the scores, the same recursions over an input that is no score, over the queries' axis,
and with no transition between positions, and a bidirectional recurrence (a learned 4 x 4
map between states, no two labels)."""
import itertools
import math

import pytest
import torch
from torch import nn

import taxcompile

D, T, L = 6, 3, 5


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def forward_backward(e, trans, backward=True):
    """log-space forward-backward over the last axis of ``e`` (the unary potentials of
    z_l = 1; z_l = 0 has 0), ``trans`` (2, 2) the pairwise potentials theta(z_l, z_l+1):
    the marginals p(z_l = 1 | e). ``backward=False``: alpha alone (a near miss)."""
    n = e.shape[-1]
    unary = torch.stack([torch.zeros_like(e), e], -1)  # (..., n, 2)
    alpha = unary[..., 0, :]
    alphas = [alpha]
    for i in range(1, n):  # alpha_i(z) = log sum_z' exp(alpha_(i-1)(z') + theta(z', z)) + u_i(z)
        alpha = torch.logsumexp(alpha.unsqueeze(-1) + trans, dim=-2) + unary[..., i, :]
        alphas.append(alpha)
    log_z = torch.logsumexp(alpha, -1, keepdim=True).unsqueeze(-2)  # (..., 1, 1)
    a = torch.stack(alphas, -2)  # (..., n, 2)
    if not backward:
        return (a - log_z)[..., 1].exp()
    beta = torch.zeros_like(alpha)  # beta_(n-1) = 0: nothing follows the last position
    betas = [beta]
    for i in range(n - 2, -1, -1):  # beta_i(z) = log sum_z' exp(theta(z, z') + u_(i+1)(z') + beta_(i+1)(z'))
        beta = torch.logsumexp(trans + (unary[..., i + 1, :] + beta).unsqueeze(-2), dim=-1)
        betas.insert(0, beta)
    b = torch.stack(betas, -2)
    return (a + b - log_z)[..., 1].exp()


def forward_backward_probs(e, trans):
    """The same marginals in probability space: potentials exp(e) and exp(theta), each
    forward and backward state rescaled to sum to one (the scale cancels in the ratio)."""
    n = e.shape[-1]
    psi = torch.stack([torch.ones_like(e), e.exp()], -1)  # (..., n, 2)
    m = trans.exp()
    alpha = psi[..., 0, :] / psi[..., 0, :].sum(-1, keepdim=True)
    alphas = [alpha]
    for i in range(1, n):
        alpha = (alpha @ m) * psi[..., i, :]
        alpha = alpha / alpha.sum(-1, keepdim=True)
        alphas.append(alpha)
    beta = torch.ones_like(alpha) / 2
    betas = [beta]
    for i in range(n - 2, -1, -1):
        beta = (psi[..., i + 1, :] * beta) @ m.T
        beta = beta / beta.sum(-1, keepdim=True)
        betas.insert(0, beta)
    g = torch.stack(alphas, -2) * torch.stack(betas, -2)  # (..., n, 2)
    return (g / g.sum(-1, keepdim=True))[..., 1]


def brute_force(e, trans):
    """p(z_l = 1 | e) summing exp(sum_l z_l e_l + sum_l theta(z_l, z_l+1)) over all 2^n z."""
    n = len(e)
    weights = {}
    for z in itertools.product((0, 1), repeat=n):
        s = sum(float(e[i]) for i in range(n) if z[i]) + sum(
            float(trans[z[i], z[i + 1]]) for i in range(n - 1))
        weights[z] = math.exp(s)
    total = sum(weights.values())
    return [sum(w for z, w in weights.items() if z[i]) / total for i in range(n)]


def test_the_hand_written_marginals_are_the_crf_marginals():
    e, trans = _x(2, 3, L, seed=3) * 2, _x(2, 2, seed=4)
    got = forward_backward(e, trans)
    for b, t in itertools.product(range(2), range(3)):
        assert got[b, t].tolist() == pytest.approx(brute_force(e[b, t], trans), abs=1e-5)
    assert torch.allclose(forward_backward_probs(e, trans), got, atol=1e-5)
    # with no transition the positions are independent: sigmoid(e_l) each
    assert torch.allclose(forward_backward(e, torch.zeros(2, 2)), e.sigmoid(), atol=1e-6)


class Structured(nn.Module):
    """Queries y over keys and values x, weighed by ``weights(e, transitions)``."""

    def __init__(self, weights, normalize=False):
        super().__init__()
        self.w = nn.Linear(D, D, bias=False)
        self.transitions = nn.Parameter(_x(2, 2, seed=5))
        self.weights, self.normalize = weights, normalize

    def forward(self, y, x):
        e = self.w(y) @ x.transpose(1, 2)  # (B, T, L)
        a = self.weights(e, self.transitions)
        if self.normalize:
            a = a / a.sum(-1, keepdim=True)
        return a @ x


def _read(model, *inputs):
    return taxcompile.classify(model, inputs or (_x(2, T, D), _x(2, L, D, seed=1)))


def _aligns(res) -> list:
    return [a.names.get("align") for a in res.attentions]


@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("weights", [forward_backward, forward_backward_probs])
def test_crf_marginals_written_by_hand_read_as_crf(weights, normalize):
    res = _read(Structured(weights, normalize))
    assert len(res.recognised) == 1, res.text()
    a = res.recognised[0]
    assert a.names == {"score": "general", "align": "crf"}
    row = res.row()
    assert (row["scoring"], row["alignment"], row["query_type"], row["dimensionality"]) == (
        "General", "Global", "Basic", "Single-Dimensional")
    why = a.values["alignment"][1]
    assert "forward recursion" in why and "backward" in why and "transitions" in why
    assert ("normalised" in why) == normalize
    assert a.align_args == ({"normalize": True} if normalize else {})
    from taxcompile.torchread.schema import TorchClassification, dump

    # the JSON answer carries it too (it was left out)
    (got,) = TorchClassification.model_validate_json(dump(res)).attentions
    assert got.parameters == ({"normalize": True} if normalize else {})


def test_a_crf_over_the_keys_of_self_attention_is_read():
    """Queries and keys of one length: the recursion runs over the keys' axis."""
    class Self(nn.Module):
        def __init__(self):
            super().__init__()
            self.transitions = nn.Parameter(_x(2, 2, seed=5))

        def forward(self, x):
            return forward_backward(x @ x.transpose(1, 2), self.transitions) @ x

    res = _read(Self(), _x(2, L, L))
    assert _aligns(res) == ["crf"], res.text()


def _logsumexp_softmax(e, trans):
    return (e - torch.logsumexp(e, -1, keepdim=True)).exp()


def _forward_only(e, trans):
    return forward_backward(e, trans, backward=False)


def _sigmoid(e, trans):
    return e.sigmoid()


def _no_transition(e, trans):
    """Forward and backward recursions summing the potentials, with no pairwise term."""
    return forward_backward(e, torch.zeros(2, 2))


@pytest.mark.parametrize("weights", [_logsumexp_softmax, _forward_only, _sigmoid,
                                     _no_transition])
def test_near_misses_are_no_crf(weights):
    res = _read(Structured(weights))
    assert "crf" not in _aligns(res), res.text()


def test_a_recursion_over_no_score_is_no_crf():
    """The same forward-backward over an input that no query meets a key in: refused."""
    class Given(nn.Module):
        def __init__(self):
            super().__init__()
            self.transitions = nn.Parameter(_x(2, 2, seed=5))

        def forward(self, u, x):
            return forward_backward(u, self.transitions) @ x

    res = _read(Given(), _x(2, T, L), _x(2, L, D, seed=1))
    assert "crf" not in _aligns(res) and not res.recognised, res.text()


def test_a_recursion_over_the_queries_is_no_crf():
    """Self-attention whose chain runs over the queries' axis (as long as the keys'): the
    marginals are over queries, not keys."""
    class OverQueries(nn.Module):
        def __init__(self):
            super().__init__()
            self.transitions = nn.Parameter(_x(2, 2, seed=5))

        def forward(self, x):
            e = x @ x.transpose(1, 2)  # (B, L, L)
            a = forward_backward(e.transpose(1, 2), self.transitions).transpose(1, 2)
            return a @ x

    res = _read(OverQueries(), _x(2, L, L))
    assert "crf" not in _aligns(res), res.text()


class BiRecurrence(nn.Module):
    """A bidirectional tanh recurrence over the scores (h_l = tanh(W h_(l-1) + e_l u) each
    way, 4 units), its two passes' states added and exp'd: forward and backward recursions
    with a learned map at each step, but over no two labels: no CRF's marginals."""

    def __init__(self):
        super().__init__()
        self.W, self.u = nn.Parameter(_x(4, 4, seed=6) / 2), nn.Parameter(_x(4, seed=7))

    def forward(self, y, x):
        e = y @ x.transpose(1, 2)  # (B, T, L)
        n = e.shape[-1]
        h = torch.zeros(*e.shape[:-1], 4)
        fwd = []
        for i in range(n):
            h = torch.tanh(h @ self.W + e[..., i, None] * self.u)
            fwd.append(h)
        h = torch.zeros(*e.shape[:-1], 4)
        bwd = []
        for i in range(n - 1, -1, -1):
            h = torch.tanh(h @ self.W + e[..., i, None] * self.u)
            bwd.insert(0, h)
        a = (torch.stack(fwd, -2) + torch.stack(bwd, -2)).exp()[..., 0]  # (B, T, L)
        return a @ x


def test_a_bidirectional_recurrence_is_no_crf():
    """The pairwise potentials of a CRF over z in {0, 1} are 2 x 2 (per head): a learned
    4 x 4 map between states is no transition of two labels."""
    res = _read(BiRecurrence())
    assert "crf" not in _aligns(res), res.text()


class Heads(nn.Module):
    """Two heads, each its own 2 x 2 transition (as Kim et al.'s per head), over scaled
    dot products of projected queries and keys."""

    def __init__(self, h=2):
        super().__init__()
        self.h = h
        self.q, self.k, self.v = (nn.Linear(D, D, bias=False) for _ in range(3))
        self.transitions = nn.Parameter(_x(h, 2, 2, seed=8))

    def forward(self, y, x):
        B, n = y.shape[0], D // self.h
        q = self.q(y).view(B, -1, self.h, n).transpose(1, 2)  # (B, H, T, D / H)
        k = self.k(x).view(B, -1, self.h, n).transpose(1, 2)
        v = self.v(x).view(B, -1, self.h, n).transpose(1, 2)
        e = q @ k.transpose(-1, -2) / math.sqrt(n)  # (B, H, T, L)
        a = forward_backward(e, self.transitions.view(self.h, 1, 2, 2))
        return (a @ v).transpose(1, 2).reshape(B, -1, D)


def test_a_crf_per_head_is_read_with_its_heads():
    res = _read(Heads())
    assert len(res.recognised) == 1, res.text()
    a = res.recognised[0]
    assert a.names["align"] == "crf" and a.heads == 2, res.text()
    assert res.row()["query_multiplicity"] == "Multi-Head"


SPEC = """paper probe {{
    cite = "Probe"
    title = "probe"
}}

model m {{
    input x: sequence[L, 8]
    input y: sequence[T, 8]
    attention att {{ query = y  features = x  score = multiplicative  align = {align}  heads = {heads} }}
    output out = identity(att)
}}
"""


@pytest.mark.parametrize("heads", [1, 2])
@pytest.mark.parametrize("align", ["crf", "crf(normalize = true)"])
def test_taxcompiles_own_crf_reads_with_its_normalisation_and_lifts(align, heads, tmp_path):
    """The generated code (taxcompile's crf_marginals, masked steps and all) reads as crf,
    normalised exactly where the spec says so, and its lifted sketch says the same."""
    from taxcompile import api
    from taxcompile.torchread.lift import lift_module

    path = tmp_path / "one.attn"
    path.write_text(SPEC.format(align=align, heads=heads))
    mod = api.module(str(path), "m")
    cfg = api.config(mod, tiny=True)
    inputs = {k: v for k, v in mod.example_inputs(cfg=cfg).items() if not k.endswith("_mask")}
    model = mod.Model(cfg).eval()
    res = taxcompile.classify(model, inputs)
    assert _aligns(res) == ["crf"] and res.recognised[0].heads == heads, res.text()
    normalised = "normalize" in align
    assert res.recognised[0].align_args == ({"normalize": True} if normalised else {})
    text = lift_module(model, inputs, "m")
    assert f"align  = {align}" in text, text
    assert api.classify(text).row()["alignment"] == "Global"  # the sketch is a valid spec
