"""Sampler benchmarks (issue 5, "Done when" 4). Prints ratios, asserts nothing.

1. The full K x L grid (default 7 x 7), rules rmc/dgrs/rass, 100 trajectories per cell, lazy
   mode, on the gmm-paper preset (d = 500, 30 steps): wall-clock and CPU time per rule, and the
   ratio to the standard sampler (30 plain Euler-Maruyama steps, one target call each) run on
   the same number of trajectories with the same batching in the same process. Target: the
   grid under 60 s on a quiet 2-core CPU. RASS's rank-weight LPs (cached per (delta grid point,
   K) by the verifier) are paid in a first, cold pass over the grid that is reported but not
   counted; the counted pass is the warm one.
2. One eager (6, 6) run (|V| = 55987 nodes per round) on a few trajectories: wall-clock per
   trajectory, memory per tree node (computed: state + velocity, 2 d 8 bytes; and the peak-RSS
   increase), and the ratio to the standard sampler on the same trajectories.

    python benchmarks/bench_sampler.py [--trajectories 100] [--rules rmc dgrs rass] [--K 7] [--L 7]
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
import torch

from speccheck.sampler.experiments import preset, run_cells
from speccheck.targets.gmm import gmm_preset


def standard_sampler(target, sched, n: int, seed: int, clock=time.perf_counter) -> float:
    """Time (``clock``) of the plain chain on n trajectories (one batched target call per step)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, target.d, generator=g, dtype=torch.float64)
    t0 = clock()
    for k in range(sched.N):
        v = target.velocity(x, torch.full((n,), sched.t[k], dtype=torch.float64))
        x = sched.a[k] * x + sched.c[k] * v
        if sched.sigma[k] > 0:
            x = x + sched.sigma[k] * torch.randn(n, target.d, generator=g, dtype=torch.float64)
    return clock() - t0


def grid_batches(proto, rule, K_max: int, Ls, n: int):
    """(sampler, x0, caps, seed) per width K: all L cells of one K share a batch (depth caps)."""
    from speccheck.sampler.core import SpeculativeSampler, resolve_verifier
    from speccheck.sampler.experiments import cell_tree
    from speccheck.sampler.tree import uniform_tree

    ver = resolve_verifier(rule)
    target = gmm_preset(proto.target)
    sched = proto.schedule()
    for K in range(1, K_max + 1):
        trees = [cell_tree(ver, K, L, proto, sched.n_stochastic) for L in Ls]
        big = uniform_tree(max(t.max_K for t in trees), max(t.L for t in trees))
        caps = torch.tensor([t.L for t in trees for _ in range(n)])
        sp = SpeculativeSampler(target, sched, big, ver, freeze=proto.freeze, prefetch=proto.prefetch,
                                leaves=proto.leaves, lazy=True)
        yield K, sp, caps


def prewarm_rass(K_max: int) -> float:
    """Solve the RASS verifier's rank-weight LPs on its whole delta grid (what its cache holds
    after long use); returns the seconds spent."""
    from speccheck.verifiers import rass

    t0 = time.perf_counter()
    for K in range(2, K_max + 1):
        rass.grid_weights(np.arange(rass.DELTA_GRID.size), K)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trajectories", type=int, default=100)
    ap.add_argument("--rules", nargs="+", default=["rmc", "dgrs", "rass"])
    ap.add_argument("--K", type=int, default=7)
    ap.add_argument("--L", type=int, default=7)
    ap.add_argument("--eager-trajectories", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--skip-grid", action="store_true")
    ap.add_argument("--skip-eager", action="store_true")
    ap.add_argument("--prewarm-all", action="store_true",
                    help="solve RASS's whole LP table first instead of a cold pass over the grid")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    proto = preset("gmm-paper", lazy=True)
    target = gmm_preset(proto.target)
    sched = proto.schedule()
    Ls = list(range(1, args.L + 1))
    n = args.trajectories
    print(f"torch threads {torch.get_num_threads()}; gmm-paper d={target.d}, N={sched.N}, "
          f"{args.K} x {args.L} cells, {n} trajectories per cell, lazy (sampler time only; the "
          f"per-cell theory summaries are not included)")
    if not args.skip_grid:
        total_wall = total_cpu = total_std = 0.0
        rules = list(args.rules)
        if "rass" in rules and not args.prewarm_all:
            rules = ["rass (cold: LP solves)" if r == "rass" else r for r in rules]
            rules.insert(rules.index("rass (cold: LP solves)") + 1, "rass")
        elif "rass" in rules:
            print(f"  RASS rank-weight LP table prewarmed for K = 2..{args.K}: {prewarm_rass(args.K):.1f} s "
                  "(one-off, cached by the verifier; not counted below)")
        for label in rules:
            rule = label.split(" ")[0]
            wall = cpu = std = std_cpu = 0.0
            for K, sp, caps in grid_batches(proto, rule, args.K, Ls, n):
                g = torch.Generator().manual_seed(K)
                x0 = torch.randn(caps.numel(), target.d, generator=g, dtype=torch.float64)
                w0, c0 = time.perf_counter(), time.process_time()
                sp.run(x0, g, depth_cap=caps)
                wall += time.perf_counter() - w0
                cpu += time.process_time() - c0
                std += standard_sampler(target, sched, caps.numel(), seed=K)
                std_cpu += standard_sampler(target, sched, caps.numel(), seed=K, clock=time.process_time)
            if label != rule:
                print(f"  {label}: wall {wall:7.1f} s (cpu {cpu:7.1f} s) -- not counted in the total")
                continue
            total_wall += wall
            total_cpu += cpu
            total_std += std
            print(f"  {rule:5s}: {args.K * args.L} cells  wall {wall:7.1f} s  (cpu {cpu:7.1f} s)  "
                  f"standard sampler wall {std:6.2f} s (cpu {std_cpu:6.2f} s)  ratio wall {wall / std:5.1f}x, "
                  f"cpu {cpu / std_cpu:5.1f}x")
        print(f"grid total: wall {total_wall:.1f} s (target < 60 s), cpu {total_cpu:.1f} s; standard "
              f"sampler wall {total_std:.2f} s; ratio {total_wall / total_std:.1f}x")
    if args.skip_eager:
        return
    # ---- eager (6, 6)
    ne = args.eager_trajectories
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    eager = preset("gmm-paper", lazy=False)
    w0, c0 = time.perf_counter(), time.process_time()
    _, summ = run_cells(eager, "dgrs", 6, [6], ne, seed=0, max_nodes=2 * 55987)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    std = standard_sampler(target, sched, ne, seed=0)
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    V = 55987
    print(f"eager dgrs (6,6): {ne} trajectories, wall {wall:.1f} s, cpu {cpu:.1f} s "
          f"({cpu / ne:.2f} s cpu per trajectory), "
          f"speed-up {summ[0]['speedup']:.2f} (NFE {summ[0]['nfe_mean']:.1f}); standard sampler {std:.3f} s; "
          f"ratio {wall / std:.0f}x")
    print(f"  memory per tree node: {2 * target.d * 8} bytes computed (state + velocity, float64); "
          f"peak-RSS increase {(rss1 - rss0) * 1024 / (2 * V):.0f} bytes per node (2 trajectories per chunk)")


if __name__ == "__main__":
    main()
