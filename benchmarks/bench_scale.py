"""Scale-out benchmarks (issue 14, "Done when" 3). Prints ratios measured in one run; asserts nothing.

1. Calibration units (default: gate suite, 20 seeds x the 4 built-in rules rmc dgrs rass
   rass-icdf), each unit one battery run: wall time with ``--workers 2`` (a local Dask cluster of
   two processes, one torch thread each; its start-up counted) as a ratio to ``--workers 1``
   (in-process). Target: <= 0.6 on a 2-core machine. Both runs write a results store, as the
   command does, and must store identical results.
2. A 7 x 7 lazy sweep (K 1..7 x L 1..7, gmm-paper preset; default rule dgrs, 100 trajectories per
   cell), one unit per cell: the same ratio.
3. One battery run split into its cells (``speccheck battery --workers N``; default gate suite on
   dgrs): the same ratio, and the two reports must be identical.
4. The scheduler's overhead per unit: N no-op units (kind ``echo``) on the started 2-worker
   cluster, wall / N, minus the in-process time per no-op unit, in ms.

    python benchmarks/bench_scale.py            # the issue's sizes (gate calibration: about an hour on 2 cores)
    python benchmarks/bench_scale.py --quick    # the issue's ratio in a few minutes: smoke suite, 20 seeds x 4
                                                # rules; 7x7 lazy sweep of 20 trajectories; smoke battery cells
    python benchmarks/bench_scale.py --quick --seeds 2 --rules dgrs --K 2 --L 2 --trajectories 3 \
        --overhead-units 20 --skip battery      # a dry run (seconds; the ratios mean nothing)
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")


def _stored(path: str) -> list[tuple]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT job, unit_key, seed, result FROM units ORDER BY job, unit_key").fetchall()


def _warm() -> None:
    """Run on each worker: the imports a unit needs (start-up, not the units' cost)."""
    import speccheck.scale.units  # noqa: F401
    import speccheck.validation.battery  # noqa: F401


def _timed_pair(label: str, run, folder: str) -> dict:
    """``run(executor, store)`` with workers 1 then 2 (a fresh store each); wall times and ratio."""
    from speccheck.scale.executors import make_executor

    out = {}
    for workers in (1, 2):
        store = os.path.join(folder, f"{label}-w{workers}.sqlite")
        start = time.perf_counter()
        executor = make_executor(workers=workers)
        try:
            if workers > 1:
                executor.client().run(_warm)  # every worker imports torch and speccheck before the clock
            started = time.perf_counter()
            run(executor, store)
            end = time.perf_counter()
        finally:
            executor.close()
        out[workers] = {"wall_s": end - start, "run_s": end - started, "store": store}
    identical = _stored(out[1]["store"]) == _stored(out[2]["store"])
    ratio = out[2]["wall_s"] / out[1]["wall_s"]
    print(f"{label:<12} workers 1: {out[1]['wall_s']:7.1f} s | workers 2: {out[2]['wall_s']:7.1f} s "
          f"(start-up {out[2]['wall_s'] - out[2]['run_s']:.1f} s) | ratio {ratio:.3f} (target <= 0.6), "
          f"without start-up {out[2]['run_s'] / out[1]['run_s']:.3f} | stored results identical: {identical} | "
          f"load average {os.getloadavg()[0]:.1f}",
          flush=True)
    return {"ratio": ratio, "identical": identical, **out}


def overhead_ms(n_units: int) -> float:
    """Per-unit cost of the 2-worker local cluster over the in-process path, on no-op units, in ms."""
    from speccheck.scale.executors import InProcessExecutor, make_executor
    from speccheck.scale.units import Unit

    units = [Unit("echo", {}, (i,)) for i in range(n_units)]
    start = time.perf_counter()
    InProcessExecutor().run(units, lambda u, o: None)
    local = (time.perf_counter() - start) / n_units
    executor = make_executor(workers=2)
    try:
        executor.client()
        executor.run(units[:10], lambda u, o: None)  # warm: workers import speccheck
        start = time.perf_counter()
        executor.run(units, lambda u, o: None)
        remote = (time.perf_counter() - start) / n_units
    finally:
        executor.close()
    per_unit = 1e3 * (remote - local)
    print(f"overhead     {n_units} no-op units on the 2-worker cluster: {1e3 * remote:.2f} ms/unit wall, in-process "
          f"{1e3 * local:.3f} ms/unit -> scheduler overhead {per_unit:.2f} ms per unit", flush=True)
    return per_unit


def _battery_pair(suite: str, rule: str, folder: str) -> dict:
    """One battery run as cell units, workers 1 then 2: the ratio, and the reports must be equal."""
    import json

    from speccheck.scale import jobs

    reports = {}

    def run(executor, store) -> None:
        report = jobs.battery_job(rule, suite, executor=executor, store=store)
        reports[len(reports) + 1] = json.dumps({k: v for k, v in report.items() if k not in ("wall_s", "cpu_s")},
                                               sort_keys=True)

    pair = _timed_pair("battery", run, folder)
    print(f"battery      the two merged reports identical: {reports[1] == reports[2]}", flush=True)
    return pair


QUICK = {"suite": "smoke", "seeds": 20, "trajectories": 20, "battery_suite": "smoke"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help=f"a few minutes: {QUICK} unless given (the 4 rules and the 7x7 grid stay)")
    ap.add_argument("--suite", default=None, help="calibration suite (default gate; --quick: smoke)")
    ap.add_argument("--seeds", type=int, default=None, help="calibration seeds per rule (default 20)")
    ap.add_argument("--rules", nargs="+", default=["rmc", "dgrs", "rass", "rass-icdf"])
    ap.add_argument("--calibration-cells", action="store_true",
                    help="calibration runs split into battery cells (`speccheck calibrate --cells`)")
    ap.add_argument("--sweep-rules", nargs="+", default=["dgrs"])
    ap.add_argument("--trajectories", type=int, default=None, help="per sweep cell (default 100; --quick: 20)")
    ap.add_argument("--chunk", type=int, default=None,
                    help="sweep: trajectories per unit (`speccheck sweep --chunk`; default: one unit per cell)")
    ap.add_argument("--battery-suite", default=None, help="suite of the battery-cells part (default gate)")
    ap.add_argument("--battery-rule", default="dgrs")
    ap.add_argument("--K", type=int, default=7)
    ap.add_argument("--L", type=int, default=7)
    ap.add_argument("--overhead-units", type=int, default=200)
    ap.add_argument("--skip", nargs="*", default=[], choices=["calibration", "sweep", "battery", "overhead"])
    args = ap.parse_args(argv)
    defaults = QUICK if args.quick else {"suite": "gate", "seeds": 20, "trajectories": 100, "battery_suite": "gate"}
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)

    from speccheck.sampler.experiments import preset
    from speccheck.scale import jobs

    print(f"bench_scale: {os.cpu_count()} cores; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}; load average "
          f"{os.getloadavg()[0]:.1f} (ratios need an otherwise idle machine)", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as folder:
        if "calibration" not in args.skip:
            print(f"calibration: suite {args.suite}, {args.seeds} seeds x {len(args.rules)} rules "
                  f"= {args.seeds * len(args.rules)} battery runs"
                  f"{', each split into its cells' if args.calibration_cells else ', one unit each'}", flush=True)
            _timed_pair("calibration", lambda ex, st: jobs.calibrate(
                args.suite, args.rules, seeds=range(1, args.seeds + 1), store=st, executor=ex,
                cells=args.calibration_cells), folder)
        if "sweep" not in args.skip:
            proto = preset("gmm-paper", lazy=True)
            cells = [(K, L) for K in range(1, args.K + 1) for L in range(1, args.L + 1)]
            per_cell = 1 if args.chunk is None else -(-args.trajectories // args.chunk)
            print(f"sweep: {args.K}x{args.L} lazy on gmm-paper, rules {args.sweep_rules}, {args.trajectories} "
                  f"trajectories per cell = {len(cells) * len(args.sweep_rules) * per_cell} units"
                  + ("" if args.chunk is None else f" (chunks of {args.chunk})"), flush=True)
            _timed_pair("sweep", lambda ex, st: jobs.run_sweep(
                proto, args.sweep_rules, cells, args.trajectories, 0, store=st, executor=ex, chunk=args.chunk), folder)
        if "battery" not in args.skip:
            print(f"battery: suite {args.battery_suite} on {args.battery_rule}, one unit per cell", flush=True)
            _battery_pair(args.battery_suite, args.battery_rule, folder)
        if "overhead" not in args.skip:
            overhead_ms(args.overhead_units)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
