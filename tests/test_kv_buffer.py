"""generate()'s KV cache keeps its keys and values in buffers that a step writes into (its
own rows only), grown by doubling; under autograd it concatenates, so that a cached forward()
can still be trained through. Each cached step is checked against the keys and values of
the whole prefix computed at once (the independent oracle: no cache at all)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch_support import LM, inline_fixture, one_thread  # noqa: E402, F401

HEADER = """\
paper p {
    cite  = "Test"
    title = "KV buffers"
    year  = 2024
}
"""

gen = inline_fixture("kv_buffer", HEADER)


@pytest.fixture(scope="module")
def mod(gen):
    return gen(LM.format(mods=""))  # no position term: the model keeps the keys


def _model(mod):
    torch.manual_seed(0)
    return mod.Model(mod.Config()).double().eval()


def test_a_step_writes_into_the_buffer_and_reads_what_the_whole_prefix_gives(mod, one_thread):
    m = _model(mod)
    toks = torch.randint(1, 30, (3, 14), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full = m(tokens=toks).output  # (3, 14, 30): every position from the whole prefix
        cache = {}
        out = [m(tokens=toks[:, :5], cache=cache).output]
        key = next(k for k in cache if not k.startswith("@") and "self" in k)
        kb, vb, n = cache[key]
        assert n == 5 and kb.shape[1] == 10  # room for as many rows again
        for t in range(5, 14):
            out.append(m(tokens=toks[:, t:t + 1], cache=cache, validate=False).output)
            grown = cache[key][0]
            if t < 10:  # within the capacity: the same storage, written in place
                assert grown.data_ptr() == kb.data_ptr()
            assert cache[key][2] == t + 1
        assert cache[key][0].shape[1] >= 14
    torch.testing.assert_close(torch.cat(out, 1), full, atol=1e-10, rtol=0)


def test_beam_search_reorders_the_buffers_rows(mod, one_thread):
    m = _model(mod)
    cached = m.generate(max_len=12, bos=1, eos=0, strategy="beam", beams=3, batch_size=2,
                        incremental=True)
    full = m.generate(max_len=12, bos=1, eos=0, strategy="beam", beams=3, batch_size=2,
                      incremental=False)
    assert torch.equal(cached, full)


def test_under_autograd_the_cache_concatenates_and_backward_runs(mod, one_thread):
    m = _model(mod).train()
    toks = torch.randint(1, 30, (2, 6), generator=torch.Generator().manual_seed(3))
    cache = {}
    a = m(tokens=toks[:, :3], cache=cache).output
    b = m(tokens=toks[:, 3:], cache=cache).output  # reads the first call's keys
    (a.sum() + b.sum()).backward()  # an in-place write would break the first call's graph
    with torch.no_grad():
        full = m.eval()(tokens=toks).output
    torch.testing.assert_close(torch.cat([a, b], 1).detach(), full, atol=1e-10, rtol=0)
