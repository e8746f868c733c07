"""Synthetic tasks with gold alignments (issue 26, item 1).

Every task speaks one interface, so that every model of the slice fits it:

- ``x``: tokens (B, L), the sequence the attention reads (its keys and values);
- ``q``: tokens (B, T), what the queries are made from (the queried keys, the output
  positions, the previous output…);
- ``y``: targets (B, T), a token id per query position (-100: not scored);
- ``gold``: (B, T, L), row t the alignment a correct attention follows (a distribution
  over the sure links S, zeros where the position is aligned to nothing);
- ``possible``: (B, T, L) bool, every **answer-bearing** position a correct model may
  read, P ⊇ S (``TaskInfo.answer`` says which per task: MQAR's value beside its key, which
  holds the answer itself; where only S holds it, P = S). AER's P, and the positions of
  ``gold_mass_answer`` (``gold_mass`` counts S alone).

Two tasks add to it: ``pair_recall`` gives a second input ``z`` (B, M) for co-attention
and ``x`` is split into segments in ``segments`` ((B, S, W) tokens, gold over the S
segments) for multi-level models.

Generators are seeded (a ``torch.Generator``) and vectorised: the same generator state
gives the same batch in any process. Token ids: 0 pads, 1 starts, the rest as each task
says (zoology's MQAR: keys from [1, V/2), values from [V/2, V)).

Imports torch lazily: the plan (front end) reads ``TASKS`` without it."""

from __future__ import annotations

from dataclasses import dataclass

V = 64  # vocabulary of every task
BOS = 1


@dataclass(frozen=True)
class TaskInfo:
    name: str
    family: str  # the slice family whose base model this task trains: "recall" | "keyword"
    L: int  # length of x
    T: int  # length of q (query positions)
    about: str
    gold: str  # what the gold links are
    # inputs beyond x and q that hold part of the task: (name, declaration, what it holds).
    # A model without one never sees that part, so it does not run the task
    needs: tuple[tuple[str, str, str], ...] = ()
    # the answer-bearing positions (``possible``): every position a correct model may read
    # the answer from, beside the gold links
    answer: str = "the gold links alone: no other position holds the answer"
    # the literature's language-modelling tasks (``lit_tasks``): their generator, their
    # own vocabulary, and the task's count (MQAR's pairs, tokens to copy, motif size)
    kind: str = ""
    vocab: int = V
    pairs: int = 0


RECALL = "the queried key's position and its value's, one after it (the value is the answer)"

TASKS: dict[str, TaskInfo] = {t.name: t for t in (
    TaskInfo("mqar4", "recall", 32, 4, "multi-query associative recall (zoology), 4 pairs, "
             "queries at power-law gaps after the pairs", "the queried key's position",
             answer=RECALL),
    TaskInfo("mqar8", "recall", 32, 8, "multi-query associative recall (zoology), 8 pairs",
             "the queried key's position", answer=RECALL),
    TaskInfo("copy", "recall", 16, 16, "copy the sequence: query t asks for position t",
             "the identity permutation"),
    TaskInfo("reverse", "recall", 16, 16, "reverse the sequence: query t asks for position "
             "L-1-t", "the reversing permutation"),
    TaskInfo("sort", "recall", 24, 24, "sort distinct tokens; query t is the previous "
             "output (teacher forcing)", "the sorting permutation"),
    TaskInfo("noisy_recall", "recall", 64, 8, "8 key-value pairs scattered among noise "
             "tokens at L 64 (mad-lab's noisy recall)", "the queried key's position",
             answer=RECALL),
    TaskInfo("keyword", "keyword", 32, 1, "which of 4 keywords is planted (1 to 3 times) "
             "among distractors", "the planted positions"),
    TaskInfo("pair_recall", "pair", 16, 1, "two inputs: x holds 8 key-value pairs, z 4 tokens "
             "of which one is a key of x; predict that key's value", "the shared key's "
             "position in x",
             needs=(("z", "tokens[M]", "its query (4 tokens, one of them a key of x)"),),
             answer="the shared key's position in x and its value's, one after it"),
    TaskInfo("segments", "segmented", 4, 1, "x is 4 segments of 8 tokens; one segment holds a "
             "keyword (1 of 4), the others distractors: which keyword", "the keyword's "
             "segment"),
)}

def _lit(name: str, kind: str, vocab: int, L: int, pairs: int, about: str, gold: str,
         answer: str = "the gold links alone: no other position holds the answer") -> TaskInfo:
    return TaskInfo(name, "lm", L, L, about, gold, answer=answer, kind=kind, vocab=vocab,
                    pairs=pairs)


_KEY = "the queried key's position in the pairs"
_VALUE = "the queried key's position and its value's, one after it (the value is the answer)"
# The literature's own tasks, one sequence read by a language model (``lit_tasks``; the
# ``literature`` profiles): zoology's MQAR scaled to a CPU (zoology: V 8192, L 64-512, 4-64
# pairs), mad-lab's tasks at their baseline and a harder level of each (mad-lab's
# ``configs/tasks``; selective copying and fuzzy recall at shorter lengths)
LIT_TASKS: dict[str, TaskInfo] = {t.name: t for t in (
    _lit("zoo_mqar_32_4", "zoology_mqar", 64, 32, 4, "zoology's MQAR as a language model: "
         "V 64, L 32, 4 pairs, queries at power-law gaps (the CPU figure)", _KEY, _VALUE),
    _lit("zoo_mqar_32_8", "zoology_mqar", 64, 32, 8, "zoology's MQAR, V 64, L 32, 8 pairs "
         "(the CPU figure)", _KEY, _VALUE),
    _lit("zoo_mqar_64_4", "zoology_mqar", 512, 64, 4, "zoology's MQAR at zoology's lengths "
         "(V 512 for its 8192): L 64, 4 pairs", _KEY, _VALUE),
    _lit("zoo_mqar_128_8", "zoology_mqar", 512, 128, 8, "zoology's MQAR, V 512, L 128, 8 "
         "pairs", _KEY, _VALUE),
    _lit("zoo_mqar_256_16", "zoology_mqar", 512, 256, 16, "zoology's MQAR, V 512, L 256, 16 "
         "pairs", _KEY, _VALUE),
    _lit("mad_selective_copy", "selective_copy", 16, 64, 8, "mad-lab's selective copying: "
         "8 tokens among blanks, copied in order after the copy token (V 16, L 64)",
         "the copied token's position"),
    _lit("mad_selective_copy_hard", "selective_copy", 64, 128, 16, "selective copying, V "
         "64, L 128, 16 tokens", "the copied token's position"),
    _lit("mad_fuzzy_recall", "fuzzy_recall", 16, 64, 3, "mad-lab's fuzzy in-context recall "
         "(multi-query): keys and values of 1-3 tokens (V 16, L 64)", "the same token of "
         "the key's earlier values"),
    _lit("mad_fuzzy_recall_hard", "fuzzy_recall", 32, 128, 3, "fuzzy recall, V 32, L 128",
         "the same token of the key's earlier values"),
    _lit("mad_compression", "compression", 16, 32, 0, "mad-lab's compression: reconstruct "
         "the 32 tokens from one vector (V 16, L 32)", "the same position"),
    _lit("mad_compression_hard", "compression", 32, 64, 0, "compression, V 32, L 64",
         "the same position"),
    _lit("mad_memorization", "memorization", 256, 32, 0, "mad-lab's memorisation: a fixed "
         "key-value map of 127 pairs learned in the weights (V 256, L 32)", "none: the "
         "answer is in no position of x"),
    _lit("mad_memorization_hard", "memorization", 512, 32, 0, "memorisation, V 512 (255 "
         "pairs)", "none: the answer is in no position of x"),
)}
TASKS.update(LIT_TASKS)

M_PAIR = 4  # length of pair_recall's z
W_SEG = 8  # tokens per segment of ``segments``

KEYWORDS = 4  # keyword ids 2 .. 5


def _rows(B: int):
    import torch

    return torch.arange(B).view(B, 1)


def _one_hot_gold(pos, L: int):
    """gold (B, T, L) one-hot at pos (B, T); rows with pos < 0 stay zero."""
    import torch

    B, T = pos.shape
    gold = torch.zeros(B, T, L)
    ok = pos >= 0
    b, t = ok.nonzero(as_tuple=True)
    gold[b, t, pos[b, t]] = 1.0
    return gold


def _power_law_slots(g, B: int, n: int, lo: int, L: int, alpha: float = 0.1):
    """n distinct slots in [lo, L) per example, drawn with p(gap) ∝ gap^(alpha - 1) as
    zoology's MQAR places its queries (small gaps, i.e. recent pairs, are likelier)."""
    import torch

    gaps = torch.arange(1, L - lo + 1, dtype=torch.float64)
    p = (alpha * gaps ** (alpha - 1)).expand(B, -1)
    return lo + torch.multinomial(p, n, replacement=False, generator=g)  # (B, n)


def _mqar(g, B: int, info: TaskInfo):
    import torch

    L, P = info.L, info.T
    keys = torch.stack([torch.randperm(V // 2 - 1, generator=g)[:P] + 1 for _ in range(B)])
    vals = torch.randint(V // 2, V, (B, P), generator=g)
    x = torch.zeros(B, L, dtype=torch.long)
    x[:, 0:2 * P:2], x[:, 1:2 * P:2] = keys, vals
    slots = _power_law_slots(g, B, P, 2 * P, L)  # where each key is queried again
    order = torch.argsort(slots, 1)  # queries in the order they appear in x
    rows = _rows(B)
    x[rows, slots] = keys
    qi = order  # pair index of query t
    q = keys[rows, qi]
    y = vals[rows, qi]
    kpos = 2 * qi
    gold = _one_hot_gold(kpos, L)
    possible = gold.bool() | _one_hot_gold(kpos + 1, L).bool()
    return x, q, y, gold, possible


def _permutation(g, B: int, info: TaskInfo):
    import torch

    L = info.L
    rows = _rows(B)
    if info.name == "sort":
        x = torch.stack([torch.randperm(V // 2, generator=g)[:L] + V // 2 for _ in range(B)])
        perm = torch.argsort(x, 1)  # position of the t-th smallest
        y = x[rows, perm]
        q = torch.cat([torch.full((B, 1), BOS), y[:, :-1]], 1)
    else:
        x = torch.randint(V // 2, V, (B, L), generator=g)
        t = torch.arange(L).expand(B, L)
        perm = t if info.name == "copy" else L - 1 - t
        y = x[rows, perm]
        q = t + 2  # the output position, as a token (ids 2 .. L + 1 < V / 2)
    gold = _one_hot_gold(perm, L)
    return x, q, y, gold, gold.bool()


def _noisy_recall(g, B: int, info: TaskInfo):
    import torch

    L, P = info.L, info.T
    x = torch.randint(2, 8, (B, L), generator=g)  # noise tokens 2 .. 7
    keys = torch.stack([torch.randperm(V // 2 - 8, generator=g)[:P] + 8 for _ in range(B)])
    vals = torch.randint(V // 2, V, (B, P), generator=g)
    # P disjoint (key, value) slots: pair i at an even position
    starts = torch.stack([torch.randperm(L // 2, generator=g)[:P] * 2 for _ in range(B)])
    rows = _rows(B)
    x[rows, starts], x[rows, starts + 1] = keys, vals
    order = torch.stack([torch.randperm(P, generator=g) for _ in range(B)])
    q, y, kpos = keys[rows, order], vals[rows, order], starts[rows, order]
    gold = _one_hot_gold(kpos, L)
    possible = gold.bool() | _one_hot_gold(kpos + 1, L).bool()
    return x, q, y, gold, possible


def _keyword(g, B: int, info: TaskInfo):
    import torch

    L = info.L
    x = torch.randint(2 + KEYWORDS, V, (B, L), generator=g)  # distractors
    label = torch.randint(0, KEYWORDS, (B,), generator=g)
    count = torch.randint(1, 4, (B,), generator=g)
    where = torch.stack([torch.randperm(L, generator=g)[:3] for _ in range(B)])  # (B, 3)
    planted = torch.arange(3).view(1, 3) < count.view(B, 1)
    marks = torch.zeros(B, L, dtype=torch.bool)
    marks[_rows(B).expand(B, 3)[planted], where[planted]] = True
    x = torch.where(marks, (2 + label).view(B, 1), x)
    gold = (marks.float() / marks.float().sum(1, keepdim=True)).view(B, 1, L)
    q = torch.full((B, 1), BOS)
    y = (2 + label).view(B, 1)
    return x, q, y, gold, gold > 0


def _pair_recall(g, B: int, info: TaskInfo):
    import torch

    L, P = info.L, info.L // 2
    keys = torch.stack([torch.randperm(V // 2 - 8, generator=g)[:P + M_PAIR - 1] + 8
                        for _ in range(B)])  # P keys of x, M - 1 distractors for z
    vals = torch.randint(V // 2, V, (B, P), generator=g)
    x = torch.zeros(B, L, dtype=torch.long)
    x[:, 0::2], x[:, 1::2] = keys[:, :P], vals
    rows = _rows(B)
    pick = torch.randint(0, P, (B, 1), generator=g)  # the shared pair
    z = torch.cat([keys[rows, pick], keys[:, P:]], 1)  # (B, M): the shared key first …
    order = torch.stack([torch.randperm(M_PAIR, generator=g) for _ in range(B)])
    z = z[rows, order]  # … then shuffled
    y = vals[rows, pick]
    gold = _one_hot_gold(2 * pick, L)
    possible = gold.bool() | _one_hot_gold(2 * pick + 1, L).bool()
    return dict(z=z), x, torch.full((B, 1), BOS), y, gold, possible


def _segments(g, B: int, info: TaskInfo):
    import torch

    S = info.L
    x = torch.randint(2 + KEYWORDS, V, (B, S, W_SEG), generator=g)
    label = torch.randint(0, KEYWORDS, (B,), generator=g)
    seg = torch.randint(0, S, (B,), generator=g)
    pos = torch.randint(0, W_SEG, (B,), generator=g)
    x[torch.arange(B), seg, pos] = 2 + label
    gold = _one_hot_gold(seg.view(B, 1), S)
    return {}, x, torch.full((B, 1), BOS), (2 + label).view(B, 1), gold, gold.bool()


_GENERATORS = {"mqar4": _mqar, "mqar8": _mqar, "copy": _permutation, "reverse": _permutation,
               "sort": _permutation, "noisy_recall": _noisy_recall, "keyword": _keyword,
               "pair_recall": _pair_recall, "segments": _segments}


def batch(name: str, g, B: int) -> dict:
    """One batch of task ``name``: x, q, y, gold, possible (see the module's docstring)."""
    info = TASKS[name]
    if info.kind:
        from . import lit_tasks

        return lit_tasks.batch(info, g, B)
    got = _GENERATORS[name](g, B, info)
    extra, got = (got[0], got[1:]) if isinstance(got[0], dict) else ({}, got)
    x, q, y, gold, possible = got
    return dict(x=x, q=q, y=y, gold=gold, possible=possible, **extra)
