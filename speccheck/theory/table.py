"""The table printed by ``speccheck theory``: one row per (delta, K), answered within a budget.

RMC, D-GRS and both bounds are closed forms (microseconds). The RASS row is one call of the
public API, ``speccheck.theory.rank_weight_solution(delta, K, max_iter=rass_budget(K))``, and
prints that call's weights, acceptance and certified gap unchanged (the row's ``rass_max_iter``
names the budget: a script that makes the same call gets the same numbers). K <= ``RASS_FULL_K``:
no budget, the full solve (<= 0.6 s per cell); above, ``RASS_BUDGET_ROUNDS`` partition rounds of
the LP-duality solver, its anytime form (<= 1.4 s of CPU on 65 random cells with K in 17..128,
the command ~0.45 s more; the full solve takes 1-50 s at K >= 48: ``theory/rass_dual_survey.md``),
which certified <= 1e-12 on 34 of 40 cells with delta in [1e-12, 40], worst 3.9e-11, and 14 of
25 in the band delta in [1e-9, 1e-5], K >= 48, worst 4.9e-10 (K = 128, delta = 0.0746: 6.5e-12,
the full solve 1.9e-13; delta = 1e-6: 4.4e-11, the full solve 7.3e-13 in 12 s); where it certifies
less than 1e-12 absolute or 1e-6 relative, the row's note gives the certified bound and the
call that solves to the end. MCRS needs an LP per (delta, K) (seconds to minutes) except with
the kernel's shipped policies (G = 64, K <= 16: the ``mcrs`` kernel's own acceptance,
milliseconds): with ``mcrs="auto"`` it is computed there and where it is closed-form (delta = 0,
K = 1; delta >= 12 for K <= 16) and otherwise skipped
with a note naming ``--mcrs``; ``mcrs=True`` always solves it, ``False`` never.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from numpy.typing import ArrayLike

from speccheck.errors import InputError
from speccheck.theory.acceptance import acceptance_dgrs, acceptance_rmc
from speccheck.theory.bounds import list_bound_dependent, list_bound_iid
from speccheck.theory.rass.core import rank_weight_solution
from speccheck.theory.validate import check_delta, check_K

RASS_FULL_K = 32  # the full solve up to this K (Newton to K = 16, LP duality above: <= 0.6 s per cell)
RASS_BUDGET_ROUNDS = {64: 6, 96: 5, 128: 4}  # K up to the key: partition rounds of rass_dual's anytime form
# (which also stops after round 1 where the first partition's box binds: K >= 48, delta ~ 1e-9 .. 1e-6);
# benchmarks/bench_theory.py --cli-only times the command per cell (target: CPU <= 2 s cold)
RELATIVE_NOTE = 1e-6  # a row's note also gives the gap where it exceeds this share of min(A, 1 - A)
MCRS_CLOSED_DELTA = 12.0  # at and beyond it the MCRS policy is the top rank (no LP)
MCRS_SKIPPED = "MCRS skipped (its LP takes seconds to minutes per cell): add --mcrs to solve it"


def _mcrs_cell(d: float, K: int, mcrs, mcrs_G: int | None) -> tuple[float, str]:
    if not mcrs_G or mcrs is False:
        return float("nan"), ""
    from speccheck.theory.mcrs.core import KERNEL_G, KERNEL_MAX_K, acceptance_mcrs, shipped_policies

    # the kernel's shipped policies (K <= 16, G = 64) load in milliseconds: no LP
    shipped = mcrs_G == KERNEL_G and K <= KERNEL_MAX_K and shipped_policies(K) is not None
    cheap = d == 0.0 or K == 1 or (d >= MCRS_CLOSED_DELTA and K <= RASS_FULL_K) or shipped
    if mcrs == "auto" and not cheap:
        return float("nan"), MCRS_SKIPPED

    return float(acceptance_mcrs(d, K, mcrs_G)), ""


def rass_budget(K: int) -> int | None:
    """The ``max_iter`` of the table's RASS call at K: None (the full solve) for K <= RASS_FULL_K,
    else the partition rounds of RASS_BUDGET_ROUNDS."""
    return None if K <= RASS_FULL_K else next(v for k, v in RASS_BUDGET_ROUNDS.items() if K <= k)


def theory_table(deltas: ArrayLike, Ks: ArrayLike, mcrs_G: int | None = 64, *, mcrs: str | bool = "auto",
                 on_row: Callable[[dict], None] | None = None) -> list[dict]:
    """Rows with RMC (K = 1 rule, for reference), D-GRS, optimal-RASS acceptance with its
    certified gap (absolute, and relative to min(A, 1 - A): ``rass_relative_gap``; both exactly
    those of ``rank_weight_solution(delta, K, max_iter=rass_budget(K))``, ``rass_max_iter``), MCRS (policy on
    ``mcrs_G`` cells, evaluated exactly; see ``mcrs``), both
    bounds, RASS's gap to the i.i.d.-list bound and the share of it MCRS closes, the weights.

    deltas finite >= 0; Ks integers in 1..128; mcrs in {"auto", True, False}; ``on_row(row)`` is
    called as each row is done (a progress bar)."""
    if mcrs not in ("auto", True, False):
        raise InputError(f"mcrs must be 'auto', True or False, got mcrs={mcrs!r}")
    d_arr = check_delta(np.atleast_1d(np.asarray(deltas, dtype=np.float64)))
    Ks = [check_K(K) for K in np.atleast_1d(Ks)]
    rows = []
    for K in Ks:
        for d in d_arr:
            d = float(d)
            budget = rass_budget(K)
            sol = rank_weight_solution(d, K, max_iter=budget)
            iid = float(list_bound_iid(d, K))
            mcrs_value, note = _mcrs_cell(d, K, mcrs, mcrs_G)
            gap = iid - sol.acceptance
            closed = (mcrs_value - sol.acceptance) / gap if gap > 1e-12 and np.isfinite(mcrs_value) else float("nan")
            if sol.gap > 1e-12 or sol.relative_gap > RELATIVE_NOTE:
                lower = max(sol.rejection - sol.gap, 0.0)
                how = (f"RASS after {sol.iterations} partition round(s) of max_iter={budget}" if budget is not None
                       else "RASS")
                budget_note = (f"{how}: 1 - optimum >= {lower:.6g} (1 - RASS = {sol.rejection:.6g}, certified gap "
                               f"{sol.gap:.2g}, {sol.relative_gap:.2g} of min(A, 1 - A)"
                               + (f"; speccheck.theory.rank_weight_solution({d!r}, {K}) solves to the end)"
                                  if budget is not None else ")"))
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
                "rass_max_iter": budget,
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
            if on_row is not None:
                on_row(rows[-1])
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
                 "optimality gap <= 1e-12 and <= 1e-6 of min(A, 1 - A) unless noted; K > "
                 f"{RASS_FULL_K}: rank_weight_solution(delta, K, max_iter=rass_budget(K))); MCRS the LP policy on "
                 f"{G} cells of the largest draft (evaluated exactly); closed = share of RASS's gap "
                 "to the i.i.d.-list bound that MCRS closes.")
    lines += notes
    return "\n".join(lines)
