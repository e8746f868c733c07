"""Query type and multiplicity read over every attention of a model (taxcompile/torchread/
queries.py), each on a PyTorch module written here with its expected row, beside a near miss:
Specialized queries (another attention's context, another attended input), the steps of an
unrolled decoder, and multi-hop."""
import torch
from torch import nn

import taxcompile

D, L, T = 8, 5, 3


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def attend(q, k, mask=None):
    """Dot-product attention of queries q (B, Lq, D) over keys = values k (B, Lk, D)."""
    e = q @ k.transpose(1, 2)
    if mask is not None:
        e = e.masked_fill(~mask, float("-inf"))
    return e.softmax(-1) @ k


def _row(model, *inputs):
    res = taxcompile.classify(model, inputs)
    assert res.recognised, res.text()
    return res, res.row()


class Alternating(nn.Module):
    """Lu et al.'s alternating co-attention: self-attention summarises F1 (c0), c0 queries F2
    (c2), c2 queries F1 (c1)."""

    def forward(self, f1, f2):
        c0 = attend(f1, f1).mean(1, keepdim=True)
        c2 = attend(c0, f2)
        return attend(c2, f1)


def test_query_from_another_attentions_context_is_specialized():
    res, row = _row(Alternating(), _x(2, L, D), _x(2, L + 1, D, seed=1))
    assert row["query_type"] == "Self-Attentive + Specialized"
    assert [a.values["query_type"][0] for a in res.recognised] == [
        "Self-Attentive", "Specialized", "Specialized"]
    assert "context of another attention" in res.recognised[1].values["query_type"][1]


class Decoder(nn.Module):
    """A Transformer decoder layer without projections: causal self-attention over y, a
    residual sum, then cross-attention over x."""

    def forward(self, y, x):
        causal = torch.ones(y.shape[1], y.shape[1], dtype=torch.bool).tril()
        h = y + attend(y, y, causal)
        return h + attend(h, x)


def test_a_residual_over_a_context_and_a_causal_input_stay_basic():
    res, row = _row(Decoder(), _x(2, T, D), _x(2, L, D, seed=1))
    assert [a.values["query_type"][0] for a in res.recognised] == ["Self-Attentive", "Basic"]


class Parallel(nn.Module):
    """Parallel co-attention: each input's mean queries the other."""

    def forward(self, v, q):
        return attend(q.mean(1, keepdim=True), v), attend(v.mean(1, keepdim=True), q)


def test_query_from_another_attended_input_is_specialized():
    res, row = _row(Parallel(), _x(2, L, D), _x(2, T, D, seed=1))
    assert row["query_type"] == "Specialized"
    assert "another input that the model attends over" in res.recognised[0].values[
        "query_type"][1]


def test_query_from_an_input_no_attention_reads_stays_basic():
    class Cross(nn.Module):
        def forward(self, v, q):
            return attend(q, v)

    _, row = _row(Cross(), _x(2, L, D), _x(2, T, D, seed=1))
    assert row["query_type"] == "Basic"


class MemN2N(nn.Module):
    """Sukhbaatar et al.'s end-to-end memory network: three hops over the same memory, the
    query refined by each hop's output, q <- q + o (eq. 41-42)."""

    def forward(self, u, m):
        q = u
        for _ in range(3):
            q = q + attend(q, m)
        return q


def test_memory_network_is_multi_hop():
    res, row = _row(MemN2N(), _x(2, 1, D), _x(2, L, D, seed=1))
    assert len(res.recognised) == 3
    assert row["query_multiplicity"] == "Multi-Hop" and row["query_type"] == "Basic"
    assert "previous application" in res.recognised[1].values["query_multiplicity"][1]


class RNNDecoder(nn.Module):
    """A decoder unrolled over time: its state starts from the mean of the keys and then reads
    the target token and the context at each step (Bahdanau et al.)."""

    def __init__(self):
        super().__init__()
        self.cell = nn.GRUCell(2 * D, D)

    def forward(self, y, x):
        s = x.mean(1)  # the first query reads the keys' input alone
        out = []
        for t in range(y.shape[1]):
            c = attend(s.unsqueeze(1), x).squeeze(1)  # s_(t-1) queries (eq. 5-6)
            s = self.cell(torch.cat([y[:, t], c], -1), s)
            out.append(s)
        return torch.stack(out, 1)


def test_decoder_steps_are_one_basic_attention_and_no_hops():
    res, row = _row(RNNDecoder(), _x(2, T, D), _x(2, L, D, seed=1))
    assert len(res.recognised) == T
    assert row["query_type"] == "Basic" and row["query_multiplicity"] == "Singular"
