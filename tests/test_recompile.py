"""Decoding step by step under ``torch.compile`` does not recompile at every step.

A decoder calls its attention once per step with ``start = t`` (generate() with a cache, or a
training loop that feeds its own tokens). Dynamo makes ``start`` a symbolic int after the first
change; nothing in the generated code may then branch on its value or build a shape from it,
or every step compiles a new graph (at ~1 s a graph, and after ``recompile_limit`` of them the
frame silently falls back to eager). Each decoding below runs Luong et al.'s local-m decoder
(the windowed, banded path) for 24 steps through a compiled model, counts the graphs compiled
after the first step, and checks the logits against the float64 reference of
tests/test_decoders.py (eq. 5, 27, input feeding).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from test_decoders import close, lengths_mask, local_m, luong_reference, model_of  # noqa: E402

# graphs the steps after the first may compile: the one where Dynamo makes `start` dynamic,
# and one where `validate` turns False (generate() validates the first call only)
MAX_RECOMPILES = 2


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("grad", [True, False], ids=["grad", "nograd"])
def test_local_m_decoding_compiles_a_bounded_number_of_graphs(grad):
    m = model_of("luong2015_local_m")
    # S < 2 D (D = 10): windows that cross both ends of the source, as in most short sentences
    B, S, T = 2, 12, 24
    g = torch.Generator().manual_seed(7)
    src = torch.randint(0, 50, (B, S), generator=g)
    tgt = torch.randint(0, 50, (B, T), generator=g)
    src_mask = lengths_mask(B, S, [S, 7])
    graphs = []

    def backend(gm, example_inputs):  # counts the graphs Dynamo hands over, runs them as is
        graphs.append(gm)
        return gm.forward

    compiled = torch.compile(m, backend=backend)
    cache, steps, first = {}, [], 0
    with torch.set_grad_enabled(grad):
        for t in range(T):  # generate()'s incremental step: the new token only
            out = compiled(src=src, tgt=tgt[:, t:t + 1], src_mask=src_mask, cache=cache,
                           validate=t == 0)
            steps.append(out.output.detach())
            first = first or len(graphs)
    assert first > 0, "nothing was compiled"
    recompiles = len(graphs) - first
    # one query per step: its 2D + 1 keys are read directly, no FlexAttention block mask
    # (a mask per step traced for seconds, and inductor could not lower it for one query)
    assert not any("flex_attention" in str(gm.graph) for gm in graphs)
    assert recompiles <= MAX_RECOMPILES, f"{recompiles} graphs compiled after the first step"
    logits, _ = luong_reference(m, src, tgt, src_mask, local_m)
    close(torch.cat(steps, 1), logits)
