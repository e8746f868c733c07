"""`taxcompile lift --torch` reads the rotary base and the ALiBi slopes from the captured
model's constants: the base where the rotation's frequencies (a buffer, or a constant
pow/arange chain) are exactly base^(-2i/d) for one base, all of them; the slopes checked
against the standard 2^(-8h/H). Otherwise the registry's default is written with a comment.
The oracle for the base is a float64 RoPE written here (the compiled sketch's layer must
compute its scores), for the slopes the sequence the module was built with."""
import math
import re

import pytest
import torch
from torch import nn

from taxcompile import api
from taxcompile.torchread.lift import lift_module

from test_torchread_lift_position import _Biased  # noqa: E402  (tests/ is on sys.path)


def lift(*args):
    return re.sub(r" +=", " =", lift_module(*args))


class _Rope(nn.Module):
    """One head of width 8, RoPE (half-split) on q and k with the inverse frequencies
    ``inv(d)``: Llama 3's base 500000 by default, from a buffer or computed in forward."""

    def __init__(self, inv=lambda d: 500000.0 ** (-torch.arange(0, d, 2) / d), buffer=False):
        super().__init__()
        self.inv, self.buffer = inv, buffer
        self.q, self.k, self.v = (nn.Linear(8, 8) for _ in range(3))
        if buffer:
            self.register_buffer("inv_freq", inv(8), persistent=False)

    def _turn(self, x):
        pos = torch.arange(x.shape[1], dtype=x.dtype)[:, None]
        angle = pos * (self.inv_freq if self.buffer else self.inv(x.shape[-1]).to(x.dtype))
        cos, sin = torch.cat([angle.cos()] * 2, -1), torch.cat([angle.sin()] * 2, -1)
        x1, x2 = x.chunk(2, -1)
        return x * cos + torch.cat([-x2, x1], -1) * sin

    def forward(self, x):
        q, k = self._turn(self.q(x)), self._turn(self.k(x))
        return torch.softmax(q @ k.transpose(-1, -2) / 8 ** 0.5, -1) @ self.v(x)


def rope_ref(x, base):
    """RoPE, half-split: (x_f, x_{f+d/2}) turned by t * base^(-2f/d), a 2x2 rotation per
    pair and position t, in float64."""
    out, d = x.clone(), x.shape[-1]
    for t in range(x.shape[-2]):
        for f in range(d // 2):
            c, s = math.cos(t * base ** (-2 * f / d)), math.sin(t * base ** (-2 * f / d))
            x1, x2 = x[..., t, f], x[..., t, f + d // 2]
            out[..., t, f], out[..., t, f + d // 2] = c * x1 - s * x2, s * x1 + c * x2
    return out


@pytest.mark.parametrize("buffer", [False, True])
def test_rotary_base_is_read_and_the_compiled_sketch_scores_as_rope_with_it(buffer):
    text = lift(_Rope(buffer=buffer), (torch.randn(2, 5, 8),), "rope")
    assert "position = rotary(base = 500000)" in text and "rotation's base" not in text
    mod = api.module(text)
    att = mod.Model(api.config(mod, tiny=True)).att_1.double()
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 6, 8, generator=g, dtype=torch.float64) for _ in range(3))
    _, a, _ = att(q, k, v)
    for base, same in ((500000.0, True), (10000.0, False)):  # the base shows in the scores
        want = torch.softmax(rope_ref(q, base) @ rope_ref(k, base).transpose(-1, -2)
                             / math.sqrt(8), -1)
        assert torch.allclose(a.reshape(want.shape), want, atol=1e-10, rtol=1e-9) == same


def test_the_default_base_is_written_plain():
    text = lift(_Rope(lambda d: 10000.0 ** (-torch.arange(0, d, 2) / d)),
                (torch.randn(2, 5, 8),), "rope")
    assert re.search(r"position = rotary$", text, re.M) and "rotation's base" not in text


def test_frequencies_of_no_one_base_keep_the_default_and_say_so():
    """1, 1/2, 1/3, 1/4: base^(-i/4) would need base 16 for the second and 81 for the
    third, so no one base."""
    text = lift(_Rope(lambda d: 1.0 / (1.0 + torch.arange(0, d // 2))),
                (torch.randn(2, 5, 8),), "rope")
    assert re.search(r"position = rotary$", text, re.M)
    assert "# not lifted: the rotation's base: the registry's default" in text
    api.load(text)


class _Slopes(_Biased):
    """ALiBi with 1/h slopes (h = 1 … 4) in place of 2^(-8h/H)."""

    def __init__(self):
        super().__init__("alibi")

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        i = torch.arange(n)
        slopes = 1.0 / torch.arange(1, self.h + 1)
        bias = -slopes[:, None, None] * (i[None, :] - i[:, None]).abs()
        s = q @ k.transpose(-1, -2) / (d // self.h) ** 0.5 + bias
        return (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(b, n, d)


@pytest.mark.parametrize("model, standard", [(lambda: _Biased("alibi"), True),
                                             (_Slopes, False)])
def test_alibi_slopes_are_checked_against_the_standard_ones(model, standard):
    text = lift(model(), (torch.randn(2, 5, 8),), "alibi")
    assert "bias = alibi" in text
    assert ("the slopes, not read as 2^(-8h/H)" in text) == (not standard)
    api.load(text)
