"""The shared delta grid and bracket, the tail-accurate normal and the rank binomials, the scan."""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy import special as sspecial

from speccheck.verifiers import _residual, grid, rass, special


def test_bracket_on_between_and_beyond_grid_points():
    lo, hi, t = grid.grid_bracket(np.array([0.0, 0.01, 0.02, 3.05, 39.5, 40.0, 1e300]))
    g = grid.DELTA_GRID
    assert (lo[0], hi[0], t[0]) == (0, 0, 0.0)  # delta = 0: the first point alone
    assert (lo[1], hi[1]) == (0, 1) and math.isclose(t[1], 0.5)
    assert (lo[2], hi[2], t[2]) == (1, 1, 0.0)  # on a grid point
    assert g[lo[3]] <= 3.05 <= g[hi[3]] and 0.0 < t[3] < 1.0
    np.testing.assert_allclose((1 - t[3]) * g[lo[3]] + t[3] * g[hi[3]], 3.05, rtol=1e-14)
    last = g.size - 1
    assert (lo[5], hi[5], t[5]) == (last, last, 0.0) and (lo[6], hi[6], t[6]) == (last, last, 0.0)


def test_bracket_takes_any_grid_and_rass_reexports_the_shared_one():
    coarse = np.array([0.0, 0.5, 2.0])
    lo, hi, t = grid.grid_bracket([1.25, 5.0], coarse)
    assert list(lo) == [1, 2] and list(hi) == [2, 2] and list(t) == [0.5, 0.0]
    assert rass.DELTA_GRID is grid.DELTA_GRID and rass.grid_bracket is grid.grid_bracket


def test_ndtr_keeps_the_lower_tail_and_rank_binomials_are_exact():
    x = torch.tensor([-37.0, -20.0, -1.0, 0.0, 3.0], dtype=torch.float64)
    np.testing.assert_allclose(special.ndtr(x).numpy(), sspecial.ndtr(x.numpy()), rtol=1e-13)
    assert float(special.ndtr(torch.tensor(-37.0, dtype=torch.float64))) > 0.0
    for K in (1, 2, 5, 16):
        want = [K * math.comb(K - 1, r - 1) for r in range(1, K + 1)]
        np.testing.assert_allclose(np.exp(special.log_rank_binomials(K)), want, rtol=1e-13)


def test_scan_sum_equals_cumsum():
    g = torch.Generator().manual_seed(0)
    for n in (1, 2, 7, 768, 1537):
        x = torch.rand(3, n, generator=g, dtype=torch.float64)
        np.testing.assert_allclose(_residual.scan_sum(x).numpy(), torch.cumsum(x, -1).numpy(), rtol=1e-12)
