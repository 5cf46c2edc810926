"""Calibration of the battery: how often does a CORRECT rule fail the gate suite?

Runs the suite (default gate) on each rule under N distinct seeds (default 200) and reports
the observed failure rate with a 95% Clopper-Pearson interval against the suite's stated
family-wise false-failure rate; the rate must not be significantly above it. Also reports
the fraction of individual statistical tests with raw p-value below 0.01 and 0.05 (valid,
possibly conservative p-values give at most 0.01 and 0.05) -- a far more sensitive check
than the family-wise count, whose expectation at 1e-3 x 200 runs is 0.2.

    python benchmarks/calibrate_battery.py --rules rmc dgrs rass rass-icdf --seeds 200 --workers 2
    python benchmarks/calibrate_battery.py --seeds 20 --out validation/calibration.json
    python benchmarks/calibrate_battery.py --merge a.jsonl b.jsonl --out merged.json   # split runs

Workers are separate processes (one torch thread each); each handles a contiguous block of
seeds for one rule, so per-process caches (RASS rank weights) are reused.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, TimeoutError, as_completed


def _work(rule: str, suite: str, seeds: list[int], device: str) -> list[dict]:
    import torch

    torch.set_num_threads(1)
    from speccheck.validation.battery import run_battery

    out = []
    for sd in seeds:
        rep = run_battery(rule, suite, device=device, seed=sd)
        stat = [r for r in rep.results if r.kind == "stat"]
        out.append({
            "rule": rule, "seed": sd, "passed": rep.passed, "wall_s": rep.wall_s,
            "failed": [f"{r.layer} {r.cell} {r.test} (p={r.p_value:.3g})" for r in rep.failures],
            "n_stat": len(stat),
            "p_lt_001": sum(r.p_value < 0.01 for r in stat),
            "p_lt_005": sum(r.p_value < 0.05 for r in stat),
            "min_p": min((r.p_value for r in stat), default=1.0),
            "family_alpha": rep.family_alpha,
        })
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rules", nargs="+", default=["rmc", "dgrs", "rass", "rass-icdf"])
    ap.add_argument("--suite", default="gate")
    ap.add_argument("--seeds", type=int, default=200, help="distinct seeds per rule (default 200)")
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2)))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default=None, help="write the per-run records and the summary as JSON")
    ap.add_argument("--block", type=int, default=5, help="seeds per job (a job runs in one worker process)")
    ap.add_argument("--time-budget", type=float, default=None,
                    help="stop after this many seconds and summarise the runs completed so far")
    ap.add_argument("--merge", nargs="+", default=None, metavar="JSONL",
                    help="run nothing: summarise the per-run records of earlier runs (their --out + 'l' "
                         "files, e.g. two processes that split the seeds)")
    args = ap.parse_args(argv)

    from speccheck.validation.suites import load_suite

    alpha = load_suite(args.suite).family_alpha
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    t0 = time.perf_counter()
    if args.merge:
        return _summarise(args, alpha, _merged(args.merge, args.rules), t0)
    jobs = [(rule, seeds[i:i + args.block]) for i in range(0, len(seeds), args.block) for rule in args.rules]
    records: list[dict] = []
    ex = ProcessPoolExecutor(max_workers=args.workers)
    futs = [ex.submit(_work, rule, args.suite, blk, args.device) for rule, blk in jobs]
    try:
        for f in as_completed(futs, timeout=args.time_budget):
            recs = f.result()
            records += recs
            if args.out:  # incremental, so an interrupted calibration keeps its runs
                with open(args.out + "l", "a") as fh:
                    fh.writelines(json.dumps(r) + "\n" for r in recs)
            print(f"[calibrate] {len(records)}/{len(args.rules) * len(seeds)} runs done "
                  f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
        ex.shutdown()
    except TimeoutError:
        print(f"[calibrate] time budget reached: summarising {len(records)} completed runs", file=sys.stderr)
        procs = list((getattr(ex, "_processes", None) or {}).values())
        ex.shutdown(wait=False, cancel_futures=True)
        for proc in procs:
            proc.terminate()
    return _summarise(args, alpha, records, t0)


def _merged(paths: list[str], rules: list[str]) -> list[dict]:
    """Records of several jsonl files, one per (rule, seed) (a seed run twice counts once)."""
    seen: dict[tuple, dict] = {}
    for path in paths:
        with open(path) as fh:
            for line in fh:
                r = json.loads(line)
                if r["rule"] in rules:
                    seen.setdefault((r["rule"], r["seed"]), r)
    return list(seen.values())


def _summarise(args, alpha: float, records: list[dict], t0: float) -> int:
    from speccheck.validation.stats import clopper_pearson

    seeds = sorted({r["seed"] for r in records}) or [0]
    summary = {"suite": args.suite, "family_alpha": alpha, "seeds": [seeds[0], seeds[-1]],
               "distinct_seeds": len(seeds), "device": args.device, "rules": {}}
    print(f"suite={args.suite} family-wise rate {alpha:g}; seeds {seeds[0]}..{seeds[-1]} ({len(seeds)} distinct); "
          f"device={args.device}")
    print(f"{'rule':<10} {'runs':>5} {'fails':>5} {'rate':>8} {'95% CP interval':>22} {'P(p<.01)':>9} "
          f"{'P(p<.05)':>9} {'s/run':>6}  verdict")
    all_fail, all_runs = 0, 0
    for rule in args.rules:
        rs = [r for r in records if r["rule"] == rule]
        k, n = sum(not r["passed"] for r in rs), len(rs)
        lo, hi = clopper_pearson(k, n)
        nt = sum(r["n_stat"] for r in rs)
        f01 = sum(r["p_lt_001"] for r in rs) / max(nt, 1)
        f05 = sum(r["p_lt_005"] for r in rs) / max(nt, 1)
        ok = lo <= alpha  # consistent: the interval does not lie entirely above the stated rate
        summary["rules"][rule] = {"runs": n, "failures": k, "rate": k / max(n, 1), "cp95": [lo, hi],
                                  "frac_p_lt_0.01": f01, "frac_p_lt_0.05": f05, "n_stat_tests": nt,
                                  "mean_wall_s": sum(r["wall_s"] for r in rs) / max(n, 1),
                                  "failed_runs": [r for r in rs if not r["passed"]], "consistent": ok}
        all_fail += k
        all_runs += n
        print(f"{rule:<10} {n:>5} {k:>5} {k / max(n, 1):>8.4f} [{lo:.2e}, {hi:.2e}] {f01:>9.4f} {f05:>9.4f} "
              f"{summary['rules'][rule]['mean_wall_s']:>6.1f}  {'consistent' if ok else 'TOO MANY FAILURES'}")
        for r in rs:
            if not r["passed"]:
                print(f"    seed {r['seed']}: {'; '.join(r['failed'][:3])}")
    lo, hi = clopper_pearson(all_fail, all_runs)
    summary["pooled"] = {"runs": all_runs, "failures": all_fail, "cp95": [lo, hi]}
    print(f"{'pooled':<10} {all_runs:>5} {all_fail:>5} {all_fail / max(all_runs, 1):>8.4f} [{lo:.2e}, {hi:.2e}]")
    if not args.merge:
        print(f"total wall {time.perf_counter() - t0:.0f} s with {args.workers} workers")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"summary": summary, "records": records}, fh, indent=2)
    return 0 if all(v["consistent"] for v in summary["rules"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
