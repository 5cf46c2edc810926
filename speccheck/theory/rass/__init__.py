"""RASS (rank-aware selection) theory: the selected-draft law, exact acceptance at any weights,
and the certified optimal rank weights.

- :mod:`~speccheck.theory.rass.core`: the law p_omega, crossings and residual intervals, the
  acceptance, and the active-set Newton solver of the optimal weights for K <= 16;
- :mod:`~speccheck.theory.rass.certificate`: the optimality certificates both solvers share
  (Frank-Wolfe, piecewise and set bounds, Markov's small-delta bound);
- :mod:`~speccheck.theory.rass.dual`: LP duality on refined partitions, the solver above K = 16;
- :mod:`~speccheck.theory.rass.precise`: 1 - A in extended precision (mpmath) where float64 cancels
  (tiny delta, large K), Markov's small-delta weights from a 120-digit solve (package data), the
  set bound with precise margins;
- :mod:`~speccheck.theory.rass.lp`: the paper's quadrature LP in cvxpy (a cross-check only).
"""

from speccheck.theory.rass.certificate import (
    RankWeightSolution,
)
from speccheck.theory.rass.core import (
    GAP_TOL,
    LARGE_K,
    MAX_ITER,
    POLISH_BAND,
    POLISH_GAP,
    SHIPPED_WEIGHTS,
    TABLE_STENCIL,
    VALUE_TOL,
    ResidualInterval,
    acceptance_rass,
    cdf_p_omega,
    check_deviation,
    cold_rank_weight_solution,
    crossings,
    log_p_omega,
    log_rank_terms,
    polished_set_gap,
    rank_weight_solution,
    rank_weights,
    rejection_rass,
    residual_intervals,
    set_bound,
    sf_p_omega,
    table_start,
)
from speccheck.theory.rass.lp import (
    rank_weights_cvxpy,
)

__all__ = [
    "acceptance_rass",
    "cdf_p_omega",
    "check_deviation",
    "cold_rank_weight_solution",
    "crossings",
    "GAP_TOL",
    "LARGE_K",
    "log_p_omega",
    "log_rank_terms",
    "MAX_ITER",
    "POLISH_BAND",
    "POLISH_GAP",
    "polished_set_gap",
    "rank_weight_solution",
    "rank_weights",
    "rank_weights_cvxpy",
    "RankWeightSolution",
    "rejection_rass",
    "residual_intervals",
    "ResidualInterval",
    "set_bound",
    "sf_p_omega",
    "SHIPPED_WEIGHTS",
    "table_start",
    "TABLE_STENCIL",
    "VALUE_TOL",
]
