"""Special functions the torch kernels share: the tail-accurate normal CDF and the rank binomials.

* :func:`ndtr` Phi(x) = erfc(-x / sqrt 2) / 2: full relative precision in the lower tail, where
  ``torch.special.ndtr`` (1 - erfc(x / sqrt 2) / 2 there) rounds to 0 below x ~ -38 and loses
  digits well before; Phi(-x) gives the upper tail 1 - Phi(x) just as accurately. Every CUDA
  float64 kernel it needs (erfc) exists and is deterministic.
* :func:`log_ndtr` log Phi(x), finite down to x ~ -1e154 (torch's asymptotic series).
* :func:`log_rank_binomials` log C_r, C_r = K! / ((r-1)! (K-r)!), r = 1..K: the density of the
  r-th order statistic of K uniforms is C_r u^(r-1) (1-u)^(K-r).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

Tensor = torch.Tensor
SQRT1_2 = math.sqrt(0.5)
LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def ndtr(x: Tensor) -> Tensor:
    """Phi(x) with full relative precision in the lower tail (use ndtr(-x) for the upper one)."""
    return 0.5 * torch.special.erfc(x * -SQRT1_2)


def log_ndtr(x: Tensor) -> Tensor:
    """log Phi(x), accurate in both tails."""
    return torch.special.log_ndtr(x)


@functools.lru_cache(maxsize=64)
def _log_rank_binomials(K: int) -> tuple[float, ...]:
    return tuple(math.lgamma(K + 1) - math.lgamma(r) - math.lgamma(K - r + 1) for r in range(1, K + 1))


def log_rank_binomials(K: int) -> np.ndarray:
    """log C_r = log K! - log (r-1)! - log (K-r)! for r = 1..K (shape (K,), float64)."""
    if K < 1:
        raise ValueError(f"K must be >= 1, got K={K!r}")
    return np.array(_log_rank_binomials(int(K)), dtype=np.float64)
