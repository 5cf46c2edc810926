"""Gaussian data: affine velocity and the exact chain law (SPEC section 3)."""

import numpy as np
import pytest
import torch
from scipy import stats

from speccheck.targets.gaussian import GaussianData, chain_law
from speccheck.targets.schedules import flow_matching, uniform


def test_velocity_matches_conditional_expectation():
    # E[xi - x0 | x_t] for jointly Gaussian (x0, xi): regression on x_t, closed form per t
    m, c = np.array([0.5, -1.0, 2.0]), 0.7
    tgt = GaussianData(m, c)
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for t in (0.05, 0.5, 0.95, 1.0):
        var = (1 - t) ** 2 * c**2 + t**2
        cov = t - (1 - t) * c**2  # Cov(xi - x0, x_t) per coordinate
        expect = -m + cov / var * (x.numpy() - (1 - t) * m)
        got = tgt.velocity(x, torch.full((5,), t, dtype=torch.float64)).numpy()
        np.testing.assert_allclose(got, expect, rtol=1e-12, atol=1e-12)


def test_chain_law_matches_simulation():
    """Plain (non-speculative) chain simulated 20000 times vs the exact law: z-tests of the mean
    and chi-square of the variance at every step, Bonferroni over 2 * N * d tests at total
    false-failure rate 1e-4."""
    d, n = 2, 20000
    tgt = GaussianData([1.0, -0.5], 0.4)
    for sched in (uniform(8, 0.5, 0.95, 0.02), flow_matching(8, 0.3)):
        law = chain_law(sched, tgt)
        g = torch.Generator().manual_seed(1)
        y = torch.randn(n, d, generator=g, dtype=torch.float64)
        level = 1e-4 / (2 * sched.N * d * 2)
        for k in range(sched.N):
            v = tgt.velocity(y, torch.full((n,), sched.t[k], dtype=torch.float64))
            y = sched.a[k] * y + sched.c[k] * v + sched.sigma[k] * torch.randn(n, d, generator=g, dtype=torch.float64)
            Y = y.numpy()
            z = (Y.mean(0) - law.mean[k + 1]) / np.sqrt(law.var[k + 1] / n)
            assert np.all(2 * stats.norm.sf(np.abs(z)) > level), (k, z)
            q = ((Y - law.mean[k + 1]) ** 2).sum(0) / law.var[k + 1]
            p = 2 * np.minimum(stats.chi2.cdf(q, n), stats.chi2.sf(q, n))
            assert np.all(p > level), (k, q / n)


def test_bad_input():
    with pytest.raises(ValueError):
        GaussianData([0.0], 0.0)
    with pytest.raises(ValueError):
        GaussianData(np.zeros((2, 2)), 1.0)
    tgt = GaussianData([0.0, 1.0], 1.0)
    with pytest.raises(ValueError):
        tgt.velocity(torch.zeros(3, 3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64))
    with pytest.raises(ValueError):
        chain_law(uniform(3, 0.1), tgt, init_var=-1.0)
