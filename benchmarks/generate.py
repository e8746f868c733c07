"""generate(): incremental decoding (the source side once, a KV cache or the carried
decoder state) against re-running the whole model on the prefix for every new token, at 64
generated tokens, for the Transformer (vaswani2017) and an RNN decoder (luong2015
global_dot). Both sides write the same tokens (checked)."""

from __future__ import annotations

from pathlib import Path

import torch

from taxcompile import run

from .harness import alternate

ROOT = Path(__file__).resolve().parent.parent
TOKENS = 64

MODELS = {  # case -> (generated file, Config overrides): small, CPU-friendly sizes
    "generate_transformer": ("vaswani2017_transformer",
                             dict(d_model=256, heads=4, layers=3, d_ff=1024, vocab=1000)),
    "generate_rnn": ("luong2015_global_dot", dict(hidden=256, layers=2, vocab=1000)),
}


def _decoder(stem: str, overrides: dict):
    path = ROOT / "generated" / f"{stem}.py"
    mod = run.load_module(path.read_text(encoding="utf-8"), f"bench_generate_{stem}")
    torch.manual_seed(0)
    model = mod.Model(mod.Config(**overrides)).eval()
    src = torch.randint(0, model.cfg.vocab, (8, 32), generator=torch.Generator().manual_seed(1))
    return model, src


def decoding(s) -> list[dict]:
    from .cases import row  # (cases lists this module in CASE_MODULES)

    rows = []
    for case, (stem, overrides) in MODELS.items():
        model, src = _decoder(stem, overrides)
        eos = model.cfg.vocab - 1

        def inc(model=model, src=src, eos=eos):
            return model.generate(src, max_len=TOKENS, bos=0, eos=eos)

        def full(model=model, src=src, eos=eos):
            return model.generate(src, max_len=TOKENS, bos=0, eos=eos, incremental=False)

        out = inc()  # (this check is the warm-up run of both sides)
        assert torch.equal(out, full()), f"{case}: incremental and full re-run differ"
        # the full re-run is slow (seconds): 1 timed run each in a --quick run, else 3
        c, b = alternate(inc, full, 1 if s.repeats < 10 else 3, warmup=0)
        rows.append(row(case, f"{stem}.generate(), incremental (cache)",
                        "generate(incremental=False): the whole model per new token", c, b,
                        c / b, "<= 0.5", c / b <= 0.5, tokens=out.shape[1], speedup=b / c))
    return rows


CASES = [decoding]
