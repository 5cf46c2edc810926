"""The quadrature of the policy LPs (MCRS and MCRS-2): break points at the cell edges and the
target's quantiles, Gauss-Legendre nodes in u between them (in y = 1 - u above 1/2), and log f."""

from __future__ import annotations

import numpy as np
from scipy import special

__all__ = ["breakpoints", "gauss_legendre", "log_f", "quadrature"]


def gauss_legendre(n: int) -> tuple[np.ndarray, np.ndarray]:
    """n-point Gauss-Legendre nodes and weights on [0, 1]."""
    t, w = np.polynomial.legendre.leggauss(n)
    return 0.5 * (t + 1.0), 0.5 * w




def breakpoints(delta: float, a: np.ndarray, abar: np.ndarray, n_target: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted (u, y) break points: the cell edges, target quantiles and u = 1/2."""
    z = special.ndtri((np.arange(n_target) + 0.5) / n_target)
    z = np.concatenate([z, np.linspace(-9, 9, 19)])
    s_t = delta + z
    # the max's quantiles are already the cell edges; add the target's
    u = np.concatenate([a, special.ndtr(s_t), [0.5]])
    y = np.concatenate([abar, special.ndtr(-s_t), [0.5]])
    key = np.where(u < 0.5, u, 1.0 - y)
    order = np.lexsort((-y, key))
    u, y, key = u[order], y[order], key[order]
    keep = np.ones(u.shape, bool)
    keep[1:] = (np.diff(u) > 0) | (np.diff(-y) > 0)
    return u[keep], y[keep]


def quadrature(bu: np.ndarray, by: np.ndarray, n_gl: int = 6) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes (u, y) and weights du on each interval between break points."""
    ulo, uhi, ylo, yhi = bu[:-1], bu[1:], by[:-1], by[1:]
    lower = uhi <= 0.5
    gt, gw = gauss_legendre(n_gl)
    t = gt[None, :]
    u_l = ulo[:, None] + (uhi - ulo)[:, None] * t
    y_u = ylo[:, None] + (yhi - ylo)[:, None] * t  # y decreasing along the interval
    u = np.where(lower[:, None], u_l, 1.0 - y_u)
    y = np.where(lower[:, None], 1.0 - u_l, y_u)
    width = np.where(lower, uhi - ulo, ylo - yhi)
    w = width[:, None] * gw[None, :]
    keep = width > 0
    return u[keep].ravel(), y[keep].ravel(), w[keep].ravel()


def log_f(u: np.ndarray, y: np.ndarray, delta: float) -> np.ndarray:
    s = np.where(u < 0.5, special.ndtri(u), -special.ndtri(y))
    return delta * s - 0.5 * delta * delta


