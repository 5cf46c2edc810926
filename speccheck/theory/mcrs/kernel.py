"""The ``mcrs`` kernel's policies: the shipped G = 64 LP policies on the kernel's delta grid
(package data, keyed by layout and checksummed), mixed between grid points, and the exact
acceptance of the policy the kernel uses (:func:`acceptance_mcrs`)."""

from __future__ import annotations

import functools
import hashlib
import warnings
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike

from speccheck.theory.mcrs.acceptance import acceptance_of_policy
from speccheck.theory.mcrs.cells import GRID_KIND, grid_kind, mcrs_edges
from speccheck.theory.mcrs.policies import mcrs_policy
from speccheck.theory.mcrs.policy import MCRSPolicy
from speccheck.theory.validate import check_delta, check_K

__all__ = ["EDGES_ATOL", "KERNEL_DATA", "KERNEL_DELTA_GRID", "KERNEL_G", "KERNEL_MAX_K", "KERNEL_TOP_INDEX",
           "LAYOUT_VERSION", "acceptance_mcrs", "kernel_bracket", "kernel_policy", "layout_key", "package_entry",
           "policy_checksum", "shipped_policies"]

KERNEL_G = 64  # cells of the ``mcrs`` kernel's policies
KERNEL_MAX_K = 16  # largest K with shipped LP policies (above: RASS's constant policy)
# The kernel's delta grid (every point a multiple of 0.001; the layout key relies on it).
KERNEL_DELTA_GRID = np.unique(np.round(np.concatenate([
    [0.0, 0.001, 0.002, 0.005, 0.01, 0.02, 0.035],
    np.arange(0.05, 3.0, 0.05), np.arange(3.0, 6.0, 0.1), np.arange(6.0, 12.0 + 1e-9, 0.5),
]), 12))
KERNEL_TOP_INDEX = KERNEL_DELTA_GRID.size  # pseudo grid point: the top-rank policy (delta >= 12)
KERNEL_DATA = Path(__file__).resolve().parents[2] / "data" / f"mcrs_policies_G{KERNEL_G}.npz"
# Policy data layout version: bump when the meaning of a stored policy changes.
LAYOUT_VERSION = 2
# Stored edges must agree with the edges computed here to this (absolute, in m): they come from
# sin / log / exp, whose last bits may differ across numpy builds and platforms.
EDGES_ATOL = 1e-13


def layout_key(K: int, G: int) -> str:
    """Key of a stored policy layout, from its exact definition only (no float formatting, no
    computed edges, so the same under every numpy/scipy version): layout version, cell placement,
    K, G and the delta grid in integer thousandths."""
    milli = np.rint(KERNEL_DELTA_GRID * 1000.0).astype(np.int64)
    desc = f"v{LAYOUT_VERSION};{GRID_KIND};K={int(K)};G={int(G)};milli=" + ",".join(map(str, milli))
    return hashlib.sha256(desc.encode("ascii")).hexdigest()[:16]


def policy_checksum(pi: np.ndarray, checked: np.ndarray) -> str:
    """sha256 of stored policies and their check records as little-endian float64 bytes (what an
    npz holds, so independent of the library versions reading it)."""
    h = hashlib.sha256(np.ascontiguousarray(pi, dtype="<f8").tobytes())
    h.update(np.ascontiguousarray(checked, dtype="<f8").tobytes())
    return h.hexdigest()


def package_entry(z: Mapping[str, np.ndarray], K: int, G: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(policies, checked flags) of K in the npz mapping ``z`` if its layout key, edges (to
    :data:`EDGES_ATOL`) and content checksum all match; else None (the entry is ignored)."""
    names = (f"K{K}", f"layout_K{K}", f"checked_K{K}", f"edges_K{K}", f"sha_K{K}")
    if not all(n in z for n in names) or str(z[f"layout_K{K}"]) != layout_key(K, G):
        return None
    arr, rec, edges = z[f"K{K}"], z[f"checked_K{K}"], z[f"edges_K{K}"]
    a, _ = mcrs_edges(K, G)
    if edges.shape != a.shape or not np.allclose(edges, a, rtol=0.0, atol=EDGES_ATOL):
        return None
    if str(z[f"sha_K{K}"]) != policy_checksum(arr, rec):
        return None
    return arr, np.isfinite(rec)


@functools.lru_cache(maxsize=32)
def shipped_policies(K: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The kernel's shipped policies of K ([TOP_INDEX, G, K], NaN where none; checked flags) from
    the package data, or None when absent / not matching (:func:`package_entry`)."""
    if not KERNEL_DATA.exists():
        return None
    try:
        with np.load(KERNEL_DATA) as z:
            return package_entry(z, int(K), KERNEL_G)
    except (OSError, ValueError, KeyError):
        return None


def kernel_bracket(delta: float) -> tuple[int, int, float]:
    """(lo, hi, t) of the kernel's grid interpolation at delta ((1 - t) pi_lo + t pi_hi; the
    top-rank pseudo point :data:`KERNEL_TOP_INDEX` at and beyond the grid's end)."""
    grid = KERNEL_DELTA_GRID
    if delta >= grid[-1]:
        return KERNEL_TOP_INDEX, KERNEL_TOP_INDEX, 0.0
    lo = int(np.clip(np.searchsorted(grid, delta, side="right") - 1, 0, grid.size - 2))
    t = float(np.clip((delta - grid[lo]) / (grid[lo + 1] - grid[lo]), 0.0, 1.0))
    if t >= 1.0:
        lo, t = lo + 1, 0.0
    return lo, (lo + 1 if t > 0.0 else lo), t


@functools.lru_cache(maxsize=4096)
def _kernel_grid_policy(gi: int, K: int) -> MCRSPolicy:
    a, abar = mcrs_edges(K, KERNEL_G)
    if gi == 0 or K == 1:
        return MCRSPolicy(K, a, abar, np.full((KERNEL_G, K), 1.0 / K), 0.0)
    if gi == KERNEL_TOP_INDEX:
        pi = np.zeros((KERNEL_G, K))
        pi[:, K - 1] = 1.0
        return MCRSPolicy(K, a, abar, pi)
    d = float(KERNEL_DELTA_GRID[gi])
    stored = shipped_policies(K)
    if stored is not None and stored[1][gi] and not np.isnan(stored[0][gi, 0, 0]):
        return MCRSPolicy(K, a, abar, stored[0][gi].copy(), d)
    warnings.warn(f"MCRS: no shipped policy for K={K} at grid delta={d:g}; solving its LP (seconds to a minute)",
                  RuntimeWarning, stacklevel=3)
    return mcrs_policy(d, K, KERNEL_G)


def kernel_policy(delta: float, K: int) -> MCRSPolicy:
    """The policy the ``mcrs`` kernel uses at delta for K <= :data:`KERNEL_MAX_K`: the shipped grid
    policies (package data; an LP is solved, with a warning, only for a grid point not shipped)
    mixed as (1 - t) pi_lo + t pi_hi (:func:`kernel_bracket`)."""
    d = float(check_delta(delta))
    K = check_K(K, max_K=KERNEL_MAX_K)
    lo, hi, t = kernel_bracket(d)
    p_lo = _kernel_grid_policy(lo, K)
    if t == 0.0:
        return p_lo
    pi = (1.0 - t) * p_lo.pi + t * _kernel_grid_policy(hi, K).pi
    return MCRSPolicy(K, p_lo.a, p_lo.abar, pi / pi.sum(axis=1, keepdims=True), d)



def acceptance_mcrs(delta: ArrayLike, K: int, G: int | None = None, kind: str | None = None) -> np.ndarray | float:
    """P(accept) of MCRS, evaluated exactly for the policy used (never an LP objective).

    Default (G None or :data:`KERNEL_G`, kind None): the policy the ``mcrs`` kernel uses at each
    delta (:func:`kernel_policy`: the shipped G = 64 grid policies, interpolated between grid
    points), so this equals ``MCRS().acceptance(delta, K)`` (and ``speccheck theory``'s column);
    for K > :data:`KERNEL_MAX_K` the kernel is RASS's with its grid-interpolated optimal weights,
    whose acceptance is RASS's optimum to ~1e-7 (returned here: ``acceptance_rass``). With another
    G or ``kind``: the checked LP policy at exactly that delta on those cells
    (:func:`mcrs_policy`, one LP per value, seconds each). Vectorised over ``delta``."""
    d = check_delta(delta)
    K = check_K(K)
    if (G is None or int(G) == KERNEL_G) and kind is None:
        if K > KERNEL_MAX_K:
            from speccheck.theory.rass import acceptance_rass

            out = np.array([float(acceptance_rass(float(x), K)) for x in d.ravel()])
        else:
            out = np.array([1.0 if x == 0 else acceptance_of_policy(float(x), kernel_policy(float(x), K))
                            for x in d.ravel()])
    else:
        kind = grid_kind(kind)
        out = np.array([acceptance_of_policy(x, mcrs_policy(x, K, int(G), kind=kind)) for x in d.ravel()])
    out = out.reshape(d.shape)
    return out if d.ndim else float(out)


