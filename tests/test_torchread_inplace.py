"""Weights applied in place (c_l = a_l v_l, no sum over the keys), read from hand-written
modules of the papers' equations: Wang et al.'s input attention (each word's window scaled
by its weight before the convolution, then max pooling), Oktay et al.'s attention gate (a
sigmoid per pixel and feature scaling the skip connection). Near misses: a softmax over
channels that gates every position alike is no attention over positions, and a product of
the weights with a tensor of their own shape before a matmul leaves the matmul the one
that weighs the values."""
import torch
from torch import nn

import taxcompile

B, L, D, E = 2, 7, 8, 3
G = torch.Generator().manual_seed(0)


def _x(*s):
    return torch.randn(*s, generator=G)


class InputAttention(nn.Module):
    """alpha_i = softmax_i(w_i . e) (eq. 14); r_i = alpha_i W_f z_i (eq. 16); max over i."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, D)
        self.conv = nn.Conv1d(D, D, 3, padding=1, bias=False)

    def forward(self, words, entity):
        w = self.emb(words)                                     # (B, L, D)
        e = self.emb(entity).mean(1)                            # (B, D)
        a = torch.softmax((w @ e.unsqueeze(-1)).squeeze(-1), -1)  # (B, L)
        z = self.conv(w.transpose(1, 2)).transpose(1, 2)        # (B, L, D)
        return torch.tanh(z * a.unsqueeze(-1)).amax(1)          # (B, D)


class AttentionGate(nn.Module):
    """q = psi^T relu(W_x x_i + W_g g_i) (one per feature), alpha = sigmoid(q), x^_i = alpha_i x_i
    (Oktay et al. eq. 1-2, with multi-dimensional coefficients)."""

    def __init__(self):
        super().__init__()
        self.wx, self.wg = nn.Linear(D, D, bias=False), nn.Linear(D, D)
        self.psi = nn.Linear(D, D)

    def forward(self, x, g):                                    # (B, L, D) each
        return torch.sigmoid(self.psi(torch.relu(self.wx(x) + self.wg(g)))) * x


def test_input_attention_scales_each_word_in_place():
    res = taxcompile.classify(InputAttention(), (torch.randint(0, 20, (B, L), generator=G),
                                                 torch.randint(0, 20, (B, E), generator=G)))
    (a,) = res.attentions
    assert a.recognised, a.why_not
    assert {d: v[0] for d, v in a.values.items()} == {
        "scoring": "Multiplicative", "alignment": "Global", "dimensionality": "Single-Dimensional",
        "query_type": "Basic", "query_multiplicity": "Singular"}
    why = a.values["dimensionality"][1]
    assert f"`{a.applied_by}` scales each value by its weight in place" in why
    assert a.applied_by.startswith("mul")


def test_attention_gate_weighs_every_feature_in_place():
    res = taxcompile.classify(AttentionGate(), (_x(B, L, D), _x(B, L, D)))
    (a,) = res.attentions
    assert a.recognised, a.why_not
    got = {d: v[0] for d, v in a.values.items()}
    assert got["scoring"] == "Additive" and got["alignment"] == "Global"
    assert got["dimensionality"] == "Multi-Dimensional"
    assert "in place" in a.values["dimensionality"][1]


def test_a_softmax_over_channels_is_no_attention_over_positions():
    """A channel gate: softmax over the C features of a pooled summary scales every position
    alike (weights (B, 1, C) against (B, L, C)): not read as weights over positions."""
    class ChannelGate(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(D, D)

        def forward(self, x):
            return x * torch.softmax(self.fc(x.mean(1)), -1).unsqueeze(1)

    res = taxcompile.classify(ChannelGate(), (_x(B, L, D),))
    assert res.row() == {} and not any(a.recognised for a in res.attentions)


def test_a_product_before_a_matmul_leaves_the_matmul_the_weighing():
    """Weights times a tensor of their own shape (a keep mask given as data), then @ v: the
    matmul weighs the values, one weight per value, not the product in place."""
    class Masked(nn.Module):
        def forward(self, q, k, keep):
            a = torch.softmax(q @ k.transpose(1, 2), -1) * keep  # (B, L, L)
            return a @ k

    res = taxcompile.classify(Masked(), (_x(B, L, D), _x(B, L, D), _x(B, L, L).abs()))
    (a,) = res.attentions
    assert a.recognised, a.why_not
    assert a.values["dimensionality"][0] == "Single-Dimensional"
    assert "in place" not in a.values["dimensionality"][1]
    assert not a.applied_by.startswith("mul")


def test_a_gate_queried_by_another_gates_output_is_specialized():
    """Two gates of one class (the same source lines) with their own weights, over keys from
    the same input (two levels of one image): the second's query is built from the first's
    gated output, so it is Specialized (Oktay et al.'s finer gates), not read as the first
    one's own earlier step (as an LSTMN's steps, one module with one set of weights)."""
    class TwoGates(nn.Module):
        def __init__(self):
            super().__init__()
            self.g1, self.g2 = AttentionGate(), AttentionGate()
            self.down, self.mix = nn.Linear(D, D), nn.Linear(D, D)

        def forward(self, x, g):
            h = self.g1(x, g)                        # gated by g, another input
            return self.g2(self.down(x), self.mix(h))  # queried by the first gate's output

    res = taxcompile.classify(TwoGates(), (_x(B, L, D), _x(B, L, D)))
    first, second = res.attentions
    assert first.values["query_type"][0] == "Basic", first.values["query_type"]
    assert second.values["query_type"][0] == "Specialized", second.values["query_type"]
    assert f"`{first.norm}` weighing values" in second.values["query_type"][1]


class AttentionOverAttention(nn.Module):
    """Cui et al. 2017: M = h_doc h_query^T (eq. 4); alpha(t) = softmax over the document of
    M's column t (eq. 5), beta(t) = softmax over the query of M's row t (eq. 6); beta-bar =
    beta averaged over the document (eq. 7); s = alpha^T beta-bar (eq. 8), the output."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, D)

    def forward(self, doc, question):
        hd, hq = self.emb(doc), self.emb(question)               # (B, Ld, D), (B, Lq, D)
        m = hq @ hd.transpose(1, 2)                              # (B, Lq, Ld)
        alpha = m.softmax(-1)                                    # over the document
        beta = m.transpose(1, 2).softmax(-1)                     # (B, Ld, Lq): over the query
        beta_bar = beta.mean(1, keepdim=True)                    # (B, 1, Lq)
        return (beta_bar @ alpha).squeeze(1)                     # (B, Ld)


def test_attention_over_attention_reads_both_attentions():
    res = taxcompile.classify(AttentionOverAttention(),
                              (torch.randint(0, 20, (B, L), generator=G),
                               torch.randint(0, 20, (B, E), generator=G)))
    alpha, beta = res.attentions
    for a in (alpha, beta):
        assert a.recognised, a.why_not
        assert {d: v[0] for d, v in a.values.items()} == {
            "scoring": "Multiplicative", "alignment": "Global",
            "dimensionality": "Single-Dimensional", "query_type": "Specialized",
            "query_multiplicity": "Singular"}
    # alpha's weights, combined over the query's words by beta-bar, are the output; beta's
    # weights, averaged over the document, weigh alpha's rows
    assert "combined over the queries by `" in alpha.values["dimensionality"][1]
    assert beta.applied_by.startswith("bmm") or beta.applied_by.startswith("matmul")


def test_weights_averaged_over_their_keys_weigh_nothing():
    """The mean over the keys' axis of a softmax is 1 / Lk everywhere: no weights over the
    keys are left, and the matmul after it is no attention's."""
    class KeyMean(nn.Module):
        def forward(self, q, k):
            a = (q @ k.transpose(1, 2)).softmax(-1)              # (B, L, L)
            return a.mean(-1, keepdim=True) * k                  # (B, L, D)

    res = taxcompile.classify(KeyMean(), (_x(B, L, D), _x(B, L, D)))
    assert res.row() == {} and not any(a.recognised for a in res.attentions)
