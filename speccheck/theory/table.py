"""The table printed by ``speccheck theory``: one row per (delta, K), answered within a budget.

RMC, D-GRS and both bounds are closed forms (microseconds). The RASS optimum is solved to its
certified gap for K <= ``RASS_FULL_K`` (milliseconds) and with a budget of refinement rounds of
the LP-duality solver above it (``RASS_BUDGET_ROUNDS``: about a second at K = 128; where the
rounds certify less than 1e-12, the row's note gives the certified bound). MCRS needs an LP per
(delta, K) (seconds to minutes) except with the kernel's shipped policies (G = 64, K <= 16: the
``mcrs`` kernel's own acceptance, milliseconds): with ``mcrs="auto"`` it is computed there and
where it is closed-form (delta = 0, K = 1; delta >= 12 for K <= 16) and otherwise skipped
with a note naming ``--mcrs``; ``mcrs=True`` always solves it, ``False`` never.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from speccheck.errors import InputError
from speccheck.theory.acceptance import acceptance_dgrs, acceptance_rmc
from speccheck.theory.bounds import list_bound_dependent, list_bound_iid
from speccheck.theory.rass import rank_weight_solution
from speccheck.theory.rass_dual import certified_rank_weights
from speccheck.theory.validate import check_delta, check_K

RASS_FULL_K = 16  # the Newton solver to its certified gap up to this K; above, the LP-duality solver
RASS_BUDGET_ROUNDS = {64: 2, 128: 1}  # K up to the key: refinement rounds of rass_dual (<= 1.0 s at
# K <= 64 over 27 deltas in [0, 40], ~0.3-0.7 s at K = 128 for one round; benchmarks/bench_theory.py
# times the command); the row reports the gap those rounds certify
RELATIVE_NOTE = 1e-6  # a row's note also gives the gap where it exceeds this share of min(A, 1 - A)
MCRS_CLOSED_DELTA = 12.0  # at and beyond it the MCRS policy is the top rank (no LP)
MCRS_SKIPPED = "MCRS skipped (its LP takes seconds to minutes per cell): add --mcrs to solve it"


def _mcrs_cell(d: float, K: int, mcrs, mcrs_G: int | None) -> tuple[float, str]:
    if not mcrs_G or mcrs is False:
        return float("nan"), ""
    from speccheck.theory.mcrs import KERNEL_G, KERNEL_MAX_K, acceptance_mcrs, shipped_policies

    # the kernel's shipped policies (K <= 16, G = 64) load in milliseconds: no LP
    shipped = mcrs_G == KERNEL_G and K <= KERNEL_MAX_K and shipped_policies(K) is not None
    cheap = d == 0.0 or K == 1 or (d >= MCRS_CLOSED_DELTA and K <= RASS_FULL_K) or shipped
    if mcrs == "auto" and not cheap:
        return float("nan"), MCRS_SKIPPED

    return float(acceptance_mcrs(d, K, mcrs_G)), ""


def theory_table(deltas: ArrayLike, Ks: ArrayLike, mcrs_G: int | None = 64, *, mcrs: str | bool = "auto") -> list[dict]:
    """Rows with RMC (K = 1 rule, for reference), D-GRS, optimal-RASS acceptance with its
    certified gap (absolute, and relative to min(A, 1 - A): ``rass_relative_gap``), MCRS (policy on
    ``mcrs_G`` cells, evaluated exactly; see ``mcrs``), both
    bounds, RASS's gap to the i.i.d.-list bound and the share of it MCRS closes, the weights.

    deltas finite >= 0; Ks integers in 1..128; mcrs in {"auto", True, False}."""
    if mcrs not in ("auto", True, False):
        raise InputError(f"mcrs must be 'auto', True or False, got mcrs={mcrs!r}")
    d_arr = check_delta(np.atleast_1d(np.asarray(deltas, dtype=np.float64)))
    Ks = [check_K(K) for K in np.atleast_1d(Ks)]
    rows = []
    for K in Ks:
        for d in d_arr:
            d = float(d)
            budget = None if K <= RASS_FULL_K else next(v for k, v in RASS_BUDGET_ROUNDS.items() if K <= k)
            sol = rank_weight_solution(d, K) if budget is None else certified_rank_weights(d, K, max_rounds=budget)
            iid = float(list_bound_iid(d, K))
            mcrs_value, note = _mcrs_cell(d, K, mcrs, mcrs_G)
            gap = iid - sol.acceptance
            closed = (mcrs_value - sol.acceptance) / gap if gap > 1e-12 and np.isfinite(mcrs_value) else float("nan")
            if sol.gap > 1e-12 or sol.relative_gap > RELATIVE_NOTE:
                lower = max(sol.rejection - sol.gap, 0.0)
                how = (f"RASS after {budget} refinement round(s)" if budget is not None else "RASS")
                budget_note = (f"{how}: 1 - optimum >= {lower:.6g} (1 - RASS = {sol.rejection:.6g}, certified gap "
                               f"{sol.gap:.2g}, {sol.relative_gap:.2g} of min(A, 1 - A)"
                               + ("; speccheck.theory.rank_weight_solution runs the full solve)" if budget is not None
                                  else ")"))
                note = "; ".join(x for x in (note, budget_note) if x)
            rows.append({
                "delta": d,
                "K": K,
                "rmc": float(acceptance_rmc(d)),
                "dgrs": float(acceptance_dgrs(d, K)),
                "rass": sol.acceptance,
                "rass_rejection": sol.rejection,
                "rass_certified_gap": sol.gap,
                "rass_relative_gap": sol.relative_gap,
                "mcrs": mcrs_value,
                "mcrs_G": mcrs_G,
                "iid_bound": iid,
                "dependent_bound": float(list_bound_dependent(d, K)),
                "rass_gap_iid": gap,
                "mcrs_gap_closed": closed,
                "omega": [round(float(w), 6) for w in sol.omega],
                "quadrature_loss": 0.0,
                "note": note,
            })
    return rows


def format_theory_table(rows: list[dict]) -> str:
    """The rows as a fixed-width text table with its notes."""
    head = (f"{'delta':>8} {'K':>3} {'RMC':>9} {'D-GRS':>9} {'RASS':>9} {'MCRS':>9} {'iid bnd':>9} "
            f"{'dep bnd':>9} {'RASS gap':>9} {'closed':>7}  omega (ranks 1..K, K = top)")
    lines = [head, "-" * len(head)]
    notes = []
    for r in rows:
        omega = " ".join(f"{w:.3f}" for w in r["omega"])
        c = r["mcrs_gap_closed"]
        closed = f"{100 * c:.1f}%" if np.isfinite(c) else "n/a"
        mcrs = f"{r['mcrs']:9.6f}" if np.isfinite(r["mcrs"]) else f"{'-':>9}"
        lines.append(
            f"{r['delta']:8.4g} {r['K']:3d} {r['rmc']:9.6f} {r['dgrs']:9.6f} {r['rass']:9.6f} {mcrs} "
            f"{r['iid_bound']:9.6f} {r['dependent_bound']:9.6f} {r['rass_gap_iid']:9.2e} {closed:>7}  [{omega}]"
        )
        if r.get("note"):
            notes.append(f"delta = {r['delta']:.4g}, K = {r['K']}: {r['note']}")
    G = next((r["mcrs_G"] for r in rows if r.get("mcrs_G")), None)
    lines.append("RMC uses one draft (K = 1); RASS uses the certified optimal rank weights (acceptance exact, "
                 "optimality gap <= 1e-12 and <= 1e-6 of min(A, 1 - A) unless noted); MCRS the LP policy on "
                 f"{G} cells of the largest draft (evaluated exactly); closed = share of RASS's gap "
                 "to the i.i.d.-list bound that MCRS closes.")
    lines += notes
    return "\n".join(lines)
