"""Closed-form acceptance of RMC and D-GRS (SPEC section 1), vectorised over delta.

Conventions: drafts S_k ~ N(0, 1), target N(delta, 1), rho(s) = exp(delta s - delta^2 / 2).
D-GRS levels: lambda_0 = 0, G_1 = 1, lambda_k = lambda_{k-1} + G_k,
G_{k+1} = Q(H_k) - lambda_k P(H_k), H_k = {s >= tau_k}, tau_k = ln(lambda_k) / delta + delta / 2.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike
from scipy import special

from speccheck.theory.normal import Phibar, normal_mass
from speccheck.theory.validate import check_delta, check_K


def acceptance_rmc(delta: ArrayLike) -> np.ndarray:
    """P(accept) of the reflection maximal coupling, 2 Phibar(delta / 2). Shape of ``delta``."""
    d = check_delta(delta)
    return 2.0 * special.ndtr(-0.5 * d)


class DGRSLevels(NamedTuple):
    """D-GRS levels for a batch of deltas (arrays of shape ``delta.shape + (K + 1,)``).

    lam[..., k] = lambda_k (k = 0..K); G[..., k] = G_{k+1} (k = 0..K, so G[..., 0] = G_1 = 1);
    mu[..., k] = lambda_k - 1 computed without rounding (k >= 1); tau[..., k] = tau_k
    (tau[..., 0] = -inf, +inf where delta = 0).
    """

    lam: np.ndarray
    G: np.ndarray
    mu: np.ndarray
    tau: np.ndarray


def _tau(log_lam, d):
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        t = log_lam / d + 0.5 * d
    return np.where(d > 0, t, np.inf)


_GL_X, _GL_W = np.polynomial.legendre.leggauss(4)  # error ~ (width |t|)^8 / 8!: below rounding
NARROW_BAND = 1e-3  # below this width, band_mass integrates phi over the band by Gauss-Legendre


def band_mass(t: ArrayLike, width: ArrayLike) -> np.ndarray:
    """P(t - width < Z < t) for Z ~ N(0, 1), relative precision for every width >= 0.

    normal_mass(t - width, t) rounds t - width: at width 1e-12 and t ~ 0.4 the band is wrong
    by ~1e-4 relative, and it is empty below width ~1e-17 (D-GRS's G_{k+1} ~ delta c_k then
    came out 0 below delta ~1e-17). Narrow bands (width < NARROW_BAND) are therefore integrated
    by 4-point Gauss-Legendre with the width entering exactly: (width / 2) sum_i w_i
    phi(t - width / 2 + x_i width / 2) (the error is far below rounding for a band of
    width <= 1e-3 at the t's of D-GRS, where phi varies by a factor ~1 + t width); wider ones
    by normal_mass. Broadcasts t and width."""
    t, width = np.broadcast_arrays(np.asarray(t, np.float64), np.asarray(width, np.float64))
    narrow = np.isfinite(t) & (width < NARROW_BAND)
    wide = normal_mass(np.where(narrow, 0.0, t - width), np.where(narrow, 0.0, t))
    half = np.where(narrow, 0.5 * width, 0.0)
    centre = np.where(narrow, t, 0.0) - half
    nodes = centre[..., None] + half[..., None] * _GL_X
    gl = half * np.sum(_GL_W * np.exp(-0.5 * nodes * nodes), axis=-1) / np.sqrt(2.0 * np.pi)
    return np.where(narrow, gl, wide)


def dgrs_levels(delta: ArrayLike, K: int) -> DGRSLevels:
    """The D-GRS levels lambda_0..lambda_K and G_1..G_{K+1} (they depend on (delta, K) only).

    lambda_k - 1 is accumulated separately (``mu``) so that tiny delta keeps ln(lambda_k)
    (e.g. delta = 1e-12, where lambda_2 - 1 ~ 4e-13); G_{k+1} is computed as
    P(tau - delta < Z < tau) - (lambda_k - 1) Phibar(tau) (the band by :func:`band_mass`, with
    relative precision at any delta > 0: G_{k+1} ~ delta c_k as delta -> 0, down to delta ~1e-300;
    subnormal deltas lose relative precision with the float format itself), exact for k = 1.
    """
    d = check_delta(delta)
    K = check_K(K)
    shape = d.shape + (K + 1,)
    lam = np.zeros(shape)
    G = np.zeros(shape)
    mu = np.full(shape, -1.0)
    tau = np.full(shape, -np.inf)
    G[..., 0] = 1.0
    mu_k = np.zeros(d.shape)  # lambda_1 - 1 = 0
    for k in range(1, K + 1):
        if k > 1:
            mu_k = mu_k + G[..., k - 1]
        lam[..., k] = 1.0 + mu_k
        mu[..., k] = mu_k
        t = _tau(np.log1p(mu_k), d)
        tau[..., k] = t
        with np.errstate(invalid="ignore"):
            g = band_mass(np.where(d > 0, t, 0.0), d) - mu_k * Phibar(t)
        G[..., k] = np.where(d > 0, np.maximum(g, 0.0), 0.0)
    return DGRSLevels(lam, G, mu, tau)


def dgrs_acceptance_from_levels(levels: DGRSLevels, delta: ArrayLike) -> np.ndarray:
    """P(accept some child) = Phi(tau_K - delta) + lambda_K Phibar(tau_K), shape ``delta.shape``."""
    d = np.asarray(delta, np.float64)
    t = levels.tau[..., -1]
    lamK = levels.lam[..., -1]
    with np.errstate(invalid="ignore"):
        acc = special.ndtr(t - d) + lamK * Phibar(t)
    return np.where(d > 0, np.clip(acc, 0.0, 1.0), 1.0)


def acceptance_dgrs(delta: ArrayLike, K: int) -> np.ndarray:
    """P(D-GRS accepts one of K i.i.d. children). K = 1 gives RMC's 2 Phibar(delta / 2)."""
    d = check_delta(delta)
    return dgrs_acceptance_from_levels(dgrs_levels(d, K), d)


def acceptance_min_coupling(delta: ArrayLike, lam: ArrayLike) -> np.ndarray:
    """integral min(q, lam * p) = Phi(tau - delta) + lam Phibar(tau), tau = ln(lam)/delta + delta/2."""
    d = check_delta(delta)
    lam = np.asarray(lam, np.float64)
    t = _tau(np.log(lam), d)
    with np.errstate(invalid="ignore"):
        acc = special.ndtr(t - d) + lam * Phibar(t)
    return np.where(d > 0, np.clip(acc, 0.0, 1.0), np.minimum(lam, 1.0))
