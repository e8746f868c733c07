"""The literature's own synthetic tasks, as language-modelling tasks over one sequence.

Zoology's multi-query associative recall (Arora et al. 2023, ``zoology/data/
multiquery_ar.py``) and mad-lab's selective copying, fuzzy in-context recall, compression
and memorisation (Poli et al. 2024, ``mad/data/instances.py``), each written again here
from those generators with seeded torch generators (same layout and distributions; not
the same draws as their numpy code). Every task speaks ``tasks``' interface with the
query positions being the sequence's own positions:

- ``x``: the input sequence (B, L); ``q``: the same tensor (a language model has no
  separate query input; the study's models here do not read it);
- ``y``: (B, L) the targets, -100 where not scored (zoology: only the answers;
  mad-lab's test targets);
- ``y_train`` (fuzzy recall only): mad-lab trains recall as a language model, every
  next token a target, and scores only the probes;
- ``gold`` / ``possible``: (B, L, L), row t the positions that hold the answer of t
  (zeros where t is not scored or no position of x holds it: memorisation).

Imports torch lazily, as ``tasks`` does."""

from __future__ import annotations

import random

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (tasks imports this module to draw a batch)
    from . import tasks as T


def _rows(B: int):
    import torch

    return torch.arange(B).view(B, 1)


def _pick(g, B: int, n: int, k: int):
    """(B, k) distinct values of [0, n) per row, uniformly (numpy's choice without
    replacement)."""
    import torch

    return torch.rand(B, n, generator=g).argsort(1)[:, :k]


# ---- zoology: multi-query associative recall -------------------------------------------


def zoology_mqar(g, B: int, info: T.TaskInfo, power_a: float = 0.01,
                 random_non_queries: bool = False):
    """``multiquery_ar(vocab_size=V, input_seq_len=L, num_kv_pairs=P, power_a=0.01,
    random_non_queries=False)`` (the settings of zoology's figure 2): P pairs (keys
    distinct from [1, V/2), values distinct from [V/2, V)) at the start; key i queried
    again at position 2P + 2·gap_i, the gaps distinct in [0, (L - 2P) / 2) with
    p(gap) ∝ (gap + 1)^(a - 1); the answer (its value) is the target at the query's
    position; every other position 0 (``random_non_queries``: a uniform random token)."""
    import torch

    V, L, P = info.vocab, info.L, info.pairs
    keys = _pick(g, B, V // 2 - 1, P) + 1
    vals = _pick(g, B, V - V // 2, P) + V // 2
    space = (L - 2 * P) // 2
    p = power_a * torch.arange(1, space + 1, dtype=torch.float64) ** (power_a - 1)
    gaps = torch.multinomial(p.expand(B, -1), P, replacement=False, generator=g)
    x = torch.randint(0, V, (B, L), generator=g) if random_non_queries else \
        torch.zeros(B, L, dtype=torch.long)
    x[:, 0:2 * P:2], x[:, 1:2 * P:2] = keys, vals
    rows = _rows(B)
    qpos = 2 * P + 2 * gaps
    x[rows, qpos] = keys
    y = torch.full((B, L), -100, dtype=torch.long)
    y[rows, qpos] = vals
    gold = torch.zeros(B, L, L)
    gold[rows, qpos, 2 * torch.arange(P).expand(B, P)] = 1.0
    possible = gold.bool().clone()
    possible[rows, qpos, 2 * torch.arange(P).expand(B, P) + 1] = True
    return x, y, gold, possible


# ---- mad-lab: selective copying ---------------------------------------------------------


def selective_copy(g, B: int, info: T.TaskInfo):
    """``generate_selective_copying_instance``: n tokens from [0, V - 2) with
    L - 2n - 1 blanks (V - 2) inserted before them (each blank before token i, i uniform
    in [0, n): none after the last), the copy token (V - 1), then n blanks whose targets
    are the n tokens in order."""
    import torch

    V, L, n = info.vocab, info.L, info.pairs
    blank, copy = V - 2, V - 1
    nb = L - 2 * n - 1
    toks = torch.randint(0, V - 2, (B, n), generator=g)
    slot = torch.randint(0, n, (B, nb), generator=g)
    count = torch.zeros(B, n, dtype=torch.long).scatter_add_(1, slot, torch.ones_like(slot))
    pos = count.cumsum(1) + torch.arange(n)  # token i after the blanks before it
    rows = _rows(B)
    x = torch.full((B, L), blank, dtype=torch.long)
    x[rows, pos] = toks
    x[:, nb + n] = copy
    y = torch.full((B, L), -100, dtype=torch.long)
    out = nb + n + 1 + torch.arange(n)
    y[:, out] = toks
    gold = torch.zeros(B, L, L)
    gold[rows, out.expand(B, n), pos] = 1.0
    return x, y, gold, gold.bool()


# ---- mad-lab: fuzzy in-context recall (multi-query) -------------------------------------


def _motifs(vocab: list[int], size: int, rnd: random.Random) -> tuple:
    """A random ordered motif of ``size`` distinct tokens (one of the permutations
    ``generate_vocab_permutations`` lists, uniformly)."""
    return tuple(rnd.sample(vocab, size))


def _fuzzy_one(rnd: random.Random, V: int, L: int, km: int, vm: int):
    """One example of ``generate_fuzzy_in_context_recall_instance(multi_query=True,
    noise 0)`` before its shift: (inputs, targets, links) with links[i] = the earlier
    positions holding token i's value (-1 lists nothing)."""
    pad = V - 1
    keys, vals = list(range((V - 1) // 2)), list(range((V - 1) // 2, V - 1))
    kp, vp = _motifs(keys, rnd.randint(1, km), rnd), _motifs(vals, rnd.randint(1, vm), rnd)
    kv = len(kp) + len(vp)
    probe_idx = rnd.randrange(L - 2 * kv)
    inputs: list[int] = []
    targets: list[int] = []
    links: list[list[int]] = []
    seen: dict[tuple, tuple] = {}
    where: dict[tuple, list[int]] = {}  # key -> starts of its earlier values
    added = False

    def put(k: tuple, v: tuple, scored: bool) -> None:
        inputs.extend(k)
        targets.extend([-100] * len(k))
        links.extend([[]] * len(k))
        starts = where.get(k, [])
        for j, tok in enumerate(v):
            targets.append(tok if scored else -100)
            links.append([s + j for s in starts] if scored else [])
        where.setdefault(k, []).append(len(inputs))
        inputs.extend(v)
        seen[k] = v

    while len(inputs) < L - kv - (km + vm):
        ks, vs = rnd.randint(1, km), rnd.randint(1, vm)
        if len(inputs) >= probe_idx and not added:
            put(kp, vp, False)
            added = True
            continue
        k = _motifs(keys, ks, rnd)
        if k == kp:
            v, added = vp, True
        else:
            v = seen.get(k) or _motifs(vals, vs, rnd)
        put(k, v, k in seen)
    put(kp, vp, True)
    n_pad = L + 1 - len(inputs)
    inputs = [pad] * n_pad + inputs
    targets = [-100] * n_pad + targets
    links = [[]] * n_pad + [[s + n_pad for s in li] for li in links]
    return inputs, targets, links


def fuzzy_recall(g, B: int, info: T.TaskInfo):
    """mad-lab's fuzzy recall, multi-query: keys of 1 to 3 tokens from [0, (V-1)/2),
    values of 1 to 3 from [(V-1)/2, V-1), pairs repeated with their value; a key's value
    tokens are scored where the key came before (and the probe pair at the end). Left
    padded with V - 1, shifted by one (input i predicts token i + 1). ``y_train`` is
    every next token (mad-lab's training targets); the gold of a scored target is the
    same token of the key's earlier values."""
    import torch

    V, L = info.vocab, info.L
    km = vm = info.pairs
    seed = int(torch.randint(0, 2 ** 62, (1,), generator=g))
    rnd = random.Random(seed)  # one torch draw seeds the example loop (fast, reproducible)
    xs, ys, gold = [], [], torch.zeros(B, L, L)
    for b in range(B):
        inp, tgt, links = _fuzzy_one(rnd, V, L, km, vm)
        xs.append(inp)
        ys.append(tgt)
        for i in range(1, L + 1):  # input i - 1 predicts target i
            if links[i]:
                gold[b, i - 1, links[i]] = 1.0 / len(links[i])
    full = torch.tensor(xs)
    x, y, y_train = full[:, :-1], torch.tensor(ys)[:, 1:], full[:, 1:]
    return x, y, gold, gold > 0, y_train


# ---- mad-lab: compression and memorisation ----------------------------------------------


def compression(g, B: int, info: T.TaskInfo):
    """``generate_compression_instance``: L - 1 tokens from [0, V - 1), then the
    compression token V - 1; the target is the whole input (the model reconstructs it
    from one vector: docs/study.md). Gold: output t reads input t."""
    import torch

    V, L = info.vocab, info.L
    x = torch.cat([torch.randint(0, V - 1, (B, L - 1), generator=g),
                   torch.full((B, 1), V - 1)], 1)
    gold = torch.eye(L).expand(B, L, L).clone()
    return x, x.clone(), gold, gold.bool()


MEMO_SEED = 12345  # mad-lab's kv_map_seed: one fixed map for every example


def kv_map(V: int):
    """mad-lab's ``generate_kv_map`` over V - 1 tokens: keys [0, (V-1)//2) each mapped to
    a distinct value of [(V-1)//2, V - 1), fixed by ``MEMO_SEED`` (a torch draw, not
    mad-lab's numpy one: the same kind of map, not the same map)."""
    import torch

    n = V - 1
    gm = torch.Generator().manual_seed(MEMO_SEED)
    nk = n // 2
    return torch.randperm(n - nk, generator=gm)[:nk] + nk  # value of key k


def memorization(g, B: int, info: T.TaskInfo):
    """``generate_memorization_instance`` (no noise): L / 2 pairs ``key, insert`` (insert
    = V - 1), the key uniform over the map's keys; the target at each insert token is the
    key's value under the fixed map. No position of x holds it: gold rows are zero."""
    import torch

    V, L = info.vocab, info.L
    table = kv_map(V)
    k = torch.randint(0, len(table), (B, L // 2), generator=g)
    x = torch.full((B, L), V - 1, dtype=torch.long)
    x[:, 0::2] = k
    y = torch.full((B, L), -100, dtype=torch.long)
    y[:, 1::2] = table[k]
    gold = torch.zeros(B, L, L)
    return x, y, gold, gold.bool()


KINDS = {"zoology_mqar": zoology_mqar, "selective_copy": selective_copy,
         "fuzzy_recall": fuzzy_recall, "compression": compression,
         "memorization": memorization}


def batch(info: T.TaskInfo, g, B: int) -> dict:
    got = KINDS[info.kind](g, B, info)
    x, y, gold, possible = got[:4]
    out = dict(x=x, q=x, y=y, gold=gold, possible=possible)
    if len(got) > 4:
        out["y_train"] = got[4]
    return out
