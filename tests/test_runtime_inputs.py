"""Bad runtime inputs of generated models are ValueErrors that name the input, the allowed
range and the value: token ids outside [0, vocab), an empty batch or an empty axis, NaN or
infinite features. ``forward(..., validate=False)`` skips the checks that read the values
(docs/codegen.md). Every test imports generated code and calls it."""

from __future__ import annotations

import re
import warnings

import pytest

torch = pytest.importorskip("torch")

from conftest import SPECS  # noqa: E402
from taxcompile import codegen, ir, pipeline  # noqa: E402
from taxcompile.run import load_module  # noqa: E402

SPEC_FILES = sorted(SPECS.glob("*.attn"))
MODELS = [(path, cm.model.name) for path in SPEC_FILES for cm in pipeline.load(path).models]


def build(path, model: str):
    cs = pipeline.load(path)
    cm = next(m for m in cs.models if m.model.name == model)
    mod = load_module(codegen.generate(cs, cm, path.name), f"rt_{path.stem}_{model}")
    torch.manual_seed(0)
    cfg = mod.Config.tiny()
    return mod, mod.Model(cfg).eval(), cfg, [n for n in cm.model.nodes
                                              if isinstance(n, ir.Input)]


def call(model, inputs, **kw):
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model(**inputs, **kw)


@pytest.fixture(scope="module")
def rnnsearch():
    return build(SPECS / "bahdanau2015.attn", "rnnsearch")


# ---- token ids ----------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["vocab", "vocab + 7", "-1"])
def test_token_ids_outside_the_vocabulary(rnnsearch, bad):
    mod, model, cfg, _ = rnnsearch
    inputs = mod.example_inputs(cfg=cfg)
    value = eval(bad, {"vocab": cfg.vocab})
    inputs["tgt"][1, 2] = value
    with pytest.raises(ValueError) as info:
        call(model, inputs)
    assert str(info.value) == (f"input `tgt`: token ids must be in [0, {cfg.vocab}) "
                               f"(vocab = {cfg.vocab}), got {value}")


def test_the_last_token_id_is_fine(rnnsearch):
    mod, model, cfg, _ = rnnsearch
    inputs = mod.example_inputs(cfg=cfg)
    inputs["src"][:] = cfg.vocab - 1
    inputs["tgt"][:] = 0
    assert call(model, inputs).output.shape[:2] == inputs["tgt"].shape


# ---- empty inputs -------------------------------------------------------------------------


def test_an_empty_batch(rnnsearch):
    mod, model, cfg, _ = rnnsearch
    inputs = {k: v[:0] for k, v in mod.example_inputs(cfg=cfg).items()}
    with pytest.raises(ValueError) as info:
        call(model, inputs)
    assert str(info.value) == ("input `src`: the batch size B must be at least 1, got 0 "
                               "(shape (0, 9), expected (B, S))")


def test_an_empty_sequence(rnnsearch):
    mod, model, cfg, _ = rnnsearch
    inputs = mod.example_inputs(cfg=cfg)
    inputs["src"], inputs["src_mask"] = inputs["src"][:, :0], inputs["src_mask"][:, :0]
    with pytest.raises(ValueError) as info:
        call(model, inputs)
    assert str(info.value) == ("input `src`: the length of axis `S` must be at least 1, got 0 "
                               "(shape (2, 0), expected (B, S))")


# ---- NaN and infinite features ------------------------------------------------------------


def feature_model():
    """A model with a floating-point input (the first spec that has one)."""
    for path, model in MODELS:
        mod, m, cfg, inputs = build(path, model)
        if any(i.kind != "tokens" for i in inputs):
            return mod, m, cfg, inputs
    raise AssertionError("no spec has a feature input")


@pytest.fixture(scope="module")
def features():
    return feature_model()


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_features(features, value):
    mod, model, cfg, inputs_ir = features
    name = next(i.id for i in inputs_ir if i.kind != "tokens")
    inputs = mod.example_inputs(cfg=cfg)
    inputs[name].view(-1)[5] = value
    with pytest.raises(ValueError) as info:
        call(model, inputs)
    assert str(info.value) == (f"input `{name}`: features must be finite, got {value} "
                               "(validate=False skips this check)")


def test_large_finite_features_are_not_refused(features):
    """The check sums the features first; a sum that overflows is no reason to refuse."""
    mod, model, cfg, inputs_ir = features
    name = next(i.id for i in inputs_ir if i.kind != "tokens")
    inputs = mod.example_inputs(cfg=cfg)
    inputs[name].fill_(3e38)
    assert not torch.isfinite(inputs[name].sum())
    call(model, inputs)  # no ValueError, whatever such features do to the output


def test_validate_false_skips_the_value_checks(features):
    mod, model, cfg, inputs_ir = features
    name = next(i.id for i in inputs_ir if i.kind != "tokens")
    inputs = mod.example_inputs(cfg=cfg)
    inputs[name].view(-1)[5] = float("nan")
    out = call(model, inputs, validate=False)  # the user asked not to look: NaN goes through
    outs = out.output.values() if isinstance(out.output, dict) else [out.output]
    assert any(torch.isnan(o).any() for o in outs)
    # shapes are still checked
    with pytest.raises(ValueError, match=rf"input `{name}`: expected shape"):
        call(model, {**inputs, name: inputs[name][..., :1]}, validate=False)


# ---- every generated model ----------------------------------------------------------------


@pytest.mark.parametrize("path, model", MODELS, ids=[f"{p.stem}-{m}" for p, m in MODELS])
def test_every_model_checks_its_inputs(path, model):
    mod, m, cfg, inputs_ir = build(path, model)
    good = mod.example_inputs(cfg=cfg)
    call(m, good)  # valid inputs still run
    first = inputs_ir[0].id
    with pytest.raises(ValueError, match=rf"^input `{first}`: the batch size B must be at least 1, "
                                         "got 0"):
        call(m, {k: v[:0] for k, v in good.items()})
    for inp in inputs_ir:
        if inp.kind == "tokens":
            for bad in (-3, 10**9):
                x = good[inp.id].clone()
                x.view(-1)[-1] = bad
                with pytest.raises(ValueError, match=rf"^input `{inp.id}`: token ids must be in "
                                   rf"\[0, \d+\) \(vocab = \d+\), got {bad}$"):
                    call(m, {**good, inp.id: x})
        else:
            x = good[inp.id].clone()
            x.view(-1)[0] = float("nan")
            with pytest.raises(ValueError, match=rf"^input `{inp.id}`: features must be finite"):
                call(m, {**good, inp.id: x})
        for i, (axis, size) in enumerate(zip(inp.axes, inp.sizes)):
            if size is not None:
                continue  # a fixed length: any other length is a shape error already
            x = good[inp.id].narrow(1 + i, 0, 0)
            with pytest.raises(ValueError, match=re.escape(
                    f"input `{inp.id}`: the length of axis `{axis}` must be at least 1, got 0")):
                call(m, {**good, inp.id: x})


# ---- learned position tables --------------------------------------------------------------


@pytest.fixture(scope="module")
def hatn():
    return build(SPECS / "li2018.attn", "hatn")


def test_a_sequence_longer_than_the_learned_position_table(hatn):
    mod, model, cfg, _ = hatn
    inputs = mod.example_inputs(cfg=cfg)
    W = cfg.max_len + 1
    for name in ("doc", "masked"):
        inputs[name] = torch.zeros(2, 3, W, dtype=torch.long)
        inputs[name + "_mask"] = torch.ones(2, 3, W, dtype=torch.bool)
    with pytest.raises(ValueError) as info:
        call(model, inputs, validate=False)  # a shape check: validate=False keeps it
    assert str(info.value) == (f"input `doc`: the length of axis `W` must be at most "
                               f"{cfg.max_len} (Config.max_len: the learned position table), "
                               f"got {W}")
    for name in ("doc", "masked"):  # exactly max_len fits
        inputs[name] = inputs[name][..., :-1]
        inputs[name + "_mask"] = inputs[name + "_mask"][..., :-1]
    assert call(model, inputs).output.shape == (2, 2)


def test_features_in_another_dtype_than_the_model(features):
    mod, model, cfg, inputs_ir = features
    name = next(i.id for i in inputs_ir if i.kind != "tokens")
    inputs = mod.example_inputs(cfg=cfg)
    inputs[name] = inputs[name].double()
    with pytest.raises(ValueError) as info:
        call(model, inputs)
    assert str(info.value) == (f"input `{name}`: expected torch.float32 features (the model's "
                               "dtype: x.to(torch.float32) or model.to(torch.float64)), got "
                               "torch.float64")


# ---- mask conventions ---------------------------------------------------------------------

CONVENTION = ("True/1 = keep, False/0 = pad; PyTorch's key_padding_mask is the inverse: "
              "pass ~key_padding_mask")


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
def test_integer_0_1_masks_mean_keep_1(rnnsearch, dtype):
    """Hugging Face's attention_mask (1 = keep) gives what the bool mask gives."""
    mod, model, cfg, _ = rnnsearch
    inputs = mod.example_inputs(cfg=cfg)
    assert not inputs["src_mask"].all()  # some padding, so the mask matters
    want = call(model, inputs).output
    as_int = {k: v.to(dtype) if k.endswith("_mask") else v for k, v in inputs.items()}
    torch.testing.assert_close(call(model, as_int).output, want, rtol=0, atol=0)
    inverted = {**inputs, "src_mask": ~inputs["src_mask"] | torch.eye(2, 9, dtype=torch.bool)}
    assert not torch.allclose(call(model, inverted).output, want)


def test_float_masks_are_refused_with_the_convention(rnnsearch):
    mod, model, cfg, _ = rnnsearch
    inputs = mod.example_inputs(cfg=cfg)
    inputs["src_mask"] = inputs["src_mask"].float()
    with pytest.raises(ValueError) as info:
        call(model, inputs)
    assert str(info.value) == ("input `src_mask`: expected a bool or integer 0/1 tensor of "
                               f"shape (2, 9), got torch.float32 ({CONVENTION})")


@pytest.mark.parametrize("value", [2, -1])
def test_integer_masks_hold_only_0_and_1(rnnsearch, value):
    mod, model, cfg, _ = rnnsearch
    inputs = mod.example_inputs(cfg=cfg)
    inputs["tgt_mask"] = inputs["tgt_mask"].long()
    inputs["tgt_mask"][1, 0] = value
    with pytest.raises(ValueError) as info:
        call(model, inputs)
    assert str(info.value) == ("input `tgt_mask`: an integer mask must hold only 0 and 1, "
                               f"got {value} ({CONVENTION})")
    call(model, inputs, validate=False)  # not read without validate: nonzero = keep


def test_a_mask_of_the_wrong_shape(rnnsearch):
    mod, model, cfg, _ = rnnsearch
    inputs = mod.example_inputs(cfg=cfg)
    inputs["src_mask"] = inputs["src_mask"][:, :4]
    with pytest.raises(ValueError) as info:
        call(model, inputs)
    assert str(info.value) == ("input `src_mask`: expected shape (2, 9) (the input's leading "
                               f"axes), got (2, 4) ({CONVENTION})")


def test_a_mask_that_keeps_nothing_of_an_example_warns_once(rnnsearch):
    """The usual symptom of an inverted mask (PyTorch's key_padding_mask passed as is): the
    longest example of the batch keeps nothing."""
    mod, model, cfg, _ = rnnsearch
    inputs = mod.example_inputs(cfg=cfg)
    inputs["src_mask"] = ~inputs["src_mask"]  # example 0 has no padding: now all False
    with torch.no_grad(), pytest.warns(UserWarning) as record:
        model(**inputs)
    assert [str(w.message) for w in record] == [
        f"input `src_mask` keeps no position of example 0: is it inverted? ({CONVENTION})"]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")
        model(**inputs, validate=False)  # validate=False reads no values: no warning
        model(**mod.example_inputs(cfg=cfg))  # a proper mask: no warning


# ---- inputs read together (issue 23) -------------------------------------------------------


@pytest.mark.parametrize("spec, model, bigger", [
    ("xu2015", "soft", "image"),  # image has no padding mask: a raw RuntimeError before
    ("lu2016", "parallel", "image"),
    ("bahdanau2015", "rnnsearch", "src"),
])
def test_inputs_with_different_batch_sizes(spec, model, bigger):
    mod, m, cfg, inputs_ir = build(SPECS / f"{spec}.attn", model)
    inputs = mod.example_inputs(cfg=cfg)
    one_more = {k: torch.cat([v, v[:1]]) for k, v in inputs.items()
                if k in (bigger, bigger + "_mask")}
    others = [i.id for i in inputs_ir if i.id != bigger]
    with pytest.raises(ValueError) as info:
        call(m, {**inputs, **one_more})
    first, second = (bigger, others[0]) if inputs_ir[0].id == bigger else (others[0], bigger)
    shapes = {k: tuple(v.shape) for k, v in {**inputs, **one_more}.items()}
    B = {k: s[0] for k, s in shapes.items()}
    assert str(info.value) == (f"inputs `{first}` and `{second}` have different batch sizes B: "
                               f"{B[first]} and {B[second]} (shapes {shapes[first]} and "
                               f"{shapes[second]})")


SUPERVISED = """paper t { cite = "T" }
model m {
    input x: sequence[L, 8]
    input y: sequence[M, 8]
    input gold: alignment[M, L]
    attention s {
        query = project(y)  keys = x  score = scaled_multiplicative
        penalty = supervised(gold, 0.5)
    }
    output u = s
}
"""


@pytest.fixture(scope="module")
def supervised():
    cs = pipeline.load_text(SUPERVISED, "t.attn")
    mod = load_module(codegen.generate(cs, cs.models[0], "t.attn"), "rt_supervised")
    cfg = mod.Config.tiny()
    return mod, mod.Model(cfg).eval(), cfg


def test_the_target_alignment_shape_is_the_inputs_axes(supervised):
    mod, model, cfg = supervised
    inputs = mod.example_inputs(cfg=cfg)
    gold = inputs["gold"][:, :, :-1]  # one key short of x's L
    with pytest.raises(ValueError) as info:
        call(model, {**inputs, "gold": gold / gold.sum(-1, keepdim=True)})
    L = inputs["x"].shape[1]
    assert str(info.value) == (f"inputs `x` and `gold` have different lengths of axis `L`: {L} "
                               f"and {L - 1} (shapes {tuple(inputs['x'].shape)} and "
                               f"{tuple(gold.shape)})")


def test_the_target_alignment_values(supervised):
    mod, model, cfg = supervised
    inputs = mod.example_inputs(cfg=cfg)
    gold = inputs["gold"].clone()
    gold[1, 2, 0] = -0.25
    with pytest.raises(ValueError) as info:
        call(model, {**inputs, "gold": gold})
    assert str(info.value) == "input `gold`: a target alignment holds weights >= 0, got -0.25"
    gold = inputs["gold"].clone()
    gold[1, 3] *= 0.5
    with pytest.raises(ValueError) as info:
        call(model, {**inputs, "gold": gold})
    assert str(info.value) == ("input `gold`: each row of a target alignment sums to 1 over the "
                               "keys (or is all 0: a query aligned to nothing), got 0.5 in row 3 "
                               "of example 1")
    gold[1, 3] = 0  # a query aligned to nothing; validate=False reads no values
    call(model, {**inputs, "gold": gold})
    gold[0, 0, 0] = 7.0
    call(model, {**inputs, "gold": gold}, validate=False)


MASK_INPUT = """paper t { cite = "T" }
model m {
    input x: sequence[L, 8]
    input keep: mask[L, L]
    attention att { query = project(x)  keys = x  score = scaled_multiplicative  mask = keep }
    output o = att
}
"""


def test_a_mask_input_that_keeps_no_key_warns():
    cs = pipeline.load_text(MASK_INPUT, "t.attn")
    mod = load_module(codegen.generate(cs, cs.models[0], "t.attn"), "rt_mask_input")
    model = mod.Model(mod.Config.tiny()).eval()
    inputs = mod.example_inputs(cfg=mod.Config.tiny())
    inputs["keep"][1] = False  # example 1 keeps nothing: the mask inverted, or all padding
    with torch.no_grad(), pytest.warns(UserWarning) as record:
        model(**inputs)
    assert [str(w.message) for w in record] == [
        "input `keep` keeps no key of example 1: is it inverted? (True = keep)"]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")
        model(**inputs, validate=False)
        model(**mod.example_inputs(cfg=mod.Config.tiny()))


def test_an_infinite_penalty_is_an_error():
    """lambda = 3e38 is a float32 (check accepts it), but times a penalty above 1 it is not."""
    cs = pipeline.load_text(SUPERVISED.replace("gold, 0.5", "gold, 3e38, loss = cross_entropy"), "t.attn")
    mod = load_module(codegen.generate(cs, cs.models[0], "t.attn"), "rt_inf_penalty")
    model = mod.Model(mod.Config.tiny())
    inputs = mod.example_inputs(cfg=mod.Config.tiny())
    with pytest.raises(ValueError) as info:
        model(**inputs)
    assert str(info.value) == ("the attention penalty is inf in torch.float32, and so would be "
                               "the loss and every gradient: a coefficient (lambda) too large "
                               "for the dtype, or -log 0 (a target alignment's mass on a key "
                               "whose weight is exactly 0); validate=False skips this check")
    assert model(**inputs, validate=False).penalty == float("inf")


def test_a_penalty_coefficient_beyond_float32_is_refused():
    from taxcompile.diagnostics import SpecError
    with pytest.raises(SpecError) as info:
        pipeline.load_text(SUPERVISED.replace("gold, 0.5", "gold, 1e308"), "t.attn")
    assert info.value.diagnostics[0].message == (
        "`lambda` of `supervised` must be at most 3.403e+38 (the largest float32), got 1e+308")
