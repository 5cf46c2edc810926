"""Unit tests of the statistical building blocks (false-failure rates stated per test)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special, stats

from speccheck.validation.stats import (
    TestResult,
    binom_test,
    clopper_pearson,
    dkw_pvalue,
    dkw_threshold,
    holm_adjust,
    ks_distance,
    ks_dkw_test,
    mmd_linear_test,
    tail_test,
)


def test_dkw_threshold_and_pvalue_agree():
    for n in (100, 10_000):
        for a in (1e-2, 1e-5):
            t = dkw_threshold(n, a)
            assert dkw_pvalue(n, t) == pytest.approx(a, rel=1e-9)


def test_ks_distance_matches_scipy():
    x = np.random.default_rng(0).standard_normal(500)
    assert ks_distance(x, special.ndtr) == pytest.approx(stats.kstest(x, "norm").statistic, abs=1e-12)


def test_dkw_level_is_conservative():
    # 400 null samples of size 200 at alpha = 0.05: failures ~ Bin(400, <= 0.05); P(> 42) < 1e-5
    # even at exactly 0.05, so this test's false-failure rate is < 1e-5.
    rng = np.random.default_rng(1)
    fails = sum(not ks_dkw_test(rng.standard_normal(200), special.ndtr, 0.05).passed for _ in range(400))
    assert fails <= 42
    assert stats.binom.sf(42, 400, 0.05) < 1e-5


def test_ks_detects_shift_above_mdd():
    # a shift whose sup-CDF distance exceeds the MDD must be detected (power 0.99 by construction;
    # at 3x the MDD the miss probability is astronomically small)
    n = 20_000
    r = ks_dkw_test(np.zeros(1), special.ndtr, 1e-5)  # only for its threshold formula
    mdd = dkw_threshold(n, 1e-5) + dkw_threshold(n, 0.01)
    shift = 3 * mdd * math.sqrt(2 * math.pi)  # sup |Phi(x) - Phi(x - h)| ~ h phi(0)
    x = np.random.default_rng(2).standard_normal(n) + shift
    res = ks_dkw_test(x, special.ndtr, 1e-5)
    assert not res.passed and res.mdd == pytest.approx(mdd)
    assert r.n == 1


def test_nonfinite_sample_fails():
    x = np.array([0.0, np.nan, 1.0])
    assert not ks_dkw_test(x, special.ndtr, 1e-3).passed
    assert not tail_test(x, special.ndtr, 1e-3).passed


def test_binom_two_sided_region_and_power():
    r = binom_test(5000, 10_000, 0.5, 1e-5)
    assert r.passed and r.p_value == pytest.approx(1.0)
    lo, hi = r.extra["region"]
    # the acceptance region has null mass >= 1 - alpha
    assert stats.binom.cdf(hi, 10_000, 0.5) - stats.binom.cdf(lo - 1, 10_000, 0.5) >= 1 - 1e-5
    # at p0 + mdd the rejection probability is >= 0.99
    p1 = 0.5 + r.mdd
    assert stats.binom.sf(hi, 10_000, p1) >= 0.99 - 1e-9
    assert not binom_test(5300, 10_000, 0.5, 1e-5).passed


def test_binom_one_sided_upper():
    assert binom_test(4000, 10_000, 0.5, 1e-5, one_sided_upper=True).passed
    assert not binom_test(5400, 10_000, 0.5, 1e-5, one_sided_upper=True).passed


def test_tail_test_catches_light_tails():
    rng = np.random.default_rng(3)
    x = np.clip(rng.standard_normal(50_000), -2.2, 2.2)  # no mass below the 1% quantile -2.326
    r = tail_test(x, special.ndtr, 1e-5)
    assert not r.passed and r.extra["lower_count"] == 0
    assert tail_test(rng.standard_normal(50_000), special.ndtr, 1e-5).passed  # false-failure rate 1e-5


def test_mmd_linear():
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal((8000, 8)), rng.standard_normal((8000, 8))
    assert mmd_linear_test(x, y, 1e-5).passed  # false-failure rate 1e-5 (asymptotic)
    assert not mmd_linear_test(x * 1.5, y, 1e-5).passed


def test_holm_step_down():
    rs = [TestResult("c", f"t{i}", 0, 0, p, 0, 1) for i, p in enumerate([1e-6, 0.004, 0.03, 0.5])]
    holm_adjust(rs, 0.02)
    # Holm at 0.02 with m = 4: 1e-6 <= 0.005 (reject), 0.004 <= 0.02/3 (reject), 0.03 > 0.01 (stop)
    assert [r.passed for r in rs] == [False, False, True, True]
    c = TestResult("c", "contract", 0, 0, 0.0, 0, 1, kind="contract", passed=True)
    holm_adjust([c], 0.02)
    assert c.passed


def test_holm_pvalues_are_the_step_down():
    """Holm-adjusted p-values against the definition (brute force over the sorted order), ties
    and p = 0 included; rejecting p~ <= alpha is the step-down (checked at several alpha)."""
    from speccheck.validation.stats import holm_pvalues

    rng = np.random.default_rng(8)
    for m in (1, 2, 7, 60):
        p = rng.uniform(0, 1, m) ** rng.uniform(1, 12, m)
        p[: m // 3] = p[0]
        p[-1] = 0.0
        got = holm_pvalues(p)
        ps = np.sort(p)
        ref_sorted = np.array([min(1.0, max((m - j) * ps[j] for j in range(i + 1))) for i in range(m)])
        np.testing.assert_allclose(np.sort(got), ref_sorted, rtol=1e-15)
        for alpha in (1e-3, 0.05, 0.5):
            reject, stopped = np.zeros(m, bool), False
            for j, i in enumerate(np.argsort(p, kind="stable")):
                stopped = stopped or p[i] > alpha / (m - j)
                reject[i] = not stopped
            assert np.array_equal(reject, got <= alpha), (m, alpha)


def test_clopper_pearson():
    lo, hi = clopper_pearson(0, 200)
    assert lo == 0 and hi == pytest.approx(1 - 0.025 ** (1 / 200))
    lo, hi = clopper_pearson(10, 100)
    assert lo < 0.1 < hi


def test_bernoulli_sum_test_is_valid_and_has_its_stated_power():
    """Counts of unequal Bernoullis: under H0 the rejection rate is <= alpha (Chernoff bounds
    are conservative); shifted by the stated MDD, rejections happen w.p. >= 0.99.
    Thresholds: 2000 H0 runs at alpha = 0.05 reject <= 140 times unless the test is invalid
    (P(Bin(2000, 0.05) > 140) < 1e-6); 200 runs at the MDD reject >= 190 times
    (P(Bin(200, 0.99) < 190) < 1e-5)."""
    from speccheck.validation.stats import bernoulli_sum_test

    rng = np.random.default_rng(12)
    probs = rng.uniform(0.0, 1.0, 400)
    counts = np.full(probs.size, 5)
    draws = rng.binomial(5, probs, size=(2000, probs.size)).sum(axis=1)
    first = bernoulli_sum_test(int(draws[0]), probs, 0.05, counts=counts)
    lo, hi = first.extra["rejected_outside"]
    assert first.passed == (lo < draws[0] < hi)
    assert not bernoulli_sum_test(int(hi), probs, 0.05, counts=counts).passed
    assert np.sum((draws <= lo) | (draws >= hi)) <= 140
    assert 0 < first.mdd < 0.1
    shifted = np.clip(probs + first.mdd, 0, 1)
    alt = rng.binomial(5, shifted, size=(200, probs.size)).sum(axis=1)
    assert np.sum(alt >= hi) >= 190


def test_bernoulli_sum_test_edge_cases():
    from speccheck.validation.stats import bernoulli_sum_test

    na = bernoulli_sum_test(10, np.ones(10), 1e-3, one_sided_upper=True)
    assert na.kind == "n/a" and na.passed
    sure = bernoulli_sum_test(9, np.ones(10), 1e-3)
    assert not sure.passed and sure.p_value == 0.0
    up = bernoulli_sum_test(60, np.full(100, 0.2), 1e-3, one_sided_upper=True)
    assert not up.passed and up.p_value < 1e-6
    low = bernoulli_sum_test(0, np.full(100, 0.2), 1e-3, one_sided_upper=True)
    assert low.passed  # one-sided: a low count is no evidence against the bound
