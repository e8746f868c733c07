"""A `let` is a field (or property) of the generated `Config`: its name is refused only
where it would collide there, in Config's own attributes (`tiny`, the `max_len` field the
code generator adds) or in what Config's class body reads once the fields are bound
(`property`, `classmethod`). `__post_init__`'s loop variables (`n`, `axis`, `factor`), the
builtins its methods read (`ValueError`) and the other classes' methods (`generate`) live
in other scopes: a constant may take those names, and the model is the one it is under
other names."""

from __future__ import annotations

import re

import pytest

from taxcompile import codegen, pipeline, reserved
from taxcompile.diagnostics import SpecError

# A grid model whose axes are down-sampled, so that Config has a __post_init__ with its
# `for axis, n, factor in …` loop; the constants take that loop's names and others.
SPEC = """paper t { cite = "T" }
let n = 4
let factor = 3
let f = 5
let generate = 6
let ValueError = 2
let dataclass = n * ValueError
model m {
    input image: grid[H, W, 1] (H = 8, W = 8)
    feature x1 = conv2d(image, n)
    feature x2 = conv2d(maxpool(x1, 2), dataclass)
    attention gate {
        query = upsample(x2, 2)
        keys  = x1
        score = additive(d_w = factor, act = relu)
        align = sigmoid
    }
    output y = classify(mean(gate), f + generate)
}
"""
FREE = ("n", "factor", "f", "generate", "ValueError", "dataclass")


def test_the_names_of_configs_method_scopes_are_not_reserved():
    for name in FREE:
        assert name not in reserved.config_names(), name
    assert {"tiny", "property", "classmethod", "max_len"} <= reserved.config_names()


def _renamed(text: str) -> str:
    for name in FREE:
        text = re.sub(rf"\b{name}\b", f"c_{name.lower()}", text)
    return text


torch = pytest.importorskip("torch")


def _model(text: str, tag: str):
    from taxcompile.run import load_module

    cs = pipeline.load_text(text, "t.attn")
    return load_module(codegen.generate(cs, cs.models[0], "t.attn"), f"cfg_names_{tag}")


def test_a_spec_with_the_loop_variables_as_constants_compiles_and_runs():
    mod = _model(SPEC, "free")
    cfg = mod.Config()
    assert (cfg.n, cfg.factor, cfg.f, cfg.generate, cfg.ValueError, cfg.dataclass) == \
        (4, 3, 5, 6, 2, 8)  # `dataclass` is a property: n * ValueError
    # __post_init__'s loop still checks the down-sampled axes, beside a field `n`
    with pytest.raises(ValueError, match=r"Config\.H = 7: must be a positive multiple of 2"):
        mod.Config(H=7)
    torch.manual_seed(0)
    model = mod.Model(cfg).double()
    shapes = {tuple(p.shape) for p in model.parameters()}
    assert (4, 1, 3, 3) in shapes and (8, 4, 3, 3) in shapes  # conv2d widths n, n * 2
    x = {k: v.double() if v.is_floating_point() else v
         for k, v in mod.example_inputs(cfg=cfg).items()}
    out = model(**x).output
    assert out.shape[-1] == 11  # f + generate classes
    # the same model under names no scope of the file has: the same parameters, the same
    # function of them
    other = _model(_renamed(SPEC), "renamed")
    twin = other.Model(other.Config()).double()
    assert [tuple(p.shape) for p in twin.parameters()] == \
        [tuple(p.shape) for p in model.parameters()]
    twin.load_state_dict(dict(zip(twin.state_dict(), model.state_dict().values())))
    torch.testing.assert_close(twin(**x).output, out, rtol=0, atol=0)
    small = mod.Config.tiny()  # tiny() passes the fields by keyword
    assert (small.n, small.H) == (4, 6)


@pytest.mark.parametrize("name, kind", [("tiny", "a name of its own"),
                                        ("max_len", "a name of its own"),
                                        ("property", "a Python builtin"),
                                        ("classmethod", "a Python builtin")])
def test_a_name_that_collides_in_config_is_refused(name, kind):
    text = SPEC.replace("let f = 5", f"let {name} = 5").replace("f + generate",
                                                                 f"{name} + generate")
    with pytest.raises(SpecError) as info:
        pipeline.load_text(text, "t.attn")
    first = info.value.diagnostics[0]
    assert (first.loc.line, first.loc.column) == (4, 5)
    assert first.message == (f"constant name `{name}` is reserved: the generated `Config` "
                             f"class already uses `{name}`, {kind}")


def test_the_refused_names_do_collide(monkeypatch):
    """The oracle can fail: with the refusal off, each of those names breaks Config.
    `max_len` silently: the learned position table's field replaces the constant (the
    classifier had 512 classes, not 100)."""
    monkeypatch.setitem(reserved.ROLES, "constant", (frozenset, "nothing"))
    learned = """paper t { cite = "T" }
let max_len = 100
let d = 8
model m {
    input xs: tokens[T] (vocab = 10)
    feature h = positional(embed(xs, d), kind = learned)
    attention att { query = h  keys = h  score = scaled_multiplicative }
    output y = classify(att, max_len)
}
"""
    mod = _model(learned, "max_len")
    assert mod.Config().max_len != 100
    # a field `property` hides the decorator of the property after it
    derived = SPEC.replace("let f = 5", "let property = 5").replace("f + generate",
                                                                     "property + generate")
    with pytest.raises(TypeError):
        _model(derived, "property")
    # a field `tiny` is replaced by the classmethod
    tiny = SPEC.replace("let f = 5", "let tiny = 5").replace("f + generate", "tiny + generate")
    assert callable(_model(tiny, "tiny").Config().tiny)
