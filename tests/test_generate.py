"""generate() of every model with an autoregressive input, at Config.tiny() sizes, float64.

The incremental decoder (the source side run once, a KV cache for attention decoders,
the carried state for recurrent ones) must write exactly the tokens of decoding by full
re-runs written here: the whole model run on each prefix, its last position read. Beam
search is checked against an independent list-based beam search over full re-runs."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from taxcompile.run import load_module  # noqa: E402
from torch_support import assert_generate_is_greedy, fast_cpu  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DT = torch.float64
STEMS = ["vaswani2017_transformer", "bahdanau2015_rnnsearch", "luong2015_global_dot",
         "luong2015_global_location", "luong2015_local_m", "luong2015_local_p",
         "xu2015_soft", "xu2015_hard"]


@pytest.fixture(autouse=True)
def one_thread():
    with fast_cpu():
        yield


def build(mod, default_init: bool = False):
    torch.manual_seed(0)
    m = mod.Model(mod.Config.tiny())
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # every parameter random and large: peaked, distinct next tokens
        for p in m.parameters():
            if not default_init:  # (the Transformer's default init already varies its tokens)
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return m.to(DT).eval()


_models: dict = {}


def model_of(stem: str):
    if stem not in _models:
        path = ROOT / "generated" / f"{stem}.py"
        mod = load_module(path.read_text(encoding="utf-8"), f"_taxcompile_generate_{stem}")
        _models[stem] = (build(mod, default_init=stem.startswith("vaswani")), mod)
    return _models[stem]


def sources(m, mod, B: int = 2) -> tuple[dict, str]:
    """generate()'s source inputs (keywords) from example_inputs, and the target's name."""
    ex = mod.example_inputs(B, seed=3, cfg=m.cfg)
    params = list(inspect.signature(m.generate).parameters)
    src = params[: params.index("max_len")]
    target = next(k for k in ex if k not in src and not k.endswith("_mask"))
    kw = {k: (x.to(DT) if x.is_floating_point() else x) for k, x in ex.items()
          if k in src or (k.endswith("_mask") and k[:-5] in src)}
    return kw, target


def full_logp(m, kw: dict, target: str, tokens: torch.Tensor) -> torch.Tensor:
    """The whole model on the prefixes: log p(next token) at their last position."""
    kw = {k: x for k, x in kw.items() if k != "_"}  # "_": only the batch size
    with torch.no_grad():
        return m(**kw, **{target: tokens}).output[:, -1].log_softmax(-1)


def greedy_rerun(m, kw, target, max_len, bos, eos) -> torch.Tensor:
    B = next(iter(kw.values())).shape[0]
    tokens = torch.full((B, 1), bos)
    done = torch.zeros(B, dtype=torch.bool)
    for _ in range(max_len):
        nxt = full_logp(m, kw, target, tokens).argmax(-1)
        nxt[done] = eos
        tokens = torch.cat([tokens, nxt[:, None]], 1)
        done |= nxt == eos
        if done.all():
            break
    return tokens[:, 1:]


def beam_rerun(m, kw, target, K, max_len, bos, eos, alpha) -> list[list[int]]:
    """Beam search per example over Python lists: hypotheses (score, tokens, finished,
    length); a finished one is carried with eos appended at no cost; the K best sums are
    kept; the answer maximises sum / length ** alpha."""
    B = next(iter(kw.values())).shape[0]
    out = []
    for b in range(B):
        one = {k: x[b:b + 1] for k, x in kw.items() if x is not None}
        hyps = [(0.0, [bos], False, 0)]
        for _ in range(max_len):
            cands = []
            for score, toks, done, n in hyps:
                if done:
                    cands.append((score, toks + [eos], True, n))
                    continue
                logp = full_logp(m, one, target, torch.tensor([toks]))[0].tolist()
                cands += [(score + lp, toks + [v], v == eos, n + 1) for v, lp in enumerate(logp)]
            hyps = sorted(cands, key=lambda c: -c[0])[:K]
            if all(h[2] for h in hyps):
                break
        best = max(hyps, key=lambda h: h[0] / max(h[3], 1) ** alpha)
        out.append(best[1][1:])
    return out


def padded(rows: list[list[int]], eos: int) -> torch.Tensor:
    L = max(len(r) for r in rows)
    return torch.tensor([r + [eos] * (L - len(r)) for r in rows])


def test_every_autoregressive_model_has_generate():
    have = {p.stem for p in (ROOT / "generated").glob("*.py")
            if "def generate(" in p.read_text(encoding="utf-8")}
    assert have == set(STEMS)


@pytest.mark.parametrize("stem", STEMS)
def test_greedy_and_beam_match_full_reruns(stem):
    m, mod = model_of(stem)
    kw, target = sources(m, mod)
    V, bos, max_len = m.cfg.vocab, 1, 7
    free = greedy_rerun(m, kw, target, max_len, bos, eos=V - 1)
    eos = int(free[0, 2])  # a token the greedy decoder writes: some sequence stops early
    want = greedy_rerun(m, kw, target, max_len, bos, eos)
    got = m.generate(**kw, max_len=max_len, bos=bos, eos=eos)
    assert torch.equal(got, want)
    assert torch.equal(m.generate(**kw, max_len=max_len, bos=bos, eos=eos, incremental=False),
                       want)
    # the cached forward, token by token, gives the full run's log-probabilities
    cache, prefix = {}, torch.cat([torch.full((want.shape[0], 1), bos), want], 1)
    for t in range(prefix.shape[1]):
        with torch.no_grad():
            out = m(**kw, **{target: prefix[:, t: t + 1] if t else prefix[:, :1]}, cache=cache)
        step = out.output[:, -1].log_softmax(-1)
        torch.testing.assert_close(step, full_logp(m, kw, target, prefix[:, : t + 1]),
                                   rtol=0, atol=1e-9)
    # eos stops a sequence: pad (= eos) after it, the tokens before are the free run's
    row, j = got[0].tolist(), free[0].tolist().index(eos)
    assert row[: j + 1] == free[0, : j + 1].tolist() and set(row[j:]) == {eos}
    assert got.shape[1] <= max_len
    # beam search: plain log-probability and per-token normalised
    for K, alpha in ((3, 0.0), (2, 1.0)):
        ref = padded(beam_rerun(m, kw, target, K, 5, bos, eos, alpha), eos)
        got = m.generate(**kw, max_len=5, bos=bos, eos=eos, strategy="beam", beams=K,
                         length_penalty=alpha)
        assert torch.equal(got[:, : ref.shape[1]], ref), (K, alpha)
        assert set(got[:, ref.shape[1]:].flatten().tolist()) <= {eos}
    # beams = 1 is greedy
    assert torch.equal(m.generate(**kw, max_len=max_len, bos=bos, eos=eos, strategy="beam",
                                  beams=1), want)


@pytest.mark.parametrize("stem", ["vaswani2017_transformer", "luong2015_global_dot"])
def test_sampling(stem):
    m, mod = model_of(stem)
    kw, target = sources(m, mod)
    V, bos, n = m.cfg.vocab, 0, 6

    def sample(seed, **opts):
        return m.generate(**kw, max_len=n, bos=bos, eos=V - 1, strategy="sample",
                          generator=torch.Generator().manual_seed(seed), **opts)

    assert torch.equal(sample(5, temperature=1.5), sample(5, temperature=1.5))
    assert not all(torch.equal(sample(5), sample(s)) for s in range(6, 10))
    greedy = m.generate(**kw, max_len=n, bos=bos, eos=V - 1)
    assert torch.equal(sample(7, top_k=1), greedy)
    assert torch.equal(sample(7, top_p=1e-9), greedy)  # the nucleus is the argmax alone
    # top_k = 3: every token is among the 3 most likely after its prefix (full re-run)
    got = sample(11, top_k=3, temperature=5.0)
    B = got.shape[0]
    prefix = torch.cat([torch.full((B, 1), bos), got], 1)
    for t in range(got.shape[1]):
        top = full_logp(m, kw, target, prefix[:, : t + 1]).topk(3, -1).indices
        live = (prefix[:, 1: t + 1] != V - 1).all(-1)  # before this row's eos
        assert ((top == got[:, t: t + 1]).any(-1) | ~live).all()


def test_max_len_and_bad_arguments():
    m, mod = model_of("vaswani2017_transformer")
    kw, target = sources(m, mod)
    V = m.cfg.vocab
    for n in (1, 4):
        out = m.generate(**kw, max_len=n, bos=0, eos=V - 1, pad=0)
        assert out.shape[1] <= n and out.dtype == torch.long
    bad = [dict(max_len=0), dict(bos=V), dict(eos=-1), dict(strategy="beam", beams=0),
           dict(strategy="sample", top_p=0.0), dict(strategy="sample", top_p=1.5),
           dict(strategy="sample", top_k=0), dict(strategy="sample", temperature=0.0),
           dict(strategy="nucleus")]
    for b in bad:
        args = dict(max_len=3, bos=0, eos=1) | b
        with pytest.raises(ValueError, match="generate"):
            m.generate(**kw, **args)
    with pytest.raises(ValueError, match=f"{target}_mask"):
        m(**kw, **{target: torch.zeros(2, 1, dtype=torch.long)},
          **{f"{target}_mask": torch.ones(2, 1, dtype=torch.bool)}, cache={})


def test_example_decoder_generates(tmp_path):
    """examples/attention_via_attention.attn: a GRU decoder with two fed attentions."""
    subprocess.run([sys.executable, "-m", "taxcompile", "compile",
                    str(ROOT / "examples" / "attention_via_attention.attn"), "-o", str(tmp_path)],
                   check=True, capture_output=True)
    path = next(tmp_path.glob("*.py"))
    mod = load_module(path.read_text(encoding="utf-8"), "_taxcompile_generate_ava")
    m = build(mod)
    kw, target = sources(m, mod)
    want = greedy_rerun(m, kw, target, 5, 1, eos=2)
    assert torch.equal(m.generate(**kw, max_len=5, bos=1, eos=2), want)


def test_readme_decoding_example_runs():
    """README's generate() snippet, as written, against generated/ (float32, B * beams rows
    beyond the encoder's layer count: the source side is not reordered)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    code = text.split("```python\nimport torch\nfrom generated.luong2015", 1)[1].split("```")[0]
    code = "import torch\nfrom generated.luong2015" + code
    sys.path.insert(0, str(ROOT))
    try:
        scope: dict = {}
        exec(compile(code, "README.md", "exec"), scope)  # noqa: S102 - our own documentation
    finally:
        sys.path.remove(str(ROOT))
        for name in [m for m in sys.modules if m == "generated" or m.startswith("generated.")]:
            del sys.modules[name]
    for name in ("greedy", "beam", "sampled"):
        out = scope[name]
        assert out.shape[0] == 2 and 1 <= out.shape[1] <= 20 and out.dtype == torch.long
        assert int(out.min()) >= 0 and int(out.max()) < 50


HEADER = """\
paper gen {
    cite  = "Test"
    title = "generate() tests"
    year  = 2024
}
"""

LEARNED = """
model learned {
    input src: tokens[S] (vocab = 40)
    input tgt: tokens[T] (vocab = 40, autoregressive)
    feature x = embed(src, 16)
    feature y = positional(embed(tgt, 16), kind = learned)
    attention self {
        query = project(y)  keys = project(y)  values = project(y)
        score = scaled_multiplicative  heads = 2  mask = causal
    }
    update y = norm(y + self)
    attention cross { query = project(y)  keys = project(x)  values = x  score = general }
    output logits = classify(concat(y, cross), 40)
}
"""

MIXED = """
model mixed {
    input src: tokens[S] (vocab = 40)
    input tgt: tokens[T] (vocab = 40, autoregressive)
    feature x = embed(src, 16)
    query q = lstm(embed(tgt, 16), 16)
    attention att { query = q  features = x  score = multiplicative }
    output logits = classify(concat(q, att), 40)
}
"""


@pytest.mark.parametrize("body, incremental", [(LEARNED, True), (MIXED, False)])
def test_inline_decoders(tmp_path, body, incremental):
    """A learned position table read from `past` on, a causal self-attention over the
    target beside a cross-attention over raw source values; and a recurrence over the
    target without `feed` (no incremental step: generate() re-runs the whole model)."""
    from torch_support import inline_builder

    mod = inline_builder(tmp_path, HEADER, "_taxcompile_generate_inline")(body)
    assert ("cache" in inspect.signature(mod.Model.forward).parameters) == incremental
    m = build(mod)
    kw, target = sources(m, mod)
    for eos in (39, int(greedy_rerun(m, kw, target, 6, 1, eos=39)[1, 1])):
        want = greedy_rerun(m, kw, target, 6, 1, eos)
        assert torch.equal(m.generate(**kw, max_len=6, bos=1, eos=eos), want)
    ref = padded(beam_rerun(m, kw, target, 2, 4, 1, eos, 0.0), eos)
    got = m.generate(**kw, max_len=4, bos=1, eos=eos, strategy="beam", beams=2)
    assert torch.equal(got[:, : ref.shape[1]], ref)


def test_decoder_only_model(tmp_path):
    """No source input: generate(batch_size=...) from bos alone, with the KV cache."""
    from torch_support import inline_builder

    body = """
model lm {
    input tgt: tokens[T] (vocab = 30, autoregressive)
    feature y = positional(embed(tgt, 16), kind = sinusoid)
    attention a {
        query = project(y)  keys = project(y)  values = project(y)
        score = scaled_multiplicative  mask = causal
    }
    output logits = classify(concat(y, a), 30)
}
"""
    mod = inline_builder(tmp_path, HEADER, "_taxcompile_generate_lm")(body)
    m = build(mod, default_init=True)
    assert "cache" in inspect.signature(mod.Model.forward).parameters
    want = greedy_rerun(m, {"_": torch.zeros(3, 1)}, "tgt", 6, 1, eos=29)  # (B = 3 rows)
    assert torch.equal(m.generate(max_len=6, bos=1, eos=29, batch_size=3), want)


@pytest.mark.parametrize("example", ["alibi", "rotary", "ramapuram2024_sigmoid_attention",
                                     "ye2024_differential"])
def test_position_terms_decode_as_the_full_run(tmp_path, example):
    """A position term in the scores (ALiBi, rotary) places the step's query after the
    cached keys, and sigmoid attention's b = -log n and differential attention's two maps
    read the cache's keys: generate() writes the tokens of a greedy loop over full runs."""
    subprocess.run([sys.executable, "-m", "taxcompile", "compile",
                    str(ROOT / "examples" / f"{example}.attn"), "-o", str(tmp_path)],
                   check=True, capture_output=True)
    path = next(tmp_path.glob("*.py"))
    mod = load_module(path.read_text(encoding="utf-8"), f"_taxcompile_generate_{example}")
    torch.manual_seed(0)
    m = mod.Model(mod.Config.tiny()).double().eval()
    assert_generate_is_greedy(m)


GAUSSIAN = """
model localness {
    input tgt: tokens[T] (vocab = 30, autoregressive)
    feature y = embed(tgt, 16)
    attention self {
        query = project(y)  keys = project(y)  values = project(y)
        score = scaled_multiplicative  mask = causal  bias = gaussian
    }
    output logits = classify(self, 30)
}
"""


@pytest.mark.parametrize("body, why", [
    (MIXED, "`lstm` in `q` mixes the target's positions"),
    (GAUSSIAN, "attention `self`'s gaussian term reads the whole target"),
])
def test_a_cached_step_asked_of_a_model_without_one_is_refused_with_the_reason(
        tmp_path, body, why):
    """generate(incremental=True) on a model whose target side cannot step on the new token
    alone says why instead of silently re-running the prefix; the default re-runs it."""
    from torch_support import inline_builder

    mod = inline_builder(tmp_path, HEADER, "_taxcompile_generate_refused")(body)
    assert "cache" not in inspect.signature(mod.Model.forward).parameters
    m = build(mod)
    kw, target = sources(m, mod)
    kw = kw or {"batch_size": 2}
    with pytest.raises(ValueError, match=re.escape(why)):
        m.generate(**kw, max_len=3, bos=1, eos=2, incremental=True)
    assert m.generate(**kw, max_len=3, bos=1, eos=2).shape[0] == 2
