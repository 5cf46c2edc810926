"""Speed-up predictions for draft trees (SPEC section 2).

A round verifies depth 1, 2, ... of the tree and stops at the first rejection, whose
residual sample is still committed; with per-level acceptances a_1..a_L it commits
min(first rejected level, L) steps, in expectation sum_{j=0}^{L-1} prod_{i<=j} a_i
(empty product = 1). Each round costs one target call (NFE).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from speccheck.theory.validate import check_K


def _check_prob(a, name: str) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    if np.any(~np.isfinite(a)) or np.any((a < 0) | (a > 1)):
        raise ValueError(f"{name} must be probabilities in [0, 1], got {name}={a.tolist()}")
    return a


def expected_steps_per_round(a: ArrayLike) -> np.ndarray:
    """E[committed steps] for per-level acceptances a[..., :L] (last axis = depth 1..L).

    Constant a gives (1 - a^L) / (1 - a).
    """
    a = _check_prob(a, "a")
    if a.ndim == 0:
        raise ValueError("a must have a depth axis (shape (..., L))")
    surv = np.cumprod(a[..., :-1], axis=-1)
    return 1.0 + surv.sum(axis=-1)


def chain_ceiling(a: ArrayLike) -> np.ndarray:
    """1 / (1 - a): steps per round of an infinitely long chain with acceptance a."""
    a = _check_prob(a, "a")
    with np.errstate(divide="ignore"):
        return np.where(a < 1, 1.0 / (1.0 - a), np.inf)


def commit_distribution(a: ArrayLike) -> np.ndarray:
    """P(commit c steps), c = 1..L, for per-level acceptances a[..., :L]."""
    a = _check_prob(a, "a")
    L = a.shape[-1]
    surv = np.concatenate([np.ones(a.shape[:-1] + (1,)), np.cumprod(a, axis=-1)], axis=-1)
    p = surv[..., :L] * (1.0 - a)  # first rejection at level c
    p[..., L - 1] = surv[..., L - 1]  # level L: accepted or rejected, L steps are committed
    return p


def expected_nfe(alpha: ArrayLike, N: int, L: int, warmup: int = 1) -> float:
    """E[target calls] to run N steps with rounds of depth L_n = min(L, N - n).

    alpha[n, j]: acceptance at depth j + 1 of a round whose root is step n (shape (N, L));
    a float broadcasts. Finite-horizon DP: V(N) = 0,
    V(n) = 1 + sum_c P_n(commit c) V(n + c); returns warmup + V(0).
    """
    N = check_K(N, "N")
    L = check_K(L, "L")
    alpha = _check_prob(np.broadcast_to(np.asarray(alpha, np.float64), (N, L)), "alpha")
    V = np.zeros(N + 1)
    for n in range(N - 1, -1, -1):
        Ln = min(L, N - n)
        p = commit_distribution(alpha[n, :Ln])
        V[n] = 1.0 + p @ V[n + 1 : n + 1 + Ln]
    return float(warmup + V[0])


def predicted_speedup(alpha: ArrayLike, N: int, L: int, warmup: int = 1) -> float:
    """N / E[NFE]: the NFE speed-up over the standard sampler's N calls."""
    return N / expected_nfe(alpha, N, L, warmup)
