"""Which output generate() decodes, and the outputs of a cached step, in models with several
outputs (float64, Config.tiny()). References: greedy loops written here over full forward()
runs, reading the target-position logits."""

from __future__ import annotations

import inspect

import pytest

torch = pytest.importorskip("torch")

from torch_support import fast_cpu, inline_builder  # noqa: E402

DT = torch.float64
HEADER = 'paper gen {\n    cite = "Test"\n}\n'
SOURCE = """
model m {
    input src: tokens[S] (vocab = 20)
    input tgt: tokens[T] (vocab = 20, autoregressive)
    feature h = embed(src, 8)
    attention b { query = learned(8)  features = h  score = general }
    feature y = positional(embed(tgt, 8), kind = sinusoid)
    attention a { query = project(y)  keys = project(y)  values = project(concat(y, y))
                  score = multiplicative  mask = causal }
    attention c { query = project(y)  features = h  score = multiplicative }
"""
POOLED = SOURCE + """
    output o0 = classify(mean(h), 20)
    output o1 = classify(concat(a, c), 20)
}
"""
SIDE = SOURCE + """
    output o0 = classify(b, 3)
    output o1 = classify(concat(a, c), 20)
}
"""
NONE = SOURCE + """
    output o0 = classify(mean(h), 20)
    output o1 = classify(concat(a, c), 7)
}
"""


@pytest.fixture(autouse=True)
def one_thread():
    with fast_cpu():
        yield


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    return inline_builder(tmp_path_factory.mktemp("gen_outputs"), HEADER, "_taxcompile_gen_out")


def model(mod):
    torch.manual_seed(0)
    m = mod.Model(mod.Config.tiny())
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # large random parameters: peaked, distinct next tokens
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    src = torch.randint(0, 20, (3, 5), generator=g)
    return m.to(DT).eval(), src


def greedy(m, src, max_len: int, eos: int) -> torch.Tensor:
    """Greedy decoding by full re-runs: argmax of o1 (the logits over tgt's positions) at
    the prefix's last position."""
    tokens, done = torch.ones(src.shape[0], 1, dtype=torch.long), torch.zeros(3, dtype=bool)
    for _ in range(max_len):
        with torch.no_grad():
            nxt = m(src=src, tgt=tokens).output["o1"][:, -1].argmax(-1)
        nxt[done] = eos
        tokens = torch.cat([tokens, nxt[:, None]], 1)
        done |= nxt == eos
        if done.all():
            break
    return tokens[:, 1:]


@pytest.mark.parametrize("body", [POOLED, SIDE])
def test_generate_decodes_the_target_position_logits(build, body):
    """A pooled output of the vocabulary's size (o0 = classify(mean(h), 20)) or a source-side
    output beside the decoder's: generate(), cached or not, writes the tokens of a greedy
    loop over o1's last position."""
    m, src = model(build(body))
    want = greedy(m, src, 6, eos=0)
    assert len(set(want.flatten().tolist())) > 1  # the reference decodes varied tokens
    for incremental in (True, False):
        got = m.generate(src, max_len=6, bos=1, eos=0, incremental=incremental)
        assert torch.equal(got, want), (incremental, got.tolist(), want.tolist())


def test_cached_steps_return_every_output(build):
    """forward(cache=...) one token at a time: o0 (read off the source side, computed once)
    and o1's rows are those of the full call on the whole target."""
    m, src = model(build(SIDE))
    tgt = torch.randint(0, 20, (3, 5), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full = m(src=src, tgt=tgt).output
        cache: dict = {}
        for t in range(tgt.shape[1]):
            out = m(src=src, tgt=tgt[:, t:t + 1], cache=cache).output
            torch.testing.assert_close(out["o0"], full["o0"], rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(out["o1"][:, 0], full["o1"][:, t], rtol=1e-12,
                                       atol=1e-12)


def test_no_generate_without_target_position_logits(build):
    """An output of the vocabulary's size that does not run over the target (pooled) is
    not next-token logits: no generate(), and forward() takes no cache."""
    mod = build(NONE)
    assert not hasattr(mod.Model, "generate")
    assert "cache" not in inspect.signature(mod.Model.forward).parameters
