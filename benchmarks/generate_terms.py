"""generate() with each position term: the KV cache (a step runs the new token alone, its
query placed after the cached keys) against re-running the whole model on the prefix for
every new token, for one small causal language model written with each term in turn:
rotary, ALiBi, Shaw et al.'s relative positions and Transformer-XL's relative term, and for
examples/modern_lm.attn (LLaMA-style: RMSNorm, rotary, grouped-query attention, qk-norm,
SwiGLU, tied embeddings) at its own sizes with a 1,000-token vocabulary. Both
sides write the same tokens (checked). Yang et al.'s Gaussian bias has no cached step (its
length I is the whole target's: see docs/codegen.md): a skipped row says so, and asking
for the cache is an error there. A last row times the cache's buffers (a step writes its own
rows) against concatenating the whole cache at every step, at a 1,024-token prompt."""

from __future__ import annotations

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


def _concatenated(cache, key, k, v):
    """The cache as it was: the earlier steps' keys and values copied at every step."""
    if cache is None:
        return k, v
    if key in cache:
        k = torch.cat([cache[key][0], k], 1)
        v = torch.cat([cache[key][1], v], 1)
    cache[key] = (k, v)
    return k, v


def buffers(s) -> list[dict]:
    from .cases import row

    model, _ = _model("position = rotary")
    glob = type(model).forward.__globals__  # the generated module's namespace
    own = glob["extend_cache"]
    prompt = torch.randint(1, 999, (B, 1024), generator=torch.Generator().manual_seed(1))

    def with_(fn):
        def go():
            glob["extend_cache"] = fn
            try:
                return model.generate(max_len=16, bos=0, eos=999, prompt=prompt,
                                       incremental=True)
            finally:
                glob["extend_cache"] = own
        return go

    out = with_(own)()
    assert torch.equal(out, with_(_concatenated)()), "buffers and concatenation differ"
    c, b = alternate(with_(own), with_(_concatenated), 3, warmup=0)
    return [row("generate_kv_buffers", "generate() after a 1,024-token prompt, KV buffers",
                "the same cache concatenated at every step", c, b, c / b, "< 1", c / b < 1,
                speedup=b / c, equivalence="the same tokens")]


CASES = [terms, buffers]
