"""Readings torchread once got wrong on real code (local-attention, rotary embeddings), each
on a module written here from its equation, with a near miss that must keep another value
or be refused with its reason."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import taxcompile

B, L, W = 2, 8, 4  # batch, length, block (window) size: 2 blocks


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _look_around(x):
    """(N, windows, W, d) -> (N, windows, 3W, d): each block's keys and its neighbours'."""
    p = F.pad(x, (0, 0, 0, 0, 1, 1))
    return p.unfold(1, 3, 1).movedim(-1, 2).flatten(2, 3)


def blocked_attention(q, k, v, scale):
    """Blocked local attention over (N, L, d) streams: each block of W queries against its
    own and its neighbours' keys, softmax(scale q k^T) v (padding keys score as is: no
    mask, as local-attention's default)."""
    n, d = q.shape[0], q.shape[-1]
    bq, bk, bv = (t.reshape(n, L // W, W, d) for t in (q, k, v))
    bk, bv = _look_around(bk), _look_around(bv)
    w = (torch.einsum("nwid,nwjd->nwij", bq, bk) * scale).softmax(-1)
    return torch.einsum("nwij,nwjd->nwid", w, bv).reshape(n, L, d)


class BlockedHeads(nn.Module):
    """H heads split from the features and folded into the batch before the blocks."""

    def __init__(self, heads, d=8):
        super().__init__()
        self.h = heads
        self.qkv = nn.Linear(d, 3 * d, bias=False)

    def forward(self, x):
        d = x.shape[-1] // self.h
        q, k, v = (t.view(B, L, self.h, d).transpose(1, 2).reshape(B * self.h, L, d)
                   for t in self.qkv(x).chunk(3, -1))
        o = blocked_attention(q, k, v, d ** -0.5)
        return o.view(B, self.h, L, d).transpose(1, 2).reshape(B, L, -1)


@pytest.mark.parametrize("heads, want", [(1, "Singular"), (2, "Multi-Head"),
                                         (4, "Multi-Head")])
def test_blocked_heads_are_the_folded_axis_not_the_windows(heads, want):
    """The weights are (batch * heads, windows, W, 3W): axis 1 holds the 2 windows, which
    read as 2 heads before; the heads are what the view folds into the batch."""
    m = BlockedHeads(heads)
    (a,) = taxcompile.classify(m, (_x(B, L, 8),)).recognised
    label, why = a.values["query_multiplicity"]
    assert label == want, why
    assert f"folds {heads} head" in why and "2 windows" in why
    assert a.heads == heads
    assert a.values["alignment"][0] == "Local"


class BlockedNoFold(nn.Module):
    """Blocks over a learned map of the input, nothing folded into the batch: the reader
    cannot tell heads from the weights' shape (its axis 1 is the windows)."""

    def __init__(self, d=8):
        super().__init__()
        self.q = nn.Linear(d, d)

    def forward(self, x):
        return blocked_attention(self.q(x), x, x, 1.0)


def test_blocks_without_a_fold_refuse_the_heads():
    res = taxcompile.classify(BlockedNoFold(), (_x(B, L, 8),))
    assert not res.recognised, res.text()
    assert "2 windows" in res.text() and "would be a guess" in res.text()
