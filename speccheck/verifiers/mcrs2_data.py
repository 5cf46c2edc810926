"""MCRS-2 policy data: the checked min-max policies of :mod:`speccheck.theory.mcrs.minmax` on the
MCRS-2 delta grid, shipped as speccheck/data/mcrs2_policies_G8x64.npz (numpy only, no torch).

Grid (:data:`GRID`): MCRS's grid plus :data:`FINE` (step 0.0125 on [0.0375, 0.4875]) and
:data:`FINER` (FINE's midpoints on [0.125, 0.2]). Mixing the neighbouring grid policies costs the
min-max policy much more than the max-only one between grid points 0.05 apart (K = 4, delta =
0.075: 90.7% of RASS's gap closed against 97.9% / 97.7% at 0.05 / 0.1; K = 2, 0.075: 95.5%); at
step 0.0125 the loss falls ~16-fold. FINER is where K = 2's LP policies themselves close only
97.01-97.03% of the gap, so the 0.01-0.04 points lost between FINE points took it below 97%
(96.988% at 0.168); at step 0.00625 the minimum is the LP's own, 97.009% at 0.16875.

Layout per K (2..:data:`MAX_MINMAX_K`): ``K{K}`` shape (TOP, G1, G2, K), NaN where the grid
point has no min-max policy (delta = 0, delta > :data:`MINMAX_MAX_DELTA`, points outside
:func:`minmax_indices`: the kernel then uses the max-only MCRS policy lifted to the pairs at MCRS's
grid points, and at a FINE or FINER point the mix of its nearest neighbours with a policy);
``checked_K{K}`` the exact acceptance each stored policy passed its check with; ``layout_K{K}`` the
layout key (from the definition only: version, cells, K, grid in units of 0.00005); ``sha_K{K}`` a
sha256 of both arrays, verified on load.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike

from speccheck.theory.mcrs import minmax as _mm
from speccheck.verifiers import mcrs as _mcrs

G1, G2 = 8, 64  # min-cells x max-cells (the max-cells are the MCRS kernel's VERIFIER_G cells)
MAX_MINMAX_K = 16  # largest K with min-max policies; above it MCRS-2 is the MCRS kernel
# K whose min-max policies ship in the package data; MCRS-2 is the MCRS kernel for every other K.
SHIPPED_KS = (2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
MINMAX_MIN_DELTA_LARGE_K = 0.05  # K = 8: grid points below this use the max-only policy too
FINE_RANGE_LARGE_K = (0.1, 0.25)  # K = 8: FINE points with their own LP policy
# K in 5..16 but 8: (first, last, fine_last): the grid deltas with a min-max LP policy are MCRS's
# grid points (0.05 apart) in [first, last] and the FINE points at multiples of 0.025 in
# [first, fine_last]. Below `first` RASS's gap to the list bound is < 1e-3; above `last` the max-only
# MCRS kernel alone closes >= 95% of it (measured on the grid and its midpoints:
# research.mcrs2_tables). Mixing LP policies 0.05 apart lost up to 5 points of share at K = 8 on
# [0.25, 0.5] and took K = 7 to 88.3% at 0.0875 (0.025 apart there: see the share test,
# test_shipped_kernel_closes_the_target_share_at_every_graded_delta).
MINMAX_RANGE = {5: (0.035, 0.8, 0.5), 6: (0.075, 0.8, 0.5), 7: (0.05, 0.65, 0.25), 9: (0.1, 0.7, 0.25),
                10: (0.15, 0.7, 0.3), 11: (0.15, 0.75, 0.3), 12: (0.2, 0.75, 0.4), 13: (0.2, 0.75, 0.4),
                14: (0.2, 0.75, 0.4), 15: (0.25, 0.8, 0.45), 16: (0.25, 0.8, 0.45)}
MINMAX_MAX_DELTA = 3.0  # grid points above this use the max-only policy (RASS's gap < ~1e-4 there)
LAYOUT_VERSION = 2
FINE = np.round(np.arange(0.0375, 0.49, 0.0125), 12)
FINER = np.round(np.arange(0.13125, 0.2, 0.0125), 12)  # FINE's midpoints on [0.125, 0.2]
# every point a multiple of 0.00005 (layout_key's unit)
GRID = np.unique(np.round(np.concatenate([_mcrs.DELTA_GRID, FINE, FINER]), 12))
TOP = GRID.size  # pseudo grid point: the top-rank policy (delta >= GRID[-1])
ON_MCRS_GRID = np.isin(GRID, _mcrs.DELTA_GRID)
MCRS_INDEX = np.searchsorted(_mcrs.DELTA_GRID, GRID)  # index in MCRS's grid (valid where ON_MCRS_GRID)
PACKAGE_DATA = Path(__file__).resolve().parent.parent / "data" / f"mcrs2_policies_G{G1}x{G2}.npz"


def layout_key(K: int, grid: np.ndarray = GRID) -> str:
    """From the layout's definition only (never from computed floats): same under every numpy.
    ``grid``: :data:`GRID` (an earlier grid only to read data written under it, :func:`regrid_minmax_data`)."""
    units = np.rint(np.asarray(grid) * 20000.0).astype(np.int64)  # exact: multiples of 0.00005
    desc = (f"mcrs2;v{LAYOUT_VERSION};{_mcrs._theory.GRID_KIND};K={int(K)};G1={G1};G2={G2};"
            f"maxdelta_milli={int(round(MINMAX_MAX_DELTA * 1000))};grid_20000ths=" + ",".join(map(str, units)))
    return hashlib.sha256(desc.encode("ascii")).hexdigest()[:16]


def checksum(pi: np.ndarray, checked: np.ndarray) -> str:
    h = hashlib.sha256(np.ascontiguousarray(pi, dtype="<f8").tobytes())
    h.update(np.ascontiguousarray(checked, dtype="<f8").tobytes())
    return h.hexdigest()


def minmax_indices(K: int) -> np.ndarray:
    """GRID indices that get a min-max LP policy: 0 < delta <= MINMAX_MAX_DELTA for K <= 4; for
    K = 8 MCRS's grid points in [MINMAX_MIN_DELTA_LARGE_K, MINMAX_MAX_DELTA] (below it RASS's gap
    is < 1e-3 while the LP is degenerate and takes minutes) and the FINE and FINER points in
    FINE_RANGE_LARGE_K (where RASS's gap passes 1e-3 and mixing 0.05 apart lost up to 5 points);
    other FINE points mix their neighbours. Other K in 5..16: MCRS's grid points and the multiples
    of 0.025 in the ranges of :data:`MINMAX_RANGE`; none above :data:`MAX_MINMAX_K`."""
    if K <= 4:
        return np.nonzero((GRID > 0.0) & (GRID <= MINMAX_MAX_DELTA + 1e-9))[0]
    if K in MINMAX_RANGE:
        lo, hi, fine_hi = MINMAX_RANGE[K]
        on_step = (np.abs(GRID / 0.025 - np.rint(GRID / 0.025)) < 1e-9) & (GRID < fine_hi + 1e-9)
        return np.nonzero((ON_MCRS_GRID | on_step) & (GRID > lo - 1e-9) & (GRID < hi + 1e-9))[0]
    if K != 8:
        return np.zeros(0, np.int64)
    lo, hi = FINE_RANGE_LARGE_K
    fine = (GRID > lo - 1e-9) & (GRID < hi + 1e-9)
    return np.nonzero((ON_MCRS_GRID | fine) & (GRID > MINMAX_MIN_DELTA_LARGE_K - 1e-9)
                      & (GRID <= MINMAX_MAX_DELTA + 1e-9))[0]


def grid_bracket(delta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lo, hi, t) on :data:`GRID` (shared bracket rule), :data:`TOP` at and beyond its end."""
    from speccheck.verifiers.grid import grid_bracket as bracket

    d = np.asarray(delta, np.float64).ravel()
    lo, hi, t = bracket(d, GRID)
    beyond = d >= GRID[-1]
    return np.where(beyond, TOP, lo), np.where(beyond, TOP, hi), np.where(beyond, 0.0, t)


def load_entry(z: Mapping[str, np.ndarray], K: int, grid: np.ndarray = GRID) -> tuple[np.ndarray, np.ndarray] | None:
    """(policies, checked acceptances) of K in the npz mapping ``z`` if key (of the layout on
    ``grid``) and checksum match."""
    names = (f"K{K}", f"checked_K{K}", f"layout_K{K}", f"sha_K{K}")
    if not all(n in z for n in names) or str(z[f"layout_K{K}"]) != layout_key(K, grid):
        return None
    pi, rec = z[f"K{K}"], z[f"checked_K{K}"]
    n = np.asarray(grid).size
    if pi.shape != (n, G1, G2, K) or rec.shape != (n,):
        return None
    if str(z[f"sha_K{K}"]) != checksum(pi, rec):
        return None
    return pi, rec


def stored_policies(K: int, path: Path | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """The shipped min-max policies of K (None if absent or not matching the layout/checksum);
    ``path`` default :data:`PACKAGE_DATA`."""
    path = PACKAGE_DATA if path is None else path
    if not Path(path).exists():
        return None
    try:
        with np.load(path) as z:
            return load_entry(z, K)
    except (OSError, ValueError, KeyError):
        return None


def lifted_max_only(K: int, gi: int) -> np.ndarray:
    """The MCRS kernel's (max-only, shipped) policy at GRID point gi lifted to the pairs (at a FINE
    point: the max-only kernel's own interpolated policy there)."""
    if ON_MCRS_GRID[gi]:
        pi = _mcrs.policy_table(K, G2).policy(int(MCRS_INDEX[gi])).pi
    else:
        pi = _mcrs.MCRS(G2).policies(np.array([GRID[gi]]), K)[0].pi
    return _mm.lift_max_policy(pi, G1)


def build_n_target(K: int) -> int:
    """Target quantiles of the min-max LP's quadrature that the shipped policies of K were solved
    with: 96 for K = 2..6 and 8; 40 for K = 7 and 9..16 (K = 12, delta = 0.3: share of RASS's gap
    96.42% against 96.44% at 96, with 2.2M instead of 3.6M nonzeros and 0.56x the CPU). Every policy
    is checked exactly."""
    return 96 if K <= 6 or K == 8 else 40


def build_minmax_data(Ks: ArrayLike, path: Path = PACKAGE_DATA, deltas: ArrayLike | None = None,
                      log: Callable[[str], None] = print, n_target: int | None = None) -> Path:
    """Solve and check the min-max policies of each K at every grid point of :func:`minmax_indices`
    (or those nearest ``deltas``), merged into the npz at ``path`` (rewritten after every point,
    so an interrupted build keeps its progress; points already stored are kept). Each policy is
    the LP's if its exact acceptance reaches the lifted max-only MCRS policy's, else the latter
    (:func:`speccheck.theory.mcrs.minmax.minmax_policy`). ``n_target``: the LP's target quantiles
    (None: :func:`build_n_target`)."""
    data: dict = {}
    if Path(path).exists():
        with np.load(path) as z:
            data = {k: z[k] for k in z.files}

    def write() -> None:
        tmp = Path(str(path) + ".tmp.npz")
        np.savez_compressed(tmp, **data)
        os.replace(tmp, path)

    for K in (int(k) for k in Ks):
        todo = minmax_indices(K) if deltas is None else sorted(
            {int(np.argmin(np.abs(GRID - x))) for x in np.asarray(deltas, np.float64).ravel()}
            & set(minmax_indices(K).tolist()))
        entry = load_entry(data, K)
        pi, rec = entry if entry is not None else (np.full((TOP, G1, G2, K), np.nan), np.full(TOP, np.nan))
        pi, rec = pi.copy(), rec.copy()
        for gi in todo:
            if np.isfinite(rec[gi]):
                continue
            t0 = time.perf_counter()
            d = float(GRID[gi])
            ref = lifted_max_only(K, gi)
            n_t = build_n_target(K) if n_target is None else int(n_target)
            pol = _mm.minmax_policy(d, K, G1, G2, references=(ref,), n_target=n_t)
            pi[gi], rec[gi] = pol.pi, _mm.acceptance_of_minmax(d, pol)
            source = "max-only (LP lost)" if np.array_equal(pol.pi, ref) else "min-max LP"
            data[f"K{K}"], data[f"checked_K{K}"] = pi, rec
            data[f"layout_K{K}"], data[f"sha_K{K}"] = np.array(layout_key(K)), np.array(checksum(pi, rec))
            write()
            log(f"K={K} delta={d:g}: acceptance {rec[gi]:.12f} ({source}, {time.perf_counter() - t0:.1f} s)")
    data["grid"] = GRID
    write()
    return Path(path)


def merge_minmax_data(sources: list, path: Path | None = None) -> Path:
    """Merge npz files written by :func:`build_minmax_data` (e.g. parts of one K built side by side)
    into ``path`` (default :data:`PACKAGE_DATA`): per K, each grid point from the first source that
    has it; keys and checksums rewritten."""
    path = PACKAGE_DATA if path is None else Path(path)
    data: dict = {}
    for src in [p for p in [path, *sources] if Path(p).exists()]:
        with np.load(src) as z:
            for K in range(2, MAX_MINMAX_K + 1):
                entry = load_entry(z, K)
                if entry is None:
                    continue
                pi, rec = data.get(K, (np.full(entry[0].shape, np.nan), np.full(entry[1].shape, np.nan)))
                new = np.isfinite(entry[1]) & ~np.isfinite(rec)
                pi[new], rec[new] = entry[0][new], entry[1][new]
                data[K] = (pi, rec)
    out = {"grid": GRID}
    for K, (pi, rec) in sorted(data.items()):
        out[f"K{K}"], out[f"checked_K{K}"] = pi, rec
        out[f"layout_K{K}"], out[f"sha_K{K}"] = np.array(layout_key(K)), np.array(checksum(pi, rec))
    tmp = Path(str(path) + ".tmp.npz")
    np.savez_compressed(tmp, **out)
    os.replace(tmp, path)
    return path


def regrid_minmax_data(old_grid: ArrayLike, path: Path = PACKAGE_DATA) -> Path:
    """Move the policies stored at ``path`` under the layout of ``old_grid`` (an earlier
    :data:`GRID`; same version and cells) onto the current GRID: each policy and check record
    goes to its delta's index, old points not on GRID are dropped, new points are NaN (then
    :func:`build_minmax_data` solves only those); keys and checksums rewritten. Entries already
    keyed for GRID are kept as they are."""
    old = np.round(np.asarray(old_grid, np.float64), 12)
    with np.load(path) as z:
        data = {k: z[k] for k in z.files}
    for K in range(2, MAX_MINMAX_K + 1):
        entry = load_entry(data, K, old)
        if entry is None:
            continue
        keep = np.isin(old, GRID)
        pi, rec = np.full((TOP, G1, G2, K), np.nan), np.full(TOP, np.nan)
        at = np.searchsorted(GRID, old[keep])
        pi[at], rec[at] = entry[0][keep], entry[1][keep]
        data[f"K{K}"], data[f"checked_K{K}"] = pi, rec
        data[f"layout_K{K}"], data[f"sha_K{K}"] = np.array(layout_key(K)), np.array(checksum(pi, rec))
    data["grid"] = GRID
    tmp = Path(str(path) + ".tmp.npz")
    np.savez_compressed(tmp, **data)
    os.replace(tmp, path)
    return Path(path)
