"""MCRS research LPs (measurements, not kernels): policies on the two largest drafts (top2)
and on the smallest and the largest draft (min-max), on the quadrature of speccheck.theory.mcrs,
and an upper bound on what ANY max-conditioned policy can accept (:func:`max_conditioned_bound`).
Their results are tabulated by :mod:`research.mcrs_tables` (theory/mcrs_minmax_table.md,
theory/mcrs_gap_table.md).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy import optimize, sparse, special

from speccheck.theory.mcrs import (  # noqa: F401
    acceptance_of_policy,
    mcrs_edges,
    mcrs_policy,
    rank_coeffs,
)
from speccheck.theory.mcrs.quadrature import breakpoints, gauss_legendre, log_f, quadrature  # noqa: F401
from speccheck.theory.normal import normal_mass
from speccheck.theory.validate import check_delta, check_K


# ----------------------------------------------------------------------------- richer policy (measurement)
def _design_matrix_top2(u, y, K, a, abar):
    """d g(x_i) / d pi_{r,(c1,c2)} for a policy on the top TWO drafts (m1 >= m2), piecewise
    constant on cells c1 >= c2 of the same edges; shape (M, T*K), T = G(G+1)/2.

    Given (m1, m2), density K(K-1) m2^(K-2), the other K-2 drafts are i.i.d. U(0, m2), so rank
    r <= K-2 is m2 Beta(r, K-1-r) and K(K-1) m2^(K-3) beta_{r,K-1-r}(x/m2) =
    K(K-1) x^(r-1) (m2-x)^(n-1) / B(r, n), n = K-1-r: every cell integral is a polynomial.
    """
    G = a.shape[0] - 1
    c1, c2 = np.tril_indices(G)  # c1 >= c2
    a1, b1, a2, b2 = a[c1], a[c1 + 1], a[c2], a[c2 + 1]
    ab1, ab2 = abar[c1 + 1], abar[c2 + 1]  # 1 - b1, 1 - b2
    x = u[:, None]
    yy = y[:, None]
    diag = (c1 == c2)[None, :]
    T = c1.shape[0]
    A = np.zeros((u.shape[0], T, K))
    in1 = (yy <= abar[c1][None]) & (yy > ab1[None])  # a1 <= x < b1, in y = 1 - x
    in2 = (yy <= abar[c2][None]) & (yy > ab2[None])
    # r = K: x = m1 in cell c1; m2 in cell c2 below x
    A[:, :, K - 1] = np.where(in1, K * (np.minimum(b2[None], x) ** (K - 1) - a2[None] ** (K - 1)).clip(0), 0.0)
    # r = K-1: x = m2 in cell c2; m1 in cell c1 above x
    w1 = np.where(diag, (yy - ab1[None]).clip(0), (b1 - a1)[None])  # b1 - max(a1, x)
    A[:, :, K - 2] = np.where(in2, K * (K - 1) * x ** (K - 2) * w1, 0.0)
    for r in range(1, K - 1):
        n = K - 1 - r
        coef = K * (K - 1) / special.beta(r, n) * x ** (r - 1)
        L = (yy - ab2[None]).clip(0)  # b2 - x (>= 0 where x < b2)
        w0 = (a2[None] - x).clip(0)  # max(a2, x) - x
        off = (b1 - a1)[None] * (L**n - w0**n) / n
        on = L * (L**n - w0**n) / n - (L ** (n + 1) - w0 ** (n + 1)) / (n + 1)
        A[:, :, r - 1] = np.where(yy > ab2[None], coef * np.where(diag, on, off), 0.0)
    return A.reshape(u.shape[0], T * K)


def top2_lp_acceptance(delta: float, K: int, G: int = 24, n_target: int = 96) -> dict:
    """Measurement for issue 7: the LP optimum of a policy that conditions on the two largest
    drafts (cells c1 >= c2 of ``G`` max-cells), against MCRS on the same G. Returns the LP
    values and the acceptances evaluated on a much finer quadrature (no exact evaluator)."""
    K = check_K(K)
    if K < 3:
        raise ValueError(f"the top-2 policy needs K >= 3, got K={K}")
    a, abar = mcrs_edges(K, G)
    bu, by = breakpoints(float(delta), a, abar, n_target)
    u, y, w = quadrature(bu, by)
    f = np.exp(log_f(u, y, delta))
    A = _design_matrix_top2(u, y, K, a, abar)
    M, nv = A.shape
    T = nv // K
    A_ub = sparse.hstack([-sparse.csr_matrix(A), sparse.identity(M, format="csr")], format="csr")
    A_eq = sparse.hstack([sparse.kron(sparse.identity(T), np.ones((1, K))), sparse.csr_matrix((T, M))], format="csr")
    bounds = np.concatenate([np.column_stack([np.zeros(nv), np.ones(nv)]), np.column_stack([np.zeros(M), f])])
    res = optimize.linprog(np.concatenate([np.zeros(nv), -w]), A_ub=A_ub, b_ub=np.zeros(M), A_eq=A_eq,
                           b_eq=np.ones(T), bounds=bounds, method="highs")
    pi = res.x[:nv]
    # evaluate on a 4x finer target grid with 12-point GL panels
    bu2, by2 = breakpoints(float(delta), a, abar, 4 * n_target)
    u2, y2, w2 = quadrature(bu2, by2, 12)
    f2 = np.exp(log_f(u2, y2, delta))
    g2 = _design_matrix_top2(u2, y2, K, a, abar) @ pi
    mc = mcrs_policy(float(delta), K, G)
    return dict(delta=float(delta), K=K, G=G, top2_lp=float(-res.fun), top2_eval=float(w2 @ np.minimum(f2, g2)),
                mass_check=float(w2 @ g2), mcrs_lp=mc.lp_acceptance, mcrs=acceptance_of_policy(delta, mc))


def minmax_edges(K: int, G: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Cells for the smallest draft (mirror of the max cells: equal probability under the min's
    law) and for the largest; returns (lo, lobar, hi, hibar), each shape (G + 1,)."""
    hi, hibar = mcrs_edges(K, G)
    return hibar[::-1].copy(), hi[::-1].copy(), hi, hibar


def _design_matrix_minmax(u, y, K, G):
    """d g(x_i) / d pi_{r,(c1,c2)} for a policy on the SMALLEST and LARGEST drafts, piecewise
    constant on (min cell c1, max cell c2); shape (M, G*G*K) (pairs with no mass give 0 columns).

    (m_lo, m_hi) has density K(K-1)(m_hi - m_lo)^(K-2); given them the other K-2 drafts are
    i.i.d. U(m_lo, m_hi), so for 1 < r < K the selected density is separable:
    K(K-1)/B(r-1, K-r) (x - m_lo)^(r-2) (m_hi - x)^(K-r-1) on m_lo < x < m_hi.
    """
    lo, lobar, hi, hibar = minmax_edges(K, G)
    a1, b1 = lo[:-1][:, None], lo[1:][:, None]  # (G, 1): min cells
    A = np.zeros((u.shape[0], G, G, K))
    hb1, hb0 = hibar[1:][None, :], hibar[:-1][None, :]  # 1 - b2, 1 - a2
    for i, (x, yx) in enumerate(zip(u, y)):
        # x - m over the min cell below x; m - x over the max cell above x (in y near 1)
        L1 = np.clip(x - a1, 0, None)  # x - a1 (>= 0 where a1 < x)
        L0 = np.clip(x - b1, 0, None)  # x - min(b1, x)
        R1 = np.clip(yx - hb1, 0, None)  # b2 - x
        R0 = np.clip(yx - hb0, 0, None)  # max(a2, x) - x
        in1 = (a1 <= x) & (x < b1)
        in2 = (yx <= hb0) & (yx > hb1)
        A[i, :, :, 0] = np.where(in1, K * (R1 ** (K - 1) - R0 ** (K - 1)), 0.0)
        A[i, :, :, K - 1] = np.where(in2, K * (L1 ** (K - 1) - L0 ** (K - 1)), 0.0)
        for r in range(2, K):
            c = K * (K - 1) / special.beta(r - 1, K - r)
            A[i, :, :, r - 1] = (c * (L1 ** (r - 1) - L0 ** (r - 1)) / (r - 1)
                                 * (R1 ** (K - r) - R0 ** (K - r)) / (K - r))
    return A.reshape(u.shape[0], G * G * K)


def minmax_lp_acceptance(delta: float, K: int, G: int = 24, n_target: int = 96) -> dict:
    """Measurement for issue 7: LP optimum of a policy conditioned on the smallest and the
    largest draft (G x G cells), evaluated on a 4x finer quadrature.

    Scaling: column (r, c) of the design matrix is the selected density jointly with the pair
    falling in cell pair c, so it integrates to P(c), which spans ~30 orders of magnitude over
    the pairs (the min's and max's tail cells). The LP is written in x = P(c) pi (columns divided
    by P(c): conditional densities), pairs with P(c) = 0 (min cell above the max cell) are
    dropped, and pi = x / P(c) is renormalised per pair afterwards (any policy is feasible)."""
    K = check_K(K)
    lo, lobar, hi, hibar = minmax_edges(K, G)
    edges_u = np.concatenate([lo, hi])
    edges_y = np.concatenate([lobar, hibar])
    bu, by = breakpoints(float(delta), edges_u, edges_y, n_target)
    u, y, w = quadrature(bu, by)
    f = np.exp(log_f(u, y, delta))
    A = _design_matrix_minmax(u, y, K, G)
    M, nv = A.shape
    T = nv // K
    P = (w @ A).reshape(T, K).mean(axis=1)  # P(c) up to quadrature error
    live = P > 0
    cols = np.repeat(live, K)
    As = (A[:, cols].reshape(M, -1, K) / P[live][None, :, None]).reshape(M, -1)
    nl = As.shape[1]
    Tl = nl // K
    A_ub = sparse.hstack([-sparse.csr_matrix(As), sparse.identity(M, format="csr")], format="csr")
    A_eq = sparse.hstack([sparse.kron(sparse.identity(Tl), np.ones((1, K))), sparse.csr_matrix((Tl, M))],
                         format="csr")
    bounds = np.concatenate([np.column_stack([np.zeros(nl), np.repeat(P[live], K)]),
                             np.column_stack([np.zeros(M), f])])
    for method in ("highs-ipm", "highs-ds"):
        res = optimize.linprog(np.concatenate([np.zeros(nl), -w]), A_ub=A_ub, b_ub=np.zeros(M), A_eq=A_eq,
                               b_eq=P[live], bounds=bounds, method=method)
        if res.status == 0:
            break
    else:
        raise RuntimeError(f"min-max LP failed at delta={delta}, K={K}, G={G}: {res.message}")
    pi = np.full((T, K), 1.0 / K)
    x = np.clip(res.x[:nl].reshape(Tl, K), 0.0, None)
    s = x.sum(axis=1, keepdims=True)
    pi[live] = np.where(s > 0, x / np.where(s > 0, s, 1.0), 1.0 / K)
    pi = pi.reshape(-1)
    bu2, by2 = breakpoints(float(delta), edges_u, edges_y, 4 * n_target)
    u2, y2, w2 = quadrature(bu2, by2, 12)
    g2 = _design_matrix_minmax(u2, y2, K, G) @ pi
    f2 = np.exp(log_f(u2, y2, delta))
    return dict(delta=float(delta), K=K, G=G, minmax_lp=float(-res.fun), minmax_eval=float(w2 @ np.minimum(f2, g2)),
                mass_check=float(w2 @ g2), live_pairs=int(live.sum()))


# (K, delta, G) of theory/mcrs_minmax_table.md: the small-delta cells where max-conditioning
# stops short (K = 4 at G = 16; K = 6, 8 at G = 8, where G = 16 is beyond HiGHS here)


# ----------------------------------------------------------------------------- the class's upper bound
def _order_stat_cdf_coeffs(r: int, K: int) -> np.ndarray:
    """Coefficients c_k (k = 0..K-1) of the Beta(r, K - r) CDF, a polynomial for integer
    parameters: I_z(r, K - r) = sum_{j >= r} binom(K-1, j) z^j (1 - z)^(K-1-j) = sum_k c_k z^k."""
    coeffs = np.zeros(K)
    for j in range(r, K):
        for i in range(K - j):
            coeffs[j + i] += math.comb(K - 1, j) * math.comb(K - 1 - j, i) * (-1) ** i
    return coeffs


def _rank_values(m: np.ndarray, edges: np.ndarray, lam: np.ndarray, K: int) -> np.ndarray:
    """Lambda_r(m) = E[lam(X_(r)) | max = m], r = 1..K, shape (K, m.size), for the step function
    lam (value lam_i on [edges_i, edges_{i+1}), edges_0 = 0, edges_N = 1; u coordinates).

    r = K selects m itself: Lambda_K(m) = lam(m). For r < K the selected draft is m B with
    B ~ Beta(r, K - r) (module :mod:`speccheck.theory.mcrs`), so with lam = sum_i dl_i 1[x >= e_i]
    Lambda_r(m) = sum_{e_i < m} dl_i (1 - I_{e_i/m}(r, K - r)): prefix sums of dl_i e_i^k,
    O((N + m.size) K^2); each term is bounded by |dl_i| (e_i / m <= 1), so no cancellation."""
    n_steps = lam.size
    jumps = np.diff(np.concatenate([[0.0], lam]))
    below = np.searchsorted(edges[:n_steps], m, side="left")  # steps i with e_i < m
    prefix = np.array([np.concatenate([[0.0], np.cumsum(jumps * edges[:n_steps] ** k)]) for k in range(K)])
    out = np.empty((K, m.size))
    for r in range(1, K):
        coeffs = _order_stat_cdf_coeffs(r, K)
        value = prefix[0][below].copy()
        for k in range(K):
            if coeffs[k] != 0.0:
                value -= coeffs[k] * prefix[k][below] / m**k
        out[r - 1] = value
    out[K - 1] = lam[np.clip(np.searchsorted(edges, m, side="right") - 1, 0, n_steps - 1)]
    return out


def _max_law_integral(values: np.ndarray, m: np.ndarray, K: int) -> float:
    """int_0^1 values(m) K m^(K-1) dm by the trapezoid rule on the sorted points m."""
    y = values * K * m ** (K - 1)
    return float(np.sum(0.5 * (y[1:] + y[:-1]) * np.diff(m)))


def max_conditioned_bound(delta: float, K: int, n_steps: int = 200, n_fine: int = 200_000) -> dict:
    """Upper bound on the acceptance of EVERY max-conditioned policy pi_r(m) (any measurable
    policy of the largest draft, not only the piecewise-constant ones the LP and the kernel use).

    Lagrangian duality: min(f, g) <= lam g + (1 - lam) f for any lam(x) in [0, 1], and
    int lam g_pi = E[lam(X_sel)] = E[sum_r pi_r(M) Lambda_r(M)] <= E[max_r Lambda_r(M)] with
    Lambda_r(m) = E[lam(X_(r)) | M = m], so for every lam

        A(pi) <= UB(lam) = int (1 - lam) f du + int max_r Lambda_r(m) K m^(K-1) dm,

    and min over lam of UB equals the class's supremum (concave-convex minimax). lam is a step
    function on ``n_steps`` target quantiles and as many points uniform in s (2 n_steps + 1
    steps), chosen by the dual LP (t_k >= Lambda_r(m_k) at every step edge and midpoint, so the
    LP sees every step of Lambda_K = lam). The returned ``bound`` does not rely on the LP: the
    first term is exact (normal masses), the second the trapezoid rule on ``n_fine`` points
    uniform in m and as many uniform in m^K plus both sides of every step edge, with the change
    from ``n_fine / 4`` points added as its error (``quadrature_error``). Valid for any n_steps;
    it decreases to the supremum as n_steps grows (K = 4, delta = 0.1: 200 -> 400 steps moves
    it by 3e-7)."""
    d = float(check_delta(delta))
    K = check_K(K)
    n_steps = int(n_steps)
    if n_steps < 4:
        raise ValueError(f"n_steps must be >= 4, got n_steps={n_steps}")
    quantiles = special.ndtri((np.arange(n_steps) + 0.5) / n_steps)
    s = np.unique(np.concatenate([d + quantiles, np.linspace(-8.5, d + 6.0, n_steps), [-np.inf, np.inf]]))
    edges = special.ndtr(s)
    target_mass = np.nan_to_num(normal_mass(s[:-1] - d, s[1:] - d))
    n_lam = target_mass.size
    # dual LP on m points: every step edge (both sides), every step midpoint, a uniform grid
    inner = edges[1:-1]
    m = np.unique(np.concatenate([inner, np.nextafter(inner, 0.0), 0.5 * (edges[1:] + edges[:-1]),
                                  np.linspace(0.0, 1.0, n_steps + 2)[1:-1]]))
    m = m[m > 0.0]
    mid = np.concatenate([[0.0], 0.5 * (m[1:] + m[:-1]), [1.0]])
    weight = mid[1:] ** K - mid[:-1] ** K
    n_m = m.size
    unit = np.zeros((K, n_m, n_lam))
    for i in range(n_lam):  # Lambda_r(m) is linear in lam: its columns are the unit steps
        e_i = np.zeros(n_lam)
        e_i[i] = 1.0
        unit[:, :, i] = _rank_values(m, edges, e_i, K)
    A_ub = sparse.hstack([sparse.csr_matrix(unit.reshape(K * n_m, n_lam)),
                          -sparse.vstack([sparse.identity(n_m, format="csr")] * K)], format="csr")
    cost = np.concatenate([-target_mass, weight])  # UB = sum(F) - F.lam + W.t
    bounds = [(0.0, 1.0)] * n_lam + [(None, None)] * n_m
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optimize.OptimizeWarning)
        res = optimize.linprog(cost, A_ub=A_ub, b_ub=np.zeros(K * n_m), bounds=bounds, method="highs")
    if res.status != 0 or res.x is None:
        raise RuntimeError(f"max-conditioned bound LP failed at delta={d}, K={K}: {res.message}")
    lam = np.clip(res.x[:n_lam], 0.0, 1.0)
    first = float(np.sum((1.0 - lam) * target_mass))

    def second(n_points: int) -> float:
        grid = np.linspace(0.0, 1.0, n_points)
        pts = np.unique(np.concatenate([grid, grid ** (1.0 / K), inner, np.nextafter(inner, 0.0), [1.0]]))
        pts = pts[pts > 0.0]
        return _max_law_integral(_rank_values(pts, edges, lam, K).max(axis=0), pts, K)

    fine, coarse = second(int(n_fine)), second(max(int(n_fine) // 4, 1000))
    err = abs(fine - coarse)
    return dict(delta=d, K=K, n_steps=n_steps, bound=min(1.0, first + fine + err),
                lp_value=float(res.fun + target_mass.sum()), quadrature_error=err)
