"""The oracles of tests/spec_oracles.py can fail: each one passes on correct generated code
and fails on the same code with a known kind of silent wrongness injected (the queries
numbered from 0 when Lq < Lk, a decoding step's positions restarted at 0, a KV cache whose
new query sees only the first key).

The code is mutated as text, so that these tests keep their meaning whatever other
position terms do on main: Transformer-XL's term, which counts the cached keys, is the
correct one mutated here."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import spec_oracles  # noqa: E402
import specgen  # noqa: E402
from taxcompile import codegen, pipeline  # noqa: E402
from taxcompile.codegen import layer  # noqa: E402
from taxcompile.run import load_module  # noqa: E402

HEAD = 'paper t { cite = "T" }\nlet d = 8\n'

XL = HEAD + """model m {
    input x: sequence[L, 8]
    attention att { query = project(x)  keys = project(x)  values = project(x)
                    score = scaled_multiplicative  heads = 2  mask = %s
                    position = transformer_xl }
    output y = classify(mean(att), 3)
}
"""

LM = HEAD + """model m {
    input src: tokens[S] (vocab = 20)
    input tgt: tokens[T] (vocab = 20, autoregressive)
    feature h = embed(src, d)
    feature y = positional(embed(tgt, d))
    attention sa { query = project(y)  features = y  score = scaled_multiplicative
                   mask = causal  heads = 2 }
    update y = norm(y + sa)
    attention ca { query = project(y)  features = h  score = general }
    output o = classify(norm(y + ca), 20, tie = y)
}
"""


def xl_layer(mask: str, mutate=None):
    cs = pipeline.load_text(XL % mask, "t.attn")
    text = layer.generate(cs, cs.models[0], "att", "t.attn")
    if mutate:
        old, new = mutate
        assert old in text
        text = text.replace(old, new)
    return load_module(text, "oracle_xl")


ROLES = ["project", "project", "project"]


@pytest.mark.parametrize("mask", ["causal", "none"])
def test_position_rows_passes_transformer_xl(mask):
    spec_oracles._last_row_is_one_query(xl_layer(mask), ROLES, "xl")


@pytest.mark.parametrize("mask", ["causal", "none"])
@pytest.mark.parametrize("mutate", [
    ("shift = past - lo", "shift = -lo"),  # the term numbers the queries from 0
    ("keep = key_keep(key_mask, self.mask, Lq, Lk, k.device, past)",  # the mask does
     "keep = key_keep(key_mask, self.mask, Lq, Lk, k.device, 0)"),
], ids=["term", "mask"])
def test_position_rows_catches_queries_numbered_from_zero(mask, mutate):
    if "key_keep" in mutate[0] and mask == "none":
        pytest.skip("no structural mask to misplace")
    with pytest.raises(AssertionError, match="last query alone"):
        spec_oracles._last_row_is_one_query(xl_layer(mask, mutate), ROLES, "xl")


def test_position_rows_runs_on_each_statement_with_a_term():
    """Through check_spec: the statement is found, exported and checked (1), a statement
    without a position term is not (0)."""
    cs = pipeline.load_text(XL % "causal", "t.attn")
    assert spec_oracles.position_rows(cs, cs.models[0], "t.attn") == 1
    cs = pipeline.load_text(LM, "t.attn")
    assert spec_oracles.position_rows(cs, cs.models[0], "t.attn") == 0


def lm(mutate=None):
    cs = pipeline.load_text(LM, "t.attn")
    src = codegen.generate(cs, cs.models[0], "t.attn")
    if mutate:
        assert mutate[0] in src
        src = src.replace(*mutate)
    return load_module(src, "oracle_lm"), src


def test_decoding_passes_the_generated_decoder():
    assert spec_oracles.decoding(*lm(), "lm")


@pytest.mark.parametrize("mutate", [
    ("start=past)", "start=0)"),  # each cached step's position encoding restarts at 0
    ("past = Lk - Lq  # keys before the first query: 0 unless",  # a step sees key 0 alone
     "past = 0  # keys before the first query: 0 unless"),
], ids=["positions", "kv-mask"])
def test_decoding_catches_a_wrong_cached_step(mutate):
    with pytest.raises(AssertionError, match=r"generate\(incremental=True"):
        spec_oracles.decoding(*lm(mutate), "lm")


def test_decoding_needs_generate():
    cs = pipeline.load_text(XL % "causal", "t.attn")
    src = codegen.generate(cs, cs.models[0], "t.attn")
    assert not spec_oracles.decoding(load_module(src, "oracle_nogen"), src, "xl")


def test_known_defects_name_a_part_or_an_oracle():
    """A flag of KNOWN_DEFECTS keeps something out: draws of a generator part, or an
    oracle."""
    from specgen_parts import AVOIDABLE

    names = set(AVOIDABLE) | {"position_rows", "decoding"}
    assert set(specgen.KNOWN_DEFECTS) <= names, set(specgen.KNOWN_DEFECTS) - names
