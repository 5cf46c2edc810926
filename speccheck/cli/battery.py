"""``speccheck battery``: the exactness battery on one verifier (one call of
:func:`speccheck.api.battery`, whose :class:`~speccheck.validation.verdict.BatteryOutcome` is the
verdict) or, with ``--mutants``, the kill matrix (:mod:`speccheck.cli.mutants`)."""

from __future__ import annotations

import argparse
import os
import sys

from speccheck import errors
from speccheck.cli._executor import add_executor_args, battery_progress, wants_dask
from speccheck.cli._options import (
    MAX_K,
    MAX_SEED,
    TIMEOUT_BATTERY_CELL_S,
    add_timeout,
    check_cuda_available,
    check_device_name,
    check_float,
    check_ints,
    check_output_file,
    check_seed,
    check_timeout,
    check_values,
)
from speccheck.cli._output import write_json, write_text
from speccheck.errors import UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``battery`` to the sub-parsers."""
    p = sub.add_parser("battery", help="exactness test battery: prove a verifier exact or catch it (exit 0/1/2)")
    p.add_argument("--verifier", help="name (rmc, dgrs, rass, rass-icdf, ...) or package.module:attr")
    p.add_argument("--suite", default="gate", help="smoke | gate | full, or a path to a suite .toml (default gate)")
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    p.add_argument("--seed", type=int, default=None, help=f"replace the suite's fixed seed (in [0, {MAX_SEED}])")
    p.add_argument("--json", metavar="PATH", help="write the report as JSON")
    p.add_argument("--junit", metavar="PATH", help="write the report as JUnit XML")
    p.add_argument("--html", metavar="PATH", help="write the report as one HTML page (figure, failing tests)")
    p.add_argument("--plot", metavar="PATH", help="write the figure (measured vs declared acceptance, PIT) as PNG")
    p.add_argument("--mutants", action="store_true", help="run the suite on every mutant; print the kill matrix")
    p.add_argument("--mutant", action="append", default=None, metavar="NAME", help="with --mutants: only these")
    p.add_argument("--failures-only", action="store_true", help="table: only the failed tests")
    p.add_argument("--verbose", action="store_true", help="the report's full table")
    p.add_argument("--layers", nargs="+", default=None, help="only these layers (e.g. L1 L3)")
    p.add_argument("--K", type=int, nargs="+", default=None, help="only these draft counts")
    p.add_argument("--scale", type=float, default=None, help="multiply the suite's draw counts")
    p.add_argument("--budget", metavar="SECONDS", default=None,
                   help="wall seconds for the whole run: a pilot measures the rule's cost and the suite's draws are "
                        "sized to fit (never below what its tests need; exit 2 when even that cannot fit); the "
                        "report prints the promise the budget afforded")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress on stderr (a bar on a terminal, else a line every 10 s)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr (as --no-progress)")
    add_timeout(p, "battery cell", TIMEOUT_BATTERY_CELL_S)
    add_executor_args(p, store_default=None, workers_default="1", progress_option=False)
    p.set_defaults(func=run)


def selections(args: argparse.Namespace) -> dict:
    """The battery's optional selections (--layers, --K, --scale), checked up front."""
    from speccheck.validation.battery import resolve_layers

    extra: dict = {}
    if args.K is not None:
        extra["Ks"] = check_ints(args.K, "--K", 1, MAX_K)
    if args.scale is not None:
        extra["scale"] = check_float(args.scale, "--scale", 0.0, 100.0, low_open=True)
    if args.layers is not None:
        check_values(args.layers, "--layers")
        try:
            resolve_layers(args.layers)
        except ValueError as exc:
            raise UsageError(f"--layers: {exc}") from None
        extra["layers"] = args.layers
    return extra


def check_budget_option(value: object) -> float | None:
    """--budget as seconds: a finite number in (0, a week], else UsageError naming --budget."""
    from speccheck.validation.battery.budget import check_budget

    if value is None:
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise UsageError(f"--budget must be a number of seconds, got --budget {value!r}") from None
    try:
        return check_budget(number, "--budget")
    except errors.InputError as exc:
        raise UsageError(str(exc)) from None


def _check(args: argparse.Namespace) -> None:
    check_seed(args.seed)
    args.budget = check_budget_option(args.budget)
    if args.budget is not None and args.mutants:
        raise UsageError("--budget sizes one verifier's run; with --mutants use --scale")
    if args.budget is not None and args.scale is not None:
        raise UsageError("--budget and --scale exclude each other: a budget sizes the run itself")
    check_timeout(args.timeout)
    if args.mutant and not args.mutants:
        raise UsageError("--mutant NAME only applies with --mutants")
    if args.mutants and args.verifier:
        raise UsageError("--verifier and --mutants exclude each other (the mutants are the verifiers)")
    if not args.mutants and not args.verifier:
        raise UsageError("--verifier is required (a name such as dgrs, or package.module:attr), or --mutants")
    check_cuda_available(check_device_name(args.device))
    check_output_file(args.json, "--json")
    check_output_file(args.junit, "--junit")
    check_output_file(args.html, "--html")
    check_output_file(args.plot, "--plot")
    if args.mutants and (args.html or args.plot):
        raise UsageError("--html and --plot draw one verifier's report; with --mutants use --json")
    if args.store is not None:
        check_output_file(args.store, "--store")


def run(args: argparse.Namespace) -> int:
    """Print the report, write --json / --junit; the verdict's exit code (no verdict: exit 2)."""
    _check(args)
    extra = selections(args)
    if args.mutants:
        from speccheck.cli import mutants

        return mutants.run(args, extra)
    from speccheck.api import battery
    from speccheck.validation.suites import check_cost, load_suite

    cost = check_cost(load_suite(args.suite), extra.get("scale", 1.0))  # refused up front beyond the bounds
    if not args.quiet:
        sized = f" before --budget {args.budget:g} s sizes it" if args.budget is not None else ""
        print(f"suite {args.suite}{sized}: {cost.describe()}", file=sys.stderr, flush=True)
    dask = wants_dask(args)
    scheduler = args.scheduler or (os.environ.get("DASK_SCHEDULER_ADDRESS") if dask and args.workers is None else None)
    outcome = battery(args.verifier, args.suite, device=args.device, seed=args.seed, progress=battery_progress(args),
                      workers=(args.workers or 1) if dask else 1, scheduler=scheduler, timeout=args.timeout,
                      store=args.store, budget=args.budget, **extra)
    return _report(args, outcome)


def _report(args: argparse.Namespace, outcome: object) -> int:
    from speccheck.validation.report import format_report, junit_xml, report_dict

    if outcome.verdict == "no_verdict":
        raise errors.IsolatedCodeError(outcome.reason)
    rep = outcome.report
    print(format_report(rep, verbose=args.verbose, only_failures=args.failures_only))
    if args.json:
        write_json(args.json, report_dict(rep), "--json")
    if args.junit:
        write_text(args.junit, '<?xml version="1.0" encoding="UTF-8"?>\n' + junit_xml(rep), "--junit")
    if args.html or args.plot:
        from speccheck.figures import report_fig

        if args.html:
            write_text(args.html, report_fig.report_html(rep), "--html")
        if args.plot:
            write_text(args.plot, report_fig.report_png(rep), "--plot")
    return outcome.exit_code
