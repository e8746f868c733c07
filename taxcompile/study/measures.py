"""Attention evaluated against gold (the survey's §4).

Weights arrive as the generated models return them, ``(B, H, Lq, Lk)`` (heads), with a
trailing feature axis for multi-dimensional weights; ``mean_weights`` reduces them to ā,
``(B, Lq, Lk)``: the mean over the heads (and features), ā = (1/H) Σ_h a^(h). Gold is
``(B, T, L)``, row t a distribution over the sure links S_t (zeros: position t aligned
to nothing); ``possible`` is P ⊇ S, every answer-bearing position a correct model may
read (``tasks``: MQAR's value beside its key).

Torch only (imported by the runner, never by the front end)."""

from __future__ import annotations

import torch


def mean_weights(a: torch.Tensor) -> torch.Tensor:
    """ā (B, Lq, Lk) from (B, H, Lq, Lk) or multi-dimensional (B, H, Lq, Lk, d): the mean
    over the heads and, for multi-dimensional weights, over the features."""
    if a.dim() == 5:
        a = a.mean(-1)
    return a.float().mean(1)


def _rows(a: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
    """ā with as many query rows as gold has: a module with one query per example (or one
    per capsule) against a gold with one row is read as the mean of its rows."""
    if a.shape[1] != gold.shape[1] and gold.shape[1] == 1:
        return a.mean(1, keepdim=True)
    return a


def gold_mass(a: torch.Tensor, gold: torch.Tensor) -> float:
    """Mean weight on the gold keys:

        GM = (1 / |R|) Σ_{(b,t) ∈ R} Σ_{l ∈ S_bt} ā_btl,   S_bt = {l : gold_btl > 0}

    over the aligned rows R (gold rows that are not all zero). 1: every query puts all
    its weight on its gold keys; a uniform attention over L keys with one gold key
    scores 1/L."""
    a = _rows(a, gold)
    sure = gold > 0
    rows = sure.any(-1)  # (B, T)
    mass = (a * sure).sum(-1)  # (B, T)
    return float(mass[rows].mean()) if bool(rows.any()) else float("nan")


def aer(a: torch.Tensor, gold: torch.Tensor, possible: torch.Tensor | None = None) -> float:
    """Alignment error rate (Och & Ney 2003) of the arg-max links:

        AER = 1 − (|A ∩ S| + |A ∩ P|) / (|A| + |S|)

    with A = {(b, t, argmax_l ā_btl)} over the aligned rows, S the sure links (gold > 0)
    and P ⊇ S the possible ones (``possible``; S when not given). 0: every arg-max link is
    a sure one and every row has one sure link."""
    a = _rows(a, gold)
    sure = gold > 0
    poss = sure if possible is None else (possible | sure)
    rows = sure.any(-1)
    pick = torch.zeros_like(sure)
    pick.scatter_(-1, a.argmax(-1, keepdim=True), True)
    pick &= rows.unsqueeze(-1)
    n_a, n_s = int(pick.sum()), int(sure.sum())
    if n_a + n_s == 0:
        return float("nan")
    return 1.0 - (int((pick & sure).sum()) + int((pick & poss).sum())) / (n_a + n_s)


def top_k(a: torch.Tensor, k: int) -> torch.Tensor:
    """(B, Lq, k) positions of the k largest weights of each row of ā (ties: lowest
    position first, so the choice is deterministic)."""
    k = min(k, a.shape[-1])
    # a stable descending order: sort by -a, ties in position order
    return torch.sort(-a, dim=-1, stable=True).indices[..., :k]


# ERASER's bins (DeYoung et al. 2020, §4.2): the top 1, 5, 10, 20 and 50 % of the tokens
BINS = (0.01, 0.05, 0.1, 0.2, 0.5)


def bin_sizes(L: int, bins: tuple[float, ...] = BINS) -> list[int]:
    """The tokens of each bin over L positions: round(f · L), at least 1 (a bin of 1 % of
    16 tokens is the top one, not none), at most L."""
    return [min(L, max(1, round(f * L))) for f in bins]


def aopc(p_full: torch.Tensor, p_parts: list[torch.Tensor]) -> tuple[float, list[float]]:
    """ERASER's area over the perturbation curve: the mean over the bins of
    mean(p(ŷ | x) − p(ŷ | x_k)), x_k the input perturbed at bin k (its rationale erased,
    for comprehensiveness, or kept alone, for sufficiency); and the value of each bin."""
    per = [float((p_full - p).mean()) for p in p_parts]
    return sum(per) / len(per), per


def erasure(p_full: torch.Tensor, p_without: torch.Tensor, p_only: torch.Tensor) -> dict:
    """ERASER's faithfulness (DeYoung et al. 2020), from the probability of the predicted
    class with everything (p_full), with the rationale erased (p_without) and with only
    the rationale kept (p_only), each (N,) over the scored predictions:

        comprehensiveness = mean(p(ŷ | x) − p(ŷ | x ∖ r))   (high: r was needed)
        sufficiency       = mean(p(ŷ | x) − p(ŷ | r))       (low: r was enough)"""
    return dict(comprehensiveness=float((p_full - p_without).mean()),
                sufficiency=float((p_full - p_only).mean()))


def accuracy(logits: torch.Tensor, y: torch.Tensor) -> float:
    """Token accuracy over the scored positions (y ≠ −100)."""
    keep = y != -100
    return float((logits.argmax(-1)[keep] == y[keep]).float().mean())


def uniform_like(e: torch.Tensor, keep: torch.Tensor | None, dim: int) -> torch.Tensor:
    """The uniform distribution over the keys a module may see (``keep``; all of them
    when None), shaped like the scores e: what replaces the trained weights for the
    uniform-attention ablation (Jain & Wallace 2019; the survey's §4)."""
    ones = torch.ones_like(e)
    if keep is not None:
        k = keep
        while k.dim() < ones.dim():
            k = k.unsqueeze(-1)
        ones = ones.masked_fill(~k, 0.0)
    return ones / ones.sum(dim, keepdim=True).clamp_min(1.0)
