"""MCRS policies: piecewise-constant rank probabilities pi_r(m) on the cells, their selected
density g as per-cell polynomials with non-negative coefficients (the module docstring of
:mod:`speccheck.theory.mcrs` derives them) and the constant (RASS) and uniform policies."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike
from scipy import special

from speccheck.theory.mcrs.cells import DEFAULT_G, cell_index, mcrs_edges, rank_coeffs
from speccheck.theory.validate import check_K

__all__ = ["MCRSPolicy", "constant_policy", "mcrs_density", "mcrs_log_density_s", "uniform_policy"]


@dataclass(frozen=True, eq=False)
class MCRSPolicy:
    """A piecewise-constant MCRS policy.

    K: drafts; a, abar: cell edges in m and 1 - m, shape (G + 1,); pi: shape (G, K),
    pi[j, r - 1] = P(select rank r | m in cell j), rows on the simplex. delta: the delta it
    was designed for (nan if none); lp_acceptance: the LP's quadrature objective (nan if none).
    coef: shape (G, K, K), coef[j, r - 1, k] = coefficient of z^k in Q_{r,j} (module docstring).
    """

    K: int
    a: np.ndarray
    abar: np.ndarray
    pi: np.ndarray
    delta: float = float("nan")
    lp_acceptance: float = float("nan")
    coef: np.ndarray = field(init=False, repr=False)

    def __post_init__(self):
        G = self.pi.shape[0]
        if self.pi.shape != (G, self.K) or self.a.shape != (G + 1,) or self.abar.shape != (G + 1,):
            raise ValueError(
                f"policy shapes inconsistent: pi {self.pi.shape}, a {self.a.shape}, K={self.K}"
            )
        if np.any(~np.isfinite(self.pi)) or np.any(self.pi < 0) or np.any(
            np.abs(self.pi.sum(axis=1) - 1.0) > 1e-9
        ):
            raise ValueError("policy pi must have rows on the probability simplex")
        object.__setattr__(self, "coef", _policy_coefficients(self.K, self.a, self.abar, self.pi))

    @property
    def G(self) -> int:
        return self.pi.shape[0]


def _policy_coefficients(K: int, a: np.ndarray, abar: np.ndarray, pi: np.ndarray) -> np.ndarray:
    """coef[j, r-1, k] of Q_{r,j}(z) = sum_k coef z^k (see module docstring), shape (G, K, K)."""
    G = pi.shape[0]
    coef = np.zeros((G, K, K))
    # w[j, c, e] = [(a_{c+1} - a_{j+1})_+^e - (a_c - a_{j+1})_+^e] / e  for e = 1..K-1
    # (differences of edges taken in the accurate coordinate: 1 - a near the top).
    top = a[1:]  # a_{j+1}
    hi = np.maximum(top[None, :] - top[:, None], 0.0)  # a_{c+1} - a_{j+1}
    lo = np.maximum(a[None, :-1] - top[:, None], 0.0)  # a_c - a_{j+1}
    # accurate differences near 1: a_{c+1} - a_{j+1} = abar_{j+1} - abar_{c+1}
    hi = np.where(top[:, None] > 0.5, np.maximum(abar[1:][:, None] - abar[None, 1:], 0.0), hi)
    lo = np.where(top[:, None] > 0.5, np.maximum(abar[1:][:, None] - abar[None, :-1], 0.0), lo)
    for r in range(1, K):
        n = K - r
        pr = pi[:, r - 1]
        coef[:, r - 1, n] = pr
        for k in range(n):
            p = n - 1 - k  # moment order
            mom = ((hi ** (p + 1) - lo ** (p + 1)) / (p + 1)) @ pr  # M_{r,j,p}, shape (G,)
            coef[:, r - 1, k] = n * math.comb(n - 1, k) * mom
    coef[:, K - 1, 0] = pi[:, K - 1]
    return coef



def mcrs_density(u: ArrayLike, y: ArrayLike, policy: MCRSPolicy) -> np.ndarray:
    """Selected-draft density g_pi at x = u (y = 1 - u given accurately), broadcast shape."""
    u, y = np.broadcast_arrays(np.asarray(u, np.float64), np.asarray(y, np.float64))
    K = policy.K
    j = cell_index(u, y, policy.a, policy.abar)
    z = np.maximum(y - policy.abar[j + 1], 0.0)  # a_{j+1} - x
    powz = z[..., None] ** np.arange(K)  # (..., K)
    Q = np.einsum("...rk,...k->...r", policy.coef[j], powz)  # (..., K)
    C = rank_coeffs(K)
    with np.errstate(divide="ignore"):
        xr = np.where(np.arange(K) == 0, 1.0, u[..., None] ** np.arange(K))
    return np.maximum(np.einsum("...r,r->...", Q * xr, C), 0.0)


def mcrs_log_density_s(s: ArrayLike, delta: float, policy: MCRSPolicy) -> np.ndarray:
    """log of the selected density in s: log phi(s) + log g(Phi(s)); also returns log rho(s).

    Returns (log_p, log_q) where log_q = log phi(s - delta)."""
    s = np.asarray(s, np.float64)
    u, y = special.ndtr(s), special.ndtr(-s)
    with np.errstate(divide="ignore"):
        lg = np.log(mcrs_density(u, y, policy))
    lphi = -0.5 * s * s - 0.5 * np.log(2 * np.pi)
    return lphi + lg, lphi + delta * s - 0.5 * delta * delta


def uniform_policy(K: int, G: int = DEFAULT_G) -> MCRSPolicy:
    """pi_r = 1/K: the selected draft is uniform (g = 1), RASS with uniform omega."""
    return constant_policy(np.full(check_K(K), 1.0 / K), G)


def constant_policy(omega: ArrayLike, G: int = DEFAULT_G) -> MCRSPolicy:
    """pi_r(m) = omega_r for every m: RASS with weights omega (p_omega)."""
    w = np.asarray(omega, np.float64)
    K = w.shape[0]
    a, abar = mcrs_edges(K, G)
    return MCRSPolicy(K, a, abar, np.tile(w / w.sum(), (a.shape[0] - 1, 1)))


