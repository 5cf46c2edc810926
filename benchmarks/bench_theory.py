"""Theory benchmarks: rank-weight LP solve time and acceptance throughput.

    python benchmarks/bench_theory.py [--K 8] [--n 1000000]

Prints the cold and cached rank-weight solve time for K as ratios to the paper's 5.8 ms
(targets: cold below it, cached in microseconds), and deltas per second for each acceptance
function at n deltas (RASS at 1000 distinct deltas: each needs its own LP and crossings).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from speccheck.theory import (
    acceptance_dgrs,
    acceptance_rass,
    acceptance_rmc,
    list_bound_dependent,
    list_bound_iid,
    rank_weights,
)
from speccheck.theory import rass as _rass

PAPER_SOLVE_S = 5.8e-3


def _time(fn, repeat: int = 3) -> float:
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def bench_rank_weights(K: int, n_deltas: int = 40) -> dict:
    deltas = np.linspace(0.05, 4.0, n_deltas)
    _rass._solve_rank_weights.cache_clear()
    cold = []
    for d in deltas:
        t0 = time.perf_counter()
        rank_weights(float(d), K)
        cold.append(time.perf_counter() - t0)
    n_rep = 2000
    t0 = time.perf_counter()
    for i in range(n_rep):
        rank_weights(float(deltas[i % n_deltas]), K)
    cached = (time.perf_counter() - t0) / n_rep
    return {"cold_median_s": float(np.median(cold)), "cold_max_s": float(np.max(cold)),
            "cached_s": cached}


def bench_throughput(n: int, K: int) -> dict[str, float]:
    rng = np.random.default_rng(0)
    d = rng.uniform(0.0, 6.0, n)
    out = {}
    for name, fn in [
        ("acceptance_rmc", lambda: acceptance_rmc(d)),
        (f"acceptance_dgrs(K={K})", lambda: acceptance_dgrs(d, K)),
        (f"list_bound_iid(K={K})", lambda: list_bound_iid(d, K)),
        (f"list_bound_dependent(K={K})", lambda: list_bound_dependent(d, K)),
    ]:
        out[name] = n / _time(fn)
    d_small = rng.uniform(0.01, 6.0, 200)
    _rass._rank_weight_solution.cache_clear()
    _rass._solve_rank_weights.cache_clear()
    t = _time(lambda: acceptance_rass(d_small, K), repeat=1)
    out[f"acceptance_rass(K={K}, optimal omega, cold)"] = len(d_small) / t
    w = np.full(K, 1.0 / K)
    out[f"acceptance_rass(K={K}, fixed omega)"] = len(d_small) / _time(lambda: acceptance_rass(d_small, K, w), 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--K", type=int, default=8)
    ap.add_argument("--n", type=int, default=1_000_000)
    args = ap.parse_args()
    rw = bench_rank_weights(args.K)
    print(f"rank-weight LP, K = {args.K} (paper: {PAPER_SOLVE_S * 1e3:.1f} ms per solve)")
    print(f"  cold   median {rw['cold_median_s'] * 1e3:7.2f} ms  ratio to paper {rw['cold_median_s'] / PAPER_SOLVE_S:6.2f}"
          f"   (max {rw['cold_max_s'] * 1e3:.2f} ms)")
    print(f"  cached        {rw['cached_s'] * 1e6:7.2f} us  ratio to paper {rw['cached_s'] / PAPER_SOLVE_S:8.5f}")
    print(f"acceptance throughput (deltas / s; n = {args.n:.0e} unless stated)")
    for name, rate in bench_throughput(args.n, args.K).items():
        print(f"  {name:45s} {rate:12.3e}")


if __name__ == "__main__":
    main()
