"""False failures of the law layer (L7) alone on exact rules, over seeds: a check of its stated error rate.

    python benchmarks/calibrate_law.py --rules dgrs rmc --seeds 20          # gate-size law, 20 seeds each
    python benchmarks/calibrate_law.py --suite smoke --seeds 50

Each run is ``run_battery(rule, suite, layers=["law"], seed=s)``: the law's tests only, Holm over
them at the suite's family-wise rate (1e-3 for the shipped suites). That is a harder check than the
layer inside the whole suite, whose tests run at the smaller per-test level of the whole family.
An exact rule fails a run with probability <= family_alpha, so over n runs the number of failures
is stochastically below Binomial(n, family_alpha); printed: failures per rule, the smallest Holm
p-value seen per run (a run fails when it is <= family_alpha), the CPU per run and the promise.
The thresholds come from the stated rate; nothing here tunes them.
"""

from __future__ import annotations

import argparse
import time

import torch


def main(argv: list[str] | None = None) -> int:
    from speccheck.validation.battery import run_battery

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="gate")
    ap.add_argument("--rules", nargs="+", default=["dgrs", "rmc"])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=1000)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    for rule in args.rules:
        failures, lowest, cpu = 0, [], 0.0
        promise = None
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            c0 = time.process_time()
            rep = run_battery(rule, args.suite, layers=["law"], seed=seed, localise_failures=False)
            cpu += time.process_time() - c0
            failures += not rep.passed
            lowest.append(min(float(r.extra.get("p_holm", 1.0)) for r in rep.results if r.kind == "stat"))
            promise = rep.promise
            print(f"{rule:10s} seed {seed}: {'PASS' if rep.passed else 'FAIL'}  smallest Holm p {lowest[-1]:.3g}  "
                  f"CPU {time.process_time() - c0:5.1f} s", flush=True)
        print(f"{rule:10s} {args.suite}: {failures} false failures in {args.seeds} runs at family_alpha "
              f"{rep.family_alpha:g}; smallest Holm p over runs {min(lowest):.3g}; "
              f"CPU {cpu / args.seeds:.1f} s per run", flush=True)
        if promise is not None:
            print(f"   {promise.line()}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
