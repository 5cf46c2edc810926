"""rass-icdf's output for (delta, s, generator state) does not depend on the instance's history:
the module's table caches (log-B grid tables, per-delta-set tables) filled by earlier calls with
other deltas, K and batch sizes give the same bits as empty caches (the sequence layer's replay)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from speccheck.verifiers import rass


def _call(verifier, delta, K, seed):
    s = torch.randn((delta.shape[0], K), generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    return verifier.verify(delta, s, torch.Generator().manual_seed(seed))


def _fresh_caches(monkeypatch):
    monkeypatch.setattr(rass, "_GRID_TABLES", type(rass._GRID_TABLES)())
    monkeypatch.setattr(rass, "_TABLES", type(rass._TABLES)())


def _warm_up(verifier):
    rng = np.random.default_rng(7)
    # grid points filled one at a time (a call's rejected deltas all in one grid cell; the grid
    # tables serve calls of more than 8 rejected deltas), then large deltas, single deltas, odd sizes
    cells = [(K, list(rng.uniform(d, d + 0.018, 20000))) for K in (4, 16)
             for d in (0.001, 0.021, 0.041, 1.001)]
    for K, deltas in cells + [(4, [2.5]), (16, [0.3, 0.301]), (16, list(rng.uniform(6, 40, 57))),
                      (4, list(rng.uniform(0, 12, 333))), (3, list(rng.uniform(0, 3, 9))), (16, [0.3] * 5),
                      (4, list(rng.uniform(0.001, 0.2, 100)))]:
        _call(verifier, torch.tensor(deltas, dtype=torch.float64), K, 11)


@pytest.mark.parametrize("K", [4, 16])
def test_rass_icdf_fresh_equals_warm(monkeypatch, K):
    rng = np.random.default_rng(K)
    delta = torch.as_tensor(np.concatenate([rng.uniform(0, 0.06, 20000), rng.uniform(0.05, 3, 600),
                                            rng.uniform(3, 40, 400), [0.7] * 50]), dtype=torch.float64)
    _fresh_caches(monkeypatch)
    fresh = _call(rass.RASSInverseCDF(), delta, K, 2026)
    _fresh_caches(monkeypatch)  # the warm-up fills them its own way
    warm_verifier = rass.RASSInverseCDF()
    _warm_up(warm_verifier)
    warm = _call(warm_verifier, delta, K, 2026)
    assert torch.equal(fresh[1], warm[1]) and torch.equal(fresh[2], warm[2])
    assert torch.equal(fresh[0], warm[0]), f"{int((fresh[0] != warm[0]).sum())} rows differ"
