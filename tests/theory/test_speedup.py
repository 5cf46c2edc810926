import numpy as np
import pytest

from speccheck.theory import (
    chain_ceiling,
    commit_distribution,
    expected_nfe,
    expected_steps_per_round,
    predicted_speedup,
)


def test_constant_acceptance_closed_form():
    for a in [0.0, 0.3, 0.52, 0.9]:
        for L in [1, 2, 6]:
            assert expected_steps_per_round(np.full(L, a)) == pytest.approx((1 - a**L) / (1 - a))
    assert chain_ceiling(0.52) == pytest.approx(2.0833333)


def test_commit_distribution_sums_to_one_and_matches_mean():
    a = np.array([0.9, 0.5, 0.7, 0.2])
    p = commit_distribution(a)
    assert p.sum() == pytest.approx(1.0)
    assert p @ np.arange(1, 5) == pytest.approx(expected_steps_per_round(a))


def test_dp_edge_cases():
    assert expected_nfe(0.0, 30, 6, warmup=0) == 30  # every round commits one step
    assert expected_nfe(1.0, 30, 6, warmup=0) == 5  # every round commits L steps
    assert expected_nfe(1.0, 31, 6, warmup=1) == 1 + 6  # last round truncated to one step


def test_dp_matches_monte_carlo():
    # simulate the rounds directly, step- and depth-dependent acceptance; the DP's mean must
    # lie within 4.5 standard errors (two-sided false-failure rate ~7e-6)
    rng = np.random.default_rng(0)
    N, L = 20, 4
    alpha = rng.uniform(0.2, 0.9, size=(N, L))
    n_rep = 20000
    nfe = np.zeros(n_rep)
    for i in range(n_rep):
        n, calls = 0, 1
        while n < N:
            Ln = min(L, N - n)
            c = 1
            while c < Ln and rng.random() < alpha[n, c - 1]:
                c += 1
            n += c
            calls += 1
        nfe[i] = calls
    se = nfe.std(ddof=1) / np.sqrt(n_rep)
    assert abs(nfe.mean() - expected_nfe(alpha, N, L)) < 4.5 * se
    assert predicted_speedup(alpha, N, L) == pytest.approx(N / expected_nfe(alpha, N, L))


def test_bad_probabilities_raise():
    with pytest.raises(ValueError, match="alpha"):
        expected_nfe(1.5, 10, 2)
    with pytest.raises(ValueError, match="a must"):
        chain_ceiling(np.nan)
