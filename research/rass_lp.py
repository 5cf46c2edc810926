"""The paper's method with HiGHS (research; cross-check only): the rank-weight quadrature LP as one
hinge LP, and the paper-sized Simpson LP (the baseline of ``benchmarks/bench_theory.py``: 513
nodes, K = 8). The nodes, matrices and the cvxpy formulation are the library's
(:mod:`speccheck.theory.rass.lp`); HiGHS can fail where cvxpy does not (e.g. status 15 at
delta = 1e-12, K = 64).
"""

from __future__ import annotations

import numpy as np
from scipy import optimize, sparse

from research.hinge_lp import hinge_lp_highs
from speccheck.theory.rass.lp import (
    PANEL_WIDTH,
    S_MAX,
    lp_matrices,
    quadrature_lp,
    solve_quadrature_lp_cvxpy,
)
from speccheck.theory.validate import check_delta, check_K


def solve_quadrature_lp(q: np.ndarray, A: np.ndarray, w_quad: np.ndarray, method: str = "highs-ipm"
                        ) -> tuple[np.ndarray, float]:
    """max_omega sum_m w_m min(q_m, (A omega)_m) on the simplex (one hinge LP, HiGHS)."""
    x, value = hinge_lp_highs(q, A, w_quad, groups=np.zeros(A.shape[1], np.int64), method=method)
    w = np.clip(x, 0.0, None)
    return w / w.sum(), value


def rank_weights_lp(delta: float, K: int, *, panels: float = PANEL_WIDTH, order: int = 8,
                    cvxpy: bool = False) -> tuple[np.ndarray, float]:
    """Quadrature-LP rank weights (no kink refinement; cross-check only) and the LP value."""
    solve = solve_quadrature_lp_cvxpy if cvxpy else solve_quadrature_lp
    return quadrature_lp(delta, K, solve, panels=panels, order=order)


def paper_sized_lp(delta: float, K: int = 8, n_nodes: int = 513) -> tuple[np.ndarray, float]:
    """The paper's method: Simpson's rule on ``n_nodes`` nodes over [-S, delta + S], solved by
    ``scipy.optimize.linprog`` (HiGHS) with one hinge variable per node (the benchmark baseline)."""
    d = float(check_delta(delta))
    K = check_K(K)
    lo, hi = -S_MAX, d + S_MAX
    nodes = np.linspace(lo, hi, n_nodes)
    h = (hi - lo) / (n_nodes - 1)
    wq = np.full(n_nodes, 2.0)
    wq[1::2] = 4.0
    wq[0] = wq[-1] = 1.0
    wq *= h / 3.0
    q, A, shift = lp_matrices(d, K, nodes)
    M = n_nodes
    cost = np.concatenate([np.zeros(K), -wq])
    mat = sparse.hstack([sparse.csr_matrix(-A), sparse.identity(M, format="csr")], format="csc")
    res = optimize.linprog(cost, A_ub=mat, b_ub=np.zeros(M), A_eq=np.concatenate([np.ones(K), np.zeros(M)])[None, :],
                           b_eq=[1.0], bounds=np.column_stack([np.zeros(K + M), np.concatenate([np.ones(K), q])]),
                           method="highs")
    if res.status != 0:
        raise RuntimeError(f"paper-sized LP failed: {res.message}")
    return res.x[:K], -res.fun * np.exp(shift)
