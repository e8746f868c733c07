"""generate() with each position term: the KV cache (a step runs the new token alone, its
query placed after the cached keys) against re-running the whole model on the prefix for
every new token, for one small causal language model written with each term in turn:
rotary, ALiBi, Shaw et al.'s relative positions and Transformer-XL's relative term, and for
examples/modern_lm.attn (LLaMA-style: RMSNorm, rotary, grouped-query attention, qk-norm,
SwiGLU, tied embeddings) at its own sizes with a 1,000-token vocabulary. Both
sides write the same tokens (checked). Yang et al.'s Gaussian bias has no cached step (its
length I is the whole target's: see docs/codegen.md): a skipped row says so, and asking
for the cache is an error there. Two more rows, after a 1,024-token prompt: the cache's buffers (a step writes its own rows)
against concatenating the whole cache at every step, and a rotary module that keeps its
keys after RoPE against the cache of keys before it (every key turned again each step)."""

from __future__ import annotations

import time
from pathlib import Path

import torch

import taxcompile

from .harness import alternate

TOKENS = 64
B = 8

SPEC = """
paper bench {{
    cite  = "Benchmark"
    title = "generate() with a position term"
    year  = 2024
}}

model lm {{
    input tokens: tokens[T] (vocab = 1000, autoregressive)
    feature x = embed(tokens, 256)
    repeat decoder 2 {{
        attention self {{
            query = project(x)  keys = project(x)  values = project(x)
            score = scaled_multiplicative  heads = 4  mask = causal  {term}
        }}
        update x = norm(x + self)
        update x = norm(x + ffn(x, 1024))
    }}
    output logits = classify(x, 1000)
}}
"""

TERMS = {  # case -> the statement's term
    "generate_rotary": "position = rotary",
    "generate_alibi": "bias = alibi",
    "generate_relative": "position = relative(k = 16)",
    "generate_transformer_xl": "position = transformer_xl",
}


def _model(term: str):
    """The model, with `eos` (999) made unreachable so that every row writes TOKENS tokens
    (a random model would soon write it), and prompts that differ per row."""
    torch.manual_seed(0)
    model = taxcompile.build(SPEC.format(term=term)).eval()
    out = [m for m in model.modules() if isinstance(m, torch.nn.Linear) and m.out_features == 1000]
    with torch.no_grad():
        out[-1].weight[999] = 0.0
        out[-1].bias[999] = -1e4
    prompt = torch.randint(1, 999, (B, 4), generator=torch.Generator().manual_seed(1))
    return model, prompt


MODERN_LM = Path(__file__).resolve().parent.parent / "examples" / "modern_lm.attn"


def _modern_lm():
    """examples/modern_lm.attn with vocab 1000 and eos (999) unreachable: its output layer
    is the embedding (tied), so the bias alone shuts eos out."""
    torch.manual_seed(0)
    model = taxcompile.build(MODERN_LM, vocab=1000).eval()
    with torch.no_grad():
        model.logits_bias[999] = -1e4
    prompt = torch.randint(1, 999, (B, 4), generator=torch.Generator().manual_seed(1))
    return model, prompt


def _row(case: str, what: str, model, prompt, s) -> dict:
    from .cases import row

    def inc():
        return model.generate(max_len=TOKENS, bos=0, eos=999, prompt=prompt, incremental=True)

    def full():
        return model.generate(max_len=TOKENS, bos=0, eos=999, prompt=prompt, incremental=False)

    out = inc()  # (this check is the warm-up run of both sides)
    assert out.shape == (B, TOKENS), out.shape
    assert torch.equal(out, full()), f"{case}: the cache and the full re-run differ"
    # the median of 3 alternations even in a quick run: on a loaded machine one timing of
    # each side put the same code anywhere from 0.2 to over 1
    c, b = alternate(inc, full, 3, warmup=0)
    return row(case, what, "generate(incremental=False): the whole model per new token", c, b,
               c / b, "<= 0.5", c / b <= 0.5, tokens=out.shape[1], speedup=b / c,
               equivalence="the same tokens")


def terms(s) -> list[dict]:
    from .cases import skipped  # (cases lists this module in CASE_MODULES)

    rows = [_row(case, f"generate(), KV cache, `{term}`", *_model(term), s)
            for case, term in TERMS.items()]
    rows.append(skipped("generate_gaussian", "generate(), KV cache, `bias = gaussian`",
                        "generate(incremental=False)", "<= 0.5",
                        "no cached step: the Gaussian bias's length I is the whole target's, "
                        "so every step re-runs the prefix (incremental=True is an error)"))
    rows.append(_row("generate_modern_lm", "generate(), KV cache, examples/modern_lm.attn",
                     *_modern_lm(), s))
    return rows


def _concatenated(cache, key, k, v, dim=1):
    """The cache as it was: the earlier steps' keys and values copied at every step."""
    if cache is None:
        return k, v
    if key in cache:
        k = torch.cat([cache[key][0], k], dim)
        v = torch.cat([cache[key][1], v], dim)
    cache[key] = (k, v)
    return k, v


STEPS = 16  # single-token steps timed after the prompt


def _steps(model, prompt, patch=None):
    """Run the prompt into a fresh cache (not timed), then STEPS single-token forward() calls;
    returns (seconds of the steps, their logits), the generated module's extend_cache
    replaced by `patch` throughout (None: as generated)."""
    glob = type(model).forward.__globals__  # the generated module's namespace
    own = glob["extend_cache"]
    glob["extend_cache"] = patch or own
    try:
        with torch.no_grad():
            cache = {}
            model(tokens=prompt[:, :-STEPS], cache=cache)
            start = time.perf_counter()
            out = [model(tokens=prompt[:, t:t + 1], cache=cache, validate=False).output
                   for t in range(prompt.shape[1] - STEPS, prompt.shape[1])]
            return time.perf_counter() - start, torch.cat(out, 1)
    finally:
        glob["extend_cache"] = own


def _compare(a, b, repeats: int = 3) -> tuple[float, float]:
    """Median step seconds of the two sides, alternated; their logits must agree."""
    ta, tb = [], []
    for _ in range(repeats):
        (x, la), (y, lb) = a(), b()
        torch.testing.assert_close(la, lb, rtol=1e-5, atol=1e-5)
        ta.append(x), tb.append(y)
    return sorted(ta)[len(ta) // 2], sorted(tb)[len(tb) // 2]


def _cache_outside(term: str):
    """The model as the generator wrote it before a module kept its cache: the KV cache
    holds the keys before RoPE and the head split, so that every step turns all of them
    again (and the scores' explicit path copies them per head)."""
    import taxcompile.mechanisms as mech

    own = mech.cached_inside
    mech.cached_inside = lambda n: False
    try:
        return _model(term)[0]
    finally:
        mech.cached_inside = own


def buffers(s) -> list[dict]:
    from .cases import row

    prompt = torch.randint(1, 999, (B, 1024 + STEPS), generator=torch.Generator().manual_seed(1))
    model = _model("")[0]  # no position term: the model itself keeps the keys
    c, b = _compare(lambda: _steps(model, prompt), lambda: _steps(model, prompt, _concatenated))
    rows = [row("generate_kv_buffers", f"{STEPS} decoding steps at a 1,024-token KV cache, "
                "buffers (no position term)", "the same cache concatenated at every step",
                c, b, c / b, "< 1", c / b < 1, speedup=b / c, equivalence="the same logits")]
    turned, plain = _model("position = rotary")[0], _cache_outside("position = rotary")
    plain.load_state_dict(turned.state_dict())
    c, b = _compare(lambda: _steps(turned, prompt), lambda: _steps(plain, prompt))
    rows.append(row("generate_turned_keys", f"{STEPS} decoding steps at a 1,024-token cache, "
                    "the module keeping its keys after RoPE", "the cache of keys before RoPE, "
                    "every key turned again at each step", c, b, c / b, "<= 0.5", c / b <= 0.5,
                    speedup=b / c, equivalence="the same logits"))
    held, plain = _model("bias = alibi")[0], _cache_outside("bias = alibi")
    plain.load_state_dict(held.state_dict())
    c, b = _compare(lambda: _steps(held, prompt), lambda: _steps(plain, prompt))
    rows.append(row("generate_alibi_held", f"{STEPS} decoding steps at a 1,024-token cache, "
                    "ALiBi, the module keeping its keys per head", "the model's cache, "
                    "split into heads (and copied for the scores) at every step", c, b, c / b,
                    "< 1", c / b < 1, speedup=b / c, equivalence="the same logits"))
    return rows


CASES = [terms, buffers]
