"""A module that turns each key by itself (rotary positions, qk-norm) keeps generate()'s KV
cache inside, after the turn (forward()'s `kv_cache`): a step turns its one new key, not
every cached key again. Each case runs a prefix, then one token at a time, and is checked
against the whole sequence run at once without a cache (the independent oracle: the keys
turned at positions 0 … L − 1 in one call, the causal kernel), in float64."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch_support import LM, inline_fixture, one_thread  # noqa: E402, F401

HEADER = """\
paper p {
    cite  = "Test"
    title = "Turned keys in the cache"
    year  = 2024
}
"""

CASES = {
    "rotary": "position = rotary",
    "qk_norm": "qk_norm = true",
    "rms_rotary": "qk_norm = rms  position = rotary",
    "gqa_rotary": "position = rotary  kv_heads = 1",
    "memory_qk_norm": "qk_norm = true  mem_kv = 2",
    "groups_rotary": "qk_norm = l2(scale = 8, groups = 2, dim_scale = true)  position = rotary",
    "sparsemax_rotary": "position = rotary  align = sparsemax",
    "talking_rotary": "position = rotary  talking_heads = true",
    # position terms: the cache per head, read by the explicit path without a copy
    "alibi": "bias = alibi",
    "relative": "position = relative(k = 2, values = true)",
    "transformer_xl": "position = transformer_xl",
}

gen = inline_fixture("turned_keys", HEADER)


def _model(gen, case):
    mod = gen(LM.format(mods=CASES[case]))
    torch.manual_seed(0)
    return mod, mod.Model(mod.Config()).double().eval()


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_cached_step_is_the_whole_run_and_turns_only_its_new_keys(gen, case, one_thread):
    mod, m = _model(gen, case)
    toks = torch.randint(1, 30, (3, 11), generator=torch.Generator().manual_seed(4))
    seen = []  # the positions each rotary() call turns
    if "rotary" in CASES[case]:
        own = mod.rotary

        def counted(x, base, start=0):
            seen.append(x.shape[-2])
            return own(x, base, start)

        mod.rotary = counted
    try:
        with torch.no_grad():
            full = m(tokens=toks).output  # (3, 11, 30)
            cache = {}
            out = [m(tokens=toks[:, :4], cache=cache).output]
            seen.clear()
            for t in range(4, 11):
                out.append(m(tokens=toks[:, t:t + 1], cache=cache, validate=False).output)
    finally:
        if "rotary" in CASES[case]:
            mod.rotary = own
    torch.testing.assert_close(torch.cat(out, 1), full, atol=1e-10, rtol=0)
    held = [v for k, v in cache.items() if not k.startswith("@")]
    assert held and all(kb.dim() == 4 and n == 11 for kb, _, n in held)  # (N, H, cap, d)
    if seen:
        assert set(seen) == {1}, seen  # q and k of the new position only


def test_beam_search_with_turned_keys_equals_the_reruns(gen, one_thread):
    _, m = _model(gen, "rms_rotary")
    kw = dict(max_len=10, bos=1, eos=0, strategy="beam", beams=3, batch_size=2)
    assert torch.equal(m.generate(**kw, incremental=True), m.generate(**kw, incremental=False))
