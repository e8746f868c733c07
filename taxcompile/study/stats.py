"""The report's statistics: the paired t test and interval, Student's t distribution, and
Holm's step-down adjustment. Pure Python (no torch, no scipy): ``study report`` runs
wherever the front end does.

Every comparison of the report is paired by seed: the seed fixes the data stream of a
task (training, validation and test batches), so model A and the base on seed s saw the
same examples, and d_s = acc_A(s) - acc_base(s) removes what the seed contributes to
both. With n differences, mean d̄ and standard deviation s_d:

    t = d̄ / (s_d / √n),   p = P(|T_{n-1}| ≥ |t|),   d̄ ± t_{n-1, 0.975} · s_d / √n

(Student 1908). ``tests/test_study_stats.py`` checks the distribution against its closed
forms and the interval's coverage by simulation at the slice's seed count."""

from __future__ import annotations

import functools
import math

LEVEL = 0.95
ALPHA = 0.05  # 1 - LEVEL, written out (1 - 0.95 is 0.050000000000000044)


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)),
                    -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
          + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(ln) * _betacf(a, b, x) / a
    return 1.0 - math.exp(ln) * _betacf(b, a, 1.0 - x) / b


def t_sf2(t: float, df: float) -> float:
    """The two-sided tail P(|T_df| ≥ |t|) = I_{df/(df+t²)}(df/2, 1/2)."""
    if math.isinf(t):
        return 0.0
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def t_cdf(t: float, df: float) -> float:
    """P(T_df ≤ t)."""
    half = t_sf2(t, df) / 2.0
    return 1.0 - half if t > 0 else half


@functools.lru_cache(maxsize=64)
def t_ppf(q: float, df: float) -> float:
    """The quantile t with P(T_df ≤ t) = q (bisection; q in (0, 1))."""
    if q == 0.5:
        return 0.0
    if q < 0.5:
        return -t_ppf(1.0 - q, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < q:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def mean_sd(xs: list[float]) -> tuple[float, float]:
    n = len(xs)
    m = math.fsum(xs) / n
    return m, math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (n - 1)) if n > 1 else 0.0


def t_interval(xs: list[float], level: float = LEVEL) -> list[float] | None:
    """The t interval of the mean of ``xs`` (None with fewer than 2 values)."""
    if len(xs) < 2:
        return None
    m, sd = mean_sd(xs)
    half = t_ppf((1 + level) / 2, len(xs) - 1) * sd / math.sqrt(len(xs))
    return [m - half, m + half]


def paired(diffs: list[float], level: float = LEVEL) -> dict:
    """The one-sample t test of the paired differences ``diffs`` against 0:
    ``{n, diff_mean, diff_ci95, p}``. Fewer than 2 differences: no interval and no p.
    No spread (every difference equal, as two models that both reach 1.0 on every seed)
    leaves t undefined: the interval is that one value (the t interval's limit), and p is
    1 when it is 0, else the exact sign-flip test's 2 / 2^n (every difference on one
    side): equal differences on a few seeds happen by coincidence on a discrete accuracy,
    and are no proof (with 5 seeds p is 0.0625)."""
    n = len(diffs)
    if n == 0:
        return dict(n=0, diff_mean=None, diff_ci95=None, p=None)
    m, sd = mean_sd(diffs)
    if n < 2:
        return dict(n=n, diff_mean=m, diff_ci95=None, p=None)
    if sd <= 1e-12 * max(1.0, abs(m)):
        return dict(n=n, diff_mean=m, diff_ci95=[m, m],
                    p=1.0 if abs(m) <= 1e-12 else 2.0 / 2 ** n)
    t = m / (sd / math.sqrt(n))
    return dict(n=n, diff_mean=m, diff_ci95=t_interval(diffs, level), p=t_sf2(t, n - 1))


def holm(ps: list[float | None]) -> list[float | None]:
    """Holm's (1979) step-down adjusted p-values, which control the family-wise error
    rate: with the m p-values sorted p_(1) ≤ … ≤ p_(m),
    p̃_(i) = max_{j ≤ i} min(1, (m − j + 1) p_(j)). None (no test) stays None and does
    not count in m."""
    order = sorted((p, i) for i, p in enumerate(ps) if p is not None)
    m = len(order)
    out: list[float | None] = [None] * len(ps)
    running = 0.0
    for j, (p, i) in enumerate(order):
        running = max(running, min(1.0, (m - j) * p))
        out[i] = running
    return out
