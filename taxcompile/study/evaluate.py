"""A trained model's measures: accuracy, and its attention against the task's gold
(``measures``' equations applied to a generated model). Used by ``runner``; torch only."""

from __future__ import annotations

import contextlib
import math

import torch

from ..check.values import not_distribution
from ..mechanisms import ALIGNS
from . import measures

ERASE_EXAMPLES = 32  # examples of the evaluation batch the erasure tests use
# the generated modules' normalisations over the keys, which the uniform ablation replaces
NORMALISERS = ("masked_softmax", "sparsemax", "entmax15")


def _kwargs(b, batch: dict, n: int | None = None) -> dict:
    arg = getattr(b, "arg", lambda k: k)  # the model's name for the task's tensor
    kw = {arg(k): batch[k][:n] if n else batch[k] for k in b.inputs if k != "gold"}
    return dict(kw, validate=False)


def ensemble_accuracy(ens, ev: dict) -> torch.Tensor:
    """(M,) evaluation accuracy of every member (ev stacked per member)."""
    from .runner import _kwargs as train_kwargs
    from .runner import per_query

    with torch.no_grad():
        out, _, _ = ens.forward(train_kwargs(ens.b, ev, False))
    y = ev["y"]
    z = per_query(out, y.shape[2], lead=2)
    keep = y != -100
    hit = (z.argmax(-1) == y) & keep
    return hit.flatten(1).sum(1).float() / keep.flatten(1).sum(1).clamp_min(1)


def _logits(model, kw: dict, T_: int, **extra):
    from .runner import logits_of

    return logits_of(model(**kw, **extra), T_)


@contextlib.contextmanager
def uniform_weights(mod):
    """Inside: every softmax / sparsemax / entmax of the generated module ``mod`` gives
    the uniform distribution over the keys it may see."""
    saved = {n: getattr(mod, n) for n in NORMALISERS if hasattr(mod, n)}
    try:
        for n in saved:
            setattr(mod, n, lambda e, keep, dim: measures.uniform_like(e, keep, dim))
        yield
    finally:
        for n, f in saved.items():
            setattr(mod, n, f)


def _measured(out, gold) -> list[tuple[str, torch.Tensor]]:
    """(name, ā) of the modules whose weights are over x's L keys with the gold's rows."""
    Tq, L = gold.shape[1:]
    got = []
    for name, a in out.attention.items():
        if not torch.is_tensor(a) or a.dim() not in (4, 5):
            continue
        lk = a.shape[3]
        if lk == L and (a.shape[2] == Tq or Tq == 1):
            got.append((name, a))
    return got


def attention_measures(b, model, ev: dict, bins: tuple[float, ...], seed: int) -> dict:
    """``_measures`` with every value a finite float or None (JSON has no NaN)."""
    out = _measures(b, model, ev, bins, seed)
    return {key: v if v is None or math.isfinite(v) else None for key, v in out.items()}


def _measures(b, model, ev: dict, bins: tuple[float, ...], seed: int) -> dict:
    """gold_mass and gold_mass_answer, aer and aer_key (of the last module over x; per
    module and head as well), comprehensiveness and sufficiency as AOPC over ``bins`` of
    the most attended positions and of random ones (per bin too), uniform_drop; None where
    a measure does not apply."""
    info_T = ev["y"].shape[1]
    out: dict = dict(gold_mass=None, aer=None, comprehensiveness=None, sufficiency=None,
                     uniform_drop=None)
    kw = _kwargs(b, ev)
    atts = [a for a in b.cm.model.nodes if a.kind_ == "attention"]
    aligns = [ALIGNS[a.align.fn] for a in atts]
    # gold mass is the weight on the gold links of a distribution over the keys: a CRF's raw
    # marginals (each in (0, 1), summing to more or less than 1), a gate's or sigmoid
    # attention's weights have none (their arg-max links still give an alignment error rate)
    mass = not any(not_distribution(a) for a in atts)
    with torch.no_grad():
        full = model(**kw, return_attention=True)
        from .runner import logits_of
        z = logits_of(full, info_T)
        acc = measures.accuracy(z, ev["y"])
        # the uniform baseline swaps the normaliser over the keys (or the subset a window,
        # a policy or the top k keep); a sampled key (hard), a gate or CRF marginals have none
        if all(set(r.helpers) & set(NORMALISERS) and not r.picks_one for r in aligns):
            with uniform_weights(b.mod):
                zu = _logits(model, kw, info_T, return_attention=True)
            out["uniform_drop"] = acc - measures.accuracy(zu, ev["y"])
        mods = _measured(full, ev["gold"])
        if not mods:
            return out
        for name, a in mods:
            heads = [("", measures.mean_weights(a))]
            if a.shape[1] > 1:
                heads += [(f"/h{h}", measures.mean_weights(a[:, h:h + 1]))
                          for h in range(a.shape[1])]
            for tag, abar in heads:
                if mass:
                    out[f"gold_mass:{name}{tag}"] = measures.gold_mass(abar, ev["gold"])
                    out[f"gold_mass_answer:{name}{tag}"] = measures.gold_mass(
                        abar, ev["possible"].float())
                out[f"aer:{name}{tag}"] = measures.aer(abar, ev["gold"], ev["possible"])
        abar = measures.mean_weights(mods[-1][1])
        out["gold_mass"] = measures.gold_mass(abar, ev["gold"]) if mass else None
        # every answer-bearing position counted (the task's P: MQAR's value beside its key)
        out["gold_mass_answer"] = measures.gold_mass(abar, ev["possible"].float()) \
            if mass else None
        out["aer"] = measures.aer(abar, ev["gold"], ev["possible"])
        out["aer_key"] = measures.aer(abar, ev["gold"])  # P = S: the key alone
        out.update(_erasure(b, model, ev, abar, z, bins, seed))
    return out


def _erasure(b, model, ev: dict, abar, z, bins: tuple[float, ...], seed: int) -> dict:
    """ERASER's comprehensiveness and sufficiency as AOPC over ``bins`` (fractions of x's
    tokens, ``measures.bin_sizes``): per bin, each scored query's most attended positions
    of x, and as many random ones (the baseline; one random order per query, so the bins
    nest as the top ones do), erased (pad token, masked out) or kept alone; one copy of
    the example per query row and bin."""
    if ev["x"].dim() != 2:  # segments: the gold is over segments, not x's tokens
        return {}
    n = min(ERASE_EXAMPLES, ev["x"].shape[0])
    y = ev["y"][:n]
    Tq = y.shape[1]
    a = measures._rows(abar[:n], ev["gold"][:n])  # (n, Tq, L)
    bi, ti = (y != -100).nonzero(as_tuple=True)  # scored rows
    R, L = len(bi), ev["x"].shape[1]
    p = z[:n].float().softmax(-1)
    pred = p.argmax(-1)
    p_full = p[bi, ti, pred[bi, ti]]
    sizes = measures.bin_sizes(L, bins)
    order = measures.top_k(a, L)[bi, ti]  # (R, L): positions by weight, ties in order
    g = torch.Generator().manual_seed(seed)
    shuffled = torch.stack([torch.randperm(L, generator=g) for _ in range(R)])
    res = {}
    for tag, ranked in (("", order), ("_random", shuffled)):
        chosen = torch.zeros(len(sizes), R, L, dtype=torch.bool)  # (bins, R, L)
        for j, k in enumerate(sizes):
            chosen[j].scatter_(1, ranked[:, :k], True)
        chosen = chosen.flatten(0, 1)  # bin-major: row j * R + r
        for what, keep in (("comprehensiveness", ~chosen), ("sufficiency", chosen)):
            xs = ev["x"][bi].repeat(len(sizes), 1)
            x = torch.where(keep, xs, torch.zeros_like(xs))
            arg = getattr(b, "arg", lambda k: k)  # the model's name for the task's tensor
            kw = {arg("x"): x, arg("x") + "_mask": keep, "validate": False}
            kw.update({arg(m): ev[m][bi].repeat(len(sizes), 1) for m in ("q", "z")
                       if m in b.inputs})
            zz = _logits(model, kw, Tq, return_attention=True).float().softmax(-1)
            p_part = zz[torch.arange(len(sizes) * R), ti.repeat(len(sizes)),
                        pred[bi, ti].repeat(len(sizes))].view(len(sizes), R)
            res[what + tag], per = measures.aopc(p_full, list(p_part))
            res.update({f"{what}{tag}@{f:g}": v for f, v in zip(bins, per)})
    return res
