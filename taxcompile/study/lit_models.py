"""The models of the literature's tasks (``lit_tasks``): a two-layer causal language
model over the sequence with one sequence mixer per model, as zoology's MQAR sweep and
mad-lab's benchmark build them, each written as an ``.attn`` spec.

Three mixers, each in every layer (pre-norm, residual), then a norm and a per-position
output layer:

- ``attention``: causal softmax attention, one head, q·k / √d (zoology's ``MHA`` with
  one head), over learned position embeddings (zoology gives positions to attention
  only);
- ``conv``: a gated causal convolution, (n W1) ⊙ conv(n W2) with a depthwise kernel of 3
  in the first layer and of L (every earlier position) in the second (zoology's
  ``BaseConv`` with kernel sizes [3, -1]: an explicit long kernel where BaseConv may use
  an implicit one);
- ``recurrent``: an LSTM of width d (the language has no RWKV or Mamba; an LSTM is the
  recurrent mixer it has).

The language requires an attention module in every model, so the two baselines end with
one that computes the identity: a learned query over ``stack(h, h)``, two equal keys that
get 1/2 each, whose context is h itself. Nothing reads the sequence through it.

Compression (mad-lab's auto-encoder) pools the encoder's positions into one vector (the
mean: mad-lab's ``global_pool = 'avg'``; its default reads the last position, which the
language cannot pick out) and decodes every position from it with sinusoidal positions
and a two-layer MLP, as mad-lab's decoder does."""

from __future__ import annotations

from dataclasses import dataclass

from . import tasks as T
from .loadspec import check as _check
from .models import spec_head
from .runs import Run, Skip

MIXERS = ("attention", "conv", "recurrent")


@dataclass(frozen=True)
class LitModel:
    task: str
    mixer: str
    d: int

    @property
    def name(self) -> str:
        return f"lit_{self.mixer}"

    @property
    def source(self) -> str:
        return f"literature:{self.task}:mixer={self.mixer}"


def _layer(mixer: str, i: int, L: int) -> list[str]:
    n = f"n{i}"
    out = [f"    feature {n} = norm(h)"]
    if mixer == "attention":
        out += [f"    attention mix{i} {{",
                f"        query = project({n})  keys = project({n})  values = project({n})",
                "        score = scaled_multiplicative  mask = causal",
                "    }",
                f"    update h = h + mix{i}"]
    elif mixer == "conv":
        k = 3 if i == 1 else L
        out += [f"    feature c{i} = linear({n}, d) * cnn(linear({n}, d), d, kernel = {k}, "
                "causal = true, groups = d, act = none)",
                f"    update h = h + c{i}"]
    else:
        out += [f"    update h = h + lstm({n}, d)"]
    return out


def spec_text(m: LitModel) -> str:
    """The ``.attn`` spec of ``m`` at its task's vocabulary and length."""
    info = T.TASKS[m.task]
    lines = [
        *spec_head(("# A model of taxcompile's study (the literature's tasks), written by",
                    "# taxcompile.study.lit_models."), m.source, m.d, info.vocab, m.name),
        f"    input x: tokens[L] (vocab = V, L = {info.L})",
        "    feature h = positional(embed(x, d), kind = learned)" if m.mixer == "attention"
        else "    feature h = embed(x, d)",
    ]
    for i in (1, 2):
        lines += _layer(m.mixer, i, info.L)
    if m.mixer != "attention":
        lines += ["    # the language wants an attention module: this one is the identity",
                  "    attention keep { query = learned(d)  features = stack(h, h)  "
                  "score = multiplicative }",
                  "    update h = keep"]
    if info.kind == "compression":
        lines += ["    feature z = mean(norm(h))  # the whole sequence in one vector",
                  "    feature u = positions(h, kind = sinusoid) + z",
                  "    feature u1 = linear(norm(u), d, act = gelu)",
                  "    feature u2 = linear(norm(u1), d, act = gelu)",
                  "    output y = classify(norm(u2), V)"]
    else:
        lines.append("    output y = classify(norm(h), V)")
    return "\n".join(lines + ["}"]) + "\n"


def models(task: str, d: int) -> list[LitModel]:
    return [LitModel(task, mixer, d) for mixer in MIXERS]


def plan_runs(prof, task: str, widths: list[int],
              params: int | None = None) -> tuple[list[Run], list[Skip]]:
    """The runs of ``task`` (a language-modelling task): every mixer at every width."""
    runs: list[Run] = []
    skips: list[Skip] = []
    if params is not None:
        return [], [Skip(f"literature:{task}", f"lit_{mx}", task, "--params: the literature's "
                         "tasks sweep the width instead (--width)") for mx in MIXERS]
    for w in widths:
        for m in models(task, w):
            text = spec_text(m)
            cs, why = _check(text, m.source)
            if cs is None:
                skips.append(Skip(m.source, m.name, task, why))
                continue
            runs.append(Run(m.source, text, m.name, task, prof.seeds, prof.lrs, prof.name,
                            False, width=w))
    return runs, skips
