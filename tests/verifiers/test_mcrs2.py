"""The MCRS-2 kernel (min-max conditioned rank selection): exactness against N(delta, 1) (KS with a
DKW-Massart band), declared vs measured acceptance, loading the shipped policies with no cache and
no LP, and the share of RASS's gap the shipped policies close. False-failure rates per test."""

import warnings

import numpy as np
import pytest
import torch
from scipy import special

from speccheck.theory import acceptance_rass, list_bound_iid
from speccheck.verifiers import get, mcrs2_data
from speccheck.verifiers.mcrs import MCRS
from speccheck.verifiers.mcrs2 import MCRS2

ALPHA = 1e-6  # false-failure rate of each statistical assertion
Z = float(special.ndtri(1 - ALPHA / 2))  # two-sided normal quantile at ALPHA (4.89)


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    monkeypatch.setenv("SPECCHECK_CACHE_DIR", "")


def _ks_stat(x):
    x = np.sort(x)
    n = x.size
    F = special.ndtr(x)
    return max(np.max(np.arange(1, n + 1) / n - F), np.max(F - np.arange(n) / n))


@pytest.mark.parametrize("K,deltas", [(2, [0.07]), (3, [0.3]), (4, [0.05, 0.5, 1.3]), (8, [0.2, 0.9]), (4, "mixed")])
def test_output_is_exactly_the_target(K, deltas):
    """s_out - delta ~ N(0, 1) (KS distance below the DKW-Massart band at ALPHA), on grid points,
    between them, and with a different delta per row (0 .. 3.5, with tiny ones)."""
    n = 60_000
    g = torch.Generator().manual_seed(K * 7 + 1)
    if deltas == "mixed":
        d = torch.as_tensor(np.random.default_rng(3).choice([0.0, 4e-4, 0.012, 0.26, 0.8, 3.5], n))
    else:
        d = torch.as_tensor(np.repeat(deltas, -(-n // len(deltas)))[:n])
    s = torch.randn(n, K, generator=g, dtype=torch.float64)
    out, acc, idx = MCRS2().verify(d, s, g)
    assert torch.isfinite(out).all() and ((idx[acc] >= 0) & (idx[acc] < K)).all()
    assert torch.equal(out[acc], s[acc, :].gather(1, idx[acc, None])[:, 0])
    assert _ks_stat((out - d).numpy()) < np.sqrt(np.log(2 / ALPHA) / (2 * n))


@pytest.mark.parametrize("K,delta", [(2, 0.15), (4, 0.2), (4, 0.625), (8, 0.5)])
def test_measured_acceptance_is_the_declared_one(K, delta):
    """The acceptance rate over n rows is within Z standard errors of acceptance(delta, K), the
    exact acceptance of the (interpolated) policy used (two-sided false-failure rate ALPHA)."""
    n = 200_000
    g = torch.Generator().manual_seed(K)
    v = MCRS2()
    _, acc, _ = v.verify(torch.full((n,), delta, dtype=torch.float64),
                         torch.randn(n, K, generator=g, dtype=torch.float64), g)
    a = float(v.acceptance(np.array([delta]), K)[0])
    se = np.sqrt(max(a * (1 - a), 1e-7) / n)
    assert abs(acc.double().mean().item() - a) < Z * se + 1e-9, (acc.double().mean().item(), a)


def test_shipped_policies_load_without_cache_or_lp(monkeypatch):
    """Fresh install: every K of SHIPPED_KS has all its min-max policies in the package data (key and
    checksum match), so neither the kernel nor acceptance() solves an LP or warns, for any K in
    2..MAX_MINMAX_K (solvers patched to fail, warnings are errors)."""
    from speccheck.theory.mcrs import lp as mcrs_lp
    from speccheck.theory.mcrs import minmax as mm
    from speccheck.verifiers import mcrs2

    def boom(*a, **k):
        raise AssertionError("an LP was solved")

    monkeypatch.setattr(mm, "_solve_lp", boom)
    monkeypatch.setattr(mcrs_lp, "solve_lp", boom)
    monkeypatch.setattr(mcrs2, "_TABLES", {})
    for K in mcrs2_data.SHIPPED_KS:
        pi, rec = mcrs2_data.stored_policies(K)
        idx = mcrs2_data.minmax_indices(K)
        assert np.isfinite(rec[idx]).all(), K
        assert np.allclose(pi[idx].sum(axis=-1), 1.0, atol=1e-9) and (pi[idx] >= 0).all(), K
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        v = MCRS2()
        g = torch.Generator().manual_seed(0)
        for K in range(2, mcrs2_data.MAX_MINMAX_K + 1):
            d = torch.as_tensor(np.random.default_rng(K).uniform(0, 3.2, 512))
            v.verify(d, torch.randn(512, K, generator=g, dtype=torch.float64), g)
            assert np.all(np.isfinite(v.acceptance(np.array([0.013, 1.11, 2.5]), K)))


def test_recorded_acceptance_is_the_exact_one():
    """checked_K{K} holds the exact acceptance of the stored policy (what acceptance() declares
    on grid points)."""
    v = MCRS2()
    for K, d in ((4, 0.1), (8, 1.0)):
        gi = int(np.argmin(np.abs(mcrs2_data.GRID - d)))
        _, rec = mcrs2_data.stored_policies(K)
        assert float(v.acceptance(np.array([mcrs2_data.GRID[gi]]), K)[0]) == pytest.approx(float(rec[gi]), abs=1e-12)


# The targets of issue 29.3 on the shipped tables, at every grid delta with RASS's gap to the
# i.i.d.-list bound > 1e-3: share closed >= TARGET[K] (measured minima in docs/mcrs.md).
SHARE_TARGET = {K: 0.97 if K <= 4 else 0.90 for K in mcrs2_data.SHIPPED_KS}


@pytest.mark.parametrize("K", sorted(SHARE_TARGET))
def test_shipped_policies_close_the_target_share_on_the_grid(K):
    _, rec = mcrs2_data.stored_policies(K)
    for gi in mcrs2_data.minmax_indices(K):
        d = float(mcrs2_data.GRID[gi])
        ar, bound = float(acceptance_rass(d, K)), float(list_bound_iid(d, K))
        if bound - ar > 1e-3:
            assert (rec[gi] - ar) / (bound - ar) >= SHARE_TARGET[K], (K, d, (rec[gi] - ar) / (bound - ar))


def _graded_shares(d: np.ndarray, K: int) -> tuple[np.ndarray, np.ndarray]:
    """(graded deltas, the kernel's share of RASS's gap to the i.i.d.-list bound there): deltas
    with a gap > 1e-3, share = (A - A_RASS) / gap with A the exact acceptance of the policy used."""
    ar = np.array([float(acceptance_rass(x, K)) for x in d])
    gap = np.array([float(list_bound_iid(x, K)) for x in d]) - ar
    graded = gap > 1e-3
    return d[graded], (MCRS2().acceptance(d[graded], K) - ar[graded]) / gap[graded]


@pytest.mark.parametrize("K", [2])
def test_shipped_kernel_closes_the_target_share_between_grid_points(K):
    """Dense scan between grid points, where the kernel mixes its neighbours' policies: 7 deltas
    inside every interval of the policy grid, graded where RASS's gap > 1e-3, share >=
    SHARE_TARGET[K] (exact acceptance of the policy used). K = 2 is the tight case: its LP policies
    close 97.01-97.03% on [0.125, 0.2] (measured minimum 97.009% at 0.166, docs/mcrs.md)."""
    grid = mcrs2_data.GRID[mcrs2_data.minmax_indices(K)]
    graded, share = _graded_shares((grid[:-1, None] + np.arange(1, 8) / 8 * np.diff(grid)[:, None]).ravel(), K)
    assert graded.size > 300
    assert share.min() >= SHARE_TARGET[K], (K, graded[np.argmin(share)], share.min())


@pytest.mark.parametrize("K", [K for K in mcrs2_data.SHIPPED_KS if K >= 5])
def test_shipped_kernel_closes_the_target_share_at_every_graded_delta(K):
    """Issue 38.5 (K = 5..16): at every MCRS-2 grid delta in (0, 3] and halfway between neighbours
    (where the kernel mixes their policies: mcrs2_data.MINMAX_RANGE; beyond the range the max-only
    MCRS policy lifted to the pairs), graded where RASS's
    gap to the i.i.d.-list bound > 1e-3, the kernel's exact acceptance closes >= 90% of that gap."""
    grid = mcrs2_data.GRID[(mcrs2_data.GRID > 0) & (mcrs2_data.GRID <= mcrs2_data.MINMAX_MAX_DELTA + 1e-9)]
    graded, share = _graded_shares(np.sort(np.concatenate([grid, 0.5 * (grid[1:] + grid[:-1])])), K)
    assert graded.size > 100
    assert share.min() >= SHARE_TARGET[K], (K, graded[np.argmin(share)], share.min())


@pytest.mark.parametrize("K", [1, 17, 32] + [K for K in range(2, mcrs2_data.MAX_MINMAX_K + 1)
                                             if K not in mcrs2_data.SHIPPED_KS])
def test_without_shipped_min_max_policies_it_is_the_mcrs_kernel(K):
    """K outside SHIPPED_KS (1, > 16, and any K <= 16 not shipped): the MCRS kernel itself (same
    seed, same outputs; same declared acceptance)."""
    d = torch.full((256,), 0.7, dtype=torch.float64)
    s = torch.randn(256, K, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    a = MCRS2().verify(d, s, torch.Generator().manual_seed(2))
    b = MCRS().verify(d, s, torch.Generator().manual_seed(2))
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert MCRS2().acceptance(np.array([0.7]), K)[0] == MCRS().acceptance(np.array([0.7]), K)[0]


def test_registered_and_corrupt_data_is_ignored(monkeypatch, tmp_path):
    """``get("mcrs2")`` finds the rule; package data whose checksum fails is not used (the kernel
    then falls back to the max-only policy, with a warning saying so)."""
    from speccheck.verifiers import mcrs2

    assert get("mcrs2").name == "mcrs2"
    with np.load(mcrs2_data.PACKAGE_DATA) as z:
        data = {k: z[k] for k in z.files}
    data["K3"] = data["K3"].copy()
    data["K3"][30, 0, 0] = data["K3"][30, 0, 0][::-1]
    path = tmp_path / "bad.npz"
    np.savez(path, **data)
    assert mcrs2_data.stored_policies(3, path) is None
    assert mcrs2_data.stored_policies(4, path) is not None
    monkeypatch.setattr(mcrs2_data, "PACKAGE_DATA", path)
    monkeypatch.setattr(mcrs2, "_TABLES", {})
    with pytest.warns(RuntimeWarning, match="no shipped min-max policies for K=3"):
        MCRS2().acceptance(np.array([0.5]), 3)


def test_regrid_moves_data_built_on_an_earlier_grid(tmp_path):
    """regrid_minmax_data: data keyed for an earlier grid (here GRID without FINER) lands on GRID
    with the same policies and records at the same deltas, NaN at the new points, and loads."""
    old = np.setdiff1d(mcrs2_data.GRID, mcrs2_data.FINER)
    at = np.searchsorted(mcrs2_data.GRID, old)
    data = {"grid": old}
    for K in (2, 4):
        pi, rec = mcrs2_data.stored_policies(K)
        data[f"K{K}"], data[f"checked_K{K}"] = pi[at], rec[at]
        data[f"layout_K{K}"] = np.array(mcrs2_data.layout_key(K, old))
        data[f"sha_K{K}"] = np.array(mcrs2_data.checksum(pi[at], rec[at]))
    path = tmp_path / "old.npz"
    np.savez(path, **data)
    assert mcrs2_data.stored_policies(2, path) is None  # keyed for the old grid
    mcrs2_data.regrid_minmax_data(old, path)
    new = np.isin(mcrs2_data.GRID, mcrs2_data.FINER)
    for K in (2, 4):
        pi, rec = mcrs2_data.stored_policies(K, path)
        ref_pi, ref_rec = mcrs2_data.stored_policies(K)
        assert np.array_equal(pi[~new], ref_pi[~new], equal_nan=True)
        assert np.array_equal(rec[~new], ref_rec[~new], equal_nan=True)
        assert np.isnan(rec[new]).all() and np.isnan(pi[new]).all()
    assert mcrs2_data.stored_policies(3, path) is None
