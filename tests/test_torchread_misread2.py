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


# --- a constant scaling before a rotary embedding; a rotation of the queries alone ---

def rope(x):
    """x cos + rotate_half(x) sin over positions (axis -2), halves of the features turned."""
    n, d = x.shape[-2], x.shape[-1]
    freq = torch.arange(n, dtype=x.dtype)[:, None] * 10000.0 ** (
        -torch.arange(0, d // 2, dtype=x.dtype) / (d // 2))
    cos, sin = torch.cat([freq.cos()] * 2, -1), torch.cat([freq.sin()] * 2, -1)
    x1, x2 = x.chunk(2, -1)
    return x * cos + torch.cat([-x2, x1], -1) * sin


class Rotary(nn.Module):
    """softmax(rope(c q) rope(k)^T) v, q = W_q x, k = W_k x (local-attention's order: the
    scale c = d^-1/2 before the rotation); ``cos_only``: the near miss c q cos + rot(q) sin,
    the constant on one term; ``queries``: the queries alone turned (keys unturned)."""

    def __init__(self, cos_only=False, queries_alone=False, d=8):
        super().__init__()
        self.cos_only, self.alone, self.d = cos_only, queries_alone, d
        self.q, self.k, self.v = (nn.Linear(d, d) for _ in range(3))

    def _turn(self, x, c):
        if not self.cos_only:
            return rope(x * c)
        n, d = x.shape[-2], x.shape[-1]
        t = rope(torch.eye(n, d, dtype=x.dtype)[None])  # any position-dependent factors
        x1, x2 = x.chunk(2, -1)
        return x * c * t + torch.cat([-x2, x1], -1) * torch.sin(t)

    def scores(self, x):
        q, k = self.q(x), self.k(x)
        c = self.d ** -0.5
        if self.alone:
            return (rope(q) @ k.transpose(-1, -2)) * c
        return self._turn(q, c) @ self._turn(k, 1.0).transpose(-1, -2)

    def forward(self, x):
        return self.scores(x).softmax(-1) @ self.v(x)


def test_a_scale_before_the_rotation_is_a_scaled_score():
    m = Rotary().double()
    x = _x(B, L, 8).double()
    with torch.no_grad():  # the score is rope(q)^T rope(k) / sqrt(d): a constant scaling
        want = rope(m.q(x)) @ rope(m.k(x)).transpose(-1, -2) / 8 ** 0.5
        assert torch.allclose(m.scores(x), want)
    (a,) = taxcompile.classify(Rotary(), (_x(B, L, 8),)).recognised
    label, why = a.values["scoring"]
    assert label == "Scaled Multiplicative", why
    assert "sines and cosines" in why


def test_a_constant_on_one_term_of_a_turn_is_no_scaling():
    """c q t + rot(q) sin(t): not c times a rotation of q, so no scaling is read."""
    (a,) = taxcompile.classify(Rotary(cos_only=True), (_x(B, L, 8),)).recognised
    label, why = a.values["scoring"]
    assert label == "Multiplicative", why


def test_queries_alone_turned_are_no_learned_map_plus_bias():
    """rope(W_q x + b_q)^T (W_k x + b_k) / sqrt(d): both streams are projections, the
    rotation turns the queries by their positions, no learned map of one stream alone."""
    (a,) = taxcompile.classify(Rotary(queries_alone=True), (_x(B, L, 8),)).recognised
    label, why = a.values["scoring"]
    assert label == "Scaled Multiplicative", why
    assert "sines and cosines" in why


class WindowGeneral(nn.Module):
    """softmax_j((W x_i + b)^T x_(i+j-1) / sqrt(d)) over each query's window of 3 keys."""

    def __init__(self, d=8):
        super().__init__()
        self.q = nn.Linear(d, d)

    def forward(self, x):
        win = F.pad(x, (0, 0, 1, 1)).unfold(1, 3, 1)  # (B, L, d, 3)
        a = (torch.einsum("bld,bldt->blt", self.q(x), win) / 8 ** 0.5).softmax(-1)
        return torch.einsum("blt,bldt->bld", a, win)


def test_a_general_score_says_its_constant():
    """Biased General is right (the keys are the input itself), and the reason says the
    1/sqrt(d) that Table III's General has no value for."""
    (a,) = taxcompile.classify(WindowGeneral(), (_x(B, L, 8),)).recognised
    label, why = a.values["scoring"]
    assert label == "Biased General" and "scaled by a constant" in why, why


class WindowProjected(WindowGeneral):
    """The near miss: keys projected before their windows are cut, (W x_i + b)^T (W_k x + b_k)
    over the window: both streams are learned maps, the unfold only gathers keys."""

    def __init__(self, d=8):
        super().__init__(d)
        self.k = nn.Linear(d, d)

    def forward(self, x):
        win = F.pad(self.k(x), (0, 0, 1, 1)).unfold(1, 3, 1)
        a = (torch.einsum("bld,bldt->blt", self.q(x), win) / 8 ** 0.5).softmax(-1)
        return torch.einsum("blt,bldt->bld", a, win)


def test_keys_projected_before_their_windows_are_no_general_score():
    (a,) = taxcompile.classify(WindowProjected(), (_x(B, L, 8),)).recognised
    label, why = a.values["scoring"]
    assert label == "Scaled Multiplicative", why


def rope_halves(x):
    """RoPE with the halves' pairs turned written out, [x1 cos - x2 sin; x1 sin + x2 cos]
    (taxcompile's own rotary code, the half-split convention); x: (B, L, d)."""
    d = x.shape[-1] // 2
    ang = torch.arange(x.shape[1])[:, None] * 10000.0 ** (-torch.arange(d) / d)
    x1, x2 = x[..., :d], x[..., d:]
    return torch.cat([x1 * ang.cos() - x2 * ang.sin(), x1 * ang.sin() + x2 * ang.cos()], -1)


class NormedRope(nn.Module):
    """qk-norm before RoPE: each score 10 cos(R_i q_i, R_j k_j); ``norm`` False: plain q.k."""

    def __init__(self, norm: bool, d=8):
        super().__init__()
        self.norm, self.q, self.k = norm, nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        q, k = self.q(x), self.k(x)
        if self.norm:
            q, k = F.normalize(q, dim=-1) * 10, F.normalize(k, dim=-1)
        q, k = rope_halves(q), rope_halves(k)
        return (q @ k.transpose(-1, -2)).softmax(-1) @ x


def test_normalised_streams_behind_a_written_out_rotation_are_a_cosine():
    """The turn keeps each vector's norm, so the score stays 10 cos(q, k): Similarity; it
    read Scaled Multiplicative before (the rotation hid the norms)."""
    x = _x(B, L, 8).double()
    m = NormedRope(True).double()
    q, k = (F.normalize(rope_halves(F.normalize(f(x), dim=-1)), dim=-1) for f in (m.q, m.k))
    want = (10 * q @ k.transpose(-1, -2)).softmax(-1) @ x  # float64, eq. of the cosine
    assert torch.allclose(m(x), want, atol=1e-10)
    (a,) = taxcompile.classify(m.float(), (_x(B, L, 8),)).recognised
    assert a.values["scoring"][0] == "Similarity", a.values["scoring"][1]
    assert "a rotation" in a.values["scoring"][1]


def test_a_written_out_rotation_of_plain_streams_is_a_dot_product():
    (a,) = taxcompile.classify(NormedRope(False), (_x(B, L, 8),)).recognised
    assert a.values["scoring"][0] == "Multiplicative", a.values["scoring"][1]


class GainedRope(NormedRope):
    """RMS qk-norm's form before RoPE: q and k normalised, times learned gains per feature."""

    def __init__(self, d=8):
        super().__init__(True, d)
        self.gq, self.gk = nn.Parameter(torch.rand(d) + 0.5), nn.Parameter(torch.rand(d) + 0.5)

    def forward(self, x):
        q, k = F.normalize(self.q(x), dim=-1) * self.gq, F.normalize(self.k(x), dim=-1) * self.gk
        q, k = rope_halves(q), rope_halves(k)
        return (q @ k.transpose(-1, -2)).softmax(-1) @ x


def test_learned_gains_behind_a_rotation_are_no_cosine():
    """q^T diag(g_q g_k) k over normalised streams is no cosine: it read Similarity when the
    turn's walk took a learned gain for one of its constant factors; now refused."""
    res = taxcompile.classify(GainedRope(), (_x(B, L, 8),))
    assert "Similarity" not in res.row().get("scoring", ""), res.text()
