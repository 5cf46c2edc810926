"""The ``speccheck`` command. Each subcommand is a thin layer over package functions.

Exit codes (docs/exit-codes.md): 0 = the job ran and its verdict is positive, printed and
written; 1 = a defect was found; 2 = the job could not be run as asked (bad option,
unloadable verifier, timeout, missing or corrupt input, unwritable output), with a message
naming the option or file. Code the user supplies (verifiers) runs in a child process
(:mod:`speccheck.isolation`), so it cannot choose the exit code.

One module per command (``theory``, ``train_digits``, ``speedup``, ``battery`` with
``mutants``, ``e2e``, ``figures``, ``verifiers``), each with ``add_parser(subparsers)`` and
``run(args)``: option checks (:mod:`speccheck.cli._options`), one library call that returns
data and its verdict, printing and writing (:mod:`speccheck.cli._output`); :mod:`speccheck.cli.main`
assembles the parser and maps exceptions to exit codes. Nothing outside this package imports it.
"""

from __future__ import annotations

from speccheck.cli.main import build_parser, main
from speccheck.errors import UsageError

__all__ = ["UsageError", "build_parser", "main"]
