"""MCRS: max-conditioned rank selection (issue 7), theory side (numpy/scipy only).

Coordinates. u = Phi(s), y = 1 - u = Phibar(s) (kept separately: the target lives at y ~
Phibar(delta), far below float resolution of 1 - u). Drafts u_1..u_K are i.i.d. U(0, 1);
the target density in u is f(u) = rho(s) = exp(delta s - delta^2 / 2).

Rule. m = max_k u_k; given m the other K - 1 drafts are i.i.d. U(0, m). A policy
pi_r(m) (r = 1..K, sum_r pi_r(m) = 1) picks rank r (r = K: m itself; r < K: the r-th
smallest draft). Given m, the r-th smallest is m * Beta(r, K - r), so the selected density is

    g(x) = K x^(K-1) pi_K(x) + sum_{r<K} int_x^1 pi_r(m) K m^(K-2) beta_{r,K-r}(x/m) dm.

The m-integrand simplifies: K m^(K-2) beta_{r,K-r}(x/m) = C_r x^(r-1) n (m - x)^(n-1) with
n = K - r and C_r = K! / ((r-1)! (K-r)!) (the m powers cancel), so for pi_r constant on a
cell [a, b] (b > x)

    int_{max(a,x)}^b ... dm = pi_r C_r x^(r-1) [ (b - x)^n - (max(a, x) - x)^n ],

a polynomial: on each policy cell j = [a_j, a_{j+1}) g is a polynomial of degree <= K - 1 in x.
We store it as g(x) = sum_r C_r x^(r-1) Q_{r,j}(z), z = a_{j+1} - x >= 0, where
Q_{r,j}(z) = pi_{r,j} z^n + n sum_{k<n} binom(n-1, k) z^k M_{r,j,n-1-k} and
M_{r,j,p} = int_{a_{j+1}}^1 pi_r(m) (m - a_{j+1})^p dm >= 0: every coefficient is >= 0, so
evaluation has no cancellation. A constant policy pi_r = omega_r gives RASS's p_omega.

Optimal policy. P(accept) = int_0^1 min(f, g) du is concave and g is linear in pi, so on a
quadrature in u it is a linear program in K*G policy variables and M hinge variables
(max sum_i w_i h_i, h_i <= f(x_i), h_i <= g(x_i), sum_r pi_{r,j} = 1, pi >= 0); above 64
cells it is written with the moments M_{r,j,p} as extra variables (sparse, :func:`_moment_lp`).
``acceptance_mcrs`` then evaluates the returned policy exactly (closed-form g, crossings of
f and g located on each cell and refined, exact masses), not on the LP's quadrature.

Measurements for the gap that max-conditioning leaves live in :mod:`research.mcrs_research`
(theory/mcrs_gap_table.md, theory/mcrs_minmax_table.md): ``max_conditioned_bound`` (no policy of
the largest draft accepts more), ``top2_lp_acceptance`` (policy on the two largest drafts) and
``minmax_lp_acceptance`` (policy on the smallest and the largest draft).
"""

from __future__ import annotations

import functools
import hashlib
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike
from scipy import optimize, sparse, special

from speccheck.errors import InputError
from speccheck.theory.exact import DELTA_UNDERFLOW
from speccheck.theory.normal import normal_mass
from speccheck.theory.roots import brentq_many
from speccheck.theory.validate import check_delta, check_K

__all__ = [
    "MCRSPolicy",
    "mcrs_edges",
    "grid_kind",
    "mcrs_policy",
    "mcrs_density",
    "mcrs_log_density_s",
    "acceptance_mcrs",
    "acceptance_of_policy",
    "uniform_policy",
    "constant_policy",
    "gap_closed_mcrs",
    "kernel_policy",
    "shipped_policies",
]

DEFAULT_G = 64  # policy cells: the kernel's (KERNEL_G), so every default names the same policy family
GRID_KIND = "chebyshev"  # the kernel's cell placement (shipped policies); see :func:`mcrs_edges`
GRID_KINDS = ("chebyshev", "quantile", "sine")
_GRID = GRID_KIND
LP_TIME_LIMIT = 60.0  # seconds per HiGHS run; its last iterate is still judged by the exact check
_TOP_RANK_DELTA = 12.0  # beyond this delta the LP is skipped: pi_K = 1 (RASS top rank)


def rank_coeffs(K: int) -> np.ndarray:
    """C_r = K! / ((r-1)! (K-r)!), r = 1..K (shape (K,))."""
    r = np.arange(1, K + 1)
    return np.exp(special.gammaln(K + 1) - special.gammaln(r) - special.gammaln(K - r + 1))


_rank_coeffs = rank_coeffs


def grid_kind(kind: str | None = None) -> str:
    """The cell placement ``kind`` (None: :data:`GRID_KIND`, the kernel's), validated."""
    kind = GRID_KIND if kind is None else kind
    if kind not in GRID_KINDS:
        raise InputError(f"kind must be one of {', '.join(GRID_KINDS)} (or None), got kind={kind!r}")
    return kind


def mcrs_edges(K: int, G: int = DEFAULT_G, kind: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Policy cells a_0 = 0 < a_1 < ... < a_G = 1 in m, returned as (a, 1 - a), both accurate,
    shape (G + 1,). Every placement is a_j = T(j / G) for a fixed increasing T, so the cells
    nest (the edges on G / 2 cells are every other edge on G cells).

    kind (default :data:`GRID_KIND`, the kernel's placement of the shipped policies):

    * ``"chebyshev"``: m_j^K = sin^2(pi j / 2G): cells of equal probability under the law of the
      max, refined quadratically at both ends;
    * ``"quantile"``: m_j^K = j / G (equal probability, no refinement);
    * ``"sine"``: m_j = sin(pi j / 2G), i.e. the Chebyshev placement in m^2 instead of m^K:
      near-uniform in m at the bottom, refined quadratically at the top. At small delta the
      optimal policy switches ranks at m ~ 0.05-0.3, where the max has probability ~m^K and the
      "chebyshev" cells are wide (K = 4, G = 160: width 0.02-0.04 there, <= 0.0098 for "sine");
      the gap table's solver uses it (measurements: `docs/mcrs.md`).
    """
    K = check_K(K)
    kind = grid_kind(kind)
    if int(G) < 1:
        raise InputError(f"G must be an integer >= 1, got G={G!r}")
    G = int(G)
    j = np.arange(G + 1, dtype=np.float64)
    x = 0.5 * np.pi * j / G
    if kind == "sine":
        a = np.sin(x)
        abar = np.cos(x) ** 2 / (1.0 + a)  # 1 - sin x without cancellation
    else:
        if kind == "chebyshev":
            # v_j = sin^2(x) (and 1 - v_j = cos^2 x), log v taken accurately at both ends
            v = np.sin(x) ** 2
            with np.errstate(divide="ignore"):
                lg = np.log(v) / K
                lg = np.where(v > 0.5, np.log1p(-np.cos(x) ** 2) / K, lg)
        else:
            with np.errstate(divide="ignore"):
                lg = np.log(j / G) / K
        a = np.exp(lg)
        abar = -np.expm1(lg)
    a[0], abar[0] = 0.0, 1.0
    a[-1], abar[-1] = 1.0, 0.0
    return a, abar


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


def _cell_index(u: np.ndarray, y: np.ndarray, a: np.ndarray, abar: np.ndarray) -> np.ndarray:
    """Cell j with a_j <= x < a_{j+1}, looked up in u below 1/2 and in y = 1 - u above."""
    G = a.shape[0] - 1
    j_lo = np.searchsorted(a, u, side="right") - 1
    # abar is decreasing; a_j <= x  <=>  abar_j >= y
    j_hi = G - np.searchsorted(abar[::-1], y, side="left")
    j = np.where(u < 0.5, j_lo, j_hi)
    return np.clip(j, 0, G - 1)


def mcrs_density(u: ArrayLike, y: ArrayLike, policy: MCRSPolicy) -> np.ndarray:
    """Selected-draft density g_pi at x = u (y = 1 - u given accurately), broadcast shape."""
    u, y = np.broadcast_arrays(np.asarray(u, np.float64), np.asarray(y, np.float64))
    K = policy.K
    j = _cell_index(u, y, policy.a, policy.abar)
    z = np.maximum(y - policy.abar[j + 1], 0.0)  # a_{j+1} - x
    powz = z[..., None] ** np.arange(K)  # (..., K)
    Q = np.einsum("...rk,...k->...r", policy.coef[j], powz)  # (..., K)
    C = _rank_coeffs(K)
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


# ----------------------------------------------------------------------------- quadrature
def _gl(n: int):
    t, w = np.polynomial.legendre.leggauss(n)
    return 0.5 * (t + 1.0), 0.5 * w


_GL_T, _GL_W = _gl(6)


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
    gt, gw = _gl(n_gl)
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


def _design_matrix(u, y, K, a, abar):
    """A[i, j*K + r - 1] = d g(x_i) / d pi_{r,j} (dense), shape (M, G*K)."""
    G = a.shape[0] - 1
    C = _rank_coeffs(K)
    j = _cell_index(u, y, a, abar)
    # b_c - x and a_c - x, accurately: = y - abar_{c+1}, y - abar_c
    hi = np.maximum(y[:, None] - abar[None, 1:], 0.0)
    lo = np.maximum(y[:, None] - abar[None, :-1], 0.0)
    A = np.zeros((u.shape[0], G, K))
    for r in range(1, K):
        n = K - r
        A[:, :, r - 1] = C[r - 1] * u[:, None] ** (r - 1) * (hi**n - lo**n)
    A[np.arange(u.shape[0]), j, K - 1] = K * u ** (K - 1)
    return A.reshape(u.shape[0], G * K)


def _highs_solve(cost: np.ndarray, A_ub: sparse.csr_matrix, A_eq: sparse.csr_matrix, bounds: np.ndarray,
                 method: str, b_eq: np.ndarray | None = None) -> tuple[np.ndarray | None, str]:
    """min cost.x s.t. A_ub x <= 0, A_eq x = b_eq (default 1), bounds, with HiGHS through scipy (time limit
    :data:`LP_TIME_LIMIT`). method "ipm": interior point WITHOUT crossover (HiGHS's
    ``run_crossover``, which scipy passes through verbatim); "simplex": dual simplex. Returns
    (x or None, HiGHS's message); x may be the last iterate of a run stopped by the time limit
    (callers only ever use it through the exact check)."""
    options: dict = {"time_limit": float(LP_TIME_LIMIT)}
    if method == "ipm":
        options["run_crossover"] = "off"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optimize.OptimizeWarning)  # "options passed to HiGHS verbatim"
        b_eq = np.ones(A_eq.shape[0]) if b_eq is None else b_eq
        res = optimize.linprog(cost, A_ub=A_ub, b_ub=np.zeros(A_ub.shape[0]), A_eq=A_eq, b_eq=b_eq, bounds=bounds,
                               method="highs-ipm" if method == "ipm" else "highs-ds", options=options)
    x = res.x
    if x is None or x.shape != (cost.shape[0],) or not np.all(np.isfinite(x)):
        return None, str(res.message)
    return np.asarray(x, np.float64), str(res.message)


# Design-matrix entries below this are dropped: they change g by < G K 1e-13 on the LP's
# quadrature only (the exact check evaluates the policy itself), and the subnormal entries
# (hi^n - lo^n of narrow cells, n up to K - 1) otherwise reach 1e-308 and wreck HiGHS's scaling.
_DESIGN_DROP = 1e-13


# Above this many cells the hinge LP is written in moment form (:func:`_moment_lp`, sparse); at
# and below it in the dense form the kernel's shipped G = 64 policies (and their G = 32 check) were
# solved with, so the kernel's policies and their checks do not move.
MOMENT_FORM_ABOVE_G = 64


def _dense_lp(u, y, w, f, K, a, abar):
    """The hinge LP with the dense design (g(x_i) = A[i] . pi): variables [pi (G*K), h (M)]."""
    G, M = a.shape[0] - 1, u.shape[0]
    design = _design_matrix(u, y, K, a, abar)
    design[np.abs(design) < _DESIGN_DROP] = 0.0
    n_pi = G * K
    A_ub = sparse.hstack([-sparse.csr_matrix(design), sparse.identity(M, format="csr")], format="csr")
    A_eq = sparse.hstack([sparse.kron(sparse.identity(G), np.ones((1, K))), sparse.csr_matrix((G, M))], format="csr")
    bounds = np.concatenate([np.column_stack([np.zeros(n_pi), np.ones(n_pi)]), np.column_stack([np.zeros(M), f])])
    return np.concatenate([np.zeros(n_pi), -w]), A_ub, A_eq, np.ones(G), bounds


def _moment_lp(u, y, w, f, K, a, abar):
    """The hinge LP in moment form: variables [pi (G*K), M_{r,j,p} / scale_{j,p} (G K (K-1) / 2), h (M)].

    With the moments M_{r,j,p} = int_{a_{j+1}}^1 pi_r(m) (m - a_{j+1})^p dm (p < K - r) as
    variables, g at a node x in cell j is the module docstring's
    sum_r C_r x^(r-1) [pi_{r,j} z^n + n sum_k binom(n-1, k) z^k M_{r,j,n-1-k}], z = a_{j+1} - x,
    i.e. K + K (K - 1) / 2 entries per hinge row instead of up to G K, and the moments obey the
    recursion (h = a_{j+2} - a_{j+1}, the width of cell j + 1; M_{r,G-1,p} = 0)

        M_{r,j,p} = pi_{r,j+1} h^(p+1) / (p + 1) + sum_{q<=p} binom(p, q) h^(p-q) M_{r,j+1,q},

    every coefficient >= 0 (no cancellation). Each moment is divided by that of pi = 1,
    scale_{j,p} = (1 - a_{j+1})^(p+1) / (p + 1), so the variables lie in [0, 1] (unscaled they
    span ~30 orders of magnitude and HiGHS's interior point stopped with status 15). Same LP as
    the dense form (same optimum up to HiGHS's tolerances), O(M K^2 + G K^3) nonzeros instead of
    O(M G K): K = 4, delta = 0.1, G = 640 solves in ~4 s instead of ~80 s, G = 1280 in ~10 s."""
    G, M = a.shape[0] - 1, u.shape[0]
    C = _rank_coeffs(K)
    cell = _cell_index(u, y, a, abar)
    z = np.maximum(y - abar[cell + 1], 0.0)
    width = np.where(a[1:] <= 0.5, a[1:] - a[:-1], abar[:-1] - abar[1:])
    # variables are the scaled moments M / scale, scale_{j,p} = (1 - a_{j+1})^(p+1) / (p + 1) (the
    # moment of pi = 1), so they lie in [0, 1] instead of spanning ~30 orders of magnitude
    tail = abar[1:]
    scale = {p: np.maximum(tail ** (p + 1) / (p + 1), 1e-300) for p in range(K - 1)}
    n_pi = G * K
    moment = {}  # (r, p) -> first variable index (cells j = 0..G-1 follow)
    for r in range(1, K):
        for p in range(K - r):
            moment[(r, p)] = n_pi + len(moment) * G
    h0 = n_pi + len(moment) * G
    n_var = h0 + M
    triplets: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def put(rows, cols, values):
        rows, cols = np.broadcast_arrays(rows, cols)
        values = np.broadcast_to(np.asarray(values, np.float64), rows.shape)
        keep = np.abs(values) >= _DESIGN_DROP
        triplets.append((rows[keep], cols[keep], values[keep]))

    def matrix(n_rows):
        rows, cols, values = (np.concatenate(t) for t in zip(*triplets))
        triplets.clear()
        return sparse.csr_matrix((values, (rows, cols)), shape=(n_rows, n_var))

    node = np.arange(M)
    put(node, h0 + node, 1.0)  # h_i - g(x_i) <= 0
    put(node, cell * K + K - 1, -K * u ** (K - 1))
    for r in range(1, K):
        n = K - r
        x_pow = C[r - 1] * u ** (r - 1)
        put(node, cell * K + r - 1, -x_pow * z**n)
        for k in range(n):
            p = n - 1 - k
            put(node, moment[(r, p)] + cell, -x_pow * n * math.comb(n - 1, k) * z**k * scale[p][cell])
    A_ub = matrix(M)
    put(np.arange(G)[:, None], np.arange(G)[:, None] * K + np.arange(K)[None, :], 1.0)  # sum_r pi_{r,j} = 1
    n_eq = G
    j = np.arange(G - 1)
    h = width[1:]
    for r in range(1, K):
        for p in range(K - r):
            rows = n_eq + j  # the recursion divided by scale_{j,p}
            put(rows, moment[(r, p)] + j, 1.0)
            for q in range(p + 1):
                put(rows, moment[(r, q)] + j + 1, -math.comb(p, q) * h ** (p - q) * scale[q][j + 1] / scale[p][j])
            put(rows, (j + 1) * K + r - 1, -h ** (p + 1) / (p + 1) / scale[p][j])
            n_eq += G - 1
    A_eq = matrix(n_eq)
    b_eq = np.concatenate([np.ones(G), np.zeros(n_eq - G)])
    upper = np.concatenate([np.ones(n_pi), np.full(h0 - n_pi, 1.0), f])  # scaled moments <= 1
    for first in moment.values():
        upper[first + G - 1] = 0.0  # nothing above the top cell
    cost = np.concatenate([np.zeros(h0), -w])
    return cost, A_ub, A_eq, b_eq, np.column_stack([np.zeros(n_var), upper])


def _solve_lp(delta: float, K: int, G: int, n_target: int, n_gl: int = 6, method: str = "ipm",
              kind: str | None = None) -> MCRSPolicy:
    """Hinge LP: max w.h s.t. h <= g(x) (linear in pi), sum_r pi_{r,j} = 1, 0 <= h <= f, written
    densely (variables [pi (G*K), h (M)]) for G <= :data:`MOMENT_FORM_ABOVE_G` and in moment
    form (:func:`_moment_lp`, sparse) above.

    Solved by HiGHS's interior point method without crossover (``method="ipm"``): the LP is
    massively degenerate (at small delta f is nearly flat and h_i = f_i = g_i at most nodes), so
    simplex and IPM's crossover to a vertex stall on it (K = 16, delta = 0.05, G = 64: > 300 s
    with crossover, 2.6 s without); an interior optimum is as good a policy (same objective),
    and pi is clipped and renormalised onto the simplex. ``method="simplex"`` is the fallback.
    The returned policy is judged only by its exact acceptance (:func:`checked_policy`)."""
    a, abar = mcrs_edges(K, G, kind)
    bu, by = breakpoints(delta, a, abar, n_target)
    u, y, w = quadrature(bu, by, n_gl)
    f = np.exp(log_f(u, y, delta))
    n_pi = G * K
    if G > MOMENT_FORM_ABOVE_G:
        cost, A_ub, A_eq, b_eq, bounds = _moment_lp(u, y, w, f, K, a, abar)
        x, status = _highs_solve(cost, A_ub, A_eq, bounds, method, b_eq)
    else:
        cost, A_ub, A_eq, _, bounds = _dense_lp(u, y, w, f, K, a, abar)
        x, status = _highs_solve(cost, A_ub, A_eq, bounds, method)
    if x is None:
        raise RuntimeError(f"MCRS LP failed at delta={delta}, K={K}, G={G}: HiGHS {status}")
    pi = np.clip(x[:n_pi].reshape(G, K), 0.0, None)
    row_sum = pi.sum(axis=1, keepdims=True)
    if np.any(row_sum <= 0):
        raise RuntimeError(f"MCRS LP returned an empty policy row at delta={delta}, K={K}, G={G}: HiGHS {status}")
    hinge = x[x.shape[0] - u.shape[0]:]
    return MCRSPolicy(K, a, abar, pi / row_sum, float(delta), float(w @ np.minimum(hinge, f)))


class PolicyCheckError(RuntimeError):
    """No LP attempt produced a policy that passes the MCRS checks (see :func:`check_level`)."""


# LP attempts, in order, when a solve fails or its policy fails the check: (quadrature nodes
# relative to n_target, HiGHS method: "ipm" = interior point without crossover, "simplex").
# A neighbouring discretisation or the other method solves what one attempt does not.
LP_ATTEMPTS = ((1.0, "ipm"), (2.0 / 3.0, "ipm"), (4.0 / 3.0, "ipm"), (1.0, "simplex"))
# The check's tolerance: the exact evaluation of an MCRS policy agrees with itself across
# equivalent cell layouts only to ~1e-7 (measured: the G = 32 policy at delta = 0.4, K = 2,
# lifted to its nested G = 64 cells, evaluates 1.0e-7 lower), so degradations are judged at 1e-6.
CHECK_RTOL = 1e-6


def _reference_policies(delta: float, K: int, G: int, kind: str | None = None) -> list[MCRSPolicy]:
    """Feasible G-cell policies every MCRS solve must match: RASS's optimal weights as a
    constant policy, and the G // 2 policy (:func:`_coarse_policy`: its LP or RASS, whichever
    is better exactly) lifted to the nested G cells (every placement nests: a_2j(G) =
    a_j(G / 2), :func:`mcrs_edges`), so a degraded LP (a solver failure falling back to RASS where G / 2 cells do
    better) is caught. One coarser level, not a chain: each level would cost an LP per check."""
    from speccheck.theory.rass.core import rank_weights

    a, abar = mcrs_edges(K, G, kind)
    refs = [MCRSPolicy(K, a, abar, np.tile(rank_weights(delta, K), (G, 1)), delta)]
    if G >= 8 and G % 2 == 0 and K > 1 and 0.0 < delta < _TOP_RANK_DELTA and np.allclose(
            a[::2], mcrs_edges(K, G // 2, kind)[0], rtol=0, atol=1e-15):
        coarse = _coarse_policy(delta, K, G // 2, 96, grid_kind(kind))
        refs.append(MCRSPolicy(K, a, abar, np.repeat(coarse.pi, 2, axis=0), delta))
    return refs


def check_level(delta: float, K: int, G: int, kind: str | None = None) -> float:
    """The acceptance an MCRS policy on G cells must reach at delta: the best of
    :func:`_reference_policies`, evaluated by the same exact evaluation on the same cells."""
    level = max(acceptance_of_policy(delta, p) for p in _reference_policies(delta, K, G, kind))
    return level * (1.0 - CHECK_RTOL)


def checked_policy(delta: float, K: int, G: int, n_target: int = 96, kind: str | None = None) -> MCRSPolicy:
    """The first LP policy over :data:`LP_ATTEMPTS` that passes :func:`check_level`, else the best
    reference policy (which passes by construction: the LP lost to it by quadrature error or a
    solver failure). Every returned policy is checked by its exact acceptance."""
    d = float(check_delta(delta))
    K = check_K(K)
    G = int(G)
    kind = grid_kind(kind)
    refs = _reference_policies(d, K, G, kind)
    ref_acc = [acceptance_of_policy(d, p) for p in refs]
    level = max(ref_acc) * (1.0 - CHECK_RTOL)
    for scale, method in LP_ATTEMPTS:
        try:
            pol = _solve_lp(d, K, G, max(8, int(round(n_target * scale))), method=method, kind=kind)
        except RuntimeError:
            continue
        if acceptance_of_policy(d, pol) >= level:
            return pol
    best = refs[int(np.argmax(ref_acc))]
    if acceptance_of_policy(d, best) < level:  # pragma: no cover - the evaluation is deterministic
        raise PolicyCheckError(f"MCRS policy check failed at delta={d}, K={K}, G={G}")
    return best


@functools.lru_cache(maxsize=4096)
def _policy_cached(delta: float, K: int, G: int, n_target: int, kind: str = GRID_KIND) -> MCRSPolicy:
    if delta == 0.0:
        a, abar = mcrs_edges(K, G, kind)
        return MCRSPolicy(K, a, abar, np.full((G, K), 1.0 / K), 0.0, 1.0)
    if K == 1 or delta >= _TOP_RANK_DELTA:
        a, abar = mcrs_edges(K, G, kind)
        pi = np.zeros((G, K))
        pi[:, K - 1] = 1.0
        return MCRSPolicy(K, a, abar, pi, float(delta))
    if G >= 8:
        return checked_policy(delta, K, G, n_target, kind)
    return _coarse_policy(delta, K, G, n_target, kind)


@functools.lru_cache(maxsize=4096)
def _coarse_policy(delta: float, K: int, G: int, n_target: int = 96, kind: str = GRID_KIND) -> MCRSPolicy:
    """The unchecked G-cell policy (coarse grids, and the check's reference one level down):
    the LP's policy or RASS's optimal weights as a constant policy, whichever is better when
    evaluated exactly, so quadrature error or a solver failure never makes it worse than RASS."""
    from speccheck.theory.rass.core import rank_weights

    try:
        pol = _solve_lp(delta, K, G, n_target, kind=kind)
    except RuntimeError:
        pol = None
    a, abar = mcrs_edges(K, G, kind)
    lp_val = float("nan") if pol is None else pol.lp_acceptance
    rass = MCRSPolicy(K, a, abar, np.tile(rank_weights(delta, K), (G, 1)), float(delta), lp_val)
    if pol is None or acceptance_of_policy(delta, rass) > acceptance_of_policy(delta, pol):
        return rass
    return pol


def mcrs_policy(delta: float, K: int, G: int = DEFAULT_G, n_target: int = 96, kind: str | None = None) -> MCRSPolicy:
    """The LP-optimal piecewise-constant MCRS policy for (delta, K) on G cells placed by ``kind``
    (:func:`mcrs_edges`; default the kernel's), checked by :func:`checked_policy` (cached).

    delta = 0 gives the uniform policy (g = f = 1); K = 1 or delta >= 12 gives pi_K = 1.
    """
    d = check_delta(delta)
    if d.ndim != 0:
        raise ValueError(f"mcrs_policy takes a scalar delta, got shape {d.shape}")
    K = check_K(K)
    return _policy_cached(float(d), K, int(G), int(n_target), grid_kind(kind))


# ----------------------------------------------------------------------------- exact evaluation
_S_LO, _S_HI_PAD = -40.0, 40.0
_N_SCAN = 96


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
    return max(_edge_s(policy, j), _S_LO), min(_edge_s(policy, j + 1), delta + _S_HI_PAD)


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


def acceptance_mcrs(delta: ArrayLike, K: int, G: int | None = None, kind: str | None = None) -> np.ndarray | float:
    """P(accept) of MCRS, evaluated exactly for the policy used (never an LP objective).

    Default (G None or :data:`KERNEL_G`, kind None): the policy the ``mcrs`` kernel uses at each
    delta (:func:`kernel_policy`: the shipped G = 64 grid policies, interpolated between grid
    points), so this equals ``MCRS().acceptance(delta, K)`` (and ``speccheck theory``'s column);
    for K > :data:`KERNEL_MAX_K` the kernel is RASS's with its grid-interpolated optimal weights,
    whose acceptance is RASS's optimum to ~1e-7 (returned here: ``acceptance_rass``). With another
    G or ``kind``: the checked LP policy at exactly that delta on those cells
    (:func:`mcrs_policy`, one LP per value, seconds each). Vectorised over ``delta``."""
    d = check_delta(delta)
    K = check_K(K)
    if (G is None or int(G) == KERNEL_G) and kind is None:
        if K > KERNEL_MAX_K:
            out = np.array([_acceptance_rass(float(x), K) for x in d.ravel()])
        else:
            out = np.array([1.0 if x == 0 else acceptance_of_policy(float(x), kernel_policy(float(x), K))
                            for x in d.ravel()])
    else:
        kind = grid_kind(kind)
        out = np.array([acceptance_of_policy(x, mcrs_policy(x, K, int(G), kind=kind)) for x in d.ravel()])
    out = out.reshape(d.shape)
    return out if d.ndim else float(out)


# ----------------------------------------------------------------------------- the kernel's policies
KERNEL_G = 64  # cells of the ``mcrs`` kernel's policies
KERNEL_MAX_K = 16  # largest K with shipped LP policies (above: RASS's constant policy)
# The kernel's delta grid (every point a multiple of 0.001; the layout key relies on it).
KERNEL_DELTA_GRID = np.unique(np.round(np.concatenate([
    [0.0, 0.001, 0.002, 0.005, 0.01, 0.02, 0.035],
    np.arange(0.05, 3.0, 0.05), np.arange(3.0, 6.0, 0.1), np.arange(6.0, 12.0 + 1e-9, 0.5),
]), 12))
KERNEL_TOP_INDEX = KERNEL_DELTA_GRID.size  # pseudo grid point: the top-rank policy (delta >= 12)
KERNEL_DATA = Path(__file__).resolve().parents[2] / "data" / f"mcrs_policies_G{KERNEL_G}.npz"
# Policy data layout version: bump when the meaning of a stored policy changes.
LAYOUT_VERSION = 2
# Stored edges must agree with the edges computed here to this (absolute, in m): they come from
# sin / log / exp, whose last bits may differ across numpy builds and platforms.
EDGES_ATOL = 1e-13


def layout_key(K: int, G: int) -> str:
    """Key of a stored policy layout, from its exact definition only (no float formatting, no
    computed edges, so the same under every numpy/scipy version): layout version, cell placement,
    K, G and the delta grid in integer thousandths."""
    milli = np.rint(KERNEL_DELTA_GRID * 1000.0).astype(np.int64)
    desc = f"v{LAYOUT_VERSION};{GRID_KIND};K={int(K)};G={int(G)};milli=" + ",".join(map(str, milli))
    return hashlib.sha256(desc.encode("ascii")).hexdigest()[:16]


def policy_checksum(pi: np.ndarray, checked: np.ndarray) -> str:
    """sha256 of stored policies and their check records as little-endian float64 bytes (what an
    npz holds, so independent of the library versions reading it)."""
    h = hashlib.sha256(np.ascontiguousarray(pi, dtype="<f8").tobytes())
    h.update(np.ascontiguousarray(checked, dtype="<f8").tobytes())
    return h.hexdigest()


def package_entry(z: Mapping[str, np.ndarray], K: int, G: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(policies, checked flags) of K in the npz mapping ``z`` if its layout key, edges (to
    :data:`EDGES_ATOL`) and content checksum all match; else None (the entry is ignored)."""
    names = (f"K{K}", f"layout_K{K}", f"checked_K{K}", f"edges_K{K}", f"sha_K{K}")
    if not all(n in z for n in names) or str(z[f"layout_K{K}"]) != layout_key(K, G):
        return None
    arr, rec, edges = z[f"K{K}"], z[f"checked_K{K}"], z[f"edges_K{K}"]
    a, _ = mcrs_edges(K, G)
    if edges.shape != a.shape or not np.allclose(edges, a, rtol=0.0, atol=EDGES_ATOL):
        return None
    if str(z[f"sha_K{K}"]) != policy_checksum(arr, rec):
        return None
    return arr, np.isfinite(rec)


@functools.lru_cache(maxsize=32)
def shipped_policies(K: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The kernel's shipped policies of K ([TOP_INDEX, G, K], NaN where none; checked flags) from
    the package data, or None when absent / not matching (:func:`package_entry`)."""
    if not KERNEL_DATA.exists():
        return None
    try:
        with np.load(KERNEL_DATA) as z:
            return package_entry(z, int(K), KERNEL_G)
    except (OSError, ValueError, KeyError):
        return None


def kernel_bracket(delta: float) -> tuple[int, int, float]:
    """(lo, hi, t) of the kernel's grid interpolation at delta ((1 - t) pi_lo + t pi_hi; the
    top-rank pseudo point :data:`KERNEL_TOP_INDEX` at and beyond the grid's end)."""
    grid = KERNEL_DELTA_GRID
    if delta >= grid[-1]:
        return KERNEL_TOP_INDEX, KERNEL_TOP_INDEX, 0.0
    lo = int(np.clip(np.searchsorted(grid, delta, side="right") - 1, 0, grid.size - 2))
    t = float(np.clip((delta - grid[lo]) / (grid[lo + 1] - grid[lo]), 0.0, 1.0))
    if t >= 1.0:
        lo, t = lo + 1, 0.0
    return lo, (lo + 1 if t > 0.0 else lo), t


@functools.lru_cache(maxsize=4096)
def _kernel_grid_policy(gi: int, K: int) -> MCRSPolicy:
    a, abar = mcrs_edges(K, KERNEL_G)
    if gi == 0 or K == 1:
        return MCRSPolicy(K, a, abar, np.full((KERNEL_G, K), 1.0 / K), 0.0)
    if gi == KERNEL_TOP_INDEX:
        pi = np.zeros((KERNEL_G, K))
        pi[:, K - 1] = 1.0
        return MCRSPolicy(K, a, abar, pi)
    d = float(KERNEL_DELTA_GRID[gi])
    stored = shipped_policies(K)
    if stored is not None and stored[1][gi] and not np.isnan(stored[0][gi, 0, 0]):
        return MCRSPolicy(K, a, abar, stored[0][gi].copy(), d)
    warnings.warn(f"MCRS: no shipped policy for K={K} at grid delta={d:g}; solving its LP (seconds to a minute)",
                  RuntimeWarning, stacklevel=3)
    return mcrs_policy(d, K, KERNEL_G)


def kernel_policy(delta: float, K: int) -> MCRSPolicy:
    """The policy the ``mcrs`` kernel uses at delta for K <= :data:`KERNEL_MAX_K`: the shipped grid
    policies (package data; an LP is solved, with a warning, only for a grid point not shipped)
    mixed as (1 - t) pi_lo + t pi_hi (:func:`kernel_bracket`)."""
    d = float(check_delta(delta))
    K = check_K(K, max_K=KERNEL_MAX_K)
    lo, hi, t = kernel_bracket(d)
    p_lo = _kernel_grid_policy(lo, K)
    if t == 0.0:
        return p_lo
    pi = (1.0 - t) * p_lo.pi + t * _kernel_grid_policy(hi, K).pi
    return MCRSPolicy(K, p_lo.a, p_lo.abar, pi / pi.sum(axis=1, keepdims=True), d)


# ----------------------------------------------------------------------------- gap to the bound
def _list_bound_iid(delta: float, K: int) -> float:
    """1 - max_s [Phi(s)^K - Phi(s - delta)] (SPEC section 1)."""
    from speccheck.theory.bounds import list_bound_iid

    return float(list_bound_iid(delta, K))


def _acceptance_rass(delta: float, K: int) -> float:
    from speccheck.theory.rass.core import acceptance_rass

    return float(acceptance_rass(delta, K))


def gap_closed_mcrs(delta: float, K: int, G: int = DEFAULT_G, kind: str | None = None) -> dict:
    """One row of the gap table: RASS, MCRS (exact and LP) on G cells placed by ``kind``, the
    i.i.d.-list bound, the fraction of RASS's gap to the bound that MCRS closes (nan where the
    gap is <= 1e-12)."""
    kind = grid_kind(kind)
    pol = mcrs_policy(delta, K, G, kind=kind)
    a_m = acceptance_of_policy(delta, pol)
    a_r = _acceptance_rass(delta, K)
    bound = _list_bound_iid(delta, K)
    gap = bound - a_r
    frac = (a_m - a_r) / gap if gap > 1e-12 else float("nan")
    return dict(
        K=int(K), delta=float(delta), G=int(G), layout=kind, rass=a_r, mcrs=a_m, mcrs_lp=pol.lp_acceptance,
        bound=bound, rass_gap=gap, mcrs_gap=bound - a_m, closed=frac,
    )
