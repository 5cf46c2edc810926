"""Does an NFE speed-up become a wall-clock one? Digits models on CPU (and cuda if present).

    python benchmarks/bench_e2e.py [--models digits-edm digits-flow] [--device cpu] [--threads 2]

(1) Wall-clock of ONE target call vs rows per call (1 .. 4096): the cost curve c(R). A round of
    Algorithm 1 evaluates |V| (leaves) rows per trajectory in one call, the standard sampler 1.
(2) For a few cells, the eager speculative sampler (Algorithm 1 as written: the whole tree is
    drafted and evaluated in one call) vs the standard chain on the same batch of b
    trajectories: measured wall-clock speed-up next to the NFE speed-up, plus the cost-model
    prediction NFE-speed-up * c(b) / c(b |V|).
Everything runs on --device: the starting states, the sampler's trees and noise (a generator on
that device), and the target. Prints ratios; no thresholds (speed targets are read, not asserted).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from speccheck.sampler.core import SpeculativeSampler
from speccheck.sampler.tree import chain_matched, uniform_tree
from speccheck.seeding import generator
from speccheck.targets.digits import digits_target
from speccheck.validation.e2e import make_schedule, standard_sample


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def call_cost(target: object, rows: int, device: str, reps: int) -> float:
    """Median seconds of one target.velocity call on ``rows`` rows (inputs on ``device``)."""
    g = generator(0, device)
    x = torch.randn(rows, *target.state_shape, generator=g, dtype=torch.float64, device=device)
    t = torch.rand(rows, generator=g, dtype=torch.float64, device=device) * 0.9 + 0.05
    c = torch.randint(0, 10, (rows,), generator=g, device=device)
    target.velocity(x, t, c)
    out = []
    for _ in range(reps):
        _sync(device)
        t0 = time.perf_counter()
        target.velocity(x, t, c)
        _sync(device)
        out.append(time.perf_counter() - t0)
    return float(np.median(out))


def cell(target: object, model: str, verifier: str, K: int, L: int, eps: float, b: int, steps: int, shift: float,
         diffusers_grid: bool, freeze: str, costs: dict, device: str = "cpu") -> dict:
    """One batch of b trajectories: standard chain vs eager speculative sampler, both on ``device``."""
    sched = make_schedule(steps, eps, shift, diffusers_grid)
    tree = uniform_tree(K, L)
    if verifier == "rmc":
        tree = chain_matched(tree, "budget", True)
    sp = SpeculativeSampler(target, sched, tree, verifier, freeze=freeze, prefetch="nearest", leaves=True, lazy=False)
    x0 = torch.randn(b, *target.state_shape, generator=generator(1, device), dtype=torch.float64, device=device)
    cond = torch.arange(b, device=device) % 10
    _sync(device)
    t0 = time.perf_counter()
    std = standard_sample(target, sched, x0, cond, generator(2, device))
    _sync(device)
    w_std = time.perf_counter() - t0
    t0 = time.perf_counter()
    res = sp.run(x0, generator(3, device), cond=cond)
    _sync(device)
    w_sp = time.perf_counter() - t0
    nfe_speedup = float(res.speedup.mean())
    # cost model: per batch, standard spends n_sto calls of b rows, speculative NFE calls of b |V| rows
    rows = tree.rows(True)
    cb = np.interp(np.log(b), np.log(costs["rows"]), costs["sec"])
    cbv = np.interp(np.log(b * rows), np.log(costs["rows"]), costs["sec"])
    del std
    return {"model": model, "verifier": verifier, "tree": tree.name, "eps": eps, "b": b, "rows_per_traj": rows,
            "nfe_speedup": nfe_speedup, "wall_speedup": w_std / w_sp, "model_pred_wall": nfe_speedup * cb / cbv,
            "wall_std_s": w_std, "wall_spec_s": w_sp}


def main() -> None:
    """Print the cost curve and the wall-clock vs NFE speed-ups per model."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["digits-edm", "digits-flow"])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--max-rows", type=int, default=4096)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"device {args.device}, torch threads {torch.get_num_threads()}")
    for model in args.models:
        target = digits_target(model, device=args.device)
        target.max_rows = None
        rows = [2**i for i in range(int(np.log2(args.max_rows)) + 1)]
        sec = [call_cost(target, r, args.device, args.reps) for r in rows]
        print(f"\n== {model}: one target call vs rows per call")
        print(f"{'rows':>6} {'ms/call':>10} {'us/row':>10} {'x c(1)':>8}")
        for r, s in zip(rows, sec):
            print(f"{r:6d} {1e3 * s:10.3f} {1e6 * s / r:10.2f} {s / sec[0]:8.2f}")
        costs = {"rows": np.array(rows, dtype=float), "sec": np.array(sec)}
        if model == "digits-edm":
            cells = [("dgrs", 2, 3, 0.3, 100, 1.0, False, "denoised"), ("rmc", 2, 3, 0.3, 100, 1.0, False, "denoised"),
                     ("dgrs", 4, 4, 0.3, 100, 1.0, False, "denoised")]
        else:
            cells = [("dgrs", 2, 3, 0.3, 100, 1.0, False, "velocity"), ("dgrs", 4, 2, 0.8, 50, 3.0, True, "velocity"),
                     ("rmc", 4, 2, 0.8, 50, 3.0, True, "velocity")]
        print(f"\n== {model}: eager speculative vs standard on a batch of b trajectories (leaves evaluated)")
        print(f"{'verifier':>8} {'tree':>20} {'eps':>5} {'b':>4} {'rows':>5} {'NFE x':>7} {'wall x':>7} {'model x':>8}")
        for (ver, K, L, eps, steps, shift, dg, freeze) in cells:
            for b in args.batches:
                if b * uniform_tree(K, L).n_nodes > 4 * args.max_rows:
                    continue
                r = cell(target, model, ver, K, L, eps, b, steps, shift, dg, freeze, costs, args.device)
                print(f"{ver:>8} {r['tree']:>20} {eps:5.2f} {b:4d} {r['rows_per_traj']:5d} {r['nfe_speedup']:7.3f} "
                      f"{r['wall_speedup']:7.3f} {r['model_pred_wall']:8.3f}")


if __name__ == "__main__":
    main()
