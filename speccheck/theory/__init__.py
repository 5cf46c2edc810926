"""Closed forms and optimisation (numpy/scipy/cvxpy, no torch): SPEC sections 1-2.

Acceptance of RMC, D-GRS and RASS, the i.i.d.-list and dependent-drafts bounds, the RASS
rank-weight LP and residual intervals, and speed-up predictions for draft trees.
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
    residual_intervals,
    sf_p_omega,
)
from speccheck.theory.mcrs import (
    MCRSPolicy,
    acceptance_mcrs,
    acceptance_of_policy,
    gap_closed_mcrs,
    mcrs_gap_table,
    mcrs_policy,
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
    "residual_intervals", "sf_p_omega", "chain_ceiling", "commit_distribution", "expected_nfe",
    "expected_steps_per_round", "predicted_speedup", "MCRSPolicy", "acceptance_mcrs",
    "acceptance_of_policy", "gap_closed_mcrs", "mcrs_gap_table", "mcrs_policy",
]
