"""The delta grid shared by the grid-interpolated rules, and the bracket of a delta in a grid.

Rules whose parameters are solved per delta (RASS's rank weights, MCRS's policies) tabulate them
on a fixed increasing grid g_0 = 0 < g_1 < ... < g_{n-1} and give a row with delta the convex
combination (1 - t) P(g_lo) + t P(g_hi), g_lo <= delta <= g_hi, t = (delta - g_lo) / (g_hi - g_lo).
A convex combination of valid parameters is valid (W_K and the MCRS policy set are convex), so an
interpolated rule stays exact; it is near-optimal where P is close to linear between grid points.

:data:`DELTA_GRID` is RASS's grid (step 0.02 on [0, 3], 0.1 on [3, 8], 1 on [8, 40]);
:func:`grid_bracket` takes any grid (MCRS passes its own, coarser one).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

DELTA_GRID = np.unique(np.round(np.concatenate([
    np.arange(0.0, 3.0, 0.02), np.arange(3.0, 8.0, 0.1), np.arange(8.0, 40.0 + 1e-9, 1.0),
]), 12))


def grid_bracket(delta: ArrayLike, grid: np.ndarray = DELTA_GRID) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lo, hi, t) per delta (flattened): a row mixes grid points lo and hi with weight t on hi.

    Edge cases: hi = lo where t = 0 (delta on a grid point, in particular delta = 0); deltas at
    or beyond the last grid point use that point alone (lo = hi = n - 1, t = 0), so callers that
    switch to another parameter beyond the grid test ``delta >= grid[-1]`` themselves.
    """
    flat = np.minimum(np.asarray(delta, np.float64).ravel(), grid[-1])
    lo = np.clip(np.searchsorted(grid, flat, side="right") - 1, 0, grid.size - 2)
    t = np.clip((flat - grid[lo]) / (grid[lo + 1] - grid[lo]), 0.0, 1.0)
    at_top = t >= 1.0  # only delta >= grid[-1]: name the last point alone, t = 0
    lo = np.where(at_top, lo + 1, lo)
    t = np.where(at_top, 0.0, t)
    return lo, np.where(t > 0.0, lo + 1, lo), t
