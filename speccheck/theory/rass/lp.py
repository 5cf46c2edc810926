"""The paper's method, kept as a CROSS-CHECK only: the rank-weight problem as a quadrature LP.

maximise sum_m w_m min(q_m, (A omega)_m) over the simplex, on Gauss-Legendre nodes; the library
ships its cvxpy formulation (:func:`rank_weights_cvxpy`, the readable reference). Production
weights come from the certified optimiser in :mod:`speccheck.theory.rass.core`; this LP's value
carries a quadrature error and its solver can fail. The HiGHS formulation and the paper-sized
Simpson LP of ``benchmarks/bench_theory.py`` live in ``research/rass_lp.py`` (source checkout).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from speccheck.theory.normal import log_phi
from speccheck.theory.rass.core import log_rank_terms
from speccheck.theory.validate import check_delta, check_K

S_MAX = 9.0  # min(q, p_omega) <= K phi: mass outside [-9, 9] < 1e-17 for K <= 64 (small delta)
PANEL_WIDTH = 0.5

__all__ = ["PANEL_WIDTH", "S_MAX", "lp_domain", "lp_matrices", "lp_nodes", "quadrature_lp", "rank_weights_cvxpy",
           "solve_quadrature_lp_cvxpy"]


def lp_nodes(breaks: np.ndarray, order: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes and weights on every panel between sorted breakpoints."""
    x, wx = np.polynomial.legendre.leggauss(order)
    a, b = breaks[:-1], breaks[1:]
    half, mid = 0.5 * (b - a), 0.5 * (b + a)
    return (mid[:, None] + half[:, None] * x).ravel(), (half[:, None] * wx).ravel()


def lp_domain(d: float, K: int) -> tuple[float, float]:
    """Where min(q, p_omega) has its mass: below delta + S, above -S, and around
    tau* = ln(K)/delta + delta/2 at large delta."""
    with np.errstate(over="ignore", divide="ignore"):  # subnormal delta: tau* = inf, the window is [-S, S]
        tau_star = np.log(K) / d + 0.5 * d
    lo = min(max(-S_MAX, d - S_MAX), tau_star - S_MAX)
    hi = max(S_MAX, min(tau_star, d) + S_MAX)
    return lo, hi


def lp_matrices(delta: float, K: int, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """q_m = q(s_m) and A[m, r] = phi(s_m) b_r(Phi(s_m)), both divided by one common scale
    exp(shift) (returned); entries capped at 1e6 so HiGHS stays within its matrix range."""
    log_q = np.clip(log_phi(nodes - delta), -1400.0, None)
    log_A = np.clip(log_rank_terms(nodes, K), -1400.0, None)
    shift = float(np.max(np.minimum(log_q, log_A.max(axis=1))))
    cap = np.log(1e6)
    return np.exp(np.minimum(log_q - shift, cap)), np.exp(np.minimum(log_A - shift, cap)), shift


def solve_quadrature_lp_cvxpy(q: np.ndarray, A: np.ndarray, w_quad: np.ndarray) -> tuple[np.ndarray, float]:
    """The same LP in cvxpy: maximise w.t s.t. t <= q, t <= A omega, omega in W_K."""
    import cvxpy as cp

    omega = cp.Variable(A.shape[1], nonneg=True)
    t = cp.Variable(len(q))
    prob = cp.Problem(cp.Maximize(w_quad @ t), [t <= q, t <= A @ omega, cp.sum(omega) == 1])
    prob.solve(solver=cp.CLARABEL)
    w = np.clip(omega.value, 0.0, None)
    return w / w.sum(), float(prob.value)


def quadrature_lp(delta: float, K: int, solve: Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, float]],
                  *, panels: float = PANEL_WIDTH, order: int = 8) -> tuple[np.ndarray, float]:
    """Quadrature-LP rank weights (no kink refinement; cross-check only) and the LP value, the LP
    max_omega sum_m w_m min(q_m, (A omega)_m) solved by ``solve(q, A, w_quad) -> (omega, value)``."""
    d = float(check_delta(delta))
    K = check_K(K)
    if d == 0.0 or K == 1:
        return np.full(K, 1.0 / K), 1.0 if d == 0.0 else float("nan")
    lo, hi = lp_domain(d, K)
    n = max(int(np.ceil((hi - lo) / panels)), 1)
    nodes, wq = lp_nodes(np.linspace(lo, hi, n + 1), order)
    q, A, shift = lp_matrices(d, K, nodes)
    w, value = solve(q, A, wq)
    return w, value * np.exp(shift)


def rank_weights_cvxpy(delta: float, K: int) -> tuple[np.ndarray, float]:
    """Quadrature-LP weights and value from the cvxpy formulation (readable reference)."""
    return quadrature_lp(delta, K, solve_quadrature_lp_cvxpy)
