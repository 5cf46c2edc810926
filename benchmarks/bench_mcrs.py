"""MCRS benchmarks (issue 7, "Done when" 4). Prints ratios to RASS, asserts nothing.

1. Policy solve time, cold (fresh delta, empty caches) and cached, for MCRS
   (``speccheck.theory.mcrs.mcrs_policy``: an LP with K*G + M variables, plus the exact
   evaluation that guards it against RASS) and RASS (``speccheck.theory.rank_weights``).
2. Verification throughput (rows / s) of the "mcrs" and "rass" verifiers on a batch of B rows
   with warm policy caches: one delta per batch, and a batch of mixed deltas.
3. ``--mcrs2``: throughput of "mcrs2" (min-max policies, shipped) relative to "mcrs", same batches
   (no solve times: MCRS-2 never solves at run time).

    python benchmarks/bench_mcrs.py [--K 2 4 8] [--G 64] [--B 65536] [--reps 3] [--threads 2] [--mcrs2]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from speccheck.theory import mcrs as mcrs_theory
from speccheck.theory.rass import core as rass_theory
from speccheck.verifiers import get
from speccheck.verifiers.mcrs import MCRS, VERIFIER_G


def _timed(fn, reps=1):
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return float(np.median(out))


def solve_times(K: int, G: int, deltas) -> dict:
    """Median cold and cached solve seconds over ``deltas`` (each delta solved cold once)."""
    cold_m, cold_r, hot_m, hot_r = [], [], [], []
    for d in deltas:
        d = float(d)
        cold_m.append(_timed(lambda d=d: mcrs_theory.mcrs_policy(d, K, G)))
        hot_m.append(_timed(lambda d=d: mcrs_theory.mcrs_policy(d, K, G), reps=100))
        rass_theory._solution.cache_clear()
        cold_r.append(_timed(lambda d=d: rass_theory.rank_weights(d, K)))
        hot_r.append(_timed(lambda d=d: rass_theory.rank_weights(d, K), reps=100))
    return dict(cold_mcrs=np.median(cold_m), cold_rass=np.median(cold_r),
                hot_mcrs=np.median(hot_m), hot_rass=np.median(hot_r))


def throughput(verifier, delta: torch.Tensor, K: int, reps: int, seed: int = 0) -> float:
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(delta.shape[0], K, generator=g, dtype=torch.float64)
    verifier.verify(delta, s, g)  # warm the policy / weight caches
    return delta.shape[0] / _timed(lambda: verifier.verify(delta, s, g), reps)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--K", type=int, nargs="+", default=[2, 4, 8])
    p.add_argument("--G", type=int, default=VERIFIER_G)
    p.add_argument("--B", type=int, default=1 << 16)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--solve-deltas", type=float, nargs="+", default=[0.37, 1.13, 2.71])
    p.add_argument("--mcrs2", action="store_true", help="only: mcrs2 throughput relative to mcrs")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.mcrs2:
        return _mcrs2_vs_mcrs(args)
    mcrs, rass = MCRS(G=args.G), get("rass")
    print(f"# MCRS vs RASS, G = {args.G}, B = {args.B}, torch threads = {args.threads}")
    print("K | solve cold MCRS s | RASS s | ratio | cached MCRS us | RASS us | ratio || "
          "rows/s MCRS (1 delta) | RASS | ratio || rows/s MCRS (mixed) | RASS | ratio")
    for K in args.K:
        st = solve_times(K, args.G, args.solve_deltas)
        d1 = torch.full((args.B,), 1.0, dtype=torch.float64)
        # mixed: 8 distinct deltas (policies solved during the warm-up call)
        dm = torch.tensor(np.resize(np.linspace(0.2, 2.2, 8), args.B), dtype=torch.float64)
        t_m1, t_r1 = throughput(mcrs, d1, K, args.reps), throughput(rass, d1, K, args.reps)
        t_mm, t_rm = throughput(mcrs, dm, K, args.reps), throughput(rass, dm, K, args.reps)
        print(f"{K} | {st['cold_mcrs']:.3f} | {st['cold_rass']:.4f} | {st['cold_mcrs'] / st['cold_rass']:.0f}x | "
              f"{1e6 * st['hot_mcrs']:.2f} | {1e6 * st['hot_rass']:.2f} | {st['hot_mcrs'] / st['hot_rass']:.2f}x || "
              f"{t_m1:.3g} | {t_r1:.3g} | {t_m1 / t_r1:.2f} || {t_mm:.3g} | {t_rm:.3g} | {t_mm / t_rm:.2f}",
              flush=True)
    return 0


def _mcrs2_vs_mcrs(args) -> int:
    mcrs, mcrs2 = MCRS(), get("mcrs2")
    print(f"# MCRS-2 vs MCRS, B = {args.B}, torch threads = {args.threads}")
    print("K | rows/s mcrs2 (1 delta) | mcrs | ratio || rows/s mcrs2 (mixed) | mcrs | ratio")
    for K in args.K:
        d1 = torch.full((args.B,), 0.3, dtype=torch.float64)
        dm = torch.tensor(np.resize(np.linspace(0.05, 2.2, 8), args.B), dtype=torch.float64)
        a1, b1 = throughput(mcrs2, d1, K, args.reps), throughput(mcrs, d1, K, args.reps)
        am, bm = throughput(mcrs2, dm, K, args.reps), throughput(mcrs, dm, K, args.reps)
        print(f"{K} | {a1:.3g} | {b1:.3g} | {a1 / b1:.2f} || {am:.3g} | {bm:.3g} | {am / bm:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
