"""The similarity score's temperature: `similarity(scale = β)` or `scale = learned` gives
softmax(β cos(q, k_l)) (NTM's content addressing, Graves et al. 2014 eq. 5-6); without it
the score is Table II's plain cosine (β = 1). Values against float64 references written
here; scale ≤ 0 or a non-number is a located error."""

from __future__ import annotations

import math

import pytest

from conftest import error_snapshot

torch = pytest.importorskip("torch")

from torch_support import build_model, one_thread  # noqa: E402, F401

DT = torch.float64
HEADER = 'paper t { cite = "T" }\n'


def spec(score: str) -> str:
    return HEADER + f"""model m {{
    input x: sequence[L, 6] (L = 7)
    input y: sequence[T, 6] (T = 3)
    attention a {{ query = y  keys = x  values = x  score = {score} }}
    output o = a
}}
"""


def reference(x, y, beta: float):
    """c = softmax(β cos(q, k_l)) V, cos written out: q·k / (‖q‖ ‖k‖)."""
    cos = (y @ x.transpose(1, 2)) / (y.norm(dim=-1)[:, :, None] * x.norm(dim=-1)[:, None, :])
    return torch.softmax(beta * cos, dim=-1) @ x


def inputs():
    g = torch.Generator().manual_seed(3)
    return torch.randn(2, 7, 6, generator=g, dtype=DT), torch.randn(2, 3, 6, generator=g, dtype=DT)


@pytest.mark.parametrize("score, beta", [("similarity", 1.0),
                                         ("similarity(scale = 3.5)", 3.5),
                                         ("similarity(kind = cosine, scale = 12)", 12.0)])
def test_fixed_scale_is_beta_times_the_cosine(score, beta):
    mod = build_model(spec(score), f"simscale_{int(beta * 10)}")
    model = mod.Model(mod.Config()).to(DT)
    x, y = inputs()
    torch.testing.assert_close(model(x, y).output, reference(x, y, beta), atol=1e-10, rtol=0)


def test_learned_scale_starts_at_ten_and_learns():
    mod = build_model(spec("similarity(scale = learned)"), "simscale_learned")
    model = mod.Model(mod.Config()).to(DT)
    (name, s), = [(n, p) for n, p in model.named_parameters() if n.endswith("log_beta")]
    assert s.item() == pytest.approx(math.log(10.0))  # ln 10 as a float32, then float64
    x, y = inputs()
    want = reference(x, y, math.exp(s.item()))
    torch.testing.assert_close(model(x, y).output, want, atol=1e-10, rtol=0)
    with torch.no_grad():
        s.fill_(math.log(2.5))
    out = model(x, y).output
    torch.testing.assert_close(out, reference(x, y, 2.5), atol=1e-10, rtol=0)
    out.square().sum().backward()
    assert s.grad is not None and s.grad.abs().item() > 0


def test_l2_scale_multiplies_the_distance():
    mod = build_model(spec("similarity(kind = l2, scale = 2)"), "simscale_l2")
    model = mod.Model(mod.Config()).to(DT)
    x, y = inputs()
    want = torch.softmax(-2.0 * torch.cdist(y, x), dim=-1) @ x
    torch.testing.assert_close(model(x, y).output, want, atol=1e-10, rtol=0)


def test_without_scale_the_code_has_no_temperature():
    """The survey's plain cosine: no parameter, no multiplication (the goldens are unchanged)."""
    from taxcompile import codegen, pipeline

    cs = pipeline.load_text(spec("similarity"), "t.attn")
    src = codegen.generate(cs, cs.models[0], "t.attn")
    assert "beta" not in src and "cos(q, k_l) (Table II, similarity)" in src


@pytest.mark.parametrize("name", ["similarity_scale_zero", "similarity_scale_negative",
                                  "similarity_scale_name"])
def test_error_snapshot(name):
    got, want = error_snapshot(name)
    assert got == want
