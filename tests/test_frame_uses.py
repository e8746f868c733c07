"""generate()'s ``past`` (the tokens decoded before a call): the Model's forward() defines
it when its plan read it through ``Frame.use`` (a position encoding or a decoder step that
starts after the decoded tokens), a record of the plan, not by reading the emitted lines."""

from __future__ import annotations

import importlib

import pytest
from conftest import ROOT

from taxcompile import codegen
from taxcompile.codegen import frame as frame_mod
from taxcompile.pipeline import load

generate = importlib.import_module("taxcompile.codegen.generate")  # (codegen.generate: a function)

DEFINES = 'past = 0 if cache is None else cache.get("@length", 0)'


def _plan(spec: str, model: str):
    cs = load(ROOT / "specs" / spec)
    cm = next(c for c in cs.models if c.model.name == model)
    return codegen.plan(cs, cm, f"specs/{spec}")


@pytest.mark.parametrize("spec, model, reads_past", [
    ("vaswani2017.attn", "transformer", True),  # sinusoids on the target start at `past`
    ("bahdanau2015.attn", "rnnsearch", False),  # a cache, and no position that counts it
])
def test_forward_defines_past_as_the_plan_recorded_it(monkeypatch, spec, model, reads_past):
    used = []
    real = frame_mod.Frame.use
    monkeypatch.setattr(frame_mod.Frame, "use",
                        lambda self, name: used.append(name) or real(self, name))
    # the decision is the plan's: generate.forward reads no emitted code for names at all
    assert not hasattr(generate, "mentions")
    fp = _plan(spec, model)
    text = codegen.emit.render(fp)
    assert ("past" in used) is reads_past
    assert (DEFINES in text) is reads_past
    assert "cache is not None" in text  # both have a generate() with a cache
