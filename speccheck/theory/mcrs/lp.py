"""The MCRS policy LP: the hinge LP max sum_i w_i min(f_i, g(x_i)) over policies on a quadrature
(:mod:`speccheck.theory.mcrs.quadrature`), written densely or in moment form, solved by HiGHS;
its policies are judged only by their exact acceptance (:mod:`speccheck.theory.mcrs.policies`)."""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy import optimize, sparse

from speccheck.theory.mcrs.cells import cell_index, mcrs_edges, rank_coeffs
from speccheck.theory.mcrs.policy import MCRSPolicy
from speccheck.theory.mcrs.quadrature import breakpoints, log_f, quadrature

__all__ = ["DESIGN_DROP", "LP_TIME_LIMIT", "MOMENT_FORM_ABOVE_G", "dense_lp", "design_matrix", "highs_solve",
           "moment_lp", "solve_lp"]

LP_TIME_LIMIT = 60.0  # seconds per HiGHS run; its last iterate is still judged by the exact check


def design_matrix(u: np.ndarray, y: np.ndarray, K: int, a: np.ndarray, abar: np.ndarray) -> np.ndarray:
    """A[i, j*K + r - 1] = d g(x_i) / d pi_{r,j} (dense), shape (M, G*K)."""
    G = a.shape[0] - 1
    C = rank_coeffs(K)
    j = cell_index(u, y, a, abar)
    # b_c - x and a_c - x, accurately: = y - abar_{c+1}, y - abar_c
    hi = np.maximum(y[:, None] - abar[None, 1:], 0.0)
    lo = np.maximum(y[:, None] - abar[None, :-1], 0.0)
    A = np.zeros((u.shape[0], G, K))
    for r in range(1, K):
        n = K - r
        A[:, :, r - 1] = C[r - 1] * u[:, None] ** (r - 1) * (hi**n - lo**n)
    A[np.arange(u.shape[0]), j, K - 1] = K * u ** (K - 1)
    return A.reshape(u.shape[0], G * K)


def highs_solve(cost: np.ndarray, A_ub: sparse.csr_matrix, A_eq: sparse.csr_matrix, bounds: np.ndarray,
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
DESIGN_DROP = 1e-13


# Above this many cells the hinge LP is written in moment form (:func:`moment_lp`, sparse); at
# and below it in the dense form the kernel's shipped G = 64 policies (and their G = 32 check) were
# solved with, so the kernel's policies and their checks do not move.
MOMENT_FORM_ABOVE_G = 64


def dense_lp(u: np.ndarray, y: np.ndarray, w: np.ndarray, f: np.ndarray, K: int, a: np.ndarray,
             abar: np.ndarray) -> tuple:
    """The hinge LP with the dense design (g(x_i) = A[i] . pi): variables [pi (G*K), h (M)]."""
    G, M = a.shape[0] - 1, u.shape[0]
    design = design_matrix(u, y, K, a, abar)
    design[np.abs(design) < DESIGN_DROP] = 0.0
    n_pi = G * K
    A_ub = sparse.hstack([-sparse.csr_matrix(design), sparse.identity(M, format="csr")], format="csr")
    A_eq = sparse.hstack([sparse.kron(sparse.identity(G), np.ones((1, K))), sparse.csr_matrix((G, M))], format="csr")
    bounds = np.concatenate([np.column_stack([np.zeros(n_pi), np.ones(n_pi)]), np.column_stack([np.zeros(M), f])])
    return np.concatenate([np.zeros(n_pi), -w]), A_ub, A_eq, np.ones(G), bounds


def moment_lp(u: np.ndarray, y: np.ndarray, w: np.ndarray, f: np.ndarray, K: int, a: np.ndarray,
              abar: np.ndarray) -> tuple:
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
    C = rank_coeffs(K)
    cell = cell_index(u, y, a, abar)
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
        keep = np.abs(values) >= DESIGN_DROP
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


def solve_lp(delta: float, K: int, G: int, n_target: int, n_gl: int = 6, method: str = "ipm",
              kind: str | None = None) -> MCRSPolicy:
    """Hinge LP: max w.h s.t. h <= g(x) (linear in pi), sum_r pi_{r,j} = 1, 0 <= h <= f, written
    densely (variables [pi (G*K), h (M)]) for G <= :data:`MOMENT_FORM_ABOVE_G` and in moment
    form (:func:`moment_lp`, sparse) above.

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
        cost, A_ub, A_eq, b_eq, bounds = moment_lp(u, y, w, f, K, a, abar)
        x, status = highs_solve(cost, A_ub, A_eq, bounds, method, b_eq)
    else:
        cost, A_ub, A_eq, _, bounds = dense_lp(u, y, w, f, K, a, abar)
        x, status = highs_solve(cost, A_ub, A_eq, bounds, method)
    if x is None:
        raise RuntimeError(f"MCRS LP failed at delta={delta}, K={K}, G={G}: HiGHS {status}")
    pi = np.clip(x[:n_pi].reshape(G, K), 0.0, None)
    row_sum = pi.sum(axis=1, keepdims=True)
    if np.any(row_sum <= 0):
        raise RuntimeError(f"MCRS LP returned an empty policy row at delta={delta}, K={K}, G={G}: HiGHS {status}")
    hinge = x[x.shape[0] - u.shape[0]:]
    return MCRSPolicy(K, a, abar, pi / row_sum, float(delta), float(w @ np.minimum(hinge, f)))


