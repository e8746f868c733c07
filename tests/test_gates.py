"""Element-wise operations and gates between features (issue 14, item 3): ``a * b`` (a
(…, 1) gate broadcasts over its position's features), ``a - b`` and ``c - x``.

Each model is checked against the equations written here: a fusion gate
u = F ∘ x + (1 − F) ∘ s with F = σ(W[s; x] + b) (DiSAN, eq. 21-22 of Shen et al.) and a
scalar gate z = β c with β = σ(w h + b) (Xu et al. 4.2.1), over a softmax attention."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import error_snapshot
from taxcompile import diagrams, pipeline
from taxcompile.classification import classify_model
from taxcompile.diagnostics import SpecError

torch = pytest.importorskip("torch")

from taxcompile import codegen  # noqa: E402
from taxcompile.run import load_module  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DT = torch.float64

GATES = """paper t { cite = "T" }
model m {
    input x: sequence[L, 8]
    input y: sequence[M, 8]
    attention s { query = x  keys = y  score = multiplicative }
    feature f = sigmoid(linear(concat(s, x), 8))
    feature b = sigmoid(linear(x, 1))
    output u = f * x + (1 - f) * s - b * s
}
"""


def compiled(text: str, name: str):
    cs = pipeline.load_text(text, "t.attn")
    return load_module(codegen.generate(cs, cs.models[0], "t.attn"), name)


def test_fusion_and_scalar_gates_follow_the_equations():
    mod = compiled(GATES, "gates_fusion")
    torch.manual_seed(0)
    model = mod.Model(mod.Config()).double()
    x = torch.randn(2, 5, 8, dtype=DT, requires_grad=True)
    y = torch.randn(2, 7, 8, dtype=DT)
    out = model(x=x, y=y).output
    # the equations
    a = torch.softmax(x @ y.transpose(1, 2), -1)  # multiplicative score, global alignment
    s = a @ y
    W, c = model.f_linear.weight, model.f_linear.bias
    f = torch.sigmoid(torch.cat([s, x], -1) @ W.T + c)  # F = sigma(W [s; x] + b)
    beta = torch.sigmoid(x @ model.b_linear.weight.T + model.b_linear.bias)  # (B, L, 1)
    want = f * x + (1 - f) * s - beta * s
    torch.testing.assert_close(out, want, atol=1e-10, rtol=0)
    g_out, = torch.autograd.grad(out.sum(), x)
    g_want, = torch.autograd.grad(want.sum(), x)
    torch.testing.assert_close(g_out, g_want, atol=1e-10, rtol=0)


def test_xu_gate_scales_the_context_by_one_scalar_per_step():
    """beta_t = 0 shuts the image out of every step (the values of tests/test_decoders.py
    check beta_t's equation): with f_init's weights zeroed too, the image changes nothing;
    with beta_t > 0 it does."""
    mod = load_module((ROOT / "generated" / "xu2015_soft.py").read_text(encoding="utf-8"),
                      "gates_xu")
    cfg = mod.Config.tiny()
    torch.manual_seed(0)
    model = mod.Model(cfg)
    assert model.z_linear.out_features == 1  # beta_t is a scalar (4.2.1)
    inputs = mod.example_inputs(cfg=cfg)
    other = dict(inputs, image=torch.randn_like(inputs["image"]))
    with torch.no_grad():
        for lin in (model.h0_linear, model.c0_linear):
            lin.weight.zero_()
        model.z_linear.weight.zero_()
        model.z_linear.bias.fill_(-1e4)  # beta = sigmoid(-1e4) = 0
        torch.testing.assert_close(model(**inputs).output, model(**other).output,
                                   atol=1e-6, rtol=0)
        model.z_linear.bias.fill_(0.0)  # beta = 1/2
        assert not torch.allclose(model(**inputs).output, model(**other).output)


def test_the_diagram_writes_the_expression_back_with_its_brackets():
    cs = pipeline.load_text(GATES, "t.attn")
    m = cs.models[0].model
    u = next(n for n in m.nodes if getattr(n, "name", None) == "u")
    assert diagrams.expr_text(m, u.expr) == "f * x + (1 - f) * s - b * s"


def test_a_gated_context_reads_as_the_context_it_scales():
    """A gate scales a context after its alignment: the classification of a model whose
    residual adds `g * att` is that of the model that adds `att`."""
    base = GATES.replace("output u = f * x + (1 - f) * s - b * s", "feature r = x + s\n"
                         "    attention t2 { query = r  keys = y  score = multiplicative }")
    gated = base.replace("feature r = x + s", "feature r = x + b * s")
    rows = [classify_model(pipeline.load_text(t, "t.attn").models[0]).row()
            for t in (base, gated)]
    assert rows[0] == rows[1]


@pytest.mark.parametrize("expr, message", [
    ("x * y", "cannot multiply `x` (L, 8) and `y` (M, 8): shapes differ"),
    ("x / x", "features cannot be divided"),
    ("2 * x", "`*` combines two features here; this side is a number"),
    ("x - 1", "`-` combines two features here; this side is a number"),
])
def test_bad_element_wise_operations_are_located_errors(expr, message):
    text = GATES.replace("f * x + (1 - f) * s - b * s", expr)
    with pytest.raises(SpecError) as info:
        pipeline.load_text(text, "t.attn")
    d = info.value.diagnostics[0]
    assert d.message == message
    assert d.loc.line == 8 and d.hint


def test_error_snapshot():
    got, want = error_snapshot("gate_shapes_differ")
    assert got == want


# ---- attention weights in a loss term: Xu et al.'s doubly stochastic penalty (eq. 14) --------

COVERAGE = """paper t { cite = "T" }
model m {
    input x: sequence[L, 8]
    input y: sequence[M, 8]
    attention s {
        query = project(y)  keys = x  score = scaled_multiplicative  heads = 2
        penalty = doubly_stochastic(0.5)
    }
    output u = s
}
"""


def test_doubly_stochastic_penalty_over_all_query_positions():
    mod = compiled(COVERAGE, "gates_coverage")
    torch.manual_seed(0)
    model = mod.Model(mod.Config()).double()
    x = torch.randn(2, 5, 8, dtype=DT)
    y = torch.randn(2, 4, 8, dtype=DT)
    x_keep = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    y_keep = torch.tensor([[True] * 4, [True] * 2 + [False] * 2])
    out = model(x=x, y=y, x_mask=x_keep, y_mask=y_keep, return_attention=True)
    a = out.attention["s"]  # (B, H, M, L)
    # 0.5 sum_i (1 - sum_t a_ti)^2 over the kept keys i, the kept query positions t
    miss = (1 - (a * y_keep[:, None, :, None]).sum(2)) ** 2
    want = 0.5 * (miss * x_keep[:, None, :]).sum(-1).mean()
    torch.testing.assert_close(out.penalty, want, atol=1e-10, rtol=0)
    # the same without asking for the weights (the fast path must still compute them)
    again = model(x=x, y=y, x_mask=x_keep, y_mask=y_keep)
    torch.testing.assert_close(again.penalty, want, atol=1e-10, rtol=0)


def test_doubly_stochastic_penalty_needs_a_query_sequence():
    text = COVERAGE.replace("query = project(y)  keys = x  score = scaled_multiplicative",
                            "keys = x  score = additive")
    with pytest.raises(SpecError) as info:
        pipeline.load_text(text, "t.attn")
    assert info.value.diagnostics[0].message.endswith(
        "the doubly stochastic penalty sums each key's weights over the query positions "
        "(Xu et al. eq. 14), one weight per key and query")
