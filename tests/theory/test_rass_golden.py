"""RASS's certified optimum against the issue-38 golden table (tests/theory/data/rass_golden.csv,
made by research/rass_golden.py: the package's full solve per cell, and 1 - A at its weights and
D-GRS's 1 - A by mpmath at max(60, 40 - log10(delta) + log10(1 + max|eps| / delta)) digits).

Fast by construction: the table's weights are re-evaluated by the package's evaluator (every cell:
float64 in milliseconds, or extended precision where the weights are an expansion) and only a
subset of cells is solved cold here. What the table shows for the issue's "done when" (RASS <=
D-GRS; reported 1 - A = the weights' 1 - A to 1e-9 relative; certified gap <= 1e-9 of 1 - A) is
asserted cell by cell; the cells where it does not hold yet are listed in OPEN with the measured
value: the certified gap where omega >= 0 binds at tiny delta (K = 64 at 1e-14, 96 at 1e-14, 128
at 1e-30 and 1e-14: Markov's bound is loose there and no solver reaches the optimum in float64),
at delta = 1e-8 for K >= 48, and at delta = 1e-4 .. 0.1 for K >= 24 (the LP-duality solver stops
1e-5 .. 1e-8 relative short). Markov's cells (K >= 24 at delta <= 1e-14 where omega >= 0 does not
bind) and the reported values are closed (issue 38 items 1-2: rass.precise).
Caveat: the mpmath 1 - A refines the package's float crossings by Newton (it would inherit a
crossing the float search missed altogether).
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np
import pytest

from research.rass_golden import DELTAS, KS
from speccheck.theory import rank_weight_solution, rejection_rass

GOLDEN = Path(__file__).resolve().parent / "data" / "rass_golden.csv"
RTOL = 1e-9


def _rows() -> list[dict]:
    with GOLDEN.open() as fh:
        return list(csv.DictReader(line for line in fh if not line.startswith("#")))


ROWS = _rows()
BY_CELL = {(int(r["K"]), float(r["delta"])): r for r in ROWS}
# cells not in the table (none: all 242 computed, ~1 h of CPU; the cells issue 38 items 1-2 changed re-made
# with research/rass_golden.py --cells)
MISSING: set = set()
# (K, delta) -> the measured value where the target does not hold yet (issue 38 items 1-2)
OPEN_DGRS: dict = {}  # RASS's 1 - A / D-GRS's: none (RASS <= D-GRS at all 242 cells)
OPEN_REPORTED: dict = {}  # |reported 1 - A - mpmath 1 - A| / mpmath 1 - A: none (rass.precise; were 19 cells, to 11%)
OPEN_GAP: dict = {  # certified gap / 1 - A (the gap is still valid: only loose); were 65 cells, to 0.83
    # omega >= 0 binds at tiny delta (Markov's weights leave the simplex; his bound is loose there)
    (64, 1e-14): 0.413, (96, 1e-14): 0.697, (128, 1e-30): 0.769, (128, 1e-14): 0.769,
    # delta = 1e-8, K >= 48: the LP-duality solver's gap stays open (omega >= 0 binds; box form)
    (48, 1e-08): 0.0595, (64, 1e-08): 0.205, (96, 1e-08): 0.378, (128, 1e-08): 0.697,
    # delta = 1e-4 .. 0.1, K >= 24: the LP-duality solver's gap stays 3e-9 .. 3e-5 of 1 - A
    (24, 0.0001): 1.7e-07, (32, 0.0001): 2.92e-06, (48, 0.0001): 1.12e-06, (48, 0.01): 2.84e-09,
    (64, 0.0001): 1.66e-05, (64, 0.01): 1.34e-08, (96, 0.0001): 1.86e-05, (96, 0.01): 3.45e-07,
    (128, 0.0001): 1.22e-05, (128, 0.01): 2.5e-07, (128, 0.1): 3.37e-08,
}


def _deviation(row: dict) -> np.ndarray:
    """The stored deviations: shape (K,), or (m, K) where some entry is an expansion "hi+lo+..."
    (``RankWeightSolution.deviation_expansion``; column sums are the exact deviations)."""
    # components are joined by "+" before the next "0x" or "-0x" (a hex float's exponent may read "p+0")
    cols = [[float.fromhex(x) for x in re.split(r"\+(?=-?0x)", entry)] for entry in row["deviation_hex"].split()]
    m = max(len(c) for c in cols)
    if m == 1:
        return np.array([c[0] for c in cols])
    return np.array([c + [0.0] * (m - len(c)) for c in cols]).T


def test_table_covers_every_cell():
    assert set(BY_CELL) | MISSING == {(K, d) for K in KS for d in DELTAS} and not set(BY_CELL) & MISSING


def test_open_cells_are_still_open():
    """The OPEN lists are the measured state, not a tolerance: a cell that now meets its target
    must leave its list (so the lists only shrink)."""
    for key, measured in OPEN_REPORTED.items():
        assert float(BY_CELL[key]["reported_rel_err"]) == pytest.approx(measured, rel=0.05)
    for key, measured in OPEN_GAP.items():
        assert float(BY_CELL[key]["gap_rel"]) == pytest.approx(measured, rel=0.05)


@pytest.mark.parametrize("key", sorted(BY_CELL))
def test_golden_cell(key):
    r = BY_CELL[key]
    mp_rej, dgrs = float(r["rass_rejection_mp"]), float(r["dgrs_rejection_mp"])
    if key not in OPEN_DGRS:
        assert mp_rej <= dgrs * (1 + 1e-12), (key, mp_rej, dgrs)
    if key not in OPEN_REPORTED:
        assert float(r["reported_rel_err"]) <= RTOL, key
    if key not in OPEN_GAP:
        assert float(r["gap_rel"]) <= RTOL, key


@pytest.mark.parametrize("K", KS)
def test_float_evaluator_on_the_golden_weights(K):
    """rejection_rass at the stored weights equals the mpmath value within the certified gap
    (the gap includes the evaluator's own rounding allowance), at every delta."""
    for d in DELTAS:
        if (K, d) in MISSING:
            continue
        r = BY_CELL[(K, d)]
        rej = float(rejection_rass(d, K, deviation=_deviation(r)))
        assert abs(rej - float(r["rass_rejection_mp"])) <= float(r["rass_gap"]) + 1e-12 * rej, (K, d)


@pytest.mark.parametrize("K,d", [(2, 0.1), (3, 1e-8), (5, 4.0), (8, 1e-30), (8, 1.0), (12, 1e-4), (16, 0.01),
                                 (17, 1.0), (24, 40.0), (32, 1e-300)])
def test_cold_solve_reproduces_the_golden_cell(K, d):
    r = BY_CELL[(K, d)]
    sol = rank_weight_solution(d, K)
    assert sol.rejection == pytest.approx(float(r["rass_rejection"]), rel=1e-12, abs=0.0)
    dev = _deviation(r)
    assert (sol.deviation_tail is not None) == (dev.ndim == 2)
    assert np.max(np.abs(sol.deviation - (dev[0] if dev.ndim == 2 else dev))) <= 1e-9 * max(np.abs(dev).max(), 1e-300)
    if dev.ndim == 2:  # the tails (the table leaves out zero components): equal column sums
        assert np.array_equal(sol.deviation_expansion[1:].sum(axis=0), dev[1:].sum(axis=0))
