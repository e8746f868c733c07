"""The three feature dimensions read from code (taxcompile/torchread/feature_dims.py), on
hand-written modules of the survey's wirings: co-attention in parallel (eq. 12-16), in turn
(eq. 6-9) and interactive (eq. 10-11), rotatory attention (eq. 17-20), a hierarchy (Yang et
al.'s words within sentences), several representations of one input (Kiela et al., eq.
21-22); and the near misses a layer stack (contexts re-encoded at one level) and a stack of
two different inputs' embeddings."""
import pytest
import torch
from torch import nn

import taxcompile

B, L, M, D = 2, 7, 5, 8
G = torch.Generator().manual_seed(0)


def _x(*s):
    return torch.randn(*s, generator=G)


def attend(q, k):
    """softmax(q k^T / sqrt(d)) k: (B, Lq, D) over (B, Lk, D)."""
    return torch.softmax(q @ k.transpose(-1, -2) / D ** 0.5, -1) @ k


def features(model, *inputs):
    res = taxcompile.classify(model, inputs)
    assert res.recognised, res.text()
    return {d: v[0] for d, v in res.features.items()}, res


class Parallel(nn.Module):
    """Each input's every position queries the other (eq. 12-16's two directions)."""

    def forward(self, a, b):
        return attend(a, b).mean(1) + attend(b, a).mean(1)


class Interactive(nn.Module):
    """Each input queried by the other's mean (IAN, eq. 10-11)."""

    def forward(self, a, b):
        return attend(a.mean(1, keepdim=True), b) + attend(b.mean(1, keepdim=True), a)


class Alternating(nn.Module):
    """a's summary attends over b, whose context then attends over a (eq. 6-9)."""

    def forward(self, a, b):
        cb = attend(a.mean(1, keepdim=True), b)
        return attend(cb, a)


class Rotatory(nn.Module):
    """The target's summary attends over the left and right contexts, whose summaries attend
    over the target in turn (Zheng and Xia, eq. 17-20)."""

    def forward(self, left, target, right):
        t = target.mean(1, keepdim=True)
        cl, cr = attend(t, left), attend(t, right)
        return torch.cat([cl, cr, attend(cl, target), attend(cr, target)], -1)


class Hierarchy(nn.Module):
    """Words attended within each sentence by a learned query, the sentence vectors attended
    by another (Yang et al.'s HAN)."""

    def __init__(self):
        super().__init__()
        self.uw, self.us = nn.Parameter(_x(1, 1, D)), nn.Parameter(_x(1, 1, D))

    def forward(self, doc):                                     # (B, S, W, D)
        b, s, w, d = doc.shape
        words = doc.reshape(b * s, w, d)                         # (B S, W, D)
        sent = attend(self.uw.expand(b * s, 1, d), words)        # (B S, 1, D)
        sent = sent.reshape(b, s, d)                             # (B, S, D)
        return attend(self.us.expand(b, 1, d), sent)             # (B, 1, D)


class Representations(nn.Module):
    """Two embeddings of the same tokens, projected and stacked; a learned query weighs them
    per token (Kiela et al.'s dynamic meta-embeddings, eq. 21-22)."""

    def __init__(self, same=True):
        super().__init__()
        self.e1, self.e2 = nn.Embedding(20, D), nn.Embedding(20, D)
        self.p1, self.p2 = nn.Linear(D, D), nn.Linear(D, D)
        self.a = nn.Parameter(_x(D))
        self.same = same

    def forward(self, tokens, other):
        second = tokens if self.same else other
        reps = torch.stack([self.p1(self.e1(tokens)), self.p2(self.e2(second))], -2)  # (B, L, 2, D)
        w = torch.softmax(torch.tanh(reps) @ self.a, -1)         # (B, L, 2): a^T tanh(x_ij)
        return (w.unsqueeze(-1) * reps).sum(-2)                  # (B, L, D)


class Stack(nn.Module):
    """Two self-attention layers with residuals: the second re-encodes the first's contexts,
    one per position (one level, no hierarchy)."""

    def __init__(self):
        super().__init__()
        self.w = nn.ModuleList(nn.Linear(D, 3 * D) for _ in range(2))

    def forward(self, x):
        for lin in self.w:
            q, k, v = lin(x).chunk(3, -1)
            x = x + torch.softmax(q @ k.transpose(1, 2) / D ** 0.5, -1) @ v
        return x


@pytest.mark.parametrize("model, inputs, want", [
    (Parallel, lambda: (_x(B, L, D), _x(B, M, D)), "Parallel Co-attention"),
    (Interactive, lambda: (_x(B, L, D), _x(B, M, D)), "Interactive Co-attention"),
    (Alternating, lambda: (_x(B, L, D), _x(B, M, D)), "Alternating Co-attention"),
    (Rotatory, lambda: (_x(B, L, D), _x(B, 3, D), _x(B, M, D)), "Rotatory"),
], ids=["parallel", "interactive", "alternating", "rotatory"])
def test_feature_multiplicity(model, inputs, want):
    got, res = features(model(), *inputs())
    assert got["feature_multiplicity"] == want, res.text()
    assert got["feature_levels"] == "Single-Level"
    assert res.row()["feature_multiplicity"] == want


def test_a_hierarchy_of_words_and_sentences():
    got, res = features(Hierarchy(), _x(B, 3, L, D))
    assert got == {"feature_multiplicity": "Singular", "feature_levels": "Hierarchical",
                   "feature_representations": "Single-Representational"}, res.text()
    assert "one per group" in res.features["feature_levels"][1]


def test_stacked_representations_of_one_input():
    tokens = torch.randint(0, 20, (B, L), generator=G)
    got, res = features(Representations(), tokens, tokens.flip(1))
    assert got["feature_representations"] == "Multi-Representational", res.text()
    assert got["feature_levels"] == "Single-Level"  # the stack's axis is no level


def test_stacked_embeddings_of_two_inputs_are_not_representations_of_one():
    tokens = torch.randint(0, 20, (B, L), generator=G)
    got, res = features(Representations(same=False), tokens, tokens.flip(1))
    assert got["feature_representations"] == "Single-Representational", res.text()


def test_a_layer_stack_is_one_level_of_one_input():
    got, res = features(Stack(), _x(B, L, D))
    assert got == {"feature_multiplicity": "Singular", "feature_levels": "Single-Level",
                   "feature_representations": "Single-Representational"}, res.text()
