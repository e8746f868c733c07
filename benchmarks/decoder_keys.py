"""A recurrent decoder's additive attention with the keys projected once per sequence
(issue 24): Bahdanau et al.'s RNNsearch at paper width (vocab 30,000, embeddings 620, GRU
1,000, d_w 1,000), B 4, S 50, T 30, the generated model against the same model with the
per-step projection the generator wrote before (W2 h_j + b recomputed by the attention at
every decoder step), forward() and generate(). Both sides compute the same numbers and
write the same tokens (checked)."""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from taxcompile import run

ROOT = Path(__file__).resolve().parent.parent
B, S, T = 4, 50, 30


def per_step(model):
    """The same module, projecting the keys inside every step: the loop's one-off projection
    gives None and each step's call computes W2 h_j + b itself (as before issue 24)."""
    att = model.att
    project, forward = att.project_keys, att.forward
    att.project_keys = lambda k: None

    def step(q, k, v, key_mask=None, wk=None, **kw):
        return forward(q, k, v, key_mask, wk=project(k), **kw)

    att.forward = step
    return model


def decoder_keys(s) -> list[dict]:
    from .cases import row  # (cases lists this module in CASE_MODULES)

    path = ROOT / "generated" / "bahdanau2015_rnnsearch.py"
    mod = run.load_module(path.read_text(encoding="utf-8"), "bench_decoder_keys")
    torch.manual_seed(0)
    model = s.put(mod.Model(mod.Config()))  # paper width
    old = per_step(copy.deepcopy(model))
    g = torch.Generator().manual_seed(1)
    src = torch.randint(0, model.cfg.vocab, (B, S), generator=g).to(s.device)
    tgt = torch.randint(0, model.cfg.vocab, (B, T), generator=g).to(s.device)
    rows = []

    def forward(m):
        return lambda: m(src=src, tgt=tgt).output

    with torch.no_grad():
        err = (forward(model)() - forward(old)()).abs().max().item()
    if err > s.tol:
        raise AssertionError(f"projected once and per step differ by {err:.2e}")
    c, b = s.alternate(forward(model), forward(old))  # autograd on, as in training
    rows.append(row("decoder_keys_forward", "bahdanau2015 forward(), keys projected once",
                    "the same forward() projecting the keys at every step", c, b, c / b,
                    "< 1", c / b < 1, equivalence=f"max |diff| {err:.1e}", speedup=b / c))
    model.eval(), old.eval()

    def generate(m):
        return lambda: m.generate(src, max_len=T, bos=1, eos=2)

    tokens = generate(model)()
    if not torch.equal(tokens, generate(old)()):
        raise AssertionError("projected once and per step write different tokens")
    c, b = s.alternate(generate(model), generate(old))
    rows.append(row("decoder_keys_generate", f"bahdanau2015 generate() of {tokens.shape[1]} "
                    "tokens, keys projected once (cache)",
                    "the same generate() projecting the keys at every step", c, b, c / b,
                    "< 1", c / b < 1, equivalence="the same tokens", speedup=b / c))
    return rows


CASES = [decoder_keys]
