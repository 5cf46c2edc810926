"""Exact acceptance of an MCRS policy: int min(q, p_pi) ds with the crossings of f and g located on
every cell and refined, q-masses in closed form and g-masses by Gauss-Legendre (exact: g is a
polynomial on each cell). Never a quadrature objective."""

from __future__ import annotations

import functools

import numpy as np
from scipy import special

from speccheck.theory.exact import DELTA_UNDERFLOW
from speccheck.theory.mcrs.policy import MCRSPolicy, mcrs_density
from speccheck.theory.mcrs.quadrature import gauss_legendre
from speccheck.theory.normal import normal_mass
from speccheck.theory.roots import brentq_many
from speccheck.theory.validate import check_delta

__all__ = ["S_HI_PAD", "S_LO", "acceptance_of_policy"]

S_LO, S_HI_PAD = -40.0, 40.0  # the s-range evaluated: [S_LO, delta + S_HI_PAD] (outside, both masses < 1e-300)
_N_SCAN = 96

_GL_T, _GL_W = gauss_legendre(6)


def _g_mass(u0, y0, u1, y1, policy: MCRSPolicy) -> float:
    """int_{u0}^{u1} g du for [u0, u1] inside one cell (g polynomial there: GL is exact)."""
    if u1 <= 0.5:
        uu = u0 + (u1 - u0) * _GL_T
        yy = 1.0 - uu
        width = u1 - u0
    else:
        if u0 < 0.5:
            return _g_mass(u0, y0, 0.5, 0.5, policy) + _g_mass(0.5, 0.5, u1, y1, policy)
        yy = y0 + (y1 - y0) * _GL_T
        uu = 1.0 - yy
        width = y0 - y1
    return float(width * (_GL_W @ mcrs_density(uu, yy, policy)))


def _edge_s(policy: MCRSPolicy, e: int) -> float:
    """s = Phi^-1(a_e), accurate at both ends (-inf for e = 0, +inf for e = G)."""
    if policy.a[e] < 0.5:
        return float(special.ndtri(policy.a[e]))
    return float(-special.ndtri(policy.abar[e]))


def _cell_s_range(policy: MCRSPolicy, j: int, delta: float) -> tuple[float, float]:
    return max(_edge_s(policy, j), S_LO), min(_edge_s(policy, j + 1), delta + S_HI_PAD)


def _h(s, delta, policy):
    """log q - log p in s (= log f(u) - log g(u)); +inf where g = 0."""
    s = np.asarray(s, np.float64)
    u, y = special.ndtr(s), special.ndtr(-s)
    with np.errstate(divide="ignore"):
        return delta * s - 0.5 * delta * delta - np.log(mcrs_density(u, y, policy))


def _pieces(policy: MCRSPolicy, delta: float):
    """Yield (s0, s1, q_above) pieces partitioning [S_LO, delta + pad] with no crossing inside:
    every cell scanned (uniform in s and in u), the crossings of all cells refined together
    (:func:`speccheck.theory.roots.brentq_many`: brentq's roots, one vectorised step for all)."""
    scans, a, b = [], [], []
    for j in range(policy.G):
        lo, hi = _cell_s_range(policy, j, delta)
        if not hi > lo:
            continue
        # scan uniform in s and uniform in u on the cell
        ss = np.linspace(lo, hi, _N_SCAN)
        ul, uh = special.ndtr(lo), special.ndtr(hi)
        su = special.ndtri(np.linspace(ul, uh, _N_SCAN)[1:-1])
        ss = np.unique(np.concatenate([ss, su[np.isfinite(su)]]))
        ss = ss[(ss >= lo) & (ss <= hi)]
        hv = _h(ss, delta, policy)
        pos = hv > 0
        cuts = [lo]
        for i in np.nonzero(pos[1:] != pos[:-1])[0]:
            s0, s1 = ss[i], ss[i + 1]
            if np.isfinite(hv[i]) and np.isfinite(hv[i + 1]):
                cuts.append(len(a))  # an index into the refined roots
                a.append(s0)
                b.append(s1)
            else:
                cuts.append(float(0.5 * (s0 + s1) if not np.isfinite(hv[i + 1]) else s1))
        scans.append(cuts + [hi])
    roots = brentq_many(lambda t: _h(t, delta, policy), np.array(a), np.array(b), xtol=1e-14)
    for cuts in scans:
        cuts = [c if isinstance(c, float) else float(roots[c]) for c in cuts]
        for s0, s1 in zip(cuts[:-1], cuts[1:]):
            if s1 > s0:
                yield s0, s1, bool(_h(0.5 * (s0 + s1), delta, policy) > 0)


def acceptance_of_policy(delta: float, policy: MCRSPolicy) -> float:
    """int min(q, p_pi) ds for a given policy at the true delta, evaluated exactly (cached per
    (delta, policy object)); see :func:`_acceptance_of_policy`."""
    return _acceptance_cached(float(check_delta(delta)), policy)


@functools.lru_cache(maxsize=16384)
def _acceptance_cached(delta: float, policy: MCRSPolicy) -> float:
    return _acceptance_of_policy(delta, policy)


def _acceptance_of_policy(delta: float, policy: MCRSPolicy) -> float:
    """int min(q, p_pi) ds for a given policy at the true delta, evaluated exactly: crossings of
    f and g located on every cell and refined (brentq), q-masses in closed form, g-masses by
    Gauss-Legendre (exact: g is a polynomial on each cell)."""
    d = float(check_delta(delta))
    if d == 0.0:
        # q = phi: int min(phi, phi g(Phi)) = int_0^1 min(1, g) du
        return float(np.sum([_g_mass_min1(policy, j) for j in range(policy.G)]))
    if d > DELTA_UNDERFLOW:  # every acceptance is < 1e-340 (and delta^2 may overflow): 0 in double
        return 0.0
    total = 0.0
    for s0, s1, q_above in _pieces(policy, d):
        if q_above:  # q > p: take p's mass
            u0, y0, u1, y1 = special.ndtr(s0), special.ndtr(-s0), special.ndtr(s1), special.ndtr(-s1)
            total += _g_mass(u0, y0, u1, y1, policy)
        else:
            total += float(normal_mass(s0 - d, s1 - d))
    return float(min(max(total, 0.0), 1.0))


def _g_mass_min1(policy: MCRSPolicy, j: int) -> float:
    u = policy.a[j] + (policy.a[j + 1] - policy.a[j]) * np.linspace(0, 1, 257)
    mid = 0.5 * (u[1:] + u[:-1])
    g = mcrs_density(mid, 1.0 - mid, policy)
    return float(np.sum(np.minimum(g, 1.0) * np.diff(u)))

