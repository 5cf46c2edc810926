"""Statistical tests with explicit false-failure rates and minimum detectable deviations.

Every test returns a :class:`TestResult` carrying a valid p-value (so a family of tests can be
controlled by Holm), the threshold on its statistic at a stated per-test level ``alpha``, and
the minimum detectable deviation (MDD): the smallest departure from the null, in the
statistic's own units, that the test rejects with probability >= ``power`` (default 0.99) at
that n and level.

Null laws used here are exact (binomial counts, DKW-Massart) or valid bounds (Chernoff for
sums of unequal Bernoullis, :func:`bernoulli_sum_test`), except the studentised linear-time
MMD, whose normal reference is asymptotic (n >= 1e3 pairs in every suite). numpy/scipy only.
:class:`TestResult` lives in :mod:`speccheck.validation.results`.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
from scipy import special, stats

from speccheck.validation.results import TestResult

POWER = 0.99


# ----------------------------------------------------------------------------- KS / DKW
def dkw_threshold(n: int, alpha: float) -> float:
    """t with P(sup |F_n - F| > t) <= alpha under the null (DKW-Massart: 2 exp(-2 n t^2))."""
    return math.sqrt(math.log(2.0 / alpha) / (2.0 * n))


def dkw_pvalue(n: int, D: float) -> float:
    """Conservative (valid) p-value of a KS distance D from the DKW-Massart inequality."""
    return float(min(1.0, 2.0 * math.exp(-2.0 * n * D * D)))


def dkw_pvalue_array(n: np.ndarray, D: np.ndarray) -> np.ndarray:
    """:func:`dkw_pvalue` elementwise: 2 exp(-2 n D^2), capped at 1 (valid for any n)."""
    return np.minimum(1.0, 2.0 * np.exp(-2.0 * n * D * D))


def ks_distance(x: np.ndarray, cdf: Callable[[np.ndarray], np.ndarray]) -> float:
    """sup_s |F_n(s) - F(s)| for a sample ``x`` (1-d) and a continuous null CDF."""
    x = np.sort(np.asarray(x, np.float64).ravel())
    n = x.size
    u = cdf(x)
    i = np.arange(1, n + 1)
    return float(max(np.max(i / n - u), np.max(u - (i - 1) / n)))


def ks_dkw_test(x: np.ndarray, cdf: Callable, alpha: float, *, cell: str = "", test: str = "ks",
                power: float = POWER) -> TestResult:
    """KS distance against ``cdf`` with the DKW-Massart threshold at level ``alpha``.

    MDD: if the true CDF is at sup-distance eps from ``cdf``, D >= eps - D_true where
    D_true <= dkw_threshold(n, 1 - power) with probability >= power; so eps >= t_alpha +
    t_{1-power} is detected with probability >= power.
    """
    x = np.asarray(x, np.float64).ravel()
    n = x.size
    if not np.all(np.isfinite(x)):
        return TestResult(cell, test, math.inf, dkw_threshold(n, alpha), 0.0, math.nan, n,
                          passed=False, note="non-finite values in the sample")
    D = ks_distance(x, cdf)
    t = dkw_threshold(n, alpha)
    mdd = t + dkw_threshold(n, 1.0 - power)
    return TestResult(cell, test, D, t, dkw_pvalue(n, D), mdd, n, passed=D <= t)


# ------------------------------------------------------------------------ binomial tests
def binom_two_sided_pvalue(k: int, n: int, p0: float) -> float:
    """Exact two-sided binomial p-value, 2 min(P(X <= k), P(X >= k)) capped at 1 (valid)."""
    if p0 <= 0.0:
        return 1.0 if k == 0 else 0.0
    if p0 >= 1.0:
        return 1.0 if k == n else 0.0
    lo = stats.binom.cdf(k, n, p0)
    hi = stats.binom.sf(k - 1, n, p0)
    return float(min(1.0, 2.0 * min(lo, hi)))


def binom_upper_pvalue(k: int, n: int, p0: float) -> float:
    """Exact one-sided p-value P(X >= k), X ~ Bin(n, p0): evidence that p > p0."""
    if p0 >= 1.0:
        return 1.0
    if p0 <= 0.0:
        return 1.0 if k == 0 else 0.0
    return float(stats.binom.sf(k - 1, n, p0))


def binom_acceptance_region(n: int, p0: float, alpha: float, two_sided: bool = True) -> tuple[int, int]:
    """Counts [lo, hi] accepted at level alpha (each tail alpha/2 if two-sided)."""
    a = alpha / 2.0 if two_sided else alpha
    hi = int(stats.binom.isf(a, n, p0)) if p0 < 1 else n
    # the largest hi with P(X > hi) <= a: isf returns the smallest x with sf(x) <= a
    lo = int(stats.binom.ppf(a, n, p0)) if (two_sided and p0 > 0) else 0
    # smallest lo with P(X < lo) <= a
    if two_sided and lo > 0 and stats.binom.cdf(lo - 1, n, p0) > a:
        lo -= 1
    return lo, hi


def _power_shift(n: int, p0: float, lo: int, hi: int, power: float, upper_only: bool = False) -> float:
    """Smallest |p1 - p0| such that a count outside [lo, hi] has probability >= power."""
    def up_power(p1):
        return stats.binom.sf(hi, n, p1)

    def down_power(p1):
        return stats.binom.cdf(lo - 1, n, p1) if lo > 0 else 0.0

    shifts = []
    if hi < n and up_power(1.0) >= power:
        a, b = p0, 1.0
        for _ in range(60):
            m = 0.5 * (a + b)
            a, b = (a, m) if up_power(m) >= power else (m, b)
        shifts.append(b - p0)
    if not upper_only and lo > 0:
        a, b = 0.0, p0
        for _ in range(60):
            m = 0.5 * (a + b)
            a, b = (m, b) if down_power(m) >= power else (a, m)
        shifts.append(p0 - a)
    return float(min(shifts)) if shifts else math.inf


def binom_test(k: int, n: int, p0: float, alpha: float, *, cell: str = "", test: str = "binom",
               one_sided_upper: bool = False, power: float = POWER) -> TestResult:
    """Exact binomial test of a proportion against p0 (two-sided, or H1: p > p0).

    statistic = k/n - p0 (signed); threshold = the largest |k/n - p0| accepted at level alpha
    (the upper side when one-sided); MDD = smallest shift of the proportion detected with
    probability >= power.
    """
    p0 = float(np.clip(p0, 0.0, 1.0))
    lo, hi = binom_acceptance_region(n, p0, alpha, two_sided=not one_sided_upper)
    if one_sided_upper:
        p = binom_upper_pvalue(k, n, p0)
        thr = hi / n - p0
        ok = k <= hi
    else:
        p = binom_two_sided_pvalue(k, n, p0)
        thr = max(hi / n - p0, p0 - lo / n)
        ok = lo <= k <= hi
    mdd = _power_shift(n, p0, lo, hi, power, upper_only=one_sided_upper)
    return TestResult(cell, test, k / n - p0, thr, p, mdd, n, passed=bool(ok),
                      extra={"count": int(k), "p0": p0, "region": [int(lo), int(hi)]})


def tail_test(x: np.ndarray, cdf: Callable, alpha: float, q: float = 0.01, *, cell: str = "",
              test: str = "tails", power: float = POWER) -> TestResult:
    """Binned test of the lower and upper ``q`` tails: each count ~ Bin(n, q) under the null.

    Two exact binomial tests at alpha/2 each (Bonferroni; p = 2 min(p_lo, p_hi)).
    statistic = the larger |observed tail mass - q|; MDD = smallest tail-mass shift detected
    with probability >= power.
    """
    x = np.asarray(x, np.float64).ravel()
    n = x.size
    if not np.all(np.isfinite(x)):
        return TestResult(cell, test, math.inf, math.nan, 0.0, math.nan, n, passed=False,
                          note="non-finite values in the sample")
    u = cdf(x)
    return tail_counts_test(int(np.count_nonzero(u < q)), int(np.count_nonzero(u > 1.0 - q)), n, alpha, q,
                            cell=cell, test=test, power=power)


def tail_counts_test(k_lo: int, k_hi: int, n: int, alpha: float, q: float, *, cell: str = "", test: str = "tails",
                     power: float = POWER) -> TestResult:
    """:func:`tail_test` from its counts: k_lo draws with F(x) < q and k_hi with F(x) > 1 - q of n,
    each Binomial(n, q) under H0."""
    lo, hi = binom_acceptance_region(n, q, alpha / 2.0)
    p = min(1.0, 2.0 * min(binom_two_sided_pvalue(k_lo, n, q), binom_two_sided_pvalue(k_hi, n, q)))
    stat = max(abs(k_lo / n - q), abs(k_hi / n - q))
    thr = max(hi / n - q, q - lo / n)
    mdd = _power_shift(n, q, lo, hi, power)
    ok = lo <= k_lo <= hi and lo <= k_hi <= hi
    return TestResult(cell, test, stat, thr, p, mdd, n, passed=bool(ok),
                      extra={"lower_count": k_lo, "upper_count": k_hi, "q": q})


# ---------------------------------------------------------- sums of unequal Bernoullis
def _log_mgf(lam: float, probs: np.ndarray, counts: np.ndarray) -> float:
    """log E exp(lam X), X = sum of counts[j] Bernoulli(probs[j]) (independent)."""
    if lam >= 0:
        terms = np.log1p(probs * np.expm1(lam))
    else:
        terms = np.log1p(-probs * -np.expm1(lam))
    return float(np.dot(counts, terms))


def _pooled(probs: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The same Poisson-binomial law on the distinct p_j: counts of equal p_j summed (the MGF is
    a product over rows, so rows with one p pool exactly). A sequence layer's 20 000 rows take a
    few hundred values: each MGF evaluation is that much cheaper."""
    values, where = np.unique(probs, return_inverse=True)
    return values, np.bincount(where.ravel(), weights=counts, minlength=values.size)


def chernoff_tail(k: float, probs: np.ndarray, counts: np.ndarray, upper: bool, *, pooled: bool = False) -> float:
    """Valid bound on P(X >= k) (``upper``) or P(X <= k), X = sum of independent Bernoullis.

    Chernoff with the exact moment generating function: P(X >= k) <= min_{lam >= 0}
    exp(-lam k + sum_j c_j log(1 - p_j + p_j e^lam)) (lower tail: lam <= 0). Any lam gives a
    valid bound, so an approximate minimiser only costs a little power. Rows with p_j in {0, 1}
    are exact: they shift k. ``pooled``: the p_j are distinct already (no pooling pass).
    """
    probs = np.clip(np.asarray(probs, np.float64), 0.0, 1.0)
    counts = np.asarray(counts, np.float64)
    sure = float(np.dot(counts, probs >= 1.0))
    free = (probs > 0.0) & (probs < 1.0)
    probs, counts = (probs[free], counts[free]) if pooled else _pooled(probs[free], counts[free])
    k = k - sure
    total = float(counts.sum())
    mean = float(np.dot(counts, probs))
    if upper:
        if k <= mean:
            return 1.0
        if k > total:
            return 0.0
        sign = 1.0
    else:
        if k >= mean:
            return 1.0
        if k < 0:
            return 0.0
        sign = -1.0

    def exponent(lam: float) -> float:
        return -sign * lam * k + _log_mgf(sign * lam, probs, counts)

    return float(min(1.0, math.exp(min(0.0, exponent(_chernoff_lambda(k, probs, counts, sign)), exponent(60.0)))))


def _chernoff_lambda(k: float, probs: np.ndarray, counts: np.ndarray, sign: float) -> float:
    """The minimiser over lam in [0, 60] of the Chernoff exponent of :func:`chernoff_tail`.

    With t = sign * lam the exponent's derivative is sign * (M(t) - k), M(t) = sum_j c_j q_j(t),
    q_j(t) = p_j e^t / (1 - p_j + p_j e^t) (increasing in t), so the minimiser solves M(t) = k:
    safeguarded Newton (M'(t) = sum_j c_j q_j (1 - q_j)) inside a bracket that bisection keeps.
    Any lam gives a valid bound; this one is the minimiser to ~1e-10 in a few vectorised steps
    (a bounded scalar search costs ~25 evaluations per tail)."""

    def tilted(t: float) -> np.ndarray:
        return probs * math.exp(t) / (1.0 + probs * math.expm1(t))

    if sign * (float(np.dot(counts, tilted(60.0 * sign))) - k) <= 0:
        return 60.0  # no root inside: the exponent decreases all the way to the bound
    lo, hi = (0.0, 60.0) if sign > 0 else (-60.0, 0.0)  # a bracket of the root in t
    t = 0.0
    for _ in range(200):
        q = tilted(t)
        g = float(np.dot(counts, q)) - k
        lo, hi = (t, hi) if g < 0 else (lo, t)
        slope = float(np.dot(counts, q * (1.0 - q)))
        step = t - g / slope if slope > 0 else math.nan
        t_new = step if lo < step < hi else 0.5 * (lo + hi)
        done = abs(t_new - t) <= 1e-10 * max(1.0, abs(t)) or hi - lo <= 1e-12
        t = t_new
        if done:
            break
    return abs(t)


def _critical_count(probs: np.ndarray, counts: np.ndarray, level: float, upper: bool) -> float:
    """The least extreme count rejected at ``level`` on one side (inf / -inf: none is)."""
    mean = float(np.dot(counts, probs))
    total = float(np.sum(counts))
    lo, hi = (math.ceil(mean), total) if upper else (0.0, math.floor(mean))
    edge = hi if upper else lo
    if chernoff_tail(edge, probs, counts, upper, pooled=True) > level:
        return math.inf if upper else -math.inf
    while hi - lo > 1:  # bisection on the integer count
        mid = math.floor(0.5 * (lo + hi))
        rejected = chernoff_tail(mid, probs, counts, upper, pooled=True) <= level
        if upper:
            lo, hi = (lo, mid) if rejected else (mid, hi)
        else:
            lo, hi = (mid, hi) if rejected else (lo, mid)
    return hi if upper else lo


def _shift_power(probs: np.ndarray, counts: np.ndarray, crit: float, power: float, upper: bool) -> float:
    """Smallest uniform shift eps of every p_j (up if ``upper``) such that the count passes
    ``crit`` with probability >= power (bounded by Chernoff too, so the power is guaranteed)."""
    if not math.isfinite(crit):
        return math.inf

    def miss(eps: float) -> float:  # P(count does not reach crit) under p + eps, bounded
        shifted = np.clip(probs + (eps if upper else -eps), 0.0, 1.0)
        return chernoff_tail(crit - 1 if upper else crit + 1, shifted, counts, upper=not upper, pooled=True)

    if miss(1.0) > 1.0 - power:
        return math.inf
    a, b = 0.0, 1.0  # invariant: the power at b is >= power, so b is a valid (conservative) MDD
    while b - a > max(MDD_RTOL * b, 1e-12):
        m = 0.5 * (a + b)
        a, b = (a, m) if miss(m) <= 1.0 - power else (m, b)
    return b


MDD_RTOL = 1e-4  # minimum detectable deviations are bracketed to 4 significant digits (reported: b)


def bernoulli_sum_test(k: int, probs: np.ndarray, alpha: float, *, counts: np.ndarray | None = None,
                       cell: str = "", test: str = "acceptance", one_sided_upper: bool = False,
                       power: float = POWER) -> TestResult:
    """Test of a count of successes against independent Bernoulli(p_j) trials (c_j each).

    Under H0 the count X = sum_j Bin(c_j, p_j) (a Poisson-binomial law: rows with their own
    delta, so their own declared acceptance). Two-sided p = 2 min(P(X >= k), P(X <= k)) with
    both tails bounded by :func:`chernoff_tail` (valid, slightly conservative); one-sided
    (H1: acceptance above p, e.g. above the i.i.d.-list bound, valid whenever the true p_j are
    <= the given ones) uses the upper tail. statistic = k/n - mean(p); threshold = the largest
    |k/n - mean(p)| accepted at level alpha; MDD = the smallest uniform shift of every p_j
    detected with probability >= power. A test that cannot reject (every p_j = 1 for the upper
    side, say) is returned with kind "n/a".
    """
    probs = np.clip(np.asarray(probs, np.float64).ravel(), 0.0, 1.0)
    counts = np.ones_like(probs) if counts is None else np.asarray(counts, np.float64).ravel()
    probs, counts = _pooled(probs, counts)  # once here: every tail bound below walks the distinct p_j
    n = int(round(float(counts.sum())))
    mean = float(np.dot(counts, probs)) / max(n, 1)
    upper_level = alpha if one_sided_upper else alpha / 2.0
    hi = _critical_count(probs, counts, upper_level, upper=True)
    lo = -math.inf if one_sided_upper else _critical_count(probs, counts, alpha / 2.0, upper=False)
    p_hi = chernoff_tail(k, probs, counts, upper=True)
    p_value = p_hi if one_sided_upper else min(1.0, 2.0 * min(p_hi, chernoff_tail(k, probs, counts, upper=False)))
    statistic = k / max(n, 1) - mean
    gaps = [g for g in ((hi - 1) / n - mean, mean - (lo + 1) / n) if math.isfinite(g)]
    threshold = max(gaps) if gaps else math.inf
    mdds = [_shift_power(probs, counts, hi, power, upper=True)]
    if not one_sided_upper:
        mdds.append(_shift_power(probs, counts, lo, power, upper=False))
    passed = bool(lo < k < hi)
    kind = "stat" if (math.isfinite(hi) or math.isfinite(lo)) else "n/a"
    return TestResult(cell, test, statistic, threshold, p_value, min(mdds), n, kind=kind, passed=passed,
                      note="" if kind == "stat" else "cannot fail here (no count is improbable enough)",
                      extra={"count": int(k), "expected": mean * n, "rejected_outside": [lo, hi]})


# --------------------------------------------------------------------- linear-time MMD
def mmd_linear_test(x: np.ndarray, y: np.ndarray, alpha: float, bandwidth: float | None = None, *,
                    cell: str = "", test: str = "mmd", power: float = POWER) -> TestResult:
    """Linear-time MMD^2 two-sample test (Gaussian kernel), studentised, one-sided.

    x, y: [n, d] samples. h_i = k(x_{2i}, x_{2i+1}) + k(y_{2i}, y_{2i+1}) - k(x_{2i}, y_{2i+1})
    - k(x_{2i+1}, y_{2i}) are i.i.d. with mean MMD^2 >= 0 (0 under the null); the statistic is
    mean(h) / se, compared with the normal quantile (asymptotic; pairs >= 1e3). Bandwidth:
    sqrt(2 d) (the median distance between standard-normal points) unless given.
    MDD is reported in units of MMD^2: (z_{1-alpha} + z_{power}) * se.
    """
    x = np.asarray(x, np.float64)
    y = np.asarray(y, np.float64)
    if x.ndim == 1:
        x = x[:, None]
        y = y[:, None]
    m = min(x.shape[0], y.shape[0]) // 2
    d = x.shape[1]
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        return TestResult(cell, test, math.inf, math.nan, 0.0, math.nan, m, passed=False,
                          note="non-finite values in the sample")
    bw = float(bandwidth) if bandwidth is not None else math.sqrt(2.0 * d)
    x1, x2 = x[0:2 * m:2], x[1:2 * m:2]
    y1, y2 = y[0:2 * m:2], y[1:2 * m:2]

    def k(a, b):
        return np.exp(-np.sum((a - b) ** 2, axis=1) / (2.0 * bw * bw))

    h = k(x1, x2) + k(y1, y2) - k(x1, y2) - k(x2, y1)
    se = float(np.std(h, ddof=1) / math.sqrt(m)) if m > 1 else math.inf
    z_alpha = float(special.ndtri(1.0 - alpha))
    stat = float(np.mean(h) / se) if se > 0 else (math.inf if np.mean(h) > 0 else 0.0)
    p = float(special.ndtr(-stat))
    mdd = (z_alpha + float(special.ndtri(power))) * se
    return TestResult(cell, test, stat, z_alpha, p, mdd, m, passed=stat <= z_alpha,
                      extra={"mmd2": float(np.mean(h)), "bandwidth": bw})


# ------------------------------------------------------------------------- family control
def holm_adjust(results: Sequence[TestResult], alpha: float) -> None:
    """Holm's step-down over the "stat" results at family-wise rate alpha (in place).

    A "stat" result passes iff Holm does not reject it; its ``threshold`` stays the one at
    level alpha / m (Holm's first step: with no rejection it is exactly the binding one).
    Contract and skip results are untouched.
    """
    fam = [r for r in results if r.kind == "stat"]
    if not fam:
        return
    p = np.array([r.p_value for r in fam], np.float64)
    p_adj = holm_pvalues(np.where(np.isfinite(p), p, 0.0))
    for r, pa in zip(fam, p_adj):
        r.passed = bool(pa > alpha)
        r.extra["p_holm"] = float(pa)


def holm_pvalues(p: np.ndarray) -> np.ndarray:
    """Holm-adjusted p-values: with p_(1) <= ... <= p_(m) sorted, p~_(i) = min(1, max over j <= i
    of (m - j + 1) p_(j)); the step-down at rate alpha rejects exactly the tests with p~ <= alpha
    (the first sorted p_(j) > alpha / (m - j + 1) stops it: every later p~ exceeds alpha too)."""
    p = np.asarray(p, np.float64).ravel()
    order = np.argsort(p, kind="stable")
    m = p.size
    adjusted = np.minimum(1.0, np.maximum.accumulate(p[order] * np.arange(m, 0, -1)))
    out = np.empty(m)
    out[order] = adjusted
    return out


def clopper_pearson(k: int, n: int, conf: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) confidence interval for a binomial proportion k/n."""
    a = 1.0 - conf
    lo = 0.0 if k == 0 else float(stats.beta.ppf(a / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(1 - a / 2, k + 1, n - k))
    return lo, hi
