"""Exact acceptance of a rank-selected draft at a FIXED omega, without quadrature (issue 13.1).

Law. The selected draft S_(r), r ~ omega, has density p_omega(z) = phi(z) P(Phi(z)) with
P(u) = sum_r omega_r b_r(u), b_r the Beta(r, K - r + 1) density (a polynomial of degree K - 1
in u; sum_r b_r = K, so uniform omega gives P = 1). The target is q(z) = phi(z) e^{delta z - delta^2/2}.
Write omega = 1/K + eps (eps sums to 0) and L(z) = log P(Phi(z)); then

    p_omega > q  <=>  F(z) = L(z) - delta z + delta^2 / 2 > 0,

so the crossings of q and p_omega are the intersections of the fixed curve L (independent of
delta) with the line delta z - delta^2/2.

Every crossing, none missed. With pi_r(z) the posterior of rank r given z, alpha = phi/Phi,
beta = phi/Phibar and g_r = (r-1) alpha - (K-r) beta,

    L' = E_pi[g],   L'' = -z L' + Var_pi[g] - E_pi[(r-1) alpha^2 + (K-r) beta^2]   (exact).

L'' is evaluated on a grid (8K + 32 Chebyshev nodes in u, where a degree-(K-1) polynomial can
oscillate, plus a z-grid of step 1/16 on [-8, delta + 8] and 1/2 out to [-40, delta + 40]) and
its sign changes are refined (Newton with the exact L^(3), to ~1e-5; :func:`_inflections` says
why that is enough): this splits the line into pieces on which L is convex or concave. That is
the one assumption: no two inflection points of L closer than a grid
step (the tests compare every crossing with a 2e-4 scan for random weights, K <= 16). On such a
piece F' = L' - delta is monotone, so F has one extremum (solved from L' = delta) and at most one
root on each side of it, where F is monotone: every root is bracketed by a strict sign change,
then polished by safeguarded Newton; the side (q above or below) alternates at each crossing.
Outside [-40, delta + 40] both laws have mass < K Phibar(40) < 1e-340: nothing there can change
A or 1 - A in double precision. delta > 80: every acceptance is < 1e-340, A = 0 is returned.

Masses, closed form. On the pieces between consecutive crossings A adds the smaller law's mass:
normal masses for q, order-statistic CDFs sum_r omega_r I_u(r, K-r+1) for p_omega (binomial-tail
sums from the tail that keeps precision), so A keeps its relative precision down to 1e-300. The rejection
1 - A = sum over {q > p} of int (q - p) is computed from G(x) = int_{-inf}^x (q - p)
= -P(x - delta < Z < x) - sum_r eps_r I_{Phi(x)}(r, K-r+1) (its difference from phi and
uniform weights: no cancellation; the normal part uses the exact width delta), so 1 - A keeps
~1e-14 relative precision down to delta = 1e-12 (and below, to 1e-300) for weights given as
deviations eps (the optimiser's variable); weights given as floats near 1/K carry their own
rounding (~1e-17 absolute in eps).

Speed (issue 13). The omega-free parts of the curve on the scan grid are computed once per
(K, grid) (:func:`_grid_basis`), and L there off the deviation form is the direct sum of
positive terms, not a per-row log-sum-exp; rank sums use moment columns, not (n, K) temporaries; one delta
(the optimiser's case) takes :func:`crossings_one`, which needs no per-piece bookkeeping, and
its masses take the branch-selecting normal masses (``normal_mass_small``: same formula per
entry, fewer numpy calls); the nodes of the scan grid above BASE_SPLIT are built without the
rest of the grid; the vectorised masses are weighted before they are differenced when no
gradient is wanted.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike
from scipy import special

from speccheck.theory.normal import (
    LOG_SQRT_2PI,
    normal_mass,
    normal_mass_below,
    normal_mass_below_small,
    normal_mass_small,
)

Z_LO = -40.0  # below: both laws' mass < 1e-340
Z_PAD = 40.0  # above delta + Z_PAD: likewise
DELTA_UNDERFLOW = 80.0  # beyond: every acceptance (<= the dependent-drafts bound) is < 1e-340: A = 0
CHUNK_ELEMENTS = 400_000  # bounded memory: (chunk, pieces, K) arrays of at most this many float64 (3.2 MB)


# ----------------------------------------------------------------- the law for one omega
class RankLaw(NamedTuple):
    """p_omega for fixed weights: omega, its deviation eps = omega - 1/K (exact, sums to 0)."""

    K: int
    omega: np.ndarray
    eps: np.ndarray
    log_w: np.ndarray
    log_coef: np.ndarray  # log of K binom(K-1, r-1), r = 1..K


@functools.lru_cache(maxsize=256)
def log_coef(K: int) -> np.ndarray:
    r = np.arange(1, K + 1)
    out = np.log(K) + special.gammaln(K) - special.gammaln(r) - special.gammaln(K - r + 1)
    out.flags.writeable = False
    return out


@functools.lru_cache(maxsize=256)
def rank_exponents(K: int) -> tuple[np.ndarray, np.ndarray]:
    """(r - 1, K - r) for r = 1..K, as float rows (read-only)."""
    r = np.arange(1, K + 1, dtype=np.float64)
    low, high = r - 1.0, K - r
    low.flags.writeable = high.flags.writeable = False
    return low, high


def _zero_sum(eps: np.ndarray) -> np.ndarray:
    """Remove the rounding residue of sum(eps) from its largest entry (twice: exact to ~ulp(ulp))."""
    eps = eps.copy()
    j = int(np.abs(eps).argmax())
    for _ in range(2):
        eps[j] -= math.fsum(eps.tolist())
    return eps


def law_from_omega(omega: np.ndarray) -> RankLaw:
    """RankLaw of a (validated) weight vector; eps = omega - 1/K uses 1/K in double-double."""
    K = omega.size
    inv_hi = 1.0 / K
    inv_lo = float(Fraction(1, K) - Fraction(inv_hi))
    eps = _zero_sum((omega - inv_hi) - inv_lo)
    with np.errstate(divide="ignore"):
        log_w = np.log(omega)
    return RankLaw(K, omega, eps, log_w, log_coef(K))


def law_from_eps(eps: np.ndarray, zero: np.ndarray | None = None) -> RankLaw:
    """RankLaw from a deviation eps (the optimiser's variable); ``zero`` marks weights exactly 0."""
    K = eps.size
    eps = _zero_sum(eps)
    omega = np.maximum(1.0 / K + eps, 0.0)
    if zero is not None:
        omega[zero] = 0.0
    with np.errstate(divide="ignore"):
        log_w = np.log(omega)
    return RankLaw(K, omega, eps, log_w, log_coef(K))


class Curve(NamedTuple):
    """L, L', L'' (and L^(3) when asked) at points z."""

    L: np.ndarray
    dL: np.ndarray
    d2L: np.ndarray
    d3L: np.ndarray | None = None


@functools.lru_cache(maxsize=256)
def _moment_columns(K: int) -> np.ndarray:
    """Columns (1, l, h, l(l-1), h(h-1), l h, l^3, h^3, l^2 h, l h^2) per rank (K, 10), l = r-1,
    h = K-r: with g_r = l alpha - h beta, every rank sum in L', L'', L^(3) (module doc) is an
    alpha, beta combination of the sums sum_r c_r column_r (no (n, K) temporaries)."""
    low, high = rank_exponents(K)
    out = np.column_stack([np.ones(K), low, high, low * (low - 1.0), high * (high - 1.0), low * high,
                           low ** 3, high ** 3, low * low * high, low * high * high])
    out.flags.writeable = False
    return out


_COLUMNS_USED = {0: 1, 1: 3, 2: 6, 3: 10}  # moment columns read by L, L', L'', L^(3)
DEEP_P = 1e-280  # P below this (off the deviation form): summed in logs (its leading terms may be subnormal)


def curve(law: RankLaw, z: np.ndarray, derivatives: int = 2) -> Curve:
    """L(z) = log P(Phi(z)) and its first two derivatives (exact formulas, see the module doc).

    Where |P - 1| <= 1/2 the deviation form (log1p of sum eps_r b_r) keeps relative precision
    for omega near uniform; elsewhere the posterior (log-sum-exp) form is used. With
    g_r = (r-1) alpha - (K-r) beta: sum_r c_r g_r = alpha S_low - beta S_high and
    sum_r c_r (g_r^2 - (r-1) alpha^2 - (K-r) beta^2) = alpha^2 S_low2 + beta^2 S_high2 - 2 alpha beta S_mixed
    (S_x = sum_r c_r x_r over the columns of :func:`_moment_columns`), for c = b eps (deviation
    form; sum_r b_r g_r = sum_r b_r h_r = 0 as sum_r b_r = K) or c = the posterior (log-sum-exp form).

    derivatives = 3 also gives L^(3) = E[T] - (L'' + L'^2) L' - 2 L' L'' (E over the posterior
    of the rank given z), T = g'' + 3 g g' + g^3 = (z^2 - 1) g + 3 z a2 + 2 l alpha^3 - 2 h beta^3
    - 3 z g^2 - 3 g a2 + g^3 with a2 = l alpha^2 + h beta^2 (from alpha' = -z alpha - alpha^2,
    beta' = -z beta + beta^2, g' = -z g - a2, d E[f] / dz = E[f'] + Cov(f, g)); used to refine
    the inflection points of L by Newton's method.
    """
    z = np.asarray(z, np.float64)
    if z.ndim != 1:  # flat arrays inside, the caller's shape on the way out
        return Curve(*(a.reshape(z.shape) if a is not None and a.size == z.size else a
                       for a in curve(law, z.ravel(), derivatives)))
    return _curve_flat(law, z, derivatives)[0]


def _curve_flat(law: RankLaw, z: np.ndarray, derivatives: int) -> tuple[Curve, np.ndarray]:
    """:func:`curve` at a 1-d float array z, with log b_r(Phi(z)) (n, K)."""
    empty = np.empty(0)
    low, high = rank_exponents(law.K)
    columns = _moment_columns(law.K)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        log_u = special.log_ndtr(z)
        log_v = special.log_ndtr(-z)
        log_b = law.log_coef + np.multiply.outer(log_u, low) + np.multiply.outer(log_v, high)
        b = np.exp(log_b)
        # (n, k): sum_r b_r eps_r column_r over the columns the derivatives asked for use
        sums = b @ (law.eps[:, None] * columns[:, :_COLUMNS_USED.get(derivatives, 10)])
        dev = sums[:, 0]
        far = np.nonzero(~(np.abs(dev) <= 0.5))[0]
        P = 1.0 + dev
        L = np.log1p(dev)
        if far.size:
            t = log_b[far] + law.log_w
            top = np.max(t, axis=1, keepdims=True)
            e = np.exp(t - top)
            tot = e.sum(axis=1)
            L[far] = top[:, 0] + np.log(tot)
            sums[far] = (e / tot[:, None]) @ columns[:, :sums.shape[1]]
            P[far] = 1.0
        if derivatives == 0:
            return Curve(L, empty, empty), log_b
        log_phi = -0.5 * z * z - LOG_SQRT_2PI
        alpha = np.exp(log_phi - log_u)
        beta = np.exp(log_phi - log_v)
        dL = (alpha * sums[:, 1] - beta * sums[:, 2]) / P
        if derivatives == 1:
            return Curve(L, dL, empty), log_b
        S2 = (alpha * alpha * sums[:, 3] + beta * beta * sums[:, 4] - 2.0 * alpha * beta * sums[:, 5]) / P
        d2L = -z * dL + S2 - dL * dL
        if derivatives == 2:
            return Curve(L, dL, d2L), log_b
        a2, b2 = alpha * alpha, beta * beta
        a3, b3 = a2 * alpha, b2 * beta
        s_l, s_h = sums[:, 1], sums[:, 2]
        s_ll, s_hh, s_lh = sums[:, 3] + s_l, sums[:, 4] + s_h, sums[:, 5]
        g1 = alpha * s_l - beta * s_h
        a2s = a2 * s_l + b2 * s_h
        g2 = a2 * s_ll - 2.0 * alpha * beta * s_lh + b2 * s_hh
        ga2 = a3 * s_ll + alpha * b2 * s_lh - a2 * beta * s_lh - b3 * s_hh
        g3 = a3 * sums[:, 6] - 3.0 * a2 * beta * sums[:, 8] + 3.0 * alpha * b2 * sums[:, 9] - b3 * sums[:, 7]
        ET = ((z * z - 1.0) * g1 + 3.0 * z * a2s + 2.0 * a3 * s_l - 2.0 * b3 * s_h - 3.0 * z * g2 - 3.0 * ga2 + g3) / P
        d3L = ET - (d2L + dL * dL) * dL - 2.0 * dL * d2L
    return Curve(L, dL, d2L, d3L), log_b


class _Basis(NamedTuple):
    """omega-free parts of the curve at fixed points z: log b_r, b_r, g_r and h_r = g_r^2 -
    (r-1) alpha^2 - (K-r) beta^2 (n, K), and b g, b h."""

    z: np.ndarray
    log_b: np.ndarray
    b: np.ndarray
    g: np.ndarray
    h: np.ndarray
    bg: np.ndarray
    bh: np.ndarray


def _basis(K: int, z: np.ndarray, log_u: np.ndarray, log_v: np.ndarray, log_b: np.ndarray,
           b: np.ndarray) -> _Basis:
    low, high = rank_exponents(K)
    log_phi = -0.5 * z * z - LOG_SQRT_2PI
    alpha = np.exp(log_phi - log_u)
    beta = np.exp(log_phi - log_v)
    g = np.multiply.outer(alpha, low) - np.multiply.outer(beta, high)
    h = g * g - np.multiply.outer(alpha * alpha, low) - np.multiply.outer(beta * beta, high)
    return _Basis(z, log_b, b, g, h, b * g, b * h)


def _basis_at(K: int, z: np.ndarray) -> _Basis:
    low, high = rank_exponents(K)
    log_u = special.log_ndtr(z)
    log_v = special.log_ndtr(-z)
    log_b = log_coef(K) + np.multiply.outer(log_u, low) + np.multiply.outer(log_v, high)
    return _basis(K, z, log_u, log_v, log_b, np.exp(log_b))


BASE_SPLIT = 8.0  # scan-grid nodes below this do not depend on z_hi (>= Z_PAD): computed once per K


@functools.lru_cache(maxsize=256)
def _base_basis(K: int) -> _Basis:
    """The curve terms at the scan-grid nodes below BASE_SPLIT (the same for every z_hi >= Z_PAD)."""
    grid = scan_grid(K, Z_PAD)
    basis = _basis_at(K, grid[grid < BASE_SPLIT])
    for a in basis:
        a.flags.writeable = False
    return basis


@functools.lru_cache(maxsize=4)
def _grid_basis(K: int, z_hi: float) -> _Basis:
    """The scan grid of (K, z_hi) with its omega-free curve terms (a pure function of its
    arguments; reused by the evaluations of one solve, which share delta): the nodes below
    BASE_SPLIT from the per-K table, the others computed here."""
    if z_hi >= Z_PAD:  # the per-K nodes below BASE_SPLIT, and the few above it (no full grid)
        base = _base_basis(K)
        top = _basis_at(K, _scan_grid_tail(K, z_hi))
        basis = _Basis(*(np.concatenate([b, t]) for b, t in zip(base, top)))
    else:
        basis = _basis_at(K, scan_grid(K, z_hi))
    for a in basis:
        a.flags.writeable = False
    return basis


def _curve_terms(law: RankLaw, basis: _Basis, derivatives: int) -> Curve:
    """L, L', L'' at the basis points, from the omega-free terms (as :func:`curve`, per rank):
    the deviation form where |P - 1| <= 1/2; elsewhere P = sum_r omega_r b_r (a sum of positive
    terms: relative precision without the posterior's per-row maximum, which costs more than the
    rest of the scan together), L' = sum_r omega_r b_r g_r / P and likewise L'' (sum_r b_r g_r =
    sum_r b_r h_r = 0); in logs (the posterior) where P < DEEP_P, its leading terms may be subnormal."""
    empty = np.empty(0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        dev = basis.b @ law.eps
        near = np.abs(dev) <= 0.5
        P = np.where(near, 1.0 + dev, basis.b @ law.omega)
        L = np.where(near, np.log1p(dev), np.log(P))
        deep = np.nonzero(~near & ~(P >= DEEP_P))[0]
        post = None
        if deep.size:
            t = basis.log_b[deep] + law.log_w
            top = np.max(t, axis=1, keepdims=True)
            e = np.exp(t - top)
            tot = e.sum(axis=1)
            L[deep] = top[:, 0] + np.log(tot)
            post = e / tot[:, None]
        if derivatives == 0:
            return Curve(L, empty, empty)
        dL = np.where(near, basis.bg @ law.eps, basis.bg @ law.omega) / P
        if deep.size:
            dL[deep] = np.sum(post * basis.g[deep], axis=1)
        if derivatives == 1:
            return Curve(L, dL, empty)
        S2 = np.where(near, basis.bh @ law.eps, basis.bh @ law.omega) / P
        if deep.size:
            S2[deep] = np.sum(post * basis.h[deep], axis=1)
        d2L = -basis.z * dL + S2 - dL * dL
    return Curve(L, dL, d2L)


# ----------------------------------------------------------------- convexity pieces of L
@functools.lru_cache(maxsize=256)
def _chebyshev_nodes(K: int) -> np.ndarray:
    """z = Phi^{-1}(u) at the 8K + 31 interior Chebyshev nodes u of [0, 1] (read-only)."""
    n_cheb = 8 * K + 32
    j = np.arange(1, n_cheb)
    u = 0.5 * (1.0 - np.cos(np.pi * j / n_cheb))
    out = special.ndtri(u)
    out.flags.writeable = False
    return out


def _scan_grid_tail(K: int, z_hi: float) -> np.ndarray:
    """The nodes of scan_grid(K, z_hi) at or above BASE_SPLIT (z_hi >= Z_PAD), built from the
    same pieces without the rest of the grid."""
    z_cheb = _chebyshev_nodes(K)
    fine_hi = z_hi - Z_PAD + 8.0
    fine = np.arange(-8.0, fine_hi + 1e-9, 1.0 / 16)
    coarse = np.arange(fine_hi, z_hi + 0.5, 0.5)
    tail = np.unique(np.concatenate([z_cheb[z_cheb >= BASE_SPLIT], fine[fine >= BASE_SPLIT], coarse, [z_hi]]))
    return tail[(tail >= BASE_SPLIT) & (tail <= z_hi)]


def scan_grid(K: int, z_hi: float) -> np.ndarray:
    """Sorted grid on [Z_LO, z_hi]: Chebyshev nodes in u (8K + 32 of them) plus z-steps of 1/16
    on [-8, z_hi - Z_PAD + 8] and 1/2 elsewhere."""
    z_cheb = _chebyshev_nodes(K)
    fine_hi = z_hi - Z_PAD + 8.0
    fine = np.arange(-8.0, fine_hi + 1e-9, 1.0 / 16)
    coarse = np.concatenate([np.arange(Z_LO, -8.0, 0.5), np.arange(fine_hi, z_hi + 0.5, 0.5)])
    grid = np.unique(np.concatenate([z_cheb, fine, coarse, [Z_LO, z_hi]]))
    return grid[(grid >= Z_LO) & (grid <= z_hi)]


def _inflections(law: RankLaw, a: np.ndarray, b: np.ndarray, fa: np.ndarray, fb: np.ndarray,
                 step_tol: float = 1e-5, iters: int = 30) -> tuple[np.ndarray, Curve]:
    """The zero of L'' in each grid cell [a, b] (a < b) where it changes sign (fa = L''(a), fb = L''(b)):
    safeguarded Newton with the exact third derivative (:func:`curve`) from the secant point,
    bisection when a step leaves the shrinking bracket. Returns the last points evaluated (their
    last Newton correction below ``step_tol`` relative) and the curve there.

    Precision needed: a convexity piece may then hold a sliver of width tau <= 1e-5 past its
    inflection, where F' turns back by ~|L^(3)| tau^2 / 2; a pair of crossings missed there
    would enclose a mass below q |L^(3)| tau^4 ~ 1e-20 q (nothing to miss in double precision)."""
    lo, hi = a.copy(), b.copy()  # a < b
    pos_lo = fa > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        x = a - fa * (b - a) / (fb - fa)
    x = np.where(np.isfinite(x) & (x > lo) & (x < hi), x, 0.5 * (lo + hi))
    # the usual case, without bookkeeping: one Newton step, then the next correction is small
    # (estimated with L^(3) at the first point: it moves by a relative ~|L^(4) / L^(3)| |x1 - x|
    # between the two, so the estimate is held to half the tolerance)
    first = _curve_flat(law, x, 3)[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        x1 = x - first.d2L / first.d3L
    if (np.isfinite(x1) & (x1 > lo) & (x1 < hi)).all():
        second = _curve_flat(law, x1, 2)[0]
        with np.errstate(divide="ignore", invalid="ignore"):
            small = np.abs(second.d2L / first.d3L) <= 0.5 * step_tol * np.maximum(1.0, np.abs(x1))
        if (small | (second.d2L == 0.0)).all():
            return x1, second
    points = np.empty(x.size)
    curves = [np.empty(x.size) for _ in range(3)]
    active = np.arange(x.size)
    for _ in range(iters):
        cv = curve(law, x[active], 3)
        xa = x[active]
        left = (cv.d2L > 0) == pos_lo[active]  # the zero is right of xa
        lo[active] = np.where(left, xa, lo[active])
        hi[active] = np.where(left, hi[active], xa)
        with np.errstate(divide="ignore", invalid="ignore"):
            newton = xa - cv.d2L / cv.d3L
        done = (np.abs(newton - xa) <= step_tol * np.maximum(1.0, np.abs(xa))) | (cv.d2L == 0.0)
        done |= hi[active] - lo[active] <= 1e-12 * np.maximum(1.0, np.abs(xa))
        points[active[done]] = xa[done]
        for store, value in zip(curves, cv[:3]):
            store[active[done]] = value[done]
        ok = np.isfinite(newton) & (newton > lo[active]) & (newton < hi[active])
        x[active] = np.where(ok, newton, 0.5 * (lo[active] + hi[active]))
        active = active[~done]
        if active.size == 0:
            break
    if active.size:  # not converged in iters (not seen): the last point, evaluated
        cv = curve(law, x[active], 2)
        points[active] = x[active]
        for store, value in zip(curves, cv[:3]):
            store[active] = value
    return points, Curve(*curves)


class Pieces(NamedTuple):
    """Convexity pieces [edges[i], edges[i+1]] of L, with L and L' at every grid node."""

    edges: np.ndarray  # piece boundaries, ascending, from Z_LO to z_hi
    grid: np.ndarray  # the scan grid plus the edges
    L: np.ndarray
    dL: np.ndarray
    start: np.ndarray  # first grid index of each piece
    stop: np.ndarray  # last grid index of each piece
    d2L: np.ndarray | None = None  # L'' at every grid node (~0 at the edges)


def convexity_pieces(law: RankLaw, z_hi: float) -> Pieces:
    """Split [Z_LO, z_hi] at the sign changes of L'' (found on the scan grid, refined by Newton)."""
    basis = _grid_basis(law.K, float(z_hi))
    grid = basis.z
    c = _curve_terms(law, basis, 2)
    s = np.sign(c.d2L)
    nz = np.nonzero(s)[0]
    change = s[nz[:-1]] * s[nz[1:]] < 0
    flips, after = nz[:-1][change], nz[1:][change]
    if flips.size:
        infl, cin = _inflections(law, grid[flips], grid[after], c.d2L[flips], c.d2L[after])
        grid = np.concatenate([grid, infl])
        L = np.concatenate([c.L, cin.L])
        dL = np.concatenate([c.dL, cin.dL])
        d2L = np.concatenate([c.d2L, cin.d2L])
        order = np.argsort(grid, kind="stable")
        grid, L, dL, d2L = grid[order], L[order], dL[order], d2L[order]
        edges = np.concatenate([[grid[0]], np.sort(infl), [grid[-1]]])
    else:
        L, dL, d2L = c.L, c.dL, c.d2L
        edges = np.array([grid[0], grid[-1]])
    start = grid.searchsorted(edges[:-1], side="left")
    stop = grid.searchsorted(edges[1:], side="left")
    return Pieces(edges, grid, L, dL, start, stop, d2L)


# ----------------------------------------------------------------- crossings, vectorised over delta
def _newton_polish(fun, lo: np.ndarray, hi: np.ndarray, f_lo: np.ndarray, iters: int = 60,
                   x0: np.ndarray | None = None, x_tol: float = 2e-15) -> np.ndarray:
    """Root of a monotone function on brackets [lo, hi] (sign change, f_lo = f(lo)): Newton
    steps kept inside the bracket (bisection when one leaves it), shrinking the bracket; only
    the unconverged entries are iterated. ``fun(x, active)`` returns (f, f', floor) at x for
    the entries ``active`` (an index array); an entry is done once |f| <= floor (the rounding
    level of f: every x there is a root to working precision), its Newton correction is below
    ``x_tol`` (2e-15) relative, or its bracket is that narrow. ``x0``: starting points inside the brackets
    (default: the midpoints). When ``fun`` returns a fourth value f'' the Newton point is taken
    as converged once its predicted error |f''| dx^2 / (2 |f'|) (quadratic convergence) is below
    that tolerance, which saves the confirming evaluation."""
    pos = f_lo > 0
    x = 0.5 * (lo + hi) if x0 is None else np.where((x0 > lo) & (x0 < hi), x0, 0.5 * (lo + hi))
    lo, hi = lo.copy(), hi.copy()
    active = np.arange(x.size)
    for _ in range(iters):
        if active.size == 0:
            break
        xa = x[active]
        values = fun(xa, active)
        f, df, floor = values[:3]
        left = (f > 0) == pos[active]
        la = np.where(left, xa, lo[active])
        ha = np.where(left, hi[active], xa)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            newton = xa - f / df
            tol = x_tol * np.maximum(1.0, np.abs(xa))
            # converged when the Newton correction is below tol (even if it points at the bracket end)
            done = (np.abs(f) <= floor) | (np.abs(newton - xa) <= tol) | (ha - la <= tol)
            ok = np.isfinite(newton) & (newton > la) & (newton < ha)
            if len(values) > 3:  # the Newton point itself is within tol of the root
                done |= ok & (np.abs(values[3]) * (newton - xa) ** 2 <= 2.0 * tol * np.abs(df))
        # a Newton point outside the bracket is never taken, even for an entry that is done (a
        # near-double root: F' ~ 0 sends it far away, onto another root or none): clipped to
        # the bracket when within tol of it, else the bracket's midpoint (within tol of the root
        # once the bracket is that narrow)
        close = np.abs(newton - xa) <= tol
        nx = np.where(ok, newton, np.where(done & close, np.clip(newton, la, ha), 0.5 * (la + ha)))
        lo[active], hi[active] = la, ha
        x[active] = np.where(np.abs(f) <= floor, xa, nx)
        active = active[~done]
    return x


def _newton_fast(fun, lo: np.ndarray, hi: np.ndarray, x0: np.ndarray, x_tol: float = 2e-15,
                 iters: int = 4) -> np.ndarray | None:
    """Plain Newton from x0 for all entries at once with :func:`_newton_polish`'s stopping rule,
    or None as soon as a step leaves its bracket [lo, hi] or is not finite, or it has not
    converged in ``iters`` steps (the caller then runs :func:`_newton_polish`). Each bracket
    holds exactly one root, so a point where the rule holds is that root."""
    x = x0
    for _ in range(iters):
        values = fun(x, None)
        f, df, floor = values[:3]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            newton = x - f / df
            step = newton - x
            tol = x_tol * np.maximum(1.0, np.abs(x))
            flat = np.abs(f) <= floor
            done = flat | (np.abs(step) <= tol)
            if len(values) > 3:
                done |= np.abs(values[3]) * (step * step) <= 2.0 * tol * np.abs(df)
            inside = np.isfinite(newton) & (newton > lo) & (newton < hi)
        if not (inside | flat).all():
            return None
        if done.all():
            return np.where(flat, x, newton)
        x = np.where(flat, x, newton)
    return None


def _index_bracket(values, lo_idx: np.ndarray, hi_idx: np.ndarray) -> np.ndarray:
    """For monotone node values with a sign change between lo_idx and hi_idx, the k in
    [lo_idx, hi_idx) with a sign change between k and k + 1 (vectorised binary search)."""
    pos = values(lo_idx) > 0
    lo, hi = lo_idx.copy(), hi_idx.copy()
    while np.any(hi - lo > 1):
        mid = (lo + hi) // 2
        move = (values(mid) > 0) == pos
        wide = hi - lo > 1
        lo = np.where(wide & move, mid, lo)
        hi = np.where(wide & ~move, mid, hi)
    return lo


def crossings_batch(law: RankLaw, deltas: np.ndarray, pieces: Pieces | None = None) -> np.ndarray:
    """All crossings of q and p_omega in [Z_LO, delta + Z_PAD] for every delta: array
    (n, m) sorted ascending, NaN-padded. deltas must be > 0. Vectorised over every
    (delta, convexity piece, half) triple."""
    d_all = np.asarray(deltas, np.float64)
    n = d_all.size
    z_hi = float(d_all.max()) + Z_PAD
    pc = convexity_pieces(law, z_hi) if pieces is None else pieces
    grid, L, dL = pc.grid, pc.L, pc.dL
    n_pieces = pc.edges.size - 1
    # one row per (delta, piece)
    d = np.repeat(d_all, n_pieces)
    i0 = np.tile(pc.start, n)
    i1 = np.tile(pc.stop, n)

    def F_nodes(idx, dd):
        return L[idx] - dd * grid[idx] + 0.5 * dd * dd

    # the extremum of F on each piece: L' = delta (L' is monotone on a piece)
    s0, s1 = dL[i0], dL[i1]
    inside = (np.minimum(s0, s1) < d) & (d < np.maximum(s0, s1)) & (i1 > i0)
    ext_idx = i0.copy()
    ext_z = grid[i0].copy()
    ext_F = F_nodes(i0, d)
    ins = np.nonzero(inside)[0]
    if ins.size:
        di = d[ins]
        k = _index_bracket(lambda idx: dL[idx] - di, i0[ins], i1[ins])

        def slope_fun(x, active):
            cv = curve(law, x, 2)
            return cv.dL - di[active], cv.d2L, 4e-16 * (np.abs(cv.dL) + di[active])
        kz = _newton_polish(slope_fun, grid[k], grid[k + 1], dL[k] - di, iters=40)
        ext_idx[ins] = k
        ext_z[ins] = kz
        ext_F[ins] = curve(law, kz, derivatives=0).L - di * kz + 0.5 * di * di
    # two monotone halves per row: [grid[i0], ext] and [ext, grid[i1]] (the first is empty
    # when there is no interior extremum)
    a_z = np.concatenate([grid[i0], ext_z])
    b_z = np.concatenate([ext_z, grid[i1]])
    Fa = np.concatenate([F_nodes(i0, d), np.where(inside, ext_F, F_nodes(i0, d))])
    Fb = np.concatenate([ext_F, F_nodes(i1, d)])
    # grid nodes strictly usable for bracketing inside each half
    in_lo = np.concatenate([i0, np.where(inside, ext_idx + 1, i0)])
    in_hi = np.concatenate([ext_idx, i1])
    dd = np.concatenate([d, d])
    has = np.nonzero((np.sign(Fa) * np.sign(Fb) < 0) & (b_z > a_z))[0]  # signs: Fa * Fb can underflow
    roots = np.full(dd.size, np.nan)
    if has.size:
        dh, az, bz, Fah = dd[has], a_z[has], b_z[has], Fa[has]
        lo_i, hi_i = in_lo[has], in_hi[has]
        lo_i = np.minimum(lo_i + (grid[lo_i] < az), hi_i)  # first node >= a
        hi_i = np.maximum(hi_i - (grid[hi_i] > bz), lo_i)  # last node <= b
        sgn_a = Fah > 0
        Fl, Fr = F_nodes(lo_i, dh), F_nodes(hi_i, dh)
        lo_z, hi_z, f_lo = az.copy(), bz.copy(), Fah.copy()
        left = (Fl > 0) != sgn_a  # root between a and the first inner node
        right = ~left & ((Fr > 0) == sgn_a)  # root between the last inner node and b
        mid = ~left & ~right
        hi_z[left] = grid[lo_i[left]]
        lo_z[right], f_lo[right] = grid[hi_i[right]], Fr[right]
        if np.any(mid):
            dm = dh[mid]
            k = _index_bracket(lambda idx: F_nodes(idx, dm), lo_i[mid], hi_i[mid])
            lo_z[mid], hi_z[mid], f_lo[mid] = grid[k], grid[k + 1], F_nodes(k, dm)

        def F_exact(x, active):
            c = curve(law, x, derivatives=1)
            da = dh[active]
            floor = 4e-16 * (np.abs(c.L) + np.abs(da * x) + 0.5 * da * da)
            return c.L - da * x + 0.5 * da * da, c.dL - da, floor
        roots[has] = _newton_polish(F_exact, lo_z, hi_z, f_lo)
    # rows: halves of (delta, piece) -> (delta, 2 * n_pieces)
    roots = np.concatenate([roots[:d.size].reshape(n, n_pieces), roots[d.size:].reshape(n, n_pieces)], axis=1)
    roots.sort(axis=1)
    keep = np.any(np.isfinite(roots), axis=0)
    return roots[:, keep] if np.any(keep) else np.empty((n, 0))


def crossings_one(law: RankLaw, delta: float, pieces: Pieces | None = None) -> np.ndarray:
    """The crossings of :func:`crossings_batch` for one delta > 0 (sorted 1-d array), found
    with fewer curve evaluations. Every grid cell lies inside one convexity piece (the
    inflection points are nodes), so F' is monotone on it, and F is convex or concave there
    (the sign of L'' at the cell's end where |L''| is larger: only an inflection node has
    L'' ~ 0). A cell where F' keeps its sign has F monotone: at most one root, a sign change of F
    at its ends. A cell where F' changes sign (F has its extremum inside) has
    - exactly one root when F changes sign at its ends (a convex or concave function),
    - none when both ends have F < 0 and F is convex (F below the chord), or both > 0 and
      concave, or both > 0, convex and the two end tangents (below F) meet above 0, or both < 0,
      concave and they meet below 0;
    - otherwise 0 or 2: the extremum is solved from L' = delta (Newton) and inserted as a node.
    Between consecutive points of the grid so augmented every root is one sign change of F,
    polished by safeguarded Newton from the secant point (the bracket keeps the one root of its
    cell even where F is not monotone)."""
    d = float(delta)
    pc = convexity_pieces(law, d + Z_PAD) if pieces is None else pieces
    grid = pc.grid
    F = pc.L - d * grid + 0.5 * d * d
    slope = pc.dL - d
    rising = slope > 0
    cells = np.nonzero(rising[:-1] != rising[1:])[0]
    if cells.size and pc.d2L is not None:
        after = cells + 1
        ca, cb = pc.d2L[cells], pc.d2L[after]
        curv = np.where(np.abs(ca) >= np.abs(cb), ca, cb)  # its sign is F's convexity on the cell
        a, b, sa, sb, Fa, Fb = grid[cells], grid[after], slope[cells], slope[after], F[cells], F[after]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            meet = Fa + sa * ((Fb - Fa + sa * a - sb * b) / (sa - sb) - a)  # the end tangents' intersection
        margin = 1e-14 * (np.abs(Fa) + np.abs(Fb))
        pos = Fa > 0
        same = pos == (Fb > 0)
        no_root = same & (((curv > 0) & (~pos | (meet > margin))) | ((curv < 0) & (pos | (meet < -margin))))
        cells = cells[same & ~no_root]
    if cells.size:
        a, b, sa, sb = grid[cells], grid[cells + 1], slope[cells], slope[cells + 1]

        def slope_fun(x, active):
            cv = curve(law, x, 2)
            return cv.dL - d, cv.d2L, 4e-16 * (np.abs(cv.dL) + d)
        with np.errstate(divide="ignore", invalid="ignore"):
            x0 = a - sa * (b - a) / (sb - sa)
        # F is stationary at its extremum: a position error e moves F(ext) by ~|F''| e^2 / 2, so
        # the last Newton step from within 1e-7 (error ~1e-14 after it) is enough
        x0 = np.where(np.isfinite(x0) & (x0 > np.minimum(a, b)) & (x0 < np.maximum(a, b)), x0, 0.5 * (a + b))
        ext = _newton_fast(slope_fun, np.minimum(a, b), np.maximum(a, b), x0, x_tol=1e-7)
        if ext is None:
            ext = _newton_polish(slope_fun, a, b, sa, iters=40, x0=x0, x_tol=1e-7)
        ext_F = curve(law, ext, derivatives=0).L - d * ext + 0.5 * d * d
        z = np.concatenate([grid, ext])
        order = np.argsort(z, kind="stable")
        z, F = z[order], np.concatenate([F, ext_F])[order]
    else:
        z = grid
    above = F > 0
    j = np.nonzero(above[:-1] != above[1:])[0]
    if j.size == 0:
        return np.empty(0)
    lo, hi, f_lo = z[j], z[j + 1], F[j]
    half_d2 = 0.5 * d * d

    def F_exact(x, active):
        c = _curve_flat(law, x, 2)[0]
        dx = d * x
        return c.L - dx + half_d2, c.dL - d, 4e-16 * (np.abs(c.L) + np.abs(dx) + half_d2), c.d2L
    with np.errstate(divide="ignore", invalid="ignore"):
        x0 = lo - f_lo * (hi - lo) / (F[j + 1] - f_lo)
    x0 = np.where(np.isfinite(x0) & (x0 > lo) & (x0 < hi), x0, 0.5 * (lo + hi))
    roots = _newton_fast(F_exact, lo, hi, x0)
    if roots is None:
        roots = _newton_polish(F_exact, lo, hi, f_lo, x0=x0)
    return np.sort(roots)


# ----------------------------------------------------------------- closed-form masses
def _rank_cdf_tails(law: RankLaw, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(I_r(x), J_r(x)) = (P(S_(r) <= x), P(S_(r) > x)) for all ranks, shape x.shape + (K,),
    each from its own tail (so both keep relative precision)."""
    return rank_tails(law.K, x)


# Stirling's error log(n!) - (n + 1/2) log n + n - log(2 pi) / 2 for n = 1..15 (mpmath, 40 digits;
# tests/theory/test_exact.py recomputes them); above 15 the series of _stirling_error
_STIRLING_ERROR = np.array([np.nan, 0.08106146679532726, 0.0413406959554093, 0.02767792568499834,
                            0.020790672103765093, 0.016644691189821193, 0.013876128823070748,
                            0.01189670994589177, 0.010411265261972096, 0.009255462182712733,
                            0.00833056343336287, 0.007573675487951841, 0.00694284010720953,
                            0.006408994188004207, 0.0059513701127588475, 0.005554733551962801])
_BD0_SERIES = 0.25  # |v| below: bd0 by its series in v (12 terms: v^2 < 1/16)


def _stirling_error(n: np.ndarray) -> np.ndarray:
    """log(n!) - (n + 1/2) log n + n - log(2 pi) / 2 for integers n >= 1 (table to 15, then
    1/(12n) - 1/(360n^3) + 1/(1260n^5) - 1/(1680n^7) + 1/(1188n^9) - 691/(360360n^11): truncation
    < 1/(156 n^13) < 2e-18 absolute)."""
    n = np.asarray(n, np.float64)
    small = n <= 15
    big = np.where(small, 16.0, n)
    inv2 = 1.0 / (big * big)
    series = (1.0 / 12 - inv2 * (1.0 / 360 - inv2 * (1.0 / 1260 - inv2 * (1.0 / 1680 - inv2 * (
        1.0 / 1188 - inv2 * 691.0 / 360360))))) / big
    return np.where(small, _STIRLING_ERROR[np.where(small, n, 0).astype(np.intp)], series)


def _bd0(x: np.ndarray, m: np.ndarray) -> np.ndarray:
    """x log(x / m) + m - x >= 0 (x > 0, m >= 0; same shapes) without cancellation: near x = m
    by the series (x - m) v + 2 x sum_k v^(2k+1) / (2k + 1), v = (x - m) / (x + m); elsewhere directly."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        diff = x - m
        v = diff / (x + m)
        out = x * np.log(x / m) + m - x
        near = np.abs(v) < _BD0_SERIES
        if near.any():
            vn, xn = v[near], x[near]
            v2 = vn * vn
            tail = v2 * (1.0 / 25.0) + 1.0 / 23.0
            for k in range(10, 0, -1):  # Horner in v^2: sum_{k=1..12} v^(2k) / (2k + 1)
                tail *= v2
                tail += 1.0 / (2 * k + 1)
            out[near] = diff[near] * vn + 2.0 * xn * vn * v2 * tail
    out[m == 0.0] = np.inf
    return out


@functools.lru_cache(maxsize=256)
def _loader_constants(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(s(n) - s(j) - s(n - j) + log(n / (2 pi j (n - j))) / 2, then (j, n - j) concatenated)
    for j = 1..n-1 (read-only)."""
    j = np.arange(1, n, dtype=np.float64)
    const = (_stirling_error(np.array([float(n)])) - _stirling_error(j) - _stirling_error(n - j)
             + 0.5 * np.log(n / (2.0 * np.pi * j * (n - j))))
    both = np.concatenate([j, n - j])
    const.flags.writeable = both.flags.writeable = False
    return const, both


def binomial_pmf(n: int, p: np.ndarray, q: np.ndarray, log_p: np.ndarray, log_q: np.ndarray) -> np.ndarray:
    """P(Bin(n, p) = j) for j = 0..n, shape p.shape + (n + 1,), to a few ulp plus the
    propagated error of p and q (= 1 - p, each given with relative precision, and their logs).

    Loader's saddle-point form: for 0 < j < n, log pmf = s(n) - s(j) - s(n - j) - bd0(j, n p)
    - bd0(n - j, n q) + log(n / (2 pi j (n - j))) / 2 (s: Stirling's error, bd0: the deviance
    term, both computed without cancellation); q^n and p^n at the ends. The naive
    log C(n, j) + j log p + (n - j) log q cancels terms of size ~n log 2 (~400 ulp at n = 128)."""
    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    if n == 0:
        return np.ones(p.shape + (1,))
    const, both = _loader_constants(n)
    # both deviance terms in one call: x = (j, n - j), m = (n p, n q)
    m = np.empty(p.shape + (2 * n - 2,))
    m[..., :n - 1] = (n * p)[..., None]
    m[..., n - 1:] = (n * q)[..., None]
    dev = _bd0(np.broadcast_to(both, m.shape), m)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        log_pmf = np.concatenate([n * np.asarray(log_q, np.float64)[..., None],
                                  const - dev[..., :n - 1] - dev[..., n - 1:],
                                  n * np.asarray(log_p, np.float64)[..., None]], axis=-1)
        pmf = np.exp(log_pmf)
    return np.where(np.isnan(pmf), 0.0, pmf)


def rank_tails(K: int, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(P(S_(r) <= x), P(S_(r) > x)) of the K order statistics, shape x.shape + (K,), each
    from its own tail (so both keep relative precision; x = +-inf allowed)."""
    x = np.asarray(x, np.float64)
    # S_(r) <= x  <=>  Bin(K, Phi(x)) >= r: binomial-tail sums of positive terms (both tails
    # keep relative precision), all ranks at once from one row of K + 1 pmf terms
    pmf = binomial_pmf(K, special.ndtr(x), special.ndtr(-x), special.log_ndtr(x), special.log_ndtr(-x))
    upper = np.cumsum(pmf[..., :K], axis=-1)  # P(Bin < r), r = 1..K
    lower = np.cumsum(pmf[..., :0:-1], axis=-1)[..., ::-1]  # P(Bin >= r), r = 1..K
    return np.minimum(lower, 1.0), np.minimum(upper, 1.0)


def cumulative_residual(law: RankLaw, x: np.ndarray, d: np.ndarray, lower: np.ndarray,
                        upper: np.ndarray) -> np.ndarray:
    """G(x) = int_{-inf}^x (q - p_omega), from deviations: -P(x - delta < Z < x) - sum eps_r I_r(x)
    (x <= 0), or -P(...) + sum eps_r J_r(x) (x > 0; sum eps = 0). G(+-inf) = 0."""
    return _G_weighted(x, d, lower @ law.eps, upper @ law.eps)


def _G_weighted(x: np.ndarray, d: np.ndarray, lower_eps: np.ndarray, upper_eps: np.ndarray) -> np.ndarray:
    """:func:`cumulative_residual` from sum eps_r I_r(x) and sum eps_r J_r(x)."""
    finite = np.isfinite(x)
    xf = np.where(finite, x, 0.0)
    qdev = -normal_mass_below(xf, d)
    pdev = np.where(xf <= 0, lower_eps, -upper_eps)
    return np.where(finite, qdev - pdev, 0.0)


class ExactAcceptance(NamedTuple):
    """A = int min(q, p_omega) and 1 - A (each precise where it is small), per delta; the
    crossings (n, m) NaN-padded; gradient dA/domega_r = P(S_(r) in {q > p}) (n, K) when asked."""

    acceptance: np.ndarray
    rejection: np.ndarray
    crossings: np.ndarray
    gradient: np.ndarray | None
    pieces: PieceMasses | None = None


class PieceMasses(NamedTuple):
    """Per piece between consecutive crossings (one delta): rank masses P(S_(r) in piece) (m+1, K),
    q's mass, the residual int (q - p) where q > p (else 0), and which side is above."""

    rank_mass: np.ndarray
    q_mass: np.ndarray
    residual: np.ndarray
    q_above: np.ndarray


def _masses_one(law: RankLaw, d: float, roots: np.ndarray, L_first: float):
    """:func:`_masses` with the gradient for one delta (roots 1-d, no padding): the same masses
    with fewer array operations (the optimiser's case)."""
    K, m = law.K, roots.size
    lower_r, upper_r = rank_tails(K, roots)
    lower = np.empty((m + 2, K))  # at -inf, the roots, +inf
    upper = np.empty((m + 2, K))
    lower[0], lower[1:-1], lower[-1] = 0.0, lower_r, 1.0
    upper[0], upper[1:-1], upper[-1] = 1.0, upper_r, 0.0
    edges = np.concatenate([[-np.inf], roots, [np.inf]])
    lo, hi = edges[:-1], edges[1:]
    rank_mass = np.maximum(np.where((lo >= 0)[:, None], upper[:-1] - upper[1:], lower[1:] - lower[:-1]), 0.0)
    q_first = (L_first - d * Z_LO + 0.5 * d * d) < 0
    q_above = (np.arange(m + 1) % 2 == 1) ^ q_first
    q_mass = normal_mass_small(lo - d, hi - d)
    # G at the crossings (:func:`cumulative_residual`, the roots are finite)
    G_roots = -normal_mass_below_small(roots, d) - np.where(roots <= 0, lower_r @ law.eps, -(upper_r @ law.eps))
    G = np.concatenate([[0.0], G_roots, [0.0]])
    residual = np.where(q_above, G[1:] - G[:-1], 0.0)
    acc = float(np.where(q_above, rank_mass @ law.omega, q_mass).sum())
    rej = float(residual.sum())
    grad = np.where(q_above[:, None], rank_mass, 0.0).sum(axis=0)
    pieces = PieceMasses(rank_mass, q_mass, np.maximum(residual, 0.0), q_above)
    return np.array([min(max(acc, 0.0), 1.0)]), np.array([min(max(rej, 0.0), 1.0)]), grad[None], pieces


def _masses(law: RankLaw, d: np.ndarray, roots: np.ndarray, want_gradient: bool, L_first: float | None = None):
    n, m = roots.shape
    lo = np.concatenate([np.full((n, 1), -np.inf), roots], axis=1)
    hi = np.concatenate([roots, np.full((n, 1), np.inf)], axis=1)
    # a NaN bound means "no more crossings": the gap (last root, +inf) is the last real one
    valid = ~np.isnan(lo)
    hi = np.where(np.isnan(hi) & valid, np.inf, hi)
    lo_f = np.where(valid, lo, 0.0)
    hi_f = np.where(valid, hi, 1.0)
    dd = np.broadcast_to(d[:, None], lo_f.shape)
    # every crossing is a strict sign change of F (each was bracketed by one), so the side
    # alternates from the first piece's, read at Z_LO (below it both laws have mass < 1e-340)
    if L_first is None:  # L(Z_LO) (the scan grid's first node)
        L_first = float(curve(law, np.array([Z_LO]), derivatives=0).L[0])
    q_first = (L_first - d * Z_LO + 0.5 * d * d) < 0
    q_above = (q_first[:, None] ^ (np.arange(m + 1) % 2 == 1)[None, :]) & valid
    # order-statistic tails at the crossings only (each bound of one piece is a bound of the
    # next), per rank when the gradient is wanted, else already weighted by (omega, eps): the
    # columns of the (n, m + 1, k) mass arrays are ranks (k = K) or those two sums (k = 2)
    lower_r, upper_r = _rank_cdf_tails(law, np.where(np.isnan(roots), 0.0, roots))
    if want_gradient:
        ones_row = np.ones(law.K)
    else:
        weights = np.column_stack([law.omega, law.eps])
        lower_r, upper_r = lower_r @ weights, upper_r @ weights
        ones_row = weights.sum(axis=0)
    k = ones_row.size
    zeros, ones = np.zeros((n, 1, k)), np.broadcast_to(ones_row, (n, 1, k))
    lower_lo, upper_lo = np.concatenate([zeros, lower_r], axis=1), np.concatenate([ones, upper_r], axis=1)
    lower_hi, upper_hi = np.concatenate([lower_r, ones], axis=1), np.concatenate([upper_r, zeros], axis=1)
    last = np.isinf(hi_f)[..., None]  # the piece ending at +inf (after a row's last crossing)
    lower_hi = np.where(last, ones_row, lower_hi)
    upper_hi = np.where(last, 0.0, upper_hi)
    mass = np.clip(np.where((lo_f >= 0)[..., None], upper_lo - upper_hi, lower_hi - lower_lo), 0.0, None)
    # G at the crossings (G(+-inf) = 0; a NaN pad stands for +inf): G_lo, G_hi of every piece
    at_roots = np.where(np.isnan(roots), np.inf, roots)
    if want_gradient:
        rank_mass = mass
        p_mass = rank_mass @ law.omega
        G_r = cumulative_residual(law, at_roots, d[:, None], lower_r, upper_r)
    else:
        p_mass = mass[..., 0]
        G_r = _G_weighted(at_roots, d[:, None], lower_r[..., 1], upper_r[..., 1])
    G_lo = np.concatenate([np.zeros((n, 1)), G_r], axis=1)
    G_hi = np.concatenate([G_r, np.zeros((n, 1))], axis=1)
    q_mass = normal_mass(lo_f - dd, hi_f - dd)
    acc = np.sum(np.where(valid, np.where(q_above, p_mass, q_mass), 0.0), axis=1)
    rej = np.sum(np.where(q_above, G_hi - G_lo, 0.0), axis=1)
    grad = np.sum(np.where(q_above[..., None], rank_mass, 0.0), axis=1) if want_gradient else None
    pieces = None
    if want_gradient and n == 1:
        keep = valid[0]
        pieces = PieceMasses(rank_mass[0][keep], np.where(valid, q_mass, 0.0)[0][keep],
                             np.clip(np.where(q_above, G_hi - G_lo, 0.0), 0.0, None)[0][keep], q_above[0][keep])
    return np.clip(acc, 0.0, 1.0), np.clip(rej, 0.0, 1.0), grad, pieces


def exact_acceptance(law: RankLaw, deltas: ArrayLike, *, gradient: bool = False) -> ExactAcceptance:
    """A and 1 - A at fixed omega for every delta (1-d array, validated, >= 0), in chunks of
    bounded memory. delta = 0: A = 1 - TV(phi, p_omega) is still exact (one line z = 0 slope)."""
    d = np.asarray(deltas, np.float64).ravel()
    n, K = d.size, law.K
    if n == 1 and d[0] <= DELTA_UNDERFLOW:  # one delta (the optimiser's case): no chunks
        pieces = convexity_pieces(law, float(d[0]) + Z_PAD)
        roots = crossings_one(law, float(d[0]), pieces)[None]
        if gradient:
            acc, rej, grad, piece_masses = _masses_one(law, float(d[0]), roots[0], float(pieces.L[0]))
        else:
            acc, rej, grad, piece_masses = _masses(law, d, roots, False, float(pieces.L[0]))
        acc, rej = (acc, 1.0 - acc) if acc[0] < 0.5 else (1.0 - rej, rej)
        return ExactAcceptance(acc, rej, roots, grad, piece_masses)
    acc = np.empty(n)
    rej = np.empty(n)
    grad = np.empty((n, K)) if gradient else None
    under = d > DELTA_UNDERFLOW
    acc[under], rej[under] = 0.0, 1.0
    if gradient:
        grad[under] = 0.0
    work = np.nonzero(~under)[0]
    all_roots = np.full((n, 0), np.nan)
    piece_masses = None
    if work.size:
        pieces = convexity_pieces(law, float(d[work].max()) + Z_PAD)
        per_delta = max(1, (2 * pieces.edges.size + 1) * K)
        chunk = max(1, CHUNK_ELEMENTS // per_delta)
        root_list = []
        for s in range(0, work.size, chunk):
            idx = work[s:s + chunk]
            if idx.size == 1:
                roots = crossings_one(law, float(d[idx[0]]), pieces)[None]
            else:
                roots = crossings_batch(law, d[idx], pieces)
            a, rj, gr, piece_masses = _masses(law, d[idx], roots, gradient, float(pieces.L[0]))
            acc[idx], rej[idx] = a, rj
            if gradient:
                grad[idx] = gr
            root_list.append((idx, roots))
        width = max(r.shape[1] for _, r in root_list)
        all_roots = np.full((n, width), np.nan)
        for idx, roots in root_list:
            all_roots[idx, :roots.shape[1]] = roots
    # A from its own masses where small, else 1 - (1 - A): each keeps its relative precision
    acc = np.where(acc < 0.5, acc, 1.0 - rej)
    rej = np.where(acc < 0.5, 1.0 - acc, rej)
    return ExactAcceptance(acc, rej, all_roots, grad, piece_masses if n == 1 else None)


def hessian(law: RankLaw, delta: float, roots: np.ndarray) -> np.ndarray:
    """d^2 A / domega^2 = -sum_c q(c) w_c w_c^T / |F'(c)|, w_c[r] = b_r(Phi(c)) / P(Phi(c)),
    over the crossings c (moving a crossing is the only second-order effect)."""
    c = roots[np.isfinite(roots)]
    K = law.K
    if c.size == 0:
        return np.zeros((K, K))
    cv, log_b = _curve_flat(law, c, 1)
    log_q = -0.5 * (c - delta) ** 2 - LOG_SQRT_2PI
    with np.errstate(divide="ignore"):
        log_scale = log_q - 2.0 * cv.L - np.log(np.abs(cv.dL - delta))
    v = np.exp(np.minimum(0.5 * log_scale[:, None] + log_b, 300.0))
    return -(v.T @ v)
