"""Battery wall and CPU time per built-in rule, as ratios against the budgets.

    python benchmarks/bench_battery.py                       # gate and smoke, every built-in rule
    python benchmarks/bench_battery.py --suite smoke --rules dgrs rmc

Budgets (issue 12): gate <= 60 s and smoke <= 15 s per rule on a 2-core CPU with one torch
thread. Each (rule, suite) runs once after a warm-up: the same suite's grid and continuous
layers at a tenth of the draws, which fills the weight / policy caches (RASS weights, MCRS
policies) that a fresh install builds once per K; that one-off cost is printed separately.
Printed per run: wall seconds, process CPU seconds, and wall / budget and CPU / budget. On a
shared machine the wall clock is inflated by other processes: the CPU-time ratio is the one
load does not change. The baseline measured in the
same run is the D-GRS row (the fastest kernel): ratios of the other rules to it are printed
too, so a slow rule shows up whatever the load.
"""

from __future__ import annotations

import argparse
import time

import torch

BUDGET_S = {"gate": 60.0, "smoke": 15.0}
RULES = ("rmc", "dgrs", "rass", "rass-icdf", "mcrs")


def time_run(rule: str, suite: str, **options: object) -> tuple[float, float, bool, int]:
    """(wall s, CPU s, passed, tests) of one battery run."""
    from speccheck.validation.battery import run_battery

    w0, c0 = time.perf_counter(), time.process_time()
    rep = run_battery(rule, suite, **options)
    return time.perf_counter() - w0, time.process_time() - c0, rep.passed, len(rep.results)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", nargs="+", default=["smoke", "gate"], choices=sorted(BUDGET_S))
    ap.add_argument("--rules", nargs="+", default=list(RULES))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-warmup", action="store_true", help="skip the warm-up run (measure a cold cache)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = []
    for rule in args.rules:
        for suite in args.suite:
            if not args.no_warmup:
                w, c, _, _ = time_run(rule, suite, layers=["scalar", "continuous"], scale=0.1)
                print(f"{rule:10s} {suite:6s} warm-up (caches): wall {w:6.1f} s  CPU {c:6.1f} s", flush=True)
            w, c, ok, n = time_run(rule, suite)
            rows.append((rule, suite, w, c, ok, n))
            budget = BUDGET_S[suite]
            print(f"{rule:10s} {suite:6s} wall {w:6.1f} s ({w / budget:4.2f} x budget {budget:.0f} s)  "
                  f"CPU {c:6.1f} s ({c / budget:4.2f} x budget)  {'PASS' if ok else 'FAIL'} ({n} tests)", flush=True)
    base = {s: c for r, s, _, c, _, _ in rows if r == "dgrs"}
    if base:
        print("CPU time relative to dgrs in the same run:")
        for rule, suite, _, c, _, _ in rows:
            if suite in base and base[suite] > 0:
                print(f"  {rule:10s} {suite:6s} {c / base[suite]:5.2f} x dgrs")
    over = [(r, s) for r, s, _, c, _, _ in rows if c > BUDGET_S[s]]
    print("within budget (CPU time)" if not over else f"over budget (CPU time): {over}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
