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
its sign changes are refined (Illinois, to 1e-9): this splits the line into pieces on which L is
convex or concave. That is the one assumption: no two inflection points of L closer than a grid
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
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike
from scipy import special

from speccheck.theory.normal import LOG_SQRT_2PI, normal_mass, normal_mass_below

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


def _log_coef(K: int) -> np.ndarray:
    r = np.arange(1, K + 1)
    return np.log(K) + special.gammaln(K) - special.gammaln(r) - special.gammaln(K - r + 1)


def _zero_sum(eps: np.ndarray) -> np.ndarray:
    """Remove the rounding residue of sum(eps) from its largest entry (twice: exact to ~ulp(ulp))."""
    eps = eps.copy()
    j = int(np.argmax(np.abs(eps)))
    for _ in range(2):
        eps[j] -= math.fsum(eps)
    return eps


def law_from_omega(omega: np.ndarray) -> RankLaw:
    """RankLaw of a (validated) weight vector; eps = omega - 1/K uses 1/K in double-double."""
    K = omega.size
    inv_hi = 1.0 / K
    inv_lo = float(Fraction(1, K) - Fraction(inv_hi))
    eps = _zero_sum((omega - inv_hi) - inv_lo)
    with np.errstate(divide="ignore"):
        log_w = np.log(omega)
    return RankLaw(K, omega, eps, log_w, _log_coef(K))


def law_from_eps(eps: np.ndarray, zero: np.ndarray | None = None) -> RankLaw:
    """RankLaw from a deviation eps (the optimiser's variable); ``zero`` marks weights exactly 0."""
    K = eps.size
    eps = _zero_sum(eps)
    omega = np.clip(1.0 / K + eps, 0.0, None)
    if zero is not None:
        omega[zero] = 0.0
    with np.errstate(divide="ignore"):
        log_w = np.log(omega)
    return RankLaw(K, omega, eps, log_w, _log_coef(K))


class Curve(NamedTuple):
    """L, L', L'' at points z, and the log order-statistic densities log b_r(Phi(z)) (n, K)."""

    L: np.ndarray
    dL: np.ndarray
    d2L: np.ndarray


def curve(law: RankLaw, z: np.ndarray, derivatives: int = 2) -> Curve:
    """L(z) = log P(Phi(z)) and its first two derivatives (exact formulas, see the module doc).

    Where |P - 1| <= 1/2 the deviation form (log1p of sum eps_r b_r) keeps relative precision
    for omega near uniform; elsewhere the posterior (log-sum-exp) form is used.
    """
    z = np.asarray(z, np.float64)
    shape = z.shape
    z = z.ravel()
    K = law.K
    r = np.arange(1, K + 1, dtype=np.float64)
    log_u = special.log_ndtr(z)
    log_v = special.log_ndtr(-z)
    log_b = law.log_coef + (r - 1) * log_u[:, None] + (K - r) * log_v[:, None]
    b = np.exp(log_b)
    dev = b @ law.eps
    near = np.abs(dev) <= 0.5
    with np.errstate(divide="ignore", invalid="ignore"):
        t = log_b + law.log_w
        top = np.max(t, axis=1, keepdims=True)
        e = np.exp(t - top)
        tot = e.sum(axis=1)
        L_log = top[:, 0] + np.log(tot)
        L = np.where(near, np.log1p(np.where(near, dev, 0.0)), L_log)
        if derivatives == 0:
            return Curve(L.reshape(shape), np.empty(0), np.empty(0))
        post = e / tot[:, None]
        log_phi = -0.5 * z * z - LOG_SQRT_2PI
        alpha = np.exp(log_phi - log_u)[:, None]
        beta = np.exp(log_phi - log_v)[:, None]
        g = (r - 1) * alpha - (K - r) * beta
        P_near = 1.0 + dev
        dL = np.where(near, ((b * g) @ law.eps) / P_near, np.sum(post * g, axis=1))
        if derivatives == 1:
            return Curve(L.reshape(shape), dL.reshape(shape), np.empty(0))
        h = g * g - (r - 1) * alpha * alpha - (K - r) * beta * beta
        S2 = np.where(near, ((b * h) @ law.eps) / P_near, np.sum(post * h, axis=1))
        d2L = -z * dL + S2 - dL * dL
    return Curve(L.reshape(shape), dL.reshape(shape), d2L.reshape(shape))


# ----------------------------------------------------------------- convexity pieces of L
def scan_grid(K: int, z_hi: float) -> np.ndarray:
    """Sorted grid on [Z_LO, z_hi]: Chebyshev nodes in u (8K + 32 of them) plus z-steps of 1/16
    on [-8, z_hi - Z_PAD + 8] and 1/2 elsewhere."""
    n_cheb = 8 * K + 32
    j = np.arange(1, n_cheb)
    u = 0.5 * (1.0 - np.cos(np.pi * j / n_cheb))
    z_cheb = special.ndtri(u)
    fine_hi = z_hi - Z_PAD + 8.0
    fine = np.arange(-8.0, fine_hi + 1e-9, 1.0 / 16)
    coarse = np.concatenate([np.arange(Z_LO, -8.0, 0.5), np.arange(fine_hi, z_hi + 0.5, 0.5)])
    grid = np.unique(np.concatenate([z_cheb, fine, coarse, [Z_LO, z_hi]]))
    return grid[(grid >= Z_LO) & (grid <= z_hi)]


def _bisect_sign(f, a: np.ndarray, b: np.ndarray, fa: np.ndarray, iters: int = 40) -> np.ndarray:
    """Vectorised Illinois (regula falsi) for a sign change of f inside [a, b] (fa = f(a) != 0),
    to ~1e-9 (a convexity piece may then miss a sliver that narrow at an inflection)."""
    fb = f(b)
    a, b, fa = a.copy(), b.copy(), fa.copy()
    for _ in range(iters):
        with np.errstate(divide="ignore", invalid="ignore"):
            x = b - fb * (b - a) / (fb - fa)
        x = np.where(np.isfinite(x) & (x > np.minimum(a, b)) & (x < np.maximum(a, b)), x, 0.5 * (a + b))
        fx = f(x)
        same = np.sign(fx) == np.sign(fb)
        # Illinois: halve the retained end's value when the same end is kept twice
        fa = np.where(same, fa * 0.5, fb)
        a = np.where(same, a, b)
        b, fb = x, fx
        if np.all(np.abs(b - a) <= 1e-9 * np.maximum(1.0, np.abs(b))):
            break
    return b


class Pieces(NamedTuple):
    """Convexity pieces [edges[i], edges[i+1]] of L, with L and L' at every grid node."""

    edges: np.ndarray  # piece boundaries, ascending, from Z_LO to z_hi
    grid: np.ndarray  # the scan grid plus the edges
    L: np.ndarray
    dL: np.ndarray
    piece_of_node: np.ndarray  # index of the piece each grid node belongs to (edges: both)
    start: np.ndarray  # first grid index of each piece
    stop: np.ndarray  # last grid index of each piece


def convexity_pieces(law: RankLaw, z_hi: float) -> Pieces:
    """Split [Z_LO, z_hi] at the sign changes of L'' (found on the scan grid, refined by bisection)."""
    grid = scan_grid(law.K, z_hi)
    c = curve(law, grid)
    s = np.sign(c.d2L)
    nz = np.nonzero(s != 0)[0]
    flips = nz[:-1][s[nz[:-1]] * s[nz[1:]] < 0]
    after = nz[1:][s[nz[:-1]] * s[nz[1:]] < 0]
    if flips.size:
        infl = _bisect_sign(lambda x: curve(law, x).d2L, grid[flips], grid[after], c.d2L[flips])
        cin = curve(law, infl, derivatives=1)
        grid = np.concatenate([grid, infl])
        L = np.concatenate([c.L, cin.L])
        dL = np.concatenate([c.dL, cin.dL])
        order = np.argsort(grid, kind="stable")
        grid, L, dL = grid[order], L[order], dL[order]
        edges = np.concatenate([[grid[0]], np.sort(infl), [grid[-1]]])
    else:
        L, dL = c.L, c.dL
        edges = np.array([grid[0], grid[-1]])
    start = np.searchsorted(grid, edges[:-1], side="left")
    stop = np.searchsorted(grid, edges[1:], side="left")
    piece = np.clip(np.searchsorted(edges, grid, side="right") - 1, 0, edges.size - 2)
    return Pieces(edges, grid, L, dL, piece, start, stop)


# ----------------------------------------------------------------- crossings, vectorised over delta
def _newton_polish(fun, lo: np.ndarray, hi: np.ndarray, f_lo: np.ndarray, iters: int = 60) -> np.ndarray:
    """Root of a monotone function on brackets [lo, hi] (sign change, f_lo = f(lo)): Newton
    steps kept inside the bracket (bisection when one leaves it), shrinking the bracket; only
    the unconverged entries are iterated. ``fun(x, active)`` returns (f, f', floor) at x for
    the entries ``active`` (an index array); an entry is done once |f| <= floor (the rounding
    level of f: every x there is a root to working precision), its Newton correction is below
    2e-15 relative, or its bracket is that narrow."""
    pos = f_lo > 0
    x = 0.5 * (lo + hi)
    lo, hi = lo.copy(), hi.copy()
    active = np.arange(x.size)
    for _ in range(iters):
        if active.size == 0:
            break
        xa = x[active]
        f, df, floor = fun(xa, active)
        left = (f > 0) == pos[active]
        la = np.where(left, xa, lo[active])
        ha = np.where(left, hi[active], xa)
        with np.errstate(divide="ignore", invalid="ignore"):
            newton = xa - f / df
        tol = 2e-15 * np.maximum(1.0, np.abs(xa))
        # converged when the Newton correction is below tol (even if it points at the bracket end)
        done = (np.abs(f) <= floor) | (np.abs(newton - xa) <= tol) | (ha - la <= tol)
        ok = np.isfinite(newton) & (newton > la) & (newton < ha)
        nx = np.where(ok | done, newton, 0.5 * (la + ha))
        nx = np.where(np.isfinite(nx), nx, xa)
        lo[active], hi[active] = la, ha
        x[active] = np.where(np.abs(f) <= floor, xa, nx)
        active = active[~done]
    return x


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


# ----------------------------------------------------------------- closed-form masses
def _rank_cdf_tails(law: RankLaw, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(I_r(x), J_r(x)) = (P(S_(r) <= x), P(S_(r) > x)) for all ranks, shape x.shape + (K,),
    each from its own tail (so both keep relative precision)."""
    K = law.K
    x = np.asarray(x, np.float64)
    # S_(r) <= x  <=>  Bin(K, Phi(x)) >= r: binomial-tail sums of positive terms (both tails
    # keep relative precision), all ranks at once from one row of K + 1 log-pmf terms
    j = np.arange(K + 1, dtype=np.float64)
    log_binom = special.gammaln(K + 1) - special.gammaln(j + 1) - special.gammaln(K - j + 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_pmf = log_binom + j * special.log_ndtr(x)[..., None] + (K - j) * special.log_ndtr(-x)[..., None]
        pmf = np.exp(log_pmf)
    pmf = np.where(np.isnan(pmf), 0.0, pmf)
    # x = -inf: all mass at j = 0; x = +inf: at j = K
    pmf[..., 0] = np.where(x == -np.inf, 1.0, pmf[..., 0])
    pmf[..., K] = np.where(x == np.inf, 1.0, pmf[..., K])
    upper = np.cumsum(pmf[..., :K], axis=-1)  # P(Bin < r), r = 1..K
    lower = np.cumsum(pmf[..., :0:-1], axis=-1)[..., ::-1]  # P(Bin >= r), r = 1..K
    return np.minimum(lower, 1.0), np.minimum(upper, 1.0)


def _G(law: RankLaw, x: np.ndarray, d: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """G(x) = int_{-inf}^x (q - p_omega), from deviations: -P(x - delta < Z < x) - sum eps_r I_r(x)
    (x <= 0), or -P(...) + sum eps_r J_r(x) (x > 0; sum eps = 0). G(+-inf) = 0."""
    finite = np.isfinite(x)
    xf = np.where(finite, x, 0.0)
    qdev = -normal_mass_below(xf, d)
    pdev = np.where(xf <= 0, lower @ law.eps, -(upper @ law.eps))
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


def _masses(law: RankLaw, d: np.ndarray, roots: np.ndarray, want_gradient: bool):
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
    L_first = float(curve(law, np.array([Z_LO]), derivatives=0).L[0])
    q_first = (L_first - d * Z_LO + 0.5 * d * d) < 0
    q_above = (q_first[:, None] ^ (np.arange(m + 1) % 2 == 1)[None, :]) & valid
    # order-statistic tails at every bound
    # tails at the crossings only (each bound of one piece is a bound of the next)
    lower_r, upper_r = _rank_cdf_tails(law, np.where(np.isnan(roots), 0.0, roots))
    zeros, ones = np.zeros((n, 1, law.K)), np.ones((n, 1, law.K))
    lower_lo, upper_lo = np.concatenate([zeros, lower_r], axis=1), np.concatenate([ones, upper_r], axis=1)
    lower_hi, upper_hi = np.concatenate([lower_r, ones], axis=1), np.concatenate([upper_r, zeros], axis=1)
    last = np.isinf(hi_f)  # the piece ending at +inf (after a row's last crossing)
    lower_hi = np.where(last[..., None], 1.0, lower_hi)
    upper_hi = np.where(last[..., None], 0.0, upper_hi)
    rank_mass = np.where((lo_f >= 0)[..., None], upper_lo - upper_hi, lower_hi - lower_lo)
    rank_mass = np.clip(rank_mass, 0.0, None)
    p_mass = rank_mass @ law.omega
    q_mass = normal_mass(lo_f - dd, hi_f - dd)
    acc = np.sum(np.where(valid, np.where(q_above, p_mass, q_mass), 0.0), axis=1)
    G_hi = _G(law, hi_f, dd, lower_hi, upper_hi)
    G_lo = _G(law, lo_f, dd, lower_lo, upper_lo)
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
            roots = crossings_batch(law, d[idx], pieces)
            a, rj, gr, piece_masses = _masses(law, d[idx], roots, gradient)
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
    r = np.arange(1, K + 1, dtype=np.float64)
    log_b = law.log_coef + (r - 1) * special.log_ndtr(c)[:, None] + (K - r) * special.log_ndtr(-c)[:, None]
    cv = curve(law, c, derivatives=1)
    log_q = -0.5 * (c - delta) ** 2 - LOG_SQRT_2PI
    with np.errstate(divide="ignore"):
        log_scale = log_q - 2.0 * cv.L - np.log(np.abs(cv.dL - delta))
    v = np.exp(np.minimum(0.5 * log_scale[:, None] + log_b, 300.0))
    return -(v.T @ v)
