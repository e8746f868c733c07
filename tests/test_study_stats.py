"""The study report's statistics (taxcompile/study/stats.py, report.py): Student's t
against its closed forms and printed tables, the paired t test against R's documented
example, Holm's adjustment worked by hand, the interval's coverage by simulation at the
slice's seed count, and the report's verdicts against them.

scipy is not installed here, so the references are closed forms and published values,
written out in each test. Pure Python; about a second."""

from __future__ import annotations

import math
import random

import pytest

from taxcompile.study import report, stats
from taxcompile.study.protocol import PROFILES


def test_t_distribution_matches_its_closed_forms_and_the_printed_table():
    for t in (-7.5, -1.3, -0.2, 0.0, 0.4, 1.3, 12.0):
        # df = 1 is Cauchy: F(t) = 1/2 + atan(t) / π
        assert stats.t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)
        # df = 2: F(t) = 1/2 + t / (2 √(t² + 2))
        assert stats.t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(t * t + 2)),
                                                  abs=1e-12)
    # two-sided 5 % critical values, as printed in every t table
    for df, crit in ((1, 12.706), (2, 4.303), (4, 2.776), (9, 2.262), (30, 2.042)):
        assert stats.t_ppf(0.975, df) == pytest.approx(crit, abs=5e-4)
        assert stats.t_sf2(crit, df) == pytest.approx(0.05, abs=2e-4)


# Student's sleep data (Cushny & Peebles 1905), as R's `sleep`: extra hours of sleep of ten
# patients under two drugs. R documents `t.test(extra ~ group, data = sleep, paired =
# TRUE)`: t = -4.0621, df = 9, p-value = 0.002833, 95 percent confidence interval
# -2.4598858 -0.7001142, mean difference -1.58.
DRUG_1 = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0]
DRUG_2 = [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4]


def test_paired_t_matches_rs_sleep_example():
    got = stats.paired([a - b for a, b in zip(DRUG_1, DRUG_2)])
    assert got["n"] == 10
    assert got["diff_mean"] == pytest.approx(-1.58)
    assert got["diff_ci95"] == pytest.approx([-2.4598858, -0.7001142], abs=1e-6)
    assert got["p"] == pytest.approx(0.002833, abs=5e-7)


def test_paired_t_without_spread_or_pairs_is_clean():
    # two models that both reach 1.0 on every seed: no difference, p = 1
    assert stats.paired([0.0, 0.0, 0.0, 0.0, 0.0]) == dict(n=5, diff_mean=0.0,
                                                           diff_ci95=[0.0, 0.0], p=1.0)
    # the same non-zero difference on every seed (a coincidence on a discrete accuracy): t
    # is undefined; the exact sign-flip test, every difference on one side: 2 / 2^5
    got = stats.paired([0.25] * 5)
    assert (got["diff_ci95"], got["p"]) == ([0.25, 0.25], 0.0625)
    assert stats.paired([-0.125, -0.125])["p"] == 0.5
    assert stats.paired([0.3]) == dict(n=1, diff_mean=0.3, diff_ci95=None, p=None)
    assert stats.paired([]) == dict(n=0, diff_mean=None, diff_ci95=None, p=None)


def test_holm_matches_the_step_down_worked_by_hand():
    # sorted: 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, 0.04·1 = 0.04 → max so far 0.06
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # no test (None) stays None and does not count: m = 2
    got = stats.holm([0.02, None, 0.6])
    assert got[1] is None and got[0] == pytest.approx(0.04) and got[2] == pytest.approx(0.6)
    assert stats.holm([0.5, 0.9]) == [1.0, 1.0]  # capped at 1


SLICE_SEEDS = len(PROFILES["slice"].seeds)
STUDIES = 2000


@pytest.mark.parametrize("name, draw, mean", [
    ("normal", lambda r: r.gauss(0.05, 0.1), 0.05),
    # gamma(2, 0.05): skewness √2, a difference that is mostly small with a long tail
    ("skewed", lambda r: r.gammavariate(2.0, 0.05), 0.1),
])
def test_the_paired_interval_covers_at_the_slices_seed_count(name, draw, mean):
    """2000 simulated studies of the slice's seed count: the 95 % paired t interval of the
    mean difference covers the true mean 90–98 % of the time (the normal case: 95 % in
    theory; an exponential difference, skewness 2, falls to about 88 %: docs/study.md)."""
    assert SLICE_SEEDS >= 5
    rng = random.Random(20261128)
    covered = 0
    for _ in range(STUDIES):
        lo, hi = stats.paired([draw(rng) for _ in range(SLICE_SEEDS)])["diff_ci95"]
        covered += lo <= mean <= hi
    assert 0.90 <= covered / STUDIES <= 0.98, (name, covered / STUDIES)


def test_the_paired_test_keeps_its_level_under_no_difference():
    rng = random.Random(7)
    rejected = sum(stats.paired([rng.gauss(0, 0.1) for _ in range(SLICE_SEEDS)])["p"] < 0.05
                   for _ in range(STUDIES))
    assert 0.03 <= rejected / STUDIES <= 0.07


# ---- the report's verdicts -------------------------------------------------------------------

BASE = {"feature_multiplicity": "Singular", "feature_levels": "Single-Level",
        "feature_representations": "Single-Representational", "scoring": "Additive",
        "alignment": "Global", "dimensionality": "Single-Dimensional", "query_type": "Basic",
        "query_multiplicity": "Singular"}


class Stored:
    """A study file's content, as ``Store`` gives it to ``report.document``."""

    protocol = {"version": "2", "profile": "test"}

    def __init__(self, models: dict[str, tuple[dict, list[float], list[int | None]]]):
        self.rows = []
        for name, (swap, accs, steps) in models.items():
            for seed, (acc, st) in enumerate(zip(accs, steps)):
                self.rows.append(dict(
                    source=f"slice:copy:{name}", model=name, model_hash=name, row=BASE | swap,
                    task="copy", supervised=False, seed=seed, lr=0.01, params=1, steps=60,
                    seconds=1.0, seconds_per_step=0.1, accuracy=acc, final_loss=0.1,
                    val_accuracy=acc, steps_to_threshold=st, attention={}, engine="local",
                    curve=[[20, acc / 2], [60, acc]]))

    def results(self):
        return self.rows

    def skips(self):
        return []


def test_report_pairs_by_seed_and_says_above_or_below_only_where_holm_rejects():
    """Drug 2 against drug 1 of the sleep data, paired by patient (= seed): the report's
    difference, interval and p are R's. A second swap whose raw p is under 0.05 but whose
    Holm-adjusted p (three tests) is not gets no verdict of a difference."""
    n = len(DRUG_1)
    weak = [a + d for a, d in zip(DRUG_1, [0.4, 0.1, 0.5, 0.2, 0.6, -0.1, 0.3, 0.0, 0.5, -0.2])]
    noise = [a + d for a, d in zip(DRUG_1, [0.1, -0.2, 0.3, -0.1, 0.0, 0.2, -0.3, 0.1, -0.1, 0.0])]
    solved = [None, 40, 20, None, 60, 20, None, 40, 40, None]  # six of ten seeds solved
    doc = report.document(Stored({
        "base=base": ({}, DRUG_1, [None] * n),
        "score=general": ({"scoring": "General"}, DRUG_2, solved),
        "align=sparse": ({"alignment": "Sparse"}, weak, [None] * n),
        "queries=multi": ({"query_multiplicity": "Multi-Head"}, noise, [None] * n)}))
    effects = {e["value"]: e for e in doc["effects"]}
    strong = effects["General"]
    assert strong["n_pairs"] == 10 and strong["diff_mean"] == pytest.approx(1.58)
    assert strong["diff_ci95"] == pytest.approx([0.7001142, 2.4598858], abs=1e-6)
    assert strong["p"] == pytest.approx(0.002833, abs=5e-7)
    assert strong["solved_fraction"] == pytest.approx(0.6)
    assert strong["steps_to_threshold_mean"] == pytest.approx(220 / 6)
    assert (strong["n_solved_pairs"], strong["steps_diff_mean"]) == (0, None)  # base: none
    # Holm over the report's three tests, by hand from the raw p-values
    ps = sorted((e["p"], v) for v, e in effects.items() if e["p"] is not None)
    assert [v for _, v in ps] == ["General", "Sparse", "Multi-Head"]
    (p1, _), (p2, _), (p3, _) = ps
    assert strong["p_adjusted"] == pytest.approx(3 * p1)
    assert effects["Sparse"]["p_adjusted"] == pytest.approx(max(3 * p1, 2 * p2))
    assert effects["Multi-Head"]["p_adjusted"] == pytest.approx(max(3 * p1, 2 * p2, p3))
    assert doc["statistics"]["method"] == "holm" and doc["statistics"]["effects"] == 3
    assert strong["verdict"] == "above the base"
    assert effects["Sparse"]["p"] < 0.05 <= effects["Sparse"]["p_adjusted"]
    assert effects["Sparse"]["verdict"] == "no difference shown"
    assert effects["Multi-Head"]["verdict"] == "no difference shown"
    assert effects["Additive"]["verdict"] == "base" and effects["Additive"]["p"] is None
    assert effects["Additive"]["solved_fraction"] == 0.0
    assert effects["Additive"]["steps_to_threshold_mean"] is None
    assert doc["runs"][0]["curve"] == [[20, DRUG_1[0] / 2], [60, DRUG_1[0]]]
    md = report.to_md(doc)
    assert "| scoring | General | others at base | 1 | 10 | 2.330 |" in md, md
    assert "| 0.60 | 37 | – | 1.580 | [0.700, 2.460] | 0.003 | 0.008 |" in md, md


def test_a_seed_only_one_side_has_is_left_out_of_the_pairs():
    doc = report.document(Stored({
        "base=base": ({}, [0.5, 0.6, 0.7], [None] * 3),
        "score=general": ({"scoring": "General"}, [0.6, 0.8], [None] * 2)}))
    e = next(e for e in doc["effects"] if e["value"] == "General")
    assert e["n_pairs"] == 2 and e["diff_mean"] == pytest.approx(0.15)
    # n = 2, df = 1: the interval is d̄ ± 12.7062 · s / √2, s = 0.0707
    s = math.sqrt(((0.1 - 0.15) ** 2 + (0.2 - 0.15) ** 2) / 1)
    half = 12.706204736 * s / math.sqrt(2)
    assert e["diff_ci95"] == pytest.approx([0.15 - half, 0.15 + half])
    # t = 0.15 / (s / √2) = 3; p = 1 − 2 atan(3) / π for Cauchy
    assert e["p"] == pytest.approx(1 - 2 * math.atan(3) / math.pi)


def test_among_solved_seeds_the_steps_to_threshold_are_compared_seed_by_seed():
    """Both at 1.0 once solved (the early stop caps the accuracy): the steps say which is
    faster, over the seeds both solved (seed 2: only the base did; seed 3: neither)."""
    doc = report.document(Stored({
        "base=base": ({}, [1.0, 1.0, 1.0, 0.5], [40, 60, 20, None]),
        "score=general": ({"scoring": "General"}, [1.0, 1.0, 0.7, 0.6], [20, 20, None, None])}))
    e = next(e for e in doc["effects"] if e["value"] == "General")
    assert (e["solved_fraction"], e["steps_to_threshold_mean"]) == (0.5, 20)
    assert (e["n_solved_pairs"], e["steps_diff_mean"]) == (2, -30)
    # d = (-20, -40): mean -30, s = 14.142, df = 1: ± 12.7062 · 14.142 / √2
    half = 12.706204736 * math.sqrt(200) / math.sqrt(2)
    assert e["steps_diff_ci95"] == pytest.approx([-30 - half, -30 + half])
