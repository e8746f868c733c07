"""The study's attention measures (taxcompile.study.measures) against values computed by
hand from the survey's §4 definitions, written out in each test."""

import math

import pytest

torch = pytest.importorskip("torch")

from taxcompile.study import measures as M  # noqa: E402


def test_mean_weights_averages_heads_and_features():
    a = torch.zeros(1, 2, 1, 3)
    a[0, 0, 0] = torch.tensor([1.0, 0.0, 0.0])
    a[0, 1, 0] = torch.tensor([0.0, 0.5, 0.5])
    assert M.mean_weights(a).tolist() == [[[0.5, 0.25, 0.25]]]
    multi = torch.stack([a, 3 * a], -1)  # (B, H, Lq, Lk, 2): features 1x and 3x
    assert M.mean_weights(multi).tolist() == [[[1.0, 0.5, 0.5]]]


def test_gold_mass_by_hand():
    # two queries over 4 keys; query 0's gold is key 1 (weight 0.6 there), query 1's gold
    # is keys 2 and 3 (weights 0.1 + 0.2); a third row aligned to nothing is left out
    a = torch.tensor([[[0.1, 0.6, 0.2, 0.1], [0.4, 0.3, 0.1, 0.2], [0.25, 0.25, 0.25, 0.25]]])
    gold = torch.tensor([[[0, 1, 0, 0], [0, 0, 0.5, 0.5], [0, 0, 0, 0]]], dtype=torch.float)
    assert M.gold_mass(a, gold) == pytest.approx((0.6 + 0.3) / 2)


def test_gold_mass_of_uniform_attention_is_one_over_L():
    a = torch.full((3, 2, 8), 1 / 8)
    gold = torch.zeros(3, 2, 8)
    gold[:, :, 5] = 1
    assert M.gold_mass(a, gold) == pytest.approx(1 / 8)


def test_aer_by_hand():
    # arg-max links A: (0, 1), (1, 0), (2, 3); sure S: (0, 1), (1, 2), (2, 3);
    # possible P = S plus (1, 0). |A∩S| = 2, |A∩P| = 3, |A| = 3, |S| = 3:
    # AER = 1 - (2 + 3) / (3 + 3) = 1/6
    a = torch.tensor([[[0.1, 0.7, 0.1, 0.1], [0.5, 0.1, 0.3, 0.1], [0.0, 0.1, 0.2, 0.7]]])
    gold = torch.zeros(1, 3, 4)
    gold[0, 0, 1] = gold[0, 1, 2] = gold[0, 2, 3] = 1
    possible = gold.bool().clone()
    possible[0, 1, 0] = True
    assert M.aer(a, gold, possible) == pytest.approx(1 / 6)
    # without P, the miss counts fully: 1 - (2 + 2) / 6 = 1/3
    assert M.aer(a, gold) == pytest.approx(1 / 3)


def test_aer_with_several_sure_links_per_row():
    # one query, sure links {0, 2} (a keyword planted twice), arg-max at 2:
    # |A∩S| = |A∩P| = 1, |A| = 1, |S| = 2: AER = 1 - 2/3
    a = torch.tensor([[[0.2, 0.1, 0.6, 0.1]]])
    gold = torch.tensor([[[0.5, 0, 0.5, 0]]])
    assert M.aer(a, gold) == pytest.approx(1 / 3)


def test_one_row_gold_reads_the_mean_of_the_rows():
    # capsules: 2 rows of weights, one gold row: ā = mean of the rows
    a = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    gold = torch.tensor([[[1.0, 0.0]]])
    assert M.gold_mass(a, gold) == pytest.approx(0.5)


def test_erasure_by_hand():
    # ERASER: comprehensiveness = mean(p - p_without), sufficiency = mean(p - p_only)
    p = torch.tensor([0.9, 0.8])
    without = torch.tensor([0.3, 0.4])
    only = torch.tensor([0.85, 0.9])
    got = M.erasure(p, without, only)
    assert got["comprehensiveness"] == pytest.approx(((0.9 - 0.3) + (0.8 - 0.4)) / 2)
    assert got["sufficiency"] == pytest.approx(((0.9 - 0.85) + (0.8 - 0.9)) / 2)


def test_top_k_is_stable_on_ties():
    a = torch.tensor([[[0.3, 0.1, 0.3, 0.3]]])
    assert M.top_k(a, 2).tolist() == [[[0, 2]]]


def test_uniform_like_spreads_over_the_kept_keys():
    e = torch.randn(1, 1, 2, 4)
    keep = torch.tensor([[True, True, False, True]]).view(1, 1, 1, 4)
    u = M.uniform_like(e, keep, 3)
    assert u[0, 0, 0].tolist() == pytest.approx([1 / 3, 1 / 3, 0, 1 / 3])
    assert torch.allclose(M.uniform_like(e, None, 3), torch.full_like(e, 0.25))


def test_accuracy_ignores_unscored_positions():
    logits = torch.tensor([[[0.0, 1.0], [1.0, 0.0], [1.0, 0.0]]])
    y = torch.tensor([[1, 1, -100]])
    assert M.accuracy(logits, y) == pytest.approx(0.5)
    assert not math.isnan(M.accuracy(logits, y))


# ---- measures as their sources define them ---------------------------------------------------

def test_erasers_bins_by_hand():
    # round(f · L), at least one token: 1 % of 16 is 0.16 -> 1, 20 % of 64 is 12.8 -> 13
    assert M.bin_sizes(16) == [1, 1, 2, 3, 8]
    assert M.bin_sizes(32) == [1, 2, 3, 6, 16]
    assert M.bin_sizes(64) == [1, 3, 6, 13, 32]


def test_aopc_is_the_mean_over_the_bins_of_the_mean_drop():
    p = torch.tensor([0.9, 0.6])
    parts = [torch.tensor([0.8, 0.6]), torch.tensor([0.5, 0.2]), torch.tensor([0.1, 0.0])]
    got, per = M.aopc(p, parts)
    drops = [((0.9 - 0.8) + 0.0) / 2, ((0.9 - 0.5) + (0.6 - 0.2)) / 2, (0.8 + 0.6) / 2]
    assert per == pytest.approx(drops)
    assert got == pytest.approx(sum(drops) / 3)


def test_gold_mass_counts_the_answer_bearing_positions_too():
    """MQAR: the key at 0 and its value at 1; a model that reads the value puts its weight
    there: 0.1 on the key (gold_mass), 0.1 + 0.7 on both (gold_mass_answer)."""
    a = torch.tensor([[[0.1, 0.7, 0.1, 0.1]]])
    gold = torch.tensor([[[1.0, 0, 0, 0]]])
    answer = torch.tensor([[[True, True, False, False]]])
    assert M.gold_mass(a, gold) == pytest.approx(0.1)
    assert M.gold_mass(a, answer.float()) == pytest.approx(0.8)
    # AER both ways: the arg-max (the value) is possible, not sure: 1 - (0 + 1) / (1 + 1);
    # with the key alone (P = S) it is a miss: 1 - 0 / 2
    assert M.aer(a, gold, answer) == pytest.approx(0.5)
    assert M.aer(a, gold) == pytest.approx(1.0)


@pytest.mark.parametrize("task", ["mqar4", "noisy_recall", "pair_recall", "copy", "sort",
                                  "keyword"])
def test_each_tasks_answer_bearing_positions_hold_the_key_or_the_answer(task):
    """What tasks.py states: on the recall tasks, P is the queried key and its value (the
    answer itself); elsewhere the gold links alone."""
    from taxcompile.study import tasks as T

    b = T.batch(task, torch.Generator().manual_seed(0), 16)
    x, y, gold, possible = b["x"], b["y"], b["gold"], b["possible"]
    if "value" not in T.TASKS[task].answer:
        assert torch.equal(possible, gold > 0)
        return
    for i in range(x.shape[0]):
        for t in range(y.shape[1]):
            key = int((gold[i, t] > 0).nonzero())
            assert possible[i, t].nonzero().flatten().tolist() == [key, key + 1]
            assert x[i, key + 1] == y[i, t]  # the value beside the key is the answer
            assert x[i, key] == (b["q"][i, t] if task != "pair_recall" else x[i, key])


class _Out:
    def __init__(self, output):
        self.output = output


class _Linear:
    """A stand-in model: p(class 0) = sigmoid(Σ over the kept positions of w_l · x_l), one
    prediction per query row, so the erasure drops are known in closed form."""

    def __init__(self, w):
        self.w = w

    def __call__(self, x, x_mask, q=None, validate=False, return_attention=False):
        s = (self.w * x.double() * x_mask).sum(-1)  # (B,)
        logits = torch.stack([s, torch.zeros_like(s)], -1)  # (B, 2)
        return _Out(logits[:, None, :].expand(-1, q.shape[1], -1))


def test_comprehensiveness_and_sufficiency_are_aopc_over_erasers_bins():
    from types import SimpleNamespace

    from taxcompile.study import evaluate

    torch.manual_seed(0)
    B, T_, L = 3, 2, 16
    x = torch.randint(1, 5, (B, L))
    q = torch.ones(B, T_, dtype=torch.long)
    y = torch.zeros(B, T_, dtype=torch.long)
    y[2, 1] = -100  # not scored
    w = torch.linspace(0.3, -0.2, L, dtype=torch.float64)
    model = _Linear(w)
    abar = torch.rand(B, T_, L).softmax(-1)
    ev = dict(x=x, q=q, y=y, gold=torch.zeros(B, T_, L))
    z = model(x, torch.ones(B, L), q).output
    got = evaluate._erasure(SimpleNamespace(inputs=("x", "q")), model, ev, abar, z,
                            M.BINS, seed=7)

    # independently: per scored row, the predicted class's probability with the top
    # round(f·L) (at least 1) positions erased / kept alone, the drop averaged over rows,
    # then over the five bins; the random baseline from randperm(L) per scored row
    def prob(keep, i):
        """p of the class predicted on the whole input (class 0 where its s >= 0)."""
        s = float((w * x[i].double() * keep).sum())
        p0 = 1 / (1 + math.exp(-s))
        return p0 if float((w * x[i].double()).sum()) >= 0 else 1 - p0

    rows = [(i, t) for i in range(B) for t in range(T_) if y[i, t] != -100]
    g = torch.Generator().manual_seed(7)
    rand = [torch.randperm(L, generator=g).tolist() for _ in rows]
    for tag, order in (("", [sorted(range(L), key=lambda l: (-float(abar[i, t, l]), l))
                             for i, t in rows]), ("_random", rand)):
        comp, suff = [], []
        for f in (0.01, 0.05, 0.1, 0.2, 0.5):
            k = max(1, round(f * L))
            dc, ds = [], []
            for (i, t), o in zip(rows, order):
                chosen = torch.zeros(L, dtype=torch.float64)
                chosen[o[:k]] = 1
                full = prob(torch.ones(L, dtype=torch.float64), i)
                dc.append(full - prob(1 - chosen, i))
                ds.append(full - prob(chosen, i))
            comp.append(sum(dc) / len(dc))
            suff.append(sum(ds) / len(ds))
            assert got[f"comprehensiveness{tag}@{f:g}"] == pytest.approx(comp[-1], abs=1e-6)
        assert got["comprehensiveness" + tag] == pytest.approx(sum(comp) / 5, abs=1e-6)
        assert got["sufficiency" + tag] == pytest.approx(sum(suff) / 5, abs=1e-6)
