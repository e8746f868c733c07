"""Axes followed back through the graph (`normalise.axis_at`, `heads._split_axis`).

Which operand of a score product holds the keys: the one whose rows the weights normalise,
followed through transposes after the product ((K Q^T)^T is Q K^T: the keys are the first
operand's rows), checked by the query's input named in the reason. Before, the first operand
was the query whatever came after the product, and the weights' axis was never looked at.

Heads read from code without a batch axis: an
unbatched multi-head layer's weights are (H, Lq, Lk), the shape a batch of single-head maps
has too, so the heads are told by where the leading axis comes from (a view splitting the
features into (H, d)), not by its place. Each module is checked first against a float64
reference of eq. 35 (heads' contexts concatenated) written here. Also: lengths known only
when the model runs (rows picked by `nonzero`) are read, not guarded on, and a reading
that would have to compare such sizes is refused for that attention alone."""
import math

import pytest
import torch
from torch import nn

import taxcompile
from taxcompile.torchread import recognise

D, H = 8, 2


class Heads(nn.Module):
    """Scaled dot-product attention with H heads; ``batched``: x is (B, L, D), else (L, D)
    with the heads on the leading axis of q, k, v (no batch). ``heads = 1``: one head."""

    def __init__(self, heads=H, batched=True, pick=False):
        super().__init__()
        self.h, self.batched, self.pick = heads, batched, pick
        self.q, self.k, self.v = (nn.Linear(D, D) for _ in range(3))

    def split(self, t):
        if self.batched:
            return t.view(t.shape[0], t.shape[1], self.h, D // self.h).transpose(1, 2)
        return t.view(-1, self.h, D // self.h).transpose(0, 1)  # (H, L, d)

    def forward(self, x, keep=None):
        if self.pick:  # the rows kept: a length known only at run time
            x = x[torch.nonzero(keep).squeeze(1)]
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D // self.h), -1)
        c = a @ v
        if self.batched:
            return c.transpose(1, 2).reshape(x.shape[0], x.shape[1], D)
        return c.transpose(0, 1).reshape(-1, D)


def _reference(m, x):
    """Eq. 35 head by head in float64: c_h = softmax(q_h k_h^T / sqrt(d)) v_h, concatenated."""
    x = x.double()
    lin = {n: (getattr(m, n).weight.double(), getattr(m, n).bias.double()) for n in "qkv"}
    q, k, v = ((x @ w.T + b) for w, b in (lin[n] for n in "qkv"))
    d = D // m.h
    out = []
    for h in range(m.h):
        s = slice(h * d, (h + 1) * d)
        e = q[..., s] @ k[..., s].transpose(-1, -2) / math.sqrt(d)
        out.append(torch.softmax(e, -1) @ v[..., s])
    return torch.cat(out, -1)


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("batched", [True, False])
def test_heads_are_read_with_or_without_a_batch_axis(batched):
    m = Heads(batched=batched).eval()
    x = _x(3, 7, D) if batched else _x(7, D)
    torch.testing.assert_close(m(x).double(), _reference(m, x), rtol=1e-5, atol=1e-6)
    (a,) = taxcompile.classify(m, (x,)).attentions
    label, why = a.values["query_multiplicity"]
    assert label == "Multi-Head" and a.heads == H, why  # unbatched: read Singular before


def test_a_batch_of_single_head_maps_is_one_head():
    # (B, L, L): the leading axis is the input's batch, not a split of the features
    m = Heads(heads=1).eval()
    x = _x(2, 7, D)
    torch.testing.assert_close(m(x).double(), _reference(m, x), rtol=1e-5, atol=1e-6)
    (a,) = taxcompile.classify(m, (x,)).attentions
    assert a.values["query_multiplicity"][0] == "Singular" and a.heads == 1


def test_a_length_known_only_at_run_time_is_read_not_guarded_on():
    # rows picked by nonzero: torch.export sizes them with an unbacked symbol (u0); reading
    # the heads asked the tracer whether u0 != 0 and raised (a traceback, not an answer)
    m = Heads(batched=False, pick=True).eval()
    x, keep = _x(10, D), _x(10, seed=1) > 0
    torch.testing.assert_close(m(x, keep).double(), _reference(m, x[keep]), rtol=1e-5, atol=1e-6)
    got = taxcompile.classify(m, (x, keep))
    (a,) = got.attentions
    assert got.method == "torch.export"
    assert a.recognised and a.values["query_multiplicity"][0] == "Multi-Head" and a.heads == H


def test_a_reading_that_would_guard_on_data_is_refused_for_that_attention(monkeypatch):
    import sympy
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    def guard(*args, **kwargs):
        u0 = sympy.Symbol("u0", integer=True)
        raise GuardOnDataDependentSymNode(sympy.Ne(u0, 0), "Could not guard on Ne(u0, 0)")

    monkeypatch.setattr(recognise.talking, "note", guard)
    m = Heads().eval()
    (a,) = taxcompile.classify(m, (_x(2, 7, D),)).attentions
    assert not a.recognised and "known only when the model runs" in a.why_not
    assert "Ne(u0, 0)" in a.why_not


class Cross(nn.Module):
    """Cross-attention: queries from y, keys and values from x; ``flipped``: the scores
    written as (K Q^T)^T, the same numbers."""

    def __init__(self, flipped):
        super().__init__()
        self.q, self.k, self.flipped = nn.Linear(D, D), nn.Linear(D, D), flipped

    def forward(self, x, y):
        k, q = self.k(x), self.q(y)  # (B, 7, D), (B, 5, D)
        e = (k @ q.transpose(1, 2)).transpose(1, 2) if self.flipped else q @ k.transpose(1, 2)
        return torch.softmax(e, -1) @ k  # (B, 5, D)


@pytest.mark.parametrize("flipped", [False, True])
def test_the_query_is_the_stream_whose_rows_the_weights_keep(flipped):
    m = Cross(flipped).eval()
    x, y = _x(2, 7, D), _x(2, 5, D, seed=1)
    q, k = m.q(y).double(), m.k(x).double()
    want = torch.softmax(q @ k.transpose(1, 2), -1) @ k  # eq. 2-5 with a dot score
    torch.testing.assert_close(m(x, y).double(), want, rtol=1e-5, atol=1e-6)
    (a,) = taxcompile.classify(m, (x, y)).attentions
    label, why = a.values["query_type"]
    # args_1 is y: flipped, the query was read from x (args_0) before
    assert label == "Basic" and "reads args_1, which the keys" in why, why


class Columns(nn.Module):
    """Weights normalised over the score's rows (softmax over dim -2 of Q K^T): each column
    a distribution over the first operand's positions, so those are the keys."""

    def __init__(self):
        super().__init__()
        self.q, self.k = nn.Linear(D, D), nn.Linear(D, D)

    def forward(self, x, y):
        a, b = self.q(y), self.k(x)  # (B, 5, D), (B, 7, D)
        w = torch.softmax(a @ b.transpose(1, 2), -2)  # (B, 5, 7): over y's positions
        return w.transpose(1, 2) @ a  # (B, 7, D): x's positions query y's


def test_weights_over_the_first_operands_rows_make_it_the_keys():
    m = Columns().eval()
    x, y = _x(2, 7, D), _x(2, 5, D, seed=1)
    a, b = m.q(y).double(), m.k(x).double()
    want = torch.softmax(b @ a.transpose(1, 2), -1) @ a  # queries b (from x), keys a (from y)
    torch.testing.assert_close(m(x, y).double(), want, rtol=1e-5, atol=1e-6)
    (att,) = taxcompile.classify(m, (x, y)).attentions
    label, why = att.values["query_type"]
    assert label == "Basic" and "reads args_0, which the keys" in why, why


class Blocks(nn.Module):
    """Block-local attention: the sequence cut into blocks of ``c`` positions by a view, each
    block's queries scored against its own block's keys (``own``) or every key; ``heads``
    split from the features before the blocks: (B, H, n, c, c)."""

    def __init__(self, heads=1, c=4, own=True):
        super().__init__()
        self.h, self.c, self.own = heads, c, own
        self.q, self.k, self.v = (nn.Linear(D, D) for _ in range(3))

    def forward(self, x):
        B, L, _ = x.shape
        h, d, n = self.h, D // self.h, L // self.c

        def cut(t):  # (B, L, D) -> (B, H, n, c, d)
            return t.view(B, n, self.c, h, d).permute(0, 3, 1, 2, 4)

        q = cut(self.q(x))
        if self.own:
            k, v = cut(self.k(x)), cut(self.v(x))
        else:  # every key for every block: (B, H, 1, L, d)
            k, v = (t.view(B, L, h, d).permute(0, 2, 1, 3).unsqueeze(2)
                    for t in (self.k(x), self.v(x)))
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), -1)
        c = a @ v  # (B, H, n, c, d)
        return c.permute(0, 2, 3, 1, 4).reshape(B, L, D)


def _blocks_reference(m, x):
    """Eq. 35 with a block-diagonal window (own) or none, head by head, float64."""
    x = x.double()
    q, k, v = ((x @ getattr(m, n).weight.double().T + getattr(m, n).bias.double()) for n in "qkv")
    L, d = x.shape[1], D // m.h
    pos = torch.arange(L)
    same_block = (pos[:, None] // m.c) == (pos[None, :] // m.c)
    out = []
    for h in range(m.h):
        s = slice(h * d, (h + 1) * d)
        e = q[..., s] @ k[..., s].transpose(-1, -2) / math.sqrt(d)
        if m.own:
            e = e.masked_fill(~same_block, float("-inf"))
        out.append(torch.softmax(e, -1) @ v[..., s])
    return torch.cat(out, -1)


@pytest.mark.parametrize("heads", [1, 2])
def test_blocks_cut_from_the_sequence_are_local_and_not_heads(heads):
    m = Blocks(heads).eval()
    x = _x(2, 12, D)
    torch.testing.assert_close(m(x).double(), _blocks_reference(m, x), rtol=1e-5, atol=1e-6)
    (a,) = taxcompile.classify(m, (x,)).attentions
    # before: Global, and the 3 blocks read as 3 heads
    assert a.values["alignment"][0] == "Local", a.values["alignment"]
    assert a.heads == heads, a.values["query_multiplicity"]
    assert a.values["query_multiplicity"][0] == ("Multi-Head" if heads > 1 else "Singular")


def test_blocks_of_queries_that_see_every_key_are_global_and_not_heads():
    m = Blocks(own=False).eval()
    x = _x(2, 12, D)
    torch.testing.assert_close(m(x).double(), _blocks_reference(m, x), rtol=1e-5, atol=1e-6)
    (a,) = taxcompile.classify(m, (x,)).attentions
    assert a.values["alignment"][0] == "Global" and a.heads == 1, a.values


class Sentences(nn.Module):
    """Self-attention over the words of each sentence of a document, x: (B, T, L, D) with T
    sentences: one learned projection for all of them; ``heads`` split from the features
    after it, (B, T, H, L, L)."""

    def __init__(self, heads=1):
        super().__init__()
        self.h = heads
        self.q, self.k, self.v = (nn.Linear(D, D) for _ in range(3))

    def forward(self, x):
        B, T, L, _ = x.shape
        h, d = self.h, D // self.h

        def split(t):  # (B, T, L, D) -> (B, T, H, L, d), or as it is with one head
            return t.view(B, T, L, h, d).transpose(2, 3) if h > 1 else t

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        c = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), -1) @ v
        return c.transpose(2, 3).reshape(B, T, L, D) if h > 1 else c


@pytest.mark.parametrize("heads", [1, 2])
def test_an_input_axis_projected_alike_is_no_heads_axis(heads):
    m = Sentences(heads).eval()
    x = _x(2, 3, 5, D)
    torch.testing.assert_close(m(x).double(), _reference(m, x), rtol=1e-5, atol=1e-6)
    (a,) = taxcompile.classify(m, (x,)).attentions
    # one head: the 3 sentences read as 3 heads before
    assert a.heads == heads, a.values["query_multiplicity"]


class Bare(nn.Module):
    """Attention over given q, k, v of shape (B, H, L, d): no learned map says what axis 1
    holds, so it is read as heads, as before."""

    def forward(self, q, k, v):
        return torch.softmax(q @ k.transpose(-1, -2) / 2.0, -1) @ v


def test_given_per_head_streams_are_still_heads():
    q, k, v = _x(2, 4, 5, 4), _x(2, 4, 5, 4, seed=1), _x(2, 4, 5, 4, seed=2)
    (a,) = taxcompile.classify(Bare(), (q, k, v)).attentions
    assert a.heads == 4 and a.values["query_multiplicity"][0] == "Multi-Head"
