"""The table printed by ``speccheck theory``: one row per (delta, K)."""

from __future__ import annotations

import numpy as np

from speccheck.theory._validate import check_delta, check_K
from speccheck.theory.acceptance import acceptance_dgrs, acceptance_rmc
from speccheck.theory.bounds import list_bound_dependent, list_bound_iid
from speccheck.theory.rass import rank_weight_solution


def theory_table(deltas, Ks) -> list[dict]:
    """Rows with RMC (K = 1 rule, shown for reference), D-GRS and optimal-RASS acceptance,
    both bounds, RASS's gap to the i.i.d.-list bound, the optimal weights and the LP's
    quadrature loss."""
    d_arr = check_delta(np.atleast_1d(np.asarray(deltas, dtype=np.float64)))
    Ks = [check_K(K) for K in np.atleast_1d(Ks)]
    rows = []
    for K in Ks:
        for d in d_arr:
            d = float(d)
            sol = rank_weight_solution(d, K)
            iid = float(list_bound_iid(d, K))
            rows.append({
                "delta": d,
                "K": K,
                "rmc": float(acceptance_rmc(d)),
                "dgrs": float(acceptance_dgrs(d, K)),
                "rass": sol.acceptance,
                "iid_bound": iid,
                "dependent_bound": float(list_bound_dependent(d, K)),
                "rass_gap_iid": iid - sol.acceptance,
                "omega": [round(float(w), 6) for w in sol.omega],
                "quadrature_loss": sol.quadrature_loss,
            })
    return rows


def format_theory_table(rows: list[dict]) -> str:
    head = (f"{'delta':>8} {'K':>3} {'RMC':>9} {'D-GRS':>9} {'RASS':>9} {'iid bnd':>9} "
            f"{'dep bnd':>9} {'RASS gap':>9}  omega (ranks 1..K, K = top)")
    lines = [head, "-" * len(head)]
    for r in rows:
        omega = " ".join(f"{w:.3f}" for w in r["omega"])
        lines.append(
            f"{r['delta']:8.4g} {r['K']:3d} {r['rmc']:9.6f} {r['dgrs']:9.6f} {r['rass']:9.6f} "
            f"{r['iid_bound']:9.6f} {r['dependent_bound']:9.6f} {r['rass_gap_iid']:9.2e}  [{omega}]"
        )
    lines.append("RMC uses one draft (K = 1); RASS uses the optimal rank weights of the LP "
                 "(acceptance evaluated exactly, not on the LP grid).")
    return "\n".join(lines)
