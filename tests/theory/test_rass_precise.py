"""speccheck.theory.rass.precise: 1 - A in extended precision, Markov's shipped e*, the precise
Markov bound (issue 38 items 1-2)."""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest

from research.reference import mp_rass_at
from speccheck.theory import rank_weight_solution, rejection_rass
from speccheck.theory.rass.certificate import markov_edges, markov_lower_bound
from speccheck.theory.rass.precise import (
    markov_deviation_precise,
    markov_eps,
    markov_lower_bound_precise,
    markov_zero_count,
    precise_rejection,
)


@pytest.mark.parametrize("K", [2, 3, 8, 17, 48, 64, 96, 128])
def test_shipped_e_star_is_antisymmetric_and_interpolates(K):
    e = markov_deviation_precise(K)
    assert e.shape == (3, K)
    assert np.array_equal(e, -e[:, ::-1])
    if K > 40:
        return
    # the interpolation conditions at 60 digits: sum_r e_r b_r(u_k) = Phi^-1(u_k) (relative to |e| |b|)
    with mp.workdps(60):
        col = [mp.fsum(mp.mpf(float(x)) for x in e[:, r]) for r in range(K)]
        n = K if K % 2 else K + 1
        for k in range(1, n + 1):
            u = mp.sin(k * mp.pi / (2 * (n + 1))) ** 2
            f = mp.fsum(c * K * mp.binomial(K - 1, r) * u ** r * (1 - u) ** (K - 1 - r) for r, c in enumerate(col))
            assert abs(f - mp.sqrt(2) * mp.erfinv(2 * u - 1)) < 1e-25 * (1 + max(abs(c) for c in col) * K)


@pytest.mark.parametrize("K,d", [(64, 1e-14), (96, 1e-14), (128, 1e-30)])
def test_markov_eps_is_none_where_omega_would_be_negative(K, d):
    assert markov_eps(d, K) is None  # max |e*| > 1 / (K delta): omega >= 0 binds there


def test_markov_eps_sums_to_zero_exactly():
    for K, d in [(48, 1e-14), (64, 1e-30), (128, 1e-300), (128, 2.2250738585072014e-308)]:
        eps = markov_eps(d, K)
        assert math.fsum(eps.ravel().tolist()) == 0.0 and np.all(1.0 / K + eps.sum(axis=0) > 0)


def test_precise_matches_the_float_evaluator_where_that_is_precise():
    rng = np.random.default_rng(38)
    for K in (3, 8, 16):
        for d in (1e-3, 0.1, 0.9):
            w = rng.dirichlet(np.ones(K))
            w = 0.5 * w + 0.5 / K
            eps = w - 1.0 / K
            eps[-1] = -math.fsum(eps[:-1].tolist())
            ref = float(rejection_rass(d, K, deviation=eps))
            roots = np.asarray(rank_weight_solution(d, K).crossings)
            res = precise_rejection(d, eps, np.concatenate([roots, markov_edges(K)]), strict=False)
            assert res.rejection == pytest.approx(ref, rel=1e-11), (K, d)


@pytest.mark.parametrize("K,d", [(24, 1e-20), (48, 1e-30)])
def test_precise_matches_an_independent_mpmath_evaluation(K, d):
    """research.reference.mp_rass_at (binomial sums of omega itself, not of deviations) at
    Markov's weights."""
    eps = markov_eps(d, K)
    res = precise_rejection(d, eps, markov_edges(K))
    with mp.workdps(int(60 - math.log10(d))):
        omega = [mp.mpf(1) / K + mp.fsum(mp.mpf(float(x)) for x in eps[:, r]) for r in range(K)]
        ref = mp_rass_at(omega, mp.mpf(d), [mp.mpf(float(c)) for c in res.crossings])["rejection"]
        assert abs(mp.mpf(res.rejection) - ref) <= 1e-14 * ref


def test_markov_bound_is_below_the_rejection_of_any_weights():
    """Weak duality, measured over random weights (near uniform, where the bound is tight, and
    far from it): 1 - A(omega) >= the precise Markov bound, which is >= the float one."""
    rng = np.random.default_rng(3801)
    for K in (5, 8, 24):
        for d in (1e-12, 1e-4, 0.3):
            bound = markov_lower_bound_precise(d, K)
            assert markov_lower_bound(d, K) <= bound * (1 + 1e-13)
            for scale in (1e-3, 1.0):
                e = markov_deviation_precise(K).sum(axis=0) if K <= 8 else np.zeros(K)
                noise = rng.normal(size=K) * scale * (1.0 / K)
                eps = d * e + noise - noise.mean()
                if np.any(1.0 / K + eps <= 0):
                    continue
                eps[-1] = -math.fsum(eps[:-1].tolist())
                rej = float(rejection_rass(d, K, deviation=eps))
                assert rej >= bound * (1 - 1e-12), (K, d, scale)


@pytest.mark.parametrize("K", [24, 64])
def test_markov_weights_cross_q_exactly_at_n_points(K):
    """The caveat of precise_rejection: Markov's weights have no zeros beyond the n that
    Markov's points seed (a dense scan in mpmath)."""
    eps = markov_eps(1e-30, K)
    assert markov_zero_count(1e-30, eps, points_per_cell=6) == markov_edges(K).size


@pytest.mark.parametrize("K,d", [(48, 1e-14), (64, 1e-30), (128, 1e-300)])
def test_solution_is_markov_and_honest(K, d):
    sol = rank_weight_solution(d, K)
    assert sol.deviation_tail is not None
    assert np.array_equal(sol.deviation_expansion[0], sol.deviation)
    assert float(rejection_rass(d, K, deviation=sol.deviation_expansion)) == pytest.approx(sol.rejection,
                                                                                          rel=1e-14)
    assert sol.gap <= 1e-12 * sol.rejection
    assert sol.rejection - sol.gap >= markov_lower_bound_precise(d, K) * (1 - 1e-15)


def test_threads_do_not_interleave_mpmath_precision():
    """mpmath's precision is process-global: computations in threads (each setting its own) give
    the serial results."""
    from concurrent.futures import ThreadPoolExecutor

    jobs = [(d, K) for d, K in [(1e-30, 48), (1e-300, 24), (1e-14, 32), (1e-20, 17)] for _ in range(2)]

    def one(job):
        d, K = job
        return precise_rejection(d, markov_eps(d, K), markov_edges(K)).rejection, markov_lower_bound_precise(d, K)

    serial = [one(job) for job in jobs]
    with ThreadPoolExecutor(max_workers=4) as pool:
        assert list(pool.map(one, jobs)) == serial
