"""``speccheck verifiers``: list the verifiers, or ``--check SPEC``: the battery's contract
checks on one, one call of :func:`speccheck.api.contract_check` (its verdict:
:func:`speccheck.validation.verdict.judge_contract`)."""

from __future__ import annotations

import argparse

from speccheck.cli._options import TIMEOUT_CHECK_S, add_timeout, check_device_name, check_seed, check_timeout
from speccheck.cli._output import json_text
from speccheck.errors import EXIT_OK, SpeccheckError


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``verifiers`` to the sub-parsers."""
    p = sub.add_parser("verifiers", help="list the available verifiers (built-in and entry points)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--check", metavar="SPEC",
                   help="load SPEC (a name or package.module:attr) and run the battery's contract checks on it "
                        "(exit 0 all pass, 1 a check failed, 2 not loadable)")
    p.add_argument("--device", default="cpu", help="with --check: cpu | cuda | cuda:N")
    p.add_argument("--seed", type=int, default=0, help="with --check: seed of the inputs")
    add_timeout(p, "contract check", TIMEOUT_CHECK_S)
    p.set_defaults(func=run)


def _check(args: argparse.Namespace) -> int:
    from speccheck.api import contract_check

    check_seed(args.seed)
    check_timeout(args.timeout)
    check_device_name(args.device)
    outcome = contract_check(args.check, device=args.device, seed=args.seed, timeout=args.timeout)
    if outcome.verdict == "no_verdict":
        raise SpeccheckError(outcome.reason)
    for line in outcome.lines:
        print(line)
    print(outcome.reason)
    return outcome.exit_code


def run(args: argparse.Namespace) -> int:
    """The list (table or JSON, exit 0), or the contract check's exit code."""
    if args.check:
        return _check(args)
    from speccheck.verifiers import available

    rows = available()
    if args.json:
        print(json_text(rows))
    else:
        width = max(len(n) for n in rows)
        for name, desc in rows.items():
            print(f"{name:<{width}}  {desc}")
    return EXIT_OK
