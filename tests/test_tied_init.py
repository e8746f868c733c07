"""A tied output layer starts near chance: ``classify(y, V, tie = x)`` reads its logits
off x's embedding E (y Eᵀ + b), so E is drawn for that use as well as for the input's. At
initialisation, on random tokens, the cross-entropy of every tied model of specs/ and
examples/ and of the specs below is within MARGIN of ln V (the loss of uniform logits),
as an untied model's output layer starts; the untied equivalents are unaffected.

Before, an unscaled tied embedding kept nn.Embedding's N(0, 1) rows and a scaled one
N(0, 1/d): the logit of the token whose embedding y carries was up to d (√d), and the
language model below started at a loss of 244 (13 scaled) where ln V = 4.16; the
Transformer of specs/ at ln V + 1.7. Now the rows start N(0, 1/d²) (``tied_embedding``)."""

from __future__ import annotations

import math

import pytest

from conftest import ROOT
from taxcompile import checks, codegen, ir, pipeline

torch = pytest.importorskip("torch")
F = torch.nn.functional

from taxcompile.run import load_module  # noqa: E402
from torch_support import build_model, one_thread  # noqa: E402, F401

MARGIN = 0.25  # |initial loss - ln V| on random tokens, for every tied model
HEADER = 'paper t { cite = "T" }\n'


def tied_outputs(m: ir.Model) -> list[str]:
    """The outputs of model m whose classify is tied to an embedding."""
    return [n.id for n in m.nodes if isinstance(n, ir.Node) and n.kind_ == "output"
            and any(op.fn == "classify" and op.param("tie") is not None
                    for op in checks.operations(n.expr))]


def _tied_variants():
    out = []
    for d in ("specs", "examples"):
        for path in sorted((ROOT / d).glob("*.attn")):
            cs = pipeline.load(path)
            for i, cm in enumerate(cs.models):
                if tied_outputs(cm.model):
                    out.append(pytest.param(path, i, id=codegen.output_name(cs, cm)[:-3]))
    return out


def initial_loss(mod, cfg, output: str, seeds=range(4), batch: int = 8) -> tuple[float, int]:
    """The mean cross-entropy of output ``output`` against uniformly random classes, over
    models initialised with ``seeds`` (eval mode: no dropout), and the number of classes
    (the classes drawn apart from the inputs: a tied model predicts its input token)."""
    losses = []
    for seed in seeds:
        torch.manual_seed(seed)
        model = mod.Model(cfg).eval()
        with torch.no_grad():
            out = model(**mod.example_inputs(batch, seed=seed, cfg=cfg)).output
        logits = out[output] if isinstance(out, dict) else out
        V = logits.shape[-1]
        g = torch.Generator().manual_seed(1000 + seed)
        target = torch.randint(0, V, logits.shape[:-1], generator=g)
        losses.append(float(F.cross_entropy(logits.reshape(-1, V), target.reshape(-1))))
    return sum(losses) / len(losses), V


@pytest.mark.parametrize("path, index", _tied_variants())
@pytest.mark.parametrize("size", ["tiny", "full"])
def test_every_tied_model_of_the_specs_starts_near_chance(path, index, size):
    cs = pipeline.load(path)
    cm = cs.models[index]
    mod = load_module(codegen.generate(cs, cm, str(path)), f"tied_{cm.model.name}")
    cfg = mod.Config.tiny() if size == "tiny" else mod.Config()
    for output in tied_outputs(cm.model):
        loss, V = initial_loss(mod, cfg, output, seeds=range(4 if size == "tiny" else 1),
                               batch=8 if size == "tiny" else 2)
        assert abs(loss - math.log(V)) < MARGIN, (output, loss, math.log(V))


# A decoder-only language model over an unscaled embedding, tied (x-transformers' and
# nanoGPT's setting) and untied, one scaled with sinusoids (Vaswani et al.'s embedding),
# and an LSTM's: y carries the embedding of its own token into the tied output layer.
LM = """let d = 256
let vocab = 64
model tied {
    input tgt: tokens[T] (vocab = vocab, autoregressive)
    feature x = embed(tgt, d)
    attention self {
        query = project(x)  keys = project(x)  values = project(x)
        score = scaled_multiplicative  heads = 4  mask = causal
    }
    update x = norm(x + self)
    update x = norm(x + ffn(x, 512))
    output logits = classify(x, vocab, tie = x)
}
model untied : tied {
    output logits = classify(x, vocab)
}
model scaled : tied {
    feature x = positional(embed(tgt, d, scale = true), kind = sinusoid)
}
model untied_scaled : scaled {
    output logits = classify(x, vocab)
}
model lstm {
    input tgt: tokens[T] (vocab = vocab, autoregressive)
    feature e = embed(tgt, d)
    feature h = lstm(e, d)
    attention a { query = h  keys = h  score = multiplicative  mask = forward }
    output logits = classify(h + a, vocab, tie = e)
}
"""


@pytest.mark.parametrize("model", [0, 2, 4], ids=["tied", "scaled", "lstm"])
def test_a_tied_language_model_starts_near_ln_v(model):
    mod = build_model(HEADER + LM, f"tied_lm_{model}", model)
    loss, V = initial_loss(mod, mod.Config(), "logits")
    assert V == 64 and abs(loss - math.log(V)) < MARGIN, (loss, math.log(V))


def test_the_untied_models_keep_their_initialisation():
    """Untied, the embedding keeps nn.Embedding's N(0, 1) rows, or N(0, 1/d) with `scale =
    true` (so that √d E has unit variance), and the output layer is an nn.Linear of its
    own: all as before, and the loss starts near ln V too."""
    for index, std in ((1, 1.0), (3, 256 ** -0.5)):
        mod = build_model(HEADER + LM, f"untied_lm_{index}", index)
        torch.manual_seed(0)
        model = mod.Model(mod.Config())
        assert isinstance(model.logits_head, torch.nn.Linear)
        assert abs(float(model.x_embed.weight.detach().std()) / std - 1) < 0.05
        loss, V = initial_loss(mod, mod.Config(), "logits")
        assert abs(loss - math.log(V)) < MARGIN
