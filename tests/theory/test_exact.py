"""Precision and robustness of :mod:`speccheck.theory.exact` against mpmath references."""

from pathlib import Path

import mpmath as mp
import numpy as np
import pytest
from scipy import special

from speccheck.theory import exact

DATA = Path(__file__).parent / "data"
ULP = 2.0 ** -52


def _mp_binomial_pmf(n: int, x: float) -> list:
    p, q = mp.ncdf(mp.mpf(x)), mp.ncdf(-mp.mpf(x))
    return [mp.binomial(n, j) * p ** j * q ** (n - j) for j in range(n + 1)]


def test_stirling_error_table_is_log_factorial_minus_stirling():
    with mp.workdps(40):
        for n in range(1, 40):
            ref = mp.log(mp.factorial(n)) - (n + mp.mpf(1) / 2) * mp.log(n) + n - mp.log(2 * mp.pi) / 2
            got = float(exact._stirling_error(np.array([float(n)]))[0])
            assert abs(got - float(ref)) <= 2 * ULP * float(ref) + 1e-18, n


@pytest.mark.parametrize("n", [1, 2, 16, 63, 127, 128])
def test_binomial_pmf_has_few_ulp_relative_error_where_it_matters(n):
    """Loader's form keeps every pmf term >= 1e-6 to a few tens of ulp (the naive log-binomial
    form lost ~400 ulp at n = 128), and the sum to 1 to a few ulp."""
    with mp.workdps(40):
        for x in (-3.7, -1.1, -0.05, 0.0, 0.4, 1.9, 4.2):
            ref = np.array([float(t) for t in _mp_binomial_pmf(n, x)])
            got = exact.binomial_pmf(n, np.array([special.ndtr(x)]), np.array([special.ndtr(-x)]),
                                     np.array([special.log_ndtr(x)]), np.array([special.log_ndtr(-x)]))[0]
            big = ref >= 1e-6
            assert np.max(np.abs(got[big] / ref[big] - 1.0)) <= 64 * ULP, (n, x)
            assert np.max(np.abs(got - ref)) <= 8 * ULP, (n, x)


@pytest.mark.parametrize("K", [17, 64, 121, 128])
def test_rank_tails_are_accurate_to_a_few_ulp_absolute(K):
    """The order-statistic CDFs every certificate sums: absolute error <= 8 ulp at any K <= 128
    (the bound ``rass_dual.dual_bound``'s 64-ulp rounding allowance relies on)."""
    rng = np.random.default_rng(K)
    x = rng.uniform(-6.0, 6.0, 9)
    lower, upper = exact.rank_tails(K, x)
    with mp.workdps(40):
        for i, xv in enumerate(x):
            pmf = _mp_binomial_pmf(K, float(xv))
            ref_lower = np.array([float(mp.fsum(pmf[r:])) for r in range(1, K + 1)])
            ref_upper = np.array([float(mp.fsum(pmf[:r])) for r in range(1, K + 1)])
            assert np.max(np.abs(lower[i] - ref_lower)) <= 8 * ULP, xv
            assert np.max(np.abs(upper[i] - ref_upper)) <= 8 * ULP, xv


def test_crossings_stay_inside_their_brackets_near_a_double_root():
    """K = 128 weights with a near-double crossing at z ~ 0.065: Newton's point left its bracket
    (F' ~ 0) and was kept as 'converged', giving a spurious crossing at z = 5.42, the sides
    flipped after it and 1 - A = 0 at delta = 1e-5. Every crossing must be a sign change of F,
    and the weights given as eps or as omega must give the same A."""
    eps = np.loadtxt(DATA / "k128_near_double_root_eps.txt")
    K, d = eps.size, 9.999999999999999e-06
    zero = eps == -1.0 / K
    by_eps = exact.exact_acceptance(exact.law_from_eps(eps, zero), np.array([d]))
    by_omega = exact.exact_acceptance(exact.law_from_omega(exact.law_from_eps(eps, zero).omega), np.array([d]))
    roots = by_eps.crossings[0]
    assert np.all(np.diff(roots) > 0) and roots[0] > exact.Z_LO and roots[-1] < d + exact.Z_PAD
    law = exact.law_from_eps(eps, zero)
    mids = np.concatenate([[exact.Z_LO], roots[:-1] + np.diff(roots) / 2, [d + exact.Z_PAD]])
    F = exact.curve(law, mids, derivatives=0).L - d * mids + 0.5 * d * d
    # q and p_omega alternate from piece to piece wherever the sign of F is resolved (near
    # z = 0.06 three roots sit where |F| ~ 1e-15, the rounding level of L: no mass there)
    clear = np.abs(F) > 1e-13
    side = np.sign(F)
    both = clear[1:] & clear[:-1]
    assert both.sum() > 60 and np.all(side[1:][both] * side[:-1][both] < 0)
    assert 9.6e-10 < by_eps.rejection[0] < 9.7e-10
    # the two forms differ by the rounding of omega = 1/K + eps: ulp(1) sum |eps| at most
    assert abs(by_eps.rejection[0] - by_omega.rejection[0]) <= ULP * np.abs(eps).sum()
