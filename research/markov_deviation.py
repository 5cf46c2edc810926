"""Markov's small-delta RASS weights e* at high precision (issue 38.1), the package data of
``speccheck.theory.rass.precise``.

    python -m research.markov_deviation speccheck/data/markov_deviation.npz   # K = 2..128, ~7 min of CPU

e* solves sum_r e_r b_r(u_k) = Phi^-1(u_k) at the points u_k = sin^2(k pi / (2 (n + 1))) of
``speccheck.theory.rass.certificate.markov_edges`` (n = K for odd K, K + 1 for even K; the
middle point u = 1/2, where both sides are 0 by symmetry, is left out for even K, so the system
is square; its solution is the unique odd interpolant and sums to 0). The Bernstein system is
ill-conditioned (e* reaches ~6e12 at K = 64 and more above, with alternating signs): float64
least squares returned e* 1e4-fold off at K = 64 (its weights' 1 - A was 1.6x Markov's bound
at delta = 1e-30). Solved here by LU at ``DPS`` digits with mpmath; stored rounded to float64
as COMPONENTS float64 numbers per entry (shape (3, K): their sum holds ~159 bits), K = 2..128,
with the digits and mpmath version in the file: package data speccheck/data/markov_deviation.npz,
read by ``speccheck.theory.rass.precise``.

Why it is shipped: with these e* (K >= 48) the weights 1/K + delta e* attain Markov's bound
(mpmath, K = 64, delta = 1e-30: 1 - A = 1.22677582369e-34 against the bound 1.2267758233e-34),
but only if e* keeps ~40 digits at K = 128 (e* rounded to float64 moved 1 - A by ~1% at K = 64),
and only an evaluator with relative precision at such weights can tell (the float64 one was 6%
off at K = 64): ``speccheck.theory.rass.precise`` reads the expansions, forms delta e* in
mpmath, and evaluates and certifies them in extended precision.
"""

from __future__ import annotations

import sys

import mpmath as mp
import numpy as np

DPS = 120
COMPONENTS = 3  # float64 numbers per entry: e* reaches 7e30 at K = 128, where 1/K + delta e* needs ~40 digits


def mp_markov_deviation(K: int) -> list:
    n = K if K % 2 else K + 1
    ks = [k for k in range(1, n + 1) if K % 2 or 2 * k != n + 1]  # without the middle point (even K)
    us = [mp.sin(k * mp.pi / (2 * (n + 1))) ** 2 for k in ks]
    rows = [[K * mp.binomial(K - 1, r - 1) * u ** (r - 1) * (1 - u) ** (K - r) for r in range(1, K + 1)] for u in us]
    rhs = [mp.sqrt(2) * mp.erfinv(2 * u - 1) for u in us]
    e = mp.lu_solve(mp.matrix(rows), mp.matrix(rhs))
    return [e[i] for i in range(K)]


def components(x) -> list[float]:
    """x as COMPONENTS float64 numbers, each the rounded remainder of the ones before (their sum
    holds ~53 COMPONENTS bits of x)."""
    out = []
    for _ in range(COMPONENTS):
        out.append(float(x))
        x = x - mp.mpf(out[-1])
    return out


def main(path: str) -> None:
    out = {}
    with mp.workdps(DPS):
        for K in range(2, 129):
            e = mp_markov_deviation(K)
            out[f"K{K}"] = np.array([components(x) for x in e]).T
            if K % 16 == 0:
                print(K, float(max(abs(x) for x in e)), float(abs(mp.fsum(e))), flush=True)
    out["dps"] = np.array(DPS)
    out["mpmath"] = np.array(mp.__version__)
    np.savez_compressed(path, **out)


if __name__ == "__main__":
    main(sys.argv[1])
