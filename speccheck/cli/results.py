"""``speccheck results list|show|export``: read the results store (:mod:`speccheck.scale.results`)."""

from __future__ import annotations

import argparse
import sys

from speccheck.cli._executor import DEFAULT_STORE, check_distinct_outputs, check_store
from speccheck.errors import EXIT_OK


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``results`` and its sub-commands to the sub-parsers."""
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
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """List, show or export; exit 0 (a missing store or job is exit 2)."""
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
    return EXIT_OK
