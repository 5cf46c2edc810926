"""MCRS-2's declared acceptance at high precision, independently of the fast evaluation (issue 38.4).

    python -m research.mcrs2_reference            # rewrites tests/theory/data/mcrs2_acceptance_golden.csv

Cells already in the file keep their values and only new cells (of shipped K) are computed: delete
the file to recompute every cell after the policies of a K change.

The policy (its piece table: edges, widths and the polynomial coefficients of g on every piece,
which define the declared law) is read from the package; everything else is mpmath at ``DPS``
digits with a different algorithm from :func:`speccheck.theory.mcrs.minmax.acceptance_of_minmax`:

- per piece, F(s) = log g_p(t(s)) - delta s + delta^2 / 2 and its exact derivative
  F'(s) = g_p'(t) t'(s) / g_p(t) - delta (t' = -phi(s) / width) are sampled at ``NODES``
  Chebyshev points of the piece's s-range (they cluster at both ends, spacing ~width / NODES^2
  there, where the close pairs of crossings sit);
- every sign change of F' is refined by bisection (an extremum of F), so the piece splits into
  intervals on which F is monotone; each such interval with a sign change of F holds exactly
  one crossing, refined by bisection to ~1e-(DPS - 5);
- A = sum over the pieces between crossings of the smaller mass: q's by mp.ncdf, g's by the exact
  antiderivative of the polynomial in t (times the width).
"""

from __future__ import annotations

import csv
from pathlib import Path

import mpmath as mp
import numpy as np

DPS = 40
NODES = 160
BISECT = 140  # halvings: 2^-140 ~ 7e-43 of the bracket
OUT = Path(__file__).resolve().parents[1] / "tests" / "theory" / "data" / "mcrs2_acceptance_golden.csv"
CELLS = [(K, d) for K in (2, 3, 4, 8) for d in ("0.01", "0.05", "0.0751", "0.15", "0.3", "0.5", "0.77", "1", "2",
                                                 "2.95")]
# K = 5..7, 9..16 (issue 38.5): inside the min-max range, between its grid points, at its edge
CELLS += [(K, d) for K in (5, 6, 7, 9, 10, 11, 12, 13, 14, 15, 16) for d in ("0.2625", "0.4375", "0.79")]


def _poly(c: list, t):
    g = c[-1]
    for k in range(len(c) - 2, -1, -1):
        g = g * t + c[k]
    return g


def _dpoly(c: list, t):
    g = mp.mpf(0)
    for k in range(len(c) - 1, 0, -1):
        g = g * t + k * c[k]
    return g


def _antiderivative(c: list, t):
    return mp.fsum(c[k] * t ** (k + 1) / (k + 1) for k in range(len(c)))


class _Piece:
    def __init__(self, pol, p: int, d):
        self.c = [mp.mpf(float(x)) for x in pol.coef[p]]
        self.lower = bool(pol.eu[p + 1] <= 0.5)
        self.e_u, self.e_y = mp.mpf(float(pol.eu[p + 1])), mp.mpf(float(pol.ey[p + 1]))
        self.w = mp.mpf(float(pol.width[p]))
        self.d = d

    def t(self, s):
        # the fast code's t, clipped to [0, 1] there too
        x = (self.e_u - mp.ncdf(s)) if self.lower else (mp.ncdf(-s) - self.e_y)
        return min(max(x / self.w, mp.mpf(0)), mp.mpf(1))

    def F(self, s):
        g = _poly(self.c, self.t(s))
        if g <= 0:
            return mp.inf
        return mp.log(g) - self.d * s + self.d ** 2 / 2

    def dF(self, s):
        t = self.t(s)
        g = _poly(self.c, t)
        if g <= 0:
            return mp.mpf(0)
        return _dpoly(self.c, t) * (-mp.npdf(s) / self.w) / g - self.d

    def g_mass(self, s0, s1):
        return abs(_antiderivative(self.c, self.t(s0)) - _antiderivative(self.c, self.t(s1))) * self.w


def _bisect(f, a, b):
    fa = f(a)
    for _ in range(BISECT):
        m = (a + b) / 2
        fm = f(m)
        if (fm > 0) == (fa > 0):
            a, fa = m, fm
        else:
            b = m
    return (a + b) / 2


def mp_acceptance_of_minmax(delta: float, pol) -> mp.mpf:
    """int min(q, g) for the policy's piece table at delta, at DPS digits (module doc)."""
    d = mp.mpf(delta)
    total = mp.mpf(0)
    for p in range(pol.width.shape[0]):
        u0, u1 = float(pol.eu[p]), float(pol.eu[p + 1])
        s_lo = mp.mpf(-40) if u0 == 0 else (mp.sqrt(2) * mp.erfinv(2 * mp.mpf(u0) - 1) if u0 < 0.5
                                            else -mp.sqrt(2) * mp.erfinv(2 * mp.mpf(float(pol.ey[p])) - 1))
        s_hi = (d + 40) if float(pol.ey[p + 1]) == 0 else (
            mp.sqrt(2) * mp.erfinv(2 * mp.mpf(u1) - 1) if u1 < 0.5
            else -mp.sqrt(2) * mp.erfinv(2 * mp.mpf(float(pol.ey[p + 1])) - 1))
        s_lo, s_hi = max(s_lo, mp.mpf(-40)), min(s_hi, d + 40)
        if not s_hi > s_lo:
            continue
        pc = _Piece(pol, p, d)
        nodes = [s_lo + (s_hi - s_lo) * (1 - mp.cos(mp.pi * k / (NODES - 1))) / 2 for k in range(NODES)]
        dfs = [pc.dF(s) for s in nodes]
        cuts = [s_lo]
        for a, b, fa, fb in zip(nodes[:-1], nodes[1:], dfs[:-1], dfs[1:]):
            if (fa > 0) != (fb > 0):
                cuts.append(_bisect(pc.dF, a, b))
        cuts.append(s_hi)
        mono = cuts  # F monotone between consecutive cuts
        roots = []
        for a, b in zip(mono[:-1], mono[1:]):
            fa, fb = pc.F(a), pc.F(b)
            if (fa > 0) != (fb > 0):
                roots.append(_bisect(pc.F, a, b))
        edges = [s_lo] + roots + [s_hi]
        for a, b in zip(edges[:-1], edges[1:]):
            if not b > a:
                continue
            if pc.F((a + b) / 2) < 0:  # g < f: g's mass
                total += pc.g_mass(a, b)
            else:
                total += mp.ncdf(b - d) - mp.ncdf(a - d)
    return total


def main() -> None:
    from speccheck.verifiers.mcrs2 import MCRS2
    from speccheck.verifiers.mcrs2_data import SHIPPED_KS

    v = MCRS2()
    rows = []
    done = {}  # cells already in the file keep their values (only new cells are computed)
    if OUT.exists():
        with OUT.open() as fh:
            rows_in = csv.DictReader(line for line in fh if not line.startswith("#"))
            done = {(int(r["K"]), r["delta"]): r for r in rows_in}
    with mp.workdps(DPS):
        for K, d in CELLS:
            if K not in SHIPPED_KS:
                continue
            if (K, d) in done:
                rows.append((K, d, done[(K, d)]["acceptance"], done[(K, d)]["rejection"]))
                continue
            pol = v.policies(np.array([float(d)]), K)[0]
            a = mp_acceptance_of_minmax(float(d), pol)
            rows.append((K, d, mp.nstr(a, 25), mp.nstr(1 - a, 25)))
            print(K, d, rows[-1][2], flush=True)
    with OUT.open("w", newline="") as fh:
        fh.write(f"# MCRS-2's declared acceptance (the shipped policies' piece tables) by research/mcrs2_reference.py\n"
                 f"# (mpmath {mp.__version__}, {DPS} digits, {NODES} Chebyshev nodes per piece, extrema and crossings\n"
                 f"# by bisection, exact polynomial antiderivatives); printed to 25 digits\n")
        w = csv.writer(fh)
        w.writerow(["K", "delta", "acceptance", "rejection"])
        w.writerows(rows)


if __name__ == "__main__":
    main()
