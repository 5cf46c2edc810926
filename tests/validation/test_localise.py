"""Issue 37.2: the regions localisation confirms are chosen by effect (how far beyond its threshold
a test's statistic lies), spread over strata, not by the smallest p-values alone."""

from __future__ import annotations

import math

from speccheck.validation.localise import candidates, effect
from speccheck.validation.results import TestResult


def _stratum(lo, hi, K, statistic, p, threshold=0.05):
    return TestResult(f"delta in [{lo:g}, {hi:g}),K={K}", "pit-ks", statistic, threshold, p, 0.05, 4096,
                      passed=False, layer="L5", extra={"lo": lo, "hi": hi, "K": K})


def test_effect_is_the_statistic_in_units_of_its_threshold():
    assert math.isclose(effect(_stratum(0.3, 0.6, 3, 0.15, 1e-9)), 3.0)
    assert math.isclose(effect(_stratum(0.3, 0.6, 3, -0.1, 1e-9)), 2.0)  # an acceptance shift down counts too
    assert effect(TestResult("c", "t", 1.0, math.inf, 1.0, math.inf, 1, passed=False)) == math.inf


def test_extra_windows_go_where_the_effect_is_not_to_the_smallest_p():
    """Tiny strata with the smallest p-values (more rows, a small effect) and the strata at 0.3-4
    where the law is far off: the regions chosen past the first are those of the largest effect."""
    tiny = [_stratum(lo, hi, 3, 0.06, 1e-30) for lo, hi in ((1e-8, 1e-6), (1e-6, 1e-5), (1e-5, 2e-5))]
    off = [_stratum(lo, hi, 3, 0.20, 1e-8) for lo, hi in ((0.3, 0.6), (1.0, 1.5), (3.0, 4.0))]
    chosen = candidates(tiny + off, max_candidates=3)
    assert all(lo >= 0.3 for lo, _, _, _ in chosen), chosen


def test_extra_windows_spread_over_strata_before_neighbours():
    near = [_stratum(0.3, 0.6, 2, 0.3, 1e-12), _stratum(0.6, 1.0, 2, 0.29, 1e-12)]
    far = [_stratum(10.0, 15.0, 2, 0.1, 1e-6)]
    chosen = candidates(near + far, max_candidates=2)
    assert [(lo, hi) for lo, hi, _, _ in chosen] == [(0.3, 0.6), (10.0, 15.0)]  # not the neighbour (0.6, 1.0)
    chosen = candidates(near + far, max_candidates=3)
    assert [(lo, hi) for lo, hi, _, _ in chosen][2] == (0.6, 1.0)  # once the apart ones are taken, the neighbours


def test_every_failing_K_is_still_named_first():
    failures = [_stratum(0.1, 0.3, K, s, p) for K, s, p in ((3, 0.1, 1e-30), (5, 0.3, 1e-6), (9, 0.2, 1e-8))]
    chosen = candidates(failures, max_candidates=1)
    assert [K for _, _, K, _ in chosen] == [5, 9, 3]  # uncapped, largest effect first
