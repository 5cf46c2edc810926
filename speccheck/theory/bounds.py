"""Upper bounds on the acceptance of any exact verifier fed K drafts (SPEC section 1)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from scipy import special

from speccheck.theory.acceptance import acceptance_min_coupling
from speccheck.theory.normal import LOG_SQRT_2PI
from speccheck.theory.validate import check_delta, check_K


def _iid_objective(s, d, K):
    """1 - Phi(s)^K + Phi(s - delta): the bound is its minimum over s (no cancellation)."""
    return -np.expm1(K * special.log_ndtr(s)) + special.ndtr(s - d)


def _stationarity(s, d, K):
    """F(s) = ln K + (K-1) ln Phi(s) - delta s + delta^2/2 and F'(s); zeros of F are the
    stationary points of Phi(s)^K - Phi(s - delta). F is concave."""
    log_ndtr = special.log_ndtr(s)
    with np.errstate(over="ignore", invalid="ignore"):  # delta ~ 1e300: F = -inf or nan, never used
        F = np.log(K) + (K - 1) * log_ndtr - d * s + 0.5 * d * d
    mills = np.exp(-0.5 * s * s - LOG_SQRT_2PI - log_ndtr)  # phi(s) / Phi(s)
    return F, (K - 1) * mills - d


def list_bound_iid(delta: ArrayLike, K: int, *,
                   return_argmax: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """The i.i.d.-list bound 1 - max_s [Phi(s)^K - Phi(s - delta)].

    The maximiser is the larger root of the stationarity condition F(s) = 0. Since F is
    concave and F(s) < 0 for s > s_up = ln(K)/delta + delta/2, Newton started at s_up
    descends monotonically onto that root. K = 1 gives 2 Phibar(delta/2); delta = 0 gives 1.
    """
    d = check_delta(delta)
    K = check_K(K)
    pos = d > 0
    dd = np.where(pos, d, 1.0)
    # beyond s = 1e10 the objective is 1 to double precision (tiny delta)
    with np.errstate(over="ignore"):
        s = np.minimum(np.log(K) / dd + 0.5 * dd, 1e10)
    for _ in range(200):
        F, dF = _stationarity(s, dd, K)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            step = np.where((F < 0) & (dF < 0), F / dF, 0.0)
        s = s - step
        if np.all(np.abs(step) <= 1e-15 * np.maximum(1.0, np.abs(s))):
            break
    bound = np.minimum(_iid_objective(s, dd, K), 1.0)
    bound = np.where(pos, bound, 1.0)
    if return_argmax:
        return bound, np.where(pos, s, np.inf)
    return bound


def list_bound_dependent(delta: ArrayLike, K: int) -> np.ndarray:
    """Bound with arbitrarily dependent drafts: integral min(q, K phi) (D-GRS closed form at lambda = K)."""
    d = check_delta(delta)
    K = check_K(K)
    return acceptance_min_coupling(d, float(K))
