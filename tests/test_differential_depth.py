"""Differential attention's lambda_init by depth (Ye et al. 2024, "Differential Transformer",
sec. 2.1): lambda_init = 0.8 - 0.6 exp(-0.3 (l - 1)) at layer l (1-based). A differential
statement in a `repeat` whose hops have weights of their own takes its hop's value where
the spec leaves lambda_init unset (`differential = true`); a value written out, a shared
repeat's one module and a statement outside any repeat keep theirs (0.8 by default). The
values and one layer's output are checked against the paper's equations written here in
float64."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from conftest import cell_of  # noqa: E402
from test_codegen_mechanisms import close, gen, make, qkv_inputs  # noqa: E402
from test_differential_attention import reference  # noqa: E402

__all__ = ["gen"]  # the fixture, imported for the tests below


def paper_lambda_init(layer: int) -> float:
    """Ye et al. sec. 2.1, in float64."""
    return 0.8 - 0.6 * math.exp(-0.3 * (layer - 1))


def stack(differential: str = "true", hops: int = 4, shared: str = "") -> str:
    """A residual stack of `hops` differential self-attention layers over x (L, 8)."""
    return f"""
    model m {{
        input x: sequence[L, 8]
        feature s = x
        repeat layer {hops} {shared} {{
            attention att {{
                query = s  keys = s  values = s
                score = scaled_multiplicative  heads = 2  differential = {differential}
            }}
            update s = s + att
        }}
        output out = identity(s)
    }}
    """


def attentions(model) -> list:
    """The differential attention modules of the model, in hop order."""
    return [m for m in model.modules() if hasattr(m, "lambda_q1")]


def test_each_layer_takes_lambda_init_from_its_depth(gen):
    _, model = make(gen, stack())
    got = [att.lambda_init for att in attentions(model)]
    want = [paper_lambda_init(layer) for layer in range(1, 5)]
    assert got == pytest.approx(want, abs=1e-12)
    assert got[0] == pytest.approx(0.2) and got[-1] == pytest.approx(0.8 - 0.6 * math.exp(-0.9))


def test_a_layers_output_follows_the_paper_at_its_depth(gen):
    """Layer 3's attention: lambda = exp(lq1 . lk1) - exp(lq2 . lk2) + lambda_init(3), and
    each head's normalised context times (1 - lambda_init(3))."""
    _, model = make(gen, stack())
    att = attentions(model)[2]
    x, _, _, mask = qkv_inputs(dq=8, dk=8, dv=8, Lq=5, Lk=5)
    c, a, _ = att(x, x, x, mask)
    keep = mask[:, None, :].expand(-1, 5, -1)
    want_c, want_a = reference(att, x, x, x, keep, 2, paper_lambda_init(3))
    close(a, want_a)
    close(c, want_c)


def test_the_whole_stack_matches_the_paper_layer_by_layer(gen):
    """The model's output: s_l = s_(l-1) + DiffAttn_l(s_(l-1)), each layer at its depth."""
    mod, model = make(gen, stack(hops=3))
    x, _, _, mask = qkv_inputs(dq=8, dk=8, dv=8, Lq=4, Lk=4)
    keep = mask[:, None, :].expand(-1, 4, -1)
    s = x.to(torch.float64)
    for layer, att in enumerate(attentions(model), 1):
        c, _ = reference(att, s, s, s, keep, 2, paper_lambda_init(layer))
        s = s + c
    out = model(x=x, x_mask=mask).output
    close(out[mask], s[mask], atol=1e-4)


@pytest.mark.parametrize("differential,shared,want", [
    ("0.5", "", 0.5),  # written out: every layer's
    ("true", "shared", 0.8),  # one module for every hop: the default
], ids=["written_out", "shared_repeat"])
def test_a_given_or_shared_lambda_init_is_not_by_depth(gen, differential, shared, want):
    _, model = make(gen, stack(differential, hops=3, shared=shared))
    assert [att.lambda_init for att in attentions(model)] == [want] * (1 if shared else 3)


def test_the_classifier_says_lambda_init_is_by_depth():
    text = 'paper t { cite = "T" }\n' + stack()
    reason = cell_of(text, "query_multiplicity")["Multi-Head"][0]
    assert "lambda_init = 0.8 - 0.6 exp(-0.3 (l - 1)) at layer l" in reason


def test_a_repeat_written_out_hop_by_hop_writes_each_hops_number():
    """Where a repeat's hops are not one block class, each hop's call computes its own
    value from its number (codegen/depth.py), here evaluated against the paper's."""
    from types import SimpleNamespace

    from taxcompile import mechanisms as mech
    from taxcompile.codegen.depth import depth_code
    from taxcompile.pipeline import load_text

    model = load_text('paper t { cite = "T" }\n' + stack(), "t.attn").models[0].model
    atts = [n for n in model.nodes if n.kind_ == "attention"]
    assert [n.hop.index for n in atts] == [1, 2, 3, 4]
    arg = next(a for a in mech.HEAD_MECHANISMS["differential"].ctor if a.name == "lambda_init")
    top = SimpleNamespace(frame=SimpleNamespace(depth=0, takes_depth=False))
    for n in atts:
        assert n.head("differential").lambda_init is None  # left to the layer
        code = depth_code(top, n, arg)
        assert eval(code, {"math": math}) == pytest.approx(paper_lambda_init(n.hop.index))
    assert not top.frame.takes_depth


def test_a_drop_in_layer_takes_its_depth_from_its_config():
    """The statement's drop-in layer: Config.depth is the layer l of a stack (the first
    hop's by default), lambda_init the paper's at l."""
    from taxcompile.codegen import layer
    from taxcompile.pipeline import load_text
    from taxcompile.run import load_module

    cs = load_text('paper t { cite = "T" }\n' + stack(), "t.attn")
    mod = load_module(layer.generate(cs, cs.models[0], "layer.att", "t.attn"), "diff_depth_layer")
    assert mod.Config().depth == 1
    for depth in (1, 3):
        lay = mod.Layer(mod.Config(depth=depth))
        assert lay.attn.lambda_init == pytest.approx(paper_lambda_init(depth), abs=1e-12)
    with pytest.raises(ValueError, match="depth"):
        mod.Config(depth=0)
