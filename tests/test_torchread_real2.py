"""Real code's forms torchread reads since the first pass over it: a rotary embedding whose
sines and cosines were computed once and held in buffers (Hugging Face's older Llama,
GPT-NeoX, GPT-J's interleaved pairs), so no `sin`/`cos` op is in the graph. Each module is
written here from RoPE's equation and checked against it in float64; the near misses hold
tables that are no rotation by positions and must not be looked through."""
import math

import pytest
import torch
from torch import nn

import taxcompile

B, L, D, H, N = 2, 6, 16, 2, 32  # batch, length, features, heads, positions held
HD = D // H


def _x(seed=0):
    return torch.randn(B, L, D, generator=torch.Generator().manual_seed(seed))


def _angles(n=N, d=HD, base=10000.0, dtype=torch.float32):
    """theta[p, i] = p * base^(-2i/d): position times frequency, one per pair (RoPE eq. 15)."""
    inv = 1.0 / base ** (torch.arange(0, d, 2, dtype=dtype) / d)
    return torch.outer(torch.arange(n, dtype=dtype), inv)


def rotate_half(x):
    x1, x2 = x.chunk(2, -1)
    return torch.cat([-x2, x1], -1)


def rotate_pairs(x):
    """GPT-J's convention: each pair (x_2i, x_2i+1) turned, (-x_2i+1, x_2i)."""
    return torch.stack([-x[..., 1::2], x[..., 0::2]], -1).flatten(-2)


def tables(kind):
    """(cos, sin) of shape (N, HD) for the halves' convention, or a near miss."""
    t = _angles()
    if kind == "pairs":
        t = t.repeat_interleave(2, -1)
        return t.cos(), t.sin()
    if kind == "random":  # arbitrary tensors named cos and sin
        g = torch.Generator().manual_seed(1)
        return torch.randn(N, HD, generator=g), torch.randn(N, HD, generator=g)
    if kind == "angles":  # a turn of each pair by random angles: not position times frequency
        a = torch.rand(N, HD // 2, generator=torch.Generator().manual_seed(2)) * 6
        a[0] = 0.0
        t = a
    if kind == "unpaired":  # the halves turned by different frequencies: no rotation
        return torch.cat([t, 2 * t], -1).cos(), torch.cat([t, 2 * t], -1).sin()
    t = torch.cat([t, t], -1)
    return t.cos(), t.sin()


class CachedRotary(nn.Module):
    """softmax(rope(q) rope(k)^T / sqrt(d)) v over H heads, cos and sin registered buffers
    sliced to the length (HF's older LlamaRotaryEmbedding); ``alone``: the queries alone
    turned; ``learned``: the tables are parameters instead."""

    def __init__(self, kind="halves", alone=False, learned=False):
        super().__init__()
        self.alone, self.rot = alone, rotate_pairs if kind == "pairs" else rotate_half
        self.q, self.k, self.v = (nn.Linear(D, D, bias=False) for _ in range(3))
        cos, sin = tables(kind)
        if learned:
            self.cos_cached = nn.Parameter(cos[None, None])
            self.sin_cached = nn.Parameter(sin[None, None])
        else:
            self.register_buffer("cos_cached", cos[None, None], persistent=False)
            self.register_buffer("sin_cached", sin[None, None])

    def turn(self, x):
        n = x.shape[-2]
        return x * self.cos_cached[:, :, :n] + self.rot(x) * self.sin_cached[:, :, :n]

    def heads(self, lin, x):
        return lin(x).view(x.shape[0], x.shape[1], H, HD).transpose(1, 2)

    def scores(self, x):
        q, k = self.heads(self.q, x), self.heads(self.k, x)
        return self.turn(q) @ (k if self.alone else self.turn(k)).transpose(-1, -2) / math.sqrt(HD)

    def forward(self, x):
        w = self.scores(x).softmax(-1)
        return (w @ self.heads(self.v, x)).transpose(1, 2).reshape(x.shape[0], x.shape[1], D)


def rope64(x, pairs=False):
    """RoPE in float64 from its equation: each pair (x_i, x_i') turned by p theta_i."""
    t = _angles(x.shape[-2], dtype=torch.float64)
    if pairs:
        a, b = x[..., 0::2], x[..., 1::2]
        c, s = t.cos(), t.sin()
        return torch.stack([a * c - b * s, a * s + b * c], -1).flatten(-2)
    a, b = x.chunk(2, -1)
    return torch.cat([a * t.cos() - b * t.sin(), a * t.sin() + b * t.cos()], -1)


@pytest.mark.parametrize("kind", ["halves", "pairs"])
def test_the_modules_turn_by_rope(kind):
    m = CachedRotary(kind).double()
    x = _x().double()
    with torch.no_grad():
        q, k = m.heads(m.q, x), m.heads(m.k, x)
        pairs = kind == "pairs"
        want = rope64(q, pairs) @ rope64(k, pairs).transpose(-1, -2) / math.sqrt(HD)
        assert torch.allclose(m.scores(x), want, atol=1e-5)


@pytest.mark.parametrize("kind", ["halves", "pairs"])
@pytest.mark.parametrize("alone", [False, True])
def test_rotary_from_cached_tables_is_looked_through(kind, alone):
    """rope(W_q x)^T [rope](W_k x) / sqrt(d): the turn is no learned map, so the score is
    Scaled Multiplicative (the queries alone turned read as General before), and the reason
    names each rotation."""
    (a,) = taxcompile.classify(CachedRotary(kind, alone), (_x(),)).recognised
    label, why = a.values["scoring"]
    assert label == "Scaled Multiplicative", why
    assert why.count("by the sines and cosines of positions") == (1 if alone else 2), why


@pytest.mark.parametrize("kind, learned", [("random", False), ("angles", False),
                                           ("unpaired", False), ("halves", True)])
def test_tables_of_no_rotation_by_positions_are_not_looked_through(kind, learned):
    """Random tensors, a turn by random angles, halves turned by different frequencies, and
    learned tables (parameters, whatever their start): no rotation by position times
    frequency, so the queries stay what they are, a position-dependent map of W_q x."""
    m = CachedRotary(kind, alone=True, learned=learned)
    (a,) = taxcompile.classify(m, (_x(),)).recognised
    label, why = a.values["scoring"]
    assert "sines and cosines" not in why
    assert label == "General", why


class SizedByValues(CachedRotary):
    """The same over the positions a value test keeps (all of them here): a length read from
    values, which torch.export refuses and make_fx traces, the buffers its leading inputs."""

    def forward(self, x):
        keep = torch.nonzero(x.abs().sum((0, 2)) >= 0).squeeze(-1)
        if keep.numel() < 2:  # a guard on the count: torch.export cannot decide it
            return x
        return super().forward(x[:, keep])


def test_cached_tables_are_read_from_make_fx_too():
    res = taxcompile.classify(SizedByValues(alone=True), (_x(),))
    assert "make_fx" in res.text()
    (a,) = res.recognised
    label, why = a.values["scoring"]
    assert label == "Scaled Multiplicative" and "sines and cosines" in why, why


class PickedRotary(CachedRotary):
    """GPT-NeoX's and the older Llama's form: the tables' rows picked by `position_ids`, an
    input of integer positions (rows read by position are no data)."""

    def turn(self, x, pos=None):
        c, s = self.cos_cached[0, 0][pos][:, None], self.sin_cached[0, 0][pos][:, None]
        return x * c + self.rot(x) * s

    def forward(self, x, position_ids):
        self.pos = position_ids
        return super().forward(x)

    def scores(self, x):
        q, k = self.heads(self.q, x), self.heads(self.k, x)
        return self.turn(q, self.pos) @ k.transpose(-1, -2) / math.sqrt(HD)


class GivenRotary(CachedRotary):
    """Hugging Face's attention layers today: the sines and cosines given as inputs
    (`position_embeddings = (cos, sin)`), the queries alone turned here."""

    def forward(self, x, cos, sin):
        self.cos_cached, self.sin_cached = cos[:, None], sin[:, None]
        return super().forward(x)


def _given(kind):
    cos, sin = tables(kind)
    return {"x": _x(), "cos": cos[:L][None].expand(B, L, HD).clone(),
            "sin": sin[:L][None].expand(B, L, HD).clone()}


def test_tables_picked_by_position_ids_are_looked_through():
    pos = torch.arange(L)[None].expand(B, L).clone()
    res = taxcompile.classify(PickedRotary(alone=True), {"x": _x(), "position_ids": pos})
    (a,) = res.recognised
    label, why = a.values["scoring"]
    assert label == "Scaled Multiplicative" and "sines and cosines" in why, why


@pytest.mark.parametrize("kind, want", [("halves", "Scaled Multiplicative"),
                                        ("random", "General"), ("angles", "General")])
def test_tables_given_as_inputs_are_read_from_their_values(kind, want):
    """The example's tables are read: sines and cosines of positions are a rotation, other
    values (random tensors, random angles) are a position-dependent map, not looked through."""
    m = GivenRotary(alone=True)
    del m.cos_cached, m.sin_cached
    (a,) = taxcompile.classify(m, _given(kind)).recognised
    label, why = a.values["scoring"]
    assert label == want, why
    assert ("sines and cosines" in why) == (want != "General"), why



def test_token_ids_are_data_not_positions():
    """examples/qk_norm.attn: queries and keys from token ids (an embedding), l2-normalised,
    then turned by rotary positions. The streams read only an integer input, as position
    ids do, but an embedding looks it up: they are data, turned by the rotation, and the
    normalised streams behind it read as the spec's cosine (taken for a position table, a
    stream stopped the rotation being seen and the score read Scaled Multiplicative)."""
    from pathlib import Path

    from taxcompile import api

    spec = Path(__file__).resolve().parents[1] / "examples" / "qk_norm.attn"
    mod = api.module(spec, "qk_norm")
    cfg = api.config(mod, tiny=True)
    inputs = {k: v for k, v in mod.example_inputs(cfg=cfg).items() if not k.endswith("_mask")}
    res = taxcompile.classify(mod.Model(cfg).eval(), inputs)
    assert res.row()["scoring"] == "Similarity", res.text()
    assert "turns" in res.attentions[0].values["scoring"][1]
