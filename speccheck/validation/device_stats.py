"""The battery's statistics on the device that drew the samples: only scalars come back.

:mod:`speccheck.validation.stats` computes the same tests in numpy on the host, which for a
2^24-draw cell costs a device-to-host copy and a host sort. Here every statistic is a torch
reduction on the samples' own device (CPU or CUDA); a cell gathers its few scalars and brings
them back with ONE host sync (:func:`fetch`). Same numbers as the numpy path (tests: equal
within float rounding on CPU), and deterministic: no atomics, no float cumsum, no histc /
weighted bincount (all of which are nondeterministic or raise under
``torch.use_deterministic_algorithms(True)`` on CUDA).

Device-tensor statistics (each returns a tensor on x's device, no sync):

* :func:`ks_statistic` ``(x[n], cdf) -> D`` = sup_s |F_n(s) - F(s)| (sort + CDF, 0-d float64);
* :func:`tail_counts` ``(x[n], cdf, q) -> [#{F(x) < q}, #{F(x) > 1 - q}]`` (int64 [2]);
* :func:`acceptance_count` ``(accepted[n]) -> #accepted`` (0-d int64);
* :func:`pit_values` ``(x, cdf) -> u = F(x)`` (the probability integral transform, U(0, 1)
  under the null; test it with ``ks_statistic(u, uniform_cdf)``) and :func:`pit_counts`
  ``(u, bins) -> counts per equal-width bin`` (int64 [bins], by sort + searchsorted);
* :func:`mmd_linear_h` ``(x[n, d], y[n, d], bandwidth) -> h[m]``, the linear-time MMD^2
  h-statistics h_i = k(x_2i, x_2i+1) + k(y_2i, y_2i+1) - k(x_2i, y_2i+1) - k(x_2i+1, y_2i),
  and :func:`mmd_moments` ``(h) -> [mean, sd (ddof 1)]``;
* :func:`all_finite` ``(x) -> bool`` (0-d), so a cell reports "non-finite values" as the numpy
  path does;
* CDFs as torch functions: :func:`normal_cdf` (mean) with full relative precision in both
  tails, :func:`chi2_cdf` (dof), :func:`uniform_cdf`.

Host side: :func:`fetch` ``(*tensors) -> list[float]`` stacks any number of 0-d/1-d device
tensors and copies them back in one transfer. The ``*_test`` functions (:func:`ks_dkw_test`,
:func:`tail_test`, :func:`mmd_linear_test`, :func:`mmd_test_from_h`) are drop-in device
versions of the :mod:`~speccheck.validation.stats` ones (same arguments, same
:class:`~speccheck.validation.results.TestResult`); each costs one sync.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from scipy import special

from speccheck.validation.stats import (
    POWER,
    TestResult,
    dkw_pvalue,
    dkw_threshold,
    tail_counts_test,
)

Tensor = torch.Tensor
TorchCdf = Callable[[Tensor], Tensor]
_SQRT1_2 = math.sqrt(0.5)


# ------------------------------------------------------------------------------- CDFs
def normal_cdf(mean: float = 0.0) -> TorchCdf:
    """F(v) = Phi(v - mean), as 0.5 erfc(-(v - mean) / sqrt 2): full relative precision in the
    lower tail (and 1 - F too, in the upper one, where the tail tests look)."""
    mean = float(mean)

    def cdf(v: Tensor) -> Tensor:
        return 0.5 * torch.special.erfc((v - mean) * -_SQRT1_2)

    return cdf


def chi2_cdf(dof: int) -> TorchCdf:
    """F(v) = P(chi^2_dof <= v) = regularised lower incomplete gamma P(dof / 2, v / 2); 0 for v <= 0."""
    if dof < 1:
        raise ValueError(f"chi2_cdf: dof must be >= 1, got dof={dof!r}")
    half = 0.5 * float(dof)

    def cdf(v: Tensor) -> Tensor:
        a = torch.full_like(v, half)
        return torch.special.gammainc(a, torch.clamp(0.5 * v, min=0.0))

    return cdf


def uniform_cdf(v: Tensor) -> Tensor:
    """F(v) = clamp(v, 0, 1): the null CDF of PIT values."""
    return torch.clamp(v, 0.0, 1.0)


# ------------------------------------------------------------------- device statistics
def _flat64(x: Tensor) -> Tensor:
    return x.reshape(-1).to(torch.float64)


def ks_statistic(x: Tensor, cdf: TorchCdf) -> Tensor:
    """D = sup_s |F_n(s) - F(s)| = max_i max(i/n - F(x_(i)), F(x_(i)) - (i-1)/n), 0-d on x's device.

    Edge case: n = 0 gives D = 0 (no evidence)."""
    xs = torch.sort(_flat64(x)).values
    n = xs.numel()
    if n == 0:
        return torch.zeros((), dtype=torch.float64, device=x.device)
    u = cdf(xs)
    i = torch.arange(1, n + 1, dtype=torch.float64, device=x.device)
    return torch.maximum((i / n - u).max(), (u - (i - 1.0) / n).max())


def tail_counts(x: Tensor, cdf: TorchCdf, q: float) -> Tensor:
    """[#{F(x) < q}, #{F(x) > 1 - q}] (int64 [2]); each count ~ Bin(n, q) under the null."""
    u = cdf(_flat64(x))
    return torch.stack([torch.count_nonzero(u < q), torch.count_nonzero(u > 1.0 - q)]).to(torch.int64)


def acceptance_count(accepted: Tensor) -> Tensor:
    """Number of accepted rows (0-d int64)."""
    return torch.count_nonzero(accepted.reshape(-1).to(torch.bool)).to(torch.int64)


def pit_values(x: Tensor, cdf: TorchCdf) -> Tensor:
    """u = F(x) elementwise: U(0, 1) under the null (probability integral transform)."""
    return cdf(_flat64(x))


def pit_counts(u: Tensor, bins: int) -> Tensor:
    """Counts of u in the equal-width bins [j/bins, (j+1)/bins) (last bin closed), int64 [bins].

    By sort + searchsorted at the bin edges (deterministic on every device, unlike histc)."""
    if bins < 1:
        raise ValueError(f"pit_counts: bins must be >= 1, got bins={bins!r}")
    us = torch.sort(torch.clamp(_flat64(u), 0.0, 1.0)).values
    edges = torch.arange(1, bins, dtype=torch.float64, device=u.device) / bins
    inner = torch.searchsorted(us, edges, right=False)
    cuts = torch.cat([inner.new_zeros(1), inner, inner.new_full((1,), us.numel())])
    return (cuts[1:] - cuts[:-1]).to(torch.int64)


def mmd_linear_h(x: Tensor, y: Tensor, bandwidth: float | None = None) -> Tensor:
    """Linear-time MMD^2 h-statistics (Gaussian kernel, bandwidth sqrt(2 d) unless given), [m].

    x, y: [n] or [n, d]; m = min(n_x, n_y) // 2 pairs; mean(h) estimates MMD^2 (0 under the null)."""
    if x.dim() == 1:
        x, y = x[:, None], y[:, None]
    x, y = x.to(torch.float64), y.to(torch.float64)
    m = min(x.shape[0], y.shape[0]) // 2
    d = x.shape[1]
    bw = float(bandwidth) if bandwidth is not None else math.sqrt(2.0 * d)
    two_bw2 = 2.0 * bw * bw
    x1, x2 = x[0:2 * m:2], x[1:2 * m:2]
    y1, y2 = y[0:2 * m:2], y[1:2 * m:2]

    def k(a: Tensor, b: Tensor) -> Tensor:
        return torch.exp(-((a - b) ** 2).sum(dim=1) / two_bw2)

    return k(x1, x2) + k(y1, y2) - k(x1, y2) - k(x2, y1)


def mmd_moments(h: Tensor) -> Tensor:
    """[mean(h), sd(h) with ddof = 1] (float64 [2]; sd = inf for fewer than 2 values)."""
    h = _flat64(h)
    if h.numel() < 2:
        mean = h.mean() if h.numel() else torch.zeros((), dtype=torch.float64, device=h.device)
        return torch.stack([mean, torch.full_like(mean, math.inf)])
    return torch.stack([h.mean(), h.std(correction=1)])


def all_finite(*xs: Tensor) -> Tensor:
    """True (0-d bool) iff every entry of every tensor is finite."""
    flags = [torch.isfinite(x).all() for x in xs]
    return torch.stack(flags).all() if flags else torch.ones((), dtype=torch.bool)


def fetch(*tensors: Tensor) -> list[float]:
    """Copy the given 0-d / 1-d device tensors to the host in ONE transfer; returns their
    entries in order as Python floats (counts are exact: < 2^53)."""
    if not tensors:
        return []
    device = tensors[0].device
    flat = torch.cat([t.reshape(-1).to(device=device, dtype=torch.float64) for t in tensors])
    return [float(v) for v in flat.tolist()]


# ------------------------------------------------------- drop-in tests (one sync each)
def ks_dkw_test(x: Tensor, cdf: TorchCdf, alpha: float, *, cell: str = "", test: str = "ks",
                power: float = POWER) -> TestResult:
    """Device version of :func:`speccheck.validation.stats.ks_dkw_test` (same result)."""
    n = x.numel()
    finite, D = fetch(all_finite(x), ks_statistic(x, cdf))
    t = dkw_threshold(n, alpha)
    if not finite:
        return TestResult(cell, test, math.inf, t, 0.0, math.nan, n, passed=False,
                          note="non-finite values in the sample")
    mdd = t + dkw_threshold(n, 1.0 - power)
    return TestResult(cell, test, D, t, dkw_pvalue(n, D), mdd, n, passed=D <= t)


def tail_test(x: Tensor, cdf: TorchCdf, alpha: float, q: float = 0.01, *, cell: str = "",
              test: str = "tails", power: float = POWER) -> TestResult:
    """Device version of :func:`speccheck.validation.stats.tail_test` (same result)."""
    n = x.numel()
    finite, k_lo, k_hi = fetch(all_finite(x), tail_counts(x, cdf, q))
    if not finite:
        return TestResult(cell, test, math.inf, math.nan, 0.0, math.nan, n, passed=False,
                          note="non-finite values in the sample")
    return tail_counts_test(int(k_lo), int(k_hi), n, alpha, q, cell=cell, test=test, power=power)


def _mmd_result(m: int, finite: float, mean: float, sd: float, alpha: float, cell: str, test: str, power: float,
                extra: dict) -> TestResult:
    if not finite:
        return TestResult(cell, test, math.inf, math.nan, 0.0, math.nan, m, passed=False,
                          note="non-finite values in the sample")
    se = sd / math.sqrt(m) if m > 1 else math.inf
    z_alpha = float(special.ndtri(1.0 - alpha))
    stat = mean / se if se > 0 else (math.inf if mean > 0 else 0.0)
    mdd = (z_alpha + float(special.ndtri(power))) * se
    return TestResult(cell, test, stat, z_alpha, float(special.ndtr(-stat)), mdd, m, passed=stat <= z_alpha,
                      extra={"mmd2": mean, **extra})


def mmd_test_from_h(h: Tensor, alpha: float, *, cell: str = "", test: str = "mmd", power: float = POWER,
                    extra: dict | None = None) -> TestResult:
    """Studentised one-sided test of mean(h) = 0 against > 0 (normal reference, m >= 1e3 pairs):
    statistic mean(h) / (sd(h) / sqrt m) against z_{1-alpha}; MDD in MMD^2 units."""
    finite, mean, sd = fetch(all_finite(h), mmd_moments(h))
    return _mmd_result(h.numel(), finite, mean, sd, alpha, cell, test, power, extra or {})


def mmd_linear_test(x: Tensor, y: Tensor, alpha: float, bandwidth: float | None = None, *,
                    cell: str = "", test: str = "mmd", power: float = POWER) -> TestResult:
    """Device version of :func:`speccheck.validation.stats.mmd_linear_test` (same result)."""
    d = 1 if x.dim() == 1 else x.shape[1]
    bw = float(bandwidth) if bandwidth is not None else math.sqrt(2.0 * d)
    h = mmd_linear_h(x, y, bw)
    finite, mean, sd = fetch(all_finite(x, y, h), mmd_moments(h))
    return _mmd_result(h.numel(), finite, mean, sd, alpha, cell, test, power, {"bandwidth": bw})
