"""``speccheck reproduce``: regenerate a checked-in artefact, one call of
:func:`speccheck.reproduce.run_artefact` (or ``--list``: :func:`speccheck.reproduce.format_list`)."""

from __future__ import annotations

import argparse

from speccheck.cli._output import progress_wanted
from speccheck.errors import EXIT_OK


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``reproduce`` to the sub-parsers."""
    parser = sub.add_parser("reproduce", help="regenerate a checked-in artefact (--list names them)",
                            description="Regenerate a checked-in artefact (theory tables, figures, sweeps, "
                                        "e2e summaries, battery reports) by a thin call into the library.")
    parser.add_argument("name", nargs="?", help="artefact to regenerate (see --list)")
    parser.add_argument("--list", action="store_true", help="name every artefact, what it writes and its rough time")
    parser.add_argument("--out", default=".", metavar="DIR",
                        help="output root the artefact paths are relative to (default: the current directory, "
                             "the repository root)")
    parser.add_argument("--workers", type=int, default=1,
                        help="battery-reports, kill-matrix, calibration: local worker processes for their units "
                             "(default 1 = in this process, no Dask)")
    parser.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT",
                        help="battery-reports, kill-matrix, calibration: run their units on an existing Dask cluster")
    parser.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the list, or regenerate the artefact and print the paths written; exit 0."""
    from speccheck.reproduce import format_list, run_artefact

    if args.list:
        print(format_list())
        return EXIT_OK
    written = run_artefact(args.name, args.out, workers=args.workers, scheduler=args.scheduler,
                           progress=progress_wanted(args.quiet))
    for path in written:
        print(path, flush=True)
    return EXIT_OK
