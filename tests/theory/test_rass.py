import numpy as np
import pytest
from scipy import integrate, stats

from speccheck.theory import (
    acceptance_dgrs,
    acceptance_rass,
    acceptance_rmc,
    cdf_p_omega,
    list_bound_iid,
    log_p_omega,
    rank_weight_solution,
    rank_weights,
    rank_weights_cvxpy,
    residual_intervals,
    sf_p_omega,
)


def test_p_omega_is_the_order_statistic_law():
    # omega = e_r: the density of the r-th order statistic of K standard normals
    K, r = 5, 2
    w = np.eye(K)[r - 1]
    s = np.linspace(-3, 3, 13)
    u = stats.norm.cdf(s)
    expected = stats.beta(r, K - r + 1).pdf(u) * stats.norm.pdf(s)
    np.testing.assert_allclose(np.exp(log_p_omega(s, K, w)), expected, rtol=1e-12)
    np.testing.assert_allclose(cdf_p_omega(s, K, w) + sf_p_omega(s, K, w), 1.0, atol=1e-15)


def test_uniform_weights_give_phi_and_rmc_acceptance():
    K = 6
    w = np.full(K, 1 / K)
    s = np.linspace(-4, 4, 9)
    np.testing.assert_allclose(np.exp(log_p_omega(s, K, w)), stats.norm.pdf(s), rtol=1e-12)
    for d in [0.1, 1.0, 3.0]:
        assert acceptance_rass(d, K, w) == pytest.approx(float(acceptance_rmc(d)), abs=1e-13)


@pytest.mark.parametrize("delta,K", [(0.3, 2), (1.0, 4), (2.0, 8), (0.7, 3)])
def test_acceptance_is_adaptive_quadrature_of_min(delta, K):
    w = rank_weights(delta, K)
    f = lambda s: min(stats.norm.pdf(s - delta), float(np.exp(log_p_omega(np.array(s), K, w))))  # noqa
    ivs = residual_intervals(delta, K, w)
    pts = sorted({x for iv in ivs for x in (iv.lo, iv.hi) if np.isfinite(x) and abs(x) < 12})
    edges = [-12.0] + pts + [12.0 + delta]
    val = sum(integrate.quad(f, a, b, epsabs=1e-14, epsrel=1e-12, limit=200)[0]
              for a, b in zip(edges[:-1], edges[1:]))
    assert acceptance_rass(delta, K, w) == pytest.approx(val, abs=1e-11)


def test_residual_intervals_left_interval_mass_K2_top_rank_delta1():
    ivs = residual_intervals(1.0, 2, [0.0, 1.0])
    total = sum(iv.mass for iv in ivs)
    assert len(ivs) == 2 and ivs[0].lo == -np.inf and ivs[1].hi == np.inf
    assert ivs[0].mass / total == pytest.approx(0.00833, abs=5e-5)  # paper: about 0.8%
    assert total == pytest.approx(1 - acceptance_rass(1.0, 2, [0.0, 1.0]), abs=1e-15)


def test_residual_intervals_can_be_many():
    # optimal weights at K = 8 have several crossings (SPEC: up to 5 intervals at K = 8)
    ivs = residual_intervals(0.3, 8, rank_weights(0.3, 8))
    assert len(ivs) >= 4
    for iv in ivs:
        mid = iv.lo + 1 if not np.isfinite(iv.hi) else (iv.hi - 1 if not np.isfinite(iv.lo) else 0.5 * (iv.lo + iv.hi))
        assert stats.norm.logpdf(mid - 0.3) > log_p_omega(mid, 8, rank_weights(0.3, 8))


@pytest.mark.parametrize("delta,K", [(0.5, 3), (1.5, 4)])
def test_highs_and_cvxpy_formulations_agree(delta, K):
    w_cvx, _ = rank_weights_cvxpy(delta, K)
    a_cvx = acceptance_rass(delta, K, w_cvx)
    assert acceptance_rass(delta, K) == pytest.approx(a_cvx, abs=5e-6)


def test_quadrature_loss_small_and_rass_between_dgrs_and_bound():
    for K in [2, 4, 8]:
        for d in [0.05, 0.5, 1.0, 2.5]:
            sol = rank_weight_solution(d, K)
            assert sol.quadrature_loss < 2.1e-5  # the paper's largest; ours is far smaller
            assert acceptance_dgrs(d, K) <= sol.acceptance + 1e-12
            assert sol.acceptance <= list_bound_iid(d, K) + 1e-12


def test_weights_uniform_at_small_delta_and_top_rank_at_large_delta():
    assert np.abs(rank_weights(0.01, 4) - 0.25).max() < 0.02
    assert rank_weights(2.5, 4)[-1] >= 0.99
    assert rank_weights(3.0, 8)[-1] >= 0.99


def test_cache_returns_copies():
    w = rank_weights(0.9, 3)
    w[:] = 0
    assert rank_weights(0.9, 3).sum() == pytest.approx(1.0)


@pytest.mark.parametrize("omega", [[0.5, 0.6], [1.0], [-0.1, 1.1], [np.nan, 1.0]])
def test_bad_omega_raises(omega):
    with pytest.raises(ValueError, match="omega"):
        acceptance_rass(1.0, 2, omega)
