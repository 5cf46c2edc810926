"""``speccheck theory``: acceptance, bounds and optimal RASS weights per (delta, K), one call
of :func:`speccheck.theory.table.theory_table`."""

from __future__ import annotations

import argparse
import math

from speccheck.cli._options import MAX_K, check_int, check_values, parse_range
from speccheck.cli._output import json_text, progress_bar, progress_wanted
from speccheck.errors import EXIT_OK, UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``theory`` to the sub-parsers."""
    p = sub.add_parser("theory", help="acceptance (RMC, D-GRS, RASS, MCRS), bounds and optimal RASS weights per "
                                      "(delta, K)",
                       description="RASS's row is speccheck.theory.rank_weight_solution(delta, K, max_iter=M) with "
                                   "M = speccheck.theory.table.rass_budget(K) (JSON: rass_max_iter): the full solve "
                                   "for K <= 32, a budget of partition rounds above (the command: 0.6-1.6 s of CPU "
                                   "per cell measured), its certified gap printed as the API returns it; a note "
                                   "names the full-solve call where the gap is above 1e-12.")
    p.add_argument("--delta", type=float, nargs="+", default=[0.5, 1.0, 2.0], help="finite, >= 0")
    p.add_argument("--K", nargs="+", default=["1", "2", "4", "8"],
                   help=f"draft counts in [1, {MAX_K}]: values or ranges like 1..16 (as sweep's --K)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--mcrs", action=argparse.BooleanOptionalAction, default=None,
                   help="compute MCRS values whose policy is not stored (its cold LP takes ~0.1-10 s per "
                        "(delta, K)); default: stored policies only, the rest skipped with a note")
    p.add_argument("--mcrs-G", type=int, default=64, help="cells of MCRS's policy, in [2, 1024] (0: skip MCRS)")
    p.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
    p.set_defaults(func=run)


def _check(args: argparse.Namespace) -> None:
    check_values(args.delta, "--delta")
    check_values(args.K, "--K")
    for delta in args.delta:
        if not math.isfinite(delta) or delta < 0:
            raise UsageError(f"--delta must be finite and >= 0, got {delta}")
    args.K = parse_range(args.K, "K", MAX_K)
    if args.mcrs_G != 0:
        check_int(args.mcrs_G, "--mcrs-G", 2, 1024)
    if len(args.delta) * len(args.K) > 10_000:
        raise UsageError(f"--delta x --K asks for {len(args.delta) * len(args.K)} rows; at most 10000")


def run(args: argparse.Namespace) -> int:
    """Print the table (or JSON); always exit 0 once the options are valid."""
    from speccheck.theory.table import format_theory_table, theory_table

    _check(args)
    mcrs_G = args.mcrs_G if (args.mcrs is not False and args.mcrs_G) else None
    bar = progress_bar(len(args.delta) * len(args.K), "theory rows", progress_wanted(args.quiet))
    try:
        rows = theory_table(args.delta, args.K, mcrs_G=mcrs_G, mcrs="auto" if args.mcrs is None else args.mcrs,
                            on_row=lambda row: bar.update(1))
    finally:
        bar.close()
    print(json_text(rows) if args.json else format_theory_table(rows))
    return EXIT_OK
