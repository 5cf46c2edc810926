"""The checked MCRS policies: the LP's policy (:mod:`speccheck.theory.mcrs.lp`) at a delta, returned
only if its exact acceptance reaches every reference policy's (RASS's weights, the policy on half as
many cells), over a list of LP attempts."""

from __future__ import annotations

import functools

import numpy as np

from speccheck.theory.mcrs import lp
from speccheck.theory.mcrs.acceptance import acceptance_of_policy
from speccheck.theory.mcrs.cells import DEFAULT_G, GRID_KIND, grid_kind, mcrs_edges
from speccheck.theory.mcrs.policy import MCRSPolicy
from speccheck.theory.validate import check_delta, check_K

__all__ = ["CHECK_RTOL", "LP_ATTEMPTS", "TOP_RANK_DELTA", "PolicyCheckError", "check_level", "checked_policy",
           "mcrs_policy"]

TOP_RANK_DELTA = 12.0  # beyond this delta the LP is skipped: pi_K = 1 (RASS top rank)


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
    from speccheck.theory.rass import rank_weights

    a, abar = mcrs_edges(K, G, kind)
    refs = [MCRSPolicy(K, a, abar, np.tile(rank_weights(delta, K), (G, 1)), delta)]
    if G >= 8 and G % 2 == 0 and K > 1 and 0.0 < delta < TOP_RANK_DELTA and np.allclose(
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
            pol = lp.solve_lp(d, K, G, max(8, int(round(n_target * scale))), method=method, kind=kind)
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
    if K == 1 or delta >= TOP_RANK_DELTA:
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
    from speccheck.theory.rass import rank_weights

    try:
        pol = lp.solve_lp(delta, K, G, n_target, kind=kind)
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


