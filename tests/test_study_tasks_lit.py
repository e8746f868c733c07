"""The literature's tasks (zoology's MQAR, mad-lab's selective copying, fuzzy recall,
compression and memorisation), their models and their profile.

Each generator is checked against what its source defines, derived again here from the
generated tokens alone (a parse of the sequence, a formula of the distribution), never
from the generator's own bookkeeping."""

from __future__ import annotations

import dataclasses
import math

import pytest

torch = pytest.importorskip("torch")

from taxcompile import codegen, pipeline  # noqa: E402
from taxcompile.run import load_module  # noqa: E402
from taxcompile.study import lit_models as LM  # noqa: E402
from taxcompile.study import lit_tasks as LT  # noqa: E402
from taxcompile.study import tasks as T  # noqa: E402

LIT = sorted(T.LIT_TASKS)


def draw(name: str, B: int = 32, seed: int = 0) -> dict:
    return T.batch(name, torch.Generator().manual_seed(seed), B)


# ---- zoology's MQAR -----------------------------------------------------------------------


@pytest.mark.parametrize("name", [n for n in LIT if n.startswith("zoo_mqar")])
def test_every_mqar_query_is_answered_by_the_value_paired_with_its_key(name):
    info = T.TASKS[name]
    V, L, P = info.vocab, info.L, info.pairs
    b = draw(name, 16)
    x, y = b["x"], b["y"]
    assert x.shape == y.shape == (16, L)
    for i in range(16):
        keys, vals = x[i, 0:2 * P:2].tolist(), x[i, 1:2 * P:2].tolist()
        assert len(set(keys)) == P and all(1 <= k < V // 2 for k in keys)
        assert len(set(vals)) == P and all(V // 2 <= v < V for v in vals)
        pair = dict(zip(keys, vals))
        scored = (y[i] != -100).nonzero().flatten().tolist()
        assert sorted(x[i, scored].tolist()) == sorted(keys)  # each key queried once
        for t in scored:
            assert t >= 2 * P and (t - 2 * P) % 2 == 0
            assert int(y[i, t]) == pair[int(x[i, t])]
            k = keys.index(int(x[i, t]))
            assert b["gold"][i, t].nonzero().flatten().tolist() == [2 * k]
            assert b["possible"][i, t].nonzero().flatten().tolist() == [2 * k, 2 * k + 1]
        rest = [t for t in range(2 * P, L) if t not in scored]
        assert bool((x[i, rest] == 0).all())  # zoology's figure 2: no random non-queries
        assert float(b["gold"][i].sum()) == P


def test_mqar_gaps_follow_zoologys_power_law():
    """One pair: its gap g is drawn with p(g) ∝ (g + 1)^(a - 1), a = 0.01, over
    [0, (L - 2) / 2) (zoology's ``power_a``)."""
    info = dataclasses.replace(T.TASKS["zoo_mqar_64_4"], pairs=1)
    n = 8000
    x, y, _, _ = LT.zoology_mqar(torch.Generator().manual_seed(3), n, info)
    t = (y != -100).float().argmax(1)
    gaps = ((t - 2) // 2).tolist()
    space = (info.L - 2) // 2
    w = [0.01 * (g + 1) ** (0.01 - 1) for g in range(space)]
    p = [v / sum(w) for v in w]
    for g in (0, 1, 5, space - 1):
        got = gaps.count(g) / n
        assert abs(got - p[g]) < 4 * math.sqrt(p[g] * (1 - p[g]) / n), (g, got, p[g])


# ---- mad-lab's selective copying ------------------------------------------------------------


@pytest.mark.parametrize("name", ["mad_selective_copy", "mad_selective_copy_hard"])
def test_selective_copying_targets_are_the_non_blank_tokens_in_order(name):
    info = T.TASKS[name]
    V, L, n = info.vocab, info.L, info.pairs
    b = draw(name)
    blank, copy = V - 2, V - 1
    for i in range(b["x"].shape[0]):
        x, y = b["x"][i].tolist(), b["y"][i].tolist()
        assert x.index(copy) == L - n - 1 and x.count(copy) == 1
        assert x[L - n:] == [blank] * n  # the answer positions read blanks
        kept = [(j, tok) for j, tok in enumerate(x[:L - n - 1]) if tok != blank]
        assert [tok for _, tok in kept] == y[L - n:] and len(kept) == n
        assert y[:L - n] == [-100] * (L - n)
        assert kept[-1][0] == L - n - 2  # mad-lab inserts blanks only before tokens
        gold = b["gold"][i]
        assert [int(gold[L - n + j].argmax()) for j in range(n)] == [j for j, _ in kept]


# ---- mad-lab's fuzzy in-context recall -------------------------------------------------------


def _parse(seq: list[int], V: int) -> list[tuple[tuple, tuple, int]]:
    """(key, value, value's start) of each pair: keys from [0, (V-1)/2), values from
    [(V-1)/2, V-1), so each pair is a run of key tokens then a run of value tokens."""
    half, pad = (V - 1) // 2, V - 1
    pairs, i = [], 0
    while i < len(seq) and seq[i] == pad:
        i += 1
    while i < len(seq):
        k = i
        while i < len(seq) and seq[i] < half:
            i += 1
        v = i
        while i < len(seq) and half <= seq[i] < pad:
            i += 1
        pairs.append((tuple(seq[k:v]), tuple(seq[v:i]), v))
    return pairs


@pytest.mark.parametrize("name", ["mad_fuzzy_recall", "mad_fuzzy_recall_hard"])
def test_fuzzy_recall_scores_the_values_of_keys_seen_before(name):
    info = T.TASKS[name]
    V, L = info.vocab, info.L
    b = draw(name, 24)
    sizes = set()
    for i in range(24):
        x, y = b["x"][i].tolist(), b["y"][i].tolist()
        assert b["y_train"][i, :-1].tolist() == x[1:]  # mad-lab trains on every next token
        seq = x + [int(b["y_train"][i, -1])]  # the unshifted sequence
        pairs = _parse(seq, V)
        want = [-100] * (L + 1)
        gold = torch.zeros(L, L)
        seen: dict[tuple, list[int]] = {}
        for j, (k, v, start) in enumerate(pairs):
            assert 1 <= len(k) <= 3 and 1 <= len(v) <= 3 and len(set(k)) == len(k)
            sizes.add(len(k))
            last = j == len(pairs) - 1
            if k in seen or last:
                for m, tok in enumerate(v):
                    want[start + m] = tok
                    for s in seen.get(k, []):
                        gold[start + m - 1, s + m] = 1.0 / len(seen[k])
                if k in seen:  # a key keeps its value
                    assert seq[seen[k][0]:seen[k][0] + len(v)] == list(v)
            seen.setdefault(k, []).append(start)
        assert y == want[1:]
        assert torch.allclose(b["gold"][i], gold)
    assert sizes == {1, 2, 3}  # multi-token keys


# ---- mad-lab's compression and memorisation --------------------------------------------------


def test_compression_reconstructs_the_sequence_ending_in_the_compression_token():
    info = T.TASKS["mad_compression"]
    b = draw("mad_compression")
    assert torch.equal(b["x"], b["y"])
    assert bool((b["x"][:, -1] == info.vocab - 1).all())
    assert bool((b["x"][:, :-1] < info.vocab - 1).all())


@pytest.mark.parametrize("name", ["mad_memorization", "mad_memorization_hard"])
def test_memorization_answers_follow_one_fixed_map(name):
    V = T.TASKS[name].vocab
    table: dict[int, int] = {}
    for seed in (0, 1):
        b = draw(name, 64, seed)
        x, y = b["x"], b["y"]
        assert bool((x[:, 1::2] == V - 1).all()) and bool((y[:, 0::2] == -100).all())
        for k, v in zip(x[:, 0::2].flatten().tolist(), y[:, 1::2].flatten().tolist()):
            assert 0 <= k < (V - 1) // 2 <= v < V - 1
            assert table.setdefault(k, v) == v  # the same map in every example and batch
        assert float(b["gold"].sum()) == 0  # no position of x holds the answer
    assert len(set(table.values())) == len(table)  # one value per key


@pytest.mark.parametrize("name", LIT)
def test_each_literature_task_is_deterministic_by_seed(name):
    a, b, c = draw(name, 8, 5), draw(name, 8, 5), draw(name, 8, 6)
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["x"], c["x"])
    assert torch.equal(a["q"], a["x"])  # a language model: no separate query input


# ---- a causal convolution ------------------------------------------------------------------


CONV = """
paper t { cite = "T" }
model m {
    input x: tokens[L] (vocab = 16)
    feature e = embed(x, 6)
    feature c = cnn(e, 6, kernel = 4, causal = true, act = none)
    attention keep { query = learned(6)  features = stack(c, c)  score = multiplicative }
    output y = classify(keep, 16)
}
"""


def test_a_causal_convolution_reads_no_later_position():
    cs = pipeline.load_text(CONV, "t.attn")
    mod = load_module(codegen.generate(cs, cs.models[0], "t.attn"), "lit_causal_conv")
    torch.manual_seed(0)
    model = mod.Model(mod.Config()).double().eval()
    x = torch.randint(0, 16, (3, 10))
    conv = next(m for m in model.modules() if isinstance(m, torch.nn.Conv1d))
    emb = next(m for m in model.modules() if isinstance(m, torch.nn.Embedding))
    e = emb.weight[x]  # (B, L, 6)
    # c_l = b + Σ_{j=0}^{3} W[:, :, j] e_{l-3+j}, zeros before the first position
    pad = torch.cat([torch.zeros(3, 3, 6, dtype=torch.float64), e], 1)
    want = torch.stack([conv.bias + sum(pad[:, l + j] @ conv.weight[:, :, j].T
                                        for j in range(4)) for l in range(10)], 1)
    got = model(x=x, return_attention=True)
    logits = got.output
    w = next(m for m in model.modules() if isinstance(m, torch.nn.Linear)
             and m.out_features == 16)
    assert torch.allclose(logits, want @ w.weight.T + w.bias, atol=1e-9)
    later = x.clone()
    later[:, 6:] = (later[:, 6:] + 1) % 16  # change the future
    again = model(x=later).output
    assert torch.allclose(again[:, :6], logits[:, :6]) and not torch.allclose(again, logits)


# ---- the models, the profile and its figure -----------------------------------------------


@pytest.mark.parametrize("mixer", ["conv", "recurrent"])
def test_the_baselines_attention_module_is_the_identity(mixer):
    """The language wants an attention module in every model: the baselines' reads
    stack(h, h), two equal keys of weight 1/2, so its context is h itself."""
    m = LM.LitModel("zoo_mqar_32_4", mixer, 8)
    cs = pipeline.load_text(LM.spec_text(m), "t.attn")
    mod = load_module(codegen.generate(cs, cs.models[0], "t.attn"), f"lit_identity_{mixer}")
    torch.manual_seed(0)
    model = mod.Model(mod.Config()).double().eval()
    x = torch.randint(0, 64, (2, 32))
    out = model(x=x, return_attention=True)
    a = out.attention["keep"]
    assert a.shape[-1] == 2 and torch.allclose(a, torch.full_like(a, 0.5))  # 1/2 each


def test_the_literature_profile_plans_every_mixer_on_every_task():
    from taxcompile.study.protocol import PROFILES
    from taxcompile.study.runs import plan

    prof = PROFILES["literature"]
    runs, skips = plan("literature", widths=[8, 16])
    assert not skips
    got = {(r.task, r.model, r.width) for r in runs}
    assert got == {(t, f"lit_{m}", w) for t in prof.tasks for m in LM.MIXERS for w in (8, 16)}
    assert all(not r.supervised and r.seeds == prof.seeds for r in runs)
    from taxcompile.study.runs import StudyError

    with pytest.raises(StudyError, match="sweep the width instead"):
        plan("literature", params=5000)


def test_a_tiny_literature_run_end_to_end(monkeypatch):
    """literature_smoke on MQAR and fuzzy recall: every mixer trains, fuzzy recall on
    mad-lab's training targets (every next token) and scored on its probes; the figure
    and the table read the results."""
    from dataclasses import asdict

    from taxcompile.study import lit_report, runner
    from taxcompile.study.runs import execute, plan

    runs, _ = plan("literature_smoke", tasks=["zoo_mqar_32_4", "mad_fuzzy_recall"])
    assert len(runs) == 6
    targets = []
    step = runner.Ensemble.step

    def spy(self, kws, y, t):
        targets.append((self.run.task, y))
        return step(self, kws, y, t)

    monkeypatch.setattr(runner.Ensemble, "step", spy)
    results = []
    for r in runs:
        for s in execute(r):
            assert s.steps == 4 and len(s.curve) == 2 and 0.0 <= s.accuracy <= 1.0
            results.append(dict(asdict(s), task=r.task, model=r.model))
    fuzzy = [y for task, y in targets if task == "mad_fuzzy_recall"]
    mqar = [y for task, y in targets if task == "zoo_mqar_32_4"]
    assert bool((fuzzy[0] != -100).all())  # every next token is a training target
    assert float((mqar[0] != -100).float().mean()) == pytest.approx(4 / 32)  # the answers
    rows = lit_report.table(results)
    assert {(r["task"], r["mixer"]) for r in rows} == {
        (t, m) for t in ("zoo_mqar_32_4", "mad_fuzzy_recall") for m in LM.MIXERS}
    png = lit_report.figure(rows)
    assert png is None or png[:8] == b"\x89PNG\r\n\x1a\n"
    assert lit_report.markdown(rows).count("\n") == 2 + len(rows)


def test_the_report_table_is_the_seeds_mean_min_max_and_solved_count():
    from taxcompile.study import lit_report

    def res(seed, acc, steps, width=16, model="lit_conv"):
        return dict(task="zoo_mqar_32_8", model=model, width=width, seed=seed, accuracy=acc,
                    steps_to_threshold=steps, params=100)

    rows = lit_report.table([res(0, 0.5, None), res(1, 1.0, 300), res(2, 0.9, None),
                             res(0, 1.0, 200, 8, "lit_attention"),
                             dict(res(0, 0.1, None), task="copy")])  # not a literature task
    assert [(r["mixer"], r["width"]) for r in rows] == [("attention", 8), ("conv", 16)]
    conv = rows[1]
    assert conv["accuracy"] == pytest.approx(0.8) and (conv["low"], conv["high"]) == (0.5, 1.0)
    assert (conv["solved"], conv["steps"], conv["seeds"]) == (1, 300, 3)
