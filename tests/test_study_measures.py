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
