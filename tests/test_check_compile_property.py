"""`check` never accepts what `compile` cannot generate.

Whenever ``pipeline.load_text`` accepts a spec, ``codegen.generate`` succeeds for every
model and the source is valid Python; a refused spec gets a located ``SpecError``, never
another exception (``assert_front_end_ok`` of tests/test_properties.py is the oracle).
Two sources of specs:

1. the combination enumerator (``taxcompile/combinations.py``), each spec mutated by
   test_properties.py's token- and line-level mutations;
2. generated decoders with ``feed = ATT`` (the decoder loop of codegen) with random
   nodes between the decoder and the fed module (attention over the decoder's own
   outputs or inputs, pools, convolutions, projections), random alignments and heads,
   and sometimes a model variant that replaces an ``update`` or adds one. Accepted ones
   are also run forward and backward at tiny sizes, with finite results (a decoder loop
   that compiles but cannot run is as wrong as one that does not compile).

Runs derandomized, without an example database.
"""

from __future__ import annotations

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from taxcompile import codegen
from taxcompile import combinations as C
from taxcompile.diagnostics import SpecError
from taxcompile.pipeline import load_text
from test_properties import COMMON, MUTATIONS, assert_front_end_ok

COMBO_TEXTS = [text for _, text in C.enumerate()]


@st.composite
def combo_mutants(draw):
    text = draw(st.sampled_from(COMBO_TEXTS))
    ops = ("replace_identifier", "replace_keyword", "replace_number", "duplicate_line",
           "delete_line", "swap_lines")
    for _ in range(draw(st.integers(0, 3))):
        text = MUTATIONS[draw(st.sampled_from(ops))](draw, text)
    return text


@settings(max_examples=150, **COMMON)
@given(combo_mutants())
def test_combination_mutants_check_then_compile(text):
    event(assert_front_end_ok(text, "combo.attn"))


# ---- generated decoders with `feed =` -------------------------------------------------

PAPER = 'paper gen {\n    cite = "Generated"\n}\n\nlet d = 8\n\n'
SCORES = ["multiplicative", "scaled_multiplicative", "general", "additive(d_w = 8)"]
ALIGNS = ["global", "sparsemax", "entmax", "hard", "reinforced",
          "local(D = 2, position = monotonic)", "local(D = 2, position = predictive)"]
# Nodes between the decoder `s` and the fed module: position-wise ones run in the loop;
# the others need other steps and must be refused.
MIDDLE = ["linear(s, d)", "norm(s)", "tanh(s)", "s + e", "concat(s, e)", "mean(s)", "max(e)",
          "cnn(s, d)", "positional(s)", "lstm(s, d)", "project(s)", "concat(s, mean(h))",
          "stack(s, e)", "flatten(stack(s, e))"]
DECODER_INPUT = ["e", "cnn(e, d)", "positional(e)", "norm(e)", "concat(e, mean(h))", "lstm(e, d)"]
FEATURES = ["h", "s", "e", "u", "mid"]


@st.composite
def decoder_specs(draw):
    rnn = draw(st.sampled_from(["gru", "lstm"]))
    src = draw(st.sampled_from(["tokens[S] (vocab = 20)", "sequence[S, 8]",
                                "tokens[S] (vocab = 20, S = 5)"]))
    h = "embed(src, d)" if src.startswith("tokens") else "linear(src, d)"
    lines = [f"    input src: {src}", "    input tgt: tokens[T] (vocab = 20, autoregressive)",
             f"    feature h = {h}", "    feature e = embed(tgt, d)",
             f"    query s = {rnn}({draw(st.sampled_from(DECODER_INPUT))}, d, feed = att)"]
    names = ["s", "h", "e"]
    if draw(st.booleans()):
        lines.append(f"    feature u = {draw(st.sampled_from(MIDDLE))}")
        names.append("u")
    if draw(st.booleans()):
        q = draw(st.sampled_from([n for n in names if n != "h"]))
        k = draw(st.sampled_from(names))
        mask = draw(st.sampled_from(["", "  mask = causal"]))
        lines.append(f"    attention mid {{ query = {q}  features = {k}  "
                     f"score = {draw(st.sampled_from(SCORES))}{mask} }}")
        names.append("mid")
    q = draw(st.sampled_from([n for n in names if n != "h"] + ["project(s)", "learned(d)",
                                                              "linear(s, d)"]))
    k = draw(st.sampled_from(names))
    heads = draw(st.sampled_from(["", "  heads = 2"]))
    lines.append(f"    attention att {{ query = {q}  features = {k}  score = "
                 f"{draw(st.sampled_from(SCORES))}  align = {draw(st.sampled_from(ALIGNS))}"
                 f"{heads} }}")
    update = draw(st.booleans())
    if update:
        lines.append("    update h = norm(h + linear(h, d))")
    lines.append("    output y = classify(concat(s, att), 20)")
    text = PAPER + "model m {\n" + "\n".join(lines) + "\n}\n"
    variant = draw(st.sampled_from(["", "", "update", "update", "attention", "update twice"]))
    if variant == "update":  # replaces the base's update, or has none to replace
        text += "model v : m {\n    update h = relu(h + linear(h, d))\n}\n"
    elif variant == "attention":
        text += "model v : m {\n    attention att { query = s  features = h  score = general }\n}\n"
    elif variant == "update twice":
        text += ("model v : m {\n    update h = relu(h)\n    update h = tanh(h)\n}\n")
    return text


def run_model(src: str) -> None:
    torch = pytest.importorskip("torch")
    from taxcompile.run import load_module

    mod = load_module(src, "gen_decoder")
    cfg = mod.Config.tiny()
    torch.manual_seed(0)
    model = mod.Model(cfg)
    out = model(**mod.example_inputs(cfg=cfg), return_attention=True)
    log_probs = getattr(out, "log_probs", {})
    loss = out.output.float().mean() - sum(lp.sum() for lp in log_probs.values())
    assert torch.isfinite(loss)
    loss.backward()


@settings(max_examples=120, **COMMON)
@given(decoder_specs())
def test_decoder_specs_check_then_compile_and_run(text):
    try:
        cs = load_text(text, "dec.attn")
    except SpecError:
        event(assert_front_end_ok(text, "dec.attn"))  # located and rendered
        return
    event("accepted")
    for cm in cs.models:
        src = codegen.generate(cs, cm, "dec.attn")
        compile(src, "dec.py", "exec")
        run_model(src)


def test_decoder_generator_is_not_vacuous():
    """Both verdicts occur among the first examples of the generator's space: a Bahdanau-
    style decoder is accepted, an LSTMN-style one refused."""
    ok = PAPER + """model m {
    input src: tokens[S] (vocab = 20)
    input tgt: tokens[T] (vocab = 20, autoregressive)
    feature h = embed(src, d)
    feature e = embed(tgt, d)
    query s = gru(e, d, feed = att)
    attention att { query = s  features = h  score = general  align = entmax }
    output y = classify(concat(s, att), 20)
}
"""
    cs = load_text(ok, "dec.attn")
    run_model(codegen.generate(cs, cs.models[0], "dec.attn"))
    with pytest.raises(SpecError, match="attends over `T`, the steps of decoder `s`"):
        load_text(ok.replace("features = h", "features = s"), "dec.attn")
