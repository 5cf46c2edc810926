"""The gap that MCRS closes: RASS's acceptance, MCRS's (exact and LP) and the i.i.d.-list bound at
one (delta, K) on a chosen cell layout (rows of theory/mcrs_gap_table.md)."""

from __future__ import annotations

from speccheck.theory.bounds import list_bound_iid
from speccheck.theory.mcrs.acceptance import acceptance_of_policy
from speccheck.theory.mcrs.cells import DEFAULT_G, grid_kind
from speccheck.theory.mcrs.policies import mcrs_policy
from speccheck.theory.rass import acceptance_rass

__all__ = ["gap_closed_mcrs"]


def gap_closed_mcrs(delta: float, K: int, G: int = DEFAULT_G, kind: str | None = None) -> dict:
    """One row of the gap table: RASS, MCRS (exact and LP) on G cells placed by ``kind``, the
    i.i.d.-list bound, the fraction of RASS's gap to the bound that MCRS closes (nan where the
    gap is <= 1e-12)."""
    kind = grid_kind(kind)
    pol = mcrs_policy(delta, K, G, kind=kind)
    a_m = acceptance_of_policy(delta, pol)
    a_r = float(acceptance_rass(delta, K))
    bound = float(list_bound_iid(delta, K))
    gap = bound - a_r
    frac = (a_m - a_r) / gap if gap > 1e-12 else float("nan")
    return dict(
        K=int(K), delta=float(delta), G=int(G), layout=kind, rass=a_r, mcrs=a_m, mcrs_lp=pol.lp_acceptance,
        bound=bound, rass_gap=gap, mcrs_gap=bound - a_m, closed=frac,
    )
