"""`taxcompile lift --torch` writes the position terms it reads: rotary positions where the
queries and keys are both turned by the sine and cosine of their positions after their
projections, an ALiBi bias where a per-head slope times a distance is added to the scores.
The oracle is the original spec (its statements carry the term, its row is the sketch's
row) and, for code no one here wrote, what the library was asked to build."""
import re

import pytest
import torch
from torch import nn

from taxcompile import api
from taxcompile.torchread.lift import lift_module

import torchread_models as tm  # noqa: E402  (tests/ is on sys.path under pytest)
from test_torchread_lift import COMPARED, ROOT, _built  # noqa: E402


def lift(*args):
    return re.sub(r" +=", " =", lift_module(*args))


def _bodies(text):  # in a repeat or not
    return [b for _, b in re.findall(r"^( +)attention \w+ \{\n(.*?)^\1\}", text, re.M | re.S)]


@pytest.mark.parametrize("key, term", [("examples/rotary.attn:rotary", "position = rotary"),
                                       ("examples/alibi.attn:alibi", "bias = alibi")])
def test_compiled_example_lifts_with_its_position_term(key, term):
    model, inputs = _built(key)
    text = lift(model, inputs, key.split(":")[1])
    bodies = _bodies(text)
    assert bodies and all(term in b for b in bodies), text
    other = "bias = alibi" if term.startswith("position") else "position = rotary"
    assert other not in text
    got = api.classify(text).row()
    want = api.classify(str(ROOT / key.split(":")[0]), key.split(":")[1]).row()
    assert {d: got[d] for d in COMPARED} == {d: want[d] for d in COMPARED}


@pytest.mark.parametrize("factory, term", [("xt_rotary", "position = rotary"),
                                           ("xt_alibi", "bias = alibi")])
def test_x_transformers_position_option_lifts_as_the_term(factory, term):
    text = lift(*getattr(tm, factory)(), factory)
    bodies = _bodies(text)
    assert len(bodies) == 1 and term in bodies[0], text
    api.load(text)  # the sketch checks
    if factory == "xt_rotary":  # x-transformers turns max(dim_head // 2, 32) = 32 of 64
        assert "turns 32 of each head's 64 features" in text


def test_plain_encoder_lifts_no_position_term():
    text = lift(*tm.xt_encoder(), "plain")
    assert "position =" not in text and "bias =" not in text


class _Attn(nn.Module):
    """One head; ``where`` says what the sines and cosines of positions touch: the input
    before the projections (sinusoidal absolute positions), the values, or the queries
    alone (keys unturned)."""

    def __init__(self, where, d=8):
        super().__init__()
        self.where = where
        self.q, self.k, self.v = (nn.Linear(d, d) for _ in range(3))

    def _turn(self, x):
        pos = torch.arange(x.shape[1], dtype=x.dtype)[:, None]
        freq = pos * torch.pow(10000.0, -torch.arange(0, x.shape[-1] // 2, dtype=x.dtype))
        cos, sin = torch.cat([freq.cos()] * 2, -1), torch.cat([freq.sin()] * 2, -1)
        x1, x2 = x.chunk(2, -1)
        return x * cos + torch.cat([-x2, x1], -1) * sin

    def forward(self, x):
        if self.where == "input":
            x = x + torch.sin(torch.arange(x.shape[1], dtype=x.dtype))[:, None]
        q, k, v = self.q(x), self.k(x), self.v(x)
        if self.where == "values":
            v = self._turn(v)
        if self.where == "query":
            q = self._turn(q)
        if self.where == "both":
            q, k = self._turn(q), self._turn(k)
        return torch.softmax(q @ k.transpose(-1, -2) / 8 ** 0.5, -1) @ v


@pytest.mark.parametrize("where", ["input", "values", "query"])
def test_sines_and_cosines_not_turning_q_and_k_lift_no_rotary(where):
    text = lift(_Attn(where), (torch.randn(2, 5, 8),), "near")
    assert "position = rotary" not in text
    api.load(text)  # the sketch checks
    assert ("on the queries alone" in text) == (where == "query")


def test_hand_written_rope_on_q_and_k_lifts_as_rotary():
    """The same module turning both q and k (the control of the near misses above)."""
    text = lift(_Attn("both"), (torch.randn(2, 5, 8),), "rope")
    assert "position = rotary" in text
    assert "turns" not in text  # all 8 features turned


class _Biased(nn.Module):
    """4 heads; scores plus ``kind``: ALiBi (slopes times |i - j|), one slope for all heads
    times |i - j|, or a learned table of distances (T5-like)."""

    def __init__(self, kind, d=8, h=4):
        super().__init__()
        self.kind, self.h = kind, h
        self.qkv = nn.Linear(d, 3 * d)
        self.table = nn.Embedding(16, h)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        i = torch.arange(n)
        dist = (i[None, :] - i[:, None]).abs()
        if self.kind == "alibi":
            slopes = 2.0 ** (-8.0 * torch.arange(1, self.h + 1) / self.h)
            bias = -slopes[:, None, None] * dist
        elif self.kind == "one_slope":
            bias = -0.5 * dist.float()
        else:
            bias = self.table(dist).permute(2, 0, 1)
        s = q @ k.transpose(-1, -2) / (d // self.h) ** 0.5 + bias
        return (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(b, n, d)


@pytest.mark.parametrize("kind, lifted", [("alibi", True), ("one_slope", False),
                                          ("learned", False)])
def test_only_a_per_head_slope_times_a_distance_lifts_as_alibi(kind, lifted):
    text = lift(_Biased(kind), (torch.randn(2, 5, 8),), kind)
    assert ("bias = alibi" in text) == lifted, text
    api.load(text)


class _OddRope(_Attn):
    """RoPE on 8 of a 9-feature head: the language's rotary needs an even width per head."""

    def __init__(self):
        super().__init__("both", d=9)

    def _turn(self, x):
        return torch.cat([super()._turn(x[..., :8]), x[..., 8:]], -1)


def test_rotation_of_an_odd_width_head_keeps_the_attention_and_says_why():
    text = lift(_OddRope(), (torch.randn(2, 5, 9),), "odd")
    assert "position = rotary" not in text
    assert "an even width per head" in text
    assert re.search(r"^    attention att_1 \{", text, re.M)  # not refused by the checker
