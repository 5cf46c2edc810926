"""The scale-out subcommands: ``sweep``, ``calibrate`` and ``results``.

``speccheck.cli`` calls :func:`register` with its sub-parsers. Every ``func(args)`` returns the
exit code (0 ran and positive, 1 defect found); bad options and unreadable files raise
``speccheck.errors`` exceptions, which the CLI maps to exit code 2. Heavy imports (torch, dask)
happen inside the commands, never at registration.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from typing import TYPE_CHECKING, Callable, Optional

from speccheck.errors import InputError

if TYPE_CHECKING:
    from speccheck.sampler.experiments import Protocol
    from speccheck.scale.executors import Executor

DEFAULT_STORE = os.path.join("results", "speccheck.sqlite")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
# calibrate --timeout default: one unit is a whole battery run of the suite (the gate suite takes
# about a minute on a CPU; with --workers 1 the bound applies to each battery cell of it)
TIMEOUT_CALIBRATION_UNIT_S = 3600.0
MAX_TIMEOUT_S = 7 * 24 * 3600.0
# the false-failure rate of the theory-vs-measurement verdict of `sweep` and `speedup`: each cell's
# acceptance calibration z is a two-sided test, Holm's step-down over the cells keeps the
# family-wise rate at this
THEORY_ALPHA = 1e-3


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``sweep``, ``calibrate`` and ``results`` to the ``speccheck`` sub-parsers."""
    _add_sweep(subparsers)
    _add_calibrate(subparsers)
    _add_results(subparsers)


# ----------------------------------------------------------------------------- shared options
def add_executor_args(parser: argparse.ArgumentParser, *, store_default: Optional[str] = DEFAULT_STORE,
                      workers_default: str = "one per core", progress_option: bool = True) -> None:
    """``--workers``, ``--scheduler``, ``--store``, ``--no-progress`` (shared by the heavy commands).
    ``store_default`` None: no store unless ``--store`` is given; ``progress_option`` False when
    the command already has ``--no-progress``."""
    parser.add_argument("--workers", type=int, default=None,
                        help=f"local worker processes (default: {workers_default}; 1 = in this process, no Dask)")
    parser.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT",
                        help="run on an existing Dask cluster (default: $DASK_SCHEDULER_ADDRESS if set)")
    if store_default is None:
        parser.add_argument("--store", default=None, metavar="PATH",
                            help="SQLite results store of the units (resume: units already stored are skipped); "
                                 "default: none")
    else:
        parser.add_argument("--store", default=store_default, metavar="PATH",
                            help=f"SQLite results store; units already stored are skipped (default {store_default})")
    if progress_option:
        parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def executor_from(args: argparse.Namespace, timeout: Optional[float] = None, *,
                  modules: Optional[tuple[str, ...]] = None) -> Executor:
    """The executor the options ask for (see :func:`speccheck.scale.executors.make_executor`),
    started: a local cluster's workers begin importing torch and ``modules`` (default: every unit
    kind's) now, in parallel with the caller; so call it before the command's own heavy imports."""
    from speccheck.scale.executors import ALL_MODULES, make_executor

    return make_executor(workers=args.workers, scheduler=args.scheduler, progress=not args.no_progress,
                         timeout=timeout, modules=modules or ALL_MODULES).start()


def wants_dask(args: argparse.Namespace, default_workers: int = 1) -> bool:
    """Whether ``--workers``/``--scheduler`` (or ``$DASK_SCHEDULER_ADDRESS`` when ``--workers`` is
    not given) ask for Dask, for a command whose default is ``default_workers`` local processes."""
    if args.scheduler:
        return True
    if args.workers is None:
        return bool(os.environ.get("DASK_SCHEDULER_ADDRESS")) or default_workers > 1
    if args.workers < 1:
        raise InputError(f"--workers must be >= 1, got {args.workers}")
    return args.workers > 1


def check_store(path: Optional[str], option: str = "--store") -> Optional[str]:
    """A results store that persists: a file path, never empty or SQLite's in-memory database
    (``:memory:``, a ``file:`` URI), where a job would run and save nothing."""
    if path is None:
        return None
    if not path.strip() or path == ":memory:" or path.startswith("file:"):
        raise InputError(f"{option} {path!r} is not a file path (an empty name or ':memory:' stores nothing: the "
                         "job's units would be lost); give a file such as results/speccheck.sqlite")
    return path


def check_timeout(timeout: float, option: str = "--timeout") -> float:
    """A finite number of seconds in (0, MAX_TIMEOUT_S]."""
    if not (math.isfinite(timeout) and 0 < timeout <= MAX_TIMEOUT_S):
        raise InputError(f"{option} must be a finite number of seconds in (0, {MAX_TIMEOUT_S:g}], got {timeout}")
    return timeout


def check_alpha(alpha: float, option: str = "--alpha") -> float:
    """A false-failure rate in (0, 1)."""
    if not (math.isfinite(alpha) and 0 < alpha < 1):
        raise InputError(f"{option} must be a finite number in (0, 1), got {alpha}")
    return alpha


def check_distinct_outputs(paths: dict[str, Optional[str]]) -> None:
    """Two options naming the same file (after resolving links and ``..``) would overwrite each
    other, e.g. ``--json`` replacing the ``--store`` database: InputError naming both."""
    seen: dict[str, str] = {}
    for option, path in paths.items():
        if not isinstance(path, str) or not path:
            continue
        resolved = os.path.realpath(path)
        if resolved in seen:
            raise InputError(f"{seen[resolved]} and {option} name the same file {path!r}; the second would overwrite "
                             "the first: give them different paths")
        seen[resolved] = option


def check_name(name: str, option: str = "--name") -> str:
    """A job name is a plain token (letters, digits, ``._-``): never a path."""
    if not _NAME_RE.match(name) or ".." in name:
        raise InputError(f"{option} must be 1-100 letters, digits, '.', '_' or '-' (no '/' or '..'), got {name!r}")
    return name


def parse_range(values: list[str], option: str) -> list[int]:
    """``["1..3", "6"]`` -> ``[1, 2, 3, 6]`` (sorted, unique, each >= 1)."""
    out: list[int] = []
    for value in values:
        try:
            if ".." in value:
                low, high = value.split("..")
                out += list(range(int(low), int(high) + 1))
            else:
                out.append(int(value))
        except ValueError:
            raise InputError(f"--{option} takes integers or ranges like 1..7, got {value!r}") from None
    if not out or min(out) < 1:
        raise InputError(f"--{option} must be integers >= 1, got {values}")
    return sorted(set(out))


def parse_cells(values: list[str]) -> list[tuple[int, int]]:
    """``["6x6", "5x3"]`` -> ``[(6, 6), (5, 3)]``."""
    cells = []
    for value in values:
        parts = value.lower().split("x")
        try:
            pair = tuple(int(p) for p in parts)
        except ValueError:
            pair = ()
        if len(pair) != 2 or min(pair) < 1:
            raise InputError(f"--cells takes KxL pairs like 6x6 (K, L >= 1), got {value!r}")
        cells.append(pair)
    return cells


def add_protocol_args(parser: argparse.ArgumentParser) -> None:
    """The Gaussian-mixture sweep protocol options (preset plus overrides)."""
    parser.add_argument("--target", default="gmm-paper", choices=["gmm-paper", "gmm-d512"],
                        help="preset (gmm-paper: d=500, eps=0.1, uniform grid, leaves evaluated; gmm-d512: "
                             "d=512, eps=0.06, flow grid with deterministic ends, leaves not evaluated)")
    parser.add_argument("--trajectories", type=int, default=100, help="trajectories per cell (>= 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lazy", action=argparse.BooleanOptionalAction, default=True,
                        help="realise only visited branches (same law and NFE; default lazy)")
    parser.add_argument("--prefetch", choices=["nearest", "parent", "none"], default=None)
    parser.add_argument("--leaves", action=argparse.BooleanOptionalAction, default=None,
                        help="evaluate leaves too (|V| rows per round) or not (|I| rows)")
    parser.add_argument("--freeze", choices=["drift", "velocity", "denoised"], default=None)
    parser.add_argument("--grid", choices=["uniform", "shifted", "flow", "edm"], default=None)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--eps", type=float, default=None)
    parser.add_argument("--chain-match", choices=["budget", "rows"], default=None,
                        help="chain compared with a (K, L) tree: same drafted budget B or same rows")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads per unit (default 1)")


def protocol_from(args: argparse.Namespace) -> Protocol:
    """The :class:`speccheck.sampler.experiments.Protocol` the options describe."""
    from speccheck.sampler.experiments import preset

    if args.steps is not None and args.steps < 2:
        raise InputError(f"--steps must be >= 2, got {args.steps}")
    return preset(args.target, prefetch=args.prefetch, leaves=args.leaves, freeze=args.freeze, grid=args.grid,
                  steps=args.steps, eps=args.eps, chain_match=args.chain_match, lazy=args.lazy)


# ----------------------------------------------------------------------------- sweep
def _add_sweep(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="resumable (rule, K, L) speed-up sweep on a mixture preset, one unit per "
                                     "cell, into the results store; summary with SE and theory prediction")
    p.add_argument("--verifiers", nargs="+", default=["rmc", "dgrs", "rass"])
    p.add_argument("--K", nargs="+", default=None, help="K values or ranges (default 1..7)")
    p.add_argument("--L", nargs="+", default=None, help="L values or ranges (default 2..7)")
    p.add_argument("--cells", nargs="+", default=None, help="explicit cells like 6x6 5x3 (instead of --K/--L)")
    p.add_argument("--chunk", type=int, default=None, metavar="N",
                   help="trajectories per unit: a cell of more is split into chunks of N (run in parallel, "
                        "stored as they finish, merged exactly into the cell); default: one unit per cell")
    p.add_argument("--name", default=None, help="sweep name in the store (default: target + protocol hash)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="also write DIR/<name>/summary.csv and summary.md (every cell stored in the sweep)")
    p.add_argument("--convert", default=None, metavar="DIR",
                   help="run nothing: import a legacy CSV sweep folder (trajectories.csv) into the store")
    p.add_argument("--alpha", type=float, default=THEORY_ALPHA,
                   help="false-failure rate of the theory check: exit 1 when a cell's acceptance calibration z "
                        "rejects its verifier's acceptance law (two-sided, Holm over the cells; default "
                        f"{THEORY_ALPHA:g})")
    add_protocol_args(p)
    add_executor_args(p)
    p.set_defaults(func=cmd_sweep)


def cmd_sweep(args: argparse.Namespace) -> int:
    """``speccheck sweep``: run the missing cells into the store, then print/write the summary; exit 1
    when a cell's measured acceptance contradicts its verifier's law (:func:`jobs.calibration_contradictions`)."""
    check_store(args.store)
    check_alpha(args.alpha)
    if args.convert:
        from speccheck.scale import jobs

        name = jobs.convert_legacy_sweep(args.convert, args.store, name=args.name and check_name(args.name))
        print(f"imported {args.convert} into {args.store} as sweep {name!r}")
        return 0
    if args.cells and (args.K is not None or args.L is not None):
        raise InputError("--cells cannot be combined with --K/--L (give either explicit KxL cells or K and L ranges)")
    if args.trajectories < 2:
        raise InputError(f"--trajectories must be >= 2, got {args.trajectories}")
    if args.chunk is not None and args.chunk < 1:
        raise InputError(f"--chunk must be >= 1 trajectories per unit, got {args.chunk}")
    cells = parse_cells(args.cells) if args.cells else [
        (k, l) for k in parse_range(args.K or ["1..7"], "K") for l in parse_range(args.L or ["2..7"], "L")]
    from speccheck.scale.executors import SWEEP_MODULES

    executor = executor_from(args, modules=SWEEP_MODULES)  # local workers start while this process imports
    try:
        from speccheck.scale import jobs

        proto = protocol_from(args)
        chunked = args.chunk is not None and args.chunk < args.trajectories
        name = check_name(args.name) if args.name else (f"{proto.target}-{proto.key()}"
                                                         + (f"-chunk{args.chunk}" if chunked else ""))
        rows = jobs.run_sweep(proto, args.verifiers, cells, args.trajectories, args.seed, store=args.store,
                              name=name, executor=executor, threads=args.threads, log=lambda m: print(m, flush=True),
                              chunk=args.chunk)
    finally:
        executor.close()
    print(f"sweep {name!r}: {len(rows)} cells run or found in {args.store}")
    if args.out:
        folder = os.path.join(args.out, name)
        every_cell, _ = jobs.load_sweep(args.store, name)
        jobs.write_summary_files(every_cell, folder)
        print(f"wrote {folder}/summary.csv, summary.md ({len(every_cell)} cells stored in the sweep)")
    rejected = jobs.calibration_contradictions(rows, args.alpha)
    if rejected:
        print(jobs.format_contradictions(rejected, args.alpha, len(rows)))
        return 1
    return 0


# ----------------------------------------------------------------------------- calibrate
def _add_calibrate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help="how often does a CORRECT rule fail a suite? failures over many seeds vs "
                                         "the stated family-wise rate (95%% Clopper-Pearson), per-test p shares")
    p.add_argument("--suite", default="gate", help="smoke | gate | full, or a suite .toml (default gate)")
    p.add_argument("--verifier", nargs="+", default=["rmc", "dgrs", "rass", "rass-icdf"],
                   help="rules to calibrate (names or package.module:attr)")
    p.add_argument("--seeds", type=int, default=200, help="distinct seeds per rule (default 200)")
    p.add_argument("--first-seed", type=int, default=1)
    p.add_argument("--device", default="cpu", help="cpu | cuda (cuda units ask Dask workers for GPU=1)")
    p.add_argument("--name", default=None, help="calibration name in the store (default: calibrate-<suite>)")
    p.add_argument("--cells", action="store_true",
                   help="split each battery run into its cells (units of seconds, for big suites on many workers); "
                        "the same records")
    p.add_argument("--summarise-only", action="store_true",
                   help="run nothing: summarise the runs already in the store (e.g. after split runs)")
    p.add_argument("--json", default=None, metavar="PATH", help="write the summary and per-run records as JSON")
    p.add_argument("--timeout", type=float, default=TIMEOUT_CALIBRATION_UNIT_S, metavar="SECONDS",
                   help="stop and exit 2 when one unit (a battery run; with --workers 1, one battery cell) runs "
                        f"longer than this (default {TIMEOUT_CALIBRATION_UNIT_S:g} s)")
    add_executor_args(p)
    p.set_defaults(func=cmd_calibrate)


def cmd_calibrate(args: argparse.Namespace) -> int:
    """``speccheck calibrate``: exit 0 when every rule's failure rate is consistent with the suite's."""
    if args.seeds < 1 or args.first_seed < 0:
        raise InputError(f"--seeds must be >= 1 and --first-seed >= 0, got {args.seeds}, {args.first_seed}")
    name = check_name(args.name) if args.name else None
    check_store(args.store)
    check_timeout(args.timeout)
    check_distinct_outputs({"--store": args.store, "--json": args.json})
    options = dict(suite=args.suite, verifiers=[str(v) for v in args.verifier], first_seed=args.first_seed,
                   seeds=args.seeds, device=args.device, store=args.store, name=name, cells=args.cells)
    from speccheck.scale import jobs

    if args.summarise_only:
        summary = _calibrate(executor=None, run=False, **options)
    else:
        from speccheck.scale.executors import BATTERY_MODULES, InProcessExecutor

        # local workers start while this process imports
        executor = executor_from(args, timeout=args.timeout, modules=BATTERY_MODULES)
        try:
            if isinstance(executor, InProcessExecutor):  # the rules' code runs in a child bounded by --timeout
                summary = _calibrate_isolated(options, timeout=args.timeout, progress=not args.no_progress)
            else:  # on Dask the workers isolate it, and the executor bounds each unit by --timeout
                summary = _calibrate(executor=executor, run=True, **options)
        finally:
            executor.close()
    print(jobs.format_calibration(summary))
    if args.json:
        jobs.write_json(summary, args.json)
    return 0 if summary["consistent"] else 1


def _calibrate(*, suite: str, verifiers: list[str], first_seed: int, seeds: int, device: str, store: Optional[str],
               name: Optional[str], cells: bool, executor: Optional[Executor], run: bool) -> dict:
    from speccheck.scale import jobs

    return jobs.calibrate(suite, verifiers, seeds=range(first_seed, first_seed + seeds), device=device, store=store,
                          name=name, executor=executor, run=run, cells=cells)


def _job_calibrate(heartbeat: Callable[[str], None], *, progress: bool, **options: object) -> dict:
    """Child side of ``speccheck calibrate --workers 1``: the units one after another in this child, a
    heartbeat at each unit and each battery cell inside one (``--timeout`` bounds a cell)."""
    from speccheck.scale.executors import InProcessExecutor

    executor = InProcessExecutor(progress=progress, heartbeat=heartbeat)
    return {"summary": _calibrate(executor=executor, run=True, **options)}


def _calibrate_isolated(options: dict, *, timeout: float, progress: bool) -> dict:
    from speccheck.errors import IsolatedCodeError
    from speccheck.isolation import run_isolated

    cuda = str(options["device"]).startswith("cuda")
    value = run_isolated("speccheck.scale.commands:_job_calibrate", {**options, "progress": progress},
                         timeout=timeout, what=f"the calibration of {', '.join(options['verifiers'])}",
                         preload=("torch", "speccheck.validation.battery"), memory_fraction=None if cuda else 0.8)
    summary = value.get("summary")
    if not isinstance(summary, dict) or "rules" not in summary:
        raise IsolatedCodeError("the calibration returned no summary; no verdict")
    return summary


# ----------------------------------------------------------------------------- results
def _add_results(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("results", help="read the results store: list jobs, show one, export its units")
    rsub = p.add_subparsers(dest="results_command", required=True)
    lp = rsub.add_parser("list", help="jobs in the store: name, kind, units stored, spec hash")
    lp.add_argument("--store", default=DEFAULT_STORE, metavar="PATH")
    sp = rsub.add_parser("show", help="one job: its spec and its summary (sweep table, calibration, kill matrix)")
    sp.add_argument("job", help="job name (see `speccheck results list`)")
    sp.add_argument("--store", default=DEFAULT_STORE, metavar="PATH")
    ep = rsub.add_parser("export", help="one job's units (or all jobs') as csv, json or parquet")
    ep.add_argument("job", nargs="?", default=None, help="job name (default: every job)")
    ep.add_argument("--store", default=DEFAULT_STORE, metavar="PATH")
    ep.add_argument("--format", choices=["csv", "json", "parquet"], default="csv")
    ep.add_argument("--out", default=None, metavar="PATH", help="output file (default: stdout; parquet needs a file)")
    ep.add_argument("--rows", choices=["units", "cells", "trajectories"], default="units",
                    help="one row per stored unit (result as JSON text), per sweep cell / battery test / "
                         "calibration record, or per sampler trajectory (typed columns)")
    p.set_defaults(func=cmd_results)


def cmd_results(args: argparse.Namespace) -> int:
    """``speccheck results list|show|export``."""
    from speccheck.scale import results

    check_store(args.store)
    if args.results_command == "export":
        check_distinct_outputs({"--store": args.store, "--out": args.out})
    if args.results_command == "list":
        print(results.format_jobs(results.list_jobs(args.store)))
    elif args.results_command == "show":
        print(results.show_job(args.store, args.job))
    else:
        text = results.export(args.store, args.job, fmt=args.format, out=args.out, rows=args.rows)
        if text is not None:
            sys.stdout.write(text)
        else:
            print(f"wrote {args.out}", file=sys.stderr)
    return 0


def main(argv: list[str]) -> int:
    """Parse ``argv`` with only these subcommands and run it, mapping speccheck errors to exit 2
    (what ``speccheck.cli.main`` does for every subcommand)."""
    from speccheck.errors import SpeccheckError

    parser = argparse.ArgumentParser(prog="speccheck")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except SpeccheckError as exc:
        print(f"speccheck {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # `python -m speccheck.scale.commands sweep ...`, the same as `speccheck sweep ...`
    sys.exit(main(sys.argv[1:]))
