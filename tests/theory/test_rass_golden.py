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
# cells not in the table (none: all 242 computed, ~1 h of CPU in three runs)
MISSING: set = set()
# (K, delta) -> the measured value where the target does not hold yet (issue 38 items 1-2)
OPEN_DGRS: dict = {}  # RASS's 1 - A / D-GRS's: none (RASS <= D-GRS at all 242 cells)
OPEN_REPORTED: dict = {  # |reported 1 - A - mpmath 1 - A| / mpmath 1 - A
    (32, 2.2250738585072014e-308): 1.49e-9, (32, 1e-300): 2.03e-9, (32, 1e-30): 1.3e-8, (32, 1e-14): 1.29e-8,
    (32, 1e-08): 2.78e-9, (48, 2.2250738585072014e-308): 0.00114, (48, 1e-300): 0.00106, (48, 1e-30): 0.00139,
    (48, 1e-14): 0.00135, (48, 1e-08): 5.17e-6, (64, 2.2250738585072014e-308): 0.109, (64, 1e-300): 0.0632,
    (64, 1e-30): 0.00687, (64, 1e-14): 0.0867, (64, 1e-08): 3.37e-5, (96, 1e-08): 5.9e-5, (96, 0.0001): 1.23e-9,
    (128, 1e-08): 4.09e-8, (128, 0.0001): 6.08e-9,
}
OPEN_GAP: dict = {  # certified gap / 1 - A (the gap is still valid: only loose)
    (6, 0.0001): 4.27e-9, (7, 0.0001): 5.27e-9, (8, 0.0001): 2.16e-8, (9, 0.0001): 7.88e-9, (10, 0.0001): 2.04e-8,
    (10, 0.01): 1.04e-9, (11, 0.0001): 8.66e-9, (12, 0.0001): 1.97e-8, (12, 0.01): 3.32e-9, (13, 0.0001): 9.31e-9,
    (13, 0.01): 3.61e-9, (14, 0.0001): 7.09e-9, (14, 0.01): 3.69e-8, (14, 0.1): 2.8e-9, (15, 0.0001): 9.89e-9,
    (15, 0.01): 2.57e-9, (15, 0.1): 1.55e-9, (16, 0.0001): 2.25e-9, (16, 0.1): 2.42e-9, (17, 0.0001): 1.04e-8,
    (24, 2.2250738585072014e-308): 3.08e-9, (24, 1e-300): 3.08e-9, (24, 1e-30): 3.09e-9, (24, 1e-14): 3.17e-9,
    (24, 1e-08): 3.07e-9, (24, 0.0001): 1.88e-7, (24, 0.01): 1.35e-9, (32, 2.2250738585072014e-308): 7.04e-7,
    (32, 1e-300): 6.67e-7, (32, 1e-30): 6.65e-7, (32, 1e-14): 6.65e-7, (32, 1e-08): 6.65e-7, (32, 0.0001): 6.07e-6,
    (32, 0.01): 2.05e-9, (48, 2.2250738585072014e-308): 0.0376, (48, 1e-300): 0.0362, (48, 1e-30): 0.0348,
    (48, 1e-14): 0.0362, (48, 1e-08): 0.0595, (48, 0.0001): 1.17e-5, (48, 0.01): 9.62e-9, (48, 0.1): 1.14e-8,
    (64, 2.2250738585072014e-308): 0.484, (64, 1e-300): 0.509, (64, 1e-30): 0.542, (64, 1e-14): 0.586,
    (64, 1e-08): 0.205, (64, 0.0001): 1.66e-5, (64, 0.01): 2.02e-7, (96, 2.2250738585072014e-308): 0.832,
    (96, 1e-300): 0.7, (96, 1e-30): 0.697, (96, 1e-14): 0.697, (96, 1e-08): 0.378, (96, 0.0001): 3.01e-5,
    (96, 0.01): 3.45e-7, (96, 0.1): 1.89e-8, (128, 2.2250738585072014e-308): 0.825, (128, 1e-300): 0.771,
    (128, 1e-30): 0.769, (128, 1e-14): 0.769, (128, 1e-08): 0.697, (128, 0.0001): 1.22e-5, (128, 0.01): 2.5e-7,
    (128, 0.1): 3.37e-8,
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
    got = sol.deviation_expansion if dev.ndim == 2 else sol.deviation
    assert got.shape == dev.shape
    assert np.max(np.abs(got - dev)) <= 1e-9 * max(np.abs(dev).max(), 1e-300)
