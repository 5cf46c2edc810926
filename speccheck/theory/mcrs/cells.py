"""MCRS policy cells: their placement in the largest draft m (:func:`mcrs_edges`), the lookup of
the cell holding a point, and the rank coefficients C_r of the selected density (numpy/scipy only;
the rule and its density: :mod:`speccheck.theory.mcrs`)."""

from __future__ import annotations

import numpy as np
from scipy import special

from speccheck.errors import InputError
from speccheck.theory.validate import check_K

__all__ = ["DEFAULT_G", "GRID_KIND", "GRID_KINDS", "cell_index", "grid_kind", "mcrs_edges", "rank_coeffs"]

DEFAULT_G = 64  # policy cells: the kernel's (KERNEL_G), so every default names the same policy family
GRID_KIND = "chebyshev"  # the kernel's cell placement (shipped policies); see :func:`mcrs_edges`
GRID_KINDS = ("chebyshev", "quantile", "sine")


def rank_coeffs(K: int) -> np.ndarray:
    """C_r = K! / ((r-1)! (K-r)!), r = 1..K (shape (K,))."""
    r = np.arange(1, K + 1)
    return np.exp(special.gammaln(K + 1) - special.gammaln(r) - special.gammaln(K - r + 1))



def grid_kind(kind: str | None = None) -> str:
    """The cell placement ``kind`` (None: :data:`GRID_KIND`, the kernel's), validated."""
    kind = GRID_KIND if kind is None else kind
    if kind not in GRID_KINDS:
        raise InputError(f"kind must be one of {', '.join(GRID_KINDS)} (or None), got kind={kind!r}")
    return kind


def mcrs_edges(K: int, G: int = DEFAULT_G, kind: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Policy cells a_0 = 0 < a_1 < ... < a_G = 1 in m, returned as (a, 1 - a), both accurate,
    shape (G + 1,). Every placement is a_j = T(j / G) for a fixed increasing T, so the cells
    nest (the edges on G / 2 cells are every other edge on G cells).

    kind (default :data:`GRID_KIND`, the kernel's placement of the shipped policies):

    * ``"chebyshev"``: m_j^K = sin^2(pi j / 2G): cells of equal probability under the law of the
      max, refined quadratically at both ends;
    * ``"quantile"``: m_j^K = j / G (equal probability, no refinement);
    * ``"sine"``: m_j = sin(pi j / 2G), i.e. the Chebyshev placement in m^2 instead of m^K:
      near-uniform in m at the bottom, refined quadratically at the top. At small delta the
      optimal policy switches ranks at m ~ 0.05-0.3, where the max has probability ~m^K and the
      "chebyshev" cells are wide (K = 4, G = 160: width 0.02-0.04 there, <= 0.0098 for "sine");
      the gap table's solver uses it (measurements: `docs/mcrs.md`).
    """
    K = check_K(K)
    kind = grid_kind(kind)
    if int(G) < 1:
        raise InputError(f"G must be an integer >= 1, got G={G!r}")
    G = int(G)
    j = np.arange(G + 1, dtype=np.float64)
    x = 0.5 * np.pi * j / G
    if kind == "sine":
        a = np.sin(x)
        abar = np.cos(x) ** 2 / (1.0 + a)  # 1 - sin x without cancellation
    else:
        if kind == "chebyshev":
            # v_j = sin^2(x) (and 1 - v_j = cos^2 x), log v taken accurately at both ends
            v = np.sin(x) ** 2
            with np.errstate(divide="ignore"):
                lg = np.log(v) / K
                lg = np.where(v > 0.5, np.log1p(-np.cos(x) ** 2) / K, lg)
        else:
            with np.errstate(divide="ignore"):
                lg = np.log(j / G) / K
        a = np.exp(lg)
        abar = -np.expm1(lg)
    a[0], abar[0] = 0.0, 1.0
    a[-1], abar[-1] = 1.0, 0.0
    return a, abar



def cell_index(u: np.ndarray, y: np.ndarray, a: np.ndarray, abar: np.ndarray) -> np.ndarray:
    """Cell j with a_j <= x < a_{j+1}, looked up in u below 1/2 and in y = 1 - u above."""
    G = a.shape[0] - 1
    j_lo = np.searchsorted(a, u, side="right") - 1
    # abar is decreasing; a_j <= x  <=>  abar_j >= y
    j_hi = G - np.searchsorted(abar[::-1], y, side="left")
    j = np.where(u < 0.5, j_lo, j_hi)
    return np.clip(j, 0, G - 1)

