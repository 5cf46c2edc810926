"""Statistical checks with thresholds derived from an explicit false-failure rate."""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy import special, stats

ALPHA = 1e-6  # false-failure rate of every single statistical assertion in tests/verifiers


def dkw_epsilon(n: int, alpha: float = ALPHA) -> float:
    """DKW-Massart: P(sup |F_n - F| > eps) <= 2 exp(-2 n eps^2) = alpha."""
    return math.sqrt(math.log(2.0 / alpha) / (2.0 * n))


def ks_statistic(x: torch.Tensor, cdf) -> float:
    """sup_x |F_n(x) - F(x)| for samples x and a vectorised numpy CDF."""
    xs = torch.sort(x.detach().double().cpu().flatten()).values.numpy()
    n = xs.size
    F = cdf(xs)
    i = np.arange(1, n + 1)
    return float(max(np.max(i / n - F), np.max(F - (i - 1) / n)))


def assert_normal(x: torch.Tensor, mean: float = 0.0, alpha: float = ALPHA, label: str = "") -> None:
    """One-sample KS of x against N(mean, 1), threshold from DKW-Massart at ``alpha``."""
    D = ks_statistic(x, lambda v: special.ndtr(v - mean))
    eps = dkw_epsilon(x.numel(), alpha)
    assert D <= eps, f"{label}: KS distance {D:.3g} > DKW threshold {eps:.3g} (n={x.numel()}, alpha={alpha})"


def assert_cdf(x: torch.Tensor, cdf, alpha: float = ALPHA, label: str = "") -> None:
    D = ks_statistic(x, cdf)
    eps = dkw_epsilon(x.numel(), alpha)
    assert D <= eps, f"{label}: KS distance {D:.3g} > DKW threshold {eps:.3g} (n={x.numel()}, alpha={alpha})"


def binomial_bounds(n: int, p: float, alpha: float = ALPHA) -> tuple[int, int]:
    """Two-sided exact binomial acceptance region: P(X < lo) + P(X > hi) <= alpha."""
    p = min(max(p, 0.0), 1.0)
    lo = int(stats.binom.ppf(alpha / 2, n, p))
    hi = int(stats.binom.isf(alpha / 2, n, p))
    return lo, hi


def assert_binomial(count: int, n: int, p: float, alpha: float = ALPHA, label: str = "") -> None:
    lo, hi = binomial_bounds(n, p, alpha)
    assert lo <= count <= hi, (
        f"{label}: {count}/{n} accepted, theory p={p:.10g} gives [{lo}, {hi}] at alpha={alpha}")
