import numpy as np
import pytest
from scipy import integrate, optimize, stats

from speccheck.theory import acceptance_rmc, list_bound_dependent, list_bound_iid


@pytest.mark.parametrize("delta,K", [(0.5, 2), (1.0, 4), (2.0, 8), (0.2, 3)])
def test_iid_bound_against_brute_force_maximum(delta, K):
    h = lambda s: -(stats.norm.cdf(s) ** K - stats.norm.cdf(s - delta))  # noqa: E731
    grid = np.linspace(-10, 20, 30001)
    s0 = grid[np.argmin(h(grid))]
    res = optimize.minimize_scalar(h, bracket=(s0 - 0.01, s0, s0 + 0.01), tol=1e-12)
    assert list_bound_iid(delta, K) == pytest.approx(1 + res.fun, abs=1e-11)


def test_bounds_K1_are_rmc():
    d = np.geomspace(1e-4, 30, 40)
    np.testing.assert_allclose(list_bound_iid(d, 1), acceptance_rmc(d), rtol=1e-12)
    np.testing.assert_allclose(list_bound_dependent(d, 1), acceptance_rmc(d), rtol=1e-12)


def test_dependent_bound_is_integral_of_min():
    delta, K = 1.3, 3
    f = lambda s: min(stats.norm.pdf(s - delta), K * stats.norm.pdf(s))  # noqa: E731
    tau = np.log(K) / delta + delta / 2
    val = integrate.quad(f, -np.inf, tau, epsabs=1e-14)[0] + integrate.quad(f, tau, np.inf, epsabs=1e-14)[0]
    assert list_bound_dependent(delta, K) == pytest.approx(val, rel=1e-10)


def test_argmax_is_the_larger_stationary_point():
    b, s = list_bound_iid(1.0, 4, return_argmax=True)
    F = np.log(4) + 3 * stats.norm.logcdf(s) - s + 0.5
    assert abs(F) < 1e-10
    assert 3 * stats.norm.pdf(s) / stats.norm.cdf(s) - 1.0 < 0  # right of the peak of F
