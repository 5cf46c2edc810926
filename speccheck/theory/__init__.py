"""Closed forms and optimisation (numpy/scipy/cvxpy, no torch): SPEC sections 1-2.

Acceptance of RMC, D-GRS, RASS (exact at any fixed weights: ``exact``) and MCRS, the i.i.d.-list
and dependent-drafts bounds, the certified optimal RASS rank weights (``rass``; the quadrature
LP is a cross-check in ``rass_lp``), residual intervals, speed-up predictions for draft trees.
Inputs are validated by ``validate`` (delta finite >= 0, K in 1..128, omega on the simplex).
Generated artefacts: ``reference`` (golden tables), ``claims``, ``mcrs_tables``.
"""

from speccheck.theory.acceptance import (
    DGRSLevels,
    acceptance_dgrs,
    acceptance_min_coupling,
    acceptance_rmc,
    dgrs_acceptance_from_levels,
    dgrs_levels,
)
from speccheck.theory.bounds import list_bound_dependent, list_bound_iid
from speccheck.theory.mcrs import (
    MCRSPolicy,
    acceptance_mcrs,
    acceptance_of_policy,
    gap_closed_mcrs,
    mcrs_policy,
)
from speccheck.theory.mcrs_tables import mcrs_gap_table
from speccheck.theory.rass import (
    RankWeightSolution,
    ResidualInterval,
    acceptance_rass,
    cdf_p_omega,
    crossings,
    log_p_omega,
    rank_weight_solution,
    rank_weights,
    rank_weights_cvxpy,
    rejection_rass,
    residual_intervals,
    sf_p_omega,
)
from speccheck.theory.speedup import (
    chain_ceiling,
    commit_distribution,
    expected_nfe,
    expected_steps_per_round,
    predicted_speedup,
)

__all__ = [
    "DGRSLevels", "acceptance_dgrs", "acceptance_min_coupling", "acceptance_rmc",
    "dgrs_acceptance_from_levels", "dgrs_levels", "list_bound_dependent", "list_bound_iid",
    "RankWeightSolution", "ResidualInterval", "acceptance_rass", "cdf_p_omega", "crossings",
    "log_p_omega", "rank_weight_solution", "rank_weights", "rank_weights_cvxpy",
    "residual_intervals", "sf_p_omega", "rejection_rass", "chain_ceiling", "commit_distribution", "expected_nfe",
    "expected_steps_per_round", "predicted_speedup", "MCRSPolicy", "acceptance_mcrs",
    "acceptance_of_policy", "gap_closed_mcrs", "mcrs_gap_table", "mcrs_policy",
]
