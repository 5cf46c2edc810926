"""MCRS-2: min-max conditioned rank selection (issue 29.3), theory side (numpy/scipy only).

Rule. Sort the K drafts (u = Phi(s), i.i.d. U(0, 1)); l = the smallest, m = the largest. A policy
pi_r(i, j) (r = 1..K) picks rank r given that l lies in min-cell i and m in max-cell j. Max-cells
are the kernel's MCRS cells (:func:`speccheck.theory.mcrs.mcrs_edges`, "chebyshev", G2 cells);
min-cells are their mirror image on G1 cells (equal probability under the law of the min).

Density. (l, m) has density K (K - 1) (m - l)^(K-2) on 0 < l < m < 1, and given them the other
K - 2 drafts are i.i.d. U(l, m), so with L = x - l >= 0 and R = m - x >= 0 the selected density is

    rank 1 (x = l):   int pi_1(i(x), j(m)) K (K - 1) R^(K-2) dm            -> K [R_1^(K-1) - R_0^(K-1)] per max-cell,
    rank K (x = m):   int pi_K(i(l), j(x)) K (K - 1) L^(K-2) dl            -> K [L_1^(K-1) - L_0^(K-1)] per min-cell,
    1 < r < K:        K (K - 1) / B(r - 1, K - r) [L_1^(r-1) - L_0^(r-1)] / (r - 1) [R_1^(K-r) - R_0^(K-r)] / (K - r),

summed over cell pairs (i, j) with the pair's pi_r (L_1 = (x - a_i)_+, L_0 = (x - b_i)_+ over
min-cell [a_i, b_i); R_1 = (b_j - x)_+, R_0 = (a_j - x)_+ over max-cell [a_j, b_j)). So g is a
polynomial of degree <= K - 1 on every *piece* between consecutive edges of either cell system.

Representation (:class:`MinMaxPolicy`). On piece p = [e_p, e_{p+1}) of width w_p, g is stored
as sum_k c_{p,k} t^k with t = (e_{p+1} - x) / w_p in [0, 1] (computed from y = 1 - x near the
top, so the top pieces keep their precision), fitted exactly by interpolation at K Chebyshev
nodes of the directly evaluated g (a degree K - 1 polynomial is determined by K values; the fit's
error is checked at other nodes, <= ~1e-13 absolute). The verifier evaluates the SAME table (Horner
in t), and :func:`acceptance_of_minmax` integrates it exactly (crossings of f and g located per
piece and refined, q-masses in closed form, g-masses by Gauss-Legendre, exact for polynomials).

Optimal policy. P(accept) = int min(f, g) du with g linear in pi: on a quadrature in u, a linear
program in the pair probabilities x_{(i,j),r} = P(pair) pi_r(i, j) (columns scaled to conditional
densities, what lets HiGHS solve it; pairs with no mass dropped), solved by HiGHS's interior point
method without crossover (:func:`minmax_policy`). Every returned policy is checked by exact
evaluation against the best reference policy (the kernel's max-only MCRS policy and RASS's, both
lifted to the pairs, which they are special cases of): a policy below it is never returned.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize, sparse, special

from speccheck.errors import InputError
from speccheck.theory.exact import DELTA_UNDERFLOW
from speccheck.theory.mcrs.acceptance import S_HI_PAD, S_LO
from speccheck.theory.mcrs.cells import mcrs_edges
from speccheck.theory.mcrs.policies import CHECK_RTOL
from speccheck.theory.mcrs.quadrature import breakpoints, log_f, quadrature
from speccheck.theory.normal import normal_mass
from speccheck.theory.roots import brentq_many
from speccheck.theory.validate import check_delta, check_K

__all__ = [
    "MinMaxPolicy",
    "minmax_cells",
    "minmax_design",
    "minmax_policy",
    "acceptance_of_minmax",
    "lift_max_policy",
    "pair_probabilities",
]

MINMAX_LP_TIME_LIMIT = 120.0  # seconds per HiGHS run of the min-max LP (larger than MCRS's)
FIT_ATOL = 1e-11  # largest accepted error of the piece polynomials at check nodes (times max(1, |g|))


def minmax_cells(K: int, G1: int, G2: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(lo, lobar, hi, hibar): min-cell edges (mirror of the "chebyshev" max-cells on G1 cells,
    equal probability under the law of the min) and max-cell edges (G2 "chebyshev" cells), each in
    u and 1 - u, shapes (G1 + 1,), (G2 + 1,)."""
    a1, abar1 = mcrs_edges(K, G1)
    hi, hibar = mcrs_edges(K, G2)
    return abar1[::-1].copy(), a1[::-1].copy(), hi, hibar


def _pieces_edges(lo, lobar, hi, hibar) -> tuple[np.ndarray, np.ndarray]:
    """Merged, sorted, distinct edges of both cell systems plus u = 1/2, as (u, y)."""
    u = np.concatenate([lo, hi, [0.5]])
    y = np.concatenate([lobar, hibar, [0.5]])
    key = np.where(u < 0.5, u, 1.0 - y)
    order = np.lexsort((-y, key))
    u, y = u[order], y[order]
    keep = np.ones(u.shape, bool)
    keep[1:] = (np.diff(u) > 0) | (np.diff(-y) > 0)
    return u[keep], y[keep]


def pair_probabilities(K: int, lo: np.ndarray, lobar: np.ndarray, hi: np.ndarray,
                       hibar: np.ndarray) -> np.ndarray:
    """P(min in min-cell i, max in max-cell j), shape (G1, G2), from F(a, b) = P(a < all < b) =
    (b - a)_+^K by inclusion-exclusion (clipped at 0: rounding in the narrow tail pairs)."""
    def F(a, abar, b, bbar):
        w = np.where(b[None, :] > 0.5, abar[:, None] - bbar[None, :], b[None, :] - a[:, None])
        return np.clip(w, 0.0, None) ** K

    P = (F(lo[:-1], lobar[:-1], hi[1:], hibar[1:]) - F(lo[1:], lobar[1:], hi[1:], hibar[1:])
         - F(lo[:-1], lobar[:-1], hi[:-1], hibar[:-1]) + F(lo[1:], lobar[1:], hi[:-1], hibar[:-1]))
    return np.clip(P, 0.0, None)


def minmax_factors(u: np.ndarray, y: np.ndarray, K: int, lo: np.ndarray, lobar: np.ndarray, hi: np.ndarray,
                   hibar: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The density's separable factors: d g(x_n) / d pi_r(i, j) = A[r - 1, n, i] B[r - 1, n, j]
    (module docstring), shapes (K, N, G1) and (K, N, G2); x = u given with y = 1 - u accurately
    (differences to edges above 1/2 taken in y)."""
    u = np.asarray(u, np.float64)[:, None]
    y = np.asarray(y, np.float64)[:, None]
    up = u > 0.5

    def dist_below(e, ebar):  # (x - e)_+ for edges e
        return np.clip(np.where(up, ebar[None, :] - y, u - e[None, :]), 0.0, None)

    def dist_above(e, ebar):  # (e - x)_+
        return np.clip(np.where(up, y - ebar[None, :], e[None, :] - u), 0.0, None)

    L1, L0 = dist_below(lo[:-1], lobar[:-1]), dist_below(lo[1:], lobar[1:])  # (N, G1)
    R1, R0 = dist_above(hi[1:], hibar[1:]), dist_above(hi[:-1], hibar[:-1])  # (N, G2)
    N, G1, G2 = u.shape[0], lo.shape[0] - 1, hi.shape[0] - 1
    A, B = np.empty((K, N, G1)), np.empty((K, N, G2))
    A[0] = (L1 > 0) & (L0 == 0)  # x in min-cell i
    B[0] = K * (R1 ** (K - 1) - R0 ** (K - 1))
    A[K - 1] = K * (L1 ** (K - 1) - L0 ** (K - 1))
    B[K - 1] = (R1 > 0) & (R0 == 0)  # x in max-cell j
    for r in range(2, K):
        A[r - 1] = K * (K - 1) / special.beta(r - 1, K - r) * (L1 ** (r - 1) - L0 ** (r - 1)) / (r - 1)
        B[r - 1] = (R1 ** (K - r) - R0 ** (K - r)) / (K - r)
    if K == 1:  # one draft: it is both min and max (rank 1)
        A[0], B[0] = (L1 > 0) & (L0 == 0), (R1 > 0) & (R0 == 0)
    return A, B


def minmax_design(u: np.ndarray, y: np.ndarray, K: int, lo: np.ndarray, lobar: np.ndarray, hi: np.ndarray,
                  hibar: np.ndarray) -> np.ndarray:
    """D[n, i, j, r - 1] = d g(x_n) / d pi_r(i, j) = A[r-1, n, i] B[r-1, n, j] (:func:`minmax_factors`),
    shape (N, G1, G2, K)."""
    A, B = minmax_factors(u, y, K, lo, lobar, hi, hibar)
    return np.einsum("rni,rnj->nijr", A, B)


@dataclass(frozen=True, eq=False)
class MinMaxPolicy:
    """A min-max policy pi[i, j, r - 1] (rows on the simplex; pairs with no mass hold any row) on
    the cells of :func:`minmax_cells`, with its piecewise-polynomial density table.

    Fields set after init: eu, ey (piece edges in u and 1 - u, shape (P + 1,)), width (P,), coef
    (P, K): g = sum_k coef[p, k] t^k on piece p, t = (e_{p+1} - x) / width_p."""

    K: int
    G1: int
    G2: int
    pi: np.ndarray
    delta: float = float("nan")
    eu: np.ndarray = field(init=False, repr=False)
    ey: np.ndarray = field(init=False, repr=False)
    width: np.ndarray = field(init=False, repr=False)
    coef: np.ndarray = field(init=False, repr=False)

    def __post_init__(self):
        if self.pi.shape != (self.G1, self.G2, self.K):
            raise ValueError(f"pi must have shape (G1, G2, K) = {(self.G1, self.G2, self.K)}, got {self.pi.shape}")
        if (np.any(~np.isfinite(self.pi)) or np.any(self.pi < 0)
                or np.any(np.abs(self.pi.sum(axis=2) - 1.0) > 1e-9)):
            raise ValueError("min-max policy pi must have rows on the probability simplex")
        cells = minmax_cells(self.K, self.G1, self.G2)
        eu, ey = _pieces_edges(*cells)
        width = np.where(eu[1:] <= 0.5, eu[1:] - eu[:-1], ey[:-1] - ey[1:])
        object.__setattr__(self, "eu", eu)
        object.__setattr__(self, "ey", ey)
        object.__setattr__(self, "width", width)
        object.__setattr__(self, "coef", _fit_pieces(self.K, self.pi, cells, eu, ey, width))

    def density(self, u: np.ndarray, y: np.ndarray) -> np.ndarray:
        """g at x = u (y = 1 - u accurately), from the piece table (what the kernel evaluates)."""
        u, y = np.broadcast_arrays(np.asarray(u, np.float64), np.asarray(y, np.float64))
        p = piece_index(u, y, self.eu, self.ey)
        t = np.clip(np.where(u < 0.5, self.eu[p + 1] - u, y - self.ey[p + 1]) / self.width[p], 0.0, 1.0)
        c = self.coef[p]
        g = c[..., self.K - 1]
        for k in range(self.K - 2, -1, -1):
            g = g * t + c[..., k]
        return np.maximum(g, 0.0)


def mix_policies(p_lo: MinMaxPolicy, p_hi: MinMaxPolicy, t: float, delta: float) -> MinMaxPolicy:
    """(1 - t) p_lo + t p_hi (a policy; its g is the same mix, so the piece table is mixed too,
    with no refit)."""
    pol = object.__new__(MinMaxPolicy)
    pi = (1.0 - t) * p_lo.pi + t * p_hi.pi
    for name, value in (("K", p_lo.K), ("G1", p_lo.G1), ("G2", p_lo.G2), ("pi", pi), ("delta", float(delta)),
                        ("eu", p_lo.eu), ("ey", p_lo.ey), ("width", p_lo.width),
                        ("coef", (1.0 - t) * p_lo.coef + t * p_hi.coef)):
        object.__setattr__(pol, name, value)
    return pol


def piece_index(u: np.ndarray, y: np.ndarray, eu: np.ndarray, ey: np.ndarray) -> np.ndarray:
    """Piece p with e_p <= x < e_{p+1}, looked up in u below 1/2 and in y above."""
    P = eu.shape[0] - 1
    p_lo = np.searchsorted(eu, u, side="right") - 1
    p_hi = P - np.searchsorted(ey[::-1], y, side="left")
    return np.clip(np.where(u < 0.5, p_lo, p_hi), 0, P - 1)


def _cheb_nodes(n: int) -> np.ndarray:
    return 0.5 * (1.0 - np.cos(np.pi * (np.arange(n) + 0.5) / n))


def _piece_points(t: np.ndarray, eu, ey, width) -> tuple[np.ndarray, np.ndarray]:
    """(u, y) at relative positions t (shape (P, n)) of every piece, accurate at both ends."""
    lower = (eu[1:] <= 0.5)[:, None]
    z = t * width[:, None]
    u = np.where(lower, eu[1:, None] - z, 1.0 - (ey[1:, None] + z))
    y = np.where(lower, 1.0 - u, ey[1:, None] + z)
    return u, y


def _direct_density(K: int, pi: np.ndarray, cells, u: np.ndarray, y: np.ndarray) -> np.ndarray:
    """g at the points (u, y) (1-d) summed directly over the cell pairs (no piece table):
    sum_r sum_ij A_r(x, i) pi_r(i, j) B_r(x, j)."""
    A, B = minmax_factors(u, y, K, *cells)
    return np.einsum("rni,ijr,rnj->n", A, pi, B, optimize=True)


def _fit_pieces(K: int, pi: np.ndarray, cells, eu, ey, width) -> np.ndarray:
    """coef[p, k] of g on each piece in t (module docstring): interpolation at K Chebyshev nodes,
    checked at K + 1 other nodes (ValueError beyond :data:`FIT_ATOL`)."""
    P = width.shape[0]
    t = _cheb_nodes(K)
    u, y = _piece_points(np.tile(t, (P, 1)), eu, ey, width)
    g = _direct_density(K, pi, cells, u.ravel(), y.ravel()).reshape(P, K)
    V = t[:, None] ** np.arange(K)[None, :]
    coef = np.linalg.solve(V, g.T).T  # (P, K)
    tc = _cheb_nodes(K + 1)
    uc, yc = _piece_points(np.tile(tc, (P, 1)), eu, ey, width)
    gc = _direct_density(K, pi, cells, uc.ravel(), yc.ravel()).reshape(P, K + 1)
    fit = (tc[:, None] ** np.arange(K)[None, :]) @ coef.T  # (K + 1, P)
    err = np.abs(fit.T - gc) / np.maximum(1.0, np.abs(gc))
    if err.max() > FIT_ATOL:
        raise ValueError(f"min-max piece polynomial fit error {err.max():.2e} > {FIT_ATOL}")
    return coef


def lift_max_policy(pi_max: np.ndarray, G1: int) -> np.ndarray:
    """A max-only policy pi_r(j) on the G2 max-cells as a min-max policy (the same row for every
    min-cell): shape (G1, G2, K)."""
    return np.broadcast_to(pi_max[None, :, :], (G1,) + pi_max.shape).copy()


def uniform_minmax(K: int, G1: int, G2: int) -> MinMaxPolicy:
    return MinMaxPolicy(K, G1, G2, np.full((G1, G2, K), 1.0 / K), 0.0)


# ----------------------------------------------------------------------------- exact evaluation
_N_SCAN = 256  # per piece: uniform in s and uniform in u
_EDGE_SCAN = np.geomspace(1e-14, 0.25, 64)  # per piece end: relative distances, log-spaced
_GOLDEN_STEPS = 80  # golden-section steps on a dip (shrinks its bracket by 0.618^80 ~ 2e-17)
_GL_T, _GL_W = (0.5 * (np.polynomial.legendre.leggauss(8)[0] + 1.0), 0.5 * np.polynomial.legendre.leggauss(8)[1])


def _edge_s(u: np.ndarray, y: np.ndarray) -> np.ndarray:
    """s = Phi^-1(u), accurate at both ends (-inf at u = 0, +inf at y = 0)."""
    with np.errstate(divide="ignore"):
        return np.where(u < 0.5, special.ndtri(u), -special.ndtri(y))


def _h(s, delta: float, pol: MinMaxPolicy):
    s = np.asarray(s, np.float64)
    with np.errstate(divide="ignore"):
        return delta * s - 0.5 * delta * delta - np.log(pol.density(special.ndtr(s), special.ndtr(-s)))


def _h_on_piece(s: np.ndarray, piece: np.ndarray, delta: float, pol: MinMaxPolicy) -> np.ndarray:
    """log f - log g at s (any shape) with g the polynomial of the given piece (broadcast with s),
    also at the piece's own edges (where :meth:`MinMaxPolicy.density` would read the next piece)."""
    u, y = special.ndtr(s), special.ndtr(-s)
    lower = pol.eu[piece + 1] <= 0.5
    t = np.clip(np.where(lower, pol.eu[piece + 1] - u, y - pol.ey[piece + 1]) / pol.width[piece], 0.0, 1.0)
    c = pol.coef[piece]
    g = c[..., pol.K - 1]
    for k in range(pol.K - 2, -1, -1):
        g = g * t + c[..., k]
    with np.errstate(divide="ignore"):
        return delta * s - 0.5 * delta * delta - np.log(np.maximum(g, 0.0))


def _scan(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Scan points of every piece [lo_p, hi_p] (rows, sorted, both ends included): uniform in s,
    uniform in u (in 1 - u above 1/2) and log-spaced towards both ends (where g jumps to the next
    piece's polynomial, crossings come in close pairs: ~1e-4 apart at K = 3, delta = 0.5)."""
    t = np.linspace(0.0, 1.0, _N_SCAN)
    w = (hi - lo)[:, None]
    ss = lo[:, None] + w * t[None, :]
    ulo, uhi, ylo, yhi = special.ndtr(lo), special.ndtr(hi), special.ndtr(-lo), special.ndtr(-hi)
    upper = (uhi > 0.5)[:, None]
    with np.errstate(divide="ignore"):
        su = np.where(upper, -special.ndtri(ylo[:, None] + (yhi - ylo)[:, None] * t[None, 1:-1]),
                      special.ndtri(ulo[:, None] + (uhi - ulo)[:, None] * t[None, 1:-1]))
    su = np.where(np.isfinite(su), su, ss[:, 1:-1])
    ends = np.concatenate([lo[:, None] + w * _EDGE_SCAN, hi[:, None] - w * _EDGE_SCAN], axis=1)
    return np.sort(np.clip(np.concatenate([ss, su, ends], axis=1), lo[:, None], hi[:, None]), axis=1)


def _dips(ss: np.ndarray, hv: np.ndarray, piece: np.ndarray, d: float, pol: MinMaxPolicy):
    """Pairs of crossings between scan points: at every interior local minimum of |h| on the scan
    where h keeps its sign, h's extremum is located by golden section on the two neighbouring
    steps; where it has the other sign, its two crossings are bracketed. Returns (rows, a, b)
    brackets (each with a sign change)."""
    m = hv[:, 1:-1]
    left, right = hv[:, :-2], hv[:, 2:]
    finite = np.isfinite(left) & np.isfinite(m) & np.isfinite(right)
    dip = finite & (((m > 0) & (left > 0) & (right > 0) & (m <= left) & (m <= right))
                    | ((m < 0) & (left < 0) & (right < 0) & (m >= left) & (m >= right)))
    rows, cols = np.nonzero(dip)
    if rows.size == 0:
        return rows, np.empty(0), np.empty(0)
    sign = np.sign(m[rows, cols])  # minimise sign * h: towards zero
    a, b = ss[rows, cols].copy(), ss[rows, cols + 2].copy()
    pc = piece[rows]
    ratio = 0.5 * (np.sqrt(5.0) - 1.0)
    x1, x2 = b - ratio * (b - a), a + ratio * (b - a)
    f1, f2 = sign * _h_on_piece(x1, pc, d, pol), sign * _h_on_piece(x2, pc, d, pol)
    for _ in range(_GOLDEN_STEPS):
        go_left = f1 < f2
        b = np.where(go_left, x2, b)
        a = np.where(go_left, a, x1)
        x2n = np.where(go_left, x1, a + ratio * (b - a))
        x1n = np.where(go_left, b - ratio * (b - a), x2)
        f2n = np.where(go_left, f1, np.nan)
        f1n = np.where(go_left, np.nan, f2)
        new = np.where(go_left, x1n, x2n)
        fn = sign * _h_on_piece(new, pc, d, pol)
        x1, x2 = x1n, x2n
        f1, f2 = np.where(go_left, fn, f1n), np.where(go_left, f2n, fn)
    x_star = np.where(f1 < f2, x1, x2)
    crossed = np.minimum(f1, f2) < 0
    lo_pt, hi_pt, mid = ss[rows, cols][crossed], ss[rows, cols + 2][crossed], x_star[crossed]
    r = rows[crossed]
    return np.concatenate([r, r]), np.concatenate([lo_pt, mid]), np.concatenate([mid, hi_pt])


def _g_masses(s0: np.ndarray, s1: np.ndarray, pol: MinMaxPolicy) -> np.ndarray:
    """int g du over [Phi(s0), Phi(s1)] for segments inside one piece each (g polynomial there:
    8-point Gauss-Legendre is exact), in u below 1/2 and in y = 1 - u above."""
    u0, u1, y0, y1 = special.ndtr(s0), special.ndtr(s1), special.ndtr(-s0), special.ndtr(-s1)
    upper = (u1 > 0.5)[:, None]
    uu = u0[:, None] + (u1 - u0)[:, None] * _GL_T[None, :]
    yy = y0[:, None] + (y1 - y0)[:, None] * _GL_T[None, :]
    g = pol.density(np.where(upper, 1.0 - yy, uu), np.where(upper, yy, 1.0 - uu))
    width = np.where(upper[:, 0], y0 - y1, u1 - u0)
    return width * (g @ _GL_W)


def acceptance_of_minmax(delta: float, pol: MinMaxPolicy) -> float:
    """int min(q, p_pi) ds for the policy at delta, evaluated exactly (cached per (delta, policy)):
    on every piece (g one polynomial there, read as such up to the piece's edges) the crossings of
    log f and log g are bracketed on a scan (uniform in s and in u, log-spaced towards both
    ends, and the dips of |h| between scan points located by golden section: pairs of close
    crossings) and refined (brentq's roots, all at once: :func:`speccheck.theory.roots.brentq_many`),
    q-masses in closed form, g-masses by Gauss-Legendre (exact for the polynomial)."""
    return _acceptance_cached(float(check_delta(delta)), pol)


@functools.lru_cache(maxsize=4096)
def _acceptance_cached(d: float, pol: MinMaxPolicy) -> float:
    if d == 0.0:
        return 1.0 if np.allclose(pol.pi, 1.0 / pol.K) else _acceptance_zero(pol)
    if d > DELTA_UNDERFLOW:  # every acceptance is < 1e-340 (and delta^2 may overflow): 0 in double
        return 0.0
    lo = np.maximum(_edge_s(pol.eu[:-1], pol.ey[:-1]), S_LO)
    hi = np.minimum(_edge_s(pol.eu[1:], pol.ey[1:]), d + S_HI_PAD)
    piece = np.nonzero(hi > lo)[0]
    lo, hi = lo[piece], hi[piece]
    ss = _scan(lo, hi)
    hv = _h_on_piece(ss, piece[:, None], d, pol)
    pos = hv > 0
    # crossings: sign changes between scan points (finite both sides), and the dips' pairs
    rows, cols = np.nonzero((pos[:, 1:] != pos[:, :-1]) & (ss[:, 1:] > ss[:, :-1]))
    finite = np.isfinite(hv[rows, cols]) & np.isfinite(hv[rows, cols + 1])
    d_rows, d_a, d_b = _dips(ss, hv, piece, d, pol)
    b_rows = np.concatenate([rows[finite], d_rows])
    a = np.concatenate([ss[rows, cols][finite], d_a])
    b = np.concatenate([ss[rows, cols + 1][finite], d_b])
    roots = brentq_many(lambda x, i: _h_on_piece(x, piece[b_rows[i]], d, pol), a, b, xtol=1e-15, indexed=True)
    # where g = 0 on one side (log g = -inf) the cut is the scan point next to the finite value
    inf_rows = rows[~finite]
    inf_cut = np.where(np.isfinite(hv[rows, cols]), ss[rows, cols + 1], ss[rows, cols])[~finite]
    seg_row = np.concatenate([np.arange(piece.size), np.arange(piece.size), b_rows, inf_rows])
    seg_x = np.concatenate([lo, hi, roots, inf_cut])
    order = np.lexsort((seg_x, seg_row))
    seg_row, seg_x = seg_row[order], seg_x[order]
    same = seg_row[1:] == seg_row[:-1]
    s0, s1, p_of = seg_x[:-1][same], seg_x[1:][same], piece[seg_row[:-1][same]]
    keep = s1 > s0
    s0, s1, p_of = s0[keep], s1[keep], p_of[keep]
    q_above = _h_on_piece(0.5 * (s0 + s1), p_of, d, pol) > 0
    total = float(np.sum(_g_masses(s0[q_above], s1[q_above], pol)))
    total += float(np.sum(normal_mass(s0[~q_above] - d, s1[~q_above] - d)))
    return float(min(max(total, 0.0), 1.0))


def _acceptance_zero(pol: MinMaxPolicy) -> float:
    t = np.linspace(0.0, 1.0, 513)
    mid = 0.5 * (t[1:] + t[:-1])
    u, y = _piece_points(np.tile(mid, (pol.width.shape[0], 1)), pol.eu, pol.ey, pol.width)
    g = pol.density(u, y)
    return float(np.sum(np.minimum(g, 1.0).mean(axis=1) * pol.width))


# ----------------------------------------------------------------------------- the LP
def _solve_lp(delta: float, K: int, G1: int, G2: int, n_target: int, crossover: bool = False) -> np.ndarray:
    """Hinge LP in the scaled pair variables (module docstring); returns pi, shape (G1, G2, K)."""
    cells = minmax_cells(K, G1, G2)
    lo, lobar, hi, hibar = cells
    bu, by = breakpoints(delta, np.concatenate([lo, hi]), np.concatenate([lobar, hibar]), n_target)
    u, y, w = quadrature(bu, by)
    f = np.exp(log_f(u, y, delta))
    D = minmax_design(u, y, K, *cells).reshape(u.shape[0], G1 * G2, K)
    P = np.einsum("m,mtk->tk", w, D).mean(axis=1)  # P(pair) on the quadrature (each rank's column integrates to it)
    live = P > 1e-300
    Ds = D[:, live, :] / P[live][None, :, None]
    Ds[Ds < 1e-13] = 0.0
    M, T = u.shape[0], int(live.sum())
    A = sparse.csr_matrix(Ds.reshape(M, T * K))
    A_ub = sparse.hstack([-A, sparse.identity(M, format="csr")], format="csr")
    A_eq = sparse.hstack([sparse.kron(sparse.identity(T), np.ones((1, K))), sparse.csr_matrix((T, M))], format="csr")
    bounds = np.concatenate([np.column_stack([np.zeros(T * K), np.repeat(P[live], K)]),
                             np.column_stack([np.zeros(M), f])])
    options = {"time_limit": MINMAX_LP_TIME_LIMIT}
    if not crossover:
        options["run_crossover"] = "off"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optimize.OptimizeWarning)
        res = optimize.linprog(np.concatenate([np.zeros(T * K), -w]), A_ub=A_ub, b_ub=np.zeros(M), A_eq=A_eq,
                               b_eq=P[live], bounds=bounds, method="highs-ipm", options=options)
    if res.x is None or not np.all(np.isfinite(res.x)):
        raise RuntimeError(f"min-max LP failed at delta={delta}, K={K}, G1={G1}, G2={G2}: {res.message}")
    pi = np.full((G1 * G2, K), 1.0 / K)
    x = np.clip(res.x[:T * K].reshape(T, K), 0.0, None)
    s = x.sum(axis=1, keepdims=True)
    pi[live] = np.where(s > 0, x / np.where(s > 0, s, 1.0), 1.0 / K)
    return pi.reshape(G1, G2, K)


def minmax_policy(delta: float, K: int, G1: int, G2: int, references: tuple = (), n_target: int = 96) -> MinMaxPolicy:
    """The checked LP policy at delta: the LP's policy if its exact acceptance reaches the best of
    ``references`` (feasible (G1, G2, K) policies, e.g. lifted max-only ones) within
    :data:`CHECK_RTOL`, else that reference; a solver failure also falls back to it."""
    d = float(check_delta(delta))
    K = check_K(K)
    if K < 2:
        raise InputError(f"the min-max policy needs K >= 2, got K={K}")
    refs = [MinMaxPolicy(K, G1, G2, np.asarray(r, np.float64), d) for r in references]
    ref_acc = [acceptance_of_minmax(d, r) for r in refs]
    level = max(ref_acc, default=0.0) * (1.0 - CHECK_RTOL)
    for n_t, crossover in ((n_target, False), (int(n_target * 4 / 3), False)):
        try:
            pol = MinMaxPolicy(K, G1, G2, _solve_lp(d, K, G1, G2, n_t, crossover), d)
        except (RuntimeError, ValueError):
            continue
        if acceptance_of_minmax(d, pol) >= level:
            return pol
    if not refs:
        raise RuntimeError(f"min-max LP failed at delta={d}, K={K} and no reference policy was given")
    return refs[int(np.argmax(ref_acc))]
