"""Scale-out benchmarks (issue 14, "Done when" 3). Prints ratios measured in one run; asserts nothing.

Every timed job is the ``speccheck`` command a user types, run in a fresh process with
``--workers 1`` (units in that process, no Dask) and then ``--workers 2`` (a local Dask cluster of
two worker processes), timed from the process's start to its exit: Python start-up, imports,
the cluster's start-up and shut-down and the summary are all counted, as a user pays them. The
ratio is wall(2 workers) / wall(1 worker); target <= 0.6 on a 2-core machine. Both runs write a
fresh results store and must store identical results. Per run the store also gives where the time
went: ``to first unit`` (process start to the first unit's start: imports, cluster start-up),
``units`` (first unit's start to the last unit's end) and ``after`` (storing the last unit to exit).

1. Calibration (``speccheck calibrate``): 20 seeds x the 4 built-in rules rmc dgrs rass rass-icdf,
   one unit per battery run; gate suite (``--quick``: smoke).
2. A 7 x 7 lazy sweep (``speccheck sweep --K 1..7 --L 1..7``, gmm-paper preset, rule dgrs), one unit
   per cell, at each ``--trajectories`` given (per cell; default 2000, ``--quick`` 400: units of
   0.4-2 s, the 49 of them about 45 s on one core). A unit's cost grows about linearly with its
   trajectories; the issue's users run 10^4 trajectories per cell, units of a minute or more,
   where start-up is negligible. At 20 trajectories per cell the units last 0.1-0.3 s and the
   whole sweep 7-9 s on one core, of which about 1.5 s (Python start-up, imports, summary, exit)
   is the same with one worker or two, so the ratio cannot reach 0.6 there.
3. One battery run split into its cells (``speccheck battery --workers N --store``; gate suite on
   dgrs, ``--quick``: smoke): the same ratio, and the two JSON reports must be identical.
4. The scheduler's overhead per unit: N no-op units (kind ``echo``) on a started 2-worker cluster,
   wall / N, minus the in-process time per no-op unit, in ms.

    python benchmarks/bench_scale.py            # the issue's sizes (gate calibration: about an hour on 2 cores)
    python benchmarks/bench_scale.py --quick    # a few minutes: smoke calibration 20 seeds x 4 rules, 7x7 lazy
                                                # sweep of 400 trajectories per cell, smoke battery cells
    python benchmarks/bench_scale.py --quick --skip calibration battery overhead --trajectories 20 100 400
    python benchmarks/bench_scale.py --quick --seeds 2 --rules dgrs --K 2 --L 2 --trajectories 3 \\
        --overhead-units 20 --skip battery      # a dry run (seconds; the ratios mean nothing)

Ratios need an otherwise idle machine: the 2-worker run uses both cores, so any other load slows
it and not the 1-worker run (the load average is printed before and after each pair).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")


def _stored(path: str) -> list[tuple]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT job, unit_key, seed, result FROM units ORDER BY job, unit_key").fetchall()


def _phases(path: str, started: float, ended: float) -> dict:
    """Process start -> first unit's start -> last unit stored -> exit, from the store's rows."""
    with sqlite3.connect(path) as db:
        first, last, busy = db.execute("SELECT MIN(stored_at - wall_s), MAX(stored_at), SUM(wall_s) FROM units "
                                       "WHERE worker NOT LIKE 'merged-%'").fetchone()
    return {"to_first": first - started, "units": last - first, "after": ended - last, "unit_s": busy}


def _run_pair(label: str, command: list[str], folder: str, json_out: bool = False) -> dict:
    """``speccheck COMMAND --workers W --store S`` for W = 1 then 2, each in a fresh process; the
    wall times, their ratio, the phases of each run, and whether the stores are identical."""
    runs = {}
    for workers in (1, 2):
        store = os.path.join(folder, f"{label}-w{workers}.sqlite")
        argv = [sys.executable, "-m", "speccheck.cli", *command, "--workers", str(workers), "--store", store,
                "--no-progress"]
        if json_out:
            argv += ["--json", os.path.join(folder, f"{label}-w{workers}.json")]
        started = time.time()
        clock = time.perf_counter()
        done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wall = time.perf_counter() - clock
        if done.returncode not in (0, 1):  # 1: a verdict (a calibration's failures), still a timed run
            raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-2000:]}")
        runs[workers] = {"wall_s": wall, "store": store, **_phases(store, started, started + wall)}
    identical = _stored(runs[1]["store"]) == _stored(runs[2]["store"])
    ratio = runs[2]["wall_s"] / runs[1]["wall_s"]
    print(f"{label:<12} workers 1: {runs[1]['wall_s']:6.1f} s | workers 2: {runs[2]['wall_s']:6.1f} s | "
          f"ratio {ratio:.3f} (target <= 0.6) | stored results identical: {identical} | "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    for workers, run in runs.items():
        print(f"{'':<12}   workers {workers}: to first unit {run['to_first']:5.2f} s, units {run['units']:6.2f} s "
              f"({run['unit_s']:.1f} s of unit time), after {run['after']:4.2f} s", flush=True)
    return {"ratio": ratio, "identical": identical, **runs}


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
        executor.run(units[:10], lambda u, o: None)  # warm: workers connected and idle
        start = time.perf_counter()
        executor.run(units, lambda u, o: None)
        remote = (time.perf_counter() - start) / n_units
    finally:
        executor.close()
    per_unit = 1e3 * (remote - local)
    print(f"overhead     {n_units} no-op units on the 2-worker cluster: {1e3 * remote:.2f} ms/unit wall, in-process "
          f"{1e3 * local:.3f} ms/unit -> scheduler overhead {per_unit:.2f} ms per unit", flush=True)
    return per_unit


def _same_reports(folder: str, label: str) -> bool:
    reports = []
    for workers in (1, 2):
        with open(os.path.join(folder, f"{label}-w{workers}.json")) as fh:
            report = json.load(fh)
        reports.append(json.dumps({k: v for k, v in report.items() if k not in ("wall_s", "cpu_s")}, sort_keys=True))
    return reports[0] == reports[1]


QUICK = {"suite": "smoke", "trajectories": [400], "battery_suite": "smoke"}
FULL = {"suite": "gate", "trajectories": [2000], "battery_suite": "gate"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help=f"a few minutes: {QUICK} unless given (20 seeds, the 4 rules and the 7x7 grid stay)")
    ap.add_argument("--suite", default=None, help="calibration suite (default gate; --quick: smoke)")
    ap.add_argument("--seeds", type=int, default=20, help="calibration seeds per rule (default 20)")
    ap.add_argument("--rules", nargs="+", default=["rmc", "dgrs", "rass", "rass-icdf"])
    ap.add_argument("--calibration-cells", action="store_true",
                    help="calibration runs split into battery cells (`speccheck calibrate --cells`)")
    ap.add_argument("--sweep-rules", nargs="+", default=["dgrs"])
    ap.add_argument("--trajectories", type=int, nargs="+", default=None,
                    help="per sweep cell, one pair of runs per value (default 2000; --quick: 400)")
    ap.add_argument("--chunk", type=int, default=None,
                    help="sweep: trajectories per unit (`speccheck sweep --chunk`; default: one unit per cell)")
    ap.add_argument("--battery-suite", default=None, help="suite of the battery-cells part (default gate)")
    ap.add_argument("--battery-rule", default="dgrs")
    ap.add_argument("--K", type=int, default=7)
    ap.add_argument("--L", type=int, default=7)
    ap.add_argument("--overhead-units", type=int, default=200)
    ap.add_argument("--skip", nargs="*", default=[], choices=["calibration", "sweep", "battery", "overhead"])
    args = ap.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)

    print(f"bench_scale: {os.cpu_count()} cores; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}; load average "
          f"{os.getloadavg()[0]:.1f} (ratios need an otherwise idle machine); each run is a fresh `speccheck` "
          "process, timed from start to exit", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as folder:
        if "calibration" not in args.skip:
            print(f"calibration: suite {args.suite}, {args.seeds} seeds x {len(args.rules)} rules "
                  f"= {args.seeds * len(args.rules)} battery runs"
                  f"{', each split into its cells' if args.calibration_cells else ', one unit each'}", flush=True)
            _run_pair("calibration", ["calibrate", "--suite", args.suite, "--verifier", *args.rules, "--seeds",
                                      str(args.seeds)] + (["--cells"] if args.calibration_cells else []), folder)
        if "sweep" not in args.skip:
            for n_traj in args.trajectories:
                n_cells = args.K * args.L * len(args.sweep_rules)
                per_cell = 1 if args.chunk is None else -(-n_traj // args.chunk)
                print(f"sweep: {args.K}x{args.L} lazy on gmm-paper, rules {args.sweep_rules}, {n_traj} "
                      f"trajectories per cell = {n_cells * per_cell} units"
                      + ("" if args.chunk is None else f" (chunks of {args.chunk})"), flush=True)
                _run_pair(f"sweep-{n_traj}", ["sweep", "--target", "gmm-paper", "--lazy", "--K", f"1..{args.K}",
                                              "--L", f"1..{args.L}", "--verifiers", *args.sweep_rules,
                                              "--trajectories", str(n_traj)]
                          + ([] if args.chunk is None else ["--chunk", str(args.chunk)]), folder)
        if "battery" not in args.skip:
            print(f"battery: suite {args.battery_suite} on {args.battery_rule}, one unit per cell", flush=True)
            _run_pair("battery", ["battery", "--verifier", args.battery_rule, "--suite", args.battery_suite], folder,
                      json_out=True)
            print(f"battery      the two JSON reports identical: {_same_reports(folder, 'battery')}", flush=True)
        if "overhead" not in args.skip:
            overhead_ms(args.overhead_units)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
