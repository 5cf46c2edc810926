"""High-precision mpmath references for the closed forms, and the golden tables they write.

    python -m speccheck.theory.reference theory/      # regenerates theory/golden_*.csv

Computed at ``DPS`` significant digits, independently of the fast numpy code: the D-GRS
recursion in exact form (G_{k+1} = Phibar(tau - delta) - lambda Phibar(tau)), the i.i.d.
bound by root finding on its stationarity condition at high precision.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import mpmath as mp

DPS = 120
GOLDEN_DELTAS = ["0", "1e-9", "1e-6", "1e-3", "0.01", "0.1", "0.5", "1", "1.5", "2", "3", "4",
                 "6", "8", "12", "20", "30", "40"]
GOLDEN_K = [1, 2, 3, 4, 8, 16, 32, 64]


def _Phibar(x):
    return mp.ncdf(-x)


def mp_acceptance_rmc(delta) -> mp.mpf:
    return 2 * _Phibar(mp.mpf(delta) / 2)


def mp_acceptance_dgrs(delta, K: int) -> mp.mpf:
    d = mp.mpf(delta)
    if d == 0:
        return mp.mpf(1)
    lam = mp.mpf(0)
    G = mp.mpf(1)
    for _ in range(K):
        lam = lam + G
        tau = mp.log(lam) / d + d / 2
        G = _Phibar(tau - d) - lam * _Phibar(tau)
    return 1 - G


def mp_list_bound_iid(delta, K: int) -> mp.mpf:
    d = mp.mpf(delta)
    if d == 0:
        return mp.mpf(1)
    if K == 1:
        return mp_acceptance_rmc(d)
    F = lambda s: mp.log(K) + (K - 1) * mp.log(mp.ncdf(s)) - d * s + d * d / 2  # noqa: E731
    s_up = mp.log(K) / d + d / 2
    # F is concave, F < 0 beyond s_up: bisect for the larger root on [s_peak, s_up]
    dF = lambda s: (K - 1) * mp.npdf(s) / mp.ncdf(s) - d  # noqa: E731
    lo, hi = mp.mpf(-50), s_up
    for _ in range(500):  # peak of F: dF decreasing
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if dF(mid) > 0 else (lo, mid)
    peak = lo
    if F(peak) <= 0:
        return mp.mpf(1)
    lo, hi = peak, s_up
    for _ in range(500):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if F(mid) > 0 else (lo, mid)
    s = (lo + hi) / 2
    return (1 - mp.ncdf(s) ** K) + mp.ncdf(s - d)


def golden_rows():
    with mp.workdps(DPS):
        for ds in GOLDEN_DELTAS:
            for K in GOLDEN_K:
                yield {
                    "delta": ds,
                    "K": K,
                    "rmc": mp.nstr(mp_acceptance_rmc(mp.mpf(ds)), 30),
                    "dgrs": mp.nstr(mp_acceptance_dgrs(mp.mpf(ds), K), 30),
                    "iid_bound": mp.nstr(mp_list_bound_iid(mp.mpf(ds), K), 30),
                }


def write_golden(out_dir: str | Path) -> Path:
    out = Path(out_dir) / "golden_acceptance.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as fh:
        fh.write(
            f"# Golden acceptance values made by `python -m speccheck.theory.reference theory/`\n"
            f"# with mpmath {mp.__version__} at {DPS} significant digits (printed to 30): RMC 2 Phibar(delta/2);\n"
            "# D-GRS 1 - G_{K+1} by the exact recursion; the i.i.d.-list bound by bisection (500 steps)\n"
            "# on the larger root of ln K + (K-1) ln Phi(s) - delta s + delta^2/2 = 0.\n"
        )
        writer = csv.DictWriter(fh, fieldnames=["delta", "K", "rmc", "dgrs", "iid_bound"])
        writer.writeheader()
        writer.writerows(golden_rows())
    return out


if __name__ == "__main__":  # pragma: no cover
    print(write_golden(sys.argv[1] if len(sys.argv) > 1 else "theory"))
