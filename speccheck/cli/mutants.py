"""``speccheck battery --mutants``: the kill matrix, one call of :func:`speccheck.api.mutants`
(the verdict: :func:`speccheck.validation.verdict.judge_kill_matrix`, exit 0 iff every mutant
is killed)."""

from __future__ import annotations

import argparse

from speccheck.cli._executor import battery_progress
from speccheck.cli._output import write_json
from speccheck.errors import InputError


def run(args: argparse.Namespace, extra: dict) -> int:
    """Print the kill matrix and write --json; the verdict's exit code (no verdict: exit 2)."""
    from speccheck.api import mutants
    from speccheck.validation.report import format_kill_matrix, report_dict

    outcome = mutants(args.suite, names=args.mutant, device=args.device, seed=args.seed, options=extra,
                      workers=args.workers, scheduler=args.scheduler, timeout=args.timeout, store=args.store,
                      progress=battery_progress(args))
    if outcome.verdict == "no_verdict":
        raise InputError(outcome.reason)
    reports = outcome.data["reports"]
    print(format_kill_matrix(reports))
    if args.json:
        write_json(args.json, {k: report_dict(r) for k, r in reports.items()}, "--json")
    return outcome.exit_code
