"""Brent's method on many brackets at once: :func:`scipy.optimize.brentq`'s algorithm (its C
code, step for step: the same interpolation / extrapolation / bisection choices and the same
stopping rule), vectorised, so a set of crossings costs one evaluation of ``f`` per step on the
brackets still open instead of one Python call per root per step. For an ``f`` whose value at a
point does not depend on the other points it is evaluated with, the roots are scipy's, bit for bit.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

RTOL = 4.0 * np.finfo(np.float64).eps  # brentq's default rtol


def brentq_many(f: Callable[..., np.ndarray], xa: np.ndarray, xb: np.ndarray, xtol: float,
                rtol: float = RTOL, maxiter: int = 100, indexed: bool = False) -> np.ndarray:
    """Roots of ``f`` in the brackets [xa_i, xb_i] (f(xa_i), f(xb_i) of opposite signs or zero),
    as ``[brentq(f, a, b, xtol, rtol, maxiter) for a, b in zip(xa, xb)]``. ``f`` maps an array of
    points to their values. Raises ValueError for a NaN value or a bracket without a sign change,
    RuntimeError when a root does not converge in ``maxiter`` steps (as brentq)."""

    def value(x: np.ndarray, idx: np.ndarray) -> np.ndarray:
        fx = np.asarray(f(x, idx) if indexed else f(x), np.float64)
        if np.isnan(fx).any():
            raise ValueError("the function value is NaN")
        return fx

    xpre = np.array(xa, np.float64).ravel()
    xcur = np.array(xb, np.float64).ravel()
    n = xpre.size
    out = np.full(n, np.nan)
    if n == 0:
        return out
    every = np.arange(n)
    fpre, fcur = value(xpre, every), value(xcur, every)
    done = fpre == 0
    out[done] = xpre[done]
    at_b = ~done & (fcur == 0)
    out[at_b] = xcur[at_b]
    done |= at_b
    if np.any(~done & (np.signbit(fpre) == np.signbit(fcur))):
        raise ValueError("f(a) and f(b) must have different signs")
    xblk, fblk, spre, scur = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
    for _ in range(maxiter):
        act = ~done
        if not act.any():
            return out
        # the bracket: [xcur, xblk] with the sign change; xcur the better end
        flip = act & (fpre != 0) & (fcur != 0) & (np.signbit(fpre) != np.signbit(fcur))
        xblk, fblk = np.where(flip, xpre, xblk), np.where(flip, fpre, fblk)
        spre, scur = np.where(flip, xcur - xpre, spre), np.where(flip, xcur - xpre, scur)
        swap = act & (np.abs(fblk) < np.abs(fcur))
        xpre, xcur, xblk = np.where(swap, xcur, xpre), np.where(swap, xblk, xcur), np.where(swap, xcur, xblk)
        fpre, fcur, fblk = np.where(swap, fcur, fpre), np.where(swap, fblk, fcur), np.where(swap, fcur, fblk)
        delta = (xtol + rtol * np.abs(xcur)) / 2
        sbis = (xblk - xcur) / 2
        conv = act & ((fcur == 0) | (np.abs(sbis) < delta))
        out[conv] = xcur[conv]
        done |= conv
        act &= ~conv
        if not act.any():
            return out
        with np.errstate(divide="ignore", invalid="ignore"):
            interp = -fcur * (xcur - xpre) / (fcur - fpre)  # secant
            dpre = (fpre - fcur) / (xpre - xcur)
            dblk = (fblk - fcur) / (xblk - xcur)
            extrap = -fcur * (fblk * dblk - fpre * dpre) / (dblk * dpre * (fblk - fpre))  # inverse quadratic
        stry = np.where(xpre == xblk, interp, extrap)
        tried = (np.abs(spre) > delta) & (np.abs(fcur) < np.abs(fpre))
        good = tried & (2 * np.abs(stry) < np.minimum(np.abs(spre), 3 * np.abs(sbis) - delta))
        spre = np.where(act, np.where(good, scur, sbis), spre)
        scur = np.where(act, np.where(good, stry, sbis), scur)
        xpre, fpre = np.where(act, xcur, xpre), np.where(act, fcur, fpre)
        step = np.where(np.abs(scur) > delta, scur, np.where(sbis > 0, delta, -delta))
        xcur = np.where(act, xcur + step, xcur)
        idx = np.flatnonzero(act)
        fcur = fcur.copy()
        fcur[idx] = value(xcur[idx], idx)
    if not done.all():
        raise RuntimeError(f"brentq_many: {int((~done).sum())} roots did not converge in {maxiter} steps")
    return out


__all__ = ["brentq_many"]
