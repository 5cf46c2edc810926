"""``speccheck figures``: regenerate the figures, one call of :func:`speccheck.figures.render`."""

from __future__ import annotations

import argparse
import os

from speccheck.cli._options import check_output_dir, check_output_file, check_seed, check_threads, set_threads
from speccheck.errors import EXIT_OK, SpeccheckError, UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``figures`` to the sub-parsers."""
    p = sub.add_parser("figures", help="regenerate the theory and speed-up figures: PNG + SVG + the CSV behind each")
    p.add_argument("--only", nargs="+", default=None, metavar="NAME",
                   help="figures to render: number (1..7), short name (acceptance, bounds, rank-weights, frontier, "
                        "heatmaps, speedup-vs-K, battery) or file stem; default all")
    p.add_argument("--out", default="figures", help="output directory (default: figures/)")
    p.add_argument("--quick", action="store_true", help="CI sizes: coarse grids, tiny sweep and battery")
    p.add_argument("--sweep", default=None, metavar="DIR",
                   help="reuse/resume this sampler sweep folder for figures 4-6 (default: a temporary one)")
    p.add_argument("--no-sweep-run", action="store_true",
                   help="with --sweep: only read the folder (cells it lacks are noted, not run)")
    p.add_argument("--battery-suite", default=None,
                   help="suite for figure 7's kill matrix (default: smoke; quick: tiny)")
    p.add_argument("--battery-json", default=None, metavar="PATH",
                   help="figure 7: read the battery reports from PATH (`speccheck battery --mutants --json PATH`) "
                        "if it exists, else run them and save them there")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.set_defaults(func=run)


def _check(args: argparse.Namespace) -> list:
    """Every option and input, before any work; the selected figures."""
    from speccheck.figures import MEASURED, check_inputs, resolve

    check_seed(args.seed)
    check_threads(args.threads)
    selected = resolve(args.only)  # unknown names -> InputError (exit 2) before any work
    if args.no_sweep_run and not args.sweep:
        raise UsageError("--no-sweep-run needs --sweep DIR")
    check_inputs(selected, sweep_dir=args.sweep, sweep_run=not args.no_sweep_run, battery_json=args.battery_json)
    check_output_dir(args.out, "--out")
    if args.battery_json and not os.path.exists(args.battery_json):
        check_output_file(args.battery_json, "--battery-json")  # the reports will be saved there
    measured = {s.stem for s in selected} & set(MEASURED)
    if args.sweep and measured and not args.no_sweep_run and not os.path.isfile(args.sweep):
        check_output_dir(args.sweep, "--sweep")
    return selected


def run(args: argparse.Namespace) -> int:
    """Render; exit 0 when every selected figure was drawn, else exit 2 naming those that were not."""
    from speccheck.figures import render

    selected = _check(args)
    set_threads(args.threads)
    man = render(args.out, only=args.only, quick=args.quick, sweep_dir=args.sweep, sweep_run=not args.no_sweep_run,
                 seed=args.seed, battery_suite=args.battery_suite, battery_json=args.battery_json,
                 log=lambda m: print(m, flush=True))
    stems = {s.stem for s in selected}
    failed = [k for k, v in man["figures"].items() if "error" in v and k in stems]
    if failed:
        details = "; ".join(f"{k}: {man['figures'][k]['error']}" for k in failed)
        raise SpeccheckError(f"{len(failed)} figure(s) could not be drawn: {details}")
    print(f"wrote {args.out}/ (manifest.json lists the files)")
    return EXIT_OK
