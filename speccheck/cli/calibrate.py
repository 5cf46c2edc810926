"""``speccheck calibrate``: how often does a correct rule fail a suite, one call of
:func:`speccheck.api.calibrate` (its summary's ``consistent`` is the verdict)."""

from __future__ import annotations

import argparse
import math

from speccheck.cli._executor import add_executor_args, check_distinct_outputs, check_name, check_store, show_progress
from speccheck.errors import EXIT_DEFECT, EXIT_OK, InputError

# --timeout default: one unit is a whole battery run of the suite (the gate suite takes about a
# minute on a CPU; with --workers 1 the bound applies to each battery cell of it)
TIMEOUT_CALIBRATION_UNIT_S = 3600.0
MAX_TIMEOUT_S = 7 * 24 * 3600.0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``calibrate`` to the sub-parsers."""
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
    p.set_defaults(func=run)


def _check(args: argparse.Namespace) -> None:
    if args.seeds < 1 or args.first_seed < 0:
        raise InputError(f"--seeds must be >= 1 and --first-seed >= 0, got {args.seeds}, {args.first_seed}")
    if args.name:
        check_name(args.name)
    check_store(args.store)
    if not (math.isfinite(args.timeout) and 0 < args.timeout <= MAX_TIMEOUT_S):
        raise InputError(f"--timeout must be a finite number of seconds in (0, {MAX_TIMEOUT_S:g}], got {args.timeout}")
    check_distinct_outputs({"--store": args.store, "--json": args.json})


def run(args: argparse.Namespace) -> int:
    """Print the calibration summary, write --json; exit 0 when every rule is consistent, else 1."""
    from speccheck.api import calibrate
    from speccheck.scale.jobs import format_calibration, write_json

    _check(args)
    summary = calibrate(args.suite, args.verifier, seeds=range(args.first_seed, args.first_seed + args.seeds),
                        device=args.device, store=args.store, name=args.name or None, cells=args.cells,
                        run=not args.summarise_only, workers=args.workers, scheduler=args.scheduler,
                        timeout=args.timeout, progress=show_progress(args))
    print(format_calibration(summary))
    if args.json:
        write_json(summary, args.json)  # strict JSON (non-finite floats as null), its folder created
    return EXIT_OK if summary["consistent"] else EXIT_DEFECT
