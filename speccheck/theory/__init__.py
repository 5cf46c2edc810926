"""Closed forms and optimisation (numpy/scipy/cvxpy, no torch): SPEC sections 1-2.

Acceptance of RMC, D-GRS, RASS (exact at any fixed weights: ``exact``) and MCRS, the i.i.d.-list
and dependent-drafts bounds, the certified optimal RASS rank weights (the ``rass`` package; the
quadrature LP is a cross-check in ``rass.lp``), the MCRS policies (the ``mcrs`` package), residual
intervals, speed-up predictions for draft trees. Inputs are validated by ``validate`` (delta
finite >= 0, K in 1..128, omega on the simplex). The code that generates the checked-in tables
(mpmath golden values, the papers' claims, the MCRS gap tables) is ``research/`` in the source
checkout, not part of this package.
"""

import importlib

_EXPORTS = {
    "acceptance": ("DGRSLevels", "acceptance_dgrs", "acceptance_min_coupling", "acceptance_rmc",
                   "dgrs_acceptance_from_levels", "dgrs_levels"),
    "bounds": ("list_bound_dependent", "list_bound_iid"),
    "mcrs": ("MCRSPolicy", "acceptance_mcrs", "acceptance_of_policy", "gap_closed_mcrs", "mcrs_policy"),
    "rass": ("RankWeightSolution", "ResidualInterval", "acceptance_rass", "cdf_p_omega", "crossings", "log_p_omega",
             "rank_weight_solution", "rank_weights", "rank_weights_cvxpy", "rejection_rass", "residual_intervals",
             "sf_p_omega"),
    "speedup": ("chain_ceiling", "commit_distribution", "expected_nfe", "expected_steps_per_round",
                "predicted_speedup"),
}
_HOME = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_HOME)


def __getattr__(name: str):
    """The exports load on first use (``speccheck theory`` then imports only what it solves with:
    ~0.3 s less start-up than importing every submodule here); submodules by name too."""
    if name in _HOME:
        value = getattr(importlib.import_module(f"speccheck.theory.{_HOME[name]}"), name)
        globals()[name] = value
        return value
    try:
        return importlib.import_module(f"speccheck.theory.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"speccheck.theory.{name}":
            raise
        raise AttributeError(f"module 'speccheck.theory' has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))
